"""Generated nftables text equals the expected files (no root); tests/e2e/plugin/test_golden_nft.py applies
every one of those files with a real ``nft -f`` in a throwaway network namespace."""

from __future__ import annotations

import pytest

import golden
import paths
from podnet.firewall import hostports, table
from podnet.firewall.table import BridgeNat, TableState
from podnet.values import Dnat, PortMapping

GOLDEN = paths.GOLDEN

MAPPINGS = [
    PortMapping("a", "0.0.0.0", 8080, "tcp", "10.244.2.5", 80),
    PortMapping("a", "::", 8080, "tcp", "fd00:10:244::5", 80),
    PortMapping("b", "192.0.2.1", 5353, "udp", "10.244.2.6", 53),
]
RANGES = [("10.244.2.0/24", True), ("10.244.3.0/24", True), ("fd00:10:244::/64", False)]

FORWARDS = [
    Dnat(4, "198.51.100.1", "tcp", 80, "10.0.0.2", 8080, "1"),
    Dnat(4, "198.51.100.1", None, None, "10.0.0.3", None, "1"),
    Dnat(6, "2001:db8:f::1", "udp", 53, "fd00:1::2", 53, "2"),
]
BRIDGES = [
    BridgeNat("br0", {4: "10.0.0.0/24", 6: "fd00:1::/64"}, {4: True, 6: True}, {4: "192.0.2.9", 6: None}),
    BridgeNat("br1", {4: "10.1.0.0/24"}, {4: False}, {4: None}),
]


#: A Kubernetes node agent's cluster destinations: podCIDRs under a no-masquerade 10.0.0.0/8, two
#: adjacent /24s, and IPv6; the table holds them collapsed (10.0.0.0/8, 192.168.0.0/23, the /64s).
CLUSTER = ["10.244.1.0/24", "10.0.0.0/8", "10.244.3.0/24", "192.168.0.0/24", "192.168.1.0/24",
           "fd00:10:244:1::/64", "fd00:10:244:3::/64"]


def full(ranges=RANGES, mappings=MAPPINGS, forwards=(), bridges=(), drops=(), owner="", cluster=CLUSTER):  # type: ignore[no-untyped-def]
    return table.script(TableState(ranges, [hostports.dnat_of(m) for m in mappings], forwards, bridges,
                                   drops, owner, cluster=cluster))


CASES = {
    "table_full.nft": lambda: full(),
    "table_empty.nft": lambda: full([], [], cluster=[]),
    # 2001:db8:f::1 has a port and no default target: its other traffic is dropped (LXD's network forwards: unmatched traffic is dropped)
    "table_networks.nft": lambda: full(forwards=FORWARDS, bridges=BRIDGES, drops=["2001:db8:f::1"],
                                       owner="podnet:/var/lib/podnet"),
    "add.nft": lambda: hostports.add_script(MAPPINGS),
    "delete.nft": lambda: hostports.delete_script(MAPPINGS),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    text = CASES[name]()
    golden.match(GOLDEN / name, text)


def test_overlapping_cluster_destinations_collapse() -> None:
    """An interval set refuses overlapping elements: 10.0.0.0/8 takes the podCIDRs under it."""
    text = full([], [])
    assert ("set cluster_v4 { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 192.168.0.0/23 }; }"
            in text)
    assert table.cluster_elements(CLUSTER, 6) == ["fd00:10:244:1::/64", "fd00:10:244:3::/64"]
    assert "ip daddr != @ranges_v4 ip daddr != @cluster_v4 masquerade" in text


def test_adjacent_ranges_collapse() -> None:
    text = full(RANGES, [])
    assert "set ranges_v4 { type ipv4_addr; flags interval; elements = { 10.244.2.0/23 }; }" in text
