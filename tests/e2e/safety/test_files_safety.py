"""Files podnet creates or trusts: the store's modes, the plugin log, and what
``podnetctl install`` lets root-run plugin files load.

- The store: a new data dir is 0750, ``podnet.db`` and its -wal and -shm 0600 (whatever the
  umask), the lock files 0600; a loose database left by an older version is restricted on open;
  opening an existing store costs two system calls before SQLite's (strace).
- The log (``logFile``, ``CNI_LOG_FILE``): created 0600, appended, never through a symlink
  planted at its path (the line is dropped, the call succeeds), never blocking on a FIFO.
- ``podnetctl install`` refuses, writing nothing, an interpreter, venv or source tree that
  anyone but root could change, naming the path; it installs from a copy that is safe, even
  below a sticky directory.

Store and log tests need no root; the ADD tests run the real plugin in a node namespace, the
install tests chown to uid/gid 65534 (root).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import pytest

import podnet
from envgate import need
from netns import VENV_BIN, Lab
from podnet.cni.skel import LOG_HEADER, Log
from podnet.errors import CNIError
from podnet.runtime.installer import PLUGINS, UnsafeSource, _SourceCheck
from podnet.store import open_store

ROOT = os.geteuid() == 0
needs_root = pytest.mark.usefixtures("_root")


@pytest.fixture
def _root() -> None:
    need("root")  # chown to another uid
NOBODY = 65534  # Debian's nobody / nogroup
#: Tests that use /var/log/podnet (host-wide; the fixture may create and remove it) run on
#: one xdist worker, one after the other.
VAR_LOG = pytest.mark.xdist_group("var-log-podnet")

REPO_SRC = Path(podnet.__file__).resolve().parents[1]
SITE = str(Path(click.__file__).resolve().parents[1])  # the venv's site-packages


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


@contextmanager
def wal_kept(db: Path) -> Iterator[None]:
    """Another "connection" to ``db``: a read lock on SQLite's SHARED byte range (os_unix.c:
    PENDING_BYTE 0x40000000 + 2, 510 bytes), which every WAL-mode connection holds while open.
    A process closing its connection then cannot take EXCLUSIVE, so it leaves the -wal and -shm
    it created in place, for the test to look at."""
    fd = os.open(db, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH, 510, 0x40000002, os.SEEK_SET)
        yield
    finally:
        os.close(fd)


# -- the store ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o000], ids=lambda m: f"umask{m:03o}")
def test_new_store_files_are_private(tmp_path: Path, mask: int) -> None:
    data = tmp_path / "missing-parent" / "data"
    with umask(mask), open_store(str(data)) as store:
        with store.write():
            store.set_state("probe", "1")
            queue = data / "podnet.lock.d"
            nodes = list(queue.iterdir())
            assert nodes and {mode(n) for n in nodes} == {0o600}  # the held node file
        # The connection stays open: the -wal and -shm podnet's own SQLite created are there.
        found = {p.name: mode(p) for p in data.iterdir()}
    assert found == {"podnet.db": 0o600, "podnet.db-wal": 0o600, "podnet.db-shm": 0o600,
                     "podnet.lock": 0o600, "podnet.lock.d": 0o700}
    assert mode(data) == 0o750


def test_loose_database_of_an_older_version_is_restricted(tmp_path: Path) -> None:
    """A database SQLite created 0644 (what podnet did before), still in use by another
    connection that keeps its -wal and -shm: opening the store makes all three 0600 and
    migrates it as before; the existing data dir's own mode is left alone."""
    import sqlite3

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    db = data / "podnet.db"
    with umask(0o022):
        old = sqlite3.connect(db, isolation_level=None)
    try:
        old.execute("PRAGMA journal_mode = WAL")
        old.execute("CREATE TABLE leftover (x)")
        old.execute("INSERT INTO leftover VALUES (1)")
        assert {p: mode(data / p) for p in ("podnet.db", "podnet.db-wal", "podnet.db-shm")} == {
            "podnet.db": 0o644, "podnet.db-wal": 0o644, "podnet.db-shm": 0o644}
        with open_store(str(data)) as store:
            assert store.ranges.all() == []  # migrated
        assert {p: mode(data / p) for p in ("podnet.db", "podnet.db-wal", "podnet.db-shm")} == {
            "podnet.db": 0o600, "podnet.db-wal": 0o600, "podnet.db-shm": 0o600}
        assert old.execute("SELECT x FROM leftover").fetchall() == [(1,)]
    finally:
        old.close()
    assert mode(data) == 0o700
    os.chmod(db, 0o640)  # loosened again later: the next open restricts it again
    open_store(str(data)).close()
    assert mode(db) == 0o600


