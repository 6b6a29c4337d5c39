"""Bad input, conflicts, failed ADDs and idempotent DELs change no state."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from netns import TIMEOUT, Lab
from plugin_calls import db_rows, host_veths, map_elements, netconf

pytestmark = pytest.mark.root


def db_digest(data_dir: Path) -> str:
    """Digest of every row of every table (None when there is no database yet)."""
    if not (data_dir / "podnet.db").exists():
        return "none"
    import sqlite3

    with sqlite3.connect(data_dir / "podnet.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        dump = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
    return hashlib.sha256(json.dumps(dump, default=str).encode()).hexdigest()


def state(lab: Lab, data_dir: Path) -> tuple[str, list[str], str]:
    return db_digest(data_dir), host_veths(lab), map_elements(lab)


@pytest.fixture
def seeded(lab: Lab, tmp_path: Path) -> tuple[Lab, Path, str]:
    """A node with one pod holding tcp/8080 on any address."""
    pod = lab.pod("held")
    rc, out = lab.cni("ADD", netconf(tmp_path, mappings=[{"hostPort": 8080, "containerPort": 80}]),
                      container_id="holder", netns=pod)
    assert rc == 0, out
    return lab, tmp_path, pod


def bad_port(port: int) -> dict:
    return {"hostPort": port, "containerPort": 80}


CASES = [
    ("malformed stdin", None, "{\"cniVersion\": ", 6),
    ("unknown cniVersion", {"cniVersion": "0.2.0"}, None, 1),
    ("invalid range", {"ranges": ["10.244.300.0/24"]}, None, 7),
    ("port 0", {"runtimeConfig": {"portMappings": [bad_port(0)]}}, None, 7),
    ("port 70000", {"runtimeConfig": {"portMappings": [bad_port(70000)]}}, None, 7),
    ("protocol icmp", {"runtimeConfig": {"portMappings": [
        {"hostPort": 9000, "containerPort": 80, "protocol": "icmp"}]}}, None, 7),
    ("hostPort conflict", {"runtimeConfig": {"portMappings": [bad_port(8080)]}}, None, 101),
    ("specific hostIP vs held wildcard", {"runtimeConfig": {"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "hostIP": "192.0.2.1"}]}}, None, 101),
    ("wildcard and specific in one ADD", {"runtimeConfig": {"portMappings": [
        {"hostPort": 7000, "containerPort": 80},
        {"hostPort": 7000, "containerPort": 81, "hostIP": "192.0.2.1"}]}}, None, 7),
]


@pytest.mark.parametrize(("what", "override", "stdin", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_add_changes_nothing(seeded, what: str, override: dict | None, stdin: str | None, code: int) -> None:  # type: ignore[no-untyped-def]
    lab, data_dir, _ = seeded
    before = state(lab, data_dir)
    pod = lab.pod("new")
    conf = {**netconf(data_dir), **(override or {})}
    rc, out = lab.cni("ADD", conf, container_id="newcomer", netns=pod, stdin=stdin)
    assert rc != 0
    assert out["code"] == code, out
    assert set(out) <= {"cniVersion", "code", "msg", "details"} and out["msg"]
    if code == 101:
        assert "holder" in out["msg"]  # names the container holding the port
    assert state(lab, data_dir) == before
    links = lab.exec(pod, "ip", "-o", "link").stdout
    assert "eth0" not in links


@pytest.mark.parametrize("first", [True, False], ids=["first-add-rebuilds", "incremental"])
def test_existing_ifname_is_refused(lab: Lab, tmp_path: Path, first: bool) -> None:
    """Also: the hostPort elements this failed ADD had published are gone (they would send the
    port to whichever pod gets the address next)."""
    if not first:
        assert lab.cni("ADD", netconf(tmp_path), container_id="c0", netns=lab.pod())[0] == 0
    pod = lab.pod()
    lab.exec(pod, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "other0")
    conf = netconf(tmp_path, mappings=[{"hostPort": 7777, "containerPort": 80}])
    rc, out = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc != 0 and out["code"] == 102 and "eth0" in out["msg"]
    assert [r[0] for r in db_rows(tmp_path, "pods")] == ([] if first else ["c0"])
    assert len(host_veths(lab)) == (0 if first else 1)
    assert "7777" not in map_elements(lab)


def test_failed_add_removes_its_own_work(lab: Lab, tmp_path: Path) -> None:
    """IPv6 disabled in the pod: the pod side fails after the veth exists; all is undone."""
    pod = lab.pod()
    lab.exec(pod, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
    rc, out = lab.cni("ADD", netconf(tmp_path, mappings=[{"hostPort": 8080, "containerPort": 80}]),
                      container_id="c1", netns=pod)
    assert rc != 0 and out["code"] == 104, out
    assert db_rows(tmp_path, "pods") == [] and db_rows(tmp_path, "portmap_entries") == []
    assert host_veths(lab) == [] and "8080" not in map_elements(lab)
    assert "eth0" not in lab.exec(pod, "ip", "-o", "link").stdout
    # The address and port are free again.
    lab.exec(pod, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0")
    rc, out = lab.cni("ADD", netconf(tmp_path, mappings=[{"hostPort": 8080, "containerPort": 80}]),
                      container_id="c1", netns=pod)
    assert rc == 0, out


def test_second_add_of_same_container_is_refused(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    assert lab.cni("ADD", netconf(tmp_path), container_id="c1", netns=pod)[0] == 0
    before = state(lab, tmp_path)
    rc, out = lab.cni("ADD", netconf(tmp_path), container_id="c1", netns=pod)
    assert rc != 0 and out["code"] == 102
    assert state(lab, tmp_path) == before


@pytest.mark.parametrize("how", ["twice", "empty-netns", "netns-deleted", "stale-netns-path"])
def test_del_is_idempotent(lab: Lab, tmp_path: Path, how: str) -> None:
    pod = lab.pod()
    conf = netconf(tmp_path, mappings=[{"hostPort": 8080, "containerPort": 80, "protocol": "udp"}])
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc == 0, res
    netns: str | None = pod
    if how == "empty-netns":
        netns = None
    elif how in ("netns-deleted", "stale-netns-path"):
        lab.exec(lab.node, "ip", "netns", "del", pod)
        lab.namespaces.remove(pod)
    conf_del = {**conf, "prevResult": res}
    if how == "stale-netns-path":
        rc, out = lab.cni("DEL", conf_del, container_id="c1", env={"CNI_NETNS": "/proc/999999/ns/net"})
    else:
        rc, out = lab.cni("DEL", conf_del, container_id="c1", netns=netns)
    assert rc == 0 and out is None, out
    if how == "twice":
        rc, out = lab.cni("DEL", conf_del, container_id="c1", netns=netns)
        assert rc == 0 and out is None, out
    assert db_rows(tmp_path, "pods") == [] and host_veths(lab) == []
    assert "8080" not in map_elements(lab)
    # The address is released: a /30 has one usable address, so a new pod must get it back.


def test_released_address_is_reusable(lab: Lab, tmp_path: Path) -> None:
    conf = netconf(tmp_path, ranges=["10.99.0.0/30"])  # exactly one usable address: .2
    pod = lab.pod()
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc == 0 and res["ips"][0]["address"] == "10.99.0.2/32"
    rc, out = lab.cni("ADD", conf, container_id="c2", netns=lab.pod())
    assert rc != 0 and out["code"] == 100
    assert lab.cni("DEL", conf, container_id="c1")[0] == 0  # empty CNI_NETNS
    rc, res = lab.cni("ADD", conf, container_id="c3", netns=lab.pod())
    assert rc == 0 and res["ips"][0]["address"] == "10.99.0.2/32"


def test_check_reports_what_differs(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    conf = netconf(tmp_path, mappings=[{"hostPort": 8080, "containerPort": 80}])
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc == 0
    conf_check = {**conf, "prevResult": res}
    assert lab.cni("CHECK", conf_check, container_id="c1", netns=pod)[0] == 0
    lab.exec(lab.node, "nft", "flush", "map", "inet", "podnet", "hostports_any_v4")
    rc, out = lab.cni("CHECK", conf_check, container_id="c1", netns=pod)
    assert rc != 0 and out["code"] == 103 and "8080" in out["msg"]
    lab.exec(pod, "ip", "route", "del", "default")
    rc, out = lab.cni("CHECK", conf_check, container_id="c1", netns=pod)
    assert rc != 0 and "default route" in out["msg"]
    lab.exec(pod, "ip", "link", "set", "eth0", "down")
    rc, out = lab.cni("CHECK", conf_check, container_id="c1", netns=pod)
    assert rc != 0 and "down" in out["msg"]
    rc, out = lab.cni("CHECK", conf_check, container_id="unknown", netns=pod)
    assert rc != 0 and out["code"] == 3


def test_locked_database_is_code_11(lab: Lab, tmp_path: Path) -> None:
    import sqlite3

    pod = lab.pod()
    conf = netconf(tmp_path, busyTimeout=0.3)
    assert lab.cni("ADD", conf, container_id="c1", netns=pod)[0] == 0
    before = state(lab, tmp_path)
    holder = sqlite3.connect(tmp_path / "podnet.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        rc, out = lab.cni("ADD", conf, container_id="c2", netns=lab.pod())
        assert rc != 0 and out["code"] == 11, out
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert state(lab, tmp_path) == before


def test_log_file_gets_lines_stdout_only_result(lab: Lab, tmp_path: Path) -> None:
    log = tmp_path / "podnet.log"
    pod = lab.pod()
    env = {"CNI_LOG_FILE": str(log)}  # a NetConf's logFile must lie in /var/log/podnet
    rc, res = lab.cni("ADD", netconf(tmp_path), container_id="c1", netns=pod, env=env)
    assert rc == 0 and "ips" in res
    rc, out = lab.cni("ADD", netconf(tmp_path, ranges=["bad"]), container_id="c2", netns=pod, env=env)
    lines = log.read_text().splitlines()
    assert any("ADD container=c1 ifname=eth0 ok" in line for line in lines)
    assert any("error 7" in line and "ranges[0]" in line for line in lines)


def test_requested_ips_and_mac(lab: Lab, tmp_path: Path) -> None:
    """The ips/mac capabilities and podman's CNI_ARGS IP=/MAC= (sent after `network reload`)."""
    pod = lab.pod()
    conf = {**netconf(tmp_path), "runtimeConfig": {"ips": ["10.244.2.77/24", "fd00:10:244::77"],
                                                   "mac": "02:00:00:aa:bb:cc"}}
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc == 0, res
    assert [ip["address"] for ip in res["ips"]] == ["10.244.2.77/32", "fd00:10:244::77/128"]
    assert res["interfaces"][1]["mac"] == "02:00:00:aa:bb:cc"
    assert "02:00:00:aa:bb:cc" in lab.exec(pod, "ip", "link", "show", "eth0").stdout
    before = state(lab, tmp_path)
    # Taken, outside the ranges, the gateway: refused, nothing changed.
    for ips, code in ((["10.244.2.77"], 105), (["10.9.9.9"], 7), (["10.244.2.1"], 7)):
        bad = {**netconf(tmp_path), "runtimeConfig": {"ips": ips}}
        rc, out = lab.cni("ADD", bad, container_id="c2", netns=lab.pod())
        assert rc != 0 and out["code"] == code, (ips, out)
    assert state(lab, tmp_path) == before
    rc, res = lab.cni("ADD", netconf(tmp_path, ranges=["10.244.2.0/24"]), container_id="c3", netns=lab.pod(),
                      env={"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=w;MAC=02:00:00:00:00:07;IP=10.244.2.88"})
    assert rc == 0, res
    assert res["ips"][0]["address"] == "10.244.2.88/32" and res["interfaces"][1]["mac"] == "02:00:00:00:00:07"
    rows = {r[0]: r for r in db_rows(tmp_path, "pods")}
    assert rows["c3"][1] == "w"  # K8S_POD_NAME → pods.name


