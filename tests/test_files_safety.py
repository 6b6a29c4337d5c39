"""Files podnet creates or trusts (issue 13, item 4).

- The store: a new data dir is 0750, ``podnet.db`` and its -wal and -shm 0600 (whatever the
  umask), the lock files 0600; a loose database left by an older version is restricted on open;
  opening an existing store costs two system calls before SQLite's (strace).
- The log (``logFile``, ``CNI_LOG_FILE``): created 0600, appended, never through a symlink
  planted at its path (the line is dropped, the call succeeds), never blocking on a FIFO.

Store and log tests need no root; the ADD tests run the real plugin in a node namespace.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import podnet
from netns import Lab
from podnet.cni.errors import CNIError
from podnet.cni.skel import Log
from podnet.store import open_store

REPO_SRC = Path(podnet.__file__).resolve().parents[1]


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
            assert store.ranges() == []  # migrated
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
    with pytest.raises(CNIError, match=r"cannot create state directory .*file/data: Not a dir") as err:
        open_store(str(tmp_path / "file" / "data"))
    assert err.value.code == 5


STRACE = shutil.which("strace")
needs_strace = pytest.mark.skipif(STRACE is None, reason="needs strace")


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
from podnet.store.db import _prepare_files
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
    lines = path.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["podnet[1] first", "podnet[2] second"]


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
    if not done.wait(5):
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the thread go, then fail
        thread.join(5)
        pytest.fail("Log blocked opening a FIFO planted at the log path")


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
def test_a_log_line_costs_three_system_calls(tmp_path: Path) -> None:
    calls = traced(LOGGED, str(tmp_path / "podnet.log"))
    assert [c.split("(")[0] for c in calls] == ["openat", "write", "close"], calls
    opened = next(c for c in calls if c.startswith("openat"))
    for flag in ("O_WRONLY", "O_CREAT", "O_APPEND", "O_NOFOLLOW", "O_CLOEXEC", "0600"):
        assert flag in opened, opened


# -- a real plugin ADD in a node namespace ------------------------------------------------------
def netconf(data: Path, **extra: object) -> dict[str, object]:
    return {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet",
            "ranges": ["10.244.2.0/24"], "dataDir": str(data), **extra}


@pytest.mark.root
def test_plugin_add_creates_private_files(lab: Lab, tmp_path: Path) -> None:
    data, log = tmp_path / "var" / "data", tmp_path / "podnet.log"
    conf = netconf(data, logFile=str(log))
    pods = [lab.pod(), lab.pod()]
    rc, out = lab.cni("ADD", conf, container_id="files-a", netns=pods[0])
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


@pytest.mark.root
@pytest.mark.parametrize("how", ["logFile", "CNI_LOG_FILE"])
def test_plugin_log_symlink_is_not_followed(lab: Lab, tmp_path: Path, how: str) -> None:
    target = tmp_path / "shadow"
    target.write_text("root:x:0:0\n")
    target.chmod(0o644)
    link = tmp_path / "podnet.log"
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
