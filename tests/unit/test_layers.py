"""The import graph of ``src/podnet`` follows the layers ARCHITECTURE (README) describes: no
module imports one from a higher layer, and no modules import each other in a cycle. Every import counts — module top, function-local and ``TYPE_CHECKING`` alike — so a
type-only reference cannot hide a dependency that runs up."""

from __future__ import annotations

import ast
from pathlib import Path

import paths

SRC = paths.SRC

#: Lowest first. A unit is a top-level module or package of podnet; it may import its own layer
#: and the ones below.
LAYERS: list[tuple[str, ...]] = [
    ("checked",),
    ("errors", "values", "trusted", "nodeconf"),
    ("proc", "undo"),
    ("cni",),
    ("link", "store", "firewall", "networks", "ovn"),
    ("ipam", "claims", "netconf"),
    ("reconcile",),
    ("drivers",),
    ("plugins", "manage"),
    ("runtime", "api", "agent"),
    ("cli",),
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "podnet").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The podnet modules ``name`` imports (``from pkg import mod`` resolved to the module)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("podnet")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))  # fmt: skip
            if not base.startswith("podnet"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {m for m in out if m in known and m != name}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "checked"  # the package's own __init__: ground


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def test_every_unit_has_a_layer() -> None:
    units = {_unit(m) for m in _modules()}
    assert units - set(LAYER) == set(), "add the new package to LAYERS (and to ARCHITECTURE)"


def test_no_import_runs_up() -> None:
    up = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                if LAYER.get(_unit(b), 0) > LAYER.get(_unit(a), 0))  # fmt: skip
    assert up == []


def test_no_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert cycles == []


def test_the_checker_sees_a_violation() -> None:
    """The checks above are not vacuous: a fake import from store up to drivers is found."""
    graph = _graph()
    assert graph["podnet.store.db"], "the store imports something"
    assert LAYER[_unit("podnet.drivers.base")] > LAYER[_unit("podnet.store.db")]
    assert "podnet.store.db" in graph["podnet.drivers.base"] or any(
        t.startswith("podnet.store") for t in graph["podnet.drivers.base"])
