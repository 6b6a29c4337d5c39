"""Forwards of OVN networks (LXD's lxd/network/driver_ovn.go ``ForwardCreate``, ``ForwardUpdate``,
``ForwardDelete``): records in OVN's NB registry, made
of OVN load balancers on the network's router and internal switch (:func:`podnet.ovn.nb.
forward_ops`), one set for the whole cluster — every node lists the same forwards, and a
forward follows its target address to whichever pod on whichever node holds it.

Listen addresses follow LXD's rules for OVN: inside the uplink's ``ipvN.routes`` (``Uplink
network does not contain "X" in its routes``), not inside its ``ipvN.ovn.ranges`` nor any
network's subnet, router address, NAT address or another forward (``Listen address "X"
overlaps with another network or NIC``); ``0.0.0.0``/``::`` allocates a free address of the
routes (never a subnet's network, broadcast or gateway address). Ports and targets are checked
as for bridge forwards (:func:`podnet.networks.forwards.validate`), against the OVN subnet.
Records carry ``location`` "" (cluster-wide: LXD's forward of an OVN network has no member).
"""

from __future__ import annotations

import ipaddress
import json
import socket
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from podnet import checked
from podnet.drivers.backend import driver_of
from podnet.drivers.ovn.cluster_base import failure, read_registry
from podnet.networks import forwards as fwd
from podnet.networks import ovnconfig
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, ForwardPort, canonical_address
from podnet.ovn import forward_lbs
from podnet.ovn import nb as nbmod
from podnet.ovn.ops import Op
from podnet.ovn.ovsdb import Ovsdb, TxnFailed, Unreachable

Addr = ipaddress.IPv4Address | ipaddress.IPv6Address


def dumps(forward: Forward) -> str:
    return json.dumps(
        {"description": forward.description, "config": dict(sorted(forward.config.items())),
         "ports": [p.to_api() for p in forward.ports]}, separators=(",", ":"))  # fmt: skip


def loads(listen: str, text: str) -> Forward:
    try:
        data = json.loads(text)
        ports = [ForwardPort.from_api(p) for p in data.get("ports", [])]
        config = {str(k): str(v) for k, v in dict(data.get("config", {})).items()}
        return Forward(listen, str(data.get("description", "")), config, ports, "")
    except (ValueError, TypeError, AttributeError):
        return Forward(listen)


def _network(registry: nbmod.Registry, network: str) -> nbmod.Record:
    record = registry.records.get(network)
    if record is None:
        raise NetworkError("Failed loading network: Network not found", 404)
    driver_of(record.type).check_forwards(network)
    return record


def _view(network: str, record: nbmod.Record) -> fwd.NetworkView:
    subnets: dict[int, list[Any]] = {4: [], 6: []}
    for family in (4, 6):
        value = record.config.get(f"ipv{family}.address", "none")
        if value not in ("", "none", "auto"):
            subnets[family].append(checked.interface(value).network)
    return fwd.NetworkView(network, "ovn", subnets)


#: A span of taken addresses: ``(family, first, last, holder)``, ``first``/``last`` the
#: addresses as integers (both inside), ``holder`` what takes them, for messages.
Span = tuple[int, int, int, str]


def _taken(registry: nbmod.Registry) -> Iterable[Span]:
    """What a listen address may not lie in besides another forward (:func:`_forwards_at`):
    every network's subnet and gateway subnet, its NAT and router uplink addresses, and the
    uplinks' ``ipvN.ovn.ranges``, as :data:`Span` (a range is one span, not its CIDR blocks)."""
    for name, record in [*registry.records.items(), *registry.local_uplinks.items()]:
        for key in ("ipv4.address", "ipv6.address", "ipv4.gateway", "ipv6.gateway"):
            value = record.config.get(key, "")
            if value not in ("", "none", "auto"):
                net = checked.interface(value).network
                yield (net.version, int(net.network_address), int(net.broadcast_address),
                       f"network {name}")  # fmt: skip
        for key in ("ipv4.nat.address", "ipv6.nat.address", "volatile.network.ipv4.address",
                    "volatile.network.ipv6.address"):  # fmt: skip
            if record.config.get(key):
                ip = checked.ip(record.config[key])
                yield ip.version, int(ip), int(ip), f"network {name}"
        if record.type in ("physical", "bridge"):
            for family in (4, 6):
                text = record.config.get(f"ipv{family}.ovn.ranges", "")
                for first, last in ovnconfig.ranges(text, family) if text else []:
                    yield family, int(first), int(last), f"the OVN ranges of uplink {name}"


def _forwards_at(registry: nbmod.Registry, skip: tuple[str, str] | None) -> dict[str, str]:
    """The cluster's forwards but ``skip``: listen address (canonical text, as
    :func:`podnet.ovn.nb.read` keeps only those) → what holds it. A lookup per address instead
    of parsing every forward's: at 1,000 forwards that was about 5 ms of each change, and
    ``0.0.0.0`` compared every candidate with every forward."""
    held: dict[str, str] = {}
    for network, listen in registry.forwards:
        if (network, listen) != skip:  # the first network named, as the registry lists them
            held.setdefault(listen, f"a forward of network {network}")
    return held


