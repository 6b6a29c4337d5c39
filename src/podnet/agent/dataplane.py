"""What the agent makes the node hold, given the cluster's Nodes: the podnet conflist from this
node's podCIDRs (:mod:`podnet.agent.conflist`), a route to every other Node's podCIDRs
(:mod:`podnet.agent.routes`) and the cluster destinations egress masquerade leaves alone
(:mod:`podnet.agent.masq`).

:meth:`Dataplane.sync` is level-triggered: given the whole current view it makes the node hold
what that view calls for, changing nothing when the node already does (a restarted agent finds
its routes by their ``proto``, its set elements in the kernel, its conflist ranges in the
store). It never raises for a kernel, file or store failure: it logs it and returns False, and
the caller retries with backoff.

Nodes are checked before anything is made for them (:func:`admit`), against what the node's
tables hold (:func:`podnet.agent.routes.survey`) and against each other. A Node is refused —
logged once, nothing made for it: no route, its podCIDRs not cluster destinations — when a
podCIDR of it is no pod range (:func:`range_problem`: the plugin's rule for ``ranges``, so no
bare address, public, loopback, link-local, multicast or reserved range); equals or overlaps
one of this node's; overlaps (equal, inside or over) a route of the node that is not the
agent's (its LANs, static routes, other daemons' routes: every route of the main table but the
default routes), holds an address of the node (its local table) or the next hop of its
default route; when it overlaps the podCIDR of another Node that is kept (the one already
routed or made a cluster destination wins, else the first by name: a newcomer never takes a
working Node's routes away); or when its InternalIP is of no use as a next hop (unspecified,
loopback, multicast, IPv6 link-local, this node's own, or inside a podCIDR). A Node with a
podCIDR of a family it has no InternalIP of gets no route of that family (logged once). The
rest proceed. When the node's tables cannot be listed or the store cannot be opened, nothing
is made for any Node that sync (False: retried).
"""

from __future__ import annotations

import functools

from podnet import checked
from podnet.agent.conflist import Conflist
from podnet.agent.masq import NO_MASQUERADE, Masquerade
from podnet.agent.notes import LOG, Notes
from podnet.agent.routes import Routes, survey
from podnet.errors import CNIError, KernelError
from podnet.store import open_store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Set

    from podnet.agent.model import Node
    from podnet.agent.routes import Host
    from podnet.agent.settings import Settings
    from podnet.checked import IP, Net
    from podnet.store import Store

__all__ = ["Dataplane", "admit", "host_problem", "range_problem"]


def _useless(ip: IP) -> str | None:
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.version == 6 and ip.is_link_local:
        return "IPv6 link-local (a next hop needs a link)"
    return None


#: IPv4 blocks no pod range may touch that :func:`podnet.checked.pod_range_problem` lets by:
#: "this network" (RFC 1122 3.2.1.3, never a destination) and the reserved 240.0.0.0/4
#: (RFC 1112 section 4).
_RESERVED = (checked.network("0.0.0.0/8"), checked.network("240.0.0.0/4"))


@functools.lru_cache(maxsize=8192)  # a sync asks for every Node's podCIDRs, mostly the same
def range_problem(net: Net) -> str | None:
    """Why ``net`` cannot be a Node's podCIDR on any node, or None: the plugin's own rule for
    ``ranges`` (at least 4 addresses — network, gateway, one pod, last — so a bare address,
    which the API takes as a /32 or /128, is refused; :func:`podnet.checked.pod_range_problem`:
    private, no loopback, link-local, multicast or public range) and none of
    :data:`_RESERVED`."""
    if net.num_addresses < 4:
        return (f"{net} is too small for a pod range (a bare address, or a prefix of less than "
                f"4 addresses: a pod range needs network, gateway, one pod, last)")
    problem = checked.pod_range_problem(net)
    if problem is not None:
        return problem
    for block in _RESERVED:
        if net.overlaps(block):
            return f"{net} overlaps {block}, reserved (RFC 1122, RFC 1112): not a pod range"
    return None


