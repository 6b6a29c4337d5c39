"""The node agent's dataplane (:mod:`podnet.agent.dataplane`) in network namespaces that play
Kubernetes nodes on one LAN bridge, with an outside host: the conflist it writes from the
node's podCIDRs (and a real plugin ADD from it), routes to the other nodes' pods (``proto``
113, on-link only), kindnet's masquerade on real packets, both families, and the faults.

Each node's dataplane runs in its namespace (tests/support/dataplane_node.py, one process per node:
killing it is an agent restart); the Nodes are the API's JSON objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import PLUGIN, PLUGIN_ENV, Lab, sh
from paths import SUPPORT

pytestmark = pytest.mark.root

DRIVER = str(SUPPORT / "dataplane_node.py")
PROTO = "113"
#: The outside host: on the LAN, and (behind it) a no-masquerade destination.
OUT4, OUT6 = "192.0.2.100", "2001:db8:1::100"
NOMASQ4, NOMASQ6 = "203.0.113.1", "2001:db8:2::1"


def peer(answer: str) -> str:
    """The echo server's answer with an IPv4 peer as IPv4 (its dual-stack socket maps it)."""
    return answer.replace("::ffff:", "")


def node_obj(name: str, cidrs: list[str], ips: list[str]) -> dict[str, Any]:
    """A Node as the API sends it."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"podCIDRs": cidrs, **({"podCIDR": cidrs[0]} if cidrs else {})},
            "status": {"addresses": [{"type": "Hostname", "address": name}]
                       + [{"type": "InternalIP", "address": a} for a in ips]}}


class Agent:
    """One node's dataplane process (tests/support/dataplane_node.py) in namespace ``ns``."""

    def __init__(self, ns: str, settings: dict[str, Any], prefix: list[str] | None = None) -> None:
        self.ns = ns
        argv = ["ip", "netns", "exec", ns, *(prefix or []), sys.executable, DRIVER, json.dumps(settings)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def sync(self, me: dict[str, Any] | None, others: list[dict[str, Any]]) -> tuple[bool, list[str]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"sync": {"me": me, "others": others}}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the dataplane process died (rc {self.proc.poll()})"
        answer = json.loads(line)
        return answer["ok"], answer["log"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Cluster:
    """Node namespaces on a LAN bridge (namespace ``lan``) and an outside host ``out``.
    Node ``i`` has 192.0.2.1i/24 and 2001:db8:1::1i/64 on its ``eth0``."""

    def __init__(self, lab: Lab, tmp: Path) -> None:
        self.lab, self.tmp = lab, tmp
        self.lan = lab.netns("lan")
        sh("ip", "-n", self.lan, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.lan, "link", "set", "br0", "up")
        self.nodes: dict[str, str] = {}
        self.agents: list[Agent] = []
        self.out = lab.netns("out")
        self._wire(self.out, OUT4, OUT6)
        sh("ip", "-n", self.out, "addr", "add", f"{NOMASQ4}/32", "dev", "lo")
        sh("ip", "-n", self.out, "addr", "add", f"{NOMASQ6}/128", "dev", "lo")

    def _wire(self, ns: str, addr4: str, addr6: str) -> None:
        port = f"p{len(self.nodes)}{ns[-3:]}"[:15]
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.lan)
        sh("ip", "-n", self.lan, "link", "set", port, "master", "br0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr4}/24", "dev", "eth0")
        sh("ip", "-n", ns, "addr", "add", f"{addr6}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def node(self, name: str, index: int) -> str:
        """A node namespace (the lab's own node for the first) wired to the LAN."""
        ns = self.lab.node if not self.nodes else self.lab.netns(name)
        self.nodes[name] = ns
        self._wire(ns, f"192.0.2.1{index}", f"2001:db8:1::1{index}")
        return ns

    def settings(self, name: str, **extra: Any) -> dict[str, Any]:
        conf, data = self.tmp / name / "net.d", self.tmp / name / "data"
        conf.mkdir(parents=True, exist_ok=True)
        return {"node_name": name, "cni_conf_dir": str(conf), "data_dir": str(data), **extra}

    def agent(self, name: str, prefix: list[str] | None = None, **extra: Any) -> Agent:
        agent = Agent(self.nodes[name], self.settings(name, **extra), prefix)
        self.agents.append(agent)
        return agent

    def conflist(self, name: str) -> Path:
        return self.tmp / name / "net.d" / "10-podnet.conflist"

    def routes(self, name: str) -> dict[str, str]:
        """The node's routes of proto 113, both families: destination → gateway."""
        out = {}
        for family in ("-4", "-6"):
            rows = json.loads(sh("ip", "-n", self.nodes[name], "-j", family, "route", "show", "proto", PROTO).stdout)
            out.update({r["dst"]: r.get("gateway", "") for r in rows})
        return out

    def add_pod(self, name: str, pod_id: str) -> dict[str, str]:
        """A pod on node ``name`` through the conflist the agent wrote (its single plugin, as a
        runtime builds the plugin's NetConf from a conflist); family → the pod's address."""
        conflist = json.loads(self.conflist(name).read_text())
        netconf = {"cniVersion": conflist["cniVersion"], "name": conflist["name"], **conflist["plugins"][0]}
        pod = self.lab.pod(pod_id)
        env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"{pod_id}-{self.lab.tag}", "CNI_NETNS": f"/run/netns/{pod}",
               "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               **PLUGIN_ENV}
        argv = ["ip", "netns", "exec", self.nodes[name], "env", "-i", *[f"{k}={v}" for k, v in env.items()], PLUGIN]
        proc = subprocess.run(argv, input=json.dumps(netconf), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads(proc.stdout)
        return {("6" if ":" in ip["address"] else "4"): ip["address"].split("/")[0] for ip in result["ips"]} | {"ns": pod}

    def close(self) -> None:
        for agent in self.agents:
            agent.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    need("root", "ip", "nft")
    lab = Lab()
    made = None
    try:
        made = Cluster(lab, tmp_path)
        yield made
    finally:
        if made is not None:
            made.close()
        lab.close()


A4, A6 = "10.244.1.0/24", "fd00:10:244:1::/64"
B4, B6 = "10.244.2.0/24", "fd00:10:244:2::/64"
C4, C6 = "10.244.3.0/24", "fd00:10:244:3::/64"


def test_conflist_written_once_extra_range_kept_podcidr_followed(cluster: Cluster) -> None:
    cluster.node("a", 1)
    agent = cluster.agent("a")
    path = cluster.conflist("a")
    ok, log = agent.sync(node_obj("a", [], ["192.0.2.11"]), [])
    assert ok and not path.exists()
    assert [line for line in log if "no conflist yet" in line] == [
        "WARNING no conflist yet: Node a has no podCIDRs (waiting for spec.podCIDRs)"]
    ok, log = agent.sync(node_obj("a", [], ["192.0.2.11"]), [])
    assert ok and log == []  # said once

    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    ok, log = agent.sync(me, [])
    conf = json.loads(path.read_text())
    plugin = conf["plugins"][0]
    assert ok and conf["name"] == "podnet" and plugin["type"] == "podnet"
    assert plugin["ranges"] == [A4, A6]
    assert plugin["capabilities"]["portMappings"] is True
    assert plugin["dataDir"] == str(cluster.tmp / "a" / "data")
    assert any(line.startswith(f"INFO conflist {path}: ranges {A4}, {A6} (created)") for line in log), log
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    before = path.stat()
    ok, log = agent.sync(me, [])
    assert ok and log == [] and path.stat().st_mtime_ns == before.st_mtime_ns
    agent.stop()  # a restart rewrites nothing
    agent = cluster.agent("a")
    ok, log = agent.sync(me, [])
    assert ok and log == []
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_ino == before.st_ino
    assert [n for n in os.listdir(path.parent) if n != path.name] == []  # no temporary file left

    # an administrator adds a range; the podCIDR then changes: the old one goes, theirs stays
    conf["plugins"][0]["ranges"].append("10.250.0.0/24")
    path.write_text(json.dumps(conf, indent=2) + "\n")
    ok, log = agent.sync(me, [])
    assert ok and json.loads(path.read_text())["plugins"][0]["ranges"] == [A4, A6, "10.250.0.0/24"]
    moved = node_obj("a", ["10.244.5.0/24", A6], ["192.0.2.11", "2001:db8:1::11"])
    ok, log = agent.sync(moved, [])
    assert ok and json.loads(path.read_text())["plugins"][0]["ranges"] == ["10.244.5.0/24", A6, "10.250.0.0/24"]
    assert any("(was 10.244.1.0/24" in line for line in log), log
    agent.stop()
    agent = cluster.agent("a")  # what the agent wrote is remembered across a restart
    moved_again = node_obj("a", ["10.244.6.0/24", A6], ["192.0.2.11", "2001:db8:1::11"])
    assert agent.sync(moved_again, [])[0]
    assert json.loads(path.read_text())["plugins"][0]["ranges"] == ["10.244.6.0/24", A6, "10.250.0.0/24"]

    # a runtime's ADD with the written conflist: the pod gets addresses from the podCIDRs
    pod = cluster.add_pod("a", "pa")
    assert ip_address(pod["4"]) in ip_network("10.244.6.0/24") and ip_address(pod["6"]) in ip_network(A6)


def test_routes_both_families_onlink_only_followed_and_removed(cluster: Cluster) -> None:
    cluster.node("a", 1)
    cluster.node("b", 2)
    cluster.node("c", 3)
    a = cluster.agent("a")
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    b = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    c = node_obj("c", [C4, C6], ["192.0.2.13", "2001:db8:1::13"])
    # off-link: its address is not on any link of node a
    far = node_obj("far", ["10.244.7.0/24"], ["198.51.100.7"])
    # a foreign route (proto boot) to the podCIDR of node "pinned": left alone, pinned refused
    sh("ip", "-n", cluster.nodes["a"], "route", "add", "10.244.9.0/24", "via", "192.0.2.13")
    pinned = node_obj("pinned", ["10.244.9.0/24"], ["192.0.2.12"])
    ok, log = a.sync(me, [b, c, far, pinned])
    assert ok, log
    assert cluster.routes("a") == {B4: "192.0.2.12", B6: "2001:db8:1::12", C4: "192.0.2.13", C6: "2001:db8:1::13"}
    assert sum("not on-link" in line and "10.244.7.0/24" in line for line in log) == 1, log
    assert ("WARNING Node pinned refused: its podCIDR 10.244.9.0/24 overlaps the node's route 10.244.9.0/24 "
            "via 192.0.2.13 proto 3; nothing made for it") in log, log
    assert sum(line.startswith("INFO route ") and " added" in line for line in log) == 4, log
    foreign = sh("ip", "-n", cluster.nodes["a"], "route", "show", "10.244.9.0/24").stdout.strip()
    assert foreign == "10.244.9.0/24 via 192.0.2.13 dev eth0"
    ok, log = a.sync(me, [b, c, far, pinned])
    assert ok and log == []  # nothing changed, nothing said again

    # a changed InternalIP is followed; a deleted Node's routes go
    sh("ip", "-n", cluster.nodes["b"], "addr", "add", "192.0.2.22/24", "dev", "eth0")
    b2 = node_obj("b", [B4, B6], ["192.0.2.22", "2001:db8:1::12"])
    ok, log = a.sync(me, [b2, far, pinned])
    assert ok, log
    assert cluster.routes("a") == {B4: "192.0.2.22", B6: "2001:db8:1::12"}
    assert f"INFO route {B4} via 192.0.2.22 for Node b changed (was via 192.0.2.12)" in log
    assert f"INFO route {C6} via 2001:db8:1::13 removed" in log
    assert cluster.lab.exec(cluster.nodes["a"], "ip", "route", "get", "10.244.2.9").stdout.split()[2] == "192.0.2.22"
    assert "10.244.9.0/24 via 192.0.2.13 dev eth0" in sh("ip", "-n", cluster.nodes["a"], "route").stdout

    # a restart finds its routes by their proto and changes nothing
    a.stop()
    a = cluster.agent("a")
    ok, log = a.sync(me, [b2, far, pinned])
    assert ok and [line for line in log if line.startswith("INFO")] == [], log
    assert cluster.routes("a") == {B4: "192.0.2.22", B6: "2001:db8:1::12"}
    # the far node's address comes on-link: it is routed
    sh("ip", "-n", cluster.nodes["a"], "addr", "add", "198.51.100.1/24", "dev", "eth0")
    sh("ip", "-n", cluster.nodes["c"], "addr", "add", "198.51.100.7/24", "dev", "eth0")
    ok, log = a.sync(me, [b2, far, pinned])
    assert ok and cluster.routes("a")["10.244.7.0/24"] == "198.51.100.7"
    # a changed podCIDR is followed: the old route goes, the new one comes
    b3 = node_obj("b", ["10.244.12.0/24", B6], ["192.0.2.22", "2001:db8:1::12"])
    ok, log = a.sync(me, [b3, far, pinned])
    assert ok and f"INFO route {B4} via 192.0.2.22 removed" in log, log
    assert "INFO route 10.244.12.0/24 via 192.0.2.22 for Node b added" in log
    assert cluster.routes("a") == {"10.244.12.0/24": "192.0.2.22", B6: "2001:db8:1::12",
                                   "10.244.7.0/24": "198.51.100.7"}


def test_bad_nodes_refused_the_others_proceed(cluster: Cluster) -> None:
    cluster.node("a", 1)
    cluster.node("b", 2)
    a = cluster.agent("a")
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    good = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    bad = [
        node_obj("same", [A4], ["192.0.2.12"]),  # equals ours
        node_obj("wide", ["10.244.0.0/16"], ["192.0.2.12"]),  # overlaps ours
        node_obj("x2", ["10.244.20.0/23"], ["192.0.2.12"]),  # overlaps x1, which is kept (first by name)
        node_obj("lo", ["10.244.30.0/24"], ["127.0.0.1"]),  # InternalIPs of no use
        node_obj("self", ["10.244.31.0/24"], ["192.0.2.11"]),
        node_obj("zero", ["fd00:10:244:32::/64"], ["::"]),
        node_obj("ll", ["fd00:10:244:33::/64"], ["fe80::1"]),
    ]
    x1 = node_obj("x1", ["10.244.20.0/24"], ["192.0.2.12"])
    ok, log = a.sync(me, [good, x1, *bad])
    assert ok, log
    assert cluster.routes("a") == {B4: "192.0.2.12", B6: "2001:db8:1::12", "10.244.20.0/24": "192.0.2.12"}
    refused = {line.split()[2] for line in log if " refused: " in line}
    assert refused == {"same", "wide", "x2", "lo", "self", "zero", "ll"}, log
    assert "WARNING Node same refused: its podCIDR 10.244.1.0/24 equals ours (10.244.1.0/24); nothing made for it" in log
    # nothing made for them: their podCIDRs are no cluster destinations either
    elements = sh("ip", "netns", "exec", cluster.nodes["a"], "nft", "list", "set", "inet", "podnet", "cluster_v4").stdout
    assert "10.244.2.0/24" in elements and "10.244.20.0/23" not in elements and "10.244.30.0" not in elements
    ok, log = a.sync(me, [good, x1, *bad])
    assert ok and log == []


def _pods_on_two_nodes(cluster: Cluster, nomasq: list[str]) -> tuple[Agent, Agent, dict[str, str], dict[str, str]]:
    cluster.node("a", 1)
    cluster.node("b", 2)
    me_a = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    me_b = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    agent_a = cluster.agent("a", no_masquerade_cidrs=nomasq)
    agent_b = cluster.agent("b", no_masquerade_cidrs=nomasq)
    assert agent_a.sync(me_a, [me_b])[0] and agent_b.sync(me_b, [me_a])[0]
    pod_a, pod_b = cluster.add_pod("a", "pa"), cluster.add_pod("b", "pb")
    # the outside host routes the no-masquerade destinations' replies back to node a's pods
    sh("ip", "-n", cluster.out, "route", "add", A4, "via", "192.0.2.11")
    sh("ip", "-n", cluster.out, "route", "add", A6, "via", "2001:db8:1::11")
    node_a = cluster.nodes["a"]
    sh("ip", "-n", node_a, "route", "add", "203.0.113.0/24", "via", OUT4)
    sh("ip", "-n", node_a, "route", "add", "2001:db8:2::/64", "via", OUT6)
    assert agent_a.sync(me_a, [me_b])[0] and agent_b.sync(me_b, [me_a])[0]  # after the plugin's rebuild
    for ns in (pod_a["ns"], pod_b["ns"], node_a, cluster.nodes["b"]):  # IPv6 DAD done: no first SYN lost
        deadline = time.monotonic() + 10
        while sh("ip", "-n", ns, "-6", "addr", "show", "tentative").stdout.strip():
            assert time.monotonic() < deadline, sh("ip", "-n", ns, "-6", "addr").stdout
            time.sleep(0.05)
    return agent_a, agent_b, pod_a, pod_b


def test_pod_to_pod_across_nodes_keeps_the_pod_address_egress_masqueraded(cluster: Cluster) -> None:
    """kindnet's masquerade on real TCP: pod a → pod b arrives from pod a's address; pod a → the
    outside host arrives from node a's; pod a → a no-masquerade destination from pod a's. IPv4
    and IPv6. The no-masquerade 10.0.0.0/8 covers the podCIDRs: the set holds it collapsed."""
    nomasq = ["10.0.0.0/8", "203.0.113.0/24", "2001:db8:2::/64"]
    agent_a, _, pod_a, pod_b = _pods_on_two_nodes(cluster, nomasq)
    lab = cluster.lab
    lab.serve(pod_b["ns"], "podb", 8080)
    lab.serve(cluster.out, "out", 8080)
    assert peer(lab.talk(pod_a["ns"], "tcp", pod_b["4"], 8080)) == f"podb {pod_a['4']}"
    assert peer(lab.talk(pod_a["ns"], "tcp", pod_b["6"], 8080)) == f"podb {pod_a['6']}"
    assert peer(lab.talk(pod_a["ns"], "tcp", OUT4, 8080)) == "out 192.0.2.11"
    assert peer(lab.talk(pod_a["ns"], "tcp", OUT6, 8080)) == "out 2001:db8:1::11"
    assert peer(lab.talk(pod_a["ns"], "tcp", NOMASQ4, 8080)) == f"out {pod_a['4']}"
    assert peer(lab.talk(pod_a["ns"], "tcp", NOMASQ6, 8080)) == f"out {pod_a['6']}"
    node_a = cluster.nodes["a"]
    v4 = lab.exec(node_a, "nft", "list", "set", "inet", "podnet", "cluster_v4").stdout
    assert "elements = { 10.0.0.0/8, 203.0.113.0/24 }" in v4

    # the table removed behind podnet's back: the next sync rebuilds it with the cluster sets
    lab.exec(node_a, "nft", "delete", "table", "inet", "podnet")
    ok, log = agent_a.sync(node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"]),
                           [node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])])
    assert ok and any("table inet podnet rebuilt" in line for line in log), log
    assert peer(lab.talk(pod_a["ns"], "tcp", NOMASQ4, 8080)) == f"out {pod_a['4']}"
    assert peer(lab.talk(pod_a["ns"], "tcp", OUT4, 8080)) == "out 192.0.2.11"


def test_cluster_set_follows_nodes_element_by_element(cluster: Cluster) -> None:
    """Without a no-masquerade range over them, each podCIDR is an element: a deleted Node's
    goes (its pods are then outside the cluster: masqueraded), one Node added adds one; the
    store holds them, so a rebuild by the plugin (reconcile.state) renders them too."""
    agent_a, _, pod_a, pod_b = _pods_on_two_nodes(cluster, ["203.0.113.0/24"])
    node_a, lab = cluster.nodes["a"], cluster.lab
    me_a = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    me_b = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    lab.serve(pod_b["ns"], "podb", 8080)
    assert "elements = { 10.244.1.0/24, 10.244.2.0/24," in lab.exec(
        node_a, "nft", "list", "set", "inet", "podnet", "cluster_v4").stdout
    handle = json.loads(lab.exec(node_a, "nft", "-j", "list", "table", "inet", "podnet").stdout)
    table_handle = [i["table"]["handle"] for i in handle["nftables"] if "table" in i]
    ok, log = agent_a.sync(me_a, [])  # node b deleted
    assert ok and f"INFO cluster destination {B4} removed" in log, log
    assert f"INFO cluster destination {B6} removed" in log
    after = json.loads(lab.exec(node_a, "nft", "-j", "list", "table", "inet", "podnet").stdout)
    assert [i["table"]["handle"] for i in after["nftables"] if "table" in i] == table_handle  # no rebuild
    sh("ip", "-n", node_a, "route", "add", B4, "via", "192.0.2.12")  # reach it without the agent
    assert peer(lab.talk(pod_a["ns"], "tcp", pod_b["4"], 8080)) == "podb 192.0.2.11"
    sh("ip", "-n", node_a, "route", "del", B4, "via", "192.0.2.12")
    ok, log = agent_a.sync(me_a, [me_b])
    assert ok and f"INFO cluster destination {B4} added" in log, log
    assert peer(lab.talk(pod_a["ns"], "tcp", pod_b["4"], 8080)) == f"podb {pod_a['4']}"
    code = ("from podnet.store import open_store; from podnet import reconcile; "
            f"print(sorted(reconcile.state(open_store({str(cluster.tmp / 'a' / 'data')!r})).cluster))")
    rendered = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert rendered.strip() == str(sorted([A4, B4, "203.0.113.0/24", A6, B6]))

    # a no-masquerade 10.0.0.0/8 over the podCIDRs: their elements give way to it, in one
    # transaction on the same table (an interval set refuses an element over others)
    agent_a.stop()
    agent_a = cluster.agent("a", no_masquerade_cidrs=["10.0.0.0/8", "203.0.113.0/24"])
    ok, log = agent_a.sync(me_a, [me_b])
    assert ok, log
    assert sorted(line for line in log if "cluster destination" in line) == [
        "INFO cluster destination 10.0.0.0/8 added", f"INFO cluster destination {A4} removed",
        f"INFO cluster destination {B4} removed"]
    assert "elements = { 10.0.0.0/8, 203.0.113.0/24 }" in lab.exec(
        node_a, "nft", "list", "set", "inet", "podnet", "cluster_v4").stdout
    after = json.loads(lab.exec(node_a, "nft", "-j", "list", "table", "inet", "podnet").stdout)
    assert [i["table"]["handle"] for i in after["nftables"] if "table" in i] == table_handle


def test_faults_logged_retried_never_fatal(cluster: Cluster) -> None:
    """The conflist dir read-only (a read-only bind mount in the agent's own mount namespace)
    and the kernel refusing routes and nft (the agent without CAP_NET_ADMIN: EPERM for real):
    sync returns False each time, says why, the process keeps going; a sync with what is
    needed back applies it all."""
    need("setpriv", "unshare")
    cluster.node("a", 1)
    cluster.node("b", 2)
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    b = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    conf_dir = str(cluster.tmp / "a" / "net.d")
    readonly = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f'mount --bind {conf_dir} {conf_dir} && mount -o remount,bind,ro {conf_dir} && exec "$@"', "-"]
    agent = cluster.agent("a", prefix=readonly)
    for said in (1, 0):  # failing each time, said once
        ok, log = agent.sync(me, [b])
        assert not ok and sum("cannot write conflist" in line and "Read-only file system" in line
                              for line in log) == said, log
        assert agent.proc.poll() is None
    assert not cluster.conflist("a").exists()
    assert cluster.routes("a") == {B4: "192.0.2.12", B6: "2001:db8:1::12"}  # the rest proceeds
    agent.stop()
    sh("ip", "-n", cluster.nodes["a"], "route", "flush", "proto", PROTO)
    sh("ip", "-n", cluster.nodes["a"], "-6", "route", "flush", "proto", PROTO)
    lab = cluster.lab
    lab.exec(cluster.nodes["a"], "nft", "delete", "table", "inet", "podnet")

    capless = ["setpriv", "--bounding-set", "-net_admin", "--inh-caps", "-net_admin"]
    agent = cluster.agent("a", prefix=capless)
    for said in (1, 0):
        ok, log = agent.sync(me, [b])
        assert not ok, log
        assert sum(line.startswith(f"ERROR the kernel refused `ip route add {B4} via 192.0.2.12 proto 113`")
                   and "Operation not permitted" in line for line in log) == said, log
        assert sum("table inet podnet" in line and line.startswith("ERROR") for line in log) == said, log
        assert agent.proc.poll() is None
    assert cluster.routes("a") == {} and cluster.conflist("a").exists()
    agent.stop()
    agent = cluster.agent("a")
    ok, log = agent.sync(me, [b])
    assert ok, log
    assert cluster.routes("a") == {B4: "192.0.2.12", B6: "2001:db8:1::12"}
    assert "10.244.2.0/24" in lab.exec(cluster.nodes["a"], "nft", "list", "set", "inet", "podnet", "cluster_v4").stdout


