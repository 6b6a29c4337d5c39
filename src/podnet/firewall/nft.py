"""The nftables backend, for any table: apply a script in one transaction (``nft -f -``), list
objects, tell "missing" from real failures.

nft runs a script file as one transaction: all of it or nothing. Every failure is a
:class:`~podnet.errors.KernelError` (code 104) with nft's stderr in ``details``; a tool that
is missing or hangs fails the same way (:mod:`podnet.proc`).
"""

from __future__ import annotations

from podnet import proc
from podnet.errors import KernelError

#: What nft prints when a table, chain, map or element named in the command does not exist.
_MISSING = "No such file or directory"


def start(script: str, *, die_with_parent: bool = True) -> proc.Spawned:
    """Start ``nft -f -`` with ``script``; collect with :func:`finish` or :func:`outcome`.
    ``die_with_parent`` (see :mod:`podnet.proc`): a change a runtime's DEL could race with."""
    return proc.spawn(["nft", "-f", "-"], script.encode(), die_with_parent=die_with_parent)


def finish(spawned: proc.Spawned, what: str) -> None:
    """Wait for an ``nft`` run; :class:`KernelError` (104) naming ``what`` on failure."""
    rc, _, err = spawned.wait()
    if rc != 0:
        raise KernelError(f"nft failed to {what}", err.strip())


def apply(script: str, what: str) -> None:
    """Apply ``script`` atomically; KernelError (104) naming ``what``."""
    finish(start(script), what)


class Outcome:
    """How an nft run ended: ``ok``, ``missing`` (it failed because something it names does not
    exist — a table removed behind our back, an element already gone), ``stderr``."""

    __slots__ = ("ok", "missing", "stderr")

    def __init__(self, rc: int, stderr: str) -> None:
        self.ok = rc == 0
        self.stderr = stderr.strip()
        self.missing = not self.ok and _MISSING in self.stderr


def outcome(spawned: proc.Spawned) -> Outcome:
    """Wait for an nft run and classify it (for incremental updates with a fallback). A tool
    that is missing or hangs still raises KernelError."""
    rc, _, err = spawned.wait()
    return Outcome(rc, err)


def run(script: str, *, die_with_parent: bool = True) -> Outcome:
    """Apply ``script`` and classify the result instead of raising."""
    return outcome(start(script, die_with_parent=die_with_parent))


def list_text(*what: str, terse: bool = False) -> str | None:
    """``nft list <what…>`` output (``terse``: ``-t``, without set and map elements); None when
    the object does not exist; KernelError (104) for any other failure (nft's message in
    ``details``)."""
    rc, out, err = proc.spawn(["nft", *(["-t"] if terse else []), "list", *what]).wait()
    if rc == 0:
        return out
    if _MISSING in err:
        return None
    raise KernelError(f"nft failed to list {' '.join(what)}", err.strip())


def list_json(*what: str) -> list[dict[str, object]] | None:
    """``nft -j list <what…>`` as its ``nftables`` items; None when the object does not exist.
    KernelError (104) for any other failure, code 104 too for output that is not nft's JSON."""
    from podnet.cni.fastjson import loads

    rc, out, err = proc.spawn(["nft", "-j", "list", *what]).wait()
    if rc != 0:
        if _MISSING in err:
            return None
        raise KernelError(f"nft failed to list {' '.join(what)}", err.strip())
    try:
        data = loads(out) if out.strip() else {}
    except ValueError as exc:
        raise KernelError(f"nft printed unreadable JSON for {' '.join(what)}", str(exc)) from None
    items = data.get("nftables", []) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise KernelError(f"nft printed unexpected JSON for {' '.join(what)}", out[:200])
    return [i for i in items if isinstance(i, dict)]


def map_elements(family: str, table: str, name: str) -> set[str] | None:
    """Elements of map ``name`` as nft prints them (whitespace normalised, ``key : value``);
    None when the table or map is missing."""
    out = list_text("map", family, table, name)
    if out is None:
        return None
    start_at = out.find("elements = {")
    if start_at < 0:
        return set()
    body = out[start_at + len("elements = {") : out.find("}", start_at)]
    return {" ".join(e.split()) for e in body.split(",") if e.strip()}


def table_comment(family: str, table: str) -> str | None:
    """The comment of table ``family table`` ("" when it has none), or None when there is no
    such table. KernelError (104) when nft cannot list it."""
    text = list_text("table", family, table, terse=True)
    if text is None:
        return None
    for line in text.splitlines()[1:3]:
        words = line.strip()
        if words.startswith('comment "') and words.endswith('"'):
            return words[len('comment "') : -1]
    return ""
