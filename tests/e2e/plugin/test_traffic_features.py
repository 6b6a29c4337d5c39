"""Traffic for every feature: what a namespace outside the node sees.

- podnet's ``ipMasq`` on and off, IPv4 and IPv6: the source address a server in the client
  namespace sees for a pod's connection (the node's, or the pod's own); pod to pod on the node
  is never masqueraded;
- a bridge network's ``ipv6.nat`` true and false: the same for a pod of the bridge;
- every change of a bridge network's settings with traffic before and after, made with
  ``podnetctl network set|unset``: ``ipv4.address`` (refused while a pod uses the subnet, done
  once it is free, a new pod's traffic after), ``bridge.mtu`` (the link's MTU and datagrams with
  Don't Fragment that fit or not), ``ipv4.nat`` on → off → on → unset;
- the ``conntrack`` tool fallback when podnet's in-process ctnetlink flush fails for real (the
  plugin runs without CAP_NET_ADMIN while its tools keep it; see :class:`NoNetAdmin`): the tool
  runs and the stale UDP entry of a hostPort is gone, so new UDP traffic reaches the pod.

Every probe reports what happened (an answer with the peer address the server saw, a timeout, a
refusal, "too big" with the path MTU) instead of an empty string for "blocked".
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from netns import (
    CLIENT_ADDR4,
    CLIENT_ADDR6,
    ECHO,
    NODE_ADDR4,
    NODE_ADDR6,
    VENV_BIN,
    Lab,
    sh,
)
from nonetadmin import NoNetAdmin
from paths import SUPPORT

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")
DFPROBE = str(SUPPORT / "dfprobe.py")
OUTSIDE_PORT = 9000  # the echo server in the client namespace
POD_PORT = 80  # the echo server in pods


class Reply(NamedTuple):
    """What a probe got: ``outcome`` is ``answer``, ``timeout``, ``refused``, ``unreachable`` or
    ``error``; for an answer, the server's ``name`` and the ``peer`` address it saw (IPv4
    without the ``::ffff:`` of the dual-stack server), else the client's last error line."""

    outcome: str
    name: str = ""
    peer: str = ""


def ask(lab: Lab, ns: str, proto: str, host: str, port: int, sport: int = 0) -> Reply:
    """Ask the echo server at host:port from ``ns`` (tests/support/echo.py client)."""
    extra = [str(sport)] if sport else []
    out = lab.exec(ns, sys.executable, ECHO, proto, host, str(port), *extra, check=False, timeout=30)
    if out.returncode == 0:
        name, _, peer = out.stdout.strip().partition(" ")
        return Reply("answer", name, peer.removeprefix("::ffff:"))
    err = out.stderr.strip()
    last = err.splitlines()[-1] if err else f"exit status {out.returncode}"
    if "timed out" in err or "no answer" in err:
        return Reply("timeout", peer=last)
    if "ConnectionRefused" in err:
        return Reply("refused", peer=last)
    if "unreachable" in err.lower():
        return Reply("unreachable", peer=last)
    return Reply("error", peer=last)


def df_probe(lab: Lab, ns: str, host: str, size: int, port: int = POD_PORT) -> str:
    """One UDP datagram of ``size`` payload bytes with Don't Fragment to the echo server at
    host:port: ``answer <name> <peer>``, ``too-big mtu=N``, ``timeout``, ``refused``, …"""
    out = lab.exec(ns, sys.executable, DFPROBE, host, str(port), str(size), check=False, timeout=30)
    return out.stdout.strip() or f"no output (exit {out.returncode}): {out.stderr.strip()}"


def link_mtu(lab: Lab, ns: str, dev: str) -> int:
    shown = sh("ip", "-n", ns, "-o", "link", "show", "dev", dev).stdout
    found = re.search(r" mtu (\d+) ", shown)
    assert found, shown
    return int(found.group(1))


def global_addresses(lab: Lab, ns: str, dev: str) -> list[str]:
    out = sh("ip", "-n", ns, "-o", "addr", "show", "dev", dev, "scope", "global").stdout
    return [line.split()[3] for line in out.splitlines()]