def test_a_route_the_kernel_refuses_is_logged_the_others_proceed(cluster: Cluster) -> None:
    """``ip route get`` finds Node odd's InternalIP on eth0 without a gateway (a scope-global
    device route), but the kernel takes a gateway only through a link-scope route ("Nexthop has
    invalid gateway"): that route is refused, said once, sync returns False; the others are
    made; once the administrator fixes the route, the next sync makes it."""
    cluster.node("a", 1)
    cluster.node("b", 2)
    node_a = cluster.nodes["a"]
    sh("ip", "-n", node_a, "route", "add", "198.51.100.0/24", "dev", "eth0", "scope", "global")
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    b = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    odd = node_obj("odd", ["10.244.40.0/24"], ["198.51.100.7"])
    agent = cluster.agent("a")
    for said in (1, 0):
        ok, log = agent.sync(me, [b, odd])
        assert not ok and agent.proc.poll() is None
        assert sum(line == "ERROR the kernel refused `ip route add 10.244.40.0/24 via 198.51.100.7 proto 113`: "
                           "Error: Nexthop has invalid gateway." for line in log) == said, log
        assert cluster.routes("a") == {B4: "192.0.2.12", B6: "2001:db8:1::12"}
    sh("ip", "-n", node_a, "route", "del", "198.51.100.0/24", "dev", "eth0", "scope", "global")
    sh("ip", "-n", node_a, "addr", "add", "198.51.100.1/24", "dev", "eth0")
    ok, log = agent.sync(me, [b, odd])
    assert ok and "INFO route 10.244.40.0/24 via 198.51.100.7 for Node odd added" in log, log


