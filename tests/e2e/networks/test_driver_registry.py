"""A new network type is a registered driver: :mod:`tests.ext_driver`
attaches pods to a bridge podnet does not manage, and ADD, CHECK, DEL and GC pass through the
real ``podnet`` plugin with no change to the plugin — only ``PODNET_DRIVERS`` names it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from netns import Lab
from paths import SUPPORT
from podnet.store import open_store
from runtimes import PODNETCTL

TESTS = str(SUPPORT)
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


NO_POD_ENV = {"PODNET_DRIVERS": "extnopods=ext_driver:NoPodsDriver,exthalf=ext_driver:HalfDriver",
              "PYTHONPATH": TESTS}
OVS_DIRS = ("OVS_RUNDIR", "OVS_DBDIR", "OVN_RUNDIR")
#: network name → (type, config) of the rows a node's store holds for a conflist naming it
#: (an uplink and an OVN network as the NB's mirror writes them; the node has no NB here).
ROWS = {"up9": ("physical", {"parent": "eth9"}),
        "ov9": ("ovn", {"network": "up9", "ipv4.address": "10.61.0.1/24", "ipv6.address": "none"}),
        "np9": ("extnopods", {}), "hf9": ("exthalf", {})}


@pytest.mark.root
def test_no_pod_verb_answers_999_for_a_type(lab: Lab, tmp_path: Path) -> None:
    """A conflist naming a network whose type holds no pods (``physical``, a registered driver
    that keeps the base defaults), one that needs what the node lacks (``ovn`` without OVS or
    an NB) or a driver whose verb raises NotImplementedError: ADD, CHECK and STATUS answer 7
    naming the type (11 naming OVS for ``ovn``), DEL (twice) and GC answer 0 (a runtime
    retries a failed DEL for ever), nothing answers 999 and nothing is made in the pod."""
    with open_store(str(tmp_path)) as store, store.write():
        for name, (k, c) in ROWS.items():
            store.networks.insert(name, k, "", c)
    # OVS tools pointed at an empty directory: never this machine's Open vSwitch
    env = {**NO_POD_ENV, **{k: str(tmp_path / "no-ovs") for k in OVS_DIRS}}
    for network, (kind, _) in sorted(ROWS.items()):
        conf = {"cniVersion": "1.1.0", "name": "n", "type": "podnet", "network": network,
                "dataDir": str(tmp_path)}
        pod = lab.pod()
        answers: dict[str, list[tuple[int, Any]]] = {}
        for verb, extra in (("ADD", {}), ("CHECK", {"prevResult": {"cniVersion": "1.1.0"}}),
                            ("STATUS", {}), ("DEL", {}), ("DEL", {}),
                            ("GC", {"cni.dev/valid-attachments": []})):  # fmt: skip
            rc, out = lab.cni(verb, {**conf, **extra}, container_id=f"c-{network}", netns=pod,
                              env=env)  # fmt: skip
            answers.setdefault(verb, []).append((rc, out))
            assert not (out and out.get("code") == 999), (network, verb, out)
        add_rc, add = answers["ADD"][0]
        what = {"physical": "'up9' is of type physical, which holds no pods",
                "extnopods": "'np9' is of type extnopods, which holds no pods",
                "exthalf": "type 'exthalf' does not implement ADD",
                "ovn": "database unreachable"}[kind]  # fmt: skip
        code = 11 if kind == "ovn" else 7
        assert add_rc == 1 and add["code"] == code and what in add["msg"], (network, add)
        assert answers["DEL"] == [(0, None), (0, None)], (network, answers["DEL"])
        if kind in ("physical", "extnopods"):
            for verb in ("CHECK", "STATUS"):
                rc, out = answers[verb][0]
                assert rc == 1 and out["code"] == 7 and what in out["msg"], (network, verb, out)
            assert answers["GC"] == [(0, None)], (network, answers["GC"])
        assert "eth0" not in lab.exec(pod, "ip", "-o", "link", "show").stdout  # nothing made


def _ext_rows(data_dir: Path) -> None:
    with open_store(str(data_dir)) as store, store.write():
        store.networks.insert("ext0", "extbridge", "", {"parent": "brx",
                                                        "ipv4.address": "10.77.0.1/24"})


def _node_conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "etc" / "podnet.conf"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


@pytest.mark.root
@pytest.mark.parametrize("missing", ["no-registration", "broken-module"])
def test_del_and_gc_release_without_the_driver(lab: Lab, tmp_path: Path, missing: str) -> None:
    """The runtime's cleanup process (podman's conmon exit command) lacks PODNET_DRIVERS, or
    the driver no longer imports: DEL and GC still release the attachment — row, host veth,
    nothing else — with the generic veth driver and answer 0; ADD is still refused (7)."""
    subprocess.run(["ip", "-n", lab.node, "link", "add", "brx", "type", "bridge"], check=True)
    subprocess.run(["ip", "-n", lab.node, "link", "set", "brx", "up"], check=True)
    _ext_rows(tmp_path)
    without = ({"PYTHONPATH": TESTS} if missing == "no-registration" else
               {"PODNET_DRIVERS": "extbridge=ext_driver_gone:ExtBridgeDriver",
                "PYTHONPATH": TESTS})  # fmt: skip
    pod = lab.pod()
    rc, result = lab.cni("ADD", _conf(tmp_path), container_id="c1", netns=pod, env=ENV)
    assert rc == 0, result
    host_if = result["interfaces"][0]["name"]
    assert host_if in _links(lab)

    rc, out = lab.cni("ADD", _conf(tmp_path), container_id="c2", netns=lab.pod(), env=without)
    assert rc == 1 and out["code"] == 7 and "extbridge" in out["msg"], out
    rc, out = lab.cni("DEL", _conf(tmp_path), container_id="c1", netns=pod, env=without)
    assert (rc, out) == (0, None)
    assert host_if not in _links(lab) and "brx" in _links(lab)
    with open_store(str(tmp_path)) as store:
        assert store.pods.all() == []
    log = (tmp_path / "podnet.log")
    assert not log.exists() or "Traceback" not in log.read_text()

    rc, result = lab.cni("ADD", _conf(tmp_path), container_id="c3", netns=pod, env=ENV)
    assert rc == 0, result
    gc = {**_conf(tmp_path), "cni.dev/valid-attachments": []}
    rc, out = lab.cni("GC", gc, env=without)
    assert (rc, out) == (0, None)
    assert result["interfaces"][0]["name"] not in _links(lab) and "brx" in _links(lab)
    with open_store(str(tmp_path)) as store:
        assert store.pods.all() == [] and [n.name for n in store.networks.all()] == ["ext0"]


@pytest.mark.root
def test_node_config_registers_a_driver(lab: Lab, tmp_path: Path) -> None:
    """``driver = type=module:Class`` in the node configuration: every verb finds the type
    with no PODNET_DRIVERS in the environment; a type PODNET_DRIVERS names differently is 7."""
    subprocess.run(["ip", "-n", lab.node, "link", "add", "brx", "type", "bridge"], check=True)
    subprocess.run(["ip", "-n", lab.node, "link", "set", "brx", "up"], check=True)
    data = tmp_path / "data"
    _ext_rows(data)
    conf = _node_conf(tmp_path, f"data_dir = {data}\ndriver = extbridge=ext_driver:ExtBridgeDriver\n")
    env = {"PODNET_CONF": conf, "PYTHONPATH": TESTS}
    pod = lab.pod()
    rc, result = lab.cni("ADD", _conf(data), container_id="c1", netns=pod, env=env)
    assert rc == 0, result
    assert _links(lab)[result["interfaces"][0]["name"]].get("master") == "brx"
    rc, out = lab.cni("CHECK", {**_conf(data), "prevResult": result}, container_id="c1",
                      netns=pod, env=env)  # fmt: skip
    assert rc == 0, out
    clash = {**env, "PODNET_DRIVERS": "extbridge=ext_driver:HalfDriver"}
    rc, out = lab.cni("CHECK", {**_conf(data), "prevResult": result}, container_id="c1",
                      netns=pod, env=clash)  # fmt: skip
    assert rc == 1 and out["code"] == 7 and "name one class" in out["msg"], out
    rc, out = lab.cni("DEL", _conf(data), container_id="c1", netns=pod, env=env)
    assert (rc, out) == (0, None)
    assert result["interfaces"][0]["name"] not in _links(lab)


@pytest.mark.parametrize("kind", ["ptp", "bridge"])
def test_plain_veth_teardown_types_have_no_del_step(kind: str) -> None:
    """The types whose DEL loads no driver (:data:`podnet.drivers.VETH_TEARDOWN`) are exactly
    those whose class keeps the generic veth DEL and adds no release step."""
    from podnet import drivers
    from podnet.drivers.base import Driver
    from podnet.drivers.pods import VethDriver

    assert kind in drivers.VETH_TEARDOWN
    cls = type(drivers.get(kind))
    assert issubclass(cls, VethDriver) and cls.release is Driver.release, cls


def test_plain_veth_teardown_is_only_for_builtin_veth_types(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:  # fmt: skip
    """Every other built-in type adds DEL steps of its own (or holds no pods), so it is not on
    the plain path; nor is a conflist with ``ipam``, nor a type a driver registered in this
    process replaces."""
    from podnet import drivers
    from podnet.drivers.base import Driver
    from podnet.drivers.pods import VethDriver
    from podnet.netconf import StoreConf

    for kind in set(drivers.BUILTIN) - set(drivers.VETH_TEARDOWN):
        cls = type(drivers.get(kind))
        assert not cls.takes_pods or cls.release is not Driver.release, kind
    base = {"cniVersion": "1.1.0", "name": "n", "type": "podnet", "dataDir": str(tmp_path)}
    conf = StoreConf(base)
    assert drivers.plain_veth_teardown(conf, None)
    assert drivers.plain_veth_teardown(conf, "bridge")
    assert not drivers.plain_veth_teardown(conf, "ovn")
    assert not drivers.plain_veth_teardown(conf, "extbridge")
    ipam = StoreConf({**base, "ipam": {"type": "host-local"}})
    assert not drivers.plain_veth_teardown(ipam, None)
    monkeypatch.setattr(drivers, "_loaded", {})
    monkeypatch.setattr(drivers, "_registered", set())
    drivers.register("bridge", VethDriver())
    assert not drivers.plain_veth_teardown(conf, "bridge")
    assert drivers.plain_veth_teardown(conf, "ptp")
