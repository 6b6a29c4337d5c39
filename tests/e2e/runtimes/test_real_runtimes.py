"""podnet driven by real container runtimes, inside a node network namespace.

* podman 4.3 with its CNI backend: ``podman run -d -p HOST:80`` of a busybox httpd, fetched
  through 127.0.0.1:HOST in the node, through the node's address from another host (the lab's
  client namespace) and at the pod IP; ``network reload`` and ``restart`` (DEL+ADD); stop/rm.
* containerd 1.6 ``ctr run --cni``: the container reached at its pod IP from the node. ctr 1.6
  sends DEL only from a *foreground* ``ctr run`` once the task exits (with an empty CNI_NETNS
  and the cached result as prevResult); ``ctr run -d`` never sends DEL, whatever is done to the
  task and container afterwards — the second test shows that, then sends the DEL containerd
  would (after the pod's netns is gone) and checks podnet releases everything.

After each runtime is done: no rows in podnet's database, no ``pn*`` host veths, no hostPort map
elements in ``inet podnet``, no libcni cache entry, and every plugin call exited 0. Each test
prints the calls it observed (``pytest -rP`` shows them). Skips only when a binary is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import NODE_ADDR4, Lab
from runtimes import (
    IMAGE_NAME,
    PODNETCTL,
    VENV_PYTHON,
    CniSetup,
    Containerd,
    Podman,
    assert_clean,
    fetch,
    in_netns,
    kill_pids,
    leftover_state,
    oci_image_tar,
    pids_mentioning,
    recorded_calls,
    rootfs_tar,
    static_busybox,
    unmount_all,
    wait_for,
)

pytestmark = [pytest.mark.runtime, pytest.mark.root]

POD_RANGE = "10.244.61.0/24"
HOST_PORT = 18080
HTTPD = ("httpd", "-f", "-p", "80", "-h", "/www")  # busybox httpd serving /www/index.html


def require(*binaries: str) -> None:
    """The runtime's tools: missing ones fail the test (envgate), unless a person opted out."""
    need(*binaries)


@pytest.fixture
def workdir(lab: Lab) -> Iterator[Path]:
    """A private directory for runtime storage and state; removed (mounts first) at teardown."""
    path = Path(tempfile.mkdtemp(prefix=f"podnet-rt-{lab.tag}-"))
    try:
        yield path
    finally:
        unmount_all(path)
        kill_pids(pids_mentioning(str(path)))
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def busybox_layer(workdir: Path) -> Path:
    need("busybox-static")
    busybox = static_busybox()
    assert busybox is not None
    return rootfs_tar(busybox, workdir / "rootfs.tar")


@pytest.fixture
def podman(
    request: pytest.FixtureRequest, lab: Lab, workdir: Path, busybox_layer: Path
) -> Iterator[Podman]:
    """podman with the seed's conflist shape (``capabilities: {portMappings}``), or with the
    capabilities given by indirect parametrization."""
    require("podman", "runc", "nsenter")
    caps = getattr(request, "param", None) or {"portMappings": True}
    pm = Podman(lab.node, workdir, CniSetup(workdir, f"pnt-{lab.tag}", [POD_RANGE], caps))
    try:
        pm("import", str(busybox_layer), IMAGE_NAME)
        yield pm
    finally:
        pm.close()


@pytest.fixture
def containerd(lab: Lab, workdir: Path, busybox_layer: Path) -> Iterator[Containerd]:
    require("containerd", "ctr", "containerd-shim-runc-v2", "runc", "nsenter", "unshare")
    cni = CniSetup(workdir, f"pnt-{lab.tag}", [POD_RANGE])
    ctd = Containerd(lab.node, workdir, cni, namespace=f"pnt-{lab.tag}")
    try:
        ctd.start()
        image = oci_image_tar(busybox_layer, workdir / "image-oci.tar")
        ctd.ctr("images", "import", "--snapshotter", "native", str(image))
        yield ctd
    finally:
        ctd.close()


