"""``podnet``: the main CNI plugin — IPAM, the pod's veth, egress masquerade and hostPorts, with
all node state in one SQLite database and no daemon (seed 001, issue 2).

ADD allocates and commits the rows, then publishes the hostPorts, under the store's write lock
(:meth:`podnet.store.Store.locked`), so concurrent ADD/DEL can neither lose nor duplicate a
mapping; the veth is created meanwhile and configured after the lock is released. The kernel
never holds more than the store (:mod:`podnet.firewall.sync`): a failed ADD removes its map
elements and veth before its rows, DEL removes the elements before the rows, so a plugin killed
at any moment leaves nothing the runtime's next DEL or a GC cannot clean. DEL starts the veth
deletion (an RCU grace period, ~20 ms) as soon as it holds the write lock and overlaps it with
the database and nft work.

With an ``ipam`` object in the config, podnet delegates address choice to that IPAM plugin (CNI
SPEC 1.1.0 "Plugin Delegation", :mod:`podnet.ipam.delegate`): ADD runs it first and wires the
veth with the addresses and gateways it returns (podnet's layout: the pod gets ``P/32``/``/128``
and a default route through the gateway, whatever prefix and routes the IPAM result carries),
storing the pod row as usual so hostPorts, CHECK and GC work unchanged; the returned subnets are
recorded as ranges (for ``ipMasq`` and hairpin). A failure after the IPAM ADD runs the IPAM DEL.
CHECK, DEL, GC and STATUS also run the IPAM plugin; its errors pass through with their codes.
Without ``ipam`` none of this is imported.
"""

from __future__ import annotations

import os

from podnet import errors
from podnet.cni import skel, version
from podnet.errors import CNIError
from podnet.link import names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from podnet.checked import Iface
    from podnet.cni.skel import Call
    from podnet.firewall.sync import Pending
    from podnet.ipam.allocator import Network
    from podnet.plugins.podnet_conf import PodnetConf, StoreConf
    from podnet.proc import Spawned
    from podnet.store import Store
    from podnet.store.db import Pod, PortMapping

    #: ``{family: (address, gateway, range)}``, as :func:`podnet.ipam.allocator.allocate` gives.
    Allocation = dict[int, tuple[str, str, Network]]
    #: Chooses the addresses inside ADD's write transaction.
    Chooser = Callable[[Store], "Choice"]

PLUGIN = "podnet"


def _conf(call: Call) -> PodnetConf:
    from podnet.plugins.podnet_conf import PodnetConf

    return PodnetConf(call.config)


def _open(conf: StoreConf) -> Store:
    """The store for this call; close it (``with``) before the process ends.

    Closing the last connection checkpoints the WAL and removes it (~1 ms). Leaving it open
    and exiting was measured to be worse: each new process then rebuilds the WAL index from
    the whole file, and the WAL, never rewound, grew without bound (15 MB after 600 calls).
    """
    from podnet.store import open_store

    return open_store(conf.data_dir, busy_timeout=conf.busy_timeout)


# -- ADD ---------------------------------------------------------------------------------------
def _mappings_for(
    conf: PodnetConf, container_id: str, addresses: dict[int, str]
) -> list[PortMapping]:
    """Requested portMappings → store entries, one per pod family for a wildcard hostIP."""
    from podnet.checked import FAMILIES
    from podnet.store.db import PortMapping

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
                                   addresses[family], m.container_port))  # fmt: skip
        else:
            for version, addr in sorted(addresses.items()):
                out.append(PortMapping(container_id, FAMILIES[version].wildcard, m.host_port,
                                       m.protocol, addr, m.container_port))  # fmt: skip
    return out


def _check_hostports(store: Store, entries: list[PortMapping]) -> None:
    """Code 101 naming the holder when a hostPort's traffic is already taken: by another
    container's hostPort (podnet's or podnet-portmap's), or by a network forward on one of the
    node's own addresses — a hostPort answers only there, so a forward on a listen address the
    node merely routes takes none of its traffic (issue 13, item 6)."""
    local = None
    for entry in entries:
        where = None if entry.wildcard else entry.host_ip
        for network, listen in store.forward_claims(entry.family, entry.protocol,
                                                    entry.host_port, where):  # fmt: skip
            if local is None:
                from podnet.link.local import local_prefixes

                local = local_prefixes()
            from podnet.link.local import is_local

            if is_local(listen, local):
                raise errors.HostPortConflict(
                    f"hostPort {entry.protocol}/{entry.host_port} on {entry.host_ip} is taken by "
                    f"the forward of {listen} (an address of this node) in network {network}"
                )
        holders = store.hostport_holders(entry)
        if holders:
            h = holders[0]
            raise errors.HostPortConflict(
                f"hostPort {entry.protocol}/{entry.host_port} on {entry.host_ip} is already held "
                f"by container {h.container_id} ({h.host_ip}:{h.host_port}/{h.protocol} -> "
                f"{h.container_ip}:{h.container_port})"
            )


