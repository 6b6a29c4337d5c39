"""The typed boundary, without root: :mod:`podnet.checked` refuses what a
tool's syntax cannot carry, the renderers refuse anything that did not pass it, the NetConf,
prevResult, forward and network parsers refuse scoped IPv6 addresses naming the key — and the
source holds no other way in (no ``ipaddress`` parsing of text outside :mod:`podnet.checked`,
no family taken from ``":" in s``)."""

from __future__ import annotations

import ast
import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import paths
from podnet import checked
from podnet.errors import InvalidConfig
from podnet.link import veth
from podnet.netconf import PodnetConf
from podnet.networks import config as netconfig
from podnet.networks import forwards
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, ForwardPort
from podnet.values import Dnat

SRC = paths.SRC / "podnet"
ZONED = 'fd00:9::2%x\ninclude "/etc/passwd"'


@pytest.mark.parametrize("text", ["fd00::1%eth0", ZONED, "fe80::1%1", "fd00::%x/64"])
def test_scoped_addresses_are_refused(text: str) -> None:
    # ipaddress itself takes them: the reason this module exists
    with pytest.raises(ValueError):
        checked.ip(text)
    for parse in (checked.network, checked.interface):
        with pytest.raises(checked.ScopedAddress, match="a %zone is not accepted"):
            parse(text)


@pytest.mark.parametrize("text", [" 10.0.0.1", "10.0.0.1\n", "10.0.0.1/24", "", 7, None])
def test_ip_takes_only_a_bare_address(text: Any) -> None:
    with pytest.raises(checked.BadValue):
        checked.ip(text)


def test_values_and_family() -> None:
    assert checked.ip("2001:DB8::1") == ipaddress.ip_address("2001:db8::1")
    assert checked.network("10.0.0.0/8") == ipaddress.ip_network("10.0.0.0/8")
    with pytest.raises(checked.BadValue):
        checked.network("10.0.0.1/8")
    assert checked.network("10.0.0.1/8", strict=False) == ipaddress.ip_network("10.0.0.0/8")
    with pytest.raises(checked.BadValue, match="CIDR form"):
        checked.interface("10.0.0.1")
    assert checked.interface("10.0.0.1", prefix=False).network.prefixlen == 32
    typed = (checked.ip("::1"), checked.ip("10.0.0.1"), checked.network("fd00::/8"))
    assert [checked.family(x) for x in typed] == [6, 4, 6]
    with pytest.raises(AttributeError):  # text has no family until it is parsed
        checked.family("10.0.0.1")  # type: ignore[arg-type]
    assert checked.FAMILIES[6].wildcard == "::" and checked.FAMILIES[4].column == "ip_address_v4"


@pytest.mark.parametrize("name", ["eth0", "net1", "eth0.100", "a-b_c", "x" * 15])
def test_names_accepted(name: str) -> None:
    assert checked.name(name) == name


@pytest.mark.parametrize("name", ['e"x', "e'x", "e#x", "e;x", "e{x}", "e%x", "e\\x", "e x",
                                  "e\nx", "é", "x" * 16, "", ".", "..", "e/x", "e:x", "e\x00"])
def test_names_refused(name: str) -> None:
    with pytest.raises(checked.BadValue):
        checked.name(name)


@pytest.mark.parametrize("path", ["/var/lib/podnet", "/run/netns/cni-1234", "/proc/42/ns/net",
                                  "/var/lib/pod+net@x,y=z~"])
def test_paths_accepted(path: str) -> None:
    assert checked.path(path) == path


@pytest.mark.parametrize("path", ["rel/dir", "/a/../b", "/a/./b", "/a//b", "/a/", "/a b",
                                  "/a\nlink del lo", '/a"', "/a'", "/a#", "/a;b", "/a{b}", "/a%b",
                                  "/a\\b", "/a\x00", "/\udcff", "/" + "x" * 200, 5])
def test_paths_refused(path: Any) -> None:
    with pytest.raises(checked.BadValue):
        checked.path(path)


