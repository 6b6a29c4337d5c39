"""Links of the calling thread's network namespace, asked of the kernel over rtnetlink
(``RTM_GETLINK``, rtnetlink(7); the attributes of ``include/uapi/linux/if_link.h``).

Not ``/sys/class/net``: sysfs shows the links of the network namespace that was current when it
was *mounted*, not the caller's. Under ``nsenter --net`` (without a remount, unlike
``ip netns exec``), in a runtime that runs in a container, or in a thread after
:meth:`podnet.link.netns.NetNS.entered`, ``/sys/class/net/<name>`` is another namespace's link
of that name, or none. A netlink socket belongs to the namespace of the thread that opens it,
so each call opens its own.

No ``socket`` module (8.3 ms of import, :mod:`podnet.link.mtu`) and no ``struct``: the socket
comes from libc's socket(2) through ctypes (already loaded by an ADD, for the MTU), requests go
out with write(2) (an unbound netlink socket sends to the kernel) and replies are read with
read(2), packed and parsed by hand in host byte order. Kernel errors are OSError with the
kernel's errno; callers translate them.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_AF_NETLINK, _SOCK_RAW_CLOEXEC, _NETLINK_ROUTE = 16, 3 | 0o2000000, 0  # <linux/netlink.h>
_RTM_NEWLINK, _RTM_GETLINK = 16, 18  # <linux/rtnetlink.h>
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_IFLA_IFNAME, _IFLA_LINK, _IFLA_MASTER, _IFLA_LINKINFO = 3, 5, 10, 18  # <linux/if_link.h>
_IFLA_IFALIAS, _IFLA_EXT_MASK, _IFLA_LINK_NETNSID = 20, 29, 37
_IFLA_INFO_KIND, _IFLA_INFO_SLAVE_KIND = 1, 4
_RTEXT_FILTER_SKIP_STATS = 1 << 3  # no counters in the answer: a tenth of its size
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
_IFNAMSIZ = 16
#: Bytes per read: the kernel sizes a dump's messages to at most 32 KiB (net/netlink/af_netlink.c).
_READ = 65536
_BO = sys.byteorder

IFF_UP, IFF_LOOPBACK = 0x1, 0x8  # <linux/if.h>


class Link:
    """One link as the kernel reports it: ``index``, ``name``, ``flags`` (``IFF_*``), ``alias``
    ("" when it has none), ``master`` (the ifindex of its bridge or bond, 0 for none),
    ``lower`` (``IFLA_LINK``: the device a VLAN or macvlan sits on, a veth's peer; 0 for none),
    ``lower_elsewhere`` (that index is in another namespace), ``kind`` (``bridge``, ``veth``…,
    "" for a physical NIC) and ``port_kind`` (its master's kind when it is a port, else "")."""

    __slots__ = ("index", "name", "flags", "alias", "master", "lower", "lower_elsewhere",
                 "kind", "port_kind")  # fmt: skip

    def __init__(self, index: int, flags: int) -> None:
        self.index, self.flags = index, flags
        self.name = self.alias = self.kind = self.port_kind = ""
        self.master = self.lower = 0
        self.lower_elsewhere = False

    def __repr__(self) -> str:
        return f"Link({self.index}, {self.name!r}, kind={self.kind!r}, alias={self.alias!r})"


_LIBC: list[Callable[[int, int, int], int]] = []  # resolved once per process


def _socket() -> int:
    """A new ``NETLINK_ROUTE`` socket's descriptor (libc's socket(2)); OSError on failure."""
    import ctypes

    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True).socket)
    fd = int(_LIBC[0](_AF_NETLINK, _SOCK_RAW_CLOEXEC, _NETLINK_ROUTE))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def _attr(kind: int, data: bytes) -> bytes:
    size = 4 + len(data)
    return size.to_bytes(2, _BO) + kind.to_bytes(2, _BO) + data + bytes(-size % 4)


def _attrs(data: bytes) -> Iterator[tuple[int, bytes]]:
    off = 0
    while off + 4 <= len(data):
        size = int.from_bytes(data[off : off + 2], _BO)
        if size < 4:
            return
        yield (
            int.from_bytes(data[off + 2 : off + 4], _BO) & _NLA_TYPE_MASK,
            data[off + 4 : off + size],
        )
        off += (size + 3) & ~3


