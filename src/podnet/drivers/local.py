"""The backend of networks kept in this node's store (``bridge``, ``ptp``, and any type that names
:data:`podnet.drivers.network.LOCAL`).

Every change runs under the store's write lock (:meth:`podnet.store.Store.locked`) inside one
write transaction, and changes the kernel (bridge, table ``inet podnet``) before the transaction
commits: a failure rolls the transaction back, and the kernel change is either not made (nft
applies a script atomically) or undone here, so database and kernel stay as they were. The
forwards are in :mod:`podnet.drivers.local_forwards`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from podnet import reconcile as sync
from podnet.drivers import local_forwards
from podnet.drivers.backend import Backend, Change, LoadedNetwork, driver_of
from podnet.drivers.local_forwards import taken_subnets
from podnet.drivers.network import LOCAL
from podnet.drivers.ovn import bridge_uplink
from podnet.errors import CNIError
from podnet.firewall import hostports, nft
from podnet.networks.errors import NetworkError, in_use
from podnet.networks.model import Forward, Network, clean

if TYPE_CHECKING:
    from podnet.drivers.base import Driver
    from podnet.ovn.nb import Registry
    from podnet.store import Store
    from podnet.store.networks import NetworkRow


def table_listing() -> list[str] | None:
    """Table ``inet podnet`` as nft lists it (``nft -j``), without what a rebuild of the same
    content changes (handles, the order of set and map elements), one JSON text per object;
    None when there is no such table."""
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


def rebuild_or_undo(store: Store, undo: Callable[[], object]) -> None:
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


class LocalBackend(Backend):
    """Networks of this node's store (the ``Manager``'s ``data_dir``)."""

    kind = LOCAL

    # -- reading -----------------------------------------------------------------------------
    def row(self, store: Store, name: str) -> NetworkRow | None:
        """Network ``name`` of the store; None for a network another backend keeps (the
        node's mirror of an ovn network its pods joined: its truth is the NB)."""
        row = store.networks.get(name)
        return row if row is not None and self.keeps(driver_of(row.type)) else None

    def _network(self, store: Store, name: str, prefix: str = "") -> NetworkRow:
        row = self.row(store, name)
        if row is None:
            raise NetworkError(f"{prefix}Network not found", 404)
        return row

    def names(self, store: Store) -> set[str]:
        """The names of the networks kept here."""
        return {row.name for row in store.networks.all() if self.keeps(driver_of(row.type))}

    def as_network(self, store: Store, row: NetworkRow) -> Network:
        """``row`` as the API shows it (its users, its status on this node)."""
        m = self.manager
        driver = driver_of(row.type)
        used = [f"/1.0/instances/{cid}" for cid in driver.users(store, row)]
        return Network(row.name, row.type, row.description, dict(row.config), used,
                       driver.status(row, m.owner), m.node)  # fmt: skip

    def load(self, store: Store, name: str) -> LoadedNetwork | None:
        row = self.row(store, name)
        return None if row is None else LoadedNetwork(name, self, row)

    def networks(self, store: Store) -> list[Network]:
        return [self.as_network(store, row) for row in store.networks.all()
                if self.keeps(driver_of(row.type))]  # fmt: skip

    def get(self, net: LoadedNetwork, target: str | None) -> Network:
        self.manager.check_target(target)
        if net.row is None:
            raise NetworkError("Network not found", 404)
        with self.manager.store() as store:
            return self.as_network(store, net.row)

    # -- changes -----------------------------------------------------------------------------
    def _registry(self, before: Mapping[str, str], config: Mapping[str, str], *,
                  force: bool = False) -> Registry | None | bool:  # fmt: skip
        """The NB's networks when a bridge going from ``before`` to ``config`` needs them
        (:func:`podnet.drivers.ovn.bridge_uplink.read_registry`; None: no NB set), False when it
        does not (``force``: read all the same): read without the store's lock, so that a slow
        or blackholed NB never holds the lock the plugin's ADD and DEL wait for."""
        if not force and not bridge_uplink.needs_registry(before, config):
            return False
        with self.manager.store() as store:
            return bridge_uplink.read_registry(store)

    def create(self, driver: Driver, name: str, description: str, config: dict[str, str],
               target: str | None) -> Network:  # fmt: skip
        m = self.manager
        m.check_target(target)
        valid = driver.validate(name, config)
        registry = self._registry({}, valid)  # the NB is read before the lock, never under it
        with m.store() as store, store.locked():
            if store.networks.get(name) is not None:
                raise NetworkError("The network already exists", 409)
            valid = driver.settle(name, valid, taken_subnets(store), m.owner)
            bridge_uplink.check_change(store, name, {}, valid, registry)
            with store.write():
                store.networks.insert(name, driver.type, description, valid)
                rebuild_or_undo(store, driver.create(name, valid, m.owner))
            return self.as_network(store, self._network(store, name))

    def update(self, net: LoadedNetwork, description: str | None, config: Mapping[str, str],
               patch: bool, etag: str | None, target: str | None) -> Network:  # fmt: skip
        self.manager.check_target(target)
        sent = {clean(k): clean(v) for k, v in config.items()}
        force = False
        for _ in range(3):  # the NB is read before the lock: again when the network changed
            with self.manager.store() as store:
                before = dict(self._network(store, net.name).config)
            after = {**before, **sent} if patch else sent
            registry = self._registry(before, after, force=force)
            try:
                return self._update_locked(net.name, description, sent, patch, etag, registry)
            except bridge_uplink.Unread:
                force = True
        raise NetworkError(f'Network "{net.name}" kept changing while it was updated; try again',
                           409)  # fmt: skip

    def _update_locked(self, name: str, description: str | None, config: Mapping[str, str],
                       patch: bool, etag: str | None,
                       registry: Registry | None | bool) -> Network:  # fmt: skip
        """:meth:`update` under the store's lock, the NB's networks read before it
        (``registry``, as :meth:`_registry` returns)."""
        m = self.manager
        with m.store() as store, store.locked():
            row = self._network(store, name)
            current = self.as_network(store, row)
            if etag is not None and etag.strip('"') != current.etag():
                raise stale(current.etag(), etag)
            driver = driver_of(row.type)
            if not driver.creatable:
                raise NetworkError(
                    f'Network "{name}" of type {row.type} is managed by the podnet plugin'
                )
            merged = dict(row.config) if patch else {}
            merged.update(config)
            description = None if description is None else clean(description)
            valid = driver.validate(name, merged)
            valid = driver.settle(name, valid, taken_subnets(store, skip=name), m.owner,
                                  row.config)  # fmt: skip
            bridge_uplink.check_change(store, name, row.config, valid, registry)
            old, new = driver.subnets(row.config), driver.subnets(valid)
            moved = [f for f in (4, 6) if old.get(f, []) != new.get(f, [])]
            if moved and (store.networks.pods(row.id) or store.networks.forwards(row.id)):
                raise NetworkError(
                    f'Cannot change the IPv{moved[0]} subnet of network "{name}" while pods or '
                    "forwards use it"
                )
            new_description = row.description if (patch and description is None) else \
                (description or "")  # fmt: skip
            with store.write():
                store.networks.update(row.id, new_description, valid)
                rebuild_or_undo(store, driver.update(name, row.config, valid, m.owner))
            return self.as_network(store, self._network(store, name))

    def delete(self, net: LoadedNetwork, target: str | None) -> None:
        m = self.manager
        m.check_target(target)
        with m.store() as store, store.locked():
            row = self._network(store, net.name, "Failed loading network: ")
            driver = driver_of(row.type)
            users = driver.users(store, row, any_owner=True)
            if users:
                raise in_use(users)
            remove = driver.delete(net.name, m.owner, m.warn)
            with store.write():
                store.networks.delete(row.id)
                driver.forget(store, row)
                # without its forwards, NAT and ranges, before the rows go
                sync.rebuild(store)
            remove()

    def restore(self, done: list[str], failed: list[str], attach_new: bool) -> None:
        """Every network of the store back on the node (:meth:`podnet.drivers.network.
        NetworkType.restore`), one that fails not stopping the others (an uplink bridge with
        Open vSwitch not up yet, say); then table ``inet podnet`` rebuilt, and a line saying
        whether it differed from the store."""
        m = self.manager
        with m.store() as store, store.locked():
            for row in store.networks.all():
                try:
                    done += driver_of(row.type).restore(store, row, m.owner)
                except (CNIError, NetworkError) as err:
                    failed.append(f"network {row.name}: {getattr(err, 'msg', None) or err}")
            before = table_listing()
            sync.rebuild(store)
            change = ("made again from the store" if before is None
                      else "already as the store has it" if before == table_listing()
                      else "rebuilt from the store (it differed)")  # fmt: skip
            done.append(f"table inet podnet: {change}")

    # -- forwards: the type says whether it has them, the store keeps them -------------------
    def _forwarding(self, store: Store, name: str) -> NetworkRow:
        row = self._network(store, name, "Failed loading network: ")
        driver_of(row.type).check_forwards(name)
        return row

    def forwards(self, net: LoadedNetwork) -> list[Forward]:
        with self.manager.store() as store:
            row = self._forwarding(store, net.name)
            return local_forwards.listing(store, row)

    def forward(self, net: LoadedNetwork, listen: str) -> Forward:
        with self.manager.store() as store:
            row = self._forwarding(store, net.name)
            return local_forwards.one(store, row, listen)

    def create_forward(self, net: LoadedNetwork, forward: Forward) -> Forward:
        m = self.manager
        with m.store() as store, store.locked():
            row = self._forwarding(store, net.name)
            return local_forwards.create(store, row, forward, m.node, m.warn)

    def modify_forward(self, net: LoadedNetwork, listen: str, change: Change,
                       client: bool) -> Forward:  # fmt: skip
        m = self.manager
        with m.store() as store, store.locked():
            row = self._forwarding(store, net.name)
            return local_forwards.modify(store, row, listen, change, client, m.warn)

    def delete_forward(self, net: LoadedNetwork, listen: str) -> None:
        with self.manager.store() as store, store.locked():
            row = self._forwarding(store, net.name)
            local_forwards.delete(store, row, listen, self.manager.warn)
