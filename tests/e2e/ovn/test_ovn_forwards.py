"""Network forwards of OVN networks (OVN load balancers on the network's router, as LXD's
``lxd/network/driver_ovn.go`` makes them), on three nodes of one OVN lab
(tests/support/ovn_cluster.py): IPv4 and IPv6 forwards reaching pods on two nodes, the uplink
answering ARP/NDP for listen addresses (``ovn.ingress_mode=l2proxy``), and a bridge network as
the uplink.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import ovn_cluster as oc
from ovn_cluster import Cluster

pytestmark = pytest.mark.root


def test_forwards_are_ovn_load_balancers(cluster: Cluster) -> None:
    """Forwards of an OVN network made from n1 are listed alike by n2 and carry traffic from
    the outside to pods on either node (ports, a default target, many-to-one); what no port
    matches is dropped without a default target (LXD's network forwards: unmatched traffic is dropped); a pod reaches its own forward; the
    seed's loopback case answers from the address called; ``0.0.0.0`` allocates from the
    uplink's routes; listen addresses outside the routes or inside the OVN ranges are refused.
    Deleting the network removes its forwards and load balancers."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    cluster.uplink(n1, "up7", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn7", "--type=ovn", "network=up7", "ipv6.address=none")
    router = cluster.networks(n1)["ovn7"]["config"]["volatile.network.ipv4.address"]
    subprocess.run(["ip", "-n", out, "route", "replace", "198.51.100.0/24", "via", router], check=True)
    pods = {"a": (n1, f"{cluster.lab.prefix}-fa"), "b": (n2, f"{cluster.lab.prefix}-fb")}
    servers: list[oc.Echo] = []
    try:
        for _, ns in pods.values():
            subprocess.run(["ip", "netns", "add", ns], check=True)
        ip = {k: oc.plugin(cluster, node, "ADD", f"f-{k}", ns, "ovn7")["ips"][0]["address"].split("/")[0]
              for k, (node, ns) in pods.items()}  # fmt: skip
        for k, (_, ns) in pods.items():
            for port in (80, 8080, 9000):
                servers.append(oc.Echo(ns, f"POD-{k.upper()}-{port}", port))
        # ports to b, a default target a
        cluster.ok(n1, "network", "forward", "create", "ovn7", "198.51.100.5", f"target_address={ip['a']}")
        cluster.ok(n1, "network", "forward", "port", "add", "ovn7", "198.51.100.5", "tcp", "80", ip["b"], "8080")
        # no default target; many-to-one
        cluster.ok(n2, "network", "forward", "create", "ovn7", "198.51.100.6")
        cluster.ok(n2, "network", "forward", "port", "add", "ovn7", "198.51.100.6", "tcp", "7000-7001", ip["b"], "9000")
        lists = [cluster.ok(n, "network", "forward", "list", "ovn7", "-f", "json") for n in (n1, n2)]
        assert lists[0] == lists[1] and "198.51.100.5" in lists[0] and "198.51.100.6" in lists[0]
        got = {
            "port to b": oc.tcp(out, "198.51.100.5", 80),
            "default to a": oc.tcp(out, "198.51.100.5", 9000),
            "many-to-one 7000": oc.tcp(out, "198.51.100.6", 7000),
            "many-to-one 7001": oc.tcp(out, "198.51.100.6", 7001),
            "no default target": oc.tcp(out, "198.51.100.6", 80),
            "pod a to its own default": oc.tcp(pods["a"][1], "198.51.100.5", 8080),
        }
        assert got["port to b"].startswith("POD-B-8080 "), got
        assert got["default to a"].startswith("POD-A-9000 "), got
        assert got["many-to-one 7000"].startswith("POD-B-9000 ") and got["many-to-one 7001"].startswith("POD-B-9000 "), got
        assert got["no default target"] == "<timeout>", got
        assert got["pod a to its own default"].startswith("POD-A-8080 "), got
        # a forward's loopback case (LXD's network forwards): b has a whole-IP forward on .12 and port forwards on .13
        cluster.ok(n1, "network", "forward", "create", "ovn7", "198.51.100.12", f"target_address={ip['b']}")
        cluster.ok(n1, "network", "forward", "create", "ovn7", "198.51.100.13")
        cluster.ok(n1, "network", "forward", "port", "add", "ovn7", "198.51.100.13", "tcp", "80", ip["b"])
        assert oc.tcp(pods["b"][1], "198.51.100.13", 80) == "POD-B-80 ::ffff:198.51.100.13"
        made = cluster.ok(n2, "network", "forward", "create", "ovn7", "0.0.0.0")
        assert "198.51.100.1" in made, made
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn7", "192.0.2.99")
        assert bad.returncode == 1 and 'Uplink network does not contain "192.0.2.99/32" in its routes' in bad.stderr
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn7", "198.51.100.5")
        assert bad.returncode == 1 and "already exists" in bad.stderr, bad.stderr
        for k, (node, ns) in pods.items():
            oc.plugin(cluster, node, "DEL", f"f-{k}", ns, "ovn7")
        cluster.ok(n2, "network", "delete", "ovn7")
        assert oc.nbctl(cluster, "--bare", "--columns=name", "list", "Load_Balancer") == ""
        assert "forward" not in cluster.lab.run(None, "ovn-nbctl", f"--db={cluster.lab.nb_unix}", "get",
                                                "NB_Global", ".", "external_ids").stdout  # fmt: skip
    finally:
        oc.discard(cluster, servers, pods, "ovn7", "up7")


