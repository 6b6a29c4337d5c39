"""Running the field's tools (``ip``, ``nft``, ``conntrack``) with little start-up cost.

A plugin is a new process per call, so this module avoids :mod:`subprocess` (its import pulls in
``selectors``, ``threading`` and ``signal``: ~6 ms) and spawns with :func:`os.posix_spawn`, which
is also cheaper than fork+exec for the parent. Children inherit the caller's network namespace:
see :mod:`podnet.link.netns` to run a tool inside a pod's netns.

Outputs are read stdout-first; the tools used here keep stderr far below a pipe's 64 KiB, so the
order cannot deadlock.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Where tools are looked up after $PATH: runtimes call plugins with a PATH that may lack sbin.
_FALLBACK_PATH = ("/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin")
_resolved: dict[str, str] = {}


class ToolError(Exception):
    """A tool exited non-zero: ``argv``, ``returncode``, ``stdout``, ``stderr`` (str)."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"{' '.join(argv)}: exit {returncode}: {stderr.strip()}")
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def which(tool: str) -> str:
    """Absolute path of ``tool`` from $PATH, then the sbin/bin fallbacks; FileNotFoundError."""
    found = _resolved.get(tool)
    if found:
        return found
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d] + list(_FALLBACK_PATH)
    for d in dirs:
        path = os.path.join(d, tool)
        if os.access(path, os.X_OK):
            _resolved[tool] = path
            return path
    raise FileNotFoundError(f"{tool} not found in PATH or {':'.join(_FALLBACK_PATH)}")


class Spawned:
    """A started tool; :meth:`wait` collects its exit status and output.

    ``argv[0]`` is looked up with :func:`which` unless it is an absolute path; ``env`` replaces
    the environment (default: this process's).
    """

    def __init__(
        self, argv: Sequence[str], stdin: bytes | None, env: Mapping[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        actions = [
            (os.POSIX_SPAWN_DUP2, in_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        try:
            exe = argv[0] if os.path.isabs(argv[0]) else which(argv[0])
            environ = os.environ if env is None else env
            self.pid = os.posix_spawn(exe, self.argv, environ, file_actions=actions)
        finally:
            os.close(in_r)
            os.close(out_w)
            os.close(err_w)
        self._out, self._err = out_r, err_r
        try:
            if stdin:
                view = memoryview(stdin)
                while view:
                    view = view[os.write(in_w, view) :]
        except BrokenPipeError:
            pass  # the tool exited without reading it all: its exit status says why
        finally:
            os.close(in_w)

    def wait(self) -> tuple[int, str, str]:
        """Block until the tool exits: ``(returncode, stdout, stderr)``."""
        out = _read_all(self._out)
        err = _read_all(self._err)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status), out, err

    def check(self) -> str:
        """:meth:`wait`, raising :class:`ToolError` on a non-zero exit; returns stdout."""
        rc, out, err = self.wait()
        if rc != 0:
            raise ToolError(self.argv, rc, out, err)
        return out


def _read_all(fd: int) -> str:
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def spawn(
    argv: Sequence[str], stdin: bytes | None = None, env: Mapping[str, str] | None = None
) -> Spawned:
    """Start ``argv`` (tool looked up with :func:`which`, or an absolute path) without waiting;
    feed ``stdin``; ``env`` replaces the environment (default: this process's)."""
    return Spawned(argv, stdin, env)


def run(argv: Sequence[str], stdin: bytes | None = None) -> str:
    """Run ``argv`` to completion; stdout on success, :class:`ToolError` otherwise."""
    return Spawned(argv, stdin).check()
