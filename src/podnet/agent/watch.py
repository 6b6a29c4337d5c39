"""The agent's control loop against the Kubernetes API: LIST the Nodes, then WATCH them from the
list's resourceVersion, and hand the whole view to a sink after every batch of changes.

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

Two threads: the *reflector* speaks to the API and queues what it reads; the *loop* (the
caller's thread) keeps the view ``{name: Node}`` (:func:`podnet.agent.model.parse_node`; an
object it cannot parse is logged once and left out, never half used), logs one line per Node
that changes it, and calls ``sink.sync(me, others)`` after each batch and after each relist
(with the complete new view; a relist that leaves the view as it was is not synced unless the
last sync failed). A sync that returns False is retried with backoff even when no
event comes.

The official ``kubernetes`` client is imported here and nowhere else in podnet.
"""

from __future__ import annotations

import json
import logging
import os
import random
import selectors
import threading
import time
from collections import deque
from typing import Any, Protocol

from kubernetes import client as kclient

from podnet import checked
from podnet.agent.health import Health, Metrics
from podnet.agent.model import BadNode, Node, parse_node

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["Agent", "ApiConfigError", "Backoff", "Reflector", "Sink", "connect"]

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


class Sink(Protocol):
    """What the loop drives: ``sync`` makes the node hold what the view calls for (True when
    all is applied, False to be retried); ``close`` releases what it holds."""

    def sync(self, me: Node | None, others: dict[str, Node]) -> bool: ...

    def close(self) -> None: ...


class ApiConfigError(ValueError):
    """The API's configuration (kubeconfig or in-cluster service account) cannot be loaded."""