def wait_no_tentative(lab: Lab, namespaces: tuple[str, ...], dev: str, deadline: float = 20) -> None:
    """Wait until ``dev`` has no tentative IPv6 address (its link-local is under DAD for a
    second or two after the lab made it; until then the first IPv6 packets through it wait
    for neighbour discovery past the echo client's timeout)."""
    end = time.monotonic() + deadline
    for ns in namespaces:
        while True:
            left = sh("ip", "-n", ns, "-6", "-o", "addr", "show", "dev", dev, "tentative").stdout.strip()
            if not left:
                break
            assert time.monotonic() < end, f"{ns} {dev}: still tentative after {deadline} s: {left}"
            time.sleep(0.05)


def addresses(result: dict[str, Any]) -> dict[int, str]:
    """{4: …, 6: …} of a CNI result."""
    return {6 if ":" in i["address"] else 4: i["address"].split("/")[0] for i in result["ips"]}


class Node:
    """The lab's node with a client namespace (serving ``outside`` on OUTSIDE_PORT) and helpers
    for pods, ``podnetctl network`` and routes from the client to pod subnets via the node."""

    def __init__(self, lab: Lab, data: Path) -> None:
        self.lab, self.data = lab, data
        self.client = lab.client()
        wait_no_tentative(lab, (lab.node, self.client), "up0")
        lab.serve(self.client, "outside", OUTSIDE_PORT)

    def route_to(self, *cidrs: str) -> None:
        """Routes in the client to ``cidrs`` through the node (for replies to unmasqueraded
        pods, and so a missing masquerade shows as the pod's address rather than a timeout)."""
        for cidr in cidrs:
            via = NODE_ADDR6 if ":" in cidr else NODE_ADDR4
            sh("ip", "-n", self.client, "route", "add", cidr, "via", via)

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = self.lab.exec(self.lab.node, PODNETCTL, "network", "--data-dir", str(self.data), "--init",
                            *args, check=False)  # fmt: skip
        if check:
            assert out.returncode == 0, f"podnetctl network {' '.join(args)}: {out.stderr}"
        return out

    def bridge_conf(self, network: str = "br0") -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": f"{network}-pods", "type": "podnet",
                "network": network, "dataDir": str(self.data)}  # fmt: skip

    def pod(self, name: str, conf: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A pod added with ``conf``, serving its name on POD_PORT; (netns, CNI result)."""
        ns = self.lab.pod(name)
        rc, out = self.lab.cni("ADD", conf, container_id=f"c-{name}", netns=ns)
        assert rc == 0, out
        self.lab.serve(ns, name, POD_PORT)
        return ns, out

    def delete(self, name: str, ns: str, conf: dict[str, Any]) -> None:
        rc, out = self.lab.cni("DEL", conf, container_id=f"c-{name}", netns=ns)
        assert rc == 0, out

    def outside_sees(self, pod_ns: str, family: int, proto: str = "tcp") -> Reply:
        """What the server in the client namespace answers the pod."""
        return ask(self.lab, pod_ns, proto, CLIENT_ADDR4 if family == 4 else CLIENT_ADDR6, OUTSIDE_PORT)


@pytest.fixture
def node(lab: Lab, tmp_path: Path) -> Node:
    return Node(lab, tmp_path / "data")


# --- 1. podnet's ipMasq ----------------------------------------------------------------------------

PTP_RANGES = ["10.244.7.0/24", "fd00:244:7::/64"]


@pytest.mark.parametrize("ip_masq", [True, False], ids=["ipMasq-on", "ipMasq-off"])
def test_ipmasq_source_seen_outside_and_pod_to_pod(node: Node, ip_masq: bool) -> None:
    """The outside server sees the node's address with ipMasq (IPv4 and IPv6: podnet puts both
    families of a range in its egress set), the pod's own without; a pod on the same node always
    sees the other pod's own address."""
    conf = {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet", "ranges": PTP_RANGES,
            "dataDir": str(node.data), "ipMasq": ip_masq}  # fmt: skip
    node.route_to(*PTP_RANGES)
    a_ns, a_res = node.pod("a", conf)
    b_ns, b_res = node.pod("b", conf)
    a, b = addresses(a_res), addresses(b_res)
    node_addr = {4: NODE_ADDR4, 6: NODE_ADDR6}
    for family in (4, 6):
        want = node_addr[family] if ip_masq else a[family]
        for proto in ("tcp", "udp"):
            assert node.outside_sees(a_ns, family, proto) == Reply("answer", "outside", want), (family, proto)
        # pod A → pod B on the same node: never masqueraded
        assert ask(node.lab, a_ns, "tcp", b[family], POD_PORT) == Reply("answer", "b", a[family]), family
        assert ask(node.lab, b_ns, "udp", a[family], POD_PORT) == Reply("answer", "a", b[family]), family


