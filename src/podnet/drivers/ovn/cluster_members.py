"""Member-specific config of cluster networks (``--target <member>``): LXD's pending networks
and per-member keys (lxd/networks.go ``networksPost`` with a target, ``CreatePendingNetwork``;
``networkPut`` with a target). A member is a node's OVN chassis name
(:func:`podnet.drivers.ovn.cluster_base.local_member`).
"""

from __future__ import annotations

from collections.abc import Mapping

from podnet.drivers.ovn.cluster_base import (
    Context,
    as_network,
    check_member,
    cluster_driver,
    failure,
    read_registry,
    record_of,
)
from podnet.networks import ovnconfig
from podnet.networks.errors import NetworkError
from podnet.networks.model import Network
from podnet.ovn import nb as nbmod
from podnet.ovn.ops import Op
from podnet.ovn.ovsdb import Ovsdb, TxnFailed, Unreachable


def define_member(nb: Ovsdb, owner: str, name: str, kind: str, config: dict[str, str],
                   local_names: set[str], target: str) -> Network:  # fmt: skip
    """``create --target``: record member ``target``'s own keys of network ``name``, pending
    (LXD's ``CreatePendingNetwork`` and its messages). On this node the parent is checked
    first (it exists here, free, without addresses): 400 otherwise."""
    driver = cluster_driver(kind)
    if not driver.member_keys:
        raise NetworkError(f'Network type "{kind}" does not support member specific config')
    valid = ovnconfig.validate_member(name, target, config)
    if name in local_names:
        raise NetworkError("The network already exists", 409)
    registry = read_registry(nb)
    check_member(Context(nb, registry, owner), target)
    driver.check_member_keys(name, target, valid)

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        record = registry.records.get(name)
        if record is None:
            return {name: nbmod.Record(kind, "", {}, {target: valid}, "Pending")}, []
        if not record.pending:
            raise NetworkError("Network is not in pending state")
        if record.type != kind:
            raise NetworkError("Requested network type does not match type in existing "
                               "database record")  # fmt: skip
        if target in record.members:
            raise NetworkError(f'The network is already defined on member "{target}"')
        members = {**record.members, target: valid}
        return {name: nbmod.Record(kind, record.description, record.config, members,
                                   "Pending")}, []  # fmt: skip

    try:
        registry = nbmod.change(nb, apply)
    except (Unreachable, TxnFailed) as err:
        raise failure(err) from None
    return as_network(Context(nb, registry, owner), name, registry.records[name], target)


def update_member(nb: Ovsdb, owner: str, name: str, config: Mapping[str, str], patch: bool,
                   etag: str | None, target: str) -> Network:  # fmt: skip
    """PUT/PATCH ``?target=member``: member ``target``'s own keys of network ``name`` (an
    empty value, or a PUT without them, removes that member's entry: it has no parent then).
    The ETag is the member's view's (GET with the same target). A ``parent`` an earlier podnet
    recorded for every node is dropped: the members' own ones replace it. On this node the
    new keys are checked before (:meth:`ClusterDriver.check_member_keys`) and applied after."""
    registry = read_registry(nb)
    check_member(Context(nb, registry, owner), target)
    checked_keys: list[dict[str, str]] = []

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        record = record_of(registry, name)
        ctx = Context(nb, registry, owner)
        current = as_network(ctx, name, record, target)
        if etag is not None and etag.strip('"') != current.etag():
            raise NetworkError(
                f"ETag doesn't match: {current.etag()} vs {etag.strip(chr(34))}", 412
            )
        driver = cluster_driver(record.type)
        for key, value in config.items():
            if key not in driver.member_keys and current.config.get(key, "") != value:
                raise NetworkError(f'Config key "{key}" may not be used as member-specific key')
        keys = dict(record.members.get(target, {})) if patch else {}
        keys.update({k: v for k, v in config.items() if k in driver.member_keys})
        keys = {k: v for k, v in keys.items() if v}
        members = {m: c for m, c in record.members.items() if m != target}
        if keys:
            members[target] = ovnconfig.validate_member(name, target, keys)
            if keys not in checked_keys:  # once per value, not per retry of the transaction
                driver.check_member_keys(name, target, members[target])
                checked_keys.append(keys)
        config_after = {k: v for k, v in record.config.items() if k not in driver.member_keys}
        return {name: nbmod.Record(record.type, record.description, config_after, members,
                                   record.status)}, []  # fmt: skip

    try:
        registry = nbmod.change(nb, apply)
    except (Unreachable, TxnFailed) as err:
        raise failure(err) from None
    ctx = Context(nb, registry, owner)
    record = registry.records[name]
    if not record.pending:
        cluster_driver(record.type).member_changed(ctx, name, record, target)
    return as_network(ctx, name, record, target)


#: The refusal of a deletion with a target: a cluster network is deleted on every member
#: (LXD's ``DELETE /1.0/networks/NAME`` has no member-specific form, lxd/networks.go).
