"""The store's SQLite connection: its files opened safely — the data dir walked from / and
refused when anyone but root could change it (:mod:`podnet.trusted`), directories made 0750
whatever the umask, the database, WAL, SHM and lock files created 0600 before SQLite opens them —
the connection set up (WAL, busy timeout, ``foreign_keys``), and every SQLite error raised as a
CNI error (code 11 when the database stayed locked, 5 otherwise)."""

from __future__ import annotations

import os
import sqlite3

from podnet.errors import INVALID_CONFIG, IO_FAILURE, CNIError, TryAgainLater

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

__all__ = ["Queries", "SQLiteError", "_Conn", "db_error"]

#: The base class of every SQLite error (``sqlite3.Error``).
SQLiteError = sqlite3.Error

#: SQLite primary result codes meaning "someone else holds the lock".
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def db_error(err: BaseException, path: str) -> CNIError:
    """The CNI error for a SQLite failure on ``path``: 11 when the database stayed locked, 5
    otherwise (the primary result code decides, not the message text)."""
    code = getattr(err, "sqlite_errorcode", None)
    name = getattr(err, "sqlite_errorname", "") or type(err).__name__
    if code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return TryAgainLater(f"state database {path} is locked; try again later", name)
    return CNIError(f"state database {path}: {err}", name, code=IO_FAILURE)


