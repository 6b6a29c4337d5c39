"""ADD, DEL and CHECK of a pod attachment (GC: :func:`podnet.drivers.teardown.gc`), written once
for every podnet driver; a driver adds its own steps through its hooks
(:class:`podnet.drivers.base.Driver`), never a verb of its own.

ADD runs its steps on an explicit undo stack (:class:`podnet.undo.Undo`): what the driver
prepared (an IPAM plugin's allocation, an OVN logical port), the rows (with what the chooser
recorded), the veth, the hostPort elements, the host end's wiring each register their own undo
as they are done, so a failure at step N undoes N−1 … 1 in order and the original error is the
answer (CNI SPEC "ADD": a failed ADD leaves nothing behind). The processes it overlaps are one
:class:`podnet.drivers.inflight.InFlight`.
Every tool starts through :class:`podnet.proc.Spawned`, the one process seam
a test replaces (tests/unit/drivers/test_pods.py)."""

from __future__ import annotations

from podnet import errors
from podnet.drivers.base import (
    Driver,
    link_alias,
    open_store,
    refuse_existing,
    require_netns,
    unknown_network,
)
from podnet.drivers.inflight import InFlight
from podnet.drivers.teardown import flush_udp
from podnet.errors import CNIError
from podnet.link import names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.drivers.base import Choice
    from podnet.link.veth import PodLink
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow
    from podnet.undo import Undo
    from podnet.values import PortMapping


def attach(driver: Driver, call: Call, conf: PodnetConf, net: NetworkRow | None = None,
           store: Store | None = None, seen: tuple[int, int] | None = None) -> dict[str, Any]:
    """ADD (spec "ADD") of ``driver``'s pod (``net``: the conflist's network, loaded once by
    the caller from ``store``, then at :meth:`Store.version` ``seen``; without a store, one is
    opened): prepare, allocate and record, wire the veth, publish hostPorts, the driver's wiring
    of the host end; a 1.x result.

    Errors: 7 bad config or a type that holds no pods, 100 no free address, 101 hostPort held
    (names the holder), 102 CNI_IFNAME exists in the netns, 104 kernel failure, 11 database
    locked, 5 I/O; a driver's own. A failed ADD leaves no row, link or map element."""
    if not driver.takes_pods:
        raise driver.no_pods(conf)
    from podnet.cni.netconf import parse_requested_ips, parse_requested_mac
    from podnet.link import veth
    from podnet.undo import Undo

    ask = driver.requested_ips and not conf.ipam_type
    requested = parse_requested_ips(call.config, call.args) if ask else {}
    pod_mac = parse_requested_mac(call.config, call.args) or names.random_mac()
    require_netns(call)
    veth.check_ifname(call.ifname)
    undo = Undo()
    flight = InFlight(veth.prespawn_host() if driver.early_ip else None)
    add = AddSteps(driver, call, conf, net, undo, flight, pod_mac, requested)
    add.seen = seen
    own: Store | None = None  # the store opened here, closed before the undo runs
    try:
        if store is None:
            store = own = open_store(conf)
        try:
            driver.prepare(call, conf, store, undo, net)
            if flight.host_tool is None:
                flight.host_tool = veth.prespawn_host()
            return add.run(store)
        finally:
            if own is not None:
                own.close()
    except BaseException as err:
        undo.run(err, call.log.warn)
        raise
    finally:
        if flight.host_tool is not None:
            flight.host_tool.abandon()  # when the ADD failed before the veth was due


