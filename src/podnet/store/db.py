"""One connection setup, explicit transactions and every query podnet runs.

Connections: WAL journal, a busy timeout (seconds), ``foreign_keys=ON`` on every connection (so
``ON DELETE CASCADE`` of cni-kindnet's ``portmap_entries`` works), autocommit mode with explicit
``BEGIN IMMEDIATE`` for anything that writes.

Writers queue for the store's write lock (:meth:`Store.locked`, a first-come first-served
queue of ``flock``ed files, :mod:`podnet.store.lock`) before they take SQLite's. SQLite's own
busy handler sleeps up to 100 ms between attempts, so under load a waiter that has waited long
loses to newcomers: 32 parallel ADD/DEL measured 32 code-11 failures at a 5 s busy timeout
(docs/benchmarks.md). The holder also keeps the lock across the kernel change that follows a
commit (nft), so the firewall always reflects the database in the order of commits.

Every SQLite failure is mapped here, naming the database file: busy/locked past the timeout →
:class:`~podnet.errors.TryAgainLater` (11); anything else (I/O error, full disk, read-only,
corrupt file) → code 5. A failed transaction is rolled back when one is still open, and a
failing ROLLBACK never hides the original error.
"""

from __future__ import annotations

import os

from podnet.errors import TryAgainLater
from podnet.store.conn import (
    SQLiteError,
    _Conn,
    _connect,
    _open_error,
    _prepare_files,
    _require_trusted,
)
from podnet.store.pods import Pods, Ranges
from podnet.store.schema import MIGRATIONS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from types import TracebackType

    from podnet.store.lock import FairLock
    from podnet.store.networks import Networks, ServerConfig, Trust

__all__ = ["DB_NAME", "LOCK_NAME", "Store", "open_store"]

DB_NAME = "podnet.db"
LOCK_NAME = "podnet.lock"


