"""Soak: many ADD/DEL of the installed podnet plugin, many in parallel (issue 7, items 5 and 8).

    .venv/bin/python bench/soak.py [--ops 1000] [--parallel 32] [--keep-going]

As root. Everything happens in a node namespace of its own (removed at the end, also on
failure or Ctrl-C): ``--parallel`` workers each create a pod namespace, ADD it (one tcp
hostPort, IPv4+IPv6) through the plugin file ``podnetctl install`` writes (``#!<python> -IS``),
DEL it, remove the namespace, and start over, until ``--ops`` calls (ADDs + DELs) are done. A
failed DEL is retried like a runtime would (up to 5 times); a failed ADD is followed by a DEL.

Printed: p50/p99/max latency of ADD and DEL, the count of each error code, and the invariants —
no address held by two live pods at any time (from the ADD results: a pod's address is counted
from the end of its ADD to the start of its DEL, so an overlap is a real duplicate), and after
the last DEL no row in pods/portmap_entries, no ``pn`` link, no element in table inet podnet,
``PRAGMA integrity_check`` ok. Without ``--keep-going`` the run stops scheduling new pods at the
first error. Exit status 0 when there was no error and every invariant holds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

VENV_BIN = Path(os.environ.get("PODNET_BIN", str(Path(sys.executable).parent)))
RANGES = ["10.244.0.0/16", "fd00:10:244::/64"]
BASE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
CALL_TIMEOUT = 120


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=60)


class Soak:
    def __init__(self, ops: int, parallel: int, keep_going: bool) -> None:
        self.ops, self.parallel, self.keep_going = ops, parallel, keep_going
        self.tag = uuid.uuid4().hex[:6]
        self.node = f"pnsoak-{self.tag}-node"
        self.tmp = Path(tempfile.mkdtemp(prefix="podnet-soak-"))
        self.data = self.tmp / "data"
        self.plugin = ""
        self.lock = threading.Lock()
        self.started_ops = 0
        self.stop = False
        self.latency: dict[str, list[float]] = {"ADD": [], "DEL": []}
        self.codes: Counter[str] = Counter()
        self.errors: list[str] = []
        self.live: dict[str, str] = {}  # address -> container
        self.duplicates: list[str] = []
        self.namespaces: set[str] = set()
        self.max_live = 0
        self.threads: list[threading.Thread] = []

    # -- setup and teardown ----------------------------------------------------------------
    def setup(self) -> None:
        sh(
            str(VENV_BIN / "podnetctl"),
            "install",
            "--bin-dir",
            str(self.tmp / "bin"),
            "--conf-dir",
            str(self.tmp / "conf"),
        )
        self.plugin = str(self.tmp / "bin" / "podnet")
        first = Path(self.plugin).read_text().splitlines()[0]
        assert first.endswith(" -IS"), first
        sh("ip", "netns", "add", self.node)
        self.namespaces.add(self.node)
        sh("ip", "-n", self.node, "link", "set", "lo", "up")
        for scope in ("all", "default"):
            sh(
                "ip",
                "netns",
                "exec",
                self.node,
                "sysctl",
                "-qw",
                f"net.ipv6.conf.{scope}.accept_dad=0",
            )

    def teardown(self) -> None:
        self.stop = True
        for t in self.threads:  # let calls in flight finish before their namespaces go
            t.join(timeout=CALL_TIMEOUT)
        for ns in sorted(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        sh("rm", "-rf", str(self.tmp), check=False)
        from podnet.reconcile import prune_claims

        prune_claims(str(self.tmp))  # the node's table owner record under /run/podnet/tables

    # -- one call ----------------------------------------------------------------------------
    def call(self, command: str, cid: str, netns: str, port: int) -> tuple[int, Any, float]:
        conf = {
            "cniVersion": "1.1.0",
            "name": "soak",
            "type": "podnet",
            "ranges": RANGES,
            "dataDir": str(self.data),
            "capabilities": {"portMappings": True},
            "runtimeConfig": {
                "portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]
            },
        }
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": f"/run/netns/{netns}",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": "/usr/lib/cni",
            "PATH": BASE_PATH,
            "PODNET_DATA_DIRS": str(self.data),  # the administrator allows the soak's data dir
        }
        argv = [
            "ip",
            "netns",
            "exec",
            self.node,
            "env",
            "-i",
            *[f"{k}={v}" for k, v in env.items()],
            self.plugin,
        ]
        started = time.monotonic()
        proc = subprocess.run(
            argv, input=json.dumps(conf), capture_output=True, text=True, timeout=CALL_TIMEOUT
        )
        took = time.monotonic() - started
        out = proc.stdout.strip()
        try:
            answer = json.loads(out) if out else None
        except ValueError:
            answer = out
        return proc.returncode, answer, took

    def record(self, command: str, cid: str, rc: int, answer: Any, took: float) -> None:
        with self.lock:
            self.latency[command].append(took)
            if rc == 0:
                return
            code = (
                str(answer.get("code")) if isinstance(answer, dict) else f"exit {rc}, no CNI error"
            )
            self.codes[f"{command} code {code}"] += 1
            msg = answer.get("msg") if isinstance(answer, dict) else answer
            self.errors.append(f"{command} {cid}: code {code}: {msg}")
            if not self.keep_going:
                self.stop = True

    # -- a worker ----------------------------------------------------------------------------
    def take_op(self, n: int) -> bool:
        with self.lock:
            if self.stop or self.started_ops + n > self.ops:
                return False
            self.started_ops += n
            return True

    def worker(self, w: int) -> None:
        """Pods one after another, each ADDed before the previous one is DELeted, so every
        worker keeps one or two pods live (32 workers: 32-64 live pods) and an address given
        twice shows as an overlap."""
        seq = 0
        previous: tuple[str, str, int, list[str]] | None = None
        while self.take_op(2):
            pod = self.add(w, seq)
            seq += 1
            if previous is not None:
                self.delete(*previous)
            previous = pod
        if previous is not None:
            self.delete(*previous)

    def add(self, w: int, seq: int) -> tuple[str, str, int, list[str]]:
        cid = f"soak-{w}-{seq}"
        ns = f"pnsoak-{self.tag}-{w}-{seq}"
        port = 30000 + 2 * w + seq % 2  # distinct among the live pods
        sh("ip", "netns", "add", ns)
        with self.lock:
            self.namespaces.add(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        for scope in ("all", "default"):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{scope}.accept_dad=0")
        rc, answer, took = self.call("ADD", cid, ns, port)
        self.record("ADD", cid, rc, answer, took)
        addresses: list[str] = []
        if rc == 0 and isinstance(answer, dict):
            addresses = [ip["address"].split("/")[0] for ip in answer.get("ips", [])]
            with self.lock:
                for a in addresses:
                    if a in self.live:
                        self.duplicates.append(f"{a} given to {cid} while {self.live[a]} holds it")
                    self.live[a] = cid
                self.max_live = max(self.max_live, len(set(self.live.values())))
        return cid, ns, port, addresses

    def delete(self, cid: str, ns: str, port: int, addresses: list[str]) -> None:
        with self.lock:  # the address counts as held until the DEL starts
            for a in addresses:
                if self.live.get(a) == cid:
                    del self.live[a]
        for attempt in range(5):
            rc, answer, took = self.call("DEL", cid, ns, port)
            self.record("DEL", cid, rc, answer, took)
            if rc == 0:
                break
            time.sleep(0.2 * (attempt + 1))
        sh("ip", "netns", "del", ns, check=False)
        with self.lock:
            self.namespaces.discard(ns)

    # -- the end state ----------------------------------------------------------------------
    def invariants(self) -> list[tuple[str, bool, str]]:
        out = []
        out.append(
            (
                "no address held by two live pods",
                not self.duplicates,
                "; ".join(self.duplicates[:5]),
            )
        )
        db = self.data / "podnet.db"
        rows = {}
        integrity = "none"
        if db.exists():
            conn = sqlite3.connect(db, timeout=30)
            try:
                for table in ("pods", "portmap_entries"):
                    rows[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                integrity = "; ".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
            finally:
                conn.close()
        out.append(("no row in pods/portmap_entries", not any(rows.values()), str(rows)))
        links = json.loads(sh("ip", "-n", self.node, "-j", "link", "show").stdout or "[]")
        pn = [link["ifname"] for link in links if link["ifname"].startswith("pn")]
        out.append(("no pn link", not pn, str(pn[:5])))
        listing = sh(
            "ip",
            "netns",
            "exec",
            self.node,
            "nft",
            "-j",
            "list",
            "table",
            "inet",
            "podnet",
            check=False,
        )
        elements = []
        if listing.returncode == 0:
            for item in json.loads(listing.stdout)["nftables"]:
                if "map" in item:
                    elements += item["map"].get("elem", [])
        out.append(("no element in table inet podnet", not elements, json.dumps(elements[:3])))
        out.append(("PRAGMA integrity_check ok", integrity == "ok", integrity))
        return out

    def run(self) -> int:
        started = time.monotonic()
        self.threads = [
            threading.Thread(target=self.worker, args=(w,), daemon=True)
            for w in range(self.parallel)
        ]
        for t in self.threads:
            t.start()
        for t in self.threads:
            t.join()
        wall = time.monotonic() - started
        done = sum(len(v) for v in self.latency.values())
        adds, dels = len(self.latency["ADD"]), len(self.latency["DEL"])
        print(
            f"podnet soak: {done} calls ({adds} ADD, {dels} DEL, "
            f"DEL retries included), {self.parallel} in parallel, {wall:.1f} s, "
            f"up to {self.max_live} pods live at once"
        )
        for command, values in self.latency.items():
            if values:
                v = sorted(values)
                print(
                    f"  {command}: p50 {1000 * pct(v, 50):.1f} ms, p99 {1000 * pct(v, 99):.1f} ms, "
                    f"max {1000 * v[-1]:.1f} ms"
                )
        print(f"  errors: {dict(self.codes) if self.codes else 'none'}")
        for e in self.errors[:10]:
            print(f"    {e}")
        if len(self.errors) > 10:
            print(f"    … {len(self.errors) - 10} more")
        ok = not self.errors
        if self.stop:
            print("  stopped at the first error (use --keep-going to run on)")
        print("  invariants:")
        for name, holds, detail in self.invariants():
            print(f"    {'ok  ' if holds else 'FAIL'} {name}" + ("" if holds else f": {detail}"))
            ok = ok and holds
        return 0 if ok else 1


def pct(sorted_values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``sorted_values``."""
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ops", type=int, default=1000, help="ADD and DEL calls in all (default 1000)"
    )
    parser.add_argument(
        "--parallel", type=int, default=32, help="calls in flight at once (default 32)"
    )
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the first error")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("must run as root (it creates network namespaces)")
    soak = Soak(args.ops, args.parallel, args.keep_going)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        soak.setup()
        return soak.run()
    except KeyboardInterrupt:
        return 130
    finally:
        soak.teardown()


if __name__ == "__main__":
    sys.exit(main())
