"""The agent's ``/healthz`` and Prometheus ``/metrics`` (kindnetd serves both on :19080).

``/healthz`` is 200 ``ok`` once the first LIST of Nodes succeeded and while the node is not
failing to sync for longer than a grace period; 503 with the reason otherwise (a liveness
probe's answer: Kubernetes "Configure Liveness, Readiness and Startup Probes", an HTTP probe
succeeds on 200-399). ``/metrics`` is the Prometheus text format of the agent's own registry
(``prometheus_client``; the exposition format of prometheus/docs ``exposition_formats.md``).

The server listens where kindnetd's does (``0.0.0.0:19080`` by default: with ``hostNetwork``
the kubelet's probe comes to the node's IP), so anyone who reaches the node reaches it. It is
built to survive that: one request per connection (``Connection: close``), a socket timeout of
:data:`CONN_TIMEOUT` per connection, at most :data:`MAX_CONNECTIONS` at once (a new one beyond
the cap evicts the oldest that has not sent its request yet, or is closed at once when every
slot is busy answering), and an ``accept`` failing for want of descriptors (``EMFILE``)
pauses the accept loop instead of spinning on the still-readable listening socket.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from podnet import checked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["EVENT_TYPES", "Health", "HealthServer", "Metrics", "serve"]

#: The watch event types the API sends (``meta/v1`` ``WatchEvent``).
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
#: Seconds a sync may keep failing before ``/healthz`` says 503.
DEFAULT_GRACE = 60.0
#: Seconds without any sign of life from the API (a LIST, a watch opened, an event or a
#: bookmark) before ``/healthz`` says 503. An idle cluster still re-opens its watch at least
#: every 2 x 5 minutes (the watch's jittered ``timeoutSeconds``) plus a minute's read slack,
#: so 15 minutes is never reached by a healthy agent.
DEFAULT_STALE = 900.0
#: Seconds a connection to the server may stay silent (per socket operation).
CONN_TIMEOUT = 10.0
#: Connections served at once; more are evicted or refused.
MAX_CONNECTIONS = 16
#: Seconds the accept loop pauses when ``accept`` fails for want of descriptors or memory.
ACCEPT_PAUSE = 0.2


class Health:
    """What ``/healthz`` answers, fed by the control loop. ``grace``: seconds of failing syncs
    tolerated; ``clock``: monotonic seconds. Attributes are written by one thread (the loop)
    and read by the server's."""

    def __init__(self, grace: float = DEFAULT_GRACE,
                 clock: Callable[[], float] = time.monotonic,
                 stale: float = DEFAULT_STALE) -> None:  # fmt: skip
        self.grace = grace
        self.stale = stale
        self.clock = clock
        self.listed = False
        self.contact = clock()
        self.failing_since: float | None = None
        self.failure = ""

    def list_ok(self) -> None:
        self.listed = True
        self.contact = self.clock()

    def api_ok(self) -> None:
        """The API answered: a LIST, a watch opened, an event or a bookmark (any thread)."""
        self.contact = self.clock()

    def sync_ok(self) -> None:
        self.failing_since = None
        self.failure = ""

    def sync_failed(self, why: str) -> None:
        if self.failing_since is None:
            self.failing_since = self.clock()
        self.failure = why

    def check(self) -> tuple[bool, str]:
        """``(healthy, reason)``: the reason is ``ok`` or what is wrong, one line."""
        if not self.listed:
            return False, "no LIST of Nodes has succeeded yet"
        silent = self.clock() - self.contact
        if silent > self.stale:
            return False, (f"no LIST, watch or event from the API for {silent:.0f} s "
                           f"(bound {self.stale:.0f} s): the view may be stale")  # fmt: skip
        since = self.failing_since
        if since is not None:
            failing = self.clock() - since
            if failing > self.grace:
                return False, (f"syncing the node has failed for {failing:.0f} s "
                               f"(grace {self.grace:.0f} s): {self.failure}")  # fmt: skip
        return True, "ok"


