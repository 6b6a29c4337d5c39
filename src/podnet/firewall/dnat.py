"""One DNAT model for every user of podnet's table — hostPorts now, network forwards next — and
its one rendering to nftables maps (pure functions).

A :class:`Dnat` sends traffic for (listen address or any address of a family, protocol, port)
to (target address, target port), and names its ``owner`` (the container or forward it belongs
to). ``protocol``/``port`` None means the whole address: every protocol and port, no port
translation (a forward's default target). Lookup is by hash map, so a packet's cost and the cost
of adding or removing one DNAT do not grow with how many there are::

    <prefix>_v4        ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service   (port)
    <prefix>_any_v4                inet_proto . inet_service : ipv4_addr . inet_service   (any)
    <prefix>_whole_v4  ipv4_addr : ipv4_addr                                              (whole)
    (and _v6)

Hash maps, not interval maps: nft must fetch every element of an interval set before changing
it, which made one ``add element`` cost ~15 ms at 300 mappings; a hash map element costs the
same at any size.
"""

from __future__ import annotations

from podnet.values import ANY, KINDS, PORT, WHOLE, Claim, Dnat

__all__ = ["ANY", "KINDS", "PORT", "WHOLE", "Dnat", "add_script", "delete_script", "lookup",
           "map_decl", "map_name", "map_of", "map_type", "statement"]  # fmt: skip

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


_ADDR = {4: "ipv4_addr", 6: "ipv6_addr"}


def map_name(prefix: str, kind: str, family: int) -> str:
    """``<prefix>_v4``, ``<prefix>_any_v4``, ``<prefix>_whole_v4`` (and _v6)."""
    middle = "" if kind == PORT else f"_{kind}"
    return f"{prefix}{middle}_v{family}"


def map_of(prefix: str, d: Claim) -> str:
    """The map holding ``d`` (a :class:`~podnet.values.Claim` or Dnat)."""
    return map_name(prefix, d.kind, d.family)


def map_type(kind: str, family: int) -> str:
    """The nft type of a map of ``kind`` and ``family``."""
    addr = _ADDR[family]
    if kind == WHOLE:
        return f"{addr} : {addr}"
    port = f"inet_proto . inet_service : {addr} . inet_service"
    return port if kind == ANY else f"{addr} . {port}"


def map_decl(prefix: str, kind: str, family: int, dnats: Iterable[Dnat]) -> str:
    """A map declaration with its elements, for a whole-table script."""
    name = map_name(prefix, kind, family)
    elements = [d.element() for d in dnats if map_of(prefix, d) == name]
    body = f"type {map_type(kind, family)};"
    if elements:
        body += " elements = { " + ", ".join(elements) + " };"
    return f"  map {name} {{ {body} }}\n"


def lookup(prefix: str, kind: str, family: int) -> str:
    """The expression that matches a packet against the map (for a mark rule): ``ip daddr .
    meta l4proto . th dport @m``, ``meta l4proto . th dport @m`` or ``ip daddr @m``."""
    ip = "ip" if family == 4 else "ip6"
    name = map_name(prefix, kind, family)
    if kind == WHOLE:
        return f"{ip} daddr @{name}"
    port = f"meta l4proto . th dport @{name}"
    return port if kind == ANY else f"{ip} daddr . {port}"


def statement(prefix: str, kind: str, family: int) -> str:
    """The DNAT statement through the map. Port kinds are guarded by ``meta l4proto { tcp, udp
    }`` (``th dport`` needs a transport header); ANY also by the family."""
    ip = "ip" if family == 4 else "ip6"
    name = map_name(prefix, kind, family)
    if kind == WHOLE:
        return f"dnat {ip} to {ip} daddr map @{name}"
    l4 = "meta l4proto { tcp, udp }"
    if kind == ANY:
        nfproto = "ipv4" if family == 4 else "ipv6"
        return f"{l4} meta nfproto {nfproto} dnat {ip} to meta l4proto . th dport map @{name}"
    return f"{l4} dnat {ip} to {ip} daddr . meta l4proto . th dport map @{name}"


def add_script(table: str, prefix: str, dnats: Sequence[Dnat]) -> str:
    """Incremental add of ``dnats``' elements to ``table`` (``"inet podnet"``)."""
    return "".join(f"add element {table} {map_of(prefix, d)} {{ {d.element()} }}\n" for d in dnats)


def delete_script(table: str, prefix: str, dnats: Sequence[Dnat]) -> str:
    """Incremental delete of ``dnats``' elements (nft fails if one is missing)."""
    return "".join(f"delete element {table} {map_of(prefix, d)} {{ {d.key()} }}\n" for d in dnats)
