"""podnet-ipam (an IPAM plugin on podnet's store) and the podnet plugin delegating to an IPAM
plugin.

Without root: the IPAM verbs in process and as 32 parallel processes, store sharing and the owner migration. With root (``lab``): the reference bridge with
podnet-ipam, podnet delegating to host-local, static and podnet-ipam, with traffic; failures and
DELs leave no state. Config parsing and result shapes: tests/unit/plugins/test_podnet_ipam_conf.py.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from netns import (
    CLIENT_ADDR4,
    NODE_ADDR4,
    PLUGIN_ENV,
    REFUSED,
    VENV_BIN,
    Lab,
    feed,
    feed_in,
    finished,
)
from plugin_calls import host_veths, ipam_conf
from podnet.cni import skel
from podnet.errors import CNIError
from podnet.ipam import delegate
from podnet.plugins import podnet_ipam
from podnet.store import open_store
from podnet.store.pods import OWNER_IPAM, OWNER_PODNET
from podnet.store.schema import MIGRATIONS

IPAM_PLUGIN = str(VENV_BIN / "podnet-ipam")
BRIDGE = "/usr/lib/cni/bridge"
VERSIONS = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def call(command: str, conf: dict[str, Any], cid: str = "c1", ifname: str = "eth0",
         netns: str = "/run/netns/x", args: str = "") -> tuple[int, Any]:
    """One podnet-ipam call in process through the skeleton: ``(exit status, parsed stdout)``."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns,
           "CNI_IFNAME": ifname, "CNI_PATH": "/usr/lib/cni", "CNI_ARGS": args}
    out = io.StringIO()
    rc = skel.run("podnet-ipam", podnet_ipam.HANDLERS, env=env,
                  stdin=io.BytesIO(json.dumps(conf).encode()), stdout=out)
    text = out.getvalue().strip()
    return rc, json.loads(text) if text else None


def rows(data_dir: Path) -> list[tuple[Any, ...]]:
    """``(container_id, ip4, ip6, gw4, gw6, netns, interface_name, ifname, network, owner)``."""
    db = data_dir / "podnet.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT p.container_id, p.ip_address_v4, p.ip_address_v6, p.ip_gateway_v4, "
            "p.ip_gateway_v6, p.netns, p.interface_name, a.ifname, a.network_name, a.owner "
            "FROM pods p JOIN pod_attachments a USING (container_id) ORDER BY 1").fetchall()


def addresses(result: dict[str, Any]) -> dict[int, str]:
    return {6 if ":" in ip["address"] else 4: ip["address"] for ip in result["ips"]}


def test_delegate_find(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "ipam").write_text("not executable")
    (tmp_path / "b" / "ipam").write_text("#!/bin/sh\n")
    (tmp_path / "b" / "ipam").chmod(0o755)
    assert delegate.find("ipam", [str(tmp_path / "a"), str(tmp_path / "b")]) == str(tmp_path / "b" / "ipam")
    with pytest.raises(CNIError) as err:
        delegate.find("other", [str(tmp_path / "a")])
    assert err.value.code == 7 and 'failed to find IPAM plugin "other"' in err.value.msg


# -- podnet-ipam verbs, in process (no root) -----------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_add_check_del(tmp_path: Path, version: str) -> None:
    conf = ipam_conf(tmp_path, ["10.22.0.0/24", "fd00:22::/64"], version)
    rc, res = call("ADD", conf)
    assert rc == 0, res
    assert res["cniVersion"] == version and "interfaces" not in res and res["dns"] == {}
    for ip in res["ips"]:
        assert ("version" in ip) is version.startswith("0.") and "interface" not in ip
    got = addresses(res)
    assert got[4].endswith("/24") and got[6].endswith("/64")
    assert [ip["gateway"] for ip in res["ips"]] == ["10.22.0.1", "fd00:22::1"]
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.22.0.1"}, {"dst": "::/0", "gw": "fd00:22::1"}]
    ip4, ip6 = got[4].split("/")[0], got[6].split("/")[0]
    assert rows(tmp_path) == [("c1/eth0/brnet", ip4, ip6, "10.22.0.1", "fd00:22::1", "/run/netns/x",
                               "eth0", "eth0", "brnet", OWNER_IPAM)]
    rc, out = call("ADD", conf)  # the attachment already has one
    assert rc == 1 and out["code"] == 102 and ip4 in out["msg"]
    if version != "0.3.1":
        assert call("CHECK", {**conf, "prevResult": res}) == (0, None)
        wrong = {**conf, "prevResult": {**res, "ips": res["ips"][:1]}}
        rc, out = call("CHECK", wrong)
        assert rc == 1 and out["code"] == 103 and ip6 in out["msg"]
    assert call("DEL", conf, netns="") == (0, None)
    assert rows(tmp_path) == []
    assert call("DEL", conf, netns="") == (0, None)  # idempotent
    if version != "0.3.1":
        rc, out = call("CHECK", conf)
        assert rc == 1 and out["code"] == 3


