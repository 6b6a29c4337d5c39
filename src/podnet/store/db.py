"""One connection setup, explicit transactions and every query podnet runs.

Connections: WAL journal, a busy timeout (seconds), ``foreign_keys=ON`` on every connection (so
``ON DELETE CASCADE`` of seed 001's ``portmap_entries`` works), autocommit mode with explicit
``BEGIN IMMEDIATE`` for anything that writes.

Writers queue for the store's write lock (:meth:`Store.locked`, a first-come first-served
queue of ``flock``ed files, :mod:`podnet.store.lock`) before they take SQLite's. SQLite's own
busy handler sleeps up to 100 ms between attempts, so under load a waiter that has waited long
loses to newcomers: 32 parallel ADD/DEL measured 32 code-11 failures at a 5 s busy timeout
(issue 7). The holder also keeps the lock across the kernel change that follows a commit (nft),
so the firewall always reflects the database in the order of commits.

Every SQLite failure is mapped here, naming the database file: busy/locked past the timeout →
:class:`~podnet.errors.TryAgainLater` (11); anything else (I/O error, full disk, read-only,
corrupt file) → code 5. A failed transaction is rolled back when one is still open, and a
failing ROLLBACK never hides the original error.
"""

from __future__ import annotations

import os
import sqlite3

from podnet.errors import INVALID_CONFIG, IO_FAILURE, CNIError, TryAgainLater
from podnet.store.networks import NetworkQueries, TrustQueries
from podnet.store.schema import MIGRATIONS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import TracebackType

    from podnet.store.lock import FairLock

DB_NAME = "podnet.db"

#: Columns of ``pods`` in the order :class:`Pod` takes them.
POD_COLUMNS = (
    "container_id, name, namespace, uid, netns, ip_address_v4, ip_address_v6, ip_gateway_v4, "
    "ip_gateway_v6, interface_name, interface_mtu, creation_timestamp"
)


#: ``pod_attachments.owner`` of the rows each plugin creates (migration ``0004_pod_owner``).
OWNER_PODNET = "podnet"
OWNER_IPAM = "podnet-ipam"


def ipam_key(container_id: str, ifname: str, network: str) -> str:
    """``pods.container_id`` of a podnet-ipam row: ``<CNI_CONTAINERID>/<CNI_IFNAME>/<network>``.

    None of the three may contain ``/`` (container IDs and network names are ``[A-Za-z0-9_.-]``,
    the skeleton refuses such an ifname), so the key is unambiguous and never equals a container
    ID: the ``podnet`` plugin's rows (keyed by CNI_CONTAINERID) and podnet-ipam's can share one
    database, and a container may hold an allocation in several networks.
    """
    return f"{container_id}/{ifname}/{network}"


_ATTACHMENT_COLUMNS = "a.ifname, a.network_name, a.host_mac, a.pod_mac, a.owner, a.network_id"


class Pod:
    """A row of ``pods`` joined with ``pod_attachments`` (``ifname``, ``network_name``, MACs,
    ``owner``: :data:`OWNER_PODNET` or :data:`OWNER_IPAM`; ``network_id``: the bridge network
    the pod joined, None for podnet's point-to-point layout)."""

    __slots__ = (
        "container_id", "name", "namespace", "uid", "netns", "ip_address_v4", "ip_address_v6",
        "ip_gateway_v4", "ip_gateway_v6", "interface_name", "interface_mtu",
        "creation_timestamp", "ifname", "network_name", "host_mac", "pod_mac", "owner",
        "network_id",
    )  # fmt: skip

    container_id: str
    name: str | None
    namespace: str | None
    uid: str | None
    netns: str
    ip_address_v4: str | None
    ip_address_v6: str | None
    ip_gateway_v4: str | None
    ip_gateway_v6: str | None
    interface_name: str
    interface_mtu: int | None
    creation_timestamp: str
    ifname: str | None
    network_name: str | None
    host_mac: str | None
    pod_mac: str | None
    owner: str | None
    network_id: int | None

    def __init__(self, row: Sequence[object]) -> None:
        for slot, value in zip(self.__slots__, row, strict=True):
            setattr(self, slot, value)

    def as_dict(self) -> dict[str, object]:
        return {slot: getattr(self, slot) for slot in self.__slots__}


