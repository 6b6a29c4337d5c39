"""Routes to the other Nodes' pods: each podCIDR via that Node's InternalIP of its family, in
the main table, as kindnetd makes them (``kindnetd``'s ``routes.go``: a route through the node
address, only when that address is on-link).

On-link: the kernel's own answer for the address (``ip -j route get``, asked in one
``ip -batch`` for all of them) has no ``gateway`` and is of type unicast — the address is on
one of this node's links, as kindnetd checks before it routes. Otherwise the route is not made,
and that is logged once. It is asked for every route to be made or changed; a route the agent
holds already through the same next hop is not asked about again (the kernel checked the
next hop when it took the route; a Node's new InternalIP is a new next hop, asked about).

Ownership: every route the agent makes carries ``proto`` :data:`PROTO`. At each sync the agent
lists the main table (``ip -j -N route show``, numeric protocols) and knows its own routes by
that number — so a restarted agent finds what it made and changes nothing when all is right.
A route to a podCIDR with any other protocol (a static route an administrator made, another
CNI's) is never replaced or deleted: the agent logs it once and makes no route there. Changes
go in one ``ip -force -batch`` (``route del <net> via <old> proto N``, then ``route add <net>
via <gw> proto N``: a delete matches the protocol, an add never overwrites an existing route),
and the table is listed again to tell what the kernel took.
"""

from __future__ import annotations

import json
import logging

from podnet import checked, proc
from podnet.agent.notes import LOG, Notes
from podnet.errors import KernelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.checked import IP, Net

__all__ = ["PROTO", "Routes", "Want"]

#: The ``proto`` (``rtm_protocol``) of the agent's routes: 113, not in iproute2's
#: ``rt_protos`` list (0-4 and 8-18 system and routing daemons, 42 babel, 99 openr, 186-192
#: bgp, isis, ospf, rip, eigrp) nor among the protocols of ``linux/rtnetlink.h``.
PROTO = 113

#: A wanted route: destination → (next hop, the Node it is for).
Want = dict["Net", tuple["IP", str]]


def _ip(*argv: str, script: str | None = None) -> tuple[int, str, str]:
    data = script.encode() if script is not None else None
    return proc.spawn(["ip", *argv], data).wait()


def _dst(value: object, family: int) -> Net | None:
    """A route listing's ``dst`` as a network (``default`` and malformed ones: None)."""
    if not isinstance(value, str) or value == "default":
        return None
    try:
        return checked.network(value if "/" in value else f"{value}/{32 if family == 4 else 128}")
    except checked.BadValue:
        return None


def listing(family: int) -> tuple[dict[Net, IP | None], dict[Net, str]]:
    """The main table's routes of ``family``: the agent's own (destination → next hop, None
    for one without a single gateway) and every other route's destination → its protocol
    (number as text). KernelError (104) when ``ip`` fails or prints what is not its JSON."""
    rc, out, err = _ip("-j", "-N", f"-{family}", "route", "show", "table", "main")
    if rc != 0:
        raise KernelError(f"ip failed to list the IPv{family} routes", err.strip())
    try:
        rows = json.loads(out) if out.strip() else []
    except ValueError as exc:
        raise KernelError("ip printed unreadable JSON for the routes", str(exc)) from None
    ours: dict[Net, IP | None] = {}
    theirs: dict[Net, str] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        dst = _dst(row.get("dst"), family)
        if dst is None:
            continue
        protocol = str(row.get("protocol", "3"))  # iproute2 leaves out "boot" (3)
        if protocol == str(PROTO):
            try:
                ours[dst] = checked.ip(row.get("gateway"))
            except checked.BadValue:
                ours[dst] = None
        else:
            theirs.setdefault(dst, protocol)
    return ours, theirs


