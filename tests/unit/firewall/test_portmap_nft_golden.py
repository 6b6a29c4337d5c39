"""Golden files of podnet-portmap's nftables text, one per option combination (no root). The
same text is loaded into a real nft by tests/e2e/portmap/test_portmap_nft_e2e.py."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

import golden
import paths
from podnet.firewall import portmap_nft
from podnet.firewall.portmap_iptables import PortmapOptions
from podnet.values import ContainerNet, PortMappingArg

GOLDEN = paths.GOLDEN / "portmap_nft"
V4 = ContainerNet.from_cidr("172.16.30.2/24")
V6 = ContainerNet.from_cidr("fd00:30::2/64")
TCP = [PortMappingArg(8080, 80, "tcp", None), PortMappingArg(8043, 443, "tcp", None)]

CASES = {
    "defaults": (PortmapOptions(), [V4], TCP),
    "snat_false": (PortmapOptions(snat=False), [V4], TCP),
    "mark_bit_5": (PortmapOptions(mark_masq_bit=5), [V4], TCP),
    "masq_all": (PortmapOptions(masq_all=True), [V4, V6], TCP),
    "host_ip": (PortmapOptions(), [V4, V6], [PortMappingArg(5353, 53, "udp", ip_address("192.0.2.1")),
                                             PortMappingArg(5353, 53, "udp", ip_address("2001:db8::1"))]),
    "unspecified_host_ip": (PortmapOptions(), [V4, V6], [PortMappingArg(80, 80, "tcp", ip_address("0.0.0.0")),
                                                         PortMappingArg(81, 81, "tcp", ip_address("::"))]),
    "ipv6_only": (PortmapOptions(), [V6], TCP),
    "tcp_udp_dual": (PortmapOptions(), [V4, V6], [*TCP, PortMappingArg(53, 53, "udp", None)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_setup_golden(name: str) -> None:
    options, nets, maps = CASES[name]
    text = portmap_nft.setup_script(portmap_nft.Listing(None), options, "mynet", "ctr1", nets, maps)
    golden.match(GOLDEN / f"{name}.nft", text)


def test_teardown_golden() -> None:
    chain = portmap_nft.chain_name("mynet", "ctr1")
    listing = portmap_nft.Listing({"nftables": [
        {"chain": {"name": chain, "comment": "mynet ctr1"}},
        {"chain": {"name": portmap_nft.chain_name("mynet", "ctr2")}},
        {"map": {"name": "dispatch_any_v4", "elem": [
            [{"concat": ["tcp", 8080]}, {"jump": {"target": chain}}],
            [{"concat": ["tcp", 9090]}, {"jump": {"target": portmap_nft.chain_name("mynet", "ctr2")}}]]}},
    ]})
    text = portmap_nft.teardown_script(listing, "mynet", "ctr1")
    assert text is not None
    golden.match(GOLDEN / "teardown.nft", text)
    assert portmap_nft.teardown_script(portmap_nft.Listing(None), "mynet", "ctr1") is None
