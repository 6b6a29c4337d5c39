"""A Kubernetes cluster in network namespaces for the agent's end-to-end tests.

Three node namespaces share a LAN (a bridge in a namespace of its own) with the stand-in API
server (:mod:`kubeapi`, listening inside an ``api`` namespace) and an outside host, which is every
node's default gateway and knows the pod CIDRs (as an upstream router would), so that it can
answer a pod whose address was not masqueraded. A second address block on the outside host
(:data:`NOMASQ4`, :data:`NOMASQ6`) is the agent's ``--no-masquerade-cidr`` destination.

Each node runs the real ``podnetctl agent`` as a process inside its namespace, with its own CNI
configuration directory and store; pods are added with the conflist the agent wrote, by the
real ``podnet`` plugin. :meth:`AgentCluster.close` removes every namespace, process and file
even when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kubeapi import KubeAPI, node
from netns import ECHO, PLUGIN_ENV, VENV_BIN, sh

PODNETCTL = str(VENV_BIN / "podnetctl")
PODNET = str(VENV_BIN / "podnet")

LAN4, LAN6 = "198.51.100", "2001:db8:100::"
API4 = f"{LAN4}.2"
OUTSIDE4, OUTSIDE6 = f"{LAN4}.254", f"{LAN6}fe"
#: Destinations the agents reach without masquerade (on the outside host's loopback).
NOMASQ_NET4, NOMASQ_NET6 = "203.0.113.0/24", "2001:db8:203::/64"
NOMASQ4, NOMASQ6 = "203.0.113.1", "2001:db8:203::1"


def node_addr(i: int, family: int) -> str:
    """Node ``i``'s LAN address (1-based)."""
    return f"{LAN4}.{10 + i}" if family == 4 else f"{LAN6}{10 + i:x}"


def pod_cidrs(i: int) -> list[str]:
    """Node ``i``'s podCIDRs, IPv4 and IPv6."""
    return [f"10.244.{i}.0/24", f"fd00:10:244:{i:x}::/64"]


class Agent:
    """One ``podnetctl agent`` process in a node namespace; its log in ``log``."""

    def __init__(self, cluster: AgentCluster, i: int) -> None:
        self.cluster = cluster
        self.i = i
        self.name = f"n{i}"
        self.ns = cluster.nodes[i]
        base = cluster.tmp / self.name
        self.conf_dir = base / "net.d"
        self.data_dir = base / "data"
        self.log = base / "agent.log"
        base.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **PLUGIN_ENV,
               "NODE_NAME": self.name}  # fmt: skip
        argv = ["ip", "netns", "exec", self.ns, "env", "-i",
                *[f"{k}={v}" for k, v in env.items()], PODNETCTL, "agent",
                "--kubeconfig", str(self.cluster.kubeconfig),
                "--cni-conf-dir", str(self.conf_dir), "--data-dir", str(self.data_dir),
                "--no-masquerade-cidr", NOMASQ_NET4, "--no-masquerade-cidr", NOMASQ_NET6]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the agent and wait for it; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc = None

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines() if self.log.exists() else []

    def conflist(self) -> dict[str, Any] | None:
        files = sorted(self.conf_dir.glob("*.conflist")) if self.conf_dir.exists() else []
        return json.loads(files[0].read_text()) if files else None

    def conflist_file(self) -> Path | None:
        files = sorted(self.conf_dir.glob("*.conflist")) if self.conf_dir.exists() else []
        return files[0] if files else None


