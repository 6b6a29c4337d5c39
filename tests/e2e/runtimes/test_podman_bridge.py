"""podman 4.3 (CNI backend) runs a container on a podnet bridge network.

tests/support/runtimes.py runs podman with ``nsenter --net`` in the node namespace, as a runtime in a
container runs: the plugin's ``/sys`` is the test host's, not the node's. The container joins
the bridge ``network create`` made, is reached at its address from the node, and ``rm -f``
leaves no row, host veth or cache entry behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_real_runtimes import HTTPD, busybox_layer, require, workdir  # noqa: F401 - fixtures

from netns import VENV_BIN, Lab
from runtimes import IMAGE_NAME, CniSetup, Podman, assert_clean, fetch

pytestmark = [pytest.mark.runtime, pytest.mark.root]

PODNETCTL = str(VENV_BIN / "podnetctl")


def test_podman_run_on_a_bridge_network(lab: Lab, workdir: Path, busybox_layer: Path) -> None:  # noqa: F811
    require("podman", "runc", "nsenter")
    cni = CniSetup(workdir, f"pnt-{lab.tag}", ["10.244.62.0/24"])
    bridge = f"pb{lab.tag}"
    made = lab.exec(
        lab.node, PODNETCTL, "network", "--data-dir", str(cni.data_dir), "--init", "create",
        bridge, "ipv4.address=10.245.62.1/24", "ipv6.address=none", check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    cni.conflist["plugins"] = [
        {
            "type": "podnet",
            "network": bridge,
            "dataDir": str(cni.data_dir),
            "capabilities": {"portMappings": True},
        }  # fmt: skip
    ]
    cni.conflist_path.write_text(json.dumps(cni.conflist, indent=2) + "\n")
    podman = Podman(lab.node, workdir, cni)
    name = f"web-{lab.tag}"
    try:
        podman("import", str(busybox_layer), IMAGE_NAME)
        podman("run", "-d", "--name", name, "--network", cni.network,
               "--cgroup-parent", podman.cgroup_parent, IMAGE_NAME, *HTTPD)  # fmt: skip
        adds = cni.calls("ADD")
        assert len(adds) == 1 and adds[0]["rc"] == 0, cni.describe_calls()
        result = json.loads(adds[0]["stdout"])
        ip = result["ips"][0]["address"].split("/")[0]
        assert ip.startswith("10.245.62."), result
        host = next(i["name"] for i in result["interfaces"] if not i.get("sandbox"))
        link = json.loads(lab.exec(lab.node, "ip", "-j", "link", "show", host).stdout)[0]
        assert link.get("master") == bridge, link
        fetch(lab.node, f"http://{ip}:80/")
        podman("rm", "-f", "--time", "0", name)
        assert [c["rc"] for c in cni.calls() if c["verb"] != "VERSION"] == [0, 0], (
            cni.describe_calls()
        )
        assert_clean(lab.node, cni.data_dir, cni.describe_calls)
    finally:
        podman.close()
        lab.exec(lab.node, PODNETCTL, "network", "--data-dir", str(cni.data_dir), "delete", bridge,
                 check=False)  # fmt: skip
