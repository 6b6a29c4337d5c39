"""podnet-portmap's nftables backend, as nftables text (pure functions; applied in one
``nft -f -`` transaction by :mod:`podnet.firewall.nft`).

Table ``inet podnet_portmap``: the packet path looks the destination up in hash verdict maps,
so its cost does not grow with the number of mappings::

    map dispatch_v4      ipv4_addr . inet_proto . inet_service : verdict   (a given hostIP)
    map dispatch_any_v4              inet_proto . inet_service : verdict   (any hostIP)
    (and _v6)
    chain prerouting / output (nat, dstnat / -100): fib daddr type local jump hostports
    chain hostports: the four vmap lookups
    chain dn-<hash>: one per container — for each mapping the hairpin and localhost marks
                     (with snat) and the DNAT, as the iptables CNI-DN chain has them
    chain postrouting (nat, srcnat): meta mark & M == M masquerade, per mark bit in use

Ownership is per container: every element's verdict is ``jump dn-<hash>`` of its container
(hash as for the iptables chain: sha512 of network name + container ID). DEL removes exactly
the elements that jump to its chain and the chain, so a container that got another's old
address or port keeps its mappings (the problem upstream declined maps for,
docs/sources.md#the-reference-portmap-plugin). A
repeated key is taken over by the newest ADD (the older owner is stale). ``conditionsV4/V6``
and ``externalSetMarkChain`` are iptables match/chain names and are refused with this backend.
"""

from __future__ import annotations

from podnet.checked import text
from podnet.firewall.dnat import map_of

DISPATCH = "dispatch"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from podnet.firewall.portmap_iptables import PortmapOptions
    from podnet.values import ContainerNet, PortMappingArg

FAMILY = "inet"
TABLE = "podnet_portmap"
T = f"{FAMILY} {TABLE}"
MAPS = {
    "dispatch_v4": "ipv4_addr . inet_proto . inet_service : verdict",
    "dispatch_any_v4": "inet_proto . inet_service : verdict",
    "dispatch_v6": "ipv6_addr . inet_proto . inet_service : verdict",
    "dispatch_any_v6": "inet_proto . inet_service : verdict",
}
L4 = "meta l4proto { tcp, udp }"
HOSTPORTS_RULES = (
    f"{L4} ip daddr . meta l4proto . th dport vmap @dispatch_v4",
    f"{L4} meta nfproto ipv4 meta l4proto . th dport vmap @dispatch_any_v4",
    f"{L4} ip6 daddr . meta l4proto . th dport vmap @dispatch_v6",
    f"{L4} meta nfproto ipv6 meta l4proto . th dport vmap @dispatch_any_v6",
)


def chain_name(network: str, container_id: str) -> str:
    """``dn-`` + the 21 hex digits the iptables backend uses for ``CNI-DN-``."""
    from podnet.firewall.portmap_iptables import dnat_chain_name

    return "dn-" + dnat_chain_name(network, container_id)[7:]


def masq_rule(options: PortmapOptions) -> str:
    value = 1 << options.mark_masq_bit
    return f"meta mark & {value:#010x} == {value:#010x} masquerade"


class Listing:
    """What ``nft -j list table inet podnet_portmap`` showed: ``exists``, ``chains`` (names),
    ``elements`` (map → {key text: target chain}), ``postrouting`` (rule texts we wrote)."""

    def __init__(self, data: dict[str, Any] | None) -> None:
        self.exists = data is not None
        self.chains: set[str] = set()
        self.owners: dict[str, str] = {}  # chain → "network containerID" (its comment)
        self.elements: dict[str, dict[str, str]] = {name: {} for name in MAPS}
        self.masq_marks: set[int] = set()
        self.maps_seen: set[str] = set()
        self.complete = False  # True when the listing holds every chain (a whole-table list)
        for item in (data or {}).get("nftables", []):
            body: Any = next(iter(item.values()), {}) if item else {}
            if not isinstance(body, dict) or body.get("table", TABLE) != TABLE:
                continue  # "list maps inet" shows other inet tables' maps too
            if "chain" in item:
                self.chains.add(item["chain"]["name"])
                if item["chain"].get("comment"):
                    self.owners[item["chain"]["name"]] = item["chain"]["comment"]
            elif "map" in item and item["map"]["name"] in MAPS:
                self.maps_seen.add(item["map"]["name"])
                for key, verdict in item["map"].get("elem", []):
                    target = (verdict.get("jump") or verdict.get("goto") or {}).get("target")
                    self.elements[item["map"]["name"]][_key_text(key)] = target or ""
            elif "rule" in item and item["rule"].get("chain") == "postrouting":
                for expr in item["rule"].get("expr", []):
                    match = expr.get("match", {})
                    left = match.get("left", {})
                    if "&" in left and match.get("op") == "==":
                        self.masq_marks.add(int(match["right"]))


