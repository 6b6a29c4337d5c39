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
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from podnet.cni.errors import IO_FAILURE, CNIError
from podnet.runtime.conflist import validate_network_name

__all__ = [
    "DEFAULT_BIN_DIR",
    "DEFAULT_RANGES",
    "PLUGINS",
    "Installed",
    "conflist_path",
    "install",
    "network_conflist",
    "plugin_script",
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


def plugin_script(entry_point: str, interpreter: str | None = None) -> str:
    """The executable text of a plugin file for ``entry_point`` (``"pkg.module:function"``).

    ``interpreter`` defaults to ``sys.executable``; it must be an absolute path without
    whitespace that fits a ``#!`` line. ValueError otherwise.
    """
    exe = interpreter or sys.executable
    if not exe or not os.path.isabs(exe):
        raise ValueError(f"the plugin interpreter must be an absolute path, got {exe!r}")
    if any(c.isspace() for c in exe) or len(exe) + 5 > _SHEBANG_MAX:
        raise ValueError(f"interpreter path {exe!r} cannot be used in a #! line")
    module, sep, func = entry_point.partition(":")
    if not sep or not module or not func.isidentifier():
        raise ValueError(f"entry point {entry_point!r} is not 'module:function'")
    own, *deps = _plugin_path()
    extra = f"sys.path += {deps!r}\n" if deps else ""
    return (
        f"#!{exe} -IS\n"
        f"# CNI plugin installed by podnetctl install; runs {entry_point}.\n"
        "import sys\n"
        f"sys.path.insert(0, {own!r})\n"
        f"{extra}"
        f"from {module} import {func}\n"
        f"{func}()\n"
    )


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


def network_conflist(
    *,
    name: str = "podnet",
    ranges: Sequence[str] = DEFAULT_RANGES,
    data_dir: str | None = None,
) -> dict[str, Any]:
    """The conflist object (see module docstring), validated as the podnet plugin will read it.

    Raises ArgsError for a bad network name, InvalidConfig (7) naming the key for bad ranges or
    a relative ``data_dir``.
    """
    from podnet.plugins.podnet_conf import PodnetConf

    validate_network_name(name)
    plugin: dict[str, Any] = {"type": "podnet", "ranges": list(ranges)}
    if data_dir is not None:
        plugin["dataDir"] = data_dir
    plugin["capabilities"] = {"portMappings": True, "ips": True, "mac": True}
    PodnetConf({**plugin, "name": name, "cniVersion": "1.0.0"})  # raises InvalidConfig
    return {
        "cniVersion": "1.0.0",
        "cniVersions": ["1.0.0", "1.1.0"],
        "name": name,
        "plugins": [plugin],
    }


def conflist_path(conf_dir: str, name: str) -> str:
    """Where ``install`` writes network ``name``: ``<conf_dir>/10-<name>.conflist``."""
    return os.path.join(conf_dir, f"10-{name}.conflist")


def _write(path: str, content: str, mode: int) -> Installed:
    data = content.encode()
    try:
        with open(path, "rb") as f:
            if f.read() == data and (os.stat(path).st_mode & 0o777) == mode:
                return Installed(path, "unchanged")
        action = "updated"
    except FileNotFoundError:
        action = "created"
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return Installed(path, action)


def install(
    *,
    bin_dir: str = DEFAULT_BIN_DIR,
    conf_dir: str = "/etc/cni/net.d",
    name: str = "podnet",
    ranges: Sequence[str] = DEFAULT_RANGES,
    data_dir: str | None = None,
    conflist: bool = True,
    plugins: Iterable[str] | None = None,
    interpreter: str | None = None,
) -> list[Installed]:
    """Write the plugin files (``plugins``: names from :data:`PLUGINS`, default all) into
    ``bin_dir`` (mode 0755) and, unless ``conflist`` is False, the network's conflist into
    ``conf_dir`` (mode 0644). Returns what was done per file, plugins first.

    Raises ValueError for an unknown plugin name or an unusable interpreter, InvalidConfig (7)
    / ArgsError for a bad conflist, CNIError code 5 when a file cannot be written or a plugin's
    module is not importable by this interpreter.
    """
    names = list(PLUGINS) if plugins is None else list(plugins)
    unknown = [n for n in names if n not in PLUGINS]
    if unknown:
        raise ValueError(f"unknown plugin(s) {', '.join(unknown)}; known: {', '.join(PLUGINS)}")
    scripts = {}
    for plugin in names:
        module = PLUGINS[plugin].partition(":")[0]
        if importlib.util.find_spec(module) is None:
            raise CNIError(
                f"cannot install {plugin}: module {module} is not importable", code=IO_FAILURE
            )
        scripts[plugin] = plugin_script(PLUGINS[plugin], interpreter)
    conf_text = None
    if conflist:
        conf = network_conflist(name=name, ranges=ranges, data_dir=data_dir)
        conf_text = json.dumps(conf, indent=2) + "\n"
    done = []
    try:
        for plugin, text in scripts.items():
            done.append(_write(os.path.join(bin_dir, plugin), text, 0o755))
        if conf_text is not None:
            done.append(_write(conflist_path(conf_dir, name), conf_text, 0o644))
    except OSError as err:
        raise CNIError(f"install failed: {err}", code=IO_FAILURE) from err
    return done


DEFAULT_UNIT_DIR = "/etc/systemd/system"
RESTORE_UNIT = "podnet-restore.service"


def _podnetctl() -> str:
    """The ``podnetctl`` console script next to this interpreter (the venv's)."""
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "podnetctl")


def restore_unit(data_dir: str | None = None, podnetctl: str | None = None) -> str:
    """A systemd oneshot unit running ``podnetctl network restore`` at boot, before the
    container runtimes start: bridges, their pods' ports and table ``inet podnet`` (with
    hostPorts and forwards) come back from the store."""
    from podnet.plugins.podnet_conf import DEFAULT_DATA_DIR

    command = f"{podnetctl or _podnetctl()} network --data-dir {data_dir or DEFAULT_DATA_DIR}"
    return (
        "[Unit]\n"
        "Description=podnet: restore bridge networks, forwards and table inet podnet\n"
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