class AddSteps:
    """One ADD as a sequence of steps (:func:`attach`), each registering its undo on ``undo``.

    Under the write lock: the rows are written and the node-side ``ip`` gets the pair's
    commands just before the COMMIT (for a bridge port only after it, once the bridge is
    ensured). After the COMMIT the hostPorts are published in parallel, the database connection
    is closed (its WAL checkpoint overlaps the tools), and the pod end is configured as soon as
    the pair exists. After the lock: the pod end is waited for, then the driver's
    :meth:`~podnet.drivers.base.Driver.after_pair`."""

    def __init__(self, driver: Driver, call: Call, conf: PodnetConf, net: NetworkRow | None,
                 undo: Undo, flight: InFlight, pod_mac: str,
                 requested: dict[int, str]) -> None:  # fmt: skip
        self.driver, self.call, self.conf, self.net = driver, call, conf, net
        self.undo, self.flight = undo, flight
        self.pod_mac, self.requested = pod_mac, requested
        self.host_if = names.host_ifname(call.container_id, call.ifname)
        self.alias = link_alias(conf)
        self.entries: list[PortMapping] = []
        self.locked = True  # whether the chooser's records may still be reverted
        self.store: Store  # set by run()
        #: :meth:`Store.version` when ``net`` was read on this store (None: re-read it anyway)
        self.seen: tuple[int, int] | None = None

    def run(self, store: Store) -> dict[str, Any]:
        from podnet.cni.result import attachment

        self.store = store
        with store.locked():
            link, choice = self.commit()
            self.wire(link, choice)
        self.locked = False
        try:
            self.flight.wait_configure(link)
            self.driver.after_pair(self.call, self.conf, link, choice, self.undo)
        except BaseException as err:
            with store.locked():
                self.undo.run(err, self.call.log.warn)
            raise
        flush_udp(self.call, self.entries)
        return attachment(link.host_if, link.host_mac, link.ifname, link.pod_mac, link.netns,
                          link.mtu, choice.alloc, choice.prefixes)  # fmt: skip

    def commit(self) -> tuple[PodLink, Choice]:
        """The rows, in one write transaction; the pair started before the COMMIT for a routed
        pod. Undo registered: the veth (if started), then the rows."""
        from podnet.link import veth
        from podnet.store.pods import NewPod

        call, conf, store = self.call, self.conf, self.store
        with store.write():
            refuse_existing(store, call.container_id)
            self._current_network()
            choice = self.driver.choose(call, conf, store, self.requested, self.net)
            alloc = choice.alloc
            mtu = self.driver.pod_mtu(conf, choice) or self._node_mtu()
            addresses = {family: a[0] for family, a in alloc.items()}
            self.entries = mappings_for(conf, call.container_id, addresses)
            check_hostports(store, self.entries)
            link = veth.PodLink(
                host_if=self.host_if, ifname=call.ifname, netns=call.netns, mtu=mtu,
                addresses=[(f, a[0], a[1]) for f, a in sorted(alloc.items())],
                host_mac=names.random_mac(), pod_mac=choice.pod_mac or self.pod_mac,
                alias=self.alias, bridge=choice.bridge, prefixes=choice.prefixes, ovs=choice.ovs,
            )  # fmt: skip
            store.pods.add(NewPod(
                container_id=call.container_id, netns=call.netns, interface_name=self.host_if,
                interface_mtu=mtu, ifname=call.ifname, network_name=conf.name,
                host_mac=link.host_mac, pod_mac=link.pod_mac, ovn_port=choice.port,
                ip_address_v4=addresses.get(4), ip_address_v6=addresses.get(6),
                ip_gateway_v4=alloc[4][1] if 4 in alloc else None,
                ip_gateway_v6=alloc[6][1] if 6 in alloc else None,
                name=call.args.get("K8S_POD_NAME"), namespace=call.args.get("K8S_POD_NAMESPACE"),
                uid=call.args.get("K8S_POD_UID"),
            ))  # fmt: skip
            store.pods.insert_portmaps(self.entries)
            if choice.network_id is not None:
                store.networks.attach_pod(call.container_id, choice.network_id)
            if self.driver.pair_before_commit:
                # created while the COMMIT runs; a failed COMMIT deletes it again
                self._start_pair(link)
        self.undo.push("removing the rows and hostPorts", lambda: self._delete_rows(choice))
        return link, choice

    def _current_network(self) -> None:
        """Inside the write transaction: the network as it is now. The plugin read it before the
        lock (to pick the driver); a ``network set`` or ``network delete`` that committed since
        is seen here (its subnets and bridge, or 7 as for a network that never existed)."""
        if self.net is None or (self.seen is not None and self.store.version() == self.seen):
            return  # no other connection has committed since the caller read it
        row = self.store.networks.get(self.net.name)
        if row is None or row.type != self.net.type:
            raise unknown_network(self.conf)
        self.net = row

    def wire(self, link: PodLink, choice: Choice) -> None:
        """After the COMMIT, under the lock: the pair (a bridge port: once the bridge is
        there), the hostPort elements and the pod end's configuration, started together."""
        store, flight = self.store, self.flight
        if not self.driver.pair_before_commit:
            self.driver.before_pair(self.call, self.conf, store, choice, self.host_if)
            self._start_pair(link)
        if flight.start_nft(store, self.entries, ranges_changed=choice.ranges_changed,
                            table=self.driver.checks_table):  # fmt: skip
            store.detach()  # its WAL checkpoint overlaps ip and nft (the lock stays)
        flight.wait_pair(link, store)
        flight.start_configure(link, tx_off=choice.tx_off)
        flight.wait_nft(store, self.entries, self.call)

    def _start_pair(self, link: PodLink) -> None:
        self.flight.start_pair(link)
        self.undo.push(f"deleting {self.host_if}",
                       lambda: self.flight.undo_pair(self.host_if, self.alias))  # fmt: skip

    def _node_mtu(self) -> int:
        """Bytes: the MTU of the link holding the node's default route (cni-kindnet's choice),
        asked of the node-side ``ip`` already started (else with SIOCGIFMTU); 1500 without a
        default route or when the link is gone."""
        from podnet.link import mtu

        ifname = mtu.default_route_ifname()
        if ifname is None:
            return mtu.DEFAULT_MTU
        found = self.flight.ask_mtu(ifname)
        if found is None:
            try:
                found = mtu.link_mtu(ifname)  # SIOCGIFMTU, at the cost of ctypes' import
            except OSError:
                return mtu.DEFAULT_MTU
        return found

    def _delete_rows(self, choice: Choice) -> None:
        """Undo of the rows: the hostPort elements the kernel may hold first (should they stay,
        the rows stay with them and the runtime's DEL retries), then the pod's rows and — while
        the lock was never let go — what the chooser recorded."""
        from podnet import reconcile

        maybe = self.flight.held(self.entries)
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


