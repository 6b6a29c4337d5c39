"""The request guard in front of the API application: who may ask, and what may be sent. A pure
ASGI middleware (no per-request task or copy of the response), in this order:

1. **Trust** — ``authorize(scope)`` (the TLS listener's check of the connection's own client
   certificate, see :mod:`podnet.api.listener`): a request of an untrusted client gets 403
   ``not authorized``, always with ``Connection: close``, so it is answered once and never
   kept — except what LXD answers such a client: ``GET /1.0`` (the untrusted server document,
   so that ``lxc remote add`` shows the server and asks for a token) and the routes in
   ``open_to_untrusted`` (``POST /1.0/certificates``, redeeming a trust token), which go on to
   the application, still with ``Connection: close``; ``GET /`` (``["/1.0"]``) is answered to
   everyone, as LXD does. Refusals are logged (the client's address and certificate
   fingerprint), at most :class:`RefusalLog`'s burst a minute.
2. **Content type** — POST, PUT and PATCH need ``Content-Type: application/json`` (parameters
   allowed, a ``charset`` must be UTF-8, the only encoding of JSON, RFC 8259 §8.1): 415 naming
   the header and what was sent. LXD and its clients (``lxc``, pylxd) send exactly that. A
   write to a URL without that method is left to the router (404, 501).
3. **Size** — a body over :data:`MAX_BODY` bytes is 413: refused before reading when
   ``Content-Length`` says so, else as soon as the bytes received pass it (a chunked body);
   with ``Connection: close``, so the rest is never read.

The body is read here (at most ``MAX_BODY`` bytes held per request) and handed on whole.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podnet.api.envelopes import error, sync

log = logging.getLogger("podnet.api")

__all__ = ["MAX_BODY", "REFUSALS", "Guard", "RefusalLog"]

#: Largest request body in bytes (1 MiB: a forward with thousands of port specifications fits).
MAX_BODY = 1 << 20
WRITES = frozenset({"POST", "PUT", "PATCH"})
_SHOWN = 80  # characters of a refused header value repeated in the error


def content_type_problem(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why the ``Content-Type`` of a write is refused (the 415 message), None when it is
    ``application/json`` (any parameters, a ``charset`` only UTF-8)."""
    values = [v.decode("latin-1") for k, v in headers if k == b"content-type"]
    if not values:
        return "Missing Content-Type: the request body must be application/json"
    if len(values) > 1:
        return "Several Content-Type headers: send one, application/json"
    media, _, params = values[0].partition(";")
    if media.strip().lower() != "application/json":
        return (f'Unsupported Content-Type "{values[0][:_SHOWN]}": the request body must be '
                "application/json")  # fmt: skip
    for param in params.split(";"):
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            return f'Unsupported Content-Type charset "{value.strip()[:_SHOWN]}": JSON is UTF-8'
    return None


def _declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    for k, v in headers:
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None  # h11 refuses it before the application sees the request
    return None


def describe_client(scope: Scope) -> str:
    """``ADDR:PORT`` of the request's client and its certificate's fingerprint (``no
    certificate``), for the log."""
    client = scope.get("client") or ("?", 0)
    chain = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert_chain") or []
    fp = hashlib.sha256(ssl.PEM_cert_to_DER_cert(chain[0])).hexdigest() if chain else None
    return f"{client[0]}:{client[1]} ({f'certificate {fp}' if fp else 'no certificate'})"