def test_pod_cannot_reach_node_loopback_services(lab: Lab, tmp_path: Path) -> None:
    """route_localnet on the host veth must not expose the node's 127.0.0.1 services to a pod
    that routes 127.0.0.1 to its gateway (CVE-2020-8558 class); 127.0.0.1 → hostPort still works."""
    pod = lab.pod()
    conf = netconf(tmp_path, ranges=["10.244.2.0/24"], mappings=[{"hostPort": 18080, "containerPort": 80}])
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc == 0, res
    lab.serve(lab.node, "NODE-LOOPBACK", 9999)
    gw = res["ips"][0]["gateway"]
    lab.exec(pod, "sysctl", "-qw", "net.ipv4.conf.eth0.route_localnet=1")
    lab.exec(pod, "ip", "addr", "del", "127.0.0.1/8", "dev", "lo")
    lab.exec(pod, "ip", "route", "add", "127.0.0.1/32", "via", gw, "dev", "eth0")
    assert lab.talk(lab.node, "tcp", "127.0.0.1", 9999).startswith("NODE-LOOPBACK ")  # it serves
    assert lab.talk(pod, "tcp", "127.0.0.1", 9999) == TIMEOUT  # dropped as a martian by the node
    lab.serve(pod, "POD", 80)
    assert lab.talk(lab.node, "tcp", "127.0.0.1", 18080).startswith("POD ")