def test_renderers_refuse_what_did_not_pass_a_boundary() -> None:
    zoned = ipaddress.ip_address("fd00::1%x")  # built behind checked's back
    for bad in (zoned, "10.0.0.1\ninclude", "10.0.0.1 ", '10.0.0.1"'):
        with pytest.raises(ValueError):
            checked.text(bad)
        with pytest.raises(ValueError):
            Dnat(6, bad, "tcp", 80, "fd00::2", 80)
        with pytest.raises(ValueError):
            Dnat(6, None, "tcp", 80, bad, 80)
    with pytest.raises(ValueError):
        Dnat(4, "10.0.0.1", "tcp; flush ruleset", 80, "10.0.0.2", 80)
    with pytest.raises(ValueError):
        checked.batch_line("link del lo # x")
    with pytest.raises(ValueError):
        veth.q('eth0"')
    link = dict(host_if="pnx", ifname="eth0", netns="/run/netns/x", mtu=1500, host_mac="a",
                pod_mac="b")  # fmt: skip
    with pytest.raises(ValueError):
        veth.PodLink(addresses=[(6, "fd00::2%x\nlink del lo", "fd00::1")], **link)  # type: ignore[arg-type]


def _conf(**keys: Any) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": "n", "type": "podnet", "ranges": ["10.0.0.0/24"],
            **keys}


@pytest.mark.parametrize(("keys", "key"), [
    ({"runtimeConfig": {"portMappings": [{"hostPort": 1, "containerPort": 1,
                                          "hostIP": ZONED}]}}, "runtimeConfig.portMappings[0].hostIP"),
    ({"runtimeConfig": {"ips": [ZONED]}}, "runtimeConfig.ips[0]"),
    ({"ranges": ["fd00::%x/64"]}, "ranges[0]"),
    ({"dataDir": "/var/lib/podnet\nlink del lo"}, "dataDir"),
    ({"logFile": "/var/log/x\ny"}, "logFile"),
    ({"network": 'br0"'}, "network"),
    ({"ipam": {"type": "host-local\nx"}, "ranges": None}, "ipam.type"),
])  # fmt: skip
def test_netconf_refuses_naming_the_key(keys: dict[str, Any], key: str) -> None:
    raw = _conf(**keys)
    if raw.get("ranges") is None:
        raw.pop("ranges")
    with pytest.raises(InvalidConfig) as caught:
        from podnet.cni.netconf import parse_requested_ips

        conf = PodnetConf(raw)
        parse_requested_ips(conf.raw, {})
    assert caught.value.msg.startswith(f"{key}:"), caught.value.msg
    assert "\n" not in caught.value.msg


def test_prev_result_refuses_scoped_addresses() -> None:
    from podnet.cni.result import validate

    for ip in ({"address": "fd00::2%x/64"}, {"address": "fd00::2/64", "gateway": ZONED}):
        with pytest.raises(InvalidConfig, match="a %zone is not accepted"):
            validate({"ips": [ip]})


def test_forwards_and_networks_refuse_scoped_addresses() -> None:
    view = forwards.NetworkView("br0", "bridge", {6: [ipaddress.ip_network("fd00:1::/64")]})
    for forward in (Forward("fd00:9::2%x"), Forward("2001:db8::1", config={"target_address": ZONED}),
                    Forward("2001:db8::1", ports=[ForwardPort("", "tcp", "80", "", ZONED)])):
        with pytest.raises(NetworkError, match="a %zone is not accepted") as caught:
            forwards.validate(view, forward)
        assert "\n" not in str(caught.value)
    for key, value in (("ipv6.address", "fd00:1::1%x/64"), ("ipv6.nat.address", ZONED)):
        with pytest.raises(NetworkError, match="a %zone is not accepted"):
            netconfig.validate("br0", {key: value})


