"""podnet's whole table, ``inet podnet``, as nftables text: hostPorts, network forwards, egress
masquerade and source NAT of every network (pure; :mod:`podnet.reconcile` applies it).

Both kinds of DNAT are :class:`~podnet.firewall.dnat.Dnat` entries in hash maps, rendered by
:mod:`podnet.firewall.dnat`: ``hostports_v4``/``hostports_any_v4`` and ``fwd_v4``/
``fwd_whole_v4`` (and ``_v6``). Chains::

    prerouting (nat, dstnat)   jump forwards; fib daddr type local jump hostports
    output (nat, -100)         the same, for the node's own connections
    forwards                   hairpin marks, then port DNATs before whole-address DNATs
    hostports                  marks, then DNATs (see below)
    input (filter)             no new connection to 127.0.0.0/8 from outside ``lo``
    forward_drop_in/_out       (filter, after the DNATs) drop what still goes to the listen
                               address of a forward without a default target (as LXD)
    postrouting (nat, srcnat)  marked → masquerade; DNAT out of an OVN management port
                               (``pnm*``) → masquerade; a network's SNAT address; egress masquerade

Forwards are not behind ``fib daddr type local``: a listen address is usually routed to the node,
not assigned to it (docs/sources.md#lxd-network-forwards). They come first, so a forward's listen
address is the forward's; podnet refuses a forward and a hostPort that would take the same traffic.

Hairpin and localhost: a connection from a pod range or network subnet (or, for hostPorts,
from 127.0.0.0/8) that hits a DNAT is marked (bit 13, 0x2000, portmap's default masquerade bit)
and masqueraded, so the reply comes back through the node whether the client is the target
itself, another pod of the same bridge, or a pod elsewhere on the node. ``::1`` is left alone
(IPv6 has no route_localnet). ``input`` drops new connections to 127.0.0.0/8 arriving on any
interface but ``lo``: route_localnet on the host veths (needed for 127.0.0.1 → hostPort) would
otherwise let a pod reach services bound to the node's loopback (the CVE-2020-8558 class).

Egress: traffic from an ``ipMasq`` range or a bridge network with ``ipvN.nat`` to destinations
outside every range and subnet is masqueraded, or SNATed to the network's ``ipvN.nat.address``.
The masquerade also leaves alone the destinations of the sets ``cluster_v4``/``cluster_v6``:
in a Kubernetes cluster, every Node's podCIDRs and the no-masquerade CIDRs the node agent is
given (kindnet's rule: pod to pod keeps the pod's address, traffic leaving the cluster takes the
node's). The agent updates them element by element (:func:`cluster_elements` gives the elements
of a list of CIDRs: interval sets refuse overlapping elements, so they are collapsed first).
"""

from __future__ import annotations

from podnet import checked
from podnet.firewall import FAMILY, FORWARDS, HOSTPORTS, TABLE, T
from podnet.firewall import dnat as d

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from podnet.checked import IP
    from podnet.values import Dnat

__all__ = ["FAMILY", "FORWARDS", "HOSTPORTS", "TABLE", "T", "BridgeNat", "TableState",
           "add_script", "cluster_elements", "cluster_set", "delete_script", "script"]  # fmt: skip

MASQ_MARK = 0x2000
#: OVN management ports (:mod:`podnet.drivers.ovn.hostports`): a hostPort DNATed to a pod of
#: an OVN network leaves through one and is masqueraded, so the reply comes back to the node.
MGMT_LINKS = "pnm*"
_L4 = "meta l4proto { tcp, udp }"


class BridgeNat:
    """What the table needs of a bridge network: ``name``, ``subnets`` (family → CIDR),
    ``nat`` (family → masquerade egress), ``nat_address`` (family → SNAT address or None)."""

    __slots__ = ("name", "subnets", "nat", "nat_address")

    def __init__(self, name: str, subnets: dict[int, str], nat: dict[int, bool],
                 nat_address: dict[int, str | None]) -> None:  # fmt: skip
        self.name = name
        self.subnets = subnets
        self.nat = nat
        self.nat_address = nat_address


