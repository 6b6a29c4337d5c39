"""Pods on OVN networks through the real ``podnet`` plugin, on three nodes of one OVN lab
(tests/support/ovn_cluster.py): addresses, MTU and TCP/UDP between nodes, ``used_by``,
``ipv4.nat.address`` as the outside sees it, ADD trusting the local mirror only while the NB
holds the network, DEL with the NB down and the GC after, every node adding at once (dual
stack), and hostPorts reaching OVN pods from another node.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

import ovn_cluster as oc
from ovn_cluster import Cluster
from podnet.cli.demo.ovnlab import Node

pytestmark = pytest.mark.root


def test_pods_on_three_nodes_share_one_ovn_network(cluster: Cluster) -> None:
    """A pod on each of n1, n2 and n3 joins one OVN network through the real oc.plugin: addresses
    from OVN's dynamic addressing (distinct, in the subnet), MTU the network's; TCP and UDP
    between pods cross the tunnel (the server sees the caller's own address); a pod reaching
    the outside is seen from the SNAT address (the router's uplink address). CHECK names an
    OVS port that went; restore puts it back. DEL removes ports, veths and rows on each node."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up5", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn5", "--type=ovn", "network=up5", "ipv6.address=none")
    pods = {"a": (n1, f"{cluster.lab.prefix}-pa"), "b": (n2, f"{cluster.lab.prefix}-pb"),
            "c": (n3, f"{cluster.lab.prefix}-pd")}  # fmt: skip
    servers: list[oc.Echo] = []
    try:
        for _, ns in pods.values():
            subprocess.run(["ip", "netns", "add", ns], check=True)
        results = {k: oc.plugin(cluster, node, "ADD", f"c-{k}", ns, "ovn5") for k, (node, ns) in pods.items()}
        config = cluster.networks(n2)["ovn5"]["config"]
        subnet = config["ipv4.address"].rsplit(".", 1)[0]
        addrs = {k: r["ips"][0]["address"].split("/")[0] for k, r in results.items()}
        assert len(set(addrs.values())) == 3 and all(a.startswith(subnet + ".") for a in addrs.values()), addrs
        assert all(r["interfaces"][1]["mtu"] == int(config["bridge.mtu"]) for r in results.values())
        for k, (_, ns) in pods.items():
            servers.append(oc.Echo(ns, f"POD-{k.upper()}", 8080))
        for src, dst in (("a", "b"), ("b", "c"), ("c", "a")):
            ns = pods[src][1]
            assert oc.tcp(ns, addrs[dst], 8080) == f"POD-{dst.upper()} ::ffff:{addrs[src]}", (src, dst)
            assert oc.udp(ns, addrs[dst], 8080) == f"POD-{dst.upper()} ::ffff:{addrs[src]}", (src, dst)
        out = f"{cluster.lab.prefix}-out"
        servers.append(oc.Echo(out, "OUTSIDE", 8081))
        for k in pods:  # n1 is the gateway chassis: the others' pods go through the tunnel first
            assert oc.tcp(pods[k][1], "203.0.113.254", 8081) == "OUTSIDE ::ffff:203.0.113.10", k
            assert oc.udp(pods[k][1], "203.0.113.254", 8081) == "OUTSIDE ::ffff:203.0.113.10", k
        for k, (node, ns) in pods.items():
            oc.plugin(cluster, node, "CHECK", f"c-{k}", ns, "ovn5", prevResult=results[k])
            oc.plugin(cluster, node, "STATUS", "", ns, "ovn5")
        node, ns = pods["b"]  # CHECK names what is off: the OVS port gone
        host_if = results["b"]["interfaces"][0]["name"]
        cluster.lab.vsctl(node, "del-port", "br-int", host_if)
        out_ = oc.run_plugin(cluster, node, "CHECK", "c-b", ns, "ovn5", prevResult=results["b"])
        assert out_.returncode == 1 and '"code": 103' in out_.stdout and host_if in out_.stdout, out_.stdout
        done = cluster.ok(node, "network", "restore")  # puts the port back from the node's view
        assert f"{host_if} in br-int" in done, done
        oc.plugin(cluster, node, "CHECK", "c-b", ns, "ovn5", prevResult=results["b"])
        assert oc.tcp(pods["a"][1], addrs["b"], 8080) == f"POD-B ::ffff:{addrs['a']}"
        for k, (node, ns) in pods.items():
            oc.plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn5")
            oc.plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn5")  # again: nothing left, still 0
        assert not oc.pod_ports(cluster)
        for node in (n1, n2, n3):
            ports = cluster.lab.vsctl(node, "list-ports", "br-int").split()
            assert not [p for p in ports if p.startswith("pn")], ports
    finally:
        oc.discard(cluster, servers, pods, "ovn5", "up5")


def test_used_by_and_delete_name_the_pods_of_every_node(cluster: Cluster) -> None:
    """An OVN network's ``used_by`` lists its pods on every node (``/1.0/instances/<container
    ID>``, as a bridge's), alike from each node, and ``network list`` counts them (USED BY);
    delete is refused naming them; after their DEL ``used_by`` is empty and delete goes. The
    uplink's ``used_by`` is its OVN network only."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up6", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn6", "--type=ovn", "network=up6", "ipv6.address=none")
    pods = {"ua": (n1, f"{cluster.lab.prefix}-ua"), "ub": (n2, f"{cluster.lab.prefix}-ub")}
    try:
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            oc.plugin(cluster, node, "ADD", f"c-{k}", ns, "ovn6")
        for node in (n1, n2, n3):
            nets = cluster.networks(node)
            assert nets["ovn6"]["used_by"] == ["/1.0/instances/c-ua", "/1.0/instances/c-ub"], node.name
            assert nets["up6"]["used_by"] == ["/1.0/networks/ovn6"], node.name
        rows = [r.split(",") for r in cluster.ok(n3, "network", "list", "-f", "csv").splitlines()]
        assert [r[6] for r in rows if r[0] == "ovn6"] == ["2"], rows
        refused = cluster.ctl(n3, "network", "delete", "ovn6")
        assert (refused.returncode, refused.stderr) == (
            1, "Error: The network is currently in use by c-ua, c-ub\n"), refused
        for k, (node, ns) in pods.items():
            oc.plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn6")
        assert cluster.networks(n2)["ovn6"]["used_by"] == []
        cluster.ok(n3, "network", "delete", "ovn6")
    finally:
        for k, (node, ns) in pods.items():
            oc.run_plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn6")
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn6")
        cluster.ctl(n1, "network", "delete", "up6")


def test_nat_address_is_what_the_outside_sees(cluster: Cluster) -> None:
    """``ipv4.nat.address``: pods on n2 and n3 reaching an outside
    server over TCP and UDP are seen from that address, not the router's. It can be changed in
    place: unset brings back the router's address, a new one is used at once, one outside the
    uplink's routes is refused (LXD's message) and changes nothing, ``ipv4.nat=false`` removes
    the SNAT rule."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    cluster.uplink(n1, "up9", oc.UPLINK)
    cluster.ok(n2, "network", "create", "ovn9", "--type=ovn", "network=up9", "ipv6.address=none",
               "ipv4.nat.address=198.51.100.77")  # fmt: skip
    router = cluster.networks(n3)["ovn9"]["config"]["volatile.network.ipv4.address"]
    subprocess.run(["ip", "-n", out, "route", "replace", "198.51.100.0/24", "via", router], check=True)
    pods = {"b": (n2, f"{cluster.lab.prefix}-nb"), "c": (n3, f"{cluster.lab.prefix}-nc")}
    server = oc.Echo(out, "OUTSIDE", 8082)
    try:
        oc.add_pods(cluster, pods, "n", "ovn9")
        oc.seen_from(pods, "203.0.113.254", 8082, "OUTSIDE ::ffff:198.51.100.77")
        cluster.ok(n3, "network", "unset", "ovn9", "ipv4.nat.address")
        assert oc.tcp(pods["b"][1], "203.0.113.254", 8082) == f"OUTSIDE ::ffff:{router}"
        bad = cluster.ctl(n2, "network", "set", "ovn9", "ipv4.nat.address=192.0.2.7")
        assert bad.returncode == 1 and 'Uplink network does not contain "192.0.2.7" in its routes' in bad.stderr
        assert "ipv4.nat.address" not in cluster.networks(n1)["ovn9"]["config"]
        cluster.ok(n2, "network", "set", "ovn9", "ipv4.nat.address=198.51.100.78")
        assert oc.tcp(pods["c"][1], "203.0.113.254", 8082) == "OUTSIDE ::ffff:198.51.100.78"
        cluster.ok(n1, "network", "set", "ovn9", "ipv4.nat=false")
        assert oc.tcp(pods["c"][1], "203.0.113.254", 8082) == "<timeout>"  # no SNAT: no way back
        assert oc.nbctl(cluster, "--bare", "--columns=_uuid", "list", "NAT") == ""
    finally:
        oc.release(cluster, [server], pods, "n", "ovn9")
        subprocess.run(["ip", "-n", out, "route", "del", "198.51.100.0/24"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn9")
        cluster.ctl(n1, "network", "delete", "up9")


def test_add_trusts_the_mirror_only_while_the_nb_holds_it(cluster: Cluster) -> None:
    """An ADD makes its port on the condition that the NB still holds the network's record as
    the node mirrored it (so it need not read the registry): a port made with the record held
    is there; with another record the NB refuses (Conflict) and nothing is made. A network
    deleted and made again with another subnet under the same name: the node's next ADD gets an
    address of the new subnet, not the mirrored one."""
    import sqlite3

    from podnet.ovn import ports
    from podnet.ovn.nb import Record
    from podnet.ovn.ovsdb import Conflict, Ovsdb

    n1, n2, _ = cluster.lab.nodes
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    ns = f"{cluster.lab.prefix}-mi"
    cluster.uplink(n1, "up11", oc.UPLINK)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        cluster.ok(n1, "network", "create", "ovm", "--type=ovn", "network=up11", "ipv4.address=10.201.1.1/24",
                   "ipv6.address=none")  # fmt: skip
        shown = cluster.networks(n1)["ovm"]
        held = Record("ovn", shown["description"], shown["config"]).dumps()
        ports.add_port(nb, "ovm", "pn-ovm-probe-1", "0a:00:00:00:00:01", "n1", {}, held)
        with pytest.raises(Conflict):
            ports.add_port(nb, "ovm", "pn-ovm-probe-2", "0a:00:00:00:00:02", "n1", {}, held.replace("10.201.1.1", "10.201.9.1"))
        listed = oc.nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Switch_Port")
        assert "pn-ovm-probe-1" in listed and "pn-ovm-probe-2" not in listed
        ports.delete_port(nb, "ovm", "pn-ovm-probe-1")
        first = oc.plugin(cluster, n2, "ADD", "mi-1", ns, "ovm")["ips"][0]["address"]
        assert first.startswith("10.201.1."), first
        oc.plugin(cluster, n2, "DEL", "mi-1", ns, "ovm")
        cluster.ok(n1, "network", "delete", "ovm")
        cluster.ok(n1, "network", "create", "ovm", "--type=ovn", "network=up11", "ipv4.address=10.201.2.1/26",
                   "ipv6.address=none")  # fmt: skip
        again = oc.plugin(cluster, n2, "ADD", "mi-2", ns, "ovm")["ips"][0]
        assert again["address"].startswith("10.201.2.") and again["address"].endswith("/26"), again
        assert again["gateway"] == "10.201.2.1", again
        oc.plugin(cluster, n2, "DEL", "mi-2", ns, "ovm")
        # a change of the description alone: the next ADD mirrors it too (else every ADD after
        # would fail the condition and read the whole registry)
        shown = oc.yaml_load(cluster.ok(n1, "network", "show", "ovm"))
        assert cluster.ctl(n1, "network", "edit", "ovm", input=oc.yaml_dump({**shown, "description": "mirrored"})).returncode == 0
        oc.plugin(cluster, n2, "ADD", "mi-1", ns, "ovm")
        with sqlite3.connect(cluster.data[n2.name] / "podnet.db") as db:
            row = db.execute("SELECT description FROM networks WHERE name = 'ovm'").fetchone()
        assert row == ("mirrored",), row
        oc.plugin(cluster, n2, "DEL", "mi-1", ns, "ovm")
    finally:
        for cid in ("mi-1", "mi-2"):
            oc.run_plugin(cluster, n2, "DEL", cid, ns, "ovm")
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovm")
        cluster.ctl(n1, "network", "delete", "up11")


def test_del_with_the_nb_down_then_gc(cluster: Cluster) -> None:
    """DEL succeeds with the NB stopped (the veth, OVS port and row go; a warning names the
    port left in the NB); a GC once the NB is back removes that port. With ovn-controller
    stopped an ADD fails at its deadline naming the cause (104) and leaves nothing; with
    ovn-northd stopped an ADD that claims one of the node's spare ports succeeds (northd had
    made its addresses and binding), and once no spare is left it fails naming northd (11, try
    again later) and leaves nothing."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import delete_spares

    n1 = cluster.lab.nodes[0]
    cluster.uplink(n1, "up6", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn6", "--type=ovn", "network=up6", "ipv6.address=none")
    ns = f"{cluster.lab.prefix}-pc"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        result = oc.plugin(cluster, n1, "ADD", "c-c", ns, "ovn6")
        host_if = result["interfaces"][0]["name"]
        cluster.lab.stop_nb()
        try:
            out = oc.run_plugin(cluster, n1, "DEL", "c-c", ns, "ovn6")
            assert out.returncode == 0, out.stdout + out.stderr
        finally:
            cluster.lab.start_nb()
        assert host_if not in cluster.lab.vsctl(n1, "list-ports", "br-int").split()
        assert oc.pod_ports(cluster)
        oc.plugin(cluster, n1, "GC", "", ns, "ovn6", **{"cni.dev/valid-attachments": []})
        assert not oc.pod_ports(cluster)
        cluster.lab.stop_controller(n1)
        try:
            out = oc.run_plugin(cluster, n1, "ADD", "c-d", ns, "ovn6", toolTimeout=3)
            error = json.loads(out.stdout)
            assert out.returncode == 1 and error["code"] == 104, out.stdout
            assert "ovn-controller" in error["msg"], out.stdout
        finally:
            cluster.lab.start_controller(n1)
        assert not oc.pod_ports(cluster)
        ports = cluster.lab.vsctl(n1, "list-ports", "br-int").split()
        assert not [p for p in ports if p.startswith("pn")], ports
        nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
        cluster.lab.stop_northd()
        try:
            # a spare of the node, addressed and bound to nothing, needs no northd
            result = oc.plugin(cluster, n1, "ADD", "c-s", ns, "ovn6", toolTimeout=5)
            assert result["ips"][0]["address"].startswith("10."), result
            oc.plugin(cluster, n1, "DEL", "c-s", ns, "ovn6")
            assert delete_spares(nb, "ovn6") > 0  # the pool drained: a port must be made
            out = oc.run_plugin(cluster, n1, "ADD", "c-e", ns, "ovn6", toolTimeout=2)
            error = json.loads(out.stdout)
            assert out.returncode == 1 and error["code"] == 11, out.stdout
            assert "ovn-northd" in error["msg"], out.stdout
        finally:
            cluster.lab.start_northd()
        assert not oc.pod_ports(cluster)
        assert not [p for p in cluster.lab.vsctl(n1, "list-ports", "br-int").split() if p.startswith("pn")]
        from podnet.link.names import host_ifname

        links = subprocess.run(["ip", "-n", n1.netns, "-o", "link"], capture_output=True, text=True).stdout
        assert not [c for c in ("c-d", "c-e") if f" {host_ifname(c, 'eth0')}@" in links], links
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn6")
        cluster.ctl(n1, "network", "delete", "up6")


def test_every_node_adds_at_once_dual_stack(cluster: Cluster) -> None:
    """Eight pods per node ADDed at the same time on both nodes, on a dual-stack OVN network:
    every pod gets an IPv4 and an IPv6 address of the network, none twice (northd assigns them
    for the whole cluster); a pod on n1 reaches one on n2 over IPv6 TCP. All DELs leave no
    port."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up8", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn8", "--type=ovn", "network=up8")
    pods = [(node, f"{cluster.lab.prefix}-d{node.name}{i}", f"d-{node.name}-{i}")
            for node in (n1, n2) for i in range(8)]  # fmt: skip
    results: dict[str, Any] = {}
    errors: list[str] = []
    server: oc.Echo | None = None
    try:
        for _, ns, _ in pods:
            subprocess.run(["ip", "netns", "add", ns], check=True)

        def add(node: Node, ns: str, cid: str) -> None:
            out = oc.run_plugin(cluster, node, "ADD", cid, ns, "ovn8")
            if out.returncode != 0:
                errors.append(f"{cid}: {out.stdout} {out.stderr}")
            else:
                results[cid] = json.loads(out.stdout)

        oc.at_once(add, pods)
        assert not errors, errors
        config = cluster.networks(n1)["ovn8"]["config"]
        v4 = ipaddress_network(config["ipv4.address"])
        v6 = ipaddress_network(config["ipv6.address"])
        seen: list[str] = []
        for cid, result in results.items():
            got = [ip["address"].split("/")[0] for ip in result["ips"]]
            assert len(got) == 2, (cid, got)
            assert __import__("ipaddress").ip_address(got[0]) in v4, (cid, got)
            assert __import__("ipaddress").ip_address(got[1]) in v6, (cid, got)
            seen += got
        assert len(seen) == len(set(seen)) == 32, seen
        a_ns, b_ns = pods[0][1], pods[8][1]
        b6 = results[pods[8][2]]["ips"][1]["address"].split("/")[0]
        a6 = results[pods[0][2]]["ips"][1]["address"].split("/")[0]
        server = oc.Echo(b_ns, "POD-B6", 8086)
        assert oc.tcp(a_ns, b6, 8086) == f"POD-B6 {a6}"
    finally:
        if server is not None:
            server.stop()
        for node, ns, cid in pods:
            oc.run_plugin(cluster, node, "DEL", cid, ns, "ovn8")
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        assert not oc.pod_ports(cluster)
        cluster.ctl(n1, "network", "delete", "ovn8")
        cluster.ctl(n1, "network", "delete", "up8")


def ipaddress_network(cidr: str) -> Any:
    import ipaddress

    return ipaddress.ip_interface(cidr).network


def test_hostports_reach_ovn_pods(cluster: Cluster) -> None:
    """A hostPort of a pod on an OVN network (n2) answers from another node (n3 → n2's
    underlay address) and from n2 itself, its loopback 127.0.0.1 included, through n2's management port (the pod sees its
    address, in the subnet); a second pod asking for the same hostPort gets 101 and leaves
    nothing; DEL takes the hostPort away. Deleting the network is not refused for the
    management port, and ``network restore`` on n2 then removes it."""
    from podnet.drivers.ovn.hostports import mgmt_ifname
    from podnet.link.names import host_ifname

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up12", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn12", "--type=ovn", "network=up12", "ipv6.address=none")
    subnet = cluster.networks(n2)["ovn12"]["config"]["ipv4.address"].rsplit(".", 1)[0] + "."
    ns = {k: f"{cluster.lab.prefix}-h{k}" for k in "ab"}
    ports = {"portMappings": [{"hostPort": 8085, "containerPort": 8080, "protocol": "tcp"}]}
    server: oc.Echo | None = None
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        oc.plugin(cluster, n2, "ADD", "h-a", ns["a"], "ovn12", runtimeConfig=ports)
        server = oc.Echo(ns["a"], "POD-HA", 8080)
        seen = oc.tcp(n3.netns, n2.address, 8085)
        assert seen.startswith("POD-HA ::ffff:" + subnet), seen
        assert oc.tcp(n2.netns, n2.address, 8085).startswith("POD-HA ::ffff:" + subnet)  # the node itself
        assert oc.tcp(n2.netns, "127.0.0.1", 8085).startswith("POD-HA ::ffff:" + subnet)  # its loopback
        out = oc.run_plugin(cluster, n2, "ADD", "h-b", ns["b"], "ovn12", runtimeConfig=ports)
        assert out.returncode == 1 and '"code": 101' in out.stdout, out.stdout
        assert "h-b" not in cluster.ok(n2, "pods") and f" {host_ifname('h-b', 'eth0')}@" not in \
            subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        assert len(oc.nbctl(cluster, "--bare", "--columns=name", "find", "Logical_Switch_Port",
                         "external_ids:podnet-container=h-b")) == 0  # fmt: skip
        oc.plugin(cluster, n2, "DEL", "h-a", ns["a"], "ovn12")
        assert oc.tcp(n3.netns, n2.address, 8085) == "<refused>", "hostPort still there"  # the node: RST
        mgmt = mgmt_ifname("ovn12")
        assert mgmt in subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        cluster.ok(n1, "network", "delete", "ovn12")
        assert "management port" in cluster.ok(n2, "network", "restore")
        links = subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        assert mgmt not in links and mgmt not in cluster.lab.vsctl(n2, "list-ports", "br-int")
    finally:
        if server is not None:
            server.stop()
        for k, name in ns.items():
            oc.run_plugin(cluster, n2, "DEL", f"h-{k}", name, "ovn12")
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn12")
        cluster.ctl(n1, "network", "delete", "up12")
