#!/usr/bin/env python3
"""Where podnet-portmap's time goes: the profile behind docs/benchmarks.md, "podnet-portmap".

Run as root, like the benchmark it builds on (it reuses ``bench_add_del``'s nodes, drivers,
population and cleanup; nothing is copied)::

    .venv/bin/python bench/profile_portmap.py [--commit HEAD] [--rounds 20] [--json]

1. **Phase trace.** After populating the nodes of ``--suite portmap`` (0 and 300 pods), the
   ``podnet-portmap`` file in CNI_PATH is replaced by a traced copy of the plugin file: it
   records CLOCK_MONOTONIC marks at its first line, after importing the plugin module, at the
   start and end of every tool it spawns (``podnet.proc.Spawned``) and at ``os._exit``; the
   driver's marks (same clock) give exec and reap. ``--rounds`` interleaved rounds.
2. **Imports.** The plugin run with ``python -X importtime`` for a few rounds: the heaviest
   modules (cumulative µs, median over the calls).
3. **Tools, alone.** Inside each node: ``iptables-save``/``ip6tables-save``, ``iptables-restore
   --noflush`` of podnet-portmap's own setup/teardown text, ``iptables -S <chain>``, ``ip route
   get``, ``nft -j list table`` (and the Python parse of it), ``nft list map``, ``nft get
   element``, ``nft -j list maps``, ``nft -f`` of the setup/teardown text with and without the
   idempotent base lines; the Python parse and generation, also with ``portmap_variant``'s
   pre-filters (checked to give the same text); medians of ``--reps`` runs each.

Everything goes with ``bench_add_del``'s cleanup (namespaces and the temporary directory).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_add_del as bench_mod  # noqa: E402
import benchlib  # noqa: E402
from benchlib import percentile  # noqa: E402

TRACED_PLUGIN = """#!{python} -IS
import time as _t
_T0 = _t.monotonic_ns()
import os as _os
import sys
sys.path.insert(0, {src!r})
from podnet import proc as _proc
_SPAWNS = []
_init, _wait = _proc.Spawned.__init__, _proc.Spawned.wait
def _traced_init(self, argv, *args, **kwargs):
    self._t0 = _t.monotonic_ns()
    _init(self, argv, *args, **kwargs)
def _traced_wait(self):
    out = _wait(self)
    _SPAWNS.append((" ".join(self.argv[:3]), self._t0, _t.monotonic_ns()))
    return out
_proc.Spawned.__init__, _proc.Spawned.wait = _traced_init, _traced_wait
{exit_hook}from {module} import {func}
_T1 = _t.monotonic_ns()
{func}()
"""

IMPORTTIME_WRAPPER = """#!/bin/sh
echo "== $CNI_COMMAND" >> {log}
exec {python} -I -S -X importtime {plugin} 2>> {log}
"""

#: Runs inside a node (``ip netns exec``): micro-benchmarks of the tools podnet-portmap uses.
MICRO = r"""
import json, statistics, sys, time, uuid
sys.path.insert(0, sys.argv[1])
backend, reps, container_ip, bench_dir = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
from podnet import proc
from podnet.cni.netconf import parse_port_mappings
from podnet.firewall import portmap_iptables as rules
from podnet.firewall.portmap_iptables import PortmapOptions
from podnet.values import ContainerNet

