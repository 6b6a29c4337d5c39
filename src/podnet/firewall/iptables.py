"""The iptables backend: read a table with ``iptables-save``, change it with
``iptables-restore --noflush`` (one transaction per table and family), for IPv4 and IPv6.

The binaries are the ones on PATH (Debian's alternatives choose iptables-nft or
iptables-legacy); both speak the same save/restore text. ``-w`` waits for the xtables lock.
"""

from __future__ import annotations

from podnet import proc
from podnet.cni.errors import KernelError

LOCK_WAIT_SECONDS = "10"


def _tool(family: int, what: str) -> str:
    return f"{'ip6tables' if family == 6 else 'iptables'}-{what}"


def save(family: int, table: str = "nat") -> str:
    """``iptables-save -t <table>`` of ``family`` (4|6). KernelError (104) on failure."""
    try:
        return proc.run([_tool(family, "save"), "-t", table])
    except (proc.ToolError, FileNotFoundError) as err:
        raise KernelError(f"{_tool(family, 'save')} failed", str(err)) from err


def usable(family: int) -> bool:
    """Whether the family's iptables works here (reference portmap's maybeGetIptables)."""
    try:
        save(family)
    except KernelError:
        return False
    return True


def restore(family: int, text: str, what: str) -> None:
    """Apply ``text`` with ``--noflush`` atomically; KernelError (104) naming ``what``."""
    argv = [_tool(family, "restore"), "--noflush", "-w", LOCK_WAIT_SECONDS]
    try:
        proc.run(argv, text.encode())
    except proc.ToolError as err:
        raise KernelError(f"{argv[0]} failed to {what}", err.stderr.strip()) from err
    except FileNotFoundError as err:
        raise KernelError(f"{argv[0]} is not installed", str(err)) from err


def has_rule(family: int, chain: str, rule: str, table: str = "nat") -> bool:
    """``iptables -C``: whether the kernel holds ``rule`` (words as for -A) in ``chain``. For
    rules whose user-given matches iptables-save prints differently (``-d 192.0.2.1`` is saved
    as ``192.0.2.1/32``)."""
    from podnet.firewall.portmap_iptables import tokens

    argv = ["ip6tables" if family == 6 else "iptables", "-w", LOCK_WAIT_SECONDS, "-t", table,
            "-C", chain, *tokens(rule)]  # fmt: skip
    try:
        return proc.spawn(argv).wait()[0] == 0
    except FileNotFoundError:
        return False