def detach(driver: Driver, call: Call, conf: StoreConf, network: str | None) -> None:
    """DEL (spec "DEL") of ``driver``'s pod: :func:`podnet.drivers.teardown.detach`, with the
    driver's :meth:`~podnet.drivers.base.Driver.release` after the rows; nothing for a type
    that holds no pods (no ADD of it can have succeeded)."""
    if not driver.takes_pods:
        return
    from podnet.drivers import teardown

    teardown.detach(call, conf, lambda c, k, store, pod: driver.release(c, k, store, pod, network))


def check(driver: Driver, call: Call, conf: PodnetConf, net: NetworkRow | None = None) -> None:
    """CHECK (spec "CHECK") of ``driver``'s pod (``net``: the conflist's network): the
    driver's :meth:`~podnet.drivers.base.Driver.check_first`, the row, then
    :meth:`~podnet.drivers.base.Driver.check_attachment`; the first difference → 103 naming it.
    7 without ``prevResult`` or for a type that holds no pods; 4 for a bad CNI_NETNS; 3 when
    the container has no such attachment."""
    if not driver.takes_pods:
        raise driver.no_pods(conf)
    from podnet.cni.result import prev_result
    from podnet.drivers.teardown import names_this

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
        driver.check_attachment(call, conf, store, pod, net)


class VethDriver(Driver):
    """A driver whose pods get a veth pair addressed by podnet (``ptp``, ``bridge``,
    ``delegated``, and drivers built on them): this module's verbs run over its hooks."""

    takes_pods = True
