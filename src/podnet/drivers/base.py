"""The network driver interface and the pod steps every podnet driver shares.

A driver answers for one network type. Pod side (the ``podnet`` plugin's verbs ADD, DEL,
CHECK and GC, written once in :mod:`podnet.drivers.pods`; a driver only adds hooks):

- :meth:`Driver.prepare` runs before ADD's write transaction (a delegated IPAM plugin's ADD, an
  OVN logical port claimed), :meth:`Driver.choose` inside it: the pod's addresses and how the
  link is wired (:class:`Choice`); :meth:`Driver.before_pair` prepares the node for the pair (a
  bridge driver brings its bridge back), :meth:`Driver.after_pair` wires the host end once the
  pod end is configured (into OVS);
- :meth:`Driver.release`, :meth:`Driver.check_first`, :meth:`Driver.check_attachment`,
  :meth:`Driver.gc_also`, :meth:`Driver.status_also`, :meth:`Driver.prefixes` and
  :meth:`Driver.finish_result` add a driver's own steps to DEL, CHECK, GC, STATUS and ADD's
  result.

Network side (``podnetctl network`` and the API, through :mod:`podnet.manage.manager`):
:class:`podnet.drivers.network.NetworkType`, which :class:`Driver` extends.

A call killed before its COMMIT may leave the veth with no row: the runtime's DEL removes it by
name, a GC by its alias, and the next ADD given its address takes the host route over (``route
replace``) — it is never blocked by it.
"""

from __future__ import annotations

import os

from podnet import errors
from podnet.drivers.network import NetworkType
from podnet.errors import CNIError
from podnet.link import names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from podnet.checked import Iface, Net
    from podnet.cni.skel import Call
    from podnet.link.veth import PodLink
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow
    from podnet.store.pods import Pod
    from podnet.undo import Undo

    #: ``{family: (address, gateway, range)}``, as :func:`podnet.ipam.allocator.allocate_in` gives.
    Allocation = dict[int, tuple[str, str, Net]]


class Choice:
    """What :meth:`Driver.choose` decided inside the write transaction: ``alloc`` (``{family:
    (address, gateway, range)}``), ``ranges_changed`` (the table must be rebuilt), ``undo``
    (reverts what the chooser recorded besides the pod: new ranges, a network), and for a pod
    on a network of its own: ``bridge`` (the Linux bridge it joins), ``network_id``,
    ``prefixes`` (family → subnet prefix length), ``bridge_addresses`` (the bridge's own
    interfaces), ``mtu`` (bytes; 0 unset), ``pod_mac`` (the pod end's MAC when the network
    fixes it, "" otherwise), ``port`` (the OVN logical switch port the row records), ``ovs``
    (the host end is an Open vSwitch port) and ``tx_off`` (TX checksum offload off in the pod:
    OVS's userspace datapath)."""

    __slots__ = ("alloc", "ranges_changed", "bridge", "network_id", "prefixes",
                 "bridge_addresses", "mtu", "undo", "pod_mac", "port", "ovs",
                 "tx_off")  # fmt: skip

    def __init__(self, alloc: Allocation, ranges_changed: bool = False, *, bridge: str = "",
                 network_id: int | None = None, prefixes: dict[int, int] | None = None,
                 bridge_addresses: list[Iface] | None = None, mtu: int = 0,
                 undo: Callable[[Store], None] | None = None, pod_mac: str = "",
                 port: str | None = None, ovs: bool = False,
                 tx_off: bool = False) -> None:  # fmt: skip
        self.alloc = alloc
        self.ranges_changed = ranges_changed
        self.undo = undo
        self.bridge = bridge
        self.network_id = network_id
        self.prefixes = prefixes or {}
        self.bridge_addresses = bridge_addresses or []
        self.mtu = mtu
        self.pod_mac = pod_mac
        self.port = port
        self.ovs = ovs
        self.tx_off = tx_off


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


