"""``podnet``: the main CNI plugin — IPAM, the pod's veth, egress masquerade and hostPorts, with
all node state in one SQLite database and no daemon (cni-kindnet's design).

A verb adapter: it parses the NetConf, loads the conflist's ``network`` once (:func:`_network`),
picks the network driver (:func:`podnet.drivers.for_netconf`: ``delegated`` with an ``ipam``
object, the type of the conflist's ``network``, else ``ptp``) and runs the verb, whose pipeline
is shared by every driver (:mod:`podnet.drivers.pods`: ADD on an undo stack under the store's
write lock; the kernel never holds more than the store, :mod:`podnet.reconcile`). Results are
built by :func:`podnet.cni.result.attachment`.
"""

from __future__ import annotations

from podnet import errors
from podnet.cni import skel

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.drivers.base import Driver
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

PLUGIN = "podnet"


def _conf(call: Call) -> PodnetConf:
    from podnet.netconf import PodnetConf

    return PodnetConf(call.config)


def _network(conf: PodnetConf, store: Store | None = None) -> NetworkRow | None:
    """The conflist's ``network``, read from the store once per call (``store``: the call's,
    else one opened for the read; a network of the cluster, OVN's NB, mirrored into it first);
    None for a conflist of its own ``ranges`` or ``ipam``. 7 when the network does not exist,
    or is a conflist's own ``ptp`` network."""
    if not conf.network or conf.ipam_type:
        return None
    from podnet.drivers.base import open_store, unknown_network

    if store is None:
        with open_store(conf) as own:
            return _network(conf, own)
    row = store.networks.get(conf.network)
    if row is None:  # a network of the cluster (OVN's NB), not yet in the node's view
        from podnet.drivers.ovn.cluster import cluster_row

        row = cluster_row(store, conf.network)
    if row is None:
        raise unknown_network(conf)
    if row.type == "ptp":
        raise errors.InvalidConfig(f"network: {conf.network!r} is a ptp network, not a bridge "
                                   f"(podnetctl network create {conf.network})")  # fmt: skip
    return row


def _driver(conf: PodnetConf, net: NetworkRow | None) -> Driver:
    """The driver of this conflist, ``net`` its network (:func:`_network`)."""
    from podnet import drivers

    return drivers.for_netconf(conf, None if net is None else net.type)


def cmd_add(call: Call) -> dict[str, Any]:
    """ADD (spec "ADD"): the driver's attach; a 1.x result.

    Errors: 7 bad config, 100 no free address, 101 hostPort held (names the holder), 102
    CNI_IFNAME exists in the netns, 104 kernel failure (the tool's message in ``details``), 11
    database locked, 5 database I/O; with ``ipam``, also the IPAM plugin's own. A failed ADD
    leaves no row, link or map element."""
    conf = _conf(call)
    if not conf.network or conf.ipam_type:
        return _attach(_driver(conf, None), call, conf)
    from podnet.drivers.base import open_store

    # one connection for the whole ADD: the row read here is the one its transaction uses,
    # unless another connection commits in between (Store.version tells; then it is re-read)
    with open_store(conf) as store:
        net = _network(conf, store)
        seen = store.version()
        return _attach(_driver(conf, net), call, conf, net, store, seen)


def _attach(driver: Driver, call: Call, conf: PodnetConf, net: NetworkRow | None = None,
            store: Store | None = None, seen: tuple[int, int] | None = None) -> dict[str, Any]:
    """:func:`podnet.drivers.pods.attach`; 7 for a driver that has no ADD."""
    from podnet.drivers import pods

    try:
        return pods.attach(driver, call, conf, net, store, seen)
    except NotImplementedError:
        raise _unhandled(driver, "ADD") from None


def cmd_del(call: Call) -> None:
    """DEL (spec "DEL"): release (CNI_CONTAINERID, CNI_IFNAME, network); idempotent, works with
    an empty, stale or deleted CNI_NETNS. Reads only the config keys it uses
    (:class:`~podnet.netconf.StoreConf`), so it is not refused over, say, a range,
    and never needs the network to still exist (:func:`podnet.drivers.teardown.detach`) nor its
    type's driver (:func:`_teardown_driver`); a ``ptp`` or ``bridge`` pod's loads none
    (:func:`podnet.drivers.plain_veth_teardown`)."""
    from podnet import drivers
    from podnet.netconf import StoreConf

    conf = StoreConf(call.config)
    network, network_type = _stored_network(call, conf)
    if drivers.plain_veth_teardown(conf, network_type):
        from podnet.drivers import teardown

        teardown.detach(call, conf, None)  # no driver step: the driver layer stays unloaded
        return
    driver = _teardown_driver(call, conf, network_type, "DEL")
    from podnet.drivers import pods

    try:
        pods.detach(driver, call, conf, network)
    except NotImplementedError:
        call.log.warn(f"{_unhandled(driver, 'DEL').msg}: nothing released")


