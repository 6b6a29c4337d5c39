"""Networks that span nodes (``physical`` uplinks and ``ovn`` networks; issue 16, item 4): their
truth is OVN's northbound database, not a node's SQLite (:mod:`podnet.ovn.nb`).

:class:`ClusterDriver` is the driver interface of such types; the functions below are what
:class:`podnet.drivers.manager.Manager` calls for them. Every change is one NB transaction
(registry and objects together) that re-reads and re-applies itself when another node changed
the registry meanwhile, so two nodes never lose each other's update; an ETag sent (If-Match) is
checked against the record as it is at that moment (412).

The NB is reached as the server config says (``network.ovn.northbound_connection``,
:mod:`podnet.networks.server`); with it unset the node has no cluster networks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from podnet.drivers.base import Driver
from podnet.errors import CNIError
from podnet.networks.errors import NetworkError
from podnet.networks.model import Network
from podnet.ovn import nb as nbmod
from podnet.ovn.ops import Op
from podnet.ovn.ovsdb import Ovsdb, TxnFailed, Unreachable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

#: The API's answer to an unreachable NB (the CLI prints the message, exit 1).
UNREACHABLE = 503


@dataclass
class Context:
    """One cluster operation: the NB connection, the registry as read in this attempt, this
    node's owner mark and the warning sink. ``attach_new``: ``network restore --attach-new``
    (an uplink's parent not attached yet may be attached, :mod:`podnet.drivers.physical`)."""

    nb: Ovsdb
    registry: nbmod.Registry
    owner: str
    warn: Callable[[str], None] | None = None
    attach_new: bool = False
    _pods: dict[str, list[str]] | None = None

    def pods(self, network: str) -> list[str]:
        """The container IDs of ``network``'s pods on every node (the NB's pod ports, read
        once per context: :func:`podnet.ovn.pod_ports.pods_by_network`)."""
        if self._pods is None:
            from podnet.ovn.pod_ports import pods_by_network

            self._pods = pods_by_network(self.nb)
        return self._pods.get(network, [])

    def sb(self) -> Ovsdb:
        """The SB database, from this node's OVS (``ovn-remote``)."""
        from podnet.ovn import vswitch

        return southbound(self.nb, vswitch.chassis().ovn_remote)


def southbound(nb: Ovsdb, ovn_remote: str, timeout: float | None = None) -> Ovsdb:
    """The SB database at this node's ``ovn-remote`` (comma-separated remotes), reached with
    the NB connection's PEM files and its timeout (or ``timeout`` seconds per remote)."""
    return Ovsdb(
        [r.strip() for r in ovn_remote.split(",") if r.strip()],
        "OVN_Southbound",
        ssl=nb.ssl,
        timeout=nb.timeout if timeout is None else timeout,
    )


class ClusterDriver(Driver):
    """A network type whose networks live in OVN's NB."""

    cluster = True
    #: Config keys that are each member's own, set with a target (LXD's
    #: ``db.NodeSpecificNetworkConfig``); none: the type has no member-specific config.
    member_keys: tuple[str, ...] = ()

    def check_member_keys(self, name: str, member: str, config: Mapping[str, str]) -> None:
        """Check ``member``'s own keys before they are recorded (NetworkError 400)."""

    def member_changed(self, ctx: Context, name: str, record: nbmod.Record,
                       member: str) -> list[str]:  # fmt: skip
        """After ``member``'s own keys of network ``name`` changed (``record``, as written):
        this node's side when ``member`` is this node; what was done."""
        return []

    def cluster_create(
        self, ctx: Context, name: str, config: dict[str, str]
    ) -> tuple[dict[str, str], list[Op], Callable[[], list[str]]]:  # noqa: E501
        """``config`` with its defaults, the NB operations that make the network, and what then
        attaches this node (returns what it did)."""
        raise NotImplementedError

    def cluster_update(
        self, ctx: Context, name: str, before: nbmod.Record, config: dict[str, str]
    ) -> tuple[dict[str, str], list[Op]]:
        """The config to record and the NB operations of a change (default: keys only; a key
        that changes what the network is made of is refused by the driver)."""
        return config, []

    def cluster_delete(
        self, ctx: Context, name: str
    ) -> tuple[list[Op], Callable[[], None]]:
        """The NB operations that remove the network, and what then detaches this node.
        NetworkError (400) while it is in use."""
        raise NotImplementedError

    def restore_node(self, ctx: Context, name: str, config: Mapping[str, str]) -> list[str]:
        """Bring this node's side back (``network restore``); what was done."""
        return []

    def member_status(self, ctx: Context, name: str, record: nbmod.Record, member: str) -> str:
        """LXD's status of the network on ``member`` (``?target=``): the record's by default."""
        return record.status

    def forget_node(self, ctx: Context) -> list[str]:
        """Remove this node's side of networks of this type that are no longer registered
        (deleted from another node); what was done."""
        return []

    def used_by(self, ctx: Context, name: str) -> list[str]:
        """API URLs of what uses the network: the networks on it (an uplink's), and its pods
        on every node (``/1.0/instances/<container ID>``, as a bridge's)."""
        networks = [
            f"/1.0/networks/{n}"
            for n, r in ctx.registry.records.items()
            if r.config.get("network") == name
        ]
        pods = ctx.pods(name) if self.type == "ovn" else []  # an uplink holds no pod
        return networks + [f"/1.0/instances/{cid}" for cid in pods]


def connect(config: Mapping[str, str], owner: str = "") -> Ovsdb | None:
    """The NB per the server config, or None when ``network.ovn.northbound_connection`` is
    unset (this node has no cluster networks then). ``owner``: the store's path, whose
    :func:`ssl_dir` holds the PEM files of an ``ssl:`` connection."""
    from podnet.networks import server

    text = config.get(server.NB_CONNECTION)
    if not text:
        return None
    ssl = None
    if any(r.kind == "ssl" for r in server.remotes(text)):
        ssl = _ssl_files(config, owner)
    return Ovsdb([r.text() for r in server.remotes(text)], "OVN_Northbound", ssl=ssl)


def ssl_dir(config: Mapping[str, str], owner: str = "") -> str | None:
    """The directory ``/run/podnet/ovn-<hash>`` that holds the PEM files of ``config`` (the
    client key, its certificate, the CA) for the store at ``owner``; None when a PEM is unset.
    The hash covers the store too, so a config change removes only its own store's files
    (:func:`drop_ssl_dir`)."""
    import hashlib

    from podnet.networks import server

    pems = [config.get(k) for k in (server.CLIENT_KEY, server.CLIENT_CERT, server.CA_CERT)]
    if not all(pems):
        return None
    digest = hashlib.sha256("\0".join([owner, *map(str, pems)]).encode()).hexdigest()[:16]
    return f"/run/podnet/ovn-{digest}"


def drop_ssl_dir(before: Mapping[str, str], after: Mapping[str, str], owner: str) -> None:
    """Remove the PEM files of server config ``before`` when ``after`` (the store's new config)
    no longer uses them: a replaced or unset client key leaves no copy in ``/run``."""
    import shutil

    old = ssl_dir(before, owner)
    if old is not None and old != ssl_dir(after, owner):
        shutil.rmtree(old, ignore_errors=True)


def _ssl_files(config: Mapping[str, str], owner: str = "") -> tuple[str, str, str]:
    """The PEM values written to private files for ``ovsdb-client`` (0600, in the 0700
    directory :func:`ssl_dir`, written only when they change, each writer through a temporary
    file of its own)."""
    from podnet.networks import server

    pems = [config[k] for k in (server.CLIENT_KEY, server.CLIENT_CERT, server.CA_CERT)]
    base = ssl_dir(config, owner)
    assert base is not None
    paths = tuple(f"{base}/{n}" for n in ("key.pem", "cert.pem", "ca.pem"))
    if not all(os.path.exists(p) for p in paths):
        import tempfile

        os.makedirs(base, mode=0o700, exist_ok=True)
        os.chmod(base, 0o700)
        for path, pem in zip(paths, pems, strict=True):
            # a name of its own per writer: parallel calls never rename each other's file
            fd, tmp = tempfile.mkstemp(dir=base, prefix=".new-")  # 0600
            with os.fdopen(fd, "w") as f:
                f.write(pem)
            os.replace(tmp, path)
    return paths[0], paths[1], paths[2]


def _failure(err: Unreachable | TxnFailed) -> NetworkError:
    """The refusal for an NB failure: its message names the remotes and a reason of
    :data:`podnet.ovn.ovsdb.REASONS` (503) or the refused operation (500); what the tool or
    the server said is only its ``detail`` (the server's log)."""
    if isinstance(err, Unreachable):
        return NetworkError(err.msg, UNREACHABLE, detail=err.details)
    return NetworkError(err.msg, 500, detail=err.details)


def _driver(kind: str) -> ClusterDriver:
    from podnet import drivers

    found = drivers.get(kind)
    assert isinstance(found, ClusterDriver), kind
    return found


def as_network(ctx: Context, name: str, record: nbmod.Record, target: str | None = None) -> Network:
    """Cluster network ``name`` as the API shows it. Without ``target``: the cluster-wide
    config (a member's own keys left out, as LXD does), the record's status, and as
    ``locations`` the members that have their own keys (a ``physical`` network's members with
    a ``parent``). With ``target``: that member's view — its own keys merged in, and its status
    (:meth:`ClusterDriver.member_status`)."""
    driver = _driver(record.type)
    config = {k: v for k, v in record.config.items() if k not in driver.member_keys}
    status = record.status
    if target is not None:
        config.update(record.members.get(target, {}))
        status = driver.member_status(ctx, name, record, target)
    return Network(
        name,
        record.type,
        record.description,
        config,
        driver.used_by(ctx, name),
        status,
        "",
        sorted(record.members),
    )


def networks(nb: Ovsdb, owner: str) -> list[Network]:
    """Every cluster network. NetworkError 503 when the NB does not answer."""
    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        raise _failure(err) from None
    ctx = Context(nb, registry, owner)
    return [as_network(ctx, n, r) for n, r in sorted(registry.records.items())]


def network(nb: Ovsdb, owner: str, name: str, target: str | None) -> Network | None:
    """Cluster network ``name`` (None: no such network), as member ``target`` has it when
    given (404 ``Member "x" not found`` for a member OVN does not know). 503 NB unreachable."""
    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        raise _failure(err) from None
    record = registry.records.get(name)
    if record is None:
        return None
    ctx = Context(nb, registry, owner)
    if target is not None:
        check_member(ctx, target)
    return as_network(ctx, name, record, target)


def local_member() -> str:
    """This node's name as a cluster member: its OVN chassis name (OVS's
    ``external_ids:system-id``). InvalidConfig (7) when OVS is not set up for OVN."""
    from podnet.ovn import vswitch

    return vswitch.chassis().system_id


def check_member(ctx: Context, member: str) -> None:
    """``member`` names this node or a chassis in OVN's SB (the cluster's members);
    NetworkError 404 ``Member "x" not found`` (LXD's words) otherwise, 400 for a name podnet
    cannot record, 503 when the SB does not answer."""
    from podnet.networks import ovnconfig

    ovnconfig.check_member(member)
    try:
        if member == local_member():
            return
    except CNIError:
        pass  # no OVN chassis here: the SB says who the members are
    try:
        rows = ctx.sb().select("Chassis", [["name", "==", member]], ["name"])
    except (CNIError, Unreachable) as err:
        raise NetworkError(f"Failed checking member {member!r}: {getattr(err, 'msg', err)}",
                           UNREACHABLE) from None  # fmt: skip
    if not rows:
        raise NetworkError(f'Member "{member}" not found', 404)


def _read_only(config: Mapping[str, str], current: Mapping[str, str]) -> None:
    """Refuse (400) a client's ``volatile.*`` key unless it is the value podnet set (a PUT
    sends back what GET showed): those keys are podnet's record of what it allocated (the
    router's uplink address), never a client's choice."""
    for key, value in config.items():
        if key.startswith("volatile.") and current.get(key) != value:
            raise NetworkError(f'Key "{key}" is read-only: podnet sets it')


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
        return _define_member(nb, owner, name, kind, config, local_names, target)
    driver = _driver(kind)
    _read_only(config, {})
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
        raise _failure(err) from None
    for then in after:
        then()  # this node's side; the lines it returns are for `network restore`
    return as_network(Context(nb, registry, owner), name, registry.records[name])


def _define_member(nb: Ovsdb, owner: str, name: str, kind: str, config: dict[str, str],
                   local_names: set[str], target: str) -> Network:  # fmt: skip
    """``create --target``: record member ``target``'s own keys of network ``name``, pending
    (LXD's ``CreatePendingNetwork`` and its messages). On this node the parent is checked
    first (it exists here, free, without addresses): 400 otherwise."""
    from podnet.networks import ovnconfig

    driver = _driver(kind)
    if not driver.member_keys:
        raise NetworkError(f'Network type "{kind}" does not support member specific config')
    valid = ovnconfig.validate_member(name, target, config)
    if name in local_names:
        raise NetworkError("The network already exists", 409)
    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        raise _failure(err) from None
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
        raise _failure(err) from None
    return as_network(Context(nb, registry, owner), name, registry.records[name], target)


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
        return _update_member(nb, owner, name, config or {}, patch, etag, target)

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        record = registry.records.get(name)
        if record is None:
            raise NetworkError("Network not found", 404)
        registry.local_uplinks = dict(uplinks or {})
        ctx = Context(nb, registry, owner)
        current = as_network(ctx, name, record)
        if etag is not None and etag.strip('"') != current.etag():
            raise NetworkError(
                f"ETag doesn't match: {current.etag()} vs {etag.strip(chr(34))}", 412
            )
        driver = _driver(record.type)
        if record.pending:
            raise NetworkError("Cannot update network global config when not in created state")
        for key in config or {}:
            if key in driver.member_keys:
                raise NetworkError(f'Config key "{key}" is cluster member specific')
        _read_only(config or {}, record.config)
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
        raise _failure(err) from None
    return as_network(Context(nb, registry, owner), name, registry.records[name])


def _update_member(nb: Ovsdb, owner: str, name: str, config: Mapping[str, str], patch: bool,
                   etag: str | None, target: str) -> Network:  # fmt: skip
    """PUT/PATCH ``?target=member``: member ``target``'s own keys of network ``name`` (an
    empty value, or a PUT without them, removes that member's entry: it has no parent then).
    The ETag is the member's view's (GET with the same target). A ``parent`` an earlier podnet
    recorded for every node is dropped: the members' own ones replace it. On this node the
    new keys are checked before (:meth:`ClusterDriver.check_member_keys`) and applied after."""
    from podnet.networks import ovnconfig

    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        raise _failure(err) from None
    check_member(Context(nb, registry, owner), target)
    checked_keys: list[dict[str, str]] = []

    def apply(
        registry: nbmod.Registry,
    ) -> tuple[dict[str, nbmod.Record | None], list[Op]]:
        record = registry.records.get(name)
        if record is None:
            raise NetworkError("Network not found", 404)
        ctx = Context(nb, registry, owner)
        current = as_network(ctx, name, record, target)
        if etag is not None and etag.strip('"') != current.etag():
            raise NetworkError(
                f"ETag doesn't match: {current.etag()} vs {etag.strip(chr(34))}", 412
            )
        driver = _driver(record.type)
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
        raise _failure(err) from None
    ctx = Context(nb, registry, owner)
    record = registry.records[name]
    if not record.pending:
        _driver(record.type).member_changed(ctx, name, record, target)
    return as_network(ctx, name, record, target)


#: The refusal of a deletion with a target: a cluster network is deleted on every member
#: (LXD's ``DELETE /1.0/networks/NAME`` has no member-specific form, lxd/networks.go).
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
        record = registry.records.get(name)
        if record is None:
            raise NetworkError("Failed loading network: Network not found", 404)
        if target is not None:
            check_member(Context(nb, registry, owner, warn), target)
            raise NetworkError(DELETE_TARGET)
        ops, then = _driver(record.type).cluster_delete(Context(nb, registry, owner, warn), name)
        after[:] = [then]
        return {name: None}, ops

    try:
        nbmod.change(nb, apply)
    except (Unreachable, TxnFailed) as err:
        raise _failure(err) from None
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
        failure = _failure(err)
        if failed:  # the node's own failures are named too
            raise NetworkError(f"Failed restoring networks: {'; '.join(failed)}; {failure}",
                               failure.status) from None  # fmt: skip
        raise failure from None
    registry.local_uplinks = dict(uplinks or {})
    ctx = Context(nb, registry, owner, attach_new=attach_new)
    done = []
    failed = [] if failed is None else failed
    for kind in ("physical", "ovn"):  # what networks deleted on other nodes left here
        try:
            done += _driver(kind).forget_node(ctx)
        except (CNIError, NetworkError) as err:
            failed.append(f"{kind} networks deleted elsewhere: {getattr(err, 'msg', None) or err}")
    for name, record in sorted(registry.records.items()):
        if record.pending:  # defined on members only: nothing made anywhere yet
            continue
        try:  # one network that cannot be restored here does not stop the others
            done += _driver(record.type).restore_node(ctx, name, record.config)
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
