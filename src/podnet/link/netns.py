"""Entering a network namespace by path (``/proc/<pid>/ns/net``, ``/run/netns/<name>``).

The calling thread switches with setns(2); children spawned meanwhile (``ip -batch``) and files
opened under ``/proc/sys/net`` belong to that namespace. Python 3.12 has :func:`os.setns`; on
3.11 libc's setns is called through ctypes.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

CLONE_NEWNET = 0x40000000


_SETNS: list[Callable[[int, int], None]] = []  # resolved once per process


def _setns_func() -> Callable[[int, int], None]:
    if _SETNS:
        return _SETNS[0]
    setns = getattr(os, "setns", None)
    if setns is not None:
        _SETNS.append(setns)
        return setns  # type: ignore[no-any-return]
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def _setns(fd: int, nstype: int) -> None:
        if libc.setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    _SETNS.append(_setns)
    return _setns


class NetNS:
    """A handle on a network namespace file; use :meth:`entered` to run code inside it.

    Raises FileNotFoundError when the path does not exist, and ValueError when it is not a
    network namespace (setns fails with EINVAL).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> NetNS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def entered(self) -> _Entered:
        """Context manager: switch this thread into the namespace, back to the original after."""
        return _Entered(self.fd, self.path)


class _Entered:
    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        self.home = -1

    def __enter__(self) -> None:
        setns = _setns_func()
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns(self.fd, CLONE_NEWNET)
        except OSError as err:
            os.close(self.home)
            raise ValueError(f"{self.path} is not a network namespace: {err}") from err

    def __exit__(self, *exc: object) -> None:
        try:
            _setns_func()(self.home, CLONE_NEWNET)
        finally:
            os.close(self.home)


#: ioctl on a namespace file: its type (linux/nsfs.h), available since Linux 4.11.
_NS_GET_NSTYPE = 0xB703


def exists(path: str) -> bool:
    """True when ``path`` is an existing network namespace file (not merely any file, nor
    another kind of namespace). Asks the kernel (``NS_GET_NSTYPE``) without entering it."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return fcntl.ioctl(fd, _NS_GET_NSTYPE) == CLONE_NEWNET
    except OSError:
        return False
    finally:
        os.close(fd)