def only(calls: list[dict[str, Any]], what: str) -> dict[str, Any]:
    assert len(calls) == 1, f"expected one {what}, got {len(calls)}"
    return calls[0]


def pod_ipv4(add: dict[str, Any]) -> str:
    result = json.loads(add["stdout"])
    ips = [ip["address"].split("/")[0] for ip in result["ips"] if "." in ip["address"]]
    assert ips, f"ADD result without an IPv4 address: {result}"
    return str(ips[0])


def assert_all_calls_ok(cni: CniSetup) -> None:
    failed = [c for c in cni.calls() if c["rc"] != 0]
    assert not failed, "plugin calls failed:\n" + cni.describe_calls()


# -- podman -----------------------------------------------------------------------------------------
def podman_run_web(podman: Podman, name: str) -> dict[str, Any]:
    """``podman run -d -p HOST_PORT:80`` of busybox httpd; returns the recorded ADD."""
    cni = podman.cni
    podman("run", "-d", "--name", name, "--network", cni.network, "-p", f"{HOST_PORT}:80",
           "--cgroup-parent", podman.cgroup_parent, IMAGE_NAME, *HTTPD)  # fmt: skip
    add = only(cni.calls("ADD"), "ADD after podman run")
    assert add["rc"] == 0, cni.describe_calls()
    return add


def assert_podman_clean(podman: Podman, node: str) -> None:
    cni = podman.cni
    assert_clean(node, cni.data_dir, cni.describe_calls)
    results = Path("/var/lib/cni/results")
    cached = list(results.glob(f"{cni.network}-*")) if results.is_dir() else []
    assert not cached, f"libcni cache entries left: {cached}"
    assert not podman("ps", "--all", "--quiet").stdout.strip()
    assert_all_calls_ok(cni)


def test_podman_cni_hostport(lab: Lab, podman: Podman) -> None:
    """podman run -p → ADD with runtimeConfig.portMappings; reachable through the hostPort from
    the node (127.0.0.1) and from another host (the node's address), and at the pod IP; restart
    (DEL+ADD) keeps it working; stop sends DEL with the netns still there; rm leaves nothing."""
    cni, node = podman.cni, lab.node
    client = lab.client()
    name = f"web-{lab.tag}"
    started = time.monotonic()
    add = podman_run_web(podman, name)
    mappings = json.loads(add["stdin"])["runtimeConfig"]["portMappings"]
    assert [{k: v for k, v in m.items() if v != ""} for m in mappings] == [
        {"hostPort": HOST_PORT, "containerPort": 80, "protocol": "tcp"}
    ], add["stdin"]
    assert add["env"]["CNI_NETNS"].startswith("/run/netns/"), add["env"]
    assert f"K8S_POD_NAME={name}" in add["env"]["CNI_ARGS"], add["env"]
    ip = pod_ipv4(add)
    inspected = podman("inspect", name, "--format", "{{.NetworkSettings.IPAddress}}").stdout.strip()
    assert inspected == ip, f"podman parsed the result as {inspected!r}, the plugin gave {ip}"

    fetch(node, f"http://127.0.0.1:{HOST_PORT}/")
    fetch(client, f"http://{NODE_ADDR4}:{HOST_PORT}/")
    fetch(node, f"http://{ip}:80/")
    reachable = time.monotonic() - started

    podman("restart", "--time", "0", name)  # DEL + ADD in the same netns
    assert [c["verb"] for c in cni.calls() if c["verb"] != "VERSION"] == ["ADD", "DEL", "ADD"], (
        cni.describe_calls()
    )
    fetch(node, f"http://127.0.0.1:{HOST_PORT}/")
    fetch(client, f"http://{NODE_ADDR4}:{HOST_PORT}/")

    podman("stop", "--time", "0", name)
    dels = cni.calls("DEL")
    assert len(dels) == 2, cni.describe_calls()
    assert dels[-1]["env"]["CNI_NETNS"] == cni.calls("ADD")[-1]["env"]["CNI_NETNS"], dels[-1]["env"]
    podman("rm", name)
    assert_podman_clean(podman, node)
    print(
        f"podman: reachable {reachable:.2f}s after run; run..rm {time.monotonic() - started:.2f}s"
    )
    print(cni.describe_calls())


