"""Who can change a path: the one walk behind the store's data dir check
(:func:`podnet.store.db.open_store`) and ``podnetctl install``'s source check
(:func:`podnet.runtime.installer.check_source`).

podnet runs as root. A path it opens, creates in or loads from is safe only when nobody but
root can change it — the inode itself, and every directory on the way, through which someone
could swap an entry for a symlink of their choice. The rule, for trusted owners (root and this
process's user):

- :func:`fault` — an inode is changeable by others when a non-trusted uid owns it, when it is
  world-writable, or group-writable by a group other than root's;
- :func:`through_fault` — passing from a directory to its entry is safe when the directory is
  not changeable by others, or when it is a sticky directory owned by a trusted uid (``/tmp``)
  and the entry's owner is trusted: in a sticky directory only an entry's owner may rename or
  remove it.

:func:`resolve` walks an absolute path from ``/`` as the kernel resolves it (``lstat`` per
component, symlinks followed, at most 40), calling back on every step so each caller applies
the rule with its own errors. Only :mod:`os`: cheap enough for every plugin call (an ``lstat``
per component, ~2 µs each).
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["fault", "resolve", "through_fault"]

_S_IFMT, _S_IFLNK, _S_ISVTX = 0o170000, 0o120000, 0o1000
#: Symlinks followed in one walk before it gives up (the kernel's limit).
MAX_LINKS = 40


def fault(st: os.stat_result) -> str | None:
    """Why someone other than root (or this process's user) can change the inode, or None."""
    if st.st_uid not in (0, os.geteuid()):
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & 0o002:
        return "is world-writable"
    if st.st_mode & 0o020 and st.st_gid != 0:
        return f"is group-writable by gid {st.st_gid}"
    return None


def through_fault(parent: os.stat_result, child: os.stat_result) -> tuple[bool, str] | None:
    """Why passing from directory ``parent`` to its entry ``child`` is unsafe, or None:
    ``(True, why)`` when the fault is the parent's, ``(False, why)`` the entry's (in a sticky
    directory)."""
    why = fault(parent)
    if why is None:
        return None
    if parent.st_uid in (0, os.geteuid()) and parent.st_mode & _S_ISVTX:
        # only the entry's owner may rename or remove it there; its mode is its own business
        # (a symlink's means nothing; a directory's is checked when the walk passes through it)
        if child.st_uid in (0, os.geteuid()):
            return None
        return (False, f"is owned by uid {child.st_uid}")
    return (True, why)


def resolve(
    path: str,
    step: Callable[[str, os.stat_result, str, os.stat_result], None],
    lstat: Callable[[str], os.stat_result] = os.lstat,
) -> tuple[str, os.stat_result, list[str]]:
    """Walk absolute ``path`` from ``/``, calling ``step(parent, parent_st, child, child_st)``
    for every entry passed (symlinks included, before they are followed).

    Returns ``(real, real_st, missing)``: the deepest existing real path, its ``lstat``, and
    the components after it that do not exist (``[]`` when all of ``path`` does). Raises what
    ``step`` or ``lstat`` raise (FileNotFoundError is the walk's own), and OSError ELOOP past
    :data:`MAX_LINKS` symlinks.
    """
    pending = path.split("/")[::-1]
    cur, cur_st = "/", lstat("/")
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            cur_st = lstat(cur)
            continue
        child = f"{cur.rstrip('/')}/{name}"
        try:
            st = lstat(child)
        except FileNotFoundError:
            return cur, cur_st, [name, *[p for p in reversed(pending) if p not in ("", ".")]]
        step(cur, cur_st, child, st)
        if st.st_mode & _S_IFMT == _S_IFLNK:
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(child)
            if target.startswith("/"):
                cur, cur_st = "/", lstat("/")
            pending.extend(target.split("/")[::-1])
            continue
        cur, cur_st = child, st
    return cur, cur_st, []
