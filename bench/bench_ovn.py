#!/usr/bin/env python3
"""OVN networks (issue 16): ADD and DEL of a pod with its port wired, and forward create and
delete, at 0 and at 1,000 existing ports and forwards.

Run as root (a benchmark, not a test)::

    .venv/bin/python bench/bench_ovn.py [--levels 0,1000] [--samples 30] [--rounds 2]
        [--settle] [--paired] [--central-cpu N] [--json]

Method (docs/benchmarks.md "OVN networks" has the figures):

* An OVN deployment in namespaces of its own (:class:`podnet.cli.demo.ovnlab.OvnLab`, two
  nodes ``pnbo-<tag>-n1|n2``, central services on n1, OVS userspace datapath), an uplink and
  one OVN network ``benchovn`` (10.250.0.1/20). Nothing outside those namespaces and a
  temporary directory is touched; all of it is removed at the end, also on failure or Ctrl-C.
* A level of N: the network's internal switch holds N ports besides the sampled pod's (logical
  switch ports with ``"<MAC> dynamic"`` addresses, as pods of other nodes look in the NB: one
  NB transaction, then ``ovn-nbctl --wait=hv sync``), and the cluster holds N OVN forwards on
  the network, made one by one through podnet's own code (so the registry and the load
  balancers are what ``forward create`` would make).
* Timed on n2 by a driver (this script re-executed under ``ip netns exec`` with n2's OVS
  environment, so ``ip netns exec`` is never inside a timed region): the plugin file ``podnetctl
  install`` writes, exec to exit, for ADD (northd's address, veth, the OVS port, until
  ovn-controller marks it ``ovn-installed``) and DEL; then ``podnetctl network forward create``
  and ``delete`` of one more whole-address forward (the whole CLI process, NB round trips
  included). Each sample uses a fresh pod namespace and listen address.
* ``--rounds 2`` goes 0, 1,000, then 1,000, 0 (the fillers removed again) and pools each
  level's samples: the machine's drift between the levels (minutes apart; forward create and
  delete, whose path does not change with the level, moved 0.92-1.37x between single runs)
  then weighs on both alike.
* ``--paired`` (with ``--rounds 6 --samples 5``, say): two labs instead of one, the first at
  the lowest level and the second (underlay ``192.168.246.0/24``) at the highest, each filled
  once; then batches on each in turn, the order alternating, each lab quiet (untimed: its
  northd and chassis caught up) before its batch, so that neither pays for the other's
  trailing recompute. The levels are then seconds apart instead of minutes, and the machine's
  drift weighs on both alike. Both labs run all along: a level-0 sample shares the machine with
  an idle lab of 1,000 ports, and the other way round.
* ``--central-cpu 1``: the lab's central services (NB and SB servers, ovn-northd) and n1's
  chassis pinned to CPU 1, n2's daemons and the timed calls to the other CPUs (``taskset``), as
  on a cluster whose central nodes are other machines: northd's recompute after each change
  (76-104 ms at 1,000) then no longer shares a CPU with the next call.
* ``--settle``: before each timed call the driver waits, untimed, until ovn-northd and every
  chassis have caught up with the NB (``ovn-nbctl --wait=hv sync``). Without it the calls run
  back to back, and on this machine's shared vCPUs each one also competes with northd's
  recompute of the call before it (76-104 ms at 1,000 ports and forwards), which on a real
  cluster runs on the central nodes. Both are reported in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (  # noqa: E402
    add_output_options,
    end_on_signals,
    failed,
    finish,
    need_root_and_tools,
    percentile,
)

NETWORK, UPLINK = "benchovn", "benchup"
UPLINK_KEYS = {
    "parent": "ext0",
    "ipv4.gateway": "203.0.113.254/24",
    "ipv4.ovn.ranges": "203.0.113.10-203.0.113.19",
    "ipv4.routes": "198.18.0.0/15",
    "ovn.ingress_mode": "routed",
}
SUBNET = 247  # the lab's underlay 192.168.247.0/24 (tests 249, demo 248)
PODNETCTL = str(Path(sys.executable).parent / "podnetctl")


def _filler_listen(i: int) -> str:
    return f"198.18.{i // 250}.{i % 250 + 1}"


def _sample_listen(i: int) -> str:
    return f"198.19.{i // 250}.{i % 250 + 1}"


# -- the driver, inside n2 ------------------------------------------------------------------------
def drive(spec: dict[str, Any]) -> dict[str, list[float]]:
    """ADD then DEL one pod per sample, then forward create and delete; milliseconds."""
    out: dict[str, list[float]] = {"add": [], "del": [], "fwd_create": [], "fwd_delete": []}
    conf = json.dumps(spec["conf"]).encode()

    def settle() -> None:
        if spec["settle"]:
            sync = ["ovn-nbctl", "--timeout=60", f"--db={spec['nb']}", "--wait=hv", "sync"]
            subprocess.run(sync, check=True, capture_output=True)

    base = {**os.environ, "CNI_IFNAME": "eth0", "CNI_PATH": spec["bin"]}
    for i, netns in enumerate(spec["netns"]):
        for verb in ("ADD", "DEL"):
            env = {
                **base,
                "CNI_COMMAND": verb,
                "CNI_CONTAINERID": f"bench-{spec['level']}-{i}",
                "CNI_NETNS": f"/run/netns/{netns}",
            }
            settle()
            started = time.perf_counter()
            done = subprocess.run([spec["plugin"]], input=conf, env=env, capture_output=True)
            took = (time.perf_counter() - started) * 1000
            if done.returncode != 0:
                raise RuntimeError(f"{verb} {i}: {done.stdout.decode()} {done.stderr.decode()}")
            out["add" if verb == "ADD" else "del"].append(took)
    ctl = [PODNETCTL, "network", "forward"]
    for i in range(len(spec["netns"])):
        listen = _sample_listen(spec["level"] + i)
        target = f"target_address=10.250.15.{i % 250 + 1}"
        for key, argv in (
            ("fwd_create", ["create", NETWORK, listen, target, "--data-dir", spec["data"]]),
            ("fwd_delete", ["delete", NETWORK, listen, "--data-dir", spec["data"]]),
        ):
            settle()
            started = time.perf_counter()
            done = subprocess.run([*ctl, *argv], capture_output=True, text=True)
            took = (time.perf_counter() - started) * 1000
            if done.returncode != 0:
                raise RuntimeError(f"forward {argv[0]} {listen}: {done.stderr.strip()}")
            out[key].append(took)
    return out


# -- the run ---------------------------------------------------------------------------------------
class Run:
    def __init__(self, samples: int, subnet: int = SUBNET) -> None:
        from podnet.cli.demo.ovnlab import OvnLab

        self.samples = samples
        self.tag = uuid.uuid4().hex[:4]
        self.tmp = Path(tempfile.mkdtemp(prefix="podnet-bench-ovn-"))
        self.lab = OvnLab(f"pnbo-{self.tag}", ("n1", "n2"), subnet=subnet, base=self.tmp)
        self.data = {n: str(self.tmp / f"data-{n}") for n in ("n1", "n2")}
        self.netns: list[str] = []
        self.ports = 0
        self.settle = False
        self.central_cpu: int | None = None
        self.forwards = 0

    def ctl(self, node: Any, *args: str) -> str:
        """``podnetctl ARGS --data-dir <node's>`` in ``node``'s namespace with its OVS."""
        argv = (PODNETCTL, *args, "--data-dir", self.data[node.name])
        done = self.lab.run(node.netns, *argv, env=node.env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"podnetctl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def setup(self) -> None:
        from podnet.runtime.installer import plugin_script

        self.lab.start()
        self.lab.outside(self.lab.nodes[0])
        n1, n2 = self.lab.nodes
        for node in (n1, n2):
            nb = self.lab.nb_unix if node is n1 else self.lab.nb_tcp
            self.ctl(node, "config", "set", "network.ovn.northbound_connection", nb, "--init")
        self.ctl(n1, "network", "create", UPLINK, "--type=physical",
                 f"parent={UPLINK_KEYS['parent']}", "--target", n1.name)  # fmt: skip
        self.ctl(
            n1,
            "network",
            "create",
            UPLINK,
            "--type=physical",
            *[f"{k}={v}" for k, v in UPLINK_KEYS.items() if k != "parent"],
        )
        self.ctl(
            n1,
            "network",
            "create",
            NETWORK,
            "--type=ovn",
            f"network={UPLINK}",
            "ipv4.address=10.250.0.1/20",
            "ipv6.address=none",
        )
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        self.plugin = bin_dir / "podnet"
        # the node allows its store: in the environment the calls inherit (no node config here)
        os.environ["PODNET_DATA_DIRS"] = str(self.data["n2"])
        self.plugin.write_text(plugin_script("podnet.plugins.podnet:main", None))
        self.plugin.chmod(0o755)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "compileall",
                "-q",
                str(Path(__import__("podnet").__file__).parent),
            ],
            check=True,
        )

    def fill(self, level: int) -> None:
        """``level`` filler ports in the switch and ``level`` forwards on the network."""
        from podnet.drivers.ovn import forwards as cluster_forwards
        from podnet.networks.model import Forward
        from podnet.ovn import nb as nbmod
        from podnet.ovn.ovsdb import Ovsdb, named, oset

        nb = Ovsdb([self.lab.nb_unix], "OVN_Northbound")
        ls = nbmod.names(NETWORK)["ls_int"]
        for start in range(self.ports, level, 100):  # 100 per transaction: one argv each
            chunk = range(start, min(start + 100, level))
            ops: list[dict[str, Any]] = [
                {
                    "op": "insert",
                    "table": "Logical_Switch_Port",
                    "uuid-name": f"p{i}",
                    "row": {
                        "name": f"bench-filler-{i}",
                        "addresses": oset(
                            [f"0a:58:00:{i >> 8 & 255:02x}:{i & 255:02x}:01 dynamic"]
                        ),
                    },
                }
                for i in chunk
            ]
            ops.append(
                {
                    "op": "mutate",
                    "table": "Logical_Switch",
                    "where": [["name", "==", ls]],
                    "mutations": [["ports", "insert", oset([named(f"p{i}") for i in chunk])]],
                }
            )
            nb.transact(ops)
        self.ports = max(self.ports, level)
        for i in range(self.forwards, level):
            forward = Forward(
                _filler_listen(i), config={"target_address": f"10.250.{8 + i // 250}.{i % 250 + 1}"}
            )
            cluster_forwards.create_forward(nb, NETWORK, forward)
        self.forwards = max(self.forwards, level)
        self.quiet()

    def shrink(self, level: int) -> None:
        """Back down to ``level`` filler ports and forwards (the later rounds of ``--rounds``)."""
        from podnet.drivers.ovn import forwards as cluster_forwards
        from podnet.ovn import nb as nbmod
        from podnet.ovn.ovsdb import Ovsdb, oset

        nb = Ovsdb([self.lab.nb_unix], "OVN_Northbound")
        for i in range(level, self.forwards):
            cluster_forwards.delete_forward(nb, NETWORK, _filler_listen(i))
        self.forwards = min(self.forwards, level)
        gone = [r["_uuid"] for r in nb.select("Logical_Switch_Port", [], ["_uuid", "name"])
                if str(r["name"]).startswith("bench-filler-")
                and int(str(r["name"]).rsplit("-", 1)[1]) >= level]  # fmt: skip
        for start in range(0, len(gone), 100):
            nb.transact(
                [
                    {
                        "op": "mutate",
                        "table": "Logical_Switch",
                        "where": [["name", "==", nbmod.names(NETWORK)["ls_int"]]],
                        "mutations": [["ports", "delete", oset(gone[start : start + 100])]],
                    }
                ]
            )
        self.ports = min(self.ports, level)
        self.quiet()

    def pin(self, central_cpu: int) -> None:
        """``--central-cpu``: the central services (NB, SB, ovn-northd) and n1's chassis on CPU
        ``central_cpu``; n2's daemons and the driver (:meth:`sample`) on the others."""
        self.central_cpu = central_cpu
        rest = self.node_cpus()[-1]
        n1, n2 = self.lab.nodes
        node = ("ovsdb-server.pid", "ovs-vswitchd.pid", "ovn-controller.pid")
        central = ("nb.pid", "sb.pid", "northd.pid")
        files = {
            str(central_cpu): [self.lab.central / f for f in central] + [n1.dir / f for f in node],
            rest: [n2.dir / f for f in node],
        }
        for cpus, pidfiles in files.items():
            for pidfile in pidfiles:
                pid = pidfile.read_text().split()[0]
                subprocess.run(["taskset", "-a", "-p", "-c", cpus, pid], check=True,
                               capture_output=True)  # fmt: skip

    def quiet(self) -> None:
        """Untimed: until this lab's ovn-northd and chassis have caught up with its NB."""
        self.lab.run(
            None, "ovn-nbctl", "--timeout=300", f"--db={self.lab.nb_unix}", "--wait=hv", "sync"
        )

    def sample(self, level: int, round_: int = 0) -> dict[str, list[float]]:
        netns = [f"pnbo-{self.tag}-p{level}r{round_}-{i}" for i in range(self.samples)]
        for ns in netns:
            self.netns.append(ns)
            subprocess.run(["ip", "netns", "add", ns], check=True)
        n2 = self.lab.nodes[1]
        spec = {
            "level": level,
            "netns": netns,
            "plugin": str(self.plugin),
            "bin": str(self.plugin.parent),
            "data": self.data["n2"],
            "nb": self.lab.nb_unix,
            "settle": self.settle,
            "conf": {
                "cniVersion": "1.1.0",
                "name": NETWORK,
                "type": "podnet",
                "network": NETWORK,
                "dataDir": self.data["n2"],
            },
        }
        env = [f"{k}={v}" for k, v in n2.env.items()]
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                n2.netns,
                "env",
                *env,
                *self.node_cpus(),
                sys.executable,
                os.path.abspath(__file__),
                "--driver",
                json.dumps(spec),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"driver at {level}: {done.stderr.strip()[-600:]}")
        result: dict[str, list[float]] = json.loads(done.stdout)
        return result

    def node_cpus(self) -> list[str]:
        """``taskset`` argv putting the driver on n2's CPUs (``--central-cpu``), else []."""
        if self.central_cpu is None:
            return []
        rest = [str(c) for c in sorted(os.sched_getaffinity(0)) if c != self.central_cpu]
        return ["taskset", "-c", ",".join(rest)]

    def cleanup(self) -> None:
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.lab.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def render(report: dict[str, Any]) -> str:
    mode = "settled before each call" if report.get("settle") else "back to back"
    if report.get("paired"):
        mode += ", a lab per level sampled in turn"
    if report.get("central_cpu") is not None:
        mode += f", central services on CPU {report['central_cpu']}"
    rounds = report.get("rounds", 1)
    lines = [f"OVN bench, {report['samples']} samples per level and round, {rounds} round(s), "
             f"{mode} (ms, p50 / p90)"]  # fmt: skip
    levels = report["levels"]
    for key in ("add", "del", "fwd_create", "fwd_delete"):
        cells = []
        for lv in levels:
            cell = report["results"][str(lv)][key]
            cells.append(f"{lv}: {cell['p50']:.1f} / {cell['p90']:.1f}")
        lines.append(
            f"  {key:<11} " + "   ".join(cells) + f"   growth {report['growth'][key]:.2f}x"
        )
    for t in report["targets"]:
        lines.append(f"  target {t['name']}: {'pass' if t['pass'] else 'MISS'} ({t['value']:.2f})")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", default="0,1000", help="existing ports and forwards per level")
    p.add_argument("--samples", type=int, default=30)
    p.add_argument("--rounds", type=int, default=1,
                   help="go through the levels this many times, up and down alternately "
                   "(2: 0, 1000, 1000, 0), pooling each level's samples")
    p.add_argument("--settle", action="store_true",
                   help="wait (untimed) for northd and the chassis before each timed call")
    p.add_argument("--paired", action="store_true",
                   help="two labs, one per level (the lowest and the highest), sampled in turn "
                   "batch by batch (--rounds batches of --samples each): the machine's drift "
                   "weighs on both levels alike")
    p.add_argument("--central-cpu", type=int, default=None,
                   help="pin the central services and n1 to this CPU, n2 and the timed calls "
                   "to the others (as on a cluster whose central nodes are other machines)")
    p.add_argument("--driver", help=argparse.SUPPRESS)
    add_output_options(p)
    args = p.parse_args()
    if args.driver:
        print(json.dumps(drive(json.loads(args.driver))))
        return 0
    need_root_and_tools("bench_ovn", ("ip", "ovsdb-server", "ovn-northd", "ovn-controller"))
    end_on_signals()
    levels = sorted(int(x) for x in args.levels.split(","))
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if args.paired:
        levels = [levels[0], levels[-1]]
        try:
            results = paired(args, levels, say)
        except BaseException as err:  # noqa: BLE001 - paired() cleaned up
            return failed(say, "bench_ovn", err)
        return report(args, levels, results)
    run = Run(args.samples)
    run.settle = args.settle
    try:
        run.setup()
        if args.central_cpu is not None:
            run.pin(args.central_cpu)
        pooled: dict[str, dict[str, list[float]]] = {}
        for round_ in range(args.rounds):  # up, then down, ...: 0, 1000, 1000, 0 cancels drift
            for level in levels if round_ % 2 == 0 else levels[::-1]:
                started = time.monotonic()
                if level >= run.ports:
                    run.fill(level)
                else:
                    run.shrink(level)
                say(f"level {level}: set in {time.monotonic() - started:.1f} s")
                raw = run.sample(level, round_)
                for k, v in raw.items():
                    pooled.setdefault(str(level), {}).setdefault(k, []).extend(v)
                p50s = ", ".join(f"{k} {percentile(v, 50):.1f}" for k, v in raw.items())
                say(f"level {level}, round {round_ + 1}: {p50s}")
        results = {
            level: {k: {"p50": percentile(v, 50), "p90": percentile(v, 90), "n": len(v)}
                    for k, v in raw_.items()}
            for level, raw_ in pooled.items()
        }  # fmt: skip
    except BaseException as err:  # noqa: BLE001 - cleanup first, then the exit status
        run.cleanup()
        return failed(say, "bench_ovn", err)
    run.cleanup()
    return report(args, levels, results)


