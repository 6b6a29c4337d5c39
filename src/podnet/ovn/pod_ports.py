"""Pods' logical switch ports on an OVN network's internal switch: ``pn-<network>-pod-<hex>``,
``"<MAC> dynamic"`` (northd assigns the addresses, ovn-northd(8)), ``requested-chassis`` the
pod's node (ovn-nb(5), ``Logical_Switch_Port`` ``options``). Every change of a network's rows
matches its ``podnet-network`` tag (:func:`podnet.ovn.nb.ours`).

The conditions a port is made or claimed under (:func:`conditions`) are shared with the spare
pool (:mod:`podnet.ovn.spares`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from podnet.errors import InterfaceExists
from podnet.ovn import builders as b
from podnet.ovn.nb import PREFIX, TAG, mine, names
from podnet.ovn.ops import Op, eq, tagged
from podnet.ovn.ovsdb import Conflict, Ovsdb, WaitTimedOut
from podnet.ovn.row import Row, rows

#: ``external_ids`` keys of a pod's port: the attachment and who made it.
CONTAINER = "podnet-container"
IFNAME = "podnet-ifname"
CHASSIS = "podnet-chassis"
#: ``external_ids`` key marking a spare port (value ``true``, :mod:`podnet.ovn.spares`): made
#: ahead, no pod's yet.
SPARE = "podnet-spare"


def port_name(network: str, container_id: str, ifname: str) -> str:
    """The logical switch port of one attachment: unique per (container, CNI_IFNAME, network),
    derived, so a DEL finds it without any state."""
    digest = hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:20]
    return f"pn-{network}-pod-{digest}"


def record_held(network: str, record: str | None) -> list[Op]:
    """A ``wait`` that the NB still holds ``network``'s registry record as ``record``
    (none when ``record`` is None)."""
    return [] if record is None else [b.global_ids_hold({PREFIX + network: record})]


def _unheld(network: str, ids: Mapping[str, str]) -> list[Op]:
    """A ``wait`` that no port of ``network`` belongs to the attachment in ``ids``
    (``podnet-container``, ``podnet-ifname``): one port per attachment in the cluster, also
    when two nodes ADD the same container ID."""
    if CONTAINER not in ids:
        return []
    held = {TAG: network, CONTAINER: ids[CONTAINER], IFNAME: ids.get(IFNAME, "")}
    return [b.ports_none([tagged(held)])]


def refuse_held(err: Conflict, index: int, network: str, ids: Mapping[str, str]) -> None:
    """InterfaceExists (102) when the failed ``wait`` (``err.op``) was the one at ``index``:
    :func:`conditions`' ``wait`` that the attachment has no port."""
    if err.op == index:
        raise InterfaceExists(
            f"container {ids.get(CONTAINER)} already has a port for "
            f"{ids.get(IFNAME)} on network {network} (made by another ADD or node)"
        ) from None


def conditions(network: str, record: str | None, ids: Mapping[str, str]) -> list[Op]:
    """The ``wait`` operations a pod's port is made or claimed under: the network's record
    (:func:`record_held`), its internal switch, and no port of the attachment (at index
    ``len(record_held(...)) + 1``, :func:`refuse_held`)."""
    ls_int = names(network)["ls_int"]
    return [
        *record_held(network, record),
        b.switch_exists(mine(network, ls_int), ls_int),
        *_unheld(network, ids),
    ]


def add_port(
    nb: Ovsdb, network: str, port: str, mac: str, chassis: str, ids: Mapping[str, str],
    registered: str | None = None,
) -> None:  # fmt: skip
    """Create logical switch port ``port`` on ``network``'s internal switch with ``"<mac>
    dynamic"`` (northd assigns the addresses: unique across every node) and
    ``requested-chassis`` this node. ``registered``: the network's registry record as the
    caller knows it (the node's mirror), which the NB must still hold — the port is then made
    without reading the whole registry. TxnFailed when the switch does not exist or the port
    does (a duplicate name is a constraint violation); Conflict also when the record differs;
    InterfaceExists (102) when the attachment in ``ids`` already has a port."""
    held = record_held(network, registered)
    try:
        nb.transact(
            [
                *conditions(network, registered, ids),
                b.port(port, "pod", addresses=f"{mac} dynamic",
                       options={"requested-chassis": chassis},
                       external_ids={TAG: network, **ids}),
                b.switch_add_ports(mine(network, names(network)["ls_int"]), ["pod"]),
            ]
        )  # fmt: skip
    except Conflict as err:
        refuse_held(err, len(held) + 1, network, ids)
        raise


