"""ADD, DEL, CHECK and GC of a pod attachment, written once for every podnet driver; a driver
adds its own steps through its hooks (:class:`podnet.drivers.base.Driver`).

ADD runs its steps on an explicit undo stack (:class:`podnet.undo.Undo`): the rows (with what
the chooser recorded), the veth, the hostPort elements each register their own undo as they are
done, so a failure at step N undoes N−1 … 1 in order, under the write lock, and the original
error is the answer."""

from __future__ import annotations

from podnet import errors
from podnet.drivers.base import Driver, link_alias, open_store, refuse_existing, require_netns
from podnet.drivers.teardown import flush_udp, names_this
from podnet.errors import CNIError
from podnet.link import names
from podnet.proc import ToolTimeout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.checked import Net
    from podnet.cni.skel import Call
    from podnet.drivers.base import Choice
    from podnet.drivers.conf import PodnetConf, StoreConf
    from podnet.link.veth import PodLink
    from podnet.proc import Spawned
    from podnet.reconcile import Pending
    from podnet.store import Store
    from podnet.undo import Undo
    from podnet.values import PortMapping


def attach(driver: Driver, call: Call, conf: PodnetConf) -> dict[str, Any]:
    """ADD (spec "ADD"): allocate, wire the veth, publish hostPorts; a 1.x result.

    Errors: 7 bad config, 100 no free address, 101 hostPort held (names the holder), 102
    CNI_IFNAME exists in the netns, 104 kernel failure, 11 database locked, 5 I/O; a
    driver's own. A failed ADD leaves no row, link or map element (its undo stack)."""
    from podnet.cni.netconf import parse_requested_ips, parse_requested_mac
    from podnet.link import veth
    from podnet.undo import Undo

    requested = {} if conf.ipam_type else parse_requested_ips(call.config, call.args)
    pod_mac = parse_requested_mac(call.config, call.args) or names.random_mac()
    require_netns(call)
    veth.check_ifname(call.ifname)
    undo = Undo()
    add = _Add(driver, call, conf, undo, pod_mac, requested,
               veth.prespawn_host())  # its start-up overlaps the allocation  # fmt: skip
    try:
        with open_store(conf) as store:
            driver.prepare(call, conf, store, undo)
            return add.run(store)
    except BaseException as err:
        undo.run(err, call.log.warn)
        raise
    finally:
        add.host_tool.abandon()  # when the ADD failed before the veth was due


