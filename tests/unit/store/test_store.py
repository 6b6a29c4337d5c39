"""The SQLite store: cni-kindnet's schema column for column, migrations, conflicts (no root)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from paths import SCHEMAS
from podnet.errors import CNIError
from podnet.store import open_store
from podnet.store.schema import MIGRATIONS
from podnet.values import PortMapping

#: Seed 001's DDL, copied verbatim into the tests (not podnet's own copy: that would compare the
#: product with itself).
KINDNET = SCHEMAS / "cni_kindnet.sql"


def _kindnet_ddl() -> str:
    """The CREATE TABLE statements exactly as cni-kindnet's design prints them."""
    return KINDNET.read_text()


def _table_info(conn: sqlite3.Connection, table: str) -> list[tuple]:
    return conn.execute(f"PRAGMA table_info({table})").fetchall()


#: Indexes podnet adds to cni-kindnet's tables (none change a column or a constraint).
PODNET_INDEXES = {"portmap_entries": ("portmap_entries_container", "portmap_entries_port")}


@pytest.mark.parametrize("table", ["ipam_ranges", "pods", "portmap_entries"])
def test_table_info_matches_kindnet(tmp_path: Path, table: str) -> None:
    reference = sqlite3.connect(":memory:")
    reference.executescript(_kindnet_ddl())
    with open_store(str(tmp_path)) as store:
        assert _table_info(store.conn, table) == _table_info(reference, table)
        ours = store.conn.execute(f"PRAGMA foreign_key_list({table})").fetchall()
        assert ours == reference.execute(f"PRAGMA foreign_key_list({table})").fetchall()
        ours_idx = [r[1:] for r in store.conn.execute(f"PRAGMA index_list({table})")]
        # podnet's own indexes (migration 0008) come on top of cni-kindnet's, which stay as they are
        extra = [r for r in ours_idx if r[0] in PODNET_INDEXES.get(table, ())]
        assert {r[0] for r in extra} == set(PODNET_INDEXES.get(table, ()))
        assert [r[1:] for r in ours_idx if r not in extra] == \
            [r[2:] for r in reference.execute(f"PRAGMA index_list({table})")]


def test_connection_setup_and_migrations(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = [r[0] for r in store.conn.execute("SELECT name FROM schema_migrations ORDER BY name")]
        assert names == ["0001_seed_schema", "0002_pod_attachments_range_options", "0003_podnet_state",
                         "0004_pod_owner", "0005_networks", "0006_certificates",
                         "0007_portmap_claims", "0008_hot_indexes", "0009_server_config",
                         "0010_ovn_port", "0011_trust_tokens", "0012_cluster_cidrs"]
    with open_store(str(tmp_path)) as again:  # re-open: nothing re-applied
        assert again.conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)


def _pod(store, cid: str, v4: str) -> None:  # type: ignore[no-untyped-def]
    store.pods.insert(container_id=cid, netns="/x", interface_name="pn" + cid, interface_mtu=1500,
                     ifname="eth0", network_name="n", host_mac="", pod_mac="", ip_address_v4=v4)