class _Conn:
    """The connection, with every SQLite error raised as :func:`db_error`'s CNI error.

    IntegrityError passes through unchanged: it is a constraint the caller checks for."""

    __slots__ = ("raw", "path")

    def __init__(self, raw: sqlite3.Connection, path: str) -> None:
        self.raw = raw
        self.path = path

    def execute(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        return self._run(self.raw.execute, sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> sqlite3.Cursor:
        return self._run(self.raw.executemany, sql, rows)

    def _run(self, method: Callable[[str, Any], sqlite3.Cursor], sql: str,
             args: Any) -> sqlite3.Cursor:  # fmt: skip
        try:
            return method(sql, args)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as err:
            raise db_error(err, self.path) from err

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def close(self) -> None:
        try:
            self.raw.close()
        except sqlite3.Error:
            pass  # closing only checkpoints the WAL; the next connection does it otherwise


class Queries:
    """A component of the store (``store.pods``, ``store.ranges``, ``store.networks``,
    ``store.trust``): its queries over the store's one connection, which ``conn`` (a callable)
    gives — reopened after :meth:`podnet.store.Store.detach`. ``path``: the database file."""

    __slots__ = ("_conn", "path")

    def __init__(self, conn: Callable[[], _Conn], path: str) -> None:
        self._conn = conn
        self.path = path

    @property
    def conn(self) -> _Conn:
        return self._conn()


class UntrustedDataDir(CNIError):
    """The data dir, or a directory on the way to it, can be changed by someone other than root
    (code 7): podnet, running as root, would open, create and chmod files there — through
    symlinks planted by that someone."""

    code = INVALID_CONFIG


def _require_trusted(data_dir: str, *, created: bool = False) -> bool:
    """Refuse (:class:`UntrustedDataDir`, 7) a data dir that someone other than root could
    change, before anything is opened or created in it (:mod:`podnet.trusted`'s rule, walked
    from ``/``): every directory passed through must be changeable by root alone — or be a
    root-owned sticky directory whose entry on the way is root's — and the data dir itself a
    directory no one else can change. A data dir that does not exist yet may be created only
    under a directory no one else can write (not even a sticky one: someone could plant the
    name first). Returns whether some part is missing (call again with ``created`` once
    :func:`_prepare_files` made it). About one ``lstat`` per component (~2 µs each)."""
    from podnet import trusted

    def refuse(path: str, why: str) -> UntrustedDataDir:
        where = "" if path == data_dir else f" (on the way to the data dir {data_dir})"
        return UntrustedDataDir(
            f"dataDir: {path} {why}{where}: podnet keeps its store only where root alone can "
            "change it"
        )

    step = trusted.refusing_step(refuse, "sticky ")

    try:
        real, real_st, missing = trusted.resolve(data_dir, step)
    except OSError as err:
        raise _file_error(f"cannot examine state directory {data_dir}", err) from err
    why = trusted.fault(real_st, real)
    if missing:
        if created:
            raise _file_error(f"cannot examine state directory {data_dir}",
                              FileNotFoundError(2, "No such file or directory"))  # fmt: skip
        if why:  # the missing rest would be made where others can write
            raise refuse(real, why)
        return True
    if why:
        raise refuse(real, why)
    if real_st.st_mode & 0o170000 != 0o040000:
        raise refuse(real, "is not a directory")
    return False


#: Modes of what :func:`open_store` creates: the data dir (0750: ``podnetctl serve --group``
#: gives a group access to its socket there) and the database (0600; SQLite creates -wal and
#: -shm with the database file's mode).
DIR_MODE, DB_MODE = 0o750, 0o600


def _mkdirs(directory: str) -> None:
    """Make ``directory`` and the missing directories above it, each mode :data:`DIR_MODE`
    whatever the umask (``os.makedirs`` gives the parents 0777 minus the umask: with umask 0,
    world-writable directories on the way to the store). One failing ``mkdir`` when it exists."""
    try:
        os.mkdir(directory, DIR_MODE)
    except FileExistsError:
        return
    except FileNotFoundError:
        _mkdirs(os.path.dirname(directory))
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            return
    os.chmod(directory, DIR_MODE)  # only when created: the umask may have narrowed it


def _prepare_files(data_dir: str, path: str) -> None:
    """Make ``data_dir`` (mode :data:`DIR_MODE`) and the database file ``path`` (mode
    :data:`DB_MODE`, created before SQLite opens it, so no other user ever can) if they are
    missing, and restrict a database (with its -wal and -shm) whose mode is looser, as older
    podnet versions left it (0644).

    Two system calls when everything exists (a failing ``mkdir`` and a ``stat`` of the
    database), one fewer than the ``os.makedirs(exist_ok=True)`` it replaces; the ``chmod``s
    run only when a file is created or loose. The umask may narrow what ``mkdir`` gives, so a
    created directory is ``chmod``ed. CNIError 5 naming the path when any of it fails (a loose
    database on a read-only filesystem too: it cannot be written either).
    """
    try:
        _mkdirs(data_dir)
    except OSError as err:
        raise _file_error(f"cannot create state directory {data_dir}", err) from err
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(path, flags, DB_MODE))
        except FileExistsError:
            pass  # another process created it (with this mode) just now
        except OSError as err:
            raise _file_error(f"cannot create state database {path}", err) from err
        return
    except OSError as err:
        raise _file_error(f"cannot open state database {path}", err) from err
    if mode & 0o170000 == 0o100000 and mode & 0o777 & ~DB_MODE:  # a loose regular file
        try:
            os.chmod(path, DB_MODE)
            for suffix in ("-wal", "-shm"):
                try:
                    os.chmod(path + suffix, DB_MODE)
                except FileNotFoundError:
                    pass
        except OSError as err:
            raise _file_error(f"cannot restrict state database {path} to mode 0600", err) from err


def _file_error(what: str, err: OSError) -> CNIError:
    where = f" ({err.filename})" if err.filename and err.filename not in what else ""
    return CNIError(f"{what}{where}: {err.strerror or err}", code=IO_FAILURE)


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection to the database file ``path`` with podnet's settings; CNIError 5 (or 11)."""
    conn = None
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        # WAL + NORMAL: commits need no fsync (a power cut may lose the last transactions but
        # never corrupts; after a power cut every pod is gone anyway).
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as err:
        if conn is not None:
            conn.close()
        raise _open_error(err, path) from err
    return conn


def _open_error(err: sqlite3.Error, path: str) -> CNIError:
    mapped = db_error(err, path)
    if mapped.code != IO_FAILURE:
        return mapped
    return CNIError(f"cannot open state database {path}: {err}", code=IO_FAILURE)
