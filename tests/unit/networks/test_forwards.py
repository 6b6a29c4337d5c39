"""Every validation rule of network forwards (:func:`podnet.networks.forwards.validate` on a
normalised forward), each with its exact message: LXD 5.0.2's where LXD has one
(``forwardValidate`` in lxd/network/driver_common.go, and what ``lxc`` 5.0.2 printed), later
LXD's for the checks 5.0.2 lacks (unspecified listen address: 5.0.3; network/broadcast targets:
6.6), podnet's own for the rest (port bounds, loopback/multicast/link-local/broadcast listen
addresses). No root; tests/e2e/networks/test_forward_validation.py runs the same rules through
``podnetctl`` in a node namespace."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from podnet.networks.errors import NetworkError
from podnet.networks.forwards import NetworkView, validate
from podnet.networks.model import Forward, ForwardPort

# ------------------------------------------------------------------------------------------------
# Pure: forwards.validate
# ------------------------------------------------------------------------------------------------

NET = NetworkView("n1", "bridge", {4: [ipaddress.ip_network("10.0.0.0/24")],
                                   6: [ipaddress.ip_network("fd00:1::/64")]})  # fmt: skip
L4, L6 = "198.51.100.1", "2001:db8::1"


def fwd(listen: str = L4, target: str | None = None, *ports: ForwardPort,
        **config: str) -> Forward:  # fmt: skip
    cfg = dict(config)
    if target is not None:
        cfg["target_address"] = target
    return Forward(listen, config=cfg, ports=list(ports))


def port(protocol: str = "tcp", listen: str = "80", target: str = "10.0.0.3",
         target_port: str = "") -> ForwardPort:  # fmt: skip
    return ForwardPort(protocol=protocol, listen_port=listen, target_port=target_port,
                       target_address=target)  # fmt: skip


def _listen_parse(text: str) -> str:
    suffix = "/128" if ":" in text else "/32"
    return f'Failed parsing address forward listen address "{text}": invalid CIDR address: {text}{suffix}'


P0 = "in port specification 0"
LP = f"Invalid listen port {P0}: "
REFUSED: list[tuple[str, Forward, str]] = [
    # listen address
    ("listen-nonsense", fwd("nonsense"), _listen_parse("nonsense")),
    ("listen-empty", fwd(""), _listen_parse("")),
    ("listen-leading-zero", fwd("010.0.0.1"), _listen_parse("010.0.0.1")),
    ("listen-cidr32", fwd("198.51.100.5/32"), _listen_parse("198.51.100.5/32")),
    ("listen-cidr24", fwd("198.51.100.0/24"), _listen_parse("198.51.100.0/24")),
    ("listen-cidr128", fwd("2001:db8::5/128"), _listen_parse("2001:db8::5/128")),
    ("listen-unspecified4", fwd("0.0.0.0"), 'Cannot use unspecified address: "0.0.0.0"'),
    ("listen-unspecified6", fwd("::"), 'Cannot use unspecified address: "::"'),
    ("listen-unspecified6-long", fwd("0:0::0"), 'Cannot use unspecified address: "::"'),
    ("listen-loopback4", fwd("127.0.0.1"), 'Cannot use loopback address: "127.0.0.1"'),
    ("listen-loopback4-net", fwd("127.1.2.3"), 'Cannot use loopback address: "127.1.2.3"'),
    ("listen-loopback6", fwd("::1"), 'Cannot use loopback address: "::1"'),
    ("listen-loopback-mapped", fwd("::ffff:127.0.0.1"), 'Cannot use loopback address: "127.0.0.1"'),
    ("listen-multicast4", fwd("224.0.0.5"), 'Cannot use multicast address: "224.0.0.5"'),
    ("listen-multicast6", fwd("ff02::1"), 'Cannot use multicast address: "ff02::1"'),
    ("listen-link-local4", fwd("169.254.1.1"), 'Cannot use link-local address: "169.254.1.1"'),
    ("listen-link-local6", fwd("fe80::1"), 'Cannot use link-local address: "fe80::1"'),
    ("listen-broadcast", fwd("255.255.255.255"), 'Cannot use broadcast address: "255.255.255.255"'),
    # config keys
    ("key-foo", fwd(L4, None, foo="bar"), 'Invalid option "foo"'),
    ("key-foo-empty", fwd(L4, None, foo=""), 'Invalid option "foo"'),
    ("key-description", fwd(L4, None, description="hi"), 'Invalid option "description"'),
    ("key-user-no-dot", fwd(L4, None, user="x"), 'Invalid option "user"'),
    # default target
    ("default-nonsense", fwd(L4, "nonsense"), "Invalid default target address"),
    ("default-cidr", fwd(L4, "10.0.0.2/32"), "Invalid default target address"),
    ("default-leading-zero", fwd(L4, "010.0.0.2"), "Invalid default target address"),
    ("default-family-6-for-4", fwd(L4, "fd00:1::2"),
     "Cannot mix IP versions in listen address and default target address"),
    ("default-family-4-for-6", fwd(L6, "10.0.0.2"),
     "Cannot mix IP versions in listen address and default target address"),
    ("default-outside4", fwd(L4, "10.0.9.2"), "Default target address is not within the network subnet"),
    ("default-outside6", fwd(L6, "fd00:2::2"), "Default target address is not within the network subnet"),
    ("default-network4", fwd(L4, "10.0.0.0"), "Default target address cannot be a network address"),
    ("default-network6", fwd(L6, "fd00:1::"), "Default target address cannot be a network address"),
    ("default-broadcast", fwd(L4, "10.0.0.255"), "Default target address cannot be a broadcast address"),
    # port specification: protocol, target address
    ("proto-sctp", fwd(L4, None, port("sctp")),
     f"Invalid port protocol {P0}, protocol must be one of: tcp, udp"),
    ("proto-upper", fwd(L4, None, port("TCP")),
     f"Invalid port protocol {P0}, protocol must be one of: tcp, udp"),
    ("proto-empty", fwd(L4, None, port("")),
     f"Invalid port protocol {P0}, protocol must be one of: tcp, udp"),
    ("proto-index", fwd(L4, None, port(), port("icmp", "81")),
     "Invalid port protocol in port specification 1, protocol must be one of: tcp, udp"),
    ("target-nonsense", fwd(L4, None, port(target="nonsense")), f"Invalid target address {P0}"),
    ("target-leading-zero", fwd(L4, None, port(target="010.0.0.8")), f"Invalid target address {P0}"),
    ("target-empty", fwd(L4, None, port(target="")), f"Invalid target address {P0}"),
    ("target-is-default", fwd(L4, "10.0.0.2", port(target="10.0.0.2")),
     f"Target address is same as default target address {P0}"),
    ("target-is-default-mapped", fwd(L4, "10.0.0.2", port(target="::ffff:10.0.0.2")),
     f"Target address is same as default target address {P0}"),
    ("target-family", fwd(L4, None, port(target="fd00:1::5")),
     "Cannot mix IP versions in listen address and port specification 0 target address"),
    ("target-family6", fwd(L6, None, port(target="10.0.0.5")),
     "Cannot mix IP versions in listen address and port specification 0 target address"),
    ("target-outside4", fwd(L4, None, port(target="10.0.9.9")),
     f"Target address is not within the network subnet {P0}"),
    ("target-outside6", fwd(L6, None, port(target="fd00:2::9")),
     f"Target address is not within the network subnet {P0}"),
    ("target-network4", fwd(L4, None, port(target="10.0.0.0")), "Target address cannot be a network address"),
    ("target-network6", fwd(L6, None, port(target="fd00:1::")), "Target address cannot be a network address"),
    ("target-broadcast", fwd(L4, None, port(target="10.0.0.255")),
     "Target address cannot be a broadcast address"),
    # listen ports
    ("listen-port-missing", fwd(L4, None, port(listen="")), f"Missing listen port {P0}"),
    ("listen-port-blank", fwd(L4, None, port(listen="  ")), f"Missing listen port {P0}"),
    ("listen-port-abc", fwd(L4, None, port(listen="abc")),
     LP + 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ("listen-port-1-2-3", fwd(L4, None, port(listen="1-2-3")), LP + 'Invalid port range "1-2-3"'),
    ("listen-port-80-80", fwd(L4, None, port(listen="80-80")), LP + "End port should be higher than start port"),
    ("listen-port-95-93", fwd(L4, None, port(listen="95-93")), LP + "End port should be higher than start port"),
    ("listen-port-empty-item", fwd(L4, None, port(listen="110,")),
     LP + 'strconv.ParseInt: parsing "": invalid syntax'),
    ("listen-port-negative", fwd(L4, None, port(listen="-5")),
     LP + 'strconv.ParseInt: parsing "": invalid syntax'),
    ("listen-port-spaced-range", fwd(L4, None, port(listen="80 - 81")),
     LP + 'strconv.ParseInt: parsing "80 ": invalid syntax'),
    ("listen-port-0", fwd(L4, None, port(listen="0")), LP + "Port 0 is out of range (1-65535)"),
    ("listen-port-0-range", fwd(L4, None, port(listen="0-5")), LP + "Port 0 is out of range (1-65535)"),
    ("listen-port-70000", fwd(L4, None, port(listen="70000")), LP + "Port 70000 is out of range (1-65535)"),
    ("listen-port-65535-65536", fwd(L4, None, port(listen="65535-65536")),
     LP + "Port 65536 is out of range (1-65535)"),
    ("listen-port-index", fwd(L4, None, port(), port(listen="abc")),
     'Invalid listen port in port specification 1: strconv.ParseInt: parsing "abc": invalid syntax'),
    # duplicates: per protocol, across all specifications
    ("dup-in-spec", fwd(L4, None, port(listen="80,80")),
     f'Duplicate listen port 80 for protocol "tcp" {P0}'),
    ("dup-in-spec-range", fwd(L4, None, port(listen="107,107-108")),
     f'Duplicate listen port 107 for protocol "tcp" {P0}'),
    ("dup-in-spec-overlap", fwd(L4, None, port(listen="80-82,81")),
     f'Duplicate listen port 81 for protocol "tcp" {P0}'),
    ("dup-across-specs", fwd(L4, None, port(listen="80-81"), port(listen="81", target="10.0.0.4")),
     'Duplicate listen port 81 for protocol "tcp" in port specification 1'),
    ("dup-across-specs-udp", fwd(L4, None, port("udp", "53"), port("tcp", "53"), port("udp", "50-60")),
     'Duplicate listen port 53 for protocol "udp" in port specification 2'),
    # target ports
    ("target-port-abc", fwd(L4, None, port(target_port="abc")), f"Invalid target port {P0}"),
    ("target-port-0", fwd(L4, None, port(target_port="0")), f"Invalid target port {P0}"),
    ("target-port-70000", fwd(L4, None, port(target_port="70000")), f"Invalid target port {P0}"),
    ("target-port-1-2-3", fwd(L4, None, port(target_port="1-2-3")), f"Invalid target port {P0}"),
    ("target-port-90-90", fwd(L4, None, port(target_port="90-90")), f"Invalid target port {P0}"),
    ("target-port-65535-65536", fwd(L4, None, port(listen="80-81", target_port="65535-65536")),
     f"Invalid target port {P0}"),
    ("count-1-to-2", fwd(L4, None, port(listen="80", target_port="80-81")),
     f"Mismatch of listen port(s) and target port(s) count {P0}"),
    ("count-3-to-2", fwd(L4, None, port(listen="82,83,84", target_port="90,91")),
     f"Mismatch of listen port(s) and target port(s) count {P0}"),
    ("count-index", fwd(L4, None, port(), port(listen="1-3", target_port="5-6")),
     "Mismatch of listen port(s) and target port(s) count in port specification 1"),
]


@pytest.mark.parametrize(("forward", "message"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])  # fmt: skip
def test_forward_refused(forward: Forward, message: str) -> None:
    with pytest.raises(NetworkError) as caught:
        validate(NET, forward.normalised())
    assert str(caught.value) == message
    assert caught.value.status == 400


def test_family_without_subnet_has_no_targets() -> None:
    """``ipv6.address: none``: no IPv6 target is inside the network (LXD 5.0.2 answers
    ``invalid CIDR address: none`` here)."""
    v4_only = NetworkView("n3", "bridge", {4: [ipaddress.ip_network("10.0.3.0/24")], 6: []})
    with pytest.raises(NetworkError) as caught:
        validate(v4_only, fwd(L6, "fd00:3::2").normalised())
    assert str(caught.value) == "Default target address is not within the network subnet"
    with pytest.raises(NetworkError) as caught:
        validate(v4_only, fwd(L6, None, port(target="fd00:3::3")).normalised())
    assert str(caught.value) == f"Target address is not within the network subnet {P0}"
    assert validate(v4_only, fwd(L6).normalised()) == []  # nothing to translate is fine


def dnats(forward: Forward) -> list[tuple[Any, ...]]:
    return [(d.family, d.listen, d.protocol, d.port, d.target, d.target_port)
            for d in validate(NET, forward.normalised())]  # fmt: skip


ACCEPTED: list[tuple[str, Forward, list[tuple[Any, ...]]]] = [
    ("nothing", fwd(L4), []),
    ("whole", fwd(L4, "10.0.0.2"), [(4, L4, None, None, "10.0.0.2", None)]),
    ("user-keys", fwd(L4, "10.0.0.2", **{"user.a": "1", "user.b": ""}),
     [(4, L4, None, None, "10.0.0.2", None)]),
    ("range-same-ports", fwd(L4, "10.0.0.2", port(listen="80-81")),
     [(4, L4, "tcp", 80, "10.0.0.3", 80), (4, L4, "tcp", 81, "10.0.0.3", 81),
      (4, L4, None, None, "10.0.0.2", None)]),
    ("many-to-one", fwd(L4, None, port(listen="9000-9002", target="10.0.0.5", target_port="9000")),
     [(4, L4, "tcp", 9000, "10.0.0.5", 9000), (4, L4, "tcp", 9001, "10.0.0.5", 9000),
      (4, L4, "tcp", 9002, "10.0.0.5", 9000)]),
    ("same-count", fwd(L4, None, port(listen="82-83,84", target_port="90,91-92")),
     [(4, L4, "tcp", 82, "10.0.0.3", 90), (4, L4, "tcp", 83, "10.0.0.3", 91),
      (4, L4, "tcp", 84, "10.0.0.3", 92)]),
    ("tcp-and-udp-same-port", fwd(L4, None, port("tcp", "80"), port("udp", "80", target_port="90")),
     [(4, L4, "tcp", 80, "10.0.0.3", 80), (4, L4, "udp", 80, "10.0.0.3", 90)]),
    ("port-bounds", fwd(L4, None, port(listen="1,65534-65535", target_port="1,65534-65535")),
     [(4, L4, "tcp", 1, "10.0.0.3", 1), (4, L4, "tcp", 65534, "10.0.0.3", 65534),
      (4, L4, "tcp", 65535, "10.0.0.3", 65535)]),
    ("spaces-trimmed", fwd(L4, None, port(" udp ", " 99 , 100 ", " 10.0.0.8", " 199 , 200 ")),
     [(4, L4, "udp", 99, "10.0.0.8", 199), (4, L4, "udp", 100, "10.0.0.8", 200)]),
    ("gateway-target", fwd(L4, "10.0.0.1"), [(4, L4, None, None, "10.0.0.1", None)]),
    ("mapped-addresses", fwd("::ffff:198.51.100.9", "::ffff:10.0.0.2"),
     [(4, "198.51.100.9", None, None, "10.0.0.2", None)]),
    ("ipv6", fwd("2001:DB8:0::1", "fd00:1:0::2", port("tcp", "443", "FD00:1::3", "8443"),
                 port("udp", "53", "fd00:1::3")),
     [(6, L6, "tcp", 443, "fd00:1::3", 8443), (6, L6, "udp", 53, "fd00:1::3", 53),
      (6, L6, None, None, "fd00:1::2", None)]),
    ("ipv6-last-address", fwd(L6, "fd00:1::ffff:ffff:ffff:ffff"),
     [(6, L6, None, None, "fd00:1::ffff:ffff:ffff:ffff", None)]),
]


@pytest.mark.parametrize(("forward", "expected"), [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])  # fmt: skip
def test_forward_accepted(forward: Forward, expected: list[tuple[Any, ...]]) -> None:
    assert dnats(forward) == expected
