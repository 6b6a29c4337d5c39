"""Chains through the runtime (podnetctl net add/check/del, libcni-style):
podnet followed by the reference portmap, tuning and bandwidth; the reference bridge with
podnet-ipam or host-local followed by podnet-portmap (both backends). Each reaches the pod through its
hostPort from another node address, from 127.0.0.1 and from the pod itself, IPv4 and IPv6."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from netns import NODE_ADDR4, NODE_ADDR6, PLUGIN_ENV, REFUSED, Lab
from paths import VENV_BIN

pytestmark = pytest.mark.root

BIN = VENV_BIN
REF = "/usr/lib/cni"


class Runtime:
    """podnetctl in the node namespace with a private NETCONFPATH, CNI_PATH and cache."""

    def __init__(self, lab: Lab, tmp: Path, conflist: dict[str, Any]) -> None:
        self.lab = lab
        (tmp / "net.d").mkdir()
        (tmp / "net.d" / "10-chain.conflist").write_text(json.dumps(conflist))
        subprocess.run([str(BIN / "podnetctl"), "install", "--bin-dir", str(tmp / "bin"), "--no-conflist"],
                       check=True, capture_output=True)
        self.env = {"NETCONFPATH": str(tmp / "net.d"), "CNI_PATH": f"{tmp / 'bin'}:{REF}",
                    "PODNETCTL_CACHE_DIR": str(tmp / "cache"), "PATH": os.environ["PATH"],
                    **PLUGIN_ENV}

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["ip", "netns", "exec", self.lab.node, "env", "-i",
                *(f"{k}={v}" for k, v in self.env.items()), str(BIN / "podnetctl"), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def reach(lab: Lab, client: str, pod: str, port: int) -> None:
    for addr in (NODE_ADDR4, NODE_ADDR6):
        assert lab.talk(client, "tcp", addr, port).startswith("P "), ("client", addr)
        assert lab.talk(client, "udp", addr, port).startswith("P "), ("client udp", addr)
        assert lab.talk(pod, "tcp", addr, port).startswith("P "), ("hairpin", addr)
    assert lab.talk(lab.node, "tcp", "127.0.0.1", port).startswith("P "), "localhost"


def lifecycle(lab: Lab, tmp: Path, conflist: dict[str, Any], check: bool = True) -> None:
    client = lab.client()
    pod = lab.pod()
    rt = Runtime(lab, tmp, conflist)
    out = rt.ctl("net", "add", "chain", f"/run/netns/{pod}", "--port", "18080:80/tcp", "--port", "18080:80/udp")
    assert out.returncode == 0, out.stderr
    lab.wait_dad(pod, lab.node)
    lab.serve(pod, "P", 80)
    reach(lab, client, pod, 18080)
    checked = rt.ctl("net", "check", "chain", f"/run/netns/{pod}")
    assert (checked.returncode == 0) is check, checked.stderr
    if not check:
        assert "plugin portmap failed (check)" in checked.stderr, checked.stderr
    out = rt.ctl("net", "del", "chain", f"/run/netns/{pod}")
    assert out.returncode == 0, out.stderr
    assert lab.talk(client, "tcp", NODE_ADDR4, 18080) == REFUSED


def test_podnet_then_reference_portmap_tuning_bandwidth(lab: Lab, tmp_path: Path) -> None:
    conflist = {"cniVersion": "1.0.0", "name": "chain", "plugins": [
        {"type": "podnet", "ranges": ["10.244.7.0/24", "fd00:7::/64"], "dataDir": str(tmp_path / "data")},
        {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        {"type": "tuning", "sysctl": {"net.core.somaxconn": "512"}},
        {"type": "bandwidth", "ingressRate": 100000000, "ingressBurst": 1000000,
         "egressRate": 100000000, "egressBurst": 1000000},
    ]}
    # Debian's portmap 1.1.1 fails its own CHECK (it looks for the IPv4 rules with ip6tables):
    # CHECK of this chain is expected to fail in portmap, not in podnet.
    lifecycle(lab, tmp_path, conflist, check=False)
    # The reference portmap's rules are gone with the DEL, podnet's rows too.
    assert "CNI-DN-" not in lab.exec(lab.node, "iptables-save", "-t", "nat").stdout


IPAMS = {
    "podnet-ipam": lambda data: {"type": "podnet-ipam", "ranges": ["10.244.8.0/24", "fd00:8::/64"],
                                 "dataDir": data},
    "host-local": lambda data: {"type": "host-local", "dataDir": data,
                                "ranges": [[{"subnet": "10.244.8.0/24"}], [{"subnet": "fd00:8::/64"}]],
                                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]},
}


@pytest.mark.parametrize("ipam", sorted(IPAMS))
@pytest.mark.parametrize("backend", ["iptables", "nftables"])
def test_reference_bridge_then_podnet_portmap(lab: Lab, tmp_path: Path, backend: str, ipam: str) -> None:
    conflist = {"cniVersion": "1.0.0", "name": "chain", "plugins": [
        {"type": "bridge", "bridge": "pnbr0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
         "ipam": IPAMS[ipam](str(tmp_path / "data"))},
        {"type": "podnet-portmap", "capabilities": {"portMappings": True}, "backend": backend,
         "dataDir": str(tmp_path / "portmap-data")},
    ]}
    lifecycle(lab, tmp_path, conflist)
    if backend == "iptables":
        assert "CNI-DN-" not in lab.exec(lab.node, "iptables-save", "-t", "nat").stdout
    else:
        assert "dn-" not in lab.exec(lab.node, "nft", "list", "table", "inet", "podnet_portmap").stdout