class _Add:
    """One ADD's steps (:meth:`Driver.attach`), each registering its undo on ``undo``.

    The node-side ``ip`` is started first, so its start-up overlaps the allocation. Under the
    write lock: the rows are written and ``ip`` gets its commands just before the COMMIT (for a
    bridge port only after it, once the bridge is ensured). After the COMMIT the hostPorts are
    published in parallel, the database connection is closed (its WAL checkpoint overlaps the
    tools), the pod end is configured as soon as the pair exists and waited for after the lock.
    """

    def __init__(self, driver: Driver, call: Call, conf: PodnetConf, undo: Undo, pod_mac: str,
                 requested: dict[int, str], host_tool: Spawned) -> None:  # fmt: skip
        self.driver, self.call, self.conf = driver, call, conf
        #: The node-side ``ip``, started before the store opens (replaced if a query ends it).
        self.host_tool = host_tool
        self.store: Store  # set by run()
        self.undo, self.pod_mac, self.requested = undo, pod_mac, requested
        self.host_if = names.host_ifname(call.container_id, call.ifname)
        self.alias = link_alias(conf)
        self.entries: list[PortMapping] = []
        self.pending: Pending | None = None  # an nft run in flight
        #: The hostPort elements the kernel holds: [] before nft ran, None when unknown.
        self.published: list[PortMapping] | None = []
        self.busy: Spawned | None = None  # the ip run to wait for before deleting the veth
        self.locked = True  # whether the chooser's records may still be reverted

    def run(self, store: Store) -> dict[str, Any]:
        from podnet.cni.result import attachment
        from podnet.link import veth

        self.store = store
        with self.store.locked():
            link, choice = self._commit()
            configuring = self._wire(link, choice)
        self.locked = False
        self.busy = None  # reaped by finish_configure_pod
        try:
            veth.finish_configure_pod(link, configuring)
        except BaseException as err:
            with self.store.locked():
                self.undo.run(err, self.call.log.warn)
            raise
        flush_udp(self.call, self.entries)
        return attachment(link.host_if, link.host_mac, link.ifname, link.pod_mac, link.netns,
                          link.mtu, choice.alloc, choice.prefixes)  # fmt: skip

    def _commit(self) -> tuple[PodLink, Choice]:
        """The rows, in one write transaction; the pair started before the COMMIT for a routed
        pod. Undo registered: the veth (if started), then the rows."""
        from podnet.link import veth

        call, conf, store = self.call, self.conf, self.store
        with store.write():
            refuse_existing(store, call.container_id)
            choice = self.driver.choose(call, conf, store, self.requested)
            alloc = choice.alloc
            mtu = conf.mtu or choice.mtu or self.driver.default_mtu(choice) or \
                self._node_mtu()  # fmt: skip
            addresses = {family: a[0] for family, a in alloc.items()}
            self.entries = mappings_for(conf, call.container_id, addresses)
            check_hostports(store, self.entries)
            link = veth.PodLink(
                host_if=self.host_if, ifname=call.ifname, netns=call.netns, mtu=mtu,
                addresses=[(f, a[0], a[1]) for f, a in sorted(alloc.items())],
                host_mac=names.random_mac(), pod_mac=self.pod_mac, alias=self.alias,
                bridge=choice.bridge, prefixes=choice.prefixes,
            )  # fmt: skip
            store.pods.insert(
                container_id=call.container_id, netns=call.netns, interface_name=self.host_if,
                interface_mtu=mtu, ifname=call.ifname, network_name=conf.name,
                host_mac=link.host_mac, pod_mac=link.pod_mac,
                ip_address_v4=addresses.get(4), ip_address_v6=addresses.get(6),
                ip_gateway_v4=alloc[4][1] if 4 in alloc else None,
                ip_gateway_v6=alloc[6][1] if 6 in alloc else None,
                name=call.args.get("K8S_POD_NAME"), namespace=call.args.get("K8S_POD_NAMESPACE"),
                uid=call.args.get("K8S_POD_UID"),
            )  # fmt: skip
            store.pods.insert_portmaps(self.entries)
            if choice.network_id is not None:
                store.networks.attach_pod(call.container_id, choice.network_id)
            if self.driver.pair_before_commit:
                # created while the COMMIT runs; a failed COMMIT deletes it again
                self.busy = veth.start_create_pair(link, self.host_tool)
                self.undo.push(f"deleting {self.host_if}", self._delete_veth)
        self.undo.push("removing the rows and hostPorts", lambda: self._delete_rows(choice))
        return link, choice

    def _node_mtu(self) -> int:
        """Bytes: the MTU of the link holding the node's default route (cni-kindnet's choice),
        asked of the node-side ``ip`` already started (else with SIOCGIFMTU); 1500 without a
        default route or when the link is gone."""
        from podnet.link import mtu, veth

        ifname = mtu.default_route_ifname()
        if ifname is None:
            return mtu.DEFAULT_MTU
        found, self.host_tool = veth.ask_mtu(self.host_tool, ifname)
        if found is None:
            try:
                found = mtu.link_mtu(ifname)  # SIOCGIFMTU, at the cost of ctypes' import
            except OSError:
                return mtu.DEFAULT_MTU
        return found

    def _wire(self, link: PodLink, choice: Choice) -> Spawned:
        """After the COMMIT, under the lock: the pair (a bridge port: once the bridge is
        there), the hostPort elements and the pod end's configuration, started together."""
        from podnet import reconcile
        from podnet.link import veth

        store = self.store
        if not self.driver.pair_before_commit:
            self.driver.before_pair(self.call, self.conf, store, choice, self.host_if)
            self.busy = veth.start_create_pair(link, self.host_tool)
            self.undo.push(f"deleting {self.host_if}", self._delete_veth)
        self.pending = reconcile.start_add(store, self.entries,
                                           ranges_changed=choice.ranges_changed)  # fmt: skip
        if not self.pending.rebuild:
            store.detach()  # its WAL checkpoint overlaps ip and nft (the lock stays)
        created, self.busy = self.busy, None  # reaped by finish_create_pair
        assert created is not None
        veth.finish_create_pair(link, created, stale=lambda dev: not store.pods.interface_used(dev))
        self.busy = configuring = veth.start_configure_pod(link)
        done, self.pending = self.pending, None
        try:
            reconcile.finish_add(store, done, self.call.log.warn)
        except BaseException as err:
            # a failed nft run changed nothing (one transaction); one killed at its deadline
            # may have committed before it hung
            self.published = None if isinstance(err, ToolTimeout) else []
            raise
        self.published = self.entries
        return configuring

    def _settle_nft(self) -> list[PortMapping]:
        """Which hostPort elements the kernel may hold now. An nft run still in flight (the
        veth failed first) is waited for — published only if it succeeded; when unknown, the
        kernel is asked (all of them when nft cannot even list them)."""
        from podnet import reconcile
        from podnet.firewall import nft

        pending, entries = self.pending, self.entries
        if pending is not None:
            if pending.spawned is None or pending.rebuild:
                return []
            try:
                return entries if nft.outcome(pending.spawned).ok else []
            except CNIError:
                self.published = None
        if self.published is not None:
            return self.published
        try:
            return reconcile.published(entries)
        except CNIError:
            return entries

    def _delete_veth(self) -> None:
        """Undo of the pair: let ``ip`` finish, then delete the host end (if it is ours)."""
        from podnet.link import veth

        if self.busy is not None:
            try:
                self.busy.wait()
            except CNIError:
                pass
        veth.delete_host(self.host_if, owner=self.alias)

    def _delete_rows(self, choice: Choice) -> None:
        """Undo of the rows: the hostPort elements the kernel may hold first (should they stay,
        the rows stay with them and the runtime's DEL retries), then the pod's rows and — while
        the lock was never let go — what the chooser recorded."""
        from podnet import reconcile

        maybe = self._settle_nft()
        reconcile.delete(self.store, maybe, self.call.container_id, self.call.log.warn)
        with self.store.write():
            self.store.pods.delete(self.call.container_id)
            if self.locked and choice.undo is not None:
                choice.undo(self.store)


