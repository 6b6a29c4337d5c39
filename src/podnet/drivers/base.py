"""The network driver interface and the pod steps every podnet driver shares (issue 15, item 1).

A driver answers for one network type. Pod side (the ``podnet`` plugin's verbs):

- :meth:`Driver.choose` picks the pod's addresses inside ADD's write transaction and says how
  the link is wired (:class:`Choice`); :meth:`Driver.before_pair` prepares the node for the pair
  (a bridge driver brings its bridge back); :meth:`Driver.prepare`/:meth:`Driver.release` run
  around the whole ADD/DEL (a delegated IPAM plugin's ADD and DEL);
- :meth:`Driver.attach` (ADD), :meth:`Driver.detach` (DEL), :meth:`Driver.check` (CHECK),
  :meth:`Driver.gc` (GC) and :meth:`Driver.status` (STATUS) are written once here on top of
  those hooks.

Network side (``podnetctl network`` and the API, through :mod:`podnet.drivers.manager`):
:meth:`Driver.validate`, :meth:`Driver.create`, :meth:`Driver.restore`, :meth:`Driver.delete`,
and :meth:`Driver.forward_targets` (which subnets a forward may target: the forward backend is
podnet's nft table, shared by every driver, :mod:`podnet.reconcile`).

ADD runs its steps on an explicit undo stack (:class:`podnet.undo.Undo`): the rows (with what
the chooser recorded), the veth, the hostPort elements each register their own undo as they are
done, so a failure at step N undoes N−1 … 1 in order, under the write lock, and the original
error is the answer. A call killed before its COMMIT may leave the veth with no row: the
runtime's DEL removes it by name, a GC by its alias, and the next ADD given its address takes the
host route over (``route replace``) — it is never blocked by it (issue 7, item 7).
"""

from __future__ import annotations

import os

from podnet import errors
from podnet.errors import CNIError
from podnet.link import names
from podnet.proc import ToolTimeout
from podnet.undo import Undo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from podnet.checked import Iface, Net
    from podnet.cni.skel import Call
    from podnet.link.veth import PodLink
    from podnet.plugins.podnet_conf import PodnetConf, StoreConf
    from podnet.proc import Spawned
    from podnet.reconcile import Pending
    from podnet.store import Store
    from podnet.store.db import Pod
    from podnet.store.networks import NetworkRow
    from podnet.values import PortMapping

    #: ``{family: (address, gateway, range)}``, as :func:`podnet.ipam.allocator.allocate_in` gives.
    Allocation = dict[int, tuple[str, str, Net]]


class Choice:
    """What :meth:`Driver.choose` decided inside the write transaction: ``alloc`` (``{family:
    (address, gateway, range)}``), ``ranges_changed`` (the table must be rebuilt), ``undo``
    (reverts what the chooser recorded besides the pod: new ranges, a network), and for a pod
    on a bridge: ``bridge`` (its name), ``network_id``, ``prefixes`` (family → subnet prefix
    length), ``bridge_addresses`` (the bridge's own interfaces) and ``mtu`` (bytes; 0 unset)."""

    __slots__ = ("alloc", "ranges_changed", "bridge", "network_id", "prefixes",
                 "bridge_addresses", "mtu", "undo")  # fmt: skip

    def __init__(self, alloc: Allocation, ranges_changed: bool = False, *, bridge: str = "",
                 network_id: int | None = None, prefixes: dict[int, int] | None = None,
                 bridge_addresses: list[Iface] | None = None, mtu: int = 0,
                 undo: Callable[[Store], None] | None = None) -> None:  # fmt: skip
        self.alloc = alloc
        self.ranges_changed = ranges_changed
        self.undo = undo
        self.bridge = bridge
        self.network_id = network_id
        self.prefixes = prefixes or {}
        self.bridge_addresses = bridge_addresses or []
        self.mtu = mtu


def open_store(conf: StoreConf) -> Store:
    """The store for this call; close it (``with``) before the process ends.

    Closing the last connection checkpoints the WAL and removes it (~1 ms). Leaving it open and
    exiting was measured to be worse: each new process then rebuilds the WAL index from the
    whole file, and the WAL, never rewound, grew without bound (15 MB after 600 calls)."""
    from podnet.store import open_store as open_

    return open_(conf.data_dir, busy_timeout=conf.busy_timeout)