def connect(kubeconfig: str | None) -> kclient.CoreV1Api:
    """A ``CoreV1Api`` for the cluster: from the kubeconfig file(s) ``kubeconfig`` (``:``
    separated, as ``KUBECONFIG``), or with None the in-cluster service account (the
    ``KUBERNETES_SERVICE_HOST``/``_PORT`` environment and
    ``/var/run/secrets/kubernetes.io/serviceaccount``). Nothing is asked of the server yet.
    :class:`ApiConfigError` naming the cause otherwise."""
    from kubernetes import config

    try:
        if kubeconfig is None:
            conf = kclient.Configuration()
            config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
            api_client = kclient.ApiClient(conf)
        else:
            api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except Exception as err:  # the loaders raise ConfigException, OSError, YAML errors
        raise ApiConfigError(f"cannot load the Kubernetes API configuration "
                             f"({kubeconfig or 'in-cluster service account'}): "
                             f"{checked.one_line(str(err))}") from None  # fmt: skip
    return kclient.CoreV1Api(api_client)


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
                 contact: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.api = api
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
        :data:`LIST_DEADLINE` seconds."""
        deadline = time.monotonic() + LIST_DEADLINE
        resp = self._get((CONNECT_TIMEOUT, READ_TIMEOUT), deadline)
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() > deadline or getattr(resp, "_podnet_cut", False):
                    raise _Broken(f"the LIST took longer than {LIST_DEADLINE:.0f} s")
                try:
                    chunk = resp.read1(READ_CHUNK, decode_content=False)
                except Exception:
                    if getattr(resp, "_podnet_cut", False):
                        raise _Broken(f"the LIST took longer than {LIST_DEADLINE:.0f} s") from None
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


def _name_key(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else checked.show(name)


class Agent:
    """The loop: the view of Nodes, the sink's syncs and their retries. ``api``: a
    ``CoreV1Api`` (:func:`connect`); ``node_name``: this node's Node; ``sink``: a
    :class:`Sink`. :meth:`run` until :meth:`stop` (from any thread or a signal handler)."""

    def __init__(self, api: kclient.CoreV1Api, node_name: str, sink: Sink, *,
                 metrics: Metrics | None = None, health: Health | None = None,
                 watch_timeout: int = WATCH_TIMEOUT, backoff_base: float = BACKOFF_BASE,
                 backoff_cap: float = BACKOFF_CAP, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self.node_name = node_name
        self.sink = sink
        self.metrics = metrics or Metrics()
        self.health = health or Health(clock=clock)
        self.clock = clock
        rng = rng or random.Random()
        self.reflector = Reflector(api, self._receive, self.metrics,
                                   watch_timeout=watch_timeout,
                                   backoff=Backoff(backoff_base, backoff_cap, rng), clock=clock,
                                   rng=rng, contact=self.health.api_ok)  # fmt: skip
        self.sync_backoff = Backoff(backoff_base, backoff_cap, rng)
        #: the view: every Node that parsed, by name
        self.view: dict[str, Node] = {}
        #: Nodes left out: name → why (logged once per reason)
        self.refused: dict[str, str] = {}
        self.syncs = 0
        self._synced_ok = False
        self._inbox: deque[Item] = deque()
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @property
    def wakeup_fd(self) -> int:
        """The write end of the loop's wake-up pipe (for ``signal.set_wakeup_fd``)."""
        return self._wake_w

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:  # full: the loop has wake-ups pending anyway
            pass

    def _receive(self, item: Item) -> None:
        self._inbox.append(item)
        self._wake()

    def stop(self) -> None:
        """Make :meth:`run` return after the sync under way, if any (no lock is taken: safe
        from a signal handler)."""
        if self._stopping:
            return
        self._stopping = True
        self._wake()
        self.reflector.stop()

    def run(self) -> None:
        """LIST/WATCH and sync until :meth:`stop`; then the watch is closed (the sink is the
        caller's to close)."""
        reader = threading.Thread(target=self.reflector.run, name="podnet-agent-watch",
                                  daemon=True)  # fmt: skip
        reader.start()
        retry_at: float | None = None
        listed = False
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    if not self._inbox:
                        wait = None if retry_at is None else max(0.0, retry_at - self.clock())
                        sel.select(wait)
                    self._drain()
                    if self._stopping:
                        break
                    changed = False
                    while self._inbox:
                        item = self._inbox.popleft()
                        first = not listed and item[0] == "list"
                        changed = self._apply(item) or first or changed
                        listed = listed or item[0] == "list"
                    due = retry_at is not None and self.clock() >= retry_at
                    if listed and (changed or due):
                        retry_at = None if self._sync() else self.clock() + self.sync_backoff.next()
        finally:
            self.reflector.stop()
            reader.join(timeout=5)
            if reader.is_alive():
                log.warning("the watch did not close within 5 s; leaving it to the exit")

    def close(self) -> None:
        """Release the wake-up pipe (after :meth:`run`)."""
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _drain(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _sync(self) -> bool:
        me = self.view.get(self.node_name)
        others = {n: node for n, node in self.view.items() if n != self.node_name}
        self.syncs += 1
        try:
            ok = bool(self.sink.sync(me, others))
            why = "the sink reported a failure"
        except Exception as err:  # the contract says False; a bug must not end the agent
            log.exception("sync raised")
            ok, why = False, _describe(err)
        self._synced_ok = ok
        if ok:
            if self.sync_backoff.failures:
                log.info("sync succeeded after %d failures", self.sync_backoff.failures)
            self.sync_backoff.reset()
            self.health.sync_ok()
            self.metrics.last_sync.set(time.time())
        else:
            self.metrics.sync_failures.inc()
            self.health.sync_failed(why)
            log.warning("sync failed (%s); retrying with backoff", why)
        return ok

    # -- the view --------------------------------------------------------------------------

    def _apply(self, item: Item) -> bool:
        """Apply one queued item to the view; whether a sync is called for."""
        if item[0] == "list":
            # a relist whose view equals the current one is synced only to retry a failure
            changed = self._relisted(item[1]) or not self._synced_ok
            self.health.list_ok()
        else:
            changed = self._event(item[1], item[2])
        self.metrics.nodes.set(len(self.view))
        self.metrics.refused.set(len(self.refused))
        return changed

    def _parse(self, obj: object) -> tuple[str, Node | None]:
        key = _name_key(obj)
        try:
            if not isinstance(obj, dict):
                raise BadNode(f"not an object: {checked.show(obj)}")
            node = parse_node(obj)
        except BadNode as err:
            why = checked.one_line(str(err))
            if self.refused.get(key) != why:
                log.warning("refused a Node, left out of the view: %s", why)
            self.refused[key] = why
            return key, None
        self.refused.pop(key, None)
        return key, node

    def _put(self, node: Node) -> bool:
        old = self.view.get(node.name)
        if old == node:
            return False
        self.view[node.name] = node
        log.info("node %s %s: %s", node.name, "added" if old is None else "changed",
                 _summary(node))  # fmt: skip
        return True

    def _remove(self, key: str, why: str) -> bool:
        if self.view.pop(key, None) is None:
            return False
        log.info("node %s %s", key, why)  # a key of the view: a checked Node name
        return True

    def _event(self, kind: str, obj: object) -> bool:
        if kind == "DELETED":
            key = _name_key(obj)
            self.refused.pop(key, None)
            return self._remove(key, "deleted")
        key, node = self._parse(obj)
        if node is None:
            return self._remove(key, "removed from the view (refused)")
        return self._put(node)

    def _relisted(self, items: list[object]) -> bool:
        """Replace the view with the Nodes of a LIST; whether the view changed."""
        changed = False
        seen: set[str] = set()
        refused_before = dict(self.refused)
        self.refused.clear()
        for obj in items:
            key = _name_key(obj)
            if key in refused_before:  # log once: a refusal already logged stays quiet
                self.refused[key] = refused_before[key]
            k, node = self._parse(obj)
            if node is not None:
                changed = self._put(node) or changed
                seen.add(k)
        for key in [k for k in self.view if k not in seen]:
            changed = self._remove(key, "removed from the view (refused)" if key in self.refused
                                   else "gone (not in the new list)") or changed  # fmt: skip
        return changed


def _summary(node: Node) -> str:
    cidrs = ", ".join(str(n) for n in node.pod_cidrs.values()) or "none"
    ips = ", ".join(str(a) for a in node.internal_ips.values()) or "none"
    return f"podCIDRs {cidrs}; InternalIP {ips}"