class Choice:
    """What ADD's chooser decided inside the write transaction: ``alloc`` (``{family:
    (address, gateway, network)}``), ``ranges_changed`` (the table must be rebuilt), and for a
    pod of a bridge network: ``bridge`` (its name), ``network_id``, ``prefixes`` (family →
    subnet prefix length), ``bridge_addresses`` (gateway interfaces) and ``mtu`` (``bridge.mtu``,
    0 unset)."""

    __slots__ = ("alloc", "ranges_changed", "bridge", "network_id", "prefixes",
                 "bridge_addresses", "mtu", "undo")  # fmt: skip

    def __init__(self, alloc: Allocation, ranges_changed: bool = False, *, bridge: str = "",
                 network_id: int | None = None, prefixes: dict[int, int] | None = None,
                 bridge_addresses: list[Iface] | None = None, mtu: int = 0,
                 undo: Callable[[Store], None] | None = None) -> None:  # fmt: skip
        self.alloc = alloc
        self.ranges_changed = ranges_changed
        #: Reverts what the chooser recorded besides the pod (new ranges, the ptp network).
        self.undo = undo
        self.bridge = bridge
        self.network_id = network_id
        self.prefixes = prefixes or {}
        self.bridge_addresses = bridge_addresses or []
        self.mtu = mtu


def _on_bridge(conf: PodnetConf, requested: dict[int, str]) -> Chooser:
    """The chooser of a pod of bridge network ``conf.network``: an address of each subnet the
    network has, the bridge's own address as gateway. Code 7 when the network does not exist
    or is not a bridge network; 100 when a subnet is full."""

    def choose(store: Store) -> Choice:
        from podnet.ipam.allocator import allocate_in
        from podnet.networks.config import address, gateway, subnet

        net = store.network(conf.network)
        if net is None or net.type != "bridge":
            what = "does not exist" if net is None else f"is a {net.type} network, not a bridge"
            raise errors.InvalidConfig(
                f"network: {conf.network!r} {what} (podnetctl network create {conf.network})"
            )
        subnets, gateways, prefixes = [], {}, {}
        for family in (4, 6):
            cidr, gw = subnet(net.config, family), gateway(net.config, family)
            if cidr is not None and gw is not None:
                subnets.append(cidr)
                gateways[cidr] = gw
                prefixes[family] = cidr.prefixlen
        if not subnets:
            raise errors.InvalidConfig(f"network: {conf.network!r} has no IPv4 or IPv6 address")
        alloc = allocate_in(store, subnets, requested, gateways=gateways)
        addresses = [a for a in (address(net.config, 4), address(net.config, 6)) if a]
        return Choice(alloc, bridge=net.name, network_id=net.id, prefixes=prefixes,
                      bridge_addresses=addresses, mtu=int(net.config.get("bridge.mtu", "0")))

    return choose


def cmd_add(call: Call) -> dict[str, Any]:
    """ADD (spec "ADD"): allocate, wire the veth, publish hostPorts; returns a 1.x result.

    Errors: 7 bad config, 100 no free address, 101 hostPort held (names the holder), 102
    CNI_IFNAME exists in the netns, 104 kernel failure (the tool's message in ``details``), 11
    database locked, 5 database I/O; with ``ipam``, also the IPAM plugin's own (see
    :func:`_delegated_add`). A failed ADD leaves no row, link or map element.
    """
    from podnet.cni.netconf import parse_requested_ips, parse_requested_mac

    conf = _conf(call)
    if conf.ipam_type:
        return _delegated_add(call, conf)
    requested = parse_requested_ips(call.config, call.args)
    pod_mac = parse_requested_mac(call.config, call.args) or names.random_mac()
    _require_netns(call)

    if conf.network:
        return _add(call, conf, pod_mac, _on_bridge(conf, requested))

    def own_ranges(store: Store) -> Choice:
        from podnet.ipam.allocator import allocate_in

        ranges_before = store.ranges()
        network_before = store.network(conf.name)
        _refuse_node_routes(conf, ranges_before, conf.ranges)
        changed = store.sync_ranges(conf.range_strings, conf.ip_masq, f"network {conf.name}")
        _ptp_network(store, conf, changed)

        def undo(store: Store) -> None:
            if changed or network_before is None:
                store.restore_ranges(ranges_before)
                store.restore_network(conf.name, network_before)

        return Choice(allocate_in(store, conf.ranges, requested), changed, undo=undo)

    return _add(call, conf, pod_mac, own_ranges)