def paired(args: argparse.Namespace, levels: list[int], say: Any) -> dict[Any, Any]:
    """``--paired``: a lab per level, filled once; then ``--rounds`` batches of ``--samples``
    on each in turn (the order alternating), each lab quiet (untimed) before its batch so that
    the other lab's trailing northd work never lands in it. p50/p90 per level, pooled."""
    runs = {level: Run(args.samples, SUBNET - i) for i, level in enumerate(levels)}
    pooled: dict[str, dict[str, list[float]]] = {}
    try:
        for level, run in runs.items():
            run.settle = args.settle
            started = time.monotonic()
            run.setup()
            if args.central_cpu is not None:
                run.pin(args.central_cpu)
            run.fill(level)
            say(f"lab at level {level}: set in {time.monotonic() - started:.1f} s")
        for round_ in range(args.rounds):
            for level in levels if round_ % 2 == 0 else levels[::-1]:
                runs[level].quiet()
                raw = runs[level].sample(level, round_)
                for k, v in raw.items():
                    pooled.setdefault(str(level), {}).setdefault(k, []).extend(v)
                p50s = ", ".join(f"{k} {percentile(v, 50):.1f}" for k, v in raw.items())
                say(f"level {level}, batch {round_ + 1}: {p50s}")
    finally:
        for run in runs.values():
            run.cleanup()
    return {
        level: {k: {"p50": percentile(v, 50), "p90": percentile(v, 90), "n": len(v)}
                for k, v in raw_.items()}
        for level, raw_ in pooled.items()
    }  # fmt: skip


def report(args: argparse.Namespace, levels: list[int], results: dict[Any, Any]) -> int:
    low, high = str(levels[0]), str(levels[-1])
    growth = {k: results[high][k]["p50"] / results[low][k]["p50"] for k in results[low]}
    out = {
        "samples": args.samples,
        "settle": args.settle,
        "rounds": args.rounds,
        "paired": args.paired,
        "central_cpu": args.central_cpu,
        "levels": levels,
        "results": results,
        "growth": growth,
        "targets": [
            {
                "name": f"ADD p50 growth {low} → {high} ports <= 1.2x",
                "value": growth["add"],
                "pass": growth["add"] <= 1.2,
            },
            {
                "name": f"forward create p50 growth {low} → {high} forwards <= 1.2x",
                "value": growth["fwd_create"],
                "pass": growth["fwd_create"] <= 1.2,
            },
            {
                "name": f"forward delete p50 growth {low} → {high} forwards <= 1.2x",
                "value": growth["fwd_delete"],
                "pass": growth["fwd_delete"] <= 1.2,
            },
        ],
    }
    return finish(out, args, render)


if __name__ == "__main__":
    sys.exit(main())
