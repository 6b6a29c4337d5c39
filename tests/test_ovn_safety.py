"""An OVN network against the node it reaches, and its pods against each other.

- A subnet follows a bridge's rules: private ranges only, never over a route of the creating
  node (its underlay, where the NB lives); and every node checks again before it puts a pod or
  its management port on itself, naming the route, so a hostPort never makes the node's route
  go into the network.
- What the NB gives a port (MAC, addresses) is parsed before it reaches a tool, one address per
  family, inside the subnet.
- Pod ports carry ``port_security``: a pod that sends from another address or MAC is dropped
  by OVN (real packets, counted by nft in the receiving pod).

A real OVN deployment in namespaces (:class:`podnet.cli.demo.ovnlab.OvnLab`): two nodes, the
central services on n1, each node's OVS and OVN daemons stopped by the fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgate import need
from netns import Lab
from podnet import errors
from podnet.drivers.ovn_hostports import own, security

sys.path.insert(0, str(Path(__file__).resolve().parent))
from podnet.cli.demo.ovnlab import OvnLab, missing_tools  # noqa: E402
from test_ovn_networks import UPLINK, Cluster, plugin, run_plugin  # noqa: E402

SUBNET = 247  # the lab's underlay: 192.168.247.0/24, the NB at 192.168.247.1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need("root")
    if missing_tools():
        pytest.fail(f"OVN tools missing: {missing_tools()} (.ci/run installs them)")
    lab = OvnLab(f"pns{uuid.uuid4().hex[:4]}", ("n1", "n2"), subnet=SUBNET)
    try:
        lab.start()
        lab.outside(lab.nodes[0])  # the uplink's parent ext0 on n1
        yield Cluster(lab, tmp_path_factory.mktemp("ovnsafe"))
    finally:
        lab.stop()  # every daemon stopped, every namespace deleted


def _links(netns: str) -> list[str]:
    out = subprocess.run(["ip", "-n", netns, "-j", "link"], capture_output=True, text=True).stdout
    return [link["ifname"] for link in json.loads(out or "[]")]


def _port_of(cluster: Cluster, cid: str) -> tuple[str, str, str]:
    """(name, dynamic_addresses, port_security) of container ``cid``'s logical switch port."""
    out = cluster.lab.nbctl("--format=json", "--columns=name,dynamic_addresses,port_security",
                            "find", "Logical_Switch_Port", f"external_ids:podnet-container={cid}")
    rows = json.loads(out)["data"]
    assert len(rows) == 1, rows
    name, dynamic, secure = rows[0]
    text = lambda v: " ".join(v[1]) if isinstance(v, list) and v[0] == "set" else str(v)  # noqa: E731
    return name, text(dynamic), text(secure)