def mappings_for(conf: PodnetConf, container_id: str,
                 addresses: dict[int, str]) -> list[PortMapping]:  # fmt: skip
    """Requested portMappings → store entries, one per pod family for a wildcard hostIP; 7
    for a hostIP of a family the pod has no address of."""
    from podnet.checked import FAMILIES
    from podnet.values import PortMapping

    out = []
    for i, m in enumerate(conf.port_mappings):
        if m.host_ip is not None:
            family = m.host_ip.version
            if family not in addresses:
                raise errors.InvalidConfig(
                    f"runtimeConfig.portMappings[{i}].hostIP: {m.host_ip} is IPv{family} but the "
                    f"pod has no IPv{family} address"
                )
            out.append(PortMapping(container_id, str(m.host_ip), m.host_port, m.protocol,
                                   addresses[family], m.container_port, family))  # fmt: skip
        else:
            for version, addr in sorted(addresses.items()):
                out.append(PortMapping(container_id, FAMILIES[version].wildcard, m.host_port,
                                       m.protocol, addr, m.container_port, version))  # fmt: skip
    return out


def check_hostports(store: Store, entries: list[PortMapping]) -> None:
    """Code 101 naming the holder when a hostPort's traffic is already taken
    (:func:`podnet.claims.first_conflict`)."""
    if not entries:
        return
    from podnet.claims import first_conflict, hostport_message
    from podnet.values import HOSTPORT

    found = first_conflict(store, [e.dnat() for e in entries], of=HOSTPORT)
    if found is not None:
        raise errors.HostPortConflict(hostport_message(*found))


