"""Validating a network forward and expanding it into the firewall's DNAT model (pure).

Checks run in LXD's order with LXD's messages (``forwardValidate``, lxd/network/driver_common.go),
so people and scripts that know ``lxc`` see the same refusals; podnet adds what
LXD 5.0.2 lacks, with the messages later LXD versions use where they have one:

- the listen address may not be unspecified (``Cannot use unspecified address: "0.0.0.0"``),
  loopback, multicast or link-local;
- targets may not be the network or (IPv4) broadcast address of the subnet
  (``Default target address cannot be a network address`` …);
- every port is within 1-65535 (LXD accepts 0 and fails inside nft for 70000).

Everything here raises :class:`NetworkError` with the message text only; the operations layer
adds LXD's ``Failed creating forward:`` prefix and the HTTP status.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from podnet import checked
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward
from podnet.values import Dnat

__all__ = [
    "NetworkView",
    "expand",
    "parse_port_range",
    "parse_ports",
    "validate",
]

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Addr = ipaddress.IPv4Address | ipaddress.IPv6Address
PROTOCOLS = ("tcp", "udp")


@dataclass
class NetworkView:
    """What forward validation needs of a network: ``name``, ``type`` and its ``subnets`` per
    family (a bridge: the subnet of ``ipvN.address``; ptp: its ranges). A family without a
    subnet (``ipv6.address: none``) has no valid targets."""

    name: str
    type: str
    subnets: dict[int, list[Net]] = field(default_factory=dict)

    def contains(self, addr: Addr) -> Net | None:
        return next((n for n in self.subnets.get(addr.version, []) if addr in n), None)


def parse_port_range(text: str) -> tuple[int, int]:
    """``"80"`` → (80, 1), ``"8000-8010"`` → (8000, 11), as LXD's ``ParsePortRange`` (same
    messages), plus podnet's bound check: every port in 1-65535."""
    parts = text.split("-")
    if len(parts) > 2:
        raise NetworkError(f'Invalid port range "{text}"')

    def parse(word: str) -> int:
        digits = word[1:] if word[:1] in ("+", "-") else word
        if not digits or not (digits.isascii() and digits.isdigit()):
            raise NetworkError(f'strconv.ParseInt: parsing "{word}": invalid syntax')
        return int(word)

    start = parse(parts[0])
    count = 1
    if len(parts) == 2:
        end = parse(parts[1])
        if end <= start:
            raise NetworkError("End port should be higher than start port")
        count = end - start + 1
    for port in (start, start + count - 1):
        if not 1 <= port <= 65535:
            raise NetworkError(f"Port {port} is out of range (1-65535)")
    return start, count


def parse_ports(text: str) -> list[int]:
    """A comma list of ports and ranges, expanded in order (NetworkError as above)."""
    out: list[int] = []
    for item in text.split(","):
        start, count = parse_port_range(item.strip())
        out.extend(range(start, start + count))
    return out


def _address(text: str, message: str) -> Addr:
    """``text`` as an address; NetworkError ``message`` (LXD's) otherwise, with the reason
    for a scoped IPv6 address."""
    try:
        return checked.ip(text)
    except checked.ScopedAddress as err:
        raise NetworkError(f"{message}: {err}") from None
    except checked.BadValue:
        raise NetworkError(message) from None


def _special(net: Net, addr: Addr) -> str:
    """"network", "broadcast" (IPv4) or "" for an address of ``net``."""
    if net.prefixlen < net.max_prefixlen - 1:
        if addr == net.network_address:
            return "network"
        if addr.version == 4 and addr == net.broadcast_address:
            return "broadcast"
    return ""


