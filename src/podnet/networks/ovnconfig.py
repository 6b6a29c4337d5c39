"""Config of ``physical`` (uplink) and ``ovn`` networks: LXD's keys, defaults and messages
(lxd/network/driver_physical.go and driver_ovn.go ``Validate``), for the keys podnet implements.

``physical`` — an uplink OVN routers reach the outside through: ``parent`` (each member's own
interface, set with ``--target``: :data:`MEMBER_KEYS`), ``mtu``,
``ipv4.gateway``/``ipv6.gateway`` (the uplink router, CIDR),
``ipv4.ovn.ranges``/``ipv6.ovn.ranges`` (addresses OVN routers take on the uplink),
``ipv4.routes``/``ipv6.routes`` (external subnets routed to the uplink: forwards' listen
addresses and NAT addresses), ``dns.nameservers``, ``ovn.ingress_mode`` (``l2proxy`` |
``routed``), ``user.*``.

``ovn`` — ``network`` (the uplink, required), ``ipv4.address``/``ipv6.address`` (the router's
address in CIDR form, ``auto`` — the default, which also turns NAT on — or ``none``),
``ipv4.nat``/``ipv6.nat``, ``ipv4.nat.address``/``ipv6.nat.address``, ``bridge.mtu``
(default from the underlay and the encapsulation), ``user.*``, and the ``volatile.*`` keys podnet
sets (the router's uplink addresses).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from podnet import checked
from podnet.networks.config import (
    _BOOLS,
    _parsed,
    checks_ranges,
    checks_routes,
    is_true,
    ranges,
    routes,
)
from podnet.networks.errors import NetworkError

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Iface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

#: Bytes: the range of ``mtu``/``bridge.mtu`` (LXD's IsNetworkMTU).
MTU_RANGE = (1280, 16384)
#: Bytes of Geneve's encapsulation over IPv4 / IPv6 (LXD's ``bridge.mtu`` defaults: 1442, 1422).
GENEVE_OVERHEAD = {4: 58, 6: 78}


def _gateway(family: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        iface = _parsed(checked.interface, value, f"invalid CIDR address: {value}")
        assert isinstance(iface, ipaddress.IPv4Interface | ipaddress.IPv6Interface)
        if iface.version != family:
            raise ValueError(f'Not an IPv{family} address "{value}"')

    return check


def _bool(value: str) -> None:
    if value.lower() not in _BOOLS:
        raise ValueError(f'Invalid value for a boolean "{value}"')


def _mtu(value: str) -> None:
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f'Invalid MTU "{value}"')
    if not MTU_RANGE[0] <= int(value) <= MTU_RANGE[1]:
        raise ValueError(f'Out of MTU range ({MTU_RANGE[0]}-{MTU_RANGE[1]}) "{value}"')


def _interface(value: str) -> None:
    try:
        checked.name(value)
    except checked.BadValue as err:
        raise ValueError(str(err)) from None


def _nameservers(value: str) -> None:
    for item in value.split(","):
        _parsed(checked.ip, item.strip(), f'Invalid IP address "{item.strip()}"')


def _ingress(value: str) -> None:
    if value not in ("l2proxy", "routed"):
        raise ValueError(f'Invalid value "{value}" (must be one of l2proxy, routed)')


def _cidr(family: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value in ("auto", "none"):
            return
        iface = _parsed(checked.interface, value, f"invalid CIDR address: {value}")
        assert isinstance(iface, ipaddress.IPv4Interface | ipaddress.IPv6Interface)
        if iface.version != family:
            raise ValueError(f'Not an IPv{family} address "{value}"')
        if iface.ip == iface.network.network_address:
            raise ValueError(f'Not a usable IPv{family} address "{value}"')
        if family == 4 and iface.network.prefixlen > 30:
            raise ValueError(f'Subnet too small for a network "{value}" (at most /30)')
        if family == 6 and iface.network.prefixlen != 64:
            raise ValueError(f'Subnet must be a /64 for OVN\'s address assignment "{value}"')

    return check


def _address(family: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        addr = _parsed(checked.ip, value, f'Not an IPv{family} address "{value}"')
        assert isinstance(addr, ipaddress.IPv4Address | ipaddress.IPv6Address)
        if addr.version != family:
            raise ValueError(f'Not an IPv{family} address "{value}"')

    return check


PHYSICAL_KEYS: dict[str, Callable[[str], None]] = {
    "parent": _interface,
    "mtu": _mtu,
    "ipv4.gateway": _gateway(4),
    "ipv6.gateway": _gateway(6),
    "ipv4.ovn.ranges": checks_ranges(4),
    "ipv6.ovn.ranges": checks_ranges(6),
    "ipv4.routes": checks_routes(4),
    "ipv6.routes": checks_routes(6),
    "dns.nameservers": _nameservers,
    "ovn.ingress_mode": _ingress,
}

OVN_KEYS: dict[str, Callable[[str], None]] = {
    "network": _interface,
    "ipv4.address": _cidr(4),
    "ipv6.address": _cidr(6),
    "ipv4.nat": _bool,
    "ipv6.nat": _bool,
    "ipv4.nat.address": _address(4),
    "ipv6.nat.address": _address(6),
    "bridge.mtu": _mtu,
    "volatile.network.ipv4.address": _address(4),
    "volatile.network.ipv6.address": _address(6),
}


def validate(
    name: str,
    config: Mapping[str, str],
    keys: Mapping[str, Callable[[str], None]],
    required: tuple[str, ...] = (),
) -> dict[str, str]:
    """``config`` checked against ``keys`` (``user.*`` free), empty values dropped;
    NetworkError (400) in LXD's words naming the network and the key."""
    out = {}
    for key, value in config.items():
        if key.startswith("user."):
            out[key] = value
            continue
        check = keys.get(key)
        if check is None:
            raise NetworkError(f'Invalid option for network "{name}" option "{key}"')
        if value == "":
            continue
        try:
            check(value)
        except ValueError as err:
            raise NetworkError(
                f'Invalid value for network "{name}" option "{key}": {err}'
            ) from None
        out[key] = value
    for key in required:
        if key not in out:
            raise NetworkError(f'Missing required "{key}" config key')
    return out