@pytest.mark.root
def test_a_subnet_over_the_nodes_routes_is_refused(cluster: Cluster) -> None:
    """The review's case: an OVN subnet inside the underlay (192.168.247.126/25; the NB is at
    192.168.247.1) is refused at create naming the node's route, as is a public one. A network
    made while every node was clear (10.77.0.0/24) meets a node that routes that subnet
    elsewhere (n2: via the underlay): a hostPort ADD there answers 7 naming the route and
    leaves nothing (no management port, veth or NB port), the route still leads to the
    underlay, ``network restore`` on n2 names it; n1 still takes pods."""
    n1, n2 = cluster.lab.nodes
    cluster.uplink(n1, "ups", UPLINK)
    ns = f"{cluster.lab.prefix}-hj"
    ports = {"portMappings": [{"hostPort": 8086, "containerPort": 8080, "protocol": "tcp"}]}
    try:
        out = cluster.ctl(n1, "network", "create", "hj", "--type=ovn", "network=ups",
                          f"ipv4.address=192.168.{SUBNET}.126/25", "ipv6.address=none")
        assert out.returncode == 1, out.stdout
        assert f"overlaps the route to 192.168.{SUBNET}.0/24 (dev br-phy)" in out.stderr, out.stderr
        out = cluster.ctl(n2, "network", "create", "hj", "--type=ovn", "network=ups",
                          "ipv4.address=8.8.8.1/24", "ipv6.address=none")
        assert out.returncode == 1 and "is a public range" in out.stderr, out.stderr
        assert "hj" not in cluster.networks(n1)
        assert "pn-hj" not in cluster.lab.nbctl("show")
        cluster.ok(n1, "network", "create", "hj", "--type=ovn", "network=ups",
                   "ipv4.address=10.77.0.1/24", "ipv6.address=none")
        # n2 routes the subnet elsewhere (a site behind its underlay)
        subprocess.run(["ip", "-n", n2.netns, "route", "add", "10.77.0.0/24", "via",
                        f"192.168.{SUBNET}.1", "dev", "br-phy"], check=True)
        subprocess.run(["ip", "netns", "add", ns], check=True)
        out = run_plugin(cluster, n2, "ADD", "hj-a", ns, "hj", runtimeConfig=ports)
        assert out.returncode == 1, out.stdout
        answer = json.loads(out.stdout)
        assert answer["code"] == 7, answer
        assert "10.77.0.0/24 overlaps this node's route to 10.77.0.0/24 (dev br-phy)" in answer["msg"]
        links = _links(n2.netns)
        assert not [n for n in links if n.startswith("pn") and not n.startswith("pnu")], links
        assert "eth0" not in _links(ns)
        assert cluster.lab.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                                 "external_ids:podnet-container=hj-a") == ""
        assert cluster.lab.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                                 "external_ids:podnet-mgmt=n2") == ""
        route = subprocess.run(["ip", "-n", n2.netns, "-j", "route", "get", "10.77.0.5"],
                               capture_output=True, text=True, check=True).stdout
        assert json.loads(route)[0]["dev"] == "br-phy", route
        restore = cluster.ctl(n2, "network", "restore")
        assert restore.returncode == 1 and "overlaps this node's route to 10.77.0.0/24" in \
            restore.stderr, restore.stderr
        result = plugin(cluster, n1, "ADD", "hj-b", ns, "hj")  # n1 has no such route
        assert result["ips"][0]["address"].startswith("10.77.0."), result
        plugin(cluster, n1, "DEL", "hj-b", ns, "hj")
    finally:
        run_plugin(cluster, n2, "DEL", "hj-a", ns, "hj")
        run_plugin(cluster, n1, "DEL", "hj-b", ns, "hj")
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "-n", n2.netns, "route", "del", "10.77.0.0/24"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "hj")
        cluster.ctl(n1, "network", "delete", "ups")


def _nft(ns: str, script: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script, text=True, check=True)


def _counted(ns: str) -> dict[str, int]:
    out = subprocess.run(["ip", "netns", "exec", ns, "nft", "-j", "list", "counters"],
                         capture_output=True, text=True, check=True).stdout
    return {c["counter"]["name"]: c["counter"]["packets"] for c in json.loads(out)["nftables"]
            if "counter" in c}


def _send(ns: str, source: str, dest: str, count: int = 5) -> None:
    """``count`` UDP datagrams from ``source`` to ``dest``:9999 (no answer is waited for)."""
    code = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            f"s.bind(({source!r}, 0)); [s.sendto(b'x', ({dest!r}, 9999)) for _ in range({count})]")
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], check=True, timeout=30)


