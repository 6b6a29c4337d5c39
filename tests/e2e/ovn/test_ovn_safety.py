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
from typing import Any

import pytest

import ovn_cluster as oc
import paths
from envgate import need
from netns import Lab
from ovn_cluster import Cluster
from podnet import checked, errors
from podnet.cli.demo.ovnlab import Node, OvnLab, missing_tools
from podnet.drivers.ovn.hostports import own, security

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


def _refused(cluster: Cluster, node: Node, cid: str, ns: str, network: str, *,
             runtimeConfig: dict[str, Any]) -> str:
    """ADD of container ``cid`` in new namespace ``ns`` to ``network`` on ``node``, which must
    fail with code 7; its message."""
    subprocess.run(["ip", "netns", "add", ns], check=True)
    out = oc.run_plugin(cluster, node, "ADD", cid, ns, network, runtimeConfig=runtimeConfig)
    assert out.returncode == 1, out.stdout
    answer = json.loads(out.stdout)
    assert answer["code"] == 7, answer
    return str(answer["msg"])


def _ipv4_network(cluster: Cluster, uplink: str, network: str, address: str,
                  tag: str) -> dict[str, str]:  # fmt: skip
    """Uplink ``uplink`` and an IPv4-only OVN network ``network`` (``ipv4.address=address``)
    made from n1; the namespace names of its pods ``a`` and ``b`` (``<prefix>-<tag>a``, …)."""
    n1 = cluster.lab.nodes[0]
    cluster.uplink(n1, uplink, oc.UPLINK)
    cluster.ok(n1, "network", "create", network, "--type=ovn", f"network={uplink}",
               f"ipv4.address={address}", "ipv6.address=none")  # fmt: skip
    return {k: f"{cluster.lab.prefix}-{tag}{k}" for k in "ab"}


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
    cluster.uplink(n1, "ups", oc.UPLINK)
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
        msg = _refused(cluster, n2, "hj-a", ns, "hj", runtimeConfig=ports)
        assert "10.77.0.0/24 overlaps this node's route to 10.77.0.0/24 (dev br-phy)" in msg
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
        result = oc.plugin(cluster, n1, "ADD", "hj-b", ns, "hj")  # n1 has no such route
        assert result["ips"][0]["address"].startswith("10.77.0."), result
        oc.plugin(cluster, n1, "DEL", "hj-b", ns, "hj")
    finally:
        oc.run_plugin(cluster, n2, "DEL", "hj-a", ns, "hj")
        oc.run_plugin(cluster, n1, "DEL", "hj-b", ns, "hj")
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
    ns = _ipv4_network(cluster, "upp", "psec", "10.78.0.1/24", "ps")
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        result = {k: oc.plugin(cluster, n1, "ADD", f"ps-{k}", name, "psec") for k, name in ns.items()}
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
        oc.release(cluster, [], {k: (n1, name) for k, name in ns.items()}, "ps", "psec")
        oc.delete_networks(cluster, "psec", "upp")


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
    """:func:`podnet.link.local.routes_over` in a node namespace: only the routes on the
    network's own management link when it carries the store's alias are the network's. A route
    inside the subnet via the router's address (a gateway value anyone writing the NB could
    set), a wider one, a connected subnet, a host route, and a route on a link of the
    management link's name without the alias are the node's. Routes that cover everything —
    the default route and the ``def1`` halves a VPN client adds (``0.0.0.0/1``,
    ``128.0.0.0/1``, ``::/1``, ``8000::/1``) — are no subnet's."""
    sh = lambda *a: subprocess.run(["ip", "-n", lab.node, *a], check=True)  # noqa: E731
    sh("link", "add", "up9", "type", "veth", "peer", "name", "up9p")
    sh("link", "add", "pnmtest", "type", "veth", "peer", "name", "pnmtestp")
    sh("link", "add", "pnmmine", "type", "veth", "peer", "name", "pnmminep")
    sh("link", "set", "pnmmine", "alias", "podnet:/test/store")
    for dev in ("up9", "up9p", "pnmtest", "pnmtestp", "pnmmine", "pnmminep"):
        sh("link", "set", dev, "up")
    sh("addr", "add", "192.168.246.2/24", "dev", "up9")
    sh("-6", "addr", "add", "fd00:246::2/64", "dev", "up9", "nodad")
    sh("route", "add", "10.90.1.0/24", "via", "192.168.246.9")  # into the subnet, via its router
    sh("route", "add", "10.0.0.0/8", "via", "192.168.246.9")  # wider: the node's
    sh("route", "add", "10.90.2.0/24", "dev", "pnmtest")  # a link of that name, not podnet's
    sh("route", "add", "10.90.4.0/24", "dev", "pnmmine")  # the store's own management link
    sh("route", "add", "10.90.3.7/32", "via", "192.168.246.1")  # a host of the node's
    for half in ("0.0.0.0/1", "128.0.0.0/1"):  # OpenVPN def1
        sh("route", "add", half, "via", "192.168.246.1")
    for half in ("::/1", "8000::/1"):
        sh("-6", "route", "add", half, "via", "fd00:246::1")
    src = str(paths.SRC)
    code = (f"import json, sys; sys.path.insert(0, {src!r}); from podnet import checked; "
            "from podnet.link.local import routes_over; print(json.dumps(routes_over("
            "[checked.network(n) for n in sys.argv[2:]], skip_dev=sys.argv[1], "
            "owner='podnet:/test/store')))")
    run = lambda dev, *nets: sorted(map(tuple, json.loads(  # noqa: E731
        lab.exec(lab.node, sys.executable, "-c", code, dev, *nets).stdout)))
    assert run("pnmmine", "10.90.0.0/16") == [("10.0.0.0/8", "up9"), ("10.90.1.0/24", "up9"),
                                              ("10.90.2.0/24", "pnmtest"),
                                              ("10.90.3.7/32", "up9")]  # fmt: skip
    assert ("10.90.2.0/24", "pnmtest") in run("pnmtest", "10.90.0.0/16")  # no alias: not skipped
    assert run("pnmmine", "192.168.246.128/25") == [("192.168.246.0/24", "up9")]
    assert run("pnmmine", "172.31.0.0/16", "fd42:1::/64") == []


