"""Spare logical switch ports of OVN networks, on three nodes of one OVN lab
(tests/support/ovn_cluster.py): each node keeps spare ports per network, an ADD claims one
without costing a pod its address, the GC takes the spares of a chassis that stays out of the
southbound DB, a full subnet gives the spares' addresses to the management port, and spares
never take an address from pods adding at once.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

import ovn_cluster as oc
from ovn_cluster import Cluster
from podnet.cli.demo.ovnlab import Node

pytestmark = pytest.mark.root


def spares_of(cluster: Cluster, network: str) -> dict[str, list[tuple[str, str]]]:
    """``{chassis: [(port, dynamic_addresses)]}`` of ``network``'s spare ports."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import spares

    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    return {n.name: spares(nb, network, n.name) for n in cluster.lab.nodes}


def test_spare_ports_are_claimed_and_never_cost_a_pod_its_address(cluster: Cluster) -> None:
    """Each node keeps ``SPARES`` spare ports per OVN network, made by its first ADD. A later
    ADD claims one (the pod takes its name, MAC and address, its row keeps the port's name) and
    makes its replacement; TX checksum offload is off on both veth ends; CHECK, ``network
    restore``, traffic across nodes and DEL work on a claimed port; GC leaves the spares alone; a requested MAC makes the pod its own port. In a
    /29 (5 free addresses) the spares give their addresses back: 5 pods get one on two nodes,
    the 6th is refused (no free address) and leaves nothing. ``network delete`` is not kept
    from deleting the network by the spares, and takes them with it."""
    import sqlite3

    from podnet.ovn.ports import SPARES, port_name

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up16", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovsp", "--type=ovn", "network=up16", "ipv4.address=10.202.1.1/29",
               "ipv6.address=none")  # fmt: skip
    names = [f"{cluster.lab.prefix}-s{i}" for i in range(7)]
    made: list[tuple[Node, str, str]] = []
    server: oc.Echo | None = None

    def row_port(node: Node, cid: str) -> str | None:
        with sqlite3.connect(cluster.data[node.name] / "podnet.db") as db:
            found = db.execute("SELECT ovn_port FROM pod_attachments WHERE container_id = ?", (cid,)).fetchone()
        return found[0] if found else None

    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        assert spares_of(cluster, "ovsp") == {"n1": [], "n2": [], "n3": []}
        oc.plugin(cluster, n2, "ADD", "sp-0", names[0], "ovsp")
        made.append((n2, "sp-0", names[0]))
        assert row_port(n2, "sp-0") == port_name("ovsp", "sp-0", "eth0")  # no spare yet: its own
        cluster.lab.nbctl("--wait=sb", "sync")
        pool = spares_of(cluster, "ovsp")
        assert len(pool["n2"]) == SPARES and not pool["n1"] and not pool["n3"], pool
        ready = {p: d.split() for p, d in pool["n2"] if len(d.split()) == 2}
        assert ready, pool  # 5 addresses, 3 taken: at least one spare has one
        second = oc.plugin(cluster, n2, "ADD", "sp-1", names[1], "ovsp")
        made.append((n2, "sp-1", names[1]))
        claimed = row_port(n2, "sp-1")
        assert claimed in dict(pool["n2"]), (claimed, pool)
        mac, address = dict(pool["n2"])[claimed].split()
        assert second["ips"][0]["address"] == f"{address}/29" and second["interfaces"][1]["mac"] == mac, second
        ids = json.loads(oc.nbctl(cluster, "--format=json", "--columns=external_ids", "find", "Logical_Switch_Port",
                               f"name={claimed}"))["data"][0][0][1]  # fmt: skip
        assert dict(ids)["podnet-container"] == "sp-1" and "podnet-spare" not in dict(ids), ids
        after = spares_of(cluster, "ovsp")["n2"]
        assert len(after) == SPARES and claimed not in dict(after), after  # replaced
        oc.plugin(cluster, n2, "CHECK", "sp-1", names[1], "ovsp", prevResult=second)
        host_if = second["interfaces"][0]["name"]
        for ns, dev in ((n2.netns, host_if), (names[1], "eth0")):  # userspace datapath: both ends
            shown = subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-k", dev], capture_output=True,
                                   text=True).stdout  # fmt: skip
            assert "tx-checksumming: off" in shown, (dev, shown)
        cluster.lab.vsctl(n2, "del-port", "br-int", host_if)
        assert f"{host_if} in br-int as {claimed}" in cluster.ok(n2, "network", "restore")
        oc.plugin(cluster, n2, "CHECK", "sp-1", names[1], "ovsp", prevResult=second)
        third = oc.plugin(cluster, n3, "ADD", "sp-2", names[2], "ovsp")  # n3's first: fills its pool
        made.append((n3, "sp-2", names[2]))
        server = oc.Echo(names[1], "POD-SP1", 8080)
        a3 = third["ips"][0]["address"].split("/")[0]
        assert oc.tcp(names[2], address, 8080) == f"POD-SP1 ::ffff:{a3}"
        own = "0a:5e:00:00:00:07"
        fourth = oc.plugin(cluster, n2, "ADD", "sp-3", names[3], "ovsp", runtimeConfig={"mac": own})
        made.append((n2, "sp-3", names[3]))
        assert fourth["interfaces"][1]["mac"] == own and row_port(n2, "sp-3") == port_name("ovsp", "sp-3", "eth0")
        valid = [{"containerID": cid, "ifname": "eth0"} for node, cid, _ in made if node is n2]
        before = spares_of(cluster, "ovsp")["n2"]
        oc.plugin(cluster, n2, "GC", "", names[0], "ovsp", **{"cni.dev/valid-attachments": valid})
        assert spares_of(cluster, "ovsp")["n2"] == before
        oc.plugin(cluster, n3, "ADD", "sp-4", names[4], "ovsp")
        made.append((n3, "sp-4", names[4]))
        addresses = [a for a in pod_addresses(cluster) if a.startswith("10.202.1.")]
        assert len(set(addresses)) == 5, addresses  # every free address is a pod's
        out = oc.run_plugin(cluster, n2, "ADD", "sp-5", names[5], "ovsp")
        error = json.loads(out.stdout)
        assert out.returncode == 1 and "no free address" in error["msg"], out.stdout
        assert row_port(n2, "sp-5") is None and not oc.nbctl(
            cluster, "--bare", "--columns=name", "find", "Logical_Switch_Port", "external_ids:podnet-container=sp-5")
        assert spares_of(cluster, "ovsp") == {"n1": [], "n2": [], "n3": []}  # given back
        for node, cid, ns in made:
            oc.plugin(cluster, node, "DEL", cid, ns, "ovsp")
        made.clear()
        assert not oc.pod_ports(cluster)
        oc.plugin(cluster, n3, "ADD", "sp-6", names[6], "ovsp")
        oc.plugin(cluster, n3, "DEL", "sp-6", names[6], "ovsp")
        assert len(spares_of(cluster, "ovsp")["n3"]) == SPARES  # the pool outlives the pod
        cluster.ok(n1, "network", "delete", "ovsp")
        left = oc.nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Switch_Port")
        assert "pn-ovsp-" not in left, left
    finally:
        if server is not None:
            server.stop()
        for node, cid, ns in made:
            oc.run_plugin(cluster, node, "DEL", cid, ns, "ovsp")
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovsp")
        cluster.ctl(n1, "network", "delete", "up16")


