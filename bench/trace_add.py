#!/usr/bin/env python3
"""How one ``podnet`` ADD moves between podnet's modules, call by call: the figures behind
docs/benchmarks.md, "Modules an ADD enters".

Run as root (it makes a node and a pod network namespace of its own, and removes them)::

    .venv/bin/python bench/trace_add.py [--driver ptp|bridge] [--src DIR] [--json]

``--src`` runs another checkout's ``src`` (say a worktree of an older commit) with this
machine's tools. The ADD runs in-process in the node namespace, from
:func:`podnet.plugins.podnet.cmd_add`, under :func:`sys.setprofile`: every call of a function
of a ``podnet.*`` module (module bodies run by lazy imports are left out) appends its module to
a sequence, consecutive repeats folded. Reported:

* ``modules``: distinct podnet modules the ADD enters;
* ``visits``: length of the folded sequence (each arrival in a module);
* ``returns``: ``visits - modules``, how often the ADD comes back to a module it had left;
* ``calls``: podnet function calls in all;
* the same three counts with each module taken as its package (``podnet.store.db`` as
  ``podnet.store``): how often the ADD crosses between the layers.

The pod is deleted (untraced) and both namespaces removed afterwards, even on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")
BRIDGE_NET = "trace-br"


def conflist(driver: str, data_dir: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.1.0", "name": f"trace-{driver}", "type": "podnet",
                            "dataDir": data_dir}  # fmt: skip
    if driver == "bridge":
        conf["network"] = BRIDGE_NET
    else:
        conf["ranges"] = ["10.77.0.0/24"]
    return conf


def inner(args: argparse.Namespace) -> int:
    """In the node namespace: one traced ADD, its figures on stdout as JSON."""
    if args.src:
        sys.path.insert(0, args.src)
    from podnet.cni.skel import Call
    from podnet.plugins import podnet as plugin

    config = conflist(args.driver, args.data_dir)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "trace0", "CNI_NETNS": args.netns,
           "CNI_IFNAME": "eth0", "CNI_PATH": ""}  # fmt: skip
    call = Call(env, json.dumps(config).encode(), config)
    seq: list[str] = []
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event != "call":
            return
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith("podnet") or frame.f_code.co_name == "<module>":
            return
        calls += 1
        if not seq or seq[-1] != name:
            seq.append(name)

    sys.setprofile(profile)
    try:
        plugin.cmd_add(call)
    finally:
        sys.setprofile(None)
    by_package = [".".join(n.split(".")[:2]) for n in seq]
    packages = [m for i, m in enumerate(by_package) if i == 0 or by_package[i - 1] != m]
    report = {"driver": args.driver, "modules": len(set(seq)), "visits": len(seq),
              "returns": len(seq) - len(set(seq)), "calls": calls,
              "packages": len(set(packages)), "package_visits": len(packages),
              "package_returns": len(packages) - len(set(packages)), "sequence": seq,
              "podnet": os.path.dirname(sys.modules["podnet"].__file__ or "")}  # fmt: skip
    print(json.dumps(report))
    return 0


def sh(*argv: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout


def outer(args: argparse.Namespace) -> int:
    tag = f"trace{os.getpid()}"
    node, pod = f"{tag}-node", f"{tag}-pod"
    with tempfile.TemporaryDirectory(prefix="podnet-trace-") as tmp:
        data_dir = os.path.join(tmp, "data")
        os.mkdir(data_dir, 0o700)
        env = {
            **os.environ,
            "PODNET_DATA_DIRS": data_dir,
            "PODNET_DATA_DIR": data_dir,
            "PODNET_CONF": os.path.join(tmp, "podnet.conf"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if args.src:
            env["PYTHONPATH"] = args.src
        sh("ip", "netns", "add", node)
        try:
            sh("ip", "netns", "add", pod)
            sh("ip", "-n", node, "link", "set", "lo", "up")
            if args.driver == "bridge":
                sh("ip", "netns", "exec", node, os.path.join(BIN, "podnetctl"), "network", "create",
                   "--init", BRIDGE_NET, "ipv4.address=10.78.0.1/24", env=env)  # fmt: skip
            out = sh("ip", "netns", "exec", node, sys.executable, os.path.abspath(__file__),
                     "--inner", "--driver", args.driver, "--data-dir", data_dir, "--netns",
                     f"/run/netns/{pod}", *(["--src", args.src] if args.src else []),
                     env=env)  # fmt: skip
        finally:
            subprocess.run(["ip", "netns", "del", pod], capture_output=True)
            subprocess.run(["ip", "netns", "del", node], capture_output=True)
    report = json.loads(out.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['driver']} ADD ({report['podnet']}): {report['modules']} podnet modules "
              f"entered, {report['visits']} arrivals, {report['returns']} returns to a module "
              f"left before, {report['calls']} podnet calls; by package: "
              f"{report['packages']} entered, {report['package_visits']} arrivals, "
              f"{report['package_returns']} returns")  # fmt: skip
        if args.sequence:
            print(" -> ".join(m.removeprefix("podnet.") for m in report["sequence"]))
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--driver", choices=("ptp", "bridge"), default="ptp")
    p.add_argument("--src", default="", help="another checkout's src directory")
    p.add_argument("--json", action="store_true")
    p.add_argument("--sequence", action="store_true", help="print the module sequence too")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--netns", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("trace_add.py: run as root (it makes network namespaces)", file=sys.stderr)
        return 2
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
