"""The load balancers of an OVN network's forwards (LXD's ``lxd/network/driver_ovn.go``
``ForwardCreate``): per listen address, one load balancer per protocol with port VIPs and one
with the portless VIP of a default target, on the network's router and internal switch (so
pods reach their own forwards); without a default target a ``discard`` static route for the
listen address drops what no port matches (ovn-nb(5), ``Logical_Router_Static_Route``
``nexthop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podnet import checked
from podnet.ovn import builders as b
from podnet.ovn.nb import TAG, mine, names, ours
from podnet.ovn.ops import Op, omap, tagged
from podnet.ovn.ovsdb import Ovsdb

#: ``external_ids`` key of a forward's rows: its listen address.
FORWARD = "podnet-forward"


def _vip(address: str, port: int | None) -> str:
    if port is None:
        return address
    if checked.ip(address).version == 6:  # canonical text podnet validated
        return f"[{address}]:{port}"
    return f"{address}:{port}"


def lb_options(l2proxy: bool) -> list[Any]:
    """A forward load balancer's ``options``: with an uplink in ``l2proxy`` ingress mode the
    router answers ARP/NDP for the listen address on the uplink (``neighbor_responder=all``;
    OVN's default answers only for VIPs inside the router port's subnet, and the uplink's
    routes are outside it), so a neighbour on the uplink's segment reaches it without a route
    (LXD's l2proxy); ``routed`` leaves that to the upstream router's routes."""
    return omap({"neighbor_responder": "all"} if l2proxy else {})


def ingress_ops(network: str, l2proxy: bool) -> list[Op]:
    """The operations that set every forward load balancer of ``network`` to :func:`lb_options`
    (its uplink's ``ovn.ingress_mode`` changed)."""
    return [b.load_balancers_options([ours(network)], lb_options(l2proxy))]


def forward_ops(
    nb: Ovsdb, network: str, listen: str, dnats: Sequence[Any] | None, *,
    l2proxy: bool | None = False,
) -> list[Op]:  # fmt: skip
    """The operations that make ``network``'s forward on ``listen`` what ``dnats`` (the
    :class:`podnet.values.Dnat` of a validated forward; None: no forward) say: its load
    balancers and route replaced (see the module). ``l2proxy``: the uplink's ingress mode is
    ``l2proxy`` (:func:`lb_options`); None (the uplink is not known here) keeps the options
    the forward's load balancers have. Reads the forward's current route (and then options)
    to replace them."""
    n = names(network)
    tag = {TAG: network, FORWARD: listen}
    options = lb_options(bool(l2proxy))
    if l2proxy is None:
        held = nb.select(b.LB, [tagged(tag)], ["options"])
        options = held[0]["options"] if held else options
    ops = [b.load_balancers_delete([tagged(tag)])]
    routes = nb.select(b.ROUTE, [tagged(tag)], ["_uuid"])
    if routes:
        ops.append(b.router_remove_routes(mine(network, n["lr"]), [r["_uuid"] for r in routes]))
    if dnats is None:
        return ops
    vips: dict[str, dict[str, str]] = {}
    for d in dnats:
        kind = d.protocol or "ip"
        vips.setdefault(kind, {})[_vip(d.listen, d.port)] = _vip(d.target, d.target_port)
    lbs = []
    for kind, vip_map in sorted(vips.items()):
        lbs.append(f"lb{kind}")
        ops.append(b.load_balancer(f"{n['lr'][:-3]}-lb-{listen}-{kind}", f"lb{kind}",
                                   vips=vip_map, external_ids=tag, options=options,
                                   protocol="" if kind == "ip" else kind))  # fmt: skip
    for table, name in ((b.LR, n["lr"]), (b.LS, n["ls_int"])):
        ops.append(b.attach_load_balancers(table, mine(network, name), lbs))
    if "ip" not in vips:
        prefix = f"{listen}/{checked.ip(listen).max_prefixlen}"
        ops += [b.static_route("drop", prefix, "discard", tag),
                b.router_add_routes(mine(network, n["lr"]), ["drop"])]  # fmt: skip
    return ops
