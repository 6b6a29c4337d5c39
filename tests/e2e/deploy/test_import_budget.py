"""The plugins' import budget (:mod:`podnet.cni.budget`), held on the plugin files as a runtime
runs them: the file ``podnetctl install`` writes (``#!<venv python> -IS``), its interpreter line
plus ``-X importtime``, a clean environment. VERSION needs nothing; DEL runs in a network
namespace of its own (``unshare --net``) with a netns that does not exist and a data dir of its
own; ADD, CHECK and DEL of a pod with a hostPort run in a lab node namespace."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import envgate
import podnet
from netns import PLUGIN_ENV, Lab
from podnet.cni import budget
from podnet.runtime.installer import PLUGINS, plugin_script

V1 = "1.1.0"


@dataclass
class Trace:
    """One traced call: exit status, stdout, and the import tree (``(module, importer)`` in the
    order ``-X importtime`` reports them; importer None at top level) with the cumulative time
    of the top-level imports, both after the interpreter's own start-up."""

    rc: int
    stdout: str
    stderr: str
    imports: list[tuple[str, str | None]]
    total_ms: float


def import_tree(stderr: str) -> tuple[list[tuple[str, str | None]], dict[str, int]]:
    """``-X importtime`` lines as ``(module, importer)`` and each top-level module's cumulative
    µs. A module is printed after what it imports, indented two spaces more per level, so its
    importer is the next line less indented."""
    rows: list[tuple[int, str, int]] = []
    for line in stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        if not parts[1].strip().isdigit():
            continue  # the header line
        name = parts[2][1:]
        rows.append(((len(name) - len(name.lstrip(" "))) // 2, name.strip(), int(parts[1])))
    out: list[tuple[str, str | None]] = []
    top: dict[str, int] = {}
    stack: list[tuple[int, str]] = []
    for level, name, cumulative in reversed(rows):
        while stack and stack[-1][0] >= level:
            stack.pop()
        out.append((name, stack[-1][1] if stack else None))
        if not stack:
            top[name] = cumulative
        stack.append((level, name))
    return out[::-1], top


def test_import_tree_parses_nesting() -> None:
    stderr = ("import time: self [us] | cumulative | imported package\n"
              "import time:        10 |         10 |     zlib\n"
              "import time:        20 |         30 |   podnet.link.names\n"
              "import time:         5 |         35 | podnet.plugins.podnet\n"
              "some warning\n"
              "import time:         7 |          7 | jiter\n")
    tree, top = import_tree(stderr)
    assert tree == [("zlib", "podnet.link.names"), ("podnet.link.names", "podnet.plugins.podnet"),
                    ("podnet.plugins.podnet", None), ("jiter", None)]
    assert top == {"podnet.plugins.podnet": 35, "jiter": 7}


@pytest.fixture(scope="module")
def plugin_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four plugin files as ``podnetctl install`` writes them, podnet byte-compiled first
    (as ``pip install`` does), so no traced call pays for compiling."""
    bin_dir = tmp_path_factory.mktemp("budget-bin")
    out = {}
    for name, entry in PLUGINS.items():
        path = bin_dir / name
        path.write_text(plugin_script(entry))
        path.chmod(0o755)
        out[name] = path
    source = Path(podnet.__file__).parent
    subprocess.run([*interpreter(out["podnet"]), "-m", "compileall", "-q", str(source)],
                   check=True, timeout=300)  # fmt: skip
    return out


def interpreter(plugin: Path) -> list[str]:
    """The plugin file's ``#!`` line as argv (``<venv python> -IS``)."""
    first = plugin.read_text().splitlines()[0]
    assert first.startswith("#!") and first.endswith(" -IS"), first
    return first[2:].split()


@pytest.fixture(scope="module")
def startup(plugin_files: dict[str, Path]) -> frozenset[str]:
    """What the plugins' interpreter imports by itself under ``-IS`` (not podnet's doing)."""
    argv = [*interpreter(plugin_files["podnet"]), "-X", "importtime", "-c", "pass"]
    err = subprocess.run(argv, capture_output=True, text=True, check=True, env={}).stderr
    return frozenset(name for name, _ in import_tree(err)[0])


def traced(plugin: Path, startup: frozenset[str], command: str, conf: dict[str, Any], *,
           wrap: tuple[str, ...] = (), **env: str) -> Trace:  # fmt: skip
    """Run one call of ``plugin`` as a runtime would (``env -i``), traced with -X importtime."""
    full = {"CNI_COMMAND": command, "CNI_CONTAINERID": "budget1", "CNI_NETNS": "",
            "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni",
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **PLUGIN_ENV, **env}  # fmt: skip
    argv = [*wrap, "env", "-i", *(f"{k}={v}" for k, v in full.items()),
            *interpreter(plugin), "-X", "importtime", str(plugin)]  # fmt: skip
    proc = subprocess.run(argv, input=json.dumps(conf), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    tree, top = import_tree(proc.stderr)
    imports = [(name, by) for name, by in tree if name not in startup]
    total = sum(us for name, us in top.items() if name not in startup) / 1000
    return Trace(proc.returncode, proc.stdout, proc.stderr, imports, total)


#: How many modules a call may import after the interpreter's start-up, all of them (podnet's,
#: the allowed libraries' and what those import), counted in ``-X importtime``'s tree: a count,
#: not a clock, so a loaded machine cannot fail it and a new import chain cannot pass it.
#: Measured on Debian 12's Python 3.11 (VERSION, and DEL of a pod whose netns is gone, of
#: podnet, podnet-ipam, podnet-portmap, podnet-redirect: 17, 17, 20, 20 and 65, 54, 61, 37;
#: podnet's ADD, CHECK, DEL of a pod with a hostPort: 83, 72, 66), about 15 % added. After
#: main's lazier DEL (60ecc35): 17, 17, 19, 19; 60, 52, 60, 36; 84, 70, 63.
MAX_IMPORTS = {
    ("VERSION", "podnet"): 20, ("VERSION", "podnet-ipam"): 20,
    ("VERSION", "podnet-portmap"): 23, ("VERSION", "podnet-redirect"): 23,
    ("DEL", "podnet"): 75, ("DEL", "podnet-ipam"): 62, ("DEL", "podnet-portmap"): 70,
    ("DEL", "podnet-redirect"): 43,
    ("ADD", "pod"): 95, ("CHECK", "pod"): 83, ("DEL", "pod"): 76,
}  # fmt: skip


def assert_within_budget(trace: Trace, allowed: frozenset[str], calls: tuple[str, str]) -> None:
    """podnet's own imports are podnet's hot-path modules or ``allowed``; nothing of
    :data:`budget.NEVER` anywhere; at most :data:`MAX_IMPORTS` ``[calls]`` modules in all."""
    def podnets(by: str | None) -> bool:  # imported by podnet's code or the plugin file
        return by is None or by == "podnet" or by.startswith("podnet.")

    outside = sorted({f"{name} (imported by {by or 'the call'})" for name, by in trace.imports
                      if podnets(by) and name not in allowed
                      and not budget.podnet_module_allowed(name)})  # fmt: skip
    assert outside == [], (
        f"modules outside the plugins' import budget (podnet/cni/budget.py): {outside}; "
        f"everything imported: {[name for name, _ in trace.imports]}"
    )
    never = sorted({f"{name} (imported by {by or 'the call'})" for name, by in trace.imports
                    if name in budget.NEVER})  # fmt: skip
    assert never == [], f"modules no plugin may load (budget.NEVER): {never}"
    assert len(trace.imports) <= MAX_IMPORTS[calls], (
        f"{len(trace.imports)} modules imported (at most {MAX_IMPORTS[calls]}; they took "
        f"{trace.total_ms:.1f} ms): {[name for name, _ in trace.imports]}"
    )


def test_budget_names_real_modules() -> None:
    """Every module the budget allows exists, VERSION's are a part of the hot path's, and the
    budget forbids nothing it allows."""
    import importlib.util

    for name in budget.HOT_PATH_MODULES:
        assert importlib.util.find_spec(name) is not None, name
    assert budget.VERSION_MODULES <= budget.HOT_PATH_MODULES
    assert not budget.NEVER & budget.HOT_PATH_MODULES
    assert budget.podnet_module_allowed("podnet.store.db")
    assert not budget.podnet_module_allowed("podnet.cli.main")
    assert not budget.podnet_module_allowed("podnetx")


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_version_within_budget(plugin: str, plugin_files: dict[str, Path],
                               startup: frozenset[str]) -> None:  # fmt: skip
    trace = traced(plugin_files[plugin], startup, "VERSION", {"cniVersion": V1})
    assert trace.rc == 0 and json.loads(trace.stdout)["cniVersion"] == V1, trace.stderr[-2000:]
    assert ("jiter", None) in trace.imports  # the trace sees the call's imports
    assert_within_budget(trace, budget.VERSION_MODULES, ("VERSION", plugin))


def del_conf(plugin: str, data_dir: Path) -> dict[str, Any]:
    """A DEL's NetConf for ``plugin`` with its state in ``data_dir``."""
    base = {"cniVersion": V1, "name": "budget"}
    if plugin == "podnet":
        return {**base, "type": plugin, "ranges": ["10.99.0.0/24"], "dataDir": str(data_dir)}
    if plugin == "podnet-ipam":
        return {**base, "type": "bridge", "ipam": {"type": plugin, "ranges": ["10.99.0.0/24"],
                                                   "dataDir": str(data_dir)}}  # fmt: skip
    prev = {"cniVersion": V1, "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
            "ips": [{"address": "10.99.0.5/24", "interface": 0}]}  # fmt: skip
    extra: dict[str, Any] = {"prevResult": prev}
    if plugin == "podnet-portmap":
        extra["runtimeConfig"] = {"portMappings": [{"hostPort": 8080, "containerPort": 80,
                                                    "protocol": "tcp"}]}  # fmt: skip
        extra["dataDir"] = str(data_dir)  # its claims' store: never the node's default
    return {**base, "type": plugin, **extra}


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_del_within_budget(plugin: str, plugin_files: dict[str, Path], startup: frozenset[str],
                           tmp_path: Path) -> None:  # fmt: skip
    """DEL of a pod whose netns is gone, in a network namespace of its own."""
    envgate.need("root", "unshare", "ip")
    trace = traced(plugin_files[plugin], startup, "DEL", del_conf(plugin, tmp_path),
                   wrap=("unshare", "--net"), CNI_NETNS="/run/netns/podnet-budget-gone")
    assert trace.rc == 0 and trace.stdout == "", (trace.stdout, trace.stderr[-2000:])
    assert_within_budget(trace, budget.HOT_PATH_MODULES, ("DEL", plugin))


def test_podnet_add_check_del_within_budget(lab: Lab, plugin_files: dict[str, Path],
                                            startup: frozenset[str], tmp_path: Path) -> None:  # fmt: skip
    """podnet's ADD, CHECK and DEL of a pod with a hostPort, in a lab node namespace."""
    pod = lab.pod()
    conf: dict[str, Any] = {"cniVersion": V1, "name": "budget", "type": "podnet",
                            "ranges": ["10.99.0.0/24", "fd00:99::/64"], "dataDir": str(tmp_path),
                            "runtimeConfig": {"portMappings": [
                                {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}  # fmt: skip
    wrap = ("ip", "netns", "exec", lab.node)
    env = {"CNI_NETNS": f"/run/netns/{pod}", "CNI_CONTAINERID": f"budget-{os.getpid()}"}
    add = traced(plugin_files["podnet"], startup, "ADD", conf, wrap=wrap, **env)
    assert add.rc == 0, (add.stdout, add.stderr[-2000:])
    result = json.loads(add.stdout)
    assert_within_budget(add, budget.HOT_PATH_MODULES, ("ADD", "pod"))
    check = traced(plugin_files["podnet"], startup, "CHECK", {**conf, "prevResult": result},
                   wrap=wrap, **env)  # fmt: skip
    assert check.rc == 0, (check.stdout, check.stderr[-2000:])
    assert_within_budget(check, budget.HOT_PATH_MODULES, ("CHECK", "pod"))
    delete = traced(plugin_files["podnet"], startup, "DEL", {**conf, "prevResult": result},
                    wrap=wrap, **env)  # fmt: skip
    assert delete.rc == 0, (delete.stdout, delete.stderr[-2000:])
    assert_within_budget(delete, budget.HOT_PATH_MODULES, ("DEL", "pod"))
    # a ptp pod's DEL has no driver step: the driver layer is never loaded
    driver_layer = {"podnet.drivers.base", "podnet.drivers.pods", "podnet.drivers.ptp"}
    loaded = {name for name, _ in delete.imports}
    assert "podnet.drivers.teardown" in loaded and not driver_layer & loaded, sorted(loaded)
