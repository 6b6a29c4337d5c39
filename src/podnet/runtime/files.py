"""Files ``podnetctl install`` writes: each replaced atomically and durably, or left alone
when its content is already right (docs/decisions/0003-one-atomic-fsynced-write.md)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

__all__ = ["Installed", "write_atomic", "write_file"]


@dataclass(frozen=True)
class Installed:
    """One file ``install`` handled: ``path`` and ``action`` (created | updated | unchanged)."""

    path: str
    action: str


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> bool:
    """Make ``path`` hold ``data`` (mode ``mode``): nothing is written when it already does
    (returns False); else a temporary file beside it is written and fsynced, renamed over
    ``path``, and the directory (made if missing, mode 0755) fsynced (returns True). OSError
    when the directory cannot be written (the temporary file is removed)."""
    try:
        with open(path, "rb") as f:
            if f.read() == data and (os.fstat(f.fileno()).st_mode & 0o7777) == mode:
                return False
    except FileNotFoundError:
        pass
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


def write_file(path: str, content: str, mode: int) -> Installed:
    """:func:`write_atomic` of ``content`` (UTF-8), reported as created, updated or unchanged."""
    existed = os.path.exists(path)
    if not write_atomic(path, content.encode(), mode):
        return Installed(path, "unchanged")
    return Installed(path, "updated" if existed else "created")
