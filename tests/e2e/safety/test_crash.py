"""kill -9 at random points of ADD and DEL, then the runtime's cleanup.

A runtime whose call times out, or that is itself killed, leaves a plugin killed mid-call. The
next DEL (or a GC) must then clean everything: no row, no address, no veth, no map element, no
iptables chain; the database passes ``PRAGMA integrity_check``; no child of the killed call
(``ip -batch``, ``nsenter``, ``nft``, ``conntrack``) outlives it; and an ADD that gets the
address the database freed is not blocked by a stale veth or route.

Where a kill lands is chosen by event, not only by clock: a third of the killed ADDs die 0-60 ms
after the plugin process starts (seeded; on a loaded machine most of those land in the
interpreter's start-up), a third 0-5 ms after the pod's host veth appears in the node, a third
0-5 ms after the container's row is committed (both seen by :class:`Watch`, polling from inside
the node namespace). Each test then requires a minimum of rounds killed after COMMIT and with
the veth in place, so a machine on which every kill lands in start-up fails instead of passing
vacuously. The plugin is the installed file (``#!<python> -IS``) and the children it has just
before the kill are recorded from /proc.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import faults
from envgate import need
from netns import Lab
from plugin_calls import netconf

pytestmark = pytest.mark.root

SEED = 7
ROUNDS = 100
MAX_DELAY = 0.060
REF_PTP = "/usr/lib/cni/ptp"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> faults.Installed:
    need("root", "ip", "nft", "reference-plugins")
    return faults.install_plugins(tmp_path_factory.mktemp("install"))


#: Rounds that must have been killed after COMMIT, and with the host veth in place (each test).
MIN_AFTER_COMMIT = 8
MIN_WITH_VETH = 8
#: podnet-portmap calls (of 30 per backend) that must still have been running when killed.
MIN_PORTMAP_KILLED = 10
#: How long after the awaited event the kill lands (seconds, uniform).
EVENT_DELAY = 0.005
#: Only a hang reaches this: an awaited event that never came (the call failed or finished).
EVENT_DEADLINE = 20.0
CLONE_NEWNET = 0x40000000


class Watch:
    """Watches one ADD from a thread that has entered ``node``'s network namespace: sets
    ``veth`` when the host link ``ifname`` exists and ``row`` when ``<data>/podnet.db`` has the
    container's ``pods`` row (committed). Polls every 0.5 ms until :meth:`stop`."""

    def __init__(self, node: str, data: Path, container_id: str, ifname: str) -> None:
        self.node, self.db, self.cid, self.ifname = node, data / "podnet.db", container_id, ifname
        self.veth, self.row, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._entered = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._entered.wait(10), f"the watch thread could not enter {node}"

    def _run(self) -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/run/netns/{self.node}", os.O_RDONLY)
        try:
            assert libc.setns(fd, CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
        finally:
            os.close(fd)
        self._entered.set()
        conn: sqlite3.Connection | None = None
        try:
            while not self._stop.is_set():
                if not self.veth.is_set():
                    try:
                        socket.if_nametoindex(self.ifname)  # a socket of this thread's netns
                        self.veth.set()
                    except OSError:
                        pass
                if not self.row.is_set() and self.db.exists():
                    try:
                        conn = conn or sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=0)
                        if conn.execute("SELECT 1 FROM pods WHERE container_id = ?", (self.cid,)).fetchone():
                            self.row.set()
                    except sqlite3.Error:
                        pass
                time.sleep(0.0005)
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class Killed:
    """One call killed with SIGKILL ``delay`` seconds after its start. ``finished``: it had
    already exited (``rc``) by then; ``survivors``: ``(pid, command line)`` of its children still
    running 20 ms after it died; ``output``: what it printed."""

    delay: float
    finished: bool
    rc: int
    survivors: list[tuple[int, str]]
    output: str

    def describe(self) -> str:
        when = f"finished (exit {self.rc}) before the kill at {1000 * self.delay:.0f} ms" if self.finished \
            else f"killed at {1000 * self.delay:.0f} ms"
        return when


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kill_call(node: str, plugin: str, env: dict[str, str], conf: dict[str, Any], delay: float,
              mentions: tuple[str, ...] = (), after: threading.Event | None = None) -> Killed:
    """Start one plugin call in ``node`` and SIGKILL it ``delay`` seconds later (the plugin
    process only, as a runtime does) — or, given ``after``, ``delay`` seconds after that event
    is set (or the call exits). Children it had just before the kill, or any process of its
    session, that are still running 5 s after it died — or any process whose command line
    contains one of ``mentions`` — are reported, then killed (so the test leaves none)."""
    argv = faults.plugin_argv(node, plugin, env)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    started = time.monotonic()
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(conf).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    proc.stdin = None  # so communicate() only reads
    if after is not None:
        deadline = time.monotonic() + EVENT_DEADLINE
        while not after.wait(0.001) and proc.poll() is None:
            assert time.monotonic() < deadline, "the call neither reached the event nor exited"
        started = time.monotonic()
    left = started + delay - time.monotonic()
    if left > 0:
        time.sleep(left)
    kids = faults.children_of(proc.pid)
    finished = proc.poll() is not None
    if not finished:
        os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    # A child the plugin's death killed (setpriv --pdeathsig KILL) still finishes the system
    # call it is in (an `ip link del` waits for an RCU grace period, ~25 ms): give the kernel
    # up to 5 s (the wait ends as soon as all are gone), then anything alive outlived the call.
    grace = time.monotonic() + 5

    # The plugin ran in a session of its own (start_new_session): its children stay in it,
    # whatever their process group. Children listed before the kill miss one the plugin was
    # spawning as it died (a vfork child still without its exec, bearing the plugin's command
    # line), so the session is what is waited for.
    def dying() -> bool:
        others = [pid for pid, cmd in faults.processes_mentioning(*mentions)
                  if not cmd.startswith("ip netns exec")] if mentions else []
        return any(_alive(k) for k in [*kids, *others, *faults.session_members(proc.pid)])

    while time.monotonic() < grace and dying():
        time.sleep(0.005)
    late = [k for k in faults.session_members(proc.pid) if k not in kids]
    survivors = [(k, cmd) for k in [*kids, *late] if _alive(k) and (cmd := faults.command_line(k)) and _alive(k)]
    if mentions:
        seen = {pid for pid, _ in survivors}
        survivors += [(pid, cmd) for pid, cmd in faults.processes_mentioning(*mentions)
                      if pid not in seen and _alive(pid) and not cmd.startswith("ip netns exec")]
    for pid, _ in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    faults.kill_group(proc.pid)
    return Killed(delay, finished, proc.returncode, survivors, out.decode(errors="replace"))