@pytest.mark.root
def test_a_pod_cannot_spoof_its_neighbours(cluster: Cluster) -> None:
    """Two pods on n1 (a port made for the first, a claimed spare for the second): each port's
    ``port_security`` is its own MAC and address. Datagrams from pod A to pod B arrive while A
    sends as itself; from another address of the subnet (a neighbour's, say) or from another
    MAC, OVN drops them: B's nft counters see none. Back as itself, A gets through again."""
    n1, _ = cluster.lab.nodes
    cluster.uplink(n1, "upp", UPLINK)
    cluster.ok(n1, "network", "create", "psec", "--type=ovn", "network=upp",
               "ipv4.address=10.78.0.1/24", "ipv6.address=none")
    ns = {k: f"{cluster.lab.prefix}-ps{k}" for k in "ab"}
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        result = {k: plugin(cluster, n1, "ADD", f"ps-{k}", name, "psec") for k, name in ns.items()}
        addr = {k: r["ips"][0]["address"].split("/")[0] for k, r in result.items()}
        mac = {k: r["interfaces"][1]["mac"] for k, r in result.items()}
        for k in ns:
            _, dynamic, secure = _port_of(cluster, f"ps-{k}")
            assert secure == f"{mac[k]} {addr[k]}" == dynamic, (k, dynamic, secure)
        spoof = "10.78.0.250"  # free in the subnet: a neighbour's address to be
        _nft(ns["b"], f"""table inet psec {{
            counter real {{}}
            counter spoofed_ip {{}}
            counter spoofed_mac {{}}
            chain input {{
                type filter hook input priority 0;
                udp dport 9999 ether saddr {mac["a"]} ip saddr {addr["a"]} counter name real
                udp dport 9999 ip saddr {spoof} counter name spoofed_ip
                udp dport 9999 ether saddr != {mac["a"]} ip saddr {addr["a"]} counter name spoofed_mac
            }}
        }}""")
        # A knows B's MAC: what it sends is the datagram itself, never held up by ARP
        subprocess.run(["ip", "-n", ns["a"], "neigh", "replace", addr["b"], "lladdr", mac["b"],
                        "dev", "eth0", "nud", "permanent"], check=True)
        _send(ns["a"], addr["a"], addr["b"])
        assert _counted(ns["b"])["real"] == 5, _counted(ns["b"])
        subprocess.run(["ip", "-n", ns["a"], "addr", "add", f"{spoof}/32", "dev", "eth0"], check=True)
        _send(ns["a"], spoof, addr["b"])
        subprocess.run(["ip", "-n", ns["a"], "link", "set", "eth0", "address", "02:00:00:00:be:ef"],
                       check=True)
        _send(ns["a"], addr["a"], addr["b"])
        subprocess.run(["ip", "-n", ns["a"], "link", "set", "eth0", "address", mac["a"]], check=True)
        _send(ns["a"], addr["a"], addr["b"])
        seen = _counted(ns["b"])
        assert seen == {"real": 10, "spoofed_ip": 0, "spoofed_mac": 0}, seen
    finally:
        for k, name in ns.items():
            run_plugin(cluster, n1, "DEL", f"ps-{k}", name, "psec")
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        cluster.ctl(n1, "network", "delete", "psec")
        cluster.ctl(n1, "network", "delete", "upp")


CONFIG = {"ipv4.address": "10.79.0.1/24", "ipv6.address": "fd42:1:2:3::1/64"}


@pytest.mark.parametrize(("found", "reason"), [
    (["00:16:3e:00:00:0a", "10.79.0.5", "fd42:1:2:3::5"], None),
    (["00:16:3E:00:00:0A", "10.79.0.5"], None),
    (["01:00:5e:00:00:01", "10.79.0.5"], "group (multicast or broadcast) MAC"),
    (["00:16:3e:00:00:0a;x", "10.79.0.5"], "not a MAC address"),
    (["dev", "lo"], "not a MAC address"),
    (["00:16:3e:00:00:0a", "10.79.0.5", "192.168.247.1"], "192.168.247.1"),
    (["00:16:3e:00:00:0a", "10.79.0.5", "10.79.0.6"], "10.79.0.6"),
    (["00:16:3e:00:00:0a", "10.79.0.1"], "10.79.0.1"),
    (["00:16:3e:00:00:0a", "10.79.0.255"], "10.79.0.255"),
    (["00:16:3e:00:00:0a", "10.79.0.5/24"], "not an IP address"),
])  # fmt: skip
def test_what_the_nb_gives_a_port_is_parsed(found: list[str], reason: str | None) -> None:
    """A port's MAC and addresses from the NB reach ``ip`` and ``port_security`` only as
    parsed values: a unicast MAC (lower case), one address per family inside the subnet and
    not the router's, network or broadcast address; anything else is 7 naming it."""
    if reason is None:
        mac, alloc, prefixes = own(dict(CONFIG), found, "port p")
        assert mac == found[0].lower() and prefixes == {f: (24 if f == 4 else 64) for f in alloc}
        assert security(mac, alloc) == " ".join([mac, *found[1:]])
        return
    with pytest.raises(errors.CNIError) as err:
        own(dict(CONFIG), found, "port p")
    assert err.value.code == 7 and reason in err.value.msg and "port p" in err.value.msg


