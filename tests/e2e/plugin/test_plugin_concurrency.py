"""64 ADDs and 64 DELs as parallel processes, GC and STATUS."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from netns import PLUGIN, PLUGIN_ENV, Lab, feed_in
from plugin_calls import db_rows, host_veths, map_elements, netconf

pytestmark = pytest.mark.root

N = 64


def _call(lab: Lab, command: str, conf: dict, cid: str, netns: str | None) -> subprocess.Popen[str]:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/run/netns/{netns}" if netns else "",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", "PATH": os.environ["PATH"],
           **PLUGIN_ENV}
    return feed_in(lab.node, PLUGIN, env, json.dumps(conf))


def _all(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        assert p.stdout is not None
        text = p.stdout.read()
        out.append((p.wait(timeout=120), text))
    return out


def test_parallel_add_then_parallel_del(lab: Lab, tmp_path: Path) -> None:
    with ThreadPoolExecutor(16) as pool:
        pods = list(pool.map(lambda i: lab.pod(f"p{i}-"), range(N)))
    confs = [netconf(tmp_path, ranges=["10.244.0.0/16", "fd00:10:244::/64"],
                     mappings=[{"hostPort": 20000 + i, "containerPort": 80,
                                "protocol": "udp" if i % 2 else "tcp"}]) for i in range(N)]
    # The first call creates the database; the rest race on it.
    results = _all([_call(lab, "ADD", confs[i], f"c{i}", pods[i]) for i in range(N)])
    failures = [(rc, out) for rc, out in results if rc != 0]
    assert not failures, failures[:3]
    addresses = [json.loads(out)["ips"][0]["address"] for _, out in results]
    assert len(set(addresses)) == N
    assert len(db_rows(tmp_path, "pods")) == N
    assert len(db_rows(tmp_path, "portmap_entries")) == 2 * N  # wildcard → one per family
    assert len(host_veths(lab)) == N
    elements = map_elements(lab)
    assert all(str(20000 + i) in elements for i in range(N))

    results = _all([_call(lab, "DEL", confs[i], f"c{i}", pods[i]) for i in range(N)])
    assert all(rc == 0 for rc, _ in results), [r for r in results if r[0]][:3]
    assert db_rows(tmp_path, "pods") == [] and db_rows(tmp_path, "portmap_entries") == []
    assert host_veths(lab) == []
    assert not any(str(20000 + i) in map_elements(lab) for i in range(N))


def test_gc_removes_what_is_not_valid(lab: Lab, tmp_path: Path) -> None:
    conf = netconf(tmp_path, mappings=[{"hostPort": 8080, "containerPort": 80}])
    pods = [lab.pod() for _ in range(3)]
    for i, pod in enumerate(pods):
        conf_i = netconf(tmp_path, mappings=[{"hostPort": 8080 + i, "containerPort": 80}])
        assert lab.cni("ADD", conf_i, container_id=f"c{i}", netns=pod)[0] == 0
    # A leaked podnet veth with no row, and a foreign veth that GC must not touch.
    lab.exec(lab.node, "ip", "link", "add", "pnleaked0", "type", "veth", "peer", "name", "x0")
    lab.exec(lab.node, "ip", "link", "set", "pnleaked0", "alias", f"podnet:{tmp_path}")
    lab.exec(lab.node, "ip", "link", "add", "pnforeign0", "type", "veth", "peer", "name", "x1")
    gc = {**conf, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]}
    rc, out = lab.cni("GC", gc)
    assert rc == 0 and out is None, out
    assert [r[0] for r in db_rows(tmp_path, "pods")] == ["c1"]
    veths = host_veths(lab)
    assert len(veths) == 2 and "pnleaked0" not in veths and "pnforeign0" in veths
    elements = map_elements(lab)
    assert "8081" in elements and "8080" not in elements and "8082" not in elements


def test_status_answers_50_when_full(lab: Lab, tmp_path: Path) -> None:
    conf = netconf(tmp_path, ranges=["10.98.0.0/29"])  # 5 usable addresses
    assert lab.cni("STATUS", conf) == (0, None)
    for i in range(5):
        assert lab.cni("ADD", conf, container_id=f"c{i}", netns=lab.pod())[0] == 0
    rc, out = lab.cni("STATUS", conf)
    assert rc != 0 and out["code"] == 50 and "10.98.0.0/29" in out["msg"]
    assert lab.cni("DEL", conf, container_id="c0")[0] == 0
    assert lab.cni("STATUS", conf) == (0, None)
