"""Networks and forwards with real traffic: a bridge network with pods, a
client namespace routed to the listen addresses through the node; IPv4 and IPv6, TCP and UDP;
whole-address and port forwards, ranges, many-to-one, the default target taking over after
``port remove``, hairpin from the target and from another pod (bridge and ptp), the SNAT
address seen by a server outside, the forward following its address to a new pod, ``network
restore`` after the bridge and the table were deleted behind podnet's back, and 32 parallel
changes leaving the kernel equal to the database."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from api_helpers import expected_maps, kernel_maps, map_elements
from envgate import need
from netns import CLIENT_ADDR4, CLIENT_ADDR6, NODE_ADDR4, NODE_ADDR6, TIMEOUT, VENV_BIN, Lab, sh

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")
LISTEN4 = "198.51.100.0/24"
LISTEN6 = "2001:db8:f::/64"


class Net:
    """A node with bridge network br0 (10.0.0.1/24, fd00:1::1/64, NAT), a client routed to the
    listen ranges through the node, and helpers to run podnetctl and the plugin there."""

    def __init__(self, lab: Lab, data: Path) -> None:
        self.lab, self.data = lab, data
        self.client = lab.client()
        sh("ip", "-n", self.client, "route", "add", LISTEN4, "via", NODE_ADDR4)
        sh("ip", "-n", self.client, "-6", "route", "add", LISTEN6, "via", NODE_ADDR6)
        self.ctl("create", "br0", "ipv4.address=10.0.0.1/24", "ipv6.address=fd00:1::1/64",
                 "ipv4.nat=true", "ipv6.nat=true")

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = self.lab.exec(self.lab.node, PODNETCTL, "network", "--data-dir", str(self.data), "--init", *args,
                            check=False)
        if check:
            assert out.returncode == 0, f"podnetctl network {' '.join(args)}: {out.stderr}"
        return out

    def pod(self, name: str, *, ip: str = "", ports: tuple[int, ...] = (80,),
            network: str = "br0") -> tuple[str, dict[int, str]]:
        """A pod of ``network`` (bridge), serving its name on ``ports``; (netns, {family: ip})."""
        ns = self.lab.pod(name)
        conf = {"cniVersion": "1.1.0", "name": f"{network}-pods", "type": "podnet",
                "network": network, "dataDir": str(self.data)}
        env = {"CNI_ARGS": f"IP={ip}"} if ip else {}
        rc, out = self.lab.cni("ADD", conf, container_id=f"c-{name}", netns=ns, env=env)
        assert rc == 0, out
        for port in ports:
            self.lab.serve(ns, name, port)
        return ns, {6 if ":" in i["address"] else 4: i["address"].split("/")[0] for i in out["ips"]}

    def talk(self, ns: str, proto: str, host: str, port: int) -> str:
        """The answering pod's name ("" when nothing answered)."""
        return self.lab.talk(ns, proto, host, port).split(" ")[0]

    def elements(self, name: str) -> set[str]:
        return map_elements(self.lab.node, name)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    need("root", "ip", "nft")
    lab = Lab()
    try:
        yield Net(lab, tmp_path_factory.mktemp("networks"))
    finally:
        lab.close()


@pytest.fixture(scope="module")
def pods(net: Net) -> dict[str, tuple[str, dict[int, str]]]:
    return {"a": net.pod("a", ports=(80, 8080)), "b": net.pod("b", ports=(80, 81, 53))}


def test_whole_address_forward_tcp_udp_v4_v6(net: Net, pods: dict[str, Any]) -> None:
    a4, a6 = pods["a"][1][4], pods["a"][1][6]
    net.ctl("forward", "create", "br0", "198.51.100.1", f"target_address={a4}")
    net.ctl("forward", "create", "br0", "2001:db8:f::1", f"target_address={a6}")
    try:
        for host in ("198.51.100.1", "2001:db8:f::1"):
            for proto in ("tcp", "udp"):
                assert net.talk(net.client, proto, host, 80) == "a", (host, proto)
            assert net.talk(net.client, "tcp", host, 8080) == "a"  # every port
    finally:
        net.ctl("forward", "delete", "br0", "198.51.100.1")
        net.ctl("forward", "delete", "br0", "2001:db8:f::1")
    # like an address never forwarded (the node routes it back: a loop until the TTL runs out)
    assert net.talk(net.client, "tcp", "198.51.100.1", 80) == net.talk(net.client, "tcp", "198.51.100.250", 80) == TIMEOUT


