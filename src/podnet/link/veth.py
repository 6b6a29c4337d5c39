"""The pod's point-to-point veth (ptp, as cni-kindnet wires it), as ``ip -batch`` data + apply.

Layout for a pod with address P and gateway G of family 4 (6 is the same with /128)::

    host netns:  <host_if> (G/32 on it)   route P/32 dev <host_if>
    pod netns:   <ifname>  P/32           route G/32 dev <ifname> scope link
                                          route default via G dev <ifname> src P

Source: cni-kindnet's pod wiring (its ``cmdAdd``), except that CNI_IFNAME is honoured.
"""

from __future__ import annotations

from podnet import proc
from podnet.checked import WORD_CHARS
from podnet.errors import InterfaceExists, InvalidEnv, KernelError

# the host end's own steps (podnet.link.hostend), re-exported for the callers
from podnet.link.hostend import alias_of as alias_of
from podnet.link.hostend import delete_host as delete_host
from podnet.link.hostend import finish_delete as finish_delete
from podnet.link.hostend import list_host_links as list_host_links
from podnet.link.hostend import prespawn_delete as prespawn_delete
from podnet.link.hostend import quiet_host_end as quiet_host_end
from podnet.link.hostend import start_delete_host as start_delete_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


class PodLink:
    """What to build for one attachment.

    ``addresses``: list of ``(family, pod_ip, gateway_ip)`` with family 4 or 6 (plain addresses,
    no prefix); ``mtu`` in bytes (> 0); MACs as ``"aa:bb:…"``. ``bridge``: the bridge the host
    end joins (a pod of a bridge network), "" for podnet's point-to-point layout; ``prefixes``:
    the subnet prefix length per family on a bridge (the pod is on the subnet, the gateway is
    the bridge's address). ``ovs``: the host end becomes an Open vSwitch port (no address,
    route or bridge of the kernel's; the pod end is laid out as on a bridge).
    """

    __slots__ = ("host_if", "ifname", "netns", "mtu", "addresses", "host_mac", "pod_mac", "alias",
                 "bridge", "prefixes", "ovs")  # fmt: skip

    def __init__(
        self,
        *,
        host_if: str,
        ifname: str,
        netns: str,
        mtu: int,
        addresses: Sequence[tuple[int, str, str]],
        host_mac: str,
        pod_mac: str,
        alias: str = "",
        bridge: str = "",
        prefixes: dict[int, int] | None = None,
        ovs: bool = False,
    ) -> None:
        from podnet.checked import text

        self.host_if = host_if
        self.ifname = ifname
        self.netns = netns
        self.mtu = mtu
        # every address is written into ip batches: text() refuses anything but an address
        self.addresses = [(f, text(pod_ip), text(gw)) for f, pod_ip, gw in addresses]
        self.host_mac = host_mac
        self.pod_mac = pod_mac
        self.alias = alias
        self.bridge = bridge
        self.prefixes = prefixes or {}
        self.ovs = ovs


#: Characters a double-quoted ``ip -batch`` word may hold: iproute2 takes everything up to the
#: next ``"`` literally (no escapes), but a line break ends the command and ``#`` a comment.
_WORD_CHARS = WORD_CHARS


def q(word: str) -> str:
    """``word`` as one ``ip -batch`` argument: double-quoted, so interface names such as
    ``help`` or ``up`` and the alias are taken literally. Refused (ValueError) — never escaped —
    unless every character is one of ``[A-Za-z0-9_.-/+@,=~:]``: the words given here passed
    :func:`podnet.checked.name` (CNI_IFNAME, bridges) or :func:`podnet.checked.path` (CNI_NETNS,
    the dataDir in the alias) where they entered."""
    if not word or not _WORD_CHARS.issuperset(word):
        raise ValueError(f"refusing to give ip the word {word!r}")
    return f'"{word}"'


