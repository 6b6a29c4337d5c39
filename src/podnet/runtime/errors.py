"""The runtime library's exceptions: one tree under :class:`podnet.errors.CNIError`.

::

    CNIError                      (podnet.errors: code, msg, details)
      CNIRuntimeError             base of everything podnet.runtime raises
        ConfigError               code 7  a config file that cannot be read or parsed
          NetworkNotFound         code 7  no config in the directory has that network name
        ArgsError                 code 4  bad CNI_ARGS / CAP_ARGS / --port / container ID / ifname
        IncompatibleVersion       code 1  no spec version both the config and podnet speak
        PluginNotFound            code 7  the config names a plugin type absent from CNI_PATH
        PluginFailed              code of the plugin's error (999 when it printed none)
        CacheError                code 5  the result cache cannot be read or written

libcni returns plain Go errors for most of these; podnet gives each a CNI code so a caller (the
CLI, an API) can map them without parsing messages. :class:`PluginFailed` keeps the plugin's own
code and details, and its message is libcni's ``plugin <type> failed (<verb>): <msg>``.
"""

from __future__ import annotations

from podnet import errors as codes
from podnet.errors import CNIError

__all__ = [
    "ArgsError",
    "CNIRuntimeError",
    "CacheError",
    "ConfigError",
    "IncompatibleVersion",
    "NetworkNotFound",
    "PluginFailed",
    "PluginNotFound",
]


class CNIRuntimeError(CNIError):
    """Base of every error raised by :mod:`podnet.runtime`."""

    code = codes.INTERNAL


class ConfigError(CNIRuntimeError):
    """A network config file (or bytes) is not a valid conf/conflist (code 7); names the file."""

    code = codes.INVALID_CONFIG


class NetworkNotFound(ConfigError):
    """No config in the directory carries the requested network name (code 7)."""


class ArgsError(CNIRuntimeError):
    """A runtime argument is malformed: CNI_ARGS, CAP_ARGS, a port spec, IDs, names (code 4)."""

    code = codes.INVALID_ENV


class IncompatibleVersion(CNIRuntimeError):
    """The config's ``cniVersion``/``cniVersions`` share no version with podnet (code 1), or the
    verb needs a newer version (CHECK >= 0.4.0)."""

    code = codes.INCOMPATIBLE_VERSION


class PluginNotFound(CNIRuntimeError):
    """A plugin ``type`` is not an executable file in any CNI_PATH directory (code 7)."""

    code = codes.INVALID_CONFIG


class CacheError(CNIRuntimeError):
    """The result cache could not be read or written (code 5)."""

    code = codes.IO_FAILURE


class PluginFailed(CNIRuntimeError):
    """A plugin exited non-zero or printed something that is not a result.

    ``plugin`` (its ``type``), ``verb`` (``add``/``check``/``delete``/``gc``/``status``),
    ``code``/``details`` from the plugin's error JSON, ``plugin_msg`` its bare message.
    """

    def __init__(self, plugin: str, verb: str, error: CNIError) -> None:
        super().__init__(
            f"plugin {plugin} failed ({verb}): {error.msg}", error.details, code=error.code
        )
        self.plugin = plugin
        self.verb = verb
        self.plugin_msg = error.msg
