"""The collection of orphaned spare ports (:mod:`podnet.ovn.spares`): a node taken out of the
cluster leaves spares nothing will claim, holding addresses. A GC judges them against the
southbound database (its ``Chassis`` rows, ovn-sb(5)), marks them, and removes them once the
mark is old enough by the marking node's own clock.
"""

from __future__ import annotations

from typing import Any

from podnet.ovn import builders as b
from podnet.ovn.nb import TAG, mine, names
from podnet.ovn.ops import Op, eq, tagged, uuid
from podnet.ovn.ovsdb import Conflict, Ovsdb
from podnet.ovn.pod_ports import CHASSIS, SPARE
from podnet.ovn.row import rows

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
    found = sb.transact([b.sb_chassis(), b.sb_datapaths()])
    chassis = {r.name for r in rows(found[0])}
    switches = {str(r.external_ids.get("logical-switch")) for r in rows(found[1])}
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


def _networks_switches(nb: Ovsdb, switches: set[str]) -> dict[str, set[str]]:
    """Network → the ports of its internal switch, for the podnet networks whose switch the
    SB has a datapath of."""
    members: dict[str, set[str]] = {}
    for row in nb.select(b.LS, [], ["_uuid", "name", "external_ids", "ports"]):
        network = row.external_ids.get(TAG, "")
        if network and row.name == names(network)["ls_int"] and row.uuid in switches:
            members[network] = {str(p) for p in row.set("ports")}
    return members


def sweep_spares(nb: Ovsdb, chassis: set[str], switches: set[str], here: str, now: int) -> int:
    """Spares of chassis the SB no longer has (:func:`southbound_view`). Judged only among the
    ports of each podnet network's internal switch, and only where the SB has that switch's
    datapath (else it is another cluster's SB, or not synced yet), and not at all while the SB
    lacks ``here`` (this node's chassis). A spare whose chassis is missing is marked
    (:data:`ORPHANED`) by the first node to see it, and again as described in
    :func:`_mark_again`; its marker removes it once the mark is :data:`ORPHAN_GRACE` seconds
    old by the marker's clock; any node unmarks it when its chassis is back. A mark or unmark
    holds only while the port is still a spare with the mark read (when one was); a removal
    only while each port is still the spare with the mark read, else it waits for the next GC.
    At most :data:`SWEEP_BATCH` operations per transaction. How many were removed."""
    if here not in chassis:
        return 0
    members = _networks_switches(nb, switches)
    found = nb.select(b.LSP, [tagged({SPARE: "true"})], ["_uuid", "external_ids"])
    marks: list[Op] = []
    due: dict[str, list[tuple[Op, str]]] = {}
    for row in found:
        ids, port = row.external_ids, row.uuid
        network = ids.get(TAG, "")
        if port not in members.get(network, ()) or not ids.get(CHASSIS):
            continue  # not a spare of a podnet switch the SB has
        held = {TAG: network, SPARE: "true"}
        if ORPHANED in ids:
            held[ORPHANED] = ids[ORPHANED]
        where = [eq("_uuid", uuid(port)), tagged(held)]
        mark = _mark(ids.get(ORPHANED, ""))
        if ids[CHASSIS] in chassis:
            if ORPHANED in ids:
                marks.append(b.port_ids(where, [ORPHANED]))
        elif _mark_again(mark, chassis, here, now):
            marks.append(b.port_ids(where, [ORPHANED], {ORPHANED: f"{now}@{here}"}))
        elif mark is not None and mark[1] == here and now - mark[0] >= ORPHAN_GRACE:
            due.setdefault(network, []).append((b.ports_are(where, [uuid(port)]), port))
    for start in range(0, len(marks), SWEEP_BATCH):
        nb.transact(marks[start : start + SWEEP_BATCH])
    removed = 0
    for network, waits in sorted(due.items()):
        for start in range(0, len(waits), SWEEP_BATCH):
            batch = waits[start : start + SWEEP_BATCH]
            gone: list[Any] = [uuid(p) for _, p in batch]
            try:
                nb.transact([*(w for w, _ in batch),
                             b.switch_remove_ports(mine(network, names(network)["ls_int"]),
                                                   gone)])  # fmt: skip
            except Conflict:
                continue  # a spare claimed, unmarked or gone meanwhile: the next GC looks again
            removed += len(gone)
    return removed