class TableState:
    """Everything the table is built from: ``ranges`` ``(cidr, ip_masq)`` of the ptp ranges,
    ``hostports`` and ``forwards`` (DNAT entries), ``bridges`` (:class:`BridgeNat`), ``drops``
    (listen addresses of forwards without a default target: the traffic no port takes is
    dropped), ``owner`` (the mark of the store that owns the table, its comment; "" none),
    ``cluster`` (CIDRs of either family, overlapping or not: destinations egress masquerade
    leaves alone besides the ranges and subnets)."""

    __slots__ = ("ranges", "hostports", "forwards", "bridges", "drops", "owner", "cluster")

    def __init__(
        self,
        ranges: Sequence[tuple[str, bool]] = (),
        hostports: Sequence[Dnat] = (),
        forwards: Sequence[Dnat] = (),
        bridges: Sequence[BridgeNat] = (),
        drops: Sequence[IP | str] = (),
        owner: str = "",
        cluster: Sequence[str] = (),
    ) -> None:
        self.ranges = list(ranges)
        self.hostports = list(hostports)
        self.forwards = list(forwards)
        self.bridges = list(bridges)
        self.drops = [checked.ip(a) if isinstance(a, str) else a for a in drops]
        self.owner = owner
        self.cluster = list(cluster)


def _collapse(subnets: Iterable[str], family: int) -> list[str]:
    import ipaddress  # only a rebuild needs it; DEL does not pay for the import

    nets = [checked.network(s) for s in subnets]
    same = [n for n in nets if n.version == family]
    return [checked.text(n) for n in ipaddress.collapse_addresses(same)]  # type: ignore[type-var]


def cluster_set(family: int) -> str:
    """The set of cluster destinations of ``family`` (4, 6): ``cluster_v4``/``cluster_v6``."""
    return f"cluster_v{family}"


def cluster_elements(cidrs: Iterable[str], family: int) -> list[str]:
    """The elements :func:`script` gives :func:`cluster_set` for ``cidrs`` (CIDR texts of
    either family): those of ``family``, collapsed (``ipaddress.collapse_addresses``: one
    covering another, or adjacent ones, become one), as nft prints them. ValueError for a text
    that is not a CIDR."""
    return _collapse(cidrs, family)


def _comment(owner: str) -> str:
    """The table's ``comment`` line (nft takes at most 128 characters); ValueError for text
    that is not a mark of a checked path."""
    if not owner:
        return ""
    if len(owner) > 120 or not checked.WORD_CHARS.issuperset(owner):
        raise ValueError(f"refusing to write the table comment {checked.show(owner)}")
    return f'  comment "{owner}"\n'


def drop_set(family: int) -> str:
    """The set of listen addresses whose unmatched traffic is dropped: ``fwd_drop_v4``/``_v6``."""
    return f"{FORWARDS}_drop_v{family}"


def _set(name: str, addr_type: str, elements: Sequence[str], *, interval: bool = True) -> str:
    body = f"type {addr_type};" + (" flags interval;" if interval else "")
    if elements:
        body += " elements = { " + ", ".join(elements) + " };"
    return f"  set {name} {{ {body} }}\n"


def _chain(name: str, hook: str, rules: Iterable[str]) -> str:
    head = f"    {hook}\n" if hook else ""
    return f"  chain {name} {{\n{head}" + "".join(f"    {r}\n" for r in rules) + "  }\n"


