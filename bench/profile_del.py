#!/usr/bin/env python3
"""What one podnet DEL costs, in counts that do not move with the machine's load: the profile
behind docs/benchmarks.md, "Where DEL's time goes".

Run as root, like the benchmark it builds on (it reuses ``bench_add_del``'s nodes, drivers,
population and cleanup; only podnet's side is made)::

    .venv/bin/python bench/profile_del.py [--commit REV] [--pods 300] [--rounds 5] [--json]
        [--modes strace,importtime,cprofile,callgrind,callgrind-marked,phases,...]
    .venv/bin/python bench/profile_del.py --compare .,REV [--pods 300] [--rounds 20]

After the node is given ``--pods`` pods, the ``podnet`` file in CNI_PATH is replaced by a
wrapper that runs ADD as it is and DEL under one measuring tool; each mode takes ``--rounds``
rounds (one ADD and one DEL of a fresh pod each, the node back at its pods), and its figures are
the median over the DELs:

* ``strace``: ``strace -f`` of the whole DEL — system calls of the plugin's own process by name,
  the processes it spawned (their argv) and the system calls of those;
* ``importtime``: ``python -X importtime`` — modules imported and their total self time;
* ``cprofile``: cProfile — function calls made, and the functions of podnet by cumulative time
  (indicative: the profiler's overhead is in it);
* ``callgrind``: ``valgrind --tool=callgrind`` of the plugin's process (not of the tools it
  spawns) — instructions executed (Ir), in parts cut before each ``write(2)``: the first part
  runs until ``ip`` is given ``link del`` (DEL's critical path), the next until nft's script;
* ``callgrind-marked``: the same with every module of ``--preimport`` imported first and parts
  cut around the data dir's trust walk, the store's open and the lock: the work without imports;
* ``phases``: CLOCK_MONOTONIC marks (exec, imported, each tool started / fed / reaped, exit),
  median ms between them (wall clock: indicative on a busy machine);
* ``add-strace``: what ADD writes to its tools (what the kernel holds for DEL to remove);
* ``add-callgrind``: the instructions of ADD's plugin process, whole (the DELs run plain).

``--compare A,B`` instead gives two builds (``.`` is the work tree) a node each and takes ADD and
DEL of both in interleaved rounds: wall clock, and the CPU time and minor faults of the call's
processes (the plugin and its tools, ``RUSAGE_CHILDREN`` of the driver).

Times are not reported except cProfile's own; ``bench_add_del.py`` measures latency.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_add_del as bench_mod  # noqa: E402
import benchlib  # noqa: E402

MODES = (
    "strace",
    "importtime",
    "cprofile",
    "callgrind",
    "callgrind-marked",
    "phases",
    "add-strace",
    "add-callgrind",
)

#: ``callgrind-marked``: every module a DEL imports is imported first, then the DEL runs with a
#: ``getppid(2)`` marker (callgrind cuts a part before each) around the data dir's trust walk,
#: the store's open and the write lock's acquisition: the instructions of the work itself, by
#: step, without the imports.
MARKED_PLUGIN = """import os, sys, importlib
{path_lines}
for _n in {modules!r}:
    importlib.import_module(_n)
from podnet.store import conn as _sconn, db as _sdb
import podnet.store as _ps
def _marked(fn):
    def run(*a, **k):
        os.getppid()
        try:
            return fn(*a, **k)
        finally:
            os.getppid()
    return run
_sdb._require_trusted = _marked(_sconn._require_trusted)
_ps.open_store = _sdb.open_store = _marked(_sdb.open_store)
_sdb.Store._acquire = _marked(_sdb.Store._acquire)
os.getppid()
from podnet.plugins.podnet import main
main()
"""

#: ``phases``: the plugin file with CLOCK_MONOTONIC marks (the driver's clock): its first line,
#: the plugin module imported, every tool started / fed / reaped (``podnet.proc.Spawned``), and
#: ``os._exit``; appended to a log as one ``repr`` line per call.
TRACED_PLUGIN = """import time as _t
_T0 = _t.monotonic_ns()
import os as _os
import sys
{path_lines}
from podnet import proc as _proc
_EV = []
_init, _feed, _wait = _proc.Spawned.__init__, _proc.Spawned.feed, _proc.Spawned.wait
def _traced_init(self, argv, *args, **kwargs):
    _EV.append(("start " + argv[0], _t.monotonic_ns()))
    _init(self, argv, *args, **kwargs)
