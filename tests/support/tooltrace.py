"""Recording every tool podnet runs: a directory of wrapper scripts, put first on PATH, that
append each call's argv and stdin to a log and then run the real tool with the same input.

podnet finds its tools on PATH before the sbin/bin fallbacks (:func:`podnet.proc.which`), so a
plugin, ``podnetctl`` or ``podnetctl serve`` given ``PATH=<dir>:…`` runs every ``ip``, ``nft``,
``iptables-restore``, ``conntrack``, ``nsenter``, ``sh`` and ``setpriv`` through a wrapper. The
log lets a test assert what no tool was ever given (a hostile value refused
at the boundary never reaches a tool).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: Tools podnet spawns (proc.which names) — each gets a wrapper.
TOOLS = ("ip", "nft", "iptables", "iptables-restore", "iptables-save", "ip6tables",
         "ip6tables-restore", "ip6tables-save", "iptables-legacy-restore",
         "iptables-legacy-save", "ip6tables-legacy-restore", "ip6tables-legacy-save",
         "iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore",
         "ip6tables-nft-save", "conntrack", "nsenter", "sh", "setpriv")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

WRAPPER = """#!/bin/sh
# podnet test tool trace: log argv, run the real tool with stdin streaming through (so
# `ip -batch` still answers each line as it reads it), then log that stdin
{{ printf 'CALL %s' "{name}"; for a in "$@"; do printf ' [%s]' "$a"; done; printf '\\n'; }} >> "{log}"
in=$(mktemp)
tee "$in" | "{real}" "$@"
rc=$?
{{ printf 'STDIN %s\\n' "{name}"; cat "$in"; printf '\\nEND\\n'; }} >> "{log}"
rm -f "$in"
exit $rc
"""


class ToolTrace:
    """Wrappers in ``<root>/bin`` logging to ``<root>/tools.log``; :attr:`path` is the PATH to
    give the process under test."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.log = root / "tools.log"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.log.touch()
        for name in TOOLS:
            real = shutil.which(name, path=SYSTEM_PATH)
            if real is None:
                continue
            script = self.bin / name
            script.write_text(WRAPPER.format(name=name, log=self.log, real=real))
            script.chmod(0o755)
        self.path = f"{self.bin}:{SYSTEM_PATH}"

    def text(self) -> str:
        """Everything logged so far (bytes that are not UTF-8 shown as escapes)."""
        return self.log.read_bytes().decode(errors="backslashreplace")

    def mark(self) -> int:
        """The log's current size: pass it to :meth:`since`."""
        return os.path.getsize(self.log)

    def since(self, mark: int) -> str:
        """What was logged after :meth:`mark`."""
        with open(self.log, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="backslashreplace")

    def calls(self, mark: int = 0) -> list[str]:
        """The ``CALL …`` lines logged after ``mark``."""
        return [line for line in self.since(mark).splitlines() if line.startswith("CALL ")]
