"""Every validation rule of network forwards (issue 8 item 3) and of bridge network config (item 1),
each with its exact message: LXD 5.0.2's where LXD has one (``forwardValidate`` in
lxd/network/driver_common.go, the bridge driver's ``Validate``, and what ``lxc`` 5.0.2 printed
here; FIELD-NOTES §6, §6a), later LXD's for the checks 5.0.2 lacks (unspecified listen address:
5.0.3; network/broadcast targets: 6.6), podnet's own for the rest (port bounds,
loopback/multicast/link-local/broadcast listen addresses, subnet overlaps, hostPort clashes).

- Pure cases (no root): :func:`podnet.networks.forwards.validate` on a normalised forward, and
  :func:`podnet.networks.config.validate` / :func:`~podnet.networks.config.check_name`.
- Root cases: ``podnetctl network …`` in a node namespace, ``Error: <message>`` on stderr and exit
  1; every refusal leaves the database (``network list`` / ``forward list -f json``), the node's
  bridges and table ``inet podnet`` exactly as they were.
"""

from __future__ import annotations

import ipaddress
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import VENV_BIN, Lab
from podnet.networks import config as netconfig
from podnet.networks.errors import NetworkError
from podnet.networks.forwards import NetworkView, validate
from podnet.networks.model import Forward, ForwardPort

PODNETCTL = str(VENV_BIN / "podnetctl")

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


# ------------------------------------------------------------------------------------------------
# Pure: bridge network config and names
# ------------------------------------------------------------------------------------------------

NAMES = [
    ("", "Network interface is too short (minimum 2 characters)"),
    ("a", "Network interface is too short (minimum 2 characters)"),
    ("averyveryverylongnetworkname", "Network interface is too long (maximum 15 characters)"),
    ("sixteen-chars-xx", "Network interface is too long (maximum 15 characters)"),
    ("bad name", "Network interface contains invalid characters"),
    ("bad/name", "Network interface contains invalid characters"),
    ("a:b", "Network interface contains invalid characters"),
    ("né", "Network interface contains invalid characters"),
]


@pytest.mark.parametrize(("name", "message"), NAMES, ids=[repr(n) for n, _ in NAMES])
def test_network_name_refused(name: str, message: str) -> None:
    with pytest.raises(NetworkError) as caught:
        netconfig.check_name(name)
    assert str(caught.value) == message
    assert caught.value.status == 400


@pytest.mark.parametrize("name", ["n1", "br-0_x.y", "fifteen-chars-x"])
def test_network_name_accepted(name: str) -> None:
    netconfig.check_name(name)


def _bad(key: str, reason: str) -> str:
    return f'Invalid value for network "n" option "{key}": {reason}'


