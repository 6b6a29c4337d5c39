"""podnet on Kubernetes nodes: the manifests in deploy/, the image deploy/build.sh builds, and
its install step onto a node that has no Python.

The manifests are parsed with PyYAML and checked for what a node agent's DaemonSet must hold.
The image is built once per session with podman (private storage, vfs driver, ``--pull=never
--network=none``: no registry), its init container is run as the DaemonSet runs it, into a
temporary "host" directory, and the plugin files it wrote are then run inside a chroot of that
directory — no ``/usr`` at all, so no Python, ``ip`` or ``nft`` but the bundle's — for an ADD
and a DEL of a pod in network namespaces the test made, with TCP to the pod in between.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_import_budget import assert_within_budget, import_tree, traced

import envgate
import paths
from netns import VENV_BIN, Lab
from podnet.cni import budget
from podnet.runtime import hostinstall
from podnet.runtime.installer import PLUGIN_MARK, PLUGINS
from runtimes import (
    CreatedPaths,
    kill_pids,
    pids_mentioning,
    private_podman_env,
    remove_cgroup,
    unmount_all,
)

REPO = paths.REPO
DEPLOY = REPO / "deploy"


def image_test(test: Callable[..., None]) -> Callable[..., None]:
    """A test of the image: root, a runtime, and on one xdist worker with the others, so the
    session builds the image once."""
    marked: Callable[..., None] = pytest.mark.xdist_group("deploy-image")(
        pytest.mark.runtime(pytest.mark.root(test)))
    return marked


#: What building and running the image needs here.
IMAGE_NEEDS = ("root", "podman", "runc", "patchelf", "unshare", "chroot", "mount", "ip", "nft")


# -- the manifests -------------------------------------------------------------------------------
def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.y*ml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def one(kind: str) -> dict[str, Any]:
    found = [d for d in manifests() if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects in deploy/"
    return found[0]


def daemonset() -> dict[str, Any]:
    return one("DaemonSet")


def container(name: str, init: bool = False) -> dict[str, Any]:
    spec = daemonset()["spec"]["template"]["spec"]
    group = spec["initContainers"] if init else spec["containers"]
    return next(c for c in group if c["name"] == name)


def host_paths() -> dict[str, str]:
    """Volume name → hostPath path of the DaemonSet's pod."""
    vols = daemonset()["spec"]["template"]["spec"]["volumes"]
    return {v["name"]: v["hostPath"]["path"] for v in vols if "hostPath" in v}


def mounts_of(c: dict[str, Any]) -> dict[str, str]:
    """Host path → mount path in container ``c`` (hostPath volumes only)."""
    paths = host_paths()
    return {paths[m["name"]]: m["mountPath"] for m in c.get("volumeMounts", [])
            if m["name"] in paths}  # fmt: skip


