"""No module of podnet imports a private interpreter module (``_sqlite3``, ``_sha512``, ``_json``,
…): their names and contents change between Python versions without notice (``_sha512`` is gone
in 3.12, so its fallback always ran on Debian 13; ``_json``'s scanner failed under ``-IS``, issue
7). The public module is used instead, whatever its import costs."""

from __future__ import annotations

import ast

import paths

SRC = paths.SRC


def private_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``import _x`` / ``from _x import …`` whose top-level module
    is private (``_`` first, ``__future__`` aside); relative imports are podnet's own."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if top.startswith("_") and top != "__future__":
                found.append((node.lineno, name))
    return found


def test_private_imports_are_found() -> None:
    code = ("import os, _sqlite3\nfrom _sha512 import sha512\nimport _json.x as j\n"
            "from __future__ import annotations\nfrom . import _local\nfrom .x import _y\n"
            "def f():\n    import _thread\n")
    assert private_imports(ast.parse(code)) == [(1, "_sqlite3"), (2, "_sha512"), (3, "_json.x"),
                                                (8, "_thread")]


def test_src_imports_no_private_module() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the walk found the tree
    bad = [f"{path.relative_to(SRC)}:{line}: {name}"
           for path in files for line, name in private_imports(ast.parse(path.read_bytes()))]
    assert bad == [], "private interpreter modules imported (use the public ones):\n" + "\n".join(bad)