CONFIG_REFUSED: list[tuple[str, dict[str, str], str]] = [
    ("unknown", {"foo": "bar"}, 'Invalid option for network "n" option "foo"'),
    ("unknown-empty-value", {"foo": ""}, 'Invalid option for network "n" option "foo"'),
    ("empty-key", {"": "value"}, 'Invalid option for network "n" option ""'),
    ("unimplemented-lxd-key", {"ipv4.dhcp": "false"}, 'Invalid option for network "n" option "ipv4.dhcp"'),
    ("v4-nonsense", {"ipv4.address": "nonsense"}, _bad("ipv4.address", "invalid CIDR address: nonsense")),
    ("v4-no-prefix", {"ipv4.address": "10.0.0.1"}, _bad("ipv4.address", "invalid CIDR address: 10.0.0.1")),
    ("v4-prefix-33", {"ipv4.address": "10.0.0.1/33"}, _bad("ipv4.address", "invalid CIDR address: 10.0.0.1/33")),
    ("v4-network", {"ipv4.address": "10.0.4.0/24"}, _bad("ipv4.address", 'Not a usable IPv4 address "10.0.4.0/24"')),
    ("v4-family", {"ipv4.address": "fd00::1/64"}, _bad("ipv4.address", 'Not an IPv4 address "fd00::1/64"')),
    ("v4-slash31", {"ipv4.address": "10.0.3.1/31"},
     _bad("ipv4.address", 'Subnet too small for a network "10.0.3.1/31" (at most /30)')),
    ("v6-nonsense", {"ipv6.address": "nonsense"}, _bad("ipv6.address", "invalid CIDR address: nonsense")),
    ("v6-network", {"ipv6.address": "fd00:1::/64"}, _bad("ipv6.address", 'Not a usable IPv6 address "fd00:1::/64"')),
    ("v6-family", {"ipv6.address": "10.0.0.1/24"}, _bad("ipv6.address", 'Not an IPv6 address "10.0.0.1/24"')),
    ("v6-slash127", {"ipv6.address": "fd00:1::1/127"},
     _bad("ipv6.address", 'Subnet too small for a network "fd00:1::1/127" (at most /126)')),
    # round-3 review: a bridge subnet is node-wide like a range (inside it is "internal" to
    # every pod's egress masquerade), so the same classes are refused
    *[(f"subnet-{what}", {f"ipv{v}.address": value}, _bad(f"ipv{v}.address",
       f"{net} is {article} range: pod ranges are private (RFC 1918, 100.64.0.0/10, fc00::/7, …), "
       "since every range is internal to every pod's egress NAT"))
      for what, v, value, net, article in (
          ("public", 4, "8.8.8.1/24", "8.8.8.0/24", "a public"),
          ("half-internet", 4, "128.0.0.1/1", "128.0.0.0/1", "a public"),
          ("link-local", 4, "169.254.9.1/24", "169.254.9.0/24", "a link-local"),
          ("loopback", 4, "127.1.0.1/16", "127.1.0.0/16", "a loopback"),
          ("public-v6", 6, "2001:4860::1/64", "2001:4860::/64", "a public"),
          ("link-local-v6", 6, "fe80:1::1/64", "fe80:1::/64", "a link-local"),
          # round 4: public IPv6 that Python 3.11's is_global lets through
          ("6to4", 6, "2002:808:808::1/64", "2002:808:808::/64", "a public"),
          ("v4-mapped", 6, "::ffff:808:801/120", "::ffff:808:800/120", "a public"),
          ("teredo", 6, "2001:0:808:808::1/64", "2001:0:808:808::/64", "a public"))],
    ("subnet-broadcast", {"ipv4.address": "255.255.255.253/30"}, _bad("ipv4.address",
     "255.255.255.252/30 holds the limited broadcast address 255.255.255.255: not a pod range")),
    ("nat-maybe", {"ipv4.nat": "maybe"}, _bad("ipv4.nat", 'Invalid value for a boolean "maybe"')),
    ("nat6-2", {"ipv6.nat": "2"}, _bad("ipv6.nat", 'Invalid value for a boolean "2"')),
    ("mtu-abc", {"bridge.mtu": "abc"}, _bad("bridge.mtu", 'Invalid MTU "abc"')),
    ("mtu-negative", {"bridge.mtu": "-1"}, _bad("bridge.mtu", 'Invalid MTU "-1"')),
    ("mtu-low", {"bridge.mtu": "1279"}, _bad("bridge.mtu", 'Out of MTU range (1280-16384) "1279"')),
    ("mtu-high", {"bridge.mtu": "16385"}, _bad("bridge.mtu", 'Out of MTU range (1280-16384) "16385"')),
    ("nat-address-nonsense", {"ipv4.nat.address": "nonsense"},
     _bad("ipv4.nat.address", 'Not an IPv4 address "nonsense"')),
    ("nat-address-cidr", {"ipv4.nat.address": "10.0.4.1/24"},
     _bad("ipv4.nat.address", 'Not an IPv4 address "10.0.4.1/24"')),
    ("nat-address-family", {"ipv4.nat.address": "fd00::1"},
     _bad("ipv4.nat.address", 'Not an IPv4 address "fd00::1"')),
    ("nat6-address-family", {"ipv6.nat.address": "10.0.0.1"},
     _bad("ipv6.nat.address", 'Not an IPv6 address "10.0.0.1"')),
    ("nat-address-own-subnet", {"ipv4.address": "10.0.3.1/24", "ipv4.nat.address": "10.0.3.9"},
     _bad("ipv4.nat.address", "10.0.3.9 is inside the network's own subnet 10.0.3.0/24")),
]


@pytest.mark.parametrize(("config", "message"), [c[1:] for c in CONFIG_REFUSED],
                         ids=[c[0] for c in CONFIG_REFUSED])  # fmt: skip
def test_network_config_refused(config: dict[str, str], message: str) -> None:
    with pytest.raises(NetworkError) as caught:
        netconfig.validate("n", config)
    assert str(caught.value) == message
    assert caught.value.status == 400


def test_network_config_accepted() -> None:
    config = {"ipv4.address": "10.0.0.1/24", "ipv6.address": "none", "ipv4.nat": "TRUE",
              "ipv6.nat": "off", "bridge.mtu": "1400", "ipv4.nat.address": "198.51.100.200",
              "user.x": "y", "user.e": "", "ipv6.nat.address": ""}  # fmt: skip
    assert netconfig.validate("n", config) == {
        "bridge.mtu": "1400", "ipv4.address": "10.0.0.1/24", "ipv4.nat": "TRUE",
        "ipv4.nat.address": "198.51.100.200", "ipv6.address": "none", "ipv6.nat": "off",
        "user.x": "y",
    }  # fmt: skip
    assert netconfig.validate("n", {"ipv4.address": "auto", "ipv6.address": "fd00:1::1/64",
                                    "bridge.mtu": "1280"}) == {  # fmt: skip
        "bridge.mtu": "1280", "ipv4.address": "auto", "ipv6.address": "fd00:1::1/64",
    }


# ------------------------------------------------------------------------------------------------
# Root: podnetctl network … in a node namespace
# ------------------------------------------------------------------------------------------------

N1 = ("n1", "ipv4.address=10.0.0.1/24", "ipv6.address=fd00:1::1/64")
N2 = ("n2", "ipv4.address=10.0.1.1/24", "ipv6.address=fd00:2::1/64", "ipv4.nat=true",
      "ipv4.nat.address=198.51.100.200")  # fmt: skip
