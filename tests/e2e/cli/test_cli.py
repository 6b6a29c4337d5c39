"""``podnetctl net …`` driving the installed plugin inside a node namespace: a pod's lifecycle
(ADD, CHECK, DEL with a cached result) and GC keeping only cached attachments. Help texts,
errors, install and the state views: tests/unit/cli/."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cli_calls import PODNETCTL
from podnet.runtime import ResultCache


# -- real runs inside a node namespace ------------------------------------------------------------
class Node:
    """podnetctl run inside the lab's node namespace with tmp NETCONFPATH/CNI_PATH/cache."""

    def __init__(self, lab: Any, tmp: Path) -> None:
        self.lab, self.tmp = lab, tmp
        self.env = {
            "NETCONFPATH": str(tmp / "net.d"),
            "CNI_PATH": str(tmp / "bin"),
            "PODNETCTL_CACHE_DIR": str(tmp / "cache"),
            "PODNET_CONF": str(tmp / "podnet.conf"),  # written by install --data-dir below
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        subprocess.run(
            [
                PODNETCTL,
                "install",
                "--bin-dir",
                str(tmp / "bin"),
                "--conf-dir",
                str(tmp / "net.d"),
                "--range",
                "10.244.9.0/24",
                "--range",
                "fd00:9::/64",
                "--data-dir",
                str(tmp / "data"),
                "--node-conf",
                str(tmp / "podnet.conf"),
            ],
            check=True,
            capture_output=True,
        )

    def ctl(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        argv = [
            "ip",
            "netns",
            "exec",
            self.lab.node,
            "env",
            "-i",
            *(f"{k}={v}" for k, v in {**self.env, **env}.items()),
            PODNETCTL,
            *args,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.root
def test_net_lifecycle_in_node_namespace(lab: Any, tmp_path: Path) -> None:
    node = Node(lab, tmp_path)
    pod = lab.pod()
    add = node.ctl(
        "net",
        "add",
        "podnet",
        f"/run/netns/{pod}",
        "--port",
        "8080:80",
        "--port",
        "127.0.0.1:5353:53/udp",
        CNI_ARGS="K8S_POD_NAME=web",
    )
    assert add.returncode == 0, add.stderr
    result = json.loads(add.stdout)
    assert result["cniVersion"] == "1.1.0"
    assert {ip["address"].split("/")[0].split(".")[0] for ip in result["ips"]} >= {"10"}
    ports = json.loads(node.ctl("ports", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
    assert {(p["host_ip"], p["host_port"], p["protocol"]) for p in ports} == {
        ("0.0.0.0", 8080, "tcp"),
        ("::", 8080, "tcp"),
        ("127.0.0.1", 5353, "udp"),
    }
    pods = json.loads(node.ctl("pods", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
    assert [p["name"] for p in pods] == ["web"]
    entries = ResultCache(str(tmp_path / "cache")).entries("podnet")
    assert len(entries) == 1 and entries[0].container_id.startswith("cnitool-")

    check = node.ctl("net", "check", "podnet", f"/run/netns/{pod}")
    assert check.returncode == 0 and check.stdout == "", check.stderr
    status = node.ctl("net", "status", "podnet")
    assert status.returncode == 0, status.stderr

    other = lab.pod()
    clash = node.ctl("net", "add", "podnet", f"/run/netns/{other}", "--port", "8080:80")
    assert clash.returncode == 1
    assert clash.stderr.startswith("Error: plugin podnet failed (add): ")
    assert "[CNI code 101]" in clash.stderr and clash.stderr.count("\n") == 1

    delete = node.ctl("net", "del", "podnet", f"/run/netns/{pod}")
    assert delete.returncode == 0, delete.stderr
    assert node.ctl("net", "del", "podnet", f"/run/netns/{pod}").returncode == 0  # idempotent
    assert (
        json.loads(node.ctl("pods", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
        == []
    )
    assert ResultCache(str(tmp_path / "cache")).entries() == []


@pytest.mark.root
def test_net_gc_keeps_cached_attachments_only(lab: Any, tmp_path: Path) -> None:
    node = Node(lab, tmp_path)
    kept, leaked = lab.pod(), lab.pod()
    assert node.ctl("net", "add", "podnet", f"/run/netns/{kept}").returncode == 0
    leak = node.ctl("net", "add", "podnet", f"/run/netns/{leaked}", CNI_CONTAINERID="leaked1")
    assert leak.returncode == 0, leak.stderr
    (tmp_path / "cache" / "results" / "podnet-leaked1-eth0").unlink()  # the runtime forgot it
    gc = node.ctl("net", "gc", "podnet")
    assert gc.returncode == 0, gc.stderr
    pods = json.loads(node.ctl("pods", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
    assert [p["container_id"] for p in pods] == [
        ResultCache(str(tmp_path / "cache")).entries()[0].container_id
    ]
    assert node.ctl("net", "del", "podnet", f"/run/netns/{kept}").returncode == 0
