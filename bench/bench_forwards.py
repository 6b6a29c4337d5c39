#!/usr/bin/env python3
"""Network forwards: CLI create/delete cost against the number of forwards, connect latency
through a forward port, and LXD 5.0.2 (when installed) in the same run (issue 8, item 8).

Run as root (a benchmark, not a test)::

    .venv/bin/python bench/bench_forwards.py [--quick] [--json] [--samples 30] [--no-lxd] ...

What it measures (docs/bench_forwards.md has the long form):

1. **CLI create+delete of one forward with one port** on a bridge network ``br0``
   (``ipv4.address=10.0.0.1/24 ipv4.nat=true``) that already holds 0, 100, 1,000 and 10,000
   forwards (each with one tcp port). A sample is three timed commands, each the whole
   ``ip netns exec <node> podnetctl network --data-dir D forward …`` process: ``forward create
   br0 203.0.113.10``, ``forward port add br0 203.0.113.10 tcp 80 10.0.0.2``, ``forward delete
   br0 203.0.113.10``. *create* is the first two (a forward with one port), *pair* all three.
2. **connect() latency through a forward port**: a TCP server in a pod (podnet plugin, bridge
   network mode) behind the forward, a client namespace linked to the node (192.0.2.2 → node
   192.0.2.1, routes to the listen ranges via the node); the client times ``connect()`` (the TCP
   handshake) to ``listen:80``, with 1 forward on the node and with 10,000.
3. **LXD 5.0.2**, if ``lxd`` and ``lxc`` are installed: one daemon per level (0, 100, 1,000),
   each in a namespace and ``LXD_DIR`` of its own, the same network and the same three commands
   with ``lxc network forward …`` (also under ``ip netns exec``, stdin from /dev/null), plus
   LXD's one-command way of creating a forward with a port (YAML on stdin) as its own row.
4. **The REST API** (issue 9) at the ``--api-levels`` (0 and 1,000 forwards): ``podnetctl
   serve`` on the podnet node and the LXD daemon of the same level answer the same two
   requests on their unix sockets — ``POST /1.0/networks/br0/forwards`` with the port in the
   body, then ``DELETE /1.0/networks/br0/forwards/203.0.113.10`` — each timed from before the
   request to the end of the response, one kept-alive connection per side (as ``lxc`` keeps
   one). The real ``lxc`` client pointed at ``podnetctl serve`` (``LXD_DIR``; YAML create +
   delete, two whole processes) is its own row, beside LXD's ``lxd (yaml)`` row of part 1.

Method:

* One node namespace per podnet level (``pfb-<tag>-pn<N>``) and per LXD level
  (``pfb-<tag>-lxd<N>``); a podnet node has its own data dir, its network ``br0`` and one pod
  (10.0.0.2). Existing forwards (listen 198.18.0.1, .2, …, tcp 80 → 10.0.0.2:80) are made
  before sampling: podnet's through the library in one Python process inside the node
  (``Manager.create_forward``: a transaction and an nft change each), LXD's through its REST
  API on the unix socket; all levels are populated concurrently.
* The cells (side × level) take turns within a sampling round, in an order rotated every
  round; a cell creates, extends and deletes ``203.0.113.10``, so its level is unchanged.
  Warm-up rounds are discarded.
* podnet is a snapshot of ``src/podnet`` taken at start (the work tree, or ``--commit REV``),
  byte-compiled in the temporary directory and put first on ``PYTHONPATH`` for the venv's
  ``podnetctl`` and ``podnet``, so edits made to the tree while the benchmark runs do not move
  its figures (``--live`` runs the work tree as it is).
* Everything lives in namespaces and a temporary directory this script created; the LXD
  daemons are shut down (``lxd shutdown``, then killed if they hang), the namespaces deleted and
  the directory removed at the end, also on failure, Ctrl-C, SIGTERM or SIGHUP. The root
  namespace's links, addresses and nft tables are compared before and after.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import ipaddress
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any

# the drivers run this file with python -I (no script directory on sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (  # noqa: E402
    add_output_options,
    add_sampling_options,
    end_on_signals,
    finish,
    need_root_and_tools,
    percentile,
)

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
VENV_PYTHON = VENV_BIN / "python3"
PODNETCTL = VENV_BIN / "podnetctl"
PODNET_PLUGIN = VENV_BIN / "podnet"
NS_PREFIX = "pfb-"
NETWORK = "br0"
NETWORK_KEYS = ("ipv4.address=10.0.0.1/24", "ipv4.nat=true")
TARGET = "10.0.0.2"  # the pod (podnet) / the port target (both sides)
PORT = 80
#: Existing forwards listen on LISTEN_BASE + 1, + 2, …; the sampled one on SAMPLE_LISTEN.
LISTEN_BASE = ipaddress.IPv4Address("198.18.0.0")
LISTEN_ROUTE = "198.18.0.0/15"
SAMPLE_LISTEN = "203.0.113.10"
SAMPLE_ROUTE = "203.0.113.0/24"
NODE_ADDR, CLIENT_ADDR = "192.0.2.1", "192.0.2.2"
LXD_YAML = (f"ports:\n- protocol: tcp\n  listen_port: \"{PORT}\"\n"
            f"  target_address: {TARGET}\n")  # fmt: skip


def listen_of(i: int) -> str:
    """The listen address of existing forward ``i`` (0-based)."""
    return str(LISTEN_BASE + 1 + i)


# -- helpers that run inside namespaces (this file re-executed, or -c scripts) ----------------
POPULATE = r"""
import sys, time, ipaddress
from podnet.manage.manager import Manager
from podnet.networks.model import Forward, ForwardPort
data, network, base, count, target, port = sys.argv[1], sys.argv[2], \
    ipaddress.IPv4Address(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
m = Manager(data)
step = max(1, min(1000, count // 10))
t0 = time.monotonic()
for i in range(count):
    m.create_forward(network, Forward(str(base + 1 + i), ports=[
        ForwardPort(protocol='tcp', listen_port=port, target_address=target)]))
    if (i + 1) % step == 0 or i + 1 == count:
        print(i + 1, round(time.monotonic() - t0, 1), flush=True)
"""

SERVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1024)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    try:
        c.sendall(b"podnet-bench\n")
    except OSError:
        pass
    c.close()
"""


def connect_driver_main() -> int:
    """``--connect-driver`` (inside a client namespace): JSON lines in, JSON lines out.
    ``{"op": "connect", "host", "port", "n"}`` → ``{"ns": [...]}``, the duration of each
    blocking ``connect()`` (SYN sent → SYN-ACK received); ``{"op": "check", …}`` → the banner the
    server sends, proving the path; ``{"op": "quit"}``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin:
        op = json.loads(line)
        try:
            if op["op"] == "quit":
                return 0
            addr = (op["host"], int(op["port"]))
            if op["op"] == "check":
                with socket.create_connection(addr, timeout=5) as s:
                    reply: dict[str, Any] = {"banner": s.recv(64).decode(errors="replace")}
            else:
                out = []
                for _ in range(int(op["n"])):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.settimeout(5)
                    t0 = time.perf_counter_ns()
                    s.connect(addr)
                    out.append(time.perf_counter_ns() - t0)
                    s.close()
                reply = {"ns": out}
        except Exception as err:  # noqa: BLE001 - reported to the parent, which stops the run
            reply = {"error": f"{type(err).__name__}: {err}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


# -- plumbing ------------------------------------------------------------------------------------
def sh(*argv: str, input: str | None = None, env: dict[str, str] | None = None,
       timeout: float = 300) -> str:  # fmt: skip
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()}")  # fmt: skip
    return proc.stdout


def timed(argv: list[str], env: dict[str, str], stdin: Any = subprocess.DEVNULL,
          expect: str = "") -> float:  # fmt: skip
    """Run one command, milliseconds from before the spawn to after its exit; its stdout must
    contain ``expect``."""
    t0 = time.perf_counter_ns()
    proc = subprocess.run(argv, stdin=stdin, capture_output=True, text=True, env=env, timeout=300)
    ms = (time.perf_counter_ns() - t0) / 1e6
    if proc.returncode != 0 or expect not in proc.stdout:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()}")  # fmt: skip
    return ms


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 600) -> None:
        super().__init__("lxd", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def root_state() -> dict[str, str]:
    """What must not change in the root namespace."""
    out = {}
    for key, argv in (("links", ["ip", "-br", "link"]), ("addresses", ["ip", "-br", "addr"]),
                      ("nft tables", ["nft", "list", "tables"])):  # fmt: skip
        try:
            out[key] = sh(*argv)
        except (RuntimeError, OSError) as err:
            out[key] = f"? {err}"
    return out


# -- the two sides ---------------------------------------------------------------------------------
class PodnetNode:
    """A node namespace with a podnet data dir, network br0 and a pod at 10.0.0.2."""

    def __init__(self, bench: Bench, level: int) -> None:
        self.bench = bench
        self.level = level
        self.ns = bench.ns_add(f"pn{level}")
        self.data = os.path.join(bench.tmp, f"podnet-{level}")
        self.pod = ""
        self.client = ""
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")

    def ctl(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, str(PODNETCTL), "network", "--data-dir",
                self.data, "--init", *args]  # fmt: skip

    def setup(self) -> None:
        sh(*self.ctl("create", NETWORK, *NETWORK_KEYS), env=self.bench.env)
        self.pod = self.bench.ns_add(f"pod{self.level}")
        sh("ip", "-n", self.pod, "link", "set", "lo", "up")
        conf = {"cniVersion": "1.1.0", "name": "brnet", "type": "podnet", "network": NETWORK,
                "dataDir": self.data}  # fmt: skip
        env = dict(self.bench.env, CNI_COMMAND="ADD", CNI_CONTAINERID=f"bench-{self.bench.tag}",
                   CNI_NETNS=f"/run/netns/{self.pod}", CNI_IFNAME="eth0",
                   CNI_PATH="/usr/lib/cni", CNI_ARGS=f"IgnoreUnknown=1;IP={TARGET}")  # fmt: skip
        result = json.loads(sh("ip", "netns", "exec", self.ns, str(PODNET_PLUGIN),
                               input=json.dumps(conf), env=env))  # fmt: skip
        got = [ip["address"].split("/")[0] for ip in result.get("ips", [])]
        if TARGET not in got:
            raise RuntimeError(f"podnet@{self.level}: the pod got {got}, not {TARGET}")

    def populate(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.ns, str(VENV_PYTHON), "-c", POPULATE, self.data,
             NETWORK, str(LISTEN_BASE), str(self.level), TARGET, str(PORT)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.bench.env,
            start_new_session=True,
        )  # fmt: skip

    def sample(self) -> dict[str, float]:
        env = self.bench.env
        t = {
            "create": timed(self.ctl("forward", "create", NETWORK, SAMPLE_LISTEN), env,
                            expect="created"),
            "port": timed(self.ctl("forward", "port", "add", NETWORK, SAMPLE_LISTEN, "tcp",
                                   str(PORT), TARGET), env),
            "delete": timed(self.ctl("forward", "delete", NETWORK, SAMPLE_LISTEN), env,
                            expect="deleted"),
        }  # fmt: skip
        return t

    def count(self) -> int:
        out = sh(*self.ctl("forward", "list", NETWORK, "--format", "csv"), env=self.bench.env)
        return len([ln for ln in out.splitlines() if ln.strip()])

    def serve(self) -> None:
        """Start ``podnetctl serve`` on this node's data dir (its unix socket: LXD_DIR)."""
        socket_path = os.path.join(self.data, "unix.socket")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, str(PODNETCTL), "serve", "--data-dir", self.data,
             "--log-level", "warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=self.bench.env, start_new_session=True,
        )  # fmt: skip
        self.bench.children.append(proc)
        deadline = time.monotonic() + 30
        while not os.path.exists(socket_path):
            if proc.poll() is not None or time.monotonic() > deadline:
                assert proc.stderr is not None
                err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
                raise RuntimeError(f"podnetctl serve @{self.level} did not start: {err}")
            time.sleep(0.05)
        self.api = ApiClient(socket_path, f"podnet@{self.level}")
        self.lxc_env = dict(os.environ, LXD_DIR=self.data,
                            LXD_CONF=os.path.join(self.bench.tmp, f"lxcconf-pn{self.level}"))

    def sample_lxc(self) -> dict[str, float]:
        """The real ``lxc`` client against ``podnetctl serve``: YAML create, delete."""
        fwd = ("ip", "netns", "exec", self.ns, "lxc", "network", "forward")
        with open(self.bench.yaml_path) as f:
            create = timed([*fwd, "create", NETWORK, SAMPLE_LISTEN], self.lxc_env, stdin=f,
                           expect="created")  # fmt: skip
        delete = timed([*fwd, "delete", NETWORK, SAMPLE_LISTEN], self.lxc_env, expect="deleted")
        return {"create": create, "port": 0.0, "delete": delete}

    def add_client(self) -> str:
        """A client namespace linked to this node, routed to the listen ranges through it."""
        self.client = self.bench.ns_add(f"cl{self.level}")
        sh("ip", "link", "add", "up0", "netns", self.ns, "type", "veth", "peer", "name", "up0",
           "netns", self.client)  # fmt: skip
        for ns, addr in ((self.ns, NODE_ADDR), (self.client, CLIENT_ADDR)):
            sh("ip", "-n", ns, "-batch", "-", input=(
                f"addr add {addr}/24 dev up0\nlink set up0 up\nlink set lo up\n"))  # fmt: skip
        for route in (LISTEN_ROUTE, SAMPLE_ROUTE):
            sh("ip", "-n", self.client, "route", "add", route, "via", NODE_ADDR)
        return self.client


class ApiClient:
    """One kept-alive HTTP connection to an LXD-style unix socket; :meth:`sample` times the
    POST of the sampled forward (its port in the body) and its DELETE."""

    BODY = json.dumps({"listen_address": SAMPLE_LISTEN, "description": "", "config": {},
                       "ports": [{"protocol": "tcp", "listen_port": str(PORT),
                                  "target_address": TARGET, "target_port": "",
                                  "description": ""}]})  # fmt: skip

    def __init__(self, path: str, name: str) -> None:
        self.conn = UnixHTTPConnection(path)
        self.name = name

    def _call(self, method: str, url: str, body: str | None = None) -> float:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        t0 = time.perf_counter_ns()
        self.conn.request(method, url, body, headers)
        resp = self.conn.getresponse()
        data = resp.read()
        ms = (time.perf_counter_ns() - t0) / 1e6
        if resp.status // 100 != 2:
            raise RuntimeError(f"{self.name}: {method} {url}: HTTP {resp.status}: {data[:300]!r}")
        return ms

    def sample(self) -> dict[str, float]:
        base = f"/1.0/networks/{NETWORK}/forwards"
        return {"create": self._call("POST", base, self.BODY), "port": 0.0,
                "delete": self._call("DELETE", f"{base}/{SAMPLE_LISTEN}")}  # fmt: skip

    def close(self) -> None:
        self.conn.close()


class LxdDaemon:
    """An LXD daemon in a namespace and LXD_DIR of its own, with network br0."""

    def __init__(self, bench: Bench, level: int) -> None:
        self.bench = bench
        self.level = level
        self.ns = bench.ns_add(f"lxd{level}")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.dir = os.path.join(bench.tmp, f"lxd{level}")
        os.mkdir(self.dir, 0o711)
        self.env = dict(os.environ, LXD_DIR=self.dir,
                        LXD_CONF=os.path.join(bench.tmp, f"lxdconf{level}"))  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.api: ApiClient | None = None
        self.log_path = os.path.join(bench.tmp, f"lxd{level}.log")

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, "lxd", "--group", "root"], env=self.env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            sh("lxd", "waitready", "--timeout", "60", env=self.env, timeout=90)
        except RuntimeError as err:
            raise RuntimeError(f"{err}\nlxd log:\n{self.log_tail()}") from None
        sh(*self.lxc("network", "create", NETWORK, *NETWORK_KEYS), env=self.env)

    def log_tail(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-20:])
        except OSError:
            return ""

    def lxc(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, "lxc", *args]

    def populate(self, progress: Any) -> None:
        """The existing forwards, through the REST API (one POST each, on one connection)."""
        conn = UnixHTTPConnection(os.path.join(self.dir, "unix.socket"))
        step = max(1, min(100, self.level // 10))
        t0 = time.monotonic()
        try:
            for i in range(self.level):
                body = json.dumps({"listen_address": listen_of(i), "description": "",
                                   "config": {}, "ports": [{
                                       "protocol": "tcp", "listen_port": str(PORT),
                                       "target_address": TARGET, "target_port": "",
                                       "description": ""}]})  # fmt: skip
                conn.request("POST", f"/1.0/networks/{NETWORK}/forwards", body,
                             {"Content-Type": "application/json"})  # fmt: skip
                resp = conn.getresponse()
                data = resp.read()
                if resp.status // 100 != 2:
                    raise RuntimeError(f"lxd@{self.level}: POST forward {listen_of(i)}: "
                                       f"HTTP {resp.status}: {data[:300]!r}")  # fmt: skip
                if (i + 1) % step == 0 or i + 1 == self.level:
                    progress(i + 1, time.monotonic() - t0)
        finally:
            conn.close()

    def sample(self, yaml: bool) -> dict[str, float]:
        env = self.env
        fwd = ("network", "forward")
        if yaml:  # LXD's one-command way: the port in YAML on stdin
            with open(self.bench.yaml_path) as f:
                create = timed(self.lxc(*fwd, "create", NETWORK, SAMPLE_LISTEN), env, stdin=f,
                               expect="created")  # fmt: skip
            return {"create": create, "port": 0.0,
                    "delete": timed(self.lxc(*fwd, "delete", NETWORK, SAMPLE_LISTEN), env,
                                    expect="deleted")}  # fmt: skip
        return {
            "create": timed(self.lxc(*fwd, "create", NETWORK, SAMPLE_LISTEN), env,
                            expect="created"),
            "port": timed(self.lxc(*fwd, "port", "add", NETWORK, SAMPLE_LISTEN, "tcp",
                                   str(PORT), TARGET), env),
            "delete": timed(self.lxc(*fwd, "delete", NETWORK, SAMPLE_LISTEN), env,
                            expect="deleted"),
        }  # fmt: skip

    def count(self) -> int:
        out = sh(*self.lxc("network", "forward", "list", NETWORK, "--format", "csv"),
                 env=self.env)  # fmt: skip
        return len([ln for ln in out.splitlines() if ln.strip()])

    def stop(self) -> list[str]:
        """``lxd shutdown``; kill it (and whatever is left in its namespace) if that fails."""
        problems: list[str] = []
        if self.proc is None:
            return problems
        if self.proc.poll() is None:
            try:
                sh("lxd", "shutdown", "--timeout", "60", env=self.env, timeout=90)
                self.proc.wait(timeout=30)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
                problems.append(f"lxd@{self.level}: shutdown failed ({err}); killed")
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # dnsmasq and anything else the daemon started in its namespace
        try:
            pids = sh("ip", "netns", "pids", self.ns).split()
        except (RuntimeError, OSError):
            pids = []
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
                problems.append(f"lxd@{self.level}: killed leftover pid {pid}")
            except (OSError, ValueError):
                pass
        return problems


class ConnectDriver:
    def __init__(self, client_ns: str) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", client_ns, sys.executable, "-I", os.path.abspath(__file__),
             "--connect-driver"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    def call(self, op: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"connect driver exited (status {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"connect to {op.get('host')}:{op.get('port')}: {reply['error']}")
        return reply


# -- the run -------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tag = uuid.uuid4().hex[:6]
        self.tmp = tempfile.mkdtemp(prefix="podnet-bench-fwd-")
        os.environ["PODNET_DATA_DIRS"] = f"{self.tmp}/*"  # the stores below it are allowed
        os.chmod(self.tmp, 0o711)
        self.namespaces: list[str] = []
        self.children: list[subprocess.Popen[Any]] = []
        self.nodes: dict[int, PodnetNode] = {}
        self.lxds: dict[int, LxdDaemon] = {}
        self.log: IO[str] = sys.stderr
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.yaml_path = os.path.join(self.tmp, "forward.yaml")
        self.env = dict(os.environ)
        self.notes: list[str] = []

    def say(self, message: str) -> None:
        with self.lock:
            stamp = f"[{time.monotonic() - self.started:7.1f}s]"
            print(f"{stamp} {message}", file=self.log, flush=True)

    def ns_add(self, role: str) -> str:
        name = f"{NS_PREFIX}{self.tag}-{role}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        return name

    # podnet source ------------------------------------------------------------------------------
    def snapshot(self) -> str:
        """``src/podnet`` as it is now (or as committed in ``--commit``), byte-compiled, first
        on PYTHONPATH for every podnet process of the run."""
        head = sh("git", "-C", str(REPO), "rev-parse", "--short", "HEAD").strip()
        if self.args.live:
            dirty = sh("git", "-C", str(REPO), "status", "--porcelain", "--", "src").strip()
            return f"work tree as it runs (HEAD {head}{', src modified' if dirty else ''})"
        snap = Path(self.tmp, "snapshot", "src")
        snap.mkdir(parents=True)
        if self.args.commit:
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", self.args.commit, "src/podnet"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(snap.parent)], input=archive, check=True)
            rev = sh("git", "-C", str(REPO), "rev-parse", "--short", self.args.commit).strip()
            what = f"commit {rev}"
        else:
            dirty = sh("git", "-C", str(REPO), "status", "--porcelain", "--", "src").strip()
            shutil.copytree(REPO / "src" / "podnet", snap / "podnet",
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
            what = f"work tree at start (HEAD {head}{', src modified' if dirty else ''})"
        subprocess.run([str(VENV_PYTHON), "-m", "compileall", "-q", str(snap / "podnet")],
                       check=True)  # fmt: skip
        self.env["PYTHONPATH"] = str(snap)
        probe = sh(str(VENV_PYTHON), "-c", "import podnet; print(podnet.__file__)", env=self.env)
        if not probe.startswith(str(snap)):
            raise RuntimeError(f"the snapshot is not what Python imports: {probe.strip()}")
        return f"{what}, snapshot in PYTHONPATH, run by {PODNETCTL}"

    # phases ------------------------------------------------------------------------------------
    def setup(self) -> None:
        with open(self.yaml_path, "w") as f:
            f.write(LXD_YAML)
        self.podnet_source = self.snapshot()
        self.say(f"podnet: {self.podnet_source}")
        for level in self.args.levels:
            node = PodnetNode(self, level)
            self.nodes[level] = node
            node.setup()
        self.say(f"podnet: {len(self.nodes)} nodes with network {NETWORK} and a pod at {TARGET}")
        if self.args.lxd:
            for level in self.args.lxd_levels:
                daemon = LxdDaemon(self, level)
                self.lxds[level] = daemon
                daemon.start()
            version = sh("lxd", "--version").strip()
            self.say(f"lxd {version}: {len(self.lxds)} daemons started, network {NETWORK} on each")
            self.lxd_version = version

    def populate(self) -> None:
        """Every level's existing forwards, all levels at once (podnet: one process per node
        running the library; LXD: REST POSTs, one thread per daemon)."""
        started = time.monotonic()
        procs = []
        for level, node in self.nodes.items():
            if level:
                proc = node.populate()
                self.children.append(proc)
                procs.append((level, proc))
        errors: list[str] = []
        threads = []

        def follow(level: int, proc: subprocess.Popen[str]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                done, secs = line.split()
                self.say(f"  podnet@{level}: {done}/{level} forwards ({secs} s)")
            if proc.wait() != 0:
                assert proc.stderr is not None
                errors.append(f"podnet@{level} populate: exit {proc.returncode}: "
                              f"{proc.stderr.read().strip()[-2000:]}")  # fmt: skip

        def lxd_fill(daemon: LxdDaemon) -> None:
            try:
                daemon.populate(
                    lambda done, secs: self.say(
                        f"  lxd@{daemon.level}: {done}/{daemon.level} forwards ({secs:.1f} s)"
                    )
                )
            except Exception as err:  # noqa: BLE001 - re-raised by the main thread
                errors.append(f"{type(err).__name__}: {err}")

        for level, proc in procs:
            threads.append(threading.Thread(target=follow, args=(level, proc), daemon=True))
        for level, daemon in self.lxds.items():
            if level:
                threads.append(threading.Thread(target=lxd_fill, args=(daemon,), daemon=True))
        self.say(f"populating: podnet {[lv for lv, _ in procs]}, "
                 f"lxd {[lv for lv in self.lxds if lv]} ...")  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)  # stays interruptible
        if errors:
            raise RuntimeError("; ".join(errors))
        for level, node in self.nodes.items():
            if node.count() != level:
                raise RuntimeError(f"podnet@{level}: {node.count()} forwards, not {level}")
        for level, daemon in self.lxds.items():
            if daemon.count() != level:
                raise RuntimeError(f"lxd@{level}: {daemon.count()} forwards, not {level}")
        self.populate_s = time.monotonic() - started
        self.say(f"  populated in {self.populate_s:.1f} s")

    def sample_cli(self) -> dict[tuple[str, int], list[dict[str, float]]]:
        cells: list[tuple[str, int]] = [("podnet", lv) for lv in self.nodes]
        cells += [("lxd", lv) for lv in self.lxds] + [("lxd-yaml", lv) for lv in self.lxds]
        out: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in cells}
        rounds = self.args.warmup + self.args.samples
        self.say(f"sampling {len(cells)} cells interleaved: {self.args.warmup} warm-up + "
                 f"{self.args.samples} rounds ...")  # fmt: skip
        started = time.monotonic()
        for k in range(rounds):
            order = cells[k % len(cells) :] + cells[: k % len(cells)]
            for side, level in order:
                if side == "podnet":
                    t = self.nodes[level].sample()
                else:
                    t = self.lxds[level].sample(yaml=side == "lxd-yaml")
                if k >= self.args.warmup:
                    out[(side, level)].append(t)
            if (k + 1) % 5 == 0 or k + 1 == rounds:
                self.say(f"  round {k + 1}/{rounds} ({time.monotonic() - started:.0f} s)")
        for level, node in self.nodes.items():  # every cell back at its level
            if node.count() != level:
                raise RuntimeError(f"podnet@{level}: {node.count()} forwards after sampling")
        self.cli_s = time.monotonic() - started
        return out

    def sample_api(self) -> dict[tuple[str, int], list[dict[str, float]]]:
        """Part 4: the same POST/DELETE against ``podnetctl serve`` and LXD, plus ``lxc``
        against podnet, at the API levels, interleaved like part 1."""
        cells: list[tuple[str, int]] = []
        for level in self.args.api_levels:
            if level in self.nodes:
                self.nodes[level].serve()
                cells += [("podnet-api", level), ("podnet-lxc", level)]
            if level in self.lxds:
                self.lxds[level].api = ApiClient(
                    os.path.join(self.lxds[level].dir, "unix.socket"), f"lxd@{level}")
                cells.append(("lxd-api", level))
        out: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in cells}
        if not cells:
            return out
        rounds = self.args.warmup + self.args.samples
        self.say(f"REST API: {len(cells)} cells interleaved, {rounds} rounds ...")
        for k in range(rounds):
            for side, level in cells[k % len(cells):] + cells[: k % len(cells)]:
                if side == "podnet-api":
                    t = self.nodes[level].api.sample()
                elif side == "podnet-lxc":
                    t = self.nodes[level].sample_lxc()
                else:
                    client = self.lxds[level].api
                    assert client is not None
                    t = client.sample()
                if k >= self.args.warmup:
                    out[(side, level)].append(t)
        for level in self.args.api_levels:
            if level in self.nodes and self.nodes[level].count() != level:
                raise RuntimeError(f"podnet@{level}: {self.nodes[level].count()} forwards "
                                   "after the API sampling")  # fmt: skip
            if level in self.lxds and self.lxds[level].count() != level:
                raise RuntimeError(f"lxd@{level}: {self.lxds[level].count()} forwards "
                                   "after the API sampling")  # fmt: skip
        return out

    def sample_connect(self) -> dict[str, Any]:
        """connect() through a forward port with 1 forward (the 0 node, given one forward) and
        with the top level's forwards (one of them), interleaved in batches."""
        low, top = self.nodes[0], self.nodes[max(self.nodes)]
        listen = listen_of(top.level - 1)  # the top node's last forward
        sh(*low.ctl("forward", "create", NETWORK, listen), env=self.env)
        sh(*low.ctl("forward", "port", "add", NETWORK, listen, "tcp", str(PORT), TARGET),
           env=self.env)  # fmt: skip
        sides = {1: low, top.level: top}
        drivers = {}
        for n, node in sides.items():
            server = subprocess.Popen(
                ["ip", "netns", "exec", node.pod, sys.executable, "-I", "-c", SERVER, str(PORT)],
                stdout=subprocess.PIPE, text=True, start_new_session=True,
            )  # fmt: skip
            self.children.append(server)
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError(f"server in {node.pod} did not start")
            driver = ConnectDriver(node.add_client())
            self.children.append(driver.proc)
            drivers[n] = driver
            banner = driver.call({"op": "check", "host": listen, "port": PORT})["banner"]
            if "podnet-bench" not in banner:
                raise RuntimeError(f"{listen}:{PORT} on the {n}-forward node answered {banner!r}")
        counts = {n: node.count() for n, node in sides.items()}
        if counts != {1: 1, top.level: top.level}:
            raise RuntimeError(f"forward counts before connecting: {counts}")
        total, batch = self.args.connects, 10
        warm = min(20, total)
        self.say(
            f"connect latency to {listen}:{PORT} at {sorted(sides)} forwards: "
            f"{warm} warm-up + {total} connections each, batches of {batch} ..."
        )
        ns: dict[int, list[int]] = {n: [] for n in sides}
        for driver in drivers.values():
            driver.call({"op": "connect", "host": listen, "port": PORT, "n": warm})
        k = 0
        while min(len(v) for v in ns.values()) < total:
            order = list(sides) if k % 2 == 0 else list(sides)[::-1]
            for n in order:
                want = min(batch, total - len(ns[n]))
                reply = drivers[n].call({"op": "connect", "host": listen, "port": PORT,
                                         "n": want})  # fmt: skip
                ns[n] += reply["ns"]
            k += 1
        rows: list[dict[str, Any]] = []
        for n in sorted(ns):
            us = [x / 1e3 for x in ns[n]]
            rows.append(
                {
                    "forwards": n,
                    "n": len(us),
                    "p50_us": round(percentile(us, 50), 1),
                    "p90_us": round(percentile(us, 90), 1),
                    "p99_us": round(percentile(us, 99), 1),
                    "min_us": round(min(us), 1),
                }
            )
        return {"listen": f"{listen}:{PORT}", "rows": rows}

    def run(self) -> dict[str, Any]:
        self.root_before = root_state()
        self.load_before = os.getloadavg()
        self.setup()
        self.populate()
        cli = self.sample_cli()
        api = self.sample_api() if self.args.api else {}
        connect = self.sample_connect()
        return self.report(cli, connect, api)

    def close(self) -> list[str]:
        problems: list[str] = []
        for proc in self.children:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()
        for daemon in self.lxds.values():
            try:
                problems += daemon.stop()
            except Exception as err:  # noqa: BLE001 - keep cleaning up
                problems.append(f"lxd@{daemon.level}: {err}")
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        left = [n for n in os.listdir("/run/netns") if n.startswith(f"{NS_PREFIX}{self.tag}-")] \
            if os.path.isdir("/run/netns") else []  # fmt: skip
        if left:
            problems.append(f"namespaces left behind: {' '.join(left)}")
        mounts = Path("/proc/mounts").read_text()
        if self.tmp in mounts:
            problems.append(f"mounts left under {self.tmp}; not removed")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems

    # report ------------------------------------------------------------------------------------
    def report(self, cli: dict[tuple[str, int], list[dict[str, float]]],
               connect: dict[str, Any],
               api: dict[tuple[str, int], list[dict[str, float]]]) -> dict[str, Any]:  # fmt: skip
        rows: list[dict[str, Any]] = []
        for (side, level), samples in [*cli.items(), *api.items()]:
            create = [s["create"] + s["port"] for s in samples]
            pair = [s["create"] + s["port"] + s["delete"] for s in samples]
            row: dict[str, Any] = {"side": side, "forwards": level, "n": len(samples),
                   "create_cmd_p50_ms": round(percentile([s["create"] for s in samples], 50), 1),
                   "port_add_p50_ms": round(percentile([s["port"] for s in samples], 50), 1),
                   "create_p50_ms": round(percentile(create, 50), 1),
                   "delete_p50_ms": round(percentile([s["delete"] for s in samples], 50), 1),
                   "pair_p50_ms": round(percentile(pair, 50), 1),
                   "pair_p90_ms": round(percentile(pair, 90), 1),
                   "pair_min_ms": round(min(pair), 1)}  # fmt: skip
            rows.append(row)
        by = {(r["side"], r["forwards"]): r for r in rows}
        api_rows = [r for r in rows if (r["side"], r["forwards"]) in api]
        rows = [r for r in rows if (r["side"], r["forwards"]) in cli]
        targets: list[dict[str, Any]] = []
        info: list[dict[str, Any]] = []
        levels = sorted(self.nodes)
        top = levels[-1]
        for what in ("create", "delete", "pair"):
            g = by[("podnet", top)][f"{what}_p50_ms"] / by[("podnet", 0)][f"{what}_p50_ms"]
            entry = {"target": f"podnet {what} p50 at {top} forwards <= 1.2x at 0",
                     "value": round(g, 3), "limit": 1.2, "pass": g <= 1.2}  # fmt: skip
            (targets if what == "pair" else info).append(entry)
        c = {r["forwards"]: r for r in connect["rows"]}
        g = c[top]["p50_us"] / c[1]["p50_us"]
        targets.append({"target": f"connect p50 at {top} forwards <= 1.1x at 1",
                        "value": round(g, 3), "limit": 1.1, "pass": g <= 1.1})  # fmt: skip
        ratios = []
        for level in sorted(self.lxds):
            if ("podnet", level) not in by:
                continue
            p = by[("podnet", level)]
            for side in ("lxd", "lxd-yaml"):
                x = by[(side, level)]
                ratios.append({"forwards": level, "vs": side,
                               "create": round(p["create_p50_ms"] / x["create_p50_ms"], 3),
                               "delete": round(p["delete_p50_ms"] / x["delete_p50_ms"], 3),
                               "pair": round(p["pair_p50_ms"] / x["pair_p50_ms"], 3)})  # fmt: skip
        if self.lxds:
            lv = 1000 if (("lxd", 1000) in by and ("podnet", 1000) in by) else \
                max(lv for lv in self.lxds if ("podnet", lv) in by)  # fmt: skip
            for side, label in (("lxd", "lxc create + port add"),
                                ("lxd-yaml", "lxc create with the port in YAML")):  # fmt: skip
                r = by[("podnet", lv)]["create_p50_ms"] / by[(side, lv)]["create_p50_ms"]
                entry = {"target": f"podnet create / LXD create ({label}) at {lv} forwards < 1",
                         "value": round(r, 3), "limit": 1.0, "pass": r < 1.0}  # fmt: skip
                (targets if side == "lxd" else info).append(entry)
        for level in self.args.api_levels if api else ():
            if ("podnet-api", level) in by and ("lxd-api", level) in by:
                p, x = by[("podnet-api", level)], by[("lxd-api", level)]
                ratios.append({"forwards": level, "vs": "lxd-api", "side": "podnet-api",
                               "create": round(p["create_p50_ms"] / x["create_p50_ms"], 3),
                               "delete": round(p["delete_p50_ms"] / x["delete_p50_ms"], 3),
                               "pair": round(p["pair_p50_ms"] / x["pair_p50_ms"], 3)})
                r = p["create_p50_ms"] / x["create_p50_ms"]
                info.append({"target": f"podnet API create / LXD API create at {level} forwards",
                             "value": round(r, 3), "limit": 1.0, "pass": r < 1.0})
        return {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {"kernel": platform.release(), "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "load_before": [round(x, 2) for x in self.load_before],
                        "load_after": [round(x, 2) for x in os.getloadavg()]},
            "settings": {"levels": levels, "lxd_levels": sorted(self.lxds),
                         "samples": self.args.samples, "warmup": self.args.warmup,
                         "connects": self.args.connects, "podnet": self.podnet_source,
                         "api_levels": self.args.api_levels if self.args.api else [],
                         "lxd": getattr(self, "lxd_version", None)},
            "cli": sorted(rows, key=lambda r: (("podnet", "lxd", "lxd-yaml").index(r["side"]),
                                               r["forwards"])),
            "connect": connect,
            "api": sorted(api_rows, key=lambda r: (r["forwards"], r["side"])),
            "ratios": ratios,
            "targets": targets,
            "info": info,
            "phases_s": {"populate": round(self.populate_s, 1), "cli": round(self.cli_s, 1),
                         "total": round(time.monotonic() - self.started, 1)},
            "root_namespace_changed": None,  # filled in after the cleanup
        }  # fmt: skip

    def check_root(self, report: dict[str, Any]) -> None:
        """After the cleanup: the root namespace's links, addresses and nft tables as before."""
        after = root_state()
        report["root_namespace_changed"] = {
            k: {"before": self.root_before[k], "after": after[k]}
            for k in self.root_before
            if self.root_before[k] != after[k]
        }


SIDE_NAMES = {"podnet": "podnet", "lxd": "lxd", "lxd-yaml": "lxd (yaml)",
              "podnet-api": "podnet API", "lxd-api": "lxd API", "podnet-lxc": "lxc→podnet"}


def render(report: dict[str, Any]) -> str:
    s, m = report["settings"], report["machine"]
    lines = [
        f"network forwards: podnet vs LXD — {report['date']}, kernel {m['kernel']}, "
        f"{m['cpus']} CPUs, load {m['load_before'][0]} → {m['load_after'][0]}",
        f"podnet: {s['podnet']}",
        f"lxd: {s['lxd'] or 'not run'}",
        "",
        f"1. CLI, one forward with one port (n={s['samples']} per cell after {s['warmup']} "
        "warm-up rounds; p50 ms; every command timed whole, `ip netns exec` included)",
        "   create = `forward create` + `forward port add`; pair = create + `forward delete`;",
        "   lxd (yaml) = `lxc network forward create` with the port in YAML on stdin",
        f"{'side':<12}{'forwards':>9}{'create':>9}{'(cmd':>8}{'+ port)':>9}{'delete':>9}"
        f"{'pair':>9}{'pair p90':>10}{'pair min':>10}",
    ]
    for r in report["cli"]:
        port = f"{r['port_add_p50_ms']:>8.1f})" if r["side"] != "lxd-yaml" else f"{'-':>8})"
        lines.append(
            f"{SIDE_NAMES[r['side']]:<12}{r['forwards']:>9}{r['create_p50_ms']:>9.1f}"
            f"{'(' + format(r['create_cmd_p50_ms'], '.1f'):>8}{port:>9}{r['delete_p50_ms']:>9.1f}"
            f"{r['pair_p50_ms']:>9.1f}{r['pair_p90_ms']:>10.1f}{r['pair_min_ms']:>10.1f}"
        )
    if report["ratios"]:
        lines += ["", "podnet / LXD (p50):", f"{'forwards':>10}  {'vs':<12}{'create':>8}"
                  f"{'delete':>8}{'pair':>8}"]  # fmt: skip
        for r in report["ratios"]:
            vs = SIDE_NAMES[r["vs"]] + (" (API)" if r.get("side") == "podnet-api" else "")
            lines.append(f"{r['forwards']:>10}  {vs:<12}{r['create']:>7.2f}x"
                         f"{r['delete']:>7.2f}x{r['pair']:>7.2f}x")  # fmt: skip
    c = report["connect"]
    lines += ["", f"2. connect() through the forward port {c['listen']} (client namespace → node "
              f"→ pod; {s['connects']} connections per level, interleaved; µs)",
              f"{'forwards':>10}{'p50':>9}{'p90':>9}{'p99':>9}{'min':>9}"]  # fmt: skip
    for r in c["rows"]:
        lines.append(f"{r['forwards']:>10}{r['p50_us']:>9.1f}{r['p90_us']:>9.1f}"
                     f"{r['p99_us']:>9.1f}{r['min_us']:>9.1f}")  # fmt: skip
    if report["api"]:
        lines += ["", "4. REST API: POST a forward with its port, DELETE it (p50 ms; one "
                  "kept-alive connection per side);",
                  "   lxc→podnet = the lxc client against podnetctl serve (YAML create + delete, "
                  "whole processes)",
                  f"{'side':<14}{'forwards':>9}{'create':>9}{'delete':>9}{'pair':>9}"
                  f"{'pair p90':>10}{'pair min':>10}"]  # fmt: skip
        for r in report["api"]:
            lines.append(f"{SIDE_NAMES[r['side']]:<14}{r['forwards']:>9}{r['create_p50_ms']:>9.1f}"
                         f"{r['delete_p50_ms']:>9.1f}{r['pair_p50_ms']:>9.1f}"
                         f"{r['pair_p90_ms']:>10.1f}{r['pair_min_ms']:>10.1f}")  # fmt: skip
    lines += ["", "targets (issue 8, item 8):"]
    for t in report["targets"]:
        lines.append(f"  {'PASS' if t['pass'] else 'MISS'}  {t['target']}: {t['value']:.2f}x")
    if report["info"]:
        lines.append("also:")
        for t in report["info"]:
            lines.append(f"        {t['target']}: {t['value']:.2f}x")
    p = report["phases_s"]
    lines += ["", f"time: populate {p['populate']} s, CLI sampling {p['cli']} s, "
              f"total {p['total']} s"]  # fmt: skip
    changed = report["root_namespace_changed"]
    lines.append(
        "root namespace (links, addresses, nft tables): "
        + ("unchanged" if not changed else f"CHANGED: {', '.join(changed)}")
    )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: levels 0,20,200 (LXD 0,20), 5 samples, 1 warm-up, 50 connects",
    )
    p.add_argument(
        "--levels",
        default="0,100,1000,10000",
        help="podnet: existing forwards per node, must include 0 (0,100,1000,10000)",
    )
    p.add_argument(
        "--lxd-levels", default="0,100,1000", help="LXD: existing forwards per daemon (0,100,1000)"
    )
    add_sampling_options(p, 30, "timed rounds per cell (30)")
    p.add_argument("--connects", type=int, default=400, help="timed connections per level (400)")
    p.add_argument("--no-lxd", dest="lxd", action="store_false", help="skip LXD even if installed")
    p.add_argument("--api-levels", default="0,1000",
                   help="REST API part at these levels (each must also be a --levels / "
                   "--lxd-levels level to run on that side) (0,1000)")  # fmt: skip
    p.add_argument("--no-api", dest="api", action="store_false", help="skip the REST API part")
    p.add_argument("--commit", metavar="REV", help="measure src/podnet as committed in REV")
    p.add_argument(
        "--live",
        action="store_true",
        help="run the work tree as it is (no snapshot; edits during the run count)",
    )
    add_output_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.levels, args.lxd_levels, args.api_levels = "0,20,200", "0,20", "0,20"
        args.samples, args.warmup, args.connects = 5, 1, 50
    try:
        args.levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
        args.lxd_levels = sorted({int(x) for x in args.lxd_levels.split(",") if x.strip()})
        args.api_levels = sorted({int(x) for x in args.api_levels.split(",") if x.strip()})
    except ValueError:
        p.error("--levels, --lxd-levels, --api-levels: comma-separated integers")
    if 0 not in args.levels or len(args.levels) < 2 or max(args.levels) > 60000:
        p.error("--levels: 0 and at least one more level, at most 60000")
    if args.lxd_levels and (min(args.lxd_levels) < 0 or max(args.lxd_levels) > 60000):
        p.error("--lxd-levels: values in 0-60000")
    if args.samples < 1 or args.warmup < 0 or args.connects < 1:
        p.error("--samples >= 1, --warmup >= 0, --connects >= 1")
    if args.commit and args.live:
        p.error("--commit and --live exclude each other")
    return args


def _preflight(args: argparse.Namespace) -> None:
    need_root_and_tools("bench_forwards", ("ip", "nft", "git"))
    for path in (VENV_PYTHON, PODNETCTL, PODNET_PLUGIN):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench_forwards: {path} missing (create the venv, pip install -e .)")
    if args.lxd and not (shutil.which("lxd") and shutil.which("lxc")):
        args.lxd = False
    if not args.lxd:
        args.lxd_levels = []


def main(argv: list[str]) -> int:
    if argv[:1] == ["--connect-driver"]:
        return connect_driver_main()
    args = parse_args(argv)
    _preflight(args)
    end_on_signals()
    bench = Bench(args)
    report = None
    status = 0
    try:
        report = bench.run()
    except KeyboardInterrupt:
        bench.say("interrupted; cleaning up")
        status = 130
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as err:
        bench.say(f"bench_forwards: error: {err}")
        status = 1
    finally:
        # A second signal must not cut the cleanup short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for problem in bench.close():
            bench.say(f"warning: {problem}")
        if status:
            bench.say("cleaned up")
    if report is None:
        return status
    bench.check_root(report)
    return finish(report, args, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