def link_alias(conf: StoreConf) -> str:
    """The alias podnet sets on its host veths and bridges (:func:`names.owner_alias`)."""
    return names.owner_alias(conf.data_dir)


class Driver:
    """A network type. Subclasses set :attr:`type` and override the hooks they need; the
    defaults are those of a routed (``ptp``) pod with no network of its own."""

    #: The network type this driver answers for (``networks.type``).
    type = ""
    #: Whether the veth pair is created while ADD's COMMIT runs (a routed pod) or only after it,
    #: once :meth:`before_pair` made the node ready (a bridge port).
    pair_before_commit = True

    # -- network side --------------------------------------------------------------------
    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        """The config of network ``name`` checked, in canonical form; NetworkError (400)
        naming the key otherwise. Default: this type has no networks of its own."""
        from podnet.networks.errors import NetworkError

        raise NetworkError(f"Networks of type {self.type!r} cannot be created here", 400)

    def create(self, store: Store, row: NetworkRow, owner: str) -> None:
        """Make network ``row`` exist on the node (links, addresses); KernelError (104)."""

    def restore(self, store: Store, row: NetworkRow, owner: str) -> list[str]:
        """Bring network ``row`` back after a reboot or a cleanup; what was done, one line each."""
        return []

    def delete(self, store: Store, row: NetworkRow, owner: str) -> None:
        """Remove what :meth:`create` made; what is not podnet's (``owner``) stays."""

    def forward_targets(self, row: NetworkRow) -> list[Net]:
        """The subnets a forward of network ``row`` may target."""
        from podnet import checked

        return [checked.network(c) for key in ("ipv4.ranges", "ipv6.ranges")
                for c in row.config.get(key, "").split(",") if c]  # fmt: skip

    # -- pod side: hooks -----------------------------------------------------------------
    def prepare(self, call: Call, conf: PodnetConf, store: Store, undo: Undo) -> None:
        """Before ADD's transaction (outside the write lock); push undos for what it does."""

    def choose(self, call: Call, conf: PodnetConf, store: Store,
               requested: dict[int, str]) -> Choice:  # fmt: skip
        """The pod's addresses (``requested``: CNI_ARGS ``IP=``/runtimeConfig ``ips``, family →
        address), inside ADD's write transaction; 7 bad config, 100 exhausted."""
        raise NotImplementedError

    def before_pair(self, call: Call, conf: PodnetConf, store: Store, choice: Choice,
                    host_if: str) -> None:  # fmt: skip
        """After the COMMIT, before the pair is created when :attr:`pair_before_commit` is
        False (a bridge port needs its bridge)."""

    def default_mtu(self, choice: Choice) -> int:
        """Bytes: the pod's MTU when neither the NetConf nor the network sets one."""
        from podnet.link import mtu

        return mtu.default_mtu()

    def release(self, call: Call, conf: StoreConf) -> Callable[[], None] | None:
        """After DEL released the row: start releasing what :meth:`prepare` took, return the
        wait (its error is DEL's)."""
        return None

    def check_first(self, call: Call, conf: StoreConf) -> None:
        """CHECK's first step (a delegated IPAM plugin's CHECK)."""

    def gc_also(self, call: Call, conf: StoreConf, failures: list[str]) -> None:
        """GC's last step; failures appended."""

    def status_also(self, call: Call, conf: PodnetConf) -> None:
        """STATUS's last step."""
        from podnet.ipam.status import check_ranges

        check_ranges(conf.data_dir, conf.busy_timeout, conf.ranges)

    def prefixes(self, store: Store, pod: Pod) -> tuple[str, dict[int, int]]:
        """The bridge and the subnet prefix lengths of a stored pod (CHECK): ("", {}) routed."""
        return "", {}

    # -- pod side: the verbs --------------------------------------------------------------
    def attach(self, call: Call, conf: PodnetConf) -> dict[str, Any]:
        """ADD (spec "ADD"): allocate, wire the veth, publish hostPorts; a 1.x result.

        Errors: 7 bad config, 100 no free address, 101 hostPort held (names the holder), 102
        CNI_IFNAME exists in the netns, 104 kernel failure, 11 database locked, 5 I/O; a
        driver's own. A failed ADD leaves no row, link or map element (its undo stack)."""
        from podnet.cni.netconf import parse_requested_ips, parse_requested_mac
        from podnet.link import veth

        requested = {} if conf.ipam_type else parse_requested_ips(call.config, call.args)
        pod_mac = parse_requested_mac(call.config, call.args) or names.random_mac()
        require_netns(call)
        veth.check_ifname(call.ifname)
        undo = Undo()
        host_tool = veth.prespawn_host()  # its start-up overlaps the allocation
        try:
            with open_store(conf) as store:
                self.prepare(call, conf, store, undo)
                add = _Add(self, call, conf, store, undo, pod_mac, requested)
                return add.run(host_tool)
        except BaseException as err:
            undo.run(err, call.log.warn)
            raise
        finally:
            host_tool.abandon()  # when the ADD failed before the veth was due

    def detach(self, call: Call, conf: StoreConf) -> None:
        """DEL (spec "DEL"): :func:`podnet.drivers.pods.detach` with this driver's release."""
        from podnet.drivers.pods import detach

        detach(self, call, conf)

    def check(self, call: Call, conf: PodnetConf) -> None:
        """CHECK (spec "CHECK"): :func:`podnet.drivers.pods.check`."""
        from podnet.drivers.pods import check

        check(self, call, conf)

    def gc(self, call: Call, conf: StoreConf) -> None:
        """GC (spec 1.1 "GC"): :func:`podnet.drivers.pods.gc`."""
        from podnet.drivers.pods import gc

        gc(self, call, conf)