def flag(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


def test_manifests_are_the_four_objects_in_kube_system() -> None:
    kinds = sorted(d["kind"] for d in manifests())
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]
    for kind in ("ServiceAccount", "DaemonSet"):
        assert one(kind)["metadata"]["namespace"] == "kube-system"
    assert one("ClusterRole")["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert daemonset()["apiVersion"] == "apps/v1"


def test_role_grants_the_agent_nodes_get_list_watch() -> None:
    rules = one("ClusterRole")["rules"]
    nodes = [r for r in rules if "nodes" in r["resources"]]
    assert len(nodes) == 1 and nodes[0]["apiGroups"] == [""], rules
    assert sorted(nodes[0]["verbs"]) == ["get", "list", "watch"], nodes
    # nothing beyond reading: no write verb, no wildcard anywhere
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    binding, account = one("ClusterRoleBinding"), one("ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": one("ClusterRole")["metadata"]["name"]}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]  # fmt: skip
    pod = daemonset()["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_daemonset_runs_on_every_node_in_the_host_network() -> None:
    ds = daemonset()
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert pod["hostNetwork"] is True
    assert pod["priorityClassName"] == "system-node-critical"
    # every taint tolerated: one toleration, operator Exists, no key and no effect to narrow it
    assert pod["tolerations"] == [{"operator": "Exists"}]


def test_agent_container() -> None:
    agent = container("agent")
    argv = [*agent["command"], *agent.get("args", [])]
    assert [os.path.basename(argv[0]), argv[1]] == ["podnetctl", "agent"], argv
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    sc = agent["securityContext"]
    assert sc.get("privileged") or "NET_ADMIN" in sc["capabilities"]["add"], sc
    # the probe asks the port the agent is told to serve on, at /healthz
    probe = agent["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    assert str(probe["port"]) == flag(argv, "--metrics-port") == "19080"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= agent["resources"][kind].keys(), agent["resources"]
    # the directories the agent is told to use are the node's, mounted where it looks
    mounts = mounts_of(agent)
    assert mounts["/etc/cni/net.d"] == flag(argv, "--cni-conf-dir")
    assert mounts["/var/lib/podnet"] == flag(argv, "--data-dir")
    assert mounts["/run/netns"] == "/run/netns"
    assert mounts["/run/podnet"] == "/run/podnet"  # table ownership, shared with the plugins
    netns = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/run/netns")
    assert netns["mountPropagation"] == "HostToContainer"


def test_init_container_installs_onto_the_host() -> None:
    init = container("install", init=True)
    pod = daemonset()["spec"]["template"]["spec"]
    assert init["image"] == container("agent")["image"]
    argv = init["command"] + init.get("args", [])
    assert [os.path.basename(argv[0]), argv[1]] == ["podnetctl", "install"], argv
    assert "--no-conflist" in argv  # the agent writes the conflist from the Node's podCIDRs
    mounts = mounts_of(init)
    assert flag(argv, "--bin-dir") == mounts["/opt/cni/bin"]
    assert flag(argv, "--bundle-dir") == mounts["/opt/podnet"]
    assert mounts["/opt/podnet"] != "/opt/podnet"  # the image's own bundle lives there
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= init["resources"][kind].keys(), init["resources"]
    # hostPath mounts the issue names, each used by some container
    used = {m["name"] for c in pod["containers"] + pod["initContainers"]
            for m in c.get("volumeMounts", [])}  # fmt: skip
    paths = host_paths()
    for path in ("/etc/cni/net.d", "/opt/cni/bin", "/var/lib/podnet", "/run/netns",
                 "/opt/podnet"):  # fmt: skip
        assert path in paths.values(), f"no hostPath volume for {path}"
        assert next(n for n, p in paths.items() if p == path) in used, path


def test_containerfile_needs_no_registry() -> None:
    lines = [ln.split() for ln in (DEPLOY / "Containerfile").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]  # fmt: skip
    froms = [ln for ln in lines if ln[0].upper() == "FROM"]
    assert froms == [["FROM", "scratch"]], froms
    entry = next(ln for ln in lines if ln[0].upper() == "ENTRYPOINT")
    assert json.loads(" ".join(entry[1:])) == ["/usr/bin/podnetctl"]


# -- the bundle's bookkeeping (real directories) -------------------------------------------------
def fake_bundle(parent: Path, name: str) -> Path:
    root = parent / name
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python3").write_text("")
    (root / hostinstall.BUNDLE_FILE).write_text(name + "\n")
    return root


def test_prune_removes_only_unreferenced_bundles(tmp_path: Path) -> None:
    parent, bin_dir = tmp_path / "opt-podnet", tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("podnet-0.1.0-old", "podnet-0.1.0-prev", "podnet-0.1.0-new"):
        fake_bundle(parent, name)
    (parent / "unrelated").mkdir()
    (parent / "podnet-0.1.0-nofile").mkdir()  # not a bundle: no BUNDLE file
    (parent / ".podnet-0.1.0-new.tmp-77").mkdir()  # a copy that died
    (bin_dir / "podnet").write_text(f"#!{parent}/podnet-0.1.0-prev/bin/python3 -IS\n"
                                    f"{PLUGIN_MARK}podnet.plugins.podnet:main.\n")  # fmt: skip
    (bin_dir / "podnet-ipam").write_text(f"#!{parent}/podnet-0.1.0-old/bin/python3 -IS\n"
                                         "# someone else's file\n")  # fmt: skip
    before = hostinstall.referenced_bundles(str(bin_dir), str(parent))
    assert before == {"podnet-0.1.0-prev"}
    done = hostinstall.prune_bundles(str(parent), before | {"podnet-0.1.0-new"})
    assert sorted((Path(d.path).name, d.action) for d in done) == [
        (".podnet-0.1.0-new.tmp-77", "removed"), ("podnet-0.1.0-old", "removed")]
    assert sorted(p.name for p in parent.iterdir()) == [
        "podnet-0.1.0-new", "podnet-0.1.0-nofile", "podnet-0.1.0-prev", "unrelated"]


def test_copy_bundle_is_whole_or_absent(tmp_path: Path) -> None:
    src = fake_bundle(tmp_path / "image", "podnet-0.1.0-abc")
    (src / "lib").mkdir()
    (src / "lib" / "x.py").write_text("x = 1\n")
    dest = tmp_path / "host"
    # an incomplete copy of the same name (an install that died) is replaced
    (dest / "podnet-0.1.0-abc" / "lib").mkdir(parents=True)
    first = hostinstall.copy_bundle(hostinstall.Bundle(str(src)), str(dest))
    assert first.action == "updated"
    assert (dest / "podnet-0.1.0-abc" / "lib" / "x.py").read_text() == "x = 1\n"
    again = hostinstall.copy_bundle(hostinstall.Bundle(str(src)), str(dest))
    assert again.action == "unchanged"
    assert [p.name for p in dest.iterdir()] == ["podnet-0.1.0-abc"]  # no temporary left
    with pytest.raises(hostinstall.NotABundle):
        hostinstall.running_bundle(str(tmp_path / "image" / "nothing" / "bin" / "python3"))
    assert hostinstall.running_bundle(str(src / "bin" / "python3")).name == "podnet-0.1.0-abc"


# -- the image -------------------------------------------------------------------------------------
class PrivatePodman:
    """podman with its storage, run state, locks, events and tmp dirs under ``root`` (vfs
    driver), containers run without a network and under cgroup parent ``/<name>``."""

    MACHINE_DIRS = ("/var/lib/containers", "/var/lib/containers/cache", "/run/runc")
    MACHINE_FILES = ("/var/lib/containers/cache/blob-info-cache-v1.boltdb",)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = f"pnt-deploy-{uuid.uuid4().hex[:6]}"
        self.env = private_podman_env(root, "/usr/lib/cni", f"{root}/net.d")
        self.machine = CreatedPaths(self.MACHINE_DIRS, self.MACHINE_FILES)
        self.base = ["podman", "--root", str(root / "storage"), "--runroot",
                     str(root / "runroot"), "--storage-driver", "vfs"]  # fmt: skip

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.base, *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)  # fmt: skip
        assert proc.returncode == 0, f"podman {' '.join(args)}: {proc.stderr[-3000:]}"
        return proc

    def close(self) -> None:
        subprocess.run([*self.base, "rm", "--all", "--force", "--time", "0"],
                       capture_output=True, env=self.env, timeout=120)  # fmt: skip
        subprocess.run([*self.base, "rmi", "--all", "--force"], capture_output=True,
                       env=self.env, timeout=120)  # fmt: skip
        kill_pids(pids_mentioning(str(self.root)))
        unmount_all(self.root)
        remove_cgroup(self.name)
        self.machine.cleanup([])
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def image() -> Iterator[tuple[PrivatePodman, str]]:
    """The node image, built once per session by deploy/build.sh into private storage."""
    envgate.need(*IMAGE_NEEDS)
    # short: podman refuses a runroot path longer than 50 characters
    podman = PrivatePodman(Path(tempfile.mkdtemp(prefix="pnd-", dir="/tmp")))
    try:
        build = subprocess.run(
            ["bash", str(DEPLOY / "build.sh"), f"test-{podman.name}"],
            env={**podman.env, "PODMAN": " ".join(podman.base),
                 "PYTHON": str(VENV_BIN / "python")},
            capture_output=True, text=True, timeout=900)  # fmt: skip
        assert build.returncode == 0, build.stderr[-3000:]
        yield podman, build.stdout.strip()
    finally:
        podman.close()


class Host:
    """A temporary node root: the DaemonSet's hostPath directories under ``root``, and the
    means to run a program chrooted into it. Nothing of the machine's ``/usr`` is there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for path in ("opt/podnet", "opt/cni/bin", "dev", "proc", "sys", "run/netns",
                     "run/podnet", "tmp", "var/lib/podnet", "etc"):  # fmt: skip
            (root / path).mkdir(parents=True, exist_ok=True)

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def chrooted(self, *argv: str) -> list[str]:
        """``argv`` run chrooted into the root, in a private mount namespace holding the
        machine's /dev, /sys and /run/netns (the test's namespaces) and a fresh /proc."""
        r = str(self.root)
        script = (f"set -e; mount --rbind /dev {r}/dev; mount --rbind /sys {r}/sys; "
                  f"mount -t proc proc {r}/proc; mount --rbind /run/netns {r}/run/netns; "
                  f'exec chroot {r} "$@"')  # fmt: skip
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    """A node root of this test, removed afterwards (a bundle is ≈100 MB)."""
    root = tmp_path / "host"
    try:
        yield Host(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def install(podman: PrivatePodman, image: str, host: Host) -> list[str]:
    """Run the DaemonSet's init container as its manifest says, its hostPaths in ``host``;
    its output lines."""
    init = container("install", init=True)
    volumes = [f"{host.path(h)}:{m}" for h, m in mounts_of(init).items()]
    proc = podman("run", "--rm", "--network", "none", "--cgroup-parent", f"/{podman.name}",
                  *security_options(init), *(a for v in volumes for a in ("-v", v)),
                  "--entrypoint", init["command"][0],
                  image, *init["command"][1:], *init.get("args", []))  # fmt: skip
    return proc.stdout.splitlines()


def security_options(c: dict[str, Any]) -> list[str]:
    """podman's options for container ``c``'s securityContext (the fields the manifests use)."""
    sc = c.get("securityContext", {})
    out = ["--privileged"] if sc.get("privileged") else []
    caps = sc.get("capabilities", {})
    out += [a for cap in caps.get("drop", []) for a in ("--cap-drop", cap.lower())]
    out += [a for cap in caps.get("add", []) for a in ("--cap-add", cap.lower())]
    if sc.get("readOnlyRootFilesystem"):
        out.append("--read-only")
    if sc.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    return out


def bundle_name(host: Host) -> str:
    first = host.path("/opt/cni/bin/podnet").read_text().splitlines()[0]
    assert first.startswith("#!/opt/podnet/podnet-") and first.endswith("/bin/python3 -IS"), first
    return first.split("/")[3]


def plugin_call(host: Host, node: str, command: str, conf: dict[str, Any], *,
                netns: str = "", cid: str = "", plugin: str = "podnet",
                ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """One call of a plugin file of the host's /opt/cni/bin, as a runtime on that host makes
    it: chrooted, in the node's network namespace (the bundle's own nsenter), a clean env."""
    nsenter = f"/opt/podnet/{bundle_name(host)}/sbin/nsenter"
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_IFNAME": "eth0",
           "CNI_NETNS": f"/run/netns/{netns}" if netns else "", "CNI_PATH": "/opt/cni/bin",
           "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}  # fmt: skip
    argv = host.chrooted(nsenter, f"--net=/run/netns/{node}", f"/opt/cni/bin/{plugin}")
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
                          input=json.dumps(conf), capture_output=True, text=True,
                          timeout=60)  # fmt: skip


@image_test
def test_image_installs_podnet_on_a_host_without_python(
        image: tuple[PrivatePodman, str], lab: Lab, host: Host) -> None:  # fmt: skip
    podman, name = image
    assert not host.path("/usr").exists()  # nothing but what the init container writes
    lines = install(podman, name, host)
    bundle = bundle_name(host)
    assert sorted(lines) == sorted([f"created   /host/opt/podnet/{bundle}",
                                    *(f"created   /host/opt/cni/bin/{p}" for p in PLUGINS)])
    for plugin in PLUGINS:
        path = host.path(f"/opt/cni/bin/{plugin}")
        assert path.stat().st_mode & 0o777 == 0o755
        assert f"/opt/podnet/{bundle}/sbin" in path.read_text()  # the bundle's ip and nft first
    # VERSION of every plugin file, chrooted: the bundle alone runs them
    for plugin in PLUGINS:
        version = plugin_call(host, lab.node, "VERSION", {"cniVersion": "1.1.0"}, plugin=plugin)
        assert version.returncode == 0, version.stderr
        assert "1.1.0" in json.loads(version.stdout)["supportedVersions"]
    # a pod: ADD, TCP from the node to it, DEL
    pod = lab.pod()
    conf = {"cniVersion": "1.1.0", "name": f"deploy-{lab.tag}", "type": "podnet",
            "ranges": ["10.244.91.0/24"], "dataDir": "/var/lib/podnet"}  # fmt: skip
    cid = f"deploy-{lab.tag}"
    add = plugin_call(host, lab.node, "ADD", conf, netns=pod, cid=cid)
    assert add.returncode == 0, (add.stdout, add.stderr)
    result = json.loads(add.stdout)
    address = result["ips"][0]["address"].split("/")[0]
    assert address.startswith("10.244.91."), result
    eth0 = json.loads(lab.exec(pod, "ip", "-j", "addr", "show", "eth0").stdout)[0]
    assert address in [a["local"] for a in eth0["addr_info"]], eth0
    host_if = next(i["name"] for i in result["interfaces"] if not i.get("sandbox"))
    link = json.loads(lab.exec(lab.node, "ip", "-j", "link", "show", host_if).stdout)[0]
    assert link["link_type"] == "ether" and "UP" in link["flags"], link
    assert host.path("/var/lib/podnet/podnet.db").exists()  # the host's store, not the machine's
    lab.serve(pod, "pod", 8091)
    assert lab.talk(lab.node, "tcp", address, 8091).split()[0] == "pod"
    delete = plugin_call(host, lab.node, "DEL", {**conf, "prevResult": result}, netns=pod,
                         cid=cid)  # fmt: skip
    assert delete.returncode == 0, (delete.stdout, delete.stderr)
    gone = lab.exec(lab.node, "ip", "link", "show", host_if, check=False)
    assert gone.returncode != 0, gone.stdout
    assert lab.exec(pod, "ip", "link", "show", "eth0", check=False).returncode != 0


@image_test
def test_reinstall_replaces_plugins_atomically_and_prunes(
        image: tuple[PrivatePodman, str], lab: Lab, host: Host) -> None:  # fmt: skip
    """A node running an older bundle: the install replaces every plugin file while a runtime
    keeps calling them (every call succeeds), keeps the bundle they ran, removes older ones
    and leftovers, and touches nothing else in /opt/podnet. A second install changes nothing."""
    podman, name = image
    install(podman, name, host)
    new = bundle_name(host)
    opt = host.path("/opt/podnet")
    # the "previous" version: a hard-linked copy under another name, which the plugin files run
    prev, older = "podnet-0.0.9-aaaaaaaaaaaa", "podnet-0.0.8-bbbbbbbbbbbb"
    subprocess.run(["cp", "-al", str(opt / new), str(opt / prev)], check=True)
    (opt / prev / hostinstall.BUNDLE_FILE).unlink()
    (opt / prev / hostinstall.BUNDLE_FILE).write_text(prev + "\n")
    fake_bundle(opt, older)
    (opt / "local-notes").mkdir()
    (opt / f".{new}.tmp-4242").mkdir()
    for plugin in PLUGINS:
        path = host.path(f"/opt/cni/bin/{plugin}")
        path.write_text(path.read_text().replace(f"/opt/podnet/{new}/", f"/opt/podnet/{prev}/"))
    assert bundle_name(host) == prev
    version = {"cniVersion": "1.1.0"}
    assert plugin_call(host, lab.node, "VERSION", version).returncode == 0
    # calls keep coming while the install runs
    failures: list[str] = []
    calls = 0
    stop = threading.Event()

    def runtime() -> None:
        nonlocal calls
        while not stop.is_set():
            for plugin in PLUGINS:
                out = plugin_call(host, lab.node, "VERSION", version, plugin=plugin)
                calls += 1
                if out.returncode != 0:
                    failures.append(f"{plugin}: {out.returncode} {out.stderr[-500:]}")

    caller = threading.Thread(target=runtime)
    caller.start()
    try:
        lines = install(podman, name, host)
    finally:
        stop.set()
        caller.join(timeout=120)
    assert failures == [] and calls > 0, (calls, failures[:3])
    assert f"unchanged /host/opt/podnet/{new}" in lines, lines
    assert {f"updated   /host/opt/cni/bin/{p}" for p in PLUGINS} <= set(lines), lines
    assert f"removed   /host/opt/podnet/{older}" in lines, lines
    assert sorted(p.name for p in opt.iterdir()) == sorted([new, prev, "local-notes"])
    assert bundle_name(host) == new
    assert plugin_call(host, lab.node, "VERSION", version).returncode == 0
    # the next install removes the one no plugin file runs any more; then nothing changes
    lines = install(podman, name, host)
    assert f"removed   /host/opt/podnet/{prev}" in lines, lines
    lines = install(podman, name, host)
    assert all(line.startswith("unchanged ") for line in lines), lines
    assert sorted(p.name for p in opt.iterdir()) == sorted([new, "local-notes"])


@image_test
def test_bundle_plugins_keep_the_import_budget(
        image: tuple[PrivatePodman, str], host: Host, tmp_path: Path) -> None:  # fmt: skip
    """The bundle's plugin files import what the venv's do: VERSION and a DEL whose netns is
    gone, traced with ``-X importtime`` under the budget of tests/e2e/deploy/test_import_budget.py."""
    podman, name = image
    install(podman, name, host)
    opt = host.path("/opt/podnet")
    # the plugin files' absolute /opt/podnet paths, in a private mount namespace only
    wrap = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs podnet-test /opt && mkdir /opt/podnet && '
            f'mount --bind {opt} /opt/podnet && exec "$@"', "sh")  # fmt: skip
    python = f"/opt/podnet/{bundle_name(host)}/bin/python3"
    err = subprocess.run([*wrap, python, "-IS", "-X", "importtime", "-c", "pass"],
                         capture_output=True, text=True, check=True, env={}).stderr
    startup = frozenset(n for n, _ in import_tree(err)[0])
    for plugin in PLUGINS:
        path = host.path(f"/opt/cni/bin/{plugin}")
        trace = traced(path, startup, "VERSION", {"cniVersion": "1.1.0"}, wrap=wrap)
        assert trace.rc == 0, trace.stderr[-2000:]
        assert ("jiter", None) in trace.imports  # the trace sees the call's imports
        assert_within_budget(trace, budget.VERSION_MODULES, ("VERSION", plugin))
    data = tmp_path / "data"
    conf = {"cniVersion": "1.1.0", "name": "budget", "type": "podnet",
            "ranges": ["10.99.0.0/24"], "dataDir": str(data)}  # fmt: skip
    trace = traced(host.path("/opt/cni/bin/podnet"), startup, "DEL", conf,
                   wrap=("unshare", "--net", *wrap), CNI_NETNS="/run/netns/podnet-budget-gone")
    assert trace.rc == 0 and trace.stdout == "", (trace.stdout, trace.stderr[-2000:])
    assert_within_budget(trace, budget.HOT_PATH_MODULES, ("DEL", "podnet"))


@image_test
def test_agent_container_can_change_routes_and_nft_with_its_capabilities(
        image: tuple[PrivatePodman, str], lab: Lab) -> None:  # fmt: skip
    """The agent container's security context (NET_ADMIN only, read-only root) is enough for
    what the agent does with the image's tools in the node's network namespace: a route with
    podnet's own ``proto`` and an nftables table with a set updated element by element. Run
    in a lab namespace standing for the node's; without NET_ADMIN the same is refused."""
    podman, name = image
    agent = container("agent")
    table = ["inet", "podnet-deploy-test"]
    steps = [["ip", "route", "add", "10.244.93.0/24", "via", "192.0.2.9", "proto", "113"],
             ["ip", "-j", "route", "show", "proto", "113"],
             ["nft", "add", "table", *table],
             ["nft", "add", "set", *table, "cluster4", "{ type ipv4_addr; flags interval; }"],
             ["nft", "add", "element", *table, "cluster4", "{ 10.244.0.0/16 }"],
             ["nft", "-j", "list", "set", *table, "cluster4"]]  # fmt: skip
    lab.exec(lab.node, "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1")
    lab.exec(lab.node, "ip", "addr", "add", "192.0.2.1/24", "dev", "up0")
    lab.exec(lab.node, "ip", "link", "set", "up0", "up")
    lab.exec(lab.node, "ip", "link", "set", "up1", "up")

    def run(options: list[str]) -> subprocess.CompletedProcess[str]:
        # the image has no shell: the bundle's interpreter runs the steps one by one
        code = ("import subprocess, sys\n"
                f"for step in {steps!r}:\n"
                "    p = subprocess.run(step, capture_output=True, text=True)\n"
                "    sys.stdout.write(p.stdout)\n"
                "    if p.returncode:\n"
                "        sys.exit(f'{\" \".join(step)}: {p.stderr.strip()}')\n")  # fmt: skip
        python = f"/opt/podnet/{podman_bundle(podman, name)}/bin/python3"
        return subprocess.run(
            [*podman.base, "run", "--rm", "--network", f"ns:/run/netns/{lab.node}",
             "--cgroup-parent", f"/{podman.name}", *options, "--entrypoint", python, name,
             "-IS", "-c", code], capture_output=True, text=True, env=podman.env,
            timeout=120)  # fmt: skip

    denied = run(["--cap-drop", "all", "--read-only"])
    assert denied.returncode != 0, denied.stdout
    assert "ip route add" in denied.stderr and "not permitted" in denied.stderr, denied.stderr
    allowed = run(security_options(agent))
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    routes = json.loads(allowed.stdout.splitlines()[0])
    assert [(r["dst"], r["gateway"]) for r in routes] == [("10.244.93.0/24", "192.0.2.9")]
    elements = json.loads(allowed.stdout.splitlines()[1])["nftables"][1]["set"]["elem"]
    assert elements == [{"prefix": {"addr": "10.244.0.0", "len": 16}}], elements
    # and all of it in the node's namespace, nothing in the machine's
    assert "podnet-deploy-test" in lab.exec(lab.node, "nft", "list", "tables").stdout
    assert "podnet-deploy-test" not in subprocess.run(["nft", "list", "tables"],
                                                      capture_output=True, text=True).stdout


