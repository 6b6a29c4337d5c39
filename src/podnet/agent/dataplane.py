"""What the agent makes the node hold, given the cluster's Nodes: the podnet conflist from this
node's podCIDRs (:mod:`podnet.agent.conflist`), a route to every other Node's podCIDRs
(:mod:`podnet.agent.routes`) and the cluster destinations egress masquerade leaves alone
(:mod:`podnet.agent.masq`).

:meth:`Dataplane.sync` is level-triggered: given the whole current view it makes the node hold
what that view calls for, changing nothing when the node already does (a restarted agent finds
its routes by their ``proto``, its set elements in the kernel, its conflist ranges in the
store). It never raises for a kernel, file or store failure: it logs it and returns False, and
the caller retries with backoff.

Nodes are checked against each other before anything is made for them (:func:`admit`). A Node
is refused — logged once, nothing made for it: no route, its podCIDRs not cluster
destinations — when a podCIDR of it equals or overlaps one of this node's, when it overlaps
another Node's (both are refused: which one is right cannot be told), or when its InternalIP is
of no use as a next hop (unspecified, loopback, multicast, IPv6 link-local, this node's own,
or inside a podCIDR). A Node with a podCIDR of a family it has no InternalIP of gets no route
of that family (logged once). The rest proceed.
"""

from __future__ import annotations

from podnet import checked
from podnet.agent.notes import LOG, Notes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from podnet.agent.model import Node
    from podnet.agent.settings import Settings
    from podnet.checked import IP, Net
    from podnet.store import Store

__all__ = ["Dataplane", "admit"]


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


def _overlaps(nodes: list[Node]) -> dict[str, str]:
    """Node name → why it is refused, for every Node whose podCIDR overlaps another's (sorted
    sweep per family: O(n log n))."""
    out: dict[str, str] = {}
    for family in (4, 6):
        spans = sorted((int(n.pod_cidrs[family].network_address),
                        int(n.pod_cidrs[family].broadcast_address), n.name, n.pod_cidrs[family])
                       for n in nodes if family in n.pod_cidrs)  # fmt: skip
        group: list[tuple[str, Net]] = []
        end = -1
        for first, last, name, net in spans:
            if first > end:
                _refuse_group(group, out)
                group, end = [], -1
            group.append((name, net))
            end = max(end, last)
        _refuse_group(group, out)
    return out


def _refuse_group(group: list[tuple[str, Net]], out: dict[str, str]) -> None:
    if len(group) < 2:
        return
    for name, net in group:
        others = ", ".join(f"{n} ({c})" for n, c in group if n != name)
        out.setdefault(name, f"its podCIDR {net} overlaps that of Node {others}")


def admit(me: Node | None, others: Mapping[str, Node], notes: Notes) -> list[Node]:
    """The Nodes of ``others`` (name → Node) anything may be made for, sorted by name; each
    refused one is noted (:class:`~podnet.agent.notes.Notes`, once) with the reason."""
    mine = dict(me.pod_cidrs) if me is not None else {}
    my_ips = set(me.internal_ips.values()) if me is not None else set()
    refused: dict[str, str] = {}
    candidates = []
    for name in sorted(others):
        node = others[name]
        if me is not None and node.name == me.name:
            continue
        why = None
        for family, net in node.pod_cidrs.items():
            ours = mine.get(family)
            if ours is not None and net.overlaps(ours):
                why = f"its podCIDR {net} {'equals' if net == ours else 'overlaps'} ours ({ours})"
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
            refused[name] = why
        else:
            candidates.append(node)
    refused.update(_overlaps(candidates))
    for name, why in sorted(refused.items()):
        notes.note(("refused", name, why), f"Node {name} refused: {why}; nothing made for it")
    return [n for n in candidates if n.name not in refused]


class Dataplane:
    """The node side of the agent (``settings``: :class:`podnet.agent.settings.Settings`).
    Opens the store of ``settings.data_dir`` (the one the conflist's pods use, so the table's
    owner) when first needed; :meth:`close` closes it."""

    def __init__(self, settings: Settings) -> None:
        from podnet.agent.conflist import Conflist
        from podnet.agent.masq import Masquerade
        from podnet.agent.routes import Routes

        self.settings = settings
        self.notes = Notes()
        self.conflist = Conflist(settings, self.notes)
        self.routes = Routes(self.notes)
        self.masq = Masquerade(self.notes)
        self._store: Store | None = None

    def _open(self) -> Store:
        if self._store is None:
            from podnet.store import open_store

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
        from podnet.agent.masq import NO_MASQUERADE
        from podnet.errors import CNIError

        nodes = admit(me, others, self.notes)
        ok = True
        try:
            store = self._open()
        except CNIError as err:
            LOG.error("cannot open the store in %s: %s", self.settings.data_dir, err.msg)
            store = None
            ok = False
        if store is not None:
            ok &= self._part("conflist", lambda: self.conflist.sync(me, store))
        else:
            self.notes.keep("conflist")
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
        ok &= self._part("routes", lambda: self.routes.sync(want))
        if store is not None:
            rows = [(checked.text(n), NO_MASQUERADE) for n in self.settings.no_masquerade_cidrs]
            for node in [*([me] if me is not None else []), *nodes]:
                rows += [(checked.text(n), f"node:{node.name}") for n in node.pod_cidrs.values()]
            ok &= self._part("masq", lambda: self.masq.sync(store, rows))
        else:
            self.notes.keep("masq")
        return ok

    def _part(self, name: str, run: Callable[[], bool]) -> bool:
        """Run one part of a sync: an error it did not expect is logged, not raised."""
        from podnet.errors import CNIError

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