def host_problem(net: Net, host: Host, my_ips: list[IP]) -> str | None:
    """Why a podCIDR ``net`` of another Node cannot be routed on this node, or None: it
    overlaps (or equals) a route of the node that is not the agent's (``host.routes``: the
    node's LANs, static and other daemons' routes — the default routes aside, which every
    prefix overlaps), holds an address of the node (``host.local``, ``my_ips``: this Node's
    InternalIPs) or the next hop of a default route."""
    first, last = int(net.network_address), int(net.broadcast_address)
    for (version, start, end), dst in host.spans():
        if version == net.version and start <= last and first <= end:
            shown = host.routes.get(dst)
            return (f"its podCIDR {net} overlaps the node's route {shown}" if shown is not None
                    else f"its podCIDR {net} holds an address of this node ({dst})")  # fmt: skip
    for ip in [*my_ips, *host.gateways]:
        if ip.version == net.version and ip in net:
            what = "this node's InternalIP" if ip in my_ips else "the next hop of its default route"
            return f"its podCIDR {net} holds {what} {ip}"
    return None


def _overlaps(nodes: list[Node], settled: Set[str]) -> dict[str, tuple[str, str]]:
    """Node name → (the condition, why it is refused: the condition and which rule kept the
    other Node), for every Node whose podCIDR overlaps that of a Node
    kept before it. Kept first: the Nodes of ``settled`` (the ones already routed or made
    cluster destinations), then by name; a Node is kept when it overlaps none kept. The
    Nodes overlapping nothing are found by a sorted sweep per family (O(n log n)); only the
    contested ones are compared with each other."""
    contested: set[str] = set()
    for family in (4, 6):
        spans = sorted((int(n.pod_cidrs[family].network_address),
                        int(n.pod_cidrs[family].broadcast_address), n.name)
                       for n in nodes if family in n.pod_cidrs)  # fmt: skip
        group: list[str] = []
        end = -1
        for first, last, name in spans:
            if first > end:
                if len(group) > 1:
                    contested.update(group)
                group, end = [], -1
            group.append(name)
            end = max(end, last)
        if len(group) > 1:
            contested.update(group)
    order = sorted((n for n in nodes if n.name in contested),
                   key=lambda n: (n.name not in settled, n.name))
    kept: list[Node] = []
    out: dict[str, tuple[str, str]] = {}
    for node in order:
        clash = [(k, f, k.pod_cidrs[f]) for k in kept for f, net in node.pod_cidrs.items()
                 if f in k.pod_cidrs and net.overlaps(k.pod_cidrs[f])]  # fmt: skip
        if not clash:
            kept.append(node)
            continue
        other, family, theirs = clash[0]
        kept_as = "already routed" if other.name in settled else "first by name"
        why = f"its podCIDR {node.pod_cidrs[family]} overlaps that of Node {other.name} ({theirs}"
        out[node.name] = (why + ")", f"{why}, kept: {kept_as})")
    return out


def admit(me: Node | None, others: Mapping[str, Node], notes: Notes, host: Host | None = None,
          settled: Set[str] = frozenset()) -> list[Node]:  # fmt: skip
    """The Nodes of ``others`` (name → Node) anything may be made for, sorted by name; each
    refused one is noted (:class:`~podnet.agent.notes.Notes`, once) with the reason. ``host``
    (:func:`podnet.agent.routes.survey`) is what the node's tables hold: a podCIDR is checked
    against it (:func:`host_problem`) when given. Of Nodes whose podCIDRs overlap, the ones
    in ``settled`` win (:func:`_overlaps`)."""
    mine = dict(me.pod_cidrs) if me is not None else {}
    my_ips = list(me.internal_ips.values()) if me is not None else []
    refused: dict[str, tuple[str, str]] = {}  # name → (the condition, what is said)
    candidates = []
    for name in sorted(others):
        node = others[name]
        if me is not None and node.name == me.name:
            continue
        why = None
        for family, net in node.pod_cidrs.items():
            ours = mine.get(family)
            problem = range_problem(net)
            if problem is not None:
                why = f"its podCIDR {problem}"
            elif ours is not None and net.overlaps(ours):
                why = f"its podCIDR {net} {'equals' if net == ours else 'overlaps'} ours ({ours})"
            elif host is not None:
                why = host_problem(net, host, my_ips)
            if why is not None:
                break
        for ip in node.internal_ips.values():
            if why is not None:
                break
            useless = _useless(ip)
            if useless is None and ip in my_ips:
                useless = "this node's own address"
            if useless is None:
                inside = [n for n in [*mine.values(), *node.pod_cidrs.values()] if ip in n]
                useless = f"inside podCIDR {inside[0]}" if inside else None
            if useless is not None:
                why = f"its InternalIP {ip} is of no use as a next hop ({useless})"
        if why is not None:
            refused[name] = (why, why)
        else:
            candidates.append(node)
    refused.update(_overlaps(candidates, settled))
    for name, (condition, why) in sorted(refused.items()):
        notes.note(("refused", name, condition), f"Node {name} refused: {why}; nothing made for it")
    return [n for n in candidates if n.name not in refused]