def _teardown_driver(call: Call, conf: StoreConf, network_type: str | None,
                     verb: str) -> Driver:  # fmt: skip
    """The driver DEL or GC (``verb``) works with: that of the network's type, or — when it
    cannot be had (a type the runtime's cleanup process does not know: ``PODNET_DRIVERS`` is
    not in its environment; a driver that fails to import) — the generic veth driver
    (:class:`podnet.drivers.pods.VethDriver`: the attachment's row, its host veth by this
    store's alias, its hostPort elements), with a warning in the log. A runtime retries a failed
    DEL for ever, and the attachment would otherwise stay (CNI SPEC "DEL")."""
    from podnet import drivers

    try:
        return drivers.for_netconf(conf, network_type)
    except errors.InvalidConfig as err:
        from podnet.drivers.pods import VethDriver

        details = f" ({err.details})" if err.details else ""
        call.log.warn(f"{verb}: {err.msg}{details}: releasing with the generic veth driver")
        return VethDriver()


def _unhandled(driver: Driver, verb: str) -> errors.CNIError:
    """InvalidConfig (7): ``driver`` (an administrator's, ``PODNET_DRIVERS``) raised
    NotImplementedError for ``verb``. ADD, CHECK and STATUS answer it; DEL and GC log it and
    succeed, since a runtime retries a failed DEL for ever and no ADD of that type can have
    left anything (CNI SPEC "DEL")."""
    where = f"{type(driver).__module__}.{type(driver).__qualname__}"
    return errors.InvalidConfig(
        f"network type {driver.type!r} does not implement {verb} (driver {where})"
    )


def _stored_network(call: Call, conf: StoreConf) -> tuple[str | None, str | None]:
    """The conflist's ``network`` and its type as this node's store knows it (DEL works from
    the node's view: the NB may be unreachable); (None, None) without one."""
    from podnet import checked

    network = call.config.get("network")
    if conf.ipam_type or not isinstance(network, str) or not network:
        return None, None
    try:
        checked.name(network)
    except checked.BadValue:
        return None, None
    from podnet.store import open_store

    with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store:
        row = store.networks.get(network)
    return network, (row.type if row is not None and row.type != "ptp" else None)


def cmd_check(call: Call) -> None:
    """CHECK (spec "CHECK"): the driver's check; code 103 naming the first difference. With
    ``ipam``, the IPAM plugin's CHECK runs first and its error passes through."""
    conf = _conf(call)
    net = _network(conf)
    driver = _driver(conf, net)
    from podnet.drivers import pods

    try:
        pods.check(driver, call, conf, net)
    except NotImplementedError:
        raise _unhandled(driver, "CHECK") from None


def cmd_gc(call: Call) -> None:
    """GC (spec 1.1 "GC"): remove every attachment of this network not in
    ``cni.dev/valid-attachments`` (:func:`podnet.drivers.teardown.gc`); errors are reported together
    at the end."""
    from podnet.netconf import StoreConf

    conf = StoreConf(call.config)
    driver = _teardown_driver(call, conf, _stored_network(call, conf)[1], "GC")
    from podnet.drivers import teardown

    try:
        teardown.gc(driver, call, conf)
    except NotImplementedError:
        call.log.warn(f"{_unhandled(driver, 'GC').msg}: nothing collected")


def cmd_status(call: Call) -> None:
    """STATUS (spec 1.1): code 50 when some family's ranges have no free address, or when the
    tools or the database are unusable; exit 0 (nothing printed) when ADD can be served. With
    ``ipam``, the IPAM plugin's STATUS decides about addresses (its error passes through)."""
    from podnet import proc
    from podnet.errors import CNIError

    conf = _conf(call)
    for tool in ("ip", "nft"):
        try:
            proc.which(tool)
        except CNIError as err:
            raise errors.Unavailable(err.msg, err.details) from None
    driver = _driver(conf, _network(conf))
    try:
        driver.status_also(call, conf)
    except NotImplementedError:
        raise _unhandled(driver, "STATUS") from None


HANDLERS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check, "GC": cmd_gc, "STATUS": cmd_status}


def main() -> None:
    """Console script ``podnet``: one CNI call per process (:func:`podnet.cni.skel.main`)."""
    skel.main(PLUGIN, HANDLERS)
