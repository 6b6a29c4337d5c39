"""One connection of a :class:`podnet.api.listener.Listener` and its HTTP protocol:
:class:`GuardedProtocol` is uvicorn's h11 protocol with a head timer (a request's head must be
complete :attr:`Limits.header` seconds after the connection is ready or the previous answer was
sent, however slowly its bytes trickle in) and a body timer, closing the connection when either
runs out; it hands the connection's own client certificate to the application as the ASGI TLS
extension (``scope["extensions"]["tls"]["client_cert_chain"]``), so identity comes from the TLS
connection itself, never from an address or a header.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

__all__ = ["Connection", "GuardedProtocol", "Limits", "fingerprint", "with_tls"]

log = logging.getLogger("podnet.api")


@dataclass(frozen=True, slots=True)
class Limits:
    """Timeouts in seconds: ``handshake`` (TLS), ``header`` (a request's head complete after
    the connection is ready or the previous answer was sent), ``body`` (a request's body
    complete after its head), ``response`` (the answer sent after the head: a client that does
    not read it keeps its connection busy, and a busy connection is not evicted),
    ``write_stall`` (writing may stay paused — the client reads nothing — at most this long),
    ``tls_shutdown`` (the peer's close_notify)."""

    handshake: float = 10.0
    header: float = 10.0
    body: float = 30.0
    response: float = 30.0
    write_stall: float = 10.0
    tls_shutdown: float = 5.0


@dataclass(eq=False, slots=True)
class Connection:
    """One accepted connection: its socket, the protocol once the connection is ready (after
    the TLS handshake), and its client certificate's fingerprint (None: none, or no TLS)."""

    sock: socket.socket
    protocol: GuardedProtocol | None = None
    fingerprint: str | None = None
    evicted: bool = False
    released: bool = False
    accepted: float = field(default_factory=time.monotonic)
    peer: Any = None  # the client's address, as accept gave it

    def hang_up(self) -> None:
        """End a connection still in its handshake. Not by closing the socket or cancelling
        the task: asyncio owns the descriptor (closing it under asyncio could close a newer
        connection that got its number); shutting the socket down makes the peer see the
        end, and the handshake fail here, so asyncio closes it."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


class Slots(Protocol):
    """What a :class:`GuardedProtocol` needs of the listener that accepted its connection."""

    limits: Limits

    def release(self, conn: Connection) -> None:
        """``conn`` is closed: its slot is free."""

    def wake(self) -> None:
        """A connection may have become evictable."""


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol for one :class:`Connection` of a :class:`Listener`: head and
    body timers (:class:`Limits`), the connection's client certificate in every request's
    scope, its slot released when the connection is lost."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, connection: Connection,
                 listener: Slots) -> None:  # fmt: skip
        super().__init__(config, server_state, app_state, _loop)
        self.connection = connection
        self.listener = listener
        self.limits = listener.limits
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._response_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        #: Answers sent on this connection.
        self.served = 0

    @property
    def busy(self) -> bool:
        """Serving a request: its head arrived and its answer is not sent yet."""
        return self.cycle is not None and not self.cycle.response_complete

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def abort(self) -> None:
        """Close at once (no TLS close_notify exchange)."""
        if self.transport is not None:
            self.transport.abort()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.connection.protocol = self
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            der = ssl_object.getpeercert(binary_form=True)
            self.connection.fingerprint = fingerprint(der) if der else None
            self.app = with_tls(self.app, ssl.DER_cert_to_PEM_cert(der) if der else None)
        self._follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.served += 1
        self._cancel("_response_timer")
        self._follow()
        self.listener.wake()

    def pause_writing(self) -> None:
        """The transport's buffer is full (the client reads nothing): it gets
        ``write_stall`` seconds to read, else the connection is closed."""
        super().pause_writing()
        if self._stall_timer is None and not self.closing:
            self._stall_timer = self.loop.call_later(self.limits.write_stall, self._expired,
                                                     "read of the answer")  # fmt: skip

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel("_stall_timer")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head()
        self._cancel_body()
        self._cancel("_response_timer")
        self._cancel("_stall_timer")
        try:
            super().connection_lost(exc)
        finally:
            self.listener.release(self.connection)
            self.connection.protocol = None  # no cycle left for the collector

    # -- timers ---------------------------------------------------------------------------------
    def _follow(self) -> None:
        """Arm or cancel the timers for where the request stands: waiting for a head (the
        timer runs from the first wait, whatever trickles in), receiving a body, or neither."""
        if self.closing:
            self._cancel_head()
            self._cancel_body()
            return
        if self.busy and self._response_timer is None:
            self._response_timer = self.loop.call_later(self.limits.response, self._expired,
                                                        "answer")  # fmt: skip
        state = self.conn.their_state
        if state is h11.IDLE and not self.busy:
            self._cancel_body()
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.limits.header, self._expired,
                                                        "head")  # fmt: skip
        elif state is h11.SEND_BODY:
            self._cancel_head()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.limits.body, self._expired,
                                                        "body")  # fmt: skip
        else:
            self._cancel_head()
            self._cancel_body()

    def _expired(self, what: str) -> None:
        self._head_timer = self._body_timer = None
        self._response_timer = self._stall_timer = None
        if self.closing:
            return
        log.debug("%s: closing a connection whose %s did not complete in time",
                  self.client, what)  # fmt: skip
        self.abort()

    def _cancel(self, name: str) -> None:
        timer = getattr(self, name)
        if timer is not None:
            timer.cancel()
            setattr(self, name, None)

    def _cancel_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None


def fingerprint(der: bytes) -> str:
    """A certificate's fingerprint as LXD writes it: sha256 of the DER bytes, lowercase hex."""
    return hashlib.sha256(der).hexdigest()


def with_tls(app: Any, pem: str | None) -> Any:
    """``app`` seeing the ASGI TLS extension of one connection in every scope:
    ``client_cert_chain`` is ``[pem]`` (the client's certificate) or ``[]`` (none sent)."""
    tls = {"server_cert": None, "client_cert_chain": [pem] if pem else [],
           "client_cert_name": None, "client_cert_error": None, "tls_version": None,
           "cipher_suite": None}  # fmt: skip

    async def connection_app(scope: Any, receive: Any, send: Any) -> None:
        extensions = {**(scope.get("extensions") or {}), "tls": tls}
        await app({**scope, "extensions": extensions}, receive, send)

    return connection_app
