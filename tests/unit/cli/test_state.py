"""podnetctl's state views (``pods``, ``ports``, ``ranges``) over a real store: tables, JSON and
YAML, read only, the data directory from the environment. No root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from cli_calls import run
from podnet.store import open_store
from podnet.values import PortMapping


# -- state views ----------------------------------------------------------------------------------
@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    d = str(tmp_path / "data")
    with open_store(d) as store, store.write():
        store.ranges.sync(["10.244.2.0/24", "fd00:1::/64"], True, "network podnet")
        store.pods.insert(
            container_id="c1",
            netns="/run/netns/p1",
            interface_name="pn0000000000001",
            interface_mtu=1500,
            ifname="eth0",
            network_name="podnet",
            host_mac="02:00:00:00:00:01",
            pod_mac="02:00:00:00:00:02",
            ip_address_v4="10.244.2.5",
            ip_address_v6="fd00:1::5",
            ip_gateway_v4="10.244.2.1",
            ip_gateway_v6="fd00:1::1",
            name="web",
            namespace="prod",
        )
        store.pods.insert_portmaps(
            [
                PortMapping("c1", "0.0.0.0", 8080, "tcp", "10.244.2.5", 80),
                PortMapping("c1", "::", 8080, "tcp", "fd00:1::5", 80),
            ]
        )
    return d


def test_pods_table(data_dir: str) -> None:
    out = run("pods", "--data-dir", data_dir)
    assert out.exit_code == 0, out.stderr
    for text in ("CONTAINER", "c1", "prod/web", "10.244.2.5", "fd00:1::5", "pn0000000000001"):
        assert text in out.stdout


def test_ports_table_and_formats(data_dir: str) -> None:
    out = run("ports", "--data-dir", data_dir)
    assert out.exit_code == 0, out.stderr
    assert "0.0.0.0:8080" in out.stdout and "[fd00:1::5]:80" in out.stdout
    as_json = json.loads(run("ports", "--data-dir", data_dir, "-o", "json").stdout)
    assert [(p["host_ip"], p["host_port"], p["container_ip"]) for p in as_json] == [
        ("0.0.0.0", 8080, "10.244.2.5"),
        ("::", 8080, "fd00:1::5"),
    ]
    as_yaml = yaml.safe_load(run("ports", "--data-dir", data_dir, "--output", "yaml").stdout)
    assert as_yaml == as_json


def test_ranges_and_pods_json(data_dir: str) -> None:
    ranges = json.loads(run("ranges", "--data-dir", data_dir, "-o", "json").stdout)
    assert [(r["subnet"], r["used"], r["usable"], r["ip_masq"]) for r in ranges] == [
        ("10.244.2.0/24", 1, 253, True),
        ("fd00:1::/64", 1, str(2**64 - 3), True),  # beyond 2^53: a string, exact in any reader
    ]
    assert isinstance(ranges[0]["usable"], int)
    pods = json.loads(run("pods", "--data-dir", data_dir, "-o", "json").stdout)
    assert pods[0]["container_id"] == "c1" and pods[0]["ifname"] == "eth0"
    assert "10.244.2.0/24" in run("ranges", "--data-dir", data_dir).stdout


def test_state_views_read_only(tmp_path: Path) -> None:
    out = run("pods", "--data-dir", str(tmp_path / "none"))
    assert out.exit_code == 1
    assert out.stderr.startswith("Error: No podnet database in ")
    assert not (tmp_path / "none").exists()


def test_state_env_var(data_dir: str) -> None:
    out = run("pods", "-o", "json", env={"PODNET_DATA_DIR": data_dir})
    assert json.loads(out.stdout)[0]["container_id"] == "c1"
