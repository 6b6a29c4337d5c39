"""The pods of the store: cni-kindnet's ``pods`` table with podnet's ``pod_attachments``, the
hostPorts (``portmap_entries``) and podnet-portmap's (``portmap_claims``) as ``store.pods``
(:class:`podnet.store.Store`). The ranges their addresses come from are
:mod:`podnet.store.ranges`."""

from __future__ import annotations

from podnet.store.conn import Queries
from podnet.store.ranges import Ranges as Ranges  # store.ranges, made beside store.pods

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from podnet.values import Claim, Holder, PortMapping

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


_ATTACHMENT_COLUMNS = (
    "a.ifname, a.network_name, a.host_mac, a.pod_mac, a.owner, a.network_id, a.ovn_port"
)


class Pod:
    """A row of ``pods`` joined with ``pod_attachments`` (``ifname``, ``network_name``, MACs,
    ``owner``: :data:`OWNER_PODNET` or :data:`OWNER_IPAM`; ``network_id``: the bridge network
    the pod joined, None for podnet's point-to-point layout; ``ovn_port``: the logical switch
    port of a pod on an OVN network, None for other pods)."""

    __slots__ = (
        "container_id", "name", "namespace", "uid", "netns", "ip_address_v4", "ip_address_v6",
        "ip_gateway_v4", "ip_gateway_v6", "interface_name", "interface_mtu",
        "creation_timestamp", "ifname", "network_name", "host_mac", "pod_mac", "owner",
        "network_id", "ovn_port",
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
    ovn_port: str | None

    def __init__(self, row: Sequence[object]) -> None:
        for slot, value in zip(self.__slots__, row, strict=True):
            setattr(self, slot, value)

    def as_dict(self) -> dict[str, object]:
        return {slot: getattr(self, slot) for slot in self.__slots__}


#: ``portmap_entries`` with each row's family: the column of its pod that holds the container
#: address (``pods.ip_address_v4``/``ip_address_v6``) — no address text is looked at.
_ENTRIES = "portmap_entries e LEFT JOIN pods p USING (container_id)"
_ENTRY_COLUMNS = ("e.container_id, e.host_ip, e.host_port, e.protocol, e.container_ip, "
                  "e.container_port, CASE e.container_ip WHEN p.ip_address_v4 THEN 4 "
                  "WHEN p.ip_address_v6 THEN 6 ELSE 0 END")  # fmt: skip


class NewPod:
    """A pod row to insert (:meth:`Pods.add`): the pod (``container_id``: CNI_CONTAINERID, or
    :func:`ipam_key` for podnet-ipam; ``netns``; host end ``interface_name`` and its MTU in
    bytes; addresses and gateways per family, plain; the Kubernetes ``name``, ``namespace``,
    ``uid`` from CNI_ARGS) and its attachment (CNI_IFNAME ``ifname``, the NetConf's
    ``network_name``, MACs as ``"aa:bb:…"``, ``owner``: the plugin that releases the row,
    ``ovn_port``: the logical switch port of a pod on an OVN network)."""

    __slots__ = (
        "container_id", "netns", "interface_name", "interface_mtu", "ifname", "network_name",
        "host_mac", "pod_mac", "owner", "ip_address_v4", "ip_address_v6", "ip_gateway_v4",
        "ip_gateway_v6", "name", "namespace", "uid", "ovn_port",
    )  # fmt: skip

    def __init__(
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
        ovn_port: str | None = None,
    ) -> None:
        self.container_id, self.netns = container_id, netns
        self.interface_name, self.interface_mtu = interface_name, interface_mtu
        self.ifname, self.network_name, self.owner = ifname, network_name, owner
        self.host_mac, self.pod_mac = host_mac, pod_mac
        self.ip_address_v4, self.ip_address_v6 = ip_address_v4, ip_address_v6
        self.ip_gateway_v4, self.ip_gateway_v6 = ip_gateway_v4, ip_gateway_v6
        self.name, self.namespace, self.uid = name, namespace, uid
        self.ovn_port = ovn_port


def _family_or_none(m: PortMapping) -> int | None:
    """``m.family``, or None for a row whose address today's checks refuse."""
    try:
        return m.family
    except ValueError:
        return None


def _qualified(columns: str) -> str:
    return ", ".join("p." + c.strip() for c in columns.split(","))


class Pods(Queries):
    """Queries of pods, attachments and hostPorts over the store's connection."""

    # -- pods ---------------------------------------------------------------------------
    def get(self, container_id: str) -> Pod | None:
        """The pod row with its attachment, or None."""
        row = self.conn.execute(
            f"SELECT {_qualified(POD_COLUMNS)}, {_ATTACHMENT_COLUMNS} "
            "FROM pods p LEFT JOIN pod_attachments a USING (container_id) "
            "WHERE p.container_id = ?",
            (container_id,),
        ).fetchone()
        return Pod(row) if row else None

    def holder_of(self, family: int, address: str) -> Pod | None:
        """The row holding ``address`` (family 4 or 6), with its attachment, or None."""
        col = "ip_address_v4" if family == 4 else "ip_address_v6"
        row = self.conn.execute(
            f"SELECT {_qualified(POD_COLUMNS)}, {_ATTACHMENT_COLUMNS} "
            f"FROM pods p LEFT JOIN pod_attachments a USING (container_id) WHERE p.{col} = ?",
            (address,),
        ).fetchone()
        return Pod(row) if row else None

    def all(self) -> list[Pod]:
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

    def insert(self, **row: Any) -> None:
        """:meth:`add` of ``NewPod(**row)``."""
        self.add(NewPod(**row))

    def add(self, row: NewPod) -> None:
        """Insert a pod and its attachment (inside :meth:`write`). sqlite3.IntegrityError when
        the key or an address is taken."""
        self.conn.execute(
            "INSERT INTO pods (container_id, name, namespace, uid, netns, ip_address_v4, "
            "ip_address_v6, ip_gateway_v4, ip_gateway_v6, interface_name, interface_mtu) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row.container_id, row.name, row.namespace, row.uid, row.netns, row.ip_address_v4,
             row.ip_address_v6, row.ip_gateway_v4, row.ip_gateway_v6, row.interface_name,
             row.interface_mtu),
        )  # fmt: skip
        self.conn.execute(
            "INSERT INTO pod_attachments (container_id, ifname, network_name, host_mac, pod_mac, "
            "owner, ovn_port) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (row.container_id, row.ifname, row.network_name, row.host_mac, row.pod_mac,
             row.owner, row.ovn_port),
        )  # fmt: skip

    def delete(self, container_id: str) -> None:
        """Delete a pod; its ``portmap_entries`` and attachment go by ON DELETE CASCADE."""
        self.conn.execute("DELETE FROM pods WHERE container_id = ?", (container_id,))

    # -- hostPorts ----------------------------------------------------------------------
    def portmaps(self, container_id: str | None = None) -> list[PortMapping]:
        """``portmap_entries`` of one container, or of all when ``container_id`` is None."""
        from podnet.values import PortMapping  # after a DEL's veth deletion started

        q = f"SELECT {_ENTRY_COLUMNS} FROM {_ENTRIES}"
        if container_id is None:
            cur = self.conn.execute(q + " ORDER BY e.id")
        else:
            cur = self.conn.execute(q + " WHERE e.container_id = ? ORDER BY e.id", (container_id,))
        return [PortMapping(*r) for r in cur.fetchall()]

    def claim_holders(self, claim: Claim, *, hostports: bool = True, portmap: bool = True,
                      forwards: bool = True) -> list[Holder]:  # fmt: skip
        """Who already takes traffic ``claim`` takes: podnet's hostPorts (``portmap_entries``,
        when ``hostports``), podnet-portmap's (``portmap_claims``, when ``portmap``; their holder
        reads ``podnet-portmap <network>/<container>``), and network forwards (``forward_dnats``,
        when ``forwards``; holder: the network's name). Forwards first, then hostPorts, each in
        the order they were made. Whether a hostPort and a forward really meet depends on the
        forward's listen address being the node's own: :mod:`podnet.claims` decides.

        One rule decides, :meth:`podnet.values.Claim.overlaps`; the queries only narrow the rows
        by the ``(protocol, port)`` indexes, to those with the claim's protocol and port (or,
        for a claim or forward of every port, any)."""
        from podnet.values import FORWARD, HOSTPORT, Dnat, Holder, PortMapping

        out: list[Holder] = []
        if forwards:
            where, params = "1", []
            if claim.port is not None:
                where = "d.protocol IS NULL OR (d.protocol = ? AND d.listen_port = ?)"
                params = [claim.protocol, claim.port]
            for name, fam, la, proto, lp, ta, tp in self.conn.execute(
                "SELECT n.name, d.family, d.listen_address, d.protocol, d.listen_port, "
                "d.target_address, d.target_port FROM forward_dnats d "
                "JOIN networks_forwards f ON f.id = d.forward_id "
                f"JOIN networks n ON n.id = f.network_id WHERE {where} ORDER BY d.rowid",
                params,
            ).fetchall():  # fmt: skip
                held = Holder(FORWARD, name, Dnat(fam, la, proto, lp, ta, tp, name))
                if claim.overlaps(held.claim):
                    out.append(held)
        where, params = "1", []
        if claim.port is not None:
            where, params = "protocol = ? AND host_port = ?", [claim.protocol, claim.port]
        if hostports:
            rows = self.conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM {_ENTRIES} WHERE {where} ORDER BY e.id",
                params).fetchall()  # fmt: skip
            out += [held for r in rows if _family_or_none(m := PortMapping(*r)) is not None
                    and claim.overlaps((held := Holder(HOSTPORT, r[0], m)).claim)]  # fmt: skip
        if portmap:
            rows = self.conn.execute(
                "SELECT network, container_id, host_ip, host_port, protocol, container_ip, "
                f"container_port FROM portmap_claims WHERE {where} ORDER BY id",
                params).fetchall()  # fmt: skip
            for r in rows:
                m = PortMapping(*r[1:])
                held = Holder(HOSTPORT, f"podnet-portmap {r[0]}/{r[1]}", m)
                if _family_or_none(m) is not None and claim.overlaps(held.claim):
                    out.append(held)
        return out

    # -- podnet-portmap's hostPorts -----------------------------------------------------
    def portmap_claims(self) -> list[tuple[str, PortMapping]]:
        """Every hostPort podnet-portmap published: ``(network, PortMapping)``."""
        from podnet.values import PortMapping

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
