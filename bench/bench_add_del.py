#!/usr/bin/env python3
"""ADD and DEL latency of podnet against the reference chain ptp + host-local + portmap.

Run as root (a benchmark, not a test)::

    .venv/bin/python bench/bench_add_del.py [--pods 0,300] [--samples 40] [--commit REV] [--json]
    .venv/bin/python bench/bench_add_del.py --suite portmap [--commit REV] [--variant FILE] ...

``--suite portmap`` (issue 3) compares chained portmap plugins instead: ptp + host-local
followed by the reference ``portmap``, by ``podnet-portmap`` with ``backend: iptables`` and by
``podnet-portmap`` with ``backend: nftables``, each in its own nodes, on the portmap plugin's own
time (the driver times every plugin of the chain) and on the chain's.

Method (docs/benchmarks.md has the long form):

* One node namespace per cell (side x existing pods), ``pnb-<tag>-<side>-<pods>``: loopback and
  an uplink (a veth pair inside the namespace) with an address and a default route; nothing on
  the machine's own network is touched. Each node has a *driver*: this script re-executed once
  under ``ip netns exec <node>``, which then execs the plugins itself as a runtime inside the node
  would, so ``ip netns exec`` is never inside a timed region.
* A driver does what libcni does for a conflist: for each plugin it injects ``name`` and
  ``cniVersion``, ``runtimeConfig`` only with the capabilities the plugin declares, and
  ``prevResult`` (ADD: the previous plugin's result; DEL: the cached final ADD result, plugins in
  reverse order); the environment is the driver's own plus ``CNI_COMMAND``, ``CNI_CONTAINERID``,
  ``CNI_NETNS``, ``CNI_ARGS``, ``CNI_IFNAME``, ``CNI_PATH``; plugins are found by type in
  ``CNI_PATH``. A timed ADD or DEL runs from just before the exec of the first plugin to the
  exit of the last.
* podnet (or podnet-portmap) runs as the plugin file ``podnetctl install`` writes (found
  through the measured tree's ``plugin_script``), byte-compiled first; ``--commit REV``
  measures ``src/podnet`` of REV instead of the work tree, ``--podnet PATH`` any executable.
* A node sampled "at N pods" was first given N pods by the same plugins, one hostPort each
  (``runtimeConfig.portMappings``, a distinct hostPort per pod). A sampling round ADDs one fresh
  pod on every node, then DELs them, so each node is back at N pods; pod namespaces are made
  before and removed after the timed calls. The cells take turns within a round, in an order
  rotated every round, so machine noise and drift hit all of them alike.
* Everything lives in namespaces and a temporary directory this script created; all of it is
  removed at the end, also on failure, Ctrl-C, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
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
    failed,
    finish,
    need_root_and_tools,
    percentile,
)

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python3"
REFERENCE_DIR = "/usr/lib/cni"
SIDES = ("podnet", "ref")
CNI_VERSION = "1.0.0"
PODNET_RANGE = "10.244.0.0/16"
REF_SUBNET = "10.245.0.0/16"
CONTAINER_PORT = 80
#: hostPorts: pre-populated pods from here up, sampled pods from SAMPLE_PORT_BASE up.
POPULATE_PORT_BASE = 10000
SAMPLE_PORT_BASE = 50000
NS_PREFIX = "pnb-"


# -- configuration (what a runtime would read from /etc/cni/net.d) ------------------------------
def podnet_conflist(data_dir: str) -> dict[str, Any]:
    return {
        "cniVersion": CNI_VERSION,
        "name": "bench-podnet",
        "plugins": [
            {
                "type": "podnet",
                "ranges": [PODNET_RANGE],
                "dataDir": data_dir,
                "capabilities": {"portMappings": True},
            }
        ],
    }


def ptp_plugin(data_dir: str) -> dict[str, Any]:
    return {
        "type": "ptp",
        "ipMasq": True,
        "ipam": {
            "type": "host-local",
            "subnet": REF_SUBNET,
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": data_dir,
        },
    }


def reference_conflist(data_dir: str) -> dict[str, Any]:
    return {
        "cniVersion": CNI_VERSION,
        "name": "bench-ref",
        "plugins": [
            ptp_plugin(data_dir),
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }


def portmap_suite_conflist(side: str, data_dir: str) -> dict[str, Any]:
    """``--suite portmap``: the same ptp + host-local, then the reference portmap (side
    ``ref``) or podnet-portmap with the iptables (``pm-ipt``) or nftables (``pm-nft``)
    backend; the same network name on every side, so the chain names hash alike."""
    if side == "ref":
        last: dict[str, Any] = {"type": "portmap"}
    else:
        plugin = VARIANT_PLUGIN if side.startswith("var-") else "podnet-portmap"
        # its hostPort claims go to a store of the bench's own, not the machine's default
        last = {"type": plugin, "backend": PORTMAP_BACKENDS[side],
                "dataDir": os.path.join(data_dir, "podnet-portmap")}
    last.update({"capabilities": {"portMappings": True}, "snat": True})
    return {"cniVersion": CNI_VERSION, "name": "bench-portmap",
            "plugins": [ptp_plugin(data_dir), last]}  # fmt: skip


PORTMAP_BACKENDS = {
    "pm-ipt": "iptables",
    "pm-nft": "nftables",
    "var-ipt": "iptables",
    "var-nft": "nftables",
}
#: ``--variant FILE`` runs FILE under this type name (sides ``var-ipt``, ``var-nft``).
VARIANT_PLUGIN = "podnet-portmap-variant"


class Suite:
    """What a run compares: ``sides`` (``ref`` is the baseline of the ratios), the measured
    podnet plugin (``plugin`` file name in CNI_PATH, ``entry_point``), and the conflist of a
    side. ``podnet`` (default): the podnet plugin vs ptp+host-local+portmap, with issue 2's
    targets. ``portmap``: ptp+host-local followed by the reference portmap or podnet-portmap
    (iptables, nftables), compared on the portmap plugin's own time and the chain's; with
    ``variant``, also a second podnet-portmap executable (sides ``var-ipt``, ``var-nft``)."""

    def __init__(self, name: str, variant: bool = False) -> None:
        self.name = name
        if name == "portmap":
            sides = [s for s in PORTMAP_BACKENDS if variant or not s.startswith("var-")]
            self.sides: tuple[str, ...] = ("ref", *sides)
            self.plugin, self.entry_point = "podnet-portmap", "podnet.plugins.podnet_portmap:main"
        else:
            self.sides = SIDES
            self.plugin, self.entry_point = "podnet", "podnet.plugins.podnet:main"

    def conflist(self, side: str, data_dir: str) -> dict[str, Any]:
        if self.name == "portmap":
            return portmap_suite_conflist(side, data_dir)
        return podnet_conflist(data_dir) if side == "podnet" else reference_conflist(data_dir)


# -- the driver: runs inside a node netns, execs the plugins as libcni does ------------------------
class PluginFailed(Exception):
    pass


def find_in_path(plugin_type: str, cni_path: list[str]) -> str:
    """libcni's FindInPath: the first ``<dir>/<type>`` in CNI_PATH."""
    for d in cni_path:
        candidate = os.path.join(d, plugin_type)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(f"plugin {plugin_type!r} not found in {':'.join(cni_path)}")


