"""A bridge network's name and config (:func:`podnet.networks.config.check_name`,
:func:`podnet.networks.config.validate`), each refusal with its exact message: LXD 5.0.2's where
LXD has one (the bridge driver's ``Validate`` in lxd/network/driver_bridge.go, ``ValidNetworkName``
in lxd/network/network_utils.go), podnet's own for the rest. No root."""

from __future__ import annotations

import pytest

from podnet.networks import config as netconfig
from podnet.networks.errors import NetworkError

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
    ("-bad", "Invalid network name '-bad': it may not start with a dash or be a dot entry"),
    ("--", "Invalid network name '--': it may not start with a dash or be a dot entry"),
    ("..", "Invalid network name '..': it may not start with a dash or be a dot entry"),
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
