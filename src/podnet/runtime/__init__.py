"""A cnitool/libcni-compatible runtime: conflists, plugin execution, the result cache.

Layout (libcni's, in Python): :mod:`.conflist` finds and parses network configs;
:mod:`.args` is what a runtime passes per attachment (and how cnitool reads it from the
environment); :mod:`.invoke` runs one plugin through a replaceable :class:`PluginExec`;
:mod:`.cache` keeps ADD results; :mod:`.api` chains the plugins of a network for each verb;
:mod:`.installer` writes plugin executables and a conflist. Errors: :mod:`.errors`.

Typical use::

    net = load_conflist("podnet", "/etc/cni/net.d")
    rt = RuntimeConf(container_id="abc", netns="/run/netns/pod1",
                     capability_args={"portMappings": [parse_port("8080:80")]})
    result = CNIRuntime(["/opt/cni/bin"]).add(net, rt)
"""

from podnet.runtime.api import DEFAULT_CNI_PATH, CNIRuntime, plugin_config, runtime_config
from podnet.runtime.args import (
    DEFAULT_IFNAME,
    RuntimeConf,
    build_runtime_conf,
    default_container_id,
    parse_cap_args,
    parse_cni_args,
    parse_port,
)
from podnet.runtime.cache import DEFAULT_CACHE_DIR, Attachment, CacheEntry, ResultCache
from podnet.runtime.conflist import (
    DEFAULT_CONF_DIR,
    NetworkConfigList,
    PluginConf,
    conflist_from_bytes,
    load_conflist,
)
from podnet.runtime.errors import (
    ArgsError,
    CacheError,
    CNIRuntimeError,
    ConfigError,
    IncompatibleVersion,
    NetworkNotFound,
    PluginFailed,
    PluginNotFound,
)
from podnet.runtime.files import Installed
from podnet.runtime.installer import install
from podnet.runtime.invoke import ExecOutput, PluginExec, SubprocessExec
from podnet.runtime.pluginfile import PLUGINS

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_CNI_PATH",
    "DEFAULT_CONF_DIR",
    "DEFAULT_IFNAME",
    "PLUGINS",
    "ArgsError",
    "Attachment",
    "CNIRuntime",
    "CNIRuntimeError",
    "CacheEntry",
    "CacheError",
    "ConfigError",
    "ExecOutput",
    "IncompatibleVersion",
    "Installed",
    "NetworkConfigList",
    "NetworkNotFound",
    "PluginConf",
    "PluginExec",
    "PluginFailed",
    "PluginNotFound",
    "ResultCache",
    "RuntimeConf",
    "SubprocessExec",
    "build_runtime_conf",
    "conflist_from_bytes",
    "default_container_id",
    "install",
    "load_conflist",
    "parse_cap_args",
    "parse_cni_args",
    "parse_port",
    "plugin_config",
    "runtime_config",
]
