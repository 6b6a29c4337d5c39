"""Installing podnet for a runtime: plugin executables in a CNI bin dir, a conflist in a conf dir.

Each plugin file is a short Python script whose interpreter is this process's own, by absolute
path (``#!/…/python -IS``): runtimes call plugins with their whole environment, and a PATH that
starts with pyenv shims or a PYTHONPATH meant for something else must not change which Python
and which podnet run (FIELD-NOTES §4). ``-I`` (isolated mode) ignores PYTHON* variables and user
site-packages and keeps the bin dir off ``sys.path``; ``-S`` skips ``site`` (its .pth processing
costs ~3-5 ms of every plugin call), so the script puts the directory holding the installed
``podnet`` package on ``sys.path`` itself — the plugins need nothing else but the stdlib.

The conflist is seed 001's shape with ``"type": "podnet"``::

    {"cniVersion": "1.0.0", "cniVersions": ["1.0.0", "1.1.0"], "name": "podnet",
     "plugins": [{"type": "podnet", "ranges": ["10.244.2.0/24"],
                  "capabilities": {"portMappings": true, "ips": true, "mac": true},
                  "dataDir": "…"?}]}

``ips`` and ``mac`` are declared so runtimes pass requested addresses (``podman run --ip``) and,
above all, so podman 4.3 keeps ``portMappings`` on the ADD it sends after ``network reload``
(it replaces a plugin's capabilities by ``{"ips": true}`` otherwise, dropping the hostPorts).

``cniVersions`` lets a 1.1-aware runtime use GC and STATUS while libcni 1.1 (podman 4.3) reads
``cniVersion`` 1.0.0. Installing is idempotent: files whose content is already right are left
alone (reported ``unchanged``), others are replaced atomically (write + rename, so a running
plugin is never seen half-written).

Runtimes run the plugin files as root, so whoever can change the interpreter, the venv or the
source tree they load owns the node: :func:`check_source` refuses (:class:`UnsafeSource`)
before anything is written when anyone but root could.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podnet.errors import IO_FAILURE, CNIError, InvalidConfig
from podnet.runtime.conflist import validate_network_name

if TYPE_CHECKING:
    from podnet.drivers.nodeconf import NodeConf

__all__ = [
    "DEFAULT_BIN_DIR",
    "DEFAULT_RANGES",
    "PLUGINS",
    "Installed",
    "UnsafeSource",
    "check_source",
    "conflist_path",
    "install",
    "network_conflist",
    "plugin_script",
    "write_atomic",
    "restore_unit",
    "install_units",
]

DEFAULT_BIN_DIR = "/opt/cni/bin"
DEFAULT_RANGES = ("10.244.2.0/24",)

#: Plugin executables ``podnetctl install`` writes: file name → console entry point
#: (``module:function``). A new plugin is one line here.
PLUGINS: dict[str, str] = {
    "podnet": "podnet.plugins.podnet:main",
    "podnet-ipam": "podnet.plugins.podnet_ipam:main",
    "podnet-portmap": "podnet.plugins.podnet_portmap:main",
    "podnet-redirect": "podnet.plugins.podnet_redirect:main",
}

#: Linux reads at most this many bytes of a ``#!`` line.
_SHEBANG_MAX = 255


@dataclass(frozen=True)
class Installed:
    """One file ``install`` handled: ``path`` and ``action`` (created | updated | unchanged)."""

    path: str
    action: str


def plugin_script(entry_point: str, interpreter: str | None = None,
                  tool_dirs: Sequence[str] = ()) -> str:
    """The executable text of a plugin file for ``entry_point`` (``"pkg.module:function"``).

    ``interpreter`` defaults to ``sys.executable``; it must be an absolute path without
    whitespace that fits a ``#!`` line. ValueError otherwise. ``tool_dirs`` (absolute paths,
    e.g. a self-contained bundle's ``sbin``) are put before the runtime's ``PATH``, so the
    plugin runs the ``ip`` and ``nft`` found there first (:func:`podnet.proc.which`). What the
    node allows (its data dirs, its store) is not in the file: every call reads the node
    configuration (:mod:`podnet.drivers.nodeconf`).
    """
    exe = interpreter or sys.executable
    if not exe or not os.path.isabs(exe):
        raise ValueError(f"the plugin interpreter must be an absolute path, got {exe!r}")
    if any(c.isspace() for c in exe) or len(exe) + 5 > _SHEBANG_MAX:
        raise ValueError(f"interpreter path {exe!r} cannot be used in a #! line")
    module, sep, func = entry_point.partition(":")
    if not sep or not module or not func.isidentifier():
        raise ValueError(f"entry point {entry_point!r} is not 'module:function'")
    bad = [d for d in tool_dirs if not os.path.isabs(d) or os.pathsep in d or "\n" in d]
    if bad:
        raise ValueError(f"tool directories must be absolute paths without ':', got {bad!r}")
    own, *deps = _plugin_path()
    extra = f"sys.path += {deps!r}\n" if deps else ""
    if tool_dirs:
        extra += ("import os\n"
                  f"os.environ['PATH'] = {os.pathsep.join(tool_dirs) + os.pathsep!r} + "
                  "os.environ.get('PATH', '')\n")  # fmt: skip
    return (
        f"#!{exe} -IS\n"
        f"{PLUGIN_MARK}{entry_point}.\n"
        "import sys\n"
        f"sys.path.insert(0, {own!r})\n"
        f"{extra}"
        f"from {module} import {func}\n"
        f"{func}()\n"
    )


#: The second line of every plugin file ``install`` writes (``uninstall`` removes only those).
PLUGIN_MARK = "# CNI plugin installed by podnetctl install; runs "


#: Packages the plugins import at run time besides podnet and the stdlib.
PLUGIN_RUNTIME_DEPS = ("jiter",)


def _plugin_path() -> list[str]:
    """The directories holding ``podnet`` and :data:`PLUGIN_RUNTIME_DEPS` (``-S`` skips
    site-packages), each once: podnet's own first (put before the standard library), then the
    dependencies' (put after it, so nothing in site-packages can shadow a stdlib module). A
    dependency that is not installed is left out (the plugins fall back to the stdlib)."""
    import podnet

    out = [os.path.dirname(os.path.dirname(os.path.abspath(podnet.__file__)))]
    for dep in PLUGIN_RUNTIME_DEPS:
        spec = importlib.util.find_spec(dep)
        if spec is None or not spec.origin:
            continue
        origin = os.path.abspath(spec.origin)
        # a package's origin is <dir>/<dep>/__init__.py; a module's <dir>/<dep>….so
        parent = os.path.dirname(origin)
        if spec.submodule_search_locations:
            parent = os.path.dirname(parent)
        if parent not in out:
            out.append(parent)
    return out


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
    import podnet

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
    import subprocess  # only here: ``podnet.runtime`` users (podnetctl net) do not pay for it

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
        from podnet import trusted

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
        from podnet import trusted

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
        from podnet import trusted

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


def network_conflist(
    *,
    name: str = "podnet",
    ranges: Sequence[str] = DEFAULT_RANGES,
    network: str | None = None,
    data_dir: str | None = None,
    node: NodeConf | None = None,
) -> dict[str, Any]:
    """The conflist object (see module docstring), validated as the podnet plugin will read it
    on a node whose configuration is ``node`` (default: the one it has). With ``network`` (a
    bridge or OVN network of the store, ``podnetctl network create``) the plugin has
    ``"network"`` instead of ``"ranges"``.

    Raises ArgsError for a bad network name, InvalidConfig (7) naming the key for bad ranges,
    a bad ``network`` name or a ``data_dir`` that is not a checked path or not allowed.
    """
    from podnet.drivers.conf import PodnetConf

    validate_network_name(name)
    plugin: dict[str, Any] = {"type": "podnet"}
    if network is not None:
        plugin["network"] = network
    else:
        plugin["ranges"] = list(ranges)
    if data_dir is not None:
        plugin["dataDir"] = data_dir
    plugin["capabilities"] = {"portMappings": True, "ips": True, "mac": True}
    PodnetConf({**plugin, "name": name, "cniVersion": "1.0.0"}, node)  # raises InvalidConfig
    return {
        "cniVersion": "1.0.0",
        "cniVersions": ["1.0.0", "1.1.0"],
        "name": name,
        "plugins": [plugin],
    }


def conflist_path(conf_dir: str, name: str) -> str:
    """Where ``install`` writes network ``name``: ``<conf_dir>/10-<name>.conflist``."""
    return os.path.join(conf_dir, f"10-{name}.conflist")


#: The file name endings libcni's ``ConfFiles`` reads from a conf dir (containerd's CRI and
#: CRI-O take the first by name as their default network; ``ctr run --cni`` loads them all).
CONF_EXTENSIONS = (".conf", ".conflist", ".json")


def first_in_conf_dir(conf_dir: str, path: str) -> list[str] | None:
    """The other network config files of ``conf_dir`` when ``path`` (to be written there)
    sorts first among them by name (libcni sorts by file name), else None (also when it is
    alone there: the first network of a node is meant to be its default)."""
    try:
        names = os.listdir(conf_dir)
    except OSError:
        names = []
    others = sorted(n for n in names if n.endswith(CONF_EXTENSIONS)
                    and not n.startswith(".") and n != os.path.basename(path))  # fmt: skip
    if not others or others[0] < os.path.basename(path):
        return None
    return others


def _replaced(path: str, conf: dict[str, Any]) -> str | None:
    """What the conflist at ``path`` (if podnet's) gives its pods that ``conf`` changes —
    ``"ranges A with ranges B"``, ``"ranges A with network n"`` —, or None."""
    try:
        with open(path, "rb") as f:
            from podnet.cni import fastjson

            old = fastjson.loads(f.read())
        (old_plugin,) = old["plugins"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(old_plugin, dict):
        return None

    def source(plugin: dict[str, Any]) -> str | None:
        ranges, network = plugin.get("ranges"), plugin.get("network")
        if isinstance(ranges, list):
            return "ranges " + ", ".join(str(r) for r in ranges)
        return f"network {network}" if network is not None else None

    before, after = source(old_plugin), source(conf["plugins"][0])
    return f"{before} with {after}" if before and before != after else None


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> bool:
    """Make ``path`` hold ``data`` (mode ``mode``): nothing is written when it already does
    (returns False); else a temporary file beside it is written and fsynced, renamed over
    ``path``, and the directory (made if missing, mode 0755) fsynced (returns True). OSError
    when the directory cannot be written (the temporary file is removed)."""
    try:
        with open(path, "rb") as f:
            if f.read() == data and (os.fstat(f.fileno()).st_mode & 0o7777) == mode:
                return False
    except FileNotFoundError:
        pass
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


def _write(path: str, content: str, mode: int) -> Installed:
    existed = os.path.exists(path)
    if not write_atomic(path, content.encode(), mode):
        return Installed(path, "unchanged")
    return Installed(path, "updated" if existed else "created")


def _node_after(node: NodeConf, data_dir: str | None, warn: Callable[[str], None]) -> NodeConf:
    """The node configuration once ``install --data-dir data_dir`` is done: ``data_dir`` the
    store; a store it replaces stays allowed (pods attached there are still deleted)."""
    from podnet.drivers.nodeconf import NodeConf

    if data_dir is None:
        return node
    allowed = [a for a in node.allowed if a != (data_dir, False)]
    if node.configured and node.data_dir != data_dir:
        warn(f"the node's store was {node.data_dir}; now {data_dir} ({node.data_dir} stays "
             f"allowed as a dataDir in {node.path})")  # fmt: skip
        if (node.data_dir, False) not in allowed:
            allowed.append((node.data_dir, False))
    return NodeConf(node.path, data_dir, allowed, node.installed, exists=node.exists,
                    drivers=node.drivers)


def install(
    *,
    bin_dir: str = DEFAULT_BIN_DIR,
    conf_dir: str = "/etc/cni/net.d",
    name: str = "podnet",
    ranges: Sequence[str] = DEFAULT_RANGES,
    network: str | None = None,
    data_dir: str | None = None,
    conflist: bool = True,
    plugins: Iterable[str] | None = None,
    interpreter: str | None = None,
    units: dict[str, str] | None = None,
    unit_dir: str = "/etc/systemd/system",
    node_conf: str | None = None,
    warn: Callable[[str], None] | None = None,
    tool_dirs: Sequence[str] = (),
) -> list[Installed]:
    """Write the plugin files (``plugins``: names from :data:`PLUGINS`, default all) into
    ``bin_dir`` (mode 0755), unless ``conflist`` is False the network's conflist into
    ``conf_dir`` (mode 0644; ``network``: see :func:`network_conflist`), ``units`` (name →
    text, :func:`install_units`) into ``unit_dir``, and the node configuration ``node_conf``
    (default :func:`podnet.drivers.nodeconf.conf_path`; mode 0644, atomically) when
    ``data_dir`` is given — it becomes the node's store — or the file exists: it lists every
    file written, for :func:`uninstall`, and is written before the conflist and the units.
    Returns what was done per file, plugins first.

    The conflist is validated as the plugins will read it: against the node configuration as
    written when ``node_conf`` is the file they read (:func:`podnet.drivers.nodeconf.conf_path`
    in this environment), else against that file as it is — a ``node_conf`` elsewhere (a
    test's, a demo's) changes nothing the plugins see, so its ``data_dir`` must be allowed
    by theirs (or ``PODNET_DATA_DIRS``).

    ``tool_dirs``: see :func:`plugin_script`. ``warn`` (default: nothing) is told when the
    conflist replaces the ranges or network of the one at its path, when it sorts first in
    ``conf_dir`` (the default network of containerd's CRI and CRI-O), and when ``data_dir``
    replaces the node's store.

    Raises ValueError for an unknown plugin name or an unusable interpreter, InvalidConfig (7)
    / ArgsError for a bad conflist or a malformed or untrusted node configuration,
    :class:`UnsafeSource` (5) when someone but root could change what the plugin files would
    run (:func:`check_source`; nothing is written then), CNIError code 5 when a file cannot be
    written or a plugin's module is not importable by this interpreter.
    """
    from podnet import checked
    from podnet.drivers import nodeconf

    say = warn or (lambda _msg: None)
    names = list(PLUGINS) if plugins is None else list(plugins)
    unknown = [n for n in names if n not in PLUGINS]
    if unknown:
        raise ValueError(f"unknown plugin(s) {', '.join(unknown)}; known: {', '.join(PLUGINS)}")
    if data_dir is not None:
        try:
            checked.path(data_dir)
        except checked.BadValue as err:
            raise InvalidConfig(f"dataDir: {err}") from None
    node = nodeconf.read(node_conf or nodeconf.conf_path())
    after = _node_after(node, data_dir, say)
    # The conflist is checked against the configuration the plugins will read: this one once
    # written when it is theirs, else the file they do read, untouched by this install.
    plugins_path = nodeconf.conf_path()
    theirs = after if (node_conf or plugins_path) == plugins_path else nodeconf.read(plugins_path)
    texts: dict[str, tuple[str, int]] = {}  # path -> (text, mode), in writing order
    for plugin in names:
        module = PLUGINS[plugin].partition(":")[0]
        if importlib.util.find_spec(module) is None:
            raise CNIError(
                f"cannot install {plugin}: module {module} is not importable", code=IO_FAILURE
            )
        texts[os.path.join(bin_dir, plugin)] = (
            plugin_script(PLUGINS[plugin], interpreter, tool_dirs), 0o755)
    if conflist:
        try:
            conf = network_conflist(name=name, ranges=ranges, network=network,
                                    data_dir=data_dir, node=theirs)  # fmt: skip
        except InvalidConfig as err:
            if theirs is after:
                raise
            raise InvalidConfig(f"{err.msg} (the plugins read {plugins_path}, not {after.path}: "
                                f"set {nodeconf.NODE_CONF_ENV} for them and podnetctl)",
                                err.details) from None  # fmt: skip
        path = conflist_path(conf_dir, name)
        replaced = _replaced(path, conf)
        if replaced:
            say(f"{path}: replacing {replaced} (pods keep their addresses until deleted)")
        others = first_in_conf_dir(conf_dir, path)
        if others is not None:
            say(f"{os.path.basename(path)} sorts first in {conf_dir}, before "
                f"{', '.join(others[:3])}: network {name} "
                "becomes the default network of containerd's CRI, CRI-O and ctr run --cni "
                "(--name sets the file name)")  # fmt: skip
        texts[path] = (json.dumps(conf, indent=2) + "\n", 0o644)
    if names:
        check_source(interpreter)
    done = []
    plugin_files = [p for p in texts if os.path.dirname(p) == bin_dir and
                    os.path.basename(p) in PLUGINS]  # fmt: skip
    try:
        for path in plugin_files:
            done.append(_write(path, *texts.pop(path)))
        # The node configuration before the conflist and units: a runtime that picks up the
        # conflist at once must find its dataDir allowed. It lists every file this install
        # writes (uninstall checks each one's content before removing it).
        if data_dir is not None or node.exists:
            planned = [*plugin_files, *texts]
            for unit in units or {}:
                planned += [os.path.join(unit_dir, unit),
                            os.path.join(unit_dir, "multi-user.target.wants", unit)]  # fmt: skip
            installed = after.installed + [p for p in planned if p not in after.installed]
            final = nodeconf.NodeConf(after.path, after.data_dir if after.configured else None,
                                      after.allowed, installed, exists=True,
                                      drivers=after.drivers)  # fmt: skip
            os.makedirs(os.path.dirname(final.path), mode=0o755, exist_ok=True)
            done.append(_write(final.path, final.render(), 0o644))
            nodeconf.forget()
        for path, (text, mode) in texts.items():
            done.append(_write(path, text, mode))
        if units:
            done += install_units(units, unit_dir)
    except OSError as err:
        raise CNIError(f"install failed: {err}", code=IO_FAILURE) from err
    return done
DEFAULT_UNIT_DIR = "/etc/systemd/system"
RESTORE_UNIT = "podnet-restore.service"
#: How every unit ``install`` writes begins (``uninstall`` removes only those).
_UNIT_HEAD = "[Unit]\nDescription=podnet: "


def _podnetctl() -> str:
    """The ``podnetctl`` console script next to this interpreter (the venv's)."""
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "podnetctl")


def restore_unit(data_dir: str | None = None, podnetctl: str | None = None) -> str:
    """A systemd oneshot unit running ``podnetctl network restore`` at boot, before the
    container runtimes start: bridges, their pods' ports and table ``inet podnet`` (with
    hostPorts and forwards) come back from the store — which, being first, is then the owner of
    the node's table for this boot (``--init``: a node with no store yet gets an empty one).
    It runs before ``network.target``, so without ``--attach-new``: an OVN uplink's parent
    already in its OVS bridge is kept, one not attached yet is left alone and named (the unit
    then fails), never taken while networking may still be configuring it
    (:mod:`podnet.drivers.physical`). ``data_dir``: the store, default the node
    configuration's when the unit runs."""
    store = f" --data-dir {data_dir}" if data_dir else ""  # else the node config's store
    command = f"{podnetctl or _podnetctl()} network{store} --init"
    return (
        f"{_UNIT_HEAD}restore bridge networks, forwards and table inet podnet\n"
        "After=network-pre.target local-fs.target\n"
        "Wants=network-pre.target\n"
        "Before=network.target containerd.service crio.service podman.service kubelet.service\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={command} restore\n"
        "RemainAfterExit=yes\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def install_units(units: dict[str, str], unit_dir: str = DEFAULT_UNIT_DIR) -> list[Installed]:
    """Write systemd units (name → text, mode 0644) and enable each for ``multi-user.target``
    (the ``.wants`` symlink ``systemctl enable`` makes), so they run at the next boot. CNIError
    code 5 when a file cannot be written."""
    done = []
    try:
        for name, text in units.items():
            path = os.path.join(unit_dir, name)
            done.append(_write(path, text, 0o644))
            wants = os.path.join(unit_dir, "multi-user.target.wants")
            os.makedirs(wants, mode=0o755, exist_ok=True)
            link = os.path.join(wants, name)
            if os.path.islink(link) and os.readlink(link) == path:
                done.append(Installed(link, "unchanged"))
            else:
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(path, link)
                done.append(Installed(link, "created"))
    except OSError as err:
        raise CNIError(f"install failed: {err}", code=IO_FAILURE) from err
    return done
