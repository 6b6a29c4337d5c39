"""podnet's hostPort and egress-masquerade table, ``inet podnet``, as nftables text.

Pure functions; :mod:`podnet.firewall.nft` applies their output in one ``nft -f -`` transaction.

hostPorts are :class:`~podnet.firewall.dnat.Dnat` entries in the maps ``hostports_v4``
(a specific hostIP) and ``hostports_any_v4`` (any hostIP), and their ``_v6`` twins, rendered by
:mod:`podnet.firewall.dnat`; the store refuses a wildcard and a specific hostIP on the same port,
so at most one map answers.

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

    from podnet.firewall.dnat import Dnat
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


PREFIX = "hostports"
T = f"{FAMILY} {TABLE}"


def dnat_of(m: PortMapping) -> Dnat:
    """A hostPort as the table's DNAT model: any address for hostIP 0.0.0.0 / ::."""
    from podnet.firewall.dnat import Dnat

    return Dnat(m.family, None if m.wildcard else m.host_ip, m.protocol, m.host_port,
                m.container_ip, m.container_port, m.container_id)  # fmt: skip


def map_name(m: PortMapping) -> str:
    """The map holding ``m``: ``hostports_v4``, ``hostports_any_v4``, ``…_v6``."""
    from podnet.firewall.dnat import map_of

    return map_of(PREFIX, dnat_of(m))


def expected_element(m: PortMapping) -> str:
    """How nft prints the element of ``m`` (addresses in canonical form)."""
    return dnat_of(m).element()


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
    from podnet.firewall import dnat as d

    dnats = [dnat_of(m) for m in mappings]
    kinds = [(kind, family) for family in (4, 6) for kind in (d.PORT, d.ANY)]
    mark_sources = {4: "@masq_sources_v4", 6: "@ranges_v6"}
    out = [
        f"add table {FAMILY} {TABLE}\n",
        f"delete table {FAMILY} {TABLE}\n",
        f"table {FAMILY} {TABLE} {{\n",
        *(d.map_decl(PREFIX, kind, family, dnats) for kind, family in kinds),
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
        "    ip6 daddr ::1 return\n",
        *(f"    {l4} {'ip' if family == 4 else 'ip6'} saddr {mark_sources[family]} "
          f"{d.lookup(PREFIX, kind, family)} {mark_stmt}\n" for kind, family in kinds),
        *(f"    {d.statement(PREFIX, kind, family)}\n" for kind, family in kinds),
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
    from podnet.firewall.dnat import add_script

    return add_script(T, PREFIX, [dnat_of(m) for m in mappings])


def delete_script(mappings: Sequence[PortMapping]) -> str:
    """Incremental DEL: remove the mappings' map elements (fails if one is missing)."""
    from podnet.firewall.dnat import delete_script

    return delete_script(T, PREFIX, [dnat_of(m) for m in mappings])