def test_ipv6_forwards_reach_pods_on_two_nodes(cluster: Cluster) -> None:
    """IPv6 on a dual-stack OVN network: a whole-IP forward to a pod on n2 and a port forward
    to a pod on n3, on one IPv6 listen address, reached from the outside over TCP and UDP (the
    pod sees the outside's address); a pod reaches the outside from the router's IPv6 uplink
    address; the seed's loopback case (a whole-IP forward on ::12 and port forwards on ::13 to
    one pod, which calls ::13) answers from the address called; ``::`` allocates from the
    uplink's IPv6 routes; mixed families are refused with LXD's message."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    subprocess.run(["ip", "-n", out, "addr", "add", "2001:db8:ff::254/64", "dev", "gw0", "nodad"], check=True)
    cluster.uplink(n1, "up10", oc.UPLINK6)
    cluster.ok(n1, "network", "create", "ovn10", "--type=ovn", "network=up10")
    router6 = cluster.networks(n2)["ovn10"]["config"]["volatile.network.ipv6.address"]
    assert router6.startswith("2001:db8:ff::1"), router6
    subprocess.run(["ip", "-n", out, "-6", "route", "replace", "2001:db8:ee::/64", "via", router6], check=True)
    pods = {"b": (n2, f"{cluster.lab.prefix}-6b"), "c": (n3, f"{cluster.lab.prefix}-6c")}
    servers: list[oc.Echo] = []
    try:
        ip6 = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            result = oc.plugin(cluster, node, "ADD", f"v6-{k}", ns, "ovn10")
            ip6[k] = next(i["address"].split("/")[0] for i in result["ips"] if ":" in i["address"])
            servers.append(oc.Echo(ns, f"POD-{k.upper()}", 8080))
        servers.append(oc.Echo(out, "OUTSIDE6", 8083))
        cluster.ok(n2, "network", "forward", "create", "ovn10", "2001:db8:ee::5", f"target_address={ip6['b']}")
        for proto in ("tcp", "udp"):
            cluster.ok(n3, "network", "forward", "port", "add", "ovn10", "2001:db8:ee::5", proto, "80", ip6["c"], "8080")
        got = {
            "tcp port to c": oc.tcp(out, "2001:db8:ee::5", 80),
            "udp port to c": oc.udp(out, "2001:db8:ee::5", 80),
            "default to b": oc.tcp(out, "2001:db8:ee::5", 8080),
            "c to outside": oc.tcp(pods["c"][1], "2001:db8:ff::254", 8083),
        }
        assert got["tcp port to c"] == "POD-C 2001:db8:ff::254", got
        assert got["udp port to c"] == "POD-C 2001:db8:ff::254", got
        assert got["default to b"] == "POD-B 2001:db8:ff::254", got
        assert got["c to outside"] == f"OUTSIDE6 {router6}", got
        # a forward's loopback case (LXD's network forwards), in its own family: b has a whole-IP forward on ::12 and
        # port forwards on ::13; calling ::13 it is answered from ::13 (the seed saw ::12)
        cluster.ok(n1, "network", "forward", "create", "ovn10", "2001:db8:ee::12", f"target_address={ip6['b']}")
        cluster.ok(n1, "network", "forward", "create", "ovn10", "2001:db8:ee::13")
        cluster.ok(n1, "network", "forward", "port", "add", "ovn10", "2001:db8:ee::13", "tcp", "80", ip6["b"], "8080")
        assert oc.tcp(pods["b"][1], "2001:db8:ee::13", 80) == "POD-B 2001:db8:ee::13"
        assert oc.tcp(pods["b"][1], "2001:db8:ee::12", 8080) == "POD-B 2001:db8:ee::12"
        made = cluster.ok(n1, "network", "forward", "create", "ovn10", "::")
        assert "2001:db8:ee::1" in made, made
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn10", "2001:db8:ee::9", "target_address=10.0.0.1")
        assert bad.returncode == 1 and "Cannot mix IP versions" in bad.stderr, bad.stderr
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn10", "2001:db8:ff::11")
        assert bad.returncode == 1 and "in its routes" in bad.stderr, bad.stderr
    finally:
        oc.release(cluster, servers, pods, "v6", "ovn10")
        subprocess.run(["ip", "-n", out, "-6", "route", "del", "2001:db8:ee::/64"], capture_output=True)
        subprocess.run(["ip", "-n", out, "addr", "del", "2001:db8:ff::254/64", "dev", "gw0"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn10")
        cluster.ctl(n1, "network", "delete", "up10")


def test_l2proxy_ingress_answers_for_forwards_on_the_uplink(cluster: Cluster) -> None:
    """An uplink in ``l2proxy`` ingress mode (LXD's default): the outside has the uplink's
    routes on-link, with no route via the router, and reaches a whole-IP forward and a port
    forward (IPv4 over ARP, IPv6 over NDP) on pods on n2 and n3. Switching the uplink to
    ``routed`` stops the neighbour answers (the outside then times out) and back to
    ``l2proxy`` brings them back; ``routed`` is kept while a network uses ``ipv4.nat.address``."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    keys = {**{k: v for k, v in oc.UPLINK6.items() if k != "ovn.ingress_mode"},
            "ipv4.routes": "198.18.5.0/24", "ipv6.routes": "2001:db8:e5::/64"}  # fmt: skip
    subprocess.run(["ip", "-n", out, "addr", "add", "2001:db8:ff::254/64", "dev", "gw0", "nodad"], check=True)
    onlink = [["198.18.5.0/24", "dev", "gw0"], ["2001:db8:e5::/64", "dev", "gw0"]]
    for route in onlink:
        subprocess.run(["ip", "-n", out, "route", "replace", *route], check=True)
    pods = {"b": (n2, f"{cluster.lab.prefix}-lb"), "c": (n3, f"{cluster.lab.prefix}-lc")}
    servers: list[oc.Echo] = []

    def reach() -> dict[str, str]:
        subprocess.run(["ip", "-n", out, "neigh", "flush", "dev", "gw0"], check=True)
        return {"whole v4": oc.tcp(out, "198.18.5.7", 8080), "port v4": oc.tcp(out, "198.18.5.8", 80),
                "whole v6": oc.tcp(out, "2001:db8:e5::7", 8080), "port v6": oc.tcp(out, "2001:db8:e5::8", 80)}  # fmt: skip

    try:
        cluster.uplink(n1, "up15", keys)
        cluster.ok(n1, "network", "create", "ovn15", "--type=ovn", "network=up15")
        ip: dict[str, dict[int, str]] = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            result = oc.plugin(cluster, node, "ADD", f"l2-{k}", ns, "ovn15")
            ip[k] = {4 if ":" not in i["address"] else 6: i["address"].split("/")[0] for i in result["ips"]}
            for port in (80, 8080):
                servers.append(oc.Echo(ns, f"POD-{k.upper()}-{port}", port))
        for v, fam in (("198.18.5", 4), ("2001:db8:e5:", 6)):
            sep = "." if fam == 4 else ":"
            cluster.ok(n2, "network", "forward", "create", "ovn15", f"{v}{sep}7", f"target_address={ip['b'][fam]}")
            cluster.ok(n3, "network", "forward", "create", "ovn15", f"{v}{sep}8")
            cluster.ok(n3, "network", "forward", "port", "add", "ovn15", f"{v}{sep}8", "tcp", "80", ip["c"][fam], "8080")
        got = reach()
        assert got["whole v4"] == "POD-B-8080 ::ffff:203.0.113.254", got
        assert got["port v4"] == "POD-C-8080 ::ffff:203.0.113.254", got
        assert got["whole v6"] == "POD-B-8080 2001:db8:ff::254", got
        assert got["port v6"] == "POD-C-8080 2001:db8:ff::254", got
        cluster.ok(n2, "network", "set", "up15", "ovn.ingress_mode=routed")
        assert set(reach().values()) == {"<timeout>"}, "routed mode still answered for the listen addresses"
        cluster.ok(n3, "network", "set", "up15", "ovn.ingress_mode=l2proxy")
        assert reach() == got
        cluster.ok(n1, "network", "set", "up15", "ovn.ingress_mode=routed")
        cluster.ok(n1, "network", "set", "ovn15", "ipv4.nat.address=198.18.5.50")
        bad = cluster.ctl(n2, "network", "set", "up15", "ovn.ingress_mode=l2proxy")
        assert bad.returncode == 1 and "uses ipv4.nat.address" in bad.stderr, bad.stderr
        assert cluster.networks(n1)["up15"]["config"]["ovn.ingress_mode"] == "routed"
    finally:
        oc.release(cluster, servers, pods, "l2", "ovn15")
        for route in onlink:
            subprocess.run(["ip", "-n", out, "route", "del", *route], capture_output=True)
        subprocess.run(["ip", "-n", out, "addr", "del", "2001:db8:ff::254/64", "dev", "gw0"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn15")
        cluster.ctl(n1, "network", "delete", "up15")


def test_a_bridge_network_is_an_uplink(cluster: Cluster) -> None:
    """A podnet bridge network on n1 with ``ipv4.ovn.ranges`` and ``ipv4.routes`` is an uplink:
    n1 joins it to OVS (a veth pair with podnet's alias, an OVS bridge, the mapping) and routes
    ``ipv4.routes`` onto it. An OVN network made on n1 takes its router address from the
    ranges; pods on n2 and n3 reach n1's bridge address, seen from the router's address (SNAT);
    a forward in the routes reaches a pod from n1 (l2proxy: OVN answers ARP on the bridge).
    n2, without the bridge, lists the network but cannot make another on it; the bridge is not
    deleted while used; ``network restore`` brings a removed veth pair back; once deleted,
    nothing of it is left on n1."""
    from podnet.drivers.ovn.bridge_uplink import ovs_bridge as bridge_name
    from podnet.drivers.ovn.bridge_uplink import veth_names

    n1, n2, n3 = cluster.lab.nodes
    here, there = veth_names("brup")
    pods = {"b": (n2, f"{cluster.lab.prefix}-ub"), "c": (n3, f"{cluster.lab.prefix}-uc")}
    servers: list[oc.Echo] = []
    try:
        bad = cluster.ctl(n1, "network", "create", "brup", "ipv4.address=100.64.10.1/24", "ipv6.address=none",
                          "ipv4.ovn.ranges=100.64.11.10-100.64.11.19")  # fmt: skip
        assert bad.returncode == 1 and "must lie in the subnet 100.64.10.0/24" in bad.stderr, bad.stderr
        cluster.ok(n1, "network", "create", "brup", "ipv4.address=100.64.10.1/24", "ipv6.address=none",
                   "ipv4.ovn.ranges=100.64.10.10-100.64.10.19", "ipv4.routes=198.18.9.0/24")  # fmt: skip
        links = cluster.lab.run(n1.netns, "ip", "-o", "link", "show").stdout
        assert f" {here}@{there}:" in links and "master brup" in links.split(f" {here}@")[1].splitlines()[0]
        assert there in cluster.lab.vsctl(n1, "list-ports", bridge_name("brup"))
        assert f"brup:{bridge_name('brup')}" in cluster.lab.vsctl(n1, "get", "open_vswitch", ".",
                                                                  "external_ids:ovn-bridge-mappings")  # fmt: skip
        assert "198.18.9.0/24 dev brup proto static" in cluster.lab.run(n1.netns, "ip", "route").stdout
        cluster.ok(n1, "network", "create", "ovb", "--type=ovn", "network=brup", "ipv6.address=none")
        bad = cluster.ctl(n1, "network", "set", "brup", "ipv4.ovn.ranges=")  # finding 4 of the review
        assert bad.returncode == 1 and "in use (OVN network ovb)" in bad.stderr, bad.stderr
        assert f"brup:{bridge_name('brup')}" in cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")
        assert cluster.networks(n2)["ovb"]["config"]["volatile.network.ipv4.address"] == "100.64.10.10"
        cluster.uplink(n1, "up7", oc.UPLINK)
        try:
            bad = cluster.ctl(n2, "network", "create", "up7", "ipv4.address=100.64.12.1/24", "ipv6.address=none",
                              "ipv4.ovn.ranges=100.64.12.10-100.64.12.19")  # fmt: skip
            assert bad.returncode == 1 and 'A physical network "up7" exists in the cluster' in bad.stderr, bad.stderr
            assert "up7" not in cluster.lab.run(n2.netns, "ip", "-o", "link").stdout
        finally:
            cluster.ctl(n1, "network", "delete", "up7")
        bad = cluster.ctl(n2, "network", "create", "ovb2", "--type=ovn", "network=brup", "ipv6.address=none")
        assert bad.returncode == 1 and 'uplink network "brup" not found' in bad.stderr, bad.stderr
        ip = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            ip[k] = oc.plugin(cluster, node, "ADD", f"u-{k}", ns, "ovb")["ips"][0]["address"].split("/")[0]
            servers.append(oc.Echo(ns, f"POD-{k.upper()}", 8080))
        servers.append(oc.Echo(n1.netns, "NODE1", 8086))
        for k, (_, ns) in pods.items():
            assert oc.tcp(ns, "100.64.10.1", 8086) == "NODE1 ::ffff:100.64.10.10", k
        cluster.lab.run(n1.netns, "ip", "link", "del", here)  # a cleanup behind podnet's back
        env = {**n1.env, "OVS_RUNDIR": str(cluster.data[n1.name])}  # OVS not up (yet): no db.sock
        code = (f"import sys; sys.path.insert(0, {oc.SRC!r}); sys.argv[0] = 'podnetctl'; "
                "from podnet.cli.main import main; main()")
        out = subprocess.run(["ip", "netns", "exec", n1.netns, "env", *[f"{k}={v}" for k, v in env.items()],
                              sys.executable, "-c", code, "network", "restore", "--data-dir",
                              str(cluster.data[n1.name])], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 1 and "network brup:" in out.stderr and "needs Open vSwitch" in out.stderr, out.stderr
        assert " brup:" in cluster.lab.run(n1.netns, "ip", "-o", "link", "show").stdout  # the bridge is back
        assert "uplink brup" in cluster.ok(n1, "network", "restore")
        cluster.ok(n1, "network", "forward", "create", "ovb", "198.18.9.5", f"target_address={ip['b']}")
        assert oc.tcp(n1.netns, "198.18.9.5", 8080) == "POD-B ::ffff:100.64.10.1"
        bad = cluster.ctl(n2, "network", "forward", "create", "ovb", "198.18.9.6")
        assert bad.returncode == 1 and "in its routes" in bad.stderr, bad.stderr
        # n2 does not know n1's bridge: changing the forward from there keeps its ARP answers
        cluster.ok(n2, "network", "forward", "set", "ovb", "198.18.9.5", f"target_address={ip['c']}")
        assert "neighbor_responder=all" in oc.nbctl(cluster, "--bare", "--columns=options", "list", "Load_Balancer")
        assert oc.tcp(n1.netns, "198.18.9.5", 8080) == "POD-C ::ffff:100.64.10.1"
        bad = cluster.ctl(n1, "network", "delete", "brup")
        assert bad.returncode == 1 and "in use" in bad.stderr, bad.stderr
        for k, (node, ns) in pods.items():
            oc.plugin(cluster, node, "DEL", f"u-{k}", ns, "ovb")
        cluster.ok(n2, "network", "delete", "ovb")
        cluster.ok(n1, "network", "delete", "brup")
        links = cluster.lab.run(n1.netns, "ip", "-o", "link", "show").stdout
        assert here not in links and there not in links and " brup:" not in links
        assert "brup" not in cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")
        assert bridge_name("brup") not in cluster.lab.vsctl(n1, "list-br")
        assert "198.18.9.0" not in cluster.lab.run(n1.netns, "ip", "route").stdout
    finally:
        oc.release(cluster, servers, pods, "u", "ovb")
        cluster.ctl(n1, "network", "delete", "ovb")
        cluster.ctl(n1, "network", "delete", "brup")