def _traced_feed(self, data):
    _EV.append(("feed " + self.argv[0], _t.monotonic_ns()))
    _feed(self, data)
def _traced_wait(self):
    out = _wait(self)
    _EV.append(("reaped " + self.argv[0], _t.monotonic_ns()))
    return out
_proc.Spawned.__init__, _proc.Spawned.feed, _proc.Spawned.wait = (
    _traced_init, _traced_feed, _traced_wait)
{exit_hook}from podnet.plugins.podnet import main
_T1 = _t.monotonic_ns()
main()
"""

#: cProfile of a plugin that ends with ``os._exit`` (``python -m cProfile`` would never write).
PROFILE_RUNNER = """import cProfile, os, runpy, sys
out, real = sys.argv[1], sys.argv[2]
prof = cProfile.Profile()
_exit = os._exit
def _dump_and_exit(status):
    prof.disable()
    prof.dump_stats(out)
    _exit(status)
os._exit = _dump_and_exit
sys.argv = [real]
prof.enable()
runpy.run_path(real, run_name="__main__")
"""

WRAPPER = """#!/bin/sh
PROFILE_RUNNER='{runner}'
mode=$(cat {modefile})
if [ "$mode" = add-strace ] && [ "$CNI_COMMAND" = ADD ]; then
  exec strace -f -qq -s 400 -o {logdir}/$mode.$$ {interp} {real}
fi
if [ "$mode" = add-callgrind ] && [ "$CNI_COMMAND" = ADD ]; then
  exec valgrind --tool=callgrind --callgrind-out-file={logdir}/$mode.$$ \
    --log-file={logdir}/$mode.$$.log {interp} {real}
fi
if [ "$mode" = add-callgrind ]; then exec {interp} {real}; fi
[ "$CNI_COMMAND" = DEL ] || exec {interp} {real}
out={logdir}/$mode.$$
case "$mode" in
strace) exec strace -f -qq -s 200 -o "$out" {interp} {real} ;;
importtime) exec {interp} -X importtime {real} 2>"$out" ;;
cprofile) exec {interp} -c "$PROFILE_RUNNER" "$out" {real} ;;
phases) exec {interp} {traced} ;;
callgrind-marked) exec valgrind --tool=callgrind --dump-before=getppid --dump-before=write \
  --callgrind-out-file="$out" --log-file="$out.log" {interp} {marked} ;;
callgrind) exec valgrind --tool=callgrind --dump-before=write --callgrind-out-file="$out" \
  --log-file="$out.log" \
  {interp} {real} ;;
