"""Files podnet creates or trusts (issue 13, item 4).

- The store: a new data dir is 0750, ``podnet.db`` and its -wal and -shm 0600 (whatever the
  umask), the lock files 0600; a loose database left by an older version is restricted on open;
  opening an existing store costs two system calls before SQLite's (strace).

No root needed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import podnet
from podnet.cni.errors import CNIError
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
