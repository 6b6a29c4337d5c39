"""OVN networks across nodes (issue 16, items 1-4 and 7): the server config that reaches OVN,
``physical`` uplinks and ``ovn`` networks made from one node and seen from every other, their
northbound objects, concurrent changes from two nodes, and an unreachable NB.

A real OVN deployment in namespaces (:class:`podnet.cli.demo.ovnlab.OvnLab`, FIELD-NOTES §8):
central services and OVS (userspace datapath) with ``ovn-controller`` on two nodes, and an
outside namespace behind ``n1``'s uplink. Each node has its own podnet store; ``podnetctl`` runs
inside the node's namespace with the node's OVS (``OVS_RUNDIR``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgate import need

SRC = str(Path(__file__).resolve().parent.parent / "src")
sys.path.insert(0, SRC)

from podnet.cli.demo.ovnlab import Node, OvnLab, missing_tools  # noqa: E402

pytestmark = pytest.mark.root

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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need("root")
    if missing_tools():
        pytest.fail(f"OVN tools missing: {missing_tools()} (.ci/run installs them)")
    lab = OvnLab(f"pno{uuid.uuid4().hex[:4]}", ("n1", "n2", "n3"), subnet=249)
    try:
        lab.start()
        lab.outside(lab.nodes[0])
        yield Cluster(lab, tmp_path_factory.mktemp("ovn"))
    finally:
        lab.stop()


def nbctl(cluster: Cluster, *args: str) -> str:
    return cluster.lab.nbctl(*args)


def pod_ports(cluster: Cluster) -> list[str]:
    """The logical switch ports some pod holds (a node's spare ports are none's)."""
    rows = json.loads(nbctl(cluster, "--format=json", "--columns=name,external_ids", "list",
                            "Logical_Switch_Port"))["data"]  # fmt: skip
    return [name for name, ids in rows if "podnet-container" in dict(ids[1])]


def test_uplink_and_ovn_network_are_one_for_every_node(cluster: Cluster) -> None:
    """An uplink made on n1 and an OVN network made on n2 are listed alike by both nodes (same
    config, same ETag); the network's NB objects exist (router with SNAT to its uplink address
    and a default route, internal switch with OVN's subnet, external switch with a localnet
    port on the uplink, the HA chassis group of n1, the only chassis mapping the uplink); n1's
    OVS maps the uplink to a bridge holding ext0. Delete removes all of it."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up0", UPLINK)
    mappings = cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids:ovn-bridge-mappings")
    assert mappings.strip('"').startswith("up0:pnu"), mappings
    bridge = mappings.strip('"').split(":")[1]
    assert "ext0" in cluster.lab.vsctl(n1, "list-ports", bridge).split()
    cluster.ok(n2, "network", "create", "ovn0", "--type=ovn", "network=up0",
               "ipv4.address=10.40.0.1/24", "ipv4.nat=true", "ipv6.address=none", "user.k=v")  # fmt: skip
    seen = [cluster.networks(n) for n in (n1, n2)]
    assert seen[0] == seen[1], seen
    ovn0 = seen[0]["ovn0"]
    assert ovn0["type"] == "ovn" and ovn0["config"]["volatile.network.ipv4.address"] == "203.0.113.10"
    assert ovn0["config"]["ipv4.nat"] == "true" and ovn0["config"]["bridge.mtu"] == "1442", ovn0
    shows = [cluster.ok(n, "network", "show", "ovn0") for n in (n1, n2)]
    assert shows[0] == shows[1]
    assert nbctl(cluster, "--bare", "--columns=other_config", "list", "Logical_Switch",
                 "pn-ovn0-ls-int").find("subnet=10.40.0.0/24") >= 0  # fmt: skip
    nat = nbctl(cluster, "lr-nat-list", "pn-ovn0-lr")
    assert "203.0.113.10" in nat and "10.40.0.0/24" in nat, nat
    assert "203.0.113.254" in nbctl(cluster, "lr-route-list", "pn-ovn0-lr")
    assert "localnet" in nbctl(cluster, "--bare", "--columns=type", "list", "Logical_Switch_Port",
                               "pn-ovn0-ls-ext-lsp-provider")  # fmt: skip
    assert nbctl(cluster, "--bare", "--columns=chassis_name", "list", "HA_Chassis").split() == ["n1"]
    refused = cluster.ctl(n1, "network", "delete", "up0")
    assert refused.returncode == 1 and "currently in use" in refused.stderr, refused.stderr
    cluster.ok(n1, "network", "delete", "ovn0")
    assert "ovn0" not in cluster.networks(n2)
    assert nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Router") == ""
    assert nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Switch") == ""
    assert nbctl(cluster, "--bare", "--columns=name", "list", "HA_Chassis_Group") == ""
    cluster.ok(n2, "network", "delete", "up0")  # n2 has no ext0: the record goes, n1 keeps its side
    assert "up0" not in cluster.networks(n1)
    assert bridge in cluster.lab.vsctl(n1, "list-br").split()
    done = cluster.ok(n1, "network", "restore")  # n1 forgets its side of the deleted uplink
    assert f"uplink up0: deleted, OVS bridge {bridge} removed" in done, done
    assert bridge not in cluster.lab.vsctl(n1, "list-br").split()
    assert "up0:" not in cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")


def test_concurrent_changes_from_two_nodes_lose_nothing(cluster: Cluster) -> None:
    """Two nodes set different keys of one OVN network at the same time, 10 rounds: every key
    is there afterwards; an If-Match ETag read before another node's change gets 412."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up1", UPLINK)
    cluster.ok(n1, "network", "create", "ovn1", "--type=ovn", "network=up1", "ipv6.address=none")
    try:
        errors: list[str] = []

        def setter(node: Node, key: str) -> None:
            for i in range(10):
                out = cluster.ctl(node, "network", "set", "ovn1", f"user.{key}{i}=x")
                if out.returncode != 0:
                    errors.append(out.stderr)

        threads = [threading.Thread(target=setter, args=(n, k)) for n, k in ((n1, "a"), (n2, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        config = cluster.networks(n2)["ovn1"]["config"]
        assert {f"user.{k}{i}" for k in "ab" for i in range(10)} <= set(config), config
        from podnet.drivers.cluster import connect, update
        from podnet.networks.errors import NetworkError

        nb = connect({"network.ovn.northbound_connection": cluster.lab.nb_unix})
        assert nb is not None
        stale = cluster.networks(n1)["ovn1"]
        cluster.ok(n2, "network", "set", "ovn1", "user.later=1")
        with pytest.raises(NetworkError) as err:
            update(nb, "t", "ovn1", None, {"user.x": "1"}, True, _etag(stale))
        assert err.value.status == 412
    finally:
        cluster.ctl(n1, "network", "delete", "ovn1")
        cluster.ctl(n1, "network", "delete", "up1")


def _etag(network: dict[str, Any]) -> str:
    from podnet.networks.model import Network

    return Network(network["name"], network["type"], network["description"],
                   network["config"]).etag()  # fmt: skip


@pytest.mark.parametrize(("extra", "message"), [
    (["ipv4.nat.address=198.51.100.7"], None),
    (["ipv4.nat.address=192.0.2.7"], 'Uplink network does not contain "192.0.2.7" in its routes'),
    (["ipv4.address=10.50.0.1/33"], 'Invalid value for network "bad" option "ipv4.address"'),
    (["bogus=1"], 'Invalid option for network "bad" option "bogus"'),
    ([], None),
])  # fmt: skip
def test_ovn_network_config_is_checked(cluster: Cluster, extra: list[str], message: str | None) -> None:
    """LXD's rules and messages; a refused create leaves no record and no NB object."""
    n1 = cluster.lab.nodes[0]
    cluster.uplink(n1, "up2", UPLINK)
    try:
        before = nbctl(cluster, "show")
        out = cluster.ctl(n1, "network", "create", "bad", "--type=ovn", "network=up2", "ipv6.address=none", *extra)
        if message is None:
            assert out.returncode == 0, out.stderr
            snat = nbctl(cluster, "lr-nat-list", "pn-bad-lr")
            want = extra[0].split("=")[1] if extra else "203.0.113.10"
            assert want in snat, snat
            cluster.ok(n1, "network", "delete", "bad")
        else:
            assert out.returncode == 1 and message in out.stderr, out.stderr
            assert "bad" not in cluster.networks(n1)
            assert nbctl(cluster, "show") == before
    finally:
        cluster.ctl(n1, "network", "delete", "bad")
        cluster.ctl(n1, "network", "delete", "up2")


def test_nat_address_needs_a_routed_uplink(cluster: Cluster) -> None:
    n1 = cluster.lab.nodes[0]
    l2 = {**UPLINK, "ovn.ingress_mode": "l2proxy"}
    cluster.uplink(n1, "up3", l2)
    try:
        out = cluster.ctl(n1, "network", "create", "nat3", "--type=ovn", "network=up3",
                          "ipv6.address=none", "ipv4.nat.address=198.51.100.9")  # fmt: skip
        assert out.returncode == 1
        assert 'Cannot specify "ipv4.nat.address" when uplink ovn.ingress_mode is not "routed"' in out.stderr
    finally:
        cluster.ctl(n1, "network", "delete", "up3")


def test_unreachable_northbound_is_a_clean_error(cluster: Cluster) -> None:
    """With the NB server stopped, list and create fail with one line naming the connection
    (exit 1; the API's 503) and nothing is made; a bridge network of the node is still there
    once the NB is back."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.lab.stop_nb()
    try:
        for node, conn in ((n1, cluster.lab.nb_unix), (n2, cluster.lab.nb_tcp)):
            out = cluster.ctl(node, "network", "list")
            assert out.returncode == 1 and conn in out.stderr and "unreachable" in out.stderr, out.stderr
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr
            out = cluster.ctl(node, "network", "create", "up9", "--type=physical", "parent=ext0",
                              "--target", "n1")  # fmt: skip
            assert out.returncode == 1 and conn in out.stderr, out.stderr
    finally:
        cluster.lab.start_nb()
    assert "up9" not in cluster.networks(n1) and "up9" not in cluster.networks(n2)


def _pki(d: Path, ca: str, *names: str) -> None:
    """A CA ``<ca>.crt`` and, for each of ``names``, a key and certificate it signed (EC P-256,
    one day)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
    subprocess.run(["openssl", "req", "-x509", *ec, "-subj", f"/CN={ca}", "-keyout", str(d / f"{ca}.key"),
                    "-out", str(d / f"{ca}.crt")], check=True, capture_output=True)  # fmt: skip
    for name in names:
        subprocess.run(["openssl", "req", *[a for a in ec if a not in ("-days", "1")], "-subj", f"/CN={name}",
                        "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr")],
                       check=True, capture_output=True)  # fmt: skip
        subprocess.run(["openssl", "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.crt"),
                        "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-days", "1",
                        "-out", str(d / f"{name}.crt")], check=True, capture_output=True)  # fmt: skip


def test_ssl_northbound_with_a_real_ca(cluster: Cluster, tmp_path: Path) -> None:
    """The NB over ``ssl:`` with certificates of a real CA: n3, configured with the CA, its
    client certificate and key, makes an uplink seen by n1 (unix socket) and lists what n1
    made. A CA that did not sign the server's certificate, and a client certificate the
    server's CA did not sign, are each refused: one line naming the connection, exit 1,
    nothing made (no TLS trust is skipped)."""
    n1, n2, n3 = cluster.lab.nodes
    _pki(tmp_path, "ca", "nb", "n3")
    _pki(tmp_path, "rogue", "mallory")
    pem = {f.stem + f.suffix: f.read_text() for f in tmp_path.iterdir() if f.suffix in (".crt", ".key")}
    ssl = f"ssl:{n1.address}:6643"
    cluster.lab.nbctl("set-ssl", str(tmp_path / "nb.key"), str(tmp_path / "nb.crt"), str(tmp_path / "ca.crt"))
    cluster.lab.nbctl("set-connection", f"pssl:6643:{n1.address}")

    def use(key: str, cert: str, ca: str) -> None:
        cluster.ok(n3, "config", "set", f"network.ovn.client_key={pem[key]}",
                   f"network.ovn.client_cert={pem[cert]}", f"network.ovn.ca_cert={pem[ca]}",
                   f"network.ovn.northbound_connection={ssl}")  # fmt: skip

    try:
        use("n3.key", "n3.crt", "ca.crt")
        deadline = time.monotonic() + 15  # ovsdb-server opens a remote of the NB's on its next run
        while cluster.ctl(n3, "network", "list").returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        made = cluster.ctl(n3, "network", "create", "up13", "--type=physical", "parent=nosuch0",
                           "--target", "n1")  # fmt: skip
        assert made.returncode == 0, made.stderr
        made = cluster.ctl(n3, "network", "create", "up13", "--type=physical",
                           *[f"{k}={v}" for k, v in UPLINK.items() if k != "parent"])  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert cluster.networks(n1)["up13"]["config"] == cluster.networks(n3)["up13"]["config"]
        for key, cert, ca, who in (("n3.key", "n3.crt", "rogue.crt", "a CA that did not sign the NB"),
                                   ("mallory.key", "mallory.crt", "ca.crt", "a client the NB's CA did not sign")):  # fmt: skip
            use(key, cert, ca)
            out = cluster.ctl(n3, "network", "list")
            assert out.returncode == 1 and ssl in out.stderr and len(out.stderr.strip().splitlines()) == 1, (who, out.stderr)
            out = cluster.ctl(n3, "network", "create", "up14", "--type=physical", "parent=nosuch1",
                              "--target", "n1")  # fmt: skip
            assert out.returncode == 1 and ssl in out.stderr, (who, out.stderr)
        assert "up14" not in cluster.networks(n1)
    finally:
        cluster.ctl(n1, "network", "delete", "up13")
        cluster.lab.nbctl("del-connection")
        cluster.lab.nbctl("del-ssl")
        for key in ("northbound_connection", "client_key", "client_cert", "ca_cert"):
            cluster.ctl(n3, "config", "unset", f"network.ovn.{key}")
        cluster.ok(n3, "config", "set", "network.ovn.northbound_connection", cluster.lab.nb_tcp)


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


