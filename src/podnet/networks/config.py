"""Bridge network configuration: LXD's key names, values, defaults and messages (lxd/network/
driver_bridge.go ``Validate`` and ``FillConfig``; shared/validate), for the keys podnet
implements.

- ``ipv4.address`` / ``ipv6.address``: the gateway in CIDR form, ``auto`` or ``none``
  (default ``auto`` on create);
- ``ipv4.nat`` / ``ipv6.nat``: a boolean (true/false/yes/no/1/0/on/off); ``true`` when the
  address was ``auto``, else off;
- ``ipv4.nat.address`` / ``ipv6.nat.address``: the source address of egress (else masquerade);
- ``bridge.mtu``: 1280-16384 bytes (default :data:`DEFAULT_MTU`, 1500, as LXD's);
- ``user.*``: anything.

``auto`` resolves to a free ``10.x.y.1/24`` / ``fd42:…::1/64`` (not overlapping any network or
range the store knows, nor a route of the node) and adds ``ipvN.nat: "true"``, as LXD does.
Messages: ``Invalid option for network "n" option "k"``, ``Invalid value for network "n" option
"k": <reason>``; the name follows LXD's interface-name rules.
"""

from __future__ import annotations

import ipaddress
import os

from podnet import checked
from podnet.networks.errors import NetworkError

__all__ = [
    "BRIDGE_KEYS",
    "address",
    "check_name",
    "fill_defaults",
    "is_true",
    "ranges",
    "routes",
    "subnet",
    "validate",
]

_BOOLS = ("true", "false", "yes", "no", "1", "0", "on", "off")
MTU_RANGE = (1280, 16384)
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Iface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

#: Bytes: the bridge MTU when ``bridge.mtu`` is unset (LXD's default; the kernel's too).
DEFAULT_MTU = 1500


def mtu(config: Mapping[str, str]) -> int:
    """The bridge MTU in bytes a (validated) config asks for: ``bridge.mtu`` or
    :data:`DEFAULT_MTU`."""
    return int(config.get("bridge.mtu") or DEFAULT_MTU)


def check_name(name: str) -> None:
    """LXD's ``IsInterfaceName``: 2-15 characters of ``[-_a-zA-Z0-9.]`` (the bridge is a Linux
    interface of that name), not starting with ``-`` and not ``..``. NetworkError (400)."""
    if len(name) < 2:
        raise NetworkError("Network interface is too short (minimum 2 characters)")
    if len(name) > 15:
        raise NetworkError("Network interface is too long (maximum 15 characters)")
    if not name.isascii() or not all(c.isalnum() or c in "-_." for c in name):
        raise NetworkError("Network interface contains invalid characters")
    if name.startswith("-") or name in (".", ".."):
        # ip(8) would read "-x" as an option; "." and ".." are no link names (checked.name)
        raise NetworkError(f"Invalid network name {name!r}: it may not start with a dash or be "
                           "a dot entry")  # fmt: skip


def is_true(value: str) -> bool:
    """LXD's ``IsTrue`` for an already valid boolean string."""
    return value.lower() in ("true", "yes", "1", "on")


def _bool(value: str) -> None:
    if value.lower() not in _BOOLS:
        raise ValueError(f'Invalid value for a boolean "{value}"')


TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a plugin ~10 ms: reconcile reads bridge configs here
    from collections.abc import Callable, Iterable, Mapping
    from typing import TypeVar

    _T = TypeVar("_T")


def _parsed(parse: Callable[[str], _T], value: str, bad: str) -> _T:
    """``parse(value)``; a scoped address's own message or ``bad`` as a ValueError."""
    try:
        return parse(value)
    except checked.ScopedAddress as err:
        raise ValueError(str(err)) from None
    except checked.BadValue:
        raise ValueError(bad) from None