def podman_bundle(podman: PrivatePodman, image: str) -> str:
    """The bundle's name in ``image`` (its label, set by deploy/build.sh)."""
    out = podman("image", "inspect", "--format", '{{index .Labels "io.podnet.bundle"}}', image)
    return out.stdout.strip()


def test_install_bundle_dir_outside_a_bundle_is_refused(tmp_path: Path) -> None:
    """``podnetctl install --bundle-dir`` from the venv (not a bundle): one line, exit status 2,
    nothing written."""
    envgate.need("root")
    proc = subprocess.run([str(VENV_BIN / "podnetctl"), "install", "--no-conflist",
                           "--bundle-dir", str(tmp_path / "opt"), "--bin-dir",
                           str(tmp_path / "bin")], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc
    assert "is not the interpreter of a podnet bundle" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


@image_test
def test_image_agent_runs_as_the_daemonset_runs_it(image: tuple[PrivatePodman, str], lab: Lab,
                                                   tmp_path: Path) -> None:  # fmt: skip
    """The image's own ``podnetctl agent`` (the bundle's interpreter and its kubernetes client),
    with the agent container's command, environment, security context and mounts, in a node
    namespace, against the stand-in API server: it writes this node's conflist from its
    podCIDRs, routes another Node's podCIDR through its on-link InternalIP with ``proto 113``,
    answers ``/healthz``, and ends with status 0 on SIGTERM (``podman stop``)."""
    from kubeapi import KubeAPI, node

    podman, name = image
    agent = container("agent")
    argv = [*agent["command"], *agent.get("args", [])]
    lab.exec(lab.node, "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1")
    lab.exec(lab.node, "ip", "addr", "add", "192.0.2.1/24", "dev", "up0")
    lab.exec(lab.node, "ip", "link", "set", "up0", "up")
    lab.exec(lab.node, "ip", "link", "set", "up1", "up")
    dirs = {m: tmp_path / m.strip("/").replace("/", "-") for m in
            ("/etc/cni/net.d", "/var/lib/podnet", "/run/podnet")}  # fmt: skip
    for d in dirs.values():
        d.mkdir(mode=0o700)
    with KubeAPI("127.0.0.1", 6443, netns=lab.node) as api:
        api.create(node("n1", ["10.244.1.0/24"], ["192.0.2.1"]))
        api.create(node("n2", ["10.244.2.0/24"], ["192.0.2.9"]))
        kubeconfig = api.kubeconfig(str(tmp_path / "kubeconfig"))
        env = [a for e in agent["env"] if "value" in e
               for a in ("--env", f"{e['name']}={e['value']}")]  # fmt: skip
        started = podman(
            "run", "-d", "--network", f"ns:/run/netns/{lab.node}", "--cgroup-parent",
            f"/{podman.name}", *security_options(agent), "--env", "NODE_NAME=n1", *env,
            *[a for m, d in dirs.items() for a in ("-v", f"{d}:{m}")],
            "-v", f"{kubeconfig}:/kubeconfig:ro", "--tmpfs", "/tmp",
            "--entrypoint", argv[0], name, *argv[1:], "--kubeconfig", "/kubeconfig")  # fmt: skip
        cid = started.stdout.strip()
        conflist = dirs["/etc/cni/net.d"] / "10-podnet.conflist"
        try:
            def ready() -> bool:
                routes = lab.exec(lab.node, "ip", "-j", "route", "show", "proto", "113").stdout
                return conflist.exists() and "10.244.2.0/24" in routes

            for _ in range(300):
                if ready():
                    break
                threading.Event().wait(0.2)
            logs = podman("logs", cid).stderr
            assert ready(), logs[-3000:]
            plugin = json.loads(conflist.read_text())["plugins"][0]
            assert plugin["type"] == "podnet" and plugin["ranges"] == ["10.244.1.0/24"], plugin
            routes = json.loads(lab.exec(lab.node, "ip", "-j", "route", "show", "proto",
                                         "113").stdout)  # fmt: skip
            assert [(r["dst"], r["gateway"]) for r in routes] == [("10.244.2.0/24", "192.0.2.9")]
            health = lab.exec(lab.node, str(VENV_BIN / "python"), "-c",
                              "import urllib.request; print(urllib.request.urlopen("
                              "'http://127.0.0.1:19080/healthz', timeout=10).status)").stdout
            assert health.strip() == "200"
        finally:
            podman("stop", "--time", "20", cid)
        state = podman("inspect", "--format", "{{.State.ExitCode}}", cid).stdout.strip()
        assert state == "0", podman("logs", cid).stderr[-2000:]
