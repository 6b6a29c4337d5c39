"""The reflector: LIST the Nodes, then WATCH them from the list's resourceVersion, from a thread
of its own, handing each complete list and each change to the agent's loop
(:mod:`podnet.agent.watch`).

The protocol is Kubernetes "API Concepts" ("Efficient detection of changes", "Watch
bookmarks", "Resource versions") as client-go's reflector (``tools/cache/reflector.go``) uses
it, and kindnetd's controllers sit on that reflector:

- LIST, then WATCH from the list's ``metadata.resourceVersion`` with ``allowWatchBookmarks`` and
  a server-side ``timeoutSeconds`` (5-10 minutes, jittered, as the reflector's
  ``minWatchTimeout``); every event and ``BOOKMARK`` advances the resourceVersion;
- a watch that ends normally (its timeout) is resumed from the last resourceVersion, with no
  relist;
- ``410 Gone`` — as an HTTP status on the watch request or as an ``ERROR`` event whose
  ``Status`` has code 410 — means the resourceVersion left the server's window: relist at once;
  a 410 again within :data:`GONE_WINDOW` relists after the backoff (a 410 storm is not a
  relist loop, as the reflector's backoff between ``ListAndWatch`` attempts);
- a dropped connection, bytes that are no event, an event of unknown shape, or any other API
  error: relist after a backoff (exponential with jitter, capped at :data:`BACKOFF_CAP`,
  retried for ever). Nothing is polled: between changes the agent waits on the open watch.

What the server sends is bounded: the LIST is read raw (a ``Content-Encoding`` the agent did
not ask for is refused, never decompressed), at most :data:`MAX_LIST_BYTES` within
:data:`LIST_DEADLINE` seconds in all; the watch is read by our own line reader, a line at most
:data:`MAX_LINE_BYTES` (more is garbage: relist after a backoff), and cut once its
``timeoutSeconds`` plus :data:`READ_TIMEOUT` have passed. Each LIST, watch opened, event and
bookmark tells :meth:`podnet.agent.health.Health.api_ok` the API is alive.

The watch's bounds are recorded in docs/decisions/0004-watch-bounds.md.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client as kclient

from podnet import checked
from podnet.agent.health import Metrics

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "LIST_DEADLINE",
    "WATCH_TIMEOUT",
    "Backoff",
    "Item",
    "Reflector",
]

log = logging.getLogger("podnet.agent")

#: The first backoff delay and the cap, seconds (client-go's reflector: 800 ms, 30 s).
BACKOFF_BASE = 0.8
BACKOFF_CAP = 30.0
#: The watch's ``timeoutSeconds`` is this times a random factor in [1, 2) (client-go's
#: ``minWatchTimeout`` is 5 minutes, jittered the same way).
WATCH_TIMEOUT = 300
#: Seconds to connect to the API, and to read a LIST's answer.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
#: A watch the server ends sooner than this, having sent nothing, counts as a failure for the
#: backoff: a server that closes every watch at once is not hammered.
MIN_WATCH = 1.0
#: Seconds a whole LIST may take, however slowly its bytes come (a deadline, not a per-read
#: timeout).
LIST_DEADLINE = 120.0
#: The largest LIST answer read, bytes (5,000 Nodes of 50 KiB each fit).
MAX_LIST_BYTES = 256 * 2**20
#: The longest watch event line, bytes (etcd's default request limit is 1.5 MiB an object).
MAX_LINE_BYTES = 4 * 2**20
#: Bytes asked of the socket at a time.
READ_CHUNK = 64 * 2**10
#: A 410 Gone within this many seconds of the previous one is relisted after a backoff.
GONE_WINDOW = 60.0

_KINDS = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")


class Backoff:
    """Exponential backoff with jitter: the n-th delay (n from 0) is ``d/2 + uniform(0, d/2)``
    with ``d = min(cap, base * 2**n)`` (seconds); :meth:`reset` after a success."""

    def __init__(self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP,
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()
        self.failures = 0

    def next(self) -> float:
        d = min(self.cap, self.base * 2 ** min(self.failures, 32))
        self.failures += 1
        return float(d / 2 + self.rng.uniform(0, d / 2))

    def reset(self) -> None:
        self.failures = 0


class _Broken(Exception):
    """The stream held something that is no watch event."""


class _Gone(Exception):
    """410 Gone: the resourceVersion left the server's window."""


