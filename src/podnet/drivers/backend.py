"""Where a network type's networks and forwards are kept, behind one small interface, and a
network loaded once, ready for the operation asked of it (LXD's ``LoadByName``,
lxd/network/network_load.go).

Two backends implement :class:`Backend`: :class:`podnet.drivers.local.LocalBackend` (this
node's store: every change under its write lock, in one write transaction, the kernel
reconciled before the COMMIT) and :class:`podnet.drivers.ovn.cluster_backend.ClusterBackend` (OVN's
NB: every change one NB transaction, re-applied when another node changed the registry
meanwhile). A type names
its backend (:attr:`podnet.drivers.network.NetworkType.backend`);
:class:`podnet.manage.manager.Manager` loads a network and dispatches to the backend that
holds it, never asking which kind it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from podnet import drivers
from podnet.errors import CNIError
from podnet.networks.errors import NetworkError

if TYPE_CHECKING:
    from podnet.drivers.base import Driver
    from podnet.networks.model import Forward, Network
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

#: ``change(current) -> new``: a forward's read-modify-write (NetworkError to refuse).
Change = Callable[["Forward"], "Forward"]


def driver_of(kind: str) -> Driver:
    """The driver of network type ``kind``; NetworkError (400) when it cannot be loaded."""
    try:
        return drivers.get(kind)
    except CNIError as err:
        raise NetworkError(f"{err.msg} {err.details}".strip()) from None


class LoadedNetwork:
    """A network as :meth:`Backend.load` found it: ``name``, the ``backend`` that keeps it,
    and what that backend read of it: ``row`` (this node's store row; None when no backend
    holds the name: the operation answers 404 with its own words) or ``source`` (where the
    backend reaches it: the NB connection of a cluster network). A cluster network's record
    is read inside the NB transaction of the operation (which re-reads it when another node
    changed the registry), so it is not carried here."""

    __slots__ = ("name", "backend", "row", "source")

    def __init__(self, name: str, backend: Backend, row: NetworkRow | None = None, *,
                 source: object = None) -> None:  # fmt: skip
        self.name = name
        self.backend = backend
        self.row = row
        self.source = source

    @property
    def driver(self) -> Driver:
        """The driver of the loaded row's type (NetworkError 400 when it cannot be loaded)."""
        assert self.row is not None, self.name
        return driver_of(self.row.type)


class Host(Protocol):
    """What a backend needs of its caller (:class:`podnet.manage.manager.Manager`): this
    node's owner mark and member name, the warning sink, the store and the ``--target``
    check."""

    owner: str
    node: str
    warn: Callable[[str], None] | None

    def store(self) -> AbstractContextManager[Store]: ...

    def check_target(self, member: str | None) -> None: ...


class Backend:
    """The storage and transactions of networks of the types that name it (``kind``). Each
    operation refuses with LXD's messages and statuses (:class:`NetworkError`) and changes
    nothing then."""

    #: :attr:`podnet.drivers.network.NetworkType.backend` of the types it keeps.
    kind = ""

    def __init__(self, manager: Host) -> None:
        self.manager = manager

    def keeps(self, driver: Driver) -> bool:
        """Whether networks of ``driver``'s type are kept here."""
        return driver.backend == self.kind

    # -- networks ----------------------------------------------------------------------------
    def load(self, store: Store, name: str) -> LoadedNetwork | None:
        """Network ``name`` when this backend holds it (or may: the NB is set), else None."""
        raise NotImplementedError

    def networks(self, store: Store) -> list[Network]:
        """Every network kept here, as the API shows it."""
        raise NotImplementedError

    def get(self, net: LoadedNetwork, target: str | None) -> Network:
        """One network (as member ``target`` has it); 404 ``Network not found``."""
        raise NotImplementedError

    def create(self, driver: Driver, name: str, description: str, config: dict[str, str],
               target: str | None) -> Network:  # fmt: skip
        """Record and make network ``name`` of ``driver``'s type (validated here)."""
        raise NotImplementedError

    def update(self, net: LoadedNetwork, description: str | None, config: Mapping[str, str],
               patch: bool, etag: str | None, target: str | None) -> Network:  # fmt: skip
        """PUT (``patch`` False) or PATCH a network; 412 for a stale ``etag``."""
        raise NotImplementedError

    def delete(self, net: LoadedNetwork, target: str | None) -> None:
        """Delete a network with its forwards; 400 while in use."""
        raise NotImplementedError

    def restore(self, done: list[str], failed: list[str], attach_new: bool) -> None:
        """Bring every network kept here back on the node: lines appended to ``done``, failures
        to ``failed`` (one failing network does not stop the others)."""
        raise NotImplementedError

    # -- forwards ----------------------------------------------------------------------------
    def forwards(self, net: LoadedNetwork) -> list[Forward]:
        """The network's forwards; 404 unknown network."""
        raise NotImplementedError

    def forward(self, net: LoadedNetwork, listen: str) -> Forward:
        """One forward (the address in any spelling); 404 ``Network forward not found``."""
        raise NotImplementedError

    def create_forward(self, net: LoadedNetwork, forward: Forward) -> Forward:
        """Create a forward in one transaction; 404, 409, 400 as LXD."""
        raise NotImplementedError

    def modify_forward(self, net: LoadedNetwork, listen: str, change: Change,
                       client: bool) -> Forward:  # fmt: skip
        """Read, change and write a forward in one transaction (nothing lost to a concurrent
        change); an unchanged forward is not written."""
        raise NotImplementedError

    def delete_forward(self, net: LoadedNetwork, listen: str) -> None:
        """Delete a forward; 404 unknown network or forward."""
        raise NotImplementedError
