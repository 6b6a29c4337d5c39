#!/usr/bin/env python3
"""``podnetctl agent`` at scale: how long a Node change in the API takes to become a route on a
node, and what the agent costs while nothing changes. Run as root::

    .venv/bin/python bench/bench_agent.py [--nodes 100,1000] [--changes 20] [--idle 10] [--json]

For each level, a node namespace runs the real agent against the tests' stand-in API server
(``tests/support/kubeapi.py``, listening in a namespace of its own on a veth to the node). The
API holds the node's own Node and ``level - 1`` others, whose InternalIPs are on the node's
link (so every one of them is routed). Once the agent routes all of them:

* idle: over ``--idle`` seconds with no change, the agent's CPU time (``/proc/<pid>/stat``,
  utime + stime, as a percentage of one CPU) and its RSS at the end (``VmRSS``);
* latency: ``--changes`` times, one other Node's podCIDR is changed in the API, and the time is
  taken from the update until ``ip monitor route`` in the node prints the new route (wall clock,
  ms; p50 / p90 / max): the watch event, the agent's sync and the kernel's change.

Everything is made in namespaces of this process and removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from kubeapi import KubeAPI, node  # noqa: E402

PODNETCTL = str(REPO / ".venv" / "bin" / "podnetctl")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def lan_addr(i: int) -> str:
    return f"172.16.{i // 250}.{i % 250 + 1}"


def pod_cidr(i: int, generation: int = 0) -> str:
    """Node ``i``'s podCIDR; another /24 for each ``generation`` of changes."""
    n = i + generation * 2000
    return f"10.{64 + n // 256}.{n % 256}.0/24"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def agent_pid(wrapper: subprocess.Popen[bytes]) -> int:
    """The agent's own pid (``ip netns exec`` execs it, so it is the wrapper's)."""
    return wrapper.pid