def release(cluster: Cluster, servers: list[Echo], pods: dict[str, tuple[Node, str]], cid: str,
            network: str) -> None:  # fmt: skip
    """A test's teardown: its servers stopped, pod ``k`` (container ``<cid>-<k>``) DELeted from
    ``network`` and its namespace removed."""
    for server in servers:
        server.stop()
    for k, (node, ns) in pods.items():
        run_plugin(cluster, node, "DEL", f"{cid}-{k}", ns, network)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_pods_on_three_nodes_share_one_ovn_network(cluster: Cluster) -> None:
    """A pod on each of n1, n2 and n3 joins one OVN network through the real plugin: addresses
    from OVN's dynamic addressing (distinct, in the subnet), MTU the network's; TCP and UDP
    between pods cross the tunnel (the server sees the caller's own address); a pod reaching
    the outside is seen from the SNAT address (the router's uplink address). CHECK names an
    OVS port that went; restore puts it back. DEL removes ports, veths and rows on each node."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up5", UPLINK)
    cluster.ok(n1, "network", "create", "ovn5", "--type=ovn", "network=up5", "ipv6.address=none")
    pods = {"a": (n1, f"{cluster.lab.prefix}-pa"), "b": (n2, f"{cluster.lab.prefix}-pb"),
            "c": (n3, f"{cluster.lab.prefix}-pd")}  # fmt: skip
    servers: list[Echo] = []
    try:
        for _, ns in pods.values():
            subprocess.run(["ip", "netns", "add", ns], check=True)
        results = {k: plugin(cluster, node, "ADD", f"c-{k}", ns, "ovn5") for k, (node, ns) in pods.items()}
        config = cluster.networks(n2)["ovn5"]["config"]
        subnet = config["ipv4.address"].rsplit(".", 1)[0]
        addrs = {k: r["ips"][0]["address"].split("/")[0] for k, r in results.items()}
        assert len(set(addrs.values())) == 3 and all(a.startswith(subnet + ".") for a in addrs.values()), addrs
        assert all(r["interfaces"][1]["mtu"] == int(config["bridge.mtu"]) for r in results.values())
        for k, (_, ns) in pods.items():
            servers.append(Echo(ns, f"POD-{k.upper()}", 8080))
        for src, dst in (("a", "b"), ("b", "c"), ("c", "a")):
            ns = pods[src][1]
            assert tcp(ns, addrs[dst], 8080) == f"POD-{dst.upper()} ::ffff:{addrs[src]}", (src, dst)
            assert udp(ns, addrs[dst], 8080) == f"POD-{dst.upper()} ::ffff:{addrs[src]}", (src, dst)
        out = f"{cluster.lab.prefix}-out"
        servers.append(Echo(out, "OUTSIDE", 8081))
        for k in pods:  # n1 is the gateway chassis: the others' pods go through the tunnel first
            assert tcp(pods[k][1], "203.0.113.254", 8081) == "OUTSIDE ::ffff:203.0.113.10", k
            assert udp(pods[k][1], "203.0.113.254", 8081) == "OUTSIDE ::ffff:203.0.113.10", k
        for k, (node, ns) in pods.items():
            plugin(cluster, node, "CHECK", f"c-{k}", ns, "ovn5", prevResult=results[k])
            plugin(cluster, node, "STATUS", "", ns, "ovn5")
        node, ns = pods["b"]  # CHECK names what is off: the OVS port gone
        host_if = results["b"]["interfaces"][0]["name"]
        cluster.lab.vsctl(node, "del-port", "br-int", host_if)
        out_ = run_plugin(cluster, node, "CHECK", "c-b", ns, "ovn5", prevResult=results["b"])
        assert out_.returncode == 1 and '"code": 103' in out_.stdout and host_if in out_.stdout, out_.stdout
        done = cluster.ok(node, "network", "restore")  # puts the port back from the node's view
        assert f"{host_if} in br-int" in done, done
        plugin(cluster, node, "CHECK", "c-b", ns, "ovn5", prevResult=results["b"])
        assert tcp(pods["a"][1], addrs["b"], 8080) == f"POD-B ::ffff:{addrs['a']}"
        for k, (node, ns) in pods.items():
            plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn5")
            plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn5")  # again: nothing left, still 0
        assert not pod_ports(cluster)
        for node in (n1, n2, n3):
            ports = cluster.lab.vsctl(node, "list-ports", "br-int").split()
            assert not [p for p in ports if p.startswith("pn")], ports
    finally:
        for s in servers:
            s.stop()
        for _, ns in pods.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn5")
        cluster.ctl(n1, "network", "delete", "up5")


def test_used_by_and_delete_name_the_pods_of_every_node(cluster: Cluster) -> None:
    """An OVN network's ``used_by`` lists its pods on every node (``/1.0/instances/<container
    ID>``, as a bridge's), alike from each node, and ``network list`` counts them (USED BY);
    delete is refused naming them; after their DEL ``used_by`` is empty and delete goes. The
    uplink's ``used_by`` is its OVN network only."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up6", UPLINK)
    cluster.ok(n1, "network", "create", "ovn6", "--type=ovn", "network=up6", "ipv6.address=none")
    pods = {"ua": (n1, f"{cluster.lab.prefix}-ua"), "ub": (n2, f"{cluster.lab.prefix}-ub")}
    try:
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            plugin(cluster, node, "ADD", f"c-{k}", ns, "ovn6")
        for node in (n1, n2, n3):
            nets = cluster.networks(node)
            assert nets["ovn6"]["used_by"] == ["/1.0/instances/c-ua", "/1.0/instances/c-ub"], node.name
            assert nets["up6"]["used_by"] == ["/1.0/networks/ovn6"], node.name
        rows = [r.split(",") for r in cluster.ok(n3, "network", "list", "-f", "csv").splitlines()]
        assert [r[6] for r in rows if r[0] == "ovn6"] == ["2"], rows
        refused = cluster.ctl(n3, "network", "delete", "ovn6")
        assert (refused.returncode, refused.stderr) == (
            1, "Error: The network is currently in use by c-ua, c-ub\n"), refused
        for k, (node, ns) in pods.items():
            plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn6")
        assert cluster.networks(n2)["ovn6"]["used_by"] == []
        cluster.ok(n3, "network", "delete", "ovn6")
    finally:
        for k, (node, ns) in pods.items():
            run_plugin(cluster, node, "DEL", f"c-{k}", ns, "ovn6")
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn6")
        cluster.ctl(n1, "network", "delete", "up6")


def test_nat_address_is_what_the_outside_sees(cluster: Cluster) -> None:
    """``ipv4.nat.address`` (seed 004's OVN feature): pods on n2 and n3 reaching an outside
    server over TCP and UDP are seen from that address, not the router's. It can be changed in
    place: unset brings back the router's address, a new one is used at once, one outside the
    uplink's routes is refused (LXD's message) and changes nothing, ``ipv4.nat=false`` removes
    the SNAT rule."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    cluster.uplink(n1, "up9", UPLINK)
    cluster.ok(n2, "network", "create", "ovn9", "--type=ovn", "network=up9", "ipv6.address=none",
               "ipv4.nat.address=198.51.100.77")  # fmt: skip
    router = cluster.networks(n3)["ovn9"]["config"]["volatile.network.ipv4.address"]
    subprocess.run(["ip", "-n", out, "route", "replace", "198.51.100.0/24", "via", router], check=True)
    pods = {"b": (n2, f"{cluster.lab.prefix}-nb"), "c": (n3, f"{cluster.lab.prefix}-nc")}
    server = Echo(out, "OUTSIDE", 8082)
    try:
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            plugin(cluster, node, "ADD", f"n-{k}", ns, "ovn9")
        for k, (_, ns) in pods.items():
            assert tcp(ns, "203.0.113.254", 8082) == "OUTSIDE ::ffff:198.51.100.77", k
            assert udp(ns, "203.0.113.254", 8082) == "OUTSIDE ::ffff:198.51.100.77", k
        cluster.ok(n3, "network", "unset", "ovn9", "ipv4.nat.address")
        assert tcp(pods["b"][1], "203.0.113.254", 8082) == f"OUTSIDE ::ffff:{router}"
        bad = cluster.ctl(n2, "network", "set", "ovn9", "ipv4.nat.address=192.0.2.7")
        assert bad.returncode == 1 and 'Uplink network does not contain "192.0.2.7" in its routes' in bad.stderr
        assert "ipv4.nat.address" not in cluster.networks(n1)["ovn9"]["config"]
        cluster.ok(n2, "network", "set", "ovn9", "ipv4.nat.address=198.51.100.78")
        assert tcp(pods["c"][1], "203.0.113.254", 8082) == "OUTSIDE ::ffff:198.51.100.78"
        cluster.ok(n1, "network", "set", "ovn9", "ipv4.nat=false")
        assert tcp(pods["c"][1], "203.0.113.254", 8082) == "<timeout>"  # no SNAT: no way back
        assert nbctl(cluster, "--bare", "--columns=_uuid", "list", "NAT") == ""
    finally:
        server.stop()
        for k, (node, ns) in pods.items():
            run_plugin(cluster, node, "DEL", f"n-{k}", ns, "ovn9")
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "-n", out, "route", "del", "198.51.100.0/24"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn9")
        cluster.ctl(n1, "network", "delete", "up9")


def test_add_trusts_the_mirror_only_while_the_nb_holds_it(cluster: Cluster) -> None:
    """An ADD makes its port on the condition that the NB still holds the network's record as
    the node mirrored it (so it need not read the registry): a port made with the record held
    is there; with another record the NB refuses (Conflict) and nothing is made. A network
    deleted and made again with another subnet under the same name: the node's next ADD gets an
    address of the new subnet, not the mirrored one."""
    import sqlite3

    from podnet.ovn import ports
    from podnet.ovn.nb import Record
    from podnet.ovn.ovsdb import Conflict, Ovsdb

    n1, n2, _ = cluster.lab.nodes
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    ns = f"{cluster.lab.prefix}-mi"
    cluster.uplink(n1, "up11", UPLINK)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        cluster.ok(n1, "network", "create", "ovm", "--type=ovn", "network=up11", "ipv4.address=10.201.1.1/24",
                   "ipv6.address=none")  # fmt: skip
        shown = cluster.networks(n1)["ovm"]
        held = Record("ovn", shown["description"], shown["config"]).dumps()
        ports.add_port(nb, "ovm", "pn-ovm-probe-1", "0a:00:00:00:00:01", "n1", {}, held)
        with pytest.raises(Conflict):
            ports.add_port(nb, "ovm", "pn-ovm-probe-2", "0a:00:00:00:00:02", "n1", {}, held.replace("10.201.1.1", "10.201.9.1"))
        listed = nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Switch_Port")
        assert "pn-ovm-probe-1" in listed and "pn-ovm-probe-2" not in listed
        ports.delete_port(nb, "ovm", "pn-ovm-probe-1")
        first = plugin(cluster, n2, "ADD", "mi-1", ns, "ovm")["ips"][0]["address"]
        assert first.startswith("10.201.1."), first
        plugin(cluster, n2, "DEL", "mi-1", ns, "ovm")
        cluster.ok(n1, "network", "delete", "ovm")
        cluster.ok(n1, "network", "create", "ovm", "--type=ovn", "network=up11", "ipv4.address=10.201.2.1/26",
                   "ipv6.address=none")  # fmt: skip
        again = plugin(cluster, n2, "ADD", "mi-2", ns, "ovm")["ips"][0]
        assert again["address"].startswith("10.201.2.") and again["address"].endswith("/26"), again
        assert again["gateway"] == "10.201.2.1", again
        plugin(cluster, n2, "DEL", "mi-2", ns, "ovm")
        # a change of the description alone: the next ADD mirrors it too (else every ADD after
        # would fail the condition and read the whole registry)
        shown = yaml_load(cluster.ok(n1, "network", "show", "ovm"))
        assert cluster.ctl(n1, "network", "edit", "ovm", input=yaml_dump({**shown, "description": "mirrored"})).returncode == 0
        plugin(cluster, n2, "ADD", "mi-1", ns, "ovm")
        with sqlite3.connect(cluster.data[n2.name] / "podnet.db") as db:
            row = db.execute("SELECT description FROM networks WHERE name = 'ovm'").fetchone()
        assert row == ("mirrored",), row
        plugin(cluster, n2, "DEL", "mi-1", ns, "ovm")
    finally:
        for cid in ("mi-1", "mi-2"):
            run_plugin(cluster, n2, "DEL", cid, ns, "ovm")
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovm")
        cluster.ctl(n1, "network", "delete", "up11")


def test_del_with_the_nb_down_then_gc(cluster: Cluster) -> None:
    """DEL succeeds with the NB stopped (the veth, OVS port and row go; a warning names the
    port left in the NB); a GC once the NB is back removes that port. With ovn-controller
    stopped an ADD fails at its deadline naming the cause (104) and leaves nothing; with
    ovn-northd stopped an ADD that claims one of the node's spare ports succeeds (northd had
    made its addresses and binding), and once no spare is left it fails naming northd (11, try
    again later) and leaves nothing."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import delete_spares

    n1 = cluster.lab.nodes[0]
    cluster.uplink(n1, "up6", UPLINK)
    cluster.ok(n1, "network", "create", "ovn6", "--type=ovn", "network=up6", "ipv6.address=none")
    ns = f"{cluster.lab.prefix}-pc"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        result = plugin(cluster, n1, "ADD", "c-c", ns, "ovn6")
        host_if = result["interfaces"][0]["name"]
        cluster.lab.stop_nb()
        try:
            out = run_plugin(cluster, n1, "DEL", "c-c", ns, "ovn6")
            assert out.returncode == 0, out.stdout + out.stderr
        finally:
            cluster.lab.start_nb()
        assert host_if not in cluster.lab.vsctl(n1, "list-ports", "br-int").split()
        assert pod_ports(cluster)
        plugin(cluster, n1, "GC", "", ns, "ovn6", **{"cni.dev/valid-attachments": []})
        assert not pod_ports(cluster)
        cluster.lab.stop_controller(n1)
        try:
            out = run_plugin(cluster, n1, "ADD", "c-d", ns, "ovn6", toolTimeout=3)
            error = json.loads(out.stdout)
            assert out.returncode == 1 and error["code"] == 104, out.stdout
            assert "ovn-controller" in error["msg"], out.stdout
        finally:
            cluster.lab.start_controller(n1)
        assert not pod_ports(cluster)
        ports = cluster.lab.vsctl(n1, "list-ports", "br-int").split()
        assert not [p for p in ports if p.startswith("pn")], ports
        nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
        cluster.lab.stop_northd()
        try:
            # a spare of the node, addressed and bound to nothing, needs no northd
            result = plugin(cluster, n1, "ADD", "c-s", ns, "ovn6", toolTimeout=5)
            assert result["ips"][0]["address"].startswith("10."), result
            plugin(cluster, n1, "DEL", "c-s", ns, "ovn6")
            assert delete_spares(nb, "ovn6") > 0  # the pool drained: a port must be made
            out = run_plugin(cluster, n1, "ADD", "c-e", ns, "ovn6", toolTimeout=2)
            error = json.loads(out.stdout)
            assert out.returncode == 1 and error["code"] == 11, out.stdout
            assert "ovn-northd" in error["msg"], out.stdout
        finally:
            cluster.lab.start_northd()
        assert not pod_ports(cluster)
        assert not [p for p in cluster.lab.vsctl(n1, "list-ports", "br-int").split() if p.startswith("pn")]
        from podnet.link.names import host_ifname

        links = subprocess.run(["ip", "-n", n1.netns, "-o", "link"], capture_output=True, text=True).stdout
        assert not [c for c in ("c-d", "c-e") if f" {host_ifname(c, 'eth0')}@" in links], links
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn6")
        cluster.ctl(n1, "network", "delete", "up6")


