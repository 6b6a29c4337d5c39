"""A network type that has forwards is one registered class (:mod:`labnet_driver`): networks of
it are created, and their forwards created, listed, changed and deleted, through
:class:`podnet.manage.manager.Manager` and through the REST API application in-process, in a
node namespace of the test's own, with the forwards' nft map elements checked in the kernel.
LXD's shape: lxd/network/driver_common.go (``ForwardCreate``/``ForwardUpdate``/
``ForwardDelete`` on every network type)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api_helpers import expected_maps, in_ns_python, kernel_maps
from netns import Lab

#: Runs in the node namespace: registers the type, then drives Manager and the API.
PROGRAM = """
import json
import labnet_driver
from starlette.testclient import TestClient
from podnet.api.app import create_app
from podnet.manage.manager import Manager
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, ForwardPort

labnet_driver.register()
data_dir, step = {data_dir!r}, {step!r}
out = {{}}
manager = Manager(data_dir, create=True)
api = TestClient(create_app(Manager(data_dir)))
base = "/1.0/networks/lab0/forwards"
if step == "make":
    made = manager.create_network("lab0", type="labnet", config={{"ipv4.address": "10.78.0.1/24"}})
    out["network"] = [made.name, made.type, made.config]
    port = ForwardPort.from_api({{"protocol": "tcp", "listen_port": "8080",
                                 "target_address": "10.78.0.5", "target_port": "80"}})
    forward = manager.create_forward("lab0", Forward("192.0.2.10", "by manager", {{}}, [port]))
    out["manager_forward"] = [forward.listen_address, forward.description]
    try:
        manager.create_forward("lab0", Forward("192.0.2.12", "", {{"target_address": "10.79.0.5"}}))
    except NetworkError as err:
        out["outside"] = [err.status, str(err)]
    r = api.post(base, json={{"listen_address": "192.0.2.11", "description": "by api",
                             "config": {{"target_address": "10.78.0.6"}},
                             "ports": [{{"protocol": "udp", "listen_port": "53",
                                        "target_address": "10.78.0.7"}}]}})
    out["api_create"] = r.status_code
    r = api.patch(base + "/192.0.2.10", json={{"config": {{"target_address": "10.78.0.8"}}}})
    out["api_patch"] = r.status_code
    out["api_get"] = api.get("/1.0/networks/lab0").json()["metadata"]["type"]
elif step == "remove":
    out["api_delete"] = api.delete(base + "/192.0.2.11").status_code
    out["manager_left"] = [f.listen_address for f in manager.list_forwards("lab0")]
    manager.update_forward("lab0", "192.0.2.10", description="changed", config={{}}, ports=[])
out["listing"] = api.get(base + "?recursion=1").json()["metadata"]
print(json.dumps(out))
"""


def _run(lab: Lab, data_dir: Path, step: str) -> dict[str, Any]:
    proc = in_ns_python(lab.node, PROGRAM.format(data_dir=str(data_dir), step=step))
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.root
def test_registered_type_has_networks_and_forwards(lab: Lab, tmp_path: Path) -> None:
    made = _run(lab, tmp_path, "make")
    assert made["network"] == ["lab0", "labnet", {"ipv4.address": "10.78.0.1/24"}]
    assert made["manager_forward"] == ["192.0.2.10", "by manager"]
    # the type's subnets are what its forwards may target (LXD's message)
    assert made["outside"] == [
        400,
        "Failed creating forward: Default target address is not within the network subnet",
    ]
    assert (made["api_create"], made["api_patch"], made["api_get"]) == (201, 200, "labnet")
    listing = {f["listen_address"]: f for f in made["listing"]}
    assert sorted(listing) == ["192.0.2.10", "192.0.2.11"]
    assert listing["192.0.2.10"]["config"] == {"target_address": "10.78.0.8"}
    assert kernel_maps(lab.node) == expected_maps(made["listing"])
    assert "192.0.2.11 . udp . 53 : 10.78.0.7 . 53" in kernel_maps(lab.node)["fwd_v4"]

    removed = _run(lab, tmp_path, "remove")
    assert removed["api_delete"] == 200 and removed["manager_left"] == ["192.0.2.10"]
    [only] = removed["listing"]
    assert (only["description"], only["config"], only["ports"]) == ("changed", {}, [])
    assert kernel_maps(lab.node) == expected_maps(removed["listing"])
    assert kernel_maps(lab.node)["fwd_drop_v4"] == {"192.0.2.10"}
