"""The OVN lab the OVN tests share: :class:`Cluster` (an :class:`~podnet.cli.demo.ovnlab.OvnLab`
of three nodes, each with a podnet store configured for the NB), ``podnetctl`` and the
``podnet`` plugin run in a node's namespace, echo servers and clients, the uplinks' keys. The
``cluster`` fixture (one lab per test module) is in tests/e2e/ovn/conftest.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from paths import SRC as _SRC
from podnet.cli.demo.ovnlab import Node, OvnLab

#: The source tree, for code run in a node's namespace.
SRC = str(_SRC)

UPLINK = {"parent": "ext0", "ipv4.gateway": "203.0.113.254/24",
          "ipv4.ovn.ranges": "203.0.113.10-203.0.113.19", "ipv4.routes": "198.51.100.0/24",
          "ovn.ingress_mode": "routed"}  # fmt: skip


class Cluster:
    """The lab (three nodes, central services on n1), and each node's podnet store configured
    for the NB (n1 by its unix socket, n2 and n3 over TCP)."""

    def __init__(self, lab: OvnLab, base: Path) -> None:
        self.lab = lab
        self.data = {n.name: base / f"data-{n.name}" for n in lab.nodes}
        for node in lab.nodes:
            nb = lab.nb_unix if node is lab.nodes[0] else lab.nb_tcp
            self.ok(node, "config", "set", "network.ovn.northbound_connection", nb, "--init")

    def ctl(self, node: Node, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``podnetctl ARGS --data-dir <node's>`` in ``node``'s namespace, with its OVS."""
        code = (f"import sys; sys.path.insert(0, {SRC!r}); sys.argv[0] = 'podnetctl'; "
                "from podnet.cli.main import main; main()")
        env = [f"{k}={v}" for k, v in node.env.items()]
        argv = ["ip", "netns", "exec", node.netns, "env", *env, sys.executable, "-c", code,
                *args, "--data-dir", str(self.data[node.name])]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, input=input, timeout=60)

    def ok(self, node: Node, *args: str) -> str:
        out = self.ctl(node, *args)
        assert out.returncode == 0, f"podnetctl {' '.join(args)} on {node.name}: {out.stderr}"
        return out.stdout

    def networks(self, node: Node) -> dict[str, Any]:
        return {n["name"]: n for n in json.loads(self.ok(node, "network", "list", "-f", "json"))}

    def uplink(self, node: Node, name: str, keys: dict[str, str], member: str = "n1") -> None:
        """Physical network ``name`` made from ``node`` as in an LXD cluster: ``keys``'
        ``parent`` recorded for ``member`` (``--target``), then the network with the others."""
        self.ok(node, "network", "create", name, "--type=physical", f"parent={keys['parent']}",
                "--target", member)  # fmt: skip
        self.ok(node, "network", "create", name, "--type=physical",
                *[f"{k}={v}" for k, v in keys.items() if k != "parent"])  # fmt: skip


def nbctl(cluster: Cluster, *args: str) -> str:
    return cluster.lab.nbctl(*args)


def pod_ports(cluster: Cluster) -> list[str]:
    """The logical switch ports some pod holds (a node's spare ports are none's)."""
    rows = json.loads(nbctl(cluster, "--format=json", "--columns=name,external_ids", "list",
                            "Logical_Switch_Port"))["data"]  # fmt: skip
    return [name for name, ids in rows if "podnet-container" in dict(ids[1])]


ECHO = str(Path(__file__).resolve().parent / "echo.py")


class Echo:
    """``echo.py serve NAME PORT`` in namespace ``ns`` until :meth:`stop`."""

    def __init__(self, ns: str, name: str, port: int) -> None:
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, ECHO, "serve", name,
                                      str(port)], stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def tcp(ns: str, host: str, port: int, proto: str = "tcp") -> str:
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable, ECHO, proto, host, str(port)],
                          capture_output=True, text=True, timeout=30).stdout.strip()  # fmt: skip


def udp(ns: str, host: str, port: int) -> str:
    return tcp(ns, host, port, "udp")