def test_allocation_rules_and_status(tmp_path: Path) -> None:
    conf = ipam_conf(tmp_path, ["10.98.0.0/29", "10.99.0.0/30"])  # 5 usable + 1 usable
    assert call("STATUS", conf) == (0, None)
    got = []
    for i in range(6):
        rc, res = call("ADD", conf, cid=f"c{i}")
        assert rc == 0, res
        got.append(res["ips"][0]["address"])
    first = sorted(got[:5], key=lambda a: int(a.split("/")[0].split(".")[3]))
    assert first == [f"10.98.0.{i}/29" for i in range(2, 7)]  # never network, gateway or last
    assert got[5] == "10.99.0.2/30"  # the first range is full: the next one serves
    rc, out = call("ADD", conf, cid="c6")
    assert rc == 1 and out["code"] == 100 and "10.98.0.0/29" in out["msg"]
    rc, out = call("STATUS", conf)
    assert rc == 1 and out["code"] == 50 and "10.99.0.0/30" in out["msg"]
    assert call("DEL", conf, cid="c5") == (0, None)
    assert call("STATUS", conf) == (0, None)
    with sqlite3.connect(tmp_path / "podnet.db") as conn:  # ranges recorded, egress left alone
        assert conn.execute("SELECT r.subnet, o.ip_masq FROM ipam_ranges r JOIN range_options o "
                            "ON o.range_id = r.id ORDER BY r.id").fetchall() == [
            ("10.98.0.0/29", 0), ("10.99.0.0/30", 0)]


def test_requested_addresses(tmp_path: Path) -> None:
    conf = ipam_conf(tmp_path, ["10.22.0.0/24"])
    rc, res = call("ADD", {**conf, "runtimeConfig": {"ips": ["10.22.0.77/24"]}}, cid="a")
    assert rc == 0 and res["ips"][0]["address"] == "10.22.0.77/24", res
    rc, res = call("ADD", conf, cid="b", args="IgnoreUnknown=1;IP=10.22.0.78")
    assert rc == 0 and res["ips"][0]["address"] == "10.22.0.78/24", res
    rc, out = call("ADD", conf, cid="c", args="IP=10.22.0.78")
    assert rc == 1 and out["code"] == 105 and "held by" in out["msg"], out
    for wanted in ("10.23.0.5", "10.22.0.1", "10.22.0.255"):
        rc, out = call("ADD", conf, cid="d", args=f"IP={wanted}")
        assert rc == 1 and out["code"] == 7, out
    assert len(rows(tmp_path)) == 2


