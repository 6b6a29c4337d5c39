"""Faults a node can have while pods join OVN networks (the ``podnet`` plugin on an ``ovn``
network, :mod:`podnet.drivers.ovn.pods`): an unwritable podnet database, ``ovs-vsctl`` or
``ethtool`` not installed, the plugin killed with SIGKILL in the middle of ADD, and DELs of
what is already gone.

A real OVN deployment in namespaces (:class:`podnet.cli.demo.ovnlab.OvnLab`: two nodes, the
userspace datapath) and the real plugin of this tree, run in a node's namespace with an explicit
environment (``env -i``) the way a runtime runs it (:func:`faults.run_plugin`). A tool is made
unavailable for one call only (:func:`faults._hide_prefix`: ``/dev/null`` bind-mounted over it in
a private mount namespace), a tool is made to block with :class:`faults.FakeTools`.

After each fault the test asserts that nothing of the container is left: no logical switch port
of it in the NB, no OVS port or interface of its host end, no host veth in the node, no row in
the node's store, no interface in the pod.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import faults
import paths
from envgate import need

SRC = str(paths.SRC)
sys.path.insert(0, SRC)

from podnet.cli.demo.ovnlab import Node, OvnLab, missing_tools  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("ovn-faults")]

UPLINK = {"parent": "ext0", "ipv4.gateway": "203.0.113.254/24",
          "ipv4.ovn.ranges": "203.0.113.10-203.0.113.19", "ipv4.routes": "198.51.100.0/24",
          "ovn.ingress_mode": "routed"}  # fmt: skip
NET = "ovnf"
CONF_NAME = "ovnfpods"
IFNAME = "eth0"
BRIDGE = "br-int"
#: The plugin of this tree (not the venv's, which may be another checkout's).
LAUNCHER = f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {SRC!r})\n" \
           "from podnet.plugins.podnet import main\nmain()\n"  # fmt: skip


def host_ifname(cid: str) -> str:
    from podnet.link import names

    return names.host_ifname(cid, IFNAME)


def port_name(cid: str) -> str:
    from podnet.ovn import ports

    return ports.port_name(NET, cid, IFNAME)


class Cluster:
    """The lab, each node's podnet store configured for the NB, and the plugin launcher."""

    def __init__(self, lab: OvnLab, base: Path) -> None:
        self.lab = lab
        self.base = base
        self.data = {n.name: base / f"data-{n.name}" for n in lab.nodes}
        self.plugin = base / "bin" / "podnet"
        self.plugin.parent.mkdir(parents=True)
        self.plugin.write_text(LAUNCHER)
        self.plugin.chmod(0o755)
        for node in lab.nodes:
            self.init_store(node, self.data[node.name])

    def init_store(self, node: Node, data: Path) -> None:
        nb = self.lab.nb_unix if node is self.lab.nodes[0] else self.lab.nb_tcp
        self.ok(node, "config", "set", "network.ovn.northbound_connection", nb, "--init", data=data)

    def ctl(self, node: Node, *args: str, data: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``podnetctl ARGS --data-dir <node's>`` in ``node``'s namespace, with its OVS."""
        code = (f"import sys; sys.path.insert(0, {SRC!r}); sys.argv[0] = 'podnetctl'; "
                "from podnet.cli.main import main; main()")
        env = [f"{k}={v}" for k, v in node.env.items()]
        argv = ["ip", "netns", "exec", node.netns, "env", *env, sys.executable, "-c", code,
                *args, "--data-dir", str(data or self.data[node.name])]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    def ok(self, node: Node, *args: str, data: Path | None = None) -> str:
        out = self.ctl(node, *args, data=data)
        assert out.returncode == 0, f"podnetctl {' '.join(args)} on {node.name}: {out.stderr}"
        return out.stdout

    # -- plugin calls ---------------------------------------------------------------------------
    def conf(self, node: Node, data: Path | None = None, **extra: Any) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": CONF_NAME, "type": "podnet", "network": NET,
                "dataDir": str(data or self.data[node.name]), **extra}  # fmt: skip

    def env(self, node: Node, command: str, cid: str, netns: str | None, path: str) -> dict[str, str]:
        return faults.cni_env(command, container_id=cid, netns=netns, ifname=IFNAME, path=path, **node.env)

    def call(self, node: Node, command: str, cid: str = "", netns: str | None = None, *,
             data: Path | None = None, path: str = faults.BASE_PATH, hide: Sequence[str] = (),
             conf: dict[str, Any] | None = None, timeout: float = 60) -> faults.Outcome:  # fmt: skip
        """One call of this tree's plugin in ``node`` (``hide``: tools made unavailable)."""
        return faults.run_plugin(node.netns, str(self.plugin), self.env(node, command, cid, netns, path),
                                 conf or self.conf(node, data), hide=hide, timeout=timeout)  # fmt: skip

    def gc(self, node: Node, data: Path | None = None, valid: Sequence[dict[str, str]] = (),
           hide: Sequence[str] = ()) -> faults.Outcome:  # fmt: skip
        """CNI GC of the conflist on ``node`` keeping only ``valid``."""
        conf = self.conf(node, data, **{"cni.dev/valid-attachments": list(valid)})
        return self.call(node, "GC", conf=conf, hide=hide)

    # -- what a container left ------------------------------------------------------------------
    def leftovers(self, node: Node, cid: str, pod: str | None, data: Path | None = None) -> list[str]:
        """Everything of container ``cid`` on ``node`` (empty: nothing): its logical switch
        port (by name, and any port tagged with the container), its OVS port and interface,
        its host veth, its rows, and an ``eth0`` in the pod's namespace."""
        left = []
        port, host_if = port_name(cid), host_ifname(cid)
        named = self.lab.nbctl("--bare", "--columns=name", "list", "Logical_Switch_Port").split()
        if port in named:
            left.append(f"NB logical switch port {port}")
        tagged = self.lab.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                                f"external_ids:podnet-container={cid}").split()  # fmt: skip
        if tagged and tagged != [port]:
            left.append(f"NB logical switch ports tagged with {cid}: {tagged}")
        if host_if in self.lab.vsctl(node, "list-ports", BRIDGE).split():
            left.append(f"OVS port {host_if} on {BRIDGE}")
        for table in ("Port", "Interface"):
            if self.lab.vsctl(node, "--bare", "--columns=name", "find", table, f"name={host_if}").strip():
                left.append(f"OVS {table} row {host_if}")
        if host_if in faults.links(node.netns):
            left.append(f"host link {host_if} in {node.netns}")
        rows = [r for r in faults.db_rows(data or self.data[node.name], "pods") if cid in r]
        if rows:
            left.append(f"pods rows of {cid}: {rows}")
        if pod is not None and IFNAME in faults.links(pod):
            left.append(f"{IFNAME} in pod {pod}")
        return left


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two nodes, an uplink and the OVN network :data:`NET` on it."""
    need("root")
    if missing_tools():
        pytest.fail(f"OVN tools missing: {missing_tools()} (.ci/run installs them)")
    lab = OvnLab(f"pnof{uuid.uuid4().hex[:4]}", ("n1", "n2"), subnet=245)
    try:
        lab.start()
        lab.outside(lab.nodes[0])
        c = Cluster(lab, tmp_path_factory.mktemp("ovnfaults"))
        n1 = lab.nodes[0]
        c.ok(n1, "network", "create", "upf", "--type=physical", f"parent={UPLINK['parent']}", "--target", "n1")
        c.ok(n1, "network", "create", "upf", "--type=physical", *[f"{k}={v}" for k, v in UPLINK.items() if k != "parent"])
        c.ok(n1, "network", "create", NET, "--type=ovn", "network=upf", "ipv6.address=none")
        yield c
    finally:
        lab.stop()


class Pods:
    """Pod namespaces of one test and the containers it ADDed; :meth:`close` DELs every
    container (tools back) and removes the namespaces."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.made: list[str] = []
        self.added: list[tuple[Node, str, str, Path | None]] = []

    def netns(self, tag: str) -> str:
        name = f"{self.cluster.lab.prefix}-{tag}-{uuid.uuid4().hex[:4]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        self.made.append(name)
        return name

    def track(self, node: Node, cid: str, pod: str, data: Path | None = None) -> None:
        self.added.append((node, cid, pod, data))

    def add(self, node: Node, cid: str, pod: str, data: Path | None = None) -> dict[str, Any]:
        """A pod ADDed without fault; its result."""
        self.track(node, cid, pod, data)
        out = self.cluster.call(node, "ADD", cid, pod, data=data)
        assert out.rc == 0, f"ADD {cid} on {node.name}: {out.describe()}"
        assert isinstance(out.answer, dict)
        return out.answer

    def close(self) -> None:
        for node, cid, pod, data in self.added:
            self.cluster.call(node, "DEL", cid, pod, data=data)
        for name in self.made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.added.clear()
        self.made.clear()


