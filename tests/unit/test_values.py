"""The value model (podnet.values) and podnet's result for one attachment (podnet.cni.result
.attachment), exactly: what each value takes and refuses, its key, its text (no root; in the
mutation selection with the store-backed tests/unit/store/test_conflict_matrix.py)."""

from __future__ import annotations

import ipaddress

import pytest

from podnet.cni import result
from podnet.values import (
    ANY,
    FORWARD,
    HOSTPORT,
    PORT,
    WHOLE,
    Claim,
    ContainerNet,
    Dnat,
    Holder,
    PortMapping,
    PortMappingArg,
)


def test_port_mapping_arg_claims_per_family() -> None:
    any_both = PortMappingArg(8080, 80, "tcp", None)
    assert not any_both.specific
    assert any_both.claim(6).key() == "tcp . 8080" and any_both.claim(6).family == 6
    wildcard = PortMappingArg(8080, 80, "udp", ipaddress.ip_address("::"))
    assert not wildcard.specific and wildcard.claim(6).listen is None
    given = PortMappingArg(53, 5353, "udp", ipaddress.ip_address("192.0.2.1"))
    assert given.specific
    assert given.claim(4).key() == "192.0.2.1 . udp . 53" and given.claim(4).kind == PORT
    assert repr(any_both) == "*:8080/tcp->80"
    assert repr(given) == "192.0.2.1:53/udp->5353"


def test_port_mapping_values() -> None:
    m = PortMapping("c1", "0.0.0.0", 8080, "tcp", "10.0.0.2", 80)
    assert m.family == 4 and m.wildcard
    assert PortMapping("c1", "::", 1, "udp", "fd00::2", 2).family == 6
    assert PortMapping("c1", "::", 1, "udp", "fd00::2", 2, family=4).family == 4  # as given
    assert not PortMapping("c1", "192.0.2.1", 1, "udp", "10.0.0.2", 2).wildcard
    assert m.as_dict() == {"container_id": "c1", "host_ip": "0.0.0.0", "host_port": 8080,
                           "protocol": "tcp", "container_ip": "10.0.0.2",
                           "container_port": 80}  # fmt: skip
    assert repr(m) == "PortMapping(0.0.0.0:8080/tcp -> 10.0.0.2:80 [c1])"
    d = m.dnat()
    assert (d.family, d.listen, d.protocol, d.port, d.target, d.target_port, d.owner) == (
        4, None, "tcp", 8080, "10.0.0.2", 80, "c1")
    specific = PortMapping("c2", "2001:db8::1", 53, "udp", "fd00::3", 5353).dnat()
    assert specific.listen == "2001:db8::1" and specific.element() == (
        "2001:db8::1 . udp . 53 : fd00::3 . 5353")
    with pytest.raises(ValueError):
        PortMapping("c1", "0.0.0.0", 1, "tcp", "not an address", 1).family  # noqa: B018


def test_container_net_from_cidr() -> None:
    net = ContainerNet.from_cidr("172.16.30.2/24")
    assert (net.family, net.ip, net.network) == (4, "172.16.30.2", "172.16.30.0/24")
    net6 = ContainerNet.from_cidr("fd00:0:0::2/64")
    assert (net6.family, net6.ip, net6.network) == (6, "fd00::2", "fd00::/64")
    with pytest.raises(ValueError):
        ContainerNet.from_cidr("172.16.30.2")


def test_claim_kinds_keys_and_text() -> None:
    port = Claim(4, "192.0.2.1", "tcp", 80, "o")
    anyc = Claim(6, None, "udp", 53)
    whole = Claim(4, ipaddress.ip_address("192.0.2.1"), None, None)
    assert (port.kind, anyc.kind, whole.kind) == (PORT, ANY, WHOLE)
    assert (port.key(), anyc.key(), whole.key()) == ("192.0.2.1 . tcp . 80", "udp . 53", "192.0.2.1")
    assert repr(port) == "Claim(192.0.2.1 . tcp . 80 [o])" and anyc.owner == ""
    dnat = Dnat(4, "198.51.100.1", None, None, "10.0.0.3", None, "f")
    assert dnat.value() == "10.0.0.3" and dnat.element() == "198.51.100.1 : 10.0.0.3"
    assert repr(dnat) == "Dnat(198.51.100.1 : 10.0.0.3 [f])"
    assert Dnat(6, "2001:db8::1", "tcp", 1, "fd00::2", 65535).value() == "fd00::2 . 65535"