def host_batch(link: PodLink) -> list[str]:
    """``ip -batch`` lines for the node netns: create the pair, address and route the host end."""
    lines = [
        f"link add {link.host_if} mtu {link.mtu} address {link.host_mac} type veth "
        f"peer name {q(link.ifname)} mtu {link.mtu} address {link.pod_mac} netns {q(link.netns)}",
        f"link set dev {link.host_if} up",
    ]
    if link.alias:
        lines.insert(1, f"link set dev {link.host_if} alias {q(link.alias)}")
    if link.ovs:  # an OVS port: Open vSwitch forwards its frames, the node's stack stays off
        return lines
    if link.bridge:
        # a bridge port: no address or route of its own; hairpin so a frame may leave by the
        # port it came in (a pod reaching a forward that targets itself through the bridge)
        lines.insert(-1, f"link set dev {link.host_if} master {q(link.bridge)}")
        lines.insert(-1, f"link set dev {link.host_if} type bridge_slave hairpin on")
        # the address may have belonged to a pod since gone: forget its MAC (a forward to the
        # address must reach the new pod at once, not after the neighbour entry times out)
        lines += [f"neigh flush to {ip} dev {q(link.bridge)}" for _, ip, _ in link.addresses]
        return lines
    for family, pod_ip, gateway in link.addresses:
        plen = 32 if family == 4 else 128
        nodad = " nodad" if family == 6 else ""
        lines.append(f"addr add {gateway}/{plen} dev {link.host_if}{nodad}")
        # add, not replace: a route to the address that is not this store's stale veth's is
        # never taken over (finish_create_pair sorts out which it is)
        lines.append(f"route add {pod_ip}/{plen} dev {link.host_if}")
    return lines


def pod_batch(link: PodLink) -> list[str]:
    """``ip -batch`` lines for the pod netns: address the pod end, gateway and default routes."""
    lines = [f"link set dev {q(link.ifname)} up"]
    if link.bridge or link.ovs:
        # addresses before the link comes up, so arp_notify/ndisc_notify (set by
        # start_configure_pod) announce them: the other pods of the bridge learn the new MAC
        lines = []
        for family, pod_ip, _gateway in link.addresses:
            nodad = " nodad" if family == 6 else ""
            lines.append(f"addr add {pod_ip}/{link.prefixes[family]} dev {q(link.ifname)}{nodad}")
        lines.append(f"link set dev {q(link.ifname)} up")
        for family, pod_ip, gateway in link.addresses:
            default = "0.0.0.0/0" if family == 4 else "::/0"
            lines.append(f"route add {default} via {gateway} dev {q(link.ifname)} src {pod_ip}")
        return lines
    for family, pod_ip, gateway in link.addresses:
        plen = 32 if family == 4 else 128
        nodad = " nodad" if family == 6 else ""
        default = "0.0.0.0/0" if family == 4 else "::/0"
        dev = q(link.ifname)
        lines.append(f"addr add {pod_ip}/{plen} dev {dev}{nodad}")
        lines.append(f"route add {gateway}/{plen} dev {dev} scope link")
        lines.append(f"route add {default} via {gateway} dev {dev} src {pod_ip}")
    return lines


def batch(lines: list[str]) -> bytes:
    """``lines`` as ``ip -batch`` input, each checked (:func:`podnet.checked.batch_line`)."""
    return _batch(lines)


def _batch(lines: list[str]) -> bytes:
    from podnet.checked import batch_line

    return ("".join(batch_line(line) + "\n" for line in lines)).encode()


def check_ifname(ifname: str) -> None:
    """Raise :class:`InvalidEnv` (4) unless CNI_IFNAME is a name podnet can give ``ip``
    (:func:`podnet.checked.name`: 1-15 of ``[A-Za-z0-9_.-]``; the spec allows more, but ``#``
    starts a comment in a batch even inside quotes, and quotes, ``;``, braces or ``%`` have no
    place in an interface name). Call it before any state changes."""
    from podnet import checked

    try:
        checked.name(ifname)
    except checked.BadValue as err:
        raise InvalidEnv(f"CNI_IFNAME: {err}") from None


def prespawn_host() -> proc.Spawned:
    """Start the node-side ``ip -batch -`` before its commands are known (its exec overlaps the
    allocation); give it to :func:`start_create_pair`, or ``abandon()`` it. It dies with the
    plugin: a runtime that kills a plugin mid-ADD must not get a veth created after its DEL.
    KernelError (104) when ``ip`` cannot be started."""
    return proc.spawn(["ip", "-o", "-batch", "-"], defer=True, die_with_parent=True)


#: Seconds ADD waits for the node-side ``ip`` to answer its MTU query before it falls back.
ASK_WAIT = 0.5