def no_dad(lab: Lab, ns: str) -> None:
    for scope in ("all", "default"):
        lab.exec(ns, "sysctl", "-qw", f"net.ipv6.conf.{scope}.accept_dad=0")


@pytest.fixture
def node(lab: Lab) -> Lab:
    no_dad(lab, lab.node)
    return lab


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, text: str) -> None:
        self.items.append(text)

    def check(self, title: str) -> None:
        shown = self.items[:40]
        more = f"\n… and {len(self.items) - 40} more" if len(self.items) > 40 else ""
        assert not self.items, f"{title}: {len(self.items)} problem(s)\n- " + "\n- ".join(shown) + more


# --- podnet --------------------------------------------------------------------------------------


def ports(i: int) -> list[dict[str, Any]]:
    return [{"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 20000 + i, "containerPort": 53, "protocol": "udp"}]


def kill_add(node: Lab, plugin: str, data: Path, cid: str, pod: str, conf: dict[str, Any],
             rng: random.Random, mode: str, mentions: tuple[str, ...]) -> tuple[Killed, bool, bool]:
    """An ADD killed ``mode``: "start" (0-60 ms after the process starts), "veth" (0-5 ms after
    the host veth appears) or "commit" (0-5 ms after the row is committed). Returns the kill,
    and whether the row (committed) and the host veth existed once the plugin was dead."""
    from podnet.link.names import host_ifname

    veth = host_ifname(cid, "eth0")
    watch = Watch(node.node, data, cid, veth)
    try:
        event = {"start": None, "veth": watch.veth, "commit": watch.row}[mode]
        delay = rng.uniform(0, MAX_DELAY if event is None else EVENT_DELAY)
        k = kill_call(node.node, plugin, faults.cni_env("ADD", container_id=cid, netns=pod), conf, delay,
                      mentions, after=event)
    finally:
        watch.stop()
    committed = any(r[0] == cid for r in faults.db_rows(data, "pods"))
    return k, committed, veth in faults.veths(node.node)


KILL_MODES = ("start", "veth", "commit")


def test_podnet_kill9_add_and_del(node: Lab, installed: faults.Installed, tmp_path: Path) -> None:
    """100 rounds: an ADD (tcp+udp hostPorts, IPv4+IPv6) killed at a point chosen by
    :func:`kill_add`, or a completed ADD whose DEL is killed; then the runtime's DEL. After each
    round nothing of the container is left: no row, veth, map element, and no address or route
    the node did not have before the first round; after all rounds and a GC with no valid
    attachment the same, integrity_check ok, and no child of a killed call outlived it. At
    least MIN_AFTER_COMMIT ADDs were killed after their COMMIT and MIN_WITH_VETH with the
    host veth in place."""
    rng = random.Random(SEED)
    data = tmp_path / "data"
    plugin = installed.path("podnet")
    problems = Problems()
    counts = {"ADD killed": 0, "DEL killed": 0, "finished before the kill": 0,
              "ADD killed after COMMIT": 0, "ADD killed with the veth in place": 0}
    from podnet.link.names import host_ifname

    baseline = faults.addresses_and_routes(node.node)
    for i in range(ROUNDS):
        pod = node.pod(f"k{i}-")
        no_dad(node, pod)
        cid = f"crash{i}"
        conf = netconf(data, mappings=ports(i))
        veth = host_ifname(cid, "eth0")
        mentions = (pod, veth, f"--orig-port-dst {20000 + i}")
        if i % 2 == 0:
            mode = KILL_MODES[(i // 2) % len(KILL_MODES)]
            k, committed, has_veth = kill_add(node, plugin, data, cid, pod, conf, rng, mode, mentions)
            what = f"round {i}: ADD ({mode}) {k.describe()}"
            counts["ADD killed" if not k.finished else "finished before the kill"] += 1
            if not k.finished:
                counts["ADD killed after COMMIT"] += committed
                counts["ADD killed with the veth in place"] += has_veth
        else:
            add = faults.run_plugin(node.node, plugin, faults.cni_env("ADD", container_id=cid, netns=pod), conf)
            if add.rc != 0:
                problems.add(f"round {i}: ADD (no kill) failed: {add.describe()}")
            k = kill_call(node.node, plugin, faults.cni_env("DEL", container_id=cid, netns=pod),
                          {**conf, "prevResult": add.answer}, rng.uniform(0, MAX_DELAY), mentions)
            what = f"round {i}: DEL {k.describe()}"
            counts["DEL killed" if not k.finished else "finished before the kill"] += 1
        if k.survivors:
            problems.add(f"{what}: children outlived the killed call: {k.survivors}")
        # The runtime's cleanup.
        out = faults.run_plugin(node.node, plugin, faults.cni_env("DEL", container_id=cid, netns=pod), conf)
        if out.rc != 0:
            problems.add(f"{what}: the runtime's DEL failed: {out.describe()}")
        node.exec(node.node, "ip", "netns", "del", pod)
        node.namespaces.remove(pod)
        left = faults.podnet_leftovers(node.node, data, baseline)
        if left:
            problems.add(f"{what}: after the runtime's DEL: {left}")
            # Start the next round clean, so each leak is reported once.
            faults.run_plugin(node.node, plugin, faults.cni_env("GC"), {**netconf(data), "cni.dev/valid-attachments": []})
            baseline = faults.addresses_and_routes(node.node)
    gc = faults.run_plugin(node.node, plugin, faults.cni_env("GC"), {**netconf(data), "cni.dev/valid-attachments": []})
    if gc.rc != 0:
        problems.add(f"final GC failed: {gc.describe()}")
    left = faults.podnet_leftovers(node.node, data, baseline)
    if left:
        problems.add(f"after all rounds and GC: {left}")
    ok = faults.integrity(data)
    if ok != "ok":
        problems.add(f"integrity_check: {ok}")
    print(f"podnet kill -9: {counts}")
    problems.check(f"podnet kill -9 rounds ({counts})")
    assert counts["ADD killed after COMMIT"] >= MIN_AFTER_COMMIT, counts
    assert counts["ADD killed with the veth in place"] >= MIN_WITH_VETH, counts


def test_podnet_kill9_add_then_same_address(node: Lab, installed: faults.Installed, tmp_path: Path) -> None:
    """Ranges with ONE usable address per family: an ADD killed at a point chosen by
    :func:`kill_add` (at least MIN_AFTER_COMMIT rounds each before and after its COMMIT, and
    MIN_WITH_VETH with the host veth in place; 40 rounds, up to 80 until those are met), then
    another container's ADD, which gets the same addresses, must succeed — right away when the
    killed ADD left no row (killed before its COMMIT: the database freed the address), after
    the runtime's DEL of the killed one otherwise. A veth or route left by the killed call
    (e.g. by its orphaned ``ip -batch``) blocks it with "File exists"."""
    rng = random.Random(SEED + 1)
    data = tmp_path / "data"
    plugin = installed.path("podnet")
    ranges = ["10.99.0.0/30", "fd00:99::/126"]  # .2 and ::2 only
    problems = Problems()
    tried = Counter()
    from podnet.link.names import host_ifname

    # 40 rounds, and more (up to 80) while a minimum below is not reached yet: where the kills
    # land (before or after the COMMIT) depends on the machine's timing, the minimums do not
    for i in range(80):
        if i >= 40 and tried["killed after COMMIT"] >= MIN_AFTER_COMMIT and \
                tried["killed before COMMIT"] >= MIN_AFTER_COMMIT and \
                tried["killed with the veth in place"] >= MIN_WITH_VETH:
            break
        pods = [node.pod(f"s{i}a-"), node.pod(f"s{i}b-")]
        for p in pods:
            no_dad(node, p)
        first, second = f"first{i}", f"second{i}"
        conf = netconf(data, ranges=ranges, mappings=ports(i))
        mode = KILL_MODES[i % len(KILL_MODES)]
        k, held, has_veth = kill_add(node, plugin, data, first, pods[0], conf, rng, mode,
                                     (pods[0], host_ifname(first, "eth0")))
        what = f"round {i}: ADD ({mode}) {k.describe()}"
        if not k.finished:
            tried["killed after COMMIT" if held else "killed before COMMIT"] += 1
            tried["killed with the veth in place"] += has_veth
        if k.survivors:
            problems.add(f"{what}: children outlived the killed call: {k.survivors}")
        if held:
            tried["after the runtime's DEL"] += 1
            out = faults.run_plugin(node.node, plugin, faults.cni_env("DEL", container_id=first, netns=pods[0]), conf)
            if out.rc != 0:
                problems.add(f"{what}: the runtime's DEL failed: {out.describe()}")
            how = "after the runtime's DEL"
        else:
            tried["the killed ADD rolled back, no DEL"] += 1
            how = "(the killed ADD was rolled back: no row holds the address)"
        add = faults.run_plugin(node.node, plugin, faults.cni_env("ADD", container_id=second, netns=pods[1]), conf)
        if add.rc != 0:
            problems.add(f"{what}: the next ADD of the freed address {how} failed: {add.describe()}; "
                         f"node veths {faults.veths(node.node)}")
        for cid, p in ((second, pods[1]), (first, pods[0])):
            faults.run_plugin(node.node, plugin, faults.cni_env("DEL", container_id=cid, netns=p), conf)
        left = faults.podnet_leftovers(node.node, data)
        if left:
            problems.add(f"{what}: left after both DELs: {left}")
            faults.run_plugin(node.node, plugin, faults.cni_env("GC"), {**netconf(data), "cni.dev/valid-attachments": []})
        for p in pods:
            node.exec(node.node, "ip", "netns", "del", p)
            node.namespaces.remove(p)
    ok = faults.integrity(data)
    if ok != "ok":
        problems.add(f"integrity_check: {ok}")
    print(f"same address after a killed ADD: {dict(tried)}")
    problems.check(f"ADD killed, then an ADD of the same address ({dict(tried)})")
    assert tried["killed after COMMIT"] >= MIN_AFTER_COMMIT, dict(tried)
    assert tried["killed before COMMIT"] >= MIN_AFTER_COMMIT, dict(tried)
    assert tried["killed with the veth in place"] >= MIN_WITH_VETH, dict(tried)


# --- podnet-portmap ---------------------------------------------------------------------------------


def ptp_conf(data: Path) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "pmnet", "type": "ptp",
            "ipam": {"type": "host-local", "dataDir": str(data),
                     "ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00:1::/64"}]],
                     "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}}


@pytest.fixture
def ptp_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "host-local"


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
def test_portmap_kill9(node: Lab, installed: faults.Installed, ptp_dir: Path, backend: str) -> None:
    """30 rounds per backend after the reference ptp: podnet-portmap's ADD killed at a random
    point (or its DEL, after a completed ADD), then the runtime's DEL of the chain (portmap,
    then ptp): no chain, rule or element of any container is left, and no child outlived."""
    rng = random.Random(SEED + (2 if backend == "iptables" else 3))
    plugin = installed.path("podnet-portmap")
    problems = Problems()
    killed = 0
    for i in range(30):
        pod = node.pod(f"p{i}-")
        no_dad(node, pod)
        cid = f"pm{i}"
        env = faults.cni_env("ADD", container_id=cid, netns=pod)
        ptp = faults.run_plugin(node.node, REF_PTP, env, ptp_conf(ptp_dir))
        assert ptp.rc == 0, f"reference ptp ADD: {ptp.describe()}"
        conf = {"cniVersion": "1.0.0", "name": "pmnet", "type": "podnet-portmap", "backend": backend,
                "capabilities": {"portMappings": True}, "runtimeConfig": {"portMappings": ports(i)},
                "prevResult": ptp.answer, "dataDir": str(ptp_dir.parent / "portmap-data")}
        delay = rng.uniform(0, MAX_DELAY)
        mentions = (f"dport {20000 + i}", f"--orig-port-dst {20000 + i}")
        if i % 2 == 0:
            k = kill_call(node.node, plugin, env, conf, delay, mentions)
            what = f"{backend} round {i}: ADD {k.describe()}"
        else:
            add = faults.run_plugin(node.node, plugin, env, conf)
            if add.rc != 0:
                problems.add(f"{backend} round {i}: ADD (no kill) failed: {add.describe()}")
            k = kill_call(node.node, plugin, faults.cni_env("DEL", container_id=cid, netns=pod), conf, delay, mentions)
            what = f"{backend} round {i}: DEL {k.describe()}"
        killed += not k.finished
        if k.survivors:
            problems.add(f"{what}: children outlived the killed call: {k.survivors}")
        del_env = faults.cni_env("DEL", container_id=cid, netns=pod)
        out = faults.run_plugin(node.node, plugin, del_env, conf)
        if out.rc != 0:
            problems.add(f"{what}: the runtime's DEL failed: {out.describe()}")
        ptp_del = faults.run_plugin(node.node, REF_PTP, del_env, ptp_conf(ptp_dir))
        if ptp_del.rc != 0:
            problems.add(f"{what}: reference ptp DEL failed: {ptp_del.describe()}")
        left = faults.portmap_leftovers(node.node)
        if left:
            problems.add(f"{what}: after the runtime's DEL: {left}")
            gc = {**conf, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
            gc.pop("prevResult")
            faults.run_plugin(node.node, plugin, faults.cni_env("GC"), gc)
        node.exec(node.node, "ip", "netns", "del", pod)
        node.namespaces.remove(pod)
    left = faults.portmap_leftovers(node.node)  # kill_call already waited for each killed call's children
    if left:
        problems.add(f"{backend}: after all rounds: {left}")
    problems.check(f"podnet-portmap ({backend}) kill -9 rounds")
    assert killed >= MIN_PORTMAP_KILLED, f"only {killed} of 30 calls were still running at the kill"
