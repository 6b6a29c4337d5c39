"""The ``delegated`` driver: routed pods (the ``ptp`` layout) whose addresses come from an IPAM
plugin (CNI SPEC 1.1.0 "Plugin Delegation", :mod:`podnet.ipam.delegate`).

ADD runs the IPAM plugin first and wires the veth with the addresses and gateways it returns
(podnet's layout: the pod gets ``P/32``/``/128`` and a default route through the gateway, whatever
prefix and routes the IPAM result carries), storing the pod row as usual so hostPorts, CHECK and
GC work unchanged; the returned subnets are recorded as ranges (for ``ipMasq`` and hairpin). A
failure after the IPAM ADD runs the IPAM DEL (the bottom of ADD's undo stack). CHECK, DEL, GC
and STATUS also run the IPAM plugin; its errors pass through with their codes.
"""

from __future__ import annotations

from podnet import errors
from podnet.drivers.base import Choice, refuse_existing
from podnet.drivers.ptp import PtpDriver, refuse_node_routes
from podnet.errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.drivers.base import Allocation
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow
    from podnet.store.pods import Pod
    from podnet.undo import Undo


class DelegatedDriver(PtpDriver):
    """Routed pods with an IPAM plugin's addresses."""

    type = "delegated"

    def __init__(self) -> None:
        self._answer: dict[str, tuple[Allocation, object]] = {}

    def prepare(self, call: Call, conf: PodnetConf, store: Store, undo: Undo,
                net: NetworkRow | None) -> None:  # fmt: skip
        """Refuse (102) a container that already has an attachment before the IPAM plugin is
        called — a repeated ADD must not make it release the live allocation — then run its
        ADD (its error passes through) and register its DEL as the first undo. Code 7 when it
        returns no address, more than one per family or no usable gateway."""
        from podnet.ipam import delegate

        refuse_existing(store, call.container_id)
        answer = delegate.run(call, conf.ipam_type)
        undo.push(f"releasing the {conf.ipam_type} allocation",
                  lambda: delegate.run(call, conf.ipam_type, "DEL"))  # fmt: skip
        assert answer is not None
        alloc, dns = delegate.parse_result(answer, conf.ipam_type)
        conf.check_mtu(set(alloc))
        self._answer[call.container_id] = (alloc, dns)

    def choose(self, call: Call, conf: PodnetConf, store: Store, requested: dict[int, str],
               net: NetworkRow | None) -> Choice:  # fmt: skip
        """The IPAM plugin's addresses, made room for in this database (:func:`_take_over`);
        its subnets recorded as ranges."""
        alloc, _ = self._answer[call.container_id]
        _take_over(store, call, conf, alloc)
        refuse_node_routes(conf, store.ranges.all(), [net for _, _, net in alloc.values()])
        subnets = sorted({str(net) for _, _, net in alloc.values()})
        description = f"network {conf.name} (ipam {conf.ipam_type})"
        return Choice(alloc, store.ranges.sync(subnets, conf.ip_masq, description))

    def finish_result(self, call: Call, result: dict[str, Any]) -> None:
        """The IPAM result's ``dns`` in ADD's result."""
        result["dns"] = self._answer.pop(call.container_id)[1]

    def release(self, call: Call, conf: StoreConf, store: Store, pod: Pod | None,
                network: str | None) -> Callable[[], None] | None:  # fmt: skip
        """The IPAM plugin's DEL, started once podnet's row is gone (so the address is not
        handed out while still recorded here)."""
        from podnet.ipam import delegate

        running = delegate.start(call, conf.ipam_type)

        def finish() -> None:
            delegate.finish(running)

        return finish

    def check_first(self, call: Call, conf: StoreConf) -> None:
        from podnet.ipam import delegate

        delegate.run(call, conf.ipam_type)

    def gc_also(self, call: Call, conf: StoreConf, failures: list[str]) -> None:
        from podnet.ipam import delegate

        try:
            delegate.run(call, conf.ipam_type)
        except CNIError as err:
            failures.append(f"{conf.ipam_type} GC: {err.msg}")

    def status_also(self, call: Call, conf: PodnetConf) -> None:
        from podnet.ipam import delegate

        super().status_also(call, conf)
        delegate.run(call, conf.ipam_type)


def _take_over(store: Store, call: Call, conf: PodnetConf, alloc: Allocation) -> None:
    """Make room for the delegated addresses in this database (inside ADD's transaction).

    An address podnet-ipam just allocated for this very attachment on this database (same
    container, ifname and network) is taken over: its row is replaced by podnet's, in the same
    transaction, so the address is never free meanwhile and the IPAM DEL that podnet's DEL sends
    later finds nothing left to do. Any other holder means two allocators hand out one range:
    code 7 naming the holder.
    """
    from podnet.store.pods import OWNER_IPAM, ipam_key

    mine = ipam_key(call.container_id, call.ifname, conf.name)
    for family, (_, gateway, _) in sorted(alloc.items()):
        held = store.pods.holder_of(family, gateway)
        if held is not None:  # it would go on the node side of this pod's veth
            raise errors.InvalidConfig(
                f"gateway {gateway} from IPAM plugin {conf.ipam_type} is the address of "
                f"{held.container_id} in {store.path}"
            )
    for family, (addr, _, _) in sorted(alloc.items()):
        holder = store.pods.holder_of(family, addr)
        if holder is None:
            continue
        if holder.owner == OWNER_IPAM and holder.container_id == mine:
            store.pods.delete(mine)
            continue
        who = (f"podnet-ipam allocation {holder.container_id}" if holder.owner == OWNER_IPAM
               else f"container {holder.container_id}")  # fmt: skip
        raise errors.InvalidConfig(
            f"address {addr} from IPAM plugin {conf.ipam_type} is already held by {who} in "
            f"{store.path}: the IPAM plugin's ranges overlap addresses this database gives out"
        )