# --- 2. IPv6 NAT of a bridge network ----------------------------------------------------------------


@pytest.mark.parametrize("nat", [True, False], ids=["ipv6.nat-true", "ipv6.nat-false"])
def test_bridge_ipv6_nat_source_seen_outside(node: Node, nat: bool) -> None:
    """A pod of a bridge network reaches an outside IPv6 server: the server sees the node's
    address with ipv6.nat=true, the pod's with false (IPv4 NAT stays on, as a control)."""
    node.ctl("create", "br0", "ipv4.address=10.0.5.1/24", "ipv4.nat=true",
             "ipv6.address=fd00:5::1/64", f"ipv6.nat={str(nat).lower()}")  # fmt: skip
    node.route_to("10.0.5.0/24", "fd00:5::/64")
    ns, res = node.pod("a", node.bridge_conf())
    a = addresses(res)
    assert a[6].startswith("fd00:5::"), a
    for proto in ("tcp", "udp"):
        assert node.outside_sees(ns, 6, proto) == Reply("answer", "outside", NODE_ADDR6 if nat else a[6]), proto
    assert node.outside_sees(ns, 4) == Reply("answer", "outside", NODE_ADDR4)


# --- 3. changes of a bridge network's settings -------------------------------------------------------


def test_bridge_ipv4_address_move(node: Node) -> None:
    """Moving the IPv4 subnet is refused while a pod uses it (bridge and traffic unchanged),
    done once the pod is gone; a new pod then gets an address of the new subnet, and its
    egress is masqueraded (the NAT follows the subnet)."""
    node.ctl("create", "br0", "ipv4.address=10.0.6.1/24", "ipv4.nat=true", "ipv6.address=none")
    node.route_to("10.0.6.0/24", "10.0.7.0/24")
    conf = node.bridge_conf()
    a_ns, a_res = node.pod("a", conf)
    assert addresses(a_res)[4].startswith("10.0.6."), a_res
    assert node.outside_sees(a_ns, 4) == Reply("answer", "outside", NODE_ADDR4)

    refused = node.ctl("set", "br0", "ipv4.address=10.0.7.1/24", check=False)
    assert refused.returncode != 0, refused.stdout
    assert "Cannot change the IPv4 subnet" in refused.stderr and "while pods" in refused.stderr, refused.stderr
    assert node.ctl("get", "br0", "ipv4.address").stdout.strip() == "10.0.6.1/24"
    assert global_addresses(node.lab, node.lab.node, "br0") == ["10.0.6.1/24"]
    assert node.outside_sees(a_ns, 4) == Reply("answer", "outside", NODE_ADDR4)  # still works

    node.delete("a", a_ns, conf)
    node.ctl("set", "br0", "ipv4.address=10.0.7.1/24")
    assert node.ctl("get", "br0", "ipv4.address").stdout.strip() == "10.0.7.1/24"
    assert global_addresses(node.lab, node.lab.node, "br0") == ["10.0.7.1/24"]
    b_ns, b_res = node.pod("b", conf)
    b4 = addresses(b_res)[4]
    assert b4.startswith("10.0.7."), b_res
    assert ask(node.lab, node.client, "tcp", b4, POD_PORT) == Reply("answer", "b", CLIENT_ADDR4)
    for proto in ("tcp", "udp"):
        assert node.outside_sees(b_ns, 4, proto) == Reply("answer", "outside", NODE_ADDR4), proto


BIG, SMALL = 1400, 1252  # UDP payload bytes: 1428 and 1280 bytes of IPv4 packet


