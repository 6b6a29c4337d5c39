"""podnet.runtime driving a real chain in a node namespace: podnet, then the reference
``tuning`` plugin on its result (CHECK after tuning changed the MTU included). The runtime's own
logic (conflists, versions, capabilities, the cache, the verbs over a fake exec, the subprocess
exec) is tests/unit/runtime/."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import podnet.runtime as runtime
from envgate import need
from podnet.runtime import (
    CNIRuntime,
    ResultCache,
    RuntimeConf,
    conflist_from_bytes,
    parse_port,
)
from podnet.runtime.invoke import SubprocessExec


# -- a real chain in namespaces ----------------------------------------------------------------
def chain_runtime(
    lab: Any, tmp_path: Path, version: str, tuning: dict[str, Any]
) -> tuple[CNIRuntime, runtime.NetworkConfigList]:
    need("reference-plugins")
    runtime.install(bin_dir=str(tmp_path / "bin"), conflist=False)
    net = conflist_from_bytes(
        json.dumps(
            {
                "cniVersion": version,
                "name": "chain",
                "plugins": [
                    {
                        "type": "podnet",
                        "ranges": ["10.244.7.0/24"],
                        "dataDir": str(tmp_path / "data"),
                        "capabilities": {"portMappings": True},
                    },
                    {"type": "tuning", **tuning},
                ],
            }
        ).encode()
    )
    cni = CNIRuntime(
        [str(tmp_path / "bin"), "/usr/lib/cni"],
        cache=ResultCache(str(tmp_path / "cache")),
        executor=SubprocessExec(wrapper=("ip", "netns", "exec", lab.node), timeout=60),
    )
    return cni, net


@pytest.mark.root
@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_chain_podnet_then_reference_tuning(lab: Any, tmp_path: Path, version: str) -> None:
    """tuning (reference, up to 1.0.0) refuses to run without prevResult: it acting on
    podnet's eth0 shows the chain works; DEL runs in reverse with the cached result."""
    from netns import sh

    cni, net = chain_runtime(
        lab, tmp_path, version, {"promisc": True, "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}}
    )
    pod = lab.pod()
    rt = RuntimeConf(
        container_id=f"chain-{lab.tag}",
        netns=f"/run/netns/{pod}",
        capability_args={"portMappings": [parse_port("8080:80")]},
    )
    out = cni.add(net, rt)
    assert out["cniVersion"] == version
    address = out["ips"][0]["address"]
    assert address.startswith("10.244.7.") and address.endswith("/32")
    link = json.loads(sh("ip", "-n", pod, "-j", "-d", "link", "show", "eth0").stdout)[0]
    assert link["promiscuity"] == 1  # tuning ran on podnet's interface
    assert lab.exec(pod, "sysctl", "-n", "net.ipv4.conf.eth0.arp_notify").stdout.strip() == "1"
    cni.check(net, rt)
    cni.delete(net, RuntimeConf(container_id=rt.container_id, netns=rt.netns))
    assert cni.cache.entries() == []
    assert sh("ip", "-n", pod, "link", "show", "eth0", check=False).returncode != 0
    host_links = json.loads(sh("ip", "-n", lab.node, "-j", "link", "show").stdout)
    assert [li["ifname"] for li in host_links if li["ifname"].startswith("pn")] == []


@pytest.mark.root
def test_chain_check_after_tuning_changes_mtu(lab: Any, tmp_path: Path) -> None:
    """tuning (after podnet) sets eth0's MTU to 1400, away from the MTU podnet set and
    recorded: the pod's link has 1400, and podnet's CHECK passes (a later plugin of the chain
    may change the link; Debian's tuning 1.1.1 does not report the MTU in its result, so
    podnet must not hold the link to its own value)."""
    from netns import sh

    cni, net = chain_runtime(lab, tmp_path, "1.0.0", {"mtu": 1400})
    pod = lab.pod()
    rt = RuntimeConf(container_id=f"mtu-{lab.tag}", netns=f"/run/netns/{pod}")
    cni.add(net, rt)
    try:
        link = json.loads(sh("ip", "-n", pod, "-j", "link", "show", "eth0").stdout)[0]
        assert link["mtu"] == 1400
        with sqlite3.connect(tmp_path / "data" / "podnet.db") as db:
            recorded = db.execute("SELECT interface_mtu FROM pods").fetchall()
        assert len(recorded) == 1 and recorded[0][0] not in (None, 1400), recorded
        cni.check(net, rt)
    finally:
        cni.delete(net, rt)
