"""Each node's spare ports on an OVN network's internal switch.

ovn-northd recomputes its flows on NB changes (docs/benchmarks.md, "Where an ADD's time goes
at 1,000"), and a new port's addresses and binding wait for that. A node therefore keeps a few
ports made ahead, ``requested-chassis`` itself, addresses assigned and bound to nothing: an ADD
claims one (its ``external_ids`` become the pod's, :func:`claim_port`) and plugs the veth with
its name, which ovn-controller binds without northd; the same transaction makes the spare that
replaces it, for a later ADD. The port's name is then not derived from the attachment: the
pod's row keeps it (``pod_attachments.ovn_port``).

Spares of chassis that left the cluster are collected by :mod:`podnet.ovn.orphans`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from podnet.link.names import random_mac
from podnet.ovn import builders as b
from podnet.ovn.nb import TAG, mine, names
from podnet.ovn.ops import Condition, Op, eq, tagged
from podnet.ovn.ovsdb import Conflict, Ovsdb
from podnet.ovn.pod_ports import CHASSIS, SPARE, conditions, record_held, refuse_held
from podnet.ovn.row import rows

__all__ = ["SPARE", "SPARES", "claim_port", "delete_spares", "spare_ops", "spare_rows",
           "spares", "top_up"]  # fmt: skip

#: Spare ports a node keeps per OVN network.
SPARES = 2


def _spares_of(network: str, chassis: str) -> list[Condition]:
    return [tagged({TAG: network, CHASSIS: chassis, SPARE: "true"})]


def spare_ops(network: str, chassis: str, count: int) -> list[Op]:
    """Operations making ``count`` spare ports of ``network`` for ``chassis``: named like a
    pod's port (``pn-<network>-pod-<20 random hex>``), ``"<random MAC> dynamic"``,
    ``requested-chassis`` and ``external_ids`` {network tag, ``podnet-chassis``, :data:`SPARE`}."""
    if count <= 0:
        return []
    tag = {TAG: network, CHASSIS: chassis, SPARE: "true"}
    made = [f"spare{i}" for i in range(count)]
    return [
        *(b.port(f"pn-{network}-pod-{secrets.token_hex(10)}", u,
                 addresses=f"{random_mac()} dynamic", options={"requested-chassis": chassis},
                 external_ids=tag) for u in made),
        b.switch_add_ports(mine(network, names(network)["ls_int"]), made),
    ]  # fmt: skip


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
    switch, ports = nb.transact([
        b.switch_ports(names(network)["ls_int"]),
        b.ports_select(_spares_of(network, chassis), ["_uuid", "name", "dynamic_addresses"]),
    ])  # fmt: skip
    members = {str(u) for row in rows(switch) for u in row.set("ports")}
    found = []
    prefix = f"pn-{network}-pod-"
    for row in rows(ports):
        name, tail = row.name, row.name[len(prefix) :]
        if not (row.uuid and row.uuid in members):
            continue  # on another switch (or none): not the network's
        if name.startswith(prefix) and len(tail) == 20 and set(tail) <= set("0123456789abcdef"):
            found.append((name, row.first("dynamic_addresses"), row.uuid))
    return found


def top_up(nb: Ovsdb, network: str, chassis: str, target: int) -> int:
    """Make spares of ``network`` for ``chassis`` until it has ``target``, on the condition
    that its spares are still the ones read (parallel first ADDs top up once, not each); how
    many were made (0 also when another ADD changed them first)."""
    where = _spares_of(network, chassis)
    found = nb.select(b.LSP, where, ["_uuid"])
    if len(found) >= target:
        return 0
    try:
        nb.transact([b.ports_are(where, [r["_uuid"] for r in found]),
                     *spare_ops(network, chassis, target - len(found))])  # fmt: skip
    except Conflict:
        return 0
    return target - len(found)


def claim_port(
    nb: Ovsdb, network: str, spare: str, dynamic: str, ids: Mapping[str, str],
    registered: str | None, refill: int, security: str = "", uuid: str = "",
) -> bool:  # fmt: skip
    """Make spare port ``spare`` (read with ``dynamic_addresses`` ``dynamic``) the pod's: its
    ``external_ids`` become {network tag, ``ids``} and its ``port_security`` ``security`` (the
    pod's ``"MAC IPv4 [IPv6]"``, as parsed from ``dynamic``; "" leaves it unset), and
    ``refill`` new spares for the same chassis are made, in one transaction on the conditions
    that the NB still holds ``registered`` (as :func:`podnet.ovn.pod_ports.add_port`), the
    switch, and the spare unclaimed with those addresses, in the ``ports`` of the network's
    internal switch (``uuid``: the spare's ``_uuid``, :func:`spare_rows`; without it the
    spare is never claimed), and no port held by the attachment. False when another ADD
    claimed it first or northd changed its addresses; Conflict when the record differs;
    InterfaceExists (102) when the attachment in ``ids`` already has a port."""
    if not uuid:
        return False
    ls_int = names(network)["ls_int"]
    held = record_held(network, registered)
    unclaimed = [eq("name", spare), tagged({TAG: network, SPARE: "true"})]
    try:
        nb.transact(
            [
                *conditions(network, registered, ids),
                b.switch_has_port(ls_int, uuid),
                b.port_addresses_are(unclaimed, dynamic),
                b.port_update(unclaimed, external_ids={TAG: network, **ids},
                              port_security=security),
                *spare_ops(network, str(ids.get(CHASSIS, "")), refill),
            ]
        )  # fmt: skip
    except Conflict as err:
        refuse_held(err, len(held) + 1, network, ids)
        if held and err.op == 0:
            raise
        return False
    return True


def delete_spares(nb: Ovsdb, network: str) -> int:
    """Remove every spare port of ``network`` (all chassis): their addresses go back to the
    subnet. On the condition that the spares are still the ones read (a spare another node
    claims meanwhile is its pod's: the read is taken again, 3 times at most, then Conflict).
    How many there were."""
    where = [tagged({TAG: network, SPARE: "true"})]
    for attempt in range(3):
        found = nb.select(b.LSP, where, ["_uuid"])
        if not found:
            return 0
        gone = [r["_uuid"] for r in found]
        try:
            nb.transact(
                [
                    b.ports_are(where, gone),
                    b.switch_remove_ports(mine(network, names(network)["ls_int"]), gone),
                ]
            )
            return len(found)
        except Conflict:
            if attempt == 2:
                raise
    return 0