def test_bridge_mtu_set(node: Node) -> None:
    """``bridge.mtu`` sets the bridge's MTU: a datagram with Don't Fragment from the client to
    a pod that fitted before no longer does ("fragmentation needed", path MTU 1280) while one of
    1280 bytes does; a pod added after gets the bridge's MTU on its eth0, and cannot send more."""
    node.ctl("create", "br0", "ipv4.address=10.0.8.1/24", "ipv4.nat=true", "ipv6.address=none")
    node.route_to("10.0.8.0/24")
    conf = node.bridge_conf()
    a_ns, a_res = node.pod("a", conf)
    a4 = addresses(a_res)[4]
    assert link_mtu(node.lab, node.lab.node, "br0") == 1500
    assert df_probe(node.lab, node.client, a4, BIG) == f"answer a {CLIENT_ADDR4}"

    node.ctl("set", "br0", "bridge.mtu=1280")
    assert node.ctl("get", "br0", "bridge.mtu").stdout.strip() == "1280"
    assert link_mtu(node.lab, node.lab.node, "br0") == 1280
    assert df_probe(node.lab, node.client, a4, BIG) == "too-big mtu=1280"
    assert df_probe(node.lab, node.client, a4, SMALL) == f"answer a {CLIENT_ADDR4}"

    b_ns, b_res = node.pod("b", conf)
    b4 = addresses(b_res)[4]
    assert link_mtu(node.lab, b_ns, "eth0") == 1280
    assert b_res["interfaces"][1]["mtu"] == 1280
    assert df_probe(node.lab, b_ns, CLIENT_ADDR4, SMALL, OUTSIDE_PORT) == f"answer outside {NODE_ADDR4}"
    assert df_probe(node.lab, b_ns, CLIENT_ADDR4, SMALL + 1, OUTSIDE_PORT) == "too-big mtu=1280"
    assert df_probe(node.lab, node.client, b4, SMALL) == f"answer b {CLIENT_ADDR4}"


def test_bridge_mtu_unset_restores_the_default(node: Node) -> None:
    """``unset bridge.mtu`` gives the bridge the default (1500, networks/config.py and LXD):
    a pod added after carries 1428-byte datagrams with Don't Fragment from the client again."""
    node.ctl("create", "br0", "ipv4.address=10.0.8.1/24", "ipv4.nat=true", "ipv6.address=none",
             "bridge.mtu=1280")  # fmt: skip
    node.route_to("10.0.8.0/24")
    conf = node.bridge_conf()
    a_ns, a_res = node.pod("a", conf)
    assert link_mtu(node.lab, node.lab.node, "br0") == 1280
    assert df_probe(node.lab, node.client, addresses(a_res)[4], BIG) == "too-big mtu=1280"

    node.ctl("unset", "br0", "bridge.mtu")
    assert node.ctl("get", "br0", "bridge.mtu").stdout.strip() == ""
    # a new pod: the client's path MTU cache holds 1280 for pod A's address
    b_ns, b_res = node.pod("b", conf)
    assert link_mtu(node.lab, node.lab.node, "br0") == 1500
    assert link_mtu(node.lab, b_ns, "eth0") == 1500
    assert df_probe(node.lab, node.client, addresses(b_res)[4], BIG) == f"answer b {CLIENT_ADDR4}"


def test_bridge_ipv4_nat_on_off_on_unset(node: Node) -> None:
    """``ipv4.nat`` true → false → true → unset (off): the outside server sees the node's
    address, then the pod's, the node's, the pod's; IPv6 (NAT on throughout) is untouched."""
    node.ctl("create", "br0", "ipv4.address=10.0.9.1/24", "ipv4.nat=true",
             "ipv6.address=fd00:9::1/64", "ipv6.nat=true")  # fmt: skip
    node.route_to("10.0.9.0/24", "fd00:9::/64")
    ns, res = node.pod("a", node.bridge_conf())
    a4 = addresses(res)[4]
    steps: list[tuple[tuple[str, ...], str]] = [
        ((), NODE_ADDR4),
        (("set", "br0", "ipv4.nat=false"), a4),
        (("set", "br0", "ipv4.nat=true"), NODE_ADDR4),
        (("unset", "br0", "ipv4.nat"), a4),
    ]
    for change, want in steps:
        if change:
            node.ctl(*change)
        for proto in ("tcp", "udp"):
            assert node.outside_sees(ns, 4, proto) == Reply("answer", "outside", want), (change, proto)
        assert node.outside_sees(ns, 6) == Reply("answer", "outside", NODE_ADDR6), change


