"""What every part of ``podnetctl demo`` uses: the demo's pods, its progress lines, running a
tool, and HTTP in and between namespaces."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape

from podnet import checked
from podnet.errors import CNIError

__all__ = [
    "CLIENT4",
    "CLIENT6",
    "NETWORK",
    "NODE4",
    "NODE6",
    "POD_PORT",
    "RANGES",
    "TIMEOUT",
    "DemoError",
    "Pod",
    "Progress",
    "client_kind",
    "fetch",
    "make_url",
    "one_line",
    "run_cmd",
    "server_kind",
]

NETWORK = "podnet"
RANGES = ("10.244.2.0/24", "fd00:10:244:2::/64")
NODE4, CLIENT4, NODE6, CLIENT6 = "192.0.2.1", "192.0.2.2", "2001:db8:1::1", "2001:db8:1::2"
POD_PORT = 80
TIMEOUT = 20.0  # seconds any single command may take


class DemoError(Exception):
    """A step failed; the demo stops and tears down."""


@dataclass
class Pod:
    """One demo pod: its namespace, container ID, hostPort and, after ADD, its addresses."""

    label: str
    netns: str
    container_id: str
    host_port: int
    ipv4: str = ""
    ipv6: str = ""
    host_if: str = ""

    @property
    def path(self) -> str:
        return f"/run/netns/{self.netns}"


@dataclass
class Progress:
    """One line per step on ``console``; counts failed checks."""

    console: Console
    failures: int = 0

    def section(self, title: str) -> None:
        self.console.print(f"[bold]{escape(title)}[/bold]")

    def ok(self, text: str, detail: str = "") -> None:
        tail = f"  [dim]{escape(detail)}[/dim]" if detail else ""
        self.console.print(f"  [green]✓[/green] {escape(text)}{tail}")

    def fail(self, text: str, detail: str = "") -> None:
        self.failures += 1
        tail = f"  [red]{escape(detail)}[/red]" if detail else ""
        self.console.print(f"  [red]✗[/red] {escape(text)}{tail}")

    @contextmanager
    def step(self, text: str, *, fatal: bool = True) -> Iterator[list[str]]:
        """Run a step; the yielded list collects detail text. A failure prints ``✗`` and, when
        ``fatal``, stops the demo with DemoError."""
        detail: list[str] = []
        started = time.monotonic()
        try:
            yield detail
        except Exception as err:  # noqa: BLE001 - every failure is a ✗ line, then teardown
            self.fail(text, one_line(err))
            if fatal:
                raise DemoError(text) from err
            return
        ms = 1000 * (time.monotonic() - started)
        self.ok(text, " ".join([*detail, f"({ms:.0f} ms)"]))


def one_line(err: BaseException) -> str:
    """``err`` as one line: a CNI error with its code and details, else its text."""
    if isinstance(err, CNIError):
        text = f"{err.msg} [code {err.code}]" + (f"; {err.details}" if err.details else "")
    elif isinstance(err, DemoError | OSError):
        text = str(err) or type(err).__name__
    else:
        text = f"{type(err).__name__}: {err}"
    return " ".join(text.split())


def run_cmd(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (at most :data:`TIMEOUT` seconds); DemoError naming it when it fails and
    ``check``."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise DemoError(f"{' '.join(argv)}: timed out after {TIMEOUT:.0f} s") from None
    if check and proc.returncode != 0:
        raise DemoError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def make_url(ip: str, port: int) -> str:
    """``http://ip:port/``, the address bracketed when it is IPv6."""
    return f"http://[{ip}]:{port}/" if checked.ip(ip).version == 6 else f"http://{ip}:{port}/"


def server_kind() -> str:
    """What serves HTTP in the pods: ``busybox httpd`` when busybox has it, else Python's."""
    busybox = shutil.which("busybox")
    if busybox:
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True).stdout
        if "httpd" in applets.split():
            return "busybox httpd"
    return "python http.server"


def client_kind() -> str:
    """What fetches: ``curl`` when installed, else Python's urllib."""
    return "curl" if shutil.which("curl") else "python urllib"


def fetch(netns: str, url: str, timeout: float = 3.0) -> tuple[bool, str]:
    """GET ``url`` from inside ``netns`` (no proxies); ``(ok, body or error)``."""
    if shutil.which("curl"):
        argv = ["curl", "-sS", "-g", "--noproxy", "*", "--max-time", str(timeout), url]
    else:
        code = (
            "import sys, urllib.request as u\n"
            "o = u.build_opener(u.ProxyHandler({}))\n"
            "print(o.open(sys.argv[1], timeout=float(sys.argv[2])).read().decode(), end='')\n"
        )
        argv = [sys.executable, "-c", code, url, str(timeout)]
    proc = run_cmd("ip", "netns", "exec", netns, *argv, check=False)
    if proc.returncode != 0:
        return False, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return True, proc.stdout
