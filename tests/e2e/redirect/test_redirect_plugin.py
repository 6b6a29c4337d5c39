"""podnet-redirect as a chained plugin: after podnet and after the reference ptp,
through the runtime (podnetctl net add/check/del), with pod annotations from runtimeConfig
changing the skipped ports; pods that do not ask are left alone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_redirect_e2e import log, seen, start_proxy  # noqa: F401 - the log fixture

from netns import CLIENT_ADDR4, NODE_ADDR4, PLUGIN_ENV, Lab
from paths import VENV_BIN

pytestmark = pytest.mark.root

BIN = VENV_BIN
MAINS = {
    "podnet": lambda data: {"type": "podnet", "ranges": ["10.244.6.0/24"], "dataDir": data},
    "ptp": lambda data: {"type": "ptp", "ipMasq": False, "ipam": {
        "type": "host-local", "subnet": "10.244.6.0/24", "dataDir": data, "routes": [{"dst": "0.0.0.0/0"}]}},
}


def runtime(lab: Lab, tmp: Path, main: str, firewall: str) -> tuple[dict[str, str], Any]:
    conflist = {"cniVersion": "1.0.0", "name": "mesh", "plugins": [
        MAINS[main](str(tmp / "data")),
        {"type": "podnet-redirect", "capabilities": {"io.kubernetes.cri.pod-annotations": True},
         "firewall": firewall, "linkerd": {"inbound-ports-to-ignore": ["4190"], "proxy-uid": 2102}},
    ]}
    (tmp / "net.d").mkdir()
    (tmp / "net.d" / "10-mesh.conflist").write_text(json.dumps(conflist))
    subprocess.run([str(BIN / "podnetctl"), "install", "--bin-dir", str(tmp / "bin"), "--no-conflist"],
                   check=True, capture_output=True)
    env = {"NETCONFPATH": str(tmp / "net.d"), "CNI_PATH": f"{tmp / 'bin'}:/usr/lib/cni",
           "PODNETCTL_CACHE_DIR": str(tmp / "cache"), "PATH": os.environ["PATH"], **PLUGIN_ENV}

    def ctl(*args: str, annotations: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        extra = {"CAP_ARGS": json.dumps({"io.kubernetes.cri.pod-annotations": annotations})} if annotations else {}
        argv = ["ip", "netns", "exec", lab.node, "env", "-i", *(f"{k}={v}" for k, v in {**env, **extra}.items()),
                str(BIN / "podnetctl"), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    return env, ctl


@pytest.mark.parametrize("firewall", ["nftables", "iptables-nft"])
@pytest.mark.parametrize("main", sorted(MAINS))
def test_chained_redirect(lab: Lab, tmp_path: Path, log: Path, main: str, firewall: str) -> None:  # noqa: F811
    client = lab.client()
    lab.exec(client, "ip", "route", "add", "10.244.6.0/24", "via", NODE_ADDR4)
    _, ctl = runtime(lab, tmp_path, main, firewall)
    pod, plain = lab.pod("meshed"), lab.pod("plain")
    annotations = {"linkerd.io/inject": "enabled", "config.linkerd.io/skip-inbound-ports": "9999"}
    out = ctl("net", "add", "mesh", f"/run/netns/{pod}", annotations=annotations)
    assert out.returncode == 0, out.stderr
    pod_ip = json.loads(out.stdout)["ips"][0]["address"].split("/")[0]
    out = ctl("net", "add", "mesh", f"/run/netns/{plain}")  # no annotations: not redirected
    assert out.returncode == 0, out.stderr
    plain_ip = json.loads(out.stdout)["ips"][0]["address"].split("/")[0]
    start_proxy(lab, pod, log)
    for ns in (pod, plain):
        lab.serve(ns, "APP", 8080)
        lab.serve(ns, "ADMIN", 9999)
    lab.serve(client, "EXT", 7070)
    # Inbound through the proxy; the annotation's port and the plain pod bypass it.
    answer = lab.talk(client, "tcp", pod_ip, 8080)
    assert answer.startswith("APP ") and CLIENT_ADDR4 not in answer, answer
    assert f"in {pod_ip} 8080" in seen(log)
    assert CLIENT_ADDR4 in lab.talk(client, "tcp", pod_ip, 9999)
    assert CLIENT_ADDR4 in lab.talk(client, "tcp", plain_ip, 8080)
    # Outbound through the outbound port.
    assert lab.talk(pod, "tcp", CLIENT_ADDR4, 7070).startswith("EXT ")
    assert f"out {CLIENT_ADDR4} 7070" in seen(log)
    out = ctl("net", "check", "mesh", f"/run/netns/{pod}")
    assert out.returncode == 0, out.stderr
    out = ctl("net", "del", "mesh", f"/run/netns/{pod}")
    assert out.returncode == 0, out.stderr
    rules = lab.exec(pod, "nft", "list", "ruleset").stdout
    assert "proxy-init" not in rules and "PROXY_INIT" not in rules
    assert ctl("net", "del", "mesh", f"/run/netns/{plain}").returncode == 0
