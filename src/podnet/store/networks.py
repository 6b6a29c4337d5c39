"""Queries of networks, their config, nodes and network forwards (migration ``0005_networks``).

``store.networks`` and ``store.trust`` of :class:`podnet.store.db.Store`, over its connection;
every method that writes must run inside ``store.write()``. Addresses are stored in canonical
form (as LXD stores them). A forward's
``ports`` column holds its port specifications as JSON (LXD's format); ``forward_dnats`` holds
the same forward expanded into the firewall's DNAT model, kept in step by
:meth:`Networks.set_forward_dnats`.
"""

from __future__ import annotations

from podnet.store.conn import Queries

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from podnet.values import Dnat


class NetworkRow:
    """A row of ``networks`` with its config: ``id``, ``name``, ``type``, ``description``,
    ``config`` (dict)."""

    __slots__ = ("id", "name", "type", "description", "config")

    def __init__(self, id: int, name: str, type: str, description: str,
                 config: dict[str, str]) -> None:  # fmt: skip
        self.id = id
        self.name = name
        self.type = type
        self.description = description
        self.config = config


class ForwardRow:
    """A row of ``networks_forwards`` with its config and node name: ``id``, ``network_id``,
    ``listen_address``, ``description``, ``ports`` (the JSON text), ``config``, ``location``."""

    __slots__ = ("id", "network_id", "listen_address", "description", "ports", "config",
                 "location")  # fmt: skip

    def __init__(self, id: int, network_id: int, listen_address: str, description: str,
                 ports: str, config: dict[str, str], location: str) -> None:  # fmt: skip
        self.id = id
        self.network_id = network_id
        self.listen_address = listen_address
        self.description = description
        self.ports = ports
        self.config = config
        self.location = location


_DNAT_COLUMNS = "family, listen_address, protocol, listen_port, target_address, target_port"


