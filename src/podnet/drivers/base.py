"""The network driver interface and the pod steps every podnet driver shares (issue 15, item 1).

A driver answers for one network type. Pod side (the ``podnet`` plugin's verbs):

- :meth:`Driver.choose` picks the pod's addresses inside ADD's write transaction and says how
  the link is wired (:class:`Choice`); :meth:`Driver.before_pair` prepares the node for the pair
  (a bridge driver brings its bridge back); :meth:`Driver.prepare`/:meth:`Driver.release` run
  around the whole ADD/DEL (a delegated IPAM plugin's ADD and DEL);
- :meth:`Driver.release`, :meth:`Driver.check_first`, :meth:`Driver.gc_also`,
  :meth:`Driver.status_also`, :meth:`Driver.prefixes` and :meth:`Driver.finish_result` add a
  driver's own steps to DEL, CHECK, GC, STATUS and ADD's result.

Network side (``podnetctl network`` and the API, through :mod:`podnet.drivers.manager`):
:class:`podnet.drivers.network.NetworkType`, which :class:`Driver` extends.

The verbs themselves are written once, over these hooks, in :mod:`podnet.drivers.pods`. A call
killed before its COMMIT may leave the veth with no row: the
runtime's DEL removes it by name, a GC by its alias, and the next ADD given its address takes the
host route over (``route replace``) — it is never blocked by it (issue 7, item 7).
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
    from podnet.drivers.conf import PodnetConf, StoreConf
    from podnet.store import Store
    from podnet.store.pods import Pod
    from podnet.undo import Undo

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


class Driver(NetworkType):
    """A network type: its network side (:class:`podnet.drivers.network.NetworkType`) and its
    pod side. Subclasses set :attr:`type` and override the hooks they need; the defaults are
    those of a routed (``ptp``) pod with no network of its own."""

    #: Whether the veth pair is created while ADD's COMMIT runs (a routed pod) or only after it,
    #: once :meth:`before_pair` made the node ready (a bridge port).
    pair_before_commit = True

    # -- pod side: the verbs (the plugin calls these) -------------------------------------
    # The defaults are those of a type whose networks hold no pods (a ``physical`` uplink):
    # ADD and CHECK are refused with 7 naming the type, DEL and GC have nothing to release.
    def holds_pods(self) -> bool:
        """Whether this type's networks take pods: False when :meth:`attach` is this class's
        default (the runtime gets 7 for ADD, CHECK and STATUS, 0 for DEL and GC)."""
        return type(self).attach is not Driver.attach

    def no_pods(self, conf: PodnetConf) -> CNIError:
        """InvalidConfig (7) naming the conflist's network and this type."""
        return errors.InvalidConfig(
            f"network: {conf.network!r} is of type {self.type}, which holds no pods (a "
            "conflist names a network of a type that does: bridge, ovn)"
        )

    def attach(self, call: Call, conf: PodnetConf) -> dict[str, Any]:
        """ADD: the pod's attachment; its 1.x result. :class:`podnet.drivers.pods.VethDriver`
        implements it over the hooks below; the default refuses (7, :meth:`no_pods`)."""
        raise self.no_pods(conf)

    def detach(self, call: Call, conf: StoreConf, network: str | None) -> None:
        """DEL (``network``: the conflist's, when it names one); idempotent. The default has
        nothing to release: an ADD on such a network never succeeded (CNI SPEC "DEL": a DEL
        of what does not exist succeeds)."""

    def check(self, call: Call, conf: PodnetConf) -> None:
        """CHECK: code 103 naming the first difference; the default refuses (7,
        :meth:`no_pods`): no ADD on such a network succeeded."""
        raise self.no_pods(conf)

    def gc(self, call: Call, conf: StoreConf) -> None:
        """GC: every attachment of this network not in ``cni.dev/valid-attachments`` goes;
        the default has none."""

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
        """Bytes: the pod's MTU when neither the NetConf nor the network sets one; 0 (the
        default): that of the node's default-route link (cni-kindnet's choice), which ADD
        asks of the node-side ``ip`` it has already started."""
        return 0

    def release(self, call: Call, conf: StoreConf) -> Callable[[], None] | None:
        """After DEL released the row: start releasing what :meth:`prepare` took, return the
        wait (its error is DEL's)."""
        return None

    def check_first(self, call: Call, conf: StoreConf) -> None:
        """CHECK's first step (a delegated IPAM plugin's CHECK)."""

    def gc_also(self, call: Call, conf: StoreConf, failures: list[str]) -> None:
        """GC's last step; failures appended."""

    def status_also(self, call: Call, conf: PodnetConf) -> None:
        """STATUS's last step: 7 (:meth:`no_pods`) for a type that holds no pods, else the
        conflist's ranges have a free address (50)."""
        from podnet.ipam.status import check_ranges

        if not self.holds_pods():
            raise self.no_pods(conf)
        check_ranges(conf.data_dir, conf.busy_timeout, conf.ranges)

    def prefixes(self, store: Store, pod: Pod) -> tuple[str, dict[int, int]]:
        """The bridge and the subnet prefix lengths of a stored pod (CHECK): ("", {}) routed."""
        return "", {}

    def finish_result(self, call: Call, result: dict[str, Any]) -> None:
        """Last touch on ADD's result (a delegated IPAM plugin's ``dns``)."""


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