def ask_mtu(spawned: proc.Spawned, ifname: str) -> tuple[int | None, proc.Spawned]:
    """The MTU in bytes of node link ``ifname``, asked of ``spawned`` (from
    :func:`prespawn_host`, not fed yet) as the first line of its batch: no process and no
    socket of the plugin's own (a socket costs it 3-8 ms of imports). Returns the MTU and the
    ``ip`` to go on with: ``spawned``, or a new one. None for the MTU when ``ifname`` is gone
    (the failed query ended ``ip``), when ``ip`` did not answer within :data:`ASK_WAIT`
    (something between us and ``ip`` reads all of stdin first), or for a name ``ip -batch``
    cannot be given (outside :func:`podnet.checked.name`): the caller asks the kernel itself.
    KernelError (104) when a new ``ip`` cannot be started."""
    from podnet.checked import BadValue, name

    try:
        name(ifname)  # the kernel's, from /proc/net/route: checked all the same
    except BadValue:
        return None, spawned
    answer = spawned.ask(f"link show dev {ifname}\n".encode(), ASK_WAIT)
    words = (answer or b"").split()
    if b"mtu" in words[:-1]:
        value = words[words.index(b"mtu") + 1]
        if value.isdigit():
            return int(value), spawned
    spawned.abandon()  # ended, or still waiting for the end of its input
    return None, prespawn_host()


def start_create_pair(link: PodLink, spawned: proc.Spawned | None = None) -> proc.Spawned:
    """Start creating the pair and configuring the host end (in the node netns), in
    ``spawned`` (from :func:`prespawn_host`) or a new ``ip``; collect with
    :func:`finish_create_pair`. KernelError (104) when ``ip`` cannot be started."""
    check_ifname(link.ifname)
    if spawned is None:
        spawned = prespawn_host()
    spawned.feed(_batch(host_batch(link)))
    return spawned


def _failed_line(err: str) -> int:
    """The 1-based line of the batch ``ip -batch`` stopped at (``Command failed -:N``), or 0."""
    marker = "Command failed -:"
    at = err.rfind(marker)
    digits = ""
    for ch in err[at + len(marker) :] if at >= 0 else "":
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def _host_name(name: str) -> bool:
    """Whether ``name`` has the shape of podnet's host veth names (``pn`` + 13 hex digits)."""
    from podnet.link.names import HOST_PREFIX

    tail = name[len(HOST_PREFIX):]
    return name.startswith(HOST_PREFIX) and len(tail) == 13 and \
        all(c in "0123456789abcdef" for c in tail)  # fmt: skip


def _route_holder(address: str) -> str | None:
    """The device of the route to exactly ``address`` (``/32``, ``/128``) in the node netns."""
    from podnet.cni.fastjson import loads

    rc, out, _ = proc.spawn(["ip", "-j", "route", "show", "exact", address]).wait()
    try:
        routes = loads(out) if rc == 0 and out.strip() else []
    except ValueError:
        return None
    for route in routes if isinstance(routes, list) else []:
        if isinstance(route, dict) and isinstance(route.get("dev"), str):
            return str(route["dev"])
    return None