class Networks(Queries):
    """Queries of networks, nodes and forwards over the store's connection (``store.networks``)."""

    def node_id(self, name: str) -> int:
        """The id of node ``name``, recorded on first use (inside ``write()``)."""
        row = self.conn.execute("SELECT id FROM nodes WHERE name = ?", (name,)).fetchone()
        if row:
            return int(row[0])
        cur = self.conn.execute("INSERT INTO nodes (name) VALUES (?)", (name,))
        return int(cur.lastrowid or 0)

    def node_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM nodes ORDER BY id")]

    # -- networks ------------------------------------------------------------------------------
    def _config(self, table: str, column: str, owner: int) -> dict[str, str]:
        rows = self.conn.execute(
            f"SELECT key, value FROM {table} WHERE {column} = ? ORDER BY key", (owner,)
        )
        return {k: v or "" for k, v in rows}

    def get(self, name: str) -> NetworkRow | None:
        """The network named ``name`` with its config, or None."""
        row = self.conn.execute(
            "SELECT id, name, type, description FROM networks WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            return None
        return NetworkRow(row[0], row[1], row[2], row[3],
                          self._config("networks_config", "network_id", row[0]))  # fmt: skip

    def all(self) -> list[NetworkRow]:
        """Every network, by name, with its config."""
        rows = self.conn.execute(
            "SELECT id, name, type, description FROM networks ORDER BY name"
        ).fetchall()
        configs: dict[int, dict[str, str]] = {}
        for nid, key, value in self.conn.execute(
            "SELECT network_id, key, value FROM networks_config ORDER BY key"
        ):
            configs.setdefault(nid, {})[key] = value or ""
        return [NetworkRow(i, n, t, d, configs.get(i, {})) for i, n, t, d in rows]

    def insert(self, name: str, type: str, description: str,
                       config: Mapping[str, str]) -> int:  # fmt: skip
        """Insert a network and its config; its id."""
        cur = self.conn.execute(
            "INSERT INTO networks (name, type, description) VALUES (?, ?, ?)",
            (name, type, description),
        )
        nid = int(cur.lastrowid or 0)
        self.set_config(nid, config)
        return nid

    def set_config(self, network_id: int, config: Mapping[str, str]) -> None:
        """Replace a network's config (empty values are not stored, as LXD)."""
        self.conn.execute("DELETE FROM networks_config WHERE network_id = ?", (network_id,))
        self.conn.executemany(
            "INSERT INTO networks_config (network_id, key, value) VALUES (?, ?, ?)",
            [(network_id, k, v) for k, v in sorted(config.items()) if v != ""],
        )

    def update(self, network_id: int, description: str,
                       config: Mapping[str, str]) -> None:  # fmt: skip
        self.conn.execute(
            "UPDATE networks SET description = ? WHERE id = ?", (description, network_id)
        )
        self.set_config(network_id, config)

    def delete(self, network_id: int) -> None:
        """Delete a network; its config and forwards go by ON DELETE CASCADE."""
        self.conn.execute(
            "DELETE FROM forward_dnats WHERE forward_id IN "
            "(SELECT id FROM networks_forwards WHERE network_id = ?)", (network_id,)
        )  # fmt: skip
        self.conn.execute("DELETE FROM networks WHERE id = ?", (network_id,))

    def restore(self, name: str, before: NetworkRow | None) -> None:
        """Put network ``name`` back as :meth:`network` returned it (None: it did not exist)."""
        now = self.get(name)
        if before is None:
            if now is not None:
                self.delete(now.id)
        elif now is not None:
            self.update(now.id, before.description, before.config)

    def pods(self, network_id: int) -> list[tuple[str, str, str]]:
        """``(container_id, ifname, host interface)`` of the pods attached to a network."""
        return self.conn.execute(
            "SELECT p.container_id, a.ifname, p.interface_name FROM pods p "
            "JOIN pod_attachments a USING (container_id) WHERE a.network_id = ? "
            "ORDER BY p.rowid",
            (network_id,),
        ).fetchall()

    def attach_pod(self, container_id: str, network_id: int) -> None:
        """Record that a pod joined a bridge network (inside ``write()``)."""
        self.conn.execute(
            "UPDATE pod_attachments SET network_id = ? WHERE container_id = ?",
            (network_id, container_id),
        )

    # -- forwards ------------------------------------------------------------------------------
    def _forward_rows(self, where: str, params: Sequence[object]) -> list[ForwardRow]:
        rows = self.conn.execute(
            "SELECT f.id, f.network_id, f.listen_address, f.description, f.ports, "
            "COALESCE(n.name, '') FROM networks_forwards f LEFT JOIN nodes n ON n.id = f.node_id "
            f"WHERE {where} ORDER BY f.id",
            params,
        ).fetchall()
        if not rows:
            return []
        configs: dict[int, dict[str, str]] = {}
        ids = [r[0] for r in rows]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for fid, key, value in self.conn.execute(
                "SELECT network_forward_id, key, value FROM networks_forwards_config "
                f"WHERE network_forward_id IN ({marks}) ORDER BY key",
                chunk,
            ):
                configs.setdefault(fid, {})[key] = value or ""
        return [ForwardRow(i, nid, la, d, p, configs.get(i, {}), loc)
                for i, nid, la, d, p, loc in rows]  # fmt: skip

    def forwards(self, network_id: int) -> list[ForwardRow]:
        """Every forward of a network, oldest first."""
        return self._forward_rows("f.network_id = ?", (network_id,))

    def forward(self, network_id: int, listen_address: str) -> ForwardRow | None:
        """The forward of a network on ``listen_address`` (canonical), or None."""
        rows = self._forward_rows("f.network_id = ? AND f.listen_address = ?",
                                  (network_id, listen_address))  # fmt: skip
        return rows[0] if rows else None

    def forward_network_of(self, listen_address: str) -> str | None:
        """The name of the network holding a forward on ``listen_address``, or None."""
        row = self.conn.execute(
            "SELECT n.name FROM networks_forwards f JOIN networks n ON n.id = f.network_id "
            "WHERE f.listen_address = ? LIMIT 1",
            (listen_address,),
        ).fetchone()
        return row[0] if row else None

    def insert_forward(self, network_id: int, node_id: int, listen_address: str,
                       description: str, ports: str, config: Mapping[str, str]) -> int:  # fmt: skip
        """Insert a forward and its config; its id. IntegrityError on a duplicate."""
        cur = self.conn.execute(
            "INSERT INTO networks_forwards (network_id, node_id, listen_address, description, "
            "ports) VALUES (?, ?, ?, ?, ?)",
            (network_id, node_id, listen_address, description, ports),
        )
        fid = int(cur.lastrowid or 0)
        self._set_forward_config(fid, config)
        return fid

    def _set_forward_config(self, forward_id: int, config: Mapping[str, str]) -> None:
        self.conn.execute(
            "DELETE FROM networks_forwards_config WHERE network_forward_id = ?", (forward_id,)
        )
        self.conn.executemany(
            "INSERT INTO networks_forwards_config (network_forward_id, key, value) "
            "VALUES (?, ?, ?)",
            [(forward_id, k, v) for k, v in sorted(config.items()) if v != ""],
        )

    def update_forward(self, forward_id: int, description: str, ports: str,
                       config: Mapping[str, str]) -> None:  # fmt: skip
        self.conn.execute(
            "UPDATE networks_forwards SET description = ?, ports = ? WHERE id = ?",
            (description, ports, forward_id),
        )
        self._set_forward_config(forward_id, config)

    def delete_forward(self, forward_id: int) -> None:
        self.conn.execute("DELETE FROM forward_dnats WHERE forward_id = ?", (forward_id,))
        self.conn.execute("DELETE FROM networks_forwards WHERE id = ?", (forward_id,))

    # -- the DNAT model of forwards --------------------------------------------------------------
    def set_forward_dnats(self, forward_id: int, dnats: Iterable[Dnat]) -> None:
        """Replace a forward's expanded translations."""
        self.conn.execute("DELETE FROM forward_dnats WHERE forward_id = ?", (forward_id,))
        self.conn.executemany(
            f"INSERT INTO forward_dnats (forward_id, {_DNAT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(forward_id, d.family, d.listen, d.protocol, d.port, d.target, d.target_port)
             for d in dnats],
        )  # fmt: skip

    def forward_dnats(self, forward_id: int | None = None) -> list[Dnat]:
        """The translations of one forward, or of every forward (owner: the forward id). A row
        :class:`~podnet.firewall.dnat.Dnat` refuses (a scoped address an older podnet stored)
        is left out: nft never took it."""
        from podnet.values import Dnat

        q = f"SELECT forward_id, {_DNAT_COLUMNS} FROM forward_dnats"
        if forward_id is None:
            rows = self.conn.execute(q + " ORDER BY forward_id, rowid").fetchall()
        else:
            rows = self.conn.execute(q + " WHERE forward_id = ? ORDER BY rowid",
                                     (forward_id,)).fetchall()  # fmt: skip
        out = []
        for fid, f, la, p, lp, ta, tp in rows:
            try:
                out.append(Dnat(f, la, p, lp, ta, tp, str(fid)))
            except ValueError:
                continue  # a row an older podnet wrote that today's checks refuse: never renderable
        return out

    def forward_drops(self) -> list[str]:
        """Listen addresses of the forwards without a default target (the traffic no port
        takes is dropped, as LXD drops it: docs/sources.md#lxd-network-forwards)."""
        rows = self.conn.execute(
            "SELECT f.listen_address FROM networks_forwards f WHERE NOT EXISTS (SELECT 1 FROM "
            "forward_dnats d WHERE d.forward_id = f.id AND d.protocol IS NULL) ORDER BY f.id"
        ).fetchall()
        return [r[0] for r in rows]