def on_link(addresses: list[IP]) -> dict[IP, str | None]:
    """For each address, None when it is on-link (the kernel routes it on a link, no gateway),
    else why not (``via <gateway>``, ``unreachable``, ``a local address``)."""
    if not addresses:
        return {}
    script = "".join(f"route get {checked.text(a)}\n" for a in addresses)
    _, out, _ = _ip("-j", "-force", "-batch", "-", script=script)
    answers: dict[IP, dict[str, object]] = {}
    for line in out.splitlines():
        try:
            rows = json.loads(line)
            row = rows[0]
            answers[checked.ip(row["dst"])] = row
        except (ValueError, LookupError, TypeError):
            continue
    out_of: dict[IP, str | None] = {}
    for address in addresses:
        row = answers.get(address)
        if row is None:
            out_of[address] = "unreachable"
        elif row.get("type", "unicast") != "unicast":
            out_of[address] = f"of type {row.get('type')}" if row.get("type") != "local" \
                else "a local address"  # fmt: skip
        elif row.get("gateway"):
            out_of[address] = f"routed via {checked.show(row.get('gateway'))}"
        else:
            out_of[address] = None
    return out_of


class Routes:
    """The agent's routes; :meth:`sync` makes the main table hold the wanted ones."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes

    def sync(self, want: Want) -> bool:
        """Make the routes of :data:`PROTO` be ``want``'s, each only while its next hop is
        on-link and no route of another protocol has its destination. Logs one line per route
        added, changed or removed, and once each one not made. False when a listing fails or
        the kernel refuses a change (logged)."""
        ok = True
        ours: dict[Net, IP | None] = {}
        theirs: dict[Net, str] = {}
        families = {4, 6}
        for family in sorted(families):
            try:
                mine, other = listing(family)
            except KernelError as err:
                LOG.error("%s: %s", err.msg, err.details)
                return False
            ours.update(mine)
            theirs.update(other)
        unsure = {gw for dst, (gw, _) in want.items() if ours.get(dst, "-") != gw}
        reasons = on_link(sorted(unsure, key=lambda a: (a.version, a)))
        target: dict[Net, tuple[IP, str]] = {}
        for dst, (gw, node) in sorted(want.items(), key=lambda i: (i[0].version, i[0])):
            if dst in theirs and dst not in ours:
                self.notes.note(("route", "foreign", str(dst)),
                                f"route to {dst} (Node {node}) not made: a route of proto "
                                f"{theirs[dst]} to it exists; left alone")  # fmt: skip
                continue
            why = reasons.get(gw)
            if why is not None:
                self.notes.note(("route", "offlink", str(dst), str(gw)),
                                f"route to {dst} (Node {node}) not made: its InternalIP {gw} "
                                f"is not on-link ({why})")  # fmt: skip
                continue
            target[dst] = (gw, node)
        lines: list[tuple[str, str]] = []  # (command, what it does, for the log)
        for dst, old in sorted(ours.items(), key=lambda i: (i[0].version, i[0])):
            new = target.get(dst)
            if new is not None and new[0] == old:
                continue
            via = f" via {checked.text(old)}" if old is not None else ""
            lines.append((f"route del {checked.text(dst)}{via} proto {PROTO}",
                          f"route {dst}{via} removed" if new is None else ""))  # fmt: skip
        for dst, (gw, node) in sorted(target.items(), key=lambda i: (i[0].version, i[0])):
            if ours.get(dst, "-") == gw:
                continue
            was = f" (was via {ours[dst]})" if dst in ours else ""
            lines.append((f"route add {checked.text(dst)} via {checked.text(gw)} proto {PROTO}",
                          f"route {dst} via {gw} for Node {node} "
                          f"{'changed' if was else 'added'}{was}"))  # fmt: skip
        if not lines:
            return ok
        script = "".join(f"{cmd}\n" for cmd, _ in lines)
        _, _, stderr = _ip("-force", "-batch", "-", script=script)
        failed = _failed_lines(stderr)
        for number, (cmd, what) in enumerate(lines, 1):
            if number in failed:
                self.notes.note(("route", "refused", cmd),
                                f"the kernel refused `ip {cmd}`: {failed[number]}",
                                level=logging.ERROR)  # fmt: skip
                ok = False
            elif what:
                LOG.info("%s", what)
        return ok


def _failed_lines(stderr: str) -> dict[int, str]:
    """``ip -force -batch``'s stderr as line number → the error printed before it (``Command
    failed -:N`` follows each failing line's message)."""
    out: dict[int, str] = {}
    pending: list[str] = []
    for line in stderr.splitlines():
        if line.startswith("Command failed -:"):
            try:
                out[int(line.rsplit(":", 1)[1])] = "; ".join(pending) or "failed"
            except ValueError:
                pass
            pending = []
        elif line.strip():
            pending.append(line.strip())
    return out