def test_gc_releases_what_is_not_valid(tmp_path: Path) -> None:
    conf = ipam_conf(tmp_path)
    other = ipam_conf(tmp_path, ["10.23.0.0/24"], name="other")
    for cid, ifname in (("c1", "eth0"), ("c1", "net1"), ("c2", "eth0"), ("c3", "eth0")):
        assert call("ADD", conf, cid=cid, ifname=ifname)[0] == 0
    assert call("ADD", other, cid="c9")[0] == 0
    valid = [{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c3"}]
    assert call("GC", {**conf, "cni.dev/valid-attachments": valid}) == (0, None)
    assert [r[0] for r in rows(tmp_path)] == ["c1/eth0/brnet", "c3/eth0/brnet", "c9/eth0/other"]
    assert call("GC", {**conf, "cni.dev/valid-attachments": []}) == (0, None)
    assert [r[0] for r in rows(tmp_path)] == ["c9/eth0/other"]
    rc, out = call("GC", {**conf, "cni.dev/valid-attachments": {"c1": "eth0"}})
    assert rc == 1 and out["code"] == 7


def test_shares_a_database_with_podnet_rows(tmp_path: Path) -> None:
    """podnet's own rows (keyed by container ID) and podnet-ipam's coexist: addresses stay
    unique across both, podnet-ipam's DEL/GC leave podnet's rows alone, and one container may hold
    an allocation in several networks."""
    with open_store(str(tmp_path)) as store, store.write():
        for i in range(2, 6):
            store.pods.insert(container_id=f"p{i}", netns="/x", interface_name=f"pn{i}",
                             interface_mtu=1500, ifname="eth0", network_name="brnet", host_mac="",
                             pod_mac="", ip_address_v4=f"10.22.0.{i}")
    conf = ipam_conf(tmp_path, ["10.22.0.0/29"])  # usable .2-.6: podnet holds .2-.5
    rc, res = call("ADD", conf, cid="p2")
    assert rc == 0 and res["ips"][0]["address"] == "10.22.0.6/29", res
    rc, out = call("ADD", conf, cid="p3")
    assert rc == 1 and out["code"] == 100
    assert call("ADD", ipam_conf(tmp_path, ["10.23.0.0/24"], name="net2"), cid="p2")[0] == 0
    assert call("DEL", conf, cid="p3") == (0, None)  # a podnet row of the same container: kept
    assert call("GC", {**conf, "cni.dev/valid-attachments": []}) == (0, None)
    owners = {r[0]: r[9] for r in rows(tmp_path)}
    assert owners == {"p2": OWNER_PODNET, "p3": OWNER_PODNET, "p4": OWNER_PODNET,
                      "p5": OWNER_PODNET, "p2/eth0/net2": OWNER_IPAM}
    # CHECK accepts a podnet row of the same attachment and network (podnet took it over).
    assert call("CHECK", conf, cid="p4") == (0, None)
    assert call("CHECK", conf, cid="p4", ifname="eth1")[1]["code"] == 3


def test_owner_migration_marks_existing_rows(tmp_path: Path) -> None:
    """A database made before ``0004_pod_owner``: its rows become the podnet plugin's."""
    conn = sqlite3.connect(tmp_path / "podnet.db")
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at DATETIME)")
    for name, ddl in MIGRATIONS[:3]:
        conn.executescript(ddl)
        conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
    conn.execute("INSERT INTO pods (container_id, netns, interface_name, ip_address_v4) "
                 "VALUES ('old', '/x', 'pn1', '10.22.0.9')")
    conn.execute("INSERT INTO pod_attachments (container_id, ifname, network_name) "
                 "VALUES ('old', 'eth0', 'brnet')")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with open_store(str(tmp_path)) as store:
        pod = store.pods.get("old")
        assert pod is not None and pod.owner == OWNER_PODNET
        assert store.pods.holder_of(4, "10.22.0.9") is not None


def test_version_is_answered_without_heavy_imports() -> None:
    """VERSION (podman sends it for every plugin, often) imports neither the store nor json."""
    from podnet.runtime.installer import _plugin_path

    own, *deps = _plugin_path()  # what the installed plugin file puts on sys.path
    code = (
        "import io, sys\n"
        f"sys.path.insert(0, {own!r})\n"
        f"sys.path += {deps!r}\n"
        "from podnet.plugins import podnet_ipam\n"
        "from podnet.cni import skel\n"
        "out = io.StringIO()\n"
        "skel.run('podnet-ipam', podnet_ipam.HANDLERS, env={'CNI_COMMAND': 'VERSION'},\n"
        "         stdin=io.BytesIO(b'{\"cniVersion\": \"1.0.0\"}'), stdout=out)\n"
        "heavy = {'json', 're', 'typing', 'subprocess', 'sqlite3', '_sqlite3', 'ipaddress'}\n"
        "print(out.getvalue().strip()); print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([str(VENV_BIN / "python"), "-IS", "-c", code], capture_output=True,
                         text=True, check=True)
    answer, imported = out.stdout.splitlines()
    assert json.loads(answer)["supportedVersions"][-1] == "1.1.0"
    assert imported == "[]"


def test_parallel_adds_get_distinct_addresses(tmp_path: Path) -> None:
    """32 podnet-ipam processes at once (BEGIN IMMEDIATE): 32 distinct addresses, then 32 DELs."""
    conf = json.dumps(ipam_conf(tmp_path, ["10.40.0.0/26", "fd00:40::/120"]))

    def start(command: str, i: int) -> subprocess.Popen[str]:
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": f"c{i}", "CNI_NETNS": "/run/netns/x",
               "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni", "PATH": os.environ["PATH"],
               **PLUGIN_ENV}
        return feed([IPAM_PLUGIN], conf, env)

    procs = [start("ADD", i) for i in range(32)]
    outs = finished(procs)
    assert all(rc == 0 for rc, _ in outs), [o for o in outs if o[0]][:3]
    results = [json.loads(out) for _, out in outs]
    for family in (4, 6):
        assert len({addresses(r)[family] for r in results}) == 32
    assert len(rows(tmp_path)) == 32
    procs = [start("DEL", i) for i in range(32)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 32
    assert rows(tmp_path) == []


# -- in namespaces (root) ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cni_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``podnetctl install --no-conflist`` into a fresh bin dir; CNI_PATH = it + /usr/lib/cni."""
    bin_dir = tmp_path_factory.mktemp("cni-bin")
    subprocess.run([str(VENV_BIN / "podnetctl"), "install", "--bin-dir", str(bin_dir), "--no-conflist"],
                   check=True, capture_output=True)
    return f"{bin_dir}:/usr/lib/cni"


def bridge_conf(data_dir: Path, ranges: list[str], **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "brnet", "type": "bridge", "bridge": "pnbr0",
            "isGateway": True, "ipMasq": True,
            "ipam": {"type": "podnet-ipam", "ranges": ranges, "dataDir": str(data_dir)}, **extra}


def podnet_conf(data_dir: Path, ipam: dict[str, Any], version: str = "1.0.0",
                mappings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": version, "name": "pnet", "type": "podnet",
                            "dataDir": str(data_dir), "ipam": ipam,
                            "capabilities": {"portMappings": True}}
    if mappings:
        conf["runtimeConfig"] = {"portMappings": mappings}
    return conf


def settle_ipv6(lab: Lab, ns: str, dev: str, timeout: float = 30) -> None:
    """Wait until ``dev`` has no tentative IPv6 address: the reference bridge leaves DAD on for
    the gateway address it puts on the bridge (about a second)."""
    import time

    deadline = time.monotonic() + timeout
    while lab.exec(ns, "ip", "-6", "addr", "show", "dev", dev, "tentative").stdout.strip():
        assert time.monotonic() < deadline, f"{dev} stayed tentative"
        time.sleep(0.1)


@pytest.mark.root
def test_reference_bridge_with_podnet_ipam(lab: Lab, tmp_path: Path, cni_bin: str) -> None:
    env = {"CNI_PATH": cni_bin}
    conf = bridge_conf(tmp_path, ["10.88.0.0/24", "fd00:88::/64"])
    pods = [lab.pod("a"), lab.pod("b")]
    results = []
    for i, pod in enumerate(pods):
        rc, res = lab.cni("ADD", conf, container_id=f"c{i}", netns=pod, plugin=BRIDGE, env=env)
        assert rc == 0, res
        results.append(res)
        lab.serve(pod, f"P{i}", 80)
    ips = [{f: a.split("/")[0] for f, a in addresses(r).items()} for r in results]
    assert all(a.endswith("/24") for r in results for f, a in addresses(r).items() if f == 4)
    assert {ip["gateway"] for r in results for ip in r["ips"]} == {"10.88.0.1", "fd00:88::1"}
    assert [r[0] for r in rows(tmp_path)] == ["c0/eth0/brnet", "c1/eth0/brnet"]
    settle_ipv6(lab, lab.node, "pnbr0")
    for family in (4, 6):
        # From the node (the bridge holds the gateways) and from one pod to the other.
        assert lab.talk(lab.node, "tcp", ips[0][family], 80).startswith("P0 ")
        assert lab.talk(pods[0], "tcp", ips[1][family], 80).startswith("P1 ")
        assert lab.talk(pods[1], "udp", ips[0][family], 80).startswith("P0 ")
    rc, out = lab.cni("CHECK", {**conf, "prevResult": results[0]}, container_id="c0", netns=pods[0],
                      plugin=BRIDGE, env=env)
    assert rc == 0, out
    for i, pod in enumerate(pods):
        rc, out = lab.cni("DEL", {**conf, "prevResult": results[i]}, container_id=f"c{i}",
                          netns=pod if i else None, plugin=BRIDGE, env=env)
        assert rc == 0, out
    assert rows(tmp_path) == []
    rc, out = lab.cni("DEL", conf, container_id="c0", plugin=BRIDGE, env=env)  # again
    assert rc == 0, out


@pytest.mark.root
def test_podnet_and_bridge_share_a_datadir(lab: Lab, tmp_path: Path, cni_bin: str) -> None:
    """One container, two networks, one database: podnet's own IPAM on eth0, bridge+podnet-ipam
    on net1. No collision, and each plugin's GC only removes its own rows."""
    env = {"CNI_PATH": cni_bin}
    pod = lab.pod()
    own = {"cniVersion": "1.1.0", "name": "pnet", "type": "podnet", "dataDir": str(tmp_path),
           "ranges": ["10.244.9.0/24"]}
    rc, res_a = lab.cni("ADD", own, container_id="c1", netns=pod)
    assert rc == 0, res_a
    br = bridge_conf(tmp_path, ["10.88.0.0/24"])
    rc, res_b = lab.cni("ADD", br, container_id="c1", netns=pod, ifname="net1", plugin=BRIDGE, env=env)
    assert rc == 0, res_b
    assert {(r[0], r[8], r[9]) for r in rows(tmp_path)} == {
        ("c1", "pnet", OWNER_PODNET), ("c1/net1/brnet", "brnet", OWNER_IPAM)}
    lab.serve(pod, "POD", 80)
    assert lab.talk(lab.node, "tcp", addresses(res_a)[4].split("/")[0], 80).startswith("POD ")
    assert lab.talk(lab.node, "tcp", addresses(res_b)[4].split("/")[0], 80).startswith("POD ")
    # podnet's GC with nothing valid: only its own row goes.
    rc, out = lab.cni("GC", {**own, "cni.dev/valid-attachments": []})
    assert rc == 0, out
    assert [r[0] for r in rows(tmp_path)] == ["c1/net1/brnet"]
    # podnet-ipam's GC (as a 1.1 bridge would forward it) keeps what is valid, then releases.
    gc = {**br, "cniVersion": "1.1.0"}
    assert lab.cni("GC", {**gc, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "net1"}]},
                   plugin=IPAM_PLUGIN)[0] == 0
    assert [r[0] for r in rows(tmp_path)] == ["c1/net1/brnet"]
    assert lab.cni("GC", {**gc, "cni.dev/valid-attachments": []}, plugin=IPAM_PLUGIN)[0] == 0
    assert rows(tmp_path) == []


