"""The README and docs/ say what the code does: the driver hooks the README names exist, and no
document sends the reader to notes that are not in the repository."""

from __future__ import annotations

import re

from paths import REPO

ROOT = REPO
#: A citation of the authors' notes file (named with a hyphen or a space).
NOTES = re.compile(r"FIELD[- ]NOTES")


def _driver_paragraph() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("**Network drivers**")
    return text[start : text.index("\n\n", start)]


def test_readme_names_only_driver_hooks_that_exist() -> None:
    from podnet.drivers.base import Driver
    from podnet.drivers.pods import VethDriver

    paragraph = " ".join(_driver_paragraph().split())
    hooks = re.search(r"A driver supplies hooks — (.*?) — and the network side \((.*?)\)\.",
                      paragraph)  # fmt: skip
    assert hooks is not None, paragraph
    named = re.findall(r"`(\w+)`", hooks.group(1)) + re.findall(r"`(\w+)`", hooks.group(2))
    assert len(named) > 10, named
    missing = [n for n in named if not hasattr(Driver, n) and not hasattr(VethDriver, n)]
    assert missing == [], f"README names driver hooks that do not exist: {missing}"


def test_docs_cite_no_notes_outside_the_repository() -> None:
    """The authors' field notes are a notebook, not part of the repository: a document restates
    the fact instead of citing them."""
    cited = [f"{p.relative_to(ROOT)}:{i}"
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if NOTES.search(line)]  # fmt: skip
    assert cited == []
