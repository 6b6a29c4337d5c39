"""Running a plugin without CAP_NET_ADMIN while the tools it starts keep it: how the tests make
podnet's in-process ctnetlink calls fail for real (EPERM), with no hook in the product."""

from __future__ import annotations

import shutil
from pathlib import Path

from envgate import need
from netns import PLUGIN, sh
from tooltrace import SYSTEM_PATH, TOOLS, ToolTrace


class NoNetAdmin:
    """Running the plugin without CAP_NET_ADMIN while the tools it starts keep it.

    ctnetlink checks CAP_NET_ADMIN on every message (nfnetlink_rcv): without it podnet's
    in-process flush gets EPERM for real and falls back to the ``conntrack`` tool. The plugin is
    started by ``setpriv --securebits +noroot`` with every capability it had but CAP_NET_ADMIN
    as inheritable and ambient (so root gets nothing more at exec: the python process runs with
    exactly those). The tools get CAP_NET_ADMIN back from file capabilities: each traced tool
    (:class:`tooltrace.ToolTrace`, whose wrappers log every call) execs a copy of the real
    binary with the whole bounding set as permitted+effective file capabilities. Nothing in
    podnet is changed or told about it; the host's binaries are untouched.
    """

    def __init__(self, root: Path) -> None:
        need("setpriv", "setcap", "conntrack")
        self.trace = ToolTrace(root / "trace")
        real = root / "real"
        real.mkdir()
        names = sh("setpriv", "--list-caps").stdout.split()
        status = Path("/proc/self/status").read_text().splitlines()
        mask = {line.split(":")[0]: int(line.split()[1], 16) for line in status if line.startswith("Cap")}
        bounding = [n for i, n in enumerate(names) if mask["CapBnd"] >> i & 1]
        kept = [n for i, n in enumerate(names) if mask["CapPrm"] >> i & 1 and n != "net_admin"]
        file_caps = ",".join(f"cap_{n}" for n in bounding) + "+ep"
        for tool in TOOLS:
            wrapper = self.trace.bin / tool
            found = shutil.which(tool, path=SYSTEM_PATH)
            if not wrapper.exists() or found is None:
                continue
            copy = real / tool
            shutil.copy(found, copy)  # follows symlinks (xtables-multi dispatches on argv[0])
            sh("setcap", file_caps, str(copy))
            text = wrapper.read_text()
            assert f'"{found}" "$@"' in text, f"the trace wrapper of {tool} does not run {found}"
            wrapper.write_text(text.replace(f'"{found}" "$@"', f'"{copy}" "$@"'))
        caps = ",".join(["-all", *(f"+{n}" for n in kept)])
        self.prefix = ["setpriv", "--securebits", "+noroot", "--inh-caps", caps, "--ambient-caps", caps]
        self.plugin = self._wrap(root / "podnet-without-net-admin", PLUGIN)
        self.portmap = self._wrap(root / "podnet-portmap-without-net-admin", f"{PLUGIN}-portmap")
        self.env = {"PATH": self.trace.path}

    def _wrap(self, path: Path, plugin: str) -> Path:
        """An executable at ``path`` running ``plugin`` under :attr:`prefix`."""
        path.write_text("#!/bin/sh\nexec " + " ".join(self.prefix) + f' "{plugin}" "$@"\n')
        path.chmod(0o755)
        return path
