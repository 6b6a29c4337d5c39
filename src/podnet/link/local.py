"""Which addresses are the node's own: what ``fib daddr type local`` matches in the node netns
(the ``local`` routes of the kernel's local table — each address on an interface, and all of
``127.0.0.0/8``).

hostPorts answer only there (their chains sit behind ``fib daddr type local``), while a network
forward answers on its listen address wherever the node receives it. Whether a forward and a
hostPort can take the same traffic therefore depends on whether the forward's listen address
is local. Read with one ``ip -j route show table all type local``; callers
ask only when a candidate clash exists.
"""

from __future__ import annotations

from podnet import checked, proc
from podnet.errors import KernelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.checked import Net


def _routes(what: str, *selector: str, started: proc.Spawned | None = None) -> list[object]:
    """``ip -j route show table all [selector…]`` as a list (``[]`` for anything but a list),
    or the output of ``started`` (:func:`start_reading_routes`); KernelError (104) when ``ip``
    fails or prints something unreadable."""
    from podnet.cni.fastjson import loads

    if started is not None:
        out = started.check()
    else:
        out = proc.run(["ip", "-j", "route", "show", "table", "all", *selector])
    try:
        routes = loads(out) if out.strip() else []
    except ValueError as err:
        raise KernelError(f"ip printed unreadable JSON for the {what}", str(err)) from None
    return routes if isinstance(routes, list) else []


def local_prefixes() -> list[Net]:
    """The node's local prefixes (``127.0.0.0/8``, ``10.0.0.1/32``, ``::1/128``, …).
    KernelError (104) when ``ip`` fails or prints something unreadable."""
    found = []
    for route in _routes("local routes", "type", "local"):
        dst = route.get("dst") if isinstance(route, dict) else None
        try:
            found.append(checked.network(dst, strict=False))
        except checked.BadValue:
            continue
    return found


def is_local(address: str, prefixes: Sequence[Net]) -> bool:
    """Whether ``address`` (an address's text) is one of the node's own."""
    ip = checked.ip(address)
    return any(ip.version == p.version and ip in p for p in prefixes)


#: Route types that do not take a destination's traffic to a link (they only describe it).
_PASSIVE = ("broadcast", "multicast", "anycast")


def _route_prefixes(started: proc.Spawned | None = None) -> list[tuple[Net, str]]:
    """``(destination, device)`` of the node netns's routes in every table, both families,
    broadcast/multicast/anycast entries and destinations that are no prefix (``default``) left
    out; ``started``: an ``ip -j route show table all`` already running. KernelError (104)."""
    out = []
    for route in _routes("routes", started=started):
        if not isinstance(route, dict) or route.get("type") in _PASSIVE:
            continue
        try:
            prefix = checked.network(route.get("dst"), strict=False)
        except checked.BadValue:
            continue  # "default" and the like
        out.append((prefix, str(route.get("dev") or "")))
    return out


def foreign_routes(nets: Sequence[Net], owner: str) -> list[tuple[str, str]]:
    """``(destination, device)`` of the node netns's routes (every table, both families, the
    local table's addresses included; default routes and broadcast/multicast entries not) that
    overlap one of ``nets`` and whose device does not carry ``owner``'s alias: a pod range or
    bridge subnet there would take the traffic of hosts the node already reaches — its
    resolver, its gateway, its neighbours. KernelError
    (104) when ``ip`` fails."""
    from podnet.link.veth import alias_of

    found = []
    for prefix, dev in _route_prefixes():
        if prefix.prefixlen == 0:
            continue
        if any(n.version == prefix.version and n.overlaps(prefix) for n in nets):
            if not dev or alias_of(dev) != owner:
                found.append((str(prefix), dev or "?"))
    return found


def start_reading_routes() -> proc.Spawned:
    """``ip -j route show table all`` started now, for :func:`routes_over` (``started``) to
    read later: the node's routes are read alongside other work. Reap it on failure."""
    return proc.spawn(["ip", "-j", "route", "show", "table", "all"], die_with_parent=True)


def routes_over(nets: Sequence[Net], *, skip_dev: str = "", owner: str = "",
                started: proc.Spawned | None = None) -> list[tuple[str, str]]:  # fmt: skip
    """``(destination, device)`` of the node netns's routes (every table, both families, the
    local table's addresses included; broadcast/multicast entries not) that overlap one of
    ``nets``. Routes that cover everything are left out like the default route: prefix length
    0, and the halves ``0.0.0.0/1``/``128.0.0.0/1`` (``::/1``/``8000::/1``) that VPN clients
    (OpenVPN's ``redirect-gateway def1``, WireGuard's ``AllowedIPs``) add to win over it —
    every subnet overlaps them; the destinations the node talks to through them are checked by
    address instead. Left out too: the routes on ``skip_dev`` when that link carries
    ``owner``'s alias (the network's own management link, podnet's); a route on a link of the
    same name that is not podnet's, and every route via a gateway, counts whatever the gateway
    is. Whatever made them: an address there would take their traffic. ``started``: the routes
    as :func:`start_reading_routes` read them. KernelError (104) when ``ip`` fails."""
    from podnet.link.veth import alias_of

    found = []
    for prefix, dev in _route_prefixes(started):
        if prefix.prefixlen <= 1:
            continue
        if not any(n.version == prefix.version and n.overlaps(prefix) for n in nets):
            continue
        if skip_dev and owner and dev == skip_dev and alias_of(dev) == owner:
            continue
        found.append((str(prefix), dev or "?"))
    return found
