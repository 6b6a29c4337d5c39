"""The ``ptp`` driver: pods routed through their own veth pair, addresses from the conflist's
``ranges`` (cni-kindnet's layout). The conflist's network is recorded as a ``ptp``
network so forwards can target its pods; podnet never creates a link for it besides the pods'.
"""

from __future__ import annotations

from podnet import errors
from podnet.drivers.base import Choice, link_alias
from podnet.drivers.pods import VethDriver

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from podnet.checked import Net
    from podnet.cni.skel import Call
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow


class PtpDriver(VethDriver):
    """Routed pods (``/32``, ``/128`` and a host route per pod) from the conflist's ranges."""

    type = "ptp"

    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        from podnet.networks.errors import NetworkError

        raise NetworkError("ptp networks are created by the podnet plugin from a conflist's ranges")

    def forget(self, store: Store, row: NetworkRow) -> None:
        """The network's ranges that no other ptp network lists and no pod (of any owner:
        podnet-ipam shares the store) holds an address in leave the store (and the table's
        masquerade sets)."""
        from podnet import checked

        def ranges(r: NetworkRow) -> list[str]:
            return [str(n) for nets in self.subnets(r.config).values() for n in nets]

        others = {c for other in store.networks.all() if other.id != row.id and other.type == "ptp"
                  for c in ranges(other)}  # fmt: skip
        unshared = []
        for cidr in ranges(row):
            net = checked.network(cidr)
            held = any(checked.ip(a) in net for a in store.pods.used_addresses(net.version))
            if cidr not in others and not held:
                unshared.append(cidr)
        store.ranges.delete(unshared)

    def choose(self, call: Call, conf: PodnetConf, store: Store, requested: dict[int, str],
               net: NetworkRow | None) -> Choice:  # fmt: skip
        """Record the conflist's ranges (and its ``ptp`` network) when they are new or changed,
        then allocate from them; the undo puts both back. 7 when a range overlaps the node's
        routes or a bridge network has the conflist's name; 100 when a range is full."""
        from podnet.ipam.allocator import allocate_in

        ranges_before = store.ranges.all()
        network_before = store.networks.get(conf.name)
        refuse_node_routes(conf, ranges_before, conf.ranges)
        changed = store.ranges.sync(conf.range_strings, conf.ip_masq, f"network {conf.name}")
        _record_network(store, conf, changed)

        def undo(store: Store) -> None:
            if changed or network_before is None:
                store.ranges.restore(ranges_before)
                store.networks.restore(conf.name, network_before)

        return Choice(allocate_in(store, conf.ranges, requested), changed, undo=undo)


def refuse_node_routes(conf: StoreConf, known: list[tuple[int, str, str | None, bool]],
                       ranges: list[Net]) -> None:  # fmt: skip
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


def _record_network(store: Store, conf: PodnetConf, changed: bool) -> None:
    """The conflist's network as a ``ptp`` network (so forwards can target its pods): created
    or given the new ranges when they change. Code 7 when a bridge network has its name."""
    net = store.networks.get(conf.name)
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
        store.networks.insert(conf.name, "ptp", "", config)
    else:
        store.networks.set_config(net.id, config)