def test_the_addresses_a_node_talks_to(tmp_path: Path) -> None:
    """:func:`podnet.drivers.ovn.hostports.peers`: the NB and SB remotes (``unix:`` passed by),
    the node's tunnel endpoint and its nameservers (a zone index dropped, words that are not
    an address passed by), each with why; a subnet holding one is named with it."""
    from podnet.drivers.ovn.hostports import holds, peers
    from podnet.ovn.vswitch import Chassis

    resolv = tmp_path / "resolv.conf"
    resolv.write_text("# local\nsearch example.org\nnameserver 10.66.0.53\n"
                      "nameserver fe80::1%eth0\nnameserver bogus\noptions ndots:2\n")
    chassis = Chassis("n2", "ssl:10.66.1.2:6642,tcp:[fd42:9::2]:6642", "10.66.2.2", "geneve",
                      "system", {})
    found = peers(["unix:/run/ovn/ovnnb_db.sock", "tcp:10.66.3.4:6641"], chassis, tunnels=False,
                  resolv_conf=str(resolv))
    assert [(str(a), why) for a, why in found] == [
        ("10.66.3.4", "the OVN northbound database this node uses (tcp:10.66.3.4:6641)"),
        ("10.66.1.2", "the OVN southbound database this node uses (ssl:10.66.1.2:6642)"),
        ("fd42:9::2", "the OVN southbound database this node uses (tcp:[fd42:9::2]:6642)"),
        ("10.66.2.2", "this node's tunnel endpoint (ovn-encap-ip)"),
        ("10.66.0.53", f"a nameserver of this node ({resolv})"),
        ("fe80::1", f"a nameserver of this node ({resolv})"),
    ]
    nets = [checked.network("10.66.0.0/24"), checked.network("fd42:9::/64")]
    assert holds(nets, found) == f"its subnet 10.66.0.0/24 holds 10.66.0.53, a nameserver of " \
        f"this node ({resolv})"
    assert holds([checked.network("fd42:9::/64")], found).startswith(
        "its subnet fd42:9::/64 holds fd42:9::2, the OVN southbound database")
    assert holds([checked.network("10.67.0.0/16")], found) == ""