*) exec {interp} {real} ;;
esac
"""

_SYSCALL = re.compile(r"^(\d+) +(?:<\.\.\. )?([a-z_0-9]+)(\(| resumed>)")
_EXECVE = re.compile(r'^(\d+) +execve\("([^"]*)", \[(.*?)\]')


def parse_strace(path: str) -> dict[str, Any]:
    """One ``strace -f -o`` file: the first pid is the plugin; syscalls counted once each (an
    ``unfinished`` call and its ``resumed`` line are one)."""
    own: collections.Counter[str] = collections.Counter()
    children: collections.Counter[str] = collections.Counter()
    spawned: list[str] = []
    plugin_pid = None
    with open(path) as f:
        for line in f:
            m = _SYSCALL.match(line)
            if m is None:
                continue
            pid, name, how = m.groups()
            if plugin_pid is None:
                plugin_pid = pid
            if how == " resumed>":
                continue
            if name == "execve" and pid != plugin_pid:
                e = _EXECVE.match(line)
                if e is not None and "ENOENT" not in line:  # PATH look-ups that missed
                    argv = re.findall(r'"((?:[^"\\]|\\.)*)"', e.group(3))
                    spawned.append(" ".join(argv[:4]))
            (own if pid == plugin_pid else children)[name] += 1
    return {"own": own, "children": children, "spawned": spawned}


def parse_importtime(path: str) -> dict[str, Any]:
    modules: dict[str, int] = {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("import time:") and "|" in line:
            self_us, _cum, name = line[len("import time:") :].split("|")
            if self_us.strip().isdigit():
                modules[name.strip()] = int(self_us)
    return modules


def parse_cprofile(path: str) -> dict[str, Any]:
    st = pstats.Stats(path)
    calls = sum(v[1] for v in st.stats.values())  # type: ignore[attr-defined]
    podnet = {}
    for (file, line, func), (_cc, nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if "/podnet/" in file:
            short = file.split("/podnet/", 1)[1]
            podnet[f"{short}:{line}({func})"] = (nc, ct * 1000)
    return {"calls": calls, "podnet": podnet}


def parse_callgrind(path: str) -> list[int]:
    """Instructions of each part of one run: cut before every ``write(2)`` the plugin makes
    (``--dump-before=write``: the first feeds ``ip`` its ``link del``, the next ``nft`` its
    script; the store writes with ``pwrite``), the last part up to the exit."""
    parts = []
    for part in sorted(glob.glob(path + ".*[0-9]"), key=lambda p: int(p.rsplit(".", 1)[1])):
        parts.append(_callgrind_total(part))
    return [*parts, _callgrind_total(path)]


def _callgrind_total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise ValueError(f"{path}: no totals")


def phases(logdir: Path, dels: list[dict[str, Any]]) -> dict[str, Any]:
    """Median ms of each phase of the DELs (``marks_ns`` from the driver, the plugin's log)."""
    import ast

    records = [ast.literal_eval(ln) for ln in (logdir / "phases.log").read_text().splitlines()]
    per: dict[str, list[float]] = {}
    for t in dels:
        start, end = t["marks_ns"][0], t["marks_ns"][-1]
        rec = next((r for r in records if r["cmd"] == "DEL" and start <= r["t0"] <= end), None)
        if rec is None:
            continue
        marks = [("exec → first line", rec["t0"]), ("import podnet.plugins.podnet", rec["t1"]),
                 *rec["ev"], ("os._exit", rec["exit"]), ("reaped by the driver", end)]  # fmt: skip
        prev = start
        for name, at in marks:
            per.setdefault(f"→ {name}", []).append((at - prev) / 1e6)
            prev = at
        per.setdefault("total", []).append((end - start) / 1e6)
    return {"dels": len(per.get("total", [])),
            "p50_ms": {k: round(statistics.median(v), 2) for k, v in per.items()}}  # fmt: skip


def summarize(logdir: Path, mode: str) -> dict[str, Any]:
    files = sorted(p for p in glob.glob(str(logdir / f"{mode}.*"))
                   if re.fullmatch(r"[a-z-]+\.\d+", os.path.basename(p)))  # fmt: skip
    if not files:
        raise RuntimeError(f"{mode}: no DEL was measured (see {logdir})")
    out: dict[str, Any] = {"dels": len(files)}
    if mode == "add-strace":
        out["writes"] = [ln for ln in Path(files[-1]).read_text().splitlines()
                         if re.match(r"^\d+ +write\(", ln)]  # fmt: skip
    elif mode == "strace":
        runs = [parse_strace(p) for p in files]
        names = {n for r in runs for n in r["own"]}
        own = {n: statistics.median([r["own"][n] for r in runs]) for n in names}
        out["plugin_syscalls_total"] = statistics.median([sum(r["own"].values()) for r in runs])
        out["plugin_syscalls"] = dict(sorted(own.items(), key=lambda kv: -kv[1]))
        out["children_syscalls_total"] = statistics.median(
            [sum(r["children"].values()) for r in runs]
        )
        out["spawned"] = runs[-1]["spawned"]
        out["spawned_count"] = statistics.median([len(r["spawned"]) for r in runs])
    elif mode == "importtime":
        runs_i = [parse_importtime(p) for p in files]
        out["modules"] = statistics.median([len(r) for r in runs_i])
        out["self_us_total"] = statistics.median([sum(r.values()) for r in runs_i])
        out["module_names"] = sorted(runs_i[-1])
    elif mode == "cprofile":
        runs_c = [parse_cprofile(p) for p in files]
        out["function_calls"] = statistics.median([r["calls"] for r in runs_c])
        last = runs_c[-1]["podnet"]
        top = sorted(last.items(), key=lambda kv: -kv[1][1])[:30]
        out["podnet_top_cumulative"] = [(k, n, round(ms, 2)) for k, (n, ms) in top]
    elif mode in ("callgrind", "callgrind-marked", "add-callgrind"):
        runs_g = [parse_callgrind(p) for p in files]
        out["instructions"] = statistics.median([sum(r) for r in runs_g])
        out["instructions_all"] = [sum(r) for r in runs_g]
        nparts = min(len(r) for r in runs_g)
        out["instructions_parts"] = [statistics.median([r[i] for r in runs_g])
                                     for i in range(nparts)]  # fmt: skip
    return out


def compare(args: argparse.Namespace) -> int:
    """``--compare A,B``: ADD and DEL wall-clock of two builds (``.`` is the work tree), each on
    a node of its own, at ``--pods`` pods, in interleaved rounds (the order swapped every
    round) so that the machine's load hits both alike. Indicative only on a busy machine."""
    revs = args.compare.split(",")
    benches: list[bench_mod.Bench] = []
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    benchlib.end_on_signals()
    try:
        for rev in revs:
            bargs = ["--pods", str(args.pods), "--warmup", "2", "--samples", "1"]
            bargs += ["--commit", rev] if rev != "." else []
            b = bench_mod.checked_bench(bargs)  # sets PODNET_DATA_DIRS for its drivers
            benches.append(b)
            b.suite.sides = ("podnet",)
            b.setup()
            b.populate()
        for k in range(2 + args.rounds):
            order = list(zip(revs, benches, strict=True))
            for rev, b in order if k % 2 else order[::-1]:
                for (_side, verb, _level), t in b.round(k).items():
                    if k >= 2:
                        cells.setdefault((rev, verb), []).append(t)
    except (KeyboardInterrupt, RuntimeError, OSError, subprocess.CalledProcessError,
            ValueError) as err:  # fmt: skip
        return benchlib.failed(print, "profile_del", err)
    finally:
        for b in benches:
            b.close(True)
    pct = benchlib.percentile
    out = []
    for (rev, verb), ts in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ms, cpu, flt = ([t[k] for t in ts] for k in ("ms", "cpu_ms", "minflt"))
        out.append({"build": rev, "verb": verb, "pods": args.pods, "n": len(ts),
                    "wall_p50_ms": round(pct(ms, 50), 2), "wall_p90_ms": round(pct(ms, 90), 2),
                    "cpu_p50_ms": round(pct(cpu, 50), 2), "minflt_p50": pct(flt, 50)})  # fmt: skip
        print(f"{verb} {rev:>10} at {args.pods} pods: wall p50 {pct(ms, 50):6.1f} ms, p90 "
              f"{pct(ms, 90):6.1f}; CPU (plugin + tools) p50 {pct(cpu, 50):6.1f} ms; minor "
              f"faults p50 {pct(flt, 50):.0f}  (n={len(ts)})")  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--commit", metavar="REV", help="measure src/podnet of REV (default: work tree)")
    p.add_argument("--pods", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5, help="DELs measured per mode (5)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--preimport", default="", metavar="M1,M2",
                   help="callgrind-marked: the modules to import before the DEL (those a DEL "
                   "imports, e.g. from the importtime mode)")  # fmt: skip
    p.add_argument("--keep", action="store_true", help="print the log directory and keep it")
    p.add_argument("--json", action="store_true")
    p.add_argument("--compare", metavar="A,B",
                   help="instead: ADD/DEL wall-clock of builds A and B ('.' = work tree) in "
                   "interleaved rounds (--rounds of them)")  # fmt: skip
    args = p.parse_args(argv)
    if args.compare:
        return compare(args)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES):
        p.error(f"--modes: of {','.join(MODES)}")
    bargs = ["--pods", str(args.pods), "--warmup", "2", "--samples", "1"]
    bargs += ["--commit", args.commit] if args.commit else []
    bench = bench_mod.checked_bench(bargs)
    benchlib.end_on_signals()
    bench.suite.sides = ("podnet",)
    report: dict[str, Any] = {}
    try:
        bench.setup()
        bench.populate()
        plugin = Path(bench.tmp, "bin", "podnet")
        original = plugin.read_text()
        interp = original.splitlines()[0][2:].strip()
        real = Path(bench.tmp, "podnet.real")
        real.write_text(original)
        logdir = Path(bench.tmp, "del-logs")
        logdir.mkdir()
        modefile = Path(bench.tmp, "mode")
        modefile.write_text("plain")
        traced = Path(bench.tmp, "podnet.traced")
        path_lines = "\n".join(ln for ln in original.splitlines()
                               if ln.startswith(("sys.path", "import sys")))  # fmt: skip
        hook = benchlib.traced_exit("ev", "_EV", str(logdir / "phases.log"))
        traced.write_text(TRACED_PLUGIN.format(path_lines=path_lines, exit_hook=hook))
        marked = Path(bench.tmp, "podnet.marked")
        marked.write_text(MARKED_PLUGIN.format(path_lines=path_lines,
                                               modules=args.preimport.split(",")))  # fmt: skip
        wrapper = Path(bench.tmp, "podnet.wrapper")
        wrapper.write_text(WRAPPER.format(interp=interp, real=real, modefile=modefile,
                                          logdir=logdir, runner=PROFILE_RUNNER,
                                          traced=traced, marked=marked))  # fmt: skip
        wrapper.chmod(0o755)
        os.replace(wrapper, plugin)  # the driver execs the file by path at every call
        node = next(iter(bench.nodes))
        ruleset = subprocess.run(["ip", "netns", "exec", node, "nft", "list", "ruleset"],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
        Path(logdir, "ruleset.txt").write_text(ruleset)
        report["node_ruleset_lines"] = len(ruleset.splitlines())
        k = 0
        for _ in range(bench.args.warmup):
            bench.round(k)
            k += 1
        for mode in modes:
            bench.say(f"{mode}: {args.rounds} DELs ...")
            modefile.write_text(mode)
            dels = []
            for _ in range(args.rounds):
                dels += [t for (_s, verb, _l), t in bench.round(k).items() if verb == "DEL"]
                k += 1
            modefile.write_text("plain")
            report[mode] = phases(logdir, dels) if mode == "phases" else summarize(logdir, mode)
        report["podnet"] = bench.podnet_source
        if args.keep:
            keep = Path("/tmp", f"profile-del-{bench.tag}")
            subprocess.run(["cp", "-a", str(logdir), str(keep)], check=True)
            bench.say(f"logs kept in {keep}")
    except (KeyboardInterrupt, RuntimeError, OSError, subprocess.CalledProcessError,
            ValueError) as err:  # fmt: skip
        return benchlib.failed(bench.say, "profile_del", err)
    finally:
        bench.close(True)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"podnet DEL at {args.pods} pods, {report['podnet']}")
        if "strace" in report:
            s = report["strace"]
            print(f"\nsyscalls of the plugin process (median of {s['dels']}): "
                  f"{s['plugin_syscalls_total']}")  # fmt: skip
            for name, n in s["plugin_syscalls"].items():
                print(f"  {n:8}  {name}")
            print(f"spawned ({s['spawned_count']}), their syscalls {s['children_syscalls_total']}:")
            for argv_ in s["spawned"]:
                print(f"  {argv_}")
        if "phases" in report:
            print(f"\nphases of {report['phases']['dels']} DELs (p50 ms, from the previous mark)")
            for name, v in report["phases"]["p50_ms"].items():
                print(f"  {v:8.2f}  {name}")
        if "importtime" in report:
            i = report["importtime"]
            print(f"\nmodules imported: {i['modules']}, self time total {i['self_us_total']} µs")
        if "cprofile" in report:
            c = report["cprofile"]
            print(f"\nfunction calls (cProfile): {c['function_calls']}")
            for name, n, ms in c["podnet_top_cumulative"]:
                print(f"  {ms:8.2f} ms {n:6}  {name}")
        for key in ("callgrind", "callgrind-marked", "add-callgrind"):
            if key not in report:
                continue
            g = report[key]
            print(f"\ninstructions ({key}, plugin process): {g['instructions']:,} "
                  f"{g['instructions_all']}")  # fmt: skip
            print(
                "  by part (cut before each write(2): 'link del' to ip, the script to nft, ...; "
                "marked: also around the walk, the open and the lock): "
                + ", ".join(f"{n:,}" for n in g["instructions_parts"])
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