def _refuse_node_routes(conf: StoreConf, known: list[tuple[int, str, str | None, bool]],
                        ranges: list[Network]) -> None:  # fmt: skip
    """Code 7 when a range new to the store overlaps a route of the node that is not this
    store's (:func:`podnet.link.local.foreign_routes`): podnet would put the range's gateway on
    the node and route pods' addresses to veths — hosts the node reaches there (its resolver,
    its default gateway) would be answered by pods. Asks ``ip`` only for a new range."""
    have = {subnet for _, subnet, _, _ in known}
    new = [net for net in ranges if str(net) not in have]
    if not new:
        return
    from podnet.link.local import foreign_routes

    clash = foreign_routes(new, link_alias(conf))
    if clash:
        dst, dev = clash[0]
        raise errors.InvalidConfig(
            f"ranges: {', '.join(str(n) for n in new)} overlaps the node's route to {dst} "
            f"(dev {dev}): pods there would take the traffic of hosts the node already reaches"
        )


def _ptp_network(store: Store, conf: PodnetConf, changed: bool) -> None:
    """The conflist's network as a ``ptp`` network (so forwards can target its pods): created
    or given the new ranges when they change. Code 7 when a bridge network has its name."""
    net = store.network(conf.name)
    if net is not None and net.type != "ptp":
        raise errors.InvalidConfig(
            f"name: {conf.name!r} is a {net.type} network; a conflist for it gives "
            f'"network": "{conf.name}" instead of ranges'
        )
    if net is not None and not changed:
        return
    config = {} if net is None else dict(net.config)
    for family in (4, 6):
        key = f"ipv{family}.ranges"
        have = [c for c in config.get(key, "").split(",") if c]
        have += [str(n) for n in conf.ranges if n.version == family and str(n) not in have]
        if have:
            config[key] = ",".join(have)
    if net is None:
        store.insert_network(conf.name, "ptp", "", config)
    else:
        store.set_network_config(net.id, config)


def _require_netns(call: Call) -> None:
    """Code 4 unless CNI_NETNS is an existing network namespace file at a path ``ip`` can be
    given (:func:`podnet.checked.path`: it is a word of the node's ``ip -batch``)."""
    from podnet import checked
    from podnet.link.netns import exists

    try:
        checked.path(call.netns)
    except checked.BadValue as err:
        raise CNIError(f"CNI_NETNS: {err}", code=errors.INVALID_ENV) from None
    if not os.path.exists(call.netns):
        raise CNIError(f"CNI_NETNS {call.netns} does not exist", code=errors.INVALID_ENV)
    if not exists(call.netns):
        raise CNIError(f"CNI_NETNS {call.netns} is not a network namespace",
                       code=errors.INVALID_ENV)  # fmt: skip


def _add(call: Call, conf: PodnetConf, pod_mac: str, choose: Chooser) -> dict[str, Any]:
    """The body of ADD once the config is valid; ``choose`` picks the addresses inside the write
    transaction (podnet's own ranges, or a delegated IPAM plugin's answer).

    The node-side ``ip`` is started first, so its start-up overlaps the allocation (more tools
    started early only compete for the CPUs of a small node). Under the write lock: the rows are
    written and ``ip`` gets its commands just before the COMMIT (the pair is created while the
    COMMIT's fsync runs; for a bridge port only after it, once the bridge is ensured); a failed
    COMMIT deletes the veth again. After the COMMIT the hostPorts are published in parallel, the
    database connection is closed (its WAL checkpoint overlaps the tools), the pod end is
    configured as soon as the pair exists and waited for after the lock. Any failure after the
    commit undoes the kernel side, then the rows (:func:`_fail_add`).

    A call killed before its COMMIT may leave the veth with no row: the runtime's DEL removes it
    by name, a GC by its alias, and the next ADD given its address takes the host route over
    (``route replace``) — it is never blocked by it (issue 7, item 7).
    """
    from podnet.link import veth

    cid, ifname = call.container_id, call.ifname
    veth.check_ifname(ifname)
    host_if = names.host_ifname(cid, ifname)
    host_tool = veth.prespawn_host()
    try:
        return _add_locked(call, conf, pod_mac, choose, host_if, host_tool)
    finally:
        host_tool.abandon()  # when the ADD failed before the veth was due