class Trust(Queries):
    """The REST API's trust store (migrations ``0006_certificates``, ``0011_trust_tokens``):
    ``store.trust``."""

    def all(self) -> list[tuple[str, str, str]]:
        """Every trusted client certificate: ``(fingerprint, name, PEM)``."""
        return self.conn.execute(
            "SELECT fingerprint, name, certificate FROM certificates ORDER BY id"
        ).fetchall()

    def add(self, fingerprint: str, name: str, pem: str) -> bool:
        """Trust a certificate (inside ``write()``); False when it already was."""
        cur = self.conn.execute(
            "INSERT INTO certificates (fingerprint, name, certificate) VALUES (?, ?, ?) "
            "ON CONFLICT (fingerprint) DO NOTHING",
            (fingerprint, name, pem),
        )
        return cur.rowcount > 0

    def remove(self, prefix: str) -> list[str]:
        """Stop trusting the certificate whose fingerprint starts with ``prefix`` (as ``lxc
        config trust remove``), when exactly one does; the fingerprints that matched."""
        rows = [r[0] for r in self.conn.execute(
            "SELECT fingerprint FROM certificates WHERE substr(fingerprint, 1, length(?)) = ?",
            (prefix, prefix))]  # fmt: skip
        if len(rows) == 1:
            self.conn.execute("DELETE FROM certificates WHERE fingerprint = ?", (rows[0],))
        return rows


    def add_token(self, secret_sha256: str, name: str, expires_at: int, now: int) -> None:
        """Record a trust token (inside ``write()``): its secret's SHA-256 (hex), the client
        name it grants, its expiry (Unix seconds); tokens expired at ``now`` are dropped."""
        self.conn.execute("DELETE FROM trust_tokens WHERE expires_at <= ?", (now,))
        self.conn.execute("INSERT INTO trust_tokens (secret_sha256, name, expires_at) "
                          "VALUES (?, ?, ?)", (secret_sha256, name, expires_at))  # fmt: skip

    def has_token(self, secret_sha256: str) -> bool:
        """Whether a token of that secret is pending (a read, no write lock)."""
        return self.conn.execute("SELECT 1 FROM trust_tokens WHERE secret_sha256 = ?",
                                 (secret_sha256,)).fetchone() is not None  # fmt: skip

    def redeem(self, secret_sha256: str) -> tuple[str, int] | None:
        """Use up the token of that secret (inside ``write()``): ``(name, expires_at)``, or
        None when there is none. The token is gone afterwards, expired or not (single use, as
        LXD cancels the token's operation before checking its expiry)."""
        row = self.conn.execute("SELECT name, expires_at FROM trust_tokens WHERE "
                                "secret_sha256 = ?", (secret_sha256,)).fetchone()  # fmt: skip
        if row is None:
            return None
        self.conn.execute("DELETE FROM trust_tokens WHERE secret_sha256 = ?", (secret_sha256,))
        return str(row[0]), int(row[1])

    def tokens(self) -> list[tuple[str, int]]:
        """The pending tokens: ``(name, expires_at)``, oldest first."""
        return [(str(n), int(e)) for n, e in self.conn.execute(
            "SELECT name, expires_at FROM trust_tokens ORDER BY rowid")]  # fmt: skip


class ServerConfig(Queries):
    """The server config (migration ``0009_server_config``): ``store.config``. Values are
    checked by :func:`podnet.networks.server.validate` before :meth:`replace`."""

    def all(self) -> dict[str, str]:
        """Every key that is set: ``{key: value}``."""
        rows = self.conn.execute("SELECT key, value FROM server_config ORDER BY key").fetchall()
        return dict(rows)

    def replace(self, config: dict[str, str]) -> None:
        """Make ``config`` the whole server config (inside ``write()``)."""
        self.conn.execute("DELETE FROM server_config")
        self.conn.executemany("INSERT INTO server_config (key, value) VALUES (?, ?)",
                              sorted(config.items()))  # fmt: skip
