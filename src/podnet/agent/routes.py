"""Routes to the other Nodes' pods: each podCIDR via that Node's InternalIP of its family, in
the main table, as kindnetd makes them (``kindnetd``'s ``routes.go``: a route through the node
address, only when that address is on-link).

On-link: the kernel's own answer for the address (``ip -j route get``, asked in one
``ip -batch`` for all of them) has no ``gateway`` and is of type unicast — the address is on
one of this node's links, as kindnetd checks before it routes. Otherwise the route is not made,
and that is logged once. It is asked for every route to be made or changed; a route the agent
holds already through the same next hop is not asked about again (the kernel checked the
next hop when it took the route; a Node's new InternalIP is a new next hop, asked about).

Ownership: every route the agent makes carries ``proto`` :data:`PROTO`, and the store records
its destination (``podnet_state``, key :data:`STATE_KEY`: widened before the routes are added,
narrowed to what the kernel took after). At each sync the agent lists the main table (``ip -j
-N route show``, numeric protocols and types): its own routes are the unicast ones of that
protocol whose destination the store records, or that are exactly the route it would make for
a Node of the view (the podCIDR via that Node's InternalIP: what an agent that lost its store
made) — so a restarted agent finds what it made and changes nothing when all is right. Any
other route, of that protocol too (an administrator's blackhole, another daemon's), is never
replaced or deleted (logged once); a Node whose podCIDR meets one is refused before routes are
made (:func:`podnet.agent.dataplane.host_problem`). Changes go in one ``ip -force -batch``
(``route del <net> via <old> proto N``, then ``route add <net> via <gw> proto N``: a delete
matches the protocol, an add never overwrites an existing route); the kernel's answer per
line tells what it took.
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
    from podnet.store import Store

__all__ = ["PROTO", "STATE_KEY", "Host", "Routes", "Want", "survey"]

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


#: ``podnet_state`` key of the destinations of the routes the agent made (comma-separated).
STATE_KEY = "agent_routes"


class Host:
    """What the node's tables hold, both families, as :func:`survey` found it: ``ours`` (the
    agent's routes: destination → next hop, None for one without a single gateway),
    ``routes`` (every other route of the main table but the default routes: destination →
    how ``ip`` would show it), ``local`` (the destinations of type ``local`` of the local
    table: the node's own addresses) and ``gateways`` (the next hops of the default routes)."""

    __slots__ = ("ours", "routes", "local", "gateways", "_spans")

    def __init__(self) -> None:
        self.ours: dict[Net, IP | None] = {}
        self.routes: dict[Net, str] = {}
        self.local: list[Net] = []
        self.gateways: list[IP] = []
        self._spans: list[tuple[tuple[int, int, int], Net]] | None = None

    def spans(self) -> list[tuple[tuple[int, int, int], Net]]:
        """``routes`` then ``local`` as ((family, first, last address as int), destination),
        made once (read after the survey is complete)."""
        if self._spans is None:
            self._spans = [((d.version, int(d.network_address), int(d.broadcast_address)), d)
                           for d in [*self.routes, *self.local]]  # fmt: skip
        return self._spans


def _tables(family: int) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The rows of the main and the local table of ``family``, in one ``ip -j -N -batch``
    (one JSON array printed per command). KernelError (104) when ``ip`` fails or prints what is
    not its JSON."""
    rc, out, err = _ip("-j", "-N", f"-{family}", "-batch", "-",
                       script="route show table main\nroute show table local\n")  # fmt: skip
    if rc != 0:
        raise KernelError(f"ip failed to list the IPv{family} routes", err.strip())
    decoder = json.JSONDecoder()
    docs: list[list[dict[str, object]]] = []
    at = 0
    try:
        while out[at:].strip():
            at += len(out[at:]) - len(out[at:].lstrip())
            doc, at = decoder.raw_decode(out, at)
            if not isinstance(doc, list):
                raise ValueError("not a JSON array")
            docs.append([r for r in doc if isinstance(r, dict)])
    except ValueError as exc:
        raise KernelError("ip printed unreadable JSON for the routes", str(exc)) from None
    if len(docs) != 2:
        raise KernelError("ip printed unreadable JSON for the routes", f"{len(docs)} arrays")
    main, local = docs
    return main, local


def _gateways(row: dict[str, object]) -> list[IP]:
    hops = row.get("nexthops")
    values = [h.get("gateway") for h in hops if isinstance(h, dict)] if isinstance(hops, list) \
        else [row.get("gateway")]  # fmt: skip
    out = []
    for value in values:
        try:
            out.append(checked.ip(value))
        except checked.BadValue:
            continue
    return out


def _raw(value: object) -> str:
    """A value ``ip`` printed, as text for a log line (quoted when it is not plain)."""
    if isinstance(value, str) and value.isprintable() and " " not in value:
        return value
    return checked.show(value)


def _shown(dst: Net, row: dict[str, object]) -> str:
    """A route as ``ip`` shows it, shortly: type (when not unicast), destination, next hop or
    device, protocol."""
    kind = _TYPES.get(str(row.get("type", "1")), f"type {_raw(row.get('type'))} ")
    hops = row.get("nexthops")
    if isinstance(hops, list):
        gws = [_raw(h.get("gateway")) for h in hops if isinstance(h, dict)]
    else:
        gws = [_raw(row["gateway"])] if "gateway" in row else []
    where = f" via {', '.join(gws)}" if gws else f" dev {_raw(row['dev'])}" if "dev" in row else ""
    return f"{kind}{dst}{where} proto {_raw(row.get('protocol', '3'))}"


#: ``rtm_type`` numbers ``ip -N`` prints (``linux/rtnetlink.h``) → how ``ip`` names them.
_TYPES = {"1": "", "2": "local ", "3": "broadcast ", "4": "anycast ", "5": "multicast ",
          "6": "blackhole ", "7": "unreachable ", "8": "prohibit ", "9": "throw ", "10": "nat "}


def survey(recorded: set[Net], view: dict[Net, IP]) -> Host:
    """The node's main and local tables (``ip -j -N route show table main|local``), both
    families. A route of the main table is the agent's (in ``ours``) when it has protocol
    :data:`PROTO`, is of type unicast and either its destination is in ``recorded`` (what the
    agent made, from the store) or it is exactly the route the agent would make for a Node
    of the view (``view``: podCIDR → that Node's InternalIP, one gateway); every other route
    but a default route is in ``routes``. KernelError (104) when ``ip`` fails or prints what
    is not its JSON."""
    host = Host()
    for family in (4, 6):
        main, local = _tables(family)
        for row in main:
            if row.get("dst") == "default":
                host.gateways += _gateways(row)
                continue
            dst = _dst(row.get("dst"), family)
            if dst is None:
                continue
            protocol = str(row.get("protocol", "3"))  # iproute2 leaves out "boot" (3)
            if protocol == str(PROTO) and str(row.get("type", "1")) == "1":  # unicast
                hops = _gateways(row)
                gateway = hops[0] if len(hops) == 1 and "nexthops" not in row else None
                if dst in recorded or (gateway is not None and view.get(dst) == gateway):
                    host.ours[dst] = gateway
                    continue
            host.routes.setdefault(dst, _shown(dst, row))
        for row in local:
            dst = _dst(row.get("dst"), family)
            if dst is not None and str(row.get("type", "1")) == "2":
                host.local.append(dst)
    return host


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


def _order(net: Net) -> tuple[int, int, int]:
    """A sort key of prefixes: family, address, length (ints: ``ipaddress``'s own ordering
    costs a comparison of objects per step, at 1,000 routes a sync that shows)."""
    return net.version, int(net.network_address), net.prefixlen


class Routes:
    """The agent's routes; :meth:`sync` makes the main table hold the wanted ones."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self._record_seen: tuple[str, frozenset[Net]] | None = None

    def recorded(self, store: Store) -> set[Net]:
        """The destinations of the routes the agent made, as the store records them (parsed
        again only when the record changed: at 1,000 Nodes that is 1,000 prefixes)."""
        text = store.get_state(STATE_KEY) or ""
        if self._record_seen is not None and self._record_seen[0] == text:
            return set(self._record_seen[1])
        out: set[Net] = set()
        for item in text.split(","):
            try:
                out.add(checked.network(item))
            except checked.BadValue:
                continue
        self._record_seen = (text, frozenset(out))
        return out

    def _record(self, store: Store, dsts: set[Net]) -> None:
        order = sorted(dsts, key=_order)
        text = ",".join(map(str, order))  # ipaddress's canonical text, read back by checked
        if (store.get_state(STATE_KEY) or "") != text:
            with store.write():
                store.set_state(STATE_KEY, text)
        self._record_seen = (text, frozenset(dsts))

    def sync(self, want: Want, host: Host, store: Store) -> bool:
        """Make the agent's routes (``host.ours``, :func:`survey`) be ``want``'s, each only
        while its next hop is on-link and no other route has its destination. The store
        records the destinations before a route is added and after the kernel answered, so a
        restarted agent knows its routes and no other route of :data:`PROTO`. Logs one line
        per route added, changed or removed, and once each one not made. False when the
        kernel refuses a change (logged)."""
        ok = True
        ours = host.ours
        for shown in host.routes.values():
            if shown.endswith(f" proto {PROTO}"):
                self.notes.note(("route", "notours", shown),
                                f"route {shown} has the agent's protocol but the agent did not "
                                f"make it (its store does not record it): left alone")  # fmt: skip
        unsure = {gw for dst, (gw, _) in want.items() if ours.get(dst, "-") != gw}
        reasons = on_link(sorted(unsure, key=lambda a: (a.version, a)))
        target: dict[Net, tuple[IP, str]] = {}
        for dst, (gw, node) in sorted(want.items(), key=lambda i: _order(i[0])):
            if dst in host.routes:
                self.notes.note(("route", "foreign", str(dst)),
                                f"route to {dst} (Node {node}) not made: route "
                                f"{host.routes[dst]} exists; left alone")  # fmt: skip
                continue
            why = reasons.get(gw)
            if why is not None:
                self.notes.note(("route", "offlink", str(dst), str(gw)),
                                f"route to {dst} (Node {node}) not made: its InternalIP {gw} "
                                f"is not on-link ({why})")  # fmt: skip
                continue
            target[dst] = (gw, node)
        lines: list[tuple[str, str, Net, bool]] = []  # (command, log line, destination, adds)
        for dst, old in sorted(ours.items(), key=lambda i: _order(i[0])):
            new = target.get(dst)
            if new is not None and new[0] == old:
                continue
            via = f" via {checked.text(old)}" if old is not None else ""
            gone = f"route {dst}{via} removed" if new is None else ""
            lines.append((f"route del {checked.text(dst)}{via} proto {PROTO}", gone, dst, False))
        for dst, (gw, node) in sorted(target.items(), key=lambda i: _order(i[0])):
            if ours.get(dst, "-") == gw:
                continue
            was = f" (was via {ours[dst]})" if dst in ours else ""
            lines.append((f"route add {checked.text(dst)} via {checked.text(gw)} proto {PROTO}",
                          f"route {dst} via {gw} for Node {node} "
                          f"{'changed' if was else 'added'}{was}", dst, True))  # fmt: skip
        held = set(ours)
        self._record(store, held | set(target))  # known as ours before the kernel has them
        if not lines:
            return ok
        script = "".join(f"{cmd}\n" for cmd, _, _, _ in lines)
        _, _, stderr = _ip("-force", "-batch", "-", script=script)
        failed = _failed_lines(stderr)
        for number, (cmd, what, dst, adds) in enumerate(lines, 1):
            if number in failed:
                self.notes.note(("route", "refused", cmd),
                                f"the kernel refused `ip {cmd}`: {failed[number]}",
                                level=logging.ERROR)  # fmt: skip
                ok = False
                continue
            if adds:
                held.add(dst)
            else:
                held.discard(dst)
            if what:
                LOG.info("%s", what)
        self._record(store, held)
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