def test_forwards_are_ovn_load_balancers(cluster: Cluster) -> None:
    """Forwards of an OVN network made from n1 are listed alike by n2 and carry traffic from
    the outside to pods on either node (ports, a default target, many-to-one); what no port
    matches is dropped without a default target (seed 004); a pod reaches its own forward; the
    seed's loopback case answers from the address called; ``0.0.0.0`` allocates from the
    uplink's routes; listen addresses outside the routes or inside the OVN ranges are refused.
    Deleting the network removes its forwards and load balancers."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    cluster.uplink(n1, "up7", UPLINK)
    cluster.ok(n1, "network", "create", "ovn7", "--type=ovn", "network=up7", "ipv6.address=none")
    router = cluster.networks(n1)["ovn7"]["config"]["volatile.network.ipv4.address"]
    subprocess.run(["ip", "-n", out, "route", "replace", "198.51.100.0/24", "via", router], check=True)
    pods = {"a": (n1, f"{cluster.lab.prefix}-fa"), "b": (n2, f"{cluster.lab.prefix}-fb")}
    servers: list[Echo] = []
    try:
        for _, ns in pods.values():
            subprocess.run(["ip", "netns", "add", ns], check=True)
        ip = {k: plugin(cluster, node, "ADD", f"f-{k}", ns, "ovn7")["ips"][0]["address"].split("/")[0]
              for k, (node, ns) in pods.items()}  # fmt: skip
        for k, (_, ns) in pods.items():
            for port in (80, 8080, 9000):
                servers.append(Echo(ns, f"POD-{k.upper()}-{port}", port))
        # ports to b, a default target a
        cluster.ok(n1, "network", "forward", "create", "ovn7", "198.51.100.5", f"target_address={ip['a']}")
        cluster.ok(n1, "network", "forward", "port", "add", "ovn7", "198.51.100.5", "tcp", "80", ip["b"], "8080")
        # no default target; many-to-one
        cluster.ok(n2, "network", "forward", "create", "ovn7", "198.51.100.6")
        cluster.ok(n2, "network", "forward", "port", "add", "ovn7", "198.51.100.6", "tcp", "7000-7001", ip["b"], "9000")
        lists = [cluster.ok(n, "network", "forward", "list", "ovn7", "-f", "json") for n in (n1, n2)]
        assert lists[0] == lists[1] and "198.51.100.5" in lists[0] and "198.51.100.6" in lists[0]
        got = {
            "port to b": tcp(out, "198.51.100.5", 80),
            "default to a": tcp(out, "198.51.100.5", 9000),
            "many-to-one 7000": tcp(out, "198.51.100.6", 7000),
            "many-to-one 7001": tcp(out, "198.51.100.6", 7001),
            "no default target": tcp(out, "198.51.100.6", 80),
            "pod a to its own default": tcp(pods["a"][1], "198.51.100.5", 8080),
        }
        assert got["port to b"].startswith("POD-B-8080 "), got
        assert got["default to a"].startswith("POD-A-9000 "), got
        assert got["many-to-one 7000"].startswith("POD-B-9000 ") and got["many-to-one 7001"].startswith("POD-B-9000 "), got
        assert got["no default target"] == "<timeout>", got
        assert got["pod a to its own default"].startswith("POD-A-8080 "), got
        # seed 004's loopback case: b has a whole-IP forward on .12 and port forwards on .13
        cluster.ok(n1, "network", "forward", "create", "ovn7", "198.51.100.12", f"target_address={ip['b']}")
        cluster.ok(n1, "network", "forward", "create", "ovn7", "198.51.100.13")
        cluster.ok(n1, "network", "forward", "port", "add", "ovn7", "198.51.100.13", "tcp", "80", ip["b"])
        assert tcp(pods["b"][1], "198.51.100.13", 80) == "POD-B-80 ::ffff:198.51.100.13"
        made = cluster.ok(n2, "network", "forward", "create", "ovn7", "0.0.0.0")
        assert "198.51.100.1" in made, made
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn7", "192.0.2.99")
        assert bad.returncode == 1 and 'Uplink network does not contain "192.0.2.99/32" in its routes' in bad.stderr
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn7", "198.51.100.5")
        assert bad.returncode == 1 and "already exists" in bad.stderr, bad.stderr
        for k, (node, ns) in pods.items():
            plugin(cluster, node, "DEL", f"f-{k}", ns, "ovn7")
        cluster.ok(n2, "network", "delete", "ovn7")
        assert nbctl(cluster, "--bare", "--columns=name", "list", "Load_Balancer") == ""
        assert "forward" not in cluster.lab.run(None, "ovn-nbctl", f"--db={cluster.lab.nb_unix}", "get",
                                                "NB_Global", ".", "external_ids").stdout  # fmt: skip
    finally:
        for s in servers:
            s.stop()
        for _, ns in pods.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn7")
        cluster.ctl(n1, "network", "delete", "up7")


UPLINK6 = {**UPLINK, "ipv6.gateway": "2001:db8:ff::254/64",
           "ipv6.ovn.ranges": "2001:db8:ff::10-2001:db8:ff::19", "ipv6.routes": "2001:db8:ee::/64"}  # fmt: skip


def test_ipv6_forwards_reach_pods_on_two_nodes(cluster: Cluster) -> None:
    """IPv6 on a dual-stack OVN network: a whole-IP forward to a pod on n2 and a port forward
    to a pod on n3, on one IPv6 listen address, reached from the outside over TCP and UDP (the
    pod sees the outside's address); a pod reaches the outside from the router's IPv6 uplink
    address; the seed's loopback case (a whole-IP forward on ::12 and port forwards on ::13 to
    one pod, which calls ::13) answers from the address called; ``::`` allocates from the
    uplink's IPv6 routes; mixed families are refused with LXD's message."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    subprocess.run(["ip", "-n", out, "addr", "add", "2001:db8:ff::254/64", "dev", "gw0", "nodad"], check=True)
    cluster.uplink(n1, "up10", UPLINK6)
    cluster.ok(n1, "network", "create", "ovn10", "--type=ovn", "network=up10")
    router6 = cluster.networks(n2)["ovn10"]["config"]["volatile.network.ipv6.address"]
    assert router6.startswith("2001:db8:ff::1"), router6
    subprocess.run(["ip", "-n", out, "-6", "route", "replace", "2001:db8:ee::/64", "via", router6], check=True)
    pods = {"b": (n2, f"{cluster.lab.prefix}-6b"), "c": (n3, f"{cluster.lab.prefix}-6c")}
    servers: list[Echo] = []
    try:
        ip6 = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            result = plugin(cluster, node, "ADD", f"v6-{k}", ns, "ovn10")
            ip6[k] = next(i["address"].split("/")[0] for i in result["ips"] if ":" in i["address"])
            servers.append(Echo(ns, f"POD-{k.upper()}", 8080))
        servers.append(Echo(out, "OUTSIDE6", 8083))
        cluster.ok(n2, "network", "forward", "create", "ovn10", "2001:db8:ee::5", f"target_address={ip6['b']}")
        for proto in ("tcp", "udp"):
            cluster.ok(n3, "network", "forward", "port", "add", "ovn10", "2001:db8:ee::5", proto, "80", ip6["c"], "8080")
        got = {
            "tcp port to c": tcp(out, "2001:db8:ee::5", 80),
            "udp port to c": udp(out, "2001:db8:ee::5", 80),
            "default to b": tcp(out, "2001:db8:ee::5", 8080),
            "c to outside": tcp(pods["c"][1], "2001:db8:ff::254", 8083),
        }
        assert got["tcp port to c"] == "POD-C 2001:db8:ff::254", got
        assert got["udp port to c"] == "POD-C 2001:db8:ff::254", got
        assert got["default to b"] == "POD-B 2001:db8:ff::254", got
        assert got["c to outside"] == f"OUTSIDE6 {router6}", got
        # seed 004's loopback case, in its own family: b has a whole-IP forward on ::12 and
        # port forwards on ::13; calling ::13 it is answered from ::13 (the seed saw ::12)
        cluster.ok(n1, "network", "forward", "create", "ovn10", "2001:db8:ee::12", f"target_address={ip6['b']}")
        cluster.ok(n1, "network", "forward", "create", "ovn10", "2001:db8:ee::13")
        cluster.ok(n1, "network", "forward", "port", "add", "ovn10", "2001:db8:ee::13", "tcp", "80", ip6["b"], "8080")
        assert tcp(pods["b"][1], "2001:db8:ee::13", 80) == "POD-B 2001:db8:ee::13"
        assert tcp(pods["b"][1], "2001:db8:ee::12", 8080) == "POD-B 2001:db8:ee::12"
        made = cluster.ok(n1, "network", "forward", "create", "ovn10", "::")
        assert "2001:db8:ee::1" in made, made
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn10", "2001:db8:ee::9", "target_address=10.0.0.1")
        assert bad.returncode == 1 and "Cannot mix IP versions" in bad.stderr, bad.stderr
        bad = cluster.ctl(n1, "network", "forward", "create", "ovn10", "2001:db8:ff::11")
        assert bad.returncode == 1 and "in its routes" in bad.stderr, bad.stderr
    finally:
        release(cluster, servers, pods, "v6", "ovn10")
        subprocess.run(["ip", "-n", out, "-6", "route", "del", "2001:db8:ee::/64"], capture_output=True)
        subprocess.run(["ip", "-n", out, "addr", "del", "2001:db8:ff::254/64", "dev", "gw0"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn10")
        cluster.ctl(n1, "network", "delete", "up10")


def test_l2proxy_ingress_answers_for_forwards_on_the_uplink(cluster: Cluster) -> None:
    """An uplink in ``l2proxy`` ingress mode (LXD's default): the outside has the uplink's
    routes on-link, with no route via the router, and reaches a whole-IP forward and a port
    forward (IPv4 over ARP, IPv6 over NDP) on pods on n2 and n3. Switching the uplink to
    ``routed`` stops the neighbour answers (the outside then times out) and back to
    ``l2proxy`` brings them back; ``routed`` is kept while a network uses ``ipv4.nat.address``."""
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    keys = {**{k: v for k, v in UPLINK6.items() if k != "ovn.ingress_mode"},
            "ipv4.routes": "198.18.5.0/24", "ipv6.routes": "2001:db8:e5::/64"}  # fmt: skip
    subprocess.run(["ip", "-n", out, "addr", "add", "2001:db8:ff::254/64", "dev", "gw0", "nodad"], check=True)
    onlink = [["198.18.5.0/24", "dev", "gw0"], ["2001:db8:e5::/64", "dev", "gw0"]]
    for route in onlink:
        subprocess.run(["ip", "-n", out, "route", "replace", *route], check=True)
    pods = {"b": (n2, f"{cluster.lab.prefix}-lb"), "c": (n3, f"{cluster.lab.prefix}-lc")}
    servers: list[Echo] = []

    def reach() -> dict[str, str]:
        subprocess.run(["ip", "-n", out, "neigh", "flush", "dev", "gw0"], check=True)
        return {"whole v4": tcp(out, "198.18.5.7", 8080), "port v4": tcp(out, "198.18.5.8", 80),
                "whole v6": tcp(out, "2001:db8:e5::7", 8080), "port v6": tcp(out, "2001:db8:e5::8", 80)}  # fmt: skip

    try:
        cluster.uplink(n1, "up15", keys)
        cluster.ok(n1, "network", "create", "ovn15", "--type=ovn", "network=up15")
        ip: dict[str, dict[int, str]] = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            result = plugin(cluster, node, "ADD", f"l2-{k}", ns, "ovn15")
            ip[k] = {4 if ":" not in i["address"] else 6: i["address"].split("/")[0] for i in result["ips"]}
            for port in (80, 8080):
                servers.append(Echo(ns, f"POD-{k.upper()}-{port}", port))
        for v, fam in (("198.18.5", 4), ("2001:db8:e5:", 6)):
            sep = "." if fam == 4 else ":"
            cluster.ok(n2, "network", "forward", "create", "ovn15", f"{v}{sep}7", f"target_address={ip['b'][fam]}")
            cluster.ok(n3, "network", "forward", "create", "ovn15", f"{v}{sep}8")
            cluster.ok(n3, "network", "forward", "port", "add", "ovn15", f"{v}{sep}8", "tcp", "80", ip["c"][fam], "8080")
        got = reach()
        assert got["whole v4"] == "POD-B-8080 ::ffff:203.0.113.254", got
        assert got["port v4"] == "POD-C-8080 ::ffff:203.0.113.254", got
        assert got["whole v6"] == "POD-B-8080 2001:db8:ff::254", got
        assert got["port v6"] == "POD-C-8080 2001:db8:ff::254", got
        cluster.ok(n2, "network", "set", "up15", "ovn.ingress_mode=routed")
        assert set(reach().values()) == {"<timeout>"}, "routed mode still answered for the listen addresses"
        cluster.ok(n3, "network", "set", "up15", "ovn.ingress_mode=l2proxy")
        assert reach() == got
        cluster.ok(n1, "network", "set", "up15", "ovn.ingress_mode=routed")
        cluster.ok(n1, "network", "set", "ovn15", "ipv4.nat.address=198.18.5.50")
        bad = cluster.ctl(n2, "network", "set", "up15", "ovn.ingress_mode=l2proxy")
        assert bad.returncode == 1 and "uses ipv4.nat.address" in bad.stderr, bad.stderr
        assert cluster.networks(n1)["up15"]["config"]["ovn.ingress_mode"] == "routed"
    finally:
        release(cluster, servers, pods, "l2", "ovn15")
        for route in onlink:
            subprocess.run(["ip", "-n", out, "route", "del", *route], capture_output=True)
        subprocess.run(["ip", "-n", out, "addr", "del", "2001:db8:ff::254/64", "dev", "gw0"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn15")
        cluster.ctl(n1, "network", "delete", "up15")


def test_a_bridge_network_is_an_uplink(cluster: Cluster) -> None:
    """A podnet bridge network on n1 with ``ipv4.ovn.ranges`` and ``ipv4.routes`` is an uplink:
    n1 joins it to OVS (a veth pair with podnet's alias, an OVS bridge, the mapping) and routes
    ``ipv4.routes`` onto it. An OVN network made on n1 takes its router address from the
    ranges; pods on n2 and n3 reach n1's bridge address, seen from the router's address (SNAT);
    a forward in the routes reaches a pod from n1 (l2proxy: OVN answers ARP on the bridge).
    n2, without the bridge, lists the network but cannot make another on it; the bridge is not
    deleted while used; ``network restore`` brings a removed veth pair back; once deleted,
    nothing of it is left on n1."""
    from podnet.drivers.bridge_uplink import ovs_bridge as bridge_name
    from podnet.drivers.bridge_uplink import veth_names

    n1, n2, n3 = cluster.lab.nodes
    here, there = veth_names("brup")
    pods = {"b": (n2, f"{cluster.lab.prefix}-ub"), "c": (n3, f"{cluster.lab.prefix}-uc")}
    servers: list[Echo] = []
    try:
        bad = cluster.ctl(n1, "network", "create", "brup", "ipv4.address=100.64.10.1/24", "ipv6.address=none",
                          "ipv4.ovn.ranges=100.64.11.10-100.64.11.19")  # fmt: skip
        assert bad.returncode == 1 and "must lie in the subnet 100.64.10.0/24" in bad.stderr, bad.stderr
        cluster.ok(n1, "network", "create", "brup", "ipv4.address=100.64.10.1/24", "ipv6.address=none",
                   "ipv4.ovn.ranges=100.64.10.10-100.64.10.19", "ipv4.routes=198.18.9.0/24")  # fmt: skip
        links = cluster.lab.run(n1.netns, "ip", "-o", "link", "show").stdout
        assert f" {here}@{there}:" in links and "master brup" in links.split(f" {here}@")[1].splitlines()[0]
        assert there in cluster.lab.vsctl(n1, "list-ports", bridge_name("brup"))
        assert f"brup:{bridge_name('brup')}" in cluster.lab.vsctl(n1, "get", "open_vswitch", ".",
                                                                  "external_ids:ovn-bridge-mappings")  # fmt: skip
        assert "198.18.9.0/24 dev brup proto static" in cluster.lab.run(n1.netns, "ip", "route").stdout
        cluster.ok(n1, "network", "create", "ovb", "--type=ovn", "network=brup", "ipv6.address=none")
        bad = cluster.ctl(n1, "network", "set", "brup", "ipv4.ovn.ranges=")  # finding 4 of the review
        assert bad.returncode == 1 and "in use (OVN network ovb)" in bad.stderr, bad.stderr
        assert f"brup:{bridge_name('brup')}" in cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")
        assert cluster.networks(n2)["ovb"]["config"]["volatile.network.ipv4.address"] == "100.64.10.10"
        cluster.uplink(n1, "up7", UPLINK)
        try:
            bad = cluster.ctl(n2, "network", "create", "up7", "ipv4.address=100.64.12.1/24", "ipv6.address=none",
                              "ipv4.ovn.ranges=100.64.12.10-100.64.12.19")  # fmt: skip
            assert bad.returncode == 1 and 'A physical network "up7" exists in the cluster' in bad.stderr, bad.stderr
            assert "up7" not in cluster.lab.run(n2.netns, "ip", "-o", "link").stdout
        finally:
            cluster.ctl(n1, "network", "delete", "up7")
        bad = cluster.ctl(n2, "network", "create", "ovb2", "--type=ovn", "network=brup", "ipv6.address=none")
        assert bad.returncode == 1 and 'uplink network "brup" not found' in bad.stderr, bad.stderr
        ip = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            ip[k] = plugin(cluster, node, "ADD", f"u-{k}", ns, "ovb")["ips"][0]["address"].split("/")[0]
            servers.append(Echo(ns, f"POD-{k.upper()}", 8080))
        servers.append(Echo(n1.netns, "NODE1", 8086))
        for k, (_, ns) in pods.items():
            assert tcp(ns, "100.64.10.1", 8086) == "NODE1 ::ffff:100.64.10.10", k
        cluster.lab.run(n1.netns, "ip", "link", "del", here)  # a cleanup behind podnet's back
        env = {**n1.env, "OVS_RUNDIR": str(cluster.data[n1.name])}  # OVS not up (yet): no db.sock
        code = (f"import sys; sys.path.insert(0, {SRC!r}); sys.argv[0] = 'podnetctl'; "
                "from podnet.cli.main import main; main()")
        out = subprocess.run(["ip", "netns", "exec", n1.netns, "env", *[f"{k}={v}" for k, v in env.items()],
                              sys.executable, "-c", code, "network", "restore", "--data-dir",
                              str(cluster.data[n1.name])], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 1 and "network brup:" in out.stderr and "needs Open vSwitch" in out.stderr, out.stderr
        assert " brup:" in cluster.lab.run(n1.netns, "ip", "-o", "link", "show").stdout  # the bridge is back
        assert "uplink brup" in cluster.ok(n1, "network", "restore")
        cluster.ok(n1, "network", "forward", "create", "ovb", "198.18.9.5", f"target_address={ip['b']}")
        assert tcp(n1.netns, "198.18.9.5", 8080) == "POD-B ::ffff:100.64.10.1"
        bad = cluster.ctl(n2, "network", "forward", "create", "ovb", "198.18.9.6")
        assert bad.returncode == 1 and "in its routes" in bad.stderr, bad.stderr
        # n2 does not know n1's bridge: changing the forward from there keeps its ARP answers
        cluster.ok(n2, "network", "forward", "set", "ovb", "198.18.9.5", f"target_address={ip['c']}")
        assert "neighbor_responder=all" in nbctl(cluster, "--bare", "--columns=options", "list", "Load_Balancer")
        assert tcp(n1.netns, "198.18.9.5", 8080) == "POD-C ::ffff:100.64.10.1"
        bad = cluster.ctl(n1, "network", "delete", "brup")
        assert bad.returncode == 1 and "in use" in bad.stderr, bad.stderr
        for k, (node, ns) in pods.items():
            plugin(cluster, node, "DEL", f"u-{k}", ns, "ovb")
        cluster.ok(n2, "network", "delete", "ovb")
        cluster.ok(n1, "network", "delete", "brup")
        links = cluster.lab.run(n1.netns, "ip", "-o", "link", "show").stdout
        assert here not in links and there not in links and " brup:" not in links
        assert "brup" not in cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")
        assert bridge_name("brup") not in cluster.lab.vsctl(n1, "list-br")
        assert "198.18.9.0" not in cluster.lab.run(n1.netns, "ip", "route").stdout
    finally:
        release(cluster, servers, pods, "u", "ovb")
        cluster.ctl(n1, "network", "delete", "ovb")
        cluster.ctl(n1, "network", "delete", "brup")


def test_every_node_adds_at_once_dual_stack(cluster: Cluster) -> None:
    """Eight pods per node ADDed at the same time on both nodes, on a dual-stack OVN network:
    every pod gets an IPv4 and an IPv6 address of the network, none twice (northd assigns them
    for the whole cluster); a pod on n1 reaches one on n2 over IPv6 TCP. All DELs leave no
    port."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up8", UPLINK)
    cluster.ok(n1, "network", "create", "ovn8", "--type=ovn", "network=up8")
    pods = [(node, f"{cluster.lab.prefix}-d{node.name}{i}", f"d-{node.name}-{i}")
            for node in (n1, n2) for i in range(8)]  # fmt: skip
    results: dict[str, Any] = {}
    errors: list[str] = []
    server: Echo | None = None
    try:
        for _, ns, _ in pods:
            subprocess.run(["ip", "netns", "add", ns], check=True)

        def add(node: Node, ns: str, cid: str) -> None:
            out = run_plugin(cluster, node, "ADD", cid, ns, "ovn8")
            if out.returncode != 0:
                errors.append(f"{cid}: {out.stdout} {out.stderr}")
            else:
                results[cid] = json.loads(out.stdout)

        threads = [threading.Thread(target=add, args=p) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        config = cluster.networks(n1)["ovn8"]["config"]
        v4 = ipaddress_network(config["ipv4.address"])
        v6 = ipaddress_network(config["ipv6.address"])
        seen: list[str] = []
        for cid, result in results.items():
            got = [ip["address"].split("/")[0] for ip in result["ips"]]
            assert len(got) == 2, (cid, got)
            assert __import__("ipaddress").ip_address(got[0]) in v4, (cid, got)
            assert __import__("ipaddress").ip_address(got[1]) in v6, (cid, got)
            seen += got
        assert len(seen) == len(set(seen)) == 32, seen
        a_ns, b_ns = pods[0][1], pods[8][1]
        b6 = results[pods[8][2]]["ips"][1]["address"].split("/")[0]
        a6 = results[pods[0][2]]["ips"][1]["address"].split("/")[0]
        server = Echo(b_ns, "POD-B6", 8086)
        assert tcp(a_ns, b6, 8086) == f"POD-B6 {a6}"
    finally:
        if server is not None:
            server.stop()
        for node, ns, cid in pods:
            run_plugin(cluster, node, "DEL", cid, ns, "ovn8")
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        assert not pod_ports(cluster)
        cluster.ctl(n1, "network", "delete", "ovn8")
        cluster.ctl(n1, "network", "delete", "up8")


def ipaddress_network(cidr: str) -> Any:
    import ipaddress

    return ipaddress.ip_interface(cidr).network


def test_lxc_client_manages_ovn_networks_and_forwards(cluster: Cluster, tmp_path: Path) -> None:
    """The real ``lxc`` client against ``podnetctl serve`` on n1 creates an uplink, an OVN
    network and a forward; ``podnetctl`` on n2 sees them; ``lxc network set`` with a key the
    network's objects are made of is refused with a reason; ``lxc network delete`` removes it."""
    import os

    from api_helpers import ApiServer, lxc, lxc_conf

    need("lxc")
    n1, n2, n3 = cluster.lab.nodes
    server = ApiServer(n1.netns, cluster.data["n1"], tmp_path / "logs", env={**os.environ, **n1.env})
    conf = lxc_conf(tmp_path / "lxc-conf")
    try:
        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return lxc(server.data, conf, *args)

        out = run("network", "create", "up9", "--type=physical", "parent=ext0", "--target", "n1")
        assert out.returncode == 0 and "Network up9 pending on member n1" in out.stdout, out.stderr
        out = run("network", "create", "up9", "--type=physical", *[f"{k}={v}" for k, v in UPLINK.items() if k != "parent"])
        assert out.returncode == 0 and "Network up9 created" in out.stdout, out.stderr
        out = run("network", "get", "up9", "parent", "--target", "n1")
        assert out.returncode == 0 and out.stdout.strip() == "ext0", (out.stdout, out.stderr)
        out = run("network", "set", "up9", "parent=ext0", "user.k=v", "--target", "n1")
        assert out.returncode == 1 and 'Config key "user.k" may not be used as member-specific key' in out.stderr
        out = run("network", "set", "up9", "parent=ext0", "--target", "n1")  # GET and PUT ?target=, If-Match
        assert out.returncode == 0, out.stderr
        shown = yaml_load(run("network", "show", "up9").stdout)
        assert "parent" not in shown["config"] and shown["locations"] == ["n1"], shown
        out = run("network", "create", "ovn9", "--type=ovn", "network=up9", "ipv6.address=none")
        assert out.returncode == 0, out.stderr
        out = run("network", "forward", "create", "ovn9", "198.51.100.40", "target_address=10.1.1.1")
        assert out.returncode == 1 and "Default target address is not within the network subnet" in out.stderr
        router = cluster.networks(n2)["ovn9"]["config"]["ipv4.address"]
        target = router.rsplit(".", 1)[0] + ".7"
        out = run("network", "forward", "create", "ovn9", "198.51.100.40", f"target_address={target}")
        assert out.returncode == 0, out.stderr
        listed = run("network", "list", "--format", "csv").stdout
        assert "ovn9,ovn,YES" in listed and "up9,physical,YES" in listed, listed
        shown = yaml_load(run("network", "show", "ovn9").stdout)
        assert shown["config"] == cluster.networks(n2)["ovn9"]["config"]
        assert "198.51.100.40" in cluster.ok(n2, "network", "forward", "list", "ovn9")
        out = run("network", "set", "ovn9", "bridge.mtu=1300")
        assert out.returncode == 1 and 'Changing "bridge.mtu" of an OVN network is not supported' in out.stderr
        assert run("network", "set", "ovn9", "ipv4.nat=false").returncode == 0  # SNAT rules follow
        assert nbctl(cluster, "--bare", "--columns=_uuid", "list", "NAT") == ""
        assert run("network", "set", "ovn9", "user.owner=team-a").returncode == 0
        assert cluster.networks(n2)["ovn9"]["config"]["user.owner"] == "team-a"
        assert run("network", "delete", "ovn9").returncode == 0
        assert "ovn9" not in cluster.networks(n2)
    finally:
        server.stop()
        cluster.ctl(n1, "network", "delete", "ovn9")
        cluster.ctl(n1, "network", "delete", "up9")


def yaml_load(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def test_a_registry_larger_than_one_argument_still_changes(cluster: Cluster) -> None:
    """With 400 KB of forwards registered (more than one argument of ``ovsdb-client`` may
    hold), forward create and delete still work from two nodes, and each change bumps the
    registry's generation by one instead of re-sending the whole map. The 200 of them inside
    the uplink's routes are held: ``0.0.0.0`` allocates the first address after them, and one
    of them is refused as existing."""
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Ovsdb, omap

    n1, n2, _ = cluster.lab.nodes
    cluster.uplink(n1, "up11", UPLINK)
    cluster.ok(n1, "network", "create", "ovn11", "--type=ovn", "network=up11", "ipv6.address=none")
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    pad = "x" * 1000
    keys = [f"{nbmod.FPREFIX}ovn11|198.51.100.{i + 1}" for i in range(200)]  # in the routes
    keys += [f"{nbmod.FPREFIX}ovn11|198.51.{101 + i // 250}.{i % 250 + 1}" for i in range(200)]
    keys.append(f"{nbmod.FPREFIX}ovn11|198.51.100.300")  # another writer's malformed key: ignored
    try:
        for chunk in range(0, len(keys), 50):  # as if made earlier (descriptions of 1,000 bytes)
            put = {k: f'{{"description":"{pad}","config":{{}},"ports":[]}}' for k in keys[chunk : chunk + 50]}
            nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                          "mutations": [["external_ids", "insert", omap(put)]]}])  # fmt: skip
        before = nbmod.read(nb).generation
        cluster.ok(n1, "network", "forward", "create", "ovn11", "198.51.100.249")
        cluster.ok(n2, "network", "forward", "delete", "ovn11", "198.51.100.249")
        assert nbmod.read(nb).generation == before + 2
        held = cluster.ctl(n2, "network", "forward", "create", "ovn11", "198.51.100.7")
        assert held.returncode == 1 and "already exists" in held.stderr, held.stderr
        made = cluster.ctl(n2, "network", "forward", "create", "ovn11", "0.0.0.0")
        assert made.returncode == 0 and "198.51.100.201" in made.stdout, made.stdout + made.stderr
    finally:
        nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                      "mutations": [["external_ids", "delete", ["set", keys]]]}])  # fmt: skip
        cluster.ctl(n1, "network", "delete", "ovn11")
        cluster.ctl(n1, "network", "delete", "up11")