def _calls(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "ipaddress" and \
                node.func.attr in ("ip_address", "ip_network", "ip_interface"):
            out.append((node.lineno, node.func.attr))
    return out


def _colon_tests(tree: ast.AST) -> list[int]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and \
                node.left.value == ":" and any(isinstance(op, ast.In) for op in node.ops):
            out.append(node.lineno)
    return out


def test_no_other_way_in() -> None:
    """Text becomes an address only through :mod:`podnet.checked`, and no module decides a
    family by looking for ':' — except the listed places, each for a reason."""
    allowed_colon = {
        # text that is not an address; LXD's shared.ParseIPToNet appends /128 to text with a
        # colon, /32 otherwise, and its message shows that — no family is decided
        "networks/forwards.py": "LXD's message for an unparsable listen address (no family)",
    }
    parsing, colons = [], []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        tree = ast.parse(path.read_text())
        if rel != "checked.py":
            parsing += [f"{rel}:{line} ipaddress.{fn}" for line, fn in _calls(tree)]
        if rel not in allowed_colon:
            colons += [f"{rel}:{line}" for line in _colon_tests(tree)]
    assert parsing == [], parsing
    assert colons == [], colons


@pytest.mark.parametrize("condition", [["-M", "/tmp/x"], ["--modprobe=/tmp/x"],
                                       ["--modprobe", "/tmp/x"], ["-d", "10.0.0.1;x"],
                                       ["-M/tmp/x"], ["--modp=/tmp/x"], ["--mod", "/tmp/x"]])
def test_iptables_conditions_cannot_run_programs(condition: list[str]) -> None:
    """``-M``/``--modprobe`` makes iptables run a program of the caller's choice."""
    from podnet.plugins.podnet_portmap import PortmapConf

    with pytest.raises(InvalidConfig, match="conditionsV4"):
        PortmapConf({"cniVersion": "1.0.0", "name": "n", "type": "podnet-portmap",
                     "conditionsV4": condition})


@pytest.mark.parametrize(("raw", "shown"), [("\x1b[2J", "\\x1b[2J"), ("a\u2028b", "a\\u2028b"),
                                           ("a\x85b", "a\\x85b"), ("\u202etxt", "\\u202etxt"),
                                           ("plain é", "plain é")])
def test_printable_and_one_line(raw: str, shown: str) -> None:
    assert checked.printable(raw) == shown
    assert checked.one_line(raw + "\n" + raw) == shown + "\\n" + shown
    assert len(checked.one_line("x" * 5000)) == checked.MAX_MESSAGE


def _renderings(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[str]:
    """The address as podnet writes it and as others might: exploded, upper-case, with leading
    zeros, whitespace, a zone, a prefix, a NUL."""
    canonical = str(address)
    out = [canonical, address.exploded, canonical.upper(), f" {canonical}", f"{canonical}\n",
           f"{canonical}%eth0", f"{canonical}/32", f"{canonical}\x00"]  # fmt: skip
    if address.version == 4:
        out += [".".join(f"0{o}" for o in canonical.split(".")), canonical.rsplit(".", 1)[0]]
    return out


@given(st.ip_addresses())
def test_canonical_is_exactly_what_text_renders(address: Any) -> None:
    """:func:`checked.canonical` (the NB registry's test of another writer's forward key) holds
    for a text exactly when :func:`checked.text` renders its address as that text."""
    for value in _renderings(address):
        try:
            expected = checked.text(checked.ip(value)) == value
        except ValueError:
            expected = False
        assert checked.canonical(value) is expected, repr(value)
    assert checked.canonical(str(address))


@pytest.mark.parametrize("value", ["010.0.0.1", "10.0.0", "10.0.0.256", "0x0a.0.0.1", "1.2.3.4 ",
                                   "FD00::1", "fd00:0::1", "", "fd00::1%x"])  # fmt: skip
def test_canonical_refuses_what_podnet_never_writes(value: str) -> None:
    assert not checked.canonical(value)


@given(st.text(alphabet=st.sampled_from("0123456789abcdefABCDEF.:%/ \x00١٢"), max_size=45))
def test_canonical_agrees_with_text_on_any_string(value: str) -> None:
    try:
        expected = checked.text(checked.ip(value)) == value
    except ValueError:
        expected = False
    assert checked.canonical(value) is expected