def _all_routes(ns: str) -> dict[str, list[str]]:
    """Every route of ``ns`` per family (``-4``, ``-6``), all tables, but the kernel's own
    routes of IPv6 link-local addresses: those come when an interface's address has passed
    DAD, at a moment of the kernel's choosing, and no agent makes them."""
    out = {}
    for f in ("-4", "-6"):
        lines = sh("ip", "-n", ns, f, "route", "show", "table", "all").stdout.splitlines()
        out[f] = [x.strip() for x in lines if not ("fe80:" in x and "proto kernel" in x)]
    return out


def test_podcidrs_over_the_nodes_own_network_or_no_pod_range_refused(cluster: Cluster) -> None:
    """A Node's podCIDR that would take the node's own traffic into the pod network is refused
    (said once, no route, no cluster destination) and the good Node proceeds: one inside the
    node's LAN (its gateway and API server), one inside or over an administrator's static
    route, one holding a local address of the node (an AnyIP ``local`` route) or the next hop
    of its default route (an ``onlink`` one outside the LAN); and every range that is no pod
    range: a bare address, public, link-local (cloud metadata), multicast, loopback, "this
    network", reserved, both families. Each named one is refused for the reason given."""
    cluster.node("a", 1)
    cluster.node("b", 2)
    ns = cluster.nodes["a"]
    sh("ip", "-n", ns, "route", "add", "10.50.0.0/16", "via", OUT4)
    sh("ip", "-n", ns, "route", "add", "10.60.5.0/24", "via", OUT4, "proto", "static")
    sh("ip", "-n", ns, "route", "add", "local", "10.70.0.0/24", "dev", "lo")
    sh("ip", "-n", ns, "route", "add", "default", "via", "10.80.0.1", "dev", "eth0", "onlink")
    sh("ip", "-n", ns, "-6", "route", "add", "default", "via", OUT6)
    before = _all_routes(ns)
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    good = node_obj("b", [B4, B6], ["192.0.2.12", "2001:db8:1::12"])
    ip4, ip6 = ["192.0.2.12"], ["2001:db8:1::12"]
    bad = {
        "lan": (["192.0.2.0/29"], ip4, "overlaps the node's route 192.0.2.0/24 dev eth0 proto 2"),
        "instatic": (["10.50.1.0/24"], ip4, "overlaps the node's route 10.50.0.0/16 via 192.0.2.100 proto 3"),
        "overstatic": (["10.60.0.0/16"], ip4, "overlaps the node's route 10.60.5.0/24 via 192.0.2.100 proto 4"),
        "anyip": (["10.70.0.0/23"], ip4, "holds an address of this node (10.70.0.0/24)"),
        "gateway": (["10.80.0.0/24"], ip4, "holds the next hop of its default route 10.80.0.1"),
        "bare": (["8.8.8.8"], ip4, "8.8.8.8/32 is too small for a pod range"),
        "meta": (["169.254.169.0/24"], ip4, "is a link-local range"),
        "public": (["160.0.0.0/3"], ip4, "is a public range"),
        "mcast": (["224.0.0.0/4"], ip4, "is a multicast range"),
        "loop": (["127.0.0.0/8"], ip4, "is a loopback range"),
        "thisnet": (["0.0.0.0/8"], ip4, "overlaps 0.0.0.0/8, reserved"),
        "classe": (["240.0.0.0/5"], ip4, "overlaps 240.0.0.0/4, reserved"),
        "v6public": (["2000::/3"], ip6, "is a public range"),
        "v6lan": (["2001:db8:1::/112"], ip6, "overlaps the node's route 2001:db8:1::/64 dev eth0 proto 2"),
        "v6mcast": (["ff00::/8"], ip6, "is a multicast range"),
        "v6ll": (["fe80::/10"], ip6, "is a link-local range"),
        "v6bare": (["fd00:99::1"], ip6, "fd00:99::1/128 is too small for a pod range"),
    }
    others = [good, *(node_obj(name, cidrs, ips) for name, (cidrs, ips, _) in bad.items())]
    a = cluster.agent("a")
    ok, log = a.sync(me, others)
    assert ok, log
    assert cluster.routes("a") == {B4: "192.0.2.12", B6: "2001:db8:1::12"}
    for name, (_, _, why) in bad.items():
        said = [line for line in log if line.startswith(f"WARNING Node {name} refused: its podCIDR ")]
        assert len(said) == 1 and why in said[0] and said[0].endswith("; nothing made for it"), (name, log)
    for family, ours in (("cluster_v4", f"{A4}, {B4}"), ("cluster_v6", f"{A6}, {B6}")):
        elements = sh("ip", "netns", "exec", ns, "nft", "list", "set", "inet", "podnet", family).stdout
        assert f"elements = {{ {ours} }}" in " ".join(elements.split()), elements
    after = _all_routes(ns)
    for family in ("-4", "-6"):  # nothing but the good Node's routes came
        assert sorted(set(after[family]) - set(before[family])) == (
            [f"{B4} via 192.0.2.12 dev eth0 proto 113"] if family == "-4"
            else [f"{B6} via 2001:db8:1::12 dev eth0 proto 113 metric 1024 pref medium"])
        assert set(before[family]) <= set(after[family])
    assert cluster.lab.exec(ns, "ip", "route", "get", "192.0.2.5").stdout.split()[:3] == ["192.0.2.5", "dev", "eth0"]
    ok, log = a.sync(me, others)
    assert ok and log == []  # said once