class Driver(NetworkType):
    """A network type: its network side (:class:`podnet.drivers.network.NetworkType`) and its
    pod side. Subclasses set :attr:`type` and override the hooks they need; the defaults are
    those of a routed (``ptp``) pod with no network of its own."""

    #: Whether the veth pair is created while ADD's COMMIT runs (a routed pod) or only after it,
    #: once :meth:`before_pair` made the node ready (a bridge port).
    pair_before_commit = True

    # -- pod side ---------------------------------------------------------------------------
    # The verbs (ADD, DEL, CHECK, GC) are :mod:`podnet.drivers.pods`' for every driver; a
    # driver only has hooks.
    #: Whether this type's networks take pods. A type that takes none (a ``physical`` uplink)
    #: has ADD, CHECK and STATUS refused with 7 naming the type, and nothing to release on DEL
    #: and GC (CNI SPEC "DEL": a DEL of what does not exist succeeds).
    takes_pods = False
    #: Whether ADD reads the addresses the runtime asks for (``runtimeConfig.ips``, CNI_ARGS
    #: ``IP=``) for :meth:`choose`: not where the network assigns them (OVN's northd).
    requested_ips = True
    #: Whether ADD starts its node-side ``ip`` before the store opens (its exec overlaps the
    #: allocation) rather than after :meth:`prepare`: not when preparing is long (an OVN port's
    #: claim), so that the tool does not wait, and a killed ADD leave it, before anything of
    #: the pod exists.
    early_ip = True
    #: Whether an ADD without hostPorts still looks at podnet's nft table (it holds the
    #: masquerade of podnet's ranges and bridge subnets; an OVN network's router does its own).
    checks_table = True

    def holds_pods(self) -> bool:
        """Whether this type's networks take pods (:attr:`takes_pods`)."""
        return self.takes_pods

    def no_pods(self, conf: PodnetConf) -> CNIError:
        """InvalidConfig (7) naming the conflist's network and this type."""
        return errors.InvalidConfig(
            f"network: {conf.network!r} is of type {self.type}, which holds no pods (a "
            "conflist names a network of a type that does: bridge, ovn)"
        )

    # -- pod side: hooks -----------------------------------------------------------------
    def prepare(self, call: Call, conf: PodnetConf, store: Store, undo: Undo,
                net: NetworkRow | None) -> None:  # fmt: skip
        """Before ADD's transaction (outside the write lock); push undos for what it does."""

    def choose(self, call: Call, conf: PodnetConf, store: Store, requested: dict[int, str],
               net: NetworkRow | None) -> Choice:  # fmt: skip
        """The pod's addresses (``requested``: CNI_ARGS ``IP=``/runtimeConfig ``ips``, family →
        address; ``net``: the conflist's network), inside ADD's write transaction; 7 bad
        config, 100 exhausted."""
        raise NotImplementedError

    def before_pair(self, call: Call, conf: PodnetConf, store: Store, choice: Choice,
                    host_if: str) -> None:  # fmt: skip
        """After the COMMIT, before the pair is created when :attr:`pair_before_commit` is
        False (a bridge port needs its bridge)."""

    def after_pair(self, call: Call, conf: PodnetConf, link: PodLink, choice: Choice,
                   undo: Undo) -> None:  # fmt: skip
        """After the pair exists and the pod end is configured, outside the write lock: the
        host end's wiring that takes long (into OVS, until ``ovn-installed``); push undos."""

    def pod_mtu(self, conf: PodnetConf, choice: Choice) -> int:
        """Bytes: the pod's MTU, the NetConf's ``mtu``, else the network's, else
        :meth:`default_mtu`; 0 leaves it to the node's default-route link."""
        return conf.mtu or choice.mtu or self.default_mtu(choice)

    def default_mtu(self, choice: Choice) -> int:
        """Bytes: the pod's MTU when neither the NetConf nor the network sets one; 0 (the
        default): that of the node's default-route link (cni-kindnet's choice), which ADD
        asks of the node-side ``ip`` it has already started."""
        return 0

    def release(self, call: Call, conf: StoreConf, store: Store, pod: Pod | None,
                network: str | None) -> Callable[[], None] | None:  # fmt: skip
        """After DEL released the row (``pod``: the container's row as DEL found it, None
        without one; ``network``: the conflist's): start releasing what :meth:`prepare` took,
        return the wait (its error is DEL's)."""
        return None

    def check_first(self, call: Call, conf: StoreConf) -> None:
        """CHECK's first step (a delegated IPAM plugin's CHECK)."""

    def check_attachment(self, call: Call, conf: PodnetConf, store: Store, pod: Pod,
                         net: NetworkRow | None) -> None:  # fmt: skip
        """CHECK of the attachment ``pod`` (its row) against the node: default the veth
        layout's (:func:`podnet.drivers.check.check`, with :meth:`prefixes` and the subnets the
        NetConf configures now); 103 naming the difference."""
        from podnet.drivers import check

        bridge, prefixes = self.prefixes(net, pod)
        subnets = None if net is None else self.subnets(net.config)
        check.check(call, pod, store.pods.portmaps(call.container_id), bridge, prefixes,
                    ranges=check.configured_ranges(conf, subnets))  # fmt: skip

    def gc_also(self, call: Call, conf: StoreConf, failures: list[str]) -> None:
        """GC's last step; failures appended."""

    def status_also(self, call: Call, conf: PodnetConf) -> None:
        """STATUS's last step: 7 (:meth:`no_pods`) for a type that holds no pods, else the
        conflist's ranges have a free address (50)."""
        from podnet.ipam.status import check_ranges

        if not self.holds_pods():
            raise self.no_pods(conf)
        check_ranges(conf.data_dir, conf.busy_timeout, conf.ranges)

    def prefixes(self, net: NetworkRow | None, pod: Pod) -> tuple[str, dict[int, int]]:
        """The bridge and the subnet prefix lengths of a stored pod (CHECK; ``net``: the
        conflist's network): ("", {}) routed."""
        return "", {}

    def finish_result(self, call: Call, result: dict[str, Any]) -> None:
        """Last touch on ADD's result (a delegated IPAM plugin's ``dns``)."""


def unknown_network(conf: PodnetConf) -> CNIError:
    """InvalidConfig (7): the conflist's ``network`` does not exist."""
    return errors.InvalidConfig(
        f"network: {conf.network!r} does not exist (podnetctl network create {conf.network})"
    )


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
    existing = store.pods.get(container_id)
    if existing is not None:
        raise errors.InterfaceExists(
            f"container {container_id} already has a podnet attachment ({existing.ifname} in "
            f"{existing.netns}); DEL it first"
        )
