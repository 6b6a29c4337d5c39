"""What ``podnetctl network list``/``show`` and ``network restore`` say about the node's real
state: a bridge network whose bridge was deleted or set down behind podnet's back is
``Unavailable`` (LXD's status for a network that cannot start on this server), not ``Created``;
``restore`` names what it changed (a bridge made again, an address added, a port put back, the
table made again or rebuilt) and what was already as the store has it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from envgate import need
from netns import VENV_BIN, Lab

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")


class Node:
    def __init__(self, lab: Lab, data: Path) -> None:
        self.lab, self.data = lab, data

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        out = self.lab.exec(self.lab.node, PODNETCTL, "network", "--data-dir", str(self.data),
                            "--init", *args, check=False)  # fmt: skip
        assert out.returncode == 0, f"podnetctl network {' '.join(args)}: {out.stderr}"
        return out

    def ip(self, *args: str) -> None:
        self.lab.exec(self.lab.node, "ip", *args)

    def state(self, name: str) -> str:
        """The STATE column of ``network list`` (csv) for ``name``."""
        rows = [r.split(",") for r in self.ctl("list", "--format", "csv").stdout.splitlines()]
        return next(r[-1] for r in rows if r[0] == name)

    def restore(self) -> list[str]:
        return self.ctl("restore").stdout.splitlines()


@pytest.fixture
def node(tmp_path: Path) -> Node:
    need("root", "ip", "nft")
    lab = Lab()
    try:
        yield Node(lab, tmp_path / "data")  # type: ignore[misc]
    finally:
        lab.close()


def test_list_and_show_say_unavailable_while_the_bridge_is_gone_or_down(node: Node) -> None:
    name = f"s{node.lab.tag}"
    node.ctl("create", name, "ipv4.address=10.62.0.1/24", "ipv6.address=none")
    assert node.state(name) == "CREATED"
    node.ip("link", "del", name)
    assert node.state(name) == "UNAVAILABLE"
    shown = node.ctl("show", name)
    assert yaml.safe_load(shown.stdout)["status"] == "Unavailable"
    assert f"network {name} is unavailable on this node" in shown.stderr
    assert "podnetctl network restore" in shown.stderr
    node.ctl("restore")
    assert node.state(name) == "CREATED"
    node.ip("link", "set", name, "down")
    assert node.state(name) == "UNAVAILABLE"
    node.ctl("restore")
    assert node.state(name) == "CREATED"
    # a link of its name that podnet did not make does not count as the network's bridge
    node.ip("link", "del", name)
    node.ip("link", "add", name, "type", "bridge")
    node.ip("link", "set", name, "up")
    assert node.state(name) == "UNAVAILABLE"


def test_restore_names_what_it_changed_and_what_was_already_fine(node: Node) -> None:
    name = f"r{node.lab.tag}"
    node.ctl("create", name, "ipv4.address=10.63.0.1/24", "ipv6.address=fd00:63::1/64")
    pod = node.lab.pod("p")
    conf = {"cniVersion": "1.1.0", "name": f"{name}-pods", "type": "podnet", "network": name,
            "dataDir": str(node.data)}  # fmt: skip
    rc, out = node.lab.cni("ADD", conf, container_id=f"c-{node.lab.tag}", netns=pod)
    assert rc == 0, out
    host = next(i["name"] for i in out["interfaces"] if not i.get("sandbox"))
    addrs = "10.63.0.1/24, fd00:63::1/64"

    assert node.restore() == [f"bridge {name}: already up with its addresses ({addrs})",
                              f"  port {host}: already on it",
                              "table inet podnet: already as the store has it"]  # fmt: skip

    node.ip("link", "del", name)  # the pod's host end is released with it
    node.lab.exec(node.lab.node, "nft", "delete", "table", "inet", "podnet")
    assert node.restore() == [f"bridge {name}: made again ({addrs})",
                              f"  port {host}: put back on it",
                              "table inet podnet: made again from the store"]  # fmt: skip
    master = json.loads(node.lab.exec(node.lab.node, "ip", "-j", "link", "show", host).stdout)
    assert master[0]["master"] == name

    node.ip("addr", "del", "10.63.0.1/24", "dev", name)
    node.ip("link", "set", name, "down")
    node.lab.exec(node.lab.node, "nft", "add", "chain", "inet", "podnet", "stray")
    left = node.lab.exec(node.lab.node, "ip", "-j", "addr", "show", "dev", name, "scope", "global")
    have = {
        f"{a['local']}/{a['prefixlen']}" for x in json.loads(left.stdout) for a in x["addr_info"]
    }
    assert "10.63.0.1/24" not in have  # down also drops the IPv6 address unless keep_addr_on_down
    added = ", ".join(a for a in ("10.63.0.1/24", "fd00:63::1/64") if a not in have)
    assert node.restore() == [f"bridge {name}: added {added}; set up",
                              f"  port {host}: already on it",
                              "table inet podnet: rebuilt from the store (it differed)"]  # fmt: skip
    listed = node.lab.exec(node.lab.node, "nft", "list", "table", "inet", "podnet").stdout
    assert "stray" not in listed

    node.ip("link", "del", host)  # the pod's veth gone: named, not made up
    assert f"  port {host}: gone (its pod needs a new ADD)" in node.restore()
