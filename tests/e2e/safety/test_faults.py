"""Faults a node can have, one test each: a tool that is not
installed, fails or hangs, a failing veth delete, a full filesystem, a read-only or corrupt
database, the database lock held by another process.

Every call runs the installed plugin file (``podnetctl install``: ``#!<python> -IS``) with an
explicit environment in the test's node namespace. Each test asserts the exact CNI answer, that
``msg``/``details`` name the tool or the file, and that nothing leaked: the node's state
(:func:`faults.snapshot`: database tables, veths, nftables ruleset, iptables nat tables, the
pods' links) is the same before and after a failed call, and the runtime's DEL removes
everything of a pod afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import faults
import paths
from envgate import need
from netns import Lab
from nonetadmin import NoNetAdmin
from plugin_calls import RANGES, netconf
from portmap_helpers import PORTMAP_DATA

pytestmark = pytest.mark.root

REF_PTP = "/usr/lib/cni/ptp"
V4_SUBNET, V6_SUBNET = "10.1.0.0/24", "fd00:1::/64"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> faults.Installed:
    need("root", "ip", "nft", "reference-plugins")
    return faults.install_plugins(tmp_path_factory.mktemp("install"))


class Node:
    """The ``lab`` node with podnet's dataDir ``data`` and helpers to call the installed plugins."""

    def __init__(self, lab: Lab, installed: faults.Installed, data: Path) -> None:
        self.lab, self.installed, self.data = lab, installed, data
        self.pods: list[str] = []

    def pod(self) -> str:
        name = self.lab.pod()
        for scope in ("all", "default"):
            self.lab.exec(name, "sysctl", "-qw", f"net.ipv6.conf.{scope}.accept_dad=0")
        self.pods.append(name)
        return name

    def call(self, plugin: str, command: str, conf: dict[str, Any], *, cid: str = "", netns: str | None = None,
             path: str = faults.BASE_PATH, hide: tuple[str, ...] = (), timeout: float = 60) -> faults.Outcome:
        env = faults.cni_env(command, container_id=cid, netns=netns, path=path)
        return faults.run_plugin(self.lab.node, self.installed.path(plugin), env, conf, hide=hide, timeout=timeout)

    def add(self, cid: str, mappings: list[dict[str, Any]] | None = None, **kw: Any) -> tuple[str, Any]:
        """A podnet pod (no fault); ``(netns, result)``."""
        pod = self.pod()
        out = self.call("podnet", "ADD", netconf(self.data, mappings=mappings), cid=cid, netns=pod, **kw)
        assert out.rc == 0, f"ADD {cid} failed: {out.describe()}"
        return pod, out.answer

    def init_db(self) -> None:
        """Create podnet's database (a STATUS does), so "nothing changed" can be asserted on a
        node that has no pod yet."""
        out = self.call("podnet", "STATUS", netconf(self.data))
        assert out.rc == 0, f"STATUS: {out.describe()}"

    def snapshot(self) -> faults.Snapshot:
        return faults.snapshot(self.lab.node, self.data, pods=self.pods)

    def leftovers(self) -> list[str]:
        return faults.podnet_leftovers(self.lab.node, self.data)


@pytest.fixture
def node(lab: Lab, installed: faults.Installed, tmp_path: Path) -> Node:
    return Node(lab, installed, tmp_path / "data")


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[faults.FakeTools]:
    with faults.FakeTools(tmp_path) as tools:
        yield tools


def udp_tcp(port: int) -> list[dict[str, Any]]:
    return [{"hostPort": port, "containerPort": 53, "protocol": "udp"},
            {"hostPort": port + 1, "containerPort": 80, "protocol": "tcp"}]