def test_hostports_reach_ovn_pods(cluster: Cluster) -> None:
    """A hostPort of a pod on an OVN network (n2) answers from another node (n3 → n2's
    underlay address) and from n2 itself, its loopback 127.0.0.1 included, through n2's management port (the pod sees its
    address, in the subnet); a second pod asking for the same hostPort gets 101 and leaves
    nothing; DEL takes the hostPort away. Deleting the network is not refused for the
    management port, and ``network restore`` on n2 then removes it."""
    from podnet.drivers.ovn_hostports import mgmt_ifname
    from podnet.link.names import host_ifname

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up12", UPLINK)
    cluster.ok(n1, "network", "create", "ovn12", "--type=ovn", "network=up12", "ipv6.address=none")
    subnet = cluster.networks(n2)["ovn12"]["config"]["ipv4.address"].rsplit(".", 1)[0] + "."
    ns = {k: f"{cluster.lab.prefix}-h{k}" for k in "ab"}
    ports = {"portMappings": [{"hostPort": 8085, "containerPort": 8080, "protocol": "tcp"}]}
    server: Echo | None = None
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        plugin(cluster, n2, "ADD", "h-a", ns["a"], "ovn12", runtimeConfig=ports)
        server = Echo(ns["a"], "POD-HA", 8080)
        seen = tcp(n3.netns, n2.address, 8085)
        assert seen.startswith("POD-HA ::ffff:" + subnet), seen
        assert tcp(n2.netns, n2.address, 8085).startswith("POD-HA ::ffff:" + subnet)  # the node itself
        assert tcp(n2.netns, "127.0.0.1", 8085).startswith("POD-HA ::ffff:" + subnet)  # its loopback
        out = run_plugin(cluster, n2, "ADD", "h-b", ns["b"], "ovn12", runtimeConfig=ports)
        assert out.returncode == 1 and '"code": 101' in out.stdout, out.stdout
        assert "h-b" not in cluster.ok(n2, "pods") and f" {host_ifname('h-b', 'eth0')}@" not in \
            subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        assert len(nbctl(cluster, "--bare", "--columns=name", "find", "Logical_Switch_Port",
                         "external_ids:podnet-container=h-b")) == 0  # fmt: skip
        plugin(cluster, n2, "DEL", "h-a", ns["a"], "ovn12")
        assert tcp(n3.netns, n2.address, 8085) == "<refused>", "hostPort still there"  # the node: RST
        mgmt = mgmt_ifname("ovn12")
        assert mgmt in subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        cluster.ok(n1, "network", "delete", "ovn12")
        assert "management port" in cluster.ok(n2, "network", "restore")
        links = subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        assert mgmt not in links and mgmt not in cluster.lab.vsctl(n2, "list-ports", "br-int")
    finally:
        if server is not None:
            server.stop()
        for k, name in ns.items():
            run_plugin(cluster, n2, "DEL", f"h-{k}", name, "ovn12")
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn12")
        cluster.ctl(n1, "network", "delete", "up12")


