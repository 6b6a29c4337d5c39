"""Forwards of OVN networks (issue 16, item 6; seed 004): records in OVN's NB registry, made
of OVN load balancers on the network's router and internal switch (:func:`podnet.ovn.nb.
forward_ops`), one set for the whole cluster — every node lists the same forwards, and a
forward follows its target address to whichever pod on whichever node holds it.

Listen addresses follow LXD's rules for OVN: inside the uplink's ``ipvN.routes`` (``Uplink
network does not contain "X" in its routes``), not inside its ``ipvN.ovn.ranges`` nor any
network's subnet, router address, NAT address or another forward (``Listen address "X"
overlaps with another network or NIC``); ``0.0.0.0``/``::`` allocates a free address of the
routes (never a subnet's network, broadcast or gateway address). Ports and targets are checked
as for bridge forwards (:func:`podnet.networks.forwards.validate`), against the OVN subnet.
Records carry ``location`` "" (cluster-wide; seed 004's ``node_id`` NULL).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from podnet import checked
from podnet.drivers.cluster import _failure
from podnet.networks import forwards as fwd
from podnet.networks import ovnconfig
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, ForwardPort, canonical_address
from podnet.ovn import nb as nbmod
from podnet.ovn import ports
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
    if record.type != "ovn":
        raise NetworkError(f'Network "{network}" of type {record.type} has no forwards')
    return record


def _view(network: str, record: nbmod.Record) -> fwd.NetworkView:
    subnets: dict[int, list[Any]] = {4: [], 6: []}
    for family in (4, 6):
        value = record.config.get(f"ipv{family}.address", "none")
        if value not in ("", "none", "auto"):
            subnets[family].append(checked.interface(value).network)
    return fwd.NetworkView(network, "ovn", subnets)


def _taken(registry: nbmod.Registry) -> Iterable[tuple[Any, str]]:
    """What a listen address may not lie in besides another forward (:func:`_forwards_at`):
    (address or subnet, what holds it)."""
    for name, record in [*registry.records.items(), *registry.local_uplinks.items()]:
        for key in ("ipv4.address", "ipv6.address", "ipv4.gateway", "ipv6.gateway"):
            value = record.config.get(key, "")
            if value not in ("", "none", "auto"):
                yield checked.interface(value).network, f"network {name}"
        for key in ("ipv4.nat.address", "ipv6.nat.address", "volatile.network.ipv4.address",
                    "volatile.network.ipv6.address"):  # fmt: skip
            if record.config.get(key):
                yield checked.ip(record.config[key]), f"network {name}"
        if record.type in ("physical", "bridge"):
            for family in (4, 6):
                text = record.config.get(f"ipv{family}.ovn.ranges", "")
                for first, last in ovnconfig.ranges(text, family) if text else []:
                    for net in ipaddress.summarize_address_range(first, last):
                        yield net, f"the OVN ranges of uplink {name}"


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


def _overlaps(address: Addr, taken: Iterable[tuple[Any, str]],
              forwards: Mapping[str, str]) -> str | None:  # fmt: skip
    for held, holder in taken:
        if held.version != address.version:
            continue
        if isinstance(held, ipaddress.IPv4Network | ipaddress.IPv6Network):
            inside = address in held
        else:
            inside = address == held
        if inside:
            return holder
    return forwards.get(str(address))


#: Addresses ``0.0.0.0``/``::`` may try before giving up (the first free one is taken).
ALLOCATE_TRIES = 65536


def _allocate(registry: nbmod.Registry, record: nbmod.Record, family: int) -> str:
    taken, forwards = list(_taken(registry)), _forwards_at(registry, None)
    tries = 0
    for net in _routes(registry, record, family):
        hosts = net.hosts() if net.num_addresses > 2 else iter(net)
        for address in hosts:
            if _overlaps(address, taken, forwards) is None:
                return str(address)
            tries += 1
            if tries >= ALLOCATE_TRIES:  # a route covered by huge ranges: never loop for ever
                raise NetworkError(
                    f"No free address in the uplink's routes within {ALLOCATE_TRIES} tries: "
                    "give the listen address"
                )
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
    def wrapped(registry: nbmod.Registry) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
        raise _failure(err) from None


def list_forwards(nb: Ovsdb, network: str) -> list[Forward]:
    """The forwards of OVN network ``network``, by listen address."""
    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        raise _failure(err) from None
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

    def apply(registry: nbmod.Registry) -> list[dict[str, Any]]:
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
        return ports.forward_ops(nb, network, new.listen_address, dnats,
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

    def apply(registry: nbmod.Registry) -> list[dict[str, Any]]:
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
        return ports.forward_ops(nb, network, where[1], dnats, l2proxy=l2proxy(registry, record))

    _apply(nb, apply, "Failed updating forward: ", uplinks)
    return made[0]


def delete_forward(nb: Ovsdb, network: str, listen: str) -> None:
    where = (network, canonical_address(listen))

    def apply(registry: nbmod.Registry) -> list[dict[str, Any]]:
        _network(registry, network)
        if where not in registry.forwards:
            raise NetworkError("Failed deleting forward: Network forward not found", 404)
        registry.forward_changes[where] = None
        return ports.forward_ops(nb, network, where[1], None)

    _apply(nb, apply, "")