def _cidr(family: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value in ("none", "auto"):
            return
        iface = _parsed(checked.interface, value, f"invalid CIDR address: {value}")
        if iface.version != family:
            raise ValueError(f'Not an IPv{family} address "{value}"')
        if iface.ip == iface.network.network_address and iface.network.num_addresses > 1:
            raise ValueError(f'Not a usable IPv{family} address "{value}"')
        if family == 4 and iface.network.prefixlen > 30:
            raise ValueError(f'Subnet too small for a network "{value}" (at most /30)')
        if family == 6 and iface.network.prefixlen > 126:
            raise ValueError(f'Subnet too small for a network "{value}" (at most /126)')
        problem = checked.pod_range_problem(iface.network)  # a bridge subnet is a pod range
        if problem:
            raise ValueError(problem)

    return check


def _address(family: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        addr = _parsed(checked.ip, value, f'Not an IPv{family} address "{value}"')
        if addr.version != family:
            raise ValueError(f'Not an IPv{family} address "{value}"')

    return check


def _mtu(value: str) -> None:
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f'Invalid MTU "{value}"')
    if not MTU_RANGE[0] <= int(value) <= MTU_RANGE[1]:
        raise ValueError(f'Out of MTU range ({MTU_RANGE[0]}-{MTU_RANGE[1]}) "{value}"')


def checks_ranges(family: int) -> Callable[[str], None]:
    """A validator of ``ipvN.ovn.ranges`` text (:func:`ranges`): ValueError with the reason."""

    def check(value: str) -> None:
        ranges(value, family)

    return check


def checks_routes(family: int) -> Callable[[str], None]:
    """A validator of ``ipvN.routes`` text (:func:`routes`): ValueError with the reason."""

    def check(value: str) -> None:
        routes(value, family)

    return check


#: key → validator (raises ValueError with LXD's reason).
BRIDGE_KEYS: dict[str, Callable[[str], None]] = {
    "ipv4.address": _cidr(4),
    "ipv6.address": _cidr(6),
    "ipv4.nat": _bool,
    "ipv6.nat": _bool,
    "ipv4.nat.address": _address(4),
    "ipv6.nat.address": _address(6),
    "bridge.mtu": _mtu,
    # an uplink of OVN networks (LXD's bridge keys; podnet.drivers.ovn.bridge_uplink)
    "ipv4.ovn.ranges": checks_ranges(4),
    "ipv6.ovn.ranges": checks_ranges(6),
    "ipv4.routes": checks_routes(4),
    "ipv6.routes": checks_routes(6),
}


#: The most ``ipvN.routes`` a bridge takes (each is a route on the node).
MAX_ROUTES = 256


IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def ranges(value: str, family: int) -> list[tuple[IP, IP]]:
    """``a-b,c-d`` (LXD's IP ranges) as ``(first, last)`` pairs; ValueError with the reason."""
    out = []
    for item in value.split(","):
        first, sep, last = item.strip().partition("-")
        if not sep:
            raise ValueError(f'Invalid IP range "{item.strip()}" (must be start-end)')
        a = _parsed(checked.ip, first.strip(), f'Invalid IP address "{first.strip()}"')
        b = _parsed(checked.ip, last.strip(), f'Invalid IP address "{last.strip()}"')
        assert isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address)
        assert isinstance(b, ipaddress.IPv4Address | ipaddress.IPv6Address)
        if a.version != family or b.version != family:
            raise ValueError(f'Not an IPv{family} range "{item.strip()}"')
        if int(b) < int(a):
            raise ValueError(f'Start IP "{a}" must be less than End IP "{b}"')
        out.append((a, b))
    return out


def routes(value: str, family: int) -> list[Net]:
    """A comma-separated CIDR list (``ipv4.routes``); ValueError with the reason."""
    out = []
    for item in value.split(","):
        net = _parsed(
            lambda v: checked.network(v), item.strip(), f'Invalid network "{item.strip()}"'
        )
        assert isinstance(net, ipaddress.IPv4Network | ipaddress.IPv6Network)
        if net.version != family:
            raise ValueError(f'Not an IPv{family} network "{item.strip()}"')
        out.append(net)
    return out




def validate(name: str, config: Mapping[str, str]) -> dict[str, str]:
    """The bridge config with empty values dropped (LXD stores none); NetworkError (400) with
    LXD's message for an unknown key or a bad value, checked in key order."""
    out = {}
    for key in sorted(config):
        value = config[key]
        if not isinstance(value, str):
            raise NetworkError(f'Invalid value for network "{name}" option "{key}": not a string')
        if key.startswith("user."):
            pass
        elif key not in BRIDGE_KEYS:
            raise NetworkError(f'Invalid option for network "{name}" option "{key}"')
        elif value:
            try:
                BRIDGE_KEYS[key](value)
            except ValueError as err:
                raise NetworkError(
                    f'Invalid value for network "{name}" option "{key}": {err}'
                ) from None
        if value:
            out[key] = value
    for family in (4, 6):
        nat_address = out.get(f"ipv{family}.nat.address")
        net = subnet(out, family)
        if nat_address and net is not None and checked.ip(nat_address) in net:
            raise NetworkError(
                f'Invalid value for network "{name}" option "ipv{family}.nat.address": '
                f"{nat_address} is inside the network's own subnet {net}"
            )
        _check_uplink_keys(name, out, family, net)
    return out


