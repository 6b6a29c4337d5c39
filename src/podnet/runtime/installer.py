"""Installing podnet for a runtime: plugin executables in a CNI bin dir, a conflist in a conf dir.

The plugin files are :mod:`podnet.runtime.pluginfile`'s scripts, checked first by
:func:`podnet.runtime.sourcecheck.check_source`; systemd units are
:mod:`podnet.runtime.units`'.

The conflist is cni-kindnet's shape (docs/sources.md, "cni-kindnet") with ``"type": "podnet"``::

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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from podnet import checked, nodeconf
from podnet.cni import fastjson
from podnet.errors import IO_FAILURE, CNIError, InvalidConfig
from podnet.netconf import PodnetConf
from podnet.nodeconf import NodeConf
from podnet.runtime.conflist import validate_network_name
from podnet.runtime.files import Installed, write_atomic
from podnet.runtime.files import write_file as _write
from podnet.runtime.pluginfile import (
    PLUGIN_MARK,
    PLUGINS,
    _plugin_path,
    plugin_script,
)
from podnet.runtime.sourcecheck import UnsafeSource, _SourceCheck, check_source
from podnet.runtime.units import (
    _UNIT_HEAD,
    DEFAULT_UNIT_DIR,
    RESTORE_UNIT,
    install_units,
    restore_unit,
)

# Names other modules and tests import from here; they live in the modules named above.
__all__ = [
    "DEFAULT_BIN_DIR",
    "DEFAULT_RANGES",
    "DEFAULT_UNIT_DIR",
    "PLUGINS",
    "PLUGIN_MARK",
    "RESTORE_UNIT",
    "_UNIT_HEAD",
    "_SourceCheck",
    "_plugin_path",
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


def _node_after(node: NodeConf, data_dir: str | None, warn: Callable[[str], None]) -> NodeConf:
    """The node configuration once ``install --data-dir data_dir`` is done: ``data_dir`` the
    store; a store it replaces stays allowed (pods attached there are still deleted)."""
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
    (default :func:`podnet.nodeconf.conf_path`; mode 0644, atomically) when
    ``data_dir`` is given — it becomes the node's store — or the file exists: it lists every
    file written, for :func:`uninstall`, and is written before the conflist and the units.
    Returns what was done per file, plugins first.

    The conflist is validated as the plugins will read it: against the node configuration as
    written when ``node_conf`` is the file they read (:func:`podnet.nodeconf.conf_path`
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