def test_what_others_wrote_in_the_nb_is_left_alone(cluster: Cluster) -> None:
    """Rows and records podnet did not make (review of issue 16): a registry record of another
    type or with a bad config is not a network (no bridge appears on a node, listing works); a
    malformed forward key is not listed; ``network create`` is refused (409) when a router of
    the names it would take exists, and that router survives; ``volatile.*`` keys are podnet's
    (400), a PUT sending the stored value back is fine."""
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Ovsdb, omap

    n1, n2, _ = cluster.lab.nodes
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    planted = {f"{nbmod.PREFIX}evb": '{"type":"bridge","config":{"ipv4.address":"8.8.8.1/24"}}',
               f"{nbmod.PREFIX}evo": '{"type":"ovn","config":{"network":"x","ipv4.address":"garbage"}}',
               f"{nbmod.PREFIX}ev;x": '{"type":"physical","config":{"parent":"eth0"}}'}  # fmt: skip
    nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                  "mutations": [["external_ids", "insert", omap(planted)]]}])  # fmt: skip
    cluster.lab.nbctl("lr-add", "pn-xy-lr", "--", "set", "Logical_Router", "pn-xy-lr", "external_ids:owner=admin")
    ns = f"{cluster.lab.prefix}-ev"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        listed = cluster.networks(n2)
        assert not {"evb", "evo", "ev;x"} & set(listed), listed
        out = run_plugin(cluster, n2, "ADD", "ev-1", ns, "evb")
        assert out.returncode == 1 and '"code": 7' in out.stdout, out.stdout
        assert "evb" not in subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        cluster.uplink(n1, "upx", UPLINK)
        bad = cluster.ctl(n1, "network", "create", "xy", "--type=ovn", "network=upx", "ipv6.address=none")
        assert bad.returncode == 1 and "pn-xy-lr" in bad.stderr and "not made by podnet" in bad.stderr, bad.stderr
        assert "xy" not in cluster.networks(n1)
        assert cluster.lab.nbctl("--bare", "--columns=external_ids", "find", "Logical_Router", "name=pn-xy-lr") == "owner=admin"
        cluster.ok(n1, "network", "create", "ovx", "--type=ovn", "network=upx", "ipv6.address=none")
        bad = cluster.ctl(n2, "network", "set", "ovx", "volatile.network.ipv4.address=8.8.4.4")
        assert bad.returncode == 1 and "read-only" in bad.stderr, bad.stderr
        bad = cluster.ctl(n2, "network", "create", "ovy", "--type=ovn", "network=upx",
                          "volatile.network.ipv4.address=203.0.113.10")  # fmt: skip
        assert bad.returncode == 1 and "read-only" in bad.stderr, bad.stderr
        shown = yaml_load(cluster.ok(n2, "network", "show", "ovx"))
        edited = cluster.ctl(n2, "network", "edit", "ovx", input=yaml_dump({"config": {**shown["config"], "user.a": "b"}}))
        assert edited.returncode == 0, edited.stderr
        mappings = cluster.lab.vsctl(n1, "get", "Open_vSwitch", ".", "external_ids:ovn-bridge-mappings").strip('"')
        cluster.lab.vsctl(n1, "set", "Open_vSwitch", ".", f'external_ids:ovn-bridge-mappings="{mappings},adm:br-int"')
        cluster.lab.run(n1.netns, "ip", "link", "add", "vadm0", "type", "veth", "peer", "name", "vadm1")
        try:  # a free parent (ext0 is upx's), so that the mapping is what refuses
            bad = cluster.ctl(n1, "network", "create", "adm", "--type=physical", "parent=vadm0", "--target", "n1")
            assert bad.returncode == 1 and "already mapped to bridge br-int" in bad.stderr, bad.stderr
            assert "vadm0" not in cluster.lab.vsctl(n1, "list-ports", "br-int")
            assert "adm:br-int" in cluster.lab.vsctl(n1, "get", "Open_vSwitch", ".", "external_ids:ovn-bridge-mappings")
        finally:
            cluster.lab.vsctl(n1, "set", "Open_vSwitch", ".", f'external_ids:ovn-bridge-mappings="{mappings}"')
            cluster.lab.run(n1.netns, "ip", "link", "del", "vadm0", check=False)
        bad = cluster.ctl(n2, "network", "set", "upx", "parent=eth0")
        assert bad.returncode == 1 and 'Config key "parent" is cluster member specific' in bad.stderr, bad.stderr
        made = cluster.ctl(n2, "network", "forward", "create", "ovx", "0.0.0.0")
        assert made.returncode == 0, made.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                      "mutations": [["external_ids", "delete", ["set", list(planted)]]]}])  # fmt: skip
        cluster.lab.nbctl("--if-exists", "lr-del", "pn-xy-lr")
        for name in ("ovx", "ovy", "xy", "upx"):
            cluster.ctl(n1, "network", "delete", name)


def yaml_dump(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data))


def test_uplink_parent_must_be_free(cluster: Cluster) -> None:
    """An uplink never takes over a link that is someone else's or in use: a port of a Linux
    bridge (a pod's bridge port, say), a veth carrying only routes (a CNI ptp host end), a
    bridge with ports, the lower device of a macvlan, a port of an OVS bridge podnet did not make,
    an OVS bridge's own device and the loopback are each refused naming why, and nothing is
    recorded or mapped; the links are as they were."""
    n1 = cluster.lab.nodes[0]
    lab = cluster.lab
    setup = [
        ["ip", "link", "add", "brx", "type", "bridge"],
        ["ip", "link", "add", "vx0", "type", "veth", "peer", "name", "vx1"],
        ["ip", "link", "set", "vx0", "master", "brx"],
        ["ip", "link", "add", "vr0", "type", "veth", "peer", "name", "vr1"],
        ["ip", "link", "set", "vr0", "up"],
        ["ip", "route", "add", "10.99.0.5/32", "dev", "vr0"],
        ["ip", "link", "add", "vl0", "type", "veth", "peer", "name", "vl1"],
        ["ip", "link", "add", "link", "vl0", "name", "vl0m", "type", "macvlan", "mode", "bridge"],
        ["ip", "link", "add", "vo0", "type", "veth", "peer", "name", "vo1"],
        ["ip", "link", "add", "vm0", "type", "veth", "peer", "name", "vm1"],
        ["ip", "link", "set", "vm0", "up"],
        ["ip", "route", "add", "10.98.0.0/24", "nexthop", "via", "10.97.0.2", "dev", "vm0", "onlink",
         "nexthop", "via", "10.97.0.3", "dev", "vr0", "onlink"],
    ]
    cases = {
        "vx0": 'is attached to brx',
        "vr0": "is used by routes (10.98.0.0/24, 10.99.0.5)",
        "brx": "is a bridge or bond with ports (vx0)",
        "vl0": "is the lower device of vl0m",
        "vo0": "is a port of OVS bridge adminbr",
        "adminbr": "is an OVS bridge",
        "lo": "is the loopback device",
        "vm0": "is used by routes (10.98.0.0/24)",  # a multipath route's nexthop
        "ovs-netdev": "is Open vSwitch's own datapath device",
    }
    try:
        for argv in setup:
            lab.run(n1.netns, *argv)
        lab.vsctl(n1, "add-br", "adminbr", "--", "set", "bridge", "adminbr", "datapath_type=netdev",
                  "--", "add-port", "adminbr", "vo0")  # fmt: skip
        links = lab.run(n1.netns, "ip", "-o", "link", "show").stdout
        def routes_now() -> list[str]:  # link-local ones come and go with the lab's own links
            return [r for r in lab.run(n1.netns, "ip", "route", "show", "table", "all").stdout.splitlines()
                    if "fe80::" not in r]  # fmt: skip

        routes = routes_now()
        for parent, why in cases.items():
            out = cluster.ctl(n1, "network", "create", "upx", "--type=physical", f"parent={parent}", "--target", "n1")
            assert out.returncode == 1 and f'Parent interface "{parent}" {why}' in out.stderr, (parent, out.stderr)
            assert "upx" not in cluster.networks(n1)
            assert "upx" not in lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")
        assert lab.vsctl(n1, "port-to-br", "vo0").strip() == "adminbr"
        assert lab.run(n1.netns, "ip", "-o", "link", "show").stdout == links
        assert routes_now() == routes
    finally:
        lab.vsctl(n1, "--if-exists", "del-br", "adminbr")
        for link in ("vx0", "vr0", "vl0", "vo0", "vm0", "brx"):
            lab.run(n1.netns, "ip", "link", "del", link, check=False)


