"""podnet's hostPort and egress-masquerade table, ``inet podnet``, as nftables text.

Pure functions; :mod:`podnet.firewall.nft` applies their output in one ``nft -f -`` transaction.

Lookup is by map, not one rule per mapping, so a packet's cost does not grow with mappings::

    map hostports_v4  ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service  (interval)
    map hostports_v6  ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service  (interval)

A hostIP of ``0.0.0.0``/``::`` (any) is stored as the interval ``0.0.0.0/0``/``::/0``; the store
refuses a wildcard and a specific hostIP on the same port, so lookups never overlap.

Chains: ``prerouting`` (nat, dstnat) and ``output`` (nat, -100) jump to ``hostports`` only for
``fib daddr type local`` (no transit traffic hijacked: CP #1209/#1115). ``hostports`` marks
(bit 13, 0x2000, portmap's default masquerade bit) packets from 127.0.0.0/8 or from a pod range
that hit a mapping — localhost and hairpin/pod-to-hostPort need SNAT — then DNATs through the
map. ``postrouting`` masquerades marked packets, and egress from ``ipMasq`` ranges to
destinations outside every range.
"""

from __future__ import annotations

import ipaddress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from podnet.store.db import PortMapping

TABLE = "podnet"
FAMILY = "inet"
MASQ_MARK = 0x2000


def _collapse(subnets: Iterable[str], family: int) -> list[str]:
    nets = [ipaddress.ip_network(s) for s in subnets]
    same = [n for n in nets if n.version == family]
    return [str(n) for n in ipaddress.collapse_addresses(same)]  # type: ignore[type-var]


def _set(name: str, addr_type: str, elements: Sequence[str]) -> str:
    body = f"type {addr_type}; flags interval;"
    if elements:
        body += " elements = { " + ", ".join(elements) + " };"
    return f"  set {name} {{ {body} }}\n"


def element_key(m: PortMapping) -> str:
    """The map key of a mapping: ``hostIP . proto . hostPort`` (wildcard as ``/0`` interval)."""
    host = ("::/0" if m.family == 6 else "0.0.0.0/0") if m.wildcard else m.host_ip
    return f"{host} . {m.protocol} . {m.host_port}"


def element(m: PortMapping) -> str:
    """``key : containerIP . containerPort``."""
    return f"{element_key(m)} : {m.container_ip} . {m.container_port}"


def map_name(family: int) -> str:
    return f"hostports_v{family}"


def table_script(
    ranges: Sequence[tuple[str, bool]],
    mappings: Sequence[PortMapping],
) -> str:
    """The whole table, replacing any previous one atomically (``add``+``delete`` first).

    ``ranges``: ``(cidr, ip_masq)`` of every range on the node; ``mappings``: every hostPort.
    """
    all_ranges = [cidr for cidr, _ in ranges]
    egress = [cidr for cidr, masq in ranges if masq]
    v4 = [element(m) for m in mappings if m.family == 4]
    v6 = [element(m) for m in mappings if m.family == 6]
    mark = f"0x{MASQ_MARK:08x}"
    out = [
        f"add table {FAMILY} {TABLE}\n",
        f"delete table {FAMILY} {TABLE}\n",
        f"table {FAMILY} {TABLE} {{\n",
        "  map hostports_v4 { type ipv4_addr . inet_proto . inet_service : "
        "ipv4_addr . inet_service; flags interval;"
        + (" elements = { " + ", ".join(v4) + " };" if v4 else "")
        + " }\n",
        "  map hostports_v6 { type ipv6_addr . inet_proto . inet_service : "
        "ipv6_addr . inet_service; flags interval;"
        + (" elements = { " + ", ".join(v6) + " };" if v6 else "")
        + " }\n",
        _set("ranges_v4", "ipv4_addr", _collapse(all_ranges, 4)),
        _set("ranges_v6", "ipv6_addr", _collapse(all_ranges, 6)),
        _set("egress_v4", "ipv4_addr", _collapse(egress, 4)),
        _set("egress_v6", "ipv6_addr", _collapse(egress, 6)),
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        "    fib daddr type local jump hostports\n"
        "  }\n",
        "  chain output {\n"
        "    type nat hook output priority -100; policy accept;\n"
        "    fib daddr type local jump hostports\n"
        "  }\n",
        "  chain hostports {\n"
        "    meta l4proto { tcp, udp } ip saddr { 127.0.0.0/8 } "
        f"ip daddr . meta l4proto . th dport @hostports_v4 meta mark set meta mark | {mark}\n"
        "    meta l4proto { tcp, udp } ip saddr @ranges_v4 "
        f"ip daddr . meta l4proto . th dport @hostports_v4 meta mark set meta mark | {mark}\n"
        "    meta l4proto { tcp, udp } ip6 saddr @ranges_v6 "
        f"ip6 daddr . meta l4proto . th dport @hostports_v6 meta mark set meta mark | {mark}\n"
        "    meta l4proto { tcp, udp } dnat ip to ip daddr . meta l4proto . th dport "
        "map @hostports_v4\n"
        "    meta l4proto { tcp, udp } dnat ip6 to ip6 daddr . meta l4proto . th dport "
        "map @hostports_v6\n"
        "  }\n",
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        f"    meta mark & {mark} == {mark} masquerade\n"
        "    ip saddr @egress_v4 ip daddr != @ranges_v4 masquerade\n"
        "    ip6 saddr @egress_v6 ip6 daddr != @ranges_v6 masquerade\n"
        "  }\n",
        "}\n",
    ]
    return "".join(out)


def add_script(mappings: Sequence[PortMapping]) -> str:
    """Incremental ADD: the mappings' map elements (the table must exist)."""
    return "".join(
        f"add element {FAMILY} {TABLE} {map_name(m.family)} {{ {element(m)} }}\n"
        for m in mappings
    )


def delete_script(mappings: Sequence[PortMapping]) -> str:
    """Incremental DEL: remove the mappings' map elements (fails if one is missing)."""
    return "".join(
        f"delete element {FAMILY} {TABLE} {map_name(m.family)} {{ {element_key(m)} }}\n"
        for m in mappings
    )


def delete_table_script() -> str:
    """Remove the whole table, whether it exists or not."""
    return f"add table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n"