class Findings:
    """Everything wrong with one fault's handling, asserted at once (so one failure message
    lists the wrong answer AND what leaked)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.items: list[str] = []

    def answer(self, out: faults.Outcome, code: int, *, names: tuple[str, ...] = (),
               details: tuple[str, ...] = ()) -> None:
        self.items += faults.answer_problems(out, code, names=names, details=details)

    def unchanged(self, before: faults.Snapshot, after: faults.Snapshot, what: str = "the call") -> None:
        if after != before:
            self.items.append(f"{what} changed the node's state:\n{before.diff(after)}")

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.items.append(problem)

    def check(self) -> None:
        assert not self.items, f"{self.what}:\n- " + "\n- ".join(self.items)


# --- conntrack is not installed -----------------------------------------------------------


V6_RANGE = "fd00:10:244::/64"


@pytest.mark.parametrize("tool", ["not installed", "without CAP_NET_ADMIN"])
def test_podnet_udp_hostports_without_conntrack(node: Node, tmp_path: Path, tool: str) -> None:
    """ADD and DEL of a pod with UDP hostPorts succeed when the flush fails both ways: ctnetlink
    refused (the plugin runs without CAP_NET_ADMIN, :class:`nonetadmin.NoNetAdmin`), and the
    ``conntrack`` tool not installed, or failing for want of the capability too (it then exits
    1, as when nothing matched: podnet must not take that for success). The flush is best
    effort, as upstream's: the warning names both failures, and DEL leaves nothing. IPv6 only
    (an IPv4 ADD writes ``ip_forward``, which needs CAP_NET_ADMIN); an unrestricted ADD first
    turns forwarding on."""
    cut = NoNetAdmin(tmp_path / "cut")
    hide: tuple[str, ...] = ("conntrack",)
    why = "conntrack is not installed"
    if tool == "without CAP_NET_ADMIN":
        (cut.trace.bin / "conntrack").unlink()  # the plain tool: no file capabilities
        hide, why = (), "CAP_NET_ADMIN"
    warm_pod = node.pod()
    warm = node.call("podnet", "ADD", netconf(node.data, ranges=[V6_RANGE]), cid="warm", netns=warm_pod)
    assert warm.rc == 0, warm.describe()
    pod = node.pod()
    conf = netconf(node.data, ranges=[V6_RANGE], mappings=udp_tcp(5353))
    f = Findings("podnet with UDP hostPorts, ctnetlink refused and no conntrack tool")
    mark = cut.trace.mark()
    add = faults.run_plugin(node.lab.node, str(cut.plugin),
                            faults.cni_env("ADD", container_id="c1", netns=pod, path=cut.trace.path), conf,
                            hide=hide)
    f.expect(add.rc == 0, f"ADD: {add.describe()}")
    f.expect("could not flush UDP conntrack entries of ports 5353 (ctnetlink:" in add.stderr
             and why in add.stderr.split("ctnetlink:", 1)[-1], f"no warning naming both: {add.stderr!r}")
    calls = cut.trace.calls(mark)
    f.expect(any(c.startswith("CALL nft ") for c in calls), f"the trace saw no nft call: {calls}")
    delete = faults.run_plugin(node.lab.node, str(cut.plugin),
                               faults.cni_env("DEL", container_id="c1", netns=pod, path=cut.trace.path),
                               {**conf, "prevResult": add.answer}, hide=hide)
    f.expect(delete.rc == 0 and delete.stdout.strip() == "", f"DEL: {delete.describe()}")
    out = node.call("podnet", "DEL", netconf(node.data, ranges=[V6_RANGE]), cid="warm", netns=warm_pod)
    f.expect(out.rc == 0, f"DEL warm: {out.describe()}")
    f.expect(node.leftovers() == [], f"left after DEL: {node.leftovers()}")
    f.check()


def ptp_conf(data: Path) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "pmnet", "type": "ptp",
            "ipam": {"type": "host-local", "dataDir": str(data), "ranges": [[{"subnet": V4_SUBNET}], [{"subnet": V6_SUBNET}]],
                     "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}}


def portmap_conf(backend: str, prev: Any, mappings: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "pmnet", "type": "podnet-portmap", "backend": backend,
            "capabilities": {"portMappings": True}, "runtimeConfig": {"portMappings": mappings}, "prevResult": prev,
            "dataDir": PORTMAP_DATA}


@pytest.fixture
def ptp_pod(node: Node, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """A pod wired by the reference ptp (host-local IPAM): ``(netns, ptp conf, result)``."""
    pod = node.pod()
    conf = ptp_conf(tmp_path / "host-local")
    env = faults.cni_env("ADD", container_id="c1", netns=pod)
    out = faults.run_plugin(node.lab.node, REF_PTP, env, conf)
    assert out.rc == 0, f"reference ptp ADD: {out.describe()}"
    try:
        yield pod, conf, out.answer
    finally:
        faults.run_plugin(node.lab.node, REF_PTP, faults.cni_env("DEL", container_id="c1", netns=pod), conf)


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
def test_portmap_udp_hostports_without_conntrack(node: Node, ptp_pod: tuple[str, dict[str, Any], Any],
                                                 backend: str, tmp_path: Path) -> None:
    """podnet-portmap after the reference ptp: ADD and DEL with a UDP hostPort succeed while
    the flush fails both ways (ctnetlink refused: run without CAP_NET_ADMIN; no conntrack
    tool), with a warning naming both; DEL removes the container's chains and elements."""
    pod, _, prev = ptp_pod
    conf = portmap_conf(backend, prev, udp_tcp(5353))
    cut = NoNetAdmin(tmp_path / "cut")
    f = Findings(f"podnet-portmap ({backend}) with UDP hostPorts, ctnetlink refused and no conntrack")

    def call(command: str) -> faults.Outcome:
        env = faults.cni_env(command, container_id="c1", netns=pod, path=cut.trace.path)
        return faults.run_plugin(node.lab.node, str(cut.portmap), env, conf, hide=("conntrack",))

    add = call("ADD")
    f.expect(add.rc == 0, f"ADD: {add.describe()}")
    f.expect("could not flush UDP conntrack entries of ports 5353 (ctnetlink:" in add.stderr
             and "conntrack is not installed" in add.stderr, f"no warning naming both: {add.stderr!r}")
    f.expect(bool(faults.portmap_leftovers(node.lab.node)) or add.rc != 0, "the ADD installed no rule at all")
    delete = call("DEL")
    f.expect(delete.rc == 0, f"DEL: {delete.describe()}")
    f.expect(faults.portmap_leftovers(node.lab.node) == [], f"left after DEL: {faults.portmap_leftovers(node.lab.node)}")
    f.check()


