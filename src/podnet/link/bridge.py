"""A bridge network's Linux bridge in the node netns (through ``ip``): created with its gateway
addresses, forwarding on, brought back after a reboot, reconfigured, deleted — and only ever a
bridge podnet made.

The bridge is named after the network (LXD's convention) and marked when it is created: its
alias (``ifalias``) names the store that owns it (``podnet:<dataDir>``, as on podnet's host
veths). A link of that name that does not carry the mark is never taken over, reconfigured or
deleted (:class:`NotOurs`): not a veth, not ``lo``, not a pod's host end, not
another store's bridge. Its IPv6 address is added ``nodad``; ``route_localnet`` is set on it
(127.0.0.1 → a hostPort of a pod on the bridge is DNATed out of the node's loopback, as on
podnet's point-to-point host veths). Addresses are typed (:mod:`ipaddress` interfaces) and names
checked (:func:`podnet.checked.name`); every ``ip`` failure is a
:class:`~podnet.errors.KernelError` (104) with ``ip``'s message.
"""

from __future__ import annotations

from podnet import checked, proc
from podnet.errors import KernelError
from podnet.link import rtnl, sysctl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.checked import Iface


class NotOurs(KernelError):
    """A link of the bridge's name exists and podnet's mark is not on it (code 104): podnet
    refuses to take it over, change it or delete it. ``alias`` is what the link carries."""

    def __init__(self, name: str, owner: str, alias: str | None, kind: str) -> None:
        what = f"its alias is {checked.show(alias)}" if alias else "it carries no podnet alias"
        super().__init__(
            f"a {kind} named {name} exists and was not made by this podnet store "
            f"({what}, not {owner!r}): podnet does not take over links it did not make"
        )
        self.alias = alias


def exists(name: str) -> bool:
    """Whether an interface ``name`` exists in the current netns (asked of the kernel)."""
    return _link(name) is not None


def alias_of(name: str) -> str | None:
    """The alias (``ifalias``) of link ``name``: "" when it has none, None when there is no
    such link. BadValue for a name podnet would not have given a link."""
    from podnet.link import veth

    return veth.alias_of(checked.name(name))


def _link(name: str) -> rtnl.Link | None:
    """Link ``name`` of the current netns as the kernel reports it (:mod:`podnet.link.rtnl`:
    not ``/sys/class/net``, which is the netns sysfs was mounted in), or None."""
    try:
        return rtnl.link(checked.name(name))
    except OSError as err:
        raise KernelError(f"failed to read link {name}", str(err)) from err


def _kind(name: str) -> str:
    link = _link(name)
    if link is not None and link.kind == "bridge":
        return "bridge"
    if link is not None and link.port_kind == "bridge":
        return "bridge port"
    return "link"


def owned(name: str, owner: str) -> bool | None:
    """Whether ``name`` is a bridge carrying ``owner``'s mark: True, False (a link that is not
    ours), or None (no such link). One question to the kernel (alias and kind together)."""
    link = _link(name)
    if link is None:
        return None
    return link.alias == owner and link.kind == "bridge"


class BridgeState:
    """An existing bridge as the kernel has it: ``up`` (``IFF_UP``), ``mtu`` (bytes) and its
    global ``addresses``."""

    __slots__ = ("up", "mtu", "addresses")

    def __init__(self, up: bool, mtu: int, addresses: list[Iface]) -> None:
        self.up, self.mtu, self.addresses = up, mtu, addresses


def state(name: str, owner: str) -> BridgeState | None:
    """Bridge ``name`` (``owner``'s) as it is now, or None when there is no such link;
    :class:`NotOurs` for a link of that name that is not ours."""
    from podnet.link import mtu

    if not require_ours(name, owner):
        return None
    link = _link(name)
    try:
        size = mtu.link_mtu(name)
    except OSError:
        size = 0
    up = link is not None and bool(link.flags & rtnl.IFF_UP)
    return BridgeState(up, size, current_addresses(name))


def ours_and_up(name: str, owner: str) -> bool:
    """Whether ``name`` is a bridge carrying ``owner``'s mark and administratively up
    (``IFF_UP``): one question to the kernel."""
    link = _link(name)
    return (link is not None and link.alias == owner and link.kind == "bridge"
            and bool(link.flags & rtnl.IFF_UP))  # fmt: skip


def require_ours(name: str, owner: str) -> bool:
    """True when bridge ``name`` exists and is ``owner``'s, False when there is no such link;
    :class:`NotOurs` when a link of that name is not ours."""
    mine = owned(name, owner)
    if mine is False:
        raise NotOurs(name, owner, alias_of(name), _kind(name))
    return bool(mine)


def _batch(lines: Sequence[str], what: str) -> None:
    script = "".join(checked.batch_line(line) + "\n" for line in lines).encode()
    rc, _, err = proc.spawn(["ip", "-batch", "-"], script, die_with_parent=True).wait()
    if rc != 0:
        raise KernelError(f"failed to {what}", err.strip())


def _address_lines(name: str, addresses: Sequence[Iface], verb: str) -> list[str]:
    return [f"addr {verb} {checked.text(a)} dev {name}"
            f"{' nodad' if a.version == 6 and verb == 'add' else ''}"
            for a in addresses]  # fmt: skip