@pytest.mark.root
def test_a_subnet_over_a_default_routed_nb_is_refused(cluster: Cluster) -> None:
    """n2 reaches the NB at 10.99.0.10 (n1's loopback) only through its default route (via n1),
    so no route of n2 overlaps 10.99.0.0/24: creating an OVN network there from n2 is refused
    (409) naming the address and that it is the NB n2 uses, and nothing is recorded. A network
    made while n2 used another NB address meets the hostPort ADD on n2 with 7 naming the NB;
    no management port is made, n2's route to the NB still goes through its default route,
    ``network restore`` names it, and the NB still answers n2."""
    n1, n2 = cluster.lab.nodes
    cluster.uplink(n1, "upd", oc.UPLINK)
    ns = f"{cluster.lab.prefix}-dr"
    ports = {"portMappings": [{"hostPort": 8091, "containerPort": 8080, "protocol": "tcp"}]}
    nb_dr = "tcp:10.99.0.10:6651"
    sh = lambda *a: subprocess.run(list(a), check=True, capture_output=True)  # noqa: E731
    try:
        sh("ip", "-n", n1.netns, "addr", "add", "10.99.0.10/32", "dev", "lo")
        sh("ip", "netns", "exec", n1.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        cluster.lab.nbctl("set-connection", "ptcp:6651:10.99.0.10")
        sh("ip", "-n", n2.netns, "route", "replace", "default", "via", n1.address, "dev", "br-phy")
        cluster.ok(n2, "config", "set", "network.ovn.northbound_connection", nb_dr)
        out = cluster.ctl(n2, "network", "create", "dr", "--type=ovn", "network=upd",
                          "ipv4.address=10.99.0.1/24", "ipv6.address=none")
        assert out.returncode == 1, out.stdout
        assert ("its subnet 10.99.0.0/24 holds 10.99.0.10, the OVN northbound database this "
                f"node uses ({nb_dr})") in out.stderr, out.stderr
        assert "dr" not in cluster.networks(n2)
        # made while n2 used the NB's underlay address: n2 was clear then
        cluster.ok(n2, "config", "set", "network.ovn.northbound_connection", cluster.lab.nb_tcp)
        cluster.ok(n2, "network", "create", "dr", "--type=ovn", "network=upd",
                   "ipv4.address=10.99.0.1/24", "ipv6.address=none")
        cluster.ok(n2, "config", "set", "network.ovn.northbound_connection", nb_dr)
        msg = _refused(cluster, n2, "dr-a", ns, "dr", runtimeConfig=ports)
        assert "holds 10.99.0.10, the OVN northbound database this node uses" in msg
        links = _links(n2.netns)
        assert not [n for n in links if n.startswith("pnm")], links
        route = subprocess.run(["ip", "-n", n2.netns, "-j", "route", "get", "10.99.0.10"],
                               capture_output=True, text=True, check=True).stdout
        assert json.loads(route)[0]["dev"] == "br-phy", route
        restore = cluster.ctl(n2, "network", "restore")
        assert restore.returncode == 1 and "holds 10.99.0.10" in restore.stderr, restore.stderr
        assert "dr" in cluster.networks(n2)  # the NB still answers n2
    finally:
        oc.run_plugin(cluster, n2, "DEL", "dr-a", ns, "dr")
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        cluster.ctl(n2, "config", "set", "network.ovn.northbound_connection", cluster.lab.nb_tcp)
        subprocess.run(["ip", "-n", n2.netns, "route", "del", "default"], capture_output=True)
        cluster.lab.nbctl("del-connection")
        subprocess.run(["ip", "-n", n1.netns, "addr", "del", "10.99.0.10/32", "dev", "lo"],
                       capture_output=True)
        cluster.ctl(n1, "network", "delete", "dr")
        cluster.ctl(n1, "network", "delete", "upd")


@pytest.mark.root
def test_an_nb_gateway_value_never_switches_the_route_check_off(cluster: Cluster) -> None:
    """n2 reaches a site fd00:77::/64 through a gateway fd00:5::1 of its underlay. Another NB
    writer sets the OVN network's ``volatile.network.ipv6.address`` (the router's uplink
    address) to that gateway: the hostPort ADD on n2 still answers 7 naming the route, and
    the route still leads to the underlay, not to a management port."""
    n1, n2 = cluster.lab.nodes
    cluster.uplink(n1, "upv", oc.UPLINK)
    cluster.ok(n1, "network", "create", "vb", "--type=ovn", "network=upv",
               "ipv4.address=10.78.9.1/24", "ipv6.address=fd00:77::1/64")
    ns = f"{cluster.lab.prefix}-vb"
    ports = {"portMappings": [{"hostPort": 8092, "containerPort": 8080, "protocol": "tcp"}]}
    sh = lambda *a: subprocess.run(list(a), check=True, capture_output=True)  # noqa: E731
    try:
        sh("ip", "-n", n2.netns, "-6", "addr", "add", "fd00:5::2/64", "dev", "br-phy", "nodad")
        sh("ip", "-n", n2.netns, "-6", "route", "add", "fd00:77::/64", "via", "fd00:5::1",
           "dev", "br-phy")
        raw = cluster.lab.nbctl("get", "NB_Global", ".", 'external_ids:"podnet:network:vb"')
        record = json.loads(json.loads(raw))
        record["config"]["volatile.network.ipv6.address"] = "fd00:5::1"
        value = json.dumps(json.dumps(record, separators=(",", ":")))
        cluster.lab.nbctl("set", "NB_Global", ".", f'external_ids:"podnet:network:vb"={value}')
        msg = _refused(cluster, n2, "vb-a", ns, "vb", runtimeConfig=ports)
        assert "fd00:77::/64 overlaps this node's route to fd00:77::/64 (dev br-phy)" in msg, msg
        route = subprocess.run(["ip", "-n", n2.netns, "-6", "-j", "route", "get", "fd00:77::9"],
                               capture_output=True, text=True, check=True).stdout
        assert json.loads(route)[0]["dev"] == "br-phy", route
        assert not [n for n in _links(n2.netns) if n.startswith("pnm")]
    finally:
        oc.run_plugin(cluster, n2, "DEL", "vb-a", ns, "vb")
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "-n", n2.netns, "-6", "route", "del", "fd00:77::/64"],
                       capture_output=True)
        subprocess.run(["ip", "-n", n2.netns, "-6", "addr", "del", "fd00:5::2/64", "dev",
                        "br-phy"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "vb")
        cluster.ctl(n1, "network", "delete", "upv")


@pytest.mark.root
def test_a_spare_of_another_shape_is_never_claimed(cluster: Cluster) -> None:
    """A port another NB writer tagged as n1's spare, named otherwise than podnet names spares
    (its name would become an OVS ``iface-id`` on n1), is never claimed: with n1's own spares
    removed it is the only one, and the ADD makes a port of its own instead."""
    n1, _ = cluster.lab.nodes
    ns = _ipv4_network(cluster, "upq", "pspq", "10.81.0.1/24", "sq")
    nbctl = cluster.lab.nbctl
    evil = "pn-pspq-pod-EVIL"
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        oc.plugin(cluster, n1, "ADD", "sq-a", ns["a"], "pspq")  # makes n1's spares
        for port in nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                          "external_ids:podnet-spare=true").split():
            nbctl("lsp-del", port)
        nbctl("lsp-add", "pn-pspq-ls-int", evil, "--", "lsp-set-addresses", evil,
              "00:16:3e:00:00:42 dynamic", "--", "set", "Logical_Switch_Port", evil,
              "options:requested-chassis=n1", "external_ids:podnet-network=pspq",
              "external_ids:podnet-chassis=n1", "external_ids:podnet-spare=true")
        cluster.lab.northd_ready()  # the port has its addresses: it would fit
        assert "10.81.0." in nbctl("get", "Logical_Switch_Port", evil, "dynamic_addresses")
        oc.plugin(cluster, n1, "ADD", "sq-b", ns["b"], "pspq")
        assert nbctl("get", "Logical_Switch_Port", evil, "external_ids:podnet-spare") == '"true"'
        name, _, secure = _port_of(cluster, "sq-b")
        assert name != evil and secure, (name, secure)
    finally:
        oc.release(cluster, [], {k: (n1, name) for k, name in ns.items()}, "sq", "pspq")
        oc.delete_networks(cluster, "pspq", "upq")