# --- a runtime's PATH without sbin ---------------------------------------------------------------------


def test_path_without_sbin(node: Node, ptp_pod: tuple[str, dict[str, Any], Any]) -> None:
    """Runtimes call plugins with a PATH that may lack /usr/sbin and /sbin (where ip, nft and
    conntrack live): ADD, CHECK and DEL of podnet and podnet-portmap (nftables) still work."""
    f = Findings(f"calls with PATH={faults.NO_SBIN_PATH}")
    pod = node.pod()
    conf = netconf(node.data, mappings=udp_tcp(7000))
    add = node.call("podnet", "ADD", conf, cid="c1", netns=pod, path=faults.NO_SBIN_PATH)
    f.expect(add.rc == 0, f"podnet ADD: {add.describe()}")
    check = node.call("podnet", "CHECK", {**conf, "prevResult": add.answer}, cid="c1", netns=pod,
                      path=faults.NO_SBIN_PATH)
    f.expect(check.rc == 0, f"podnet CHECK: {check.describe()}")
    delete = node.call("podnet", "DEL", conf, cid="c1", netns=pod, path=faults.NO_SBIN_PATH)
    f.expect(delete.rc == 0 and node.leftovers() == [], f"podnet DEL: {delete.describe()}; left {node.leftovers()}")
    ptp_ns, _, prev = ptp_pod
    pm = portmap_conf("nftables", prev, udp_tcp(7100))
    for verb in ("ADD", "CHECK", "DEL"):
        out = node.call("podnet-portmap", verb, pm, cid="c2", netns=ptp_ns, path=faults.NO_SBIN_PATH)
        f.expect(out.rc == 0, f"podnet-portmap {verb}: {out.describe()}")
    f.expect(faults.portmap_leftovers(node.lab.node) == [], f"podnet-portmap left {faults.portmap_leftovers(node.lab.node)}")
    f.check()


# --- nft not installed, nft or ip failing -----------------------------------------------------------


def prepare(node: Node, node_has_pod: bool) -> None:
    if node_has_pod:
        node.add("c0", [{"hostPort": 8080, "containerPort": 80}])
    else:
        node.init_db()


def failed_add_changes_nothing(node: Node, title: str, *, names: tuple[str, ...] = (),
                               details: tuple[str, ...] = (), path: str = faults.BASE_PATH,
                               hide: tuple[str, ...] = ()) -> None:
    """podnet's ADD of a new pod (c1, hostPort 8081) under a fault: a 104 whose msg or details
    name ``names`` and whose details hold ``details``, and the node as it was before."""
    pod = node.pod()
    before = node.snapshot()
    out = node.call("podnet", "ADD", netconf(node.data, mappings=[{"hostPort": 8081, "containerPort": 80}]),
                    cid="c1", netns=pod, path=path, hide=hide)
    f = Findings(title)
    f.answer(out, 104, names=names, details=details)
    f.unchanged(before, node.snapshot())
    f.check()


@pytest.mark.parametrize("node_has_pod", [False, True], ids=["empty-node", "node-with-a-pod"])
def test_nft_not_installed(node: Node, node_has_pod: bool) -> None:
    """Without nft: a clean 104 naming nft, and no veth, row or element of the failed ADD (the
    incremental path, on a node that already has a pod, used to leak the veth)."""
    prepare(node, node_has_pod)
    failed_add_changes_nothing(node, "ADD without nft", names=("nft",), hide=("nft",))


@pytest.mark.parametrize("node_has_pod", [False, True], ids=["empty-node", "node-with-a-pod"])
def test_nft_fails(node: Node, fake: faults.FakeTools, node_has_pod: bool) -> None:
    """nft fails every change (as when the nf_tables module cannot load): 104 with nft's stderr
    in details — also when the failed run is the incremental update of a node that already has
    a pod — and nothing of the ADD left."""
    prepare(node, node_has_pod)
    stderr = "Error: Could not process rule: No buffer space available"
    fake.fail("nft", stderr, args='*" -f "*')  # every `nft -f -` script; listings still work
    failed_add_changes_nothing(node, "ADD with a failing nft", names=("nft",), details=(stderr,),
                               path=fake.path)