class Dataplane:
    """The node side of the agent (``settings``: :class:`podnet.agent.settings.Settings`).
    Opens the store of ``settings.data_dir`` (the one the conflist's pods use, so the table's
    owner) when first needed; :meth:`close` closes it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.notes = Notes()
        self.conflist = Conflist(settings, self.notes)
        self.routes = Routes(self.notes)
        self.masq = Masquerade(self.notes)
        self._store: Store | None = None

    def _open(self) -> Store:
        if self._store is None:
            self._store = open_store(self.settings.data_dir)
        return self._store

    def sync(self, me: Node | None, others: dict[str, Node]) -> bool:
        """Make the node hold what ``me`` (this node's Node, None while it is not seen) and
        ``others`` (every other Node by name: the whole view) call for: conflist, routes,
        cluster destinations. True when all of it is applied; False (logged) when something
        failed and a retry is due. Never raises an Exception (a BaseException such as
        KeyboardInterrupt passes)."""
        self.notes.begin()
        try:
            return self._sync(me, others)
        except Exception as err:  # noqa: BLE001 - the agent keeps running and retries
            LOG.exception("sync failed: %s", err)
            return False
        finally:
            self.notes.end()

    def _sync(self, me: Node | None, others: dict[str, Node]) -> bool:
        try:
            store = self._open()
        except CNIError as err:
            LOG.error("cannot open the store in %s: %s", self.settings.data_dir, err.msg)
            for part in ("conflist", "route", "masq", "refused"):
                self.notes.keep(part)
            return False
        ok = self._part("conflist", lambda: self.conflist.sync(me, store))
        view = {net: node.internal_ips[f] for node in others.values()
                for f, net in node.pod_cidrs.items() if f in node.internal_ips}  # fmt: skip
        try:
            host = survey(self.routes.recorded(store), view)
        except KernelError as err:  # nothing is made for a Node not checked against the node
            LOG.error("%s: %s", err.msg, err.details)
            for part in ("route", "masq", "refused"):
                self.notes.keep(part)
            return False
        held = set(store.cluster_cidrs())  # the Nodes made cluster destinations last time
        settled = {name for name, node in others.items() if any(
            net in host.ours or (str(net), f"node:{name}") in held  # str: checked.text's
            for net in node.pod_cidrs.values())}  # fmt: skip
        nodes = admit(me, others, self.notes, host, settled)
        want = {}
        for node in nodes:
            for family, net in node.pod_cidrs.items():
                gw = node.internal_ips.get(family)
                if gw is None:
                    self.notes.note(("route", "noip", node.name, str(family)),
                                    f"no route to {net} (Node {node.name}): it has no IPv{family} "
                                    f"InternalIP")  # fmt: skip
                    continue
                want[net] = (gw, node.name)
        ok &= self._part("routes", lambda: self.routes.sync(want, host, store))
        rows = [(checked.text(n), NO_MASQUERADE) for n in self.settings.no_masquerade_cidrs]
        for node in [*([me] if me is not None else []), *nodes]:
            rows += [(checked.text(n), f"node:{node.name}") for n in node.pod_cidrs.values()
                     if node is not me or range_problem(n) is None]  # fmt: skip
        ok &= self._part("masq", lambda: self.masq.sync(store, rows))
        return ok

    def _part(self, name: str, run: Callable[[], bool]) -> bool:
        """Run one part of a sync: an error it did not expect is logged, not raised."""
        try:
            return bool(run())
        except CNIError as err:
            LOG.error("%s: %s%s", name, err.msg, f": {err.details}" if err.details else "")
        except OSError as err:
            LOG.error("%s: %s", name, err)
        return False

    def close(self) -> None:
        """Close the store (a later :meth:`sync` opens it again)."""
        if self._store is not None:
            self._store.close()
            self._store = None
