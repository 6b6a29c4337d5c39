"""A ``physical`` network's parent is each member's own (LXD's clustered network creation,
``lxd/network/driver_physical.go`` and ``lxd/networks.go``), on three nodes of one OVN lab
(tests/support/ovn_cluster.py): pending until created without ``--target``, each node attaching
only its own parent, restore leaving a parent that is not up or not in its bridge, deleting
without a target; and an uplink's parent must be free (no bridge port, no routed veth, no link
of another OVS bridge).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import ovn_cluster as oc
from ovn_cluster import Cluster
from podnet.cli.demo.ovnlab import Node

pytestmark = pytest.mark.root


def _mapping(cluster: Cluster, node: Node, network: str) -> str | None:
    """The OVS bridge ``node`` maps OVN physical network ``network`` to (None: unmapped)."""
    ids = cluster.lab.vsctl(node, "get", "Open_vSwitch", ".", "external_ids")
    found = re.search(r'ovn-bridge-mappings="?([^",}]*(?:,[^",}]*)*)"?', ids)
    for item in (found.group(1).split(",") if found else []):
        physnet, _, bridge = item.partition(":")
        if physnet == network:
            return bridge
    return None


def _link(cluster: Cluster, node: Node, ifname: str) -> dict[str, Any]:
    """``ip -j link show dev ifname`` in ``node``'s namespace."""
    out = cluster.lab.run(node.netns, "ip", "-j", "-d", "link", "show", "dev", ifname).stdout
    return dict(json.loads(out)[0])


def _in_ovs(cluster: Cluster, node: Node, ifname: str) -> str:
    """The OVS bridge holding port ``ifname`` on ``node`` ("" none)."""
    out = cluster.lab.run(node.netns, "ovs-vsctl", "--timeout=10", "port-to-br", ifname,
                          env=node.env, check=False)  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else ""


def _dummies(cluster: Cluster, node: Node, *names: str) -> None:
    """Free interfaces ``names`` on ``node``: no address, no route, up (what a NIC is before
    networking configures it, or one it leaves alone): veths with peers ``<name>p``, up too."""
    for name in names:
        cluster.lab.run(node.netns, "ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p")
        cluster.lab.run(node.netns, "ip", "link", "set", f"{name}p", "up")
        cluster.lab.run(node.netns, "ip", "link", "set", name, "up")


