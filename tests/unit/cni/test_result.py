"""podnet.cni.result without root: every refusal of :func:`validate` names its key exactly,
conversion between result versions keeps and drops exactly the spec's keys, and
:func:`prev_result` converts once (mutation testing of the pure core,
docs/testing.md)."""

from __future__ import annotations

from typing import Any

import pytest

from podnet.cni import result
from podnet.errors import INVALID_CONFIG, InvalidConfig

IFACES = [{"name": "eth0", "sandbox": "/run/netns/x"}]


@pytest.mark.parametrize(("value", "message"), [
    ([], "prevResult: must be an object"),
    ({"interfaces": {}}, "prevResult.interfaces: must be a list"),
    ({"ips": "10.0.0.2/24"}, "prevResult.ips: must be a list"),
    ({"routes": 0}, "prevResult.routes: must be a list"),
    ({"dns": []}, "prevResult.dns: must be an object"),
    ({"cniVersion": 1}, "prevResult.cniVersion: must be a string"),
    ({"interfaces": [1]}, "prevResult.interfaces[0]: must be an object"),
    ({"interfaces": [{"name": "a"}, {}]}, "prevResult.interfaces[1].name: must be a non-empty string"),
    ({"interfaces": [{"name": ""}]}, "prevResult.interfaces[0].name: must be a non-empty string"),
    ({"interfaces": [{"name": 5}]}, "prevResult.interfaces[0].name: must be a non-empty string"),
    ({"interfaces": [{"name": "a", "mac": 1}]}, "prevResult.interfaces[0].mac: must be a string"),
    ({"interfaces": [{"name": "a", "sandbox": None}]}, "prevResult.interfaces[0].sandbox: must be a string"),
    ({"interfaces": [{"name": "a", "mtu": "1500"}]}, "prevResult.interfaces[0].mtu: must be an integer"),
    ({"interfaces": [{"name": "a", "mtu": True}]}, "prevResult.interfaces[0].mtu: must be an integer"),
    ({"ips": [1]}, "prevResult.ips[0]: must be an object"),
    ({"ips": [{"gateway": "10.0.0.1"}]}, "prevResult.ips[0].address: missing"),
    ({"ips": [{"address": None}]}, "prevResult.ips[0].address: None is not an address in CIDR form"),
    ({"ips": [{"address": 7}]}, "prevResult.ips[0].address: 7 is not an address in CIDR form"),
    ({"ips": [{"address": "10.0.0.2"}]},
     "prevResult.ips[0].address: '10.0.0.2' is not an address in CIDR form"),
    ({"ips": [{"address": "fd00::2%eth0/64"}]},
     "prevResult.ips[0].address: 'fd00::2%eth0/64' is a scoped IPv6 address: a %zone is not accepted"),
    ({"ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1/24"}]},
     "prevResult.ips[0].gateway: '10.0.0.1/24' is not an IP address"),
    ({"ips": [{"address": "10.0.0.2/24", "gateway": 10}]},
     "prevResult.ips[0].gateway: 10 is not an IP address"),
    ({"ips": [{"address": "10.0.0.2/24", "interface": 0}]},
     "prevResult.ips[0].interface: 0 is not an index into interfaces"),
    ({"interfaces": IFACES, "ips": [{"address": "10.0.0.2/24", "interface": 1}]},
     "prevResult.ips[0].interface: 1 is not an index into interfaces"),
    ({"interfaces": IFACES, "ips": [{"address": "10.0.0.2/24", "interface": -1}]},
     "prevResult.ips[0].interface: -1 is not an index into interfaces"),
    ({"interfaces": IFACES, "ips": [{"address": "10.0.0.2/24", "interface": True}]},
     "prevResult.ips[0].interface: True is not an index into interfaces"),
    ({"interfaces": IFACES, "ips": [{"address": "10.0.0.2/24", "interface": "0"}]},
     "prevResult.ips[0].interface: '0' is not an index into interfaces"),
    ({"routes": [[]]}, "prevResult.routes[0]: must be an object"),
    ({"routes": [{"gw": "10.0.0.1"}]}, "prevResult.routes[0].dst: missing"),
    ({"routes": [{"dst": None}]}, "prevResult.routes[0].dst: None is not a CIDR"),
    ({"routes": [{"dst": "default"}]}, "prevResult.routes[0].dst: 'default' is not a CIDR"),
    ({"routes": [{"dst": "0.0.0.0/0", "gw": "gw"}]}, "prevResult.routes[0].gw: 'gw' is not an IP address"),
    ({"routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": 6}]},
     "prevResult.routes[1].gw: 6 is not an IP address"),
])  # fmt: skip
def test_validate_names_the_bad_key(value: Any, message: str) -> None:
    with pytest.raises(InvalidConfig) as err:
        result.validate(value)
    assert err.value.msg == message
    assert err.value.code == INVALID_CONFIG


def test_validate_uses_where_and_cuts_the_message_at_400() -> None:
    with pytest.raises(InvalidConfig) as err:
        result.validate("x", where="delegate result")
    assert err.value.msg == "delegate result: must be an object"
    with pytest.raises(InvalidConfig) as err:
        result.validate({"dns": 1}, where="w" * 398)
    assert err.value.msg == "w" * 398 + ".d"
    assert len(err.value.msg) == 400


GOOD: dict[str, Any] = {
    "cniVersion": "0.4.0",
    "interfaces": [{"name": "br0", "mac": "aa:bb:cc:dd:ee:ff"},
                   {"name": "eth0", "sandbox": "/run/netns/p", "mtu": 1400}],
    "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 1, "version": "4"},
            {"address": "fd00::2/64", "interface": 0},
            {"address": "10.9.0.2/24"}],
    "routes": [{"dst": "10.1.2.3/8"}, {"dst": "::/0", "gw": "fd00::1"}],
    "dns": {},
}  # fmt: skip


