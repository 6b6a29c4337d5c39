"""What the benchmark drivers share (bench_add_del.py, bench_forwards.py, profile_portmap.py):
the percentile they report, the root and tool checks before anything starts, the signals that
end a run through its cleanup, and how a finished run is printed and exits."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default; the median for q=50)."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def need_root_and_tools(name: str, tools: tuple[str, ...]) -> None:
    """Exit with ``name: …`` unless run as root with every one of ``tools`` on PATH."""
    if os.geteuid() != 0:
        sys.exit(f"{name}: needs root (network namespaces)")
    for tool in tools:
        if shutil.which(tool) is None:
            sys.exit(f"{name}: {tool} not found")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def end_on_signals() -> None:
    """Ctrl-C, SIGTERM and a closed terminal all raise KeyboardInterrupt, so a run ends in its
    cleanup (even when started from a script that ignores SIGINT for background jobs)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)


def failed(say: Callable[[str], None], name: str, err: BaseException) -> int:
    """The exit status of a run stopped by ``err`` (130 for an interrupt, else 1), said first."""
    if isinstance(err, KeyboardInterrupt):
        say("interrupted; cleaned up")
        return 130
    say(f"{name}: error: {err}")
    return 1


def traced_exit(key: str, events: str, log: str) -> str:
    """Source lines of a traced plugin file: ``os._exit`` replaced by one that first appends one
    ``repr`` line to the file ``log`` (the CNI verb, the file's CLOCK_MONOTONIC marks ``_T0``
    and ``_T1`` in ns, the exit time, and the list named ``events`` as ``key``), then exits.
    The file imports ``time as _t`` and ``os as _os`` before these lines."""
    return f"""_exit = _os._exit
def _traced_exit(status):
    t = _t.monotonic_ns()
    rec = dict(cmd=_os.environ.get("CNI_COMMAND"), t0=_T0, t1=_T1, exit=t, {key}={events})
    fd = _os.open({log!r}, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
    _os.write(fd, (repr(rec) + "\\n").encode())
    _os.close(fd)
    _exit(status)
_os._exit = _traced_exit
"""


def add_sampling_options(p: argparse.ArgumentParser, samples: int, samples_help: str) -> None:
    """``--samples`` (timed rounds, ``samples`` by default) and ``--warmup`` (discarded rounds
    before them, 3 by default)."""
    p.add_argument("--samples", type=int, default=samples, help=samples_help)
    p.add_argument("--warmup", type=int, default=3, help="discarded rounds before sampling (3)")


def add_output_options(p: argparse.ArgumentParser) -> None:
    """``--json`` and ``--fail-on-miss``, read by :func:`finish`."""
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--fail-on-miss", action="store_true", help="exit 1 when a target is missed")


def finish(report: dict[str, Any], args: argparse.Namespace,
           render: Callable[[dict[str, Any]], str]) -> int:  # fmt: skip
    """Print ``report`` (JSON with ``--json``, else ``render``'s text); the exit status: 1 when
    ``--fail-on-miss`` and a target was missed, else 0."""
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    if args.fail_on_miss and not all(t["pass"] for t in report["targets"]):
        return 1
    return 0