def test_of_overlapping_nodes_the_routed_one_stays(cluster: Cluster) -> None:
    """Node zz is routed; Node aa then comes with a podCIDR over zz's: aa is refused, zz keeps its
    route and its cluster destination — also after a restart of the agent (the store knows zz
    as a cluster destination). Once zz is gone, aa is routed."""
    cluster.node("a", 1)
    cluster.node("b", 2)
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    zz = node_obj("zz", ["10.244.20.0/24"], ["192.0.2.12"])
    aa = node_obj("aa", ["10.244.20.0/23"], ["192.0.2.12"])
    a = cluster.agent("a")
    assert a.sync(me, [zz])[0]
    for restart in (False, True):
        if restart:
            a.stop()
            a = cluster.agent("a")
        ok, log = a.sync(me, [zz, aa])
        assert ok and cluster.routes("a") == {"10.244.20.0/24": "192.0.2.12"}, log
        assert ("WARNING Node aa refused: its podCIDR 10.244.20.0/23 overlaps that of Node zz (10.244.20.0/24, "
                "kept: already routed); nothing made for it") in log, log
        assert [line for line in log if line.startswith("INFO")] == [], log
        elements = sh("ip", "netns", "exec", cluster.nodes["a"], "nft", "list", "set", "inet", "podnet",
                      "cluster_v4").stdout
        assert f"elements = {{ {A4}, 10.244.20.0/24 }}" in elements, elements
    ok, log = a.sync(me, [aa])
    assert ok and cluster.routes("a") == {"10.244.20.0/23": "192.0.2.12"}, log


