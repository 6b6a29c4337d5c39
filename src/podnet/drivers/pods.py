"""DEL, CHECK and GC of a pod attachment, the same for every podnet driver; a driver adds its
own steps through its hooks (:class:`podnet.drivers.base.Driver`)."""

from __future__ import annotations

from podnet import errors
from podnet.drivers.base import link_alias, open_store
from podnet.errors import CNIError
from podnet.link import names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from podnet.cni.skel import Call
    from podnet.drivers.base import Driver
    from podnet.plugins.podnet_conf import PodnetConf, StoreConf
    from podnet.store.db import Pod
    from podnet.values import PortMapping


def names_this(pod: Pod, call: Call, conf: StoreConf) -> bool:
    """Whether ``pod`` (the row of CNI_CONTAINERID) is the attachment this call names: the
    same CNI_IFNAME and network ``name`` (rows of an older podnet may lack either)."""
    from podnet.store.db import OWNER_PODNET

    return (pod.ifname in (None, call.ifname) and pod.network_name in (None, conf.name)
            and pod.owner in (None, OWNER_PODNET))  # fmt: skip


def detach(driver: Driver, call: Call, conf: StoreConf) -> None:
    """DEL (spec "DEL"): release everything of (CNI_CONTAINERID, CNI_IFNAME, network);
    idempotent. Only that attachment: a DEL naming another ifname or another network ``name``
    of the same container leaves podnet's attachment as it is and succeeds; a host veth of the
    derived name with no row is deleted only when it carries this store's alias or none (a call
    killed before its COMMIT left it).

    Works with an empty, stale or deleted CNI_NETNS: the host veth name is derived from the
    container ID and ifname, and the address is released from the store regardless. Everything
    happens inside the write transaction, so a DEL refused for the lock (11) changes nothing;
    the veth deletion (an RCU grace period, ~20 ms) starts first and overlaps the rest, and the
    hostPort elements go before the rows commit (:mod:`podnet.reconcile`). The driver's
    :meth:`~podnet.drivers.base.Driver.release` starts once the row is gone and overlaps the
    veth deletion; its error is this DEL's. A failed conntrack flush is only logged."""
    from podnet import reconcile
    from podnet.drivers.base import _flush_udp
    from podnet.link import veth

    host_if = names.host_ifname(call.container_id, call.ifname)
    entries: list[PortMapping] = []
    deleting = veth.prespawn_delete()  # started now, given the name once the lock is ours
    released: Callable[[], None] | None = None
    try:
        with open_store(conf) as store, store.write():
            # Only once the write lock is ours: a DEL refused with 11 changes nothing.
            pod = store.get_pod(call.container_id)
            if pod is not None and names_this(pod, call, conf):
                veth.start_delete_host(host_if, deleting)
                entries = reconcile.renderable(store.portmaps(call.container_id), call.log.warn)
                reconcile.delete(store, entries, call.container_id, call.log.warn)
                store.delete_pod(call.container_id)
            elif pod is None and veth.alias_of(host_if) in ("", link_alias(conf)):
                # no row: a call killed before its COMMIT may have left this veth behind —
                # with this store's alias, or none yet (killed between 'link add' and 'alias')
                veth.start_delete_host(host_if, deleting)
        released = driver.release(call, conf)
    finally:
        try:
            if deleting.deferred:
                deleting.abandon()
            else:
                veth.finish_delete(deleting, host_if)
        finally:
            if released is not None:
                released()
    _flush_udp(call, entries)


def check(driver: Driver, call: Call, conf: PodnetConf) -> None:
    """CHECK (spec "CHECK"): the row, the pod interface, routes, host route and hostPort map
    elements must all be as ADD left them; the first difference → code 103 naming it. The
    driver's :meth:`~podnet.drivers.base.Driver.check_first` runs first."""
    from podnet.cni.result import prev_result
    from podnet.drivers.base import require_netns
    from podnet.plugins import podnet_check

    if prev_result(call.config) is None:
        raise errors.InvalidConfig("prevResult: required for CHECK (the result of the ADD chain)")
    require_netns(call)
    driver.check_first(call, conf)
    with open_store(conf) as store:
        pod = store.get_pod(call.container_id)
        if pod is None or pod.ifname != call.ifname or not names_this(pod, call, conf):
            raise CNIError(
                f"container {call.container_id} has no podnet attachment {call.ifname} in "
                f"network {conf.name}",
                code=errors.UNKNOWN_CONTAINER,
            )
        bridge, prefixes = driver.prefixes(store, pod)
        podnet_check.check(call, pod, store.portmaps(call.container_id), bridge, prefixes)


def gc(driver: Driver, call: Call, conf: StoreConf) -> None:
    """GC (spec 1.1 "GC"): remove every attachment not in ``cni.dev/valid-attachments`` — rows,
    host veths (also podnet veths with no row) and hostPort rules. Rows of other networks, of an
    unknown network (seed 001's, without an attachment row) and of podnet-ipam sharing the
    database are kept; the driver's :meth:`~podnet.drivers.base.Driver.gc_also` runs last.
    Keeps going on errors and reports them together at the end."""
    from podnet import reconcile
    from podnet.cni.netconf import parse_valid_attachments
    from podnet.link import veth
    from podnet.store.db import OWNER_PODNET

    valid = parse_valid_attachments(call.config)
    failures: list[str] = []
    with open_store(conf) as store, store.locked():
        keep: set[str] = set()
        stale: list[str] = []
        for pod in store.pods():
            if pod.owner not in (None, OWNER_PODNET):
                continue
            # only this network's rows: one of unknown network (a seed-001 row without an
            # attachment) is never another network's GC to release; its DEL does
            if (pod.container_id, pod.ifname) in valid or pod.network_name != conf.name:
                keep.add(str(pod.interface_name))
            else:
                stale.append(str(pod.container_id))
        try:
            # the kernel lets go first, then the rows
            reconcile.rebuild(store, without=stale, warn=call.log.warn)
        except CNIError as err:
            failures.append(f"{err.msg}: {err.details}")
            # rows whose map elements could not be removed stay, with their elements
            stale = [cid for cid in stale if not store.portmaps(cid)]
        with store.write():
            for cid in stale:
                store.delete_pod(cid)
        try:
            ours = veth.list_host_links(names.HOST_PREFIX, link_alias(conf))
            leaked = [n for n in ours if n not in keep]
        except CNIError as err:
            failures.append(f"listing links: {err.msg}: {err.details}")
            leaked = []
        deletions = []
        for name in leaked:
            try:
                deletions.append((veth.start_delete_host(name), name))
            except CNIError as err:
                failures.append(f"{err.msg}: {err.details}")
        for d, name in deletions:
            try:
                veth.finish_delete(d, name)
            except CNIError as err:
                failures.append(f"{err.msg}: {err.details}")
    driver.gc_also(call, conf, failures)
    if failures:
        raise CNIError("GC finished with errors", "; ".join(failures))