# Forwards every refusal case starts from (on n1).
SETUP: list[tuple[str, ...]] = [
    ("create", *N1),
    ("create", *N2),
    ("forward", "create", "n1", "198.51.100.1", "target_address=10.0.0.2"),
    ("forward", "port", "add", "n1", "198.51.100.1", "tcp", "80-81", "10.0.0.3"),
    ("forward", "port", "add", "n1", "198.51.100.1", "tcp", "90", "10.0.0.4"),
    ("forward", "port", "add", "n1", "198.51.100.1", "udp", "53", "10.0.0.3"),
    ("forward", "create", "n1", "2001:db8::1", "target_address=fd00:1::2"),
]


def _strip_handles(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_handles(v) for k, v in value.items() if k != "handle"}
    if isinstance(value, list):
        return [_strip_handles(v) for v in value]
    return value


class Node:
    """A node namespace with its own data dir: ``ctl(…)`` runs ``podnetctl network …`` there;
    ``state()`` is what a refusal must not change."""

    def __init__(self, lab: Lab, data_dir: Path) -> None:
        self.lab = lab
        self.data_dir = data_dir
        self.last: dict[str, Any] | None = None  # state() after the last refusal

    def argv(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.lab.node, PODNETCTL, "network", "--data-dir",
                str(self.data_dir), "--init", *args]  # fmt: skip

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, input="",
                              timeout=60)  # fmt: skip

    def must(self, *args: str) -> str:
        self.last = None
        proc = self.ctl(*args)
        assert proc.returncode == 0, f"network {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def state(self, names: list[str] | None = None) -> dict[str, Any]:
        """Networks, the forwards of each network in ``names`` (default: all), the node's
        bridges and veths, table inet podnet (without handles), and the store's rows of pods,
        hostPorts, forwards and their translations — read side by side."""
        ns = ["ip", "netns", "exec", self.lab.node]
        if names is None:
            listed = self.ctl("list", "-f", "json")
            assert listed.returncode == 0, listed.stderr
            names = [n["name"] for n in json.loads(listed.stdout)]
        cmds: dict[str, list[str]] = {
            "networks": self.argv("list", "-f", "json"),
            "bridges": [*ns, "ip", "-j", "link", "show", "type", "bridge"],
            "veths": [*ns, "ip", "-j", "link", "show", "type", "veth"],
            "nft": [*ns, "nft", "-j", "list", "table", "inet", "podnet"],
        }
        for name in names:
            cmds[f"forwards {name}"] = self.argv("forward", "list", name, "-f", "json")
        procs = {k: subprocess.Popen(v, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k, v in cmds.items()}  # fmt: skip
        out: dict[str, Any] = {}
        for key, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=60)
            if key == "nft" and proc.returncode != 0:
                out[key] = None  # no table
                continue
            assert proc.returncode == 0, f"{key}: {stderr}"
            data = json.loads(stdout or "[]")
            if key in ("bridges", "veths"):
                data = sorted((link["ifname"], link.get("mtu")) for link in data)
            out[key] = _strip_handles(data)
        db = self.data_dir / "podnet.db"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            for table in ("pods", "portmap_entries", "networks_forwards", "forward_dnats"):
                out[f"db {table}"] = sorted(map(repr, conn.execute(f"SELECT * FROM {table}")))
        return out

    def refuse(self, args: tuple[str, ...], message: str, *, prefix: bool = False) -> None:
        """``network <args>`` fails with ``Error: <message>`` and changes nothing."""
        before = self.last or self.state()
        proc = self.ctl(*args)
        after = self.state([n["name"] for n in before["networks"]])
        self.last = after
        shown = f"network {' '.join(args)}"
        assert proc.returncode == 1, f"{shown}: exit {proc.returncode}, {proc.stdout}{proc.stderr}"
        assert proc.stdout == "", f"{shown}: {proc.stdout!r}"
        if prefix:
            assert proc.stderr.startswith(f"Error: {message}"), f"{shown}: {proc.stderr!r}"
        else:
            assert proc.stderr == f"Error: {message}\n", f"{shown}: {proc.stderr!r}"
        changed = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
        assert not changed, f"{shown} was refused but changed {changed}"


def _setup(lab: Lab, data_dir: Path) -> Node:
    node = Node(lab, data_dir)
    for args in SETUP:
        node.must(*args)
    return node