def _add_locked(
    call: Call, conf: PodnetConf, pod_mac: str, choose: Chooser, host_if: str,
    host_tool: Spawned,
) -> dict[str, Any]:  # fmt: skip
    """:func:`_add` with the node-side ``ip`` already started."""
    from podnet.firewall import sync
    from podnet.link import veth

    cid, ifname = call.container_id, call.ifname
    creating: Spawned | None = None
    with _open(conf) as store:
        with store.locked():
            try:
                with store.write():
                    _refuse_existing(store, cid)
                    choice = choose(store)
                    alloc = choice.alloc
                    mtu = conf.mtu or choice.mtu or _default_mtu(choice.bridge)
                    addresses = {family: a[0] for family, a in alloc.items()}
                    entries = _mappings_for(conf, cid, addresses)
                    _check_hostports(store, entries)
                    link = veth.PodLink(
                        host_if=host_if, ifname=ifname, netns=call.netns, mtu=mtu,
                        addresses=[(f, a[0], a[1]) for f, a in sorted(alloc.items())],
                        host_mac=names.random_mac(), pod_mac=pod_mac, alias=link_alias(conf),
                        bridge=choice.bridge, prefixes=choice.prefixes,
                    )  # fmt: skip
                    store.insert_pod(
                        container_id=cid, netns=call.netns, interface_name=host_if,
                        interface_mtu=mtu, ifname=ifname, network_name=conf.name,
                        host_mac=link.host_mac, pod_mac=link.pod_mac,
                        ip_address_v4=addresses.get(4), ip_address_v6=addresses.get(6),
                        ip_gateway_v4=alloc[4][1] if 4 in alloc else None,
                        ip_gateway_v6=alloc[6][1] if 6 in alloc else None,
                        name=call.args.get("K8S_POD_NAME"),
                        namespace=call.args.get("K8S_POD_NAMESPACE"),
                        uid=call.args.get("K8S_POD_UID"),
                    )  # fmt: skip
                    store.insert_portmaps(entries)
                    if choice.network_id is not None:
                        store.attach_pod(cid, choice.network_id)
                    if not choice.bridge:
                        # The pair is created while the COMMIT runs. A call killed before
                        # the COMMIT may leave this veth with no row: the runtime's DEL (by
                        # name) or a GC removes it, and the next ADD of its address takes the
                        # host route over (route replace).
                        creating = veth.start_create_pair(link, host_tool)
            except BaseException:
                if creating is not None:  # the COMMIT failed: the veth goes too
                    _fail_veth(creating, host_if, link_alias(conf))
                raise
            pending: sync.Pending | None = None
            configuring: Spawned | None = None
            try:
                if choice.bridge:  # the bridge (recreated if a reboot removed it) comes first
                    _ensure_bridge(store, conf, choice, host_if)
                    creating = veth.start_create_pair(link, host_tool)
                pending = sync.start_add(store, entries, ranges_changed=choice.ranges_changed)
                if not pending.rebuild:
                    store.detach()  # its WAL checkpoint overlaps ip and nft (the lock stays)
                created, creating = creating, None  # reaped by finish_create_pair
                assert created is not None
                veth.finish_create_pair(link, created,
                                        stale=lambda dev: not store.interface_used(dev))
                configuring = veth.start_configure_pod(link)
                done, pending = pending, None
                sync.finish_add(store, done, call.log.warn)
            except BaseException as err:
                # Nothing else ran since the commit (the lock is held), so the chooser's own
                # records go too; the hostPort elements only if nft may have published them.
                maybe = _settle_nft(pending, entries, err)
                _fail_add(store, call, link.host_if, maybe, err, creating or configuring,
                          choice.undo)  # fmt: skip
                raise
        try:
            veth.finish_configure_pod(link, configuring)
        except BaseException as err:
            with store.locked():
                _fail_add(store, call, link.host_if, entries, err)
            raise
    _flush_udp(call, entries)
    return _result(link, alloc)