# --- 4. the conntrack tool when ctnetlink fails ------------------------------------------------------


def test_conntrack_tool_fallback_flushes_stale_udp_entry(lab: Lab, tmp_path: Path) -> None:
    """ADD of a pod with a UDP hostPort, by a plugin whose ctnetlink requests fail (EPERM):
    the ``conntrack`` tool runs, the stale entry of the port (real UDP from the client to a
    listener on the node, before the pod existed) is gone, and the same 5-tuple reaches the pod.

    IPv6: an IPv4 ADD writes ``net.ipv4.ip_forward``, which the kernel lets only CAP_NET_ADMIN
    write (even the same value), so it cannot run without that capability; the IPv6 ADD reads
    ``all.forwarding`` first (the first, unrestricted ADD turned it on) and writes only
    sysctls that need no capability."""
    client = lab.client()
    wait_no_tentative(lab, (lab.node, client), "up0")
    data = tmp_path / "data"
    conf_of: Any = lambda maps: {  # noqa: E731
        "cniVersion": "1.1.0", "name": "kindnet", "type": "podnet", "ranges": ["fd00:244:3::/64"],
        "dataDir": str(data), "capabilities": {"portMappings": True},
        "runtimeConfig": {"portMappings": maps}}  # fmt: skip
    other = conf_of([{"hostPort": 1, "containerPort": 1}])
    rc, out = lab.cni("ADD", other, container_id="other", netns=lab.pod())  # nat table: conntrack on
    assert rc == 0, out
    cut = NoNetAdmin(tmp_path)

    # The fault is what it claims: ctnetlink fails under the prefix, the traced tool works.
    netlink = lab.exec(lab.node, *cut.prefix, str(VENV_BIN / "python"), "-c",
                       "from podnet.firewall.conntrack import flush_netlink; flush_netlink([(6, 1)])",
                       check=False)  # fmt: skip
    assert netlink.returncode != 0 and "PermissionError" in netlink.stderr, netlink.stderr
    tool = lab.exec(lab.node, *cut.prefix, "env", f"PATH={cut.trace.path}", "conntrack", "-L", check=False)
    assert tool.returncode == 0, tool.stderr
    flushed = lab.exec(lab.node, str(VENV_BIN / "python"), "-c",
                       "from podnet.firewall.conntrack import flush_netlink; flush_netlink([(6, 1)])",
                       check=False)  # fmt: skip
    assert flushed.returncode == 0, flushed.stderr  # with CAP_NET_ADMIN netlink works

    lab.serve(lab.node, "NODE", 15353)
    assert ask(lab, client, "udp", NODE_ADDR6, 15353, sport=40000) == Reply("answer", "NODE", CLIENT_ADDR6)
    stale = lab.exec(lab.node, "conntrack", "-L", "-f", "ipv6", "-p", "udp", "--orig-port-dst", "15353")
    assert "dport=15353" in stale.stdout and "sport=40000" in stale.stdout, stale.stdout + stale.stderr

    pod = lab.pod()
    lab.serve(pod, "POD", 53)
    conf = conf_of([{"hostPort": 15353, "containerPort": 53, "protocol": "udp"}])
    mark = cut.trace.mark()
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod, plugin=str(cut.plugin), env=cut.env)
    assert rc == 0, res
    calls = cut.trace.calls(mark)
    assert "CALL conntrack [-D] [-f] [ipv6] [-p] [udp] [--orig-port-dst] [15353]" in calls, calls
    assert any(c.startswith("CALL nft ") for c in calls), calls  # the trace saw the ADD's tools
    left = lab.exec(lab.node, "conntrack", "-L", "-f", "ipv6", "-p", "udp", "--orig-port-dst", "15353")
    assert "dport=15353" not in left.stdout, left.stdout
    assert ask(lab, client, "udp", NODE_ADDR6, 15353, sport=40000) == Reply("answer", "POD", CLIENT_ADDR6)
    rc, out = lab.cni("DEL", conf, container_id="c1", netns=pod)
    assert rc == 0, out
