"""Network configurations: finding one by name in a directory, parsing it, choosing its version.

Source: libcni ``conf.go`` (CNI SPEC 1.1.0 "Configuration format"). Lookup order as libcni's
``LoadNetworkConf``: every ``*.conflist`` file sorted by file name, then every ``*.conf`` and
``*.json`` file sorted by file name; the first whose ``name`` matches wins, and a file that
cannot be parsed on the way is an error naming it (libcni does the same). A single-plugin config
(no ``plugins`` key) is wrapped as a one-plugin list with its ``name`` and ``cniVersion``.
libcni 1.3's plugin files in ``<dir>/<network>/`` are not supported.

Version (libcni 1.2+): with ``cniVersions``, the highest version listed there or in
``cniVersion`` that podnet supports; otherwise ``cniVersion``, which must be supported.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from podnet.cni import version as spec_version
from podnet.runtime.errors import ArgsError, ConfigError, IncompatibleVersion, NetworkNotFound

__all__ = [
    "DEFAULT_CONF_DIR",
    "NetworkConfigList",
    "PluginConf",
    "choose_version",
    "conf_files",
    "conflist_from_bytes",
    "load_conflist",
    "validate_network_name",
]

DEFAULT_CONF_DIR = "/etc/cni/net.d"
LIST_EXTENSIONS = (".conflist",)
SINGLE_EXTENSIONS = (".conf", ".json")

_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")


def validate_network_name(name: str) -> None:
    """libcni's ValidateNetworkName: alphanumeric first, then ``[a-zA-Z0-9_.-]``; ArgsError."""
    if not _NAME.fullmatch(name):
        raise ArgsError(
            f"invalid network name {name!r}: must start with a letter or digit and contain "
            "only letters, digits, '_', '.', '-'"
        )


@dataclass(frozen=True)
class PluginConf:
    """One entry of ``plugins``, as written (``raw``), with the keys the runtime reads."""

    raw: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.raw["type"])

    @property
    def capabilities(self) -> frozenset[str]:
        """Capabilities declared ``true`` in the plugin's ``capabilities`` object."""
        caps = self.raw.get("capabilities")
        if not isinstance(caps, dict):
            return frozenset()
        return frozenset(k for k, v in caps.items() if v is True)


@dataclass(frozen=True)
class NetworkConfigList:
    """A network: ``name``, the chosen ``cni_version``, ``plugins`` in order, the file's bytes
    (``raw``, cached with each result as libcni does), where it came from, and the
    ``disableCheck``/``disableGC`` flags."""

    name: str
    cni_version: str
    plugins: tuple[PluginConf, ...]
    raw: bytes = b""
    source: str = "<bytes>"
    disable_check: bool = False
    disable_gc: bool = False


def choose_version(cni_version: object, cni_versions: object, where: str = "config") -> str:
    """The spec version to run a network with (see module docstring).

    Raises ConfigError (7) for wrongly typed values, IncompatibleVersion (1) when podnet
    supports none of them.
    """
    if cni_version is not None and not isinstance(cni_version, str):
        raise ConfigError(f"{where}: cniVersion must be a string, got {cni_version!r}")
    if cni_versions is None:
        if not cni_version:
            raise ConfigError(f"{where}: cniVersion is missing")
        if cni_version not in spec_version.SUPPORTED_VERSIONS:
            raise IncompatibleVersion(
                f"{where}: cniVersion {cni_version} is not supported (podnet supports "
                f"{', '.join(spec_version.SUPPORTED_VERSIONS)})"
            )
        return cni_version
    if not isinstance(cni_versions, list) or not all(isinstance(v, str) for v in cni_versions):
        raise ConfigError(f"{where}: cniVersions must be a list of strings, got {cni_versions!r}")
    wanted = list(cni_versions) + ([cni_version] if cni_version else [])
    chosen = spec_version.highest_common(wanted)
    if chosen is None:
        raise IncompatibleVersion(
            f"{where}: none of the versions {wanted} is supported (podnet supports "
            f"{', '.join(spec_version.SUPPORTED_VERSIONS)})"
        )
    return chosen


def _read_bool(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")


def _plugin(raw: object, where: str) -> PluginConf:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a plugin config must be an object")
    ptype = raw.get("type")
    if not isinstance(ptype, str) or not ptype:
        raise ConfigError(f"{where}: plugin config is missing 'type'")
    return PluginConf(raw)


def conflist_from_bytes(data: bytes, source: str = "<bytes>") -> NetworkConfigList:
    """Parse a conflist, or a single plugin config wrapped as a one-plugin list.

    ``source`` names the file in error messages. ConfigError (7) / IncompatibleVersion (1).
    """
    try:
        raw = json.loads(data)
    except ValueError as err:
        raise ConfigError(f"{source}: not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a network config must be a JSON object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: network config has no name")
    cni_version = choose_version(raw.get("cniVersion"), raw.get("cniVersions"), source)
    if "plugins" in raw:
        items = raw["plugins"]
        if not isinstance(items, list) or not items:
            raise ConfigError(f"{source}: 'plugins' must be a non-empty list")
        plugins = tuple(_plugin(p, f"{source}: plugins[{i}]") for i, p in enumerate(items))
    else:
        plugins = (_plugin(raw, source),)
    return NetworkConfigList(
        name=name,
        cni_version=cni_version,
        plugins=plugins,
        raw=bytes(data),
        source=source,
        disable_check=_read_bool(raw, "disableCheck", source),
        disable_gc=_read_bool(raw, "disableGC", source),
    )


def conf_files(conf_dir: str) -> list[str]:
    """Config files of ``conf_dir`` in lookup order (conflists first, each group by name)."""
    try:
        names = sorted(e.name for e in os.scandir(conf_dir) if e.is_file())
    except FileNotFoundError:
        return []
    except OSError as err:
        raise ConfigError(f"cannot read network config directory {conf_dir}: {err}") from None
    lists = [n for n in names if n.endswith(LIST_EXTENSIONS)]
    singles = [n for n in names if n.endswith(SINGLE_EXTENSIONS)]
    return [os.path.join(conf_dir, n) for n in lists + singles]


def load_conflist(name: str, conf_dir: str = DEFAULT_CONF_DIR) -> NetworkConfigList:
    """The network ``name`` from ``conf_dir`` (NETCONFPATH); see the module docstring.

    Raises NetworkNotFound (7) naming the networks that are there, ConfigError (7) for an
    unreadable or invalid file met before the match, IncompatibleVersion (1).
    """
    files = conf_files(conf_dir)
    if not files:
        raise NetworkNotFound(f"no net configurations found in {conf_dir}")
    seen: list[str] = []
    for path in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise ConfigError(f"error reading {path}: {err}") from None
        conf = conflist_from_bytes(data, path)
        if conf.name == name:
            return conf
        seen.append(conf.name)
    raise NetworkNotFound(
        f'no net configuration with name "{name}" in {conf_dir} '
        f"(found: {', '.join(sorted(set(seen)))})"
    )