class Shared:
    """The module's node: ``node`` (with ``SETUP`` done) in ``lab``; ``fresh()`` replaces both."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.lab: Lab | None = None
        self._node: Node | None = None

    @property
    def node(self) -> Node:
        if self._node is None:
            self.fresh()
        assert self._node is not None
        return self._node

    def fresh(self) -> None:
        self.close()
        self.lab = Lab()
        self._node = _setup(self.lab, self.factory.mktemp("podnet"))

    def close(self) -> None:
        if self.lab is not None:
            self.lab.close()
            self.lab = None
            self._node = None


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """One node namespace with n1/n2 and their forwards (``SETUP``) for all refusal cases: a
    refusal changes nothing, so they can share it (a case that did change something, or failed
    otherwise, has the next one start on a fresh node). Torn down like the ``lab`` fixture."""
    need("root", "ip", "nft")
    shared = Shared(tmp_path_factory)
    try:
        yield shared
    finally:
        shared.close()


F = ("forward",)
NF = "Network forward not found"
FC, FU = "Failed creating forward: ", "Failed updating forward: "


def _overlap(addr: str, holder: str = "") -> str:
    suffix = "/128" if ":" in addr else "/32"
    text = f'{FC}Forward listen address "{addr}{suffix}" overlaps with another network or NIC'
    return f"{text} ({holder})" if holder else text


CLI_REFUSED: list[tuple[str, tuple[str, ...], str]] = [
    # one forward per listen address
    ("dup-same-network", (*F, "create", "n1", "198.51.100.1"),
     FC + "A forward for that listen address already exists"),
    ("dup-same-network-with-config", (*F, "create", "n1", "198.51.100.1", "target_address=10.0.0.9"),
     FC + "A forward for that listen address already exists"),
    ("dup-same-network-mapped-spelling", (*F, "create", "n1", "::ffff:198.51.100.1"),
     FC + "A forward for that listen address already exists"),
    ("dup-same-network-v6-spelling", (*F, "create", "n1", "2001:DB8:0::0001"),
     FC + "A forward for that listen address already exists"),
    ("dup-other-network", (*F, "create", "n2", "198.51.100.1"), _overlap("198.51.100.1")),
    ("dup-other-network-v6", (*F, "create", "n2", "2001:db8::1"), _overlap("2001:db8::1")),
    # not inside any network's subnet
    ("in-own-subnet", (*F, "create", "n1", "10.0.0.50"),
     _overlap("10.0.0.50", 'network "n1" holds 10.0.0.0/24')),
    ("own-gateway", (*F, "create", "n1", "10.0.0.1"),
     _overlap("10.0.0.1", 'network "n1" holds 10.0.0.0/24')),
    ("own-gateway-v6", (*F, "create", "n1", "fd00:1::1"),
     _overlap("fd00:1::1", 'network "n1" holds fd00:1::/64')),
    ("in-own-subnet-v6", (*F, "create", "n1", "fd00:1::50"),
     _overlap("fd00:1::50", 'network "n1" holds fd00:1::/64')),
    ("in-other-subnet", (*F, "create", "n1", "10.0.1.50"),
     _overlap("10.0.1.50", 'network "n2" holds 10.0.1.0/24')),
    ("other-gateway", (*F, "create", "n1", "10.0.1.1"),
     _overlap("10.0.1.1", 'network "n2" holds 10.0.1.0/24')),
    ("in-other-subnet-v6", (*F, "create", "n1", "fd00:2::7"),
     _overlap("fd00:2::7", 'network "n2" holds fd00:2::/64')),
    ("in-nat-subnet-from-other", (*F, "create", "n2", "10.0.0.7"),
     _overlap("10.0.0.7", 'network "n1" holds 10.0.0.0/24')),
    # listen address and config through the CLI
    ("unspecified", (*F, "create", "n1", "0.0.0.0"), FC + 'Cannot use unspecified address: "0.0.0.0"'),
    ("unspecified-v6", (*F, "create", "n1", "::"), FC + 'Cannot use unspecified address: "::"'),
    ("listen-cidr", (*F, "create", "n1", "198.51.100.5/32"), FC + _listen_parse("198.51.100.5/32")),
    ("create-bad-key", (*F, "create", "n1", "198.51.100.4", "foo=bar"), FC + 'Invalid option "foo"'),
    ("create-description-key", (*F, "create", "n1", "198.51.100.4", "description=hi"),
     FC + 'Invalid option "description"'),
    ("create-broadcast-target", (*F, "create", "n1", "198.51.100.4", "target_address=10.0.0.255"),
     FC + "Default target address cannot be a broadcast address"),
    ("create-no-equals", (*F, "create", "n1", "198.51.100.4", "user.a"), "Bad key/value pair: user.a"),
    ("create-no-equals-last", (*F, "create", "n1", "198.51.100.4", "target_address=10.0.0.2",
                               "target_address"), "Bad key/value pair: target_address"),
    # unknown network / forward
    ("net-unknown-create", (*F, "create", "n9", "198.51.100.7"), "Failed loading network: Network not found"),
    ("net-unknown-list", (*F, "list", "n9"), "Failed loading network: Network not found"),
    ("net-unknown-show", (*F, "show", "n9", "198.51.100.1"), "Failed loading network: Network not found"),
    ("net-unknown-get", (*F, "get", "n9", "198.51.100.1", "target_address"),
     "Failed loading network: Network not found"),
    ("net-unknown-delete", (*F, "delete", "n9", "198.51.100.1"), "Failed loading network: Network not found"),
    ("net-unknown-port-add", (*F, "port", "add", "n9", "198.51.100.1", "tcp", "80", "10.0.0.3"),
     "Failed loading network: Network not found"),
    ("fwd-unknown-show", (*F, "show", "n1", "198.51.100.9"), NF),
    ("fwd-unknown-show-other-network", (*F, "show", "n2", "198.51.100.1"), NF),
    ("fwd-unknown-get", (*F, "get", "n1", "198.51.100.9", "target_address"), NF),
    ("fwd-unknown-delete", (*F, "delete", "n1", "198.51.100.9"), "Failed deleting forward: " + NF),
    # lxc GETs the forward before set/unset/port add/port remove, so LXD 5.0.2 prints the bare
    # "Network forward not found" for these, as for show and get.
    ("fwd-unknown-set", (*F, "set", "n1", "198.51.100.77", "user.a=1"), NF),
    ("fwd-unknown-unset", (*F, "unset", "n1", "198.51.100.77", "user.a"), NF),
    ("fwd-unknown-port-add", (*F, "port", "add", "n1", "198.51.100.77", "tcp", "80", "10.0.0.9"), NF),
    ("fwd-unknown-port-remove", (*F, "port", "remove", "n1", "198.51.100.77", "tcp"), NF),
    # port remove: exact string match on protocol and listen ports
    ("remove-no-match-in-range", (*F, "port", "remove", "n1", "198.51.100.1", "tcp", "80"),
     "No matching port(s) found"),
    ("remove-no-match-81", (*F, "port", "remove", "n1", "198.51.100.1", "tcp", "81"),
     "No matching port(s) found"),
    ("remove-no-match-upper", (*F, "port", "remove", "n1", "198.51.100.1", "TCP", "80-81"),
     "No matching port(s) found"),
    ("remove-no-match-proto", (*F, "port", "remove", "n1", "198.51.100.1", "sctp"),
     "No matching port(s) found"),
    ("remove-no-match-wrong-proto", (*F, "port", "remove", "n1", "198.51.100.1", "udp", "80-81"),
     "No matching port(s) found"),
    ("remove-no-ports", (*F, "port", "remove", "n1", "2001:db8::1"), "No matching port(s) found"),
    ("remove-no-ports-force", (*F, "port", "remove", "n1", "2001:db8::1", "--force"),
     "No matching port(s) found"),
    ("remove-multiple-proto", (*F, "port", "remove", "n1", "198.51.100.1", "tcp"),
     "Multiple ports match. Use --force to remove them all"),
    ("remove-multiple-all", (*F, "port", "remove", "n1", "198.51.100.1"),
     "Multiple ports match. Use --force to remove them all"),
    # set / unset / get
    ("set-pairs-without-equals", (*F, "set", "n1", "198.51.100.1", "user.e", "5", "user.f", "6"),
     "Invalid key=value configuration: user.e"),
    ("set-key-alone", (*F, "set", "n1", "198.51.100.1", "user.g"), "Invalid key=value configuration: user.g"),
    ("set-bad-key", (*F, "set", "n1", "198.51.100.1", "foo=bar"), FU + 'Invalid option "foo"'),
    ("set-bad-key-kv-form", (*F, "set", "n1", "198.51.100.1", "foo", "bar"), FU + 'Invalid option "foo"'),
    ("set-description", (*F, "set", "n1", "198.51.100.1", "description=hello"),
     FU + 'Invalid option "description"'),
    ("set-target-outside", (*F, "set", "n1", "198.51.100.1", "target_address=10.0.9.9"),
     FU + "Default target address is not within the network subnet"),
    ("set-target-kv-form-invalid", (*F, "set", "n1", "198.51.100.1", "target_address", "010.0.0.3"),
     FU + "Invalid default target address"),
    ("set-target-equal-port-target", (*F, "set", "n1", "198.51.100.1", "target_address=10.0.0.3"),
     FU + "Target address is same as default target address in port specification 0"),
    ("unset-bad-key", (*F, "unset", "n1", "198.51.100.1", "foo"), FU + 'Invalid option "foo"'),
    ("get-bad-key", (*F, "get", "n1", "198.51.100.1", "foo"), 'Invalid option "foo"'),
    ("get-description", (*F, "get", "n1", "198.51.100.1", "description"), 'Invalid option "description"'),
    # port add (the new specification is number 3)
    ("add-dup", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "81", "10.0.0.9"),
     FU + 'Duplicate listen port 81 for protocol "tcp" in port specification 3'),
    ("add-dup-range", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "85-95", "10.0.0.9"),
     FU + 'Duplicate listen port 90 for protocol "tcp" in port specification 3'),
    ("add-target-default", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "10.0.0.2"),
     FU + "Target address is same as default target address in port specification 3"),
    ("add-port-70000", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "70000", "10.0.0.8"),
     FU + "Invalid listen port in port specification 3: Port 70000 is out of range (1-65535)"),
    ("add-port-0", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "0", "10.0.0.8"),
     FU + "Invalid listen port in port specification 3: Port 0 is out of range (1-65535)"),
    ("add-target-port-abc", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "96", "10.0.0.8", "abc"),
     FU + "Invalid target port in port specification 3"),
    ("add-target-port-70000", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "98", "10.0.0.8", "70000"),
     FU + "Invalid target port in port specification 3"),
    ("add-proto-upper", (*F, "port", "add", "n1", "198.51.100.1", "TCP", "100", "10.0.0.8"),
     FU + "Invalid port protocol in port specification 3, protocol must be one of: tcp, udp"),
    ("add-mismatch", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "10.0.0.8", "100-101"),
     FU + "Mismatch of listen port(s) and target port(s) count in port specification 3"),
    ("add-target-family", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "fd00:1::5"),
     FU + "Cannot mix IP versions in listen address and port specification 3 target address"),
    ("add-target-network", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "10.0.0.0"),
     FU + "Target address cannot be a network address"),
    ("add-v6-target-outside", (*F, "port", "add", "n1", "2001:db8::1", "tcp", "80", "fd00:2::3"),
     FU + "Target address is not within the network subnet in port specification 0"),
    # networks
    ("net-exists", ("create", "n1"), "The network already exists"),
    ("net-exists-with-config", ("create", "n1", "ipv4.address=10.0.5.1/24"), "The network already exists"),
    ("net-bad-key", ("create", "n3", "foo=bar"), 'Invalid option for network "n3" option "foo"'),
    ("net-empty-key", ("create", "n3", "=value"), 'Invalid option for network "n3" option ""'),
    ("net-no-equals", ("create", "n3", "key"), "Bad key/value pair: key"),
    ("net-bool", ("create", "n3", "ipv4.nat=maybe"),
     'Invalid value for network "n3" option "ipv4.nat": Invalid value for a boolean "maybe"'),
    ("net-mtu-abc", ("create", "n3", "bridge.mtu=abc"), 'Invalid value for network "n3" option "bridge.mtu": Invalid MTU "abc"'),
    ("net-mtu-low", ("create", "n3", "bridge.mtu=1000"),
     'Invalid value for network "n3" option "bridge.mtu": Out of MTU range (1280-16384) "1000"'),
    ("net-nat-address", ("create", "n3", "ipv4.nat.address=nonsense"),
     'Invalid value for network "n3" option "ipv4.nat.address": Not an IPv4 address "nonsense"'),
    ("net-nat-address-cidr", ("create", "n3", "ipv4.nat.address=10.0.4.1/24"),
     'Invalid value for network "n3" option "ipv4.nat.address": Not an IPv4 address "10.0.4.1/24"'),
    ("net-address-nonsense", ("create", "n3", "ipv4.address=nonsense"),
     'Invalid value for network "n3" option "ipv4.address": invalid CIDR address: nonsense'),
    ("net-address-network", ("create", "n3", "ipv4.address=10.0.4.0/24"),
     'Invalid value for network "n3" option "ipv4.address": Not a usable IPv4 address "10.0.4.0/24"'),
    ("net-address-overlap", ("create", "n3", "ipv4.address=10.0.0.5/24", "ipv6.address=none"),
     'Invalid value for network "n3" option "ipv4.address": subnet 10.0.0.0/24 overlaps network "n1"'),
    ("net-address-overlap-v6", ("create", "n3", "ipv4.address=10.0.3.1/24", "ipv6.address=fd00:2::5/64"),
     'Invalid value for network "n3" option "ipv6.address": subnet fd00:2::/64 overlaps network "n2"'),
    ("net-type", ("create", "n3", "--type", "foo"), "Unknown driver"),
    ("net-name-short", ("create", "a"), "Network interface is too short (minimum 2 characters)"),
    ("net-name-long", ("create", "averyveryverylongnetworkname"),
     "Network interface is too long (maximum 15 characters)"),
    ("net-name-space", ("create", "bad name"), "Network interface contains invalid characters"),
    ("net-name-slash", ("create", "bad/name"), "Network interface contains invalid characters"),
    ("net-set-bool-kv-form", ("set", "n1", "ipv4.nat", "maybe"),
     'Invalid value for network "n1" option "ipv4.nat": Invalid value for a boolean "maybe"'),
    ("net-set-mtu", ("set", "n1", "bridge.mtu=20000"),
     'Invalid value for network "n1" option "bridge.mtu": Out of MTU range (1280-16384) "20000"'),
    ("net-set-pairs-without-equals", ("set", "n1", "user.e", "5", "user.f", "6"),
     "Invalid key=value configuration: user.e"),
    ("net-unset-bad-key", ("unset", "n1", "foo"), 'Invalid option for network "n1" option "foo"'),
    ("net-unknown-get", ("get", "nx", "foo"), "Network not found"),
    ("net-unknown-show", ("show", "nx"), "Network not found"),
    ("net-unknown-set", ("set", "nx", "user.a=1"), "Network not found"),
    ("net-unknown-unset", ("unset", "nx", "user.a"), "Network not found"),
    ("net-unknown-delete", ("delete", "nx"), "Failed loading network: Network not found"),
]


@pytest.mark.root
@pytest.mark.parametrize(("args", "message"), [c[1:] for c in CLI_REFUSED],
                         ids=[c[0] for c in CLI_REFUSED])  # fmt: skip
def test_cli_refused(shared_node: Shared, args: tuple[str, ...], message: str) -> None:
    try:
        shared_node.node.refuse(args, message)
    except BaseException:
        shared_node.close()  # the next case starts from SETUP again
        raise


@pytest.mark.root
def test_cli_refused_other_networks_nat_address(shared_node: Shared) -> None:
    """A listen address may not be another network's SNAT address (FIELD-NOTES §6; LXD counts
    ``ipvN.nat.address`` as an external subnet: ``Forward listen address "…/32" overlaps with
    another network or NIC``). Only LXD's text is required here; podnet may add the holder."""
    try:
        shared_node.node.refuse((*F, "create", "n1", "198.51.100.200"), _overlap("198.51.100.200"),
                                prefix=True)  # fmt: skip
    except BaseException:
        shared_node.close()
        raise