class PortMapping:
    """A row of ``portmap_entries``: host_ip ("0.0.0.0"/"::" = any), ports 1-65535, tcp|udp."""

    __slots__ = ("container_id", "host_ip", "host_port", "protocol", "container_ip",
                 "container_port")  # fmt: skip

    def __init__(
        self,
        container_id: str,
        host_ip: str,
        host_port: int,
        protocol: str,
        container_ip: str,
        container_port: int,
    ) -> None:
        self.container_id = container_id
        self.host_ip = host_ip
        self.host_port = host_port
        self.protocol = protocol
        self.container_ip = container_ip
        self.container_port = container_port

    @property
    def family(self) -> int:
        from podnet.checked import family

        return family(self.container_ip)

    @property
    def wildcard(self) -> bool:
        return self.host_ip in ("0.0.0.0", "::")

    def as_dict(self) -> dict[str, object]:
        return {slot: getattr(self, slot) for slot in self.__slots__}

    def __repr__(self) -> str:
        return (
            f"PortMapping({self.host_ip}:{self.host_port}/{self.protocol} -> "
            f"{self.container_ip}:{self.container_port} [{self.container_id}])"
        )


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
        try:
            return self.raw.execute(sql, params)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as err:
            raise db_error(err, self.path) from err

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> sqlite3.Cursor:
        try:
            return self.raw.executemany(sql, rows)
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


LOCK_NAME = "podnet.lock"


