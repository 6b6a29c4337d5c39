"""CHECK compares the pod's addresses with the ranges the NetConf configures now (spec "CHECK":
the container's networking must be as ADD would set it up): a pod whose address no longer lies
in the conflist's ``ranges``, or in its bridge network's subnet, fails with 103 naming the
address; the same pod passes with the ranges it was given. Everything else about the pod
(interface, routes, host veth) is as its ADD left it, so only the range comparison can fail it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import VENV_BIN, Lab

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")


@pytest.fixture
def lab() -> Any:
    need("root", "ip", "nft")
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()


def ptp_conf(data: Path, ranges: list[str]) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet", "ranges": ranges,
            "dataDir": str(data)}  # fmt: skip


def test_check_fails_when_the_conflist_ranges_no_longer_hold_the_pod(lab: Lab,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    pod = lab.pod("p")
    cid = f"c-{lab.tag}"
    conf = ptp_conf(tmp_path, ["10.64.0.0/24", "fd00:64::/64"])
    rc, res = lab.cni("ADD", conf, container_id=cid, netns=pod)
    assert rc == 0, res
    addr4 = next(i["address"].split("/")[0] for i in res["ips"] if "." in i["address"])
    addr6 = next(i["address"].split("/")[0] for i in res["ips"] if ":" in i["address"])
    try:
        rc, out = lab.cni("CHECK", {**conf, "prevResult": res}, container_id=cid, netns=pod)
        assert rc == 0, out
        # the IPv4 range moved elsewhere: the pod's IPv4 address is outside it
        moved = ptp_conf(tmp_path, ["10.65.0.0/24", "fd00:64::/64"])
        rc, out = lab.cni("CHECK", {**moved, "prevResult": res}, container_id=cid, netns=pod)
        assert rc == 1 and out["code"] == 103, out
        assert f"address {addr4} of eth0 is outside the configured ranges" in out["msg"], out
        assert "10.65.0.0/24, fd00:64::/64" in out["msg"], out
        # no IPv6 range any more: the pod's IPv6 address is outside every range
        v4_only = ptp_conf(tmp_path, ["10.64.0.0/24"])
        rc, out = lab.cni("CHECK", {**v4_only, "prevResult": res}, container_id=cid, netns=pod)
        assert rc == 1 and out["code"] == 103, out
        assert f"address {addr6} of eth0 is outside the configured ranges" in out["msg"], out
        # a wider range that still holds it passes
        wider = ptp_conf(tmp_path, ["10.64.0.0/16", "fd00:64::/48"])
        rc, out = lab.cni("CHECK", {**wider, "prevResult": res}, container_id=cid, netns=pod)
        assert rc == 0, out
    finally:
        rc, out = lab.cni("DEL", conf, container_id=cid, netns=pod)
        assert rc == 0, out


def test_check_fails_when_the_bridge_network_subnet_moved(lab: Lab, tmp_path: Path) -> None:
    name = f"k{lab.tag}"
    data = tmp_path / "data"

    def ctl(*args: str) -> None:
        out = lab.exec(lab.node, PODNETCTL, "network", "--data-dir", str(data), "--init", *args,
                       check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr

    ctl("create", name, "ipv4.address=10.66.0.1/24", "ipv6.address=none")
    conf = {"cniVersion": "1.1.0", "name": f"{name}-pods", "type": "podnet", "network": name,
            "dataDir": str(data)}  # fmt: skip
    pod = lab.pod("b")
    cid = f"c-{lab.tag}"
    rc, res = lab.cni("ADD", conf, container_id=cid, netns=pod)
    assert rc == 0, res
    addr = res["ips"][0]["address"].split("/")[0]
    try:
        rc, out = lab.cni("CHECK", {**conf, "prevResult": res}, container_id=cid, netns=pod)
        assert rc == 0, out
        # podnetctl refuses to move the subnet of a network in use; a store that says another
        # subnet than its pods have (restored from another backup, edited) is what CHECK meets
        out = lab.exec(lab.node, PODNETCTL, "network", "--data-dir", str(data), "set", name,
                       "ipv4.address=10.67.0.1/24", check=False)  # fmt: skip
        assert out.returncode == 1 and "while pods or forwards use it" in out.stderr
        with sqlite3.connect(data / "podnet.db") as db:
            changed = db.execute(
                "UPDATE networks_config SET value = '10.67.0.1/24' WHERE key = 'ipv4.address' "
                "AND network_id = (SELECT id FROM networks WHERE name = ?)",
                (name,),
            ).rowcount
        assert changed == 1
        rc, out = lab.cni("CHECK", {**conf, "prevResult": res}, container_id=cid, netns=pod)
        assert rc == 1 and out["code"] == 103, out
        assert (
            f"address {addr} of eth0 is outside the configured ranges (10.67.0.0/24)" in out["msg"]
        )
    finally:
        rc, out = lab.cni("DEL", conf, container_id=cid, netns=pod)
        assert rc == 0, out