def script(state: TableState) -> str:
    """The whole table, replacing any previous one atomically (``add``+``delete`` first)."""
    inner = [cidr for cidr, _ in state.ranges]
    egress = [cidr for cidr, masq in state.ranges if masq]
    snat: list[tuple[int, str, str]] = []
    for bridge in state.bridges:
        for family, cidr in sorted(bridge.subnets.items()):
            inner.append(cidr)
            nat_address = bridge.nat_address.get(family)
            if nat_address:
                snat.append((family, checked.text(cidr), checked.text(nat_address)))
            elif bridge.nat.get(family):
                egress.append(cidr)
    mark = f"0x{MASQ_MARK:08x}"
    mark_stmt = f"meta mark set meta mark | {mark}"
    hostport_kinds = [(kind, family) for family in (4, 6) for kind in (d.PORT, d.ANY)]
    forward_kinds = [(kind, family) for family in (4, 6) for kind in (d.PORT, d.WHOLE)]
    hostport_sources = {4: "@masq_sources_v4", 6: "@ranges_v6"}
    ip = {4: "ip", 6: "ip6"}

    forward_rules = []
    for kind, family in forward_kinds:
        guard = f"{_L4} " if kind == d.PORT else ""
        forward_rules.append(f"{guard}{ip[family]} saddr @ranges_v{family} "
                             f"{d.lookup(FORWARDS, kind, family)} {mark_stmt}")  # fmt: skip
    forward_rules += [d.statement(FORWARDS, kind, family) for kind, family in forward_kinds]
    hostport_rules = ["ip6 daddr ::1 return"]
    hostport_rules += [f"{_L4} {ip[family]} saddr {hostport_sources[family]} "
                       f"{d.lookup(HOSTPORTS, kind, family)} {mark_stmt}"
                       for kind, family in hostport_kinds]  # fmt: skip
    hostport_rules += [d.statement(HOSTPORTS, kind, family) for kind, family in hostport_kinds]
    postrouting = [f"meta mark & {mark} == {mark} masquerade",
                   f'oifname "{MGMT_LINKS}" ct status dnat masquerade']  # fmt: skip
    postrouting += [f"{ip[f]} saddr {cidr} {ip[f]} daddr != @ranges_v{f} snat {ip[f]} to {addr}"
                    for f, cidr, addr in snat]  # fmt: skip
    postrouting += [f"{ip[f]} saddr @egress_v{f} {ip[f]} daddr != @ranges_v{f} "
                    f"{ip[f]} daddr != @{cluster_set(f)} masquerade" for f in (4, 6)]  # fmt: skip
    out = [
        f"add table {T}\n",
        f"delete table {T}\n",
        f"table {T} {{\n",
        _comment(state.owner),
        *(d.map_decl(HOSTPORTS, kind, family, state.hostports)
          for kind, family in hostport_kinds),  # fmt: skip
        *(d.map_decl(FORWARDS, kind, family, state.forwards) for kind, family in forward_kinds),
        _set("ranges_v4", "ipv4_addr", _collapse(inner, 4)),
        _set("ranges_v6", "ipv6_addr", _collapse(inner, 6)),
        _set("masq_sources_v4", "ipv4_addr", _collapse([*inner, "127.0.0.0/8"], 4)),
        _set("egress_v4", "ipv4_addr", _collapse(egress, 4)),
        _set("egress_v6", "ipv6_addr", _collapse(egress, 6)),
        _set(cluster_set(4), "ipv4_addr", _collapse(state.cluster, 4)),
        _set(cluster_set(6), "ipv6_addr", _collapse(state.cluster, 6)),
        *(_set(drop_set(f), addr_type, [checked.text(a) for a in state.drops if a.version == f],
               interval=False) for f, addr_type in ((4, "ipv4_addr"), (6, "ipv6_addr"))),
        _chain("prerouting", "type nat hook prerouting priority dstnat; policy accept;",
               ["jump forwards", "fib daddr type local jump hostports"]),
        _chain("output", "type nat hook output priority -100; policy accept;",
               ["jump forwards", "fib daddr type local jump hostports"]),
        _chain("forwards", "", forward_rules),
        _chain("hostports", "", hostport_rules),
        _chain("input", "type filter hook input priority filter; policy accept;",
               ['iifname != "lo" ip daddr 127.0.0.0/8 ct state new drop']),
        # after every DNAT (nat at dstnat / -100): what still goes to the listen address of a
        # forward without a default target took no port of it — LXD drops it
        _chain("forward_drop_in", "type filter hook prerouting priority -90; policy accept;",
               ["ip daddr @fwd_drop_v4 drop", "ip6 daddr @fwd_drop_v6 drop"]),
        _chain("forward_drop_out", "type filter hook output priority -90; policy accept;",
               ["ip daddr @fwd_drop_v4 drop", "ip6 daddr @fwd_drop_v6 drop"]),
        _chain("postrouting", "type nat hook postrouting priority srcnat; policy accept;",
               postrouting),
        "}\n",
    ]  # fmt: skip
    return "".join(out)


def add_script(prefix: str, dnats: Sequence[Dnat]) -> str:
    """Incremental add of ``dnats`` to the maps of ``prefix`` (:data:`HOSTPORTS` or
    :data:`FORWARDS`); the table must exist."""
    return d.add_script(T, prefix, dnats)


def delete_script(prefix: str, dnats: Sequence[Dnat]) -> str:
    """Incremental delete of ``dnats``' elements (nft fails if one is missing)."""
    return d.delete_script(T, prefix, dnats)
