"""A bridge network's uplink keys on a node without Open vSwitch:
``ipv{4,6}.ovn.ranges`` and ``ipv{4,6}.routes`` parsed where they enter and refused with a
reason (nothing changed); ``ipv{4,6}.routes`` routed onto the bridge and following every change;
a bridge that would be an OVN uplink on a node without OVS refused, leaving nothing. The OVN
side (the bridge joined to OVS, pods and forwards through it) is in test_ovn_networks.py."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from envgate import need
from netns import VENV_BIN, Lab

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")


class Node:
    def __init__(self, lab: Lab, data: Path, rundir: Path) -> None:
        self.lab, self.data, self.rundir = lab, data, rundir

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        # OVS_RUNDIR: an empty directory, so that no OVS is found (the machine's own included)
        return self.lab.exec(self.lab.node, "env", f"OVS_RUNDIR={self.rundir}", PODNETCTL, "network",
                             "--data-dir", str(self.data), "--init", *args, check=False)  # fmt: skip

    def routes(self) -> str:
        """The node's routes but IPv6 link-local ones (those come as links' addresses settle)."""
        out = self.lab.exec(self.lab.node, "ip", "route", "show", "table", "all").stdout
        return "".join(r for r in out.splitlines(keepends=True) if "fe80::" not in r)

    def links(self) -> str:
        return self.lab.exec(self.lab.node, "ip", "-o", "link", "show").stdout

    def networks(self) -> list[str]:
        out = self.ctl("list", "-f", "json")
        assert out.returncode == 0, out.stderr
        return sorted(n["name"] for n in json.loads(out.stdout))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    need("root", "ip", "nft")
    lab = Lab()
    try:
        base = tmp_path_factory.mktemp("uplink")
        (base / "no-ovs").mkdir()
        lab.exec(lab.node, "ip", "route", "add", "10.77.0.0/16", "dev", "lo")  # the node's own
        node = Node(lab, base / "data", base / "no-ovs")
        assert node.ctl("create", "brother", "ipv4.address=10.99.1.1/24", "ipv6.address=none").returncode == 0
        yield node
    finally:
        lab.close()


ADDR = ["ipv4.address=100.64.30.1/24", "ipv6.address=fd00:30::1/64"]


@pytest.mark.parametrize(("keys", "reason"), [
    (["ipv4.ovn.ranges=100.64.31.10-100.64.31.19"], "must lie in the subnet 100.64.30.0/24"),
    (["ipv4.ovn.ranges=100.64.30.1-100.64.30.9"], "without the bridge's address"),
    (["ipv4.ovn.ranges=100.64.30.20-100.64.30.10"], 'Start IP "100.64.30.20" must be less than'),
    (["ipv4.ovn.ranges=100.64.30.10"], "(must be start-end)"),
    (["ipv6.ovn.ranges=100.64.30.10-100.64.30.19"], "Not an IPv6 range"),
    (["ipv4.routes=0.0.0.0/0"], "would take the node's default route"),
    (["ipv6.routes=::/0"], "would take the node's default route"),
    (["ipv4.routes=100.64.30.128/25"], "overlaps the network's own subnet"),
    (["ipv4.routes=10.77.1.0/24"], "overlaps the route to 10.77.0.0/16 (dev lo) of the node"),
    (["ipv4.routes=" + ",".join(f"198.18.{i // 256}.{i % 256}/32" for i in range(257))], "257 routes, at most 256"),
    (["ipv4.routes=198.18.0.0/15;reboot"], 'Invalid network "198.18.0.0/15;reboot"'),
    (["ipv4.address=none", "ipv4.ovn.ranges=100.64.30.10-100.64.30.19"], "has no IPv4 address"),
    (["ipv4.address=none", "ipv4.routes=198.18.60.0/24"], "has no IPv4 address"),
    (["ipv4.routes=10.99.0.0/16"], "10.99.0.0/16 overlaps network \"brother\""),
])  # fmt: skip
def test_bad_uplink_keys_are_refused(node: Node, keys: list[str], reason: str) -> None:
    """Each bad value: exit 1 naming the key's problem; no network, bridge or route made."""
    routes, links = node.routes(), node.links()
    out = node.ctl("create", "brk", *ADDR, *keys)
    assert out.returncode == 1 and reason in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "brk" not in node.networks()
    assert node.routes() == routes and node.links() == links


def test_routes_follow_the_bridge_network(node: Node) -> None:
    """``ipv{4,6}.routes`` become routes ``dev <bridge> proto static``; set replaces them, a
    route overlapping the node's own is refused (409) and changes nothing, unset and delete
    remove them."""
    assert node.ctl("create", "brr", *ADDR, "ipv4.routes=198.18.40.0/24", "ipv6.routes=2001:db8:40::/64").returncode == 0
    try:
        routes = node.routes()
        assert "198.18.40.0/24 dev brr proto static" in routes and "2001:db8:40::/64 dev brr proto static" in routes
        out = node.ctl("set", "brr", "ipv4.routes=198.18.41.0/24,198.18.42.0/24")
        assert out.returncode == 0, out.stderr
        routes = node.routes()
        assert "198.18.40.0/24" not in routes
        assert "198.18.41.0/24 dev brr proto static" in routes and "198.18.42.0/24 dev brr proto static" in routes
        out = node.ctl("set", "brr", "ipv4.routes=10.77.0.0/24")
        assert out.returncode == 1 and "overlaps the route to 10.77.0.0/16" in out.stderr, out.stderr
        assert node.routes() == routes
        assert node.ctl("unset", "brr", "ipv6.routes").returncode == 0
        assert "2001:db8:40::" not in node.routes()
    finally:
        node.ctl("delete", "brr")
    assert "198.18.4" not in node.routes() and " brr:" not in node.links()


def test_an_uplink_bridge_needs_open_vswitch(node: Node) -> None:
    """On a node without OVS a bridge with ``ipv4.ovn.ranges`` is refused naming Open vSwitch
    (create, and set on an existing bridge), and leaves no bridge, veth or route behind."""
    routes, links = node.routes(), node.links()
    out = node.ctl("create", "bru", *ADDR, "ipv4.ovn.ranges=100.64.30.10-100.64.30.19",
                   "ipv4.routes=198.18.50.0/24")  # fmt: skip
    assert out.returncode == 1 and "needs Open vSwitch" in out.stderr, out.stderr
    assert "bru" not in node.networks() and node.routes() == routes and node.links() == links
    assert node.ctl("create", "bru", *ADDR).returncode == 0
    try:
        before = node.links(), node.routes()
        out = node.ctl("set", "bru", "ipv4.ovn.ranges=100.64.30.10-100.64.30.19", "ipv4.routes=198.18.50.0/24")
        assert out.returncode == 1 and "needs Open vSwitch" in out.stderr, out.stderr
        assert (node.links(), node.routes()) == before
        shown = yaml.safe_load(node.ctl("show", "bru").stdout)
        assert "ipv4.ovn.ranges" not in shown["config"], shown
    finally:
        node.ctl("delete", "bru")