def test_cascade_deletes_portmaps(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store, store.write():
        _pod(store, "a", "10.0.0.2")
        store.pods.insert_portmaps([PortMapping("a", "0.0.0.0", 80, "tcp", "10.0.0.2", 80)])
        store.pods.delete("a")
        assert store.pods.portmaps() == []


@pytest.mark.parametrize(
    ("held", "asked", "clash"),
    [
        ("0.0.0.0", "0.0.0.0", True),
        ("0.0.0.0", "192.0.2.1", True),   # wildcard then specific: cni-kindnet's overlap
        ("192.0.2.1", "0.0.0.0", True),
        ("192.0.2.1", "192.0.2.1", True),
        ("192.0.2.1", "192.0.2.2", False),
        ("::", "0.0.0.0", False),          # other family
    ],
)
def test_hostport_holders(tmp_path: Path, held: str, asked: str, clash: bool) -> None:
    with open_store(str(tmp_path)) as store, store.write():
        _pod(store, "a", "10.0.0.2")
        cip = "fd00::2" if ":" in held else "10.0.0.2"
        store.pods.insert_portmaps([PortMapping("a", held, 80, "tcp", cip, 80)])
        asked_cip = "fd00::3" if ":" in asked else "10.0.0.3"
        holders = store.pods.claim_holders(PortMapping("b", asked, 80, "tcp", asked_cip, 80).dnat())
        assert bool(holders) is clash
        assert [(h.kind, h.name) for h in holders] == ([("hostPort", "a")] if clash else [])
        udp = PortMapping("b", asked, 80, "udp", asked_cip, 80).dnat()
        assert not store.pods.claim_holders(udp)


def test_locked_database_is_code_11(tmp_path: Path) -> None:
    open_store(str(tmp_path)).close()
    holder = sqlite3.connect(str(tmp_path / "podnet.db"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with open_store(str(tmp_path), busy_timeout=0.2) as store:
            with pytest.raises(CNIError) as info, store.write():
                pass
        assert info.value.code == 11
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_detach_keeps_the_lock_and_reconnects(tmp_path: Path) -> None:
    """``detach`` closes the SQLite connection (the WAL is checkpointed and removed: the last
    connection closed) but keeps the store's write lock; the next query reconnects and sees the
    committed rows; inside a transaction it does nothing."""
    from podnet.store.lock import FairLock

    with open_store(str(tmp_path)) as store, store.locked():
        with store.write():
            _pod(store, "c1", "10.0.0.2")
            store.detach()  # a no-op inside the transaction
            _pod(store, "c2", "10.0.0.3")
        store.detach()
        assert not (tmp_path / "podnet.db-wal").exists()
        other = FairLock(str(tmp_path), "podnet.lock")
        with pytest.raises(CNIError) as info:
            other.acquire(0.2)  # the lock is still ours
        assert info.value.code == 11
        assert [p.container_id for p in store.pods.all()] == ["c1", "c2"]
        with store.write():
            _pod(store, "c3", "10.0.0.4")
    with open_store(str(tmp_path)) as store:
        assert len(store.pods.all()) == 3


def test_writers_serialise(tmp_path: Path) -> None:
    open_store(str(tmp_path)).close()
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            with open_store(str(tmp_path)) as store, store.write():
                _pod(store, f"c{i}", f"10.0.{i // 250}.{i % 250 + 2}")
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with open_store(str(tmp_path)) as store:
        assert len(store.pods.all()) == 32


LXD_FORWARDS = SCHEMAS / "lxd_forwards.sql"


def _lxd_forwards_ddl() -> str:
    """LXD's two CREATE TABLE statements, as LXD's schema has them."""
    return LXD_FORWARDS.read_text()


@pytest.mark.parametrize("table", ["networks_forwards", "networks_forwards_config"])
def test_lxd_forward_tables_match(tmp_path: Path, table: str) -> None:
    """Seed 004's tables column for column, with its UNIQUE constraints and foreign keys."""
    reference = sqlite3.connect(":memory:")
    reference.executescript(_lxd_forwards_ddl())
    with open_store(str(tmp_path)) as store:
        assert _table_info(store.conn, table) == _table_info(reference, table)
        for pragma in ("foreign_key_list", "index_list"):
            ours = store.conn.execute(f"PRAGMA {pragma}({table})").fetchall()
            theirs = reference.execute(f"PRAGMA {pragma}({table})").fetchall()
            if pragma == "index_list":  # index names (autoindex numbering) aside
                ours, theirs = [r[2:] for r in ours], [r[2:] for r in theirs]
            assert ours == theirs, pragma


def test_forward_rows_cascade_with_their_network(tmp_path: Path) -> None:
    from podnet.values import Dnat

    with open_store(str(tmp_path)) as store, store.write():
        nid = store.networks.insert("br0", "bridge", "", {"ipv4.address": "10.0.0.1/24"})
        node = store.networks.node_id("host1")
        fid = store.networks.insert_forward(nid, node, "198.51.100.1", "", "[]", {"user.a": "b"})
        store.networks.set_forward_dnats(fid, [Dnat(4, "198.51.100.1", None, None, "10.0.0.2", None)])
        with pytest.raises(sqlite3.IntegrityError):  # UNIQUE (network_id, node_id, listen_address)
            store.networks.insert_forward(nid, node, "198.51.100.1", "", "[]", {})
        store.networks.delete(nid)
        for table in ("networks_forwards", "networks_forwards_config", "forward_dnats", "networks_config"):
            assert store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


class _FailingConn:
    """A connection whose statements starting with ``failing`` raise SQLite's own error; the
    rest go to ``raw``."""

    def __init__(self, raw: sqlite3.Connection, failing: str) -> None:
        self.raw, self.failing = raw, failing

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql.startswith(self.failing):
            raise sqlite3.OperationalError("disk I/O error")
        return self.raw.execute(sql, *args)

    def close(self) -> None:
        self.raw.close()


def test_a_failing_first_query_is_code_5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The version query of a fresh connection failing is an I/O error (5) naming the file, not
    a Python error from the handler."""
    import podnet.store.db as db

    real = db._connect
    monkeypatch.setattr(db, "_connect", lambda path, timeout: _FailingConn(real(path, timeout),
                                                                           "PRAGMA user_version"))
    with pytest.raises(CNIError) as err:
        open_store(str(tmp_path))
    assert err.value.code == 5 and "podnet.db" in err.value.msg, err.value.msg


def test_a_failing_rollback_keeps_the_error(tmp_path: Path) -> None:
    """A write that fails and whose ROLLBACK fails too raises the write's error; the lock is
    let go, so the next writer gets it."""
    with open_store(str(tmp_path)) as store:
        raw = store.conn.raw
        store.conn.raw = _FailingConn(raw, "ROLLBACK")  # type: ignore[assignment]
        with pytest.raises(ValueError, match="the write's own"):
            with store.write():
                store.conn.execute("INSERT INTO ipam_ranges (subnet) VALUES ('10.1.0.0/24')")
                raise ValueError("the write's own")
        store.conn.raw = raw
        raw.execute("ROLLBACK")
        with store.write():
            assert store.conn.execute("SELECT count(*) FROM ipam_ranges").fetchone()[0] == 0
