"""Helpers for driving real container runtimes (podman 4.3 with its CNI backend, containerd 1.6
``ctr run --cni``) against podnet inside a node network namespace.

Everything a runtime writes goes under one private temporary directory: storage, run state,
runc roots, CNI conf/bin dirs, podnet's ``dataDir`` and a record of every plugin call. The two
things the runtimes cannot be told to put elsewhere are handled explicitly:

* libcni's result cache (``/var/lib/cni``): podman 4.3 has no setting for it, so its cache files
  (named ``<network>-<containerID>-<ifname>``; the network name is unique per test) are removed
  at teardown, and directories the test created are removed again when empty. ``ctr`` runs in a
  private mount namespace where ``/var/lib/cni`` is a bind mount of the test's own directory
  (on a tmpfs over ``/var/lib``, in that namespace only, when the machine has no such directory).
* ``ctr`` hard-codes ``/etc/cni/net.d`` and ``/opt/cni/bin:/usr/lib/cni`` (Debian's build): its
  private mount namespace bind-mounts the test's conf and bin dirs over them.

Nothing here is podnet-specific except :func:`leftover_state`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from netns import VENV_BIN

#: The interpreter the installed plugin files name in their ``#!`` line (absolute: the runtimes
#: exec plugins with the caller's environment, whose PATH may start with pyenv shims).
VENV_PYTHON = str(VENV_BIN / "python")
PODNETCTL = str(VENV_BIN / "podnetctl")
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
CNI_PLUGIN_DIR = "/usr/lib/cni"
IMAGE_NAME = "localhost/podnet-busybox:latest"
INDEX_HTML = "hello from podnet\n"
BUSYBOX_APPLETS = ("sh", "httpd", "ls", "cat", "ip", "sleep", "wget", "hostname", "ps")


# -- small utilities --------------------------------------------------------------------------
def run(
    argv: list[str],
    *,
    timeout: float = 60,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with a timeout; a failure raises with argv, stdout and stderr shown."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as err:
        raise AssertionError(
            f"timed out after {timeout}s: {' '.join(argv)}\n"
            f"stdout: {err.stdout!r}\nstderr: {err.stderr!r}"
        ) from None
    if check and proc.returncode != 0:
        raise AssertionError(
            f"exit {proc.returncode}: {' '.join(argv)}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc


def wait_for(
    what: str, probe: Callable[[], Any], timeout: float = 20, interval: float = 0.1
) -> Any:
    """Call ``probe`` until it returns something truthy; AssertionError naming ``what`` if never."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
            if last:
                return last
        except Exception as err:  # noqa: BLE001 - keep probing, report the last failure
            last = err
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")
        time.sleep(interval)


def in_netns(ns: str) -> list[str]:
    """argv prefix entering only the network namespace ``ns`` (no /sys remount, unlike
    ``ip netns exec``: runc and podman need the host's cgroup mounts)."""
    return ["nsenter", f"--net=/run/netns/{ns}", "--"]


def http_get(ns: str, url: str, timeout: float = 3) -> str:
    """One HTTP GET from inside network namespace ``ns`` (the venv's Python, no curl needed)."""
    code = (
        "import sys, urllib.request\n"
        "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))"
        ".read().decode())\n"
    )
    return run(
        in_netns(ns) + [VENV_PYTHON, "-c", code, url, str(timeout)], timeout=timeout + 10
    ).stdout


def fetch(ns: str, url: str, expect: str = INDEX_HTML, timeout: float = 20) -> str:
    """GET ``url`` from ``ns`` until the body is ``expect`` (the server may still be starting)."""
    return str(
        wait_for(
            f"GET {url} from netns {ns} returning {expect!r}",
            lambda: (body := http_get(ns, url)) == expect and body,
            timeout=timeout,
        )
    )


# -- the image: a busybox-static rootfs ----------------------------------------------------------
def static_busybox() -> str | None:
    """Path of a statically linked busybox (Debian ``busybox-static``), or None."""
    for path in BUSYBOX_CANDIDATES:
        if os.path.isfile(path) and _is_static_elf(path):
            return path
    return None