def test_gc_takes_the_spares_of_a_chassis_that_stays_out_of_the_sb(cluster: Cluster) -> None:
    """A node taken out of the cluster (its chassis deleted from the SB) leaves spare ports that
    nothing will claim, holding addresses. Another node's GC marks them; when the chassis is
    back first (a routine ovn-controller stop or restart deletes the row too), the next GC
    unmarks them; when it is still out ``ORPHAN_GRACE`` seconds after the mark, GC removes them
    and keeps its own node's. Nothing changes while the SB lacks the GC's own chassis, nor for
    an SB without a datapath of the network's switch (another cluster's). The node, back, makes
    spares again at its next ADD."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import ORPHAN_GRACE, ORPHAN_TAKEOVER, ORPHANED, SPARES, sweep_spares

    n1, n2, n3 = cluster.lab.nodes
    lab = cluster.lab
    cluster.uplink(n1, "up17", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovgc", "--type=ovn", "network=up17", "ipv6.address=none")
    names = [f"{lab.prefix}-g{i}" for i in range(3)]
    stopped: list[Node] = []

    def chassis_del(node: Node) -> None:
        lab.stop_controller(node)
        stopped.append(node)
        lab.run(None, "ovn-sbctl", "--timeout=10", f"--db={lab.sb_unix}", "--if-exists", "chassis-del", node.name)

    def back(node: Node) -> None:
        lab.start_controller(node)
        stopped.remove(node)
        lab.wait_chassis(nodes=[node])

    def gc() -> None:
        oc.plugin(cluster, n2, "GC", "", names[0], "ovgc", **{"cni.dev/valid-attachments": []})

    def marks() -> dict[str, str]:
        rows = json.loads(oc.nbctl(cluster, "--format=json", "--columns=name,external_ids", "list",
                                "Logical_Switch_Port"))["data"]  # fmt: skip
        return {name: dict(ids[1])[ORPHANED] for name, ids in rows if ORPHANED in dict(ids[1])}

    def age(seconds: int, marker: str = "n2", value: str | None = None) -> None:
        for port in marks():
            mark = value or f"{int(time.time()) - seconds}@{marker}"
            oc.nbctl(cluster, "set", "Logical_Switch_Port", port, f'external_ids:{ORPHANED}="{mark}"')

    def marked_by_n2_now() -> bool:
        found = marks()
        return set(found) == n3_spares and all(
            v.endswith("@n2") and abs(int(v.split("@")[0]) - time.time()) < 30 for v in found.values())

    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        for node, ns in ((n2, names[0]), (n3, names[1])):  # each node's first ADD makes its spares
            oc.plugin(cluster, node, "ADD", f"gc-{node.name}", ns, "ovgc")
            oc.plugin(cluster, node, "DEL", f"gc-{node.name}", ns, "ovgc")
        pool = spares_of(cluster, "ovgc")
        assert len(pool["n2"]) == len(pool["n3"]) == SPARES and not pool["n1"], pool
        n3_spares = {p for p, _ in pool["n3"]}
        chassis_del(n3)
        gc()
        assert spares_of(cluster, "ovgc") == pool and marked_by_n2_now(), marks()
        back(n3)  # a restart: the row was gone for a while
        gc()
        assert spares_of(cluster, "ovgc") == pool and not marks()
        chassis_del(n3)
        gc()
        age(ORPHAN_GRACE - 60)
        gc()  # not yet
        assert spares_of(cluster, "ovgc") == pool and set(marks()) == n3_spares
        age(ORPHAN_GRACE + 1, marker="n1")
        gc()  # n1's mark, by n1's clock: n1 judges it
        assert spares_of(cluster, "ovgc") == pool and all(v.endswith("@n1") for v in marks().values())
        for hostile in (f"{ORPHAN_GRACE + 1}@n9", f"{int(time.time()) - ORPHAN_TAKEOVER - 1}@n1",
                        f"{int(time.time()) + 86400}@n2", "x@n2", "17"):  # fmt: skip
            # a gone marker, a live one that does not sweep, ahead of n2's clock, not marks:
            # n2 marks them anew
            age(0, value=hostile)
            gc()
            assert spares_of(cluster, "ovgc") == pool and marked_by_n2_now(), (hostile, marks())
        age(ORPHAN_GRACE + 1)
        nb = Ovsdb([lab.nb_unix], "OVN_Northbound")
        assert sweep_spares(nb, {"n1", "n2"}, set(), "n2", int(time.time())) == 0  # not this NB's SB
        chassis_del(n2)
        gc()  # the SB lacks n2's own chassis: not one to judge by
        assert spares_of(cluster, "ovgc") == pool
        back(n2)
        gc()
        assert spares_of(cluster, "ovgc") == {"n1": [], "n2": pool["n2"], "n3": []} and not marks()
        back(n3)
        oc.plugin(cluster, n3, "ADD", "gc-back", names[2], "ovgc")
        oc.plugin(cluster, n3, "DEL", "gc-back", names[2], "ovgc")
        assert len(spares_of(cluster, "ovgc")["n3"]) == SPARES
    finally:
        for node in stopped:
            lab.start_controller(node)
        lab.wait_chassis()
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovgc")
        cluster.ctl(n1, "network", "delete", "up17")


def pod_addresses(cluster: Cluster) -> list[str]:
    """The IPv4 addresses of the ports pods hold (their ``dynamic_addresses``)."""
    rows = json.loads(oc.nbctl(cluster, "--format=json", "--columns=external_ids,dynamic_addresses", "list",
                            "Logical_Switch_Port"))["data"]  # fmt: skip
    return [d.split()[1] for ids, d in rows
            if "podnet-container" in dict(ids[1]) and isinstance(d, str) and len(d.split()) > 1]  # fmt: skip


def test_a_full_subnet_takes_the_spares_addresses_for_the_management_port(cluster: Cluster) -> None:
    """In a /29 (5 free addresses) three pods and n2's two spares hold all five; a hostPort pod
    then claims a spare, and n2's management port, which needs an address of its own, takes
    one the other spares give back: the ADD succeeds and the hostPort answers from n3."""
    from podnet.ovn.ports import SPARES

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up17", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovsq", "--type=ovn", "network=up17", "ipv4.address=10.202.2.1/29",
               "ipv6.address=none")  # fmt: skip
    names = [f"{cluster.lab.prefix}-q{i}" for i in range(4)]
    made: list[str] = []
    server: oc.Echo | None = None
    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        for i in range(3):
            oc.plugin(cluster, n2, "ADD", f"q-{i}", names[i], "ovsq")
            made.append(f"q-{i}")
        cluster.lab.nbctl("--wait=sb", "sync")
        held = [d for _, d in spares_of(cluster, "ovsq")["n2"] if len(d.split()) == 2]
        assert len(held) == SPARES, held  # 3 pods and 2 spares: the subnet is full
        ports = {"portMappings": [{"hostPort": 8095, "containerPort": 8080, "protocol": "tcp"}]}
        result = oc.plugin(cluster, n2, "ADD", "q-h", names[3], "ovsq", runtimeConfig=ports)
        made.append("q-h")
        server = oc.Echo(names[3], "POD-QH", 8080)
        seen = oc.tcp(n3.netns, n2.address, 8095)
        assert seen.startswith("POD-QH ::ffff:10.202.2."), (seen, result)
    finally:
        if server is not None:
            server.stop()
        for i, cid in enumerate(made):
            oc.run_plugin(cluster, n2, "DEL", cid, names[min(i, 3)], "ovsq")
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovsq")
        cluster.ctl(n2, "network", "restore")  # n2's management port goes with the network
        cluster.ctl(n1, "network", "delete", "up17")


def test_spares_never_take_an_address_from_pods_adding_at_once(cluster: Cluster) -> None:
    """Review findings on the spare ports, each with the outcome it must have:

    * four first ADDs at once on one node leave it ``SPARES`` spares, not one set each;
    * in a /29 (5 free addresses) one pod and then four ADDs at once on three nodes all get an
      address, round after round (the spares give theirs back, to whichever ADD asks);
    * dual-stack, the IPv4 /29 full of pods and spares: a pod still gets an IPv4 address, never
      an IPv6-only result;
    * the same container ID ADDed on a second node is refused (102) and leaves nothing there,
      and a DEL on that node leaves the first node's port alone."""
    from podnet.ovn.ports import SPARES

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up18", oc.UPLINK6)
    made: list[tuple[Node, str, str, str]] = []
    spaces: list[str] = []

    def space(tag: str) -> str:
        ns = f"{cluster.lab.prefix}-{tag}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        spaces.append(ns)
        return ns

    def at_once(network: str, calls: list[tuple[Node, str]]) -> dict[str, subprocess.CompletedProcess[str]]:
        out: dict[str, subprocess.CompletedProcess[str]] = {}

        def add(node: Node, cid: str) -> None:
            ns = space(cid)
            out[cid] = oc.run_plugin(cluster, node, "ADD", cid, ns, network)
            made.append((node, cid, ns, network))

        oc.at_once(add, calls)
        return out

    def release() -> None:
        for node, cid, ns, network in made:
            oc.run_plugin(cluster, node, "DEL", cid, ns, network)
        made.clear()

    try:
        cluster.ok(n1, "network", "create", "ovsw", "--type=ovn", "network=up18", "ipv4.address=10.202.3.1/24",
                   "ipv6.address=none")  # fmt: skip
        out = at_once("ovsw", [(n2, f"w-{i}") for i in range(4)])
        assert all(o.returncode == 0 for o in out.values()), {c: o.stdout for c, o in out.items()}
        cluster.lab.nbctl("--wait=sb", "sync")
        assert len(spares_of(cluster, "ovsw")["n2"]) == SPARES, spares_of(cluster, "ovsw")
        release()

        cluster.ok(n1, "network", "create", "ovsx", "--type=ovn", "network=up18", "ipv4.address=10.202.4.1/29",
                   "ipv6.address=none")  # fmt: skip
        for r in range(3):
            first = at_once("ovsx", [(n2, f"x{r}-0")])
            assert first[f"x{r}-0"].returncode == 0, first[f"x{r}-0"].stdout
            cluster.lab.nbctl("--wait=sb", "sync")
            out = at_once("ovsx", [(node, f"x{r}-{i}") for i, node in ((1, n1), (2, n2), (3, n3), (4, n1))])
            refused = {c: o.stdout for c, o in out.items() if o.returncode != 0}
            assert not refused, (r, refused, pod_addresses(cluster))
            got = [json.loads(o.stdout)["ips"][0]["address"] for o in [*first.values(), *out.values()]]
            assert len(set(got)) == 5 and all(a.startswith("10.202.4.") for a in got), got
            release()
            cluster.lab.nbctl("--wait=sb", "sync")

        cluster.ok(n1, "network", "create", "ovsy", "--type=ovn", "network=up18", "ipv4.address=10.202.5.1/29",
                   "ipv6.address=fd42:202:5::1/64")  # fmt: skip
        for i, node in enumerate((n2, n2, n2, n3)):
            result = at_once("ovsy", [(node, f"y-{i}")])[f"y-{i}"]
            assert result.returncode == 0, result.stdout
            ips = [ip["address"] for ip in json.loads(result.stdout)["ips"]]
            assert any(a.startswith("10.202.5.") for a in ips) and any(":" in a for a in ips), (i, ips)
        release()

        twice = space("twice-a"), space("twice-b")
        oc.plugin(cluster, n2, "ADD", "same-id", twice[0], "ovsw")
        made.append((n2, "same-id", twice[0], "ovsw"))
        out_ = oc.run_plugin(cluster, n3, "ADD", "same-id", twice[1], "ovsw")
        assert out_.returncode == 1 and json.loads(out_.stdout)["code"] == 102, out_.stdout
        assert "same-id" not in cluster.ok(n3, "pods")
        oc.plugin(cluster, n3, "DEL", "same-id", twice[1], "ovsw")
        held = oc.nbctl(cluster, "--bare", "--columns=name", "find", "Logical_Switch_Port",
                     "external_ids:podnet-container=same-id")  # fmt: skip
        assert held.strip(), "n3's DEL removed n2's port"
        release()
    finally:
        release()
        for ns in spaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for network in ("ovsw", "ovsx", "ovsy"):
            cluster.ctl(n1, "network", "delete", network)
        cluster.ctl(n1, "network", "delete", "up18")
