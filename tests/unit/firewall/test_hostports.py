"""podnet.firewall.hostports without root: a ``portmap_entries`` row as its DNAT, map name and
element (mutation testing of the pure core,
docs/testing.md)."""

from __future__ import annotations

from podnet.firewall import hostports
from podnet.values import PortMapping


def test_dnat_of_keeps_the_container_as_owner() -> None:
    d = hostports.dnat_of(PortMapping("ctr-1", "192.0.2.1", 8080, "tcp", "10.244.0.5", 80))
    assert (d.family, d.listen, d.protocol, d.port, d.target, d.target_port, d.owner) == (
        4, "192.0.2.1", "tcp", 8080, "10.244.0.5", 80, "ctr-1")
    any6 = hostports.dnat_of(PortMapping("ctr-2", "::", 53, "udp", "fd00::5", 5353))
    assert (any6.family, any6.listen, any6.owner) == (6, None, "ctr-2")


def test_map_name_and_expected_element() -> None:
    specific = PortMapping("a", "192.0.2.1", 8080, "tcp", "10.244.0.5", 80)
    wildcard4 = PortMapping("a", "0.0.0.0", 8080, "tcp", "10.244.0.5", 80)
    wildcard6 = PortMapping("b", "::", 53, "udp", "fd00::5", 5353)
    specific6 = PortMapping("b", "2001:db8::1", 53, "udp", "fd00::5", 5353)
    assert [hostports.map_name(m) for m in (specific, wildcard4, wildcard6, specific6)] == [
        "hostports_v4", "hostports_any_v4", "hostports_any_v6", "hostports_v6"]
    assert hostports.expected_element(specific) == "192.0.2.1 . tcp . 8080 : 10.244.0.5 . 80"
    assert hostports.expected_element(wildcard6) == "udp . 53 : fd00::5 . 5353"
