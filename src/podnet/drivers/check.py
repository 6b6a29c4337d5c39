"""CHECK of a ``podnet`` attachment against the kernel (spec "CHECK"; cni-kindnet's is a no-op).

Each mismatch raises :class:`~podnet.errors.CheckFailed` (code 103) naming what differs.
"""

from __future__ import annotations

from podnet import proc
from podnet.cni.fastjson import loads
from podnet.errors import CheckFailed, InvalidConfig, KernelError
from podnet.link.netns import NetNS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from podnet.checked import Net
    from podnet.cni.skel import Call
    from podnet.netconf import PodnetConf
    from podnet.store.pods import Pod
    from podnet.values import PortMapping


def _ip_json(*args: str) -> list[dict[str, Any]]:
    out = proc.run(["ip", "-j", *args])
    try:
        data = loads(out) if out.strip() else []
    except ValueError as err:
        raise KernelError(f"ip printed unreadable JSON for {' '.join(args)}", str(err)) from None
    return [x for x in data if isinstance(x, dict)] if isinstance(data, list) else []


def _families(pod: Pod) -> list[tuple[int, str, str]]:
    out = []
    if pod.ip_address_v4:
        out.append((4, str(pod.ip_address_v4), str(pod.ip_gateway_v4)))
    if pod.ip_address_v6:
        out.append((6, str(pod.ip_address_v6), str(pod.ip_gateway_v6)))
    return out


def _check_prev_result(call: Call, pod: Pod) -> None:
    from podnet.cni.result import sandbox_addresses

    prev = call.config.get("prevResult")
    if not isinstance(prev, dict):
        raise InvalidConfig("prevResult: required for CHECK (the result of the ADD chain)")
    got = {a.split("/")[0] for a in sandbox_addresses(prev, call.ifname)}
    for _, addr, _ in _families(pod):
        if addr not in got:
            raise CheckFailed(f"prevResult lacks the pod address {addr} of {call.ifname}")


def _check_ranges(call: Call, pod: Pod, ranges: Sequence[Net]) -> None:
    """Each of the pod's addresses must lie in one of ``ranges``, the subnets the NetConf
    configures now (its ``ranges``, or its network's subnets): a pod left with an address
    outside them (the ranges were changed since its ADD) is not as an ADD would make it."""
    from podnet import checked

    shown = ", ".join(str(n) for n in ranges)
    for family, addr, _ in _families(pod):
        ip = checked.ip(addr)
        if not any(n.version == family and ip in n for n in ranges):
            raise CheckFailed(
                f"address {addr} of {call.ifname} is outside the configured ranges ({shown}): "
                "DEL and ADD the pod again to give it an address of them"
            )


def _expected_link(call: Call, pod: Pod) -> tuple[str | None, int | None]:
    """(MAC, MTU) the pod interface should have. A later plugin of the chain (tuning) may change
    them and reports the final values in the result CHECK receives as ``prevResult``; those
    win. Without them, the values podnet set."""
    mac: str | None = pod.pod_mac
    mtu: int | None = pod.interface_mtu
    prev = call.config.get("prevResult")
    if isinstance(prev, dict):
        for iface in prev.get("interfaces", []):
            if iface.get("name") == call.ifname and iface.get("sandbox"):
                mac = iface.get("mac") or mac
                mtu = iface.get("mtu")  # a later plugin that changed it may not report it
    return mac, mtu


