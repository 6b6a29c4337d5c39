"""The network side of a network type: what ``podnetctl network`` and the API ask of it, through
:class:`podnet.manage.manager.Manager` (LXD's ``Network`` interface, lxd/network/
driver_common.go: ``Validate``, ``Create``, ``Update``, ``Delete``, ``Start``, and
``ForwardCreate``/``ForwardUpdate``/``ForwardDelete``).

A type says where its networks live (:attr:`NetworkType.backend`): ``local`` (this node's
store, under its write lock, the kernel reconciled from it: :mod:`podnet.drivers.local`) or
``cluster`` (OVN's northbound database, one NB transaction per change:
:mod:`podnet.drivers.ovn.cluster`). The backend keeps the rows and the forwards; the type validates
and makes its networks, and says whether they carry forwards and what a forward may target
(:meth:`NetworkType.subnets`). A new type is one class registered with
:func:`podnet.drivers.register` (or named in the node configuration): nothing else changes.

The plugin imports this module with :mod:`podnet.drivers.base` on every call: it imports
nothing at its top.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from podnet.checked import Net
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

#: The backend of a type whose networks are this node's (:mod:`podnet.drivers.local`).
LOCAL = "local"
#: The backend of a type whose networks live in OVN's NB (:mod:`podnet.drivers.ovn.cluster`).
CLUSTER = "cluster"


class NetworkType:
    """The network side of a driver. Subclasses set :attr:`type` and override what they need;
    the defaults are those of a type whose networks a conflist records (``ptp``): not made by
    hand, nothing of their own on the node, forwards to the ``ipvN.ranges`` they record."""

    #: The network type this driver answers for (``networks.type``).
    type = ""
    #: Whether ``podnetctl network create`` and the API may create and change its networks.
    creatable = False
    #: Where its networks and their forwards are kept: :data:`LOCAL` or :data:`CLUSTER`.
    backend = LOCAL
    #: Whether its networks carry forwards (LXD: a ``bridge`` or ``ovn`` network does, a
    #: ``physical`` uplink does not: ``Network "x" of type physical has no forwards``).
    has_forwards = True

    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        """The config of network ``name`` checked, canonical; NetworkError (400) naming the key.
        Default: this type's networks are not made by hand."""
        from podnet.networks.errors import NetworkError

        raise NetworkError(f"{self.type} networks are created by the podnet plugin")

    def settle(self, name: str, config: dict[str, str], taken: Sequence[tuple[Net, str]],
               owner: str, before: Mapping[str, str] | None = None) -> dict[str, str]:  # fmt: skip
        """Under the write lock: ``config`` with its defaults filled (``auto`` subnets avoid
        ``taken``: ``(subnet, its holder)``), checked against the other networks and ranges and
        the node's routes that are not ``owner``'s (409). ``before``: the config it replaces."""
        return config

    def subnets(self, config: Mapping[str, str]) -> dict[int, list[Net]]:
        """The network's subnets per family (forward targets, overlap checks): default the
        ``ipv4.ranges``/``ipv6.ranges`` a conflist recorded."""
        from podnet import checked

        out: dict[int, list[Net]] = {4: [], 6: []}
        for key in ("ipv4.ranges", "ipv6.ranges"):
            for cidr in config.get(key, "").split(","):
                if cidr.strip():
                    net = checked.network(cidr.strip())
                    out[net.version].append(net)
        return out

    def users(self, store: Store, row: NetworkRow, *, any_owner: bool = False) -> list[str]:
        """The containers attached to network ``row`` (``any_owner``: podnet-ipam's rows too)."""
        return [str(p.container_id) for p in store.pods.all() if p.network_name == row.name
                and (any_owner or p.owner in (None, "podnet"))]  # fmt: skip

    def create(self, name: str, config: Mapping[str, str], owner: str) -> Callable[[], object]:
        """Make network ``name`` exist on the node (inside the write transaction that records
        it); returns the undo. KernelError (104); NetworkError 409 for a link not ``owner``'s."""
        return lambda: None

    def update(self, name: str, before: Mapping[str, str], config: Mapping[str, str],
               owner: str) -> Callable[[], object]:  # fmt: skip
        """Apply a changed config on the node; returns the undo."""
        return lambda: None

    def forget(self, store: Store, row: NetworkRow) -> None:
        """Inside the write transaction that deletes ``row``: the store's own leftovers."""

    def delete(self, name: str, owner: str,
               warn: Callable[[str], None] | None) -> Callable[[], object]:  # fmt: skip
        """Before a network is deleted: returns what removes it from the node once the rows are
        gone (only what ``owner`` made)."""
        return lambda: None

    def restore(self, store: Store, row: NetworkRow, owner: str) -> list[str]:
        """Bring network ``row`` back after a reboot or a cleanup; what was done, one line each."""
        return []

    def status(self, row: NetworkRow, owner: str) -> str:
        """LXD's status of network ``row`` on this node (``Created``, or ``Unavailable`` when
        what the node needs for it is missing: LXD's ``api.NetworkStatus*`` values). A
        network with nothing of its own on the node is always ``Created``."""
        return "Created"

    def check_forwards(self, name: str) -> None:
        """Refuse (NetworkError 400) a forward operation on network ``name`` of a type without
        forwards (:attr:`has_forwards`), with LXD's words."""
        if not self.has_forwards:
            from podnet.networks.errors import NetworkError

            raise NetworkError(f'Network "{name}" of type {self.type} has no forwards')
