"""podnet.cni.netconf without root: each parser's result and each refusal's exact message
(the key it names), at the bounds of every range (mutation testing of the pure core,
docs/testing.md)."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

import pytest

from podnet.cni import netconf
from podnet.errors import INCOMPATIBLE_VERSION, INVALID_CONFIG, CNIError, InvalidConfig
from podnet.values import PortMappingArg


def refusal(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(CNIError) as err:
        fn(*args, **kwargs)
    return str(err.value.msg)


def test_port_mapping_arg_repr() -> None:
    assert repr(PortMappingArg(8080, 80, "tcp", None)) == "*:8080/tcp->80"
    assert repr(PortMappingArg(53, 5353, "udp", ip_address("fd00::1"))) == "fd00::1:53/udp->5353"


def test_require_version() -> None:
    assert netconf.require_version({"cniVersion": "0.4.0"}) == "0.4.0"
    with pytest.raises(CNIError) as err:
        netconf.require_version({"cniVersion": "9.9.9"})
    assert err.value.code == INCOMPATIBLE_VERSION
    assert err.value.msg.startswith("incompatible CNI versions: config is '9.9.9', plugin supports [")
    assert "'1.1.0'" in err.value.msg
    assert refusal(netconf.require_version, {}).startswith("incompatible CNI versions: config is None,")


def test_require_str() -> None:
    assert netconf.require_str({"name": "n"}, "name") == "n"
    assert netconf.require_str({}, "type", optional=True) == ""
    assert refusal(netconf.require_str, {}, "type") == "type: must be a non-empty string, got None"
    assert refusal(netconf.require_str, {"type": ""}, "type") == "type: must be a non-empty string, got ''"
    assert refusal(netconf.require_str, {"type": 5}, "type") == "type: must be a non-empty string, got 5"
    # optional only forgives absence, not a wrong value
    assert refusal(netconf.require_str, {"t": 0}, "t", optional=True) == "t: must be a non-empty string, got 0"
    assert refusal(netconf.require_str, {"t": ""}, "t", optional=True) == "t: must be a non-empty string, got ''"


@pytest.mark.parametrize(("name", "ok"), [
    ("a", True), ("0net", True), ("a_b.c-d", True), ("x" * 253, True),
    ("", False), ("x" * 254, False), ("-a", False), ("_a", False), (".a", False),
    ("a b", False), ("a/b", False), ("aé", False), ("é", False), ("a+b", False), ("a_", True),
    ("a.", True), ("a-", True),
])  # fmt: skip
def test_valid_network_name(name: str, ok: bool) -> None:
    assert netconf.valid_network_name(name) is ok


def test_require_name() -> None:
    assert netconf.require_name({"name": "net-1"}) == "net-1"
    assert refusal(netconf.require_name, {"name": "-x"}) == (
        "name: '-x' is not a valid network name (a letter or digit, then letters, digits, '_', "
        "'.', '-'; at most 253 characters)")
    assert refusal(netconf.require_name, {}) == "name: must be a non-empty string, got None"


def test_log_file() -> None:
    assert netconf.log_file({}) == ""
    assert netconf.log_file({"logFile": None}) == ""
    assert netconf.log_file({"logFile": ""}) == ""
    assert netconf.log_file({"logFile": "/var/log/podnet/n.log"}) == "/var/log/podnet/n.log"
    assert refusal(netconf.log_file, {"logFile": "/var/log/podnet/sub/n.log"}) == (
        "logFile: '/var/log/podnet/sub/n.log' is not a file in /var/log/podnet/ (a NetConf's log "
        "goes there; CNI_LOG_FILE in the runtime's environment may name any path)")
    assert refusal(netconf.log_file, {"logFile": "/var/log/podnet"}).startswith(
        "logFile: '/var/log/podnet' is not a file in /var/log/podnet/ ")
    assert refusal(netconf.log_file, {"logFile": "rel.log"}).startswith("logFile: ")
    assert refusal(netconf.log_file, {"logFile": 5}).startswith("logFile: ")


def test_opt_bool_and_opt_int() -> None:
    assert netconf.opt_bool({}, "snat", True) is True
    assert netconf.opt_bool({"snat": False}, "snat", True) is False
    assert refusal(netconf.opt_bool, {"snat": 1}, "snat", True) == "snat: must be true or false, got 1"
    assert netconf.opt_int({}, "bit", 13, 0, 31) == 13
    assert netconf.opt_int({"bit": 0}, "bit", 13, 0, 31) == 0
    assert netconf.opt_int({"bit": 31}, "bit", 13, 0, 31) == 31
    for bad in (32, -1, True, 1.0, "1"):
        assert refusal(netconf.opt_int, {"bit": bad}, "bit", 13, 0, 31) == (
            f"bit: must be an integer in 0-31, got {bad!r}")


def test_opt_seconds() -> None:
    assert netconf.opt_seconds({}, "t", 2, 0.5, 60) == 2.0
    assert isinstance(netconf.opt_seconds({"t": 3}, "t", 2, 0.5, 60), float)
    assert netconf.opt_seconds({"t": 0.5}, "t", 2, 0.5, 60) == 0.5
    assert netconf.opt_seconds({"t": 60}, "t", 2, 0.5, 60) == 60.0
    assert refusal(netconf.opt_seconds, {"t": 0.49}, "t", 2, 0.5, 60) == (
        "t: must be a number of seconds in 0.5-60, got 0.49")
    assert refusal(netconf.opt_seconds, {"t": 60.01}, "t", 2, 0.5, 60, where="ipam.") == (
        "ipam.t: must be a number of seconds in 0.5-60, got 60.01")
    assert refusal(netconf.opt_seconds, {"t": True}, "t", 2, 0, 60) == (
        "t: must be a number of seconds in 0-60, got True")
    assert refusal(netconf.opt_seconds, {"t": "5"}, "t", 2, 0, 60).endswith("got '5'")
    assert refusal(netconf.opt_seconds, {"t": float("nan")}, "t", 2, 0, 60).endswith("got nan")
    # an integer too large for a float: OverflowError is a refusal, not a crash
    assert refusal(netconf.opt_seconds, {"t": 10**400}, "t", 2, 0, 1e400).startswith(
        "t: must be a number of seconds in 0-inf, got 1000")
    long = refusal(netconf.opt_seconds, {"t": "x" * 400}, "t", 2, 0, 60)
    assert len(long) == 300
    assert long == ("t: must be a number of seconds in 0-60, got '" + "x" * 400)[:300]


def test_tool_timeout() -> None:
    assert netconf.tool_timeout({}) == 10.0
    assert netconf.tool_timeout({"toolTimeout": 0.1}) == 0.1
    assert netconf.tool_timeout({"toolTimeout": 600}) == 600.0
    assert refusal(netconf.tool_timeout, {"toolTimeout": 0.09}) == (
        "toolTimeout: must be a number of seconds in 0.1-600, got 0.09")
    assert refusal(netconf.tool_timeout, {"toolTimeout": 601}) == (
        "toolTimeout: must be a number of seconds in 0.1-600, got 601")


def test_runtime_config() -> None:
    assert netconf.runtime_config({}) == {}
    assert netconf.runtime_config({"runtimeConfig": None}) == {}
    assert netconf.runtime_config({"runtimeConfig": {"a": 1}}) == {"a": 1}
    assert refusal(netconf.runtime_config, {"runtimeConfig": []}) == "runtimeConfig: must be an object"


def pm(*items: Any) -> dict[str, Any]:
    return {"runtimeConfig": {"portMappings": list(items)}}


def mappings(*items: Any) -> list[str]:
    return [repr(m) for m in netconf.parse_port_mappings(pm(*items))]


def test_parse_port_mappings_values() -> None:
    assert netconf.parse_port_mappings({}) == []
    assert netconf.parse_port_mappings({"runtimeConfig": {}}) == []
    assert mappings() == []
    got = netconf.parse_port_mappings(pm(
        {"hostPort": 1, "containerPort": 65535},
        {"hostPort": 65535, "containerPort": 1, "protocol": "UDP", "hostIP": ""},
        {"hostPort": 80, "containerPort": 8080, "protocol": "Tcp", "hostIP": "10.0.0.1"},
    ))
    assert [(m.host_port, m.container_port, m.protocol, m.host_ip) for m in got] == [
        (1, 65535, "tcp", None), (65535, 1, "udp", None), (80, 8080, "tcp", ip_address("10.0.0.1"))]


@pytest.mark.parametrize(("items", "message"), [
    ("x", "runtimeConfig.portMappings: must be a list"),
    ([{"hostPort": 1, "containerPort": 1}, 7], "runtimeConfig.portMappings[1]: must be an object"),
    ([{"containerPort": 1}], "runtimeConfig.portMappings[0].hostPort: must be an integer port, got None"),
    ([{"hostPort": True, "containerPort": 1}],
     "runtimeConfig.portMappings[0].hostPort: must be an integer port, got True"),
    ([{"hostPort": "80", "containerPort": 1}],
     "runtimeConfig.portMappings[0].hostPort: must be an integer port, got '80'"),
    ([{"hostPort": 0, "containerPort": 1}], "runtimeConfig.portMappings[0].hostPort: 0 is out of range 1-65535"),
    ([{"hostPort": 65536, "containerPort": 1}],
     "runtimeConfig.portMappings[0].hostPort: 65536 is out of range 1-65535"),
    ([{"hostPort": 1, "containerPort": 65536}],
     "runtimeConfig.portMappings[0].containerPort: 65536 is out of range 1-65535"),
    ([{"hostPort": 1, "containerPort": 1.5}],
     "runtimeConfig.portMappings[0].containerPort: must be an integer port, got 1.5"),
    ([{"hostPort": 1, "containerPort": 1, "protocol": "sctp"}],
     "runtimeConfig.portMappings[0].protocol: 'sctp' is not tcp or udp"),
    ([{"hostPort": 1, "containerPort": 1, "protocol": 6}],
     "runtimeConfig.portMappings[0].protocol: 6 is not tcp or udp"),
    ([{"hostPort": 1, "containerPort": 1, "hostIP": "10.0.0.1/32"}],
     "runtimeConfig.portMappings[0].hostIP: '10.0.0.1/32' is not an IP address"),
])  # fmt: skip
def test_parse_port_mappings_refusals(items: Any, message: str) -> None:
    raw = {"runtimeConfig": {"portMappings": items}}
    with pytest.raises(InvalidConfig) as err:
        netconf.parse_port_mappings(raw)
    assert err.value.msg == message
    assert err.value.code == INVALID_CONFIG


def overlap(*items: Any) -> str:
    return refusal(netconf.parse_port_mappings, pm(*items))


def tcp(port: int, host_ip: str | None = None, proto: str = "tcp") -> dict[str, Any]:
    item: dict[str, Any] = {"hostPort": port, "containerPort": 80, "protocol": proto}
    if host_ip is not None:
        item["hostIP"] = host_ip
    return item


def test_port_mapping_overlaps() -> None:
    # any address (both families) holds every address of the port
    assert overlap(tcp(80), tcp(80, "10.0.0.1")) == (
        "runtimeConfig.portMappings[1]: tcp hostPort 80 on 10.0.0.1 overlaps portMappings[0] "
        "(any address)")
    assert overlap(tcp(80, "fd00::1"), tcp(81), tcp(80)) == (
        "runtimeConfig.portMappings[2]: tcp hostPort 80 on any address overlaps portMappings[0] "
        "(fd00::1)")
    assert overlap(tcp(80, "::"), tcp(80)) == (
        "runtimeConfig.portMappings[1]: tcp hostPort 80 on any address overlaps portMappings[0] (::)")
    assert overlap(tcp(80, "0.0.0.0"), tcp(80)) == (
        "runtimeConfig.portMappings[1]: tcp hostPort 80 on any address overlaps portMappings[0] "
        "(0.0.0.0)")
    assert overlap(tcp(80, "10.0.0.1"), tcp(80, "10.0.0.1")) == (
        "runtimeConfig.portMappings[1]: tcp hostPort 80 on 10.0.0.1 overlaps portMappings[0] "
        "(10.0.0.1)")
    # a family's wildcard holds that family's addresses, both ways
    assert overlap(tcp(80, "0.0.0.0"), tcp(80, "10.0.0.1")).endswith("overlaps portMappings[0] (0.0.0.0)")
    assert overlap(tcp(80, "10.0.0.1"), tcp(80, "0.0.0.0")) == (
        "runtimeConfig.portMappings[1]: tcp hostPort 80 on 0.0.0.0 overlaps portMappings[0] "
        "(10.0.0.1)")
    assert overlap(tcp(80, "fd00::1"), tcp(80, "::")).endswith("overlaps portMappings[0] (fd00::1)")
    assert overlap(tcp(80, "::"), tcp(80, "fd00::2")).endswith("overlaps portMappings[0] (::)")
    assert overlap(tcp(80, "0.0.0.0"), tcp(80, "0.0.0.0")).endswith("overlaps portMappings[0] (0.0.0.0)")
    assert overlap(tcp(80, "::"), tcp(80, "::")).endswith("overlaps portMappings[0] (::)")
    assert overlap(tcp(80), tcp(80, "::")).endswith("overlaps portMappings[0] (any address)")
    assert overlap(tcp(80), tcp(80, "0.0.0.0")).endswith("overlaps portMappings[0] (any address)")
    assert overlap(tcp(80), tcp(80)).endswith("on any address overlaps portMappings[0] (any address)")
    assert overlap(tcp(80, "fd00::1"), tcp(80)).endswith("overlaps portMappings[0] (fd00::1)")
    assert overlap(tcp(80, "0.0.0.0"), tcp(80, "10.0.0.9"), tcp(80)).endswith(
        "overlaps portMappings[0] (0.0.0.0)")


def test_port_mappings_that_do_not_overlap() -> None:
    assert mappings(tcp(80, "10.0.0.1"), tcp(80, "10.0.0.2"), tcp(80, "fd00::1"),
                    tcp(80, proto="udp"), tcp(81)) == [  # fmt: skip
        "10.0.0.1:80/tcp->80", "10.0.0.2:80/tcp->80", "fd00::1:80/tcp->80", "*:80/udp->80",
        "*:81/tcp->80"]
    assert mappings(tcp(80, "0.0.0.0"), tcp(80, "::")) == ["0.0.0.0:80/tcp->80", ":::80/tcp->80"]
    assert mappings(tcp(80, "::"), tcp(80, "0.0.0.0")) == [":::80/tcp->80", "0.0.0.0:80/tcp->80"]
    assert mappings(tcp(80, "fd00::1"), tcp(80, "0.0.0.0"), tcp(80, "10.0.0.1", "udp")) == [
        "fd00::1:80/tcp->80", "0.0.0.0:80/tcp->80", "10.0.0.1:80/udp->80"]
    assert mappings(tcp(80, "10.0.0.1"), tcp(80, "::")) == ["10.0.0.1:80/tcp->80", ":::80/tcp->80"]


def test_parse_cni_args() -> None:
    assert netconf.parse_cni_args("") == {}
    assert netconf.parse_cni_args("IgnoreUnknown=1; IP = 10.0.0.5 ;K8S_POD_NAME=a=b;noval;=x") == {
        "IgnoreUnknown": "1", "IP": "10.0.0.5", "K8S_POD_NAME": "a=b"}
    assert netconf.parse_cni_args("A=") == {"A": ""}


def test_parse_requested_ips() -> None:
    assert netconf.parse_requested_ips({}, {}) == {}
    assert netconf.parse_requested_ips({}, {"IP": ""}) == {}
    assert netconf.parse_requested_ips(
        {"runtimeConfig": {"ips": ["10.0.0.5/24", " fd00::0:5 "]}}, {"IP": "10.9.9.9"}) == {
        4: "10.0.0.5", 6: "fd00::5"}
    assert netconf.parse_requested_ips({}, {"IP": "10.0.0.7, ,fd00::7"}) == {
        4: "10.0.0.7", 6: "fd00::7"}
    assert netconf.parse_requested_ips({"runtimeConfig": {"ips": []}}, {"IP": "10.0.0.7"}) == {}


def test_parse_requested_mac() -> None:
    assert netconf.parse_requested_mac({}, {}) == ""
    assert netconf.parse_requested_mac({"runtimeConfig": {"mac": ""}}, {"MAC": "02:00:00:00:00:01"}) == ""
    assert netconf.parse_requested_mac({}, {"MAC": ""}) == ""
    assert netconf.parse_requested_mac({"runtimeConfig": {"mac": "0A:1b:2C:3d:4E:5f"}},
                                       {"MAC": "02:00:00:00:00:01"}) == "0a:1b:2c:3d:4e:5f"  # fmt: skip
    assert netconf.parse_requested_mac({}, {"MAC": "02:00:00:00:00:01"}) == "02:00:00:00:00:01"
    assert netconf.parse_requested_mac({}, {"MAC": "fe:ff:ff:ff:ff:ff"}) == "fe:ff:ff:ff:ff:ff"


@pytest.mark.parametrize(("parse", "raw", "args", "message"), [
    *[(netconf.parse_requested_ips, *case) for case in [
        ({"runtimeConfig": {"ips": "10.0.0.5"}}, {}, "runtimeConfig.ips: must be a list of addresses"),
        ({"runtimeConfig": {"ips": [5]}}, {}, "runtimeConfig.ips[0]: must be a string, got 5"),
        ({"runtimeConfig": {"ips": ["10.0.0.5", "x"]}}, {}, "runtimeConfig.ips[1]: 'x' is not an address in CIDR form"),
        ({"runtimeConfig": {"ips": ["10.0.0.5", "10.0.0.6/24"]}}, {},
         "runtimeConfig.ips[1]: more than one IPv4 address requested"),
        ({}, {"IP": "fd00::1,fd00::2"}, "CNI_ARGS IP[1]: more than one IPv6 address requested"),
        ({}, {"IP": "nope"}, "CNI_ARGS IP[0]: 'nope' is not an address in CIDR form"),
    ]],
    *[(netconf.parse_requested_mac, *case) for case in [
        ({"runtimeConfig": {"mac": 5}}, {}, "runtimeConfig.mac: 5 is not a MAC address"),
        *[({"runtimeConfig": {"mac": mac}}, {}, f"runtimeConfig.mac: {mac!r} is not a MAC address")
          for mac in ("02:00:00:00:00", "02:00:00:00:00:00:00", "02-00-00-00-00-01",
                      "002:00:00:00:00:1", "02:00:00:00:00:0g", "02:00:00:00:00:G0",
                      "02:00:00:00:00:0X")],
        ({}, {"MAC": "01:00:5E:00:00:01"}, "CNI_ARGS MAC: 01:00:5E:00:00:01 is a multicast address"),
        ({}, {"MAC": "03:00:00:00:00:00"}, "CNI_ARGS MAC: 03:00:00:00:00:00 is a multicast address"),
    ]],
])  # fmt: skip
def test_parse_requested_refusals(parse: Any, raw: dict[str, Any], args: dict[str, str], message: str) -> None:
    """runtimeConfig ips/mac and CNI_ARGS IP/MAC refused, each with its exact message."""
    assert refusal(parse, raw, args) == message


def test_parse_valid_attachments() -> None:
    key = "cni.dev/valid-attachments"
    assert netconf.parse_valid_attachments({}) == set()
    assert netconf.parse_valid_attachments({key: []}) == set()
    assert netconf.parse_valid_attachments({key: [
        {"containerID": "c1", "ifname": "eth0"}, {"containerID": "c1", "ifname": "net1", "x": 1},
        {"containerID": "c1", "ifname": "eth0"}]}) == {("c1", "eth0"), ("c1", "net1")}
    assert refusal(netconf.parse_valid_attachments, {key: {}}) == (
        "cni.dev/valid-attachments: must be a list")
    for i, bad in enumerate([["c1", "eth0"], {"containerID": "c1"}, {"ifname": "eth0"},
                             {"containerID": "", "ifname": "eth0"},
                             {"containerID": "c1", "ifname": ""},
                             {"containerID": 1, "ifname": "eth0"},
                             {"containerID": "c1", "ifname": 0}]):  # fmt: skip
        items = [{"containerID": "ok", "ifname": "eth0"}, bad]
        assert refusal(netconf.parse_valid_attachments, {key: items}) == (
            f"cni.dev/valid-attachments[1]: needs string containerID and ifname, got {bad!r}"), i