def _fail_veth(creating: Spawned, host_if: str, alias: str) -> None:
    """Remove the veth of an ADD whose COMMIT failed, once its ``ip`` is done; failures here
    are not reported (the COMMIT's error is the answer; a GC removes a veth left over)."""
    from podnet.link import veth

    try:
        creating.wait()
        veth.delete_host(host_if, owner=alias)
    except CNIError:
        pass


def _settle_nft(
    pending: Pending | None, entries: list[PortMapping], err: BaseException
) -> list[PortMapping]:
    """After a failed ADD step: which hostPort ``entries`` the kernel may now hold. An nft run
    still in flight (``pending``: the veth failed first) is waited for — published only if it
    succeeded; a failed nft run changed nothing (one transaction); one killed at its deadline
    may have committed before it hung, so the kernel is asked."""
    from podnet import proc
    from podnet.firewall import nft

    timed_out = isinstance(err, proc.ToolTimeout)
    if pending is not None and pending.spawned is not None and not pending.rebuild:
        try:
            if nft.outcome(pending.spawned).ok and not timed_out:
                return entries
        except CNIError:
            timed_out = True
    return _maybe_published(entries) if timed_out else []


def _maybe_published(entries: list[PortMapping]) -> list[PortMapping]:
    """The entries an nft run killed at its deadline may have published: those the kernel's
    maps now hold, or all of them when nft cannot even list them."""
    from podnet.firewall import sync

    try:
        return sync.published(entries)
    except CNIError:
        return entries


def _default_mtu(bridge_name: str) -> int:
    """Bytes: the bridge's MTU for a pod of a bridge network, else the default-route link's."""
    from podnet.link import mtu

    if bridge_name:
        try:
            return mtu.link_mtu(bridge_name)
        except OSError:
            return mtu.DEFAULT_MTU
    return mtu.default_mtu()


def _ensure_bridge(store: Store, conf: StoreConf, choice: Choice, host_if: str) -> None:
    """A pod joins a bridge that a reboot (or a cleanup) removed: bring it back first, with the
    network's addresses, and put the other pods of the network back on it — their host ends
    were released when the bridge went (``podnetctl network restore`` does the same for every
    network). KernelError (104) when a link of the bridge's name is not podnet's
    (:class:`podnet.link.bridge.NotOurs`)."""
    from podnet.link import bridge

    owner = link_alias(conf)
    if bridge.require_ours(choice.bridge, owner):
        return
    bridge.create(choice.bridge, choice.bridge_addresses, choice.mtu, owner=owner)
    assert choice.network_id is not None
    for _, _, other in store.network_pods(choice.network_id):
        if other != host_if and bridge.alias_of(other) == owner:
            bridge.attach(other, choice.bridge, owner=owner)


def _fail_add(store: Store, call: Call, host_if: str, entries: list[PortMapping],
              err: BaseException, creating: Any = None,
              undo: Callable[[Store], None] | None = None) -> None:  # fmt: skip
    """Undo an ADD whose rows were committed (under the write lock): the veth, the hostPort
    elements ``entries`` (those that may be in the kernel), then the rows. A failure here is
    added to ``err``'s details, never raised: the original error is the answer. Should the
    elements stay (nft unusable), the rows stay with them, and the runtime's DEL after the
    failed ADD retries."""
    from podnet.firewall import sync
    from podnet.link import veth

    notes = []
    if creating is not None:
        try:
            creating.wait()  # let ip finish before the veth is deleted
        except CNIError:
            pass
    try:
        veth.delete_host(host_if, owner=names.owner_alias(os.path.dirname(store.path)))
    except CNIError as failed:
        notes.append(f"deleting {host_if}: {failed.msg} {failed.details}".strip())
    try:
        sync.delete(store, entries, call.container_id, call.log.warn)
        with store.write():
            store.delete_pod(call.container_id)
            if undo is not None:
                undo(store)
    except CNIError as failed:
        notes.append(f"removing the rows and hostPorts: {failed.msg} {failed.details}".strip())
    if notes:
        call.log.warn(f"undoing the failed ADD of {call.container_id}: " + "; ".join(notes))
        if isinstance(err, CNIError):
            note = "undoing the ADD also failed: " + "; ".join(notes)
            err.details = f"{err.details}; {note}" if err.details else note


def _refuse_existing(store: Store, container_id: str) -> None:
    existing = store.get_pod(container_id)
    if existing is not None:
        raise errors.InterfaceExists(
            f"container {container_id} already has a podnet attachment ({existing.ifname} in "
            f"{existing.netns}); DEL it first"
        )