def require_netns(call: Call) -> None:
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


def refuse_existing(store: Store, container_id: str) -> None:
    """Code 102 when the container already has an attachment in this store."""
    existing = store.get_pod(container_id)
    if existing is not None:
        raise errors.InterfaceExists(
            f"container {container_id} already has a podnet attachment ({existing.ifname} in "
            f"{existing.netns}); DEL it first"
        )


class _Add:
    """One ADD's steps (:meth:`Driver.attach`), each registering its undo on ``undo``.

    The node-side ``ip`` is started first, so its start-up overlaps the allocation. Under the
    write lock: the rows are written and ``ip`` gets its commands just before the COMMIT (for a
    bridge port only after it, once the bridge is ensured). After the COMMIT the hostPorts are
    published in parallel, the database connection is closed (its WAL checkpoint overlaps the
    tools), the pod end is configured as soon as the pair exists and waited for after the lock.
    """

    def __init__(self, driver: Driver, call: Call, conf: PodnetConf, store: Store, undo: Undo,
                 pod_mac: str, requested: dict[int, str]) -> None:  # fmt: skip
        self.driver, self.call, self.conf, self.store = driver, call, conf, store
        self.undo, self.pod_mac, self.requested = undo, pod_mac, requested
        self.host_if = names.host_ifname(call.container_id, call.ifname)
        self.alias = link_alias(conf)
        self.entries: list[PortMapping] = []
        self.pending: Pending | None = None  # an nft run in flight
        #: The hostPort elements the kernel holds: [] before nft ran, None when unknown.
        self.published: list[PortMapping] | None = []
        self.busy: Spawned | None = None  # the ip run to wait for before deleting the veth
        self.locked = True  # whether the chooser's records may still be reverted

    def run(self, host_tool: Spawned) -> dict[str, Any]:
        from podnet.cni.result import attachment
        from podnet.link import veth

        with self.store.locked():
            link, choice = self._commit(host_tool)
            configuring = self._wire(link, choice, host_tool)
        self.locked = False
        self.busy = None  # reaped by finish_configure_pod
        try:
            veth.finish_configure_pod(link, configuring)
        except BaseException as err:
            with self.store.locked():
                self.undo.run(err, self.call.log.warn)
            raise
        _flush_udp(self.call, self.entries)
        return attachment(link.host_if, link.host_mac, link.ifname, link.pod_mac, link.netns,
                          link.mtu, choice.alloc, choice.prefixes)  # fmt: skip

    def _commit(self, host_tool: Spawned) -> tuple[PodLink, Choice]:
        """The rows, in one write transaction; the pair started before the COMMIT for a routed
        pod. Undo registered: the veth (if started), then the rows."""
        from podnet.link import veth

        call, conf, store = self.call, self.conf, self.store
        with store.write():
            refuse_existing(store, call.container_id)
            choice = self.driver.choose(call, conf, store, self.requested)
            alloc = choice.alloc
            mtu = conf.mtu or choice.mtu or self.driver.default_mtu(choice)
            addresses = {family: a[0] for family, a in alloc.items()}
            self.entries = mappings_for(conf, call.container_id, addresses)
            check_hostports(store, self.entries)
            link = veth.PodLink(
                host_if=self.host_if, ifname=call.ifname, netns=call.netns, mtu=mtu,
                addresses=[(f, a[0], a[1]) for f, a in sorted(alloc.items())],
                host_mac=names.random_mac(), pod_mac=self.pod_mac, alias=self.alias,
                bridge=choice.bridge, prefixes=choice.prefixes,
            )  # fmt: skip
            store.insert_pod(
                container_id=call.container_id, netns=call.netns, interface_name=self.host_if,
                interface_mtu=mtu, ifname=call.ifname, network_name=conf.name,
                host_mac=link.host_mac, pod_mac=link.pod_mac,
                ip_address_v4=addresses.get(4), ip_address_v6=addresses.get(6),
                ip_gateway_v4=alloc[4][1] if 4 in alloc else None,
                ip_gateway_v6=alloc[6][1] if 6 in alloc else None,
                name=call.args.get("K8S_POD_NAME"), namespace=call.args.get("K8S_POD_NAMESPACE"),
                uid=call.args.get("K8S_POD_UID"),
            )  # fmt: skip
            store.insert_portmaps(self.entries)
            if choice.network_id is not None:
                store.attach_pod(call.container_id, choice.network_id)
            if self.driver.pair_before_commit:
                # created while the COMMIT runs; a failed COMMIT deletes it again
                self.busy = veth.start_create_pair(link, host_tool)
                self.undo.push(f"deleting {self.host_if}", self._delete_veth)
        self.undo.push("removing the rows and hostPorts", lambda: self._delete_rows(choice))
        return link, choice

    def _wire(self, link: PodLink, choice: Choice, host_tool: Spawned) -> Spawned:
        """After the COMMIT, under the lock: the pair (a bridge port: once the bridge is
        there), the hostPort elements and the pod end's configuration, started together."""
        from podnet import reconcile
        from podnet.link import veth

        store = self.store
        if not self.driver.pair_before_commit:
            self.driver.before_pair(self.call, self.conf, store, choice, self.host_if)
            self.busy = veth.start_create_pair(link, host_tool)
            self.undo.push(f"deleting {self.host_if}", self._delete_veth)
        self.pending = reconcile.start_add(store, self.entries,
                                           ranges_changed=choice.ranges_changed)  # fmt: skip
        if not self.pending.rebuild:
            store.detach()  # its WAL checkpoint overlaps ip and nft (the lock stays)
        created, self.busy = self.busy, None  # reaped by finish_create_pair
        assert created is not None
        veth.finish_create_pair(link, created, stale=lambda dev: not store.interface_used(dev))
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
            self.store.delete_pod(self.call.container_id)
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
                                   addresses[family], m.container_port))  # fmt: skip
        else:
            for version, addr in sorted(addresses.items()):
                out.append(PortMapping(container_id, FAMILIES[version].wildcard, m.host_port,
                                       m.protocol, addr, m.container_port))  # fmt: skip
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


def _flush_udp(call: Call, entries: list[PortMapping]) -> None:
    """Flush stale UDP conntrack entries of the mapped ports; a failure is logged only (as the
    reference portmap does: the mapping works, old flows may linger)."""
    ports = [(e.family, e.host_port) for e in entries if e.protocol == "udp"]
    if ports:
        from podnet.firewall.conntrack import flush_udp_ports

        flush_udp_ports(ports, call.log.warn)
