"""podnet touches only what it made, and its rules take only the traffic they name, in
real namespaces:

- a network over an existing link that is not podnet's (``lo``, a veth, a pod's host end) is
  refused and the link left as it was; ``network delete`` leaves a link it did not make;
- a DEL (CHECK) naming another network of the same container leaves podnet's attachment alone;
- the node-wide table belongs to one store: another data dir (a typo) is refused, naming the
  owner, and the hostPorts keep answering; ``network`` commands refuse a data dir without a
  database unless given ``--init``;
- overlapping ranges and bridge subnets are refused (code 7, naming both);
- podnet's hostPorts and podnet-portmap's see each other, and ``podnetctl ports`` lists both;
- a forward's drop: a forward without a default target drops what no port takes (tcp, udp,
  icmp; IPv4 and IPv6), and its default target takes it once set;
- a bridge a pod's ADD brings back brings the network's other pods and forwards back; CHECK
  names ``podnetctl network restore`` when a pod is off its bridge.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netns import NODE_ADDR4, NODE_ADDR6, VENV_BIN, Lab, sh

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")
PORTMAP = str(VENV_BIN / "podnet-portmap")

PROBE = r"""
import socket, sys
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
family = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
s.settimeout(1.5)
try:
    s.connect((host, port))
    if proto == "udp":
        s.send(b"ping")
    print("answer " + s.recv(2048).decode())
except (TimeoutError, socket.timeout):
    print("timeout")
except ConnectionRefusedError:
    print("refused")
except OSError as err:  # never "" for a failure: a negative check names the one it expects
    print(f"error {err.errno}")
"""


def probe(lab: Lab, ns: str, proto: str, host: str, port: int) -> str:
    """What a client in ``ns`` gets: ``answer <name> <peer>``, ``timeout`` (nothing came back:
    dropped) or ``refused`` (a RST, or ICMP port unreachable for udp)."""
    out = lab.exec(ns, sys.executable, "-c", PROBE, proto, host, str(port), timeout=30)
    return out.stdout.strip()


PING = r"""
import os, socket, sys, time
host = sys.argv[1]
v6 = ":" in host
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                  socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
ident = os.getpid() & 0xFFFF
body = ident.to_bytes(2, "big") + (1).to_bytes(2, "big") + b"podnet"
head = bytes([128 if v6 else 8, 0])
raw = head + b"\0\0" + body
total = sum(int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2))
while total >> 16:
    total = (total & 0xFFFF) + (total >> 16)
packet = head + (0 if v6 else ~total & 0xFFFF).to_bytes(2, "big") + body  # v6: kernel sums
s.sendto(packet, (host, 0))
deadline = time.monotonic() + 1.5
while (left := deadline - time.monotonic()) > 0:
    s.settimeout(left)
    try:
        data = s.recv(2048)
    except (TimeoutError, socket.timeout):
        break
    icmp = data if v6 else data[(data[0] & 0x0F) * 4:]
    if icmp[0] == (129 if v6 else 0) and icmp[4:6] == ident.to_bytes(2, "big"):
        print("echo reply")
        break