@pytest.mark.root
def test_a_spare_on_another_switch_is_never_claimed(cluster: Cluster) -> None:
    """A port of podnet's spare shape (its name, n1's spare tags, addresses northd gave) that
    another NB writer put on a logical switch of its own is not the network's: with n1's own
    spares removed it is the only candidate, and the ADD makes a port of its own on the
    network's switch instead; the other switch's port stays as it was."""
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.ports import spares

    n1, _ = cluster.lab.nodes
    ns = _ipv4_network(cluster, "upw", "pspw", "10.82.0.1/24", "sw")
    nbctl = cluster.lab.nbctl
    other = "pn-pspw-pod-0123456789abcdef0123"  # the name a spare of pspw would have
    try:
        for name in ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
        oc.plugin(cluster, n1, "ADD", "sw-a", ns["a"], "pspw")  # makes n1's spares
        nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
        assert len(spares(nb, "pspw", "n1")) == 2  # the network's own are found
        for port in nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                          "external_ids:podnet-spare=true").split():
            nbctl("lsp-del", port)
        nbctl("ls-add", "evil-sw", "--", "set", "Logical_Switch", "evil-sw",
              "other_config:subnet=10.82.0.0/24")
        nbctl("lsp-add", "evil-sw", other, "--", "lsp-set-addresses", other,
              "00:16:3e:00:00:43 dynamic", "--", "set", "Logical_Switch_Port", other,
              "options:requested-chassis=n1", "external_ids:podnet-network=pspw",
              "external_ids:podnet-chassis=n1", "external_ids:podnet-spare=true")
        cluster.lab.northd_ready()  # the port has its addresses in the subnet: it would fit
        assert "10.82.0." in nbctl("get", "Logical_Switch_Port", other, "dynamic_addresses")
        assert spares(nb, "pspw", "n1") == []
        oc.plugin(cluster, n1, "ADD", "sw-b", ns["b"], "pspw")
        assert nbctl("get", "Logical_Switch_Port", other, "external_ids:podnet-spare") == '"true"'
        name, _, secure = _port_of(cluster, "sw-b")
        assert name != other and secure, (name, secure)
        switch = nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port", f"name={name}")
        assert switch == name
        assert name in nbctl("show", "pn-pspw-ls-int")
    finally:
        for k, name in ns.items():
            oc.run_plugin(cluster, n1, "DEL", f"sw-{k}", name, "pspw")
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        nbctl("--if-exists", "ls-del", "evil-sw")
        cluster.ctl(n1, "network", "delete", "pspw")
        cluster.ctl(n1, "network", "delete", "upw")


