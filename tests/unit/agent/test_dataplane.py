"""Which Nodes the agent's dataplane makes anything for (:func:`podnet.agent.dataplane.admit`),
what it says once (:class:`podnet.agent.notes.Notes`), and how it reads what ``ip`` and ``nft``
print — pure, no root."""

from __future__ import annotations

import ipaddress
import logging
import random
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from pathlib import Path

import pytest

from podnet.agent.conflist import _ranges_in, write_atomic
from podnet.agent.dataplane import admit
from podnet.agent.masq import _element_nets
from podnet.agent.model import Node
from podnet.agent.notes import Notes
from podnet.agent.routes import _failed_lines


def node(name: str, cidrs: list[str], ips: list[str]) -> Node:
    nets: dict[int, IPv4Network | IPv6Network] = {n.version: n for n in map(ipaddress.ip_network, cidrs)}
    addrs: dict[int, IPv4Address | IPv6Address] = {a.version: a for a in map(ipaddress.ip_address, ips)}
    return Node(name, nets, addrs)


@pytest.fixture
def notes(caplog: pytest.LogCaptureFixture) -> Notes:
    caplog.set_level(logging.INFO, logger="podnet.agent")
    return Notes()


def test_overlaps_kept_as_a_greedy_pass_over_every_pair_keeps_them() -> None:
    """Of overlapping Nodes, the sweep and the contested pass keep exactly what a greedy pass
    over every Node keeps (settled ones first, then by name; a Node is kept when it overlaps
    none kept), over random /16-/26 podCIDRs in one /12 (many overlaps, nested and chained)
    and a random settled subset: the kept are pairwise disjoint and every refused Node
    overlaps one kept before it."""
    rng = random.Random(26)
    for _ in range(30):
        nodes = {}
        for i in range(60):
            prefix = rng.randint(16, 26)
            base = int(ipaddress.ip_address("10.240.0.0")) + rng.randrange(0, 1 << 20)
            net = ipaddress.ip_network((base >> (32 - prefix) << (32 - prefix), prefix))
            nodes[f"n{i}"] = node(f"n{i}", [str(net)], [f"192.0.2.{i + 1}"])
        settled = {name for name in nodes if rng.random() < 0.2}
        admitted = {n.name for n in admit(None, nodes, Notes(), settled=settled)}
        kept: list[str] = []
        for name in sorted(nodes, key=lambda n: (n not in settled, n)):
            if not any(nodes[name].pod_cidrs[4].overlaps(nodes[k].pod_cidrs[4]) for k in kept):
                kept.append(name)
        assert admitted == set(kept)
        assert len(admitted) < len(nodes)  # the draw does overlap