def _text(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode(errors="replace")


_WANTED = frozenset({_IFLA_IFNAME, _IFLA_IFALIAS, _IFLA_MASTER, _IFLA_LINK, _IFLA_LINK_NETNSID,
                     _IFLA_LINKINFO})  # fmt: skip


def _link(payload: bytes) -> Link:
    # struct ifinfomsg: family u8, pad u8, type u16, index s32, flags u32, change u32
    link = Link(int.from_bytes(payload[4:8], _BO, signed=True), int.from_bytes(payload[8:12], _BO))
    off, end = 16, len(payload)
    while off + 4 <= end:  # inline, not _attrs: a link has some 40 attributes, 6 are read
        size = int.from_bytes(payload[off : off + 2], _BO)
        kind = int.from_bytes(payload[off + 2 : off + 4], _BO) & _NLA_TYPE_MASK
        if size < 4:
            break
        if kind in _WANTED:
            data = payload[off + 4 : off + size]
            if kind == _IFLA_IFNAME:
                link.name = _text(data)
            elif kind == _IFLA_IFALIAS:
                link.alias = _text(data)
            elif kind == _IFLA_MASTER:
                link.master = int.from_bytes(data[:4], _BO)
            elif kind == _IFLA_LINK:
                link.lower = int.from_bytes(data[:4], _BO)
            elif kind == _IFLA_LINK_NETNSID:
                link.lower_elsewhere = True
            else:
                for info, value in _attrs(data):
                    if info == _IFLA_INFO_KIND:
                        link.kind = _text(value)
                    elif info == _IFLA_INFO_SLAVE_KIND:
                        link.port_kind = _text(value)
        off += (size + 3) & ~3
    return link


def _ask(flags: int, index: int = 0, name: str = "") -> list[Link]:
    """Send one ``RTM_GETLINK`` and collect the links of its answer; OSError(errno) for the
    kernel's refusal."""
    # struct ifinfomsg (AF_UNSPEC, the index or 0), then the attributes
    body = bytes(4) + index.to_bytes(4, _BO, signed=True) + bytes(8)
    body += _attr(_IFLA_EXT_MASK, _RTEXT_FILTER_SKIP_STATS.to_bytes(4, _BO))
    if name:
        body += _attr(_IFLA_IFNAME, name.encode() + b"\0")
    seq = 1
    # struct nlmsghdr: length u32, type u16, flags u16, sequence u32, port id u32 (0: the kernel)
    header = (16 + len(body)).to_bytes(4, _BO) + _RTM_GETLINK.to_bytes(2, _BO)
    header += (_NLM_F_REQUEST | flags).to_bytes(2, _BO) + seq.to_bytes(4, _BO) + bytes(4)
    fd = _socket()
    try:
        os.write(fd, header + body)
        found: list[Link] = []
        while True:
            data = os.read(fd, _READ)
            if not data:
                return found
            off = 0
            while off + 16 <= len(data):
                size = int.from_bytes(data[off : off + 4], _BO)
                kind = int.from_bytes(data[off + 4 : off + 6], _BO)
                if size < 16 or int.from_bytes(data[off + 8 : off + 12], _BO) != seq:
                    break
                if off + size > len(data):  # cut by the read: never half a link
                    raise OSError(errno.EMSGSIZE, "rtnetlink answer larger than the read")
                payload = data[off + 16 : off + size]
                off += (size + 3) & ~3
                if kind == _NLMSG_ERROR:
                    err = -int.from_bytes(payload[:4], _BO, signed=True)
                    if err:
                        raise OSError(err, os.strerror(err))
                    return found
                if kind == _NLMSG_DONE:
                    return found
                if kind == _RTM_NEWLINK:
                    found.append(_link(payload))
            if not flags & _NLM_F_DUMP:  # a get is answered by one message
                return found
    finally:
        os.close(fd)


def possible(name: str) -> bool:
    """Whether a link may be named ``name``: not empty, under ``IFNAMSIZ`` bytes, no NUL or
    ``/`` (dev_valid_name in net/core/dev.c refuses more; those never exist either)."""
    return bool(name) and len(name.encode()) < _IFNAMSIZ and "\0" not in name and "/" not in name


def link(name: str) -> Link | None:
    """The link named ``name`` in the calling thread's netns, or None when there is none (also
    for a name no link can have: empty, of ``IFNAMSIZ`` bytes or more, or with a NUL, which
    would end it early). OSError for any other refusal of the kernel."""
    if not possible(name):
        return None
    try:
        links = _ask(0, name=name)
    except OSError as err:
        if err.errno == errno.ENODEV:
            return None
        raise
    return links[0] if links else None


def by_index(index: int) -> Link | None:
    """The link of ifindex ``index`` in the calling thread's netns, or None. OSError as
    :func:`link`."""
    if index <= 0:
        return None
    try:
        links = _ask(0, index=index)
    except OSError as err:
        if err.errno == errno.ENODEV:
            return None
        raise
    return links[0] if links else None


def links() -> list[Link]:
    """Every link of the calling thread's netns (a dump). OSError on the kernel's refusal."""
    return _ask(_NLM_F_DUMP)