def _host_local_reservations(hl_dir: Path) -> list[str]:
    """The addresses host-local holds for network ``pnet`` (one file each, besides its lock)."""
    return sorted(p.name for p in (hl_dir / "pnet").glob("*")
                  if p.name != "lock" and not p.name.startswith("last_reserved_ip"))


IPAMS = {
    "host-local": lambda d: {"type": "host-local", "ranges": [[{"subnet": "10.66.0.0/24"}]],
                             "dataDir": str(d / "host-local")},
    "podnet-ipam-same-db": lambda d: {"type": "podnet-ipam", "ranges": ["10.66.0.0/24"],
                                      "dataDir": str(d)},
    "podnet-ipam-own-db": lambda d: {"type": "podnet-ipam", "ranges": ["10.66.0.0/24"],
                                     "dataDir": str(d / "ipam")},
}


@pytest.mark.root
@pytest.mark.parametrize("which", list(IPAMS))
def test_podnet_delegates(lab: Lab, tmp_path: Path, cni_bin: str, which: str) -> None:
    env = {"CNI_PATH": cni_bin}
    client = lab.client()
    version = "1.0.0" if which == "host-local" else "1.1.0"  # Debian's host-local stops at 1.0.0
    conf = podnet_conf(tmp_path, IPAMS[which](tmp_path), version,
                       [{"hostPort": 18080, "containerPort": 80}])
    pods = [lab.pod("a"), lab.pod("b")]
    results = []
    for i, pod in enumerate(pods):
        conf_i = conf if i == 0 else {k: v for k, v in conf.items() if k != "runtimeConfig"}
        rc, res = lab.cni("ADD", conf_i, container_id=f"c{i}", netns=pod, env=env)
        assert rc == 0, res
        results.append(res)
        lab.serve(pod, f"P{i}", 80)
    ips = [addresses(r)[4] for r in results]
    assert all(a.startswith("10.66.0.") and a.endswith("/32") for a in ips)  # podnet's layout
    assert {ip["gateway"] for r in results for ip in r["ips"]} == {"10.66.0.1"}
    ips = [a.split("/")[0] for a in ips]
    assert lab.talk(lab.node, "tcp", ips[0], 80).startswith("P0 ")
    assert lab.talk(pods[1], "tcp", ips[0], 80).startswith("P0 ")
    assert lab.talk(client, "tcp", NODE_ADDR4, 18080) == f"P0 ::ffff:{CLIENT_ADDR4}"  # hostPort
    assert lab.talk(pods[1], "tcp", NODE_ADDR4, 18080).startswith("P0 ")  # hairpin via the range
    podnet_rows = [r for r in rows(tmp_path) if r[9] == OWNER_PODNET]
    assert [r[0] for r in podnet_rows] == ["c0", "c1"]
    if which == "podnet-ipam-same-db":
        assert len(rows(tmp_path)) == 2  # podnet took podnet-ipam's rows over
    if which == "podnet-ipam-own-db":
        assert [r[0] for r in rows(tmp_path / "ipam")] == ["c0/eth0/pnet", "c1/eth0/pnet"]
    if which == "host-local":
        assert _host_local_reservations(tmp_path / "host-local") == sorted(ips)
    rc, out = lab.cni("CHECK", {**conf, "prevResult": results[0]}, container_id="c0", netns=pods[0],
                      env=env)
    assert rc == 0, out
    if version == "1.1.0":
        assert lab.cni("STATUS", conf, env=env) == (0, None)
    for i, pod in enumerate(pods):
        rc, out = lab.cni("DEL", {**conf, "prevResult": results[i]}, container_id=f"c{i}",
                          netns=pod if i else None, env=env)
        assert rc == 0 and out is None, out
        rc, out = lab.cni("DEL", conf, container_id=f"c{i}", env=env)  # again, empty netns
        assert rc == 0 and out is None, out
    assert rows(tmp_path) == [] and host_veths(lab) == []
    if which == "podnet-ipam-own-db":
        assert rows(tmp_path / "ipam") == []
    if which == "host-local":
        assert _host_local_reservations(tmp_path / "host-local") == []
    assert lab.talk(client, "tcp", NODE_ADDR4, 18080) == REFUSED