def spares_of(cluster: Cluster, network: str) -> dict[str, list[tuple[str, str]]]:
    """``{chassis: [(port, dynamic_addresses)]}`` of ``network``'s spare ports."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import spares

    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    return {n.name: spares(nb, network, n.name) for n in cluster.lab.nodes}


def test_spare_ports_are_claimed_and_never_cost_a_pod_its_address(cluster: Cluster) -> None:
    """Each node keeps ``SPARES`` spare ports per OVN network, made by its first ADD. A later
    ADD claims one (the pod takes its name, MAC and address, its row keeps the port's name) and
    makes its replacement; TX checksum offload is off on both veth ends; CHECK, ``network
    restore``, traffic across nodes and DEL work on a claimed port; GC leaves the spares alone; a requested MAC makes the pod its own port. In a
    /29 (5 free addresses) the spares give their addresses back: 5 pods get one on two nodes,
    the 6th is refused (no free address) and leaves nothing. ``network delete`` is not kept
    from deleting the network by the spares, and takes them with it."""
    import sqlite3

    from podnet.ovn.ports import SPARES, port_name

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up16", UPLINK)
    cluster.ok(n1, "network", "create", "ovsp", "--type=ovn", "network=up16", "ipv4.address=10.202.1.1/29",
               "ipv6.address=none")  # fmt: skip
    names = [f"{cluster.lab.prefix}-s{i}" for i in range(7)]
    made: list[tuple[Node, str, str]] = []
    server: Echo | None = None

    def row_port(node: Node, cid: str) -> str | None:
        with sqlite3.connect(cluster.data[node.name] / "podnet.db") as db:
            found = db.execute("SELECT ovn_port FROM pod_attachments WHERE container_id = ?", (cid,)).fetchone()
        return found[0] if found else None

    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        assert spares_of(cluster, "ovsp") == {"n1": [], "n2": [], "n3": []}
        plugin(cluster, n2, "ADD", "sp-0", names[0], "ovsp")
        made.append((n2, "sp-0", names[0]))
        assert row_port(n2, "sp-0") == port_name("ovsp", "sp-0", "eth0")  # no spare yet: its own
        cluster.lab.nbctl("--wait=sb", "sync")
        pool = spares_of(cluster, "ovsp")
        assert len(pool["n2"]) == SPARES and not pool["n1"] and not pool["n3"], pool
        ready = {p: d.split() for p, d in pool["n2"] if len(d.split()) == 2}
        assert ready, pool  # 5 addresses, 3 taken: at least one spare has one
        second = plugin(cluster, n2, "ADD", "sp-1", names[1], "ovsp")
        made.append((n2, "sp-1", names[1]))
        claimed = row_port(n2, "sp-1")
        assert claimed in dict(pool["n2"]), (claimed, pool)
        mac, address = dict(pool["n2"])[claimed].split()
        assert second["ips"][0]["address"] == f"{address}/29" and second["interfaces"][1]["mac"] == mac, second
        ids = json.loads(nbctl(cluster, "--format=json", "--columns=external_ids", "find", "Logical_Switch_Port",
                               f"name={claimed}"))["data"][0][0][1]  # fmt: skip
        assert dict(ids)["podnet-container"] == "sp-1" and "podnet-spare" not in dict(ids), ids
        after = spares_of(cluster, "ovsp")["n2"]
        assert len(after) == SPARES and claimed not in dict(after), after  # replaced
        plugin(cluster, n2, "CHECK", "sp-1", names[1], "ovsp", prevResult=second)
        host_if = second["interfaces"][0]["name"]
        for ns, dev in ((n2.netns, host_if), (names[1], "eth0")):  # userspace datapath: both ends
            shown = subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-k", dev], capture_output=True,
                                   text=True).stdout  # fmt: skip
            assert "tx-checksumming: off" in shown, (dev, shown)
        cluster.lab.vsctl(n2, "del-port", "br-int", host_if)
        assert f"{host_if} in br-int as {claimed}" in cluster.ok(n2, "network", "restore")
        plugin(cluster, n2, "CHECK", "sp-1", names[1], "ovsp", prevResult=second)
        third = plugin(cluster, n3, "ADD", "sp-2", names[2], "ovsp")  # n3's first: fills its pool
        made.append((n3, "sp-2", names[2]))
        server = Echo(names[1], "POD-SP1", 8080)
        a3 = third["ips"][0]["address"].split("/")[0]
        assert tcp(names[2], address, 8080) == f"POD-SP1 ::ffff:{a3}"
        own = "0a:5e:00:00:00:07"
        fourth = plugin(cluster, n2, "ADD", "sp-3", names[3], "ovsp", runtimeConfig={"mac": own})
        made.append((n2, "sp-3", names[3]))
        assert fourth["interfaces"][1]["mac"] == own and row_port(n2, "sp-3") == port_name("ovsp", "sp-3", "eth0")
        valid = [{"containerID": cid, "ifname": "eth0"} for node, cid, _ in made if node is n2]
        before = spares_of(cluster, "ovsp")["n2"]
        plugin(cluster, n2, "GC", "", names[0], "ovsp", **{"cni.dev/valid-attachments": valid})
        assert spares_of(cluster, "ovsp")["n2"] == before
        plugin(cluster, n3, "ADD", "sp-4", names[4], "ovsp")
        made.append((n3, "sp-4", names[4]))
        addresses = [a for a in pod_addresses(cluster) if a.startswith("10.202.1.")]
        assert len(set(addresses)) == 5, addresses  # every free address is a pod's
        out = run_plugin(cluster, n2, "ADD", "sp-5", names[5], "ovsp")
        error = json.loads(out.stdout)
        assert out.returncode == 1 and "no free address" in error["msg"], out.stdout
        assert row_port(n2, "sp-5") is None and not nbctl(
            cluster, "--bare", "--columns=name", "find", "Logical_Switch_Port", "external_ids:podnet-container=sp-5")
        assert spares_of(cluster, "ovsp") == {"n1": [], "n2": [], "n3": []}  # given back
        for node, cid, ns in made:
            plugin(cluster, node, "DEL", cid, ns, "ovsp")
        made.clear()
        assert not pod_ports(cluster)
        plugin(cluster, n3, "ADD", "sp-6", names[6], "ovsp")
        plugin(cluster, n3, "DEL", "sp-6", names[6], "ovsp")
        assert len(spares_of(cluster, "ovsp")["n3"]) == SPARES  # the pool outlives the pod
        cluster.ok(n1, "network", "delete", "ovsp")
        left = nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Switch_Port")
        assert "pn-ovsp-" not in left, left
    finally:
        if server is not None:
            server.stop()
        for node, cid, ns in made:
            run_plugin(cluster, node, "DEL", cid, ns, "ovsp")
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovsp")
        cluster.ctl(n1, "network", "delete", "up16")


def test_gc_takes_the_spares_of_a_chassis_that_stays_out_of_the_sb(cluster: Cluster) -> None:
    """A node taken out of the cluster (its chassis deleted from the SB) leaves spare ports that
    nothing will claim, holding addresses. Another node's GC marks them; when the chassis is
    back first (a routine ovn-controller stop or restart deletes the row too), the next GC
    unmarks them; when it is still out ``ORPHAN_GRACE`` seconds after the mark, GC removes them
    and keeps its own node's. Nothing changes while the SB lacks the GC's own chassis, nor for
    an SB without a datapath of the network's switch (another cluster's). The node, back, makes
    spares again at its next ADD."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import ORPHAN_GRACE, ORPHAN_TAKEOVER, ORPHANED, SPARES, sweep_spares

    n1, n2, n3 = cluster.lab.nodes
    lab = cluster.lab
    cluster.uplink(n1, "up17", UPLINK)
    cluster.ok(n1, "network", "create", "ovgc", "--type=ovn", "network=up17", "ipv6.address=none")
    names = [f"{lab.prefix}-g{i}" for i in range(3)]
    stopped: list[Node] = []

    def chassis_del(node: Node) -> None:
        lab.stop_controller(node)
        stopped.append(node)
        lab.run(None, "ovn-sbctl", "--timeout=10", f"--db={lab.sb_unix}", "--if-exists", "chassis-del", node.name)

    def back(node: Node) -> None:
        lab.start_controller(node)
        stopped.remove(node)
        lab.wait_chassis(nodes=[node])

    def gc() -> None:
        plugin(cluster, n2, "GC", "", names[0], "ovgc", **{"cni.dev/valid-attachments": []})

    def marks() -> dict[str, str]:
        rows = json.loads(nbctl(cluster, "--format=json", "--columns=name,external_ids", "list",
                                "Logical_Switch_Port"))["data"]  # fmt: skip
        return {name: dict(ids[1])[ORPHANED] for name, ids in rows if ORPHANED in dict(ids[1])}

    def age(seconds: int, marker: str = "n2", value: str | None = None) -> None:
        for port in marks():
            mark = value or f"{int(time.time()) - seconds}@{marker}"
            nbctl(cluster, "set", "Logical_Switch_Port", port, f'external_ids:{ORPHANED}="{mark}"')

    def marked_by_n2_now() -> bool:
        found = marks()
        return set(found) == n3_spares and all(
            v.endswith("@n2") and abs(int(v.split("@")[0]) - time.time()) < 30 for v in found.values())

    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        for node, ns in ((n2, names[0]), (n3, names[1])):  # each node's first ADD makes its spares
            plugin(cluster, node, "ADD", f"gc-{node.name}", ns, "ovgc")
            plugin(cluster, node, "DEL", f"gc-{node.name}", ns, "ovgc")
        pool = spares_of(cluster, "ovgc")
        assert len(pool["n2"]) == len(pool["n3"]) == SPARES and not pool["n1"], pool
        n3_spares = {p for p, _ in pool["n3"]}
        chassis_del(n3)
        gc()
        assert spares_of(cluster, "ovgc") == pool and marked_by_n2_now(), marks()
        back(n3)  # a restart: the row was gone for a while
        gc()
        assert spares_of(cluster, "ovgc") == pool and not marks()
        chassis_del(n3)
        gc()
        age(ORPHAN_GRACE - 60)
        gc()  # not yet
        assert spares_of(cluster, "ovgc") == pool and set(marks()) == n3_spares
        age(ORPHAN_GRACE + 1, marker="n1")
        gc()  # n1's mark, by n1's clock: n1 judges it
        assert spares_of(cluster, "ovgc") == pool and all(v.endswith("@n1") for v in marks().values())
        for hostile in (f"{ORPHAN_GRACE + 1}@n9", f"{int(time.time()) - ORPHAN_TAKEOVER - 1}@n1",
                        f"{int(time.time()) + 86400}@n2", "x@n2", "17"):  # fmt: skip
            # a gone marker, a live one that does not sweep, ahead of n2's clock, not marks:
            # n2 marks them anew
            age(0, value=hostile)
            gc()
            assert spares_of(cluster, "ovgc") == pool and marked_by_n2_now(), (hostile, marks())
        age(ORPHAN_GRACE + 1)
        nb = Ovsdb([lab.nb_unix], "OVN_Northbound")
        assert sweep_spares(nb, {"n1", "n2"}, set(), "n2", int(time.time())) == 0  # not this NB's SB
        chassis_del(n2)
        gc()  # the SB lacks n2's own chassis: not one to judge by
        assert spares_of(cluster, "ovgc") == pool
        back(n2)
        gc()
        assert spares_of(cluster, "ovgc") == {"n1": [], "n2": pool["n2"], "n3": []} and not marks()
        back(n3)
        plugin(cluster, n3, "ADD", "gc-back", names[2], "ovgc")
        plugin(cluster, n3, "DEL", "gc-back", names[2], "ovgc")
        assert len(spares_of(cluster, "ovgc")["n3"]) == SPARES
    finally:
        for node in stopped:
            lab.start_controller(node)
        lab.wait_chassis()
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovgc")
        cluster.ctl(n1, "network", "delete", "up17")


def pod_addresses(cluster: Cluster) -> list[str]:
    """The IPv4 addresses of the ports pods hold (their ``dynamic_addresses``)."""
    rows = json.loads(nbctl(cluster, "--format=json", "--columns=external_ids,dynamic_addresses", "list",
                            "Logical_Switch_Port"))["data"]  # fmt: skip
    return [d.split()[1] for ids, d in rows
            if "podnet-container" in dict(ids[1]) and isinstance(d, str) and len(d.split()) > 1]  # fmt: skip


