"""A bridge network's Linux bridge in the node netns (through ``ip``): created with its gateway
addresses, forwarding on, brought back after a reboot, reconfigured, deleted.

The bridge is named after the network (LXD's convention). Its IPv6 address is added ``nodad``;
``route_localnet`` is set on it (127.0.0.1 → a hostPort of a pod on the bridge is DNATed out
of the node's loopback, as on podnet's point-to-point host veths). Every failure is a
:class:`~podnet.cni.errors.KernelError` (104) with ``ip``'s message.
"""

from __future__ import annotations

from podnet import proc
from podnet.cni.errors import KernelError
from podnet.link import sysctl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def exists(name: str) -> bool:
    """Whether an interface ``name`` exists in the current netns."""
    return sysctl.interface_exists(name)


def _batch(lines: Sequence[str], what: str) -> None:
    script = ("\n".join(lines) + "\n").encode()
    rc, _, err = proc.spawn(["ip", "-batch", "-"], script, die_with_parent=True).wait()
    if rc != 0:
        raise KernelError(f"failed to {what}", err.strip())


def _address_lines(name: str, addresses: Sequence[str], verb: str) -> list[str]:
    return [f"addr {verb} {cidr} dev {name}{' nodad' if ':' in cidr and verb == 'add' else ''}"
            for cidr in addresses]  # fmt: skip


def _sysctls(name: str, addresses: Sequence[str]) -> None:
    try:
        if any(":" not in a for a in addresses):
            sysctl.write("net.ipv4.ip_forward", "1")
            sysctl.write_path(f"/proc/sys/net/ipv4/conf/{name}/route_localnet", "1")
        if any(":" in a for a in addresses):
            sysctl.write_path(f"/proc/sys/net/ipv6/conf/{name}/accept_dad", "0")
            if sysctl.read("net.ipv6.conf.all.forwarding") != "1":
                sysctl.write("net.ipv6.conf.all.forwarding", "1")
    except OSError as err:
        raise KernelError(f"failed to set sysctls of bridge {name}", str(err)) from err


def create(name: str, addresses: Sequence[str], mtu: int = 0) -> None:
    """Create bridge ``name`` with ``addresses`` (gateway CIDRs), ``mtu`` bytes (0: kernel
    default), up. A bridge of that name that already exists is taken over and given the
    addresses (idempotent, for ``network restore``)."""
    if exists(name):
        configure(name, [], addresses, mtu)
        return
    # multicast snooping off: a pod's first neighbour solicitation must reach the bridge at
    # once, whatever MLD reports the bridge has (or has not yet) seen
    create_line = f"link add name {name} type bridge mcast_snooping 0"  # 'name': brd, mtu, …
    _batch([create_line + (f" mtu {mtu}" if mtu else "")], f"create bridge {name}")
    try:
        # before the link is up: with DAD on, its link-local address stays tentative for a
        # second, and the node cannot resolve a pod's address (no NS source) meanwhile
        _sysctls(name, addresses)
        _batch([*_address_lines(name, addresses, "add"), f"link set dev {name} up"],
               f"address bridge {name}")  # fmt: skip
    except KernelError:
        delete(name)
        raise


def configure(name: str, old: Sequence[str], new: Sequence[str], mtu: int = 0) -> None:
    """Move bridge ``name`` from addresses ``old`` to ``new`` (and to ``mtu`` when non-zero);
    addresses it lacks are added, ones it has are kept."""
    have = current_addresses(name)
    lines = _address_lines(name, [a for a in old if a not in new and a in have], "del")
    lines += _address_lines(name, [a for a in new if a not in have], "add")
    if mtu:
        lines.append(f"link set dev {name} mtu {mtu}")
    lines.append(f"link set dev {name} up")
    _batch(lines, f"configure bridge {name}")
    _sysctls(name, new)


def current_addresses(name: str) -> list[str]:
    """The global addresses on ``name`` as CIDRs (``[]`` when it does not exist)."""
    from podnet.cni.fastjson import loads

    rc, out, _ = proc.spawn(["ip", "-j", "addr", "show", "dev", name, "scope", "global"]).wait()
    if rc != 0:
        return []
    try:
        links = loads(out) if out.strip() else []
    except ValueError:
        return []
    return [f"{a['local']}/{a['prefixlen']}" for link in links for a in link.get("addr_info", [])
            if "local" in a]  # fmt: skip


def delete(name: str) -> None:
    """Delete bridge ``name`` (its ports are released); gone already is success."""
    rc, _, err = proc.spawn(["ip", "link", "del", "dev", name]).wait()
    if rc != 0 and "Cannot find device" not in err and "does not exist" not in err:
        raise KernelError(f"failed to delete bridge {name}", err.strip())


def attach(port: str, name: str) -> None:
    """Make ``port`` (a pod's host veth end) a port of bridge ``name``, hairpin on."""
    _batch([f"link set dev {port} master {name}",
            f"link set dev {port} type bridge_slave hairpin on"],
           f"attach {port} to bridge {name}")  # fmt: skip
