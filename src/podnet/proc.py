"""Running the field's tools (``ip``, ``nft``, ``conntrack``, …) with little start-up cost, a
deadline, and no process left behind.

A plugin is a new process per call, so this module avoids :mod:`subprocess` (its import pulls in
``selectors``, ``threading`` and ``signal``: ~6 ms) and spawns with :func:`os.posix_spawn`, which
is also cheaper than fork+exec for the parent. Children inherit the caller's network namespace:
see :mod:`podnet.link.netns` to run a tool inside a pod's netns.

Every child:

- runs in a process group of its own, so a deadline kills it and anything it started;
- has a deadline (:data:`Limits.timeout` seconds, set once per plugin call from the NetConf's
  ``toolTimeout``): past it the group is killed and :class:`ToolTimeout` (code 104, naming the
  tool) is raised. Stdin, stdout and stderr are pumped with ``poll`` so neither a tool that does
  not read its input nor one that floods its output can block the plugin past the deadline;
- when it creates state a runtime's DEL could race with (``die_with_parent``: ADD's veth and
  nft changes), gets SIGKILL when the plugin dies (``setpriv --pdeathsig KILL``, util-linux):
  a runtime that kills a plugin mid-ADD must not leave an ``ip -batch`` running that creates a
  veth after the runtime's DEL has cleaned up. Other tools (deletions,
  listings, the pod side) finish harmlessly and skip the extra exec (~0.8 ms).

A tool can be started before its input is known (``defer=True``, then :meth:`Spawned.feed`):
its start-up (exec, dynamic linking: ~1-2 ms) then overlaps the plugin's own work, and a tool
that is never fed exits without doing anything.

Errors are :class:`~podnet.errors.KernelError` subclasses (CNI code 104): a tool that is
missing (:class:`ToolMissing`), exits non-zero (:class:`ToolError`, raised by :func:`run` and
:meth:`Spawned.check`; callers that interpret exit codes use :meth:`Spawned.wait`), or overruns
its deadline (:class:`ToolTimeout`). The tool's stderr is in ``details``.
"""

from __future__ import annotations

import os
import select
import time

from podnet.errors import KernelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Where tools are looked up after $PATH: runtimes call plugins with a PATH that may lack sbin.
_FALLBACK_PATH = ("/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin")
#: SIGKILL's number on Linux (the signal module's enums cost ~3 ms of import per plugin call).
_SIGKILL = 9


class Limits:
    """Per-process settings of spawned tools: ``timeout`` (seconds a tool may run, default 10;
    the plugin skeleton sets it from ``toolTimeout``) and ``pdeathsig`` (wrap ``die_with_parent``
    children in ``setpriv --pdeathsig KILL`` when setpriv exists). A plugin process serves
    exactly one CNI call, so these are set once, before any tool runs."""

    timeout = 10.0
    pdeathsig = True


class ToolMissing(KernelError):
    """The tool is not installed (not in PATH nor in the sbin/bin fallbacks); code 104."""


