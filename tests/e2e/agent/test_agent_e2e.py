"""``podnetctl agent`` end to end: three node namespaces on a LAN, each running the real agent
against the stand-in API server (:mod:`kubeapi`), pods added by the real plugin with the conflist
the agent wrote, and real TCP between them (:mod:`agent_lab`).

Checked here, as a cluster sees it: the conflists, the routes of both families, pod-to-pod TCP
across nodes with the client pod's address, egress masqueraded to the node's address and a
``--no-masquerade-cidr`` destination not; a node added, deleted and re-addressed; the watch
expired and dropped while nodes change; the agent killed (pods keep working, the restart changes
nothing) and the API down at start.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

import envgate
from agent_lab import (
    NOMASQ4,
    NOMASQ6,
    OUTSIDE4,
    OUTSIDE6,
    AgentCluster,
    node_addr,
    pod_cidrs,
)

pytestmark = pytest.mark.root

PORT = 8080


@pytest.fixture
def cluster() -> Iterator[AgentCluster]:
    envgate.need("root", "ip", "nft")
    c = AgentCluster(nodes=3)
    try:
        yield c
    finally:
        c.close()


def _address(result: dict, family: int) -> str:
    return next(ip["address"].split("/")[0] for ip in result["ips"]
                if (":" in ip["address"]) == (family == 6))  # fmt: skip


def _routed(c: AgentCluster, i: int, peers: dict[int, int]) -> bool:
    """Whether node ``i`` routes each peer's podCIDRs via the address of ``peers[peer]``'s
    node (a peer → the node whose addresses it has now)."""
    for family, k in ((4, 0), (6, 1)):
        want = {pod_cidrs(p)[k]: node_addr(a, family) for p, a in peers.items()}
        if c.routes(i, family) != want:
            return False
    return True


def _converged(c: AgentCluster, nodes: list[int]) -> bool:
    return all(c.agents[i].conflist() is not None
               and _routed(c, i, {p: p for p in nodes if p != i}) for i in nodes)  # fmt: skip


def test_conflists_routes_and_traffic_across_nodes(cluster: AgentCluster) -> None:
    c = cluster
    c.api.start()
    for i in (1, 2):
        c.register(i)
    for agent in c.agents.values():
        agent.start()
    c.wait_for("n1 and n2 converge", lambda: _converged(c, [1, 2]))
    for i in (1, 2):
        conflist = c.agents[i].conflist()
        assert conflist is not None and conflist["name"] == "podnet"
        plugin = conflist["plugins"][0]
        assert plugin["type"] == "podnet" and plugin["ranges"] == pod_cidrs(i)
        assert plugin["capabilities"]["portMappings"] is True
    # n3 is not a Node yet: no conflist, and it says so once
    assert c.agents[3].conflist() is None

    pod1, res1 = c.add_pod(1)
    pod2, res2 = c.add_pod(2)
    c.serve(pod2, "pod2", PORT)
    c.serve(c.outside, "outside", PORT)
    for family in (4, 6):
        client, server = _address(res1, family), _address(res2, family)
        # pod to pod across nodes: the server sees the client pod's own address
        assert c.talk(pod1, server, PORT) == f"pod2 {client}"
        # leaving the cluster: masqueraded to the node's address
        outside = OUTSIDE4 if family == 4 else OUTSIDE6
        assert c.talk(pod1, outside, PORT) == f"outside {node_addr(1, family)}"
        # a --no-masquerade-cidr destination: the pod's address
        nomasq = NOMASQ4 if family == 4 else NOMASQ6
        assert c.talk(pod1, nomasq, PORT) == f"outside {client}"

    # a node added: the others route to it, and its pods are reachable
    c.register(3)
    c.wait_for("n3 joins", lambda: _converged(c, [1, 2, 3]))
    pod3, res3 = c.add_pod(3)
    c.serve(pod3, "pod3", PORT)
    for family in (4, 6):
        assert c.talk(pod1, _address(res3, family), PORT) == f"pod3 {_address(res1, family)}"

    # a changed InternalIP is followed: n2 moves to n2's second address
    moved4, moved6 = "198.51.100.42", "2001:db8:100::42"
    c.exec_node(2, "ip", "addr", "add", f"{moved4}/24", "dev", "eth0")
    c.exec_node(2, "ip", "addr", "add", f"{moved6}/64", "dev", "eth0", "nodad")
    c.register(2, internal=[moved4, moved6])

    def moved() -> bool:
        return all(c.routes(i, 4).get(pod_cidrs(2)[0]) == moved4
                   and c.routes(i, 6).get(pod_cidrs(2)[1]) == moved6 for i in (1, 3))  # fmt: skip

    c.wait_for("n2's new InternalIP", moved)
    assert c.talk(pod1, _address(res2, 4), PORT) == f"pod2 {_address(res1, 4)}"

    # a deleted node: its routes are gone from the others
    c.api.delete("n3")
    c.wait_for("n3's routes removed", lambda: all(
        pod_cidrs(3)[0] not in c.routes(i, 4) and pod_cidrs(3)[1] not in c.routes(i, 6)
        for i in (1, 2)))  # fmt: skip


def test_watch_expired_and_dropped_while_nodes_change(cluster: AgentCluster) -> None:
    c = cluster
    c.api.start()
    c.register(1)
    c.register(2)
    for i in (1, 2, 3):
        c.agents[i].start()
    c.wait_for("n1 and n2 converge", lambda: _converged(c, [1, 2]))
    # changes the agents' watches never see as events (they fell behind), then the window
    # expires: every open watch ends with 410 and only a relist shows the new view
    lists = c.api.requests["list"]
    c.api.mute()
    c.register(3)
    c.api.delete("n2")
    c.register(2, internal=["198.51.100.42", "2001:db8:100::42"])
    c.api.expire(streams=True)
    c.api.mute(False)
    for i, addr in ((2, "198.51.100.42"), (2, "2001:db8:100::42")):
        c.exec_node(i, "ip", "addr", "add", f"{addr}/{24 if '.' in addr else 64}", "dev", "eth0",
                    *(["nodad"] if ":" in addr else []))  # fmt: skip

    def relisted() -> bool:
        return (all(c.routes(i, 4).get(pod_cidrs(2)[0]) == "198.51.100.42" for i in (1, 3))
                and c.routes(1, 4).get(pod_cidrs(3)[0]) == node_addr(3, 4)
                and c.routes(3, 4).get(pod_cidrs(1)[0]) == node_addr(1, 4))  # fmt: skip

    c.wait_for("converge after the relist", relisted)
    assert c.api.requests["list"] >= lists + 3, dict(c.api.requests)  # one relist per agent
    # and a watch that is dropped mid-stream while a node changes
    c.api.drop_streams()
    c.api.delete("n3")
    c.wait_for("n3's routes gone after the drop", lambda: all(
        pod_cidrs(3)[0] not in c.routes(i, 4) for i in (1, 2)))  # fmt: skip


def test_killed_agent_pods_keep_working_and_restart_changes_nothing(
        cluster: AgentCluster) -> None:  # fmt: skip
    c = cluster
    c.api.start()
    c.register(1)
    c.register(2)
    for i in (1, 2):
        c.agents[i].start()
    c.wait_for("converge", lambda: _converged(c, [1, 2]))
    pod1, res1 = c.add_pod(1)
    pod2, res2 = c.add_pod(2)
    c.serve(pod2, "pod2", PORT)
    conflist = c.agents[1].conflist_file()
    assert conflist is not None
    before = (os.stat(conflist).st_mtime_ns, conflist.read_bytes(), c.routes(1, 4),
              c.routes(1, 6), c.exec_node(1, "nft", "list", "table", "inet", "podnet").stdout)
    c.agents[1].stop(signal.SIGKILL)
    for family in (4, 6):
        assert c.talk(pod1, _address(res2, family), PORT) == f"pod2 {_address(res1, family)}"
    mark = len(c.agents[1].lines())
    c.agents[1].start()
    c.wait_for("the restarted agent's first sync", lambda: c.metric(1, "podnet_agent_nodes"))
    after = (os.stat(conflist).st_mtime_ns, conflist.read_bytes(), c.routes(1, 4),
             c.routes(1, 6), c.exec_node(1, "nft", "list", "table", "inet", "podnet").stdout)
    assert after == before
    assert c.talk(pod1, _address(res2, 4), PORT) == f"pod2 {_address(res1, 4)}"
    # SIGTERM ends it cleanly
    assert c.agents[1].stop(signal.SIGTERM) == 0
    assert len(c.agents[1].lines()) >= mark


def test_api_down_at_start(cluster: AgentCluster) -> None:
    c = cluster
    c.register(1)
    c.register(2)
    for i in (1, 2):
        c.agents[i].start()
    c.wait_for("the agents retry", lambda: all(
        a.proc is not None and a.proc.poll() is None and a.lines() for a in
        (c.agents[1], c.agents[2])))  # fmt: skip
    c.api.start()
    c.wait_for("converge once the API is up", lambda: _converged(c, [1, 2]))
