"""Who can change a path: the one walk behind the store's data dir check
(:func:`podnet.store.db.open_store`) and ``podnetctl install``'s source check
(:func:`podnet.runtime.installer.check_source`).

podnet runs as root. A path it opens, creates in or loads from is safe only when nobody but
root can change it — the inode itself, and every directory on the way, through which someone
could swap an entry for a symlink of their choice. The rule, for trusted owners (root and this
process's user):

- :func:`fault` — an inode is changeable by others when a non-trusted uid owns it, when it is
  world-writable, or group-writable by a group other than root's, or when its POSIX access
  ACL grants write to another user or group (:func:`acl_fault`);
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

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["acl_fault", "fault", "resolve", "through_fault"]

_S_IFMT, _S_IFLNK, _S_IFDIR, _S_ISVTX = 0o170000, 0o120000, 0o040000, 0o1000
#: Symlinks followed in one walk before it gives up (the kernel's limit).
MAX_LINKS = 40
#: The trusted owners: root and this process's effective user, asked once (podnet never
#: changes its user), not once per inode on every walk.
_TRUSTED_UIDS = (0, os.geteuid())


def fault(st: os.stat_result, path: str | None = None) -> str | None:
    """Why someone other than root (or this process's user) can change the inode, or None.
    With ``path``, a POSIX access ACL on it counts too (:func:`acl_fault`): with one, the mode's
    group bits are only the ACL's mask."""
    if st.st_uid not in _TRUSTED_UIDS:
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & 0o002:
        return "is world-writable"
    if st.st_mode & 0o020 and st.st_gid != 0:
        return f"is group-writable by gid {st.st_gid}"
    if path is not None and st.st_mode & _S_IFMT != _S_IFLNK:
        return acl_fault(path, st)
    return None


#: ``system.posix_acl_access`` / ``_default`` (the kernel's xattr format): a 4-byte version
#: (2), then 8-byte entries ``tag:u16 perm:u16 id:u32``, little-endian.
_ACL_XATTR, _ACL_VERSION = "system.posix_acl_access", 2
_ACL_DEFAULT_XATTR = "system.posix_acl_default"
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 1, 2, 4, 8, 0x10, 0x20
_ACL_WRITE = 2


def acl_fault(path: str, st: os.stat_result) -> str | None:
    """Why a POSIX ACL of ``path`` (not followed if a symlink) lets someone other than root or
    this process's user write it, or what is created in it, or None.

    The access ACL: a named user other than those, a named group other than root's, or the
    owning group when it is not root's, with write permission that the mask keeps. A
    directory's default ACL (inherited by what is created in it: the kernel then ignores the
    umask, and a later ``chmod`` such as a socket's 0660 widens the mask): the same entries with
    write, whatever its mask. An ACL that cannot be parsed is a fault too. One or two
    ``getxattr`` (~1 µs each)."""
    why = _acl_writer(path, _ACL_XATTR, st, masked=True)
    if why is None and st.st_mode & _S_IFMT == _S_IFDIR:
        why = _acl_writer(path, _ACL_DEFAULT_XATTR, st, masked=False)
    return why


def _acl_writer(path: str, xattr: str, st: os.stat_result, *, masked: bool) -> str | None:
    kind = "an access" if xattr == _ACL_XATTR else "a default"
    try:
        raw = os.getxattr(path, xattr, follow_symlinks=False)
    except OSError:  # ENODATA: no ACL; EOPNOTSUPP: the filesystem has none
        return None
    if len(raw) < 4 or (len(raw) - 4) % 8 or int.from_bytes(raw[:4], "little") != _ACL_VERSION:
        return f"has {kind} ACL podnet cannot read"
    import struct  # only here: paths with an ACL are rare

    entries = [struct.unpack_from("<HHI", raw, i) for i in range(4, len(raw), 8)]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 7) if masked else 7
    for tag, perm, ident in entries:
        if not perm & mask & _ACL_WRITE:
            continue
        if tag == _ACL_USER and ident not in _TRUSTED_UIDS:
            return f"has {kind} ACL letting uid {ident} write"
        if tag == _ACL_GROUP and ident != 0:
            return f"has {kind} ACL letting gid {ident} write"
        if tag == _ACL_GROUP_OBJ and st.st_gid != 0:
            return f"has {kind} ACL letting its group gid {st.st_gid} write"
    return None


def through_fault(parent: os.stat_result, child: os.stat_result,
                  parent_path: str | None = None) -> tuple[bool, str] | None:  # fmt: skip
    """Why passing from directory ``parent`` to its entry ``child`` is unsafe, or None:
    ``(True, why)`` when the fault is the parent's, ``(False, why)`` the entry's (in a sticky
    directory). With ``parent_path``, the parent's access ACL counts (:func:`fault`)."""
    why = fault(parent, parent_path)
    if why is None:
        return None
    if parent.st_uid in _TRUSTED_UIDS and parent.st_mode & _S_ISVTX:
        # only the entry's owner may rename or remove it there; its mode is its own business
        # (a symlink's means nothing; a directory's is checked when the walk passes through it)
        if child.st_uid in _TRUSTED_UIDS:
            return None
        return (False, f"is owned by uid {child.st_uid}")
    return (True, why)


def refusing_step(refuse: Callable[[str, str], Exception],
                   sticky: str = "") -> Callable[[str, os.stat_result, str, os.stat_result], None]:
    """A :func:`resolve` step that raises ``refuse(path, why)`` for the first unsafe passage
    (:func:`through_fault`): the parent's path when the fault is the parent's, else the
    entry's, its reason followed by ``, in <sticky>parent`` (``sticky``: a word before it)."""

    def step(parent: str, parent_st: os.stat_result, child: str,
             child_st: os.stat_result) -> None:  # fmt: skip
        problem = through_fault(parent_st, child_st, parent)
        if problem is not None:
            theirs, why = problem
            raise refuse(parent, why) if theirs else refuse(child, f"{why}, in {sticky}{parent}")

    return step


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
                import errno

                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(child)
            if target.startswith("/"):
                cur, cur_st = "/", lstat("/")
            pending.extend(target.split("/")[::-1])
            continue
        cur, cur_st = child, st
    return cur, cur_st, []