def test_an_overlapping_newcomer_is_refused_the_settled_node_kept(notes: Notes,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Two Nodes with overlapping podCIDRs: the one already routed (settled) is kept even when
    the newcomer sorts first; with neither settled, the first by name is kept."""
    z = node("z", ["10.244.2.0/23"], ["192.0.2.2"])
    a = node("a", ["10.244.2.0/24"], ["192.0.2.3"])
    notes.begin()
    assert [n.name for n in admit(None, {"z": z, "a": a}, notes, settled={"z"})] == ["z"]
    assert [n.name for n in admit(None, {"z": z, "a": a}, notes)] == ["a"]
    notes.end()
    assert [r.getMessage() for r in caplog.records] == [
        "Node a refused: its podCIDR 10.244.2.0/24 overlaps that of Node z (10.244.2.0/23, kept: already "
        "routed); nothing made for it",
        "Node z refused: its podCIDR 10.244.2.0/23 overlaps that of Node a (10.244.2.0/24, kept: first by "
        "name); nothing made for it"]


def test_refusals_and_what_proceeds(notes: Notes, caplog: pytest.LogCaptureFixture) -> None:
    me = node("a", ["10.244.1.0/24", "fd00::/64"], ["192.0.2.1", "2001:db8::1"])
    others = {n.name: n for n in [
        node("ok", ["10.244.2.0/24", "fd00:0:0:2::/64"], ["192.0.2.2", "2001:db8::2"]),
        node("v6same", ["fd00::/64"], ["2001:db8::3"]),
        node("mcast", ["10.244.4.0/24"], ["224.0.0.1"]),
        node("inpods", ["10.244.5.0/24"], ["10.244.5.1"]),
        node("a", ["10.244.1.0/24"], ["192.0.2.1"]),  # itself in the view: not a peer
    ]}
    notes.begin()
    assert [n.name for n in admit(me, others, notes)] == ["ok"]
    notes.end()
    said = sorted(r.getMessage() for r in caplog.records)
    assert said == [
        "Node inpods refused: its InternalIP 10.244.5.1 is of no use as a next hop (inside podCIDR "
        "10.244.5.0/24); nothing made for it",
        "Node mcast refused: its InternalIP 224.0.0.1 is of no use as a next hop (a multicast "
        "address); nothing made for it",
        "Node v6same refused: its podCIDR fd00::/64 equals ours (fd00::/64); nothing made for it",
    ]
    caplog.clear()
    notes.begin()
    admit(me, others, notes)
    notes.end()
    assert caplog.records == []  # said once while it holds


def test_a_condition_is_said_again_after_it_went_away(notes: Notes, caplog: pytest.LogCaptureFixture) -> None:
    for present in (True, True, False, True):
        notes.begin()
        if present:
            notes.note(("k",), "it holds")
        notes.end()
    assert [r.getMessage() for r in caplog.records] == ["it holds", "it holds"]


def test_ip_batch_failures_by_line() -> None:
    stderr = ("RTNETLINK answers: Operation not permitted\nCommand failed -:2\n"
              "Error: Nexthop has invalid gateway.\nCommand failed -:5\n")
    assert _failed_lines(stderr) == {2: "RTNETLINK answers: Operation not permitted",
                                     5: "Error: Nexthop has invalid gateway."}


def test_nft_set_elements_read_as_prefixes() -> None:
    assert _element_nets({"prefix": {"addr": "10.0.0.0", "len": 8}}) == ["10.0.0.0/8"]
    assert _element_nets("192.0.2.7") == ["192.0.2.7/32"]
    assert _element_nets({"range": ["10.0.0.0", "10.0.2.255"]}) == ["10.0.0.0/23", "10.0.2.0/24"]
    with pytest.raises(ValueError):
        _element_nets({"prefix": {"addr": "10.0.0.0; flush ruleset", "len": 8}})


def test_only_a_podnet_conflist_of_ranges_is_the_agents(tmp_path: Path) -> None:
    path = tmp_path / "10-podnet.conflist"
    assert _ranges_in(str(path)) == []  # none yet: to be written
    for text, ranges in [
        ('{"plugins": [{"type": "podnet", "ranges": ["10.244.1.0/24", 7]}]}', ["10.244.1.0/24", 7]),
        ('{"plugins": [{"type": "podnet", "network": "br0"}]}', None),
        ('{"plugins": [{"type": "podnet", "ipam": {"type": "host-local"}}]}', None),
        ('{"plugins": [{"type": "bridge", "ranges": []}]}', None),
        ('{"plugins": [', None),
    ]:
        path.write_text(text)
        assert _ranges_in(str(path)) == ranges, text


def test_atomic_write_only_when_the_bytes_change(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "x.conflist"
    assert write_atomic(str(path), b"one\n") is True
    first = path.stat()
    assert write_atomic(str(path), b"one\n") is False
    assert path.stat().st_mtime_ns == first.st_mtime_ns and path.stat().st_ino == first.st_ino
    assert write_atomic(str(path), b"two\n") is True and path.read_bytes() == b"two\n"
    assert path.stat().st_ino != first.st_ino and oct(path.stat().st_mode & 0o7777) == "0o644"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.conflist"]
