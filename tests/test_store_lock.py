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

from podnet.cni.errors import TryAgainLater
from podnet.store.lock import FairLock

HOLD = textwrap.dedent("""
    import sys, time
    from podnet.store.lock import FairLock
    lock = FairLock(sys.argv[1], "podnet.lock")
    lock.acquire(30)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
""")


def holder(directory: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_waiters_get_the_lock_in_arrival_order(tmp_path: Path) -> None:
    first = FairLock(str(tmp_path), "podnet.lock")
    first.acquire(5)
    order: list[int] = []
    threads = []
    for i in range(8):
        def wait(i: int = i) -> None:
            lock = FairLock(str(tmp_path), "podnet.lock")
            lock.acquire(10)
            order.append(i)
            time.sleep(0.01)
            lock.release()
        t = threading.Thread(target=wait)
        t.start()
        threads.append(t)
        time.sleep(0.05)  # arrive one after the other
    first.release()
    for t in threads:
        t.join()
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
    got = threading.Event()

    def wait() -> None:
        patient.acquire(10)
        got.set()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.1)
    assert not got.is_set()  # still behind the holder, not let in by the impatient one's exit
    held.release()
    t.join(5)
    assert got.is_set()
    patient.release()


def test_a_killed_holder_lets_the_next_in(tmp_path: Path) -> None:
    proc = holder(tmp_path, 60)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lock = FairLock(str(tmp_path), "podnet.lock")
    lock.acquire(2)  # would time out if the dead holder still counted
    lock.release()


def test_a_killed_waiter_is_skipped_but_never_lets_two_in(tmp_path: Path) -> None:
    proc = holder(tmp_path, 1.0)  # holds for a second
    code = textwrap.dedent("""
        import sys
        from podnet.store.lock import FairLock
        FairLock(sys.argv[1], "podnet.lock").acquire(30)
    """)
    waiter = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    time.sleep(0.2)
    waiter.send_signal(signal.SIGKILL)  # dies while waiting behind the holder
    waiter.wait()
    started = time.monotonic()
    lock = FairLock(str(tmp_path), "podnet.lock")
    lock.acquire(5)
    waited = time.monotonic() - started
    lock.release()
    proc.wait()
    assert waited > 0.5, "let in while the holder still held the lock"