def test_ip_fails_creating_the_veth(node: Node, fake: faults.FakeTools) -> None:
    """``ip -batch`` fails on the host side (creating the veth): 104 with ip's stderr, nothing
    left."""
    prepare(node, True)
    stderr = "RTNETLINK answers: Cannot allocate memory"
    fake.fail("ip", stderr, input="type veth", code=2)
    failed_add_changes_nothing(node, "ADD whose veth creation fails", details=(stderr,), path=fake.path)


def test_default_mtu_when_ip_reads_all_its_input_first(node: Node, fake: faults.FakeTools) -> None:
    """ADD asks the node-side ``ip -batch`` for the default-route link's MTU as the first line
    of its batch; an ``ip`` that only starts once its input has ended (here a wrapper that reads
    all of stdin first) cannot answer: after :data:`veth.ASK_WAIT` the ADD asks the kernel
    itself (SIOCGIFMTU) and a new ``ip`` creates the pair — the pod still gets the link's MTU."""
    node.lab.client()
    node.lab.exec(node.lab.node, "ip", "link", "set", "up0", "mtu", "1400")
    fake.fail("ip", "never printed", input="^no such command ever$")  # reads all input first
    pod = node.pod()
    out = node.call("podnet", "ADD", netconf(node.data), cid="mtu", netns=pod, path=fake.path)
    assert out.rc == 0, out.describe()
    assert [i["mtu"] for i in out.answer["interfaces"]] == [1400, 1400], out.answer
    assert " mtu 1400 " in node.lab.exec(pod, "ip", "-o", "link", "show", "dev", "eth0").stdout
    assert node.call("podnet", "DEL", netconf(node.data), cid="mtu", netns=pod).rc == 0


POD_SIDE = "route add .* via "  # a line of the pod side's `ip -batch` (default route), not the host's


def test_ip_fails_in_the_pod(node: Node, fake: faults.FakeTools) -> None:
    """The pod side fails after COMMIT (its ``ip -batch`` inside the pod netns): 104 with ip's
    stderr; the second transaction removes the rows and elements, the veth is deleted."""
    prepare(node, True)
    stderr = "RTNETLINK answers: Network is unreachable"
    fake.fail("ip", stderr, input=POD_SIDE, code=2)
    failed_add_changes_nothing(node, "ADD whose pod side fails", details=(stderr,), path=fake.path)


