"""podnet.firewall.table without root: the owner comment's bounds, a default state's table, the
incremental scripts of the forward maps (mutation testing of the pure core,
docs/testing.md)."""

from __future__ import annotations

import pytest

from podnet.firewall import table
from podnet.firewall.table import BridgeNat, TableState
from podnet.values import Dnat


def test_bridge_nat_fields() -> None:
    b = BridgeNat("br0", {4: "10.0.0.0/24"}, {4: True}, {4: "192.0.2.9"})
    assert (b.name, b.subnets, b.nat, b.nat_address) == (
        "br0", {4: "10.0.0.0/24"}, {4: True}, {4: "192.0.2.9"})


def test_default_state_has_no_comment() -> None:
    text = table.script(TableState())
    assert text.startswith("add table inet podnet\ndelete table inet podnet\ntable inet podnet {\n"
                           "  map hostports_v4 {")  # fmt: skip
    assert "comment" not in text


def test_owner_comment_bounds() -> None:
    owner = "p" * 120
    assert f'table inet podnet {{\n  comment "{owner}"\n' in table.script(TableState(owner=owner))
    with pytest.raises(ValueError) as err:
        table.script(TableState(owner="p" * 121))
    assert str(err.value) == "refusing to write the table comment " + repr("p" * 121)[:63] + "…"
    with pytest.raises(ValueError) as err:
        table.script(TableState(owner='podnet:/x"y'))
    assert str(err.value) == "refusing to write the table comment 'podnet:/x\"y'"


def test_forward_maps_incremental() -> None:
    dnats = [Dnat(4, "198.51.100.1", "tcp", 80, "10.0.0.2", 8080, "1"),
             Dnat(6, "2001:db8::1", None, None, "fd00::2", None, "2")]  # fmt: skip
    assert table.add_script(table.FORWARDS, dnats) == (
        "add element inet podnet fwd_v4 { 198.51.100.1 . tcp . 80 : 10.0.0.2 . 8080 }\n"
        "add element inet podnet fwd_whole_v6 { 2001:db8::1 : fd00::2 }\n")
    assert table.delete_script(table.FORWARDS, dnats) == (
        "delete element inet podnet fwd_v4 { 198.51.100.1 . tcp . 80 }\n"
        "delete element inet podnet fwd_whole_v6 { 2001:db8::1 }\n")
    assert table.add_script(table.HOSTPORTS, []) == ""


def test_drops_taken_as_text_or_as_addresses() -> None:
    """The reconciler hands parsed addresses, a caller may hand text: both end in the drop sets,
    each in its family's."""
    import ipaddress

    state = TableState(drops=[ipaddress.ip_address("2001:db8:f::1"), "198.51.100.7"])
    assert [str(a) for a in state.drops] == ["2001:db8:f::1", "198.51.100.7"]
    text = table.script(state)
    assert "set fwd_drop_v4 { type ipv4_addr; elements = { 198.51.100.7 }; }" in text
    assert "set fwd_drop_v6 { type ipv6_addr; elements = { 2001:db8:f::1 }; }" in text


def test_cluster_sets_collapsed_per_family() -> None:
    """The cluster's destinations (a node agent's podCIDRs and no-masquerade CIDRs) go into an
    interval set per family, collapsed: nft refuses overlapping elements in one."""
    cluster = ["10.244.2.0/24", "10.244.0.0/16", "10.245.0.0/16", "fd00:10:244:1::/64", "192.0.2.7/32"]
    assert table.cluster_set(4) == "cluster_v4" and table.cluster_set(6) == "cluster_v6"
    assert table.cluster_elements(cluster, 4) == ["10.244.0.0/15", "192.0.2.7/32"]
    assert table.cluster_elements(cluster, 6) == ["fd00:10:244:1::/64"]
    text = table.script(TableState(cluster=cluster))
    assert ("  set cluster_v4 { type ipv4_addr; flags interval; elements = { 10.244.0.0/15, 192.0.2.7/32 }; }\n"
            in text)
    assert "  set cluster_v6 { type ipv6_addr; flags interval; elements = { fd00:10:244:1::/64 }; }\n" in text
    assert "ip6 saddr @egress_v6 ip6 daddr != @ranges_v6 ip6 daddr != @cluster_v6 masquerade\n" in text
    assert "  set cluster_v4 { type ipv4_addr; flags interval; }\n" in table.script(TableState())
    with pytest.raises(ValueError):
        table.script(TableState(cluster=["10.0.0.0/8 } ; flush ruleset"]))
