"""The iptables backend, for any user (podnet-portmap, podnet-redirect): read a table with
``iptables-save``, change it with ``iptables-restore --noflush`` (one transaction per table and
family), and the save format as data (:class:`Saved`, :func:`tokens`, :func:`quote`).

The binaries are the ones on PATH (Debian's alternatives choose iptables-nft or
iptables-legacy) unless a variant is named; both speak the same save/restore text. ``-w`` waits
for the xtables lock. Every failure is :class:`~podnet.errors.KernelError` (104) with the
tool's message in ``details``.
"""

from __future__ import annotations

from podnet import proc
from podnet.errors import KernelError

LOCK_WAIT_SECONDS = "10"
VARIANTS = ("", "legacy", "nft")


def tool(family: int, what: str, variant: str = "") -> str:
    """``iptables-save``, ``ip6tables-legacy-restore``, … (``what``: save | restore | "")."""
    name = "ip6tables" if family == 6 else "iptables"
    return "-".join(p for p in (name, variant, what) if p)


def _in_netns(netns: str | None, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net={netns}", *argv] if netns else argv


def save(family: int, table: str = "nat", *, variant: str = "", netns: str | None = None) -> str:
    """``iptables-save -t <table>`` of ``family`` (4|6), in ``netns`` when given. KernelError."""
    argv = _in_netns(netns, [tool(family, "save", variant), "-t", table])
    try:
        return proc.run(argv)
    except proc.ToolMissing:
        raise
    except KernelError as err:
        name = tool(family, "save", variant)
        raise KernelError(f"{name} failed", err.details or err.msg) from err


def usable(family: int) -> bool:
    """Whether the family's iptables works here (reference portmap's maybeGetIptables)."""
    try:
        save(family)
    except KernelError:
        return False
    return True


def restore(family: int, text: str, what: str, *, variant: str = "",
            netns: str | None = None) -> None:  # fmt: skip
    """Apply ``text`` with ``--noflush`` atomically; KernelError (104) naming ``what``."""
    name = tool(family, "restore", variant)
    argv = _in_netns(netns, [name, "--noflush", "-w", LOCK_WAIT_SECONDS])
    try:
        proc.run(argv, text.encode(), die_with_parent=True)
    except proc.ToolError as err:
        raise KernelError(f"{name} failed to {what}", err.stderr.strip()) from err


def has_rule(family: int, chain: str, rule: str, table: str = "nat") -> bool:
    """``iptables -C``: whether the kernel holds ``rule`` (words as for -A) in ``chain``. For
    rules whose user-given matches iptables-save prints differently (``-d 192.0.2.1`` is saved
    as ``192.0.2.1/32``). KernelError when iptables is missing or hangs."""
    argv = [tool(family, ""), "-w", LOCK_WAIT_SECONDS, "-t", table, "-C", chain, *tokens(rule)]
    return proc.spawn(argv).wait()[0] == 0


class Saved:
    """One table as ``iptables-save -t <table>`` printed it: ``chains`` (names) and ``rules``
    (chain → rule texts without ``-A <chain>``). Lines it does not understand (comments, table
    headers, a bare ``-A CHAIN`` another tool may write) are kept out of ``rules``, never an
    error."""

    def __init__(self, text: str) -> None:
        self.chains: set[str] = set()
        self.rules: dict[str, list[str]] = {}
        for line in text.splitlines():
            if line.startswith(":"):
                name = line[1:].split(" ", 1)[0]
                if name:
                    self.chains.add(name)
            elif line.startswith("-A "):
                words = line.split(" ", 2)
                if len(words) == 3 and words[1]:
                    self.rules.setdefault(words[1], []).append(words[2])
                elif len(words) == 2 and words[1]:
                    self.rules.setdefault(words[1], []).append("")

    def has_rule(self, chain: str, rule: str) -> bool:
        return any(same_rule(r, rule) for r in self.rules.get(chain, []))


def quote(text: str) -> str:
    """An argument as iptables-save writes it: double-quoted when it has spaces or quotes."""
    if text and not any(c in text for c in ' "\\\t'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def tokens(rule: str) -> list[str]:
    """Split a saved rule into words; double-quoted words keep their spaces."""
    out: list[str] = []
    word: list[str] = []
    quoted = False
    i = 0
    while i < len(rule):
        c = rule[i]
        if quoted and c == "\\" and i + 1 < len(rule):
            word.append(rule[i + 1])
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == " " and not quoted:
            if word:
                out.append("".join(word))
                word = []
        else:
            word.append(c)
        i += 1
    if word:
        out.append("".join(word))
    return out


def same_rule(saved: str, wanted: str) -> bool:
    """Equal up to the order iptables-save puts matches in (the same words, as a multiset)."""
    return sorted(tokens(saved)) == sorted(tokens(wanted))
