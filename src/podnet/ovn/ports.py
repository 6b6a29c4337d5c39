"""What podnet adds to an OVN network's switch and router after it is made (issue 16, items
5 and 6): the pods' logical switch ports (``pn-<network>-pod-<hex>``, ``"<MAC> dynamic"``,
``requested-chassis``), each node's spare ports, and the forwards' load balancers (one per
protocol with port VIPs, one with the portless VIP of a default target, and a ``discard``
route when there is none).
Every change of a network's rows matches its ``podnet-network`` tag (:func:`nb.ours`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from podnet import checked
from podnet.ovn.nb import TAG, mine, names
from podnet.ovn.ovsdb import Ovsdb, named, omap, oset, pyatom, pymap, pyset

# -- pods' logical switch ports ---------------------------------------------------------------


def port_name(network: str, container_id: str, ifname: str) -> str:
    """The logical switch port of one attachment: unique per (container, CNI_IFNAME, network),
    derived, so a DEL finds it without any state."""
    import hashlib

    digest = hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:20]
    return f"pn-{network}-pod-{digest}"


def _registered(network: str, registered: str | None) -> list[dict[str, Any]]:
    """A ``wait`` that the NB still holds ``network``'s registry record as ``registered``."""
    from podnet.ovn.nb import PREFIX

    return [] if registered is None else [
        {"op": "wait", "table": "NB_Global",
         "where": [["external_ids", "includes", omap({PREFIX + network: registered})]],
         "columns": [], "until": "==", "rows": [{}], "timeout": 0},
    ]  # fmt: skip


def _unheld(network: str, ids: Mapping[str, str]) -> list[dict[str, Any]]:
    """A ``wait`` that no port of ``network`` belongs to the attachment in ``ids``
    (``podnet-container``, ``podnet-ifname``): one port per attachment in the cluster, also
    when two nodes ADD the same container ID."""
    if "podnet-container" not in ids:
        return []
    held = {TAG: network, "podnet-container": ids["podnet-container"],
            "podnet-ifname": ids.get("podnet-ifname", "")}  # fmt: skip
    return [
        {"op": "wait", "table": "Logical_Switch_Port",
         "where": [["external_ids", "includes", omap(held)]],
         "columns": ["name"], "until": "==", "rows": [], "timeout": 0},
    ]  # fmt: skip


def _refuse_held(err: Any, index: int, network: str, ids: Mapping[str, str]) -> None:
    """InterfaceExists (102) when the failed ``wait`` was :func:`_unheld`'s."""
    from podnet.errors import InterfaceExists

    if err.op == index:
        raise InterfaceExists(
            f"container {ids.get('podnet-container')} already has a port for "
            f"{ids.get('podnet-ifname')} on network {network} (made by another ADD or node)"
        ) from None


def _conditions(network: str, registered: str | None, ids: Mapping[str, str]) -> list[Any]:
    """The ``wait`` operations a pod's port is made or claimed under: the network's record
    (:func:`_registered`), its internal switch, and no port of the attachment
    (:func:`_unheld`, at index ``len(_registered(...)) + 1``)."""
    ls_int = names(network)["ls_int"]
    return [
        *_registered(network, registered),
        {"op": "wait", "table": "Logical_Switch", "where": mine(network, ls_int),
         "columns": ["name"], "until": "==", "rows": [{"name": ls_int}], "timeout": 0},
        *_unheld(network, ids),
    ]  # fmt: skip


