"""Flushing stale UDP conntrack entries of mapped ports (CP #123, PR #1277).

A UDP flow that reached the node before a mapping existed (or to a pod since gone) stays in
conntrack and keeps blackholing the port; after the rules change, entries whose original
destination port is a mapped port are deleted.

This is done in-process over ctnetlink (``NETLINK_NETFILTER``: dump the table, delete the
matching entries by their original tuple), as the reference portmap does through netlink — no
``conntrack`` binary needed (neither podman nor the reference plugins install it), and no
process to start. When netlink fails, the ``conntrack`` tool is tried if it is installed. A
flush that fails either way is reported to ``warn`` and never fails ADD or DEL: the mapping
itself works, only an old flow may linger.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

# netlink / nfnetlink / ctnetlink constants (linux/netlink.h, linux/netfilter/nfnetlink*.h)
_NETLINK_NETFILTER = 12
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_DUMP = 0x1, 0x4, 0x300
_NFNL_SUBSYS_CTNETLINK = 1
_IPCTNL_MSG_CT_GET, _IPCTNL_MSG_CT_DELETE = 1, 2
_CTA_TUPLE_ORIG, _CTA_ZONE = 1, 18
_CTA_TUPLE_PROTO = 2
_CTA_PROTO_NUM, _CTA_PROTO_DST_PORT = 1, 3
_NLA_TYPE_MASK = 0x3FFF  # drops NLA_F_NESTED / NLA_F_NET_BYTEORDER
_AF = {4: 2, 6: 10}
_IPPROTO_UDP = 17
_ENOENT = 2
#: Seconds the netlink socket may block on one receive.
_TIMEOUT = 5.0


def _attrs(data: bytes) -> dict[int, bytes]:
    """Netlink attributes of ``data`` → {type: payload} (type without flag bits)."""
    out = {}
    pos = 0
    while pos + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, pos)
        if length < 4:
            break
        out[kind & _NLA_TYPE_MASK] = data[pos + 4 : pos + length]
        pos += (length + 3) & ~3
    return out


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(msg_type: int, flags: int, seq: int, family: int, body: bytes = b"") -> bytes:
    payload = struct.pack("=BBH", family, 0, 0) + body  # nfgenmsg, then the attributes
    return struct.pack("=IHHII", 16 + len(payload), msg_type, flags, seq, 0) + payload


def _matches(attrs: dict[int, bytes], ports: set[int]) -> bool:
    tuple_attrs = _attrs(attrs.get(_CTA_TUPLE_ORIG, b""))
    proto = _attrs(tuple_attrs.get(_CTA_TUPLE_PROTO, b""))
    num = proto.get(_CTA_PROTO_NUM, b"")
    dport = proto.get(_CTA_PROTO_DST_PORT, b"")
    return (
        num[:1] == bytes([_IPPROTO_UDP])
        and len(dport) == 2
        and struct.unpack("!H", dport)[0] in ports
    )


class _Netlink:
    """One ctnetlink socket; :meth:`request` sends a message and yields the payloads of the
    replies (after the 16-byte nlmsghdr) until DONE or the ACK; OSError on a netlink error."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
        self.sock.settimeout(_TIMEOUT)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, msg_type: int, flags: int, family: int, body: bytes = b"") -> list[bytes]:
        self.seq += 1
        self.sock.sendto(_message(msg_type, flags, self.seq, family, body), (0, 0))
        replies: list[bytes] = []
        while True:
            data = self.sock.recv(1 << 17)
            pos = 0
            while pos + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, pos)
                if length < 16:
                    return replies
                payload = data[pos + 16 : pos + length]
                pos += (length + 3) & ~3
                if seq != self.seq:
                    continue
                if kind == _NLMSG_DONE:
                    return replies
                if kind == _NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", payload)[0]
                    if errno:
                        raise OSError(errno, f"ctnetlink error {errno}")
                    return replies  # the ACK
                replies.append(payload)


def flush_netlink(ports: Iterable[tuple[int, int]]) -> int:
    """Delete the UDP entries whose original destination port is one of ``(family, port)``,
    over ctnetlink; returns how many were deleted. OSError when netlink is unusable."""
    wanted: dict[int, set[int]] = {}
    for family, port in ports:
        wanted.setdefault(family, set()).add(port)
    nl = _Netlink()
    deleted = 0
    try:
        for family, family_ports in sorted(wanted.items()):
            msg_type = (_NFNL_SUBSYS_CTNETLINK << 8) | _IPCTNL_MSG_CT_GET
            entries = nl.request(msg_type, _NLM_F_REQUEST | _NLM_F_DUMP, _AF[family])
            victims = []
            for payload in entries:
                if payload[:1] != bytes([_AF[family]]):
                    continue  # older kernels dump every family
                attrs = _attrs(payload[4:])
                if _matches(attrs, family_ports):
                    body = _attr(_CTA_TUPLE_ORIG | 0x8000, attrs[_CTA_TUPLE_ORIG])
                    if _CTA_ZONE in attrs:
                        body += _attr(_CTA_ZONE, attrs[_CTA_ZONE])
                    victims.append(body)
            msg_type = (_NFNL_SUBSYS_CTNETLINK << 8) | _IPCTNL_MSG_CT_DELETE
            for body in victims:
                try:
                    nl.request(msg_type, _NLM_F_REQUEST | _NLM_F_ACK, _AF[family], body)
                    deleted += 1
                except OSError as err:
                    if err.errno != _ENOENT:  # gone meanwhile: fine
                        raise
    finally:
        nl.close()
    return deleted


#: What ``conntrack -D`` (conntrack-tools 1.4) prints when it ran: with exit status 1 it means
#: nothing matched; exit status 1 without it is a failure ("Operation failed: … CAP_NET_ADMIN").
_DELETED = "flow entries have been deleted"


def flush_tool(ports: Iterable[tuple[int, int]]) -> None:
    """The same with the ``conntrack`` tool (one run per port and family, started together).
    ``conntrack -D`` exits 1 both when nothing matched (it then says "0 flow entries have been
    deleted": success here) and when it failed (permission, no ctnetlink). KernelError (104)
    for a failure, or when the tool is missing."""
    from podnet import proc
    from podnet.errors import KernelError

    started = []
    for family, port in sorted(set(ports)):
        argv = ["conntrack", "-D", "-f", "ipv6" if family == 6 else "ipv4", "-p", "udp",
                "--orig-port-dst", str(port)]  # fmt: skip
        started.append(proc.spawn(argv))
    failed = []
    for spawned in started:
        rc, _, stderr = spawned.wait()
        if rc != 0 and not (rc == 1 and _DELETED in stderr):
            failed.append(stderr.strip() or f"exit status {rc}")
    if failed:
        raise KernelError("conntrack failed to flush UDP entries", "; ".join(failed))


def flush_udp_ports(
    ports: Iterable[tuple[int, int]], warn: Callable[[str], None] | None = None
) -> None:
    """Flush stale UDP entries of ``(family, port)`` pairs: netlink, else the ``conntrack``
    tool. Never raises: a failure goes to ``warn`` (the call's log and stderr)."""
    ports = sorted(set(ports))
    if not ports:
        return
    try:
        flush_netlink(ports)
        return
    except OSError as err:
        first = f"ctnetlink: {err}"
    from podnet.errors import CNIError

    try:
        flush_tool(ports)
    except CNIError as err:
        if warn is not None:
            listed = ", ".join(str(p) for p in sorted({p for _, p in ports}))  # once, both families
            warn(f"could not flush UDP conntrack entries of ports {listed} "
                 f"({first}; {err.msg}: {err.details})")  # fmt: skip