class Chain:
    """One conflist, executed like libcni's AddNetworkList / DelNetworkList."""

    def __init__(self, conflist: dict[str, Any], cni_path: list[str]) -> None:
        self.conflist = conflist
        self.cni_path = cni_path
        self.plugins = conflist["plugins"]
        self.binaries = [find_in_path(p["type"], cni_path) for p in self.plugins]
        self.cache: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # cid -> (rt, result)

    def _stdin(self, plugin: dict[str, Any], prev: Any, rt: dict[str, Any]) -> bytes:
        conf = dict(plugin)
        conf["name"] = self.conflist["name"]
        conf["cniVersion"] = self.conflist["cniVersion"]
        if prev is not None:
            conf["prevResult"] = prev
        caps = plugin.get("capabilities") or {}
        runtime = {k: v for k, v in rt["capabilityArgs"].items() if caps.get(k)}
        if runtime:
            conf["runtimeConfig"] = runtime
        return json.dumps(conf).encode()

    def _env(self, command: str, rt: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CNI_COMMAND=command,
            CNI_CONTAINERID=rt["containerID"],
            CNI_NETNS=rt["netns"],
            CNI_ARGS=rt["args"],
            CNI_IFNAME=rt["ifname"],
            CNI_PATH=":".join(self.cni_path),
        )
        return env

    @staticmethod
    def _exec(path: str, env: dict[str, str], stdin: bytes) -> bytes:
        proc = subprocess.Popen(
            [path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        out, err = proc.communicate(stdin)
        if proc.returncode != 0:
            raise PluginFailed(
                f"plugin {os.path.basename(path)} failed ({env['CNI_COMMAND']}): exit "
                f"{proc.returncode}: {out.decode(errors='replace').strip()} "
                f"{err.decode(errors='replace').strip()}"
            )
        return out

    def add(self, rt: dict[str, Any]) -> dict[str, Any]:
        """ADD through every plugin, chaining prevResult; returns timings in ms."""
        env = self._env("ADD", rt)
        prev: Any = None
        cpu = _children_cpu()
        marks = [time.perf_counter_ns()]
        for plugin, path in zip(self.plugins, self.binaries, strict=True):
            out = self._exec(path, env, self._stdin(plugin, prev, rt))
            prev = json.loads(out)
            marks.append(time.perf_counter_ns())
        self.cache[rt["containerID"]] = (rt, prev)
        return _timings(marks, cpu)

    def delete(self, container_id: str) -> dict[str, Any]:
        """DEL through the plugins in reverse, each with the cached ADD result as prevResult."""
        rt, cached = self.cache.pop(container_id)
        env = self._env("DEL", rt)
        pairs = list(zip(self.plugins, self.binaries, strict=True))[::-1]
        cpu = _children_cpu()
        marks = [time.perf_counter_ns()]
        for plugin, path in pairs:
            self._exec(path, env, self._stdin(plugin, cached, rt))
            marks.append(time.perf_counter_ns())
        return _timings(marks, cpu)


def _children_cpu() -> tuple[float, int]:
    """User + system seconds and minor page faults of every finished descendant so far (the
    plugins and the tools they spawned and reaped: ``RUSAGE_CHILDREN``)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime, ru.ru_minflt


def _timings(marks: list[int], cpu_before: tuple[float, int]) -> dict[str, Any]:
    cpu_after = _children_cpu()
    return {
        "ms": (marks[-1] - marks[0]) / 1e6,
        "plugins_ms": [(b - a) / 1e6 for a, b in zip(marks, marks[1:], strict=False)],
        "marks_ns": marks,  # CLOCK_MONOTONIC, for lining up with traces of the plugins
        # the CPU the call's processes used (less moved by other load than the wall clock)
        "cpu_ms": (cpu_after[0] - cpu_before[0]) * 1e3,
        "minflt": cpu_after[1] - cpu_before[1],
    }


def driver_main(conflist_path: str, cni_path: str) -> int:
    """``--driver``: JSON lines in (ops), JSON lines out (timings or an error)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    try:
        with open(conflist_path) as f:
            chain = Chain(json.load(f), [d for d in cni_path.split(":") if d])
    except (OSError, ValueError) as err:
        print(f"bench_add_del driver: {err}", file=sys.stderr)
        return 1
    out = sys.stdout
    for line in sys.stdin:
        op = json.loads(line)
        try:
            if op["op"] == "add":
                reply: dict[str, Any] = chain.add(op["rt"])
            elif op["op"] == "del":
                reply = chain.delete(op["containerID"])
            elif op["op"] == "populate":
                for rt in op["rts"]:
                    chain.add(rt)
                reply = {"added": len(op["rts"])}
            elif op["op"] == "quit":
                return 0
            else:
                reply = {"error": f"unknown op {op['op']!r}"}
        except Exception as err:  # noqa: BLE001 - reported to the parent, which stops the run
            reply = {"error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


# -- the parent: namespaces, drivers, sampling, report ---------------------------------------------
def sh(*argv: str, input: str | None = None) -> str:
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


class Driver:
    def __init__(self, side: str, node: str, conflist_path: str, cni_path: str) -> None:
        self.side = side
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", node, sys.executable, "-I", os.path.abspath(__file__),
             "--driver", conflist_path, cni_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    def send(self, op: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.side} driver exited (status {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.side}: {reply['error']}")
        return reply

    def call(self, op: dict[str, Any]) -> dict[str, Any]:
        self.send(op)
        return self.receive()

    def stop(self, graceful: bool) -> None:
        """Quit (idle driver) or kill the driver's process group: it and the plugin it runs."""
        if self.proc.poll() is None and graceful:
            try:
                self.send({"op": "quit"})
                self.proc.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: pgid == pid
            self.proc.wait()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.suite = Suite(args.suite, variant=bool(args.variant))
        self.tag = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.nodes: list[str] = []
        self.drivers: dict[tuple[str, int], Driver] = {}
        self.tmp = tempfile.mkdtemp(prefix="podnet-bench-")
        # the node's administrator allows the bench's data dirs (the drivers pass this on): the
        # directories below the tmp dir ('<dir>/*' since 29a679d; older trees took the dir)
        os.environ["PODNET_DATA_DIRS"] = f"{self.tmp}:{self.tmp}/*"
        self.pod_count = 0
        self.log: IO[str] = sys.stderr

    # namespaces ------------------------------------------------------------------------------
    def _ns_add(self, names: list[str]) -> None:
        self.namespaces.extend(names)
        sh("ip", "-batch", "-", input="".join(f"netns add {n}\n" for n in names))

    def _ns_del(self, names: list[str]) -> None:
        if names:
            script = "".join(f"netns del {n}\n" for n in names)
            subprocess.run(
                ["ip", "-force", "-batch", "-"], input=script, capture_output=True, text=True,
                timeout=300,
            )  # fmt: skip
        gone = set(names)
        self.namespaces = [n for n in self.namespaces if n not in gone]

    def _node(self, side: str, level: int) -> str:
        name = f"{NS_PREFIX}{self.tag}-{side}-{level}"
        self._ns_add([name])
        self.nodes.append(name)
        # A node-like namespace: loopback, an uplink with an address and a default route (a
        # veth pair with both ends inside, as this kernel has no dummy links).
        sh("ip", "-n", name, "-batch", "-", input=(
            "link set lo up\n"
            "link add up0 type veth peer name up1\n"
            "link set up1 up\n"
            "addr add 192.0.2.1/24 dev up0\n"
            "link set up0 up\n"
            "route add default via 192.0.2.254 dev up0\n"
        ))  # fmt: skip
        return name

    def _pods(self, ports: list[int]) -> list[dict[str, Any]]:
        """New pod namespaces, one per hostPort, and their runtime parameters (untimed)."""
        rts: list[dict[str, Any]] = []
        for port in ports:
            n = self.pod_count
            self.pod_count += 1
            cid = uuid.uuid4().hex + uuid.uuid4().hex
            rts.append({
                "containerID": cid,
                "netns": f"/run/netns/{NS_PREFIX}{self.tag}-p{n}",
                "ifname": "eth0",
                "args": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-{n};"
                        f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID={uuid.uuid4()}",
                "capabilityArgs": {"portMappings": [
                    {"hostPort": port, "containerPort": CONTAINER_PORT, "protocol": "tcp",
                     "hostIP": ""}]},
            })  # fmt: skip
        self._ns_add([os.path.basename(rt["netns"]) for rt in rts])
        return rts

    # run ---------------------------------------------------------------------------------------
    def setup(self) -> None:
        """One node namespace and driver per cell (side, existing pods)."""
        podnet = self._podnet_plugin()
        if self.args.variant:
            (podnet.parent / VARIANT_PLUGIN).symlink_to(Path(self.args.variant).resolve())
            self.podnet_source += f"; variant {self.args.variant}"
        cni_path = f"{podnet.parent}:{REFERENCE_DIR}"
        self.levels = sorted(set(self.args.pods))
        self.conflists = {}
        for side in self.suite.sides:
            for level in self.levels:
                data = os.path.join(self.tmp, f"{side}-{level}")
                conf = self.suite.conflist(side, data)
                self.conflists[side] = conf
                path = os.path.join(self.tmp, f"{side}-{level}.conflist")
                with open(path, "w") as f:
                    json.dump(conf, f, indent=2)
                node = self._node(side, level)
                self.drivers[(side, level)] = Driver(f"{side}@{level}", node, path, cni_path)

    def _podnet_plugin(self) -> Path:
        """The podnet executable to measure (``podnet``, or ``podnet-portmap`` with ``--suite
        portmap``): by default the file ``podnetctl install`` writes.

        The measured tree is the work tree (through the venv), or with ``--commit REV`` the
        ``src/podnet`` of REV exported into the tmp dir and put on ``sys.path`` of a throw-away
        venv, so a work tree being edited does not move the figures. The plugin file is what
        the tree's own ``plugin_script`` (``podnet.runtime.installer``, earlier ``.install``)
        writes, e.g. ``#!<venv python> -IS`` + ``sys.path`` + ``main()``, or setuptools'
        console script for trees that predate it. The tree is
        byte-compiled first, as ``pip install`` does: with PYTHONDONTWRITEBYTECODE set, stale
        bytecode would be recompiled on every call. ``--podnet PATH`` runs PATH as it is.
        """
        bindir = Path(self.tmp) / "bin"
        bindir.mkdir()
        if self.args.podnet:
            # Plugins are found by type in CNI_PATH: the file must be called "podnet" (or
            # "podnet-portmap").
            self.podnet_source = f"{self.args.podnet} (as given)"
            (bindir / self.suite.plugin).symlink_to(Path(self.args.podnet).resolve())
            return bindir / self.suite.plugin
        if self.args.commit:
            snap = Path(self.tmp) / "snapshot"
            snap.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", self.args.commit, "src/podnet"],
                check=True, capture_output=True,
            ).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(snap)], input=archive, check=True)
            src = snap / "src"
            venv = Path(self.tmp) / "venv"
            subprocess.run([str(VENV_PYTHON), "-m", "venv", "--without-pip", str(venv)],
                           check=True)  # fmt: skip
            python = venv / "bin" / "python3"
            purelib = sh(
                str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            ).strip()
            # the snapshot first, then the work venv's site-packages: the tree's dependencies
            # (jiter) as an install of it would have them, not the stdlib fallbacks
            deps = sh(
                str(VENV_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            ).strip()
            Path(purelib, "podnet-bench-snapshot.pth").write_text(f"{src}\n{deps}\n")
            self.podnet_source = f"commit {git_describe(self.args.commit)}"
        else:
            src, python = REPO / "src", VENV_PYTHON
            self.podnet_source = f"work tree ({git_describe('HEAD')}{dirty_suffix()})"
        subprocess.run([str(python), "-m", "compileall", "-q", str(src / "podnet")], check=True)
        script = subprocess.run(
            [str(python), "-I", "-c", PLUGIN_SCRIPT_PROBE, str(python), self.suite.entry_point],
            capture_output=True, text=True,
        )  # fmt: skip
        if script.returncode == 0:
            text, form = script.stdout, "podnetctl install plugin file"
        else:
            module, _, func = self.suite.entry_point.partition(":")
            text = CONSOLE_SCRIPT.format(python=python, src=str(src), module=module, func=func)
            form = "console script"
        self.podnet_source += f", {form}, {text.splitlines()[0]}"
        plugin = bindir / self.suite.plugin
        plugin.write_text(text)
        plugin.chmod(0o755)
        return plugin

    def populate(self) -> None:
        """Bring every node to its number of existing pods (all drivers concurrently)."""
        busy = []
        for (_side, level), driver in self.drivers.items():
            if level:
                ports = list(range(POPULATE_PORT_BASE, POPULATE_PORT_BASE + level))
                driver.send({"op": "populate", "rts": self._pods(ports)})
                busy.append(driver)
        if not busy:
            return
        self.say(f"populating {len(busy)} nodes with {', '.join(map(str, self.levels))} pods ...")
        started = time.monotonic()
        for driver in busy:
            driver.receive()
        self.say(f"  done in {time.monotonic() - started:.1f} s")

    def round(self, k: int) -> dict[tuple[str, str, int], dict[str, Any]]:
        """Sample ``k``: one ADD then one DEL of a fresh pod on every node, in an order rotated
        by ``k`` so that each cell takes each position equally often."""
        cells = list(self.drivers)
        order = cells[k % len(cells) :] + cells[: k % len(cells)]
        rts = dict(zip(order, self._pods([SAMPLE_PORT_BASE + k] * len(order)), strict=True))
        out = {}
        for cell in order:
            out[(cell[0], "ADD", cell[1])] = self.drivers[cell].call({"op": "add", "rt": rts[cell]})
        for cell in order:
            out[(cell[0], "DEL", cell[1])] = self.drivers[cell].call(
                {"op": "del", "containerID": rts[cell]["containerID"]}
            )
        # The pod namespaces go now, outside the timed region; their links went with DEL.
        self._ns_del([os.path.basename(rt["netns"]) for rt in rts.values()])
        return out

    def run(self) -> dict[str, Any]:
        self.setup()
        self.populate()
        time.sleep(self.args.settle)
        cells: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        self.say(f"sampling {len(self.drivers)} nodes interleaved: {self.args.warmup} warm-up + "
                 f"{self.args.samples} rounds ...")  # fmt: skip
        started = time.monotonic()
        for k in range(self.args.warmup + self.args.samples):
            result = self.round(k)
            if k >= self.args.warmup:
                for key, timing in result.items():
                    cells.setdefault(key, []).append(timing)
        self.say(f"  done in {time.monotonic() - started:.1f} s")
        self.podnet_state = self._state_files()
        return self.report(cells)

    def _state_files(self) -> dict[str, dict[str, int]]:
        """Sizes of each podnet node's state files after sampling (a growing WAL shows here)."""
        out = {}
        for level in self.levels:
            data = Path(self.tmp, f"podnet-{level}")
            if data.is_dir():
                out[f"{level} pods"] = {f.name: f.stat().st_size for f in sorted(data.iterdir())}
        return out

    def close(self, graceful: bool) -> None:
        for driver in self.drivers.values():
            try:
                driver.stop(graceful)
            except Exception as err:  # noqa: BLE001 - keep cleaning up
                self.say(f"warning: stopping the {driver.side} driver: {err}")
        # Pod namespaces first, then the nodes (their veths, nft table and iptables rules go
        # with them).
        self._ns_del([n for n in self.namespaces if n not in self.nodes])
        self._ns_del(list(self.namespaces))
        left = [n for n in os.listdir("/run/netns") if n.startswith(f"{NS_PREFIX}{self.tag}-")] \
            if os.path.isdir("/run/netns") else []  # fmt: skip
        if left:
            self.say(f"warning: namespaces left behind: {' '.join(left)}")
        shutil.rmtree(self.tmp, ignore_errors=True)

    def say(self, message: str) -> None:
        print(message, file=self.log, flush=True)

    # report ------------------------------------------------------------------------------------
    def report(self, cells: dict[tuple[str, str, int], list[dict[str, Any]]]) -> dict[str, Any]:
        rows = []
        for (side, verb, level), timings in sorted(cells.items()):
            ms = [t["ms"] for t in timings]
            per_plugin = list(zip(*(t["plugins_ms"] for t in timings), strict=True))
            chain = self.conflists[side]["plugins"]
            names = [p["type"] for p in (chain if verb == "ADD" else chain[::-1])]
            rows.append({
                "side": side, "verb": verb, "pods": level, "n": len(ms),
                "p50_ms": round(percentile(ms, 50), 2), "p90_ms": round(percentile(ms, 90), 2),
                "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2),
                # CPU time of the call's processes (plugins and their tools): less moved by
                # the machine's other load than the wall clock
                "cpu_p50_ms": round(percentile([t["cpu_ms"] for t in timings], 50), 2),
                "plugins_p50_ms": {name: round(percentile(list(v), 50), 2)
                                   for name, v in zip(names, per_plugin, strict=True)},
                "plugins_p90_ms": {name: round(percentile(list(v), 90), 2)
                                   for name, v in zip(names, per_plugin, strict=True)},
            })  # fmt: skip
        p50 = {(r["side"], r["verb"], r["pods"]): r["p50_ms"] for r in rows}
        levels = sorted({r["pods"] for r in rows})
        targets: list[dict[str, Any]] = []
        if self.suite.name == "portmap":
            ratios = portmap_ratios(rows)
        else:
            ratios, targets = podnet_targets(p50, levels)
        return {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine_info(),
            "settings": {
                "suite": self.suite.name,
                "samples": self.args.samples,
                "warmup": self.args.warmup,
                "pods": levels,
                "podnet": self.podnet_source,
                "podnet_state_bytes": self.podnet_state,
                "reference": REFERENCE_DIR,
                "conflists": self.conflists,
            },  # fmt: skip
            "cells": rows,
            "ratios": ratios,
            "targets": targets,
        }


def podnet_targets(p50: dict[tuple[str, str, int], float], levels: list[int]
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """The default suite: podnet / reference p50 per verb and level, and issue 2's targets."""
    ratios: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    for level in levels:
        for verb, limit in (("ADD", 0.8), ("DEL", 0.25)):
            ratio = p50[("podnet", verb, level)] / p50[("ref", verb, level)]
            ratios.append({"verb": verb, "pods": level, "podnet_over_ref": round(ratio, 3)})
            targets.append({
                "target": f"{verb} p50 <= {limit}x reference at {level} pods",
                "value": round(ratio, 3), "limit": limit, "pass": ratio <= limit,
            })  # fmt: skip
    if 0 in levels and levels[-1] > 0:
        top = levels[-1]
        for verb in ("ADD", "DEL"):
            growth = p50[("podnet", verb, top)] / p50[("podnet", verb, 0)]
            targets.append({
                "target": f"podnet {verb} p50 at {top} pods <= 1.2x at 0 pods",
                "value": round(growth, 3), "limit": 1.2, "pass": growth <= 1.2,
            })  # fmt: skip
    return ratios, targets


def portmap_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--suite portmap``: each podnet-portmap side over the reference, per verb and level,
    for the portmap plugin's own time (p50, p90) and the chain's (p50, p90)."""
    by = {(r["side"], r["verb"], r["pods"]): r for r in rows}
    out = []
    for (side, verb, level), row in sorted(by.items()):
        ref = by.get(("ref", verb, level))
        if side == "ref" or ref is None:
            continue
        entry: dict[str, Any] = {"side": side, "verb": verb, "pods": level}
        for q in ("p50", "p90"):
            mine, theirs = _portmap_ms(row, q), _portmap_ms(ref, q)
            entry[f"portmap_{q}_over_ref"] = round(mine / theirs, 3)
            entry[f"chain_{q}_over_ref"] = round(row[f"{q}_ms"] / ref[f"{q}_ms"], 3)
        out.append(entry)
    return out


def _portmap_ms(row: dict[str, Any], q: str) -> float:
    """The per-plugin time of the portmap plugin (reference, podnet's or a variant) in a row:
    the plugin of the chain that is not ptp."""
    times: dict[str, float] = row[f"plugins_{q}_ms"]
    return next(v for k, v in times.items() if k != "ptp")


#: Prints the plugin file ``podnetctl install`` would write for the interpreter in argv[1].
PLUGIN_SCRIPT_PROBE = """import importlib, sys
for name in ("podnet.runtime.installer", "podnet.runtime.install"):
    try:
        plugin_script = importlib.import_module(name).plugin_script
        break
    except (ImportError, AttributeError):
        continue
else:
    sys.exit(1)
sys.stdout.write(plugin_script(sys.argv[2], sys.argv[1]))
"""

#: setuptools' console script (what the venv's bin/podnet is), for trees without
#: podnet.runtime.install; the source tree is already on the venv's sys.path.
CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {func}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({func}())
"""


def git_describe(rev: str) -> str:
    try:
        return sh("git", "-C", str(REPO), "rev-parse", "--short", rev).strip()
    except (RuntimeError, OSError):
        return "?"


def dirty_suffix() -> str:
    try:
        dirty = sh("git", "-C", str(REPO), "status", "--porcelain", "--", "src").strip()
    except (RuntimeError, OSError):
        return ""
    return ", src modified" if dirty else ""


def machine_info() -> dict[str, Any]:
    def version(pkg: str) -> str:
        try:
            return sh("dpkg-query", "-W", "-f=${Version}", pkg)
        except (RuntimeError, OSError):
            return "?"

    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "containernetworking-plugins": version("containernetworking-plugins"),
        "iproute2": version("iproute2"),
        "nftables": version("nftables"),
        "iptables": version("iptables"),
    }


def render(report: dict[str, Any]) -> str:
    if report["settings"].get("suite") == "portmap":
        return render_portmap(report)
    lines = [
        f"podnet vs ptp+host-local+portmap — {report['date']}, "
        f"kernel {report['machine']['kernel']}, "
        f"{report['machine']['cpus']} CPUs, n={report['settings']['samples']} per cell, "
        f"podnet from {report['settings']['podnet']}",
        "",
        f"{'side':<8}{'verb':<6}{'pods':>6}{'p50 ms':>10}{'p90 ms':>10}{'min ms':>10}"
        "   per plugin p50",
    ]
    for r in report["cells"]:
        plugins = ", ".join(f"{k} {v:.1f}" for k, v in r["plugins_p50_ms"].items())
        lines.append(
            f"{r['side']:<8}{r['verb']:<6}{r['pods']:>6}{r['p50_ms']:>10.1f}{r['p90_ms']:>10.1f}"
            f"{r['min_ms']:>10.1f}   {plugins}"
        )
    lines += ["", "podnet / reference (p50):"]
    for r in report["ratios"]:
        lines.append(f"  {r['verb']} at {r['pods']:>3} pods: {r['podnet_over_ref']:.2f}x")
    lines += ["", "targets (issue 2, item 12; growth: issue 15, item 7):"]
    for t in report["targets"]:
        verdict = "PASS" if t["pass"] else "MISS"
        lines.append(f"  {verdict}  {t['target']}: {t['value']:.2f}x")
    return "\n".join(lines)


PORTMAP_SIDE_NAMES = {
    "ref": "reference portmap",
    "pm-ipt": "podnet-portmap iptables",
    "pm-nft": "podnet-portmap nftables",
    "var-ipt": "variant iptables",
    "var-nft": "variant nftables",
}


def render_portmap(report: dict[str, Any]) -> str:
    """``--suite portmap``: the portmap plugin's own time and the chain's, then the ratios."""
    lines = [
        f"ptp+host-local + reference portmap / podnet-portmap — {report['date']}, "
        f"kernel {report['machine']['kernel']}, "
        f"{report['machine']['cpus']} CPUs, n={report['settings']['samples']} per cell, "
        f"podnet-portmap from {report['settings']['podnet']}",
        "",
        f"{'side':<25}{'verb':<5}{'pods':>5}{'portmap p50':>13}{'p90':>8}"
        f"{'chain p50':>11}{'p90':>8}{'ptp p50':>9}",
    ]
    order = {side: i for i, side in enumerate(PORTMAP_SIDE_NAMES)}
    cells = sorted(report["cells"], key=lambda r: (r["verb"], r["pods"], order.get(r["side"], 9)))
    for r in cells:
        ptp = r["plugins_p50_ms"].get("ptp", float("nan"))
        lines.append(
            f"{PORTMAP_SIDE_NAMES.get(r['side'], r['side']):<25}{r['verb']:<5}{r['pods']:>5}"
            f"{_portmap_ms(r, 'p50'):>13.1f}{_portmap_ms(r, 'p90'):>8.1f}"
            f"{r['p50_ms']:>11.1f}{r['p90_ms']:>8.1f}{ptp:>9.1f}"
        )
    lines += ["", "podnet-portmap / reference portmap (ms ratios):",
              f"{'side':<25}{'verb':<5}{'pods':>5}{'portmap p50':>13}{'p90':>8}"
              f"{'chain p50':>11}{'p90':>8}"]  # fmt: skip
    for r in sorted(report["ratios"], key=lambda r: (r["verb"], r["pods"], r["side"])):
        lines.append(
            f"{PORTMAP_SIDE_NAMES.get(r['side'], r['side']):<25}{r['verb']:<5}{r['pods']:>5}"
            f"{r['portmap_p50_over_ref']:>12.2f}x{r['portmap_p90_over_ref']:>7.2f}x"
            f"{r['chain_p50_over_ref']:>10.2f}x{r['chain_p90_over_ref']:>7.2f}x"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pods",
        default="0,300",
        help="existing pods on each node before sampling, comma-separated (0,300)",
    )
    add_sampling_options(p, 40, "timed rounds, one sample per cell each (40)")
    p.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds to wait after populating, before sampling (1.0)",
    )
    p.add_argument(
        "--podnet",
        metavar="PATH",
        help="run this executable, as it is, as podnet (as podnet-portmap with --suite portmap) "
        "(default: the plugin file 'podnetctl install' writes, for the venv's podnet)",
    )
    p.add_argument(
        "--commit",
        metavar="REV",
        help="measure src/podnet as committed in REV (git archive into the tmp dir) "
        "instead of the work tree",
    )
    p.add_argument(
        "--suite",
        choices=("podnet", "portmap"),
        default="podnet",
        help="podnet: the podnet plugin vs ptp+host-local+portmap (issue 2 targets); portmap: "
        "ptp+host-local followed by the reference portmap vs podnet-portmap with the iptables "
        "and with the nftables backend (issue 3) (podnet)",
    )
    p.add_argument(
        "--variant",
        metavar="PATH",
        help="--suite portmap: also run this executable as podnet-portmap (e.g. a patched copy "
        "of the plugin file, see bench/portmap_variant.py), sides var-ipt and var-nft",
    )
    add_output_options(p)
    args = p.parse_args(argv)  # fmt: skip
    try:
        args.pods = [int(x) for x in args.pods.split(",") if x.strip()]
    except ValueError:
        p.error("--pods: comma-separated integers")
    if not args.pods or min(args.pods) < 0 or max(args.pods) > 30000:
        p.error("--pods: values in 0-30000")
    if args.samples < 1 or args.warmup < 0 or args.samples + args.warmup > 10000:
        p.error("--samples >= 1, --warmup >= 0, together at most 10000")
    return args


def _preflight(args: argparse.Namespace) -> None:
    need_root_and_tools("bench_add_del",
                        ("ip", "nft", "iptables", "iptables-save", "iptables-restore"))  # fmt: skip
    for plugin in ("ptp", "host-local", "portmap"):
        if not os.access(os.path.join(REFERENCE_DIR, plugin), os.X_OK):
            sys.exit(f"bench_add_del: {REFERENCE_DIR}/{plugin} missing "
                     "(apt-get install containernetworking-plugins)")  # fmt: skip
    if args.variant and (args.suite != "portmap" or not os.access(args.variant, os.X_OK)):
        sys.exit(f"bench_add_del: --variant needs --suite portmap and an executable {args.variant}")
    if args.podnet and not os.access(args.podnet, os.X_OK):
        sys.exit(f"bench_add_del: podnet plugin {args.podnet} not found or not executable")
    if not args.podnet and not os.access(VENV_PYTHON, os.X_OK):
        sys.exit(f"bench_add_del: {VENV_PYTHON} missing (create the venv, pip install -e .)")


def checked_bench(argv: list[str]) -> Bench:
    """A :class:`Bench` for this script's options ``argv`` (as :func:`parse_args` reads them),
    once the checks that it can run have passed (root, tools, the reference plugins, the podnet
    to run); exits with a message otherwise."""
    args = parse_args(argv)
    _preflight(args)
    return Bench(args)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--driver"]:
        return driver_main(argv[1], argv[2])
    args = parse_args(argv)
    _preflight(args)
    end_on_signals()  # the cleanup below runs on Ctrl-C, SIGTERM and SIGHUP too
    bench = Bench(args)
    graceful = False
    try:
        report = bench.run()
        graceful = True
    except (KeyboardInterrupt, RuntimeError, OSError, subprocess.CalledProcessError) as err:
        return failed(bench.say, "bench_add_del", err)
    finally:
        bench.close(graceful)
    return finish(report, args, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