@pytest.mark.root
def test_a_subnet_the_uplink_has_no_gateway_for_is_refused(cluster: Cluster) -> None:
    """An IPv6-only OVN network on an uplink with only ``ipv4.gateway`` would give its router's
    uplink port no address at all: the create is refused in one line naming the uplink key
    that is missing (not the NB's own wording), and nothing of it is in the NB; an IPv4 subnet
    alongside makes it valid."""
    n1, _ = cluster.lab.nodes
    cluster.uplink(n1, "upg", oc.UPLINK)
    try:
        out = cluster.ctl(n1, "network", "create", "v6only", "--type=ovn", "network=upg",
                          "ipv4.address=none", "ipv6.address=fd00:78::1/64")
        assert out.returncode == 1, out.stdout
        assert out.stderr.strip() == ('Error: Uplink network "upg" has no "ipv6.gateway" for the '
                                      "network's subnets: the router needs an uplink address of "
                                      "one of their families"), out.stderr
        assert "v6only" not in cluster.networks(n1)
        assert "pn-v6only" not in cluster.lab.nbctl("show")
        cluster.ok(n1, "network", "create", "v6only", "--type=ovn", "network=upg",
                   "ipv4.address=10.83.0.1/24", "ipv6.address=fd00:78::1/64")
        assert "v6only" in cluster.networks(n1)
    finally:
        cluster.ctl(n1, "network", "delete", "v6only")
        cluster.ctl(n1, "network", "delete", "upg")