def test_physical_network_is_pending_until_created_without_target(cluster: Cluster) -> None:
    """LXD's clustered creation, its messages and statuses: a physical network without a
    member's parent is refused ("Network not pending on any node (use --target <node>
    first)"); ``--target`` takes only a member's own keys, of a member OVN knows, once per
    member; the network is Pending (listed, not attached anywhere, not usable as an uplink,
    its global config not settable) until it is created without ``--target``, which refuses
    ``parent``; then it is Created, with the members that have a parent as its locations."""
    n1, n2, n3 = cluster.lab.nodes
    keys = [f"{k}={v}" for k, v in oc.UPLINK.items() if k != "parent"]

    def refused(node: Node, *args: str) -> str:
        out = cluster.ctl(node, "network", *args)
        assert out.returncode == 1, (args, out.stdout)
        return out.stderr.strip()

    try:
        assert refused(n1, "create", "upp", "--type=physical", *keys) == \
            "Error: Network not pending on any node (use --target <node> first)"
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext0", "ipv4.gateway=203.0.113.254/24",
                       "--target", "n1") == 'Error: Config key "ipv4.gateway" may not be used as member-specific key'
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext0", "--target", "nosuch") == \
            'Error: Member "nosuch" not found'
        assert refused(n1, "create", "upo", "--type=ovn", "network=up0", "--target", "n1") == \
            'Error: Network type "ovn" does not support member specific config'
        assert refused(n1, "create", "upp", "--type=physical", "parent=nosuch0", "--target", "n1") == \
            'Error: Parent interface "nosuch0" not found on member "n1"'
        assert "upp" not in cluster.networks(n2)
        out = cluster.ok(n1, "network", "create", "upp", "--type=physical", "parent=ext0", "--target", "n1")
        assert out.strip() == "Network upp pending on member n1"
        assert refused(n2, "create", "upp", "--type=physical", "parent=ext0", "--target", "n1") == \
            'Error: The network is already defined on member "n1"'
        cluster.ok(n2, "network", "create", "upp", "--type=physical", "parent=eth7", "--target", "n3")
        listed = cluster.networks(n2)["upp"]
        assert (listed["status"], listed["locations"], listed["config"]) == ("Pending", ["n1", "n3"], {}), listed
        assert "upp,physical,YES,,,,0,PENDING" in cluster.ok(n3, "network", "list", "-f", "csv")
        assert _mapping(cluster, n1, "upp") is None and _in_ovs(cluster, n1, "ext0") == ""
        assert refused(n1, "set", "upp", "user.a=b") == \
            "Error: Cannot update network global config when not in created state"
        assert "not found" in refused(n1, "create", "ovp", "--type=ovn", "network=upp", "ipv6.address=none")
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext0", *keys) == \
            'Error: Config key "parent" is cluster member specific'
        assert refused(n1, "create", "upp", "--type=ovn", "network=up0") == \
            'Error: Requested network type "ovn" does not match type in existing database record "physical"'
        assert "upp" not in cluster.ok(n2, "network", "restore")  # pending: nothing anywhere
        assert cluster.ok(n1, "network", "create", "upp", "--type=physical", *keys).strip() == "Network upp created"
        shown = oc.yaml_load(cluster.ok(n2, "network", "show", "upp"))
        assert shown["status"] == "Created" and shown["locations"] == ["n1", "n3"], shown
        assert "parent" not in shown["config"] and shown["config"]["ipv4.gateway"] == "203.0.113.254/24", shown
        assert oc.yaml_load(cluster.ok(n2, "network", "show", "upp", "--target", "n3"))["config"]["parent"] == "eth7"
        assert cluster.ok(n3, "network", "get", "upp", "parent", "--target", "n1").strip() == "ext0"
        assert _mapping(cluster, n1, "upp") is not None and _in_ovs(cluster, n1, "ext0") == _mapping(cluster, n1, "upp")
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext1", "--target", "n2") == \
            "Error: Network is not in pending state"
        assert refused(n2, "set", "upp", "parent=ext1") == 'Error: Config key "parent" is cluster member specific'
        assert refused(n2, "set", "upp", "user.a=b", "--target", "n2") == \
            'Error: Config key "user.a" may not be used as member-specific key'
    finally:
        cluster.ctl(n1, "network", "delete", "upp")
    assert _mapping(cluster, n1, "upp") is None and _in_ovs(cluster, n1, "ext0") == ""


