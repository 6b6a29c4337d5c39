"""A new network type is a registered driver (issue 15, acceptance): :mod:`tests.ext_driver`
attaches pods to a bridge podnet does not manage, and ADD, CHECK, DEL and GC pass through the
real ``podnet`` plugin with no change to the plugin — only ``PODNET_DRIVERS`` names it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from netns import Lab
from podnet.store import open_store
from runtimes import PODNETCTL

TESTS = str(Path(__file__).resolve().parent)
ENV = {"PODNET_DRIVERS": "extbridge=ext_driver:ExtBridgeDriver", "PYTHONPATH": TESTS}


def _conf(data_dir: Path) -> dict:
    return {"cniVersion": "1.1.0", "name": "ext", "type": "podnet", "network": "ext0",
            "dataDir": str(data_dir)}


def _links(lab: Lab) -> dict[str, dict]:
    out = subprocess.run(["ip", "-n", lab.node, "-j", "-d", "link", "show"], capture_output=True,
                         text=True, check=True).stdout
    return {link["ifname"]: link for link in json.loads(out)}


@pytest.mark.root
def test_registered_driver_passes_add_check_del_gc(lab: Lab, tmp_path: Path) -> None:
    subprocess.run(["ip", "-n", lab.node, "link", "add", "brx", "type", "bridge"], check=True)
    subprocess.run(["ip", "-n", lab.node, "addr", "add", "10.77.0.1/24", "dev", "brx"], check=True)
    subprocess.run(["ip", "-n", lab.node, "link", "set", "brx", "up"], check=True)
    ctl = ["ip", "netns", "exec", lab.node, "env", f"PODNET_DRIVERS={ENV['PODNET_DRIVERS']}",
           f"PYTHONPATH={TESTS}", PODNETCTL, "network", "--data-dir", str(tmp_path)]
    # podnetctl and its API know the type only through the registry
    bad = subprocess.run([*ctl[:5], *ctl[6:], "--init", "create", "ext0", "--type=extbridge"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "Unknown driver" in bad.stderr, bad
    made = subprocess.run([*ctl, "--init", "create", "ext0", "--type=extbridge", "parent=brx",
                           "ipv4.address=10.77.0.1/24"], capture_output=True, text=True)
    assert made.returncode == 0, made
    listed = subprocess.run([*ctl, "list", "-f", "csv"], capture_output=True, text=True)
    assert "ext0,extbridge" in listed.stdout, listed
    pod = lab.pod()

    rc, result = lab.cni("ADD", _conf(tmp_path), container_id="c1", netns=pod, env=ENV)
    assert rc == 0, result
    [address] = [ip["address"] for ip in result["ips"]]
    assert address.startswith("10.77.0.") and address.endswith("/24") and address != "10.77.0.1/24"
    host_if = result["interfaces"][0]["name"]
    links = _links(lab)
    assert links[host_if].get("master") == "brx"            # a port of the foreign bridge
    assert links["brx"].get("ifalias", "") == ""              # which podnet did not mark
    route = lab.exec(pod, "ip", "-j", "route", "get", "10.77.0.1").stdout
    assert json.loads(route)[0]["dev"] == "eth0"     # on the bridge's subnet, no gateway hop

    check = {**_conf(tmp_path), "prevResult": result}
    rc, out = lab.cni("CHECK", check, container_id="c1", netns=pod, env=ENV)
    assert rc == 0, out

    # Without the registration the same network is refused by name, before anything is made.
    rc, out = lab.cni("ADD", _conf(tmp_path), container_id="c2", netns=lab.pod())
    assert rc == 1 and out["code"] == 7 and "'extbridge' has no driver" in out["msg"], out

    rc, out = lab.cni("DEL", _conf(tmp_path), container_id="c1", netns=pod, env=ENV)
    assert rc == 0, out
    assert host_if not in _links(lab) and "brx" in _links(lab)   # the bridge stays: not podnet's

    # GC: an attachment not in valid-attachments goes, the bridge stays.
    rc, result = lab.cni("ADD", _conf(tmp_path), container_id="c3", netns=pod, env=ENV)
    assert rc == 0, result
    gc = {**_conf(tmp_path), "cni.dev/valid-attachments": []}
    rc, out = lab.cni("GC", gc, env=ENV)
    assert rc == 0, out
    assert result["interfaces"][0]["name"] not in _links(lab) and "brx" in _links(lab)
    with open_store(str(tmp_path)) as store:
        assert store.pods.all() == []
    gone = subprocess.run([*ctl, "delete", "ext0"], capture_output=True, text=True)
    assert gone.returncode == 0, gone
    assert "brx" in _links(lab)                      # deleting the network left the bridge


@pytest.mark.parametrize("setting, reason", [
    ("x=os:system", "is not a network driver"),            # importable, callable, not a driver
    ("x=no_such_module:Driver", "cannot be loaded"),
    ("x=podnet.drivers.base:Nothing", "cannot be loaded"),
    ("x=os.system", "is not type=module:Class"),
    ("x y=os:path", "is not type=module:Class"),
])
def test_registry_refuses_what_is_not_a_driver(monkeypatch: pytest.MonkeyPatch, setting: str,
                                               reason: str) -> None:
    """``PODNET_DRIVERS`` is the administrator's, but a mistake in it is a clear code 7 naming
    the entry, never a crash or a call of whatever it names."""
    from podnet import drivers
    from podnet.errors import CNIError

    monkeypatch.setenv("PODNET_DRIVERS", setting)
    monkeypatch.setattr(drivers, "_loaded", {})
    with pytest.raises(CNIError) as err:
        drivers.get("x")
    assert err.value.code == 7 and reason in err.value.msg, err.value.msg
    assert drivers.get("ptp").type == "ptp"  # the built-in types are not affected
