"""The store's write lock: a first-come, first-served queue of processes, built on ``flock`` so
that a process that dies in it (SIGKILL included) lets the next one go.

Why not SQLite's own lock, or one ``flock``: both wake waiters in no order (SQLite's busy
handler even sleeps up to 100 ms between attempts), so under load some waiter keeps losing —
32 parallel ADD/DEL measured a p99 at the 5 s busyTimeout and code-11 failures
(docs/benchmarks.md).

How (a CLH queue lock, one file per waiter in ``<dataDir>/podnet.lock.d``):

1. Enqueue: under a short ``flock`` on ``<dataDir>/podnet.lock`` (held for a few system
   calls), take the next sequence number N (kept in that file), create node file ``N`` and lock
   it.
2. Wait for the predecessor: lock node ``N-1``. If it is gone, or reads ``done``, the lock is
   ours. Otherwise its owner gave up or died (the kernel released its ``flock``) before or
   during its turn: remove it and wait for ``N-2`` the same way.
3. Release: write ``done`` into node ``N``, remove it, close it (the successor wakes).

A waiter past its deadline leaves its node as it is and answers
:class:`~podnet.errors.TryAgainLater` (11); its successor skips over it.
"""

from __future__ import annotations

import fcntl
import os
import time

from podnet.errors import IO_FAILURE, CNIError, TryAgainLater

_POLL = (0.0002, 0.002)  # seconds between attempts on one file: only one waiter polls it
_COUNTER_WIDTH = 20


def _flock(fd: int, mode: int, deadline: float) -> bool:
    """Take ``mode`` on ``fd`` before ``deadline`` (monotonic); False when it passed."""
    delay = _POLL[0]
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        now = time.monotonic()
        if now >= deadline:
            return False
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, _POLL[1])


class FairLock:
    """The write lock of the store in ``directory``; ``acquire(timeout)`` / ``release()``."""

    def __init__(self, directory: str, lock_name: str) -> None:
        self.path = os.path.join(directory, lock_name)
        self.queue = self.path + ".d"
        self.node = -1
        self.seq = 0

    def _open(self, path: str, flags: int) -> int:
        try:
            return os.open(path, flags | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise CNIError(f"cannot open lock file {path}: {err.strerror}",
                           code=IO_FAILURE) from err  # fmt: skip

    def _enqueue(self, deadline: float) -> int:
        try:
            os.makedirs(self.queue, mode=0o700, exist_ok=True)
        except OSError as err:
            raise self._failed(self.queue, err) from err
        head = self._open(self.path, os.O_RDWR | os.O_CREAT)
        node, path = -1, ""
        try:
            if not _flock(head, fcntl.LOCK_EX, deadline):
                raise self._busy()
            text = os.pread(head, _COUNTER_WIDTH, 0).strip()
            seq = int(text) + 1 if text.isdigit() else 1
            os.pwrite(head, str(seq).rjust(_COUNTER_WIDTH).encode(), 0)
            path = os.path.join(self.queue, str(seq))
            node = self._open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            fcntl.flock(node, fcntl.LOCK_EX)  # a new file: nobody else holds it
        except OSError as err:  # a full or read-only filesystem
            if node >= 0:
                os.close(node)
                os.unlink(path)
            raise self._failed(self.path, err) from err
        finally:
            os.close(head)  # releases the enqueue lock
        self.seq, self.node = seq, node
        return seq - 1

    def _failed(self, path: str, err: OSError) -> CNIError:
        return CNIError(f"cannot use lock file {path}: {err.strerror}", code=IO_FAILURE)

    def acquire(self, timeout: float) -> None:
        """Take the lock within ``timeout`` seconds; TryAgainLater (11) naming the lock file
        otherwise, CNIError 5 when the lock files cannot be created (read-only dataDir)."""
        deadline = time.monotonic() + timeout
        pred = self._enqueue(deadline)
        while pred > 0:
            path = os.path.join(self.queue, str(pred))
            try:
                fd = self._open(path, os.O_RDONLY)
            except FileNotFoundError:
                break  # its owner finished
            try:
                if not _flock(fd, fcntl.LOCK_SH, deadline):
                    self._give_up()
                    raise self._busy()
                state = os.pread(fd, 64, 0).decode(errors="replace")
            finally:
                os.close(fd)
            if state == "done":
                break
            # its owner gave up, or died before or during its turn: wait for its predecessor
            # (once that is done or gone, so is this one)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            pred -= 1

    def _give_up(self) -> None:
        os.close(self.node)  # the node is left not "done": the successor skips over it
        self.node = -1

    def _busy(self) -> TryAgainLater:
        return TryAgainLater(f"the store's write lock {self.path} stayed busy past busyTimeout; "
                             "try again later")  # fmt: skip

    def release(self) -> None:
        """Let the next waiter go."""
        if self.node < 0:
            return
        try:
            os.pwrite(self.node, b"done", 0)
        except OSError:
            pass  # a full disk: the successor then checks the predecessor, gone already
        try:
            os.unlink(os.path.join(self.queue, str(self.seq)))
        except FileNotFoundError:
            pass
        os.close(self.node)
        self.node = -1
