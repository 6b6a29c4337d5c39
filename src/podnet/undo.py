"""An explicit undo stack for multi-step operations such as a CNI ADD.

Each step registers its own undo as soon as it has done something that needs undoing; when a
later step fails, :meth:`Undo.run` undoes the steps in reverse order (N−1 … 1). An undo that
fails does not stop the others: its message is added to the original error's ``details`` (a
:class:`~podnet.errors.CNIError`), so the answer is still the error that made the operation
fail, and it names what could not be put back (CNI SPEC "ADD": a failed ADD leaves nothing
behind — or says what it left).

Usage::

    undo = Undo()
    try:
        create_veth(); undo.push("deleting the veth", delete_veth)
        insert_rows(); undo.push("removing the rows", delete_rows)
        publish()
    except BaseException as err:
        undo.run(err, warn)
        raise
"""

from __future__ import annotations

from podnet.errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Undo:
    """A stack of ``(what, action)`` pairs; ``what`` names the undo in a failure note
    ("deleting pn0a1b2c3d")."""

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], object]]] = []

    def push(self, what: str, action: Callable[[], object]) -> None:
        """Register ``action`` to run if a later step fails."""
        self._steps.append((what, action))

    def replace(self, what: str, action: Callable[[], object]) -> None:
        """Swap the most recent undo for ``action`` (a step whose undo changes as it
        progresses, e.g. once the kernel may hold what was only recorded)."""
        self._steps[-1] = (what, action)

    def pop(self) -> None:
        """Forget the most recent undo (its step was handed on and is no longer ours)."""
        self._steps.pop()

    def __len__(self) -> int:
        return len(self._steps)

    def run(self, err: BaseException, warn: Callable[[str], None] | None = None) -> list[str]:
        """Undo every registered step, most recent first; the stack is empty afterwards.
        Returns the failures (``"<what>: <message>"``), also appended to ``err.details`` when
        ``err`` is a CNIError and passed to ``warn``. Only CNIError and OSError from an undo are
        caught: anything else is a bug and propagates."""
        notes = []
        while self._steps:
            what, action = self._steps.pop()
            try:
                action()
            except CNIError as failed:
                notes.append(f"{what}: {failed.msg} {failed.details}".strip())
            except OSError as failed:
                notes.append(f"{what}: {failed}")
        if notes:
            if warn is not None:
                warn("undoing the failed operation: " + "; ".join(notes))
            if isinstance(err, CNIError):
                note = "undoing it also failed: " + "; ".join(notes)
                err.details = f"{err.details}; {note}" if err.details else note
        return notes