@pytest.mark.parametrize(
    "podman", [{"portMappings": True, "ips": True}], indirect=True, ids=["caps-portMappings+ips"]
)
def test_podman_network_reload_keeps_hostport(lab: Lab, podman: Podman) -> None:
    """``podman network reload`` (DEL + ADD with ``MAC=…;IP=…`` in CNI_ARGS) keeps the hostPort.

    Needs ``"ips": true`` next to ``portMappings`` in the conflist: podman 4.3
    (containers/common libnetwork/cni) replaces the first plugin's whole ``capabilities`` with
    ``{"ips": true}`` when it asks for a static IP, so with ``{"portMappings": true}`` alone
    the reload ADD carries no runtimeConfig and the hostPort is silently dropped.
    """
    cni, node = podman.cni, lab.node
    client = lab.client()
    name = f"web-{lab.tag}"
    first = podman_run_web(podman, name)
    fetch(client, f"http://{NODE_ADDR4}:{HOST_PORT}/")

    podman("network", "reload", name)
    assert [c["verb"] for c in cni.calls() if c["verb"] != "VERSION"] == ["ADD", "DEL", "ADD"], (
        cni.describe_calls()
    )
    again = cni.calls("ADD")[-1]
    assert f"IP={pod_ipv4(first)}" in again["env"]["CNI_ARGS"], again["env"]
    assert json.loads(again["stdin"]).get("runtimeConfig", {}).get("portMappings"), again["stdin"]
    ip = pod_ipv4(again)
    inspected = podman("inspect", name, "--format", "{{.NetworkSettings.IPAddress}}").stdout.strip()
    assert inspected == ip, f"podman shows {inspected!r}, the reload ADD gave {ip}"
    fetch(client, f"http://{NODE_ADDR4}:{HOST_PORT}/")
    fetch(node, f"http://127.0.0.1:{HOST_PORT}/")

    podman("rm", "--force", "--time", "0", name)
    assert_podman_clean(podman, node)
    print(f"reload kept the address: {ip == pod_ipv4(first)} ({pod_ipv4(first)} -> {ip})")
    print(cni.describe_calls())


# -- containerd ---------------------------------------------------------------------------------------
def ctr_run_opts(containerd: Containerd) -> list[str]:
    """No TTY or FIFOs (CI), the snapshotter that needs no overlay, runc state kept private."""
    return ["--null-io", "--snapshotter", "native", "--runc-root", str(containerd.runc_root)]


