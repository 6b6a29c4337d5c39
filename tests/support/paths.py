"""Where the tree's parts are, for tests at any depth under ``tests/`` (and in mutmut's copy of
the tree, ``mutants/``, where ``SRC`` is the mutated source)."""

from __future__ import annotations

from pathlib import Path

#: The repository (or mutmut's copy of it).
REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
#: The helper modules (``pythonpath`` in pyproject.toml), the golden files and the upstream
#: schemas podnet's tables keep.
SUPPORT = TESTS / "support"
GOLDEN = SUPPORT / "golden"
SCHEMAS = SUPPORT / "schemas"
SRC = REPO / "src"
VENV_BIN = REPO / ".venv" / "bin"