def secure_port(nb: Ovsdb, network: str, port: str, dynamic: str, security: str) -> None:
    """Set pod port ``port``'s ``port_security`` to ``security`` (``"MAC IPv4 [IPv6]"``,
    ovn-nb(5): OVN then drops what the pod sends from another MAC or address, and what it would
    receive for another), on the condition that northd still gives it ``dynamic_addresses``
    ``dynamic`` (what ``security`` was parsed from): Conflict otherwise."""
    nb.transact(
        [
            b.port_addresses_are(mine(network, port), dynamic),
            b.port_update(mine(network, port), port_security=security),
        ]
    )


def port_addresses(nb: Ovsdb, port: str, timeout_ms: int) -> list[str]:
    """The port's ``dynamic_addresses`` (``MAC IPv4 [IPv6]``) split, waiting up to
    ``timeout_ms`` for northd to assign them; [] when it did not."""
    try:
        results = nb.transact(
            [b.port_addressed(port, timeout_ms),
             b.ports_select([eq("name", port)], ["dynamic_addresses"])]
        )  # fmt: skip
    except WaitTimedOut:
        return []
    found = rows(results[1])
    return found[0].first("dynamic_addresses").split() if found else []


def delete_port(
    nb: Ovsdb, network: str, port: str, attachment: tuple[str, str, str] | None = None
) -> None:
    """Remove ``port`` from ``network``'s internal switch (the port row goes with it); no error
    when either is gone. ``attachment``: ``(container_id, CNI_IFNAME, chassis)``, removing
    whichever of its ports the NB holds for that chassis when ``port`` is not known (a claimed
    spare's name); another node's port of the same container ID stays."""
    where = mine(network, port) if attachment is None else [
        tagged({TAG: network, CONTAINER: attachment[0], IFNAME: attachment[1],
                CHASSIS: attachment[2]})]  # fmt: skip
    found = nb.select(b.LSP, where, ["_uuid"])
    if not found:
        return
    nb.transact([b.switch_remove_ports(mine(network, names(network)["ls_int"]),
                                       [r["_uuid"] for r in found])])  # fmt: skip


def ports_of_chassis(nb: Ovsdb, chassis: str) -> list[Row]:
    """Every pod port podnet made for ``chassis``, spares included: rows with ``name`` and
    ``external_ids``."""
    return nb.select(b.LSP, [tagged({CHASSIS: chassis})], ["name", "external_ids"])


def pods_by_network(nb: Ovsdb) -> dict[str, list[str]]:
    """The container IDs of every pod port podnet made, on any node, per network (spares and
    the nodes' management ports are no pod's):
    ``{network: sorted IDs}``. A port whose network tag or container ID is not one podnet
    could have written (CNI's container ID syntax) is left out: NB text reaches the API's
    answers only parsed."""
    # the plugin's ADD imports this module, the API's listing only calls this function
    from podnet.cni.env import valid_container_id
    from podnet.networks.config import check_name
    from podnet.networks.errors import NetworkError

    found: dict[str, set[str]] = {}
    for row in nb.select(b.LSP, [], ["external_ids"]):
        ids = row.external_ids
        network, cid = ids.get(TAG), ids.get(CONTAINER)
        if network is None or cid is None or ids.get(SPARE):
            continue
        try:
            check_name(network)
        except NetworkError:
            continue
        if valid_container_id(cid):
            found.setdefault(network, set()).add(cid)
    return {n: sorted(c) for n, c in found.items()}