def test_containerd_ctr_run_cni(lab: Lab, containerd: Containerd, workdir: Path) -> None:
    """Foreground ``ctr run --cni``: ADD with CNI_NETNS /proc/<pid>/ns/net, the pod reachable at
    its IP from the node; ``ctr task kill`` ends the task, ctr then sends DEL with an empty
    CNI_NETNS and the cached result as prevResult; nothing is left."""
    cni, node = containerd.cni, lab.node
    cid = "web"
    started = time.monotonic()
    proc = containerd.ctr_background(
        "run", "--cni", "--rm", *ctr_run_opts(containerd), IMAGE_NAME, cid, *HTTPD,
        log=workdir / "ctr-run.log", cni=True,
    )  # fmt: skip

    def ctr_log() -> str:
        path = workdir / "ctr-run.log"
        return (path.read_text() if path.exists() else "") + "\n" + cni.describe_calls()

    add = wait_for(
        "ctr run to send ADD", lambda: cni.calls("ADD") or proc.poll() is not None, timeout=30
    )
    assert proc.poll() is None and add, ctr_log()
    add = only(cni.calls("ADD"), "ADD")
    assert add["rc"] == 0, ctr_log()
    assert add["env"]["CNI_CONTAINERID"] == f"{containerd.namespace}-{cid}", add["env"]
    assert add["env"]["CNI_NETNS"].startswith("/proc/") and add["env"]["CNI_NETNS"].endswith(
        "/ns/net"
    )
    ip = pod_ipv4(add)
    fetch(node, f"http://{ip}:80/")
    reachable = time.monotonic() - started

    containerd.ctr("tasks", "kill", "--signal", "SIGKILL", cid)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            "foreground ctr run did not exit after its task was killed\n" + ctr_log()
        ) from None
    dl = only(cni.calls("DEL"), "DEL after the task exited")
    assert dl["env"]["CNI_NETNS"] == "", dl["env"]
    assert dl["env"]["CNI_CONTAINERID"] == add["env"]["CNI_CONTAINERID"]
    prev = json.loads(dl["stdin"]).get("prevResult", {})
    assert [i["address"] for i in prev.get("ips", [])] == [f"{ip}/32"], dl["stdin"]
    assert_clean(node, cni.data_dir, ctr_log)
    # ctr's --rm clean-up (libcni's cache entry, the container) may finish after the process we
    # waited for: wait for the event, not a moment (a fresh-clone run under load saw the entry)
    wait_for("libcni's cache entry removed",
             lambda: not list(containerd.cni_cache.glob("results/*")), timeout=30)
    wait_for("the container removed (--rm)",
             lambda: not containerd.ctr("containers", "list", "--quiet").stdout.strip(), timeout=30)
    assert_all_calls_ok(cni)
    print(
        f"ctr run --cni: reachable {reachable:.2f}s after start; "
        f"total {time.monotonic() - started:.2f}s"
    )
    print(cni.describe_calls())


def test_containerd_detached_sends_no_del(lab: Lab, containerd: Containerd) -> None:
    """``ctr run -d --cni``: ADD, reachable; task kill + task rm + container rm send no DEL
    (containerd 1.6's ctr never does for -d). The kernel removes the veth with the pod's netns,
    but the address stays allocated until a DEL — sent here as the README says, with
    ``podnetctl net del <network> --container-id <id>`` (empty CNI_NETNS, the cached result as
    prevResult), after the netns is gone."""
    cni, node = containerd.cni, lab.node
    cid = "webd"
    containerd.ctr("run", "--cni", "-d", *ctr_run_opts(containerd), IMAGE_NAME, cid, *HTTPD,
                   cni=True)  # fmt: skip
    add = only(cni.calls("ADD"), "ADD")
    assert add["rc"] == 0, cni.describe_calls()
    ip = pod_ipv4(add)
    fetch(node, f"http://{ip}:80/")

    containerd.ctr("tasks", "kill", "--signal", "SIGKILL", cid)
    wait_for(
        "the task to stop", lambda: "STOPPED" in containerd.ctr("tasks", "list").stdout, timeout=20
    )
    containerd.ctr("tasks", "delete", cid, cni=True)
    containerd.ctr("containers", "delete", cid, cni=True)
    # ctr would have called the plugin (and the recorder logged it) before returning
    assert cni.calls("DEL") == [], "ctr 1.6 now sends DEL after -d:\n" + cni.describe_calls()
    cache = containerd.cni_cache / "results" / f"{cni.network}-{add['env']['CNI_CONTAINERID']}-eth0"
    assert cache.exists(), "libcni should still hold the result of the never-deleted attachment"
    wait_for(
        "the kernel to remove the host veth with the pod's netns",
        lambda: leftover_state(node, cni.data_dir)["host_veths"] == [],
        timeout=10,
    )
    left = leftover_state(node, cni.data_dir)
    assert [row[0] for row in left["pods"]] == [add["env"]["CNI_CONTAINERID"]], left

    # The README's clean-up: podnetctl net del --container-id, as ctr sees the node (its conf
    # dir, bin dir and result cache: the mount namespace ctr runs in), from the cached result.
    argv = containerd.argv("net", "del", cni.network, "--container-id",
                           add["env"]["CNI_CONTAINERID"], "--cni-path", "/usr/lib/cni", cni=True)
    ctr_at = argv.index("ctr")
    argv[ctr_at:ctr_at + 5] = [PODNETCTL]  # the same wrapper around podnetctl instead of ctr
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{done.stderr}\n{cni.describe_calls()}"
    dels = cni.calls("DEL")
    assert len(dels) == 1 and dels[0]["env"]["CNI_NETNS"] == "", cni.describe_calls()
    assert json.loads(dels[0]["stdin"])["prevResult"], dels[0]["stdin"]
    assert_clean(node, cni.data_dir, cni.describe_calls)
    assert not cache.exists(), "podnetctl net del leaves the cached result behind"
    assert_all_calls_ok(cni)
    print(cni.describe_calls())