def test_routes_of_the_agents_protocol_it_did_not_make_left_alone(cluster: Cluster) -> None:
    """A blackhole and a route via a gateway with proto 113, made before the agent (by an
    administrator or another daemon), stay through syncs and a restart (said once); the
    agent's own routes are still followed — also one exactly as it makes them that its store
    does not record (made before its store was lost), which goes with its Node — and a Node's
    podCIDR inside the blackhole is refused like one inside any route of the node."""
    cluster.node("a", 1)
    cluster.node("b", 2)
    ns = cluster.nodes["a"]
    sh("ip", "-n", ns, "route", "add", "blackhole", "10.99.0.0/16", "proto", PROTO)
    sh("ip", "-n", ns, "route", "add", "198.18.0.0/15", "via", OUT4, "proto", PROTO)
    # exactly the route the agent makes for Node c (an agent whose store was lost made it): its own
    sh("ip", "-n", ns, "route", "add", C4, "via", "192.0.2.12", "proto", PROTO)
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    b = node_obj("b", [B4], ["192.0.2.12"])
    c = node_obj("c", [C4], ["192.0.2.12"])
    inhole = node_obj("inhole", ["10.99.1.0/24"], ["192.0.2.12"])
    a = cluster.agent("a")
    ok, log = a.sync(me, [b, c, inhole])
    assert ok and not any(C4 in line for line in log), log
    assert sum("has the agent's protocol but the agent did not make it" in line for line in log) == 2, log
    assert any("Node inhole refused: its podCIDR 10.99.1.0/24 overlaps the node's route blackhole 10.99.0.0/16 "
               "proto 113" in line for line in log), log
    ok, log = a.sync(me, [b, inhole])  # Node c deleted: the route made for it goes
    assert ok and f"INFO route {C4} via 192.0.2.12 removed" in log, log
    theirs = ["blackhole 10.99.0.0/16 proto 113", f"198.18.0.0/15 via {OUT4} dev eth0 proto 113"]
    shown = [x.strip() for x in sh("ip", "-n", ns, "route", "show", "proto", PROTO).stdout.splitlines()]
    assert sorted(shown) == sorted([f"{B4} via 192.0.2.12 dev eth0", "blackhole 10.99.0.0/16",
                                    f"198.18.0.0/15 via {OUT4} dev eth0"]), shown
    ok, log = a.sync(me, [])  # Node b deleted: its route goes, the others stay
    assert ok and f"INFO route {B4} via 192.0.2.12 removed" in log and not any("198.18" in x for x in log), log
    a.stop()
    a = cluster.agent("a")
    ok, log = a.sync(me, [])
    assert ok and not any(line.startswith("INFO route") for line in log), log
    assert sorted(x.strip() for x in sh("ip", "-n", ns, "route", "show", "proto", PROTO).stdout.splitlines()) == sorted(
        [t.replace(" proto 113", "") for t in theirs])