@pytest.fixture
def pods(cluster: Cluster) -> Iterator[Pods]:
    p = Pods(cluster)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[faults.FakeTools]:
    with faults.FakeTools(tmp_path) as tools:
        yield tools


def trace(fake: faults.FakeTools, tool: str, args: str, touch: Path) -> None:
    """``tool`` (real) creates ``touch`` when called with arguments matching ``args``."""
    fake._rule(tool, args, "", f"touch {str(touch)!r}")


class Findings:
    """Everything wrong with one fault's handling, asserted at once."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.items: list[str] = []

    def answer(self, out: faults.Outcome, code: int, *, names: Sequence[str] = ()) -> None:
        self.items += faults.answer_problems(out, code, names=names)

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.items.append(problem)

    def clean(self, left: list[str], when: str) -> None:
        if left:
            self.items.append(f"left {when}: {left}")

    def check(self) -> None:
        assert not self.items, f"{self.what}:\n- " + "\n- ".join(self.items)


# --- 1: the node's podnet database cannot be written --------------------------------------------


@pytest.mark.parametrize("state", ["network mirrored", "first pod of the node"])
def test_add_with_read_only_database(cluster: Cluster, pods: Pods, tmp_path: Path, state: str) -> None:
    """The node's dataDir made read-only (a read-only bind mount, root included): ADD answers
    code 5 naming the database file and leaves nothing — no logical switch port, no OVS port,
    no host veth, no row, no interface in the pod. ``network mirrored``: the node's store
    already has the network (an earlier pod joined it); ``first pod of the node``: a store that
    only has the NB connection. Once writable again, the same ADD works."""
    n2 = cluster.lab.nodes[1]
    data = tmp_path / "data"
    cluster.init_store(n2, data)
    if state == "network mirrored":
        pods.add(n2, "ro-warm", pods.netns("rw"), data)
    pod = pods.netns("ro")
    cid = f"ro-{state.split()[0]}"
    f = Findings(f"ADD on an OVN network with a read-only dataDir ({state})")
    pods.track(n2, cid, pod, data)
    ro = faults.ReadOnlyDir(data)
    try:
        out = cluster.call(n2, "ADD", cid, pod, data=data)
        f.answer(out, 5, names=(str(data / "podnet.db"),))
        f.clean(cluster.leftovers(n2, cid, pod, data), "by the failed ADD")
    finally:
        ro.close()
    again = cluster.call(n2, "ADD", cid, pod, data=data)
    f.expect(again.rc == 0, f"ADD once the dataDir is writable again: {again.describe()}")
    f.check()


def test_add_when_the_final_write_fails(cluster: Cluster, pods: Pods, fake: faults.FakeTools,
                                        tmp_path: Path) -> None:
    """The database opens and the network's mirror is current, but the filesystem is full:
    ADD claims its port in the NB and fails writing the pod's row, in the transaction every
    driver's ADD shares (another connection keeps the WAL files, as in tests/e2e/safety/test_faults.py).
    Code 5 naming the database file, and every step undone: no logical switch port, no OVS
    port, no veth."""
    n2 = cluster.lab.nodes[1]
    fs = faults.SmallFs(tmp_path, 2 * 1024 * 1024, "smallfs")
    cid = "full-final"
    pod = pods.netns("full")
    try:
        cluster.init_store(n2, fs.dir)
        pods.add(n2, "full-warm", pods.netns("fw"), fs.dir)
        pods.track(n2, cid, pod, fs.dir)
        fs.hold_wal()
        claimed = tmp_path / "claimed"
        trace(fake, "ovsdb-client", '*"update"*podnet-spare*', claimed)
        fs.fill()
        out = cluster.call(n2, "ADD", cid, pod, data=fs.dir, path=fake.path)
        fs.make_room()
        f = Findings("ADD on an OVN network whose final database write fails (full filesystem)")
        f.answer(out, 5, names=(str(fs.dir / "podnet.db"),))
        f.expect(claimed.exists(), "ADD did not get as far as claiming its port (fault too early)")
        f.clean(cluster.leftovers(n2, cid, pod, fs.dir), "by the failed ADD")
        f.expect(faults.integrity(fs.dir) == "ok", f"integrity_check: {faults.integrity(fs.dir)}")
        again = cluster.call(n2, "ADD", cid, pod, data=fs.dir)
        f.expect(again.rc == 0, f"ADD once there is room: {again.describe()}")
        f.check()
    finally:
        fs.make_room()
        pods.close()  # (its DELs need the filesystem)
        fs.close()


# --- 2: ovs-vsctl is not installed -------------------------------------------------------------


def _add_without(cluster: Cluster, pods: Pods, node: Node, cid: str, pod: str, tool: str,
                 what: str) -> Findings:  # fmt: skip
    """ADD of ``cid`` in ``pod`` on ``node`` with ``tool`` hidden: code 104 naming the tool, and
    nothing left by the failed ADD; the findings so far, to go on with."""
    out = cluster.call(node, "ADD", cid, pod, hide=(tool,))
    pods.track(node, cid, pod)
    f = Findings(what)
    f.answer(out, 104, names=(tool,))
    f.clean(cluster.leftovers(node, cid, pod), "by the failed ADD")
    return f


def test_add_without_ovs_vsctl(cluster: Cluster, pods: Pods) -> None:
    """ADD with ``ovs-vsctl`` unavailable (hidden in PATH and podnet's fallback directories):
    code 104 naming ovs-vsctl, and nothing left — the logical switch port it made first and the
    veth are undone. With the tool back, the same ADD works."""
    n1 = cluster.lab.nodes[0]
    pod = pods.netns("novs")
    cid = "novsctl-add"
    f = _add_without(cluster, pods, n1, cid, pod, "ovs-vsctl", "ADD on an OVN network without ovs-vsctl")
    again = cluster.call(n1, "ADD", cid, pod)
    f.expect(again.rc == 0, f"ADD with ovs-vsctl back: {again.describe()}")
    f.check()


def test_del_without_ovs_vsctl(cluster: Cluster, pods: Pods) -> None:
    """DEL of a pod ADDed before, run with ``ovs-vsctl`` unavailable, succeeds (exit 0, nothing
    printed): a DEL never fails over a tool it cannot use. It still removes what it can without
    the tool (the veth, the logical switch port, the row); the OVS port it could not remove is
    removed by a later GC with the tool back, and a second DEL succeeds too."""
    n1 = cluster.lab.nodes[0]
    pod = pods.netns("delnovs")
    cid = "novsctl-del"
    pods.add(n1, cid, pod)
    host_if = host_ifname(cid)
    assert host_if in cluster.lab.vsctl(n1, "list-ports", BRIDGE).split()
    out = cluster.call(n1, "DEL", cid, pod, hide=("ovs-vsctl",))
    f = Findings("DEL on an OVN network without ovs-vsctl")
    f.expect(out.rc == 0 and out.stdout.strip() == "", f"DEL without ovs-vsctl: {out.describe()}")
    left = cluster.leftovers(n1, cid, pod)
    ovs_only = [x for x in left if x.startswith("OVS ")]
    f.expect(left == ovs_only, f"DEL without ovs-vsctl left more than the OVS port: {left}")
    gc = cluster.gc(n1)
    f.expect(gc.rc == 0, f"GC with ovs-vsctl back: {gc.describe()}")
    f.clean(cluster.leftovers(n1, cid, pod), "after GC with ovs-vsctl back")
    again = cluster.call(n1, "DEL", cid, pod)
    f.expect(again.rc == 0, f"second DEL: {again.describe()}")
    f.check()


def test_gc_without_ovs_vsctl(cluster: Cluster, pods: Pods) -> None:
    """GC with ``ovs-vsctl`` unavailable while an OVS port of a deleted pod is left (its DEL
    ran without the tool): the GC either succeeds or fails with a well-formed CNI error naming
    ovs-vsctl — never code 999 (an internal error) — and with the tool back a GC removes the
    port."""
    n1 = cluster.lab.nodes[0]
    pod = pods.netns("gcnovs")
    cid = "novsctl-gc"
    pods.add(n1, cid, pod)
    out = cluster.call(n1, "DEL", cid, pod, hide=("ovs-vsctl",))
    assert out.rc == 0, f"DEL without ovs-vsctl: {out.describe()}"
    assert any(x.startswith("OVS port") for x in cluster.leftovers(n1, cid, pod)), "nothing for GC to remove"
    gc = cluster.gc(n1, hide=("ovs-vsctl",))
    f = Findings("GC on an OVN network without ovs-vsctl")
    if gc.rc != 0:
        err = gc.answer
        f.expect(isinstance(err, dict) and isinstance(err.get("code"), int) and set(err) <= faults.ERROR_KEYS,
                 f"GC without ovs-vsctl: not one CNI error object: {gc.describe()}")  # fmt: skip
        if isinstance(err, dict):
            f.expect(err.get("code") != 999, f"GC without ovs-vsctl answered code 999 (internal): {gc.describe()}")
            f.expect("ovs-vsctl" in f"{err.get('msg')} {err.get('details')}",
                     f"GC's error does not name ovs-vsctl: {gc.describe()}")  # fmt: skip
    gc = cluster.gc(n1)
    f.expect(gc.rc == 0, f"GC with ovs-vsctl back: {gc.describe()}")
    f.clean(cluster.leftovers(n1, cid, pod), "after GC with ovs-vsctl back")
    f.check()


# --- 3: ethtool is not installed (userspace datapath) -------------------------------------------


def test_add_without_ethtool_on_netdev(cluster: Cluster, pods: Pods) -> None:
    """On the userspace datapath (``netdev``, the lab's) ADD turns TX checksum offload off on
    both veth ends with ``ethtool``; without it TCP through the pod stalls on bad checksums, so
    ethtool is required there, not optional: ADD answers code 104 naming ethtool and leaves
    nothing (port, veth, OVS port undone). DEL never needs it: the DEL of a pod ADDed before
    succeeds without ethtool and leaves nothing."""
    n1 = cluster.lab.nodes[0]
    assert cluster.lab.vsctl(n1, "get", "open_vswitch", ".",
                             "external_ids:ovn-bridge-datapath-type").strip('"\n') == "netdev"  # fmt: skip
    pod = pods.netns("noeth")
    cid = "noethtool-add"
    f = _add_without(cluster, pods, n1, cid, pod, "ethtool", "ADD on a netdev OVN network without ethtool")
    other = pods.netns("noeth2")
    pods.add(n1, "noethtool-del", other)
    delete = cluster.call(n1, "DEL", "noethtool-del", other, hide=("ethtool",))
    f.expect(delete.rc == 0, f"DEL without ethtool: {delete.describe()}")
    f.clean(cluster.leftovers(n1, "noethtool-del", other), "by the DEL without ethtool")
    f.check()


# --- 4: the plugin killed with SIGKILL in the middle of ADD -------------------------------------

#: Where ADD is held (a tool that never returns) before it is killed: ``(tool, args pattern,
#: what of the container must exist by then, as :meth:`Cluster.leftovers` words it)``.
NB, VETH, OVS = "NB logical switch port", "host link", "OVS port"
HOLDS = {
    # with no spare on the node: the port is made for the pod, then northd's addresses awaited
    "waiting for northd's addresses": ("ovsdb-client", '*until*"!="*', (NB,)),
    # with spares: the claim's transaction never reaches the NB
    "claiming a spare port": ("ovsdb-client", '*"update"*podnet-spare*', ()),
    "creating the veth": ("ip", '*" -batch "*', (NB,)),
    "plugging into OVS": ("ovs-vsctl", '*" add-port "*', (NB, VETH)),
    "turning TX offload off": ("ethtool", "*", (NB, VETH)),  # alongside the OVS port
    "waiting for ovn-controller": ("ovs-vsctl", '*" wait-until "*', (NB, VETH, OVS)),
}


def start_call(cluster: Cluster, node: Node, command: str, cid: str, pod: str, path: str) -> subprocess.Popen[bytes]:
    """The plugin started (not waited for) in a session of its own; its pid is the plugin's
    (``ip netns exec`` and ``env`` exec it)."""
    argv = faults.plugin_argv(node.netns, str(cluster.plugin), cluster.env(node, command, cid, pod, path))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(cluster.conf(node)).encode())
    proc.stdin.close()
    proc.stdin = None  # (communicate() must not flush it)
    return proc


def kill9(proc: subprocess.Popen[bytes]) -> str:
    """SIGKILL to the plugin (only it: its tools run in process groups of their own, as a
    runtime killing the plugin leaves them); what it had printed."""
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    out, err = proc.communicate(timeout=30)
    return f"rc {proc.returncode}; stdout {out.decode(errors='replace')[:300]!r}; stderr {err.decode(errors='replace')[-300:]!r}"


def after_kill(cluster: Cluster, node: Node, cid: str, pod: str, f: Findings) -> None:
    """The runtime's cleanup of a killed ADD: DEL succeeds and leaves nothing, GC (no valid
    attachment) succeeds and leaves nothing, and a fresh ADD of the same container works."""
    delete = cluster.call(node, "DEL", cid, pod)
    f.expect(delete.rc == 0, f"DEL after the kill: {delete.describe()}")
    f.clean(cluster.leftovers(node, cid, pod), "after the DEL")
    gc = cluster.gc(node)
    f.expect(gc.rc == 0, f"GC after the DEL: {gc.describe()}")
    f.clean(cluster.leftovers(node, cid, pod), "after the GC")
    again = cluster.call(node, "ADD", cid, pod)
    f.expect(again.rc == 0, f"a fresh ADD of the same container: {again.describe()}")
    if again.rc == 0:
        addr = again.answer["ips"][0]["address"].split("/")[0]
        shown = faults.sh("ip", "-n", pod, "-o", "addr", "show", "dev", IFNAME, check=False).stdout
        f.expect(f" {addr}/" in shown, f"the fresh ADD's {addr} is not on {IFNAME}: {shown!r}")


@pytest.mark.parametrize("hold", list(HOLDS))
def test_kill9_during_add(cluster: Cluster, pods: Pods, fake: faults.FakeTools, hold: str) -> None:
    """The plugin killed with SIGKILL while ADD is held at one step (a tool that never
    returns, :meth:`faults.FakeTools.hang`; what the ADD made by then is checked first): then
    DEL succeeds and leaves no NB port, OVS port, veth or row of the container, nor does a GC
    (no valid attachment) after it, and a fresh ADD of the same container ID succeeds."""
    from podnet.ovn import ports
    from podnet.ovn.ovsdb import Ovsdb

    tool, args, made = HOLDS[hold]
    n1 = cluster.lab.nodes[0]
    pod = pods.netns("k9")
    cid = f"k9-{list(HOLDS).index(hold)}"
    pods.track(n1, cid, pod)
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    ports.delete_spares(nb, NET)
    if hold != "waiting for northd's addresses":  # every other hold follows a claimed spare
        nb.transact(ports.spare_ops(NET, n1.name, ports.SPARES))
        cluster.lab.nbctl("--wait=sb", "sync")  # northd has given them addresses
    fake.hang(tool, args=args)
    proc = start_call(cluster, n1, "ADD", cid, pod, fake.path)
    deadline = time.monotonic() + 30
    while not faults.processes_mentioning(fake.marker) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    held = bool(faults.processes_mentioning(fake.marker))
    printed = kill9(proc)
    faults.kill_mentioning(fake.marker)
    assert held, f"ADD never reached {hold} ({tool} {args}): {printed}"
    before = cluster.leftovers(n1, cid, pod)
    missing = [m for m in made if not any(x.startswith(m) for x in before)]
    assert not missing, f"killed while {hold}, the ADD had not made {missing} (the hold is wrong): {before}"
    if NB in made and hold != "waiting for northd's addresses":
        assert f"{NB} {port_name(cid)}" not in before, f"the ADD made a port, it claimed no spare: {before}"
    f = Findings(f"ADD killed while {hold} (it had made {before})")
    after_kill(cluster, n1, cid, pod, f)
    f.check()


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.65, 0.8])
def test_kill9_after_a_delay(cluster: Cluster, pods: Pods, fraction: float) -> None:
    """The plugin killed with SIGKILL at ``fraction`` of the time an ADD takes on this machine
    (measured first, the faster of two; wherever that lands: start-up, the NB, the kernel,
    OVS), not by event: the same cleanup guarantees as :func:`test_kill9_during_add`. The kill
    must land before the ADD finished (else the round proves nothing: it is redone, 3 times at
    most)."""
    n2 = cluster.lab.nodes[1]
    took = []
    for i in range(2):
        warm = pods.netns("kw")
        cid = f"kw-{int(fraction * 100)}-{i}"
        pods.track(n2, cid, warm)
        out = cluster.call(n2, "ADD", cid, warm)
        assert out.rc == 0, out.describe()
        took.append(out.seconds)
    delay = fraction * min(took)
    for attempt in range(3):  # an ADD's time varies with OVN's load: a round that ended first is redone
        pod = pods.netns("kt")
        cid = f"kt-{int(fraction * 100)}-{attempt}"
        pods.track(n2, cid, pod)
        proc = start_call(cluster, n2, "ADD", cid, pod, faults.BASE_PATH)
        time.sleep(delay)
        finished = proc.poll() is not None
        printed = kill9(proc)
        if not finished:
            break
        assert cluster.call(n2, "DEL", cid, pod).rc == 0
    assert not finished, f"the ADD finished within {1000 * delay:.0f} ms, before the kill, 3 times: {printed}"
    made = cluster.leftovers(n2, cid, pod)
    f = Findings(f"ADD killed {1000 * delay:.0f} ms after its start (it had made {made})")
    after_kill(cluster, n2, cid, pod, f)
    f.check()


# --- 5: DEL of what is gone ---------------------------------------------------------------------


def test_del_twice_and_never_added(cluster: Cluster, pods: Pods, tmp_path: Path) -> None:
    """DEL is idempotent on an OVN network: a pod's DEL twice, the DEL of a container that was
    never ADDed (on a node whose store has the network, and on a fresh store that never saw it),
    and with a CNI_NETNS that no longer exists — all exit 0 with nothing printed, and nothing
    of the containers is left."""
    n1, n2 = cluster.lab.nodes
    pod = pods.netns("del2")
    pods.add(n1, "del-twice", pod)
    f = Findings("DELs of what is gone on an OVN network")
    for i in (1, 2):
        out = cluster.call(n1, "DEL", "del-twice", pod)
        f.expect(out.rc == 0 and out.stdout.strip() == "", f"DEL #{i}: {out.describe()}")
    f.clean(cluster.leftovers(n1, "del-twice", pod), "after two DELs")
    fresh = tmp_path / "fresh"
    cluster.init_store(n2, fresh)
    cases = [
        ("never added, store has the network", n1, None, pod),
        ("never added, fresh store", n2, fresh, pod),
        ("never added, netns gone", n1, None, f"{cluster.lab.prefix}-nosuchns"),
        ("never added, no netns", n1, None, None),
    ]
    for what, node, data, netns in cases:
        cid = "never-" + what.split(", ")[1].replace(" ", "-")
        out = cluster.call(node, "DEL", cid, netns, data=data)
        f.expect(out.rc == 0 and out.stdout.strip() == "", f"DEL ({what}): {out.describe()}")
        f.clean(cluster.leftovers(node, cid, None, data), f"after DEL ({what})")
    f.check()


def test_gc_leaves_another_stores_ports(cluster: Cluster, pods: Pods, tmp_path: Path) -> None:
    """Two podnet stores on one node (two dataDirs, as two conflists may have) with a pod each
    on the same OVN network: a GC of one store with no valid attachment removes its own pod's
    logical switch port and leaves the other store's pod its port, OVS port and link."""
    n2 = cluster.lab.nodes[1]
    other = tmp_path / "other"
    cluster.init_store(n2, other)
    pods.add(n2, "gc-mine", pods.netns("gm"))
    pods.add(n2, "gc-other", pods.netns("go"), other)
    out = cluster.gc(n2)
    assert out.rc == 0, out.describe()
    left = cluster.leftovers(n2, "gc-other", None, other)
    assert any(x.startswith("NB logical switch port") for x in left), f"gc-other's port went: {left}"
    assert any(x.startswith("OVS port") for x in left), left
    mine = cluster.lab.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                             "external_ids:podnet-container=gc-mine")  # fmt: skip
    assert not mine.strip(), f"GC left its own pod's port: {mine}"
