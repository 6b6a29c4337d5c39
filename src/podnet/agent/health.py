"""The agent's ``/healthz`` and Prometheus ``/metrics`` (kindnetd serves both on :19080).

``/healthz`` is 200 ``ok`` once the first LIST of Nodes succeeded and while the node is not
failing to sync for longer than a grace period; 503 with the reason otherwise (a liveness
probe's answer: Kubernetes "Configure Liveness, Readiness and Startup Probes", an HTTP probe
succeeds on 200-399). ``/metrics`` is the Prometheus text format of the agent's own registry
(``prometheus_client``; the exposition format of prometheus/docs ``exposition_formats.md``).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["EVENT_TYPES", "Health", "HealthServer", "Metrics", "serve"]

#: The watch event types the API sends (``meta/v1`` ``WatchEvent``).
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
#: Seconds a sync may keep failing before ``/healthz`` says 503.
DEFAULT_GRACE = 60.0


class Health:
    """What ``/healthz`` answers, fed by the control loop. ``grace``: seconds of failing syncs
    tolerated; ``clock``: monotonic seconds. Attributes are written by one thread (the loop)
    and read by the server's."""

    def __init__(self, grace: float = DEFAULT_GRACE,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.grace = grace
        self.clock = clock
        self.listed = False
        self.failing_since: float | None = None
        self.failure = ""

    def list_ok(self) -> None:
        self.listed = True

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
        from prometheus_client import CollectorRegistry, Counter, Gauge

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
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class HealthServer(ThreadingHTTPServer):
    """``/healthz`` and ``/metrics`` over HTTP/1.1; served by :func:`serve` in a thread."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: str, port: int, health: Health, metrics: Metrics) -> None:
        import ipaddress
        import socket

        if ipaddress.ip_address(address).version == 6:
            self.address_family = socket.AF_INET6
        self.health = health
        self.metrics = metrics
        super().__init__((address, port), _Handler)
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def close(self) -> None:
        """Stop serving and close the listening socket."""
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
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.partition("?")[0]
        if path == "/healthz":
            ok, reason = self.server.health.check()
            self._answer(200 if ok else 503, reason.encode() + b"\n", "text/plain; charset=utf-8")
        elif path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST

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