def listen_address(text: str) -> Addr:
    """The listen address of a new forward: an IP address that traffic can be forwarded from.
    LXD's messages for a bad or unspecified address; podnet also refuses loopback, multicast
    and link-local addresses (nothing routes them to a node)."""
    try:
        addr = checked.ip(text)
    except checked.ScopedAddress as err:
        raise NetworkError(f"Failed parsing address forward listen address: {err}") from None
    except checked.BadValue:
        # LXD's message for text that is no address (so it has no family): its
        # shared.ParseIPToNet appends /128 when the text holds a colon, else /32, and Go's
        # ParseCIDR names the result
        suffix = "/128" if ":" in text else "/32"
        raise NetworkError(
            f'Failed parsing address forward listen address "{text}": '
            f"invalid CIDR address: {text}{suffix}"
        ) from None
    if addr.is_unspecified:
        raise NetworkError(f'Cannot use unspecified address: "{addr}"')
    for what, flag in (("loopback", addr.is_loopback), ("multicast", addr.is_multicast),
                       ("link-local", addr.is_link_local)):  # fmt: skip
        if flag:
            raise NetworkError(f'Cannot use {what} address: "{addr}"')
    if addr.version == 4 and addr == ipaddress.IPv4Address("255.255.255.255"):
        raise NetworkError(f'Cannot use broadcast address: "{addr}"')
    return addr


def validate(net: NetworkView, forward: Forward) -> list[Dnat]:
    """Check ``forward`` (normalised) against ``net``; its translations on success.

    The translations: one per listen port (``protocol``, ``port`` → target address and port;
    target ports empty = the listen ports, one = many-to-one), then the default target (whole
    address) if set. NetworkError (400) with LXD's message for the first problem found.
    """
    listen = listen_address(forward.listen_address)
    for key in forward.config:
        if key != "target_address" and not key.startswith("user."):
            raise NetworkError(f'Invalid option "{key}"')
    out: list[Dnat] = []
    default = None
    if forward.default_target:
        default = _address(forward.default_target, "Invalid default target address")
        if default.version != listen.version:
            raise NetworkError(
                "Cannot mix IP versions in listen address and default target address"
            )
        subnet = net.contains(default)
        if subnet is None:
            raise NetworkError("Default target address is not within the network subnet")
        special = _special(subnet, default)
        if special:
            raise NetworkError(f"Default target address cannot be a {special} address")
    seen: dict[str, set[int]] = {p: set() for p in PROTOCOLS}
    for i, spec in enumerate(forward.ports):
        if spec.protocol not in PROTOCOLS:
            raise NetworkError(
                f"Invalid port protocol in port specification {i}, protocol must be one of: "
                "tcp, udp"
            )
        target = _address(spec.target_address, f"Invalid target address in port specification {i}")
        if default is not None and target == default:
            raise NetworkError(
                f"Target address is same as default target address in port specification {i}"
            )
        if target.version != listen.version:
            raise NetworkError(
                "Cannot mix IP versions in listen address and port specification "
                f"{i} target address"
            )
        subnet = net.contains(target)
        if subnet is None:
            raise NetworkError(
                f"Target address is not within the network subnet in port specification {i}"
            )
        special = _special(subnet, target)
        if special:
            raise NetworkError(f"Target address cannot be a {special} address")
        if not spec.listen_port.strip():
            raise NetworkError(f"Missing listen port in port specification {i}")
        try:
            listen_ports = parse_ports(spec.listen_port)
        except NetworkError as err:
            raise NetworkError(f"Invalid listen port in port specification {i}: {err}") from None
        for port in listen_ports:
            if port in seen[spec.protocol]:
                raise NetworkError(
                    f'Duplicate listen port {port} for protocol "{spec.protocol}" in port '
                    f"specification {i}"
                )
            seen[spec.protocol].add(port)
        if spec.target_port.strip():
            try:
                target_ports = parse_ports(spec.target_port)
            except NetworkError:
                raise NetworkError(f"Invalid target port in port specification {i}") from None
        else:
            target_ports = list(listen_ports)
        if len(target_ports) not in (1, len(listen_ports)):
            raise NetworkError(
                "Mismatch of listen port(s) and target port(s) count in port specification "
                f"{i}"
            )
        for n, port in enumerate(listen_ports):
            to = target_ports[0] if len(target_ports) == 1 else target_ports[n]
            out.append(Dnat(listen.version, str(listen), spec.protocol, port, str(target), to))
    if default is not None:
        out.append(Dnat(listen.version, str(listen), None, None, str(default), None))
    return out


def expand(net: NetworkView, forward: Forward, owner: str) -> list[Dnat]:
    """:func:`validate` with ``owner`` set on every translation."""
    dnats = validate(net, forward)
    for d in dnats:
        d.owner = owner
    return dnats