def ms(fn, n=reps):
    out = []
    for _ in range(n):
        t = time.perf_counter_ns(); fn(); out.append((time.perf_counter_ns() - t) / 1e6)
    return round(sorted(out)[len(out) // 2], 2)

res = {}
opts = PortmapOptions()
net = ContainerNet.from_cidr(container_ip + "/16")
maps = parse_port_mappings({"runtimeConfig": {"portMappings": [
    {"hostPort": 40000, "containerPort": 80, "protocol": "tcp"}]}})
res["ip route get"] = ms(lambda: proc.run(["ip", "-o", "route", "get", container_ip]))
res["nft -f (empty)"] = ms(lambda: proc.run(["nft", "-f", "-"], b""))
if backend == "iptables":
    save4 = proc.run(["iptables-save", "-t", "nat"])
    res["nat rules (v4)"] = save4.count("\n-A ")
    res["iptables-save -t nat"] = ms(lambda: proc.run(["iptables-save", "-t", "nat"]))
    res["ip6tables-save -t nat"] = ms(lambda: proc.run(["ip6tables-save", "-t", "nat"]))
    res["iptables -t nat -S CNI-HOSTPORT-DNAT"] = ms(
        lambda: proc.run(["iptables", "-w", "-t", "nat", "-S", "CNI-HOSTPORT-DNAT"]))
    res["iptables-restore --noflush (*nat COMMIT only)"] = ms(
        lambda: proc.run(["iptables-restore", "--noflush", "-w", "10"], b"*nat\nCOMMIT\n"))
    cid0 = save4.split('id: \\"', 1)[1][:64] if 'id: \\"' in save4 else "x" * 64
    py_add = lambda: rules.setup_script(
        rules.SavedNat(save4), opts, "bench-portmap", cid0, net, maps)
    py_del = lambda: rules.teardown_script(rules.SavedNat(save4), "bench-portmap", cid0)
    res["parse save + generate (Python)"] = ms(py_add)
    res["parse save + teardown (Python)"] = ms(py_del)
    add, dele = [], []
    for _ in range(reps):
        cid = uuid.uuid4().hex * 2
        text = rules.setup_script(rules.SavedNat(save4), opts, "bench-portmap", cid, net, maps)
        t = time.perf_counter_ns()
        proc.run(["iptables-restore", "--noflush", "-w", "10"], text.encode())
        add.append((time.perf_counter_ns() - t) / 1e6)
        saved = rules.SavedNat(proc.run(["iptables-save", "-t", "nat"]))
        text = rules.teardown_script(saved, "bench-portmap", cid)
        t = time.perf_counter_ns()
        proc.run(["iptables-restore", "--noflush", "-w", "10"], text.encode())
        dele.append((time.perf_counter_ns() - t) / 1e6)
    res["iptables-restore --noflush (one container's ADD text)"] = round(statistics.median(add), 2)
    res["iptables-restore --noflush (one container's DEL text)"] = round(statistics.median(dele), 2)
    before = (py_add(), py_del())
    sys.path.insert(0, bench_dir)
    import portmap_variant
    portmap_variant._patch_iptables()
    assert (py_add(), py_del()) == before, "portmap_variant changed the generated text"
    res["parse save + generate (Python, portmap_variant pre-filters)"] = ms(py_add)
    res["parse save + teardown (Python, portmap_variant pre-filters)"] = ms(py_del)
else:
    from podnet.cni.fastjson import loads
    from podnet.firewall import portmap_nft as pn
    T = "inet podnet_portmap"
    listing_text = proc.run(["nft", "-j", "list", "table", "inet", "podnet_portmap"])
    res["nft -j list table: bytes"] = len(listing_text)
    res["nft -j list table"] = ms(
        lambda: proc.run(["nft", "-j", "list", "table", "inet", "podnet_portmap"]))
    res["nft list table (text)"] = ms(
        lambda: proc.run(["nft", "list", "table", "inet", "podnet_portmap"]))
    res["parse listing (fastjson + Listing, Python)"] = ms(lambda: pn.Listing(loads(listing_text)))
    res["nft -j list map dispatch_any_v4"] = ms(
        lambda: proc.run(["nft", "-j", "list", "map", "inet", "podnet_portmap", "dispatch_any_v4"]))
    res["nft -j list chains"] = ms(lambda: proc.run(["nft", "-j", "list", "chains"]))
    maps_text = proc.run(["nft", "-j", "list", "maps", "inet"])
    res["nft -j list maps inet: bytes"] = len(maps_text)
    res["nft -j list maps inet"] = ms(lambda: proc.run(["nft", "-j", "list", "maps", "inet"]))
    res["parse maps listing (fastjson + Listing, Python)"] = ms(
        lambda: pn.Listing(loads(maps_text)))
    res["nft -j list chain postrouting"] = ms(lambda: proc.run(
        ["nft", "-j", "list", "chain", "inet", "podnet_portmap", "postrouting"]))
    res["nft get element (one key; exit 1 when absent)"] = ms(lambda: proc.spawn(
        ["nft", "-j", "get", "element", "inet", "podnet_portmap", "dispatch_any_v4",
         "{ tcp . 10005 }"]).wait())
    listing = pn.Listing(loads(listing_text))
    nbase = len(pn.base_script(listing, opts))
    full, short, dele = [], [], []
    for i in range(reps):
        cid = uuid.uuid4().hex * 2
        text = pn.setup_script(listing, opts, "bench-portmap", cid, [net], maps)
        if i % 2:
            text = "\n".join(text.splitlines()[nbase:]) + "\n"
        t = time.perf_counter_ns()
        proc.run(["nft", "-f", "-"], text.encode())
        (short if i % 2 else full).append((time.perf_counter_ns() - t) / 1e6)
        chain = pn.chain_name("bench-portmap", cid)
        text = (f"delete element {T} dispatch_any_v4 {{ tcp . 40000 }}\n"
                f"flush chain {T} {chain}\ndelete chain {T} {chain}\n")
        t = time.perf_counter_ns()
        proc.run(["nft", "-f", "-"], text.encode())
        dele.append((time.perf_counter_ns() - t) / 1e6)
    res["nft -f (one container's ADD text, with base lines)"] = round(statistics.median(full), 2)
    res["nft -f (ADD text without the base lines)"] = round(statistics.median(short), 2)
    res["nft -f (one container's DEL text)"] = round(statistics.median(dele), 2)
print(json.dumps(res))
"""


def trace_rounds(bench: bench_mod.Bench, first: int, rounds: int, log: Path) -> dict[str, Any]:
    """Rounds with the traced plugin; phases (ms, p50) per (side, verb, pods)."""
    calls: list[tuple[tuple[str, str, int], dict[str, Any]]] = []
    for k in range(first, first + rounds):
        calls += list(bench.round(k).items())
    records = [ast.literal_eval(line) for line in log.read_text().splitlines()]
    phases: dict[str, dict[str, list[float]]] = {}
    for (side, verb, level), timing in calls:
        if side == "ref":
            continue
        marks = timing["marks_ns"]
        start, end = (marks[1], marks[2]) if verb == "ADD" else (marks[0], marks[1])
        rec = next((r for r in records if start <= r["t0"] <= end), None)
        if rec is None:
            continue
        p = phases.setdefault(f"{side} {verb} {level}", {})

        def add(name: str, value_ns: int, p: dict[str, list[float]] = p) -> None:
            p.setdefault(name, []).append(value_ns / 1e6)

        add("total (exec → reaped)", end - start)
        add("interpreter start-up (exec → first line)", rec["t0"] - start)
        add("import podnet.plugins.podnet_portmap", rec["t1"] - rec["t0"])
        cursor = rec["t1"]
        for n, (argv, t0, t1) in enumerate(rec["spawns"]):
            add(f"  python before spawn {n + 1}", t0 - cursor)
            add(f"  spawn {n + 1}: {argv}", t1 - t0)
            cursor = t1
        add("  python after the last spawn", rec["exit"] - cursor)
        add("os._exit → reaped by the driver", end - rec["exit"])
    return {
        cell: {name: round(percentile(v, 50), 2) for name, v in p.items()}
        for cell, p in sorted(phases.items())
    }


def importtime_rounds(bench: bench_mod.Bench, first: int, rounds: int, log: Path) -> Any:
    """Rounds with ``-X importtime``; the heaviest imports (cumulative µs, median) per verb."""
    for k in range(first, first + rounds):
        bench.round(k)
    per_verb: dict[str, list[dict[str, int]]] = {}
    current: dict[str, int] | None = None
    for line in log.read_text().splitlines():
        if line.startswith("== "):
            current = {}
            per_verb.setdefault(line[3:], []).append(current)
        elif line.startswith("import time:") and current is not None and "|" in line:
            _, cumulative, name = line[len("import time:") :].split("|")
            if cumulative.strip().isdigit():
                current[name.rstrip()] = int(cumulative)
    out = {}
    for verb, calls in per_verb.items():
        names = {n for c in calls for n in c}
        med = {n: statistics.median([c.get(n, 0) for c in calls]) for n in names}
        top = sorted(med.items(), key=lambda kv: -kv[1])[:25]
        out[verb] = {"calls": len(calls), "top_cumulative_us": top}
    return out


def micro(bench: bench_mod.Bench, src: str, reps: int) -> dict[str, Any]:
    out = {}
    for side, level in bench.drivers:
        if side == "ref":
            continue
        node = f"{bench_mod.NS_PREFIX}{bench.tag}-{side}-{level}"
        proc = subprocess.run(
            ["ip", "netns", "exec", node, sys.executable, "-I", "-c", MICRO, src,
             bench_mod.PORTMAP_BACKENDS[side], str(reps), "10.245.0.2",
             os.path.dirname(os.path.abspath(__file__))],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"micro-benchmarks in {node}: {proc.stderr.strip()}")
        out[f"{side} {level}"] = json.loads(proc.stdout)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--commit", metavar="REV", help="measure src/podnet of REV (default: work tree)")
    p.add_argument("--pods", default="0,300")
    p.add_argument("--rounds", type=int, default=20, help="traced rounds (20)")
    p.add_argument("--reps", type=int, default=15, help="runs of each micro-benchmark (15)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    bargs = ["--suite", "portmap", "--pods", args.pods, "--warmup", "2"]
    bargs += ["--commit", args.commit] if args.commit else []
    bench = bench_mod.checked_bench(bargs)
    benchlib.end_on_signals()
    report: dict[str, Any] = {}
    try:
        bench.setup()
        bench.populate()
        plugin = Path(bench.tmp, "bin", "podnet-portmap")
        original = plugin.read_text()
        python = original.splitlines()[0][2:].split()[0]
        src = next(
            ast.literal_eval(line[len("sys.path.insert") :])[1]
            for line in original.splitlines()
            if line.startswith("sys.path.insert(0, ")
        )
        module, _, func = bench.suite.entry_point.partition(":")
        log = Path(bench.tmp, "trace.log")
        traced = Path(bench.tmp, "podnet-portmap.traced")
        hook = benchlib.traced_exit("spawns", "_SPAWNS", str(log))
        traced.write_text(TRACED_PLUGIN.format(python=python, src=src, exit_hook=hook,
                                               module=module, func=func))  # fmt: skip
        traced.chmod(0o755)
        os.replace(traced, plugin)  # the drivers exec the file by path at every call
        bench.say(f"warm-up and {args.rounds} traced rounds ...")
        for k in range(bench.args.warmup):
            bench.round(k)
        log.unlink(missing_ok=True)
        k = bench.args.warmup
        report["phases_p50_ms"] = trace_rounds(bench, k, args.rounds, log)
        k += args.rounds
        bench.say("importtime rounds ...")
        imp_log = Path(bench.tmp, "importtime.log")
        real = Path(bench.tmp, "podnet-portmap.real")
        real.write_text(original)
        wrapper = Path(bench.tmp, "podnet-portmap.wrapper")
        wrapper.write_text(IMPORTTIME_WRAPPER.format(log=imp_log, python=python, plugin=real))
        wrapper.chmod(0o755)
        os.replace(wrapper, plugin)
        report["importtime"] = importtime_rounds(bench, k, 5, imp_log)
        bench.say("micro-benchmarks in the nodes ...")
        report["micro_ms"] = micro(bench, src, args.reps)
    except (KeyboardInterrupt, RuntimeError, OSError, subprocess.CalledProcessError,
            ValueError) as err:
        return benchlib.failed(bench.say, "profile_portmap", err)
    finally:
        bench.close(True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for cell, phases in report["phases_p50_ms"].items():
            print(f"\n{cell} (p50 ms)")
            for name, v in phases.items():
                print(f"  {v:8.2f}  {name}")
        for verb, imp in report["importtime"].items():
            print(f"\nimports, {verb} ({imp['calls']} calls, cumulative µs, median)")
            for name, us in imp["top_cumulative_us"]:
                print(f"  {us:8.0f}  {name}")
        for cell, res in report["micro_ms"].items():
            print(f"\ntools alone in node {cell} (median ms)")
            for name, v in res.items():
                print(f"  {v:>10}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
