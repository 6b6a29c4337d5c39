"""CNI spec versions podnet speaks, and comparisons between them (CNI SPEC.md 1.1.0)."""

from __future__ import annotations

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
CURRENT_VERSION = "1.1.0"

#: The lowest config version each verb may be called with (skel's per-verb table).
MIN_VERSION_FOR_VERB = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}


def parse(version: str) -> tuple[int, int, int]:
    """``"1.0.0"`` -> ``(1, 0, 0)``; raises ValueError for anything that is not a.b.c."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"invalid version {version!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def at_least(version: str, minimum: str) -> bool:
    """True when ``version`` >= ``minimum`` (both a.b.c strings)."""
    return parse(version) >= parse(minimum)


def highest_common(
    wanted: list[str], supported: tuple[str, ...] = SUPPORTED_VERSIONS
) -> str | None:
    """The highest version in both lists (libcni's choice for ``cniVersions``), or None."""
    common = [v for v in wanted if v in supported]
    return max(common, key=parse) if common else None