def _is_static_elf(path: str) -> bool:
    """True for an ELF executable without a PT_INTERP program header (no dynamic loader)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return False
        is64, little = head[4] == 2, head[5] == 1
        order: Literal["little", "big"] = "little" if little else "big"
        if is64:
            phoff = int.from_bytes(head[0x20:0x28], order)
            phentsize = int.from_bytes(head[0x36:0x38], order)
            phnum = int.from_bytes(head[0x38:0x3A], order)
        else:
            phoff = int.from_bytes(head[0x1C:0x20], order)
            phentsize = int.from_bytes(head[0x2A:0x2C], order)
            phnum = int.from_bytes(head[0x2C:0x2E], order)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            if int.from_bytes(f.read(4), order) == 3:  # PT_INTERP
                return False
    return True


def rootfs_tar(busybox: str, out: Path) -> Path:
    """A rootfs tar: /bin/busybox, applet symlinks, /www/index.html and the usual empty dirs."""
    mtime = 1_700_000_000

    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, mtime
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, mtime
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "www", "run"):
            add_dir(tar, d)
        add_dir(tar, "tmp", 0o1777)
        add_file(tar, "bin/busybox", Path(busybox).read_bytes(), 0o755)
        for applet in BUSYBOX_APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname, info.mtime, info.mode = (
                tarfile.SYMTYPE,
                "busybox",
                mtime,
                0o777,
            )
            tar.addfile(info)
        add_file(tar, "etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644)
        add_file(tar, "etc/group", b"root:x:0:\n", 0o644)
        add_file(tar, "www/index.html", INDEX_HTML.encode(), 0o644)
    return out


def oci_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}.get(
        machine, machine
    )


def oci_image_tar(layer: Path, out: Path, name: str = IMAGE_NAME) -> Path:
    """An OCI image layout tar (``oci-layout``, ``index.json``, blobs) with one uncompressed
    layer and the ``io.containerd.image.name`` annotation ``ctr image import`` names it by."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest, len(data)

    def canonical(obj: object) -> bytes:
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    layer_digest, layer_size = blob(layer.read_bytes())
    config = {
        "architecture": oci_arch(),
        "os": "linux",
        "config": {"Cmd": ["/bin/sh"], "WorkingDir": "/", "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},  # uncompressed: diff_id = digest
        "history": [{"created_by": "podnet tests: busybox-static rootfs"}],
    }
    config_digest, config_size = blob(canonical(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = blob(canonical(manifest))
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "platform": {"architecture": oci_arch(), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    with tarfile.open(out, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add("index.json", canonical(index))
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':', 1)[1]}", data)
    return out


# -- the plugin as the runtimes see it -----------------------------------------------------------
RECORDER = '''#!{python}
"""Records one CNI call (verb, CNI_* env, stdin, stdout, exit status, time) in {log}, then
passes it through to the real plugin {target} unchanged."""
import json, os, subprocess, sys, time
stdin = sys.stdin.buffer.read()
started = time.monotonic()
# the plugin's own log and the data dir it may use, given as the runtime's environment would
env = {{**os.environ, "CNI_LOG_FILE": {plugin_log!r}, "PODNET_DATA_DIRS": {data_dirs!r}}}
proc = subprocess.run([{target!r}], input=stdin, capture_output=True, env=env)
record = {{
    "verb": os.environ.get("CNI_COMMAND", ""),
    "env": {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}},
    "path": os.environ.get("PATH", ""),
    "stdin": stdin.decode(errors="replace"),
    "stdout": proc.stdout.decode(errors="replace"),
    "stderr": proc.stderr.decode(errors="replace"),
    "rc": proc.returncode,
    "ms": round(1000 * (time.monotonic() - started), 1),
    "wall": time.time(),
}}
with open({log!r}, "a") as f:
    f.write(json.dumps(record) + "\\n")
sys.stdout.buffer.write(proc.stdout)
sys.stderr.buffer.write(proc.stderr)
sys.exit(proc.returncode)
'''

class CniSetup:
    """A CNI bin dir and conf dir for one test, plus podnet's ``dataDir`` and the call record.

    ``bin/podnet`` is a recorder that passes every call through to the real plugin file: the one
    ``podnetctl install --bin-dir`` writes (the installer users run; no hand-written stand-in). ``bin/loopback`` is a copy of the reference plugin (ctr's bin dir is
    mounted over ``/usr/lib/cni``, so a symlink there would point at itself).
    """

    def __init__(
        self,
        root: Path,
        network: str,
        ranges: list[str],
        capabilities: dict[str, bool] | None = None,
    ) -> None:
        self.root = root
        self.network = network
        self.bin_dir = root / "cni-bin"
        self.conf_dir = root / "cni-conf"
        self.data_dir = root / "podnet-data"
        self.calls_log = root / "cni-calls.jsonl"
        self.plugin_log = root / "podnet.log"
        for d in (self.bin_dir, self.conf_dir, self.data_dir):
            d.mkdir(parents=True)
        self.real_plugin = self._real_plugin()
        recorder = self.bin_dir / "podnet"
        recorder.write_text(
            RECORDER.format(
                python=VENV_PYTHON, log=str(self.calls_log), target=str(self.real_plugin),
                plugin_log=str(self.plugin_log), data_dirs=str(self.data_dir),
            )
        )
        recorder.chmod(0o755)
        loopback = Path(CNI_PLUGIN_DIR) / "loopback"
        if loopback.exists():
            shutil.copy2(loopback, self.bin_dir / "loopback")
        self.conflist: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": network,
            "plugins": [
                {
                    "type": "podnet",
                    "ranges": ranges,
                    "dataDir": str(self.data_dir),
                    "capabilities": capabilities or {"portMappings": True},
                }
            ],
        }
        self.conflist_path = self.conf_dir / f"10-{network}.conflist"
        self.conflist_path.write_text(json.dumps(self.conflist, indent=2) + "\n")

    def _real_plugin(self) -> Path:
        real_dir = self.root / "plugin"
        real_dir.mkdir()
        scratch = self.root / "podnetctl-install-conf"
        scratch.mkdir()
        run(
            [PODNETCTL, "install", "--bin-dir", str(real_dir), "--conf-dir", str(scratch)],
            timeout=60,
        )
        plugin = real_dir / "podnet"
        first = plugin.read_text().splitlines()[0] if plugin.exists() else ""
        assert os.access(plugin, os.X_OK) and first.startswith("#!/"), (
            f"podnetctl install wrote no executable {plugin} with an absolute interpreter "
            f"(first line {first!r})"
        )
        return plugin

    def calls(self, verb: str | None = None) -> list[dict[str, Any]]:
        """Recorded calls, in order (optionally only ``verb``)."""
        return recorded_calls(self.calls_log, verb)

    def describe_calls(self) -> str:
        """The record as text for assertion messages and the report."""
        lines = []
        for c in self.calls():
            env = " ".join(f"{k}={v}" for k, v in sorted(c["env"].items()) if k != "CNI_COMMAND")
            lines.append(
                f"{c['verb']} rc={c['rc']} {c['ms']}ms {env}\n  stdin: {c['stdin'].strip()}"
                f"\n  stdout: {c['stdout'].strip()}"
                + (f"\n  stderr: {c['stderr'].strip()}" if c["stderr"].strip() else "")
            )
        log = self.plugin_log.read_text() if self.plugin_log.exists() else ""
        return "\n".join(lines) + ("\nplugin log:\n" + log if log else "")


# -- state left behind ----------------------------------------------------------------------------
def leftover_state(node: str, data_dir: Path) -> dict[str, list[Any]]:
    """podnet state in ``data_dir``'s database and in the node netns; all lists empty = clean."""
    state: dict[str, list[Any]] = {}
    db = data_dir / "podnet.db"
    if db.exists():
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            for table in ("pods", "portmap_entries"):
                state[table] = con.execute(f"SELECT * FROM {table}").fetchall()
        finally:
            con.close()
    links = json.loads(run(["ip", "-n", node, "-j", "link", "show"]).stdout or "[]")
    state["host_veths"] = [link["ifname"] for link in links if link["ifname"].startswith("pn")]
    state["map_elements"] = []
    tables = run(in_netns(node) + ["nft", "-j", "list", "table", "inet", "podnet"], check=False)
    if tables.returncode == 0:
        for item in json.loads(tables.stdout)["nftables"]:
            m = item.get("map")
            if m and m.get("elem"):
                state["map_elements"].append({m["name"]: m["elem"]})
    return state


def assert_clean(node: str, data_dir: Path, context: Callable[[], str]) -> None:
    """No rows, no ``pn*`` host veths, no hostPort map elements (DEL may still be finishing
    when the runtime returns, so this waits for it: up to 30 s, which only a hang reaches)."""
    deadline = time.monotonic() + 30
    while True:
        state = leftover_state(node, data_dir)
        if not any(state.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"podnet state left behind: {state}\n{context()}")
        time.sleep(0.2)


# -- teardown helpers ----------------------------------------------------------------------------
def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below ``prefix`` (deepest first), from this mount namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            target = line.split()[4].replace("\\040", " ")
            if target == str(prefix) or target.startswith(str(prefix) + "/"):
                out.append(target)
    return sorted(out, key=len, reverse=True)


def unmount_all(prefix: Path) -> None:
    for _ in range(3):
        targets = mounts_under(prefix)
        if not targets:
            return
        for t in targets:
            subprocess.run(["umount", "-l", t], capture_output=True, timeout=10)


def wait_or_kill(proc: subprocess.Popen[Any], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``proc`` to exit, then SIGKILL it and reap it."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def kill_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains ``text`` (our unique tmp dir): only processes this
    test started (daemons, shims, conmon) can mention it."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            out.append(int(entry))
    return out


def runc_force_delete(runc_root: Path) -> None:
    """``runc delete -f`` every container under a private runc root (kills leftover tasks)."""
    if not runc_root.exists() or shutil.which("runc") is None:
        return
    roots = [runc_root] + [
        p for p in runc_root.iterdir() if p.is_dir() and not (p / "state.json").exists()
    ]
    for root in roots:
        listing = subprocess.run(
            ["runc", "--root", str(root), "list", "-q"], capture_output=True, text=True, timeout=20
        )
        for cid in listing.stdout.split():
            subprocess.run(
                ["runc", "--root", str(root), "delete", "-f", cid], capture_output=True, timeout=20
            )


def cgroup_mounts() -> list[str]:
    """Mount points of every cgroup hierarchy (v1 controllers and/or the v2 unified one)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[0] in ("cgroup", "cgroup2"):
                out.append(left.split()[4])
    return out


def remove_cgroup(name: str) -> None:
    """Remove cgroup ``/<name>`` and everything below it in every hierarchy (only empty ones can
    go; a cgroup still holding a process stays, and rmdir fails harmlessly)."""
    for mount in cgroup_mounts():
        top = os.path.join(mount, name.strip("/"))
        if not os.path.isdir(top):
            continue
        for dirpath, _dirs, _files in os.walk(top, topdown=False):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


class CreatedPaths:
    """Machine paths a runtime may create although told to keep its state private (libcni's
    result cache, containers/image's blob-info cache). Snapshot before; at teardown remove the
    files matching ``own`` and every listed path that did not exist before and is now empty."""

    def __init__(self, dirs: Iterable[str], files: Iterable[str] = ()) -> None:
        self.dirs = [Path(d) for d in dirs]
        self.files = [Path(f) for f in files]
        self.existed = {p for p in (*self.dirs, *self.files) if p.exists()}

    def cleanup(self, own: Iterable[Path]) -> None:
        for path in own:
            path.unlink(missing_ok=True)
        for f in self.files:
            if f not in self.existed:
                f.unlink(missing_ok=True)
        for d in sorted(self.dirs, key=lambda p: len(str(p)), reverse=True):
            if d not in self.existed and d.is_dir():
                try:
                    d.rmdir()
                except OSError:
                    pass  # not empty: someone else uses it now


# -- podman ----------------------------------------------------------------------------------------
def recorded_calls(log: Path, verb: str | None = None) -> list[dict[str, Any]]:
    """The calls a pass-through recorder (such as :data:`RECORDER`) wrote to ``log``, one JSON
    object a line, in order (optionally only ``verb``); none when ``log`` does not exist."""
    if not log.exists():
        return []
    out = [json.loads(line) for line in log.read_text().splitlines() if line]
    return [c for c in out if verb is None or c["verb"] == verb]


def private_podman_env(
    root: Path, plugin_dir: str, conf_dir: str, default_network: str | None = None
) -> dict[str, str]:
    """Make podman's private directories under ``root`` and the files that point it there:
    ``containers.conf`` (the CNI network backend with ``plugin_dir`` and ``conf_dir``, cgroupfs,
    the events log, libpod's tmp dir, volumes, image-copy tmp dir and file locks under ``root``)
    and ``storage.conf`` (vfs driver, graph root and run root under ``root``). Returns this
    process's environment with ``CONTAINERS_CONF``, ``CONTAINERS_STORAGE_CONF`` and ``TMPDIR``
    set to them (containers.conf(5), containers-storage.conf(5))."""
    for sub in ("storage", "runroot", "tmp", "libpod-tmp", "volumes"):
        (root / sub).mkdir(parents=True)
    default = f'default_network = "{default_network}"\n' if default_network else ""
    conf = root / "containers.conf"
    conf.write_text(f"""\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]

[network]
network_backend = "cni"
cni_plugin_dirs = ["{plugin_dir}"]
network_config_dir = "{conf_dir}"
{default}
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{root}/events.log"
tmp_dir = "{root}/libpod-tmp"
volume_path = "{root}/volumes"
image_copy_tmp_dir = "{root}/tmp"
lock_type = "file"
""")
    storage = root / "storage.conf"
    storage.write_text(f"""\
[storage]
driver = "vfs"
graphroot = "{root}/storage"
runroot = "{root}/runroot"
""")
    return dict(
        os.environ,
        CONTAINERS_CONF=str(conf),
        CONTAINERS_STORAGE_CONF=str(storage),
        TMPDIR=str(root / "tmp"),
    )


class Podman:
    """podman 4.3 with ``network_backend = "cni"``, run with ``nsenter --net`` in the node netns.

    Private everything: ``CONTAINERS_CONF``/``CONTAINERS_STORAGE_CONF`` name files under
    ``root``; ``--root``/``--runroot`` with the vfs driver (no overlay mounts); libpod's tmp dir,
    volumes, events log, image-copy tmp dir and (``lock_type = "file"``) its locks live there too.
    What podman still writes on the machine: runc's state (``/run/runc/<id>``, removed with the
    container), the network namespace bind mount (``/run/netns/netns-<uuid>``, removed on stop),
    libcni's result cache (``/var/lib/cni/results/<network>-<id>-<ifname>``, removed on DEL),
    containers/image's blob-info cache and the cgroups (cgroupfs; ``run`` must pass
    ``--cgroup-parent`` :attr:`cgroup_parent`, so they sit under one test-owned parent) —
    :meth:`close` removes whatever of that is left.
    """

    MACHINE_DIRS = (
        "/var/lib/cni",
        "/var/lib/cni/results",
        "/var/lib/containers",
        "/var/lib/containers/cache",
        "/run/runc",
    )
    MACHINE_FILES = ("/var/lib/containers/cache/blob-info-cache-v1.boltdb", "/dev/shm/libpod_lock")

    def __init__(self, node: str, root: Path, cni: CniSetup) -> None:
        self.node, self.cni = node, cni
        self.cgroup_parent = f"/{cni.network}"
        self.root = root / "podman"
        self.env = private_podman_env(self.root, str(cni.bin_dir), str(cni.conf_dir), cni.network)
        self.machine = CreatedPaths(self.MACHINE_DIRS, self.MACHINE_FILES)
        self.base = in_netns(node) + [
            "podman",
            "--root",
            str(self.root / "storage"),
            "--runroot",
            str(self.root / "runroot"),
            "--storage-driver",
            "vfs",
        ]

    def __call__(
        self, *args: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run(self.base + list(args), timeout=timeout, check=check, env=self.env)

    def close(self) -> None:
        """Remove every container (bounded), then anything a failure may have left: runc state
        of our containers, conmon processes, netns bind mounts, mounts, machine caches."""
        try:
            self("rm", "--all", "--force", "--time", "0", timeout=60, check=False)
        except AssertionError:
            pass  # timed out: the steps below clean up by force
        adds = self.cni.calls("ADD")
        for cid in {c["env"].get("CNI_CONTAINERID", "") for c in adds}:
            if cid and Path("/run/runc", cid).exists():
                subprocess.run(
                    ["runc", "--root", "/run/runc", "delete", "-f", cid],
                    capture_output=True,
                    timeout=20,
                )
        kill_pids(pids_mentioning(str(self.root)))
        for c in adds:
            netns = c["env"].get("CNI_NETNS", "")
            if netns.startswith("/run/netns/netns-") and os.path.exists(netns):
                subprocess.run(
                    ["ip", "netns", "del", os.path.basename(netns)], capture_output=True, timeout=20
                )
        unmount_all(self.root)
        remove_cgroup(self.cgroup_parent)
        results = Path("/var/lib/cni/results")
        own = list(results.glob(f"{self.cni.network}-*")) if results.is_dir() else []
        self.machine.cleanup(own)


# -- containerd ------------------------------------------------------------------------------------
CTR_CNI_MOUNTS = """#!/bin/sh
# Runs in a private mount namespace: ctr (containerd 1.6, Debian) hard-codes /etc/cni/net.d and
# CNI_PATH=/opt/cni/bin:/usr/lib/cni, and libcni caches results in /var/lib/cni.
set -e
mount --bind {conf_dir} /etc/cni/net.d
mount --bind {bin_dir} /usr/lib/cni
if [ -d /opt/cni/bin ]; then mount --bind {bin_dir} /opt/cni/bin; fi
if [ ! -d /var/lib/cni ]; then
    mount -t tmpfs -o mode=0755,size=1m podnet-test /var/lib
    mkdir /var/lib/cni
fi
mount --bind {cache_dir} /var/lib/cni
exec "$@"
"""


class Containerd:
    """A private containerd 1.6 (root, state, sockets, runc root under ``root``; CRI off), started
    in the node netns; ``ctr`` runs in the node netns too, and with ``cni=True`` in a private mount
    namespace whose CNI dirs and result cache are the test's own (:data:`CTR_CNI_MOUNTS`).

    Still on the machine: the shim's socket in ``/run/containerd/s`` (path fixed in 1.6, gone
    when the shim exits) and the task cgroups ``/<namespace>/<id>`` in every hierarchy (the
    namespace is unique per test) — :meth:`close` removes those it created.
    """

    def __init__(self, node: str, root: Path, cni: CniSetup, namespace: str) -> None:
        self.node, self.cni, self.namespace = node, cni, namespace
        self.root = root / "containerd"
        self.root.mkdir(parents=True)
        self.socket = self.root / "containerd.sock"
        self.runc_root = self.root / "runc"
        self.cni_cache = self.root / "cni-cache"
        self.cni_cache.mkdir()
        self.machine = CreatedPaths(("/run/containerd", "/run/containerd/s"))
        self.config = self.root / "config.toml"
        self.config.write_text(f"""\
version = 2
root = "{self.root}/root"
state = "{self.root}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{self.root}/opt"
""")
        mounts = self.root / "ctr-cni-mounts.sh"
        mounts.write_text(
            CTR_CNI_MOUNTS.format(
                conf_dir=cni.conf_dir, bin_dir=cni.bin_dir, cache_dir=self.cni_cache
            )
        )
        mounts.chmod(0o755)
        self.mounts_script = str(mounts)
        self.log_path = self.root / "containerd.log"
        self.daemon: subprocess.Popen[bytes] | None = None
        self.foreground: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.daemon = subprocess.Popen(
                in_netns(self.node) + ["containerd", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(
            "containerd to answer",
            lambda: (
                self.daemon is not None
                and self.daemon.poll() is None
                and self.ctr("version", check=False, timeout=5).returncode == 0
            ),
            timeout=20,
        )

    def argv(self, *args: str, cni: bool = False) -> list[str]:
        ctr = ["ctr", "--address", str(self.socket), "--namespace", self.namespace, *args]
        if cni:
            return (
                in_netns(self.node)
                + ["unshare", "--mount", "--propagation", "private", self.mounts_script]
                + ctr
            )
        return in_netns(self.node) + ctr

    def ctr(
        self, *args: str, cni: bool = False, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run(self.argv(*args, cni=cni), timeout=timeout, check=check)

    def ctr_background(self, *args: str, log: Path, cni: bool = False) -> subprocess.Popen[bytes]:
        """A ``ctr`` that keeps running (``ctr run`` in the foreground); waited for or killed
        at :meth:`close`."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                self.argv(*args, cni=cni),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.foreground.append(proc)
        return proc

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def close(self) -> None:
        """Kill and delete every task and container, stop the daemon, then remove by force
        whatever is left (runc containers, shims, mounts, machine paths)."""
        if self.daemon is not None and self.daemon.poll() is None:
            try:
                listing = self.ctr("containers", "list", "--quiet", check=False, timeout=10).stdout
                for cid in listing.split():
                    self.ctr("tasks", "kill", "--signal", "SIGKILL", cid, check=False, timeout=10)
                    self.ctr("tasks", "delete", "--force", cid, check=False, timeout=20)
                    self.ctr("containers", "delete", cid, check=False, timeout=20)
            except AssertionError:
                pass  # a hung ctr: the steps below clean up by force
        for proc in self.foreground:
            wait_or_kill(proc, 10)
        runc_force_delete(self.runc_root)
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            wait_or_kill(self.daemon, 10)
        kill_pids(pids_mentioning(str(self.root)))  # shims left by a failed delete
        unmount_all(self.root)
        remove_cgroup(self.namespace)  # ctr's default cgroupsPath is /<namespace>/<id>
        self.machine.cleanup([])