class Store(NetworkQueries, TrustQueries):
    """The node state. Use :meth:`write` for every change; reads may run outside it. Queries of
    networks and forwards come from :class:`~podnet.store.networks.NetworkQueries`."""

    def __init__(self, conn: sqlite3.Connection, path: str, busy_timeout: float = 5.0) -> None:
        self._conn: _Conn | None = _Conn(conn, path)
        self.path = path
        self.busy_timeout = busy_timeout
        self._lock: FairLock | None = None
        self._lock_depth = 0

    @property
    def conn(self) -> _Conn:
        """The SQLite connection; opened again after :meth:`detach`."""
        if self._conn is None:
            self._conn = _Conn(_connect(self.path, self.busy_timeout), self.path)
        return self._conn

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

    # -- ranges -------------------------------------------------------------------------
    def ranges(self) -> list[tuple[int, str, str | None, bool]]:
        """All ``ipam_ranges`` rows: ``(id, subnet, description, ip_masq)``."""
        rows = self.conn.execute(
            "SELECT r.id, r.subnet, r.description, COALESCE(o.ip_masq, 1) FROM ipam_ranges r "
            "LEFT JOIN range_options o ON o.range_id = r.id ORDER BY r.id"
        ).fetchall()
        return [(i, s, d, bool(m)) for i, s, d, m in rows]

    def _insert_range(self, subnet: str, description: str, *, ip_masq: bool) -> None:
        cur = self.conn.execute(
            "INSERT INTO ipam_ranges (subnet, description) VALUES (?, ?)", (subnet, description)
        )
        self.conn.execute(
            "INSERT INTO range_options (range_id, ip_masq) VALUES (?, ?)",
            (cur.lastrowid, int(ip_masq)),
        )

    def known_subnets(self) -> list[tuple[str, str]]:
        """Every prefix the node's store hands addresses from: ``(CIDR, whose)`` for each range
        (``range 10.244.0.0/24 (network podnet)``) and each bridge network's subnet
        (``the subnet of bridge network "br0"``)."""
        out = [(subnet, f"range {subnet} ({description or 'podnet'})")
               for _, subnet, description, _ in self.ranges()]  # fmt: skip
        rows = self.conn.execute(
            "SELECT n.name, c.value FROM networks n JOIN networks_config c ON c.network_id = n.id "
            "WHERE n.type = 'bridge' AND c.key IN ('ipv4.address', 'ipv6.address') "
            "ORDER BY n.name, c.key"
        ).fetchall()
        from podnet import checked

        for name, value in rows:
            try:
                net = checked.interface(value).network
            except checked.BadValue:
                continue  # auto / none
            out.append((str(net), f'the subnet {net} of bridge network "{name}"'))
        return out

    def _refuse_overlap(self, subnets: Sequence[str], description: str) -> None:
        """Code 7 naming both when one of ``subnets`` (new to the store) overlaps a known range
        or bridge subnet: two allocators would hand out one address, and one's gateway would
        be the other's pod (issue 13, item 5)."""
        from podnet import checked
        from podnet.errors import InvalidConfig

        known = [(checked.network(cidr, strict=False), whose)
                 for cidr, whose in self.known_subnets()]  # fmt: skip
        for subnet in subnets:
            net = checked.network(subnet)
            problem = checked.pod_range_problem(net)
            if problem:
                raise InvalidConfig(f"range {subnet} ({description}): {problem}")
            for other, whose in known:
                shared = other == net and whose.startswith("range ")  # the same range, shared
                if other.version == net.version and not shared and net.overlaps(other):
                    raise InvalidConfig(
                        f"range {subnet} ({description}) overlaps {whose} in {self.path}: "
                        "ranges and bridge subnets of one node may not overlap"
                    )

    def _range_in_use(self, subnet: str) -> bool:
        """Whether a pod row (of any owner) holds an address in ``subnet``."""
        from podnet import checked

        net = checked.network(subnet)
        return any(checked.ip(a) in net for a in self.used_addresses(net.version))

    def add_ranges(self, subnets: Sequence[str], description: str) -> bool:
        """Record ranges not yet known (canonical CIDRs), with ``ip_masq`` off: an IPAM plugin
        serves them for another main plugin, which owns their egress. Known ranges and their
        options are left alone. True if anything was added (inside :meth:`write`). Code 7 when
        a new range overlaps a known range or bridge subnet (:meth:`_refuse_overlap`)."""
        known = {subnet for _, subnet, _, _ in self.ranges()}
        new = [subnet for subnet in subnets if subnet not in known]
        if new:
            self._refuse_overlap(new, description)
        for subnet in new:
            self._insert_range(subnet, description, ip_masq=False)
        return bool(new)

    def sync_ranges(self, subnets: Sequence[str], ip_masq: bool, description: str) -> bool:
        """Record the config's ranges (canonical CIDRs) and their ipMasq; True if anything changed.

        Ranges of other configs sharing the database are left alone. Code 7 when a new range
        overlaps a known range or bridge subnet (:meth:`_refuse_overlap`); also when it would
        change the ``ip_masq`` of a range pods are in — the masquerade of pods another config
        made (a podnet-ipam range, recorded without a masquerade decision, takes its first
        main plugin's).
        """
        known = {subnet: (rid, masq) for rid, subnet, _, masq in self.ranges()}
        new = [subnet for subnet in subnets if subnet not in known]
        if new:
            self._refuse_overlap(new, description)
        owners = {subnet: whose for _, subnet, whose, _ in self.ranges()}
        for subnet in subnets:
            whose = owners.get(subnet) or ""
            if subnet in known and known[subnet][1] != ip_masq and \
                    not whose.endswith("(podnet-ipam)") and self._range_in_use(subnet):
                from podnet.errors import InvalidConfig

                raise InvalidConfig(
                    f"range {subnet} ({whose}) has ipMasq {str(known[subnet][1]).lower()} and "
                    f"pods in it: {description} cannot change that (once no pod is left in it, "
                    "it can)"
                )
        changed = False
        for subnet in subnets:
            if subnet not in known:
                self._insert_range(subnet, description, ip_masq=ip_masq)
                changed = True
            elif known[subnet][1] != ip_masq:
                self.conn.execute(
                    "INSERT INTO range_options (range_id, ip_masq) VALUES (?, ?) "
                    "ON CONFLICT (range_id) DO UPDATE SET ip_masq = excluded.ip_masq",
                    (known[subnet][0], int(ip_masq)),
                )
                changed = True
        return changed

    def delete_ranges(self, subnets: Sequence[str]) -> None:
        """Forget the ranges ``subnets`` (canonical CIDRs) and their options (inside
        :meth:`write`): a ptp network deleted with no pods left in them."""
        self.conn.executemany("DELETE FROM ipam_ranges WHERE subnet = ?", [(s,) for s in subnets])

    def restore_ranges(self, before: Sequence[tuple[int, str, str | None, bool]]) -> None:
        """Put ``ipam_ranges`` back as :meth:`ranges` returned it (inside :meth:`write`): ranges
        added since are deleted, changed ``ip_masq`` values restored. For a failed ADD undoing
        its own records."""
        known = {rid: masq for rid, _, _, masq in before}
        for rid, _, _, masq in self.ranges():
            if rid not in known:
                self.conn.execute("DELETE FROM ipam_ranges WHERE id = ?", (rid,))
            elif masq != known[rid]:
                self.conn.execute("UPDATE range_options SET ip_masq = ? WHERE range_id = ?",
                                  (int(known[rid]), rid))  # fmt: skip

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

    # -- pods ---------------------------------------------------------------------------
    def get_pod(self, container_id: str) -> Pod | None:
        """The pod row with its attachment, or None."""
        row = self.conn.execute(
            f"SELECT {_qualified(POD_COLUMNS)}, {_ATTACHMENT_COLUMNS} "
            "FROM pods p LEFT JOIN pod_attachments a USING (container_id) "
            "WHERE p.container_id = ?",
            (container_id,),
        ).fetchone()
        return Pod(row) if row else None

    def address_holder(self, family: int, address: str) -> Pod | None:
        """The row holding ``address`` (family 4 or 6), with its attachment, or None."""
        col = "ip_address_v4" if family == 4 else "ip_address_v6"
        row = self.conn.execute(
            f"SELECT {_qualified(POD_COLUMNS)}, {_ATTACHMENT_COLUMNS} "
            f"FROM pods p LEFT JOIN pod_attachments a USING (container_id) WHERE p.{col} = ?",
            (address,),
        ).fetchone()
        return Pod(row) if row else None

    def pods(self) -> list[Pod]:
        """Every pod row with its attachment, oldest first."""
        rows = self.conn.execute(
            f"SELECT {_qualified(POD_COLUMNS)}, {_ATTACHMENT_COLUMNS} "
            "FROM pods p LEFT JOIN pod_attachments a USING (container_id) "
            "ORDER BY p.creation_timestamp, p.rowid"
        ).fetchall()
        return [Pod(r) for r in rows]

    def used_addresses(self, family: int) -> set[str]:
        """Every allocated address of ``family`` (4 or 6)."""
        col = "ip_address_v4" if family == 4 else "ip_address_v6"
        rows = self.conn.execute(f"SELECT {col} FROM pods WHERE {col} IS NOT NULL")
        return {r[0] for r in rows}

    def interface_used(self, interface_name: str) -> bool:
        """True when a pod row holds the host interface ``interface_name``."""
        q = "SELECT 1 FROM pods WHERE interface_name = ? LIMIT 1"
        return self.conn.execute(q, (interface_name,)).fetchone() is not None

    def address_used(self, family: int, address: str) -> bool:
        """True when ``address`` is allocated (an index lookup on the UNIQUE column)."""
        col = "ip_address_v4" if family == 4 else "ip_address_v6"
        q = f"SELECT 1 FROM pods WHERE {col} = ?"
        return self.conn.execute(q, (address,)).fetchone() is not None

    def insert_pod(
        self,
        *,
        container_id: str,
        netns: str,
        interface_name: str,
        interface_mtu: int | None,
        ifname: str,
        network_name: str,
        host_mac: str | None,
        pod_mac: str | None,
        owner: str = OWNER_PODNET,
        ip_address_v4: str | None = None,
        ip_address_v6: str | None = None,
        ip_gateway_v4: str | None = None,
        ip_gateway_v6: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        uid: str | None = None,
    ) -> None:
        """Insert a pod and its attachment (inside :meth:`write`); ``owner`` names the plugin that
        releases the row. sqlite3.IntegrityError when the key or an address is taken."""
        self.conn.execute(
            "INSERT INTO pods (container_id, name, namespace, uid, netns, ip_address_v4, "
            "ip_address_v6, ip_gateway_v4, ip_gateway_v6, interface_name, interface_mtu) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (container_id, name, namespace, uid, netns, ip_address_v4, ip_address_v6,
             ip_gateway_v4, ip_gateway_v6, interface_name, interface_mtu),
        )  # fmt: skip
        self.conn.execute(
            "INSERT INTO pod_attachments (container_id, ifname, network_name, host_mac, pod_mac, "
            "owner) VALUES (?, ?, ?, ?, ?, ?)",
            (container_id, ifname, network_name, host_mac, pod_mac, owner),
        )

    def delete_pod(self, container_id: str) -> None:
        """Delete a pod; its ``portmap_entries`` and attachment go by ON DELETE CASCADE."""
        self.conn.execute("DELETE FROM pods WHERE container_id = ?", (container_id,))

    # -- hostPorts ----------------------------------------------------------------------
    def portmaps(self, container_id: str | None = None) -> list[PortMapping]:
        """``portmap_entries`` of one container, or of all when ``container_id`` is None."""
        q = (
            "SELECT container_id, host_ip, host_port, protocol, container_ip, container_port "
            "FROM portmap_entries"
        )
        if container_id is None:
            cur = self.conn.execute(q + " ORDER BY id")
        else:
            cur = self.conn.execute(q + " WHERE container_id = ? ORDER BY id", (container_id,))
        return [PortMapping(*r) for r in cur.fetchall()]

    def hostport_holders(self, entry: PortMapping, *, podnet: bool = True,
                         portmap: bool = True) -> list[PortMapping]:  # fmt: skip
        """Entries that clash with ``entry``: same protocol and hostPort and either the same
        hostIP, or one side a wildcard of the same family (the overlap cni-kindnet missed) —
        podnet's (``portmap_entries``, when ``podnet``) and podnet-portmap's
        (``portmap_claims``, when ``portmap``; their ``container_id`` reads
        ``podnet-portmap <network>/<container>``)."""
        from podnet.checked import FAMILIES

        wildcard = FAMILIES[entry.family].wildcard
        where = ("host_port = ? AND protocol = ? AND (host_ip = ? OR host_ip = ? OR ? = ?) "
                 "AND (instr(host_ip, ':') > 0) = ?")  # fmt: skip
        params = (entry.host_port, entry.protocol, entry.host_ip, wildcard, entry.host_ip,
                  wildcard, entry.family == 6)  # fmt: skip
        rows = []
        if podnet:
            rows += self.conn.execute(
                "SELECT container_id, host_ip, host_port, protocol, container_ip, container_port "
                f"FROM portmap_entries WHERE {where}", params).fetchall()  # fmt: skip
        if portmap:
            rows += self.conn.execute(
                "SELECT 'podnet-portmap ' || network || '/' || container_id, host_ip, host_port, "
                f"protocol, container_ip, container_port FROM portmap_claims WHERE {where}",
                params).fetchall()  # fmt: skip
        return [PortMapping(*r) for r in rows]

    # -- podnet-portmap's hostPorts -----------------------------------------------------
    def portmap_claims(self) -> list[tuple[str, PortMapping]]:
        """Every hostPort podnet-portmap published: ``(network, PortMapping)``."""
        rows = self.conn.execute(
            "SELECT network, container_id, host_ip, host_port, protocol, container_ip, "
            "container_port FROM portmap_claims ORDER BY id").fetchall()  # fmt: skip
        return [(r[0], PortMapping(*r[1:])) for r in rows]

    def set_portmap_claims(self, network: str, container_id: str,
                           entries: Iterable[PortMapping]) -> None:  # fmt: skip
        """Record the hostPorts podnet-portmap publishes for (network, container), replacing
        what it recorded before (inside :meth:`write`)."""
        self.delete_portmap_claims(network, container_id)
        self.conn.executemany(
            "INSERT INTO portmap_claims (network, container_id, host_ip, host_port, protocol, "
            "container_ip, container_port) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(network, container_id, e.host_ip, e.host_port, e.protocol, e.container_ip,
              e.container_port) for e in entries],
        )  # fmt: skip

    def delete_portmap_claims(self, network: str, container_id: str | None = None, *,
                              keep: Iterable[str] = ()) -> None:  # fmt: skip
        """Forget podnet-portmap's hostPorts of ``network``: one container's, or (GC) every
        container's but those in ``keep`` (inside :meth:`write`)."""
        if container_id is not None:
            self.conn.execute("DELETE FROM portmap_claims WHERE network = ? AND container_id = ?",
                              (network, container_id))  # fmt: skip
            return
        kept = list(keep)
        marks = ",".join("?" * len(kept))
        self.conn.execute(
            f"DELETE FROM portmap_claims WHERE network = ? AND container_id NOT IN ({marks})",
            (network, *kept))  # fmt: skip

    def insert_portmaps(self, entries: Iterable[PortMapping]) -> None:
        """Insert hostPort entries (inside :meth:`write`)."""
        self.conn.executemany(
            "INSERT INTO portmap_entries (container_id, host_ip, host_port, protocol, "
            "container_ip, container_port) VALUES (?, ?, ?, ?, ?, ?)",
            [(e.container_id, e.host_ip, e.host_port, e.protocol, e.container_ip,
              e.container_port) for e in entries],
        )  # fmt: skip


def _qualified(columns: str) -> str:
    return ", ".join("p." + c.strip() for c in columns.split(","))


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
            except sqlite3.Error:
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
    except sqlite3.Error as err:
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

    def step(parent: str, parent_st: os.stat_result, child: str,
             child_st: os.stat_result) -> None:  # fmt: skip
        problem = trusted.through_fault(parent_st, child_st, parent)
        if problem is not None:
            theirs, why = problem
            raise refuse(parent, why) if theirs else refuse(child, f"{why}, in sticky {parent}")

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