def _delegated_add(call: Call, conf: PodnetConf) -> dict[str, Any]:
    """ADD through the IPAM plugin ``ipam.type``: its ADD first, then :func:`_add` with the
    addresses and gateways it returned. When its ADD or anything after it fails, its DEL runs
    (spec "Plugin Delegation") and the first error is reported (a failed DEL is added to its
    details). An attachment podnet already has is refused (102) before the IPAM plugin is called,
    so a repeated ADD cannot make it release the live allocation.

    The IPAM plugin's error passes through with its code. Code 7 when it returns no address,
    more than one per family, no usable gateway, or an address this database already gives
    another attachment (its ranges overlap podnet's); 4 when CNI_NETNS does not exist.
    """
    from podnet.cni.netconf import parse_requested_mac
    from podnet.ipam import delegate

    pod_mac = parse_requested_mac(call.config, call.args) or names.random_mac()
    _require_netns(call)
    with _open(conf) as store:
        _refuse_existing(store, call.container_id)
    try:
        answer = delegate.run(call, conf.ipam_type)
        assert answer is not None
        alloc, dns = delegate.parse_result(answer, conf.ipam_type)
        conf.check_mtu(set(alloc))

        def delegated(store: Store) -> Choice:
            _take_over(store, call, conf, alloc)
            _refuse_node_routes(conf, store.ranges(), [net for _, _, net in alloc.values()])
            subnets = sorted({str(net) for _, _, net in alloc.values()})
            description = f"network {conf.name} (ipam {conf.ipam_type})"
            return Choice(alloc, store.sync_ranges(subnets, conf.ip_masq, description))

        result = _add(call, conf, pod_mac, delegated)
    except BaseException as err:
        try:
            delegate.run(call, conf.ipam_type, "DEL")
        except CNIError as undo:
            if isinstance(err, CNIError):
                note = f"releasing the {conf.ipam_type} allocation failed too: {undo.msg}"
                err.details = f"{err.details}; {note}" if err.details else note
        raise
    result["dns"] = dns
    return result


def _take_over(store: Store, call: Call, conf: PodnetConf, alloc: Allocation) -> None:
    """Make room for the delegated addresses in this database (inside ADD's transaction).

    An address podnet-ipam just allocated for this very attachment on this database (same
    container, ifname and network) is taken over: its row is replaced by podnet's, in the same
    transaction, so the address is never free meanwhile and the IPAM DEL that podnet's DEL sends
    later finds nothing left to do. Any other holder means two allocators hand out one range:
    code 7 naming the holder.
    """
    from podnet.store.db import OWNER_IPAM, ipam_key

    mine = ipam_key(call.container_id, call.ifname, conf.name)
    for family, (_, gateway, _) in sorted(alloc.items()):
        held = store.address_holder(family, gateway)
        if held is not None:  # it would go on the node side of this pod's veth
            raise errors.InvalidConfig(
                f"gateway {gateway} from IPAM plugin {conf.ipam_type} is the address of "
                f"{held.container_id} in {store.path}"
            )
    for family, (addr, _, _) in sorted(alloc.items()):
        holder = store.address_holder(family, addr)
        if holder is None:
            continue
        if holder.owner == OWNER_IPAM and holder.container_id == mine:
            store.delete_pod(mine)
            continue
        who = (f"podnet-ipam allocation {holder.container_id}" if holder.owner == OWNER_IPAM
               else f"container {holder.container_id}")  # fmt: skip
        raise errors.InvalidConfig(
            f"address {addr} from IPAM plugin {conf.ipam_type} is already held by {who} in "
            f"{store.path}: the IPAM plugin's ranges overlap addresses this database gives out"
        )


def link_alias(conf: StoreConf) -> str:
    """The alias podnet sets on its host veths and bridges (:func:`names.owner_alias`)."""
    return names.owner_alias(conf.data_dir)


