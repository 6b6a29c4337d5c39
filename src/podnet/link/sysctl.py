"""sysctls of the current network namespace, written through ``/proc/sys/net``.

``/proc/sys/net`` always shows the namespace of the thread that opens it, so after
:meth:`podnet.link.netns.NetNS.entered` these functions act on the pod's namespace.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


def write(key: str, value: str) -> None:
    """Set ``key`` (dotted, e.g. ``net.ipv4.ip_forward``) to ``value``; OSError on failure."""
    path = "/proc/sys/" + key.replace(".", "/")
    with open(path, "w") as f:
        f.write(value)


def read(key: str) -> str:
    """The value of ``key`` (dotted), stripped."""
    with open("/proc/sys/" + key.replace(".", "/")) as f:
        return f.read().strip()


def _conf(family: int, ifname: str, name: str) -> str:
    # Interface names may contain dots, so build the path, not a dotted key.
    return f"/proc/sys/net/ipv{family}/conf/{ifname}/{name}"


def write_path(path: str, value: str) -> None:
    """Write ``value`` to the sysctl file ``path`` (for names with dots); OSError on failure."""
    with open(path, "w") as f:
        f.write(value)


def interface_exists(ifname: str) -> bool:
    """True when ``ifname`` exists in the current netns (any family's conf dir is there)."""
    return os.path.exists(_conf(4, ifname, "")) or os.path.exists(_conf(6, ifname, ""))


def configure_host_side(host_if: str, families: Iterable[int]) -> None:
    """Node-side settings for a pod's host veth (cni-kindnet's, and the reference portmap's
    ``snat`` of 127.0.0.1).

    IPv4: ``ip_forward=1``; ``route_localnet=1`` on the host veth so 127.0.0.1 → hostPort can be
    DNATed to the pod and masqueraded. IPv6: ``all.forwarding=1``; DAD and RA off on the host veth.
    """
    for family in families:
        if family == 4:
            write("net.ipv4.ip_forward", "1")
            write_path(_conf(4, host_if, "route_localnet"), "1")
        else:
            write_path(_conf(6, host_if, "accept_dad"), "0")
            write_path(_conf(6, host_if, "accept_ra"), "0")
            if read("net.ipv6.conf.all.forwarding") != "1":
                write("net.ipv6.conf.all.forwarding", "1")


def pod_side_paths(ifname: str, families: Iterable[int]) -> list[str]:
    """sysctl files to set to 0 inside the pod netns: IPv6 DAD and router advertisements off
    on the pod interface (cni-kindnet does the same); none for an IPv4-only pod."""
    if 6 not in families:
        return []
    return [_conf(6, ifname, name) for name in ("accept_dad", "dad_transmits", "accept_ra")]


def notify_paths(ifname: str, families: Iterable[int]) -> list[str]:
    """sysctl files to set to 1 inside the pod netns of a bridge network's pod: announce the
    addresses when the link comes up (``arp_notify``, ``ndisc_notify``), so neighbours that
    knew the address on another pod's MAC learn the new one."""
    names = {4: "arp_notify", 6: "ndisc_notify"}
    return [_conf(f, ifname, names[f]) for f in sorted(families)]
