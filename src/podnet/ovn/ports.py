"""What podnet adds to an OVN network's switch and router after it is made (issue 16, items
5 and 6): the pods' logical switch ports (``pn-<network>-pod-<hash>``, ``"<MAC> dynamic"``,
``requested-chassis``) and the forwards' load balancers (one per protocol with port VIPs, one
with the portless VIP of a default target, and a ``discard`` route when there is none).
Every change of a network's rows matches its ``podnet-network`` tag (:func:`nb.ours`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from podnet import checked
from podnet.ovn.nb import TAG, mine, names
from podnet.ovn.ovsdb import Ovsdb, named, omap, oset, pymap

# -- pods' logical switch ports ---------------------------------------------------------------


def port_name(network: str, container_id: str, ifname: str) -> str:
    """The logical switch port of one attachment: unique per (container, CNI_IFNAME, network),
    derived, so a DEL finds it without any state."""
    import hashlib

    digest = hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:20]
    return f"pn-{network}-pod-{digest}"


def add_port(
    nb: Ovsdb, network: str, port: str, mac: str, chassis: str, ids: Mapping[str, str],
    registered: str | None = None,
) -> None:
    """Create logical switch port ``port`` on ``network``'s internal switch with ``"<mac>
    dynamic"`` (northd assigns the addresses: unique across every node) and
    ``requested-chassis`` this node. ``registered``: the network's registry record as the
    caller knows it (the node's mirror), which the NB must still hold — the port is then made
    without reading the whole registry. TxnFailed when the switch does not exist or the port
    does (a duplicate name is a constraint violation); Conflict also when the record differs."""
    from podnet.ovn.nb import PREFIX

    n = names(network)
    held = [] if registered is None else [
        {"op": "wait", "table": "NB_Global",
         "where": [["external_ids", "includes", omap({PREFIX + network: registered})]],
         "columns": [], "until": "==", "rows": [{}], "timeout": 0},
    ]  # fmt: skip
    nb.transact(
        [
            *held,
            {"op": "wait", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "columns": ["name"], "until": "==", "rows": [{"name": n["ls_int"]}], "timeout": 0},
            {"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "pod",
             "row": {"name": port, "addresses": f"{mac} dynamic",
                     "options": omap({"requested-chassis": chassis}),
                     "external_ids": omap({TAG: network, **ids})}},
            {"op": "mutate", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "mutations": [["ports", "insert", oset([named("pod")])]]},
        ]
    )  # fmt: skip


def port_addresses(nb: Ovsdb, port: str, timeout_ms: int) -> list[str]:
    """The port's ``dynamic_addresses`` (``MAC IPv4 [IPv6]``) split, waiting up to
    ``timeout_ms`` for northd to assign them; [] when it did not."""
    from podnet.ovn.ovsdb import WaitTimedOut, pyset

    try:
        results = nb.transact(
            [
                {"op": "wait", "table": "Logical_Switch_Port", "where": [["name", "==", port]],
                 "columns": ["dynamic_addresses"], "until": "!=",
                 "rows": [{"dynamic_addresses": oset([])}], "timeout": timeout_ms},
                {"op": "select", "table": "Logical_Switch_Port", "where": [["name", "==", port]],
                 "columns": ["dynamic_addresses"]},
            ]
        )  # fmt: skip
    except WaitTimedOut:
        return []
    rows = results[1].get("rows", [])
    values = pyset(rows[0]["dynamic_addresses"]) if rows else []
    return str(values[0]).split() if values else []


def delete_port(nb: Ovsdb, network: str, port: str) -> None:
    """Remove ``port`` from ``network``'s internal switch (the port row goes with it); no error
    when either is gone."""
    n = names(network)
    rows = nb.select("Logical_Switch_Port", mine(network, port), ["_uuid"])
    if not rows:
        return
    uuid = rows[0]["_uuid"]
    nb.transact(
        [
            {"op": "mutate", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "mutations": [["ports", "delete", oset([uuid])]]},
        ]
    )  # fmt: skip


def ports_of_chassis(nb: Ovsdb, chassis: str) -> list[dict[str, Any]]:
    """Every pod port podnet made for ``chassis``: ``name``, ``external_ids`` (a dict)."""
    rows = nb.select(
        "Logical_Switch_Port",
        [["external_ids", "includes", omap({"podnet-chassis": chassis})]],
        ["name", "external_ids"],
    )
    return [{"name": r["name"], "external_ids": pymap(r["external_ids"])} for r in rows]


# -- forwards: load balancers -----------------------------------------------------------------


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


def ingress_ops(network: str, l2proxy: bool) -> list[dict[str, Any]]:
    """The operations that set every forward load balancer of ``network`` to :func:`lb_options`
    (its uplink's ``ovn.ingress_mode`` changed)."""
    return [
        {"op": "update", "table": "Load_Balancer",
         "where": [["external_ids", "includes", omap({TAG: network})]],
         "row": {"options": lb_options(l2proxy)}},
    ]  # fmt: skip


def forward_ops(
    nb: Ovsdb, network: str, listen: str, dnats: Sequence[Any] | None, *,
    l2proxy: bool | None = False,
) -> list[dict[str, Any]]:
    """The operations that make ``network``'s forward on ``listen`` what ``dnats`` (the
    :class:`podnet.values.Dnat` of a validated forward; None: no forward) say: its load
    balancers replaced — one per protocol with port VIPs, one with the portless VIP of a default
    target — on the router and the internal switch (so pods reach their own forwards); without a
    default target a ``discard`` route for the listen address drops what no port matches (seed
    004). ``l2proxy``: the uplink's ingress mode is ``l2proxy`` (:func:`lb_options`); None
    (the uplink is not known here) keeps the options the forward's load balancers have. Reads
    the forward's current route (and then options) to replace them."""
    n = names(network)
    tag = {TAG: network, "podnet-forward": listen}
    options = lb_options(bool(l2proxy))
    if l2proxy is None:
        held = nb.select("Load_Balancer", [["external_ids", "includes", omap(tag)]], ["options"])
        options = held[0]["options"] if held else options
    ops: list[dict[str, Any]] = [
        {"op": "delete", "table": "Load_Balancer",
         "where": [["external_ids", "includes", omap(tag)]]},
    ]  # fmt: skip
    routes = nb.select(
        "Logical_Router_Static_Route", [["external_ids", "includes", omap(tag)]], ["_uuid"]
    )
    if routes:
        ops.append(
            {"op": "mutate", "table": "Logical_Router", "where": mine(network, n["lr"]),
             "mutations": [["static_routes", "delete", oset([r["_uuid"] for r in routes])]]}
        )  # fmt: skip
    if dnats is None:
        return ops
    vips: dict[str, dict[str, str]] = {}
    for d in dnats:
        kind = d.protocol or "ip"
        vips.setdefault(kind, {})[_vip(d.listen, d.port)] = _vip(d.target, d.target_port)
    lbs = []
    for kind, vip_map in sorted(vips.items()):
        lbs.append(f"lb{kind}")
        row: dict[str, Any] = {"name": f"{n['lr'][:-3]}-lb-{listen}-{kind}", "vips": omap(vip_map),
                               "external_ids": omap(tag),
                               "options": options}  # fmt: skip
        if kind != "ip":
            row["protocol"] = kind
        ops.append({"op": "insert", "table": "Load_Balancer", "uuid-name": f"lb{kind}", "row": row})
    for table, name in (("Logical_Router", n["lr"]), ("Logical_Switch", n["ls_int"])):
        ops.append(
            {"op": "mutate", "table": table, "where": mine(network, name),
             "mutations": [["load_balancer", "insert", oset([named(x) for x in lbs])]]}
        )  # fmt: skip
    if "ip" not in vips:
        prefix = f"{listen}/{checked.ip(listen).max_prefixlen}"
        ops += [
            {"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "drop",
             "row": {"ip_prefix": prefix, "nexthop": "discard", "external_ids": omap(tag)}},
            {"op": "mutate", "table": "Logical_Router", "where": mine(network, n["lr"]),
             "mutations": [["static_routes", "insert", oset([named("drop")])]]},
        ]  # fmt: skip
    return ops