def test_each_node_attaches_only_its_own_parent(cluster: Cluster) -> None:
    """n1's parent is ext0, n2's is upl2; n2 and n3 also have a free interface named ext0 (no
    address, no route, up: a NIC at boot), and n3 has no parent recorded. Restore on n2 puts
    only upl2 into the uplink's bridge, and on n3 nothing (no bridge, no mapping): no ext0 but
    n1's is touched. ``network show --target`` shows each member's parent and status.
    ``network set … parent=X --target`` changes one member's parent: from the node itself at
    once, from another node at that node's next restore (the old parent leaves the bridge);
    ``unset`` leaves the member without a parent and its node detaches. A parent recorded for
    a node that lacks it is named by that node's restore (exit 1) and by ``show --target``
    (Unavailable), and is refused when the node sets it for itself. (A parent recorded from
    another node is attached by that node's ``restore --attach-new``.)"""
    n1, n2, n3 = cluster.lab.nodes
    _dummies(cluster, n2, "ext0", "upl2", "upl3")
    _dummies(cluster, n3, "ext0", "upl2")
    try:
        cluster.ok(n2, "network", "create", "upq", "--type=physical", "parent=upl2", "--target", "n2")
        cluster.uplink(n1, "upq", oc.UPLINK)
        bridge1 = _mapping(cluster, n1, "upq")
        assert bridge1 and _in_ovs(cluster, n1, "ext0") == bridge1
        assert _mapping(cluster, n2, "upq") is None  # n2 attaches at its restore
        assert oc.yaml_load(cluster.ok(n2, "network", "show", "upq", "--target", "n2"))["status"] == "Unavailable"
        done = cluster.ok(n2, "network", "restore", "--attach-new")
        bridge2 = _mapping(cluster, n2, "upq")
        assert bridge2 and f"uplink upq: upl2 in OVS bridge {bridge2}, mapped for OVN" in done, done
        assert cluster.lab.vsctl(n2, "list-ports", bridge2).split() == ["upl2"]
        cluster.ok(n3, "network", "restore")
        assert _mapping(cluster, n3, "upq") is None and "pnu" not in cluster.lab.vsctl(n3, "list-br")
        for node in (n2, n3):  # a free NIC that is another node's parent's namesake: untouched
            link = _link(cluster, node, "ext0")
            assert _in_ovs(cluster, node, "ext0") == "" and "master" not in link, (node.name, link)
        assert _in_ovs(cluster, n3, "upl2") == ""
        seen = {m: oc.yaml_load(cluster.ok(n2, "network", "show", "upq", "--target", m)) for m in ("n1", "n2", "n3")}
        assert [seen[m]["config"].get("parent") for m in ("n1", "n2", "n3")] == ["ext0", "upl2", None]
        assert [seen[m]["status"] for m in ("n1", "n2", "n3")] == ["Created", "Created", "Unavailable"], seen
        assert oc.yaml_load(cluster.ok(n2, "network", "show", "upq"))["locations"] == ["n1", "n2"]
        # n2's parent changed from n1: n2 applies it at its next restore
        shown = cluster.ctl(n1, "network", "show", "upq", "--target", "n2")
        cluster.ok(n1, "network", "set", "upq", "parent=upl3", "--target", "n2")
        assert oc.yaml_load(cluster.ok(n2, "network", "show", "upq", "--target", "n2"))["status"] == "Unavailable"
        assert shown.returncode == 0
        cluster.ok(n2, "network", "restore", "--attach-new")
        assert cluster.lab.vsctl(n2, "list-ports", bridge2).split() == ["upl3"]
        assert _in_ovs(cluster, n2, "upl2") == ""
        # from n2 itself: at once, and unset detaches
        cluster.ok(n2, "network", "set", "upq", "parent=upl2", "--target", "n2")
        assert cluster.lab.vsctl(n2, "list-ports", bridge2).split() == ["upl2"]
        cluster.ok(n2, "network", "unset", "upq", "parent", "--target", "n2")
        assert _mapping(cluster, n2, "upq") is None and _in_ovs(cluster, n2, "upl2") == ""
        assert oc.yaml_load(cluster.ok(n1, "network", "show", "upq"))["locations"] == ["n1"]
        # a parent the node lacks: refused by the node itself, named by its restore and show
        bad = cluster.ctl(n3, "network", "set", "upq", "parent=nosuch3", "--target", "n3")
        assert bad.returncode == 1 and 'Parent interface "nosuch3" not found on member "n3"' in bad.stderr, bad.stderr
        cluster.ok(n1, "network", "set", "upq", "parent=nosuch3", "--target", "n3")
        out = cluster.ctl(n3, "network", "restore")
        assert out.returncode == 1, out.stdout
        assert 'network upq: Parent interface "nosuch3" recorded for member "n3" does not exist on this node' \
            in out.stderr, out.stderr
        assert oc.yaml_load(cluster.ok(n3, "network", "show", "upq", "--target", "n3"))["status"] == "Unavailable"
        assert _mapping(cluster, n3, "upq") is None
        cluster.ok(n1, "network", "unset", "upq", "parent", "--target", "n3")
        cluster.ok(n3, "network", "restore")
        assert _in_ovs(cluster, n1, "ext0") == bridge1  # n1's side never moved
    finally:
        cluster.ctl(n1, "network", "delete", "upq")
        for node in (n2, n3):
            cluster.ctl(node, "network", "restore")
        for node, names in ((n2, ("ext0", "upl2", "upl3")), (n3, ("ext0", "upl2"))):
            for name in names:
                cluster.lab.run(node.netns, "ip", "link", "del", name, check=False)
    assert _mapping(cluster, n2, "upq") is None and _mapping(cluster, n1, "upq") is None