def test_pod_side_enters_the_netns_with_nsenter(node: Node, fake: faults.FakeTools,
                                                tmp_path: Path) -> None:  # fmt: skip
    """An IPv4 point-to-point pod whose netns has a name (``/run/netns/<name>``) is configured
    through ``nsenter --net=<netns> ip -batch -``, never ``ip -n <name>``: to switch, ``ip -n``
    copies the node's whole mount table (a mount per pod netns), so its cost grows with the
    pods. An ``ip -n`` would fail here; the ADD succeeds with the pod end
    addressed and routed."""
    fired = tmp_path / "ip-n-ran"
    fake.fail("ip", "mount of /sys failed: Operation not permitted", args='*" -n "*', touch=fired)
    pod = node.pod()
    out = node.call("podnet", "ADD", netconf(node.data, ranges=RANGES["v4"]), cid="c1", netns=pod,
                    path=fake.path)
    f = Findings("ADD of an IPv4 pod in a named netns")
    f.expect(not fired.exists(), "the pod side ran `ip -n`")
    f.expect(out.rc == 0, f"ADD failed: {out.describe()}")
    if out.rc == 0:
        address = json.loads(out.stdout)["ips"][0]["address"].split("/")[0]
        shown = node.lab.exec(pod, "ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout
        routes = node.lab.exec(pod, "ip", "-4", "route", "show", "default").stdout
        f.expect(f"inet {address}/32" in shown, f"pod end not addressed: {shown!r}")
        f.expect("default via" in routes, f"no default route in the pod: {routes!r}")
    f.check()


def test_veth_delete_fails_during_a_failed_add(node: Node, fake: faults.FakeTools) -> None:
    """The pod side fails and then so does the cleanup's ``ip link del``: the ORIGINAL error is
    reported (the failed delete in details), the rows and hostPort elements are removed anyway,
    and the runtime's DEL afterwards (no fault) leaves the node as before the ADD."""
    prepare(node, True)
    original = "RTNETLINK answers: Network is unreachable"
    fake.fail("ip", original, input=POD_SIDE, code=2)
    fake.fail("ip", "RTNETLINK answers: Operation not permitted", input="^link del ", code=2)
    pod = node.pod()
    before = node.snapshot()
    before_rows = faults.db_tables(node.data)
    out = node.call("podnet", "ADD", netconf(node.data, mappings=[{"hostPort": 8081, "containerPort": 80}]),
                    cid="c1", netns=pod, path=fake.path)
    f = Findings("ADD whose pod side fails, and whose cleanup cannot delete the veth")
    f.answer(out, 104, names=(original,), details=("Operation not permitted",))
    f.expect(faults.db_tables(node.data) == before_rows,
             f"the failed ADD's rows stayed: {faults.db_rows(node.data, 'pods')}")
    f.expect("8081" not in "\n".join(faults.hostport_elements(node.lab.node)),
             f"the failed ADD's hostPort elements stayed: {faults.hostport_elements(node.lab.node)}")
    delete = node.call("podnet", "DEL", netconf(node.data), cid="c1", netns=pod)
    f.expect(delete.rc == 0, f"the runtime's DEL afterwards: {delete.describe()}")
    f.unchanged(before, node.snapshot(), "the failed ADD and the runtime's DEL")
    f.check()


def test_veth_delete_fails_in_del(node: Node, fake: faults.FakeTools) -> None:
    """DEL whose ``ip link del`` fails: 104 with ip's stderr (not success: the veth is still
    there); the retried DEL without the fault removes everything."""
    pod, res = node.add("c1", udp_tcp(5353))
    stderr = "RTNETLINK answers: Operation not permitted"
    fake.fail("ip", stderr, input="^link del ", code=2)
    conf = {**netconf(node.data), "prevResult": res}
    out = node.call("podnet", "DEL", conf, cid="c1", netns=pod, path=fake.path)
    f = Findings("DEL whose veth delete fails")
    f.answer(out, 104, details=(stderr,))
    retry = node.call("podnet", "DEL", conf, cid="c1", netns=pod)
    f.expect(retry.rc == 0, f"the retried DEL: {retry.describe()}")
    f.expect(node.leftovers() == [], f"left after the retried DEL: {node.leftovers()}")
    f.check()


# --- podnet-portmap: a failing nft is not "no table" --------------------------------------------------


@pytest.mark.parametrize("verb", ["DEL", "CHECK", "GC"])
def test_portmap_nft_failure_is_not_an_empty_table(node: Node, ptp_pod: tuple[str, dict[str, Any], Any],
                                                   fake: faults.FakeTools, verb: str) -> None:
    """nftables backend: when ``nft`` fails, DEL and GC must not succeed while the rules stay,
    and CHECK must report nft's error (104), not a missing rule (103)."""
    pod, _, prev = ptp_pod
    conf = portmap_conf("nftables", prev, [{"hostPort": 8080, "containerPort": 80}])
    add = node.call("podnet-portmap", "ADD", conf, cid="c1", netns=pod)
    assert add.rc == 0, add.describe()
    stderr = "netlink: Error: cache initialization failed: Operation not permitted"
    fake.fail("nft", stderr)
    call_conf = dict(conf)
    if verb == "GC":
        call_conf = {**conf, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
        call_conf.pop("prevResult")
    before = node.snapshot()
    out = node.call("podnet-portmap", verb, call_conf, cid="c1", netns=pod, path=fake.path)
    f = Findings(f"podnet-portmap (nftables) {verb} with a failing nft")
    f.answer(out, 104, names=("nft",), details=(stderr,))
    f.unchanged(before, node.snapshot())
    delete = node.call("podnet-portmap", "DEL", conf, cid="c1", netns=pod)
    f.expect(delete.rc == 0 and faults.portmap_leftovers(node.lab.node) == [],
             f"DEL without the fault: {delete.describe()}; left: {faults.portmap_leftovers(node.lab.node)}")
    f.check()


def test_portmap_status_nftables_needs_no_iptables(node: Node) -> None:
    """STATUS of the nftables backend does not depend on iptables; without nft it is 50."""
    conf = {"cniVersion": "1.1.0", "name": "pmnet", "type": "podnet-portmap", "backend": "nftables",
            "dataDir": PORTMAP_DATA}
    f = Findings("podnet-portmap STATUS, nftables backend")
    out = node.call("podnet-portmap", "STATUS", conf, hide=("iptables-save", "ip6tables-save", "iptables", "ip6tables"))
    f.expect(out.rc == 0, f"without iptables (nft works): {out.describe()}")
    out = node.call("podnet-portmap", "STATUS", conf, hide=("nft",))
    f.answer(out, 50, names=("nft",))
    f.check()


def test_portmap_foreign_bare_rule(node: Node, ptp_pod: tuple[str, dict[str, Any], Any]) -> None:
    """Another tool's rule without matches or target (``-A OTHER``) in the nat table must not
    break podnet-portmap's iptables backend (a ValueError → 999)."""
    pod, _, prev = ptp_pod
    for tool in ("iptables", "ip6tables"):
        node.lab.exec(node.lab.node, tool, "-t", "nat", "-N", "OTHER")
        node.lab.exec(node.lab.node, tool, "-t", "nat", "-A", "OTHER")
    conf = portmap_conf("iptables", prev, [{"hostPort": 8080, "containerPort": 80}])
    f = Findings("podnet-portmap (iptables) with a bare '-A OTHER' rule in the nat table")
    for verb in ("ADD", "CHECK", "DEL"):
        out = node.call("podnet-portmap", verb, conf, cid="c1", netns=pod)
        f.expect(out.rc == 0, f"{verb}: {out.describe()}")
    gc = {**conf, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
    gc.pop("prevResult")
    out = node.call("podnet-portmap", "GC", gc)
    f.expect(out.rc == 0, f"GC: {out.describe()}")
    left = faults.portmap_leftovers(node.lab.node)
    if left:  # what the failed calls left: remove it with the bare rule gone
        for tool in ("iptables", "ip6tables"):
            node.lab.exec(node.lab.node, tool, "-t", "nat", "-F", "OTHER")
        node.call("podnet-portmap", "DEL", conf, cid="c1", netns=pod)
    f.expect(left == [], f"left: {left}")
    f.check()


# --- a hung tool -----------------------------------------------------------------------------

TOOL_TIMEOUT = 2
CALL_DEADLINE = TOOL_TIMEOUT + 10  # the test gives up (and kills the call) after this


@pytest.mark.parametrize(("tool", "args"), [("nft", '*" -f "*'), ("ip", '*" -batch "*')], ids=["nft", "ip"])
def test_hung_tool_add(node: Node, fake: faults.FakeTools, tool: str, args: str) -> None:
    """A tool that never returns (``nft -f -``: the hostPort update; ``ip -batch -``: the veth)
    is killed after ``toolTimeout`` seconds: ADD answers 104 naming it within a few seconds, no
    process of it is left, and nothing of the ADD stays."""
    prepare(node, True)
    fake.hang(tool, args=args)
    pod = node.pod()
    before = node.snapshot()
    conf = netconf(node.data, mappings=[{"hostPort": 8081, "containerPort": 80}], toolTimeout=TOOL_TIMEOUT)
    out = node.call("podnet", "ADD", conf, cid="c1", netns=pod, path=fake.path, timeout=CALL_DEADLINE)
    left = faults.processes_mentioning(fake.marker)
    f = Findings(f"ADD with a hung {tool} and toolTimeout {TOOL_TIMEOUT}")
    f.answer(out, 104, names=(tool,))
    # the answer (104 naming the tool) shows the tool's deadline ended the hang; the call's own
    # deadline (12 s) is only for a call that would never answer
    f.expect(not out.timed_out, f"no answer within {CALL_DEADLINE} s")
    f.expect(left == [], f"hung {tool} processes outlived the call: {left}")
    f.unchanged(before, node.snapshot())
    f.check()


def test_hung_ip_del(node: Node, fake: faults.FakeTools) -> None:
    """DEL with a hung ``ip link del``: 104 naming ip within the deadline; the retry cleans."""
    pod, res = node.add("c1", [{"hostPort": 8080, "containerPort": 80}])
    fake.hang("ip", input="^link del ")
    conf = {**netconf(node.data, toolTimeout=TOOL_TIMEOUT), "prevResult": res}
    out = node.call("podnet", "DEL", conf, cid="c1", netns=pod, path=fake.path, timeout=CALL_DEADLINE)
    left = faults.processes_mentioning(fake.marker)
    f = Findings(f"DEL with a hung 'ip link del' and toolTimeout {TOOL_TIMEOUT}")
    f.answer(out, 104, names=("ip",))
    f.expect(left == [], f"hung ip processes outlived the call: {left}")
    retry = node.call("podnet", "DEL", conf, cid="c1", netns=pod)
    f.expect(retry.rc == 0 and node.leftovers() == [], f"the retried DEL: {retry.describe()}; left: {node.leftovers()}")
    f.check()


def test_hung_nft_portmap(node: Node, ptp_pod: tuple[str, dict[str, Any], Any], fake: faults.FakeTools) -> None:
    """podnet-portmap (nftables) with a hung nft: 104 naming nft within the deadline."""
    pod, _, prev = ptp_pod
    fake.hang("nft")
    before = node.snapshot()
    conf = {**portmap_conf("nftables", prev, [{"hostPort": 8080, "containerPort": 80}]), "toolTimeout": TOOL_TIMEOUT}
    out = node.call("podnet-portmap", "ADD", conf, cid="c1", netns=pod, path=fake.path, timeout=CALL_DEADLINE)
    left = faults.processes_mentioning(fake.marker)
    f = Findings(f"podnet-portmap ADD with a hung nft and toolTimeout {TOOL_TIMEOUT}")
    f.answer(out, 104, names=("nft",))
    # the answer (104 naming the tool) shows the tool's deadline ended the hang; the call's own
    # deadline (12 s) is only for a call that would never answer
    f.expect(not out.timed_out, f"no answer within {CALL_DEADLINE} s")
    f.expect(left == [], f"hung nft processes outlived the call: {left}")
    f.unchanged(before, node.snapshot())
    f.check()


# --- database faults ---------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["opening", "in-transaction"])
def test_full_filesystem(node: Node, tmp_path: Path, when: str) -> None:
    """dataDir on a full filesystem. ``opening``: the database cannot even be opened (its WAL
    index cannot be created); ``in-transaction``: another connection keeps the WAL files, so
    the database opens and writing inside ADD's transaction fails. Code 5 naming the database
    file, nothing of the ADD left; once there is room again, the runtime's DEL and a new ADD
    work and the database is intact."""
    fs = faults.SmallFs(tmp_path, 2 * 1024 * 1024, "smallfs")
    try:
        node.data = fs.dir
        node.add("c0", [{"hostPort": 8080, "containerPort": 80}])
        pod = node.pod()
        before = node.snapshot()  # (the database cannot be read while the filesystem is full)
        if when == "in-transaction":
            fs.hold_wal()
        fs.fill()
        out = node.call("podnet", "ADD", netconf(node.data, mappings=udp_tcp(9000)), cid="c1", netns=pod)
        fs.make_room()
        f = Findings(f"ADD on a full filesystem ({when})")
        f.answer(out, 5, names=(str(fs.dir / "podnet.db"),))
        f.unchanged(before, node.snapshot())
        f.expect(faults.integrity(node.data) == "ok", f"integrity_check: {faults.integrity(node.data)}")
        delete = node.call("podnet", "DEL", netconf(node.data), cid="c1", netns=pod)
        f.expect(delete.rc == 0, f"the runtime's DEL once there is room: {delete.describe()}")
        again = node.call("podnet", "ADD", netconf(node.data, mappings=udp_tcp(9000)), cid="c1", netns=pod)
        f.expect(again.rc == 0, f"ADD once there is room: {again.describe()}")
        f.check()
    finally:
        fs.make_room()
        for cid in ("c0", "c1"):
            node.call("podnet", "DEL", netconf(node.data), cid=cid)
        fs.close()


def test_read_only_data_dir(node: Node) -> None:
    """A read-only dataDir (with a database and a pod): ADD answers 5 naming the database file
    and leaves nothing."""
    node.add("c0", [{"hostPort": 8080, "containerPort": 80}])
    pod = node.pod()
    ro = faults.ReadOnlyDir(node.data)
    try:
        before = node.snapshot()
        out = node.call("podnet", "ADD", netconf(node.data, mappings=[{"hostPort": 8081, "containerPort": 80}]),
                        cid="c1", netns=pod)
        f = Findings("ADD on a read-only dataDir")
        f.answer(out, 5, names=(str(node.data / "podnet.db"),))
        f.unchanged(before, node.snapshot())
        f.check()
    finally:
        ro.close()


@pytest.mark.parametrize("how", ["garbage", "truncated"])
def test_corrupt_database(node: Node, how: str) -> None:
    """podnet.db overwritten with garbage, or cut to half: ADD answers 5 naming the file and
    creates no link or rule."""
    node.add("c0", [{"hostPort": 8080, "containerPort": 80}])
    db = node.data / "podnet.db"
    if how == "garbage":
        db.write_bytes(b"this is not an SQLite database\n" * 200)
    else:
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2] + b"\xde\xad" * 1000)
    pod = node.pod()
    before = node.snapshot()
    out = node.call("podnet", "ADD", netconf(node.data, mappings=[{"hostPort": 8081, "containerPort": 80}]),
                    cid="c1", netns=pod)
    f = Findings(f"ADD with a {how} database")
    f.answer(out, 5, names=(str(db),))
    f.unchanged(before, node.snapshot())
    f.check()


class LockHolder:
    """Another process holding the database's write lock (``BEGIN IMMEDIATE``) until closed."""

    def __init__(self, db: Path) -> None:
        code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.read()")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "locked"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.mark.parametrize("verb", ["ADD", "DEL"])
def test_lock_held_past_busy_timeout(node: Node, verb: str) -> None:
    """Another process holds the write lock past ``busyTimeout``: code 11 naming the database
    file, after about busyTimeout; the refused call changes nothing (the runtime retries it: a
    DEL must not delete the veth and keep the rows), and the retry after the lock is released
    succeeds."""
    pod0, res = node.add("c0", [{"hostPort": 8080, "containerPort": 80}])
    pod = node.pod()
    if verb == "ADD":
        conf, cid, netns = netconf(node.data, mappings=[{"hostPort": 8081, "containerPort": 80}], busyTimeout=0.5), "c1", pod
    else:
        conf, cid, netns = {**netconf(node.data, busyTimeout=0.5), "prevResult": res}, "c0", pod0
    before = node.snapshot()
    holder = LockHolder(node.data / "podnet.db")
    try:
        out = node.call("podnet", verb, conf, cid=cid, netns=netns)
    finally:
        holder.close()
    f = Findings(f"{verb} while another process holds the lock past busyTimeout 0.5 s")
    f.answer(out, 11, names=(str(node.data / "podnet.db"),))
    f.expect(out.seconds < 10, f"answered after {out.seconds:.1f} s")
    f.unchanged(before, node.snapshot(), f"the refused {verb}")
    retry = node.call("podnet", verb, conf, cid=cid, netns=netns)
    f.expect(retry.rc == 0, f"{verb} after the lock was released: {retry.describe()}")
    f.check()


# --- proc.py: no pipe leak when a spawn fails (no root needed) ----------------------------------------


def test_failed_spawn_leaks_no_pipe() -> None:
    """A tool that cannot be started (missing, not executable) leaves no open pipe ends behind
    in the plugin process (GC spawns a deletion per link)."""
    from podnet import proc

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    from podnet.errors import KernelError

    before = fds()
    for argv in (["/nonexistent/tool"], ["/dev/null"], ["podnet-no-such-tool-x"]):
        for _ in range(5):
            with pytest.raises(KernelError) as err:  # 104: missing, or cannot be executed
                rc, _, _ = proc.spawn(argv).wait()
                if rc != 0:  # the exec failed inside the setpriv wrapper (exit 126/127)
                    raise KernelError(f"{argv[0]} exit {rc}")
            assert err.value.code == 104
    assert fds() == before, f"{fds() - before} file descriptors leaked by 15 failed spawns"


def test_deferred_tool_runs_only_its_fed_input(tmp_path: Path) -> None:
    """A tool started with ``defer=True`` does nothing until fed: fed, it reads exactly that
    input and its deadline counts from the feed; abandoned, it exits having run nothing and
    leaves no file descriptor open (ADD's and DEL's early-started ``ip -batch``)."""
    from podnet import proc

    def pipes() -> set[tuple[str, str]]:
        """This process's descriptors open on pipes (what a leaking tool would leave); others
        (sockets, files) may come and go with the test process's own garbage collection."""
        out = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("pipe:"):
                out.add((fd, target))
        return out

    before = pipes()
    marker = tmp_path / "ran"
    fed = proc.spawn(["sh", "-c", f"cat; echo ran > {marker}"], defer=True, timeout=2)
    time.sleep(2.5)  # longer than its timeout: the deadline starts at the feed, not the spawn
    assert not marker.exists(), "a deferred tool ran before it was fed"
    fed.feed(b"link del dev x\n")
    assert fed.wait() == (0, "link del dev x\n", "")
    assert marker.exists()

    abandoned = proc.spawn(["sh", "-c", f"read line && echo ran > {marker}.2"], defer=True)
    abandoned.abandon()
    assert not abandoned.deferred and not (tmp_path / "ran.2").exists()
    assert pipes() - before == set(), "a deferred tool leaked descriptors"


def test_die_with_parent_only_where_asked(tmp_path: Path) -> None:
    """A plugin killed with SIGKILL takes its ``die_with_parent`` tools with it (``setpriv
    --pdeathsig KILL``: ADD's veth and nft changes must not land after the runtime's DEL); the
    others (deletions, listings) are left to finish."""
    import signal

    src = paths.SRC
    code = (
        f"import sys; sys.path.insert(0, {str(src)!r}); from podnet import proc\n"
        "a = proc.spawn(['sleep', '30'], die_with_parent=True)\n"
        "b = proc.spawn(['sleep', '31'])\n"
        "print(a.pid, b.pid, flush=True); sys.stdin.read()\n"
    )
    plugin = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        assert plugin.stdout is not None
        pids = [int(x) for x in plugin.stdout.readline().split()]
        wrapped, bare = pids
        deadline = time.monotonic() + 30
        # wait until setpriv has set the parent-death signal and exec'd sleep
        while not os.readlink(f"/proc/{wrapped}/exe").endswith("/sleep"):
            assert time.monotonic() < deadline, "setpriv never exec'd the tool"
            time.sleep(0.01)
        plugin.kill()
        plugin.wait()
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{wrapped}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{wrapped}"), "the die_with_parent tool outlived the plugin"
        assert os.path.exists(f"/proc/{bare}"), "a tool without die_with_parent was killed too"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if plugin.poll() is None:
            plugin.kill()
