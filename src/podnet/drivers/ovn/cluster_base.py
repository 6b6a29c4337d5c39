"""The interface of network types whose networks span nodes (``physical`` uplinks and ``ovn``
networks), and their connection to OVN's northbound database, where those networks live
(:mod:`podnet.ovn.nb`; LXD keeps them in its cluster database, lxd/network/driver_ovn.go).

The NB is reached as the server config says (``network.ovn.northbound_connection``,
:mod:`podnet.networks.server`); with it unset the node has no cluster networks. The operations
on these networks are :mod:`podnet.drivers.ovn.cluster`'s.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from podnet import drivers
from podnet.drivers.base import Driver
from podnet.drivers.network import CLUSTER
from podnet.errors import CNIError
from podnet.networks import ovnconfig, server
from podnet.networks.errors import NetworkError
from podnet.networks.model import Network
from podnet.ovn import nb as nbmod
from podnet.ovn import vswitch
from podnet.ovn.ops import Op
from podnet.ovn.ovsdb import Ovsdb, TxnFailed, Unreachable
from podnet.ovn.pod_ports import pods_by_network

#: The API's answer to an unreachable NB (the CLI prints the message, exit 1).
UNREACHABLE = 503


@dataclass
class Context:
    """One cluster operation: the NB connection, the registry as read in this attempt, this
    node's owner mark and the warning sink. ``attach_new``: ``network restore --attach-new``
    (an uplink's parent not attached yet may be attached, :mod:`podnet.drivers.ovn.physical`)."""

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
            self._pods = pods_by_network(self.nb)
        return self._pods.get(network, [])

    def sb(self) -> Ovsdb:
        """The SB database, from this node's OVS (``ovn-remote``)."""
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

    backend = CLUSTER
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

    def cluster_delete(self, ctx: Context, name: str) -> tuple[list[Op], Callable[[], None]]:
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
    pems = [config.get(k) for k in (server.CLIENT_KEY, server.CLIENT_CERT, server.CA_CERT)]
    if not all(pems):
        return None
    digest = hashlib.sha256("\0".join([owner, *map(str, pems)]).encode()).hexdigest()[:16]
    return f"/run/podnet/ovn-{digest}"


def drop_ssl_dir(before: Mapping[str, str], after: Mapping[str, str], owner: str) -> None:
    """Remove the PEM files of server config ``before`` when ``after`` (the store's new config)
    no longer uses them: a replaced or unset client key leaves no copy in ``/run``."""
    import shutil  # cold: the plugin's OVN calls load this module, never this function

    old = ssl_dir(before, owner)
    if old is not None and old != ssl_dir(after, owner):
        shutil.rmtree(old, ignore_errors=True)


def _ssl_files(config: Mapping[str, str], owner: str = "") -> tuple[str, str, str]:
    """The PEM values written to private files for ``ovsdb-client`` (0600, in the 0700
    directory :func:`ssl_dir`, written only when they change, each writer through a temporary
    file of its own)."""
    pems = [config[k] for k in (server.CLIENT_KEY, server.CLIENT_CERT, server.CA_CERT)]
    base = ssl_dir(config, owner)
    assert base is not None
    paths = tuple(f"{base}/{n}" for n in ("key.pem", "cert.pem", "ca.pem"))
    if not all(os.path.exists(p) for p in paths):
        import tempfile  # cold: only when the PEM files are first written

        os.makedirs(base, mode=0o700, exist_ok=True)
        os.chmod(base, 0o700)
        for path, pem in zip(paths, pems, strict=True):
            # a name of its own per writer: parallel calls never rename each other's file
            fd, tmp = tempfile.mkstemp(dir=base, prefix=".new-")  # 0600
            with os.fdopen(fd, "w") as f:
                f.write(pem)
            os.replace(tmp, path)
    return paths[0], paths[1], paths[2]


def failure(err: Unreachable | TxnFailed) -> NetworkError:
    """The refusal for an NB failure: its message names the remotes and a reason of
    :data:`podnet.ovn.ovsdb.REASONS` (503) or the refused operation (500); what the tool or
    the server said is only its ``detail`` (the server's log)."""
    if isinstance(err, Unreachable):
        return NetworkError(err.msg, UNREACHABLE, detail=err.details)
    return NetworkError(err.msg, 500, detail=err.details)


def cluster_driver(kind: str) -> ClusterDriver:
    """The driver of cluster network type ``kind``."""
    found = drivers.get(kind)
    assert isinstance(found, ClusterDriver), kind
    return found


def as_network(ctx: Context, name: str, record: nbmod.Record, target: str | None = None) -> Network:
    """Cluster network ``name`` as the API shows it. Without ``target``: the cluster-wide
    config (a member's own keys left out, as LXD does), the record's status, and as
    ``locations`` the members that have their own keys (a ``physical`` network's members with
    a ``parent``). With ``target``: that member's view — its own keys merged in, and its status
    (:meth:`ClusterDriver.member_status`)."""
    driver = cluster_driver(record.type)
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


def record_of(registry: nbmod.Registry, name: str,
              missing: str = "Network not found") -> nbmod.Record:  # fmt: skip
    """Network ``name``'s record in ``registry``; NetworkError 404 ``missing`` when it has none
    (LXD's messages: "Network not found", or "Failed loading network: …" on delete)."""
    record = registry.records.get(name)
    if record is None:
        raise NetworkError(missing, 404)
    return record


def read_registry(nb: Ovsdb) -> nbmod.Registry:
    """The NB's registry of cluster networks; NetworkError 503 when the NB does not answer."""
    try:
        return nbmod.read(nb)
    except Unreachable as err:
        raise failure(err) from None


def networks(nb: Ovsdb, owner: str) -> list[Network]:
    """Every cluster network. NetworkError 503 when the NB does not answer."""
    registry = read_registry(nb)
    ctx = Context(nb, registry, owner)
    return [as_network(ctx, n, r) for n, r in sorted(registry.records.items())]


def network(nb: Ovsdb, owner: str, name: str, target: str | None) -> Network | None:
    """Cluster network ``name`` (None: no such network), as member ``target`` has it when
    given (404 ``Member "x" not found`` for a member OVN does not know). 503 NB unreachable."""
    registry = read_registry(nb)
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
    return vswitch.chassis().system_id


def check_member(ctx: Context, member: str) -> None:
    """``member`` names this node or a chassis in OVN's SB (the cluster's members);
    NetworkError 404 ``Member "x" not found`` (LXD's words) otherwise, 400 for a name podnet
    cannot record, 503 when the SB does not answer."""
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


def read_only(config: Mapping[str, str], current: Mapping[str, str]) -> None:
    """Refuse (400) a client's ``volatile.*`` key unless it is the value podnet set (a PUT
    sends back what GET showed): those keys are podnet's record of what it allocated (the
    router's uplink address), never a client's choice."""
    for key, value in config.items():
        if key.startswith("volatile.") and current.get(key) != value:
            raise NetworkError(f'Key "{key}" is read-only: podnet sets it')