def test_an_administrators_conflist_keeps_all_but_its_ranges(cluster: Cluster) -> None:
    """A podnet conflist an administrator wrote — ``ipMasq: false``, ``mtu``, a capability,
    chained ``bandwidth`` and ``podnet-portmap`` plugins, their own extra range — keeps every
    key and plugin: only ``ranges`` change (the podCIDRs first) and ``dataDir`` is added (it had
    none); a runtime's ADD from it gets the administrator's MTU. A conflist naming a ``dataDir``
    other than the agent's store is left alone byte for byte (said once): its plugins would not
    use the agent's store."""
    cluster.node("a", 1)
    agent = cluster.agent("a")
    path = cluster.conflist("a")
    admin = {"cniVersion": "1.0.0", "name": "podnet", "plugins": [
        {"type": "podnet", "ranges": ["10.250.0.0/24"], "ipMasq": False, "mtu": 1400,
         "capabilities": {"portMappings": True}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        {"type": "podnet-portmap", "capabilities": {"portMappings": True}}]}
    path.write_text(json.dumps(admin, indent=1))
    me = node_obj("a", [A4, A6], ["192.0.2.11", "2001:db8:1::11"])
    ok, log = agent.sync(me, [])
    assert ok, log
    data_dir = str(cluster.tmp / "a" / "data")
    want = json.loads(json.dumps(admin))
    want["plugins"][0]["ranges"] = [A4, A6, "10.250.0.0/24"]
    want["plugins"][0]["dataDir"] = data_dir
    assert json.loads(path.read_text()) == want
    assert f"INFO conflist {path}: ranges {A4}, {A6}, 10.250.0.0/24 (was 10.250.0.0/24)" in log, log
    mtime = path.stat().st_mtime_ns
    assert agent.sync(me, []) == (True, []) and path.stat().st_mtime_ns == mtime
    pod = cluster.add_pod("a", "pa")
    assert ip_address(pod["4"]) in ip_network(A4)
    assert "mtu 1400" in cluster.lab.exec(pod["ns"], "ip", "link", "show", "eth0").stdout

    other = dict(admin, plugins=[dict(admin["plugins"][0], dataDir="/var/lib/elsewhere"), *admin["plugins"][1:]])
    path.write_text(json.dumps(other, indent=1))
    text = path.read_bytes()
    for said in (1, 0):
        ok, log = agent.sync(me, [])
        assert not ok and path.read_bytes() == text
        assert sum(line == f"WARNING conflist {path} names dataDir '/var/lib/elsewhere', not the agent's store "
                           f"{data_dir}: left alone (its plugins would not use the store the agent keeps)"
                   for line in log) == said, log
