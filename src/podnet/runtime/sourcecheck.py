"""Whether the plugin files may be installed: runtimes run them as root, so whoever can change
the interpreter, the venv or the source tree they load owns the node. :func:`check_source`
refuses (:class:`UnsafeSource`) before anything is written when anyone but root could.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys

import podnet
from podnet import trusted
from podnet.errors import IO_FAILURE, CNIError
from podnet.runtime.pluginfile import PLUGIN_RUNTIME_DEPS, _plugin_path

__all__ = ["UnsafeSource", "check_source"]


class UnsafeSource(CNIError):
    """:func:`check_source` refused: ``path`` could be changed by someone other than root
    (``reason``, e.g. ``is owned by uid 1000``), and the root-run plugin files would load it
    (``role``: what ``path`` is to them). Code 5; ``msg`` is one line naming all three."""

    code = IO_FAILURE

    def __init__(self, path: str, reason: str, role: str) -> None:
        self.path, self.reason, self.role = path, reason, role
        super().__init__(f"refusing: {path} {reason} ({role}); root-run plugins must load only "
                         "what root alone can change")  # fmt: skip


def check_source(interpreter: str | None = None) -> None:
    """Refuse (:class:`UnsafeSource`) to install plugin files that would make root run code
    someone else can change. Checked, each path resolved component by component from ``/``
    (symlinks followed as the kernel does, every link and every directory on the way):

    - the interpreter (``interpreter``, default ``sys.executable``): the real binary, the
      directory it is named in and that one's parent (``pyvenv.cfg`` there redirects the
      standard library) and any ``pyvenv.cfg`` in them;
    - the directories that interpreter searches under ``-IS`` (asked by running it once, after
      its binary passed; a missing entry such as ``python311.zip`` must not be creatable);
    - the directories the plugin file puts on ``sys.path`` (:func:`_plugin_path`), every entry
      directly in podnet's (it comes first, before the standard library), and every directory
      and file of the ``podnet`` package and of :data:`PLUGIN_RUNTIME_DEPS`' packages.

    The rule. Trusted owners are root and the installing user (the same when installing as
    root; a rootless runtime runs the files as that user). What the plugins load — the binary,
    those directories, the package files — must be owned by a trusted uid, not group-writable
    unless the group is root (gid 0), and not world-writable: from a writable directory on the
    module path anyone could add a module that shadows one the plugins import. A directory on
    the way to such a path matters only through its one entry on the way, so it must be owned by
    a trusted uid and not writable by others, except a sticky directory (``/tmp``, mode 1777):
    there others may create entries but not rename or remove one they do not own, so it is safe
    when that entry is owned by a trusted uid. A symlink's own mode means nothing; its owner
    counts only in a sticky directory, as any entry's.

    Not checked: files of the standard library (only its directories), packages in the
    dependencies' directories that the plugins do not import, the CNI bin dir written to. Costs
    ~30 ms (measured): one run of the interpreter (~25 ms) and an ``lstat`` per path component
    and per file (~250).
    Raises UnsafeSource (5) naming the first path at fault, CNIError 5 when a path cannot be
    examined or the interpreter does not run.
    """
    check = _SourceCheck()
    exe = interpreter or sys.executable
    role = "the plugins' interpreter"
    real, st = check.resolve(exe, role)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeSource(real, "is not a regular file", check.as_(exe, real, role))
    check.loaded(real, st, check.as_(exe, real, role))
    bindir = os.path.dirname(exe)
    for venv_dir in (bindir, os.path.dirname(bindir)):
        check.module_dir(venv_dir, f"where {exe} looks for pyvenv.cfg")
        cfg = os.path.join(venv_dir, "pyvenv.cfg")
        check.module_dir(cfg, f"read by {exe} as its venv's configuration", missing_ok=True)
    for entry in _interpreter_path(exe):
        check.module_dir(entry, f"on the module path of {exe} -IS", missing_ok=True)
    own, *deps = _plugin_path()
    for entry in (own, *deps):
        check.module_dir(entry, "on the plugin files' sys.path")
    check.entries(own, f"in {own}, first on the plugin files' sys.path")
    check.tree(os.path.dirname(os.path.abspath(podnet.__file__)), "part of package podnet")
    for dep in PLUGIN_RUNTIME_DEPS:
        spec = importlib.util.find_spec(dep)
        if spec is None or not spec.origin:
            continue
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                check.tree(location, f"part of package {dep}")
        else:
            check.module_dir(spec.origin, f"module {dep}")


def _interpreter_path(exe: str) -> list[str]:
    """The absolute entries of ``sys.path`` in ``exe -IS`` (the standard library's
    directories, and the zip file it would read first); CNIError 5 if it does not run."""
    code = "import sys, json; print(json.dumps([p for p in sys.path if p.startswith('/')]))"
    try:
        proc = subprocess.run([exe, "-IS", "-c", code], capture_output=True, text=True,
                              timeout=30, env={}, cwd="/", stdin=subprocess.DEVNULL,
                              check=True)  # fmt: skip
        entries = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as err:
        raise CNIError(f"cannot install: {exe} -IS does not report its module path: {err}",
                       code=IO_FAILURE) from err  # fmt: skip
    return [str(e) for e in entries]


class _SourceCheck:
    """The walks of :func:`check_source`; each method raises UnsafeSource on the first fault."""

    def __init__(self) -> None:
        self.trusted = frozenset({0, os.geteuid()})
        self.root = self._lstat("/", "the root directory")

    def _lstat(self, path: str, role: str) -> os.stat_result:
        try:
            return os.lstat(path)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise CNIError(f"cannot install: cannot examine {path} ({role}): {err.strerror}",
                           code=IO_FAILURE) from err  # fmt: skip

    def _writable(self, st: os.stat_result, path: str) -> str | None:
        """Why someone untrusted can change the inode ``path`` itself, or None."""

        return trusted.fault(st, path)

    def loaded(self, path: str, st: os.stat_result, role: str) -> None:
        """``path`` is loaded (a file) or searched (a directory): nobody untrusted may write it."""
        why = self._writable(st, path)
        if why:
            raise UnsafeSource(path, why, role)

    @staticmethod
    def as_(path: str, real: str, role: str) -> str:
        """``role``, naming ``path`` when the fault is found at its real path ``real``."""
        return role if real == path else f"{role}, as {path}"

    def _through(self, parent: str, pst: os.stat_result, child: str, cst: os.stat_result,
                 target: str, role: str) -> None:  # fmt: skip
        """``parent`` is passed through to ``child`` on the way to ``target``: nobody untrusted
        may replace that entry (:func:`podnet.trusted.through_fault`)."""

        problem = trusted.through_fault(pst, cst, parent)
        if problem is None:
            return
        theirs, why = problem
        above = f"on the way to {target}, {role}"
        if theirs:
            raise UnsafeSource(parent, why, above)
        raise UnsafeSource(child, f"{why} in sticky {parent}, which {trusted.fault(pst, parent)}",
                           above)  # fmt: skip

    def resolve(self, path: str, role: str, *, missing_ok: bool = False
                ) -> tuple[str, os.stat_result]:  # fmt: skip
        """Follow absolute ``path`` from ``/`` as the kernel does (:func:`podnet.trusted.
        resolve`: at most 40 symlinks), checking each step with :meth:`_through`; returns the
        real path and its ``lstat``.

        A missing last entry with ``missing_ok``: returns the directory it would be in (whose
        writers could create it), so the caller checks that instead. CNIError 5 otherwise.
        ``role`` says what ``path`` is to the plugins, for the error.
        """

        if not os.path.isabs(path):
            raise CNIError(f"cannot install: {path} ({role}) is not an absolute path",
                           code=IO_FAILURE)  # fmt: skip
        try:
            real, real_st, missing = trusted.resolve(
                path, lambda p, ps, c, cs: self._through(p, ps, c, cs, path, role),
                lambda name: self._lstat(name, role))
        except OSError as err:  # a symlink loop (lstat's own failures are CNIErrors)
            raise CNIError(f"cannot install: too many symlinks in {path} ({role})",
                           code=IO_FAILURE) from err  # fmt: skip
        if missing and not (missing_ok and len(missing) == 1):
            raise CNIError(f"cannot install: {real.rstrip('/')}/{missing[0]} ({role}) does not "
                           "exist", code=IO_FAILURE)  # fmt: skip
        return real, real_st

    def module_dir(self, path: str, role: str, *, missing_ok: bool = False) -> None:
        """``path`` (or, when missing, the directory it would be created in) is loaded or
        searched: resolved and checked with :meth:`loaded`."""
        real, st = self.resolve(path, role, missing_ok=missing_ok)
        if real != path and not os.path.lexists(path):
            self.loaded(real, st, f"would hold {path}, {role}")
        else:
            self.loaded(real, st, self.as_(path, real, role))

    def entries(self, directory: str, role: str) -> None:
        """Every entry directly in ``directory`` (a module there is importable)."""
        with os.scandir(directory) as it:
            for entry in it:
                self._entry(entry.path, entry.stat(follow_symlinks=False), role)

    def _entry(self, path: str, st: os.stat_result, role: str) -> tuple[str, os.stat_result]:
        if stat.S_ISLNK(st.st_mode):
            real, st = self.resolve(path, role)
            self.loaded(real, st, self.as_(path, real, role))
            return real, st
        self.loaded(path, st, role)
        return path, st

    def tree(self, top: str, role: str) -> None:
        """``top`` (resolved) and every directory and file under it, symlinks followed once."""
        real, st = self.resolve(top, role)
        self.loaded(real, st, role)
        stack, seen = [real], {(st.st_dev, st.st_ino)}
        while stack:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    path, est = self._entry(entry.path, entry.stat(follow_symlinks=False), role)
                    key = (est.st_dev, est.st_ino)
                    if stat.S_ISDIR(est.st_mode) and key not in seen:
                        seen.add(key)
                        stack.append(path)
