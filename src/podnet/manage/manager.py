"""The operations on networks and network forwards that the CLI (``podnetctl network …``) and the
REST API (``podnetctl serve``) run — one implementation, so both validate, store and apply the
same way and interleave safely.

A network is loaded once (:meth:`Manager.load`, LXD's ``LoadByName`` in
lxd/network/network_load.go) and the operation dispatched to the backend that keeps it
(:class:`podnet.drivers.backend.Backend`: this node's store, :mod:`podnet.drivers.local`, or
OVN's NB, :mod:`podnet.drivers.ovn.cluster_backend`); a new network is made by the backend its
type names (:attr:`podnet.drivers.network.NetworkType.backend`). What a network type does is
its driver's (:mod:`podnet.drivers`); nothing here depends on which types exist.

Refusals are :class:`~podnet.networks.errors.NetworkError` with LXD's message and the HTTP
status the API answers (400, 404, 409, 412); kernel and database failures are CNIErrors (104, 5,
11).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from podnet import checked, drivers
from podnet.drivers.backend import Backend, LoadedNetwork, driver_of
from podnet.drivers.local import LocalBackend, stale
from podnet.drivers.network import CLUSTER, LOCAL
from podnet.drivers.ovn.cluster_backend import ClusterBackend
from podnet.errors import CNIError
from podnet.link.names import owner_alias
from podnet.networks import config as netconfig
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, ForwardPort, Network, clean
from podnet.nodeconf import no_store
from podnet.store import Store, open_store
from podnet.store.db import DB_NAME, discard_new

__all__ = ["Manager", "stale"]


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
        #: Where networks are kept, in the order a name is looked up: the node's store first
        #: (a cluster network's mirror there is not its own), then OVN's NB.
        self.backends: dict[str, Backend] = {
            LOCAL: LocalBackend(self),
            CLUSTER: ClusterBackend(self),
        }

    @contextmanager
    def store(self) -> Iterator[Store]:
        """This manager's store, open (404 when the data dir holds none and ``create`` is
        off)."""
        with self._store() as store:
            yield store

    @contextmanager
    def _store(self) -> Iterator[Store]:
        """The store (remembering whether this opening made it: :meth:`discard_unused`)."""
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
        if self._made is None:
            return False
        made_dir, self._made = self._made, None
        try:
            store = open_store(self.data_dir, busy_timeout=self.busy_timeout, create=False)
        except Exception:  # noqa: BLE001 - gone already, or unreadable: left as it is
            return False
        return discard_new(store, made_dir)

    def load(self, name: str) -> LoadedNetwork:
        """Network ``name``, from the first backend that holds it (:attr:`backends`); when none
        does, the node's store's, whose operations answer 404 with their own words."""
        with self._store() as store:
            for backend in self.backends.values():
                found = backend.load(store, name)
                if found is not None:
                    return found
        return LoadedNetwork(name, self.backends[LOCAL])

    def check_target(self, member: str | None) -> None:
        """``--target <member>``: must name this node (the only member of a podnet store)."""
        if member is None:
            return
        with self._store() as store:
            known = set(store.networks.node_names()) | {self.node}
        if member not in known:
            raise NetworkError(f'Member "{member}" not found', 404)

    # -- networks ----------------------------------------------------------------------------
    def list_networks(self, target: str | None = None) -> list[Network]:
        """Every network: this node's (bridge, ptp) and the cluster's (physical, ovn; from
        OVN's NB when the server config names it), by name. 503 when the NB does not answer.
        ``target``: this node (:meth:`check_target`, 404 otherwise)."""
        self.check_target(target)
        with self._store() as store:
            found = [n for backend in self.backends.values() for n in backend.networks(store)]
        return sorted(found, key=lambda n: n.name)

    def get_network(self, name: str, target: str | None = None) -> Network:
        """One network; 404 ``Network not found``. ``target``: a member (this node for the
        node's own networks; for a cluster network any member, whose own keys and status are
        shown: :func:`podnet.drivers.ovn.cluster.network`)."""
        net = self.load(name)
        return net.backend.get(net, target)

    def create_network(self, name: str, *, type: str = "bridge", description: str = "",
                       config: Mapping[str, str] | None = None,
                       target: str | None = None) -> Network:  # fmt: skip
        """Create a network of a creatable type (``bridge``, ``physical``, ``ovn``, or one an
        administrator registered, :mod:`podnet.drivers`): validate (LXD's keys and messages),
        fill defaults (``auto`` addresses, NAT), record it where its type keeps networks and
        let its driver make it. 400 bad name/config/type, 409 existing name or a subnet
        overlapping another network or range. ``target``: this node for a node's network; for
        a cluster network the member whose own keys are recorded (a pending network,
        :func:`podnet.drivers.ovn.cluster.create`)."""
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
        driver = driver_of(type)
        backend = self.backends.get(driver.backend)
        if backend is None:  # an administrator's class naming no backend podnet has
            raise NetworkError(f"Network type {type} names an unknown backend {driver.backend!r}")
        return backend.create(driver, name, description, config, target)

    def update_network(self, name: str, *, description: str | None = None,
                       config: Mapping[str, str] | None = None, patch: bool = False,
                       etag: str | None = None, target: str | None = None) -> Network:  # fmt: skip
        """Change a network: PUT (``patch`` False) replaces description and config, PATCH
        merges config keys (an empty value removes one) and keeps an absent description.
        ``etag`` (If-Match) must be the current one (412). A new subnet is refused while pods
        or forwards use the old one (400). 404 unknown, 400 bad config or a ptp network.
        ``target``: as for :meth:`create_network` (a cluster member's own keys change)."""
        net = self.load(name)
        text = None if description is None else clean(description)
        values = {clean(k): clean(v) for k, v in (config or {}).items()}
        return net.backend.update(net, text, values, patch, etag, target)

    def delete_network(self, name: str, target: str | None = None) -> None:
        """Delete a network with its forwards, and what its driver made on the node (a bridge
        network's bridge, only a bridge podnet made); a ptp network (a conflist that no longer
        exists, say) with its ranges, which leave the masquerade sets. 400 while pods use it,
        404 unknown. ``target``: for a node's network this node (404 ``Member "x" not found``
        otherwise, :meth:`check_target`); a cluster network is deleted on every member, so a
        target is refused (:func:`podnet.drivers.ovn.cluster.delete`). Nothing changes when
        refused."""
        net = self.load(name)
        net.backend.delete(net, target)

    def restore(self, attach_new: bool = False) -> list[str]:
        """After a reboot or a cleanup behind podnet's back: every network's links back (a
        bridge with its addresses and its pods' host ends), and table ``inet podnet`` rebuilt
        (with forwards). Idempotent. Returns what it did, one line each; NetworkError naming
        each network that could not be restored, once the others are. An uplink's parent is
        only kept, never attached anew, unless ``attach_new``
        (:mod:`podnet.drivers.ovn.physical`)."""
        done: list[str] = []
        failed: list[str] = []
        for backend in self.backends.values():
            backend.restore(done, failed, attach_new)
        if failed:
            raise NetworkError("Failed restoring networks: " + "; ".join(failed))
        return done

    # -- forwards ----------------------------------------------------------------------------
    def list_forwards(self, network: str) -> list[Forward]:
        """The forwards of ``network``, oldest first; 404 for an unknown network."""
        net = self.load(network)
        return net.backend.forwards(net)

    def get_forward(self, network: str, listen_address: str) -> Forward:
        """One forward (the address in any spelling); 404 ``Network forward not found``."""
        net = self.load(network)
        return net.backend.forward(net, listen_address)

    def create_forward(self, network: str, forward: Forward) -> Forward:
        """Create a forward (``forward.listen_address`` plus description, config, ports).
        Errors: 404 unknown network; 409 an existing forward on that address (this network:
        ``A forward for that listen address already exists``; another: overlap) or a hostPort
        clash; 400 anything invalid (LXD's messages, prefixed ``Failed creating forward:``)."""
        net = self.load(network)
        return net.backend.create_forward(net, forward)

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
        net = self.load(network)
        return net.backend.modify_forward(net, listen_address, change, client)

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
        net = self.load(network)
        net.backend.delete_forward(net, listen_address)