@pytest.mark.root
def test_routes_over_names_what_an_address_would_take(lab: Lab) -> None:
    """:func:`podnet.link.local.routes_over` in a node namespace: a route inside the subnet via
    the network's own router address, and one on the management link, are the network's; a
    wider route via that same address, a connected subnet and a host route are the node's."""
    sh = lambda *a: subprocess.run(["ip", "-n", lab.node, *a], check=True)  # noqa: E731
    sh("link", "add", "up9", "type", "veth", "peer", "name", "up9p")
    sh("link", "add", "pnmtest", "type", "veth", "peer", "name", "pnmtestp")
    for dev in ("up9", "up9p", "pnmtest", "pnmtestp"):
        sh("link", "set", dev, "up")
    sh("addr", "add", "192.168.246.2/24", "dev", "up9")
    sh("route", "add", "10.90.1.0/24", "via", "192.168.246.9")  # into the subnet, via its router
    sh("route", "add", "10.0.0.0/8", "via", "192.168.246.9")  # wider: the node's
    sh("route", "add", "10.90.2.0/24", "dev", "pnmtest")  # on the management link
    sh("route", "add", "10.90.3.7/32", "via", "192.168.246.1")  # a host of the node's
    src = str(Path(__file__).resolve().parents[1] / "src")
    code = (f"import json, sys; sys.path.insert(0, {src!r}); from podnet import checked; "
            "from podnet.link.local import routes_over; print(json.dumps(routes_over("
            "[checked.network(n) for n in sys.argv[1:]], skip_dev='pnmtest', "
            "skip_via=['192.168.246.9'])))")
    run = lambda *nets: json.loads(lab.exec(lab.node, sys.executable, "-c", code, *nets).stdout)  # noqa: E731
    assert sorted(map(tuple, run("10.90.0.0/16"))) == [("10.0.0.0/8", "up9"),
                                                     ("10.90.3.7/32", "up9")]
    assert [tuple(r) for r in run("192.168.246.128/25")] == [("192.168.246.0/24", "up9")]
    assert run("172.31.0.0/16") == []


@pytest.mark.root
def test_a_spare_of_another_shape_is_never_claimed(cluster: Cluster) -> None:
    """A port another NB writer tagged as n1's spare, named otherwise than podnet names spares
    (its name would become an OVS ``iface-id`` on n1), is never claimed: with n1's own spares
    removed it is the only one, and the ADD makes a port of its own instead."""
    n1, _ = cluster.lab.nodes
    cluster.uplink(n1, "upq", UPLINK)
    cluster.ok(n1, "network", "create", "pspq", "--type=ovn", "network=upq",
               "ipv4.address=10.81.0.1/24", "ipv6.address=none")
    ns = {k: f"{cluster.lab.prefix}-sq{k}" for k in "ab"}
    nbctl = cluster.lab.nbctl
    evil = "pn-pspq-pod-EVIL"
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        plugin(cluster, n1, "ADD", "sq-a", ns["a"], "pspq")  # makes n1's spares
        for port in nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                          "external_ids:podnet-spare=true").split():
            nbctl("lsp-del", port)
        nbctl("lsp-add", "pn-pspq-ls-int", evil, "--", "lsp-set-addresses", evil,
              "00:16:3e:00:00:42 dynamic", "--", "set", "Logical_Switch_Port", evil,
              "options:requested-chassis=n1", "external_ids:podnet-network=pspq",
              "external_ids:podnet-chassis=n1", "external_ids:podnet-spare=true")
        cluster.lab.northd_ready()  # the port has its addresses: it would fit
        assert "10.81.0." in nbctl("get", "Logical_Switch_Port", evil, "dynamic_addresses")
        plugin(cluster, n1, "ADD", "sq-b", ns["b"], "pspq")
        assert nbctl("get", "Logical_Switch_Port", evil, "external_ids:podnet-spare") == '"true"'
        name, _, secure = _port_of(cluster, "sq-b")
        assert name != evil and secure, (name, secure)
    finally:
        for k, name in ns.items():
            run_plugin(cluster, n1, "DEL", f"sq-{k}", name, "pspq")
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        cluster.ctl(n1, "network", "delete", "pspq")
        cluster.ctl(n1, "network", "delete", "upq")
