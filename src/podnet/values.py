"""The values podnet's layers hand each other, defined once on the ground floor.

- :class:`PortMappingArg`: one requested ``runtimeConfig.portMappings`` item (CNI CONVENTIONS.md
  "portMappings"), as :mod:`podnet.cni.netconf` parses it;
- :class:`PortMapping`: one published hostPort of podnet's (a ``portmap_entries`` row,
  cni-kindnet's) or of podnet-portmap's (a ``portmap_claims`` row);
- :class:`ContainerNet`: a sandbox address from a prevResult (podnet-portmap's input);
- :class:`Claim` and :class:`Dnat`: the one model of "traffic for (family, listen address or any
  address, protocol and port or every port) is taken" — and, for a Dnat, where it goes. Both
  nftables renderers (podnet's table, podnet-portmap's) key their maps with :meth:`Claim.key`,
  and both conflict checks (hostPort against hostPort or forward, forward against hostPort) use
  :meth:`Claim.overlaps` through :meth:`podnet.store.Store.claim_holders`.

The family helper (:class:`podnet.checked.Family`: wildcard, host prefix, default route, nft
keyword, column) and the address types ``IP``/``Net``/``Iface`` live in :mod:`podnet.checked`,
where text becomes these values.

Why not :mod:`dataclasses`: a plugin is a new process per CNI call, and ``import dataclasses``
costs ~20 ms (it pulls in :mod:`inspect`, :mod:`re`; measured with ``python3 -IS -X importtime``
on Debian 12's 3.11) — two thirds of an ADD. These classes are plain ``__slots__`` classes,
written once here instead of a dozen times across the packages.
"""

from __future__ import annotations

from podnet.checked import FAMILIES, text

_WILDCARDS = frozenset(f.wildcard for f in FAMILIES.values())

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.checked import IP

__all__ = ["ANY", "KINDS", "PORT", "WHOLE", "Claim", "ContainerNet", "Dnat", "PortMapping",
           "PortMappingArg", "FORWARD", "HOSTPORT", "Holder"]  # fmt: skip

#: Claim kinds: a given address and port, any address of the family and a port, a whole address.
PORT, ANY, WHOLE = "port", "any", "whole"
KINDS = (PORT, ANY, WHOLE)


class PortMappingArg:
    """One ``runtimeConfig.portMappings`` item (CNI CONVENTIONS.md "portMappings").

    ``host_port``/``container_port``: 1-65535; ``protocol``: "tcp" | "udp" (lower-cased);
    ``host_ip``: an address (:mod:`ipaddress`); None for any address of both families,
    ``0.0.0.0`` or ``::`` for any address of that family only (as the reference portmap reads
    them).
    """

    __slots__ = ("host_port", "container_port", "protocol", "host_ip")

    def __init__(self, host_port: int, container_port: int, protocol: str,
                 host_ip: IP | None) -> None:  # fmt: skip
        self.host_port = host_port
        self.container_port = container_port
        self.protocol = protocol
        self.host_ip = host_ip

    @property
    def specific(self) -> bool:
        """Whether it names one hostIP (not None, not ``0.0.0.0``/``::``)."""
        return self.host_ip is not None and not self.host_ip.is_unspecified

    def claim(self, family: int) -> Claim:
        """What it takes in ``family`` (4|6): its hostIP's port, or the port on any address."""
        return Claim(family, self.host_ip if self.specific else None, self.protocol,
                     self.host_port)  # fmt: skip

    def __repr__(self) -> str:
        host = "*" if self.host_ip is None else str(self.host_ip)
        return f"{host}:{self.host_port}/{self.protocol}->{self.container_port}"


class PortMapping:
    """A published hostPort: host_ip ("0.0.0.0"/"::" = any address of the family), ports
    1-65535, protocol tcp|udp, the container's address and port, and who holds it
    (``container_id``; podnet-portmap's read ``podnet-portmap <network>/<container>`` where
    the store reports them as holders)."""

    __slots__ = ("container_id", "host_ip", "host_port", "protocol", "container_ip",
                 "container_port", "_family")  # fmt: skip

    def __init__(self, container_id: str, host_ip: str, host_port: int, protocol: str,
                 container_ip: str, container_port: int, family: int = 0) -> None:  # fmt: skip
        self.container_id = container_id
        self.host_ip = host_ip
        self.host_port = host_port
        self.protocol = protocol
        self.container_ip = container_ip
        self.container_port = container_port
        self._family = family

    @property
    def family(self) -> int:
        """4 or 6: as given (the pod's family the address was allocated in, the column of the
        pod row that holds it), else from parsing the container's address
        (:func:`podnet.checked.ip`; BadValue, a ValueError, for a row today's checks refuse)."""
        if not self._family:
            from podnet.checked import ip

            self._family = ip(self.container_ip).version
        return self._family

    @property
    def wildcard(self) -> bool:
        """Whether it answers on every address of its family."""
        return self.host_ip in _WILDCARDS

    def dnat(self) -> Dnat:
        """The hostPort as a translation (owner: the container): any address for a wildcard."""
        listen = None if self.wildcard else self.host_ip
        return Dnat(self.family, listen, self.protocol, self.host_port, self.container_ip,
                    self.container_port, self.container_id)  # fmt: skip

    def as_dict(self) -> dict[str, object]:
        """The row's columns (the family is not one)."""
        return {slot: getattr(self, slot) for slot in self.__slots__ if slot != "_family"}

    def __repr__(self) -> str:
        return (f"PortMapping({self.host_ip}:{self.host_port}/{self.protocol} -> "
                f"{self.container_ip}:{self.container_port} [{self.container_id}])")  # fmt: skip