# -- podman with the node's store set up by ``podnetctl install --data-dir`` ------------------------
NODE_ETC = """#!/bin/sh
# A private mount namespace whose /etc is the machine's with a writable layer of its own on a
# tmpfs (overlayfs): podnetctl install writes /etc/podnet/podnet.conf there, the real default
# path, and the machine's /etc never sees it. Then it only holds the namespace open.
set -e
mount -t tmpfs -o mode=0755,size=4m podnet-test {layer}
mkdir -m 0755 {layer}/upper {layer}/work
mount -t overlay podnet-test -o lowerdir=/etc,upperdir={layer}/upper,workdir={layer}/work /etc
echo ready > {ready}
exec sleep 3600
"""

#: Records each call (verb, exit status, answer, the PODNET_* variables it was given) and runs
#: the installed plugin with the caller's environment unchanged.
PASS_THROUGH = '''#!{python} -I
import json, os, subprocess, sys
stdin = sys.stdin.buffer.read()
proc = subprocess.run([{target!r}], input=stdin, capture_output=True)
record = {{"verb": os.environ.get("CNI_COMMAND", ""), "rc": proc.returncode,
          "env": {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}},
          "stdout": proc.stdout.decode(errors="replace"),
          "podnet_env": sorted(k for k in os.environ if k.startswith("PODNET"))}}
with open({log!r}, "a") as f:
    f.write(json.dumps(record) + "\\n")
sys.stdout.buffer.write(proc.stdout)
sys.exit(proc.returncode)
'''


