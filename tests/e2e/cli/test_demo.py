"""``podnetctl demo``: passes end to end (its OVN part across three nodes included), and leaves
no namespace, process, OVS/OVN daemon or temporary directory behind — after success, after a
failed check, and after Ctrl-C/SIGTERM. Its duration is printed, not asserted (timing belongs
to bench/)."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from envgate import need
from podnet.cli.demo import Demo, DemoError, Progress

PODNETCTL = str(Path(sys.executable).parent / "podnetctl")


def recorder() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(Console(file=out, width=200, highlight=False)), out


def leftovers(tag: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in names.splitlines() if f"pndemo-{tag}-" in line]


def ovn_daemons(tmp: str) -> list[str]:
    """OVS/OVN daemons of the demo's lab still running (their command lines name a path under
    the demo's temporary directory ``tmp``)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    names = ("ovsdb-server", "ovs-vswitchd", "ovn-northd", "ovn-controller")
    return [line for line in out.splitlines()
            if line.split(" ", 1)[0].rsplit("/", 1)[-1] in names and tmp + "/" in line]


# -- no root ---------------------------------------------------------------------------------
def test_progress_lines() -> None:
    progress, out = recorder()
    with progress.step("works") as detail:
        detail.append("detail")
    with progress.step("fails softly", fatal=False):
        raise DemoError("boom")
    with pytest.raises(DemoError), progress.step("fails hard"):
        raise RuntimeError("bug")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"  ✓ works  detail \(\d+ ms\)", lines[0])
    assert lines[1] == "  ✗ fails softly  boom"
    assert lines[2] == "  ✗ fails hard  RuntimeError: bug"
    assert progress.failures == 2


def test_demo_without_root_fails_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    progress, out = recorder()
    assert Demo(progress).run() is False
    text = out.getvalue()
    assert "✗ checks  the demo needs root" in text and "deleted 0 namespaces" in text
    assert "demo failed" in text


# -- root --------------------------------------------------------------------------------------
needs_root = pytest.mark.usefixtures("_namespaces")


@pytest.fixture
def _namespaces() -> None:
    need("root", "ip", "nft")


@pytest.mark.root
@needs_root
def test_demo_passes_and_leaves_nothing() -> None:
    started = time.monotonic()
    proc = subprocess.run([PODNETCTL, "demo"], capture_output=True, text=True, timeout=180)
    print(f"demo took {time.monotonic() - started:.1f} s")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "✗" not in out and "demo passed" in out
    for text in (
        "hostPort 8080",
        "127.0.0.1:8080",
        "pod-a → node 192.0.2.1:8081 → pod-b",
        "[2001:db8:1::1]:8081",
        "no host veths",
        "hostPort maps empty",
        "client → 198.51.100.10:80 → pod-c",
        "client → 198.51.100.11:8090 → pod-d",
        "pod-d → 198.51.100.10 → pod-c (hairpin, another pod of the bridge)",
        "client → 198.51.100.11:8080 → pod-d",
        "forward on the node's own 192.0.2.1 refused",
        "198.51.100.11:9999 dropped",
        "no bridge and no forward element left",
        "pod-x (n2) → pod-y (n3) over the tunnel",
        "outside → 198.51.100.20:80 → pod-x on n2",
        "outside → 198.51.100.21:8090 → pod-y on n3",
        "pod-y → outside 203.0.113.254: seen from 198.51.100.77 (SNAT)",
        "no podnet port or load balancer in the NB, no pod port in any br-int",
        "OVN lab stopped",
    ):
        assert text in out, text
    tag = re.search(r"pndemo-(\w+)-\*", out)
    tmp = re.search(r"removed (/\S+)", out)
    assert tag and tmp
    assert leftovers(tag.group(1)) == []
    assert not os.path.exists(tmp.group(1))
    assert ovn_daemons(tmp.group(1)) == []


@pytest.mark.root
@needs_root
@pytest.mark.parametrize(
    ("signum", "group", "at"),
    [
        (signal.SIGINT, True, "ADD through the runtime"),
        (signal.SIGINT, False, "ADD through the runtime"),
        (signal.SIGTERM, False, "ADD through the runtime"),
        (signal.SIGINT, True, "  ✓ ADD pod-x on n2"),
    ],
    ids=["ctrl-c (process group)", "SIGINT", "SIGTERM", "ctrl-c in the OVN part"],
)
def test_demo_interrupted_tears_down(signum: int, group: bool, at: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [PODNETCTL, "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        # as from a terminal: a suite started as a background job has SIGINT ignored, and a
        # child keeps an ignored disposition (POSIX; Python then installs no handler)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(at):
                if group:  # what a terminal does: plugins and servers get it too
                    os.killpg(proc.pid, signum)
                else:
                    proc.send_signal(signum)
                break
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode != 0, out
    assert "✗ interrupted" in out and "Teardown" in out, out + err
    tag = re.search(r"pndemo-(\w+)-\*", out)
    tmp = re.search(r"removed (/\S+)", out)
    assert tag and tmp, out
    assert leftovers(tag.group(1)) == []
    assert not os.path.exists(tmp.group(1))
    assert ovn_daemons(tmp.group(1)) == []


@pytest.mark.root
@needs_root
def test_demo_failed_check_exits_nonzero_and_tears_down(monkeypatch: pytest.MonkeyPatch) -> None:
    real_fetch = Demo.fetch

    def broken_hostports(
        self: Demo, netns: str, url: str, timeout: float = 3.0
    ) -> tuple[bool, str]:
        if ":8081" in url:
            return False, "connection refused (simulated)"
        return real_fetch(self, netns, url, timeout)

    monkeypatch.setattr(Demo, "fetch", broken_hostports)
    progress, out = recorder()
    d = Demo(progress)
    assert d.run() is False
    text = out.getvalue()
    assert text.count("✗") == 2 and "connection refused (simulated)" in text
    assert "✓ DEL pod-b" in text  # later steps still ran after the failed checks
    assert leftovers(d.tag) == [] and not os.path.exists(d.tmp)
    assert all(p.poll() is not None for p in d.servers)


@pytest.mark.root
@needs_root
@pytest.mark.parametrize("error", [DemoError("simulated ADD failure"), KeyError("bug")])
def test_demo_stopped_outside_a_step_fails_and_tears_down(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def fail_add(self: Demo) -> None:
        raise error

    monkeypatch.setattr(Demo, "add", fail_add)
    progress, out = recorder()
    d = Demo(progress)
    assert d.run() is False
    text = out.getvalue()
    assert "✗ demo stopped" in text and "demo failed" in text
    assert "deleted 4 namespaces" in text
    assert leftovers(d.tag) == [] and not os.path.exists(d.tmp)