class ContainerNet:
    """A sandbox address from prevResult: ``family`` 4|6, ``ip`` (plain), ``network`` (the
    CIDR of its subnet, e.g. ``172.16.30.0/24`` for ``172.16.30.2/24``)."""

    __slots__ = ("family", "ip", "network")

    def __init__(self, family: int, ip: str, network: str) -> None:
        self.family = family
        self.ip = ip
        self.network = network

    @classmethod
    def from_cidr(cls, cidr: str) -> ContainerNet:
        """From a prevResult address (``10.0.0.2/24``); BadValue for anything else."""
        from podnet import checked

        iface = checked.interface(cidr)
        return cls(iface.version, checked.text(iface.ip), checked.text(iface.network))


class Claim:
    """Traffic taken: ``family`` 4|6; ``listen`` an address (text checked by
    :func:`podnet.checked.text`) or None for any address of the family; ``protocol``
    "tcp"|"udp" and ``port`` 1-65535, both None for the whole address (every protocol and port);
    ``owner`` who holds it (a container ID, a forward). ValueError for anything else, so no
    claim can carry more than its own fields into an nft script."""

    __slots__ = ("family", "listen", "protocol", "port", "owner")

    def __init__(self, family: int, listen: IP | str | None, protocol: str | None,
                 port: int | None, owner: str = "") -> None:  # fmt: skip
        if family not in (4, 6) or protocol not in (None, "tcp", "udp"):
            raise ValueError(f"refusing a DNAT of family {family!r}, protocol {protocol!r}")
        _port(port)
        if (protocol is None) != (port is None):
            raise ValueError(f"refusing a DNAT with protocol {protocol!r} and port {port!r}")
        self.family = family
        self.listen = None if listen is None else text(listen)
        self.protocol = protocol
        self.port = port
        self.owner = owner

    @property
    def kind(self) -> str:
        """:data:`PORT` (given address and port), :data:`ANY` (any address, given port) or
        :data:`WHOLE` (given address, every port)."""
        if self.port is None:
            return WHOLE
        return ANY if self.listen is None else PORT

    def key(self) -> str:
        """The nft map key: ``addr . proto . port``, ``proto . port`` or ``addr``."""
        if self.port is None:
            return str(self.listen)
        port = f"{self.protocol} . {self.port}"
        return port if self.listen is None else f"{self.listen} . {port}"

    def overlaps(self, other: Claim) -> bool:
        """Whether some packet would match both: the same family; the same protocol and port,
        or either takes every port; the same listen address, or either takes any address."""
        ports = (self.port is None or other.port is None
                 or (self.protocol, self.port) == (other.protocol, other.port))  # fmt: skip
        listens = self.listen is None or other.listen is None or self.listen == other.listen
        return self.family == other.family and ports and listens

    def __repr__(self) -> str:
        return f"Claim({self.key()} [{self.owner}])"


class Dnat(Claim):
    """A :class:`Claim` and where its traffic goes: ``target`` (an address) and
    ``target_port`` (None exactly when ``port`` is: a whole address is not port-translated).
    Addresses are typed values or the canonical text of a row podnet wrote; ValueError as for
    :class:`Claim`."""

    __slots__ = ("target", "target_port")

    def __init__(self, family: int, listen: IP | str | None, protocol: str | None,
                 port: int | None, target: IP | str, target_port: int | None,
                 owner: str = "") -> None:  # fmt: skip
        super().__init__(family, listen, protocol, port, owner)
        _port(target_port)
        if (target_port is None) != (port is None):
            raise ValueError(f"refusing a DNAT with port {port!r} and target port {target_port!r}")
        self.target = text(target)
        self.target_port = target_port

    def value(self) -> str:
        """The map value: ``target . target_port`` or ``target``."""
        return self.target if self.port is None else f"{self.target} . {self.target_port}"

    def element(self) -> str:
        """``key : value``, as nft prints it."""
        return f"{self.key()} : {self.value()}"

    def __repr__(self) -> str:
        return f"Dnat({self.element()} [{self.owner}])"


#: Holder kinds.
HOSTPORT, FORWARD = "hostPort", "forward"


class Holder:
    """Who holds traffic a new claim wants (:meth:`podnet.store.Store.claim_holders`):
    ``kind`` :data:`HOSTPORT` or :data:`FORWARD`; ``name`` the container (podnet-portmap's:
    ``podnet-portmap <network>/<container>``) or the forward's network; ``what`` its
    :class:`PortMapping` or :class:`Dnat`."""

    __slots__ = ("kind", "name", "what")

    def __init__(self, kind: str, name: str, what: PortMapping | Dnat) -> None:
        self.kind = kind
        self.name = name
        self.what = what

    @property
    def claim(self) -> Claim:
        """What it takes, as a :class:`Claim`."""
        return self.what.dnat() if isinstance(self.what, PortMapping) else self.what

    def __repr__(self) -> str:
        return f"Holder({self.kind} {self.name}: {self.what!r})"


def _port(value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not 0 < value < 65536):  # fmt: skip
        raise ValueError(f"refusing a DNAT with port {value!r}")