def finish_create_pair(link: PodLink, spawned: proc.Spawned,
                       stale: Callable[[str], bool] | None = None) -> None:  # fmt: skip
    """Wait for :func:`start_create_pair` and set the host-side sysctls.

    Raises :class:`InterfaceExists` (102) when ``ifname`` already exists in the pod netns, and
    :class:`KernelError` (104) with ``ip``'s message otherwise; nothing is left on failure.
    What a call killed before its COMMIT may have left is cleared once, then the pair made
    again — only when it is this store's (its alias is ``link.alias``, or none yet) and no row
    holds it (``stale(name)``, the caller's store):

    - a host end of this very name (an attachment whose DEL never ran);
    - a host veth of another name holding the route to the pod's address (freed since).

    A link or route that is not this store's is never deleted or taken over (104, naming it).
    """
    from podnet.link import sysctl  # ADD's only: DEL never loads it

    rc, _, err = spawned.wait()
    asked = spawned.asked_lines  # lines before the batch (ask_mtu)
    if rc != 0 and "File exists" in err:
        line = _failed_line(err) - asked
        batch = host_batch(link)
        failed = batch[line - 1] if 0 < line <= len(batch) else ""
        leftover = None
        if failed.startswith("link add") and sysctl.interface_exists(link.host_if):
            leftover = link.host_if
        elif failed.startswith("route add"):
            delete_host(link.host_if)  # ours, half configured
            address = failed.split()[2]
            holder = _route_holder(address)
            # only a host veth of this store holds a pod's route: its name is podnet's, its
            # alias this store's (set in the batch before any route, so never missing then)
            if holder is None or not _host_name(holder) or alias_of(holder) != link.alias or \
                    (stale is not None and not stale(holder)):  # fmt: skip
                raise KernelError(
                    f"failed to create veth {link.host_if}: a route to {address} exists "
                    f"(dev {holder or '?'}) that is not a stale veth of this store's; podnet "
                    "does not take it over", err.strip())  # fmt: skip
            leftover = holder
        if leftover is not None:
            mine = alias_of(leftover) in ("", link.alias) and (stale is None or stale(leftover))
            if not mine:
                raise KernelError(
                    f"failed to create veth {link.host_if}: a link named {leftover} exists that "
                    f"is not this store's (alias {alias_of(leftover)!r}); podnet leaves it alone",
                    err.strip(),
                )
            delete_host(leftover)
            rc, _, err = start_create_pair(link).wait()
            asked = 0
    if rc != 0:
        line = _failed_line(err) - asked
        if "File exists" in err and line == 1 and not sysctl.interface_exists(link.host_if):
            raise InterfaceExists(f"interface {link.ifname} already exists in netns {link.netns}")
        if line != 1 and alias_of(link.host_if) in ("", link.alias):
            delete_host(link.host_if)  # made by this batch (a failed 'link add' made nothing)
        raise KernelError(
            f"failed to create veth {link.host_if} (peer {link.ifname} in {link.netns})",
            err.strip(),
        )
    try:
        if link.ovs:
            quiet_host_end(link.host_if)
        else:
            sysctl.configure_host_side(link.host_if, {f for f, _, _ in link.addresses})
    except OSError as err:
        delete_host(link.host_if)
        raise KernelError(f"failed to set sysctls of {link.host_if}", str(err)) from err


def _quote(word: str) -> str:
    """``word`` single-quoted for ``sh``; refused (ValueError) when it holds anything but the
    characters of a checked path (sysctl paths built from a checked CNI_IFNAME)."""
    if not word or not _WORD_CHARS.issuperset(word):
        raise ValueError(f"refusing to give sh the word {word!r}")
    return f"'{word}'"


def start_configure_pod(link: PodLink, *, tx_off: bool = False) -> proc.Spawned:
    """Start addressing and routing the pod end inside its netns (after :func:`finish_create_pair`).

    One ``nsenter --net=<netns>`` process runs the pod-side sysctls, if any (IPv6 DAD and RA
    off; with a bridge, gratuitous ARP and unsolicited NA on), with ``tx_off`` ``ethtool -K
    <ifname> tx off`` (OVS's userspace datapath does not finish offloaded TX checksums), and
    ``ip -batch``. Not ``ip -n <name>``, although it is one exec less: to switch, ``ip`` also
    unshares the mount namespace (a copy of every mount of the node, and each pod's netns file
    is one) and remounts ``/`` and ``/sys``, so its cost grows with the pods (docs/benchmarks.md,
    "Entering the pod's netns"); ``nsenter --net`` only calls setns(2), and entering the netns
    in-process would need ctypes' import. Collect with :func:`finish_configure_pod`.
    """
    from podnet.link import sysctl

    families = {f for f, _, _ in link.addresses}
    writes = [f"printf 0 > {_quote(path)}" for path in sysctl.pod_side_paths(link.ifname, families)]
    if link.bridge or link.ovs:  # gratuitous ARP / unsolicited NA when the link comes up
        writes += [f"printf 1 > {_quote(path)}"
                   for path in sysctl.notify_paths(link.ifname, families)]  # fmt: skip
    if tx_off:
        writes.append(f"ethtool -K {_quote(link.ifname)} tx off >/dev/null")
    argv = ["nsenter", f"--net={link.netns}"]
    if writes:  # a shell only when there is something to write (an IPv4 ptp pod: none)
        argv += ["sh", "-ec", " && ".join([*writes, "exec ip -batch -"])]
    else:
        argv += ["ip", "-batch", "-"]
    return proc.spawn(argv, _batch(pod_batch(link)))


def finish_configure_pod(link: PodLink, spawned: proc.Spawned) -> None:
    """Wait for :func:`start_configure_pod`; :class:`KernelError` (104) on failure."""
    rc, _, err = spawned.wait()
    if rc != 0:
        raise KernelError(f"failed to configure {link.ifname} in {link.netns}", err.strip())
