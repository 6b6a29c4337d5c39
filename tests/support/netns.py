"""Test hosts in network namespaces: a node namespace that plays the node, pod namespaces,
and a client namespace wired to the node ("another host"). Everything is torn down by
:meth:`Lab.close`, which the fixtures call even when a test fails."""

from __future__ import annotations

import atexit
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

VENV_BIN = Path(os.environ.get("PODNET_BIN", str(Path(__file__).resolve().parents[2] / ".venv" / "bin")))
PLUGIN = str(VENV_BIN / "podnet")
ECHO = str(Path(__file__).resolve().parent / "echo.py")

#: The data dirs the tests' plugins may use (a NetConf's dataDir must be one the node's
#: administrator allows, in the runtime's environment): every test's tmp_path is below /tmp.
#: Set for this process (in-process calls, children that inherit it); calls made with
#: ``env -i`` pass it themselves (:data:`PLUGIN_ENV`).
DATA_DIRS = "/tmp/*"
os.environ["PODNET_DATA_DIRS"] = DATA_DIRS
#: The node config the tests' plugins and podnetctl read (``PODNET_CONF``): a file in a private
#: directory of this process that does not exist (the defaults), so no test reads or writes the
#: machine's /etc/podnet; a test that installs with ``--data-dir`` passes its own.
NODE_CONF_DIR = tempfile.mkdtemp(prefix="podnet-nodeconf-")
atexit.register(shutil.rmtree, NODE_CONF_DIR, True)
os.environ["PODNET_CONF"] = NODE_CONF = os.path.join(NODE_CONF_DIR, "podnet.conf")
PLUGIN_ENV = {"PODNET_DATA_DIRS": DATA_DIRS, "PODNET_CONF": NODE_CONF}

#: The echo client's explicit failures (tests/support/echo.py), as :meth:`Lab.talk` returns them.
TIMEOUT, REFUSED, UNREACHABLE = "<timeout>", "<refused>", "<unreachable>"

# Documentation ranges (RFC 5737 / 3849) between the node and the client namespace.
NODE_ADDR4, CLIENT_ADDR4 = "192.0.2.1", "192.0.2.2"
NODE_ADDR6, CLIENT_ADDR6 = "2001:db8:1::1", "2001:db8:1::2"


def sh(*argv: str, check: bool = True, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, input=input, timeout=timeout)


def feed(argv: list[str], text: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``argv`` started with ``text`` on its stdin (closed after it) and its stdout piped: one
    of many calls run side by side."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None
    proc.stdin.write(text)
    proc.stdin.close()
    return proc


def finished(procs: list[subprocess.Popen[str]], timeout: float = 120) -> list[tuple[int, str]]:
    """Each of :func:`feed`'s calls' exit status (waited for up to ``timeout`` s) and stdout."""
    return [(p.wait(timeout=timeout), p.stdout.read() if p.stdout else "") for p in procs]


def feed_in(ns: str, program: str, env: dict[str, str], text: str) -> subprocess.Popen[str]:
    """:func:`feed` of ``program`` inside namespace ``ns`` with exactly the environment ``env``
    (``env -i``, as a runtime calls a plugin)."""
    return feed(["ip", "netns", "exec", ns, "env", "-i", *[f"{k}={v}" for k, v in env.items()], program], text)


class Lab:
    """Namespaces created by one test; names are unique so tests can run side by side."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.processes: list[subprocess.Popen[str]] = []
        self.node = self.netns("node")
        sh("ip", "-n", self.node, "link", "set", "lo", "up")

    def netns(self, role: str) -> str:
        name = f"pnt-{self.tag}-{role}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        return name

    def pod(self, role: str = "pod") -> str:
        """A new pod namespace (loopback up); returns its name. Path: ``/run/netns/<name>``."""
        name = self.netns(f"{role}{len(self.namespaces)}")
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def client(self) -> str:
        """A namespace linked to the node: node 192.0.2.1 / 2001:db8:1::1, client .2 / ::2."""
        name = self.netns("client")
        sh("ip", "link", "add", "up0", "netns", self.node, "type", "veth", "peer", "name", "up0", "netns", name)
        for ns, a4, a6 in ((self.node, NODE_ADDR4, NODE_ADDR6), (name, CLIENT_ADDR4, CLIENT_ADDR6)):
            sh("ip", "-n", ns, "addr", "add", f"{a4}/24", "dev", "up0")
            sh("ip", "-n", ns, "addr", "add", f"{a6}/64", "dev", "up0", "nodad")
            sh("ip", "-n", ns, "link", "set", "up0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.node, "route", "add", "default", "via", CLIENT_ADDR4)
        sh("ip", "-n", self.node, "-6", "route", "add", "default", "via", CLIENT_ADDR6)
        return name

    def exec(self, ns: str, *argv: str, check: bool = True, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", ns, *argv, check=check, input=input, timeout=timeout)

    def cni(
        self,
        command: str,
        conf: dict[str, Any],
        *,
        container_id: str = "",
        netns: str | None = None,
        ifname: str = "eth0",
        plugin: str = PLUGIN,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> tuple[int, Any]:
        """Run one plugin call inside the node namespace; ``(exit status, parsed stdout or None)``."""
        full = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": container_id,
            "CNI_NETNS": f"/run/netns/{netns}" if netns else "",
            "CNI_IFNAME": ifname,
            "CNI_PATH": "/opt/cni/bin:/usr/lib/cni",
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            **PLUGIN_ENV,
        }
        full.update(env or {})
        argv = ["ip", "netns", "exec", self.node, "env", "-i"] + [f"{k}={v}" for k, v in full.items()] + [plugin]
        proc = subprocess.run(argv, input=stdin if stdin is not None else json.dumps(conf), capture_output=True, text=True, timeout=120)
        out = proc.stdout.strip()
        return proc.returncode, (json.loads(out) if out else None)

    def serve(self, ns: str, name: str, port: int) -> None:
        """Start the echo server (TCP and UDP, IPv4 and IPv6) in ``ns``; stopped by close()."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, ECHO, "serve", name, str(port)],
            stdout=subprocess.PIPE, text=True,
        )
        self.processes.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def talk(self, ns: str, proto: str, host: str, port: int, sport: int = 0) -> str:
        """What the echo server at host:port answers a client in ``ns`` (``"<name> <peer>"``),
        or how it failed, explicitly: :data:`TIMEOUT`, :data:`REFUSED`, :data:`UNREACHABLE` or
        ``<error ERRNO>`` — never "", so a negative check says which failure it expects.
        ``sport`` fixes the client's source port (so UDP reuses one conntrack entry)."""
        extra = [str(sport)] if sport else []
        out = self.exec(ns, sys.executable, ECHO, proto, host, str(port), *extra, check=False, timeout=20)
        answer = out.stdout.strip()
        if out.returncode not in (0, 3) or not answer:
            raise AssertionError(f"echo client in {ns} failed: rc {out.returncode}: {out.stderr.strip()}")
        return answer

    def wait_dad(self, *namespaces: str, timeout: float = 30) -> None:
        """Wait until no IPv6 address of ``namespaces`` is tentative (duplicate address
        detection, RFC 4862 section 5.4, done); AssertionError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for ns in namespaces:
            while "tentative" in self.exec(ns, "ip", "-6", "addr").stdout:
                assert time.monotonic() < deadline, f"{ns}: addresses still tentative"
                time.sleep(0.05)

    def close(self) -> None:
        for proc in self.processes:
            proc.kill()
            proc.wait()
        self.processes.clear()
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces.clear()