def test_restore_does_not_attach_a_parent_that_is_not_up(cluster: Cluster) -> None:
    """``network restore --attach-new`` does not attach a parent that is administratively down,
    nor one that is up without a carrier (operational state LOWERLAYERDOWN): it exits 1 naming
    the parent and its state, and attaches nothing; run again once the parent is up, it
    attaches it. A parent already in the uplink's bridge stays there whatever its state, with
    a plain restore too."""
    n1, n2, _ = cluster.lab.nodes
    lab = cluster.lab
    lab.run(n2.netns, "ip", "link", "add", "upd0", "type", "veth", "peer", "name", "upd1")
    try:
        cluster.ok(n1, "network", "create", "upr", "--type=physical", "parent=upd0", "--target", "n2")
        cluster.ok(n1, "network", "create", "upr", "--type=physical",
                   *[f"{k}={v}" for k, v in oc.UPLINK.items() if k != "parent"])  # fmt: skip
        out = cluster.ctl(n2, "network", "restore", "--attach-new")
        assert out.returncode == 1 and 'Parent interface "upd0" is not up yet (administratively down): ' \
            'not attached; run "podnetctl network restore --attach-new" again once it is up' in out.stderr, out.stderr
        assert _in_ovs(cluster, n2, "upd0") == "" and _mapping(cluster, n2, "upr") is None
        assert "UP" not in _link(cluster, n2, "upd0")["flags"]  # restore did not bring it up either
        lab.run(n2.netns, "ip", "link", "set", "upd0", "up")  # its peer is down: no carrier
        out = cluster.ctl(n2, "network", "restore", "--attach-new")
        assert out.returncode == 1 and '"upd0" is not up yet (operational state LOWERLAYERDOWN)' in out.stderr, out.stderr
        assert _in_ovs(cluster, n2, "upd0") == ""
        lab.run(n2.netns, "ip", "link", "set", "upd1", "up")
        done = cluster.ok(n2, "network", "restore", "--attach-new")
        bridge = _mapping(cluster, n2, "upr")
        assert bridge and _in_ovs(cluster, n2, "upd0") == bridge, done
        lab.run(n2.netns, "ip", "link", "set", "upd1", "down")  # attached: kept, not re-judged
        cluster.ok(n2, "network", "restore")
        assert _in_ovs(cluster, n2, "upd0") == bridge
    finally:
        cluster.ctl(n1, "network", "delete", "upr")
        cluster.ctl(n2, "network", "restore")
        lab.run(n2.netns, "ip", "link", "del", "upd0", check=False)
    assert _mapping(cluster, n2, "upr") is None


def test_restore_never_attaches_a_parent_not_in_its_bridge(cluster: Cluster) -> None:
    """A boot: n2's NIC is up, its DHCP has not answered yet (no address, no route: it looks
    free). Its parent was recorded from n1 (``create --target n2``). ``network restore`` (the
    boot unit) adds nothing to OVS: exit 1 naming the parent and how to attach it, the NIC no
    port, no mapping, once the NIC then gets its address too; everything else is restored.
    ``restore --attach-new`` on n2 attaches a free one; a plain restore then keeps it. A new
    parent set from n1 is likewise not attached by n2's restore (the old one is kept); set on
    n2 itself it is attached at once."""
    n1, n2, _ = cluster.lab.nodes
    lab = cluster.lab
    nic, nic2 = "nbt0", "nbt2"
    for name in (nic, nic2):
        lab.run(n2.netns, "ip", "link", "add", name, "type", "veth", "peer", "name", name + "p")
        lab.run(n2.netns, "ip", "link", "set", name + "p", "up")
        lab.run(n2.netns, "ip", "link", "set", name, "up")
    try:
        cluster.ok(n1, "network", "create", "upb", "--type=physical", f"parent={nic}", "--target", "n2")
        cluster.ok(n1, "network", "create", "upb", "--type=physical",
                   *[f"{k}={v}" for k, v in oc.UPLINK.items() if k != "parent"])  # fmt: skip
        out = cluster.ctl(n2, "network", "restore")
        assert out.returncode == 1, out.stdout
        assert f'network upb: Parent interface "{nic}" recorded for member "n2" is not attached: ' \
            f"restore keeps only a parent already in OVS bridge " in out.stderr, out.stderr
        assert 'attach it on this node with "podnetctl network restore --attach-new" (or "podnetctl ' \
            f'network set upb parent={nic} --target n2")' in out.stderr, out.stderr
        lab.run(n2.netns, "ip", "addr", "add", "192.0.2.50/24", "dev", nic)  # DHCP answers now
        assert _in_ovs(cluster, n2, nic) == "" and _mapping(cluster, n2, "upb") is None
        assert "master" not in _link(cluster, n2, nic)
        assert oc.yaml_load(cluster.ok(n2, "network", "show", "upb", "--target", "n2"))["status"] == "Unavailable"
        # the operator on n2: a parent with an address is refused, a free one attached
        out = cluster.ctl(n2, "network", "restore", "--attach-new")
        assert out.returncode == 1 and f'Parent interface "{nic}" is used by routes (192.0.2.0/24)' in out.stderr, \
            out.stderr
        assert _in_ovs(cluster, n2, nic) == ""
        lab.run(n2.netns, "ip", "addr", "flush", "dev", nic)
        done = cluster.ok(n2, "network", "restore", "--attach-new")
        bridge = _mapping(cluster, n2, "upb")
        assert bridge and f"uplink upb: {nic} in OVS bridge {bridge}, mapped for OVN" in done, done
        assert f"uplink upb: {nic} in OVS bridge {bridge}" in cluster.ok(n2, "network", "restore")  # kept
        assert lab.vsctl(n2, "list-ports", bridge).split() == [nic]
        # a new parent set from n1: n2's restore does not take it, keeps the old one
        cluster.ok(n1, "network", "set", "upb", f"parent={nic2}", "--target", "n2")
        out = cluster.ctl(n2, "network", "restore")
        assert out.returncode == 1 and f'Parent interface "{nic2}" recorded for member "n2" is not attached' \
            in out.stderr, out.stderr
        assert lab.vsctl(n2, "list-ports", bridge).split() == [nic] and _in_ovs(cluster, n2, nic2) == ""
        # set on n2 itself: checked and attached at once
        cluster.ok(n2, "network", "set", "upb", f"parent={nic2}", "--target", "n2")
        assert lab.vsctl(n2, "list-ports", bridge).split() == [nic2]
        cluster.ok(n2, "network", "restore")
    finally:
        cluster.ctl(n1, "network", "delete", "upb")
        cluster.ctl(n2, "network", "restore")
        for name in (nic, nic2):
            lab.run(n2.netns, "ip", "link", "del", name, check=False)
    assert _mapping(cluster, n2, "upb") is None