def _key_text(key: Any) -> str:
    parts = key["concat"] if isinstance(key, dict) and "concat" in key else [key]
    return " . ".join(str(p) for p in parts)


def element_key(m: PortMappingArg, family: int) -> str:
    """``hostIP . proto . port`` (a given hostIP) or ``proto . port`` (any): the claim's key
    (:meth:`podnet.values.Claim.key`, as podnet's own table keys its hostPorts)."""
    return m.claim(family).key()


def map_for(m: PortMappingArg, family: int) -> str:
    """``dispatch_v4`` (a given hostIP) or ``dispatch_any_v4`` (and _v6)."""
    return map_of(DISPATCH, m.claim(family))


def _mappings_of(family: int, mappings: Sequence[PortMappingArg]) -> list[PortMappingArg]:
    return [m for m in mappings if m.host_ip is None or m.host_ip.version == family]


def _target(container: ContainerNet, m: PortMappingArg) -> str:
    host = f"[{container.ip}]" if container.family == 6 else container.ip
    return f"{host}:{m.container_port}"


def container_rules(options: PortmapOptions, container: ContainerNet,
                    mappings: Sequence[PortMappingArg]) -> list[str]:  # fmt: skip
    """The rules of the container's chain (marks, then the DNAT, per mapping)."""
    v6 = container.family == 6
    ip = "ip6" if v6 else "ip"
    mark = f"meta mark set meta mark | {1 << options.mark_masq_bit:#010x}"
    out = []
    for m in _mappings_of(container.family, mappings):
        match = f"{m.protocol} dport {m.host_port}"
        if m.host_ip is not None and m.specific:
            match = f"{ip} daddr {text(m.host_ip)} {match}"
        if options.snat:
            if options.masq_all:
                out.append(f"{match} {mark}")
            else:
                out.append(f"{match} {ip} saddr {container.network} {mark}")
                if not v6:
                    out.append(f"{match} ip saddr 127.0.0.1 {mark}")
        target = _target(container, m)
        out.append(f"{match} dnat {ip} to {target}")
    return out


def base_script(listing: Listing, options: PortmapOptions) -> list[str]:
    """Lines that create the table, maps, hooks and dispatch rules — only when a map is missing
    (they are all made in one transaction): re-flushing the hook chains on every ADD made the
    kernel wait for an RCU grace period (nft -f 15.8 ms instead of 4.1, measured). The masquerade
    rule of this mark bit is added when the listing of ``postrouting`` lacks it."""
    lines: list[str] = []
    if set(MAPS) <= listing.maps_seen:
        if options.snat and (1 << options.mark_masq_bit) not in listing.masq_marks:
            lines.append(f"add rule {T} postrouting {masq_rule(options)}")
        return lines
    lines = [f"add table {T}"]
    lines += [f"add map {T} {name} {{ type {kind}; }}" for name, kind in MAPS.items()]
    lines += [
        f"add chain {T} prerouting {{ type nat hook prerouting priority dstnat; policy accept; }}",
        f"add chain {T} output {{ type nat hook output priority -100; policy accept; }}",
        f"add chain {T} postrouting "
        "{ type nat hook postrouting priority srcnat; policy accept; }",
        f"add chain {T} hostports",
        f"flush chain {T} prerouting",
        f"flush chain {T} output",
        f"flush chain {T} hostports",
        f"add rule {T} prerouting fib daddr type local jump hostports",
        f"add rule {T} output fib daddr type local jump hostports",
        *(f"add rule {T} hostports {rule}" for rule in HOSTPORTS_RULES),
    ]
    if options.snat and (1 << options.mark_masq_bit) not in listing.masq_marks:
        lines.append(f"add rule {T} postrouting {masq_rule(options)}")
    return lines