def test_a_full_subnet_takes_the_spares_addresses_for_the_management_port(cluster: Cluster) -> None:
    """In a /29 (5 free addresses) three pods and n2's two spares hold all five; a hostPort pod
    then claims a spare, and n2's management port, which needs an address of its own, takes
    one the other spares give back: the ADD succeeds and the hostPort answers from n3."""
    from podnet.ovn.ports import SPARES

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up17", UPLINK)
    cluster.ok(n1, "network", "create", "ovsq", "--type=ovn", "network=up17", "ipv4.address=10.202.2.1/29",
               "ipv6.address=none")  # fmt: skip
    names = [f"{cluster.lab.prefix}-q{i}" for i in range(4)]
    made: list[str] = []
    server: Echo | None = None
    try:
        for ns in names:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        for i in range(3):
            plugin(cluster, n2, "ADD", f"q-{i}", names[i], "ovsq")
            made.append(f"q-{i}")
        cluster.lab.nbctl("--wait=sb", "sync")
        held = [d for _, d in spares_of(cluster, "ovsq")["n2"] if len(d.split()) == 2]
        assert len(held) == SPARES, held  # 3 pods and 2 spares: the subnet is full
        ports = {"portMappings": [{"hostPort": 8095, "containerPort": 8080, "protocol": "tcp"}]}
        result = plugin(cluster, n2, "ADD", "q-h", names[3], "ovsq", runtimeConfig=ports)
        made.append("q-h")
        server = Echo(names[3], "POD-QH", 8080)
        seen = tcp(n3.netns, n2.address, 8095)
        assert seen.startswith("POD-QH ::ffff:10.202.2."), (seen, result)
    finally:
        if server is not None:
            server.stop()
        for i, cid in enumerate(made):
            run_plugin(cluster, n2, "DEL", cid, names[min(i, 3)], "ovsq")
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovsq")
        cluster.ctl(n2, "network", "restore")  # n2's management port goes with the network
        cluster.ctl(n1, "network", "delete", "up17")


def test_spares_never_take_an_address_from_pods_adding_at_once(cluster: Cluster) -> None:
    """Review findings on the spare ports, each with the outcome it must have:

    * four first ADDs at once on one node leave it ``SPARES`` spares, not one set each;
    * in a /29 (5 free addresses) one pod and then four ADDs at once on three nodes all get an
      address, round after round (the spares give theirs back, to whichever ADD asks);
    * dual-stack, the IPv4 /29 full of pods and spares: a pod still gets an IPv4 address, never
      an IPv6-only result;
    * the same container ID ADDed on a second node is refused (102) and leaves nothing there,
      and a DEL on that node leaves the first node's port alone."""
    from podnet.ovn.ports import SPARES

    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up18", UPLINK6)
    made: list[tuple[Node, str, str, str]] = []
    spaces: list[str] = []

    def space(tag: str) -> str:
        ns = f"{cluster.lab.prefix}-{tag}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        spaces.append(ns)
        return ns

    def at_once(network: str, calls: list[tuple[Node, str]]) -> dict[str, subprocess.CompletedProcess[str]]:
        out: dict[str, subprocess.CompletedProcess[str]] = {}

        def add(node: Node, cid: str) -> None:
            ns = space(cid)
            out[cid] = run_plugin(cluster, node, "ADD", cid, ns, network)
            made.append((node, cid, ns, network))

        threads = [threading.Thread(target=add, args=c) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def release() -> None:
        for node, cid, ns, network in made:
            run_plugin(cluster, node, "DEL", cid, ns, network)
        made.clear()

    try:
        cluster.ok(n1, "network", "create", "ovsw", "--type=ovn", "network=up18", "ipv4.address=10.202.3.1/24",
                   "ipv6.address=none")  # fmt: skip
        out = at_once("ovsw", [(n2, f"w-{i}") for i in range(4)])
        assert all(o.returncode == 0 for o in out.values()), {c: o.stdout for c, o in out.items()}
        cluster.lab.nbctl("--wait=sb", "sync")
        assert len(spares_of(cluster, "ovsw")["n2"]) == SPARES, spares_of(cluster, "ovsw")
        release()

        cluster.ok(n1, "network", "create", "ovsx", "--type=ovn", "network=up18", "ipv4.address=10.202.4.1/29",
                   "ipv6.address=none")  # fmt: skip
        for r in range(3):
            first = at_once("ovsx", [(n2, f"x{r}-0")])
            assert first[f"x{r}-0"].returncode == 0, first[f"x{r}-0"].stdout
            cluster.lab.nbctl("--wait=sb", "sync")
            out = at_once("ovsx", [(node, f"x{r}-{i}") for i, node in ((1, n1), (2, n2), (3, n3), (4, n1))])
            refused = {c: o.stdout for c, o in out.items() if o.returncode != 0}
            assert not refused, (r, refused, pod_addresses(cluster))
            got = [json.loads(o.stdout)["ips"][0]["address"] for o in [*first.values(), *out.values()]]
            assert len(set(got)) == 5 and all(a.startswith("10.202.4.") for a in got), got
            release()
            cluster.lab.nbctl("--wait=sb", "sync")

        cluster.ok(n1, "network", "create", "ovsy", "--type=ovn", "network=up18", "ipv4.address=10.202.5.1/29",
                   "ipv6.address=fd42:202:5::1/64")  # fmt: skip
        for i, node in enumerate((n2, n2, n2, n3)):
            result = at_once("ovsy", [(node, f"y-{i}")])[f"y-{i}"]
            assert result.returncode == 0, result.stdout
            ips = [ip["address"] for ip in json.loads(result.stdout)["ips"]]
            assert any(a.startswith("10.202.5.") for a in ips) and any(":" in a for a in ips), (i, ips)
        release()

        twice = space("twice-a"), space("twice-b")
        plugin(cluster, n2, "ADD", "same-id", twice[0], "ovsw")
        made.append((n2, "same-id", twice[0], "ovsw"))
        out_ = run_plugin(cluster, n3, "ADD", "same-id", twice[1], "ovsw")
        assert out_.returncode == 1 and json.loads(out_.stdout)["code"] == 102, out_.stdout
        assert "same-id" not in cluster.ok(n3, "pods")
        plugin(cluster, n3, "DEL", "same-id", twice[1], "ovsw")
        held = nbctl(cluster, "--bare", "--columns=name", "find", "Logical_Switch_Port",
                     "external_ids:podnet-container=same-id")  # fmt: skip
        assert held.strip(), "n3's DEL removed n2's port"
        release()
    finally:
        release()
        for ns in spaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for network in ("ovsw", "ovsx", "ovsy"):
            cluster.ctl(n1, "network", "delete", network)
        cluster.ctl(n1, "network", "delete", "up18")


# -- a physical network's parent is each member's own (LXD's clustered network creation) ------


def _mapping(cluster: Cluster, node: Node, network: str) -> str | None:
    """The OVS bridge ``node`` maps OVN physical network ``network`` to (None: unmapped)."""
    ids = cluster.lab.vsctl(node, "get", "Open_vSwitch", ".", "external_ids")
    found = re.search(r'ovn-bridge-mappings="?([^",}]*(?:,[^",}]*)*)"?', ids)
    for item in (found.group(1).split(",") if found else []):
        physnet, _, bridge = item.partition(":")
        if physnet == network:
            return bridge
    return None


def _link(cluster: Cluster, node: Node, ifname: str) -> dict[str, Any]:
    """``ip -j link show dev ifname`` in ``node``'s namespace."""
    out = cluster.lab.run(node.netns, "ip", "-j", "-d", "link", "show", "dev", ifname).stdout
    return dict(json.loads(out)[0])


def _in_ovs(cluster: Cluster, node: Node, ifname: str) -> str:
    """The OVS bridge holding port ``ifname`` on ``node`` ("" none)."""
    out = cluster.lab.run(node.netns, "ovs-vsctl", "--timeout=10", "port-to-br", ifname,
                          env=node.env, check=False)  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else ""


def _dummies(cluster: Cluster, node: Node, *names: str) -> None:
    """Free interfaces ``names`` on ``node``: no address, no route, up (what a NIC is before
    networking configures it, or one it leaves alone): veths with peers ``<name>p``, up too."""
    for name in names:
        cluster.lab.run(node.netns, "ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p")
        cluster.lab.run(node.netns, "ip", "link", "set", f"{name}p", "up")
        cluster.lab.run(node.netns, "ip", "link", "set", name, "up")


def test_physical_network_is_pending_until_created_without_target(cluster: Cluster) -> None:
    """LXD's clustered creation, its messages and statuses: a physical network without a
    member's parent is refused ("Network not pending on any node (use --target <node>
    first)"); ``--target`` takes only a member's own keys, of a member OVN knows, once per
    member; the network is Pending (listed, not attached anywhere, not usable as an uplink,
    its global config not settable) until it is created without ``--target``, which refuses
    ``parent``; then it is Created, with the members that have a parent as its locations."""
    n1, n2, n3 = cluster.lab.nodes
    keys = [f"{k}={v}" for k, v in UPLINK.items() if k != "parent"]

    def refused(node: Node, *args: str) -> str:
        out = cluster.ctl(node, "network", *args)
        assert out.returncode == 1, (args, out.stdout)
        return out.stderr.strip()

    try:
        assert refused(n1, "create", "upp", "--type=physical", *keys) == \
            "Error: Network not pending on any node (use --target <node> first)"
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext0", "ipv4.gateway=203.0.113.254/24",
                       "--target", "n1") == 'Error: Config key "ipv4.gateway" may not be used as member-specific key'
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext0", "--target", "nosuch") == \
            'Error: Member "nosuch" not found'
        assert refused(n1, "create", "upo", "--type=ovn", "network=up0", "--target", "n1") == \
            'Error: Network type "ovn" does not support member specific config'
        assert refused(n1, "create", "upp", "--type=physical", "parent=nosuch0", "--target", "n1") == \
            'Error: Parent interface "nosuch0" not found on member "n1"'
        assert "upp" not in cluster.networks(n2)
        out = cluster.ok(n1, "network", "create", "upp", "--type=physical", "parent=ext0", "--target", "n1")
        assert out.strip() == "Network upp pending on member n1"
        assert refused(n2, "create", "upp", "--type=physical", "parent=ext0", "--target", "n1") == \
            'Error: The network is already defined on member "n1"'
        cluster.ok(n2, "network", "create", "upp", "--type=physical", "parent=eth7", "--target", "n3")
        listed = cluster.networks(n2)["upp"]
        assert (listed["status"], listed["locations"], listed["config"]) == ("Pending", ["n1", "n3"], {}), listed
        assert "upp,physical,YES,,,,0,PENDING" in cluster.ok(n3, "network", "list", "-f", "csv")
        assert _mapping(cluster, n1, "upp") is None and _in_ovs(cluster, n1, "ext0") == ""
        assert refused(n1, "set", "upp", "user.a=b") == \
            "Error: Cannot update network global config when not in created state"
        assert "not found" in refused(n1, "create", "ovp", "--type=ovn", "network=upp", "ipv6.address=none")
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext0", *keys) == \
            'Error: Config key "parent" is cluster member specific'
        assert refused(n1, "create", "upp", "--type=ovn", "network=up0") == \
            'Error: Requested network type "ovn" does not match type in existing database record "physical"'
        assert "upp" not in cluster.ok(n2, "network", "restore")  # pending: nothing anywhere
        assert cluster.ok(n1, "network", "create", "upp", "--type=physical", *keys).strip() == "Network upp created"
        shown = yaml_load(cluster.ok(n2, "network", "show", "upp"))
        assert shown["status"] == "Created" and shown["locations"] == ["n1", "n3"], shown
        assert "parent" not in shown["config"] and shown["config"]["ipv4.gateway"] == "203.0.113.254/24", shown
        assert yaml_load(cluster.ok(n2, "network", "show", "upp", "--target", "n3"))["config"]["parent"] == "eth7"
        assert cluster.ok(n3, "network", "get", "upp", "parent", "--target", "n1").strip() == "ext0"
        assert _mapping(cluster, n1, "upp") is not None and _in_ovs(cluster, n1, "ext0") == _mapping(cluster, n1, "upp")
        assert refused(n1, "create", "upp", "--type=physical", "parent=ext1", "--target", "n2") == \
            "Error: Network is not in pending state"
        assert refused(n2, "set", "upp", "parent=ext1") == 'Error: Config key "parent" is cluster member specific'
        assert refused(n2, "set", "upp", "user.a=b", "--target", "n2") == \
            'Error: Config key "user.a" may not be used as member-specific key'
    finally:
        cluster.ctl(n1, "network", "delete", "upp")
    assert _mapping(cluster, n1, "upp") is None and _in_ovs(cluster, n1, "ext0") == ""