class RefusalLog:
    """Warnings of refused requests, at most ``burst`` lines per ``every`` seconds for one
    client (its certificate's fingerprint, or its address without one) and ``total`` for all:
    past that they are counted, and the client's next line allowed says how many of its own
    were left out. A flood of untrusted requests is no flood of the log (as refused TLS
    handshakes, :meth:`podnet.api.listener.Listener._handshake_refused`)."""

    MAX_CLIENTS = 1024  # clients remembered; past that the oldest windows are dropped

    def __init__(self, burst: int = 10, total: int = 50, every: float = 60.0) -> None:
        self.burst, self.total, self.every = burst, total, every
        self.window, self.said = -every, 0
        self.clients: dict[str, list[float]] = {}  # key -> [window start, said, left out]
        self._lock = threading.Lock()  # the event loop and the handlers' worker threads

    def warn(self, client: str, message: str, *args: Any) -> None:
        with self._lock:
            line = self._count(client, message, args)
        if line is not None:
            log.warning(line[0], *line[1])

    def _count(self, client: str, message: str,
               args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]] | None:  # fmt: skip
        now = time.monotonic()
        if now - self.window >= self.every:
            self.window, self.said = now, 0
        mine = self.clients.get(client)
        if mine is None or now - mine[0] >= self.every:
            left = mine[2] if mine is not None else 0
            mine = self.clients[client] = [now, 0, left]
            if len(self.clients) > self.MAX_CLIENTS:
                oldest = min(self.clients, key=lambda k: self.clients[k][0])
                del self.clients[oldest]
        if mine[1] >= self.burst or self.said >= self.total:
            mine[2] += 1
            return None
        mine[1] += 1
        self.said += 1
        if mine[2]:
            message += " (%d refusals of this client not logged before this one)"
            args = (*args, int(mine[2]))
            mine[2] = 0
        return message, args


#: The process's refusals (the guard's and the application's own, a token refused).
REFUSALS = RefusalLog()


def client_key(scope: Scope) -> str:
    """Who a refusal is counted against: the certificate's fingerprint, else the address."""
    chain = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert_chain") or []
    if chain:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(chain[0])).hexdigest()
    return str((scope.get("client") or ("?", 0))[0])


def _closing(send: Send) -> Send:
    """``send`` adding ``Connection: close`` to the response's head: an untrusted client's
    connection ends with its answer."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing


class Guard:
    """The guard around ``app``. ``authorize(scope) -> bool``: may this request go on (None:
    every request may, the unix socket's case); ``untrusted() -> dict``: the server document
    an untrusted ``GET /1.0`` gets; ``open_to_untrusted``: ``(method, path)`` pairs an
    untrusted client's request goes on to the application for (which then checks what it
    carries); ``routes``: the application's (a write matching none is not checked for its
    content type); ``max_body``: bytes."""

    def __init__(self, app: ASGIApp, *, authorize: Callable[[Scope], bool] | None = None,
                 untrusted: Callable[[], Any] | None = None,
                 open_to_untrusted: Iterable[tuple[str, str]] = (),
                 routes: Iterable[BaseRoute] = (), max_body: int = MAX_BODY) -> None:  # fmt: skip
        self.app = app
        self.authorize = authorize
        self.untrusted = untrusted
        self.open_to_untrusted = frozenset(open_to_untrusted)
        self.routes = routes
        self.max_body = max_body

    def _routed(self, scope: Scope) -> bool:
        return any(route.matches(scope)[0] is Match.FULL for route in self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.authorize is not None and not self.authorize(scope):
            method, path = scope["method"], scope["path"].rstrip("/")
            if method == "GET" and path == "":
                # LXD answers the API's root to everyone: lxc remote add asks it first
                await sync(["/1.0"], headers={"Connection": "close"})(scope, receive, send)
                return
            if method == "GET" and path == "/1.0" and self.untrusted is not None:
                await sync(self.untrusted(), headers={"Connection": "close"})(scope, receive,
                                                                              send)  # fmt: skip
                return
            if (method, path) not in self.open_to_untrusted:
                REFUSALS.warn(client_key(scope), "refused %s %s of untrusted client %s", method,
                              scope["path"][:200], describe_client(scope))  # fmt: skip
                await error(403, "not authorized", close=True)(scope, receive, send)
                return
            send = _closing(send)
        headers = scope["headers"]
        if scope["method"] in WRITES and self._routed(scope):
            problem = content_type_problem(headers)
            if problem is not None:
                await error(415, problem, close=True)(scope, receive, send)
                return
        too_large = error(413, f"Request body is larger than {self.max_body} bytes", close=True)
        declared = _declared_length(headers)
        if declared is not None and declared > self.max_body:
            await too_large(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nobody to answer
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole: list[Message] = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay() -> Message:
            return whole.pop() if whole else await receive()

        await self.app(scope, replay, send)
