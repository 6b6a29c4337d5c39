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
    from podnet.drivers.conf import StoreConf
    from podnet.store.pods import Pod
    from podnet.values import PortMapping

    #: A driver's :meth:`~podnet.drivers.base.Driver.release`: started after the rows, it
    #: returns the wait (or None).
    Release = Callable[[Call, StoreConf], Callable[[], None] | None]

__all__ = ["detach", "flush_udp", "names_this"]


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
    from podnet.link import veth

    host_if = names.host_ifname(call.container_id, call.ifname)
    entries: list[PortMapping] = []
    deleting = veth.prespawn_delete()  # started now, given the name once the lock is ours
    released: Callable[[], None] | None = None
    try:
        with open_store(conf.data_dir, busy_timeout=conf.busy_timeout) as store, store.write():
            # Only once the write lock is ours: a DEL refused with 11 changes nothing.
            pod = store.pods.get(call.container_id)
            if pod is not None and names_this(pod, call, conf):
                veth.start_delete_host(host_if, deleting)
                from podnet import reconcile

                rows = store.pods.portmaps(call.container_id)
                entries = reconcile.renderable(rows, call.log.warn)
                reconcile.delete(store, entries, call.container_id, call.log.warn)
                store.pods.delete(call.container_id)
            elif pod is None and veth.alias_of(host_if) in ("", names.owner_alias(conf.data_dir)):
                # no row: a call killed before its COMMIT may have left this veth behind —
                # with this store's alias, or none yet (killed between 'link add' and 'alias')
                veth.start_delete_host(host_if, deleting)
        if release is not None:
            released = release(call, conf)
    finally:
        try:
            if deleting.deferred:
                deleting.abandon()
            else:
                veth.finish_delete(deleting, host_if)
        finally:
            if released is not None:
                released()
    flush_udp(call, entries)