def test_validate_accepts_and_returns_the_same_object() -> None:
    assert result.validate(GOOD) is GOOD
    empty: dict[str, Any] = {}
    assert result.validate(empty) is empty
    # dst with host bits is accepted (strict=False); a missing ips key is no error
    only_routes = {"routes": [{"dst": "10.1.2.3/8", "gw": None}]}
    assert result.validate(only_routes) is only_routes
    only_ifaces = {"interfaces": [{"name": "eth0", "mtu": None}]}
    assert result.validate(only_ifaces) is only_ifaces


def test_sandbox_addresses_bounds() -> None:
    res = {
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/p"}, {"name": "eth0"},
                       {"name": "net1", "sandbox": "/run/netns/p"}],
        "ips": [{"address": "10.0.0.2/24", "interface": 0},
                {"address": "10.0.1.2/24", "interface": 1},  # host side: no sandbox
                {"address": "10.0.2.2/24", "interface": 2},  # another name
                {"address": "10.0.3.2/24", "interface": 3},  # out of range: skipped
                {"address": "10.0.4.2/24"}],  # no index: counted in
    }  # fmt: skip
    assert result.sandbox_addresses(res, "eth0") == ["10.0.0.2/24", "10.0.4.2/24"]
    assert result.sandbox_addresses(res, "net1") == ["10.0.2.2/24", "10.0.4.2/24"]
    assert result.sandbox_addresses({}, "eth0") == []
    assert result.sandbox_addresses({"ips": [{"address": "10.0.0.2/24", "interface": 0}]},
                                    "eth0") == []  # fmt: skip


V1 = {
    "cniVersion": "1.1.0",
    "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/run/netns/p",
                    "mtu": 1400, "socketPath": "/s", "pciID": "0000:00:01.0"}],
    "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0},
            {"address": "fd00::2/64", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.0.0.53"]},
    "extra": "dropped",
}  # fmt: skip
PLAIN_IFACE = {"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/run/netns/p"}


def test_convert_v1_to_v04_exactly() -> None:
    assert result.convert(V1, "0.4.0") == {
        "cniVersion": "0.4.0",
        "interfaces": [PLAIN_IFACE],
        "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0, "version": "4"},
                {"address": "fd00::2/64", "interface": 0, "version": "6"}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.0.0.53"]},
    }  # fmt: skip
    assert "version" not in V1["ips"][0]  # the input is not changed


def test_convert_v1_to_v1_keeps_mtu_only_for_110() -> None:
    same = result.convert(V1, "1.1.0")
    assert same == {k: v for k, v in V1.items() if k != "extra"}
    assert result.convert(V1, "1.0.0") == {
        "cniVersion": "1.0.0",
        "interfaces": [PLAIN_IFACE],
        "ips": V1["ips"],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.0.0.53"]},
    }
    # no mtu in any interface: nothing is rewritten, socketPath stays for 1.0.0
    with_socket = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "socketPath": "/s"}]}
    assert result.convert(with_socket, "1.0.0") == {
        "cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "socketPath": "/s"}]}


def test_convert_v04_to_v1_and_v04_to_v04() -> None:
    v04 = {"cniVersion": "0.3.1", "interfaces": [{"name": "eth0"}],
           "ips": [{"address": "10.0.0.2/24", "version": "4", "interface": 0}],
           "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"domain": "x"},
           "other": 1}  # fmt: skip
    assert result.convert(v04, "1.0.0") == {
        "cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}],
        "ips": [{"address": "10.0.0.2/24", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"domain": "x"}}
    assert result.convert(v04, "0.4.0") == {
        "cniVersion": "0.4.0", "interfaces": [{"name": "eth0"}],
        "ips": [{"address": "10.0.0.2/24", "version": "4", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"domain": "x"}}
    # no ips key at all in either direction
    assert result.convert({"cniVersion": "0.4.0", "dns": {}}, "1.1.0") == {
        "cniVersion": "1.1.0", "dns": {}}
    assert result.convert({"cniVersion": "1.0.0", "routes": []}, "0.4.0") == {
        "cniVersion": "0.4.0"}


def test_convert_without_version_reads_as_current_and_drops_empty_lists() -> None:
    # no cniVersion: read as 1.1.0, so a 0.x output gains "version"
    assert result.convert({"ips": [{"address": "fd00::2/64"}]}, "0.3.0") == {
        "cniVersion": "0.3.0", "ips": [{"address": "fd00::2/64", "version": "6"}]}
    assert result.convert({"interfaces": [], "ips": [], "routes": []}, "1.1.0") == {
        "cniVersion": "1.1.0"}
    assert result.convert({"dns": {}}, "1.0.0") == {"cniVersion": "1.0.0", "dns": {}}


def test_prev_result() -> None:
    assert result.prev_result({"cniVersion": "1.0.0"}) is None
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    assert result.prev_result({"cniVersion": "0.4.0", "prevResult": prev}) is prev
    with pytest.raises(InvalidConfig) as err:
        result.prev_result({"cniVersion": "1.0.0", "prevResult": {"ips": [{}]}})
    assert err.value.msg == "prevResult.ips[0].address: missing"


def test_a_validated_prev_result_converts_to_every_version() -> None:
    """prev_result does not convert: a result validate() passed converts to any version, an
    unknown version string reading as generation 0 (checked here, so the claim stays true)."""
    for prev in ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]},
                 {"cniVersion": "x", "ips": [{"address": "fd00::2/64"}]},
                 {"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}):
        assert result.prev_result({"prevResult": prev}) is prev
        for version in ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "x", ""):
            assert result.convert(prev, version)["cniVersion"] == version