def validate_physical(name: str, config: Mapping[str, str]) -> dict[str, str]:
    """A ``physical`` network's cluster-wide config. ``parent`` is a member's own key
    (:data:`MEMBER_KEYS`); it is valid here only so that a record an earlier podnet wrote with
    one ``parent`` for every node is still read (the cluster layer refuses to write one)."""
    return validate(name, config, PHYSICAL_KEYS)


#: The keys of a ``physical`` network that are each member's own (LXD's
#: ``db.NodeSpecificNetworkConfig``, of those podnet implements): set with ``--target``.
MEMBER_KEYS: dict[str, Callable[[str], None]] = {"parent": _interface}

#: The most characters of a member name (an OVN chassis name: a host name or a UUID).
MEMBER_NAME_MAX = 253


def check_member(member: str) -> None:
    """A cluster member's name as podnet records it (the node's OVN chassis name, OVS's
    ``external_ids:system-id``): 1-253 characters of ``[-_.a-zA-Z0-9]``. NetworkError (400)."""
    if not 0 < len(member) <= MEMBER_NAME_MAX or not member.isascii() or not all(
        c.isalnum() or c in "-_." for c in member
    ):
        raise NetworkError(f"Invalid cluster member name {member!r}")


def validate_member(name: str, member: str, config: Mapping[str, str]) -> dict[str, str]:
    """``member``'s own keys of ``physical`` network ``name`` (``parent`` required), in LXD's
    words: ``Config key "k" may not be used as member-specific key``. NetworkError (400)."""
    check_member(member)
    for key in config:
        if key not in MEMBER_KEYS:
            raise NetworkError(f'Config key "{key}" may not be used as member-specific key')
    return validate(name, config, MEMBER_KEYS, ("parent",))


def validate_ovn(name: str, config: Mapping[str, str]) -> dict[str, str]:
    """An ``ovn`` network's config (``network`` required)."""
    return validate(name, config, OVN_KEYS, ("network",))


def default_mtu(underlay_mtu: int, underlay_family: int) -> int:
    """Bytes: LXD's ``bridge.mtu`` default over Geneve — the underlay's MTU less the
    encapsulation (58 bytes over IPv4, 78 over IPv6), at most 1500."""
    return min(1500, underlay_mtu - GENEVE_OVERHEAD[underlay_family])


__all__ = [
    "MEMBER_KEYS",
    "OVN_KEYS",
    "PHYSICAL_KEYS",
    "default_mtu",
    "is_true",
    "ranges",
    "routes",
    "check_member",
    "validate",
    "validate_member",
    "validate_ovn",
    "validate_physical",
]