def test_deleting_a_cluster_network_takes_no_target(cluster: Cluster) -> None:
    """A cluster network is deleted on every member (LXD's DELETE has no member-specific
    form): ``network delete NAME --target`` (the API's ``DELETE …?target=``) is 404 for a name
    that is no member and 400 for a member, and deletes nothing; without a target it goes."""
    n1, n2, _ = cluster.lab.nodes
    try:
        cluster.ok(n1, "network", "create", "upz", "--type=physical", "parent=eth7", "--target", "n3")
        for target, message in (("nosuchmember", 'Error: Member "nosuchmember" not found'),
                                ("n2", "Error: Deleting a network is not member specific: delete it "
                                       "without a target (it is deleted on every member)")):  # fmt: skip
            out = cluster.ctl(n2, "network", "delete", "upz", "--target", target)
            assert (out.returncode, out.stderr.strip()) == (1, message), out
            assert "upz" in cluster.networks(n1)
        assert cluster.ok(n2, "network", "delete", "upz").strip() == "Network upz deleted"
        assert "upz" not in cluster.networks(n1)
    finally:
        cluster.ctl(n1, "network", "delete", "upz")


def test_a_parent_recorded_for_every_node_takes_no_nic(cluster: Cluster) -> None:
    """A record with one ``parent`` for the whole cluster (as an earlier podnet wrote it, or
    any NB writer): restore on a node with a free NIC of that name (no address, no route, up:
    every NIC at boot) leaves it alone and says so, on every node; the first ``network set
    parent=… --target`` replaces it with that member's own, which only that node attaches."""
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Ovsdb, omap

    n1, n2, _ = cluster.lab.nodes
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    record = nbmod.Record("physical", "", {**oc.UPLINK, "parent": "ext0"})
    key = f"{nbmod.PREFIX}upl"
    _dummies(cluster, n2, "ext0")
    nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                  "mutations": [["external_ids", "insert", omap({key: record.dumps()})]]}])  # fmt: skip
    try:
        for node in (n2, n1):
            done = cluster.ok(node, "network", "restore")
            assert f'uplink upl: "parent" is recorded for every node, not per member: nothing changed here; ' \
                f"record this node's with: network set upl parent=<interface> --target {node.name}" in done, done
            assert _in_ovs(cluster, node, "ext0") == "" and _mapping(cluster, node, "upl") is None, node.name
        assert "master" not in _link(cluster, n2, "ext0")
        cluster.ok(n1, "network", "set", "upl", "parent=ext0", "--target", "n1")
        assert _in_ovs(cluster, n1, "ext0") == _mapping(cluster, n1, "upl") != None  # noqa: E711
        shown = oc.yaml_load(cluster.ok(n2, "network", "show", "upl"))
        assert shown["locations"] == ["n1"] and "parent" not in shown["config"], shown
        assert "uplink upl:" not in cluster.ok(n2, "network", "restore")
        assert _in_ovs(cluster, n2, "ext0") == "" and _mapping(cluster, n2, "upl") is None
    finally:
        cluster.ctl(n1, "network", "delete", "upl")
        nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                      "mutations": [["external_ids", "delete", ["set", [key]]]]}])  # fmt: skip
        for node in (n1, n2):
            cluster.ctl(node, "network", "restore")
        cluster.lab.run(n2.netns, "ip", "link", "del", "ext0", check=False)