def run_plugin(cluster: Cluster, node: Node, command: str, cid: str, netns: str, network: str,
               **extra: Any) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The ``podnet`` plugin (this tree's) run in ``node`` for a conflist joining ``network``;
    ``extra``: more NetConf keys."""
    conf = {"cniVersion": "1.1.0", "name": "ovnpods", "type": "podnet", "network": network,
            "dataDir": str(cluster.data[node.name]), **extra}  # fmt: skip
    code = f"import sys; sys.path.insert(0, {SRC!r}); from podnet.plugins.podnet import main; main()"
    env = {**node.env, "CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/run/netns/{netns}",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
           "PODNET_DATA_DIRS": str(cluster.data[node.name])}  # fmt: skip
    argv = ["ip", "netns", "exec", node.netns, "env", "-i", *[f"{k}={v}" for k, v in env.items()],
            sys.executable, "-c", code]  # fmt: skip
    return subprocess.run(argv, input=json.dumps(conf), capture_output=True, text=True, timeout=60)


def plugin(cluster: Cluster, node: Node, command: str, cid: str, netns: str, network: str,
           **extra: Any) -> dict[str, Any]:  # fmt: skip
    """:func:`run_plugin`, which must succeed; its result."""
    out = run_plugin(cluster, node, command, cid, netns, network, **extra)
    assert out.returncode == 0, f"{command} {cid} on {node.name}: {out.stdout} {out.stderr}"
    return json.loads(out.stdout) if out.stdout.strip() else {}


def add_pods(cluster: Cluster, pods: dict[str, tuple[Node, str]], cid: str,
             network: str) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Pod ``k`` of ``pods`` (``k: (node, namespace)``) made: its namespace added, container
    ``<cid>-<k>`` ADDed to ``network`` on its node; the results by ``k``. :func:`release` undoes
    it."""
    results = {}
    for k, (node, ns) in pods.items():
        subprocess.run(["ip", "netns", "add", ns], check=True)
        results[k] = plugin(cluster, node, "ADD", f"{cid}-{k}", ns, network)
    return results


def seen_from(pods: dict[str, tuple[Node, str]], host: str, port: int, expected: str) -> None:
    """Every pod of ``pods`` reaches the echo server at ``host:port`` over TCP and UDP, which
    answers ``expected`` (its name and the source address it saw)."""
    for k, (_, ns) in pods.items():
        assert tcp(ns, host, port) == expected, k
        assert udp(ns, host, port) == expected, k


def release(cluster: Cluster, servers: list[Echo], pods: dict[str, tuple[Node, str]], cid: str,
            network: str) -> None:  # fmt: skip
    """A test's teardown: its servers stopped, pod ``k`` (container ``<cid>-<k>``) DELeted from
    ``network`` and its namespace removed."""
    for server in servers:
        server.stop()
    for k, (node, ns) in pods.items():
        run_plugin(cluster, node, "DEL", f"{cid}-{k}", ns, network)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


UPLINK6 = {**UPLINK, "ipv6.gateway": "2001:db8:ff::254/64",
           "ipv6.ovn.ranges": "2001:db8:ff::10-2001:db8:ff::19", "ipv6.routes": "2001:db8:ee::/64"}  # fmt: skip


def yaml_load(text: str) -> Any:
    return yaml.safe_load(text)


def yaml_dump(data: Any) -> str:
    return str(yaml.safe_dump(data))


def discard(cluster: Cluster, servers: list[Echo], pods: dict[str, tuple[Node, str]],
            *networks: str) -> None:  # fmt: skip
    """A test's teardown when its pods are DELeted already (or never were): its servers
    stopped, the pods' namespaces removed, ``networks`` deleted (from n1, in this order)."""
    for server in servers:
        server.stop()
    for _, ns in pods.values():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    delete_networks(cluster, *networks)


def delete_networks(cluster: Cluster, *networks: str) -> None:
    """``network delete`` of each of ``networks`` from n1, in this order, whatever it answers
    (a teardown: one may be gone already)."""
    for network in networks:
        cluster.ctl(cluster.lab.nodes[0], "network", "delete", network)


def at_once(target: Callable[..., object], calls: Iterable[tuple[object, ...]]) -> None:
    """``target(*args)`` for every ``args`` of ``calls``, each in a thread of its own, all
    started before any is waited for; returns when every one has returned."""
    threads = [threading.Thread(target=target, args=args) for args in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