class Level:
    """One measured node with ``nodes`` Nodes in the API."""

    def __init__(self, nodes: int, tmp: Path) -> None:
        self.nodes = nodes
        self.tag = uuid.uuid4().hex[:6]
        self.node_ns = f"pnb-agent-{self.tag}-node"
        self.api_ns = f"pnb-agent-{self.tag}-api"
        self.tmp = tmp / f"level-{nodes}"
        self.tmp.mkdir()
        self.api: KubeAPI | None = None
        self.agent: subprocess.Popen[bytes] | None = None
        self.monitor: subprocess.Popen[str] | None = None

    def setup(self) -> None:
        for ns in (self.node_ns, self.api_ns):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "eth0", "netns", self.node_ns, "type", "veth", "peer", "name",
           "eth0", "netns", self.api_ns)
        sh("ip", "-n", self.node_ns, "addr", "add", f"{lan_addr(0)}/16", "dev", "eth0")
        sh("ip", "-n", self.api_ns, "addr", "add", "172.16.255.254/16", "dev", "eth0")
        for ns in (self.node_ns, self.api_ns):
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        self.api = KubeAPI("172.16.255.254", 6443, netns=self.api_ns)
        self.api.start()
        self.api.create(node("n0", [pod_cidr(0)], [lan_addr(0)]))
        for i in range(1, self.nodes):
            self.api.create(node(f"n{i}", [pod_cidr(i)], [lan_addr(i)]))
        kubeconfig = self.api.kubeconfig(str(self.tmp / "kubeconfig"))
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "PODNET_CONF": str(self.tmp / "podnet.conf"), "PODNET_DATA_DIRS": "/tmp/*"}
        log = open(self.tmp / "agent.log", "wb")  # noqa: SIM115 - kept open for the process
        self.agent = subprocess.Popen(
            ["ip", "netns", "exec", self.node_ns, "env", "-i",
             *[f"{k}={v}" for k, v in env.items()], PODNETCTL, "agent", "--kubeconfig", kubeconfig,
             "--node-name", "n0", "--cni-conf-dir", str(self.tmp / "net.d"),
             "--data-dir", str(self.tmp / "data"), "--metrics-port", "0"],
            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip

    def routes(self) -> int:
        out = sh("ip", "-n", self.node_ns, "-j", "-4", "route", "show", "proto", "113")
        return len(json.loads(out or "[]"))

    def wait_converged(self, timeout: float = 600) -> float:
        start = time.monotonic()
        while self.routes() < self.nodes - 1:
            assert self.agent is not None
            if self.agent.poll() is not None or time.monotonic() - start > timeout:
                raise RuntimeError(f"agent did not route {self.nodes - 1} Nodes: "
                                   f"{(self.tmp / 'agent.log').read_text()[-2000:]}")
            time.sleep(0.5)
        return time.monotonic() - start

    def idle(self, seconds: float) -> tuple[float, int]:
        assert self.agent is not None
        pid = agent_pid(self.agent)
        before = cpu_seconds(pid)
        time.sleep(seconds)
        return 100 * (cpu_seconds(pid) - before) / seconds, rss_kib(pid)

    def latencies(self, changes: int) -> list[float]:
        """ms from each podCIDR change in the API until the node's ``ip monitor route`` prints
        the new route (a reader thread stamps each line as it arrives)."""
        assert self.api is not None
        self.monitor = subprocess.Popen(["ip", "-n", self.node_ns, "-4", "monitor", "route"],
                                        stdout=subprocess.PIPE, text=True)  # fmt: skip
        lines: queue.Queue[tuple[float, str]] = queue.Queue()

        def read() -> None:
            assert self.monitor is not None and self.monitor.stdout is not None
            for line in self.monitor.stdout:
                lines.put((time.monotonic(), line))

        threading.Thread(target=read, daemon=True).start()
        time.sleep(0.5)
        out = []
        for k in range(changes):
            i = 1 + (k * 7919) % (self.nodes - 1)
            new = pod_cidr(i, generation=k + 1)
            start = time.monotonic()
            self.api.update(node(f"n{i}", [new], [lan_addr(i)]))
            while True:
                try:
                    stamp, line = lines.get(timeout=30)
                except queue.Empty:
                    log = (self.tmp / "agent.log").read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"no route for {new} within 30 s; "
                                       f"agent log: {log}") from None
                if line.startswith(new):
                    out.append((stamp - start) * 1000)
                    break
            time.sleep(0.2)
        return out

    def close(self) -> None:
        for proc in (self.agent, self.monitor):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.api is not None:
            self.api.stop()
        for ns in (self.node_ns, self.api_ns):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="100,1000", help="Nodes in the API per level (100,1000)")
    p.add_argument("--changes", type=int, default=20, help="podCIDR changes timed per level")
    p.add_argument("--idle", type=float, default=10.0, help="seconds of idle measured")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_agent: run as root (it makes network namespaces)")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="podnet-bench-agent-") as tmp:
        for level in [int(x) for x in args.nodes.split(",")]:
            run = Level(level, Path(tmp))
            try:
                run.setup()
                converge = run.wait_converged()
                cpu, rss = run.idle(args.idle)
                lat = run.latencies(args.changes)
            finally:
                run.close()
            results.append({"nodes": level, "converge_s": round(converge, 2),
                            "idle_cpu_pct": round(cpu, 3), "rss_mib": round(rss / 1024, 1),
                            "change_to_route_ms": {"p50": round(statistics.median(lat), 1),
                                                   "p90": round(pct(lat, 90), 1),
                                                   "max": round(max(lat), 1), "n": len(lat)}})
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'nodes':>6} {'first sync s':>13} {'idle CPU %':>11} {'RSS MiB':>8} "
              f"{'change→route p50 / p90 / max ms':>32}")
        for r in results:
            lat = r["change_to_route_ms"]
            print(f"{r['nodes']:>6} {r['converge_s']:>13} {r['idle_cpu_pct']:>11} "
                  f"{r['rss_mib']:>8} {lat['p50']:>14} / {lat['p90']} / {lat['max']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