@pytest.mark.parametrize(("args", "message"), [
    ((5, None, "tcp", 80), "refusing a DNAT of family 5, protocol 'tcp'"),
    ((4, None, "sctp", 80), "refusing a DNAT of family 4, protocol 'sctp'"),
    ((4, None, "tcp", None), "refusing a DNAT with protocol 'tcp' and port None"),
    ((4, "192.0.2.1", None, 80), "refusing a DNAT with protocol None and port 80"),
    ((4, None, "tcp", 0), "refusing a DNAT with port 0"),
    ((4, None, "tcp", 65536), "refusing a DNAT with port 65536"),
    ((4, None, "tcp", True), "refusing a DNAT with port True"),
    ((4, None, "tcp", "80"), "refusing a DNAT with port '80'"),
    ((4, "192.0.2.1; drop", "tcp", 80), None),
])  # fmt: skip
def test_claim_refuses(args: tuple[object, ...], message: str | None) -> None:
    with pytest.raises(ValueError) as err:
        Claim(*args)  # type: ignore[arg-type]
    if message is not None:
        assert str(err.value) == message


def test_claim_edges_accepted() -> None:
    assert Claim(4, None, "tcp", 1).port == 1 and Claim(6, None, "udp", 65535).port == 65535


@pytest.mark.parametrize(("args", "message"), [
    ((4, "192.0.2.1", "tcp", 80, "10.0.0.2", None), "refusing a DNAT with port 80 and target port None"),
    ((4, "192.0.2.1", None, None, "10.0.0.2", 80), "refusing a DNAT with port None and target port 80"),
    ((4, "192.0.2.1", "tcp", 80, "10.0.0.2", 0), "refusing a DNAT with port 0"),
])  # fmt: skip
def test_dnat_refuses(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError) as err:
        Dnat(*args)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_holder() -> None:
    m = PortMapping("c1", "0.0.0.0", 8080, "tcp", "10.0.0.2", 80)
    h = Holder(HOSTPORT, "c1", m)
    assert h.claim.key() == "tcp . 8080" and h.claim.family == 4
    assert repr(h) == "Holder(hostPort c1: PortMapping(0.0.0.0:8080/tcp -> 10.0.0.2:80 [c1]))"
    d = Dnat(4, "198.51.100.1", "tcp", 80, "10.0.0.2", 8080, "net")
    assert Holder(FORWARD, "net", d).claim is d


@pytest.mark.parametrize(("a", "b", "meet"), [
    (Claim(4, None, "tcp", 80), Claim(4, "192.0.2.1", "tcp", 80), True),
    (Claim(4, "192.0.2.1", "tcp", 80), Claim(4, None, "tcp", 80), True),
    (Claim(4, "192.0.2.1", "tcp", 80), Claim(4, "192.0.2.2", "tcp", 80), False),
    (Claim(4, "192.0.2.1", "tcp", 80), Claim(4, "192.0.2.1", "udp", 80), False),
    (Claim(4, "192.0.2.1", "tcp", 80), Claim(4, "192.0.2.1", "tcp", 81), False),
    (Claim(4, "192.0.2.1", None, None), Claim(4, "192.0.2.1", "udp", 9), True),
    (Claim(4, "192.0.2.1", "udp", 9), Claim(4, "192.0.2.1", None, None), True),
    (Claim(4, "192.0.2.1", None, None), Claim(4, "192.0.2.2", None, None), False),
    (Claim(4, None, "tcp", 80), Claim(6, None, "tcp", 80), False),
])  # fmt: skip
def test_overlaps_is_symmetric_and_exact(a: Claim, b: Claim, meet: bool) -> None:
    assert a.overlaps(b) is meet and b.overlaps(a) is meet


def test_attachment_result_exactly() -> None:
    routed = result.attachment("pnabc", "aa:aa:aa:aa:aa:01", "eth0", "aa:aa:aa:aa:aa:02",
                               "/run/netns/p", 1450,
                               {6: ("fd00::5", "fd00::1", None), 4: ("10.0.0.5", "10.0.0.1", None)},
                               {})  # fmt: skip
    assert routed == {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "pnabc", "mac": "aa:aa:aa:aa:aa:01", "mtu": 1450},
                       {"name": "eth0", "mac": "aa:aa:aa:aa:aa:02", "mtu": 1450,
                        "sandbox": "/run/netns/p"}],
        "ips": [{"address": "10.0.0.5/32", "gateway": "10.0.0.1", "interface": 1},
                {"address": "fd00::5/128", "gateway": "fd00::1", "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "::/0", "gw": "fd00::1"}],
        "dns": {},
    }
    bridged = result.attachment("pnabc", "m1", "eth1", "m2", "/run/netns/p", 1500,
                                {4: ("10.0.0.5", "10.0.0.1", None)}, {4: 24})  # fmt: skip
    assert bridged["ips"] == [{"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 1}]
    assert bridged["interfaces"][1]["name"] == "eth1"
