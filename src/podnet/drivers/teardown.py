"""DEL of a veth pod, on the plugin's critical path: the modules it imports until the host
veth's deletion has started are only the store's, the link's and the NetConf's. The driver
layer (:mod:`podnet.drivers.base`, :mod:`podnet.drivers.pods`) is not among them: a driver
step (:meth:`~podnet.drivers.base.Driver.release`) is handed in, or — for the types of
:data:`podnet.drivers.VETH_TEARDOWN`, which have none — not loaded at all.

The store is opened as :func:`podnet.drivers.base.open_store` does (closed before the process
ends: the WAL is checkpointed then)."""

from __future__ import annotations

from podnet.link import names
from podnet.store import open_store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from podnet.cni.skel import Call
    from podnet.drivers.base import Driver
    from podnet.netconf import StoreConf
    from podnet.store import Store
    from podnet.store.pods import Pod
    from podnet.values import PortMapping

    #: A driver's :meth:`~podnet.drivers.base.Driver.release`, given the store and the
    #: container's row as DEL found it (None: none): started after the rows, it returns the
    #: wait (or None).
    Release = Callable[[Call, StoreConf, Store, Pod | None], Callable[[], None] | None]

__all__ = ["detach", "flush_udp", "gc", "names_this"]


def link_alias(conf: StoreConf) -> str:
    """The alias of this store's host veths (:func:`names.owner_alias`; the driver layer's
    :func:`podnet.drivers.base.link_alias`, which DEL does not load)."""
    return names.owner_alias(conf.data_dir)


def flush_udp(call: Call, entries: list[PortMapping]) -> None:
    """Flush stale UDP conntrack entries of the mapped ports; a failure is logged only (as the
    reference portmap does: the mapping works, old flows may linger)."""
    ports = [(e.family, e.host_port) for e in entries if e.protocol == "udp"]
    if ports:
        from podnet.firewall.conntrack import flush_udp_ports

        flush_udp_ports(ports, call.log.warn)


def names_this(pod: Pod, call: Call, conf: StoreConf) -> bool:
    """Whether ``pod`` (the row of CNI_CONTAINERID) is the attachment this call names: the
    same CNI_IFNAME and network ``name`` (rows of an older podnet may lack either)."""
    from podnet.store.pods import OWNER_PODNET

    return (pod.ifname in (None, call.ifname) and pod.network_name in (None, conf.name)
            and pod.owner in (None, OWNER_PODNET))  # fmt: skip


def detach(call: Call, conf: StoreConf, release: Release | None) -> None:
    """DEL (spec "DEL"): release everything of (CNI_CONTAINERID, CNI_IFNAME, network);
    idempotent. Only that attachment: a DEL naming another ifname or another network ``name``
    of the same container leaves podnet's attachment as it is and succeeds; a host veth of the
    derived name with no row is deleted only when it carries this store's alias or none (a call
    killed before its COMMIT left it).

    Works with an empty, stale or deleted CNI_NETNS: the host veth name is derived from the
    container ID and ifname, and the address is released from the store regardless. Everything
    happens inside the write transaction, so a DEL refused for the lock (11) changes nothing;
    the veth deletion (an RCU grace period, ~20 ms) starts first and overlaps the rest, and the
    hostPort elements go before the rows commit (:mod:`podnet.reconcile`). ``release`` (a
    driver's :meth:`~podnet.drivers.base.Driver.release`, or None) starts once the row is gone
    and overlaps the veth deletion; its error is this DEL's. A failed conntrack flush is only
    logged.

    Until the deletion starts, DEL runs on its critical path (the deletion's RCU grace period
    then hides the rest): the modules for the hostPort elements are imported only after it."""
    from podnet.link import hostend

    host_if = names.host_ifname(call.container_id, call.ifname)
    entries: list[PortMapping] = []
    deleting = hostend.prespawn_delete()  # started now, given the name once the lock is ours
    released: Callable[[], None] | None = None
    try:
        with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store:
            with store.write():
                # Only once the write lock is ours: a DEL refused with 11 changes nothing.
                pod = store.pods.get(call.container_id)
                if pod is not None and names_this(pod, call, conf):
                    hostend.start_delete_host(host_if, deleting)
                    from podnet import reconcile

                    rows = store.pods.portmaps(call.container_id)
                    entries = reconcile.renderable(rows, call.log.warn)
                    reconcile.delete(store, entries, call.container_id, call.log.warn)
                    store.pods.delete(call.container_id)
                elif pod is None and hostend.alias_of(host_if) in ("", link_alias(conf)):
                    # no row: a call killed before its COMMIT may have left this veth behind —
                    # with this store's alias, or none yet (killed between 'link add' and 'alias')
                    hostend.start_delete_host(host_if, deleting)
            if release is not None:
                released = release(call, conf, store, pod)
    finally:
        try:
            if deleting.deferred:
                deleting.abandon()
            else:
                hostend.finish_delete(deleting, host_if)
        finally:
            if released is not None:
                released()
    flush_udp(call, entries)


def gc(driver: Driver, call: Call, conf: StoreConf) -> None:
    """GC (spec 1.1 "GC"): remove every attachment not in ``cni.dev/valid-attachments`` — rows,
    host veths (also podnet veths with no row) and hostPort rules. Rows of other networks, of an
    unknown network (an older podnet's, without an attachment row) and of podnet-ipam sharing
    the database are kept; the driver's :meth:`~podnet.drivers.base.Driver.gc_also` runs last.
    Keeps going on errors and reports them together at the end (104). Nothing for a type that
    holds no pods."""
    if not driver.takes_pods:
        return
    from podnet import errors, reconcile
    from podnet.cni.netconf import parse_valid_attachments
    from podnet.errors import CNIError
    from podnet.link import hostend
    from podnet.store.pods import OWNER_PODNET

    valid = parse_valid_attachments(call.config)
    failures: list[str] = []
    with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store, store.locked():
        keep: set[str] = set()
        stale: list[str] = []
        for pod in store.pods.all():
            if pod.owner not in (None, OWNER_PODNET):
                continue
            # only this network's rows: one of unknown network (a row without an attachment)
            # is never another network's GC to release; its DEL does
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
            stale = [cid for cid in stale if not store.pods.portmaps(cid)]
        with store.write():
            for cid in stale:
                store.pods.delete(cid)
        try:
            ours = hostend.list_host_links(names.HOST_PREFIX, link_alias(conf))
            leaked = [n for n in ours if n not in keep]
        except CNIError as err:
            failures.append(f"listing links: {err.msg}: {err.details}")
            leaked = []
        deletions = []
        for name in leaked:
            try:
                deletions.append((hostend.start_delete_host(name), name))
            except CNIError as err:
                failures.append(f"{err.msg}: {err.details}")
        for d, name in deletions:
            try:
                hostend.finish_delete(d, name)
            except CNIError as err:
                failures.append(f"{err.msg}: {err.details}")
    driver.gc_also(call, conf, failures)
    if failures:  # what GC could not remove stays for the next GC: the kernel's or OVS's code
        raise errors.KernelError("GC finished with errors", "; ".join(failures))
