"""podnet.firewall.dnat without root: what a :class:`Dnat` accepts at the port bounds, its
fields, and the map text of several elements (mutation testing of the pure
core)."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from podnet.firewall import dnat
from podnet.values import Dnat


def test_fields_and_default_owner() -> None:
    d = Dnat(6, ip_address("2001:db8::1"), "udp", 53, "fd00::2", 5353)
    assert (d.family, d.listen, d.protocol, d.port, d.target, d.target_port, d.owner) == (
        6, "2001:db8::1", "udp", 53, "fd00::2", 5353, "")
    assert Dnat(4, None, "tcp", 1, "10.0.0.2", 65535, "ctr").owner == "ctr"
    assert repr(Dnat(4, None, "tcp", 1, "10.0.0.2", 65535, "ctr")) == "Dnat(tcp . 1 : 10.0.0.2 . 65535 [ctr])"


@pytest.mark.parametrize(("port", "target_port"), [(1, 1), (65535, 65535), (None, None)])
def test_ports_accepted(port: int | None, target_port: int | None) -> None:
    proto = None if port is None else "tcp"
    d = Dnat(4, "10.0.0.1", proto, port, "10.0.0.2", target_port)
    assert (d.port, d.target_port) == (port, target_port)


@pytest.mark.parametrize(("port", "target_port", "bad"), [
    (0, 80, 0), (65536, 80, 65536), (80, 0, 0), (80, 65536, 65536), ("80", 80, "80"),
    (80, 8.0, 8.0),
])  # fmt: skip
def test_ports_refused(port: object, target_port: object, bad: object) -> None:
    with pytest.raises(ValueError) as err:
        Dnat(4, None, "tcp", port, "10.0.0.2", target_port)  # type: ignore[arg-type]
    assert str(err.value) == f"refusing a DNAT with port {bad!r}"


@pytest.mark.parametrize(("family", "protocol"), [(5, "tcp"), (4, "sctp"), (6, "TCP")])
def test_family_and_protocol_refused(family: int, protocol: str) -> None:
    with pytest.raises(ValueError) as err:
        Dnat(family, None, protocol, 80, "10.0.0.2", 80)
    assert str(err.value) == f"refusing a DNAT of family {family!r}, protocol {protocol!r}"


def test_map_decl_of_several_elements() -> None:
    dnats = [Dnat(4, None, "tcp", 80, "10.0.0.2", 8080), Dnat(4, None, "udp", 53, "10.0.0.3", 53),
             Dnat(4, "192.0.2.1", "tcp", 80, "10.0.0.4", 80)]  # fmt: skip
    assert dnat.map_decl("hostports", dnat.ANY, 4, dnats) == (
        "  map hostports_any_v4 { type inet_proto . inet_service : ipv4_addr . inet_service; "
        "elements = { tcp . 80 : 10.0.0.2 . 8080, udp . 53 : 10.0.0.3 . 53 }; }\n")
    assert dnat.map_decl("hostports", dnat.PORT, 6, dnats) == (
        "  map hostports_v6 { type ipv6_addr . inet_proto . inet_service : ipv6_addr . "
        "inet_service; }\n")
