"""Hostile Node objects into :func:`podnet.agent.model.parse_node`: what another party writes in
a Node (a compromised kubelet, a careless controller) either becomes typed values or refuses the
whole Node with :class:`BadNode` naming the field, in one line; nothing else escapes. No root."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubeapi import node
from podnet.agent.model import MAX_NAME, BadNode, Node, parse_node


def _refused(obj: Any, field: str) -> str:
    with pytest.raises(BadNode) as err:
        parse_node(obj)
    message = str(err.value)
    assert field in message, message
    assert "\n" not in message and "\r" not in message and len(message) < 400, message
    return message


def test_a_well_formed_node() -> None:
    n = parse_node(node("node-1.example", ["10.244.1.0/24", "fd00:10:244:1::/64"],
                        ["192.168.1.10", "fd00::10"]))  # fmt: skip
    assert n.name == "node-1.example"
    assert n.pod_cidrs == {4: ipaddress.ip_network("10.244.1.0/24"),
                           6: ipaddress.ip_network("fd00:10:244:1::/64")}  # fmt: skip
    assert n.internal_ips == {4: ipaddress.ip_address("192.168.1.10"),
                              6: ipaddress.ip_address("fd00::10")}  # fmt: skip
    assert n == parse_node(json.loads(json.dumps(node("node-1.example",
        ["fd00:10:244:1::/64", "10.244.1.0/24"], ["fd00::10", "192.168.1.10"]))))  # fmt: skip
    assert len({n, parse_node(node("node-1.example", ["10.244.1.0/24", "fd00:10:244:1::/64"],
                                   ["192.168.1.10", "fd00::10"]))}) == 1  # fmt: skip


def test_only_the_singular_podcidr() -> None:
    obj = node("a", internal_ips=["10.0.0.1"], spec={"podCIDR": "10.244.0.0/24"})
    assert parse_node(obj).pod_cidrs == {4: ipaddress.ip_network("10.244.0.0/24")}


def test_podcidrs_win_over_podcidr() -> None:
    obj = node("a", spec={"podCIDR": "10.9.0.0/24", "podCIDRs": ["10.244.0.0/24"]})
    assert parse_node(obj).pod_cidrs == {4: ipaddress.ip_network("10.244.0.0/24")}


def test_no_podcidrs_yet() -> None:
    n = parse_node(node("a", internal_ips=["10.0.0.1"]))
    assert n.pod_cidrs == {} and n.internal_ips == {4: ipaddress.ip_address("10.0.0.1")}


def test_first_internal_ip_of_a_family_and_other_types_ignored() -> None:
    obj = node("a", ["10.244.0.0/24"], ["10.0.0.1", "10.0.0.2"])
    obj["status"]["addresses"] += [{"type": "ExternalIP", "address": "; rm -rf /"},
                                   {"type": "Hostname", "address": "$(reboot)"},
                                   "not an object", {"address": "10.9.9.9"}]  # fmt: skip
    assert parse_node(obj).internal_ips == {4: ipaddress.ip_address("10.0.0.1")}


INJECTION = ["a;reboot", "a b", "a\nb", "a\rb", "a\0b", "$(id)", "`id`", "a|b", "a&b", "a'b",
             'a"b', "a#b", "a/b", "../etc", "a\\b", "a{b}", "a*", "-a", "a-", ".a", "a.",
             "A", "nodé", "ａ", "a\u200bb", "a\tb", "", " a", "a "]


@pytest.mark.parametrize("name", INJECTION)
def test_hostile_names(name: str) -> None:
    _refused(node(name, ["10.244.0.0/24"]), "metadata.name")


@pytest.mark.parametrize("name", [None, 1, 1.5, True, ["a"], {"a": 1}])
def test_name_of_a_wrong_type(name: Any) -> None:
    _refused(node("a") | {"metadata": {"name": name}}, "metadata.name")


def test_name_length() -> None:
    longest = ".".join(["a" * 63] * 4)[:MAX_NAME]
    assert len(longest) == 253 and parse_node(node(longest)).name == longest
    _refused(node(longest + "a"), "metadata.name")
    message = _refused(node("a" * 100_000), "metadata.name")
    assert len(message) < 200  # the value is shown shortened


@pytest.mark.parametrize("cidr", [
    "10.244.0.1/24",          # host bits
    "fd00:10:244::1/64",      # host bits
    "10.244.0.0/33", "fd00::/129", "10.244.0.0/-1",
    "fe80::%eth0/64", "fe80::%1/64",  # zones
    "10.244.0.0/24 ", " 10.244.0.0/24", "10.244.0.0/24\n", "10.244.0.0/24;reboot",
    "010.244.0.0/24", "0x0a.244.0.0/24", "１０.２４４.０.０/24", "10.244.0.0/2_4",
    "10.244.0.0/+24", "10.244.0.0/ 24", "10.244/16", "10.244.0.0/255.255.255.0x",
    "", "/24", "10.244.0.0/", "nodes", "10.244.0.0/24,10.245.0.0/24",
    pytest.param("a" * 100_000, id="huge"), pytest.param("1" * 100_000 + "/8", id="huge-digits"),
])  # fmt: skip
def test_hostile_podcidrs(cidr: str) -> None:
    message = _refused(node("a", [cidr]), "spec.podCIDRs[0]")
    assert message.startswith("Node a: ")


@pytest.mark.parametrize("value", [1, None, 1.5, True, ["10.0.0.0/8"], {"cidr": "10.0.0.0/8"}])
def test_podcidr_item_of_a_wrong_type(value: Any) -> None:
    _refused(node("a", spec={"podCIDRs": ["10.244.0.0/24", value]}), "spec.podCIDRs[1]")


@pytest.mark.parametrize("value", ["10.244.0.0/24", {"0": "10.244.0.0/24"}, 5, True])
def test_podcidrs_not_a_list(value: Any) -> None:
    _refused(node("a", spec={"podCIDRs": value}), "spec.podCIDRs")


@pytest.mark.parametrize("value", [5, True, 0, False, [], ["10.244.0.0/24"], {"a": 1},
                                   "10.244.0.1/24"])
def test_singular_podcidr_hostile(value: Any) -> None:
    _refused(node("a", spec={"podCIDR": value}), "spec.podCIDRs[0]")


@pytest.mark.parametrize("cidrs", [
    ["10.244.0.0/24", "10.245.0.0/24"],
    ["fd00:1::/64", "fd00:2::/64"],
    ["10.244.0.0/24", "fd00:1::/64", "10.244.0.0/24"],
    pytest.param(["10.244.0.0/24"] * 10_000, id="10000"),
])  # fmt: skip
def test_two_podcidrs_of_a_family(cidrs: list[str]) -> None:
    message = _refused(node("a", cidrs), "a second IPv")
    assert "spec.podCIDRs[" in message


def test_non_canonical_but_exact_podcidr_is_typed() -> None:
    """A prefix written with a leading zero or upper-case hex (the API's own validation takes
    these) is one network: the Node holds the typed value, rendered canonically."""
    n = parse_node(node("a", ["10.244.0.0/024", "FD00:10:244:0:0::/64"]))
    assert [str(c) for c in n.pod_cidrs.values()] == ["10.244.0.0/24", "fd00:10:244::/64"]


@pytest.mark.parametrize("address", [
    "not-an-ip", "10.0.0.1/24", "10.0.0.0/8", "fe80::1%eth0", "fe80::1%", "1.2.3.4%x",
    " 10.0.0.1", "10.0.0.1 ", "10.0.0.1\n", "10.0.0.1;reboot", "010.0.0.1", "0x0a.0.0.1",
    "１０.０.０.１", "10.0.0", "10.0.0.256", "", "::g", pytest.param("a" * 100_000, id="huge"),
    1234, None, 1.5, True, ["10.0.0.1"], {"ip": "10.0.0.1"},
])  # fmt: skip
def test_hostile_internal_ips(address: Any) -> None:
    obj = node("a", ["10.244.0.0/24"])
    obj["status"]["addresses"] = [{"type": "InternalIP", "address": address}]
    _refused(obj, "status.addresses[0] (InternalIP)")


@pytest.mark.parametrize(("key", "value", "field"), [
    ("spec", [], "spec"), ("spec", "x", "spec"), ("spec", 0, "spec"), ("spec", False, "spec"),
    ("status", [], "status"), ("status", "x", "status"), ("status", 0, "status"),
    ("metadata", [], "metadata.name"), ("metadata", "a", "metadata.name"),
    ("metadata", None, "metadata.name"),
])  # fmt: skip
def test_parts_of_a_wrong_type(key: str, value: Any, field: str) -> None:
    obj = node("a", ["10.244.0.0/24"], ["10.0.0.1"])
    obj[key] = value
    _refused(obj, field)


@pytest.mark.parametrize("value", ["10.0.0.1", {"type": "InternalIP"}, 5, False, {}])
def test_addresses_not_a_list(value: Any) -> None:
    obj = node("a", ["10.244.0.0/24"])
    obj["status"]["addresses"] = value
    _refused(obj, "status.addresses")


@pytest.mark.parametrize("obj", [[], "node", 5, None, [("metadata", {"name": "a"})]])
def test_not_an_object(obj: Any) -> None:
    with pytest.raises(BadNode):
        parse_node(obj)


def test_absent_parts_are_empty() -> None:
    """``spec`` or ``status`` absent or null (a Node just registered) is no podCIDR, no
    address: a Node without them, not a refusal."""
    for obj in ({"metadata": {"name": "a"}}, {"metadata": {"name": "a"}, "spec": None,
                                              "status": None}):  # fmt: skip
        assert parse_node(obj) == Node("a", {}, {})
    obj = node("a", ["10.244.0.0/24"])
    obj["status"]["addresses"] = None
    assert parse_node(obj).internal_ips == {}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.sampled_from(["10.244.0.0/24", "fd00::/64", "10.0.0.1", "fd00::1", "InternalIP",
                       "a", "10.244.0.1/24", "fe80::1%eth0"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["name", "podCIDRs", "podCIDR", "addresses", "type",
                                       "address", "x"]), children, max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(meta=JSON, spec=JSON, status=JSON, name=st.sampled_from(["a", "b-1", "", 5, None]))
def test_any_shape_is_a_node_or_a_refusal(meta: Any, spec: Any, status: Any, name: Any) -> None:
    """Whatever the JSON holds, parse_node returns a Node of typed values or raises BadNode."""
    if isinstance(meta, dict):
        meta = {**meta, "name": name}
    obj = {"metadata": meta, "spec": spec, "status": status}
    try:
        n = parse_node(obj)
    except BadNode as err:
        assert "\n" not in str(err)
        return
    assert isinstance(n.name, str)
    assert all(isinstance(c, ipaddress.IPv4Network | ipaddress.IPv6Network) and c.version == f
               for f, c in n.pod_cidrs.items())  # fmt: skip
    assert all(isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address) and a.version == f
               for f, a in n.internal_ips.items())  # fmt: skip