class Store:
    """The node state, composed over one connection: :attr:`pods`, :attr:`ranges`,
    :attr:`networks`, :attr:`trust` and :attr:`config` hold the queries. Use :meth:`write` for
    every change; reads may run outside it."""

    def __init__(self, conn: sqlite3.Connection, path: str, busy_timeout: float = 5.0) -> None:
        self._conn: _Conn | None = _Conn(conn, path)
        self._connections = 1  # how many connections this store has opened (see version())
        self.path = path
        self.busy_timeout = busy_timeout
        self._lock: FairLock | None = None
        self._lock_depth = 0
        #: Pods, attachments and hostPorts (:class:`podnet.store.pods.Pods`).
        self.pods = Pods(self._connection, path)
        #: Address ranges (:class:`podnet.store.pods.Ranges`).
        self.ranges = Ranges(self._connection, path, self.pods)
        self._networks: Networks | None = None
        self._trust: Trust | None = None
        self._config: ServerConfig | None = None

    # The components of podnet.store.networks, made on first use: a pod's DEL on a conflist
    # without a network never loads that module.
    @property
    def networks(self) -> Networks:
        """Networks and forwards (:class:`podnet.store.networks.Networks`)."""
        if self._networks is None:
            from podnet.store.networks import Networks

            self._networks = Networks(self._connection, self.path)
        return self._networks

    @property
    def trust(self) -> Trust:
        """The API's trusted certificates (:class:`podnet.store.networks.Trust`)."""
        if self._trust is None:
            from podnet.store.networks import Trust

            self._trust = Trust(self._connection, self.path)
        return self._trust

    @property
    def config(self) -> ServerConfig:
        """The server config, ``network.ovn.*`` (:class:`podnet.store.networks.ServerConfig`)."""
        if self._config is None:
            from podnet.store.networks import ServerConfig

            self._config = ServerConfig(self._connection, self.path)
        return self._config

    @property
    def conn(self) -> _Conn:
        """The SQLite connection; opened again after :meth:`detach`."""
        if self._conn is None:
            self._conn = _Conn(_connect(self.path, self.busy_timeout), self.path)
            self._connections += 1
        return self._conn

    def version(self) -> tuple[int, int]:
        """A token that differs from an earlier one when another connection has committed to
        the database since (SQLite's ``PRAGMA data_version``) or this store has reconnected
        (the pragma's count is per connection): a reader tells whether what it read may be
        stale without reading it again."""
        (changes,) = self.conn.execute("PRAGMA data_version").fetchone()
        return self._connections, int(changes)

    def _connection(self) -> _Conn:
        return self.conn

    def detach(self) -> None:
        """Close the SQLite connection now, outside any transaction, keeping the write lock
        (:meth:`locked`): closing the last connection checkpoints the WAL (two fsyncs, ~0.7
        ms), which a caller can overlap with the tools it waits for. The next query reconnects
        (CNIError 5 if that fails)."""
        if self._conn is not None and not self._conn.in_transaction:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock is not None:
            self._lock.release()  # only if still held (an exception unwinding past locked())
            self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions -------------------------------------------------------------------
    def locked(self) -> _Locked:
        """``with store.locked():`` — hold the store's write lock (a first-come, first-served
        queue, :mod:`podnet.store.lock`) across several transactions and the kernel changes that
        go with them. Re-entrant.

        Waits up to ``busy_timeout`` seconds: TryAgainLater (11) naming the lock file; code 5
        when the lock files cannot be created (read-only dataDir).
        """
        return _Locked(self)

    def write(self) -> _WriteTxn:
        """``with store.write():`` — a ``BEGIN IMMEDIATE`` transaction under :meth:`locked`,
        committed on success, rolled back on any exception. Nested, it joins the open one.

        The write lock is taken at BEGIN, so reads inside see the latest state and concurrent
        writers wait instead of failing at COMMIT. Raises TryAgainLater (11), CNIError 5.
        """
        return _WriteTxn(self)

    def _acquire(self) -> None:
        from podnet.store.lock import FairLock

        self._lock = FairLock(os.path.dirname(self.path), LOCK_NAME)
        self._lock.acquire(self.busy_timeout)

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    # -- node facts ---------------------------------------------------------------------
    def get_state(self, key: str) -> str | None:
        """A value of ``podnet_state``, or None."""
        row = self.conn.execute("SELECT value FROM podnet_state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_state(self, key: str, value: str) -> None:
        """Upsert a ``podnet_state`` value (inside :meth:`write`)."""
        self.conn.execute(
            "INSERT INTO podnet_state (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # -- the cluster's destinations (table inet podnet's cluster sets) -------------------------
    def cluster_cidrs(self) -> list[tuple[str, str]]:
        """``(cidr, source)`` rows of ``cluster_cidrs``, sorted: the destinations egress
        masquerade leaves alone besides the node's ranges; ``source`` is ``node:<name>`` or
        ``no-masquerade``. Text as stored (checked by whoever renders it)."""
        rows = self.conn.execute("SELECT cidr, source FROM cluster_cidrs").fetchall()
        return sorted((str(c), str(s)) for c, s in rows)

    def set_cluster_cidrs(self, rows: list[tuple[str, str]]) -> None:
        """Replace every ``cluster_cidrs`` row by ``rows`` (inside :meth:`write`)."""
        self.conn.execute("DELETE FROM cluster_cidrs")
        self.conn.executemany("INSERT OR IGNORE INTO cluster_cidrs (cidr, source) VALUES (?, ?)",
                              rows)  # fmt: skip


class _Locked:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> None:
        if self.store._lock_depth == 0:
            self.store._acquire()
        self.store._lock_depth += 1

    def __exit__(self, *exc: object) -> None:
        self.store._lock_depth -= 1
        if self.store._lock_depth == 0:
            self.store._release()


class _WriteTxn:
    """BEGIN IMMEDIATE … COMMIT; inside an open transaction it joins it (the outer one commits
    or rolls back)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = _Locked(store)
        self.joined = False

    def __enter__(self) -> None:
        self.lock.__enter__()
        if self.store.conn.in_transaction:
            self.joined = True
            return
        try:
            self.store.conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.__exit__()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self.store.conn
        if self.joined:
            self.lock.__exit__()
            return
        try:
            if exc_type is None:
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            else:
                self._rollback()
        finally:
            self.lock.__exit__()

    def _rollback(self) -> None:
        """ROLLBACK if a transaction is still open (SQLite ends it itself on some errors, such
        as a full disk); a failure here must not replace the error being handled."""
        raw = self.store.conn.raw
        if raw.in_transaction:
            try:
                raw.execute("ROLLBACK")
            except SQLiteError:
                pass


def open_store(data_dir: str, *, busy_timeout: float = 5.0, create: bool = True) -> Store:
    """Open (creating ``data_dir`` and migrating if needed) ``<data_dir>/podnet.db``.

    ``busy_timeout`` in seconds. Raises :class:`UntrustedDataDir` (7) when someone other than
    root could change the data dir (:func:`_require_trusted`), :class:`CNIError` code 5 when the
    directory or file cannot be created, opened or restricted, TryAgainLater (11) when a
    migration cannot get the lock. With ``create=False`` a missing database raises
    FileNotFoundError (for read-only tools), and modes are left as they are. Modes: see
    :func:`_prepare_files`.
    """
    path = os.path.join(data_dir, DB_NAME)
    missing = _require_trusted(data_dir)
    if not create:
        if missing or not os.path.exists(path):
            raise FileNotFoundError(path)
    else:
        _prepare_files(data_dir, path)
        if missing:
            _require_trusted(data_dir, created=True)
    conn = _connect(path, busy_timeout)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except SQLiteError as err:
        conn.close()
        raise _open_error(err, path) from err
    store = Store(conn, path, busy_timeout)
    if version < len(MIGRATIONS):
        try:
            _migrate(store)
        except BaseException:
            store.close()
            raise
    return store


#: What :func:`open_store` makes in a data dir besides the database: SQLite's WAL files and
#: :class:`~podnet.store.lock.FairLock`'s lock file and ticket directory.
STORE_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal", LOCK_NAME)
STORE_DIRS = (f"{LOCK_NAME}.d",)


def discard_new(store: Store, made_dir: bool) -> bool:
    """Remove ``store`` — just made by :func:`open_store` for a command that then failed —
    when it holds nothing (no pod, range, network, trusted certificate or config key): a
    refused command leaves no empty store behind. ``made_dir``: the data dir was made too
    (removed once empty). Returns whether it was removed; never raises."""
    import contextlib  # only here: off the plugins' import path
    import shutil

    data_dir = os.path.dirname(store.path)
    try:
        empty = not (store.pods.all() or store.networks.all() or store.trust.all()
                     or store.config.all() or store.ranges.all())  # fmt: skip
    except Exception:  # noqa: BLE001 - a store that cannot be read is not judged empty
        return False
    finally:
        store.close()
    if not empty:
        return False
    for name in STORE_FILES:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(data_dir, name))
    for name in STORE_DIRS:
        shutil.rmtree(os.path.join(data_dir, name), ignore_errors=True)
    if made_dir:
        with contextlib.suppress(OSError):
            os.rmdir(data_dir)
    return True


def _migrate(store: Store) -> None:
    conn = store.conn
    try:
        conn.execute("PRAGMA journal_mode = WAL")
    except TryAgainLater:
        pass  # another process is switching it (or has); the transaction below waits for it
    with store.write():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "name TEXT PRIMARY KEY, applied_at DATETIME DEFAULT CURRENT_TIMESTAMP)"
        )
        done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
        for name, ddl in MIGRATIONS:
            if name in done:
                continue
            for statement in ddl.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