def test_each_node_attaches_only_its_own_parent(cluster: Cluster) -> None:
    """n1's parent is ext0, n2's is upl2; n2 and n3 also have a free interface named ext0 (no
    address, no route, up: a NIC at boot), and n3 has no parent recorded. Restore on n2 puts
    only upl2 into the uplink's bridge, and on n3 nothing (no bridge, no mapping): no ext0 but
    n1's is touched. ``network show --target`` shows each member's parent and status.
    ``network set … parent=X --target`` changes one member's parent: from the node itself at
    once, from another node at that node's next restore (the old parent leaves the bridge);
    ``unset`` leaves the member without a parent and its node detaches. A parent recorded for
    a node that lacks it is named by that node's restore (exit 1) and by ``show --target``
    (Unavailable), and is refused when the node sets it for itself. (A parent recorded from
    another node is attached by that node's ``restore --attach-new``.)"""
    n1, n2, n3 = cluster.lab.nodes
    _dummies(cluster, n2, "ext0", "upl2", "upl3")
    _dummies(cluster, n3, "ext0", "upl2")
    try:
        cluster.ok(n2, "network", "create", "upq", "--type=physical", "parent=upl2", "--target", "n2")
        cluster.uplink(n1, "upq", UPLINK)
        bridge1 = _mapping(cluster, n1, "upq")
        assert bridge1 and _in_ovs(cluster, n1, "ext0") == bridge1
        assert _mapping(cluster, n2, "upq") is None  # n2 attaches at its restore
        assert yaml_load(cluster.ok(n2, "network", "show", "upq", "--target", "n2"))["status"] == "Unavailable"
        done = cluster.ok(n2, "network", "restore", "--attach-new")
        bridge2 = _mapping(cluster, n2, "upq")
        assert bridge2 and f"uplink upq: upl2 in OVS bridge {bridge2}, mapped for OVN" in done, done
        assert cluster.lab.vsctl(n2, "list-ports", bridge2).split() == ["upl2"]
        cluster.ok(n3, "network", "restore")
        assert _mapping(cluster, n3, "upq") is None and "pnu" not in cluster.lab.vsctl(n3, "list-br")
        for node in (n2, n3):  # a free NIC that is another node's parent's namesake: untouched
            link = _link(cluster, node, "ext0")
            assert _in_ovs(cluster, node, "ext0") == "" and "master" not in link, (node.name, link)
        assert _in_ovs(cluster, n3, "upl2") == ""
        seen = {m: yaml_load(cluster.ok(n2, "network", "show", "upq", "--target", m)) for m in ("n1", "n2", "n3")}
        assert [seen[m]["config"].get("parent") for m in ("n1", "n2", "n3")] == ["ext0", "upl2", None]
        assert [seen[m]["status"] for m in ("n1", "n2", "n3")] == ["Created", "Created", "Unavailable"], seen
        assert yaml_load(cluster.ok(n2, "network", "show", "upq"))["locations"] == ["n1", "n2"]
        # n2's parent changed from n1: n2 applies it at its next restore
        shown = cluster.ctl(n1, "network", "show", "upq", "--target", "n2")
        cluster.ok(n1, "network", "set", "upq", "parent=upl3", "--target", "n2")
        assert yaml_load(cluster.ok(n2, "network", "show", "upq", "--target", "n2"))["status"] == "Unavailable"
        assert shown.returncode == 0
        cluster.ok(n2, "network", "restore", "--attach-new")
        assert cluster.lab.vsctl(n2, "list-ports", bridge2).split() == ["upl3"]
        assert _in_ovs(cluster, n2, "upl2") == ""
        # from n2 itself: at once, and unset detaches
        cluster.ok(n2, "network", "set", "upq", "parent=upl2", "--target", "n2")
        assert cluster.lab.vsctl(n2, "list-ports", bridge2).split() == ["upl2"]
        cluster.ok(n2, "network", "unset", "upq", "parent", "--target", "n2")
        assert _mapping(cluster, n2, "upq") is None and _in_ovs(cluster, n2, "upl2") == ""
        assert yaml_load(cluster.ok(n1, "network", "show", "upq"))["locations"] == ["n1"]
        # a parent the node lacks: refused by the node itself, named by its restore and show
        bad = cluster.ctl(n3, "network", "set", "upq", "parent=nosuch3", "--target", "n3")
        assert bad.returncode == 1 and 'Parent interface "nosuch3" not found on member "n3"' in bad.stderr, bad.stderr
        cluster.ok(n1, "network", "set", "upq", "parent=nosuch3", "--target", "n3")
        out = cluster.ctl(n3, "network", "restore")
        assert out.returncode == 1, out.stdout
        assert 'network upq: Parent interface "nosuch3" recorded for member "n3" does not exist on this node' \
            in out.stderr, out.stderr
        assert yaml_load(cluster.ok(n3, "network", "show", "upq", "--target", "n3"))["status"] == "Unavailable"
        assert _mapping(cluster, n3, "upq") is None
        cluster.ok(n1, "network", "unset", "upq", "parent", "--target", "n3")
        cluster.ok(n3, "network", "restore")
        assert _in_ovs(cluster, n1, "ext0") == bridge1  # n1's side never moved
    finally:
        cluster.ctl(n1, "network", "delete", "upq")
        for node in (n2, n3):
            cluster.ctl(node, "network", "restore")
        for node, names in ((n2, ("ext0", "upl2", "upl3")), (n3, ("ext0", "upl2"))):
            for name in names:
                cluster.lab.run(node.netns, "ip", "link", "del", name, check=False)
    assert _mapping(cluster, n2, "upq") is None and _mapping(cluster, n1, "upq") is None


def test_restore_does_not_attach_a_parent_that_is_not_up(cluster: Cluster) -> None:
    """``network restore --attach-new`` does not attach a parent that is administratively down,
    nor one that is up without a carrier (operational state LOWERLAYERDOWN): it exits 1 naming
    the parent and its state, and attaches nothing; run again once the parent is up, it
    attaches it. A parent already in the uplink's bridge stays there whatever its state, with
    a plain restore too."""
    n1, n2, _ = cluster.lab.nodes
    lab = cluster.lab
    lab.run(n2.netns, "ip", "link", "add", "upd0", "type", "veth", "peer", "name", "upd1")
    try:
        cluster.ok(n1, "network", "create", "upr", "--type=physical", "parent=upd0", "--target", "n2")
        cluster.ok(n1, "network", "create", "upr", "--type=physical",
                   *[f"{k}={v}" for k, v in UPLINK.items() if k != "parent"])  # fmt: skip
        out = cluster.ctl(n2, "network", "restore", "--attach-new")
        assert out.returncode == 1 and 'Parent interface "upd0" is not up yet (administratively down): ' \
            'not attached; run "podnetctl network restore --attach-new" again once it is up' in out.stderr, out.stderr
        assert _in_ovs(cluster, n2, "upd0") == "" and _mapping(cluster, n2, "upr") is None
        assert "UP" not in _link(cluster, n2, "upd0")["flags"]  # restore did not bring it up either
        lab.run(n2.netns, "ip", "link", "set", "upd0", "up")  # its peer is down: no carrier
        out = cluster.ctl(n2, "network", "restore", "--attach-new")
        assert out.returncode == 1 and '"upd0" is not up yet (operational state LOWERLAYERDOWN)' in out.stderr, out.stderr
        assert _in_ovs(cluster, n2, "upd0") == ""
        lab.run(n2.netns, "ip", "link", "set", "upd1", "up")
        done = cluster.ok(n2, "network", "restore", "--attach-new")
        bridge = _mapping(cluster, n2, "upr")
        assert bridge and _in_ovs(cluster, n2, "upd0") == bridge, done
        lab.run(n2.netns, "ip", "link", "set", "upd1", "down")  # attached: kept, not re-judged
        cluster.ok(n2, "network", "restore")
        assert _in_ovs(cluster, n2, "upd0") == bridge
    finally:
        cluster.ctl(n1, "network", "delete", "upr")
        cluster.ctl(n2, "network", "restore")
        lab.run(n2.netns, "ip", "link", "del", "upd0", check=False)
    assert _mapping(cluster, n2, "upr") is None


def test_restore_never_attaches_a_parent_not_in_its_bridge(cluster: Cluster) -> None:
    """A boot: n2's NIC is up, its DHCP has not answered yet (no address, no route: it looks
    free). Its parent was recorded from n1 (``create --target n2``). ``network restore`` (the
    boot unit) adds nothing to OVS: exit 1 naming the parent and how to attach it, the NIC no
    port, no mapping, once the NIC then gets its address too; everything else is restored.
    ``restore --attach-new`` on n2 attaches a free one; a plain restore then keeps it. A new
    parent set from n1 is likewise not attached by n2's restore (the old one is kept); set on
    n2 itself it is attached at once."""
    n1, n2, _ = cluster.lab.nodes
    lab = cluster.lab
    nic, nic2 = "nbt0", "nbt2"
    for name in (nic, nic2):
        lab.run(n2.netns, "ip", "link", "add", name, "type", "veth", "peer", "name", name + "p")
        lab.run(n2.netns, "ip", "link", "set", name + "p", "up")
        lab.run(n2.netns, "ip", "link", "set", name, "up")
    try:
        cluster.ok(n1, "network", "create", "upb", "--type=physical", f"parent={nic}", "--target", "n2")
        cluster.ok(n1, "network", "create", "upb", "--type=physical",
                   *[f"{k}={v}" for k, v in UPLINK.items() if k != "parent"])  # fmt: skip
        out = cluster.ctl(n2, "network", "restore")
        assert out.returncode == 1, out.stdout
        assert f'network upb: Parent interface "{nic}" recorded for member "n2" is not attached: ' \
            f"restore keeps only a parent already in OVS bridge " in out.stderr, out.stderr
        assert 'attach it on this node with "podnetctl network restore --attach-new" (or "podnetctl ' \
            f'network set upb parent={nic} --target n2")' in out.stderr, out.stderr
        lab.run(n2.netns, "ip", "addr", "add", "192.0.2.50/24", "dev", nic)  # DHCP answers now
        assert _in_ovs(cluster, n2, nic) == "" and _mapping(cluster, n2, "upb") is None
        assert "master" not in _link(cluster, n2, nic)
        assert yaml_load(cluster.ok(n2, "network", "show", "upb", "--target", "n2"))["status"] == "Unavailable"
        # the operator on n2: a parent with an address is refused, a free one attached
        out = cluster.ctl(n2, "network", "restore", "--attach-new")
        assert out.returncode == 1 and f'Parent interface "{nic}" is used by routes (192.0.2.0/24)' in out.stderr, \
            out.stderr
        assert _in_ovs(cluster, n2, nic) == ""
        lab.run(n2.netns, "ip", "addr", "flush", "dev", nic)
        done = cluster.ok(n2, "network", "restore", "--attach-new")
        bridge = _mapping(cluster, n2, "upb")
        assert bridge and f"uplink upb: {nic} in OVS bridge {bridge}, mapped for OVN" in done, done
        assert f"uplink upb: {nic} in OVS bridge {bridge}" in cluster.ok(n2, "network", "restore")  # kept
        assert lab.vsctl(n2, "list-ports", bridge).split() == [nic]
        # a new parent set from n1: n2's restore does not take it, keeps the old one
        cluster.ok(n1, "network", "set", "upb", f"parent={nic2}", "--target", "n2")
        out = cluster.ctl(n2, "network", "restore")
        assert out.returncode == 1 and f'Parent interface "{nic2}" recorded for member "n2" is not attached' \
            in out.stderr, out.stderr
        assert lab.vsctl(n2, "list-ports", bridge).split() == [nic] and _in_ovs(cluster, n2, nic2) == ""
        # set on n2 itself: checked and attached at once
        cluster.ok(n2, "network", "set", "upb", f"parent={nic2}", "--target", "n2")
        assert lab.vsctl(n2, "list-ports", bridge).split() == [nic2]
        cluster.ok(n2, "network", "restore")
    finally:
        cluster.ctl(n1, "network", "delete", "upb")
        cluster.ctl(n2, "network", "restore")
        for name in (nic, nic2):
            lab.run(n2.netns, "ip", "link", "del", name, check=False)
    assert _mapping(cluster, n2, "upb") is None


def test_deleting_a_cluster_network_takes_no_target(cluster: Cluster) -> None:
    """A cluster network is deleted on every member (LXD's DELETE has no member-specific
    form): ``network delete NAME --target`` (the API's ``DELETE …?target=``) is 404 for a name
    that is no member and 400 for a member, and deletes nothing; without a target it goes."""
    n1, n2, _ = cluster.lab.nodes
    try:
        cluster.ok(n1, "network", "create", "upz", "--type=physical", "parent=eth7", "--target", "n3")
        for target, message in (("nosuchmember", 'Error: Member "nosuchmember" not found'),
                                ("n2", "Error: Deleting a network is not member specific: delete it "
                                       "without a target (it is deleted on every member)")):  # fmt: skip
            out = cluster.ctl(n2, "network", "delete", "upz", "--target", target)
            assert (out.returncode, out.stderr.strip()) == (1, message), out
            assert "upz" in cluster.networks(n1)
        assert cluster.ok(n2, "network", "delete", "upz").strip() == "Network upz deleted"
        assert "upz" not in cluster.networks(n1)
    finally:
        cluster.ctl(n1, "network", "delete", "upz")


def test_a_parent_recorded_for_every_node_takes_no_nic(cluster: Cluster) -> None:
    """A record with one ``parent`` for the whole cluster (as an earlier podnet wrote it, or
    any NB writer): restore on a node with a free NIC of that name (no address, no route, up:
    every NIC at boot) leaves it alone and says so, on every node; the first ``network set
    parent=… --target`` replaces it with that member's own, which only that node attaches."""
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Ovsdb, omap

    n1, n2, _ = cluster.lab.nodes
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    record = nbmod.Record("physical", "", {**UPLINK, "parent": "ext0"})
    key = f"{nbmod.PREFIX}upl"
    _dummies(cluster, n2, "ext0")
    nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                  "mutations": [["external_ids", "insert", omap({key: record.dumps()})]]}])  # fmt: skip
    try:
        for node in (n2, n1):
            done = cluster.ok(node, "network", "restore")
            assert f'uplink upl: "parent" is recorded for every node, not per member: nothing changed here; ' \
                f"record this node's with: network set upl parent=<interface> --target {node.name}" in done, done
            assert _in_ovs(cluster, node, "ext0") == "" and _mapping(cluster, node, "upl") is None, node.name
        assert "master" not in _link(cluster, n2, "ext0")
        cluster.ok(n1, "network", "set", "upl", "parent=ext0", "--target", "n1")
        assert _in_ovs(cluster, n1, "ext0") == _mapping(cluster, n1, "upl") != None  # noqa: E711
        shown = yaml_load(cluster.ok(n2, "network", "show", "upl"))
        assert shown["locations"] == ["n1"] and "parent" not in shown["config"], shown
        assert "uplink upl:" not in cluster.ok(n2, "network", "restore")
        assert _in_ovs(cluster, n2, "ext0") == "" and _mapping(cluster, n2, "upl") is None
    finally:
        cluster.ctl(n1, "network", "delete", "upl")
        nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                      "mutations": [["external_ids", "delete", ["set", [key]]]]}])  # fmt: skip
        for node in (n1, n2):
            cluster.ctl(node, "network", "restore")
        cluster.lab.run(n2.netns, "ip", "link", "del", "ext0", check=False)