def test_uplink_parent_must_be_free(cluster: Cluster) -> None:
    """An uplink never takes over a link that is someone else's or in use: a port of a Linux
    bridge (a pod's bridge port, say), a veth carrying only routes (a CNI ptp host end), a
    bridge with ports, the lower device of a macvlan, a port of an OVS bridge podnet did not make,
    an OVS bridge's own device and the loopback are each refused naming why, and nothing is
    recorded or mapped; the links are as they were."""
    n1 = cluster.lab.nodes[0]
    lab = cluster.lab
    setup = [
        ["ip", "link", "add", "brx", "type", "bridge"],
        ["ip", "link", "add", "vx0", "type", "veth", "peer", "name", "vx1"],
        ["ip", "link", "set", "vx0", "master", "brx"],
        ["ip", "link", "add", "vr0", "type", "veth", "peer", "name", "vr1"],
        ["ip", "link", "set", "vr0", "up"],
        ["ip", "route", "add", "10.99.0.5/32", "dev", "vr0"],
        ["ip", "link", "add", "vl0", "type", "veth", "peer", "name", "vl1"],
        ["ip", "link", "add", "link", "vl0", "name", "vl0m", "type", "macvlan", "mode", "bridge"],
        ["ip", "link", "add", "vo0", "type", "veth", "peer", "name", "vo1"],
        ["ip", "link", "add", "vm0", "type", "veth", "peer", "name", "vm1"],
        ["ip", "link", "set", "vm0", "up"],
        ["ip", "route", "add", "10.98.0.0/24", "nexthop", "via", "10.97.0.2", "dev", "vm0", "onlink",
         "nexthop", "via", "10.97.0.3", "dev", "vr0", "onlink"],
    ]
    cases = {
        "vx0": 'is attached to brx',
        "vr0": "is used by routes (10.98.0.0/24, 10.99.0.5)",
        "brx": "is a bridge or bond with ports (vx0)",
        "vl0": "is the lower device of vl0m",
        "vo0": "is a port of OVS bridge adminbr",
        "adminbr": "is an OVS bridge",
        "lo": "is the loopback device",
        "vm0": "is used by routes (10.98.0.0/24)",  # a multipath route's nexthop
        "ovs-netdev": "is Open vSwitch's own datapath device",
    }
    try:
        for argv in setup:
            lab.run(n1.netns, *argv)
        lab.vsctl(n1, "add-br", "adminbr", "--", "set", "bridge", "adminbr", "datapath_type=netdev",
                  "--", "add-port", "adminbr", "vo0")  # fmt: skip
        links = lab.run(n1.netns, "ip", "-o", "link", "show").stdout
        def routes_now() -> list[str]:  # link-local ones come and go with the lab's own links
            return [r for r in lab.run(n1.netns, "ip", "route", "show", "table", "all").stdout.splitlines()
                    if "fe80::" not in r]  # fmt: skip

        routes = routes_now()
        for parent, why in cases.items():
            out = cluster.ctl(n1, "network", "create", "upx", "--type=physical", f"parent={parent}", "--target", "n1")
            assert out.returncode == 1 and f'Parent interface "{parent}" {why}' in out.stderr, (parent, out.stderr)
            assert "upx" not in cluster.networks(n1)
            assert "upx" not in lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")
        assert lab.vsctl(n1, "port-to-br", "vo0").strip() == "adminbr"
        assert lab.run(n1.netns, "ip", "-o", "link", "show").stdout == links
        assert routes_now() == routes
    finally:
        lab.vsctl(n1, "--if-exists", "del-br", "adminbr")
        for link in ("vx0", "vr0", "vl0", "vo0", "vm0", "brx"):
            lab.run(n1.netns, "ip", "link", "del", link, check=False)
