"""Accepting connections so that idle or slow clients cannot crowd out the ones that matter.

uvicorn lets asyncio accept every connection (``loop.create_server``): nothing bounds how many
are held, asyncio's TLS handshake timeout is left at 60 s, and no timer runs while a request's
head is still arriving (its keep-alive timer starts after the first response, and every byte
received cancels it). About 250 cert-less TLS connections that send nothing exhausted a
``nofile`` of 256: the TLS listener and the unix socket then answered nothing or 500. Here:

- :class:`Listener` — an accept loop per listening socket (public asyncio only:
  ``sock_accept`` + ``connect_accepted_socket``), at most ``cap`` connections at a time, with
  ``ssl_handshake_timeout`` and ``ssl_shutdown_timeout``. At the cap it first evicts a
  connection that is not serving a request (a request is being served once its body is in,
  trusted or not) — one whose client is not trusted, then one still in its TLS handshake, then
  a trusted idle one, oldest first within each — and when every
  connection is serving a request it stops accepting until one ends (new clients wait in the
  kernel's backlog). The caps come from :func:`budget`, below RLIMIT_NOFILE, so the other
  listener, the store and the tools always find descriptors.
- :class:`GuardedProtocol` — uvicorn's h11 protocol with a head timer (a request's head must
  be complete :attr:`Limits.header` seconds after the connection is ready or the previous
  answer was sent, however slowly its bytes trickle in) and a body timer, closing the
  connection when either runs out; it hands the connection's own client certificate to the
  application as the ASGI TLS extension (``scope["extensions"]["tls"]["client_cert_chain"]``),
  so identity comes from the TLS connection itself, never from an address or a header.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import resource
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

__all__ = [
    "Budget",
    "Connection",
    "GuardedProtocol",
    "Limits",
    "Listener",
    "budget",
    "fingerprint",
    "with_tls",
]

log = logging.getLogger("podnet.api")

#: Descriptors the process needs besides connections and worker threads: stdio, the event
#: loop's epoll and self-pipe, the listening sockets, the trust store read every second.
BASE_FDS = 32
#: Per worker thread (a request's operation): the database, its WAL and shared memory, the
#: write lock's two files, and the pipes of a tool it runs.
FDS_PER_THREAD = 12
#: Kept free on top: a connection accepted before one is evicted, evicted ones closing.
MARGIN_FDS = 16
MAX_TCP, MAX_UNIX = 1024, 256
MIN_TCP, MIN_UNIX = 8, 4
ACCEPT_RETRY_SECONDS = 1.0  # after EMFILE/ENFILE/ENOBUFS, as asyncio's own accept loop waits
WARN_EVERY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Budget:
    """How ``nofile`` descriptors are shared: ``threads`` (worker threads running requests'
    operations), ``tcp`` and ``unix`` (connections held at once per listener)."""

    nofile: int
    threads: int
    tcp: int
    unix: int


def budget(nofile: int | None = None) -> Budget:
    """Split ``nofile`` (default: the soft RLIMIT_NOFILE) between worker threads (4-40, one per
    64 descriptors), a fixed reserve, and connections: 2/3 of the rest to TCP (at most 1024),
    1/3 to the unix socket (at most 256). nofile 256 → 4 threads, 106 TCP, 53 unix; 1024 →
    16 threads, 522 TCP, 256 unix. Below ~150 the minimum caps (8 TCP, 4 unix) may not fit."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    threads = max(4, min(40, nofile // 64))
    spare = max(0, nofile - BASE_FDS - MARGIN_FDS - threads * FDS_PER_THREAD)
    tcp = max(MIN_TCP, min(MAX_TCP, spare * 2 // 3))
    unix = max(MIN_UNIX, min(MAX_UNIX, spare // 3))
    return Budget(nofile, threads, tcp, unix)


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


#: Seconds a trusted connection that has not been answered yet is safe from eviction: at the cap,
#: a client that just got its connection must not lose it before its request arrives (the
#: head timer still bounds how long it may take).
FIRST_REQUEST_GRACE = 2.0

# eviction ranks: lower goes first; a connection serving a request is never evicted
_UNTRUSTED, _HANDSHAKE, _TRUSTED_IDLE = 0, 1, 2


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


class Listener:
    """Accepts on ``sock`` (listening, non-blocking), at most ``cap`` connections at a time,
    each with a protocol from ``factory(connection, listener)``; ``context``: TLS (None:
    plain, the unix socket). ``trusted(fingerprint) -> bool`` ranks connections for eviction.
    ``close()`` and ``wait_closed()`` as asyncio's ``Server`` (uvicorn's shutdown calls
    them)."""

    def __init__(self, sock: socket.socket,
                 factory: Callable[[Connection, Listener], GuardedProtocol], *,
                 cap: int, limits: Limits, context: ssl.SSLContext | None = None,
                 trusted: Callable[[str | None], bool] = lambda fp: True,
                 name: str = "") -> None:  # fmt: skip
        self.sock = sock
        self.factory = factory
        self.cap = cap
        self.limits = limits
        self.context = context
        self.trusted = trusted
        self.name = name or str(sock.getsockname())
        self.connections: dict[Connection, None] = {}  # oldest first
        self.live = 0  # connections not evicted
        self.evictions = 0
        self._freed = asyncio.Event()
        self._accepting: asyncio.Task[None] | None = None
        self._opening: set[asyncio.Task[None]] = set()
        self._warned = 0.0
        self._refused = 0  # TLS handshakes refused since the last line about them
        self._refused_said = -WARN_EVERY_SECONDS

    def start(self) -> None:
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    def close(self) -> None:
        """Stop accepting; hang up on connections still in their TLS handshake (the others
        are uvicorn's: its shutdown lets them finish their request)."""
        if self._accepting is not None:
            self._accepting.cancel()
        for conn in list(self.connections):
            if conn.protocol is None:
                conn.hang_up()

    def wake(self) -> None:
        """A connection may have become evictable (it answered its request)."""
        self._freed.set()

    async def wait_closed(self) -> None:
        if self._accepting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting

    # -- accepting ------------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self.live >= self.cap and self._victim() is None:
                self._freed.clear()  # everyone is serving a request: accept once one ends
                await self._freed.wait()
            try:
                sock, peer = await loop.sock_accept(self.sock)
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("%s: cannot accept (%s); retrying in %.0f s", self.name,
                              err.strerror, ACCEPT_RETRY_SECONDS)  # fmt: skip
                    await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue  # ECONNABORTED and the like: that client is gone
            while self.live >= self.cap:
                victim = self._victim()
                if victim is None:  # became busy meanwhile: keep this one anyway (closing it
                    break  # would reset a client that waited its turn); the cap is
                self._evict(victim)  # overshot by one at most until the next accept
            conn = Connection(sock, peer=peer)
            self.connections[conn] = None
            self.live += 1
            task = loop.create_task(self._open(conn))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)
            # sock_accept does not yield while the backlog holds connections: let the
            # connections already held (and the other listener) go first
            await asyncio.sleep(0)

    async def _open(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if self.context is not None:
            tls = {"ssl": self.context, "ssl_handshake_timeout": self.limits.handshake,
                   "ssl_shutdown_timeout": self.limits.tls_shutdown}  # fmt: skip
        try:
            # on failure (handshake refused, timed out, hung up) asyncio closes the socket
            await loop.connect_accepted_socket(lambda: self.factory(conn, self), conn.sock, **tls)
        except (OSError, ssl.SSLError) as err:
            log.debug("%s: connection not set up: %s", self.name, err)
            if isinstance(err, ssl.SSLError):
                self._handshake_refused(conn, err)
            self.release(conn)
            # the traceback holds asyncio's frames, their future holds this exception: a
            # cycle keeping the transport and its 256 KiB buffer until a full collection
            # (hundreds of MB under a flood of refused handshakes); break it
            err.__traceback__ = None
        except asyncio.CancelledError:
            self.release(conn)  # the event loop is ending
            raise
        except Exception:  # noqa: BLE001 - one connection must never stop the listener
            log.exception("%s: cannot set up a connection", self.name)
            self.release(conn)

    def _handshake_refused(self, conn: Connection, err: ssl.SSLError) -> None:
        """Log a refused TLS handshake (not TLS, no common version or cipher, a certificate
        refused where :mod:`podnet.api.anycert` could not be used): the first at once, then
        one line per :data:`WARN_EVERY_SECONDS` counting the others, so a flood is no log
        flood."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_said < WARN_EVERY_SECONDS:
            return
        peer = conn.peer if isinstance(conn.peer, tuple) else ("?", 0)
        log.warning("%s: TLS handshake refused for %s:%s: %s (%d refused since the last such "
                    "line)", self.name, peer[0], peer[1], err.reason or err,
                    self._refused)  # fmt: skip
        self._refused, self._refused_said = 0, now

    def release(self, conn: Connection) -> None:
        """``conn`` is closed: its slot is free (idempotent)."""
        if conn.released:
            return
        conn.released = True
        self.connections.pop(conn, None)
        if not conn.evicted:
            self.live -= 1
        self._freed.set()

    # -- evicting -------------------------------------------------------------------------------
    def _rank(self, conn: Connection) -> int | None:
        protocol = conn.protocol
        if protocol is None:
            if self.context is None and time.monotonic() - conn.accepted < FIRST_REQUEST_GRACE:
                return None  # no handshake here: a connection being set up, just accepted
            return _HANDSHAKE
        if protocol.busy and protocol.conn.their_state is not h11.SEND_BODY:
            return None  # serving a request (an untrusted GET /1.0 or token redemption too)
        if protocol.closing or not self.trusted(conn.fingerprint):
            return _UNTRUSTED  # idle, or an untrusted client still sending its body
        if protocol.busy:
            return None  # a trusted client sending its body (the body timer bounds it)
        if not protocol.served and time.monotonic() - conn.accepted < FIRST_REQUEST_GRACE:
            return None  # a new client gets a moment to send its first request
        return _TRUSTED_IDLE

    def _victim(self) -> Connection | None:
        """The connection to evict: lowest rank, oldest within it; None when all are busy."""
        best: Connection | None = None
        best_rank = _TRUSTED_IDLE + 1
        for conn in self.connections:
            if conn.evicted:
                continue
            rank = self._rank(conn)
            if rank is not None and rank < best_rank:
                best, best_rank = conn, rank
                if rank == _UNTRUSTED:
                    break
        return best

    def _evict(self, conn: Connection) -> None:
        conn.evicted = True
        self.live -= 1
        self.evictions += 1
        now = time.monotonic()
        if now - self._warned > WARN_EVERY_SECONDS:
            self._warned = now
            log.warning("%s: %d connections held (the cap): closing idle and untrusted ones "
                        "for new clients", self.name, self.cap)  # fmt: skip
        if conn.protocol is not None:
            conn.protocol.abort()
        else:
            conn.hang_up()


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol for one :class:`Connection` of a :class:`Listener`: head and
    body timers (:class:`Limits`), the connection's client certificate in every request's
    scope, its slot released when the connection is lost."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, connection: Connection,
                 listener: Listener) -> None:  # fmt: skip
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