def l2proxy(registry: nbmod.Registry, record: nbmod.Record) -> bool | None:
    """Whether OVN network ``record``'s uplink takes ingress in ``l2proxy`` mode (LXD's
    default for ``ovn.ingress_mode``); None when this node does not know the uplink (another
    node's bridge): the forward then keeps what its load balancers say."""
    uplink = registry.uplink(record.config.get("network", ""))
    if uplink is None:
        return None
    return uplink.config.get("ovn.ingress_mode", "l2proxy") == "l2proxy"


def _routes(registry: nbmod.Registry, record: nbmod.Record, family: int) -> list[Any]:
    uplink = registry.uplink(record.config.get("network", ""))
    text = uplink.config.get(f"ipv{family}.routes", "") if uplink is not None else ""
    return ovnconfig.routes(text, family) if text else []


def _overlaps(address: Addr, taken: Iterable[Span], forwards: Mapping[str, str]) -> str | None:
    """What holds ``address``: the first span of ``taken`` it lies in, else the forward on it;
    None when it is free."""
    value = int(address)
    for family, first, last, holder in taken:
        if family == address.version and first <= value <= last:
            return holder
    return forwards.get(str(address))


#: Candidate checks ``0.0.0.0``/``::`` may make before giving up (the first free address is
#: taken; a run of taken addresses — a subnet, an OVN range, forwards — is passed over in one
#: check, so a route costs at most two).
ALLOCATE_TRIES = 65536


def _merged(spans: Iterable[Span], family: int) -> tuple[list[int], list[int]]:
    """The spans of ``family`` sorted and merged where they overlap or touch: ``(firsts,
    lasts)``, ascending and disjoint, for :func:`bisect.bisect_right` over ``firsts``."""
    firsts: list[int] = []
    lasts: list[int] = []
    for first, last in sorted((a, b) for f, a, b, _ in spans if f == family):
        if lasts and first <= lasts[-1] + 1:
            lasts[-1] = max(lasts[-1], last)
        else:
            firsts.append(first)
            lasts.append(last)
    return firsts, lasts


def _candidates(net: Any) -> tuple[int, int]:
    """The first and last address of route ``net`` a forward may take, as integers: its hosts
    (:meth:`ipaddress.IPv4Network.hosts`: an IPv4 subnet's network and broadcast addresses and
    an IPv6 subnet's Subnet-Router anycast address, RFC 4291 2.6.1, left out), every address
    of a /31, /32, /127 or /128."""
    first, last = int(net.network_address), int(net.broadcast_address)
    if net.num_addresses > 2:
        first += 1
        last -= 1 if net.version == 4 else 0
    return first, last


def _forward_spans(registry: nbmod.Registry, family: int) -> Iterable[Span]:
    """The cluster's forwards of ``family`` as one-address :data:`Span` (their listen
    addresses are canonical text, :func:`podnet.ovn.nb.read`; read with ``inet_pton``)."""
    af = socket.AF_INET if family == 4 else socket.AF_INET6
    for network, listen in registry.forwards:
        try:
            value = int.from_bytes(socket.inet_pton(af, listen), "big")
        except (OSError, ValueError):
            continue  # the other family
        yield family, value, value, f"a forward of network {network}"


def _allocate(registry: nbmod.Registry, record: nbmod.Record, family: int,
              tries: int = ALLOCATE_TRIES) -> str:  # fmt: skip
    """The first free address of the uplink's ``ipvN.routes`` (canonical text), in the
    routes' order: not in a span of :func:`_taken` nor a forward's listen address. The
    forwards are merged with the spans (:func:`_merged`), so each candidate costs one
    bisection and either is free or jumps past a whole run of taken addresses — a run of
    forwards included — to an address that is free: at most two checks per route, and the
    work is O((spans + forwards) · log) for the one sort. NetworkError (400) when no address
    is free, or (only with more routes than ``tries`` allows) none within ``tries`` checks."""
    firsts, lasts = _merged([*_taken(registry), *_forward_spans(registry, family)], family)
    make = ipaddress.IPv4Address if family == 4 else ipaddress.IPv6Address
    checks = 0
    for net in _routes(registry, record, family):
        candidate, last = _candidates(net)
        while candidate <= last:
            checks += 1
            if checks > tries:  # never loop for ever
                raise NetworkError(
                    f"No free address in the uplink's routes within {tries} tries: "
                    "give the listen address"
                )
            i = bisect_right(firsts, candidate) - 1
            if i >= 0 and candidate <= lasts[i]:
                candidate = lasts[i] + 1  # past the run: merged spans never touch, so free
                continue
            return str(make(candidate))
    raise NetworkError("No free address in the uplink's routes")


