"""The plugins' import budget: what a plugin process may import, named in one place.

A plugin is a new process for every CNI call (podman asks every plugin VERSION, often; each
pod's ADD and DEL wait on it), so each module it imports is paid on every call. The hot path
imports lazily and little: no ``json`` (it pulls in ``re`` and ``enum``, 6.5 ms:
:mod:`podnet.cni.fastjson`), no ``typing`` (annotations' names come from ``TYPE_CHECKING``
blocks), no ``subprocess`` (:mod:`podnet.proc` spawns with ``posix_spawn``).

tests/e2e/deploy/test_import_budget.py runs the plugin files ``podnetctl install`` writes
(``#!<venv python> -IS``) under ``-X importtime``: VERSION of all four, DEL of all four (a netns
that does not exist, a data dir of its own) and podnet's ADD, CHECK and DEL of a pod with a
hostPort, and fails when

- podnet's code (or the plugin file) imports a module that is neither one of podnet's outside
  :data:`COLD_PACKAGES` nor in :data:`HOT_PATH_MODULES` (:data:`VERSION_MODULES` for VERSION).
  What an allowed library module imports itself (``sqlite3`` → ``datetime``; ``hashlib`` →
  ``_hashlib``) is that module's business and differs between Python versions;
- any module of :data:`NEVER` is loaded, by whomever;
- the imports after the interpreter's own start-up take more than :data:`IMPORT_BUDGET_MS`.

A module added here is a decision: measure it (``python -IS -X importtime -c 'import x'``
after the modules already loaded) and give the figure in the commit. Nothing imports this
module at run time.
"""

from __future__ import annotations

#: Modules besides podnet's own that podnet's hot-path code imports, and where (measured on
#: Debian's 3.11 under ``-IS``, after what the plugin has already loaded).
HOT_PATH_MODULES = frozenset({
    "__future__",  # ``from __future__ import annotations`` is a real import (0.1 ms)
    "os",  # not loaded by ``-S`` start-up
    "time",  # loaded by the interpreter's start-up anyway
    "zlib",  # podnet.link.names: crc32 of interface names
    "jiter",  # podnet.cni.fastjson: decoding (1 ms; orjson was 20-33 ms)
    "select",  # podnet.proc: poll on children's pipes
    "errno",  # podnet.trusted
    "fcntl",  # podnet.store.lock (flock), podnet.link.mtu (ioctl)
    "sqlite3",  # podnet.store.conn: 2.9 ms with datetime
    "socket",  # podnet.link.mtu, podnet.firewall.conntrack: 4.7 ms with enum and selectors
    "hashlib",  # podnet.firewall.portmap_iptables: the chain name's sha512, 3-5 ms
    "ipaddress",  # podnet.checked: portmap's prevResult addresses, CHECK (docs/benchmarks.md)
    "ctypes",  # podnet.link.netns: libc's setns for CHECK (os.setns only from 3.12), ~4 ms
})  # fmt: skip

#: The part of :data:`HOT_PATH_MODULES` VERSION may import: the skeleton answers it from the
#: plugin module alone, before config parsing, the store or any tool.
VERSION_MODULES = frozenset({"__future__", "os", "time", "zlib", "jiter"})

#: podnet's packages for people and daemons, never on a plugin's path.
COLD_PACKAGES = ("podnet.agent", "podnet.api", "podnet.cli", "podnet.runtime")

#: Modules no plugin process may load at all, even through a module allowed above. ``enum``
#: and ``selectors`` are not here only because ``socket`` loads them (ADD's MTU lookup); a
#: podnet module that imports them is still outside the budget.
NEVER = frozenset({
    "json", "re", "typing", "dataclasses", "inspect", "subprocess", "signal", "logging",
    "asyncio", "threading", "random", "uuid", "pathlib", "tempfile", "shutil",
    "textwrap", "pyroute2", "yaml", "click", "rich", "fastapi", "pydantic",
})  # fmt: skip

#: Cumulative import time of one plugin call, after the interpreter's own start-up. A guard
#: against gross regressions, not a benchmark: a DEL measures 15-30 ms on a loaded 2-core
#: machine, so this leaves room for any load the suite meets.
IMPORT_BUDGET_MS = 250.0


def podnet_module_allowed(name: str) -> bool:
    """Whether ``name`` is podnet's own and outside :data:`COLD_PACKAGES`."""
    if name != "podnet" and not name.startswith("podnet."):
        return False
    return not any(name == p or name.startswith(p + ".") for p in COLD_PACKAGES)