def add_port(
    nb: Ovsdb, network: str, port: str, mac: str, chassis: str, ids: Mapping[str, str],
    registered: str | None = None,
) -> None:
    """Create logical switch port ``port`` on ``network``'s internal switch with ``"<mac>
    dynamic"`` (northd assigns the addresses: unique across every node) and
    ``requested-chassis`` this node. ``registered``: the network's registry record as the
    caller knows it (the node's mirror), which the NB must still hold — the port is then made
    without reading the whole registry. TxnFailed when the switch does not exist or the port
    does (a duplicate name is a constraint violation); Conflict also when the record differs;
    InterfaceExists (102) when the attachment in ``ids`` already has a port."""
    from podnet.ovn.ovsdb import Conflict

    n = names(network)
    held = _registered(network, registered)
    try:
        nb.transact(
            [
                *_conditions(network, registered, ids),
                {"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "pod",
                 "row": {"name": port, "addresses": f"{mac} dynamic",
                         "options": omap({"requested-chassis": chassis}),
                         "external_ids": omap({TAG: network, **ids})}},
                {"op": "mutate", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
                 "mutations": [["ports", "insert", oset([named("pod")])]]},
            ]
        )  # fmt: skip
    except Conflict as err:
        _refuse_held(err, len(held) + 1, network, ids)
        raise


# -- each node's spare ports ------------------------------------------------------------------
#
# ovn-northd 23.03 recomputes everything on every NB change (76-104 ms at 1,000 ports and
# forwards, docs/benchmarks.md), and a new port's addresses and binding wait for one. A node
# therefore keeps a few ports made ahead, ``requested-chassis`` itself, addresses assigned and
# bound to nothing: an ADD claims one (its ``external_ids`` become the pod's) and plugs the veth
# with its name, which ovn-controller binds without northd; the same transaction makes the
# spare that replaces it, for a later ADD. The port's name is then not derived from the
# attachment: the pod's row keeps it (``pod_attachments.ovn_port``).

#: ``external_ids`` key marking a spare port (value ``true``): made ahead, no pod's yet.
SPARE = "podnet-spare"
#: Spare ports a node keeps per OVN network.
SPARES = 2


def spare_ops(network: str, chassis: str, count: int) -> list[dict[str, Any]]:
    """Operations making ``count`` spare ports of ``network`` for ``chassis``: named like a
    pod's port (``pn-<network>-pod-<20 random hex>``), ``"<random MAC> dynamic"``,
    ``requested-chassis`` and ``external_ids`` {network tag, ``podnet-chassis``, :data:`SPARE`}."""
    import secrets

    from podnet.link.names import random_mac

    if count <= 0:
        return []
    tag = omap({TAG: network, "podnet-chassis": chassis, SPARE: "true"})
    ops: list[dict[str, Any]] = [
        {"op": "insert", "table": "Logical_Switch_Port", "uuid-name": f"spare{i}",
         "row": {"name": f"pn-{network}-pod-{secrets.token_hex(10)}",
                 "addresses": f"{random_mac()} dynamic",
                 "options": omap({"requested-chassis": chassis}), "external_ids": tag}}
        for i in range(count)
    ]  # fmt: skip
    ops.append(
        {"op": "mutate", "table": "Logical_Switch",
         "where": mine(network, names(network)["ls_int"]),
         "mutations": [["ports", "insert", oset([named(f"spare{i}") for i in range(count)])]]}
    )  # fmt: skip
    return ops


def spares(nb: Ovsdb, network: str, chassis: str) -> list[tuple[str, str]]:
    """``(name, dynamic_addresses)`` of ``network``'s spare ports for ``chassis``
    (:func:`spare_rows`)."""
    return [(name, dynamic) for name, dynamic, _ in spare_rows(nb, network, chassis)]


