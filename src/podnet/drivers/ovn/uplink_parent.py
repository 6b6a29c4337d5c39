"""What this node's kernel says of an uplink's parent interface (``ip -j``, in the caller's
network namespace): its addresses, whether it is up, and the routes through it — what a
``physical`` network checks before it takes the parent (:mod:`podnet.drivers.ovn.physical`;
LXD's rules in lxd/network/driver_physical.go).
"""

from __future__ import annotations

import json

from podnet import proc


def parent_addresses(parent: str) -> list[str] | None:
    """The IP addresses on ``parent`` in this netns (None: no such interface)."""
    rc, out, _ = proc.spawn(["ip", "-j", "addr", "show", "dev", parent]).wait()
    if rc != 0:
        return None
    try:
        links = json.loads(out or "[]")
    except ValueError:
        return None
    return [
        a.get("local", "")
        for link in links
        for a in link.get("addr_info", [])
        if a.get("scope") != "link"
    ]


def link_state(ifname: str) -> tuple[bool, str]:
    """Whether ``ifname`` is up — administratively (``IFF_UP``) and operationally (``UP``, or
    ``UNKNOWN`` for devices that report no carrier state, a dummy say) — and its state as
    ``ip -j link`` gives it (``DOWN``, ``LOWERLAYERDOWN``, ``admin down``…); ``(False, "")``
    when there is no such link. RFC 2863 operational states, as the kernel reports them."""
    rc, out, _ = proc.spawn(["ip", "-j", "link", "show", "dev", ifname]).wait()
    try:
        links = json.loads(out or "[]") if rc == 0 else []
    except ValueError:
        links = []
    if not links or not isinstance(links[0], dict):
        return False, ""
    flags = links[0].get("flags") or []
    oper = str(links[0].get("operstate", "UNKNOWN"))
    if "UP" not in flags:
        return False, "administratively down"
    return oper in ("UP", "UNKNOWN"), f"operational state {oper}"


def routes_through(parent: str) -> list[str]:
    """Destinations routed through ``parent`` in any table of this netns — as a route's device
    or one of its nexthops (multipath), or in a nexthop object — besides what the kernel keeps
    on every link (the local table, IPv6 link-local and multicast)."""
    found = []
    for argv in (["-4", "route", "show", "table", "all"], ["-6", "route", "show", "table", "all"],
                 ["nexthop", "show"]):  # fmt: skip
        rc, out, _ = proc.spawn(["ip", "-j", *argv]).wait()
        try:
            routes = json.loads(out or "[]") if rc == 0 else []
        except ValueError:
            routes = []
        for route in routes if isinstance(routes, list) else []:
            devs = [route.get("dev")] + [h.get("dev") for h in route.get("nexthops") or []
                                         if isinstance(h, dict)]  # fmt: skip
            if parent not in devs:
                continue
            dst = str(route.get("dst", f"nexthop {route.get('id', '?')}"))
            if route.get("table") == "local" or route.get("type") in ("local", "multicast"):
                continue
            if dst.startswith(("fe80::", "ff00::")):
                continue
            found.append(dst)
    return found