def test_ipv6_loopback_is_not_hijacked(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    conf = netconf(tmp_path, mappings=[{"hostPort": 6200, "containerPort": 80}])
    assert lab.cni("ADD", conf, container_id="c1", netns=pod)[0] == 0
    lab.serve(lab.node, "NODE", 6200)
    assert lab.talk(lab.node, "tcp", "::1", 6200).startswith("NODE ")


@pytest.mark.parametrize("ifname", ["help", "up", "dev"])
def test_ifnames_that_are_ip_keywords(lab: Lab, tmp_path: Path, ifname: str) -> None:
    pod = lab.pod()
    conf = netconf(tmp_path)
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod, ifname=ifname)
    assert rc == 0, res
    assert res["interfaces"][1]["name"] == ifname
    rc, out = lab.cni("CHECK", {**conf, "prevResult": res}, container_id="c1", netns=pod, ifname=ifname)
    assert rc == 0, out
    assert lab.cni("DEL", conf, container_id="c1", netns=pod, ifname=ifname)[0] == 0


def test_ifname_with_hash_is_refused_cleanly(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    rc, out = lab.cni("ADD", netconf(tmp_path), container_id="c1", netns=pod, ifname="x#y")
    assert rc != 0 and out["code"] == 4 and "#" in out["msg"]
    # refused before the database is even opened: no rows, no veth
    assert not (tmp_path / "podnet.db").exists() or db_rows(tmp_path, "pods") == []
    assert host_veths(lab) == []


def test_check_needs_prev_result(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    conf = netconf(tmp_path)
    assert lab.cni("ADD", conf, container_id="c1", netns=pod)[0] == 0
    rc, out = lab.cni("CHECK", conf, container_id="c1", netns=pod)
    assert rc != 0 and out["code"] == 7 and "prevResult" in out["msg"]


def test_add_without_ports_restores_a_deleted_table(lab: Lab, tmp_path: Path) -> None:
    client = lab.client()
    pod = lab.pod()
    conf = netconf(tmp_path, mappings=[{"hostPort": 8110, "containerPort": 80}])
    assert lab.cni("ADD", conf, container_id="c1", netns=pod)[0] == 0
    lab.exec(lab.node, "nft", "delete", "table", "inet", "podnet")  # e.g. nft flush ruleset
    assert lab.cni("ADD", netconf(tmp_path), container_id="c2", netns=lab.pod())[0] == 0
    lab.serve(pod, "A", 80)
    assert lab.talk(client, "tcp", "192.0.2.1", 8110).startswith("A ")


def test_gc_refuses_malformed_valid_attachments(lab: Lab, tmp_path: Path) -> None:
    pod = lab.pod()
    assert lab.cni("ADD", netconf(tmp_path), container_id="c1", netns=pod)[0] == 0
    before = state(lab, tmp_path)
    rc, out = lab.cni("GC", {**netconf(tmp_path), "cni.dev/valid-attachments": [{"containerID": "c1"}]})
    assert rc != 0 and out["code"] == 7 and "valid-attachments[0]" in out["msg"]
    assert state(lab, tmp_path) == before