class InstalledCni:
    """What :class:`Podman` needs of a CNI setup, made the README's way: ``podnetctl install
    --data-dir`` (plugins, conflist, node config at /etc/podnet/podnet.conf) run in ``mount_ns``,
    with no PODNET_* variable in any environment. ``bin_dir`` holds a pass-through recorder."""

    def __init__(self, root: Path, network: str, enter: list[str]) -> None:
        self.network, self.root = network, root
        self.installed_bin, self.conf_dir = root / "cni-bin-installed", root / "cni-conf"
        self.bin_dir, self.data_dir = root / "cni-bin", root / "podnet-store"
        self.calls_log = root / "calls.jsonl"
        self.bin_dir.mkdir()
        out = subprocess.run(
            [*enter, PODNETCTL, "install", "--bin-dir", str(self.installed_bin),
             "--conf-dir", str(self.conf_dir), "--data-dir", str(self.data_dir),
             "--range", POD_RANGE, "--name", network],
            capture_output=True, text=True, timeout=60, env=clean_env(),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        recorder = self.bin_dir / "podnet"
        recorder.write_text(PASS_THROUGH.format(python=VENV_PYTHON, log=str(self.calls_log),
                                                target=str(self.installed_bin / "podnet")))  # fmt: skip
        recorder.chmod(0o755)

    def calls(self, verb: str | None = None) -> list[dict[str, Any]]:
        return recorded_calls(self.calls_log, verb)

    def describe_calls(self) -> str:
        return "\n".join(f"{c['verb']} rc={c['rc']} {c['stdout'].strip()[:300]}"
                         for c in self.calls())  # fmt: skip


def clean_env() -> dict[str, str]:
    """This process's environment without any PODNET_* variable (the tests' own set some)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PODNET")}


@pytest.fixture
def node_etc(workdir: Path) -> Iterator[list[str]]:
    """argv prefix entering a private mount namespace whose /etc has a private writable layer
    (:data:`NODE_ETC`); the namespace goes when its holder and everything started in it end."""
    require("unshare", "nsenter")
    layer, ready = workdir / "etc-layer", workdir / "etc-ready"
    layer.mkdir()
    script = workdir / "node-etc.sh"
    script.write_text(NODE_ETC.format(layer=layer, ready=ready))
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh",
                               str(script)], stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for("the private /etc", lambda: ready.exists() or holder.poll() is not None)
        assert holder.poll() is None, "the mount namespace with a private /etc did not start"
        yield ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", "--"]
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_podman_restart_and_rm_with_the_installed_store(lab: Lab, workdir: Path,
                                                        busybox_layer: Path,
                                                        node_etc: list[str]) -> None:  # fmt: skip
    """A non-default dataDir set up as the README says (``podnetctl install --data-dir``), and
    no environment variable anywhere: podman's cleanup process (conmon's exit command, which
    does not carry the environment of ``podman run``) sends the DELs of ``restart`` and ``rm
    -f``; they must find the store allowed, so restart works and nothing leaks. ``podnetctl
    pods`` without --data-dir lists the pod from the installed store."""
    require("podman", "runc", "nsenter")
    machine_conf = os.path.exists("/etc/podnet/podnet.conf")
    network = f"pns-{lab.tag}"
    cni = InstalledCni(workdir, network, node_etc)
    conf = subprocess.run([*node_etc, "cat", "/etc/podnet/podnet.conf"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    assert f"data_dir = {cni.data_dir}" in conf, conf
    assert os.path.exists("/etc/podnet/podnet.conf") == machine_conf  # the machine's /etc: untouched
    pm = Podman(lab.node, workdir, cni)  # type: ignore[arg-type]
    pm.env = {k: v for k, v in pm.env.items() if not k.startswith("PODNET")}
    pm.base = node_etc[:-1] + [f"--net=/run/netns/{lab.node}", "--"] + pm.base[len(in_netns(lab.node)):]
    name = f"web-{lab.tag}"
    try:
        pm("import", str(busybox_layer), IMAGE_NAME)
        pm("run", "-d", "--name", name, "--network", network, "-p", f"{HOST_PORT}:80",
           "--cgroup-parent", pm.cgroup_parent, IMAGE_NAME, *HTTPD)  # fmt: skip
        fetch(lab.node, f"http://127.0.0.1:{HOST_PORT}/")
        pods = subprocess.run([*node_etc, PODNETCTL, "pods", "-o", "json"], capture_output=True,
                              text=True, timeout=60, env=clean_env())  # fmt: skip
        assert pods.returncode == 0, pods.stderr
        assert len(json.loads(pods.stdout)) == 1, pods.stdout

        pm("restart", "--time", "0", name)  # the DEL comes from the cleanup process
        fetch(lab.node, f"http://127.0.0.1:{HOST_PORT}/")
        assert [c["verb"] for c in cni.calls() if c["verb"] != "VERSION"][:3] == \
            ["ADD", "DEL", "ADD"], cni.describe_calls()  # fmt: skip

        pm("rm", "--force", "--time", "0", name)
        assert_clean(lab.node, cni.data_dir, cni.describe_calls)
        calls = cni.calls()
        assert calls and all(c["rc"] == 0 for c in calls), cni.describe_calls()
        assert not any(c["podnet_env"] for c in calls), [c["podnet_env"] for c in calls]
        print(cni.describe_calls())
    finally:
        pm.close()