class Metrics:
    """The agent's metrics in a registry of their own (no process-wide state; a test may run
    several agents). Names follow Prometheus' conventions (``_total`` counters, base units)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter("podnet_agent_watch_events", "Watch events received, by type.",
                              ["type"], registry=r)  # fmt: skip
        self.relists = Counter("podnet_agent_relists",
                               "LISTs of Nodes after the first, by reason (expired: 410 Gone; "
                               "error: the stream broke, held garbage or the API failed).",
                               ["reason"], registry=r)  # fmt: skip
        self.api_errors = Counter("podnet_agent_api_errors",
                                  "LIST or WATCH requests that failed (each followed by a "
                                  "backoff).", registry=r)  # fmt: skip
        self.sync_failures = Counter("podnet_agent_sync_failures",
                                     "Syncs of the node that failed (each retried with "
                                     "backoff).", registry=r)  # fmt: skip
        self.nodes = Gauge("podnet_agent_nodes", "Nodes in the agent's view.", registry=r)
        self.refused = Gauge("podnet_agent_refused_nodes",
                             "Nodes left out of the view because they cannot be parsed.",
                             registry=r)  # fmt: skip
        self.last_sync = Gauge("podnet_agent_last_sync_success_timestamp_seconds",
                               "When the node was last synced successfully (Unix time).",
                               registry=r)  # fmt: skip
        for t in EVENT_TYPES:
            self.events.labels(t)
        for reason in ("expired", "error"):
            self.relists.labels(reason)

    def text(self) -> bytes:
        """The exposition (``text/plain; version=0.0.4``)."""
        return generate_latest(self.registry)


class HealthServer(ThreadingHTTPServer):
    """``/healthz`` and ``/metrics`` over HTTP/1.1; served by :func:`serve` in a thread."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: str, port: int, health: Health, metrics: Metrics, *,
                 max_connections: int = MAX_CONNECTIONS,
                 conn_timeout: float = CONN_TIMEOUT) -> None:  # fmt: skip
        if checked.ip(address).version == 6:  # the settings hold a checked address's text
            self.address_family = socket.AF_INET6
        self.health = health
        self.metrics = metrics
        self.max_connections = max_connections
        self.conn_timeout = conn_timeout
        #: open connections → whether still waiting for their request (evictable)
        self._conns: dict[socket.socket, bool] = {}
        self._conns_lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__((address, port), _Handler)
        self.thread: threading.Thread | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # the listening socket stays readable: without a pause the loop would spin
                self._closing.wait(ACCEPT_PAUSE)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            if len(self._conns) >= self.max_connections:
                idle = next((c for c, waiting in self._conns.items() if waiting), None)
                if idle is None:  # every slot is answering a request: refuse this one
                    self.shutdown_request(request)
                    return
                del self._conns[idle]
                try:  # its handler's read ends (EOF); the handler closes it
                    idle.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._conns[request] = True
        request.settimeout(self.conn_timeout)
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to serve it (e.g. RuntimeError: can't start thread)
            self.shutdown_request(request)
            raise

    def answering(self, request: socket.socket) -> None:
        """The request on ``request`` has been read: it is no longer evictable."""
        with self._conns_lock:
            if request in self._conns:
                self._conns[request] = False

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.pop(request, None)
        super().shutdown_request(request)

    def connections(self) -> int:
        """Connections open now."""
        with self._conns_lock:
            return len(self._conns)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self._closing.set()
        if self.thread is not None:
            self.shutdown()
            self.thread.join()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HealthServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass  # a probe every few seconds is no news

    def _answer(self, code: int, body: bytes, content_type: str) -> None:
        self.close_connection = True
        self.send_response(code)
        self.send_header("Connection", "close")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.answering(self.request)
        path = self.path.partition("?")[0]
        if path == "/healthz":
            ok, reason = self.server.health.check()
            self._answer(200 if ok else 503, reason.encode() + b"\n", "text/plain; charset=utf-8")
        elif path == "/metrics":
            self._answer(200, self.server.metrics.text(), CONTENT_TYPE_LATEST)
        else:
            self._answer(404, b"not found: /healthz, /metrics\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET


def serve(address: str, port: int, health: Health, metrics: Metrics) -> HealthServer:
    """Listen on ``address``:``port`` (port 0: a free one, see :attr:`HealthServer.port`) and
    serve in a daemon thread; :meth:`HealthServer.close` stops it. OSError when the address
    cannot be bound."""
    server = HealthServer(address, port, health, metrics)
    server.thread = threading.Thread(target=server.serve_forever, name="podnet-agent-health",
                                     daemon=True)  # fmt: skip
    server.thread.start()
    return server