def _result(link: Any, alloc: dict[int, tuple[str, str, Any]]) -> dict[str, Any]:
    """podnet's 1.x result: both veth ends, ``P/32``/``/128`` per family on the pod end (index
    1), a default route per family through its gateway, empty ``dns``."""
    ips, routes = [], []
    for family, (addr, gw, _net) in sorted(alloc.items()):
        plen = link.prefixes.get(family) or (32 if family == 4 else 128)
        ips.append({"address": f"{addr}/{plen}", "gateway": gw, "interface": 1})
        routes.append({"dst": "0.0.0.0/0" if family == 4 else "::/0", "gw": gw})
    return {
        "cniVersion": version.CURRENT_VERSION,
        "interfaces": [
            {"name": link.host_if, "mac": link.host_mac, "mtu": link.mtu},
            {"name": link.ifname, "mac": link.pod_mac, "mtu": link.mtu, "sandbox": link.netns},
        ],
        "ips": ips,
        "routes": routes,
        "dns": {},
    }


def result_from_pod(pod: Pod) -> dict[str, Any]:
    """The ADD result of a stored pod (for CHECK and state tools)."""
    from podnet.link.veth import PodLink

    alloc: dict[int, tuple[str, str, Any]] = {}
    if pod.ip_address_v4:
        alloc[4] = (str(pod.ip_address_v4), str(pod.ip_gateway_v4), None)
    if pod.ip_address_v6:
        alloc[6] = (str(pod.ip_address_v6), str(pod.ip_gateway_v6), None)
    link = PodLink(host_if=str(pod.interface_name), ifname=str(pod.ifname), netns=str(pod.netns),
                   mtu=int(pod.interface_mtu or 0), addresses=[], host_mac=str(pod.host_mac),
                   pod_mac=str(pod.pod_mac))  # fmt: skip
    return _result(link, alloc)


# -- DEL ---------------------------------------------------------------------------------------
def cmd_del(call: Call) -> None:
    """DEL (spec "DEL"): release everything of (CNI_CONTAINERID, CNI_IFNAME, network);
    idempotent. Only that attachment: a DEL naming another ifname or another network ``name``
    of the same container (an ADD of it was refused with 102) leaves podnet's attachment as it
    is and succeeds; a host veth of the derived name with no row is deleted only when it
    carries this store's alias or none (a call killed before its COMMIT left it).

    Works with an empty, stale or deleted CNI_NETNS: the host veth name is derived from the
    container ID and ifname, and the address is released from the store regardless. Reads only
    the config keys it uses (:class:`StoreConf`), so it is not refused over, say, a range.
    Everything happens inside the write transaction, so a DEL refused for the lock (11) changes
    nothing; the veth deletion (an RCU grace period, ~20 ms) starts first and overlaps the rest,
    and the hostPort elements go before the rows commit (:mod:`podnet.firewall.sync`).
    With ``ipam``, the IPAM plugin's DEL starts once podnet's row is gone (so the address is not
    handed out while still recorded here), overlaps the veth deletion, and its error (code
    passed through) is this DEL's. A failed conntrack flush is only logged.
    """
    from podnet.firewall import sync
    from podnet.link import veth
    from podnet.plugins.podnet_conf import StoreConf

    conf = StoreConf(call.config)
    host_if = names.host_ifname(call.container_id, call.ifname)
    entries: list[PortMapping] = []
    deleting = veth.prespawn_delete()  # started now, given the name once the lock is ours
    ipam: Any = None
    try:
        with _open(conf) as store, store.write():
            # Only once the write lock is ours: a DEL refused with 11 changes nothing.
            pod = store.get_pod(call.container_id)
            if pod is not None and _names_this(pod, call, conf):
                veth.start_delete_host(host_if, deleting)
                entries = sync.renderable(store.portmaps(call.container_id), call.log.warn)
                sync.delete(store, entries, call.container_id, call.log.warn)
                store.delete_pod(call.container_id)
            elif pod is None and veth.alias_of(host_if) in ("", link_alias(conf)):
                # no row: a call killed before its COMMIT may have left this veth behind —
                # with this store's alias, or none yet (killed between 'link add' and 'alias')
                veth.start_delete_host(host_if, deleting)
        if conf.ipam_type:
            from podnet.ipam import delegate

            ipam = delegate.start(call, conf.ipam_type)
    finally:
        try:
            if deleting.deferred:
                deleting.abandon()
            else:
                veth.finish_delete(deleting, host_if)
        finally:
            if ipam is not None:
                delegate.finish(ipam)
    _flush_udp(call, entries)


def _names_this(pod: Pod, call: Call, conf: StoreConf) -> bool:
    """Whether ``pod`` (the row of CNI_CONTAINERID) is the attachment this call names: the
    same CNI_IFNAME and network ``name`` (rows of an older podnet may lack either)."""
    from podnet.store.db import OWNER_PODNET

    return (pod.ifname in (None, call.ifname) and pod.network_name in (None, conf.name)
            and pod.owner in (None, OWNER_PODNET))  # fmt: skip