"""


def ping(lab: Lab, ns: str, host: str) -> bool:
    """Whether an ICMP echo request from ``ns`` to ``host`` gets its reply within 1.5 s (a raw
    socket: the machine has no ping)."""
    out = lab.exec(ns, sys.executable, "-c", PING, host, timeout=30)
    return out.stdout.strip() == "echo reply"


class Node:
    """A node namespace with a data dir; ``ctl`` runs ``podnetctl`` there."""

    def __init__(self, lab: Lab, data: Path) -> None:
        self.lab, self.data = lab, data

    def ctl(self, *args: str, data: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
        out = self.lab.exec(self.lab.node, PODNETCTL, "network", "--data-dir",
                            str(data or self.data), *args, check=False)  # fmt: skip
        if check:
            assert out.returncode == 0, f"network {' '.join(args)}: {out.stderr}"
        return out

    def links(self) -> str:
        return sh("ip", "-n", self.lab.node, "-d", "-j", "link", "show").stdout

    def table(self) -> str:
        return self.lab.exec(self.lab.node, "nft", "list", "table", "inet", "podnet",
                             check=False).stdout  # fmt: skip

    def add(self, conf: dict[str, Any], cid: str, netns: str, ifname: str = "eth0",
            args: str = "") -> tuple[int, Any]:  # fmt: skip
        env = {"CNI_ARGS": args} if args else {}
        return self.lab.cni("ADD", conf, container_id=cid, netns=netns, ifname=ifname, env=env)


def ptp(data: Path, name: str = "podnet", ranges: tuple[str, ...] = ("10.244.2.0/24",),
        *mappings: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {"cniVersion": "1.1.0", "name": name, "type": "podnet", "ranges": list(ranges),
            "dataDir": str(data), "runtimeConfig": {"portMappings": list(mappings)}}


def bridge_pod(data: Path, network: str = "br0") -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": f"{network}-pods", "type": "podnet",
            "network": network, "dataDir": str(data)}


# -- links podnet did not make ----------------------------------------------------------
def test_network_create_refuses_links_podnet_did_not_make(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    pod = lab.pod()
    rc, res = node.add(ptp(node.data), "c1", pod)
    assert rc == 0, res
    host_veth = res["interfaces"][0]["name"]
    lab.exec(lab.node, "ip", "link", "add", "vx0", "type", "veth", "peer", "name", "vx1")
    lab.exec(lab.node, "ip", "link", "add", "foreignbr", "type", "bridge")
    before = node.links()
    for name in ("lo", "vx0", host_veth, "foreignbr"):
        out = node.ctl("create", name, "ipv4.address=10.9.0.1/24", check=False)
        assert out.returncode == 1, out
        assert f"named {name} exists and was not made by this podnet store" in out.stderr, out.stderr
        assert "\n" not in out.stderr.strip(), out.stderr
    assert node.links() == before
    networks = json.loads(node.ctl("list", "--format", "json").stdout)
    assert [n["name"] for n in networks if n["type"] == "bridge"] == [], networks
    # the pod still works through its host veth
    lab.serve(pod, "p", 80)
    assert lab.talk(lab.node, "tcp", res["ips"][0]["address"].split("/")[0], 80).startswith("p")


def test_network_delete_leaves_a_link_it_did_not_make(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    node.ctl("--init", "create", "br5", "ipv4.address=10.5.0.1/24")
    alias = lab.exec(lab.node, "cat", "/sys/class/net/br5/ifalias").stdout.strip()
    assert alias == f"podnet:{node.data}"
    lab.exec(lab.node, "ip", "link", "del", "br5")  # behind podnet's back…
    lab.exec(lab.node, "ip", "link", "add", "br5", "type", "veth", "peer", "name", "br5p")
    out = node.ctl("delete", "br5")
    assert "not made by this podnet store" in out.stderr and "left it alone" in out.stderr
    assert lab.exec(lab.node, "ip", "link", "show", "br5").returncode == 0  # still there
    assert "br5" not in node.ctl("list").stdout
    # restore never adopts a foreign link either
    node.ctl("create", "br6", "ipv4.address=10.6.0.1/24")
    lab.exec(lab.node, "ip", "link", "del", "br6")
    lab.exec(lab.node, "ip", "link", "add", "br6", "type", "bridge")
    out = node.ctl("restore")
    assert "nothing for bridge br6" in out.stdout, out.stdout
    assert lab.exec(lab.node, "cat", "/sys/class/net/br6/ifalias").stdout.strip() == ""
    assert "10.6.0.1" not in lab.exec(lab.node, "ip", "addr", "show", "br6").stdout


def test_api_refuses_taking_over_a_link(lab: Lab, tmp_path: Path) -> None:
    from api_helpers import ApiServer

    data = tmp_path / "data"
    node = Node(lab, data)
    node.ctl("--init", "list")
    lab.exec(lab.node, "ip", "link", "add", "vy0", "type", "veth", "peer", "name", "vy1")
    server = ApiServer(lab.node, data, tmp_path / "logs")
    try:
        with server.client() as api:
            for name in ("lo", "vy0"):
                r = api.post("/1.0/networks", json={"name": name, "config": {}})
                assert r.status_code == 409, r.text
                assert "not made by this podnet store" in r.json()["error"]
    finally:
        server.stop()
    assert lab.exec(lab.node, "ip", "link", "show", "vy0").returncode == 0
    assert lab.exec(lab.node, "cat", "/sys/class/net/vy0/ifalias").stdout.strip() == ""


# -- DEL/CHECK of another network -------------------------------------------------------
def test_del_of_another_network_leaves_the_attachment(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    client = lab.client()
    pod = lab.pod()
    conf = ptp(node.data, "podnet", ("10.244.2.0/24",),
               {"hostPort": 4444, "containerPort": 80, "protocol": "tcp"})
    rc, res = node.add(conf, "ctr", pod)
    assert rc == 0, res
    lab.serve(pod, "pod", 80)
    assert lab.talk(client, "tcp", NODE_ADDR4, 4444).startswith("pod")
    other = ptp(node.data, "other", ("10.245.0.0/24",))
    rc, out = node.add(other, "ctr", pod)
    assert rc == 1 and out["code"] == 102, out
    for verb in ("CHECK", "DEL"):
        conf_other = {**other, "prevResult": res} if verb == "CHECK" else other
        rc, out = lab.cni(verb, conf_other, container_id="ctr", netns=pod)
        if verb == "CHECK":
            assert rc == 1 and out["code"] == 3, out  # not an attachment of network other
        else:
            assert rc == 0, out
    assert "10.244.2." in lab.exec(pod, "ip", "addr", "show", "eth0").stdout
    assert lab.talk(client, "tcp", NODE_ADDR4, 4444).startswith("pod")
    rc, out = lab.cni("CHECK", {**conf, "prevResult": res}, container_id="ctr", netns=pod)
    assert rc == 0, out
    rc, out = lab.cni("DEL", conf, container_id="ctr", netns=pod)
    assert rc == 0, out
    assert lab.exec(pod, "ip", "link", "show", "eth0", check=False).returncode != 0


# -- the table belongs to one store -----------------------------------------------------
def test_a_second_store_never_rebuilds_the_table(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    client = lab.client()
    pod = lab.pod()
    rc, res = node.add(ptp(node.data, "podnet", ("10.244.2.0/24",),
                           {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}), "c1", pod)
    assert rc == 0, res
    lab.serve(pod, "pod", 80)
    table = node.table()
    assert f'comment "podnet:{node.data}"' in table
    typo = tmp_path / "dta"
    # without --init a network command refuses a data dir without a database …
    out = node.ctl("create", "br0", "ipv4.address=10.0.0.1/24", data=typo, check=False)
    assert out.returncode == 1 and "No podnet database in" in out.stderr, out.stderr
    assert not typo.exists()
    # … and with it, the new store may not rebuild the node's table: refused naming the owner
    out = node.ctl("--init", "create", "br0", "ipv4.address=10.0.0.1/24", data=typo, check=False)
    assert out.returncode == 1, out
    assert f"belongs to the store in {node.data}" in out.stderr, out.stderr
    assert node.table() == table
    assert lab.exec(lab.node, "ip", "link", "show", "br0", check=False).returncode != 0
    # the plugin with the wrong dataDir: refused the same way (its new ranges need a rebuild)
    rc, out = node.add(ptp(typo, "podnet", ("10.250.0.0/24",)), "c2", lab.pod())
    assert rc == 1 and out["code"] == 7 and str(node.data) in out["msg"], out
    assert node.table() == table
    assert lab.talk(client, "tcp", NODE_ADDR4, 8080).startswith("pod")
    # the owner's store is gone: the table may be taken over
    lab.cni("DEL", ptp(node.data), container_id="c1", netns=pod)
    (node.data / "podnet.db").unlink()
    node.ctl("--init", "create", "br0", "ipv4.address=10.0.0.1/24", data=typo)
    assert f'comment "podnet:{typo}"' in node.table()


def test_table_owner_records_are_forgotten_only_when_their_store_is(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """prune_claims forgets records of stores whose database is gone and, given a directory,
    those of stores inside it (the demo's and the test session's teardown), nothing else."""
    from podnet import reconcile as sync

    claims = tmp_path / "tables"
    claims.mkdir()
    monkeypatch.setattr(sync, "CLAIMS_DIR", str(claims))
    stores = {name: tmp_path / name for name in ("node", "gone", "scratch")}
    for name, data in stores.items():
        if name != "gone":
            data.mkdir()
            (data / "podnet.db").touch()
        (claims / f"boot-{name}").write_text(f"podnet:{data}\n")
    (claims / "boot-other").write_text("someone else\n")
    assert sync.prune_claims() == 1
    assert sorted(p.name for p in claims.iterdir()) == ["boot-node", "boot-other", "boot-scratch"]
    # a directory named like a prefix of another is not "inside" it
    assert sync.prune_claims(str(tmp_path / "scratc")) == 0
    assert sync.prune_claims(str(stores["scratch"].parent / "scratch")) == 1
    assert sorted(p.name for p in claims.iterdir()) == ["boot-node", "boot-other"]
    assert sync.prune_claims(str(tmp_path / "nowhere")) == 0
    monkeypatch.setattr(sync, "CLAIMS_DIR", str(tmp_path / "absent"))
    assert sync.prune_claims() == 0

# -- overlapping ranges -------------------------------------------------------------------
def test_overlapping_ranges_and_subnets_are_refused(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    rc, res = node.add(ptp(node.data, "a", ("10.244.2.0/24",)), "c1", lab.pod())
    assert rc == 0, res
    node.ctl("create", "br0", "ipv4.address=10.30.0.1/24")
    before = node.table()
    cases = [
        (ptp(node.data, "b", ("10.244.2.128/25",)), "10.244.2.128/25", "range 10.244.2.0/24"),
        (ptp(node.data, "c", ("10.30.0.0/25",)), "10.30.0.0/25", 'bridge network "br0"'),
        (ptp(node.data, "d", ("10.0.0.0/8",)), "10.0.0.0/8", "range 10.244.2.0/24"),
    ]
    for conf, mine, theirs in cases:
        rc, out = node.add(conf, "c9", lab.pod())
        assert rc == 1 and out["code"] == 7, out
        assert mine in out["msg"] and theirs in out["msg"], out
    assert node.table() == before
    # the same range in two conflists is shared, not an overlap
    rc, res = node.add(ptp(node.data, "e", ("10.244.2.0/24",)), "c2", lab.pod())
    assert rc == 0, res
    # a range overlapping its own config's other range
    rc, out = node.add(ptp(node.data, "f", ("10.40.0.0/24", "10.40.0.0/16")), "c3", lab.pod())
    assert rc == 1 and out["code"] == 7 and "overlaps ranges[0]" in out["msg"], out


# -- podnet's and podnet-portmap's hostPorts ----------------------------------------------
def test_podnet_and_podnet_portmap_see_each_other(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    pod_a, pod_b = lab.pod(), lab.pod()
    rc, res_a = node.add(ptp(node.data, "podnet", ("10.244.2.0/24",),
                             {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}),
                         "ctr-a", pod_a)  # fmt: skip
    assert rc == 0, res_a
    rc, res_b = node.add(ptp(node.data, "podnet", ("10.244.2.0/24",)), "ctr-b", pod_b)
    assert rc == 0, res_b

    def portmap(port: int) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": "chain", "type": "podnet-portmap",
                "backend": "nftables", "dataDir": str(node.data), "prevResult": res_b,
                "runtimeConfig": {"portMappings": [
                    {"hostPort": port, "containerPort": 80, "protocol": "tcp"}]}}

    rc, out = lab.cni("ADD", portmap(8080), container_id="ctr-b", netns=pod_b, plugin=PORTMAP)
    assert rc == 1 and out["code"] == 101 and "podnet container ctr-a" in out["msg"], out
    rc, out = lab.cni("ADD", portmap(9090), container_id="ctr-b", netns=pod_b, plugin=PORTMAP)
    assert rc == 0, out
    pod_c = lab.pod()
    rc, out = node.add(ptp(node.data, "podnet", ("10.244.2.0/24",),
                           {"hostPort": 9090, "containerPort": 80, "protocol": "tcp"}),
                       "ctr-c", pod_c)  # fmt: skip
    assert rc == 1 and out["code"] == 101, out
    assert "podnet-portmap chain/ctr-b" in out["msg"], out
    ports = json.loads(lab.exec(lab.node, PODNETCTL, "ports", "--data-dir", str(node.data),
                                "-o", "json").stdout)  # fmt: skip
    seen = {(p["plugin"], p["container_id"], p["host"]) for p in ports}
    assert ("podnet", "ctr-a", "0.0.0.0:8080") in seen, ports
    assert ("podnet-portmap", "ctr-b", "0.0.0.0:9090") in seen, ports
    rc, out = lab.cni("DEL", portmap(9090), container_id="ctr-b", netns=pod_b, plugin=PORTMAP)
    assert rc == 0, out
    rc, out = node.add(ptp(node.data, "podnet", ("10.244.2.0/24",),
                           {"hostPort": 9090, "containerPort": 80, "protocol": "tcp"}),
                       "ctr-c", pod_c)  # fmt: skip
    assert rc == 0, out


# -- a forward's drop ------------------------------------------------------------------------
def test_forward_without_default_target_drops_the_rest(lab: Lab, tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    client = lab.client()
    node.ctl("--init", "create", "br0", "ipv4.address=10.0.0.1/24", "ipv6.address=fd00:1::1/64")
    pods = {}
    for name, ip in (("a", "10.0.0.5"), ("b", "10.0.0.6")):
        ns = lab.pod(name)
        rc, res = node.add(bridge_pod(node.data), f"c-{name}", ns, args=f"IP={ip}")
        assert rc == 0, res
        lab.serve(ns, name, 80)
        lab.serve(ns, name, 81)
        pods[name] = {6 if ":" in i["address"] else 4: i["address"].split("/")[0]
                      for i in res["ips"]}
    # listen addresses the node owns, so without the drop the node itself would answer
    # (a RST, an ICMP port unreachable, an echo reply) instead of silence
    listen = {4: "198.51.100.20", 6: "2001:db8:f::20"}
    lab.exec(lab.node, "ip", "addr", "add", "198.51.100.20/32", "dev", "lo")
    lab.exec(lab.node, "ip", "-6", "addr", "add", "2001:db8:f::20/128", "dev", "lo")
    sh("ip", "-n", client, "route", "add", "198.51.100.0/24", "via", NODE_ADDR4)
    sh("ip", "-n", client, "-6", "route", "add", "2001:db8:f::/64", "via", NODE_ADDR6)
    for family, addr in listen.items():
        # before any forward: the node answers for its own address (the controls)
        assert probe(lab, client, "tcp", addr, 81) == "refused", family
        assert probe(lab, client, "udp", addr, 81) == "refused", family
        assert ping(lab, client, addr), family
        node.ctl("forward", "create", "br0", addr)
        node.ctl("forward", "port", "add", "br0", addr, "tcp", "80", pods["a"][family])
        assert probe(lab, client, "tcp", addr, 80).startswith("answer a"), family
        assert probe(lab, client, "tcp", addr, 81) == "timeout", family
        assert probe(lab, client, "udp", addr, 81) == "timeout", family
        assert not ping(lab, client, addr), family
        node.ctl("forward", "set", "br0", addr, f"target_address={pods['b'][family]}")
        assert probe(lab, client, "tcp", addr, 80).startswith("answer a"), family
        assert probe(lab, client, "tcp", addr, 81).startswith("answer b"), family
        assert probe(lab, client, "udp", addr, 81).startswith("answer b"), family
        assert ping(lab, client, addr), family
        node.ctl("forward", "unset", "br0", addr, "target_address")
        assert probe(lab, client, "tcp", addr, 81) == "timeout", family
        node.ctl("forward", "delete", "br0", addr)
        assert probe(lab, client, "tcp", addr, 81) == "refused", family
        assert ping(lab, client, addr), family
    from api_helpers import map_elements

    # every forward deleted: nothing left in the kernel's drop sets
    assert map_elements(lab.node, "fwd_drop_v4") == map_elements(lab.node, "fwd_drop_v6") == set()


# -- a bridge that comes back brings its pods back ----------------------------------------
def test_bridge_brought_back_by_an_add_brings_its_pods_and_forwards_back(lab: Lab,
                                                                       tmp_path: Path) -> None:
    node = Node(lab, tmp_path / "data")
    client = lab.client()
    node.ctl("--init", "create", "br0", "ipv4.address=10.0.0.1/24", "ipv4.nat=true")
    sh("ip", "-n", client, "route", "add", "198.51.100.0/24", "via", NODE_ADDR4)
    results, netns = {}, {}
    for name, ip in (("a", "10.0.0.5"), ("b", "10.0.0.6")):
        netns[name] = lab.pod(name)
        rc, results[name] = node.add(bridge_pod(node.data), f"c-{name}", netns[name],
                                     args=f"IP={ip}")  # fmt: skip
        assert rc == 0, results[name]
        lab.serve(netns[name], name, 80)
    node.ctl("forward", "create", "br0", "198.51.100.30", "target_address=10.0.0.5")
    assert probe(lab, client, "tcp", "198.51.100.30", 80).startswith("answer a")
    lab.exec(lab.node, "ip", "link", "del", "br0")  # a cleanup behind podnet's back
    rc, out = lab.cni("CHECK", {**bridge_pod(node.data), "prevResult": results["a"]},
                      container_id="c-a", netns=netns["a"])
    assert rc == 1 and out["code"] == 103, out
    assert "podnetctl network restore" in out["msg"] and "bridge br0" in out["msg"], out
    # the forward's DNAT stays, its target has no route (br0 is gone): the node sends the packet
    # on by its default route, back to the client, which drops it
    assert probe(lab, client, "tcp", "198.51.100.30", 80) == "timeout"
    netns["c"] = lab.pod("c")
    rc, res_c = node.add(bridge_pod(node.data), "c-c", netns["c"], args="IP=10.0.0.7")
    assert rc == 0, res_c
    for name in ("a", "b"):
        rc, out = lab.cni("CHECK", {**bridge_pod(node.data), "prevResult": results[name]},
                          container_id=f"c-{name}", netns=netns[name])
        assert rc == 0, (name, out)
    assert probe(lab, client, "tcp", "198.51.100.30", 80).startswith("answer a")
    assert probe(lab, netns["b"], "tcp", "10.0.0.5", 80).startswith("answer a")
    assert probe(lab, netns["c"], "tcp", "198.51.100.30", 80).startswith("answer a")


def test_api_of_a_second_store_never_rebuilds_the_table(lab: Lab, tmp_path: Path) -> None:
    """``podnetctl serve`` started on a mistyped data dir makes an empty store (serve creates
    its store), but creating a network there is refused with 409 while the node's table, owned
    by the real store, stays as it is."""
    from api_helpers import ApiServer

    node = Node(lab, tmp_path / "data")
    rc, res = node.add(ptp(node.data, "podnet", ("10.244.2.0/24",),
                           {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}),
                       "c1", lab.pod())  # fmt: skip
    assert rc == 0, res
    table = node.table()
    server = ApiServer(lab.node, tmp_path / "dta", tmp_path / "logs")
    try:
        with server.client() as api:
            r = api.post("/1.0/networks", json={"name": "br0",
                                                "config": {"ipv4.address": "10.0.0.1/24"}})
            assert r.status_code == 409, r.text
            assert "belongs to another podnet store" in r.json()["error"]
            assert str(tmp_path) not in r.text  # paths go to the server's log only
    finally:
        server.stop()
    assert str(node.data) in server.stderr()
    assert node.table() == table
    assert lab.exec(lab.node, "ip", "link", "show", "br0", check=False).returncode != 0
