"""The store's write lock (podnet.store.lock): first come, first served; a waiter that gives up
or a process that dies (holding it or waiting) never blocks the queue nor lets two in (no root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from podnet.errors import TryAgainLater
from podnet.store.lock import FairLock

#: A holder process: takes the lock, says "held", holds it until a line on its stdin, then
#: says "releasing" and releases (so a test orders events, not clocks).
HOLD = textwrap.dedent("""
    import sys
    from podnet.store.lock import FairLock
    lock = FairLock(sys.argv[1], "podnet.lock")
    lock.acquire(30)
    print("held", flush=True)
    sys.stdin.readline()
    print("releasing", flush=True)
    lock.release()
""")
#: Only a hang reaches it.
DEADLINE = 30.0


def holder(directory: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def queued(directory: Path, n: int) -> None:
    """Wait until the ``n``-th arrival has taken its place in the lock's queue: the sequence
    counter in ``podnet.lock`` (taken under its flock, in arrival order) has reached ``n``."""
    head = directory / "podnet.lock"
    deadline = time.monotonic() + DEADLINE
    while not ((text := head.read_text().strip() if head.exists() else "").isdigit() and int(text) >= n):
        assert time.monotonic() < deadline, f"never {n} arrivals in the queue (counter {text!r})"
        time.sleep(0.001)


def skipped(directory: Path, node: int, got: threading.Event) -> None:
    """Wait for the event that shows a waiter has passed over abandoned node ``node`` to wait
    for the one before it (it removes the node file), or for it holding the lock (``got``): an
    order of events, not a time, tells a waiter let in early from one not let in yet."""
    path = directory / "podnet.lock.d" / str(node)
    deadline = time.monotonic() + DEADLINE
    while path.exists() and not got.is_set():
        assert time.monotonic() < deadline, f"node {node} never passed over"
        time.sleep(0.001)


def acquiring(lock: FairLock) -> tuple[threading.Thread, threading.Event]:
    """A thread started to acquire ``lock`` (waiting up to DEADLINE) and the event it sets once
    it holds it."""
    got = threading.Event()

    def wait() -> None:
        lock.acquire(DEADLINE)
        got.set()

    t = threading.Thread(target=wait)
    t.start()
    return t, got


def test_waiters_get_the_lock_in_arrival_order(tmp_path: Path) -> None:
    """Eight waiters queue behind a holder, each started once the previous one is in the queue
    (its node file exists): they get the lock in that order, and leave no node file."""
    first = FairLock(str(tmp_path), "podnet.lock")
    first.acquire(5)
    order: list[int] = []
    threads = []
    for i in range(8):
        def wait(i: int = i) -> None:
            lock = FairLock(str(tmp_path), "podnet.lock")
            lock.acquire(DEADLINE)
            order.append(i)
            lock.release()
        t = threading.Thread(target=wait)
        t.start()
        threads.append(t)
        queued(tmp_path, i + 2)  # the holder's node and i + 1 waiters': arrived in order
    first.release()
    for t in threads:
        t.join(DEADLINE)
    assert order == list(range(8))
    assert sorted(os.listdir(tmp_path / "podnet.lock.d")) == []  # every node file removed


def test_a_waiter_past_its_timeout_answers_11_and_is_skipped(tmp_path: Path) -> None:
    held = FairLock(str(tmp_path), "podnet.lock")
    held.acquire(5)
    impatient = FairLock(str(tmp_path), "podnet.lock")
    with pytest.raises(TryAgainLater) as err:
        impatient.acquire(0.2)
    assert err.value.code == 11 and "podnet.lock" in err.value.msg
    patient = FairLock(str(tmp_path), "podnet.lock")
    t, got = acquiring(patient)
    queued(tmp_path, 3)  # holder, the impatient one (gone), the patient one
    # The patient one passes over the impatient one's node and waits for the holder's: it is
    # still out when that is seen (a lock that took the abandoned node for a released one
    # would have let it in before it removed the node).
    skipped(tmp_path, 2, got)
    assert not got.is_set(), "let in while the holder still held the lock"
    held.release()
    t.join(DEADLINE)
    assert got.is_set()
    patient.release()


def test_a_killed_holder_lets_the_next_in(tmp_path: Path) -> None:
    proc = holder(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lock = FairLock(str(tmp_path), "podnet.lock")
    lock.acquire(DEADLINE)  # would time out if the dead holder still counted
    lock.release()


def test_a_killed_waiter_is_skipped_but_never_lets_two_in(tmp_path: Path) -> None:
    """A holder (held until told), a waiter shown to be in the queue and then killed, and a
    third in the queue behind it: the third does not get in while the holder holds, and gets
    in once the holder releases (the dead waiter skipped)."""
    proc = holder(tmp_path)
    code = textwrap.dedent("""
        import sys
        from podnet.store.lock import FairLock
        FairLock(sys.argv[1], "podnet.lock").acquire(30)
    """)
    waiter = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    queued(tmp_path, 2)  # the waiter has queued behind the holder
    waiter.send_signal(signal.SIGKILL)  # dies while waiting
    waiter.wait()
    lock = FairLock(str(tmp_path), "podnet.lock")
    t, got = acquiring(lock)  # the third
    queued(tmp_path, 3)
    skipped(tmp_path, 2, got)  # past the dead waiter's node, waiting for the holder's
    assert not got.is_set(), "let in while the holder still held the lock"
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("release\n")
    proc.stdin.flush()
    t.join(DEADLINE)
    assert got.is_set()
    assert proc.stdout.readline().strip() == "releasing"
    lock.release()
    assert proc.wait(DEADLINE) == 0