def spare_rows(nb: Ovsdb, network: str, chassis: str) -> list[tuple[str, str, str]]:
    """``(name, dynamic_addresses, _uuid)`` of ``network``'s spare ports for ``chassis``
    (``dynamic_addresses`` ``"MAC IPv4 [IPv6]"``, ``""`` while northd has not assigned them).
    Only ports named as :func:`spare_ops` names them and in the ``ports`` of the network's
    own internal switch (read in the same transaction): the name becomes an OVS interface's
    ``iface-id`` on this node, so another NB writer's row of another shape, or on another
    logical switch, is never taken."""
    from podnet.ovn.ovsdb import pyset

    where = [["external_ids", "includes", omap({TAG: network, "podnet-chassis": chassis,
                                                SPARE: "true"})]]  # fmt: skip
    switch, ports = nb.transact([
        {"op": "select", "table": "Logical_Switch",
         "where": [["name", "==", names(network)["ls_int"]]], "columns": ["ports"]},
        {"op": "select", "table": "Logical_Switch_Port", "where": where,
         "columns": ["_uuid", "name", "dynamic_addresses"]},
    ])  # fmt: skip
    members = {str(u) for row in switch.get("rows", []) for u in pyset(row.get("ports"))}
    found = []
    prefix = f"pn-{network}-pod-"
    for row in ports.get("rows", []):
        name, values = str(row["name"]), pyset(row["dynamic_addresses"])
        tail = name[len(prefix) :]
        uuid = str(pyatom(row.get("_uuid")) or "")
        if not (uuid and uuid in members):
            continue  # on another switch (or none): not the network's
        if name.startswith(prefix) and len(tail) == 20 and set(tail) <= set("0123456789abcdef"):
            found.append((name, str(values[0]) if values else "", uuid))
    return found