@pytest.mark.root
def test_podnet_delegates_to_static(lab: Lab, tmp_path: Path, cni_bin: str) -> None:
    env = {"CNI_PATH": cni_bin}
    pod, other = lab.pod(), lab.pod()
    with_gw = podnet_conf(tmp_path, {"type": "static", "addresses": [
        {"address": "10.77.0.5/24", "gateway": "10.77.0.254"}, {"address": "fd00:77::5/64"}]})
    rc, res = lab.cni("ADD", with_gw, container_id="c1", netns=pod, env=env)
    assert rc == 0, res
    assert [(ip["address"], ip["gateway"]) for ip in res["ips"]] == [
        ("10.77.0.5/32", "10.77.0.254"), ("fd00:77::5/128", "fd00:77::1")]  # v6 gateway derived
    lab.serve(pod, "STATIC", 80)
    assert lab.talk(lab.node, "tcp", "10.77.0.5", 80).startswith("STATIC ")
    assert lab.talk(lab.node, "tcp", "fd00:77::5", 80).startswith("STATIC ")
    rc, out = lab.cni("CHECK", {**with_gw, "prevResult": res}, container_id="c1", netns=pod, env=env)
    assert rc == 0, out
    # The same static address for a second container: podnet's store refuses it (code 7).
    rc, out = lab.cni("ADD", with_gw, container_id="c2", netns=other, env=env)
    assert rc == 1 and out["code"] == 7 and "already held by container c1" in out["msg"], out
    assert [r[0] for r in rows(tmp_path)] == ["c1"] and len(host_veths(lab)) == 1
    assert lab.cni("DEL", with_gw, container_id="c1", netns=pod, env=env)[0] == 0
    assert rows(tmp_path) == [] and host_veths(lab) == []