def test_store_in_an_unusable_place_names_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CNIError, match=r"cannot (create|examine) state directory .*file/data: Not a dir") as err:
        open_store(str(tmp_path / "file" / "data"))
    assert err.value.code == 5


STRACE = shutil.which("strace")
needs_strace = pytest.mark.usefixtures("_strace")


@pytest.fixture
def _strace() -> None:
    need("strace")


def traced(code: str, *args: str) -> list[str]:
    """The system calls ``python -IS -c code args`` makes between ``os.stat('/begin-mark')``
    and ``os.stat('/end-mark')`` (strace lines, the marks excluded)."""
    assert STRACE is not None
    prog = (f"import os, sys; sys.path.insert(0, {str(REPO_SRC)!r})\n{code}")
    out = subprocess.run([STRACE, "-qq", "-o", "/dev/stderr", sys.executable, "-IS", "-c",
                          prog, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    begin = next(i for i, line in enumerate(lines) if "/begin-mark" in line)
    end = next(i for i, line in enumerate(lines) if "/end-mark" in line)
    return lines[begin + 1:end]


MARKED = """
from podnet.store.conn import _prepare_files
try: os.stat('/begin-mark')
except OSError: pass
_prepare_files(sys.argv[1], sys.argv[1] + '/podnet.db')
try: os.stat('/end-mark')
except OSError: pass
"""


@needs_strace
def test_opening_an_existing_store_costs_two_system_calls(tmp_path: Path) -> None:
    """Before SQLite opens the file: a failing mkdir and a stat of the database (main's
    ``os.makedirs(exist_ok=True)`` made three: stat parent, mkdir, stat dir); a chmod only when
    something is loose."""
    data = tmp_path / "data"
    open_store(str(data)).close()
    calls = traced(MARKED, str(data))
    assert [c.split("(")[0] for c in calls] == ["mkdir", "newfstatat"], calls
    assert "EEXIST" in calls[0] and f'"{data}/podnet.db"' in calls[1]
    (data / "podnet.db").chmod(0o644)
    calls = traced(MARKED, str(data))
    assert [c.split("(")[0] for c in calls] == ["mkdir", "newfstatat", "chmod", "chmod", "chmod"]


# -- the log ------------------------------------------------------------------------------------
def test_log_file_is_created_0600_and_appended(tmp_path: Path) -> None:
    path = tmp_path / "podnet.log"
    with umask(0):
        Log(str(path), "podnet[1]")("first")
        Log(str(path), "podnet[2]")("second")
    assert mode(path) == 0o600
    header, *lines = path.read_text().splitlines()
    assert header + "\n" == LOG_HEADER.decode()
    assert [line.split(" ", 1)[1] for line in lines] == ["podnet[1] first", "podnet[2] second"]
    Log(str(path), "podnet[3]")("a message\nwith a second line")
    assert path.read_text().splitlines()[-1].endswith("podnet[3] a message\\nwith a second line")


@pytest.mark.parametrize("content", ["root ALL=(ALL:ALL) ALL\n", "# podnet log\n", "x"])
def test_log_appends_only_to_a_log_podnet_made(tmp_path: Path, content: str) -> None:
    """A logFile naming an existing file that podnet did not make (/etc/sudoers, a crontab) is
    left alone: the line is dropped, the call is not failed."""
    path = tmp_path / "sudoers"
    path.write_text(content)
    path.chmod(0o440)
    Log(str(path), "podnet[1]")("ALL ALL=(ALL) NOPASSWD: ALL")
    assert path.read_text() == content


@pytest.mark.parametrize("dangling", [False, True])
def test_log_does_not_follow_a_symlink(tmp_path: Path, dangling: bool) -> None:
    target = tmp_path / "target"
    if not dangling:
        target.write_text("precious\n")
        target.chmod(0o644)
    link = tmp_path / "podnet.log"
    link.symlink_to(target)
    Log(str(link), "podnet[1]")("through the link?")  # dropped, no exception
    assert link.is_symlink()
    if dangling:
        assert not target.exists()  # O_CREAT would have made it through the link
    else:
        assert target.read_text() == "precious\n" and mode(target) == 0o644


def test_log_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "podnet.log"
    os.mkfifo(fifo)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (Log(str(fifo), "p")("x"), done.set()), daemon=True)
    thread.start()
    # either event ends the wait: the call returned, or its thread sleeps in the kernel waiting
    # for the FIFO's other end (``wait_for_partner`` in fs/pipe.c's fifo_open); 30 s: a hang
    wchan = Path(f"/proc/self/task/{thread.native_id}/wchan")
    deadline = time.monotonic() + 30
    while not done.is_set():
        try:
            blocked = wchan.read_text() in ("wait_for_partner", "fifo_open")
        except FileNotFoundError:  # the thread is gone: done is set
            continue
        if blocked:
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the thread go, then fail
            thread.join(30)
            pytest.fail("Log blocked opening a FIFO planted at the log path")
        assert time.monotonic() < deadline, "Log neither returned nor blocked on the FIFO"
        time.sleep(0.001)


LOGGED = """
from podnet.cni.skel import Log
log = Log(sys.argv[1], 'podnet[1]')
try: os.stat('/begin-mark')
except OSError: pass
log('line')
try: os.stat('/end-mark')
except OSError: pass
"""


@needs_strace
def test_a_log_line_costs_five_system_calls(tmp_path: Path) -> None:
    log = tmp_path / "podnet.log"
    log.write_bytes(LOG_HEADER)  # an existing log: its first line is read back, then appended
    calls = traced(LOGGED, str(log))
    assert [c.split("(")[0] for c in calls] == ["newfstatat", "openat", "pread64", "write",
                                                "close"], calls  # fmt: skip
    opened = next(c for c in calls if c.startswith("openat"))
    for flag in ("O_RDWR", "O_APPEND", "O_NOFOLLOW", "O_CLOEXEC"):
        assert flag in opened, opened
    assert "O_CREAT" not in opened  # an existing file is never created over
    fresh = traced(LOGGED, str(tmp_path / "new.log"))
    opened = next(c for c in fresh if c.startswith("openat"))
    for flag in ("O_CREAT", "O_EXCL", "0600"):
        assert flag in opened, opened


# -- a real plugin ADD in a node namespace ------------------------------------------------------
def netconf(data: Path, **extra: object) -> dict[str, object]:
    return {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet",
            "ranges": ["10.244.2.0/24"], "dataDir": str(data), **extra}


@pytest.mark.root
def test_plugin_add_creates_private_files(lab: Lab, tmp_path: Path) -> None:
    data, log = tmp_path / "var" / "data", tmp_path / "podnet.log"
    conf = netconf(data)
    pods = [lab.pod(), lab.pod()]
    rc, out = lab.cni("ADD", conf, container_id="files-a", netns=pods[0],
                      env={"CNI_LOG_FILE": str(log)})
    assert rc == 0, out
    assert mode(data) == 0o750
    assert {p.name: mode(p) for p in data.iterdir()} == {
        "podnet.db": 0o600, "podnet.lock": 0o600, "podnet.lock.d": 0o700}
    assert mode(log) == 0o600 and "ADD container=files-a" in log.read_text()
    with wal_kept(data / "podnet.db"):  # the second ADD's -wal and -shm outlive it
        rc, out = lab.cni("ADD", conf, container_id="files-b", netns=pods[1])
        assert rc == 0, out
        assert mode(data / "podnet.db-wal") == 0o600 and mode(data / "podnet.db-shm") == 0o600
    for cid, ns in (("files-a", pods[0]), ("files-b", pods[1])):
        assert lab.cni("DEL", conf, container_id=cid, netns=ns)[0] == 0


@pytest.fixture
def log_name() -> Iterator[Path]:
    """A file name of this test's in /var/log/podnet (where a NetConf's logFile must lie):
    the file, and the directory when the test made it, are removed afterwards."""
    from podnet.cni.netconf import LOG_DIR

    made = not os.path.exists(LOG_DIR)
    path = Path(LOG_DIR) / f"test-{os.getpid()}-{time.monotonic_ns()}.log"
    try:
        yield path
    finally:
        for leftover in Path(LOG_DIR).glob(path.stem + "*"):
            leftover.unlink()
        if made:
            shutil.rmtree(LOG_DIR, ignore_errors=True)


@VAR_LOG
@pytest.mark.root
@pytest.mark.parametrize("how", ["logFile", "CNI_LOG_FILE"])
def test_plugin_log_symlink_is_not_followed(lab: Lab, tmp_path: Path, how: str,
                                            log_name: Path) -> None:  # fmt: skip
    target = tmp_path / "shadow"
    target.write_text("root:x:0:0\n")
    target.chmod(0o644)
    link = log_name if how == "logFile" else tmp_path / "podnet.log"
    link.parent.mkdir(mode=0o700, exist_ok=True)
    link.symlink_to(target)
    extra = {"logFile": str(link)} if how == "logFile" else {}
    env = {"CNI_LOG_FILE": str(link)} if how == "CNI_LOG_FILE" else {}
    conf = netconf(tmp_path / "data", **extra)
    pod = lab.pod()
    rc, out = lab.cni("ADD", conf, container_id="files-log", netns=pod, env=env)
    assert rc == 0 and out["ips"], out
    rc, out = lab.cni("DEL", conf, container_id="files-log", netns=pod, env=env)
    assert rc == 0, out
    assert link.is_symlink() and target.read_text() == "root:x:0:0\n" and mode(target) == 0o644


# -- podnetctl install --------------------------------------------------------------------------
INSTALL = ("import sys; sys.path[:0] = sys.argv[1:3]; sys.argv = ['podnetctl', *sys.argv[3:]]\n"
           "from podnet.cli.main import main; main()")


def install_from(python: str | Path, src: Path, root: Path) -> subprocess.CompletedProcess[str]:
    """``podnetctl install`` run by ``python`` with podnet from ``src`` (first on sys.path),
    click and jiter from this venv's site-packages."""
    return subprocess.run(
        [str(python), "-I", "-c", INSTALL, str(src), SITE, "install", "--bin-dir",
         str(root / "bin"), "--conf-dir", str(root / "conf")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def copy_tree(parent: Path) -> Path:
    """A root-owned copy of podnet's source (0755 dirs, 0644 files) at ``<parent>/tree/src``."""
    src = parent / "tree" / "src"
    shutil.copytree(REPO_SRC / "podnet", src / "podnet",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for d in (parent / "tree", src):
        d.chmod(0o755)
    return src


def venv(parent: Path, *options: str) -> Path:
    """A fresh venv (no pip) at ``<parent>/venv``; returns its ``bin/python``."""
    base = os.path.realpath(sys.executable)  # this venv's base interpreter
    subprocess.run([base, "-m", "venv", "--without-pip", *options, str(parent / "venv")],
                   check=True, timeout=60)  # fmt: skip
    return parent / "venv" / "bin" / "python"


def assert_refused(out: subprocess.CompletedProcess[str], root: Path, path: Path,
                   reason: str) -> None:  # fmt: skip
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr.startswith(f"podnetctl install: refusing: {path} {reason} ("), out.stderr
    assert out.stderr.count("\n") == 1 and out.stdout == ""
    assert not (root / "bin").exists() and not (root / "conf").exists()  # nothing written


@needs_root
def test_install_from_a_safe_copy_below_a_sticky_dir(tmp_path: Path) -> None:
    """A root-owned tree below a root-owned 1777 directory (like /tmp): others may create
    entries there but not replace the tree, so the install goes ahead; the plugin files load
    that tree and run."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    src = copy_tree(sticky)
    out = install_from(VENV_BIN / "python", src, tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(tmp_path / "bin")) == sorted(PLUGINS)
    plugin = tmp_path / "bin" / "podnet"
    assert f"sys.path.insert(0, {str(src)!r})" in plugin.read_text()
    answer = subprocess.run([str(plugin)], input='{"cniVersion": "1.0.0"}', capture_output=True,
                            text=True, env={"CNI_COMMAND": "VERSION"}, timeout=30, check=True)
    assert json.loads(answer.stdout)["cniVersion"] == "1.0.0"


def chown(path: Path, uid: int = -1, gid: int = -1, add: int = 0) -> None:
    os.lchown(path, uid, gid)
    if add:
        path.chmod(mode(path) | add)


#: name → (what to break in the copied tree ``src``, the path at fault, the reason)
TREE_CASES = {
    "py file group-writable": (lambda src: chown(src / "podnet/store/db.py", gid=NOBODY,
                                                 add=0o020),
                               "podnet/store/db.py", f"is group-writable by gid {NOBODY}"),
    "py file of another user": (lambda src: chown(src / "podnet/cni/skel.py", uid=NOBODY),
                                "podnet/cni/skel.py", f"is owned by uid {NOBODY}"),
    "py file world-writable": (lambda src: (src / "podnet/__init__.py").chmod(0o646),
                               "podnet/__init__.py", "is world-writable"),
    "package dir of another user": (lambda src: chown(src / "podnet/firewall", uid=NOBODY),
                                    "podnet/firewall", f"is owned by uid {NOBODY}"),
    "sys.path dir sticky world-writable": (lambda src: src.chmod(0o1777), "", "is world-writable"),
    # first on the plugins' sys.path: a json.py there would replace the standard library's
    "module next to podnet": (lambda src: ((src / "shadow.py").write_text(""),
                                           chown(src / "shadow.py", uid=NOBODY)),
                              "shadow.py", f"is owned by uid {NOBODY}"),
    "parent of another user": (lambda src: chown(src.parent, uid=NOBODY), "..",
                               f"is owned by uid {NOBODY}"),
    "parent group-writable": (lambda src: chown(src.parent, gid=NOBODY, add=0o020), "..",
                              f"is group-writable by gid {NOBODY}"),
}


@needs_root
@pytest.mark.parametrize("case", sorted(TREE_CASES))
def test_install_refuses_an_unsafe_source_tree(tmp_path: Path, case: str) -> None:
    src = copy_tree(tmp_path)
    breaker, at_fault, reason = TREE_CASES[case]
    breaker(src)
    fault = src.parent if at_fault == ".." else src / at_fault if at_fault else src
    assert_refused(install_from(VENV_BIN / "python", src, tmp_path), tmp_path, fault, reason)


@needs_root
def test_install_refuses_a_tree_of_another_user_in_a_sticky_dir(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    src = copy_tree(sticky)
    chown(src.parent, uid=NOBODY)  # its owner can rename it away and put another in its place
    assert_refused(install_from(VENV_BIN / "python", src, tmp_path), tmp_path, src.parent,
                   f"is owned by uid {NOBODY} in sticky {sticky}, which is world-writable")


def _venv_owned(py: Path) -> Path:
    for p in [py.parents[1], *py.parents[1].rglob("*")]:
        os.lchown(p, NOBODY, -1)
    return py.parents[1]


def _bin_group_writable(py: Path) -> Path:
    chown(py.parent, gid=NOBODY, add=0o020)
    return py.parent


def _pyvenv_cfg_owned(py: Path) -> Path:
    cfg = py.parents[1] / "pyvenv.cfg"
    chown(cfg, uid=NOBODY)
    return cfg


def _link_through_user_dir(py: Path) -> Path:
    """bin/python → <tmp>/user/python3 (a dir of uid 65534) → /usr/bin/python3."""
    user = py.parents[2] / "user"
    user.mkdir()
    (user / "python3").symlink_to("/usr/bin/python3")
    chown(user, uid=NOBODY)
    py.unlink()
    py.symlink_to(user / "python3")
    return user


VENV_CASES = {
    "venv of another user": ((), _venv_owned, f"is owned by uid {NOBODY}"),
    "venv bin dir group-writable": ((), _bin_group_writable, f"is group-writable by gid {NOBODY}"),
    "pyvenv.cfg of another user": ((), _pyvenv_cfg_owned, f"is owned by uid {NOBODY}"),
    "symlink through a user's dir": ((), _link_through_user_dir, f"is owned by uid {NOBODY}"),
}


@needs_root
@pytest.mark.parametrize("case", sorted(VENV_CASES))
def test_install_refuses_an_unsafe_interpreter(tmp_path: Path, case: str) -> None:
    options, breaker, reason = VENV_CASES[case]
    py = venv(tmp_path, *options)
    fault = breaker(py)
    assert_refused(install_from(py, REPO_SRC, tmp_path), tmp_path, fault, reason)


@needs_root
def test_install_refuses_an_interpreter_binary_of_another_user(tmp_path: Path) -> None:
    py = venv(tmp_path, "--copies")
    real = py.parent / "python3"  # python is a copy too; the #! names bin/python
    py.unlink()
    py.symlink_to("python3")
    chown(real, uid=NOBODY)
    out = install_from(py, REPO_SRC, tmp_path)
    assert_refused(out, tmp_path, real, f"is owned by uid {NOBODY}")
    assert f" (the plugins' interpreter, as {py}); " in out.stderr


# -- the rule, path by path ---------------------------------------------------------------------
@needs_root
def test_symlink_in_a_sticky_dir_counts_by_its_owner(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (tmp_path / "real").mkdir()
    link = sticky / "link"
    link.symlink_to(tmp_path / "real")
    real, _ = _SourceCheck().resolve(str(link), "role")
    assert real == str(tmp_path / "real")
    os.lchown(link, NOBODY, -1)  # its owner could replace it
    with pytest.raises(UnsafeSource) as err:
        _SourceCheck().resolve(str(link), "role")
    assert err.value.path == str(link) and "sticky" in err.value.reason
    plain = tmp_path / "plain"
    plain.symlink_to(tmp_path / "real")
    os.lchown(plain, NOBODY, -1)  # in a directory only root can write: harmless
    assert _SourceCheck().resolve(str(plain), "role")[0] == str(tmp_path / "real")


def test_a_missing_entry_counts_by_the_directory_that_would_hold_it(tmp_path: Path) -> None:
    """``python311.zip`` on the module path usually does not exist: whoever can create it in
    its directory decides what the interpreter imports first."""
    holder = tmp_path / "lib"
    holder.mkdir()
    _SourceCheck().module_dir(str(holder / "python311.zip"), "role", missing_ok=True)
    holder.chmod(0o1777)  # sticky does not help: creating the entry is the attack
    with pytest.raises(UnsafeSource) as err:
        _SourceCheck().module_dir(str(holder / "python311.zip"), "role", missing_ok=True)
    assert err.value.path == str(holder) and err.value.reason == "is world-writable"
    assert err.value.role == f"would hold {holder / 'python311.zip'}, role"


def test_symlink_loop_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(CNIError, match="too many symlinks"):
        _SourceCheck().resolve(str(tmp_path / "a"), "role")


@pytest.mark.root
@VAR_LOG
def test_netconf_log_file_lies_in_var_log_podnet(lab: Lab, tmp_path: Path, log_name: Path) -> None:
    """A NetConf's logFile outside /var/log/podnet is refused (code 7) and nothing is created
    there — an author who is not the administrator must not make root write
    /etc/profile.d/x.sh; in /var/log/podnet the log is created 0600 with podnet's header. A
    device node at the path is never opened."""
    planted = tmp_path / "profile.d" / "zz-podnet.sh"
    planted.parent.mkdir()
    for where in (planted, Path("/var/log/podnet-elsewhere.log"),
                  log_name.parent / "sub" / "x.log"):  # fmt: skip
        rc, out = lab.cni("ADD", netconf(tmp_path / "data", logFile=str(where)),
                          container_id="files-log", netns=lab.pod())  # fmt: skip
        assert rc == 1 and out["code"] == 7 and out["msg"].startswith("logFile:"), out
        assert not where.exists()
    pod = lab.pod()
    conf = netconf(tmp_path / "data", logFile=str(log_name))
    rc, out = lab.cni("ADD", conf, container_id="files-log", netns=pod)
    assert rc == 0, out
    assert mode(log_name) == 0o600 and log_name.read_bytes().startswith(LOG_HEADER)
    assert mode(log_name.parent) & 0o022 == 0
    assert lab.cni("DEL", conf, container_id="files-log", netns=pod)[0] == 0
    device = log_name.with_suffix(".null")
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    calls = traced(LOGGED, str(device))
    assert not any(c.startswith("openat") for c in calls), calls


@pytest.mark.parametrize("how", ["owned by nobody", "world-writable", "a symlink"])
def test_a_confined_log_is_written_only_where_root_alone_can_change_it(tmp_path: Path,
                                                                      how: str) -> None:
    """A confined log (a NetConf's) is dropped when someone else could have planted a symlink
    on the way: a directory on the path owned by another user, world-writable, or itself a
    symlink someone else could swap."""
    base = tmp_path / "logs"
    base.mkdir()
    if how == "owned by nobody":
        os.chown(base, NOBODY, NOBODY)
        directory = base / "podnet"
    elif how == "world-writable":
        base.chmod(0o777)
        directory = base / "podnet"
    else:
        real = tmp_path / "real"
        real.mkdir()
        open_dir = tmp_path / "open"
        open_dir.mkdir(mode=0o777)
        open_dir.chmod(0o777)
        (open_dir / "link").symlink_to(real)
        directory = open_dir / "link"
    path = directory / "x.log"
    Log(str(path), "podnet[1]", confined=True)("a line")
    assert not path.exists() and not (tmp_path / "real" / "x.log").exists()
    trusted_dir = tmp_path / "ok" / "podnet"
    (tmp_path / "ok").mkdir()
    Log(str(trusted_dir / "x.log"), "podnet[1]", confined=True)("a line")
    assert (trusted_dir / "x.log").read_bytes().startswith(LOG_HEADER)
    assert mode(trusted_dir) == 0o700
