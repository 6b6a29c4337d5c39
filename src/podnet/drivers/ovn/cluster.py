"""The operations on networks that span nodes (``physical`` uplinks and ``ovn`` networks): their
truth is OVN's northbound database, not a node's SQLite (:mod:`podnet.ovn.nb`). Their backend
(:mod:`podnet.drivers.ovn.cluster_backend`) runs them.

Every change is one NB transaction (registry and objects together) that re-reads and re-applies
itself when another node changed the registry meanwhile, so two nodes never lose each other's
update; an ETag sent (If-Match) is checked against the record as it is at that moment (412).
The types' interface and the NB connection: :mod:`podnet.drivers.ovn.cluster_base`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from podnet.drivers.ovn.cluster_base import (
    UNREACHABLE,
    ClusterDriver,
    Context,
    _ssl_files,
    as_network,
    check_member,
    cluster_driver,
    connect,
    drop_ssl_dir,
    failure,
    local_member,
    network,
    networks,
    read_only,
    record_of,
    southbound,
    ssl_dir,
)
from podnet.drivers.ovn.cluster_members import define_member, update_member
from podnet.errors import CNIError
from podnet.networks.errors import NetworkError
from podnet.networks.model import Network
from podnet.ovn import nb as nbmod
from podnet.ovn.ops import Op
from podnet.ovn.ovsdb import Ovsdb, TxnFailed, Unreachable

if TYPE_CHECKING:
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

#: Defined here, and what other modules reach through this one
#: (:mod:`podnet.drivers.ovn.cluster_base`).
__all__ = [
    "DELETE_TARGET", "UNREACHABLE", "ClusterDriver", "Context", "_ssl_files", "as_network",
    "check_member", "cluster_row", "connect", "create", "delete", "drop_ssl_dir", "local_member",
    "network", "networks", "restore", "southbound", "ssl_dir", "update",
]  # fmt: skip


def create(
    nb: Ovsdb,
    owner: str,
    name: str,
    kind: str,
    description: str,
    config: dict[str, str],
    warn: Callable[[str], None] | None,
    local_names: set[str],
    uplinks: Mapping[str, nbmod.Record] | None = None,
    target: str | None = None,
) -> Network:
    """Create cluster network ``name``: 409 when any node's network has the name, 400 bad
    config, 503 NB unreachable. Then this node's side (an uplink's parent, say). ``uplinks``:
    this node's bridge uplinks (:attr:`podnet.ovn.nb.Registry.local_uplinks`).

    LXD's clustered creation (lxd/networks.go ``networksPost``): with ``target`` (a member,
    :func:`check_member`) only that member's own keys are recorded and the network is
    ``Pending``; without it a pending network is created for every member (``Created``), and
    a type whose networks have member keys (``physical``) must be pending first ("Network not
    pending on any node (use --target <node> first)")."""
    if target is not None:
        return define_member(nb, owner, name, kind, config, local_names, target)
    driver = cluster_driver(kind)
    read_only(config, {})
    if driver.member_keys:
        for key in config:
            if key in driver.member_keys:
                raise NetworkError(f'Config key "{key}" is cluster member specific')
    valid = driver.validate(name, config)
    if name in local_names:
        raise NetworkError("The network already exists", 409)
    after: list[Callable[[], list[str]]] = []

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        pending = registry.records.get(name)
        if pending is not None and not pending.pending:
            raise NetworkError("The network already exists", 409)
        if pending is not None and pending.type != kind:
            raise NetworkError(f'Requested network type "{kind}" does not match type in '
                               f'existing database record "{pending.type}"')  # fmt: skip
        if pending is None and driver.member_keys:
            raise NetworkError("Network not pending on any node (use --target <node> first)")
        registry.local_uplinks = dict(uplinks or {})
        ctx = Context(nb, registry, owner, warn)
        filled, ops, then = driver.cluster_create(ctx, name, dict(valid))
        after[:] = [then]
        members = pending.members if pending is not None else {}
        return {name: nbmod.Record(kind, description, filled, dict(members))}, ops

    try:
        registry = nbmod.change(nb, apply)
    except (Unreachable, TxnFailed) as err:
        raise failure(err) from None
    for then in after:
        then()  # this node's side; the lines it returns are for `network restore`
    return as_network(Context(nb, registry, owner), name, registry.records[name])


def update(
    nb: Ovsdb,
    owner: str,
    name: str,
    description: str | None,
    config: Mapping[str, str] | None,
    patch: bool,
    etag: str | None,
    uplinks: Mapping[str, nbmod.Record] | None = None,
    target: str | None = None,
) -> Network:
    """PUT/PATCH a cluster network (LXD's semantics, as for bridges); 412 stale ETag, 404.
    ``uplinks``: as for :func:`create`. With ``target`` only that member's own keys change
    (``Config key "k" may not be used as member-specific key``), pending or not; without it a
    member's key is refused (``Config key "k" is cluster member specific``), as is any change
    of a pending network (lxd/networks.go ``networkPut``)."""
    if target is not None:
        return update_member(nb, owner, name, config or {}, patch, etag, target)

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        record = record_of(registry, name)
        registry.local_uplinks = dict(uplinks or {})
        ctx = Context(nb, registry, owner)
        current = as_network(ctx, name, record)
        if etag is not None and etag.strip('"') != current.etag():
            raise NetworkError(
                f"ETag doesn't match: {current.etag()} vs {etag.strip(chr(34))}", 412
            )
        driver = cluster_driver(record.type)
        if record.pending:
            raise NetworkError("Cannot update network global config when not in created state")
        for key in config or {}:
            if key in driver.member_keys:
                raise NetworkError(f'Config key "{key}" is cluster member specific')
        read_only(config or {}, record.config)
        merged = dict(record.config) if patch else {}
        merged.update(config or {})
        if not patch:  # volatile keys are the node's, not the client's
            merged.update({k: v for k, v in record.config.items() if k.startswith("volatile.")})
        valid = driver.validate(name, merged)
        valid, ops = driver.cluster_update(ctx, name, record, valid)
        new_description = (
            record.description if (patch and description is None) else (description or "")
        )
        return {name: nbmod.Record(record.type, new_description, valid, dict(record.members),
                                   record.status)}, ops  # fmt: skip

    try:
        registry = nbmod.change(nb, apply)
    except (Unreachable, TxnFailed) as err:
        raise failure(err) from None
    return as_network(Context(nb, registry, owner), name, registry.records[name])


DELETE_TARGET = "Deleting a network is not member specific: delete it without a target (it is " \
    "deleted on every member)"  # fmt: skip


def delete(nb: Ovsdb, owner: str, name: str, warn: Callable[[str], None] | None,
           target: str | None = None) -> None:  # fmt: skip
    """Delete a cluster network and its NB objects; this node's side after. 400 in use, 404.
    ``target`` (``?target=``): 404 ``Member "x" not found`` for a name that is no member
    (:func:`check_member`), else 400 :data:`DELETE_TARGET`; nothing is deleted."""
    after: list[Callable[[], None]] = []

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        record = record_of(registry, name, "Failed loading network: Network not found")
        if target is not None:
            check_member(Context(nb, registry, owner, warn), target)
            raise NetworkError(DELETE_TARGET)
        ctx = Context(nb, registry, owner, warn)
        ops, then = cluster_driver(record.type).cluster_delete(ctx, name)
        after[:] = [then]
        return {name: None}, ops

    try:
        nbmod.change(nb, apply)
    except (Unreachable, TxnFailed) as err:
        raise failure(err) from None
    for then in after:
        then()


def restore(nb: Ovsdb, owner: str, uplinks: Mapping[str, nbmod.Record] | None = None,
            failed: list[str] | None = None, attach_new: bool = False) -> list[str]:
    """Every cluster network's side on this node (``network restore``). ``uplinks``: this
    node's bridge uplinks, whose OVS side is theirs (not forgotten as a deleted uplink's).
    ``failed``: what the node's own networks could not restore, named with this one's failures
    in the NetworkError raised once every network was tried. ``attach_new``: uplink parents not
    attached yet are attached (``--attach-new``); otherwise they are named among the failures."""
    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        refusal = failure(err)
        if failed:  # the node's own failures are named too
            raise NetworkError(f"Failed restoring networks: {'; '.join(failed)}; {refusal}",
                               refusal.status) from None  # fmt: skip
        raise refusal from None
    registry.local_uplinks = dict(uplinks or {})
    ctx = Context(nb, registry, owner, attach_new=attach_new)
    done = []
    failed = [] if failed is None else failed
    for kind in ("physical", "ovn"):  # what networks deleted on other nodes left here
        try:
            done += cluster_driver(kind).forget_node(ctx)
        except (CNIError, NetworkError) as err:
            failed.append(f"{kind} networks deleted elsewhere: {getattr(err, 'msg', None) or err}")
    for name, record in sorted(registry.records.items()):
        if record.pending:  # defined on members only: nothing made anywhere yet
            continue
        try:  # one network that cannot be restored here does not stop the others
            done += cluster_driver(record.type).restore_node(ctx, name, record.config)
        except (CNIError, NetworkError) as err:
            failed.append(f"network {name}: {getattr(err, 'msg', None) or err}")
    if failed:
        also = f" (done: {'; '.join(done)})" if done else ""
        raise NetworkError("Failed restoring networks: " + "; ".join(failed) + also)
    return done


def cluster_row(store: Store, name: str) -> NetworkRow | None:
    """Network ``name`` from OVN's NB (when the server config names one), mirrored into the
    node's store; None when the NB is not configured or has no such network."""
    nb = connect(store.config.all(), store.path)
    if nb is None:
        return None
    record = nbmod.read(nb).records.get(name)
    if record is None:
        return None
    with store.write():  # another ADD may have mirrored it meanwhile: re-read under the lock
        if store.networks.get(name) is None:
            store.networks.insert(name, record.type, record.description, record.config)
    return store.networks.get(name)
