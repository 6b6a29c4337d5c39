"""podnet's hostPort and egress-masquerade table, ``inet podnet``, as nftables text.

Pure functions; :mod:`podnet.firewall.nft` applies their output in one ``nft -f -`` transaction.

Lookup is by hash map, not one rule per mapping, so a packet's cost does not grow with mappings::

    map hostports_v4      ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
    map hostports_any_v4              inet_proto . inet_service : ipv4_addr . inet_service
    (and _v6)

A specific hostIP goes to ``hostports_v<f>``, any hostIP to ``hostports_any_v<f>``; the store
refuses a wildcard and a specific hostIP on the same port, so at most one map answers. Hash maps,
not interval maps: nft must fetch every element of an interval set before changing it, which made
one ``add element`` cost ~15 ms at 300 mappings; a hash map element costs the same at any size.

Chains: ``prerouting`` (nat, dstnat) and ``output`` (nat, -100) jump to ``hostports`` only for
``fib daddr type local`` (no transit traffic hijacked: CP #1209/#1115); ``::1`` is left alone
(IPv6 has no route_localnet: a DNAT to a pod could never leave the node). ``hostports`` marks
(bit 13, 0x2000, portmap's default masquerade bit) packets from 127.0.0.0/8 or from a pod range
that hit a mapping — localhost and hairpin/pod-to-hostPort need SNAT — then DNATs through the
maps. ``postrouting`` masquerades marked packets, and egress from ``ipMasq`` ranges to
destinations outside every range. ``input`` drops new connections to 127.0.0.0/8 that arrive on
any interface but ``lo``: route_localnet on the host veths (needed for 127.0.0.1 → hostPort)
would otherwise let a pod reach services bound to the node's loopback (the CVE-2020-8558 class;
kube-proxy closes it the same way). Replies of the 127.0.0.1 → hostPort flows are established.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from podnet.store.db import PortMapping

TABLE = "podnet"
FAMILY = "inet"
MASQ_MARK = 0x2000


def _collapse(subnets: Iterable[str], family: int) -> list[str]:
    import ipaddress  # only a rebuild needs it; DEL does not pay for the import

    nets = [ipaddress.ip_network(s) for s in subnets]
    same = [n for n in nets if n.version == family]
    return [str(n) for n in ipaddress.collapse_addresses(same)]  # type: ignore[type-var]


def _set(name: str, addr_type: str, elements: Sequence[str]) -> str:
    body = f"type {addr_type}; flags interval;"
    if elements:
        body += " elements = { " + ", ".join(elements) + " };"
    return f"  set {name} {{ {body} }}\n"


def element_key(m: PortMapping) -> str:
    """The map key of a mapping: ``hostIP . proto . hostPort``, or ``proto . hostPort`` for any."""
    if m.wildcard:
        return f"{m.protocol} . {m.host_port}"
    return f"{m.host_ip} . {m.protocol} . {m.host_port}"


def element(m: PortMapping) -> str:
    """``key : containerIP . containerPort``."""
    return f"{element_key(m)} : {m.container_ip} . {m.container_port}"


def map_name(m: PortMapping) -> str:
    """The map holding ``m``: ``hostports_v4``, ``hostports_any_v4``, ``…_v6``."""
    return f"hostports_any_v{m.family}" if m.wildcard else f"hostports_v{m.family}"


MAP_TYPES = {
    "hostports_v4": "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service",
    "hostports_any_v4": "inet_proto . inet_service : ipv4_addr . inet_service",
    "hostports_v6": "ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service",
    "hostports_any_v6": "inet_proto . inet_service : ipv6_addr . inet_service",
}


def _map(name: str, mappings: Sequence[PortMapping]) -> str:
    elements = [element(m) for m in mappings if map_name(m) == name]
    body = f"type {MAP_TYPES[name]};"
    if elements:
        body += " elements = { " + ", ".join(elements) + " };"
    return f"  map {name} {{ {body} }}\n"


def table_script(
    ranges: Sequence[tuple[str, bool]],
    mappings: Sequence[PortMapping],
) -> str:
    """The whole table, replacing any previous one atomically (``add``+``delete`` first).

    ``ranges``: ``(cidr, ip_masq)`` of every range on the node; ``mappings``: every hostPort.
    """
    all_ranges = [cidr for cidr, _ in ranges]
    egress = [cidr for cidr, masq in ranges if masq]
    mark = f"0x{MASQ_MARK:08x}"
    mark_stmt = f"meta mark set meta mark | {mark}"
    l4 = "meta l4proto { tcp, udp }"
    out = [
        f"add table {FAMILY} {TABLE}\n",
        f"delete table {FAMILY} {TABLE}\n",
        f"table {FAMILY} {TABLE} {{\n",
        *(_map(name, mappings) for name in MAP_TYPES),
        _set("ranges_v4", "ipv4_addr", _collapse(all_ranges, 4)),
        _set("ranges_v6", "ipv6_addr", _collapse(all_ranges, 6)),
        _set("masq_sources_v4", "ipv4_addr", _collapse([*all_ranges, "127.0.0.0/8"], 4)),
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
        "    ip6 daddr ::1 return\n"
        f"    {l4} ip saddr @masq_sources_v4 ip daddr . meta l4proto . th dport @hostports_v4 "
        f"{mark_stmt}\n"
        f"    {l4} ip saddr @masq_sources_v4 meta l4proto . th dport @hostports_any_v4 "
        f"{mark_stmt}\n"
        f"    {l4} ip6 saddr @ranges_v6 ip6 daddr . meta l4proto . th dport @hostports_v6 "
        f"{mark_stmt}\n"
        f"    {l4} ip6 saddr @ranges_v6 meta l4proto . th dport @hostports_any_v6 {mark_stmt}\n"
        f"    {l4} dnat ip to ip daddr . meta l4proto . th dport map @hostports_v4\n"
        f"    {l4} meta nfproto ipv4 dnat ip to meta l4proto . th dport map @hostports_any_v4\n"
        f"    {l4} dnat ip6 to ip6 daddr . meta l4proto . th dport map @hostports_v6\n"
        f"    {l4} meta nfproto ipv6 dnat ip6 to meta l4proto . th dport map @hostports_any_v6\n"
        "  }\n",
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        '    iifname != "lo" ip daddr 127.0.0.0/8 ct state new drop\n'
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
        f"add element {FAMILY} {TABLE} {map_name(m)} {{ {element(m)} }}\n"
        for m in mappings
    )


def delete_script(mappings: Sequence[PortMapping]) -> str:
    """Incremental DEL: remove the mappings' map elements (fails if one is missing)."""
    return "".join(
        f"delete element {FAMILY} {TABLE} {map_name(m)} {{ {element_key(m)} }}\n"
        for m in mappings
    )