@contextmanager
def sink(net: Net, *listen: str) -> Iterator[None]:
    """The ``listen`` addresses made reachable through the node to a namespace that holds them
    and answers "sink" on TCP port 80 (its UDP answers leave from another address), so traffic to them that is not dropped gets an
    answer, and only a forward's drop gives a timeout (without it a listen address is routed
    back to the client, and a packet loops until its TTL runs out: a timeout either way)."""
    ns = net.lab.pod("sink")
    sh("ip", "link", "add", "sink0", "netns", net.lab.node, "type", "veth", "peer", "name", "up0",
       "netns", ns)  # fmt: skip
    for where, a4, a6 in ((net.lab.node, "100.64.9.1/30", "fd00:9::1/64"),
                          (ns, "100.64.9.2/30", "fd00:9::2/64")):  # fmt: skip
        dev = "sink0" if where == net.lab.node else "up0"
        sh("ip", "-n", where, "addr", "add", a4, "dev", dev)
        sh("ip", "-n", where, "addr", "add", a6, "dev", dev, "nodad")
        sh("ip", "-n", where, "link", "set", dev, "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", "100.64.9.1")
    sh("ip", "-n", ns, "-6", "route", "add", "default", "via", "fd00:9::1")
    try:
        for addr in listen:
            six = ":" in addr
            sh("ip", "-n", ns, "addr", "add", f"{addr}/{128 if six else 32}", "dev", "lo")
            sh("ip", "-n", net.lab.node, *(["-6"] if six else []), "route", "add", addr, "via",
               "fd00:9::2" if six else "100.64.9.2")  # fmt: skip
        net.lab.serve(ns, "sink", 80)
        # both neighbours resolved before a check relies on a first SYN: the node reaches the
        # sink's own address (never in a drop set) once, waiting for that event
        deadline = time.monotonic() + 30
        while net.talk(net.lab.node, "tcp", "fd00:9::2", 80) != "sink":
            assert time.monotonic() < deadline, "the sink never answered the node"
        yield
    finally:
        sh("ip", "-n", net.lab.node, "link", "del", "sink0", check=False)  # its routes go too


def test_ports_range_many_to_one_and_default_target_after_port_remove(net: Net, pods: dict[str, Any]) -> None:
    a4, b4, b6 = pods["a"][1][4], pods["b"][1][4], pods["b"][1][6]
    L = "198.51.100.2"
    with sink(net, "2001:db8:f::2"):  # the control: without a forward, the sink answers
        assert net.talk(net.client, "tcp", "2001:db8:f::2", 80) == "sink"
    assert net.talk(net.client, "tcp", "2001:db8:f::2", 80) == TIMEOUT  # routed back: a loop
    net.ctl("forward", "create", "br0", L, f"target_address={a4}")
    net.ctl("forward", "port", "add", "br0", L, "tcp", "8080", b4, "80")      # port to a 2nd pod
    net.ctl("forward", "port", "add", "br0", L, "tcp", "6000-6001", b4, "80-81")  # a range
    net.ctl("forward", "port", "add", "br0", L, "udp", "7000-7002", b4, "53")  # many-to-one
    net.ctl("forward", "create", "br0", "2001:db8:f::2")
    net.ctl("forward", "port", "add", "br0", "2001:db8:f::2", "tcp", "8080", b6, "81")
    try:
        forwards = json.loads(net.ctl("forward", "list", "br0", "-f", "json").stdout)
        assert kernel_maps(net.lab.node) == expected_maps(forwards)  # the drop set included
        assert net.elements("fwd_drop_v6") == {"2001:db8:f::2"}
        assert net.talk(net.client, "tcp", L, 8080) == "b"
        assert net.talk(net.client, "tcp", L, 6000) == "b" and net.talk(net.client, "tcp", L, 6001) == "b"
        for port in (7000, 7001, 7002):
            assert net.talk(net.client, "udp", L, port) == "b", port
        assert net.talk(net.client, "tcp", L, 80) == "a"  # not a listed port: the default target
        assert net.talk(net.client, "tcp", "2001:db8:f::2", 8080) == "b"
        with sink(net, "2001:db8:f::2"):  # no default target: dropped, not given to the sink
            assert net.talk(net.client, "tcp", "2001:db8:f::2", 80) == TIMEOUT
            assert net.talk(net.client, "tcp", "2001:db8:f::2", 8080) == "b"
        net.ctl("forward", "port", "remove", "br0", L, "tcp", "8080")
        assert net.talk(net.client, "tcp", L, 8080) == "a"  # the default target took over
    finally:
        net.ctl("forward", "delete", "br0", L)
        net.ctl("forward", "delete", "br0", "2001:db8:f::2")


