"""The pieces of :class:`podnet.cli.demo.ovnlab.OvnLab`: the OVS and OVN tools it needs, a node,
running a command in a namespace, and stopping daemons by their pid files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from podnet.ovn import vswitch

__all__ = ["TIMEOUT", "LabError", "Node", "kill", "missing_tools", "pid_of", "run_in"]

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"
SB_SCHEMA = "/usr/share/ovn/ovn-sb.ovsschema"
VSWITCH_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
TOOLS = (
    "ovsdb-tool",
    "ovsdb-server",
    "ovs-vswitchd",
    vswitch.TOOL,
    "ovn-northd",
    "ovn-nbctl",
    "ovn-controller",
    "ethtool",
)
TIMEOUT = 20.0  # seconds a command may take


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: its parent, not us, reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class LabError(Exception):
    """A command of the lab's set-up failed (its stderr in the message)."""


def missing_tools() -> list[str]:
    """The tools :class:`OvnLab` needs that are not installed (Debian: openvswitch-switch,
    ovn-central, ovn-host, ethtool)."""
    return [t for t in TOOLS if shutil.which(t) is None]


@dataclass
class Node:
    """One node: its namespace, underlay address and OVS/OVN directory."""

    name: str
    netns: str
    address: str
    dir: Path
    pids: list[Path] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The variables that point OVS and OVN tools at this node's daemons."""
        d = str(self.dir)
        return {
            "OVS_RUNDIR": d,
            "OVS_DBDIR": d,
            "OVS_LOGDIR": d,
            "OVN_RUNDIR": d,
            "OVN_LOGDIR": d,
            "OVS_SYSCONFDIR": d,
        }


def run_in(
    netns: str | None,
    *argv: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``netns`` (None: here) with ``env`` added; LabError when it fails."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    out = subprocess.run(
        full,
        env={**os.environ, **(env or {})},
        input=input,
        text=True,
        capture_output=True,
        timeout=TIMEOUT,
    )
    if check and out.returncode != 0:
        raise LabError(f"{' '.join(argv)} (in {netns}): {out.stderr.strip() or out.stdout.strip()}")
    return out


def pid_of(pidfile: Path) -> int | None:
    """The pid a daemon wrote to ``pidfile``, None when there is none."""
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kill(*pidfiles: Path) -> None:
    """SIGTERM to each daemon, SIGKILL to those still there 2 s later; waits until gone."""
    pids = [p for p in map(pid_of, pidfiles) if p is not None]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 2
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.01)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while any(_alive(p) for p in pids):
        time.sleep(0.01)
