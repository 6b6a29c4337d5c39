"""Flushing stale UDP conntrack entries of hostPorts (CP #123, PR #1277).

A UDP flow that reached the node before a mapping existed (or to a pod since gone) stays in
conntrack and keeps blackholing the port; after the rules change, delete entries by original
destination port. ``conntrack -D`` exits 1 when nothing matched: that is success here.
"""

from __future__ import annotations

from podnet import proc
from podnet.cni.errors import KernelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


def flush_udp_ports(ports: Iterable[tuple[int, int]]) -> None:
    """Delete UDP entries whose original destination port is one of ``(family, port)``.

    Runs one ``conntrack`` per port and family, all started before any is waited on.
    Raises :class:`KernelError` (104) if conntrack itself is missing or fails otherwise.
    """
    started = []
    for family, port in sorted(set(ports)):
        argv = ["conntrack", "-D", "-f", "ipv6" if family == 6 else "ipv4", "-p", "udp",
                "--orig-port-dst", str(port)]  # fmt: skip
        try:
            started.append(proc.spawn(argv))
        except FileNotFoundError as err:
            raise KernelError("conntrack is not installed", str(err)) from err
    for spawned in started:
        rc, _, stderr = spawned.wait()
        if rc not in (0, 1):
            raise KernelError("conntrack failed to flush UDP entries", stderr.strip())