@pytest.mark.root
def test_ipam_errors_pass_through_and_leave_no_state(lab: Lab, tmp_path: Path, cni_bin: str) -> None:
    env = {"CNI_PATH": cni_bin}
    pod = lab.pod()
    # host-local's own error for a bad ipam config, code and message unchanged.
    bad = podnet_conf(tmp_path, {"type": "host-local", "dataDir": str(tmp_path / "hl")})
    direct = subprocess.run(["/usr/lib/cni/host-local"], input=json.dumps(bad), capture_output=True, text=True,
                            env={"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": f"/run/netns/{pod}",
                                 "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni"})
    expected = json.loads(direct.stdout)
    rc, out = lab.cni("ADD", bad, container_id="c1", netns=pod, env=env)
    assert rc == 1 and (out["code"], out["msg"]) == (expected["code"], expected["msg"]), (out, expected)
    # podnet-ipam out of addresses: its code 100 passes through.
    small = podnet_conf(tmp_path, {"type": "podnet-ipam", "ranges": ["10.55.0.0/30"],
                                   "dataDir": str(tmp_path)}, "1.1.0")
    assert lab.cni("ADD", small, container_id="c1", netns=pod, env=env)[0] == 0
    rc, out = lab.cni("ADD", small, container_id="c2", netns=lab.pod(), env=env)
    assert rc == 1 and out["code"] == 100 and "10.55.0.0/30" in out["msg"], out
    rc, out = lab.cni("STATUS", small, env=env)
    assert rc == 1 and out["code"] == 50, out
    assert [r[0] for r in rows(tmp_path)] == ["c1"]
    # A plugin type that is not in CNI_PATH.
    rc, out = lab.cni("ADD", podnet_conf(tmp_path, {"type": "nothere"}), container_id="c3",
                      netns=lab.pod(), env=env)
    assert rc == 1 and out["code"] == 7 and "nothere" in out["msg"], out
    assert [r[0] for r in rows(tmp_path)] == ["c1"] and len(host_veths(lab)) == 1


