"""The store's SQLite connection, with every SQLite error raised as a CNI error (code 11 when
the database stayed locked, 5 otherwise)."""

from __future__ import annotations

import sqlite3

from podnet.errors import IO_FAILURE, CNIError, TryAgainLater

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

__all__ = ["Queries", "_Conn", "db_error"]

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