def test_hairpin_from_the_target_and_from_another_pod_of_the_bridge(net: Net, pods: dict[str, Any]) -> None:
    a4, a6, b4 = pods["a"][1][4], pods["a"][1][6], pods["b"][1][4]
    net.ctl("forward", "create", "br0", "198.51.100.3", f"target_address={a4}")
    net.ctl("forward", "port", "add", "br0", "198.51.100.3", "tcp", "81", b4)
    net.ctl("forward", "create", "br0", "2001:db8:f::3", f"target_address={a6}")
    try:
        for src in ("a", "b"):  # Incus #1175: another instance of the bridge must get through too
            assert net.talk(pods[src][0], "tcp", "198.51.100.3", 80) == "a", src
            assert net.talk(pods[src][0], "udp", "198.51.100.3", 80) == "a", src
            assert net.talk(pods[src][0], "tcp", "198.51.100.3", 81) == "b", src
            assert net.talk(pods[src][0], "tcp", "2001:db8:f::3", 80) == "a", src
    finally:
        net.ctl("forward", "delete", "br0", "198.51.100.3")
        net.ctl("forward", "delete", "br0", "2001:db8:f::3")


def test_hairpin_on_a_ptp_network(net: Net) -> None:
    """Forwards also target pods of a podnet ptp network (the conflist's name)."""
    conf = {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet",
            "ranges": ["10.244.9.0/24", "fd00:244:9::/64"], "dataDir": str(net.data)}
    addrs = {}
    for name in ("p", "q"):
        ns = net.lab.pod(name)
        rc, out = net.lab.cni("ADD", conf, container_id=f"c-{name}", netns=ns)
        assert rc == 0, out
        net.lab.serve(ns, name, 80)
        addrs[name] = (ns, {6 if ":" in i["address"] else 4: i["address"].split("/")[0] for i in out["ips"]})
    assert "kindnet" in net.ctl("list", "-f", "csv").stdout  # the conflist's ptp network
    p4, p6 = addrs["p"][1][4], addrs["p"][1][6]
    net.ctl("forward", "create", "kindnet", "198.51.100.4", f"target_address={p4}")
    net.ctl("forward", "create", "kindnet", "2001:db8:f::4", f"target_address={p6}")
    try:
        assert net.talk(net.client, "tcp", "198.51.100.4", 80) == "p"
        for src in ("p", "q"):
            assert net.talk(addrs[src][0], "tcp", "198.51.100.4", 80) == "p", src
            assert net.talk(addrs[src][0], "tcp", "2001:db8:f::4", 80) == "p", src
    finally:
        net.ctl("forward", "delete", "kindnet", "198.51.100.4")
        net.ctl("forward", "delete", "kindnet", "2001:db8:f::4")
        for name in ("p", "q"):
            net.lab.cni("DEL", conf, container_id=f"c-{name}", netns=addrs[name][0])


def test_snat_address_seen_by_a_server_outside(net: Net, pods: dict[str, Any]) -> None:
    net.lab.serve(net.client, "outside", 9000)
    assert net.lab.talk(pods["a"][0], "tcp", CLIENT_ADDR4, 9000).split(" ")[1].endswith(NODE_ADDR4)
    net.ctl("set", "br0", "ipv4.nat.address=198.51.100.200")
    try:
        seen = net.lab.talk(pods["a"][0], "tcp", CLIENT_ADDR4, 9000).split(" ")[1]
        assert seen.endswith("198.51.100.200"), seen
    finally:
        net.ctl("unset", "br0", "ipv4.nat.address")
    seen = net.lab.talk(pods["a"][0], "tcp", CLIENT_ADDR4, 9000).split(" ")[1]
    assert seen.endswith(NODE_ADDR4), seen


def test_ipv6_snat_address_seen_by_a_server_outside(net: Net, pods: dict[str, Any]) -> None:
    """``ipv6.nat.address``: a pod's IPv6 connection out of the node leaves from that address
    (the server sees it), and from the node's own address again once it is unset."""
    net.lab.serve(net.client, "outside6", 9006)
    assert net.lab.talk(pods["a"][0], "tcp", CLIENT_ADDR6, 9006).split(" ")[1] == NODE_ADDR6
    net.ctl("set", "br0", "ipv6.nat.address=2001:db8:f::200")
    try:
        seen = net.lab.talk(pods["a"][0], "tcp", CLIENT_ADDR6, 9006).split(" ")[1]
        assert seen == "2001:db8:f::200", seen
        seen = net.lab.talk(pods["a"][0], "udp", CLIENT_ADDR6, 9006).split(" ")[1]
        assert seen == "2001:db8:f::200", seen
    finally:
        net.ctl("unset", "br0", "ipv6.nat.address")
    assert net.lab.talk(pods["a"][0], "tcp", CLIENT_ADDR6, 9006).split(" ")[1] == NODE_ADDR6


