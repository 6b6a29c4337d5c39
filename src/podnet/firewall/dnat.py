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

from podnet.checked import text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from podnet.checked import IP

PORT, ANY, WHOLE = "port", "any", "whole"
KINDS = (PORT, ANY, WHOLE)

_ADDR = {4: "ipv4_addr", 6: "ipv6_addr"}


class Dnat:
    """One translation. ``family`` 4|6; ``listen``: an address, or None for any address of the
    family; ``protocol`` "tcp"|"udp" and ``port`` 1-65535, both None for the whole address;
    ``target`` an address; ``target_port`` (None exactly when ``port`` is); ``owner``: who holds
    it (a container ID, a forward). Addresses are typed values or the canonical text of a row
    podnet wrote; both are kept as text checked by :func:`podnet.checked.text` (ValueError for
    anything a tool could read as syntax), protocols must be tcp or udp and ports integers, so
    no element can carry more than its own fields into an nft script."""

    __slots__ = ("family", "listen", "protocol", "port", "target", "target_port", "owner")

    def __init__(
        self,
        family: int,
        listen: IP | str | None,
        protocol: str | None,
        port: int | None,
        target: IP | str,
        target_port: int | None,
        owner: str = "",
    ) -> None:
        if family not in (4, 6) or protocol not in (None, "tcp", "udp"):
            raise ValueError(f"refusing a DNAT of family {family!r}, protocol {protocol!r}")
        for value in (port, target_port):
            if value is not None and (not isinstance(value, int) or not 0 < value < 65536):
                raise ValueError(f"refusing a DNAT with port {value!r}")
        self.family = family
        self.listen = None if listen is None else text(listen)
        self.protocol = protocol
        self.port = port
        self.target = text(target)
        self.target_port = target_port
        self.owner = owner

    @property
    def kind(self) -> str:
        """:data:`PORT` (given address and port), :data:`ANY` (any address, given port) or
        :data:`WHOLE` (given address, every port)."""
        if self.port is None:
            return WHOLE
        return ANY if self.listen is None else PORT

    def key(self) -> str:
        """The map key: ``addr . proto . port``, ``proto . port`` or ``addr``."""
        if self.kind == WHOLE:
            return str(self.listen)
        port = f"{self.protocol} . {self.port}"
        return port if self.listen is None else f"{self.listen} . {port}"

    def value(self) -> str:
        """The map value: ``target . target_port`` or ``target``."""
        return self.target if self.kind == WHOLE else f"{self.target} . {self.target_port}"

    def element(self) -> str:
        """``key : value``, as nft prints it."""
        return f"{self.key()} : {self.value()}"

    def __repr__(self) -> str:
        return f"Dnat({self.element()} [{self.owner}])"


def map_name(prefix: str, kind: str, family: int) -> str:
    """``<prefix>_v4``, ``<prefix>_any_v4``, ``<prefix>_whole_v4`` (and _v6)."""
    middle = "" if kind == PORT else f"_{kind}"
    return f"{prefix}{middle}_v{family}"


def map_of(prefix: str, d: Dnat) -> str:
    """The map holding ``d``."""
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
