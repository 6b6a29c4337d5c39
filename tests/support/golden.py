"""Golden files: rendered text compared with a reviewed copy under ``tests/support/golden/``.

``PODNET_UPDATE_GOLDEN=1`` regenerates a file that differs (or is missing) and then **fails**
the test, so an update run can never pass: review the diff (``git diff tests/support/golden``) and run
again without the variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

UPDATE_ENV = "PODNET_UPDATE_GOLDEN"


def match(path: Path, text: str) -> None:
    """Assert ``text`` equals the golden file ``path``; in update mode rewrite it and fail."""
    if os.environ.get(UPDATE_ENV):
        old = path.read_text() if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        state = "unchanged" if old == text else ("created" if old is None else "rewritten")
        pytest.fail(f"{UPDATE_ENV} is set: golden file {path.name} {state}; review it and run "
                    f"again without {UPDATE_ENV}", pytrace=False)
    assert path.exists(), f"no golden file {path} ({UPDATE_ENV}=1 creates it, for review)"
    assert text == path.read_text(), f"{path.name} differs ({UPDATE_ENV}=1 to regenerate, then review)"
