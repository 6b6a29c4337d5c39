"""The operations on networks and network forwards that the CLI (``podnetctl network …``) and the
REST API (``podnetctl serve``) run — one implementation, so both validate, store and apply the
same way and interleave safely.

Every change runs under the store's write lock (:meth:`podnet.store.Store.locked`) inside one
write transaction, and changes the kernel (bridge, table ``inet podnet``) before the transaction
commits: a failure rolls the transaction back, and the kernel change is either not made (nft
applies a script atomically) or undone here, so database and kernel stay as they were. A
forward's kernel change touches only that forward's map elements (:func:`podnet.reconcile.
forwards`), so its cost does not grow with the number of forwards.

Refusals are :class:`~podnet.networks.errors.NetworkError` with LXD's message and the HTTP
status the API answers (400, 404, 409, 412); kernel and database failures are CNIErrors (104, 5,
11).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from podnet import checked
from podnet import reconcile as sync
from podnet.drivers import bridge_uplink
from podnet.errors import CNIError
from podnet.networks import config as netconfig
from podnet.networks import forwards as fwd
from podnet.networks.errors import NetworkError, in_use
from podnet.networks.model import Forward, ForwardPort, Network, clean
from podnet.store import Store, open_store
from podnet.store.networks import ForwardRow, NetworkRow
from podnet.values import Dnat, PortMapping

if TYPE_CHECKING:
    from podnet.checked import Net
    from podnet.drivers.base import Driver
    from podnet.ovn.nb import Record, Registry
    from podnet.ovn.ovsdb import Ovsdb

__all__ = ["Manager"]


def _table_listing() -> list[str] | None:
    """Table ``inet podnet`` as nft lists it (``nft -j``), without what a rebuild of the same
    content changes (handles, the order of set and map elements), one JSON text per object;
    None when there is no such table."""
    from podnet.firewall import hostports, nft

    items = nft.list_json("table", hostports.FAMILY, hostports.TABLE)
    if items is None:
        return None
    out = []
    for item in items:
        for kind, body in item.items():
            if kind == "metainfo" or not isinstance(body, dict):
                continue
            body = {k: v for k, v in body.items() if k != "handle"}
            if isinstance(body.get("elem"), list):
                body["elem"] = sorted(body["elem"], key=lambda e: json.dumps(e, sort_keys=True))
            out.append(json.dumps({kind: body}, sort_keys=True))
    return out


def _forward_of(row: ForwardRow) -> Forward:
    try:
        ports = [ForwardPort.from_api(p) for p in json.loads(row.ports or "[]")]
    except (ValueError, TypeError, AttributeError):
        ports = []
    return Forward(row.listen_address, row.description, dict(row.config), ports, row.location)


def _ports_json(forward: Forward) -> str:
    return json.dumps([p.to_api() for p in forward.ports], separators=(",", ":"))


def view(row: NetworkRow) -> fwd.NetworkView:
    """What forward validation needs of a stored network: its subnets per family."""
    return fwd.NetworkView(row.name, row.type, _driver(row.type).subnets(row.config))


def _driver(kind: str) -> Driver:
    """The driver of network type ``kind``; NetworkError (400) when it cannot be loaded."""
    from podnet import drivers

    try:
        return drivers.get(kind)
    except CNIError as err:
        raise NetworkError(f"{err.msg} {err.details}".strip()) from None


class Manager:
    """Networks and forwards of the store in ``data_dir`` on this node (``node``: default the
    host name, LXD's member name). ``busy_timeout``: seconds to wait for the store's write
    lock. ``warn``: where failures the operation survives are reported. ``create``: make the
    store when ``data_dir`` holds none; otherwise a missing database is refused (a mistyped
    data dir must not become an empty store whose rebuild empties the node's table).

    ``data_dir`` is made absolute and must be a path podnet accepts
    (:func:`podnet.checked.path`): NetworkError (400) otherwise. The links podnet makes for it
    carry :attr:`owner` (``podnet:<data_dir>``)."""

    def __init__(self, data_dir: str, *, busy_timeout: float = 5.0, node: str | None = None,
                 warn: Callable[[str], None] | None = None,
                 create: bool = False) -> None:  # fmt: skip
        from podnet.link.names import owner_alias

        try:
            self.data_dir = checked.path(os.path.abspath(data_dir))
        except checked.BadValue as err:
            raise NetworkError(f"Invalid data dir: {err}") from None
        self.owner = owner_alias(self.data_dir)
        self.busy_timeout = busy_timeout
        self.node = node or socket.gethostname()
        self.warn = warn
        self.create = create
        #: Set when this manager made the store: whether it made the data dir too.
        self._made: bool | None = None

    @contextmanager
    def store(self) -> Iterator[Store]:
        """This manager's store, open (404 when the data dir holds none and ``create`` is
        off)."""
        with self._store() as store:
            yield store

    @contextmanager
    def _store(self) -> Iterator[Store]:
        """The store (remembering whether this opening made it: :meth:`discard_unused`)."""
        from podnet.drivers.nodeconf import no_store
        from podnet.store.db import DB_NAME

        fresh = self.create and not os.path.exists(os.path.join(self.data_dir, DB_NAME))
        made_dir = fresh and not os.path.isdir(self.data_dir)
        try:
            store = open_store(self.data_dir, busy_timeout=self.busy_timeout, create=self.create)
        except FileNotFoundError:
            raise NetworkError(no_store(self.data_dir, "--init to create a new one there"),
                               404) from None  # fmt: skip
        if fresh:
            self._made = made_dir
        with store:
            yield store

    def discard_unused(self) -> bool:
        """Remove the store this manager made (``create``) if it is still empty: for a command
        that failed (:func:`podnet.store.db.discard_new`; a refused command leaves no empty
        store behind). Returns whether it was removed; never raises."""
        from podnet.store.db import discard_new

        if self._made is None:
            return False
        made_dir, self._made = self._made, None
        try:
            store = open_store(self.data_dir, busy_timeout=self.busy_timeout, create=False)
        except Exception:  # noqa: BLE001 - gone already, or unreadable: left as it is
            return False
        return discard_new(store, made_dir)

    # -- reading -----------------------------------------------------------------------------
    @staticmethod
    def _local(store: Store, name: str) -> NetworkRow | None:
        """Network ``name`` of this node's store; None for a cluster network's mirror there
        (the node's view of an ovn network its pods joined: its truth is the NB)."""
        row = store.networks.get(name)
        return None if row is None or _driver(row.type).cluster else row

    def _network(self, store: Store, name: str, prefix: str = "") -> NetworkRow:
        row = self._local(store, name)
        if row is None:
            raise NetworkError(f"{prefix}Network not found", 404)
        return row

    def _used_by(self, store: Store, row: NetworkRow) -> list[str]:
        return [f"/1.0/instances/{cid}" for cid in _driver(row.type).users(store, row)]

    def _as_network(self, store: Store, row: NetworkRow) -> Network:
        status = _driver(row.type).status(row, self.owner)
        return Network(row.name, row.type, row.description, dict(row.config),
                       self._used_by(store, row), status, self.node)  # fmt: skip

    def _uplinks(self) -> dict[str, Record]:
        """This node's bridge uplinks (:func:`podnet.drivers.bridge_uplink.local_uplinks`)."""
        from podnet.drivers.bridge_uplink import local_uplinks

        with self._store() as store:
            return local_uplinks(store)

    def _nb(self, store: Store) -> Ovsdb | None:
        """OVN's NB as the server config names it (None: unset, no cluster networks)."""
        from podnet.drivers import cluster

        return cluster.connect(store.config.all(), store.path)

    def list_networks(self, target: str | None = None) -> list[Network]:
        """Every network: this node's (bridge, ptp) and the cluster's (physical, ovn; from
        OVN's NB when the server config names it), by name. 503 when the NB does not answer.
        ``target``: this node (:meth:`check_target`, 404 otherwise)."""
        from podnet.drivers import cluster

        self.check_target(target)
        with self._store() as store:
            local = [self._as_network(store, row) for row in store.networks.all()
                     if not _driver(row.type).cluster]  # fmt: skip
            nb = self._nb(store)
        shared = cluster.networks(nb, self.owner) if nb is not None else []
        return sorted([*local, *shared], key=lambda n: n.name)

    def get_network(self, name: str, target: str | None = None) -> Network:
        """One network; 404 ``Network not found``. ``target``: a member (this node for the
        node's own networks; for a cluster network any member, whose own keys and status are
        shown: :func:`podnet.drivers.cluster.network`)."""
        from podnet.drivers import cluster

        with self._store() as store:
            row = self._local(store, name)
            if row is not None:
                self.check_target(target)
                return self._as_network(store, row)
            nb = self._nb(store)
        found = cluster.network(nb, self.owner, name, target) if nb is not None else None
        if found is None:
            self.check_target(target)
            raise NetworkError("Network not found", 404)
        return found

    def _cluster_nb(self, store: Store, name: str) -> Ovsdb | None:
        """The NB when ``name`` is not a network of this node's store and the NB is set."""
        return self._nb(store) if self._local(store, name) is None else None

    def _forwards_nb(self, network: str) -> Ovsdb | None:
        """The NB when ``network`` is a cluster network (its forwards live there)."""
        with self._store() as store:
            return self._cluster_nb(store, network)

    def list_forwards(self, network: str) -> list[Forward]:
        """The forwards of ``network``, oldest first; 404 for an unknown network."""
        nb = self._forwards_nb(network)
        if nb is not None:
            from podnet.drivers import cluster_forwards

            return cluster_forwards.list_forwards(nb, network)
        with self._store() as store:
            row = self._network(store, network, "Failed loading network: ")
            return [_forward_of(f) for f in store.networks.forwards(row.id)]

    def get_forward(self, network: str, listen_address: str) -> Forward:
        """One forward (the address in any spelling); 404 ``Network forward not found``."""
        nb = self._forwards_nb(network)
        if nb is not None:
            from podnet.drivers import cluster_forwards

            return cluster_forwards.get_forward(nb, network, listen_address)
        with self._store() as store:
            row = self._network(store, network, "Failed loading network: ")
            found = store.networks.forward(row.id, _canonical(listen_address))
            if found is None:
                raise NetworkError("Network forward not found", 404)
            return _forward_of(found)

    def check_target(self, member: str | None) -> None:
        """``--target <member>``: must name this node (the only member of a podnet store)."""
        if member is None:
            return
        with self._store() as store:
            known = set(store.networks.node_names()) | {self.node}
        if member not in known:
            raise NetworkError(f'Member "{member}" not found', 404)

    # -- networks ----------------------------------------------------------------------------
    def _taken_subnets(self, store: Store, skip: str = "") -> list[tuple[Net, str]]:
        """Every subnet a network or podnet range holds, with its owner's description."""
        out: list[tuple[Net, str]] = []
        for row in store.networks.all():
            if row.name == skip:
                continue
            for nets in view(row).subnets.values():
                out += [(n, f'network "{row.name}"') for n in nets]
        for _, cidr, description, _ in store.ranges.all():
            out.append((checked.network(cidr), f"range {cidr} ({description or 'podnet'})"))
        return out

    def create_network(self, name: str, *, type: str = "bridge", description: str = "",
                       config: Mapping[str, str] | None = None,
                       target: str | None = None) -> Network:  # fmt: skip
        """Create a network of a creatable type (``bridge``, or one an administrator
        registered, :mod:`podnet.drivers`): validate (LXD's keys and messages), fill defaults
        (``auto`` addresses, NAT), record it and let its driver make it on the node, then NAT
        in table ``inet podnet``. 400 bad name/config/type, 409 existing name or a subnet
        overlapping another network or range. ``target``: this node for a node's network; for
        a cluster network the member whose own keys are recorded (a pending network,
        :func:`podnet.drivers.cluster.create`)."""
        from podnet import drivers

        netconfig.check_name(name)
        description = clean(description)
        config = {clean(k): clean(v) for k, v in (config or {}).items()}
        if not type:
            raise NetworkError("No network type provided")
        try:
            known = drivers.types()
        except CNIError as err:  # a malformed PODNET_DRIVERS
            raise NetworkError(f"{err.msg} {err.details}".strip()) from None
        if type not in known:
            raise NetworkError("Unknown driver")
        driver = _driver(type)
        if driver.cluster:
            from podnet.drivers import cluster

            with self._store() as store:
                nb = self._nb(store)
                local = {row.name for row in store.networks.all() if not _driver(row.type).cluster}
            if nb is None:
                raise NetworkError(
                    f"{type} networks need OVN: set network.ovn.northbound_connection"
                )
            return cluster.create(nb, self.owner, name, type, description, config, self.warn,
                                  local, self._uplinks(), target)  # fmt: skip
        self.check_target(target)
        valid = driver.validate(name, config)
        registry = self._registry({}, valid)  # the NB is read before the lock, never under it
        with self._store() as store, store.locked():
            if store.networks.get(name) is not None:
                raise NetworkError("The network already exists", 409)
            valid = driver.settle(name, valid, self._taken_subnets(store), self.owner)
            bridge_uplink.check_change(store, name, {}, valid, registry)
            with store.write():
                store.networks.insert(name, type, description, valid)
                _rebuild_or_undo(store, driver.create(name, valid, self.owner))
            return self._as_network(store, self._network(store, name))

    def _registry(self, before: Mapping[str, str], config: Mapping[str, str], *,
                  force: bool = False) -> Registry | None | bool:  # fmt: skip
        """The NB's networks when a bridge going from ``before`` to ``config`` needs them
        (:func:`podnet.drivers.bridge_uplink.read_registry`; None: no NB set), False when it
        does not (``force``: read all the same): read without the store's lock, so that a slow
        or blackholed NB never holds the lock the plugin's ADD and DEL wait for."""
        if not force and not bridge_uplink.needs_registry(before, config):
            return False
        with self._store() as store:
            return bridge_uplink.read_registry(store)

    def update_network(self, name: str, *, description: str | None = None,
                       config: Mapping[str, str] | None = None, patch: bool = False,
                       etag: str | None = None, target: str | None = None) -> Network:  # fmt: skip
        """Change a network: PUT (``patch`` False) replaces description and config, PATCH
        merges config keys (an empty value removes one) and keeps an absent description.
        ``etag`` (If-Match) must be the current one (412). A new subnet is refused while pods
        or forwards use the old one (400). 404 unknown, 400 bad config or a ptp network.
        ``target``: as for :meth:`create_network` (a cluster member's own keys change)."""
        with self._store() as store:
            nb = self._cluster_nb(store, name)
        if nb is not None:
            from podnet.drivers import cluster

            text = None if description is None else clean(description)
            values = {clean(k): clean(v) for k, v in (config or {}).items()}
            return cluster.update(nb, self.owner, name, text, values, patch, etag, self._uplinks(),
                                  target)  # fmt: skip
        self.check_target(target)
        sent = {clean(k): clean(v) for k, v in (config or {}).items()}
        force = False
        for _ in range(3):  # the NB is read before the lock: again when the network changed
            with self._store() as store:
                before = dict(self._network(store, name).config)
            after = {**before, **sent} if patch else sent
            registry = self._registry(before, after, force=force)
            try:
                return self._update_locked(name, description, config, patch, etag, registry)
            except bridge_uplink.Unread:
                force = True
        raise NetworkError(f'Network "{name}" kept changing while it was updated; try again',
                           409)  # fmt: skip

    def _update_locked(self, name: str, description: str | None,
                       config: Mapping[str, str] | None, patch: bool, etag: str | None,
                       registry: Registry | None | bool) -> Network:  # fmt: skip
        """:meth:`update_network` under the store's lock, the NB's networks read before it
        (``registry``, as :meth:`_registry` returns)."""
        with self._store() as store, store.locked():
            row = self._network(store, name)
            current = self._as_network(store, row)
            if etag is not None and etag.strip('"') != current.etag():
                raise stale(current.etag(), etag)
            driver = _driver(row.type)
            if not driver.creatable:
                raise NetworkError(
                    f'Network "{name}" of type {row.type} is managed by the podnet plugin'
                )
            merged = dict(row.config) if patch else {}
            merged.update({clean(k): clean(v) for k, v in (config or {}).items()})
            description = None if description is None else clean(description)
            valid = driver.validate(name, merged)
            valid = driver.settle(name, valid, self._taken_subnets(store, skip=name), self.owner,
                                  row.config)  # fmt: skip
            bridge_uplink.check_change(store, name, row.config, valid, registry)
            old, new = driver.subnets(row.config), driver.subnets(valid)
            moved = [f for f in (4, 6) if old.get(f, []) != new.get(f, [])]
            if moved and (store.networks.pods(row.id) or store.networks.forwards(row.id)):
                raise NetworkError(
                    f"Cannot change the IPv{moved[0]} subnet of network \"{name}\" while pods or "
                    "forwards use it"
                )
            new_description = row.description if (patch and description is None) else \
                (description or "")  # fmt: skip
            with store.write():
                store.networks.update(row.id, new_description, valid)
                _rebuild_or_undo(store, driver.update(name, row.config, valid, self.owner))
            return self._as_network(store, self._network(store, name))

    def delete_network(self, name: str, target: str | None = None) -> None:
        """Delete a network with its forwards, and what its driver made on the node (a bridge
        network's bridge, only a bridge podnet made); a ptp network (a conflist that no longer
        exists, say) with its ranges, which leave the masquerade sets. 400 while pods use it,
        404 unknown. ``target``: for a node's network this node (404 ``Member "x" not found``
        otherwise, :meth:`check_target`); a cluster network is deleted on every member, so a
        target is refused (:func:`podnet.drivers.cluster.delete`). Nothing changes when
        refused."""
        with self._store() as store:
            nb = self._cluster_nb(store, name)
        if nb is not None:
            from podnet.drivers import cluster

            cluster.delete(nb, self.owner, name, self.warn, target)
            return
        self.check_target(target)
        with self._store() as store, store.locked():
            row = self._network(store, name, "Failed loading network: ")
            driver = _driver(row.type)
            users = driver.users(store, row, any_owner=True)
            if users:
                raise in_use(users)
            remove = driver.delete(name, self.owner, self.warn)
            with store.write():
                store.networks.delete(row.id)
                driver.forget(store, row)
                # without its forwards, NAT and ranges, before the rows go
                sync.rebuild(store)
            remove()

    def restore(self, attach_new: bool = False) -> list[str]:
        """After a reboot or a cleanup behind podnet's back: every network's links back (a
        bridge with its addresses and its pods' host ends), and table ``inet podnet`` rebuilt
        (with forwards). Idempotent. Returns what it did, one line each; NetworkError naming
        each network that could not be restored, once the others are. An uplink's parent is
        only kept, never attached anew, unless ``attach_new``
        (:mod:`podnet.drivers.physical`)."""
        from podnet.drivers.base import restore_rows

        with self._store() as store, store.locked():
            done, failed = restore_rows(store, self.owner, _driver)
            before = _table_listing()
            sync.rebuild(store)
            change = ("made again from the store" if before is None
                      else "already as the store has it" if before == _table_listing()
                      else "rebuilt from the store (it differed)")  # fmt: skip
            done.append(f"table inet podnet: {change}")
            nb = self._nb(store)
        if nb is not None:
            from podnet.drivers import cluster

            done += cluster.restore(nb, self.owner, self._uplinks(), failed, attach_new)
        if failed:
            raise NetworkError("Failed restoring networks: " + "; ".join(failed))
        return done

    # -- forwards ----------------------------------------------------------------------------
    def _check_listen(self, store: Store, row: NetworkRow, listen: str) -> None:
        """One forward per listen address across all networks; not inside any subnet."""
        holder = store.networks.forward_network_of(listen)
        if holder == row.name:
            raise NetworkError("A forward for that listen address already exists", 409)
        addr = checked.ip(listen)
        suffix = "/32" if addr.version == 4 else "/128"
        if holder is not None:
            raise NetworkError(
                f'Forward listen address "{listen}{suffix}" overlaps with another network or NIC',
                409,
            )
        for net, owner in self._taken_subnets(store):
            if net.version == addr.version and addr in net:
                raise NetworkError(
                    f'Forward listen address "{listen}{suffix}" overlaps with another network or '
                    f"NIC ({owner} holds {net})"
                )
        for other in store.networks.all():  # another network's SNAT address (its own is allowed)
            if other.name != row.name and listen in (other.config.get("ipv4.nat.address"),
                                                     other.config.get("ipv6.nat.address")):
                raise NetworkError(
                    f'Forward listen address "{listen}{suffix}" overlaps with another network or '
                    f'NIC (the source NAT address of network "{other.name}")'
                )

    def _check_hostports(self, store: Store, dnats: Sequence[Dnat]) -> None:
        """A forward may not take traffic a hostPort publishes (and the reverse is refused by
        the plugins). hostPorts answer only on the node's own addresses, so only a forward
        whose listen address is local can: one listing a hostPort's protocol and port on that
        address or on any address of its family, or a default target on an address where any
        hostPort answers. 409 naming the holder (podnet's or podnet-portmap's)."""
        from podnet.claims import first_conflict
        from podnet.values import FORWARD

        found = first_conflict(store, dnats, of=FORWARD)
        if found is not None:
            d, holder = found
            h = holder.what
            assert isinstance(h, PortMapping)
            where = "any address" if h.wildcard else h.host_ip
            what = f"{d.protocol}/{d.port}" if d.protocol else "every port"
            raise NetworkError(
                f"Forward {what} on {d.listen} (an address of this node) would take the "
                f"traffic of hostPort {h.protocol}/{h.host_port} on {where} held by container "
                f"{holder.name}",
                409,
            )

    def create_forward(self, network: str, forward: Forward) -> Forward:
        """Create a forward (``forward.listen_address`` plus description, config, ports).
        Errors: 404 unknown network; 409 an existing forward on that address (this network:
        ``A forward for that listen address already exists``; another: overlap) or a hostPort
        clash; 400 anything invalid (LXD's messages, prefixed ``Failed creating forward:``)."""
        prefix = "Failed creating forward: "
        nb = self._forwards_nb(network)
        if nb is not None:
            from podnet.drivers import cluster_forwards

            return cluster_forwards.create_forward(nb, network, forward, self._uplinks())
        with self._store() as store, store.locked():
            row = self._network(store, network, "Failed loading network: ")
            new = forward.normalised()
            try:
                fwd.listen_address(new.listen_address)
                self._check_listen(store, row, new.listen_address)
                dnats = fwd.validate(view(row), new)
                self._check_hostports(store, dnats)
            except NetworkError as err:
                raise NetworkError(prefix + str(err), err.status) from None
            new.config = {k: v for k, v in new.config.items() if v != ""}
            with store.write():
                node = store.networks.node_id(self.node)
                fid = store.networks.insert_forward(row.id, node, new.listen_address,
                                                    new.description, _ports_json(new),
                                                    new.config)  # fmt: skip
                for d in dnats:
                    d.owner = str(fid)
                store.networks.set_forward_dnats(fid, dnats)
                sync.forwards(store, new.listen_address, None, dnats, self.warn)
            found = store.networks.forward(row.id, new.listen_address)
            assert found is not None
            return _forward_of(found)

    def update_forward(self, network: str, listen_address: str, *,
                       description: str | None = None, config: Mapping[str, str] | None = None,
                       ports: Sequence[ForwardPort] | None = None, patch: bool = False,
                       etag: str | None = None, client: bool = False) -> Forward:  # fmt: skip
        """Change a forward. PUT (``patch`` False) replaces description, config and ports (an
        absent one becomes empty); PATCH merges config keys (an empty value removes one), keeps
        ports and description when absent. ``etag`` (If-Match) must be the current one (412,
        LXD never checks it). 404 unknown network or forward; 400/409 as for create, prefixed
        ``Failed updating forward:``. ``client``: called as ``lxc`` does it (it reads the
        forward first: a missing one is the bare ``Network forward not found``)."""

        def change(current: Forward) -> Forward:
            if etag is not None and etag.strip('"') != current.etag():
                raise stale(current.etag(), etag)
            if patch:
                merged = dict(current.config)
                merged.update(config or {})
                return Forward(current.listen_address,
                               current.description if description is None else description,
                               merged, list(current.ports if ports is None else ports),
                               current.location)  # fmt: skip
            return Forward(current.listen_address, description or "", dict(config or {}),
                           list(ports or []), current.location)  # fmt: skip

        return self.modify_forward(network, listen_address, change, client=client)

    def modify_forward(
        self, network: str, listen_address: str, change: Callable[[Forward], Forward], *,
        client: bool = False,
    ) -> Forward:  # fmt: skip
        """Read, change and write a forward under the write lock, so concurrent changes are
        never lost: ``change(current) -> new`` (NetworkError to refuse). The new forward is
        validated like a created one; an unchanged forward is not written. Errors as
        :meth:`update_forward`."""
        prefix = "Failed updating forward: "
        nb = self._forwards_nb(network)
        if nb is not None:
            from podnet.drivers import cluster_forwards

            return cluster_forwards.modify_forward(nb, network, listen_address, change, client,
                                                   self._uplinks())  # fmt: skip
        with self._store() as store, store.locked():
            row = self._network(store, network, "Failed loading network: ")
            found = store.networks.forward(row.id, _canonical(listen_address))
            if found is None:
                raise NetworkError(("" if client else prefix) + "Network forward not found", 404)
            current = _forward_of(found)
            new = change(current).normalised()
            try:
                dnats = fwd.validate(view(row), new)
                self._check_hostports(store, dnats)
            except NetworkError as err:
                raise NetworkError(prefix + str(err), err.status) from None
            new.config = {k: v for k, v in new.config.items() if v != ""}
            if new.etag() == current.etag():
                return current
            old = store.networks.forward_dnats(found.id)
            with store.write():
                store.networks.update_forward(found.id, new.description, _ports_json(new),
                                              new.config)  # fmt: skip
                for d in dnats:
                    d.owner = str(found.id)
                store.networks.set_forward_dnats(found.id, dnats)
                sync.forwards(store, new.listen_address, old, dnats, self.warn)
            again = store.networks.forward(row.id, new.listen_address)
            assert again is not None
            return _forward_of(again)

    def add_forward_port(self, network: str, listen_address: str, port: ForwardPort) -> Forward:
        """``port add`` (as ``lxc`` runs it): append a port specification (validated with the
        others)."""

        def change(current: Forward) -> Forward:
            return Forward(current.listen_address, current.description, dict(current.config),
                           [*current.ports, port], current.location)  # fmt: skip

        return self.modify_forward(network, listen_address, change, client=True)

    def remove_forward_ports(
        self, network: str, listen_address: str, protocol: str | None,
        listen_port: str | None, *, force: bool = False,
    ) -> Forward:  # fmt: skip
        """``port remove``: drop the port specifications whose protocol and listen ports equal
        the given strings exactly (as ``lxc`` matches them; none given: all). Several matches
        need ``force``: ``Multiple ports match. Use --force to remove them all``; none:
        ``No matching port(s) found``."""

        def change(current: Forward) -> Forward:
            keep, matched = [], 0
            for p in current.ports:
                if (protocol is None or p.protocol == protocol) and \
                        (listen_port is None or p.listen_port == listen_port):
                    matched += 1
                    if matched > 1 and not force:
                        raise NetworkError("Multiple ports match. Use --force to remove them all")
                    continue
                keep.append(p)
            if not matched:
                raise NetworkError("No matching port(s) found")
            return Forward(current.listen_address, current.description, dict(current.config),
                           keep, current.location)  # fmt: skip

        return self.modify_forward(network, listen_address, change, client=True)

    def delete_forward(self, network: str, listen_address: str) -> None:
        """Delete a forward and its map elements. 404 unknown network or forward."""
        nb = self._forwards_nb(network)
        if nb is not None:
            from podnet.drivers import cluster_forwards

            cluster_forwards.delete_forward(nb, network, listen_address)
            return
        with self._store() as store, store.locked():
            row = self._network(store, network, "Failed loading network: ")
            found = store.networks.forward(row.id, _canonical(listen_address))
            if found is None:
                raise NetworkError("Failed deleting forward: Network forward not found", 404)
            old = store.networks.forward_dnats(found.id)
            with store.write():
                store.networks.delete_forward(found.id)
                sync.forwards(store, found.listen_address, old, None, self.warn)


def _rebuild_or_undo(store: Store, undo: Callable[[], object]) -> None:
    """Rebuild table ``inet podnet`` after a network change the driver made on the node (inside
    the write transaction); if that fails, ``undo`` puts the node back and the error rises (the
    transaction rolls back)."""
    try:
        sync.rebuild(store)
    except BaseException:
        undo()
        raise


def stale(current: str, sent: str) -> NetworkError:
    """412: an If-Match that is not the current ETag (LXD's message)."""
    return NetworkError(f"ETag doesn't match: {current} vs {sent.strip(chr(34))}", 412)


def _canonical(text: str) -> str:
    from podnet.networks.model import canonical_address

    return canonical_address(text)