class ToolError(KernelError):
    """A tool exited non-zero: ``argv``, ``returncode``, ``stdout``, ``stderr`` (str); code 104
    with the tool's stderr as ``details``."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"{_name(argv)} failed (exit status {returncode})", stderr.strip())
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class ToolTimeout(KernelError):
    """A tool ran past its deadline and was killed with its process group; code 104."""


def _name(argv: Sequence[str]) -> str:
    """The tool a command line runs, skipping the wrappers podnet puts in front of it."""
    words = list(argv)
    while words and os.path.basename(words[0]) in ("setpriv", "nsenter"):
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[2:] if words[0] == "--pdeathsig" else words[1:]
    return os.path.basename(words[0]) if words else "?"


_resolved: dict[str, str] = {}  # tool → path, for this process


def which(tool: str) -> str:
    """Absolute path of ``tool`` from $PATH, then the sbin/bin fallbacks; :class:`ToolMissing`.

    Only executable regular files count (a tool hidden by a bind mount of /dev/null does not).
    """
    found = _resolved.get(tool)
    if found:
        return found
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d] + list(_FALLBACK_PATH)
    for d in dirs:
        path = os.path.join(d, tool)
        if os.access(path, os.X_OK) and os.path.isfile(path):
            _resolved[tool] = path
            return path
    raise ToolMissing(f"{tool} is not installed",
                      f"{tool} not found in PATH or {':'.join(_FALLBACK_PATH)}")  # fmt: skip


def _wrapper() -> list[str]:
    if not Limits.pdeathsig:
        return []
    try:
        return [which("setpriv"), "--pdeathsig", "KILL"]
    except ToolMissing:
        Limits.pdeathsig = False  # util-linux is essential on Debian; elsewhere, do without
        return []


class Spawned:
    """A started tool; :meth:`wait` collects its exit status and output.

    ``argv[0]`` is looked up with :func:`which` unless it is an absolute path; ``env`` replaces
    the environment (default: this process's); ``timeout`` overrides :data:`Limits.timeout`.
    Raises :class:`ToolMissing`, or KernelError when the process cannot be started; no file
    descriptor is left open then.
    """

    def __init__(
        self,
        argv: Sequence[str],
        stdin: bytes | None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        *,
        defer: bool = False,
        die_with_parent: bool = False,
    ) -> None:
        self.argv = list(argv)
        exe = argv[0] if os.path.isabs(argv[0]) else which(argv[0])
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise ToolMissing(f"{_name(argv)} is not installed", f"{exe} is not an executable file")
        full = [*(_wrapper() if die_with_parent else []), exe, *self.argv[1:]]
        pipes = [*os.pipe(), *os.pipe(), *os.pipe()]
        in_r, in_w, out_r, out_w, err_r, err_w = pipes
        actions = [
            (os.POSIX_SPAWN_DUP2, in_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        try:
            self.pid = os.posix_spawn(full[0], full, os.environ if env is None else env,
                                      file_actions=actions, setpgroup=0)  # fmt: skip
        except OSError as err:
            for fd in pipes:
                os.close(fd)
            raise KernelError(f"cannot start {_name(argv)}: {err.strerror}", str(err)) from err
        # (setpriv, when used, reports a failed exec of the tool itself as exit status 127)
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        self.timeout = Limits.timeout if timeout is None else timeout
        self.deadline = time.monotonic() + self.timeout
        self._out, self._err = out_r, err_r
        self._pending = memoryview(stdin or b"")
        self._pidfd = -1
        self._in: int | None = in_w
        self.deferred = defer
        #: Lines given with :meth:`ask` before :meth:`feed` (a batch's line numbers shift).
        self.asked_lines = 0
        self._early = b""  # stdout read by ask(), past its answer
        os.set_blocking(in_w, False)
        if not defer:
            self._feed()

    def feed(self, data: bytes) -> None:
        """Give a deferred tool its input (and close its stdin); its deadline starts now."""
        assert self.deferred and self._in is not None, "feed() is for a deferred, unfed tool"
        self.deferred = False
        self.deadline = time.monotonic() + self.timeout
        self._pending = memoryview(data)
        self._feed()

    def ask(self, line: bytes, wait: float) -> bytes | None:
        """Give a deferred tool one line of input without closing its stdin, and return the
        first line it prints (``ip -batch`` runs and flushes each command as it reads it):
        b"" when the tool exits instead (a failed command ends ``ip -batch``), None when no
        line came within ``wait`` seconds (a tool, or a wrapper, that reads all its input
        first) — the tool is left running, unfed, for :meth:`abandon`."""
        assert self.deferred and self._in is not None, "ask() is for a deferred, unfed tool"
        assert line.endswith(b"\n") and line.count(b"\n") == 1, "one line"
        os.set_blocking(self._in, True)  # a line fits in the pipe: this write never blocks
        try:
            os.write(self._in, line)
        except BrokenPipeError:
            return b""
        finally:
            os.set_blocking(self._in, False)
        self.asked_lines += 1
        poller = select.poll()
        poller.register(self._out, select.POLLIN)
        until = min(self.deadline, time.monotonic() + wait)
        while b"\n" not in self._early:
            left = until - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            data = os.read(self._out, 65536)
            if not data:
                return b""
            self._early += data
        answer, _, self._early = self._early.partition(b"\n")
        return answer + b"\n"

    def reap(self) -> None:
        """Collect the tool unless that was done already (an undo step for a tool started
        alongside others); its status and output are not looked at."""
        if self._out == -1 and self._err == -1:
            return
        try:
            self.wait_raw()
        except KernelError:
            pass

    def abandon(self) -> None:
        """A deferred tool that is not needed: close its stdin (it exits having done nothing)
        and reap it."""
        if self.deferred:
            self.deferred = False
            self.deadline = time.monotonic() + self.timeout
            try:
                self.wait_raw()
            except KernelError:
                pass

    def _feed(self) -> None:
        """Write what the pipe takes now; close stdin once all is written or the tool is gone."""
        assert self._in is not None
        try:
            while self._pending:
                self._pending = self._pending[os.write(self._in, self._pending) :]
        except BlockingIOError:
            return
        except BrokenPipeError:
            pass  # the tool exited without reading it all: its exit status says why
        os.close(self._in)
        self._in = None

    def _kill(self) -> None:
        try:
            os.killpg(self.pid, _SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)

    def _reap(self) -> int:
        """The exit status, once the tool has closed its output; killed at the deadline (a
        tool may close its pipes and still run)."""
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return status
            if time.monotonic() >= self.deadline:
                self._kill()
                raise ToolTimeout(f"{_name(self.argv)} did not exit within {self.timeout:g} s "
                                  "and was killed", " ".join(self.argv)[:300])  # fmt: skip
            time.sleep(0.0005)

    def _close(self) -> None:
        for fd in (self._in, self._out, self._err, self._pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self._in = None
        self._out = self._err = self._pidfd = -1

    def wait(self) -> tuple[int, str, str]:
        """Block until the tool exits: ``(returncode, stdout, stderr)`` (text). A tool still
        running at its deadline is killed with its process group: :class:`ToolTimeout` (104)."""
        rc, out, err = self.wait_raw()
        return rc, out.decode(errors="replace"), err.decode(errors="replace")

    def wait_raw(self) -> tuple[int, bytes, bytes]:
        """:meth:`wait` with stdout and stderr as bytes."""
        chunks: dict[int, list[bytes]] = {self._out: [self._early], self._err: []}
        poller = select.poll()
        for fd in chunks:
            poller.register(fd, select.POLLIN)
        if self._in is not None:
            poller.register(self._in, select.POLLOUT)
        open_fds = len(chunks) + (self._in is not None)
        try:
            exited = self._pidfd = os.pidfd_open(self.pid)
            poller.register(exited, select.POLLIN)  # readable once the tool has exited
            open_fds += 1
        except OSError:  # a kernel before 5.3: _reap polls waitpid instead
            exited = -1
        try:
            while open_fds:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self._kill()
                    raise ToolTimeout(
                        f"{_name(self.argv)} did not finish within {self.timeout:g} s "
                        "and was killed",
                        " ".join(self.argv)[:300],
                    )
                for fd, _ in poller.poll(left * 1000):
                    if fd == exited:
                        poller.unregister(fd)
                        open_fds -= 1
                        continue
                    if fd == self._in:
                        self._feed()
                        if self._in is None:
                            poller.unregister(fd)
                            open_fds -= 1
                        continue
                    data = os.read(fd, 65536)
                    if data:
                        chunks[fd].append(data)
                    else:
                        poller.unregister(fd)
                        open_fds -= 1
            status = self._reap()
        finally:
            self._close()
        out, err = (b"".join(c) for c in chunks.values())
        return os.waitstatus_to_exitcode(status), out, err

    def check(self) -> str:
        """:meth:`wait`, raising :class:`ToolError` on a non-zero exit; returns stdout."""
        rc, out, err = self.wait()
        if rc != 0:
            raise ToolError(self.argv, rc, out, err)
        return out


def spawn(
    argv: Sequence[str],
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    *,
    defer: bool = False,
    die_with_parent: bool = False,
) -> Spawned:
    """Start ``argv`` (tool looked up with :func:`which`, or an absolute path) without waiting;
    feed ``stdin`` (with ``defer``, later: :meth:`Spawned.feed`); ``env`` replaces the
    environment (default: this process's); ``die_with_parent``: SIGKILL when the plugin dies."""
    return Spawned(argv, stdin, env, timeout, defer=defer, die_with_parent=die_with_parent)


def run(argv: Sequence[str], stdin: bytes | None = None, *, die_with_parent: bool = False) -> str:
    """Run ``argv`` to completion; stdout on success, :class:`ToolError` (104) otherwise."""
    return Spawned(argv, stdin, die_with_parent=die_with_parent).check()