def _check_listen(registry: nbmod.Registry, network: str, record: nbmod.Record,
                  listen: str, current: tuple[str, str] | None) -> None:  # fmt: skip
    address = fwd.listen_address(listen)
    where = (network, listen)
    if current is None and where in registry.forwards:
        raise NetworkError("A forward for that listen address already exists", 409)
    suffix = "/32" if address.version == 4 else "/128"
    if not any(address in net for net in _routes(registry, record, address.version)):
        raise NetworkError(f'Uplink network does not contain "{address}{suffix}" in its routes')
    holder = _overlaps(address, _taken(registry), _forwards_at(registry, current))
    if holder is not None:
        raise NetworkError(f'Listen address "{address}{suffix}" overlaps with another network or '
                           f"NIC ({holder})", 409)  # fmt: skip


def _apply(nb: Ovsdb, fn: Callable[[nbmod.Registry], Any], prefix: str,
           uplinks: Mapping[str, nbmod.Record] | None = None) -> nbmod.Registry:  # fmt: skip
    def wrapped(registry: nbmod.Registry) -> tuple[dict[str, Any], list[Op]]:
        registry.forward_changes = {}
        registry.local_uplinks = dict(uplinks or {})
        try:
            ops = fn(registry)
        except NetworkError as err:
            raise NetworkError(prefix + str(err) if err.status != 404 else str(err), err.status) \
                from None  # fmt: skip
        return {}, ops

    try:
        return nbmod.change(nb, wrapped)
    except (Unreachable, TxnFailed) as err:
        raise failure(err) from None


def list_forwards(nb: Ovsdb, network: str) -> list[Forward]:
    """The forwards of OVN network ``network``, by listen address."""
    registry = read_registry(nb)
    _network(registry, network)
    return [loads(listen, text) for (net, listen), text in sorted(registry.forwards.items())
            if net == network]  # fmt: skip


def get_forward(nb: Ovsdb, network: str, listen: str) -> Forward:
    for forward in list_forwards(nb, network):
        if forward.listen_address == canonical_address(listen):
            return forward
    raise NetworkError("Network forward not found", 404)


def create_forward(nb: Ovsdb, network: str, forward: Forward,
                   uplinks: Mapping[str, nbmod.Record] | None = None) -> Forward:  # fmt: skip
    """Create a forward (``0.0.0.0``/``::`` allocate the listen address). 404, 409, 400 as
    LXD; 503 NB unreachable. ``uplinks``: this node's bridge uplinks (an OVN network on one
    takes its listen addresses from the bridge's routes)."""
    made: list[Forward] = []

    def apply(registry: nbmod.Registry) -> list[Op]:
        record = _network(registry, network)
        new = forward.normalised()
        if new.listen_address in ("0.0.0.0", "::"):
            family = 4 if new.listen_address == "0.0.0.0" else 6
            new.listen_address = _allocate(registry, record, family)
        _check_listen(registry, network, record, new.listen_address, None)
        dnats = fwd.validate(_view(network, record), new)
        new.config = {k: v for k, v in new.config.items() if v != ""}
        registry.forward_changes[(network, new.listen_address)] = dumps(new)
        made[:] = [new]
        return forward_lbs.forward_ops(nb, network, new.listen_address, dnats,
                                       l2proxy=l2proxy(registry, record))  # fmt: skip

    _apply(nb, apply, "Failed creating forward: ", uplinks)
    return made[0]


def modify_forward(nb: Ovsdb, network: str, listen: str, change: Callable[[Forward], Forward],
                   client: bool,
                   uplinks: Mapping[str, nbmod.Record] | None = None) -> Forward:  # fmt: skip
    """Read, change and write a forward in one NB transaction (re-applied when another node
    changed the registry meanwhile: nothing is lost). Errors as for bridges."""
    made: list[Forward] = []
    where = (network, canonical_address(listen))

    def apply(registry: nbmod.Registry) -> list[Op]:
        record = _network(registry, network)
        if where not in registry.forwards:
            raise NetworkError(("" if client else "Failed updating forward: ") +
                               "Network forward not found", 404)  # fmt: skip
        current = loads(where[1], registry.forwards[where])
        new = change(current).normalised()
        dnats = fwd.validate(_view(network, record), new)
        new.config = {k: v for k, v in new.config.items() if v != ""}
        made[:] = [new]
        if new.etag() == current.etag():
            return []
        registry.forward_changes[where] = dumps(new)
        return forward_lbs.forward_ops(nb, network, where[1], dnats,
                                       l2proxy=l2proxy(registry, record))  # fmt: skip

    _apply(nb, apply, "Failed updating forward: ", uplinks)
    return made[0]


def delete_forward(nb: Ovsdb, network: str, listen: str) -> None:
    where = (network, canonical_address(listen))

    def apply(registry: nbmod.Registry) -> list[Op]:
        _network(registry, network)
        if where not in registry.forwards:
            raise NetworkError("Failed deleting forward: Network forward not found", 404)
        registry.forward_changes[where] = None
        return forward_lbs.forward_ops(nb, network, where[1], None)

    _apply(nb, apply, "")