def _sysctls(name: str, addresses: Sequence[Iface]) -> None:
    try:
        if any(a.version == 4 for a in addresses):
            sysctl.write("net.ipv4.ip_forward", "1")
            sysctl.write_path(f"/proc/sys/net/ipv4/conf/{name}/route_localnet", "1")
        if any(a.version == 6 for a in addresses):
            sysctl.write_path(f"/proc/sys/net/ipv6/conf/{name}/accept_dad", "0")
            if sysctl.read("net.ipv6.conf.all.forwarding") != "1":
                sysctl.write("net.ipv6.conf.all.forwarding", "1")
    except OSError as err:
        raise KernelError(f"failed to set sysctls of bridge {name}", str(err)) from err


def create(name: str, addresses: Sequence[Iface], mtu: int = 0, *, owner: str) -> None:
    """Create bridge ``name`` marked as ``owner``'s (its alias), with ``addresses`` (gateway
    interfaces), ``mtu`` bytes (0: kernel default), up. A bridge of that name with ``owner``'s
    mark is taken over and given the addresses (idempotent, for ``network restore``); any other
    link of that name is :class:`NotOurs`."""
    from podnet.link.veth import q

    checked.name(name)
    if require_ours(name, owner):
        configure(name, [], addresses, mtu, owner=owner)
        return
    # multicast snooping off: a pod's first neighbour solicitation must reach the bridge at
    # once, whatever MLD reports the bridge has (or has not yet) seen
    # 'name': brd, mtu, …; mtu before 'type': after it, ip reads the bridge type's options
    mtu_words = f" mtu {mtu}" if mtu else ""
    create_line = f"link add name {name}{mtu_words} type bridge mcast_snooping 0"
    _batch([create_line, f"link set dev {name} alias {q(owner)}"], f"create bridge {name}")
    try:
        # before the link is up: with DAD on, its link-local address stays tentative for a
        # second, and the node cannot resolve a pod's address (no NS source) meanwhile
        _sysctls(name, addresses)
        _batch([*_address_lines(name, addresses, "add"), f"link set dev {name} up"],
               f"address bridge {name}")  # fmt: skip
    except KernelError:
        delete(name, owner=owner)
        raise


def configure(name: str, old: Sequence[Iface], new: Sequence[Iface], mtu: int = 0, *,
              owner: str) -> None:  # fmt: skip
    """Move bridge ``name`` (``owner``'s: else :class:`NotOurs`) from addresses ``old`` to
    ``new`` (and to ``mtu`` when non-zero); addresses it lacks are added, ones it has kept."""
    if not require_ours(name, owner):
        raise KernelError(f"failed to configure bridge {name}", f"{name} does not exist")
    have = current_addresses(name)
    lines = _address_lines(name, [a for a in old if a not in new and a in have], "del")
    lines += _address_lines(name, [a for a in new if a not in have], "add")
    if mtu:
        lines.append(f"link set dev {name} mtu {mtu}")
    lines.append(f"link set dev {name} up")
    _batch(lines, f"configure bridge {name}")
    _sysctls(name, new)


def current_addresses(name: str) -> list[Iface]:
    """The global addresses on ``name`` (``[]`` when it does not exist)."""
    from podnet.cni.fastjson import loads

    rc, out, _ = proc.spawn(["ip", "-j", "addr", "show", "dev", name, "scope", "global"]).wait()
    if rc != 0:
        return []
    try:
        links = loads(out) if out.strip() else []
    except ValueError:
        return []
    found = []
    for link in links:
        for a in link.get("addr_info", []):
            try:
                found.append(checked.interface(f"{a['local']}/{a['prefixlen']}"))
            except (KeyError, checked.BadValue):
                continue
    return found


def delete(name: str, *, owner: str) -> bool:
    """Delete bridge ``name`` (its ports are released) if it is ``owner``'s; gone already is
    success. Returns whether a bridge was deleted. A link of that name that is not ours is
    left alone: :class:`NotOurs`."""
    if not require_ours(name, owner):
        return False
    rc, _, err = proc.spawn(["ip", "link", "del", "dev", name]).wait()
    if rc != 0 and "Cannot find device" not in err and "does not exist" not in err:
        raise KernelError(f"failed to delete bridge {name}", err.strip())
    return rc == 0


def attach(port: str, name: str, *, owner: str) -> None:
    """Make ``port`` (a pod's host veth end, carrying ``owner``'s alias) a port of bridge
    ``name`` (``owner``'s), hairpin on. :class:`NotOurs` for a port or bridge that is not."""
    if alias_of(port) != owner:
        raise NotOurs(port, owner, alias_of(port), _kind(port))
    require_ours(name, owner)
    _batch([f"link set dev {checked.name(port)} master {name}",
            f"link set dev {port} type bridge_slave hairpin on"],
           f"attach {port} to bridge {name}")  # fmt: skip


def port_of(port: str) -> str | None:
    """The bridge ``port`` is a port of (its master), or None (none, or no such link)."""
    link = _link(port)
    if link is None or not link.master:
        return None
    try:
        master = rtnl.by_index(link.master)
    except OSError as err:
        raise KernelError(f"failed to read the master of {port}", str(err)) from err
    return master.name if master is not None else None
