"""The backend of networks kept in OVN's northbound database (:class:`podnet.drivers.backend.
Backend`): each operation is one of :mod:`podnet.drivers.ovn.cluster` (networks) or
:mod:`podnet.drivers.ovn.forwards` (their forwards), one NB transaction each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from podnet.drivers.backend import Backend, Change, LoadedNetwork, driver_of
from podnet.drivers.network import CLUSTER
from podnet.drivers.ovn import forwards as cluster_forwards
from podnet.drivers.ovn.bridge_uplink import local_uplinks
from podnet.drivers.ovn.cluster import connect, create, delete, network, networks, restore, update
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, Network
from podnet.ovn import nb as nbmod
from podnet.ovn.ovsdb import Ovsdb

if TYPE_CHECKING:
    from podnet.drivers.base import Driver
    from podnet.store import Store


class ClusterBackend(Backend):
    """Networks of OVN's NB, reached as the store's server config says (none when it names
    no NB). A network is the NB's when this node's store does not keep it: the backend loaded
    after :class:`podnet.drivers.local.LocalBackend`."""

    kind = CLUSTER

    def _nb(self, store: Store) -> Ovsdb | None:
        return connect(store.config.all(), store.path)

    def _uplinks(self) -> dict[str, nbmod.Record]:
        """This node's bridge uplinks (:func:`podnet.drivers.ovn.bridge_uplink.local_uplinks`)."""
        with self.manager.store() as store:
            return local_uplinks(store)

    @staticmethod
    def _at(net: LoadedNetwork) -> Ovsdb:
        assert isinstance(net.source, Ovsdb), net.name
        return net.source

    def load(self, store: Store, name: str) -> LoadedNetwork | None:
        nb = self._nb(store)
        return None if nb is None else LoadedNetwork(name, self, source=nb)

    def networks(self, store: Store) -> list[Network]:
        nb = self._nb(store)
        return [] if nb is None else networks(nb, self.manager.owner)

    def get(self, net: LoadedNetwork, target: str | None) -> Network:
        found = network(self._at(net), self.manager.owner, net.name, target)
        if found is None:
            self.manager.check_target(target)
            raise NetworkError("Network not found", 404)
        return found

    def create(self, driver: Driver, name: str, description: str, config: dict[str, str],
               target: str | None) -> Network:  # fmt: skip
        m = self.manager
        with m.store() as store:
            nb = self._nb(store)
            others = {row.name for row in store.networks.all()
                      if not self.keeps(driver_of(row.type))}  # fmt: skip
        if nb is None:
            raise NetworkError(
                f"{driver.type} networks need OVN: set network.ovn.northbound_connection"
            )
        return create(nb, m.owner, name, driver.type, description, config, m.warn, others,
                      self._uplinks(), target)  # fmt: skip

    def update(self, net: LoadedNetwork, description: str | None, config: Mapping[str, str],
               patch: bool, etag: str | None, target: str | None) -> Network:  # fmt: skip
        return update(self._at(net), self.manager.owner, net.name, description, config, patch,
                      etag, self._uplinks(), target)  # fmt: skip

    def delete(self, net: LoadedNetwork, target: str | None) -> None:
        delete(self._at(net), self.manager.owner, net.name, self.manager.warn, target)

    def restore(self, done: list[str], failed: list[str], attach_new: bool) -> None:
        with self.manager.store() as store:
            nb = self._nb(store)
        if nb is not None:
            done += restore(nb, self.manager.owner, self._uplinks(), failed, attach_new)

    def forwards(self, net: LoadedNetwork) -> list[Forward]:
        return cluster_forwards.list_forwards(self._at(net), net.name)

    def forward(self, net: LoadedNetwork, listen: str) -> Forward:
        return cluster_forwards.get_forward(self._at(net), net.name, listen)

    def create_forward(self, net: LoadedNetwork, forward: Forward) -> Forward:
        return cluster_forwards.create_forward(self._at(net), net.name, forward, self._uplinks())

    def modify_forward(self, net: LoadedNetwork, listen: str, change: Change,
                       client: bool) -> Forward:  # fmt: skip
        return cluster_forwards.modify_forward(self._at(net), net.name, listen, change, client,
                                               self._uplinks())  # fmt: skip

    def delete_forward(self, net: LoadedNetwork, listen: str) -> None:
        cluster_forwards.delete_forward(self._at(net), net.name, listen)