@pytest.fixture
def node(lab: Lab, tmp_path: Path) -> Node:
    return _setup(lab, tmp_path)


@pytest.mark.root
def test_cli_accepts(node: Node) -> None:
    """The accepted counterparts: ``set`` in both forms, ``get`` of set/unset/valid keys,
    ``port remove`` of an exact match, ``unset`` of an absent user key."""
    fw = (*F, "get", "n1", "198.51.100.1")
    assert node.must(*fw, "target_address") == "10.0.0.2\n"
    assert node.must(*fw, "user.none") == ""  # a valid key that is not set: nothing, exit 0
    assert node.must(*F, "set", "n1", "198.51.100.1", "user.k", "v") == ""  # key value
    assert node.must(*fw, "user.k") == "v\n"
    assert node.must(*F, "set", "n1", "198.51.100.1", "user.a=1", "user.b=x=y") == ""
    assert (node.must(*fw, "user.a"), node.must(*fw, "user.b")) == ("1\n", "x=y\n")
    assert node.must(*F, "unset", "n1", "198.51.100.1", "user.zzz") == ""
    assert node.must(*F, "unset", "n1", "198.51.100.1", "user.a") == ""
    assert node.must(*fw, "user.a") == ""
    assert node.must("get", "n1", "foo") == ""  # lxc network get: unknown key prints nothing

    def ports() -> list[tuple[str, str]]:
        shown = json.loads(node.must(*F, "list", "n1", "-f", "json"))
        found = next(f for f in shown if f["listen_address"] == "198.51.100.1")
        return [(p["protocol"], p["listen_port"]) for p in found["ports"]]

    assert ports() == [("tcp", "80-81"), ("tcp", "90"), ("udp", "53")]
    assert node.must(*F, "port", "remove", "n1", "198.51.100.1", "tcp", "80-81") == ""
    assert ports() == [("tcp", "90"), ("udp", "53")]
    assert node.must(*F, "port", "remove", "n1", "198.51.100.1", "udp") == ""
    assert ports() == [("tcp", "90")]
    assert node.must(*F, "port", "remove", "n1", "198.51.100.1", "--force") == ""
    assert ports() == []