def _flush_udp(call: Call, entries: list[PortMapping]) -> None:
    """Flush stale UDP conntrack entries of the mapped ports; a failure is logged only (as the
    reference portmap does: the mapping works, old flows may linger)."""
    ports = [(e.family, e.host_port) for e in entries if e.protocol == "udp"]
    if ports:
        from podnet.firewall.conntrack import flush_udp_ports

        flush_udp_ports(ports, call.log.warn)


# -- CHECK -------------------------------------------------------------------------------------
def cmd_check(call: Call) -> None:
    """CHECK (spec "CHECK"): the row, the pod interface, routes, host route and hostPort map
    elements must all be as ADD left them; the first difference → code 103 naming it. With
    ``ipam``, the IPAM plugin's CHECK runs first and its error passes through."""
    from podnet.cni.result import prev_result
    from podnet.plugins import podnet_check

    conf = _conf(call)
    if prev_result(call.config) is None:
        raise errors.InvalidConfig("prevResult: required for CHECK (the result of the ADD chain)")
    _require_netns(call)
    if conf.ipam_type:
        from podnet.ipam import delegate

        delegate.run(call, conf.ipam_type)
    with _open(conf) as store:
        pod = store.get_pod(call.container_id)
        if pod is None or pod.ifname != call.ifname or not _names_this(pod, call, conf):
            raise CNIError(
                f"container {call.container_id} has no podnet attachment {call.ifname} in "
                f"network {conf.name}",
                code=errors.UNKNOWN_CONTAINER,
            )
        bridge, prefixes = "", {}
        if pod.network_id is not None:
            from podnet.networks.config import subnet

            net = next((n for n in store.networks() if n.id == pod.network_id), None)
            if net is not None:
                bridge = net.name
                for family in (4, 6):
                    cidr = subnet(net.config, family)
                    if cidr is not None:
                        prefixes[family] = cidr.prefixlen
        podnet_check.check(call, pod, store.portmaps(call.container_id), bridge, prefixes)


# -- GC and STATUS -------------------------------------------------------------------------------
def cmd_gc(call: Call) -> None:
    """GC (spec 1.1 "GC"): remove every attachment not in ``cni.dev/valid-attachments`` — rows,
    host veths (also podnet veths with no row) and hostPort rules. Rows of other networks, of an
    unknown network (seed 001's, without an attachment row) and of podnet-ipam sharing the
    database are kept. With ``ipam``, the IPAM plugin's GC runs too.
    Keeps going on errors and reports them together at the end."""
    from podnet.link import veth
    from podnet.plugins.podnet_conf import StoreConf
    from podnet.store.db import OWNER_PODNET

    conf = StoreConf(call.config)
    from podnet.cni.netconf import parse_valid_attachments

    valid = parse_valid_attachments(call.config)
    failures: list[str] = []
    from podnet.firewall import sync

    with _open(conf) as store, store.locked():
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
            sync.rebuild(store, without=stale, warn=call.log.warn)
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
    if conf.ipam_type:
        from podnet.ipam import delegate

        try:
            delegate.run(call, conf.ipam_type)
        except CNIError as err:
            failures.append(f"{conf.ipam_type} GC: {err.msg}")
    if failures:
        raise CNIError("GC finished with errors", "; ".join(failures))


def cmd_status(call: Call) -> None:
    """STATUS (spec 1.1): code 50 when some family's ranges have no free address, or when the
    tools or the database are unusable; exit 0 (nothing printed) when ADD can be served. With
    ``ipam``, the IPAM plugin's STATUS decides about addresses (its error passes through)."""
    from podnet import proc

    conf = _conf(call)
    for tool in ("ip", "nft"):
        try:
            proc.which(tool)
        except CNIError as err:
            raise errors.Unavailable(err.msg, err.details) from None
    from podnet.ipam.status import check_ranges

    check_ranges(conf.data_dir, conf.busy_timeout, conf.ranges)
    if conf.ipam_type:
        from podnet.ipam import delegate

        delegate.run(call, conf.ipam_type)


HANDLERS = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check, "GC": cmd_gc, "STATUS": cmd_status}


def main() -> None:
    """Console script ``podnet``: one CNI call per process (:func:`podnet.cni.skel.main`)."""
    skel.main(PLUGIN, HANDLERS)
