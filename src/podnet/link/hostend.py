"""The host end of a pod's veth once it exists: its alias (whose it is), its deletion (DEL, an
ADD's undo, GC), the listing of a store's host ends, and keeping the node's IP stack off an
Open vSwitch port's host end. :mod:`podnet.link.veth` makes the pair."""

from __future__ import annotations

from podnet import proc
from podnet.errors import KernelError


def quiet_host_end(host_if: str) -> None:
    """Keep the node's own IP stack off an OVS port's host end: no ARP answers for the node's
    addresses (``arp_ignore=8``) and no IPv6 on it. With the userspace datapath the kernel also
    sees every frame on the veth; it answered a pod's ARP for the management port's address
    with the veth's MAC, so replies to hostPort connections from 127.0.0.1 bypassed OVS and
    died as martians. OSError when a setting cannot be written."""
    import os

    from podnet.link import sysctl

    sysctl.write_path(f"/proc/sys/net/ipv4/conf/{host_if}/arp_ignore", "8")
    ipv6 = f"/proc/sys/net/ipv6/conf/{host_if}/disable_ipv6"
    if os.path.exists(ipv6):  # absent when the node runs without IPv6
        sysctl.write_path(ipv6, "1")


def alias_of(name: str) -> str | None:
    """The alias of link ``name`` in the calling thread's netns ("" none, None: no such link),
    asked over rtnetlink (:func:`podnet.link.rtnl.link`), not read from ``/sys/class/net``,
    which shows the netns sysfs was mounted in. A name with no ``/proc/sys/net/ipv{4,6}/conf``
    entry (those follow the caller's netns) is answered None without a socket: every link has
    one but a link with an MTU under 68, which podnet never makes. KernelError (104) when the
    kernel refuses the question."""
    from podnet.link import rtnl, sysctl

    if not rtnl.possible(name) or not sysctl.interface_exists(name):
        return None
    try:
        found = rtnl.link(name)
    except OSError as err:
        raise KernelError(f"failed to read link {name!r}", str(err)) from err
    return None if found is None else found.alias


def prespawn_delete() -> proc.Spawned:
    """Start an ``ip -batch -`` for :func:`start_delete_host` before the host end's name may be
    deleted (DEL holds the write lock first); never fed, it exits having done nothing."""
    return proc.spawn(["ip", "-batch", "-"], defer=True)


def start_delete_host(host_if: str, spawned: proc.Spawned | None = None) -> proc.Spawned:
    """Start deleting the host end (the kernel removes the peer), in ``spawned`` (from
    :func:`prespawn_delete`) or a new ``ip``; wait with :func:`finish_delete`.

    The deletion waits for an RCU grace period (~20 ms), so callers overlap it with other work.
    """
    if spawned is None:
        spawned = prespawn_delete()
    spawned.feed(f"link del dev {host_if}\n".encode())
    return spawned


def finish_delete(spawned: proc.Spawned, host_if: str) -> None:
    """Collect a deletion of ``host_if``; a link that is already gone is success (DEL is
    idempotent). KernelError (104) with ``ip``'s message otherwise."""
    rc, _, err = spawned.wait()
    if rc != 0 and "Cannot find device" not in err and "does not exist" not in err:
        raise KernelError(f"failed to delete {host_if}", err.strip())


def delete_host(host_if: str, owner: str | None = None) -> None:
    """Delete the host end now; gone already is success. With ``owner`` (a store's alias), a
    link carrying another alias is left alone: it is not this store's. Raises
    :class:`KernelError`."""
    if owner is not None and alias_of(host_if) not in (None, "", owner):
        return
    finish_delete(start_delete_host(host_if), host_if)


def list_host_links(prefix: str, alias: str) -> list[str]:
    """Names of the veths in the current netns named ``prefix…`` with alias ``alias``."""
    from podnet.cni.fastjson import loads

    out = proc.run(["ip", "-j", "link", "show", "type", "veth"])
    try:
        links = loads(out) if out.strip() else []
    except ValueError as err:
        raise KernelError("ip printed unreadable JSON for its link list", str(err)) from None
    return [
        str(link["ifname"])
        for link in links
        if isinstance(link, dict)
        and str(link.get("ifname", "")).startswith(prefix)
        and link.get("ifalias") == alias
    ]