# ------------------------------------------------------------------------------------------------
# Root: a forward port and a hostPort never shadow each other, both ways
# ------------------------------------------------------------------------------------------------


def ptp_conf(data_dir: Path, *mappings: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet",
            "ranges": ["10.244.2.0/24"], "dataDir": str(data_dir),
            "capabilities": {"portMappings": True},
            "runtimeConfig": {"portMappings": list(mappings)}}  # fmt: skip


@pytest.mark.root
def test_hostport_refuses_forward(lab: Lab, tmp_path: Path) -> None:
    """A forward on one of the node's own addresses (here on lo) may not take a hostPort's
    traffic; on an address the node only routes it takes none, and is accepted (issue 13 item
    6: hostPorts answer only behind ``fib daddr type local``)."""
    node = Node(lab, tmp_path)
    node.must("create", *N1)
    for local in ("198.51.100.5", "198.51.100.7"):
        lab.exec(lab.node, "ip", "addr", "add", f"{local}/32", "dev", "lo")
    pod = lab.pod()
    rc, res = lab.cni("ADD", ptp_conf(tmp_path,
                                      {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                                      {"hostPort": 8081, "containerPort": 81, "protocol": "tcp",
                                       "hostIP": "198.51.100.7"}),
                      container_id="ctr-a", netns=pod)  # fmt: skip
    assert rc == 0, res
    node.must(*F, "create", "n1", "198.51.100.5")
    shadow = ("Forward {what} on {addr} (an address of this node) would take the traffic of "
              "hostPort tcp/{port} on {where} held by container ctr-a")
    node.refuse((*F, "port", "add", "n1", "198.51.100.5", "tcp", "8080", "10.0.0.4"),
                FU + shadow.format(what="tcp/8080", addr="198.51.100.5", port=8080,
                                   where="any address"))  # fmt: skip
    node.refuse((*F, "port", "add", "n1", "198.51.100.5", "tcp", "8000-8090", "10.0.0.4", "80"),
                FU + shadow.format(what="tcp/8080", addr="198.51.100.5", port=8080,
                                   where="any address"))  # fmt: skip
    # a default target on a node address takes the wildcard hostPort's traffic there too
    node.refuse((*F, "create", "n1", "198.51.100.7", "target_address=10.0.0.4"),
                FC + shadow.format(what="every port", addr="198.51.100.7", port=8080,
                                   where="any address"))  # fmt: skip
    node.must(*F, "create", "n1", "198.51.100.7")
    node.refuse((*F, "port", "add", "n1", "198.51.100.7", "tcp", "8081", "10.0.0.4"),
                FU + shadow.format(what="tcp/8081", addr="198.51.100.7", port=8081,
                                   where="198.51.100.7"))  # fmt: skip
    # Not a clash: another protocol, or the port on another address than the hostPort's.
    node.must(*F, "port", "add", "n1", "198.51.100.5", "udp", "8080", "10.0.0.4")
    node.must(*F, "port", "add", "n1", "198.51.100.5", "tcp", "8081", "10.0.0.4")
    # Not a clash: the wildcard hostPort's port, or a whole address, on an address the node
    # does not own (a wildcard hostPort never answers there).
    node.must(*F, "create", "n1", "198.51.100.9")
    node.must(*F, "port", "add", "n1", "198.51.100.9", "tcp", "8080", "10.0.0.4")
    node.must(*F, "create", "n1", "198.51.100.10", "target_address=10.0.0.4")


@pytest.mark.root
def test_forward_refuses_hostport(lab: Lab, tmp_path: Path) -> None:
    """A hostPort is refused when a forward on one of the node's own addresses takes its
    traffic, not when the forward's listen address is one the node only routes."""
    node = Node(lab, tmp_path)
    node.must("create", *N1)
    for local in ("198.51.100.6", "198.51.100.8"):
        lab.exec(lab.node, "ip", "addr", "add", f"{local}/32", "dev", "lo")
    node.must(*F, "create", "n1", "198.51.100.11")
    node.must(*F, "port", "add", "n1", "198.51.100.11", "tcp", "9191", "10.0.0.5")
    node.must(*F, "create", "n1", "198.51.100.12", "target_address=10.0.0.7")
    node.must(*F, "create", "n1", "198.51.100.6")
    node.must(*F, "port", "add", "n1", "198.51.100.6", "tcp", "9090", "10.0.0.5")
    node.must(*F, "create", "n1", "198.51.100.8", "target_address=10.0.0.6")
    cases = [
        ({"hostPort": 9090, "containerPort": 80, "protocol": "tcp"},
         "hostPort tcp/9090 on 0.0.0.0 is taken by the forward of 198.51.100.6 (an address of "
         "this node) in network n1"),
        ({"hostPort": 9090, "containerPort": 80, "protocol": "tcp", "hostIP": "198.51.100.6"},
         "hostPort tcp/9090 on 198.51.100.6 is taken by the forward of 198.51.100.6 (an address "
         "of this node) in network n1"),
        ({"hostPort": 1234, "containerPort": 80, "protocol": "udp", "hostIP": "198.51.100.8"},
         "hostPort udp/1234 on 198.51.100.8 is taken by the forward of 198.51.100.8 (an address "
         "of this node) in network n1"),
        ({"hostPort": 1235, "containerPort": 80, "protocol": "udp"},
         "hostPort udp/1235 on 0.0.0.0 is taken by the forward of 198.51.100.8 (an address of "
         "this node) in network n1"),
    ]  # fmt: skip
    for i, (mapping, message) in enumerate(cases):
        pod = lab.pod()
        before = node.state()
        rc, res = lab.cni("ADD", ptp_conf(tmp_path, mapping), container_id=f"ctr-{i}", netns=pod)
        after = node.state()
        assert rc != 0 and res is not None, (mapping, rc, res)
        assert (res["code"], res["msg"]) == (101, message), res
        changed = [k for k in before if before[k] != after.get(k)]
        assert not changed, f"refused ADD {mapping} changed {changed}"
        assert lab.exec(pod, "ip", "link", "show", "eth0", check=False).returncode != 0
    # Not a clash once the default target on the node's .8 is gone: udp/9090 on any address,
    # tcp/9090 on another address, and the ports of the forwards on addresses the node only
    # routes (.11 with tcp/9191, .12 whole).
    node.must(*F, "delete", "n1", "198.51.100.8")
    pod = lab.pod()
    rc, res = lab.cni("ADD", ptp_conf(tmp_path,
                                      {"hostPort": 9090, "containerPort": 80, "protocol": "udp"},
                                      {"hostPort": 9090, "containerPort": 80, "protocol": "tcp",
                                       "hostIP": "198.51.100.9"},
                                      {"hostPort": 9191, "containerPort": 80, "protocol": "tcp"},
                                      {"hostPort": 9192, "containerPort": 80, "protocol": "tcp"}),
                      container_id="ctr-ok", netns=pod)  # fmt: skip
    assert rc == 0, res