class AgentCluster:
    """The namespaces, the stand-in API server (``api``), an :class:`Agent` per node."""

    def __init__(self, nodes: int = 3) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.processes: list[subprocess.Popen[str]] = []
        self.tmp = Path(tempfile.mkdtemp(prefix=f"podnet-agent-{self.tag}-"))
        self.lan = self._ns("lan")
        sh("ip", "-n", self.lan, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.lan, "link", "set", "br0", "up")
        self.api_ns = self._ns("api")
        self._wire(self.api_ns, "api", [f"{API4}/24"])
        self.outside = self._ns("out")
        self._wire(self.outside, "out", [f"{OUTSIDE4}/24", f"{OUTSIDE6}/64"])
        sh("ip", "-n", self.outside, "addr", "add", f"{NOMASQ4}/32", "dev", "lo")
        sh("ip", "-n", self.outside, "addr", "add", f"{NOMASQ6}/128", "dev", "lo")
        self.nodes: dict[int, str] = {}
        for i in range(1, nodes + 1):
            ns = self.nodes[i] = self._ns(f"n{i}")
            self._wire(ns, f"n{i}", [f"{node_addr(i, 4)}/24", f"{node_addr(i, 6)}/64"])
            sh("ip", "-n", ns, "route", "add", "default", "via", OUTSIDE4)
            sh("ip", "-n", ns, "-6", "route", "add", "default", "via", OUTSIDE6)
            for cidr, family in zip(pod_cidrs(i), (4, 6), strict=True):
                # the outside host is a router that knows the pod CIDRs
                sh("ip", "-n", self.outside, f"-{family}", "route", "add", cidr,
                   "via", node_addr(i, family))  # fmt: skip
        self.api = KubeAPI(API4, 6443, netns=self.api_ns)
        self.kubeconfig = self.tmp / "kubeconfig"
        self.api.kubeconfig(str(self.kubeconfig))
        self.agents = {i: Agent(self, i) for i in self.nodes}
        self.pods: list[tuple[int, str, str]] = []  # (node, netns, container id)

    def _ns(self, role: str) -> str:
        name = f"pna-{self.tag}-{role}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def _wire(self, ns: str, peer: str, addresses: list[str]) -> None:
        """``eth0`` of ``ns`` on the LAN bridge, with ``addresses``."""
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer,
           "netns", self.lan)  # fmt: skip
        sh("ip", "-n", self.lan, "link", "set", peer, "master", "br0", "up")
        for addr in addresses:
            sh("ip", "-n", ns, "addr", "add", addr, "dev", "eth0",
               *(["nodad"] if ":" in addr else []))  # fmt: skip
        sh("ip", "-n", ns, "link", "set", "eth0", "up")

    # -- the API -----------------------------------------------------------------------------

    def register(self, i: int, *, internal: list[str] | None = None,
                 cidrs: list[str] | None = None) -> None:  # fmt: skip
        """Create (or update) Node ``n<i>`` in the API with its podCIDRs and InternalIPs."""
        obj = node(f"n{i}", cidrs if cidrs is not None else pod_cidrs(i),
                   internal if internal is not None else [node_addr(i, 4), node_addr(i, 6)])
        try:
            self.api.get(f"n{i}")
        except KeyError:
            self.api.create(obj)
        else:
            self.api.update(obj)

    # -- the kernel ----------------------------------------------------------------------------

    def routes(self, i: int, family: int) -> dict[str, str]:
        """Node ``i``'s routes of the agent's proto: destination → gateway."""
        from podnet.agent.routes import PROTO

        out = sh("ip", "-n", self.nodes[i], "-j", f"-{family}", "route", "show",
                 "proto", str(PROTO)).stdout  # fmt: skip
        return {r["dst"]: r.get("gateway", "") for r in json.loads(out or "[]")}

    def wait_for(self, what: str, check: Any, timeout: float = 60) -> Any:
        """Poll ``check()`` until it returns a true value; its value. AssertionError naming
        ``what`` and the agents' last log lines when it never does."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                logs = {a.name: a.lines()[-15:] for a in self.agents.values()}
                raise AssertionError(f"{what}: not within {timeout} s; agents' logs: {logs}")
            time.sleep(0.2)

    def exec_node(self, i: int, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in node ``i``'s namespace (checked)."""
        return sh("ip", "netns", "exec", self.nodes[i], *argv)

    def metric(self, i: int, name: str, port: int = 19080) -> float | None:
        """The value of metric ``name`` (no labels) on node ``i``'s ``/metrics``; None when it
        is not served (yet)."""
        code = ("import sys, urllib.request\n"
                "try:\n"
                f"    print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', "
                "timeout=5).read().decode())\n"
                "except OSError as e:\n"
                "    sys.exit(1)\n")  # fmt: skip
        done = subprocess.run(["ip", "netns", "exec", self.nodes[i], sys.executable, "-c", code],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == name:
                return float(parts[1])
        return None

    # -- pods and traffic ------------------------------------------------------------------------

    def add_pod(self, i: int) -> tuple[str, dict[str, Any]]:
        """A pod on node ``i`` through the conflist its agent wrote; (netns, ADD result)."""
        conflist = self.agents[i].conflist()
        assert conflist is not None, f"node n{i} has no conflist"
        plugin = {**conflist["plugins"][0], "name": conflist["name"],
                  "cniVersion": conflist["cniVersion"]}  # fmt: skip
        pod = self._ns(f"p{len(self.pods)}n{i}")
        cid = f"agent-{self.tag}-{len(self.pods)}"
        rc, out = self._cni(i, "ADD", plugin, cid, pod)
        assert rc == 0, out
        self.pods.append((i, pod, cid))
        return pod, json.loads(out)

    def _cni(self, i: int, command: str, conf: dict[str, Any], cid: str,
             pod: str) -> tuple[int, str]:  # fmt: skip
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/run/netns/{pod}",
               "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni",
               "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **PLUGIN_ENV}
        argv = ["ip", "netns", "exec", self.nodes[i], "env", "-i",
                *[f"{k}={v}" for k, v in env.items()], PODNET]  # fmt: skip
        done = subprocess.run(argv, input=json.dumps(conf), capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        return done.returncode, done.stdout or done.stderr

    def serve(self, ns: str, name: str, port: int) -> None:
        """The echo server (TCP and UDP, both families) in ``ns``."""
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, ECHO, "serve", name,
                                 str(port)], stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.processes.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def talk(self, ns: str, host: str, port: int, proto: str = "tcp") -> str:
        """What the echo server at ``host`` answers a client in ``ns``: ``"<name> <peer>"``."""
        done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, ECHO, proto, host,
                               str(port)], capture_output=True, text=True, timeout=30)  # fmt: skip
        # the dual-stack server prints an IPv4 peer as ::ffff:a.b.c.d
        answer = done.stdout.strip().replace("::ffff:", "")
        return answer or f"<failed: {done.stderr.strip()[-300:]}>"

    def close(self) -> None:
        for agent in self.agents.values():
            if agent.proc is not None:
                agent.proc.kill()
                agent.proc.wait()
                agent.proc = None
        for proc in self.processes:
            proc.kill()
            proc.wait()
        self.api.stop()
        for i, pod, cid in self.pods:
            conflist = self.agents[i].conflist()
            if conflist is not None:
                plugin = {**conflist["plugins"][0], "name": conflist["name"],
                          "cniVersion": conflist["cniVersion"]}  # fmt: skip
                self._cni(i, "DEL", plugin, cid, pod)
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        from podnet import reconcile

        reconcile.prune_claims(str(self.tmp))
        subprocess.run(["rm", "-rf", str(self.tmp)], check=False)
