#!/usr/bin/env python3
"""OVN networks (issue 16): ADD and DEL of a pod with its port wired, and forward create and
delete, at 0 and at 1,000 existing ports and forwards.

Run as root (a benchmark, not a test)::

    .venv/bin/python bench/bench_ovn.py [--levels 0,1000] [--samples 30] [--rounds 2]
        [--settle] [--json]

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
    def __init__(self, samples: int) -> None:
        from podnet.cli.demo.ovnlab import OvnLab

        self.samples = samples
        self.tag = uuid.uuid4().hex[:4]
        self.tmp = Path(tempfile.mkdtemp(prefix="podnet-bench-ovn-"))
        self.lab = OvnLab(f"pnbo-{self.tag}", ("n1", "n2"), subnet=SUBNET, base=self.tmp)
        self.data = {n: str(self.tmp / f"data-{n}") for n in ("n1", "n2")}
        self.netns: list[str] = []
        self.ports = 0
        self.settle = False
        self.forwards = 0

    def ctl(self, node: Any, *args: str) -> str:
        env = [f"{k}={v}" for k, v in node.env.items()]
        argv = [
            "ip",
            "netns",
            "exec",
            node.netns,
            "env",
            *env,
            PODNETCTL,
            *args,
            "--data-dir",
            self.data[node.name],
        ]
        done = subprocess.run(argv, capture_output=True, text=True)
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
        self.ctl(
            n1,
            "network",
            "create",
            UPLINK,
            "--type=physical",
            *[f"{k}={v}" for k, v in UPLINK_KEYS.items()],
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
        self.plugin.write_text(plugin_script("podnet.plugins.podnet:main", None, [self.data["n2"]]))
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
        from podnet.drivers import cluster_forwards
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
        self.lab.run(
            None, "ovn-nbctl", "--timeout=300", f"--db={self.lab.nb_unix}", "--wait=hv", "sync"
        )

    def shrink(self, level: int) -> None:
        """Back down to ``level`` filler ports and forwards (the later rounds of ``--rounds``)."""
        from podnet.drivers import cluster_forwards
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

    def cleanup(self) -> None:
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.lab.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def render(report: dict[str, Any]) -> str:
    mode = "settled before each call" if report.get("settle") else "back to back"
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
    p.add_argument("--driver", help=argparse.SUPPRESS)
    add_output_options(p)
    args = p.parse_args()
    if args.driver:
        print(json.dumps(drive(json.loads(args.driver))))
        return 0
    need_root_and_tools("bench_ovn", ("ip", "ovsdb-server", "ovn-northd", "ovn-controller"))
    end_on_signals()
    levels = sorted(int(x) for x in args.levels.split(","))
    run = Run(args.samples)
    run.settle = args.settle
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    try:
        run.setup()
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
    low, high = str(levels[0]), str(levels[-1])
    growth = {k: results[high][k]["p50"] / results[low][k]["p50"] for k in results[low]}
    report = {
        "samples": args.samples,
        "settle": args.settle,
        "rounds": args.rounds,
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
    return finish(report, args, render)


if __name__ == "__main__":
    sys.exit(main())