@pytest.mark.root
@pytest.mark.parametrize("which", ["host-local", "podnet-ipam-same-db"])
def test_failed_add_after_ipam_add_releases_the_allocation(lab: Lab, tmp_path: Path, cni_bin: str,
                                                           which: str) -> None:
    """CNI_IFNAME already exists in the pod: podnet fails (102) after the IPAM ADD, and runs the
    IPAM DEL, so no address stays reserved and no row or veth is left."""
    env = {"CNI_PATH": cni_bin}
    pod = lab.pod()
    lab.exec(pod, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "other0")
    conf = podnet_conf(tmp_path, IPAMS[which](tmp_path), "1.0.0" if which == "host-local" else "1.1.0")
    rc, out = lab.cni("ADD", conf, container_id="c1", netns=pod, env=env)
    assert rc == 1 and out["code"] == 102, out
    assert rows(tmp_path) == [] and host_veths(lab) == []
    if which == "host-local":
        assert _host_local_reservations(tmp_path / "host-local") == []
    # And a second ADD of an attachment podnet already has never reaches the IPAM plugin.
    lab.exec(pod, "ip", "link", "del", "eth0")
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod, env=env)
    assert rc == 0, res
    rc, out = lab.cni("ADD", conf, container_id="c1", netns=pod, env=env)
    assert rc == 1 and out["code"] == 102, out
    if which == "host-local":
        assert _host_local_reservations(tmp_path / "host-local") == [addresses(res)[4].split("/")[0]]
    else:
        assert [r[0] for r in rows(tmp_path)] == ["c1"]


@pytest.mark.root
def test_parallel_delegated_adds(lab: Lab, tmp_path: Path, cni_bin: str) -> None:
    """16 podnet ADDs at once, each running podnet-ipam on the same database and taking its row
    over: 16 distinct addresses, 16 rows, then 16 parallel DELs leave nothing."""
    env = {"CNI_PATH": cni_bin}
    conf = json.dumps(podnet_conf(tmp_path, IPAMS["podnet-ipam-same-db"](tmp_path), "1.1.0"))
    pods = [lab.pod(f"p{i}-") for i in range(16)]

    def start(command: str, i: int) -> subprocess.Popen[str]:
        full = {"CNI_COMMAND": command, "CNI_CONTAINERID": f"c{i}",
                "CNI_NETNS": f"/run/netns/{pods[i]}" if command == "ADD" else "",
                "CNI_IFNAME": "eth0", "PATH": os.environ["PATH"], **PLUGIN_ENV, **env}
        return feed_in(lab.node, str(VENV_BIN / "podnet"), full, conf)

    procs = [start("ADD", i) for i in range(16)]
    outs = finished(procs)
    assert all(rc == 0 for rc, _ in outs), [o for o in outs if o[0]][:3]
    assert len({json.loads(out)["ips"][0]["address"] for _, out in outs}) == 16
    assert [r[9] for r in rows(tmp_path)] == [OWNER_PODNET] * 16
    procs = [start("DEL", i) for i in range(16)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 16
    assert rows(tmp_path) == [] and host_veths(lab) == []
