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
- :class:`~podnet.api.protocol.GuardedProtocol` (:mod:`podnet.api.protocol`) — uvicorn's h11
  protocol with head and body timers, and the connection's client certificate in every
  request's scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11

from podnet.api.protocol import Connection, GuardedProtocol, Limits

__all__ = ["Budget", "Listener", "budget"]

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


#: Seconds a trusted connection that has not been answered yet is safe from eviction: at the cap,
#: a client that just got its connection must not lose it before its request arrives (the
#: head timer still bounds how long it may take).
FIRST_REQUEST_GRACE = 2.0

# eviction ranks: lower goes first; a connection serving a request is never evicted
_UNTRUSTED, _HANDSHAKE, _TRUSTED_IDLE = 0, 1, 2


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