def _free_address(net: Net) -> str:
    """An address of br0 (10.0.0.0/24) no pod holds now, read from the store (the module's
    pods have random addresses)."""
    out = net.lab.exec(net.lab.node, PODNETCTL, "pods", "--data-dir", str(net.data), "-o", "json")
    held = set(re.findall(r"10\.0\.0\.\d+", out.stdout))
    return next(a for n in range(77, 250) if (a := f"10.0.0.{n}") not in held)


def test_forward_follows_its_address_to_a_new_pod(net: Net) -> None:
    conf = {"cniVersion": "1.1.0", "name": "br0-pods", "type": "podnet", "network": "br0",
            "dataDir": str(net.data)}
    addr = _free_address(net)
    first, _ = net.pod("first", ip=addr)
    net.ctl("forward", "create", "br0", "198.51.100.5", f"target_address={addr}")
    try:
        assert net.talk(net.client, "tcp", "198.51.100.5", 80) == "first"
        rc, out = net.lab.cni("DEL", conf, container_id="c-first", netns=first)
        assert rc == 0, out
        net.pod("second", ip=addr)  # the address moves; the forward is not touched
        assert net.talk(net.client, "tcp", "198.51.100.5", 80) == "second"
    finally:
        net.ctl("forward", "delete", "br0", "198.51.100.5")


def test_restore_after_the_bridge_and_table_were_deleted(net: Net, pods: dict[str, Any]) -> None:
    a4 = pods["a"][1][4]
    net.ctl("forward", "create", "br0", "198.51.100.6", f"target_address={a4}")
    try:
        assert net.talk(net.client, "tcp", "198.51.100.6", 80) == "a"
        net.lab.exec(net.lab.node, "ip", "link", "del", "br0")
        net.lab.exec(net.lab.node, "nft", "delete", "table", "inet", "podnet")
        assert net.talk(net.client, "tcp", "198.51.100.6", 80) == TIMEOUT  # no bridge, no table
        out = net.ctl("restore")
        assert "bridge br0" in out.stdout and "table inet podnet" in out.stdout
        assert net.talk(net.client, "tcp", "198.51.100.6", 80) == "a"
        assert net.talk(pods["b"][0], "tcp", "198.51.100.6", 80) == "a"  # hairpin too
        net.ctl("restore")  # idempotent
        assert net.talk(net.client, "tcp", "198.51.100.6", 80) == "a"
    finally:
        net.ctl("forward", "delete", "br0", "198.51.100.6")


def test_32_parallel_changes_leave_kernel_equal_to_database(net: Net, pods: dict[str, Any]) -> None:
    b4 = pods["b"][1][4]

    def job(i: int) -> tuple[str, int]:
        listen = f"198.51.100.{100 + i}"
        r = net.ctl("forward", "create", "br0", listen, check=False)
        codes = [r.returncode]
        codes.append(net.ctl("forward", "port", "add", "br0", listen, "tcp", str(10000 + i), b4, "80",
                             check=False).returncode)
        if i % 2:
            codes.append(net.ctl("forward", "delete", "br0", listen, check=False).returncode)
        return listen, max(codes)

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(job, range(32)))
    assert [listen for listen, rc in results if rc] == []
    forwards = json.loads(net.ctl("forward", "list", "br0", "-f", "json").stdout)
    listed = sorted(f["listen_address"] for f in forwards if f["listen_address"].startswith("198.51.100.1"))
    assert listed == sorted(f"198.51.100.{100 + i}" for i in range(0, 32, 2))  # none lost or doubled
    want = {f"{f['listen_address']} . tcp . {p['listen_port']} : {p['target_address']} . 80"
            for f in forwards for p in f["ports"]}
    assert net.elements("fwd_v4") == want
    # every map and drop set (none of these forwards has a default target: each listen address
    # is in fwd_drop_v4)
    assert kernel_maps(net.lab.node) == expected_maps(forwards)
    assert net.elements("fwd_drop_v4") >= set(listed)
    for f in forwards:
        net.ctl("forward", "delete", "br0", f["listen_address"])
    assert kernel_maps(net.lab.node) == expected_maps([])