def _check_pod_side(call: Call, pod: Pod, prefixes: dict[int, int]) -> None:
    ifname = call.ifname
    want_mac, want_mtu = _expected_link(call, pod)
    try:
        ns = NetNS(call.netns)
    except OSError as err:
        raise CheckFailed(f"netns {call.netns} is not accessible: {err}") from err
    with ns, ns.entered():
        links = _ip_json("link", "show")
        link = next((x for x in links if x.get("ifname") == ifname), None)
        if link is None:
            raise CheckFailed(f"interface {ifname} is missing from netns {call.netns}")
        if "UP" not in link.get("flags", []):
            raise CheckFailed(f"interface {ifname} in {call.netns} is down")
        if want_mac and link.get("address") != want_mac:
            raise CheckFailed(f"interface {ifname} has MAC {link.get('address')}, want {want_mac}")
        if want_mtu and link.get("mtu") != want_mtu:
            raise CheckFailed(f"interface {ifname} has MTU {link.get('mtu')}, want {want_mtu}")
        addrs = _ip_json("addr", "show", "dev", ifname)
        have = {(a["local"], a["prefixlen"]) for x in addrs for a in x.get("addr_info", [])}
        for family, addr, gw in _families(pod):
            plen = prefixes.get(family) or (32 if family == 4 else 128)
            if (addr, plen) not in have:
                raise CheckFailed(f"interface {ifname} lacks address {addr}/{plen}")
            routes = _ip_json(f"-{family}", "route", "show", "dev", ifname)
            dsts = {(r.get("dst"), r.get("gateway")) for r in routes}
            if not prefixes and (gw, None) not in dsts:  # ptp: a link route to the gateway
                raise CheckFailed(f"route to gateway {gw} dev {ifname} is missing in the pod")
            if ("default", gw) not in dsts:
                raise CheckFailed(f"default route via {gw} dev {ifname} is missing in the pod")


def _check_host_side(pod: Pod, bridge: str) -> None:
    host_if = str(pod.interface_name)
    links = _ip_json("link", "show", "type", "veth")
    link = next((x for x in links if x.get("ifname") == host_if), None)
    if link is None:
        raise CheckFailed(f"host interface {host_if} is missing")
    if "UP" not in link.get("flags", []):
        raise CheckFailed(f"host interface {host_if} is down")
    if bridge:
        if link.get("master") != bridge:
            from podnet.link import bridge as bridges

            gone = "is gone" if not bridges.exists(bridge) else "does not hold it"
            raise CheckFailed(
                f"host interface {host_if} is not a port of bridge {bridge} (the bridge {gone}): "
                f"run 'podnetctl network restore' to bring bridges and their pods back"
            )
        return
    for family, addr, _ in _families(pod):
        routes = _ip_json(f"-{family}", "route", "show", "dev", host_if)
        if not any(r.get("dst") == addr for r in routes):
            raise CheckFailed(f"host route to {addr} dev {host_if} is missing")


def _check_hostports(entries: list[PortMapping]) -> None:
    from podnet import reconcile as sync

    problem = sync.check(entries)
    if problem:
        raise CheckFailed(problem)


def check(call: Call, pod: Pod, entries: list[PortMapping], bridge: str = "",
          prefixes: dict[int, int] | None = None, *,
          ranges: Sequence[Net] | None = None) -> None:  # fmt: skip
    """Verify prevResult, the pod's addresses against ``ranges`` (the subnets the NetConf
    configures; None: an IPAM plugin chose them, not compared), pod interface/addresses/routes,
    host veth/route (or its bridge port), hostPort elements. ``bridge``/``prefixes``: the bridge
    network the pod joined and its subnets' prefix lengths (empty: podnet's point-to-point
    layout). :class:`~podnet.errors.CheckFailed` (103) naming the first difference."""
    _check_prev_result(call, pod)
    if ranges is not None:
        _check_ranges(call, pod, ranges)
    _check_pod_side(call, pod, prefixes or {})
    _check_host_side(pod, bridge)
    _check_hostports(entries)


def configured_ranges(conf: PodnetConf,
                      subnets: dict[int, list[Net]] | None) -> list[Net] | None:  # fmt: skip
    """The subnets NetConf ``conf`` gives its pods addresses from now: its own ``ranges``, or
    ``subnets``, those of its network (None: it has none); None when an IPAM plugin chooses
    them (``ipam``)."""
    if conf.ranges:
        return list(conf.ranges)
    if not conf.network:
        return None
    return [n for nets in (subnets or {}).values() for n in nets]