def setup_script(listing: Listing, options: PortmapOptions, network: str, container_id: str,
                 containers: Sequence[ContainerNet],
                 mappings: Sequence[PortMappingArg]) -> str:  # fmt: skip
    """One transaction: base, the container's chain (flushed and refilled), its elements —
    a key held by another chain is deleted first (the newest ADD owns it)."""
    chain = chain_name(network, container_id)
    lines = base_script(listing, options)
    owner = f"{network} {container_id}".replace('"', "")
    lines += [f'add chain {T} {chain} {{ comment "{owner}"; }}', f"flush chain {T} {chain}"]
    # Elements of an earlier ADD of this container that the new mappings no longer have.
    wanted: set[tuple[str, str]] = set()
    for c in containers:
        for m in _mappings_of(c.family, mappings):
            wanted.add((map_for(m, c.family), element_key(m, c.family)))
    for name, elements in listing.elements.items():
        for key, target in elements.items():
            if target == chain and (name, key) not in wanted:
                lines.append(f"delete element {T} {name} {{ {key} }}")
    for c in containers:
        lines += [f"add rule {T} {chain} {r}" for r in container_rules(options, c, mappings)]
    for name, key in sorted(wanted):
        holder = listing.elements[name].get(key)
        if holder is not None and holder != chain:
            lines.append(f"delete element {T} {name} {{ {key} }}")
        if holder != chain:
            lines.append(f"add element {T} {name} {{ {key} : jump {chain} }}")
    return "\n".join(lines) + "\n"


def teardown_script(listing: Listing, network: str, container_id: str) -> str | None:
    """Delete the elements that jump to the container's chain, then the chain; None when
    neither exists (DEL is idempotent)."""
    chain = chain_name(network, container_id)
    if not listing.maps_seen:
        return None  # no table: nothing of this container can exist
    lines = [
        f"delete element {T} {name} {{ {key} }}"
        for name, elements in listing.elements.items()
        for key, target in elements.items()
        if target == chain
    ]
    if chain in listing.chains or not listing.complete:
        # A maps-only listing does not say whether the chain exists: "add" makes sure it does.
        lines += [f"add chain {T} {chain}", f"flush chain {T} {chain}",
                  f"delete chain {T} {chain}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def missing(listing: Listing, network: str, container_id: str,
            containers: Sequence[ContainerNet], mappings: Sequence[PortMappingArg],
            chain_text: str) -> list[str]:  # fmt: skip
    """What CHECK finds absent: elements not jumping to the container's chain, and DNAT
    statements absent from its chain (``chain_text``: ``nft list chain`` output)."""
    chain = chain_name(network, container_id)
    out = []
    if chain not in listing.chains:
        return [f"chain {chain} of table {T}"]
    for c in containers:
        for m in _mappings_of(c.family, mappings):
            name, key = map_for(m, c.family), element_key(m, c.family)
            if listing.elements[name].get(key) != chain:
                out.append(f"element {key} of map {name}")
            ip = "ip6" if c.family == 6 else "ip"
            target = _target(c, m)
            if f"dport {m.host_port} dnat {ip} to {target}" not in chain_text:
                out.append(f"DNAT {m.protocol}/{m.host_port} to {target} in chain {chain}")
    return out


def list_table() -> Listing:
    """The whole table as it is now (an empty Listing when it does not exist): for CHECK and
    GC. At 300 containers it is ~400 KB of JSON (~60 ms): ADD and DEL use :func:`list_maps`.
    KernelError (104) when nft fails for any other reason than a missing table."""
    from podnet.firewall import nft

    items = nft.list_json("table", FAMILY, TABLE)
    if items is None:
        return Listing(None)
    listing = Listing({"nftables": items})
    listing.complete = True
    return listing


def list_maps(postrouting: bool) -> Listing:
    """Only the dispatch maps (and, with ``postrouting``, that chain's rules, for the masquerade
    marks in use): what ADD and DEL need, at a cost that barely grows with containers.
    KernelError (104) when nft fails."""
    from podnet.firewall import nft

    items = nft.list_json("maps", FAMILY) or []
    if postrouting and any("map" in i for i in items):
        items += nft.list_json("chain", FAMILY, TABLE, "postrouting") or []
    return Listing({"nftables": items})


def chain_text(chain: str) -> str:
    """``nft list chain`` output of a container chain ("" when missing); KernelError (104)
    when nft fails otherwise."""
    from podnet.firewall import nft

    return nft.list_text("chain", FAMILY, TABLE, chain) or ""
