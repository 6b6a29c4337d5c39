"""podnet-portmap's nftables backend: generated text, real traffic after the reference ptp,
ownership when containers share an address, parallel ADD/DEL."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from netns import NODE_ADDR4, NODE_ADDR6, PLUGIN_ENV, REFUSED, Lab, feed_in
from paths import VENV_BIN
from podnet.firewall import portmap_nft
from portmap_helpers import PORTMAP_DATA

REF = "/usr/lib/cni"
PORTMAP = str(VENV_BIN / "podnet-portmap")


# -- in namespaces ------------------------------------------------------------------------------
def _ptp(lab: Lab, cid: str, pod: str, data: Path, v6: bool) -> dict[str, Any]:
    ranges = [[{"subnet": "10.250.0.0/24"}]] + ([[{"subnet": "fd00:250::/64"}]] if v6 else [])
    conf = {"cniVersion": "1.0.0", "name": "pmnet", "type": "ptp", "ipMasq": False,
            "ipam": {"type": "host-local", "ranges": ranges, "dataDir": str(data),
                     "routes": [{"dst": "0.0.0.0/0"}] + ([{"dst": "::/0"}] if v6 else [])}}
    rc, out = lab.cni("ADD", conf, container_id=cid, netns=pod, plugin=f"{REF}/ptp", env={"CNI_PATH": REF})
    assert rc == 0, out
    if v6:  # the reference ptp leaves DAD on: wait until the pod's address is usable
        lab.wait_dad(pod, lab.node)  # the gateway on the host veth goes through DAD too
    return out


def _portmap_conf(prev: dict[str, Any] | None, maps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "pmnet", "type": "podnet-portmap", "backend": "nftables",
                            "capabilities": {"portMappings": True}, "runtimeConfig": {"portMappings": maps},
                            "dataDir": PORTMAP_DATA, **extra}
    if prev is not None:
        conf["prevResult"] = prev
    return conf


def _elements(lab: Lab) -> dict[str, list[Any]]:
    out = lab.exec(lab.node, "nft", "-j", "list", "table", "inet", "podnet_portmap", check=False)
    if out.returncode != 0:
        return {}
    return {i["map"]["name"]: i["map"].get("elem", []) for i in json.loads(out.stdout)["nftables"] if "map" in i}


def _dn_chains(lab: Lab) -> list[str]:
    out = lab.exec(lab.node, "nft", "-j", "list", "table", "inet", "podnet_portmap", check=False)
    if out.returncode != 0:
        return []
    return [i["chain"]["name"] for i in json.loads(out.stdout)["nftables"] if "chain" in i and i["chain"]["name"].startswith("dn-")]


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "dual-stack"])
def test_traffic_after_reference_ptp(lab: Lab, tmp_path: Path, v6: bool) -> None:
    client = lab.client()
    pod, other = lab.pod("a"), lab.pod("b")
    prev = _ptp(lab, "ctr-a", pod, tmp_path / "ipam", v6)
    prev_b = _ptp(lab, "ctr-b", other, tmp_path / "ipam", v6)
    maps = [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 15353, "containerPort": 80, "protocol": "udp"}]
    rc, out = lab.cni("ADD", _portmap_conf(prev, maps), container_id="ctr-a", netns=pod, plugin=PORTMAP)
    assert rc == 0, out
    assert out["ips"] == prev["ips"]  # prevResult passed through
    maps_b = [{"hostPort": 18081, "containerPort": 80, "protocol": "tcp"}]
    rc, out_b = lab.cni("ADD", _portmap_conf(prev_b, maps_b), container_id="ctr-b", netns=other,
                        plugin=PORTMAP)
    assert rc == 0, out_b
    lab.serve(pod, "A", 80)
    lab.serve(other, "B", 80)
    families = {4: NODE_ADDR4, 6: NODE_ADDR6} if v6 else {4: NODE_ADDR4}
    for family, addr in families.items():
        assert lab.talk(client, "tcp", addr, 18080).startswith("A "), family
        assert lab.talk(client, "udp", addr, 15353).startswith("A "), family
        assert lab.talk(pod, "tcp", addr, 18080).startswith("A "), family   # hairpin
        assert lab.talk(other, "tcp", addr, 18080).startswith("A "), family  # another pod
    assert lab.talk(lab.node, "tcp", "127.0.0.1", 18080).startswith("A ")  # route_localnet + masq
    rc, out = lab.cni("CHECK", _portmap_conf(out, maps), container_id="ctr-a", netns=pod, plugin=PORTMAP)
    assert rc == 0, out
    for _ in range(2):  # DEL twice
        rc, out = lab.cni("DEL", _portmap_conf(None, maps), container_id="ctr-a", netns=pod, plugin=PORTMAP)
        assert rc == 0 and out is None, out
    # ctr-a's chain and elements are gone, ctr-b's stay: 18080 now reaches nothing (the node
    # itself refuses it), while 18081 still reaches B — the positive control.
    assert len(_dn_chains(lab)) == 1
    assert lab.talk(client, "tcp", NODE_ADDR4, 18080) == REFUSED
    for family, addr in families.items():
        assert lab.talk(client, "tcp", addr, 18081).startswith("B "), family
    rc, out = lab.cni("DEL", _portmap_conf(None, maps_b), container_id="ctr-b", netns=other, plugin=PORTMAP)
    assert rc == 0 and out is None, out
    assert _dn_chains(lab) == [] and all(not e for e in _elements(lab).values())


def test_shared_address_ownership(lab: Lab, tmp_path: Path) -> None:
    """ADD A, ADD B with A's address (A's DEL never came), DEL A: B keeps its mappings."""
    client = lab.client()
    pod = lab.pod()
    prev = _ptp(lab, "ctr-a", pod, tmp_path / "ipam", False)
    a_maps = [{"hostPort": 18080, "containerPort": 80}]
    b_maps = [{"hostPort": 18081, "containerPort": 80}, {"hostPort": 18080, "containerPort": 80}]
    assert lab.cni("ADD", _portmap_conf(prev, a_maps), container_id="ctr-a", netns=pod, plugin=PORTMAP)[0] == 0
    rc, out = lab.cni("ADD", _portmap_conf(prev, b_maps), container_id="ctr-b", netns=pod, plugin=PORTMAP)
    assert rc == 0, out
    rc, out = lab.cni("DEL", _portmap_conf(None, a_maps), container_id="ctr-a", netns=pod, plugin=PORTMAP)
    assert rc == 0, out
    lab.serve(pod, "B", 80)
    assert lab.talk(client, "tcp", NODE_ADDR4, 18081).startswith("B ")
    assert lab.talk(client, "tcp", NODE_ADDR4, 18080).startswith("B ")  # the newest ADD owns 18080
    assert _dn_chains(lab) == [portmap_nft.chain_name("pmnet", "ctr-b")]


def test_no_port_mappings_runs_no_firewall_command(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    prev = _ptp(lab, "ctr-a", pod, tmp_path / "ipam", False)
    log = tmp_path / "calls"
    fake = tmp_path / "fakebin"
    fake.mkdir()
    for tool in ("nft", "iptables-save", "iptables-restore", "ip6tables-save", "ip6tables-restore", "conntrack"):
        (fake / tool).write_text(f"#!/bin/sh\necho {tool} >> {log}\nexit 1\n")
        (fake / tool).chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}"}
    rc, out = lab.cni("ADD", _portmap_conf(prev, []), container_id="ctr-a", netns=pod, plugin=PORTMAP, env=env)
    assert rc == 0 and out["ips"] == prev["ips"]
    rc, out = lab.cni("DEL", _portmap_conf(None, []), container_id="ctr-a", netns=pod, plugin=PORTMAP, env=env)
    assert rc == 0
    assert not log.exists()


def test_parallel_add_del_leaves_only_the_base(lab: Lab, tmp_path: Path) -> None:
    n = 32
    pods = [lab.pod(f"p{i}-") for i in range(n)]
    prevs = [_ptp(lab, f"c{i}", pods[i], tmp_path / "ipam", False) for i in range(n)]

    def start(command: str, i: int, prev: dict[str, Any] | None) -> subprocess.Popen[str]:
        conf = _portmap_conf(prev, [{"hostPort": 21000 + i, "containerPort": 80}])
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": f"c{i}", "CNI_NETNS": f"/run/netns/{pods[i]}",
               "CNI_IFNAME": "eth0", "CNI_PATH": REF, "PATH": os.environ["PATH"], **PLUGIN_ENV}
        return feed_in(lab.node, PORTMAP, env, json.dumps(conf))

    procs = [start("ADD", i, prevs[i]) for i in range(n)]
    assert all(p.wait(timeout=120) == 0 for p in procs), [p.stdout.read() for p in procs if p.returncode]  # type: ignore[union-attr]
    assert len(_dn_chains(lab)) == n
    assert len(_elements(lab)["dispatch_any_v4"]) == n
    procs = [start("DEL", i, None) for i in range(n)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert _dn_chains(lab) == [] and all(not e for e in _elements(lab).values())