def _check_uplink_keys(name: str, config: Mapping[str, str], family: int, net: Net | None) -> None:
    """An uplink bridge's ``ipvN.ovn.ranges`` lie in its own subnet (OVN routers take them on
    the bridge's segment; the bridge's address is their gateway) and avoid that address;
    ``ipvN.routes`` lie outside the subnet. With ``auto`` the subnet is not known yet: the
    keys are checked again once it is (:func:`validate` runs after ``settle``)."""
    text_ranges = config.get(f"ipv{family}.ovn.ranges")
    text_routes = config.get(f"ipv{family}.routes")
    if text_ranges and config.get(f"ipv{family}.address", "") == "none":
        raise NetworkError(
            f'Invalid value for network "{name}" option "ipv{family}.ovn.ranges": the network '
            f"has no IPv{family} address"
        )
    listed = routes(text_routes, family) if text_routes else []
    if listed and config.get(f"ipv{family}.address", "") == "none":
        raise NetworkError(
            f'Invalid value for network "{name}" option "ipv{family}.routes": the network has '
            f"no IPv{family} address"
        )
    if len(listed) > MAX_ROUTES:
        raise NetworkError(
            f'Invalid value for network "{name}" option "ipv{family}.routes": {len(listed)} '
            f"routes, at most {MAX_ROUTES}"
        )
    for route in listed:
        if route.prefixlen == 0:
            raise NetworkError(
                f'Invalid value for network "{name}" option "ipv{family}.routes": {route} '
                "would take the node's default route"
            )
        if net is not None and route.overlaps(net):
            raise NetworkError(
                f'Invalid value for network "{name}" option "ipv{family}.routes": {route} '
                f"overlaps the network's own subnet {net}"
            )
    if net is None:
        return
    own = address(config, family)
    for first, last in ranges(text_ranges, family) if text_ranges else []:
        inside = own is not None and int(first) <= int(own.ip) <= int(last)
        if first not in net or last not in net or inside:
            raise NetworkError(
                f'Invalid value for network "{name}" option "ipv{family}.ovn.ranges": '
                f"{first}-{last} must lie in the subnet {net}, without the bridge's address"
            )


def subnet(config: Mapping[str, str], family: int) -> Net | None:
    """The network's subnet of ``family`` from ``ipvN.address`` (None: none, auto or unset)."""
    value = config.get(f"ipv{family}.address", "")
    if value in ("", "none", "auto"):
        return None
    return checked.interface(value).network


def gateway(config: Mapping[str, str], family: int) -> str | None:
    """The bridge's own address of ``family`` (plain), or None."""
    value = config.get(f"ipv{family}.address", "")
    if value in ("", "none", "auto"):
        return None
    return str(checked.interface(value).ip)


def address(config: Mapping[str, str], family: int) -> Iface | None:
    """The bridge's own address with its prefix (``ipvN.address``) as a typed value, or None
    (none, auto or unset)."""
    value = config.get(f"ipv{family}.address", "")
    if value in ("", "none", "auto"):
        return None
    return checked.interface(value)


def _free_subnet(family: int, taken: Iterable[Net], rng: Callable[[int], int]) -> str:
    taken = list(taken)
    for _ in range(256):
        if family == 4:
            n = rng(1 << 16)
            net: Net = ipaddress.IPv4Network(((10 << 24) | (n << 8), 24))
        else:
            n = rng(1 << 48)
            prefix = (0xFD42 << 112) | (n << 64)
            net = ipaddress.IPv6Network((prefix, 64))
        if not any(net.overlaps(t) for t in taken if t.version == family):
            return f"{net.network_address + 1}/{net.prefixlen}"
    raise NetworkError(f"Failed to automatically find an unused IPv{family} subnet")


def fill_defaults(config: Mapping[str, str], taken: Iterable[Net], *, create: bool = True,
                  rng: Callable[[int], int] | None = None) -> dict[str, str]:  # fmt: skip
    """Resolve ``auto`` addresses (LXD ``FillConfig``): ``ipvN.address: auto`` — and, when
    ``create``, an unset one — becomes a free subnet avoiding ``taken``, with
    ``ipvN.nat: "true"`` unless given."""
    rng = rng or (lambda n: int.from_bytes(os.urandom(8), "big") % n)
    out = dict(config)
    taken = list(taken)
    for family in (4, 6):
        key = f"ipv{family}.address"
        if out.get(key, "auto" if create else "") == "auto":
            out[key] = _free_subnet(family, taken, rng)
            taken.append(checked.interface(out[key]).network)
            out.setdefault(f"ipv{family}.nat", "true")
    return out


def addresses(config: Mapping[str, str]) -> dict[int, Iface]:
    """The bridge's own address of each family the network has (``ipvN.address`` with its
    prefix; its ``.network`` is the subnet, its ``.ip`` the pods' gateway): ``{4: …, 6: …}``."""
    out = {}
    for family in (4, 6):
        iface = address(config, family)
        if iface is not None:
            out[family] = iface
    return out
