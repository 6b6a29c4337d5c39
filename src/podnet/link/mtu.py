"""The node's default MTU: that of the link holding the default route (cni-kindnet's choice)."""

from __future__ import annotations

# No struct (~0.15 ms): struct ifreq is packed by hand. No socket module either: socket.py builds
# its IntEnums and imports selectors at import, 8.3 ms of a whole plugin process (min of 25,
# Debian 12's 3.11 under -IS, quiet machine), against 3.0 ms for ctypes' socket(2) through libc
# (the private _socket module is not an option, tests/unit/test_no_private_modules.py). The ioctl
# needs any socket's descriptor; the caller's netns is the one asked.
import fcntl
import os
import sys

SIOCGIFMTU = 0x8921
IFNAMSIZ = 16
_IFREQ_UNION = 24  # bytes of struct ifreq after the name (its largest member, struct ifmap)
DEFAULT_MTU = 1500


def default_route_ifname() -> str | None:
    """The name of the link holding the default route (IPv4, else IPv6) in the caller's
    netns, or None."""
    # /proc/thread-self/net is the calling thread's netns (/proc/net: the process leader's;
    # /sys: the netns sysfs was mounted in).
    try:
        with open("/proc/thread-self/net/route") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == "00000000" and fields[7] == "00000000":
                    return fields[0]
    except (OSError, StopIteration, IndexError):
        pass
    try:
        with open("/proc/thread-self/net/ipv6_route") as f:
            for line in f:
                fields = line.split()
                if fields[0] == "0" * 32 and fields[1] == "00" and fields[9] != "lo":
                    return fields[9]
    except (OSError, IndexError):
        pass
    return None


def link_mtu(ifname: str) -> int:
    """MTU in bytes of ``ifname`` in the current netns (SIOCGIFMTU); OSError if absent."""
    name = ifname.encode()
    if len(name) >= IFNAMSIZ:
        raise OSError(f"interface name {ifname!r} is too long")
    fd = _inet_socket()
    try:
        # struct ifreq: char ifr_name[IFNAMSIZ], then the union (ifr_mtu, a C int, first)
        req = name.ljust(IFNAMSIZ, b"\0") + bytes(_IFREQ_UNION)
        out = fcntl.ioctl(fd, SIOCGIFMTU, req)
        return int.from_bytes(out[IFNAMSIZ : IFNAMSIZ + 4], sys.byteorder, signed=True)
    finally:
        os.close(fd)


_AF_INET, _SOCK_DGRAM_CLOEXEC = 2, 2 | 0o2000000  # <sys/socket.h> on Linux


def _inet_socket() -> int:
    """A new AF_INET datagram socket's descriptor (libc's socket(2)); OSError on failure."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.socket(_AF_INET, _SOCK_DGRAM_CLOEXEC, 0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def default_mtu() -> int:
    """MTU in bytes of the default-route link (IPv4, else IPv6); 1500 without a default route."""
    ifname = default_route_ifname()
    if ifname is None:
        return DEFAULT_MTU
    try:
        return link_mtu(ifname)
    except OSError:
        return DEFAULT_MTU