def _describe(err: BaseException) -> str:
    if isinstance(err, kclient.ApiException):
        return f"HTTP {err.status} {checked.one_line(str(err.reason or ''))}".strip()
    return checked.one_line(f"{type(err).__name__}: {err}")[:300]


def _rv_of(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not isinstance(rv, str) or not rv or len(rv) > 64 or not rv.isprintable():
        raise _Broken(f"no valid metadata.resourceVersion: {checked.show(rv)}")
    return rv


# An item the reflector queues for the loop: ("list", items, rv) | ("event", type, object)
Item = tuple[str, Any, Any]


class Reflector:
    """LIST and WATCH the Nodes through ``api`` (a ``CoreV1Api``), calling ``emit`` with each
    complete list and each change, in order, from its own thread (:meth:`run`) until
    :meth:`stop`."""

    def __init__(self, api: kclient.CoreV1Api, emit: Callable[[Item], None], metrics: Metrics,
                 *, watch_timeout: int = WATCH_TIMEOUT, backoff: Backoff | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None,
                 contact: Callable[[], None] | None = None,
                 list_deadline: float = LIST_DEADLINE) -> None:  # fmt: skip
        self.api = api
        self.list_deadline = list_deadline
        self.emit = emit
        self.metrics = metrics
        self.watch_timeout = watch_timeout
        self.rng = rng or random.Random()
        self.backoff = backoff or Backoff(rng=self.rng)
        self.clock = clock
        self.contact: Callable[[], None] = contact or (lambda: None)
        self._stop = threading.Event()
        self._resp: Any = None

    def stop(self) -> None:
        """Ask :meth:`run` to return, cutting the open request (safe from a signal handler)."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # already closed
                pass

    def _pause(self, what: str, err: BaseException | str) -> None:
        self.metrics.api_errors.inc()
        delay = self.backoff.next()
        why = err if isinstance(err, str) else _describe(err)
        log.warning("%s failed: %s; retrying in %.1f s", what, why, delay)
        self._stop.wait(delay)

    def run(self) -> None:
        rv: str | None = None
        first = True
        reason = ""
        last_gone: float | None = None
        while not self._stop.is_set():
            if rv is None:
                try:
                    rv = self._list(None if first else reason)
                except Exception as err:
                    if not self._stop.is_set():
                        self._pause("LIST nodes", err)
                    continue
                first = False
            try:
                rv, worked = self._watch_from(rv)
                if worked:
                    self.backoff.reset()
                elif not self._stop.is_set():
                    self._pause("WATCH nodes", "the server ended the watch at once")
            except Exception as err:
                if self._stop.is_set():
                    break
                if isinstance(err, _Gone):
                    now = self.clock()
                    again = last_gone is not None and now - last_gone < GONE_WINDOW
                    last_gone = now
                    if again:  # a 410 storm: the relists back off as any failure does
                        self._pause("WATCH nodes", f"410 Gone again within {GONE_WINDOW:.0f} s")
                    log.info("watch expired (410 Gone at resourceVersion %s): relisting", rv)
                    reason = "expired"
                else:
                    self._pause("WATCH nodes", err)
                    log.info("relisting after the failed watch")
                    reason = "error"
                rv = None

    def _get(self, timeouts: tuple[float, float], deadline: float, **query: Any) -> Any:
        """GET ``/api/v1/nodes`` with ``query``; the raw urllib3 response, cut (shut down) once
        the monotonic ``deadline`` passes. A non-2xx answer raises ``ApiException``; a
        ``Content-Encoding`` other than identity (never asked for) raises :class:`_Broken`."""
        resp: Any = self.api.list_node(_preload_content=False, _request_timeout=timeouts,
                                       **query)  # fmt: skip
        self._resp = resp
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._cut, (resp,))
        timer.daemon = True
        timer.start()
        resp._podnet_timer = timer
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            self._done(resp)
            raise _Broken(f"the API answered with Content-Encoding {checked.show(encoding)}, "
                          f"which was not asked for")  # fmt: skip
        return resp

    def _cut(self, resp: Any) -> None:
        resp._podnet_cut = True
        try:
            resp.shutdown()
        except Exception:  # already closed
            pass

    def _done(self, resp: Any) -> None:
        timer = getattr(resp, "_podnet_timer", None)
        if timer is not None:
            timer.cancel()
        if self._resp is resp:
            self._resp = None
        try:  # closed first: a stream cut midway must not go back to the pool for reuse
            resp.close()
            resp.release_conn()
        except Exception:
            pass

    def _list(self, relist: str | None) -> str:
        """LIST the Nodes and emit them whole; ``relist``: why, for a LIST after the first. The
        body is read raw (no decompression), at most :data:`MAX_LIST_BYTES`, within
        ``list_deadline`` seconds (default :data:`LIST_DEADLINE`)."""
        deadline = time.monotonic() + self.list_deadline
        resp = self._get((CONNECT_TIMEOUT, READ_TIMEOUT), deadline)
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() > deadline or getattr(resp, "_podnet_cut", False):
                    raise _Broken(f"the LIST took longer than {self.list_deadline:.0f} s")
                try:
                    chunk = resp.read1(READ_CHUNK, decode_content=False)
                except Exception:
                    if getattr(resp, "_podnet_cut", False):
                        raise _Broken(f"the LIST took longer than {self.list_deadline:.0f} s"
                                      ) from None  # fmt: skip
                    raise
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_LIST_BYTES:
                    raise _Broken(f"the LIST answer is larger than {MAX_LIST_BYTES} bytes")
                parts.append(chunk)
        finally:
            self._done(resp)
        try:
            body = json.loads(b"".join(parts))
        except ValueError as err:
            raise _Broken(f"the LIST answer is not JSON: {err}") from None
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise _Broken("the LIST answer has no list of items")
        rv = _rv_of(body)
        log.info("listed %d nodes at resourceVersion %s", len(items), rv)
        if relist is not None:
            self.metrics.relists.labels(relist).inc()
        self.contact()
        self.emit(("list", items, rv))
        return rv

    def _lines(self, resp: Any) -> Iterator[bytes]:
        """The lines of a watch stream, each at most :data:`MAX_LINE_BYTES` (:class:`_Broken`
        beyond), read raw as they come."""
        buf = bytearray()
        while not self._stop.is_set():
            try:
                chunk = resp.read1(READ_CHUNK, decode_content=False)
            except Exception:
                if self._stop.is_set():
                    return
                if getattr(resp, "_podnet_cut", False):
                    raise _Broken("the watch outlived its timeout") from None
                raise
            if not chunk:
                if buf:
                    raise _Broken("the watch stream ended inside a line")
                return
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                buf += chunk[start:end]
                if len(buf) > MAX_LINE_BYTES:
                    break
                yield bytes(buf)
                buf.clear()
                start = end + 1
            buf += chunk[start:]
            if len(buf) > MAX_LINE_BYTES:
                raise _Broken(f"a watch event longer than {MAX_LINE_BYTES} bytes")

    def _watch_from(self, rv: str) -> tuple[str, bool]:
        """Watch from ``rv`` until the server ends the watch; the last resourceVersion and
        whether the watch did any good (an event, or it lasted :data:`MIN_WATCH`)."""
        timeout = int(self.watch_timeout * (1 + self.rng.random()))
        if self._stop.is_set():
            return rv, True
        start = self.clock()
        seen = 0
        timeouts = (CONNECT_TIMEOUT, timeout + READ_TIMEOUT)
        try:
            resp = self._get(timeouts, time.monotonic() + timeout + READ_TIMEOUT, watch=True,
                             resource_version=rv, allow_watch_bookmarks=True,
                             timeout_seconds=timeout)  # fmt: skip
        except kclient.ApiException as err:
            if err.status == 410:
                raise _Gone() from None
            raise
        self.contact()
        try:
            for line in self._lines(resp):
                if self._stop.is_set():
                    break
                try:
                    event = json.loads(line)
                except ValueError:
                    raise _Broken(f"not a watch event: {checked.show(line[:80])}") from None
                kind = event.get("type") if isinstance(event, dict) else event
                if kind == "ERROR":
                    self.metrics.events.labels("ERROR").inc()
                    obj = event.get("object")
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == 410:
                        raise _Gone()
                    why = obj.get("message") if isinstance(obj, dict) else obj
                    raise _Broken(f"ERROR event: code {checked.show(code)}: "
                                  f"{checked.show(why)}")  # fmt: skip
                if kind not in _KINDS:
                    raise _Broken(f"not a watch event: type {checked.show(kind)}")
                obj = event.get("object")
                new_rv = _rv_of(obj)
                self.metrics.events.labels(kind).inc()
                self.contact()
                if kind != "BOOKMARK":
                    self.emit(("event", kind, obj))
                rv = new_rv
                seen += 1
                self.backoff.reset()
        finally:
            self._done(resp)
        return rv, seen > 0 or self.clock() - start >= MIN_WATCH