def detach(driver: Driver, call: Call, conf: StoreConf) -> None:
    """DEL (spec "DEL") of a veth pod: :func:`podnet.drivers.teardown.detach`, with the
    driver's :meth:`~podnet.drivers.base.Driver.release` after the rows."""
    from podnet.drivers import teardown

    teardown.detach(call, conf, driver.release)


def check(driver: Driver, call: Call, conf: PodnetConf) -> None:
    """CHECK (spec "CHECK"): the row, the pod interface, routes, host route and hostPort map
    elements must all be as ADD left them; the first difference → code 103 naming it. The
    driver's :meth:`~podnet.drivers.base.Driver.check_first` runs first."""
    from podnet.cni.result import prev_result
    from podnet.drivers import check as podnet_check

    if prev_result(call.config) is None:
        raise errors.InvalidConfig("prevResult: required for CHECK (the result of the ADD chain)")
    require_netns(call)
    driver.check_first(call, conf)
    with open_store(conf) as store:
        pod = store.pods.get(call.container_id)
        if pod is None or pod.ifname != call.ifname or not names_this(pod, call, conf):
            raise CNIError(
                f"container {call.container_id} has no podnet attachment {call.ifname} in "
                f"network {conf.name}",
                code=errors.UNKNOWN_CONTAINER,
            )
        bridge, prefixes = driver.prefixes(store, pod)
        podnet_check.check(call, pod, store.pods.portmaps(call.container_id), bridge, prefixes,
                           ranges=configured_ranges(driver, conf, store))  # fmt: skip


def configured_ranges(driver: Driver, conf: PodnetConf, store: Store) -> list[Net] | None:
    """The subnets NetConf ``conf`` gives its pods addresses from now: its own ``ranges``, or
    the subnets of its ``network``; None when an IPAM plugin chooses them (``ipam``)."""
    if conf.ranges:
        return list(conf.ranges)
    if not conf.network:
        return None
    row = store.networks.get(conf.network)
    if row is None:
        return []
    return [n for nets in driver.subnets(row.config).values() for n in nets]


def gc(driver: Driver, call: Call, conf: StoreConf) -> None:
    """GC (spec 1.1 "GC"): remove every attachment not in ``cni.dev/valid-attachments`` — rows,
    host veths (also podnet veths with no row) and hostPort rules. Rows of other networks, of an
    unknown network (seed 001's, without an attachment row) and of podnet-ipam sharing the
    database are kept; the driver's :meth:`~podnet.drivers.base.Driver.gc_also` runs last.
    Keeps going on errors and reports them together at the end."""
    from podnet import reconcile
    from podnet.cni.netconf import parse_valid_attachments
    from podnet.link import veth
    from podnet.store.pods import OWNER_PODNET

    valid = parse_valid_attachments(call.config)
    failures: list[str] = []
    with open_store(conf) as store, store.locked():
        keep: set[str] = set()
        stale: list[str] = []
        for pod in store.pods.all():
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
            stale = [cid for cid in stale if not store.pods.portmaps(cid)]
        with store.write():
            for cid in stale:
                store.pods.delete(cid)
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
    if failures:  # what GC could not remove stays for the next GC: the kernel's or OVS's code
        raise errors.KernelError("GC finished with errors", "; ".join(failures))


class VethDriver(Driver):
    """A driver whose pods get a veth pair addressed by podnet (``ptp``, ``bridge``,
    ``delegated``, and drivers built on them): the verbs are this module's functions, over the
    driver's hooks."""

    def attach(self, call: Call, conf: PodnetConf) -> dict[str, Any]:
        return attach(self, call, conf)

    def detach(self, call: Call, conf: StoreConf, network: str | None) -> None:
        detach(self, call, conf)

    def check(self, call: Call, conf: PodnetConf) -> None:
        check(self, call, conf)

    def gc(self, call: Call, conf: StoreConf) -> None:
        gc(self, call, conf)
