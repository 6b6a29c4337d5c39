"""The plugin files ``podnetctl install`` writes: one short Python script per plugin.

Each plugin file's interpreter is this process's own, by absolute path (``#!/…/python -IS``):
runtimes call plugins with their whole environment, and a PATH that starts with pyenv shims or
a PYTHONPATH meant for something else must not change which Python and which podnet run
(docs/sources.md, "What runtimes send"). ``-I`` (isolated mode) ignores PYTHON* variables and
user site-packages and keeps the bin dir off ``sys.path``; ``-S`` skips ``site`` (its .pth
processing costs ~3-5 ms of every plugin call), so the script puts the directory holding the
installed ``podnet`` package on ``sys.path`` itself — the plugins need nothing else but the
stdlib.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence

import podnet

__all__ = ["PLUGINS", "PLUGIN_MARK", "PLUGIN_RUNTIME_DEPS", "plugin_script"]

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


def plugin_script(entry_point: str, interpreter: str | None = None,
                  tool_dirs: Sequence[str] = ()) -> str:
    """The executable text of a plugin file for ``entry_point`` (``"pkg.module:function"``).

    ``interpreter`` defaults to ``sys.executable``; it must be an absolute path without
    whitespace that fits a ``#!`` line. ValueError otherwise. ``tool_dirs`` (absolute paths,
    e.g. a self-contained bundle's ``sbin``) are put before the runtime's ``PATH``, so the
    plugin runs the ``ip`` and ``nft`` found there first (:func:`podnet.proc.which`). What the
    node allows (its data dirs, its store) is not in the file: every call reads the node
    configuration (:mod:`podnet.nodeconf`).
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