def _still(where: list[Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``wait`` that the ports matching ``where`` are still exactly ``rows`` (by ``_uuid``)."""
    return {"op": "wait", "table": "Logical_Switch_Port", "where": where, "columns": ["_uuid"],
            "until": "==", "rows": [{"_uuid": r["_uuid"]} for r in rows], "timeout": 0}


def top_up(nb: Ovsdb, network: str, chassis: str, target: int) -> int:
    """Make spares of ``network`` for ``chassis`` until it has ``target``, on the condition
    that its spares are still the ones read (parallel first ADDs top up once, not each); how
    many were made (0 also when another ADD changed them first)."""
    from podnet.ovn.ovsdb import Conflict

    where = [["external_ids", "includes", omap({TAG: network, "podnet-chassis": chassis,
                                                SPARE: "true"})]]  # fmt: skip
    rows = nb.select("Logical_Switch_Port", where, ["_uuid"])
    if len(rows) >= target:
        return 0
    try:
        nb.transact(
            [
                _still(where, rows),
                *spare_ops(network, chassis, target - len(rows)),
            ]
        )  # fmt: skip
    except Conflict:
        return 0
    return target - len(rows)


def claim_port(
    nb: Ovsdb, network: str, spare: str, dynamic: str, ids: Mapping[str, str],
    registered: str | None, refill: int, security: str = "", uuid: str = "",
) -> bool:
    """Make spare port ``spare`` (read with ``dynamic_addresses`` ``dynamic``) the pod's: its
    ``external_ids`` become {network tag, ``ids``} and its ``port_security`` ``security`` (the
    pod's ``"MAC IPv4 [IPv6]"``, as parsed from ``dynamic``; "" leaves it unset), and
    ``refill`` new spares for the same
    chassis are made, in one transaction on the conditions that the NB still holds
    ``registered`` (as :func:`add_port`), the switch, and the spare unclaimed with those
    addresses, in the ``ports`` of the network's internal switch (``uuid``: the spare's
    ``_uuid``, :func:`spare_rows`; without it the spare is never claimed), and no port held
    by the attachment. False when another ADD claimed it first or
    northd changed its addresses; Conflict when the record differs; InterfaceExists (102)
    when the attachment in ``ids`` already has a port."""
    from podnet.ovn.ovsdb import Conflict

    if not uuid:
        return False
    ls_int = names(network)["ls_int"]
    held = _registered(network, registered)
    try:
        nb.transact(
            [
                *_conditions(network, registered, ids),
                {"op": "wait", "table": "Logical_Switch",
                 "where": [["name", "==", ls_int], ["ports", "includes", ["uuid", uuid]]],
                 "columns": ["name"], "until": "==", "rows": [{"name": ls_int}], "timeout": 0},
                {"op": "wait", "table": "Logical_Switch_Port",
                 "where": [["name", "==", spare],
                           ["external_ids", "includes", omap({TAG: network, SPARE: "true"})]],
                 "columns": ["dynamic_addresses"], "until": "==",
                 "rows": [{"dynamic_addresses": dynamic}], "timeout": 0},
                {"op": "update", "table": "Logical_Switch_Port",
                 "where": [["name", "==", spare],
                           ["external_ids", "includes", omap({TAG: network, SPARE: "true"})]],
                 "row": {"external_ids": omap({TAG: network, **ids}),
                         **({"port_security": security} if security else {})}},
                *spare_ops(network, str(ids.get("podnet-chassis", "")), refill),
            ]
        )  # fmt: skip
    except Conflict as err:
        _refuse_held(err, len(held) + 1, network, ids)
        if held and err.op == 0:
            raise
        return False
    return True


def secure_port(nb: Ovsdb, network: str, port: str, dynamic: str, security: str) -> None:
    """Set pod port ``port``'s ``port_security`` to ``security`` (``"MAC IPv4 [IPv6]"``,
    ovn-nb(5): OVN then drops what the pod sends from another MAC or address, and what it would
    receive for another), on the condition that northd still gives it ``dynamic_addresses``
    ``dynamic`` (what ``security`` was parsed from): Conflict otherwise."""
    nb.transact(
        [
            {"op": "wait", "table": "Logical_Switch_Port", "where": mine(network, port),
             "columns": ["dynamic_addresses"], "until": "==",
             "rows": [{"dynamic_addresses": dynamic}], "timeout": 0},
            {"op": "update", "table": "Logical_Switch_Port", "where": mine(network, port),
             "row": {"port_security": security}},
        ]
    )  # fmt: skip


def delete_spares(nb: Ovsdb, network: str) -> int:
    """Remove every spare port of ``network`` (all chassis): their addresses go back to the
    subnet. On the condition that the spares are still the ones read (a spare another node
    claims meanwhile is its pod's: the read is taken again, 3 times at most, then Conflict).
    How many there were."""
    from podnet.ovn.ovsdb import Conflict

    where = [["external_ids", "includes", omap({TAG: network, SPARE: "true"})]]
    for attempt in range(3):
        rows = nb.select("Logical_Switch_Port", where, ["_uuid"])
        if not rows:
            return 0
        try:
            nb.transact(
                [
                    _still(where, rows),
                    {"op": "mutate", "table": "Logical_Switch",
                     "where": mine(network, names(network)["ls_int"]),
                     "mutations": [["ports", "delete", oset([r["_uuid"] for r in rows])]]},
                ]
            )  # fmt: skip
            return len(rows)
        except Conflict:
            if attempt == 2:
                raise
    return 0


#: ``external_ids`` key of a spare whose chassis a GC found missing from the SB:
#: ``<seconds since the epoch>@<the marking node's chassis>``. The marking node judges the
#: mark's age by its own clock (nodes' clocks need not agree).
ORPHANED = "podnet-orphaned-since"
#: Seconds a chassis must stay out of the SB before its spares go: a routine ovn-controller
#: stop or restart (``ovn-ctl stop_controller`` deletes the Chassis row) takes far less.
ORPHAN_GRACE = 900
#: Seconds a node's own mark may lie ahead of its clock (a later one is made again).
ORPHAN_SLACK = 60
#: Seconds after which a node takes over another live node's mark, by its own clock: that
#: marker does not sweep (podnet gone from it, or its runtime never calls GC).
ORPHAN_TAKEOVER = 86400
#: Operations per NB transaction of a sweep (``ovsdb-client`` takes a transaction as one
#: argument, at most 128 KiB).
SWEEP_BATCH = 100


def southbound_view(sb: Ovsdb) -> tuple[set[str], set[str]]:
    """The SB's chassis names and the NB logical switches it has datapaths of (their NB
    ``_uuid``, from ``Datapath_Binding`` ``external_ids:logical-switch``), in one transaction:
    what :func:`sweep_spares` judges by."""
    found = sb.transact(
        [
            {"op": "select", "table": "Chassis", "where": [], "columns": ["name"]},
            {"op": "select", "table": "Datapath_Binding", "where": [], "columns": ["external_ids"]},
        ]
    )
    chassis = {str(r["name"]) for r in found[0].get("rows", [])}
    switches = {str(pymap(r["external_ids"]).get("logical-switch"))
                for r in found[1].get("rows", [])}  # fmt: skip
    return chassis, switches


def _mark(text: str) -> tuple[int, str] | None:
    """A mark's ``(time, marker)``; None when it is not one podnet writes."""
    since, sep, marker = text.partition("@")
    if not (sep and marker and since.isascii() and since.isdigit() and len(since) < 19):
        return None
    return int(since), marker


def _mark_again(mark: tuple[int, str] | None, chassis: set[str], here: str, now: int) -> bool:
    """Whether this node marks a spare of a missing chassis anew, as its own: no valid mark;
    the marker's chassis gone too; its own mark ahead of its clock; another live node's mark
    :data:`ORPHAN_TAKEOVER` old by this node's clock."""
    if mark is None or mark[1] not in chassis:
        return True
    if mark[1] == here:
        return mark[0] > now + ORPHAN_SLACK
    return now - mark[0] >= ORPHAN_TAKEOVER


def sweep_spares(nb: Ovsdb, chassis: set[str], switches: set[str], here: str, now: int) -> int:
    """Spares of chassis the SB no longer has (:func:`southbound_view`): a node taken out of
    the cluster leaves ports nothing will claim, holding addresses. Judged only among the ports
    of each podnet network's internal switch, and only where the SB has that switch's datapath
    (else it is another cluster's SB, or not synced yet), and not at all while the SB lacks
    ``here`` (this node's chassis). A spare whose chassis is missing is marked
    (:data:`ORPHANED`) by the first node to see it, and again as described in
    :func:`_mark_again`; its marker removes it once the mark is :data:`ORPHAN_GRACE` seconds
    old by the marker's clock; any node unmarks it when its chassis is back. A mark or unmark
    holds only while the port is still a spare with the mark read (when one was); a removal
    only while each port is still the spare with the mark read, else it waits for the next GC.
    At most :data:`SWEEP_BATCH` operations per transaction. How many were removed."""
    from podnet.ovn.ovsdb import Conflict

    if here not in chassis:
        return 0
    members: dict[str, set[str]] = {}  # network → its internal switch's ports
    for row in nb.select("Logical_Switch", [], ["_uuid", "name", "external_ids", "ports"]):
        network = str(pymap(row["external_ids"]).get(TAG, ""))
        uuid = str(pyatom(row["_uuid"]))
        if network and row["name"] == names(network)["ls_int"] and uuid in switches:
            members[network] = {str(p) for p in pyset(row["ports"])}
    rows = nb.select("Logical_Switch_Port", [["external_ids", "includes", omap({SPARE: "true"})]],
                     ["_uuid", "external_ids"])  # fmt: skip
    marks: list[dict[str, Any]] = []
    due: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        ids, uuid = pymap(row["external_ids"]), str(pyatom(row["_uuid"]))
        network = str(ids.get(TAG, ""))
        if uuid not in members.get(network, ()) or not ids.get("podnet-chassis"):
            continue  # not a spare of a podnet switch the SB has
        held = {TAG: network, SPARE: "true"}
        if ORPHANED in ids:
            held[ORPHANED] = str(ids[ORPHANED])
        where = [["_uuid", "==", ["uuid", uuid]], ["external_ids", "includes", omap(held)]]
        mark = _mark(str(ids.get(ORPHANED, "")))
        mutations: list[Any] = []
        if str(ids["podnet-chassis"]) in chassis:
            if ORPHANED in ids:
                mutations = [["external_ids", "delete", oset([ORPHANED])]]
        elif _mark_again(mark, chassis, here, now):
            mutations = [["external_ids", "delete", oset([ORPHANED])],
                         ["external_ids", "insert", omap({ORPHANED: f"{now}@{here}"})]]  # fmt: skip
        elif mark is not None and mark[1] == here and now - mark[0] >= ORPHAN_GRACE:
            due.setdefault(network, []).append(
                {"op": "wait", "table": "Logical_Switch_Port", "timeout": 0, "until": "==",
                 "where": where, "columns": ["_uuid"],
                 "rows": [{"_uuid": ["uuid", uuid]}]})  # fmt: skip
        if mutations:
            marks.append({"op": "mutate", "table": "Logical_Switch_Port", "where": where,
                          "mutations": mutations})  # fmt: skip
    for start in range(0, len(marks), SWEEP_BATCH):
        nb.transact(marks[start : start + SWEEP_BATCH])
    removed = 0
    for network, waits in sorted(due.items()):
        for start in range(0, len(waits), SWEEP_BATCH):
            batch = waits[start : start + SWEEP_BATCH]
            gone = [w["rows"][0]["_uuid"] for w in batch]
            try:
                nb.transact([*batch, {"op": "mutate", "table": "Logical_Switch",
                                      "where": mine(network, names(network)["ls_int"]),
                                      "mutations": [["ports", "delete", oset(gone)]]}])  # fmt: skip
            except Conflict:
                continue  # a spare claimed, unmarked or gone meanwhile: the next GC looks again
            removed += len(gone)
    return removed


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


def delete_port(
    nb: Ovsdb, network: str, port: str, attachment: tuple[str, str, str] | None = None
) -> None:
    """Remove ``port`` from ``network``'s internal switch (the port row goes with it); no error
    when either is gone. ``attachment``: ``(container_id, CNI_IFNAME, chassis)``, removing
    whichever of its ports the NB holds for that chassis when ``port`` is not known (a claimed
    spare's name); another node's port of the same container ID stays."""
    n = names(network)
    where = mine(network, port) if attachment is None else [
        ["external_ids", "includes", omap({TAG: network, "podnet-container": attachment[0],
                                           "podnet-ifname": attachment[1],
                                           "podnet-chassis": attachment[2]})]]  # fmt: skip
    rows = nb.select("Logical_Switch_Port", where, ["_uuid"])
    if not rows:
        return
    nb.transact(
        [
            {"op": "mutate", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "mutations": [["ports", "delete", oset([r["_uuid"] for r in rows])]]},
        ]
    )  # fmt: skip


def ports_of_chassis(nb: Ovsdb, chassis: str) -> list[dict[str, Any]]:
    """Every pod port podnet made for ``chassis``, spares included: ``name``, ``external_ids``
    (a dict)."""
    rows = nb.select(
        "Logical_Switch_Port",
        [["external_ids", "includes", omap({"podnet-chassis": chassis})]],
        ["name", "external_ids"],
    )
    return [{"name": r["name"], "external_ids": pymap(r["external_ids"])} for r in rows]


def pods_by_network(nb: Ovsdb) -> dict[str, list[str]]:
    """The container IDs of every pod port podnet made, on any node, per network (spares and
    the nodes' management ports are no pod's): ``{network: sorted IDs}``. A port whose
    network tag or container ID is not one podnet could have written (CNI's container ID
    syntax) is left out: NB text reaches the API's answers only parsed."""
    from podnet.cni.env import valid_container_id
    from podnet.networks.config import check_name
    from podnet.networks.errors import NetworkError

    rows = nb.select("Logical_Switch_Port", [], ["external_ids"])
    found: dict[str, set[str]] = {}
    for row in rows:
        ids = pymap(row["external_ids"])
        network, cid = ids.get(TAG), ids.get("podnet-container")
        if not isinstance(network, str) or not isinstance(cid, str) or ids.get(SPARE):
            continue
        try:
            check_name(network)
        except NetworkError:
            continue
        if valid_container_id(cid):
            found.setdefault(network, set()).add(cid)
    return {n: sorted(c) for n, c in found.items()}


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
