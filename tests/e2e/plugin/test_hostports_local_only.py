"""A hostPort answers on the node's own addresses only (``fib daddr type local`` in front of the
hostPort chains; upstream containernetworking/plugins #1115, #1209): a wildcard hostPort
must not take a connection that passes through the node to a remote server on the same port.
Real TCP and UDP in lab namespaces, both families, for podnet's table and podnet-portmap's
(nftables, after the reference ptp).

Each check has its positive control: the client reaches the pod through the hostPort on the
node's address, while a pod (routed through the node's prerouting hook) and the node itself
(its output hook) reach the remote server on that port and see its answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import CLIENT_ADDR4, CLIENT_ADDR6, NODE_ADDR4, NODE_ADDR6, VENV_BIN, Lab, sh
from portmap_helpers import PORTMAP_DATA, REF_DIR

pytestmark = pytest.mark.root

NODE = {4: NODE_ADDR4, 6: NODE_ADDR6}
REMOTE = {4: CLIENT_ADDR4, 6: CLIENT_ADDR6}
MAPS = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8080, "containerPort": 80, "protocol": "udp"}]


def _route_back(lab: Lab, client: str, v4: str, v6: str) -> None:
    """The remote server's way back to the pods' ranges (through the node)."""
    sh("ip", "-n", client, "route", "add", v4, "via", NODE_ADDR4)
    sh("ip", "-n", client, "-6", "route", "add", v6, "via", NODE_ADDR6)


def _check(lab: Lab, client: str, pod: str, other: str) -> None:
    for family in (4, 6):
        for proto in ("tcp", "udp"):
            # the control: the hostPort takes what is sent to the node's own address
            got = lab.talk(client, proto, NODE[family], 8080)
            assert got.startswith("A "), (family, proto, got)
            # not what passes through the node, nor what the node itself sends out
            for who in (other, pod, lab.node):
                got = lab.talk(who, proto, REMOTE[family], 8080)
                assert got.startswith("REMOTE "), (family, proto, who, got)


def test_podnet_wildcard_hostport_takes_no_transit_traffic(lab: Lab, tmp_path: Path) -> None:
    client = lab.client()
    pod, other = lab.pod("a"), lab.pod("b")
    conf = {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet",
            "ranges": ["10.244.7.0/24", "fd00:10:247::/64"], "dataDir": str(tmp_path),
            "capabilities": {"portMappings": True}}  # fmt: skip
    rc, out = lab.cni("ADD", {**conf, "runtimeConfig": {"portMappings": MAPS}},
                      container_id="hp-a", netns=pod)  # fmt: skip
    assert rc == 0, out
    rc, out = lab.cni("ADD", conf, container_id="hp-b", netns=other)
    assert rc == 0, out
    _route_back(lab, client, "10.244.7.0/24", "fd00:10:247::/64")
    lab.serve(pod, "A", 80)
    lab.serve(client, "REMOTE", 8080)
    lab.wait_dad(lab.node, client, pod, other)
    _check(lab, client, pod, other)


def _ptp(lab: Lab, cid: str, pod: str, data: Path) -> dict[str, Any]:
    conf = {"cniVersion": "1.0.0", "name": "pmlocal", "type": "ptp", "ipMasq": False,
            "ipam": {"type": "host-local", "dataDir": str(data),
                     "ranges": [[{"subnet": "10.251.0.0/24"}], [{"subnet": "fd00:251::/64"}]],
                     "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}}  # fmt: skip
    rc, out = lab.cni("ADD", conf, container_id=cid, netns=pod, plugin=f"{REF_DIR}/ptp",
                      env={"CNI_PATH": str(REF_DIR)})  # fmt: skip
    assert rc == 0, out
    return dict(out)


def test_podnet_portmap_wildcard_hostport_takes_no_transit_traffic(lab: Lab,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    need("reference-plugins")
    client = lab.client()
    pod, other = lab.pod("a"), lab.pod("b")
    prev = _ptp(lab, "pm-a", pod, tmp_path / "ipam")
    _ptp(lab, "pm-b", other, tmp_path / "ipam")
    conf = {"cniVersion": "1.0.0", "name": "pmlocal", "type": "podnet-portmap",
            "backend": "nftables", "capabilities": {"portMappings": True},
            "runtimeConfig": {"portMappings": MAPS}, "dataDir": PORTMAP_DATA, "prevResult": prev}
    rc, out = lab.cni("ADD", conf, container_id="pm-a", netns=pod,
                      plugin=str(VENV_BIN / "podnet-portmap"))  # fmt: skip
    assert rc == 0, out
    _route_back(lab, client, "10.251.0.0/24", "fd00:251::/64")
    lab.serve(pod, "A", 80)
    lab.serve(client, "REMOTE", 8080)
    lab.wait_dad(lab.node, client, pod, other)
    try:
        _check(lab, client, pod, other)
    finally:  # its claims live in a store shared by the session's podnet-portmap tests
        del conf["prevResult"]
        rc, out = lab.cni("DEL", conf, container_id="pm-a", netns=pod,
                          plugin=str(VENV_BIN / "podnet-portmap"))  # fmt: skip
    assert rc == 0, out
