"""Serving the API: the unix socket and the optional TLS listener, on uvicorn.

- **Unix socket** ``<dataDir>/unix.socket`` (so ``LXD_DIR=<dataDir> lxc …`` talks to podnet):
  created by podnet, not uvicorn (which would make it 0666), mode 0660, owner root, group
  ``--group`` (default root's). Its clients are trusted.
- **TCP** (``--listen ADDR:PORT``) with TLS (``--tls-cert``, ``--tls-key``): a client is let in
  only with a certificate whose SHA-256 fingerprint is in the trust store (``podnetctl trust
  add``, kept in the store). Python's ``ssl`` cannot request a client certificate without
  verifying it, so the trusted certificates are the verification store (re-read from the store
  every second): an untrusted certificate fails the TLS handshake; a connection without one
  gets 403; a certificate removed from the trust store gets 403 (the fingerprint is checked on
  every request).

Both listeners share one application and one event loop; SIGTERM or SIGINT stops both
gracefully (requests in flight finish). One log line per request (uvicorn's access log).
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import hashlib
import os
import signal
import socket
import ssl
from collections.abc import Generator
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from podnet.networks.ops import Manager

__all__ = ["SOCKET_NAME", "fingerprint", "serve"]

SOCKET_NAME = "unix.socket"
TRUST_REFRESH_SECONDS = 1.0
#: Seconds requests in flight get to finish after SIGTERM before connections are cut.
SHUTDOWN_GRACE_SECONDS = 3.0


def fingerprint(der: bytes) -> str:
    """A certificate's fingerprint as LXD writes it: sha256 of the DER bytes, lowercase hex."""
    return hashlib.sha256(der).hexdigest()


class PeerCertificates:
    """The fingerprint of each TLS connection's client certificate, by client address (the
    ASGI scope carries no TLS details; the protocol records them on connection)."""

    def __init__(self) -> None:
        self.by_peer: dict[tuple[str, int], str | None] = {}

    def protocol_class(self) -> type[H11Protocol]:
        peers = self

        class Protocol(H11Protocol):
            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                ssl_object = transport.get_extra_info("ssl_object")
                der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
                if self.client:
                    peers.by_peer[(str(self.client[0]), int(self.client[1]))] = (
                        fingerprint(der) if der else None
                    )

            def connection_lost(self, exc: Exception | None) -> None:
                if self.client:
                    peers.by_peer.pop((str(self.client[0]), int(self.client[1])), None)
                super().connection_lost(exc)

        return Protocol


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling (two run side by side)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def unix_socket(path: str, group: str | None) -> socket.socket:
    """A listening unix socket at ``path`` (a stale one is replaced), mode 0660, group
    ``group``. OSError / KeyError (unknown group) otherwise."""
    gid = grp.getgrnam(group).gr_gid if group else os.getegid()
    if os.path.exists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # nobody listens: a leftover of a server that died
        else:
            probe.close()
            raise OSError(f"{path} is in use by a running server")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chown(path, 0 if os.geteuid() == 0 else -1, gid)
    os.chmod(path, 0o660)
    sock.listen(128)
    sock.setblocking(False)
    return sock


def tcp_socket(listen: str) -> socket.socket:
    """A listening TCP socket on ``ADDR:PORT`` (``[v6]:PORT`` for IPv6)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "::"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class Trust:
    """The trust store as the TLS listener sees it: re-read from the store, loaded into the
    SSL context (so trusted certificates pass the handshake), checked per request."""

    def __init__(self, manager: Manager, context: ssl.SSLContext) -> None:
        self.manager = manager
        self.context = context
        self.fingerprints: set[str] = set()
        self.loaded: set[str] = set()

    def refresh(self) -> None:
        from podnet.store import open_store

        with open_store(self.manager.data_dir, busy_timeout=self.manager.busy_timeout) as store:
            rows = store.trusted()
        self.fingerprints = {fp for fp, _, _ in rows}
        for fp, _, pem in rows:
            if fp not in self.loaded:
                self.context.load_verify_locations(cadata=pem)
                self.loaded.add(fp)

    async def keep_fresh(self) -> None:
        while True:
            await asyncio.sleep(TRUST_REFRESH_SECONDS)
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a busy store must not stop the server
                pass


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context asking for (not requiring) a client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_OPTIONAL
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # self-signed client certificates
    return context


def serve(manager: Manager, *, group: str | None = None, listen: str | None = None,
          tls_cert: str | None = None, tls_key: str | None = None, log_level: str = "info",
          ready: Any = None) -> None:  # fmt: skip
    """Serve until SIGTERM/SIGINT. ``ready(paths)``: called once listening (for tests)."""
    from fastapi import Request

    from podnet.api.app import create_app
    from podnet.store import open_store

    with open_store(manager.data_dir, busy_timeout=manager.busy_timeout):
        pass  # create and migrate the store before the first request
    import copy

    from uvicorn.config import LOGGING_CONFIG

    logging = copy.deepcopy(LOGGING_CONFIG)
    logging["handlers"]["access"]["stream"] = "ext://sys.stderr"  # every log line on stderr
    socket_path = os.path.join(manager.data_dir, SOCKET_NAME)
    unix = unix_socket(socket_path, group)
    servers: list[tuple[_Server, list[socket.socket]]] = []
    peers = PeerCertificates()
    local_app = create_app(manager)
    config = uvicorn.Config(local_app, log_level=log_level, access_log=True, lifespan="off",
                            log_config=logging)  # fmt: skip
    servers.append((_Server(config), [unix]))
    trust: Trust | None = None
    if listen:
        if not (tls_cert and tls_key):
            raise ValueError("--listen needs --tls-cert and --tls-key (TCP is TLS only)")
        context = tls_context(tls_cert, tls_key)
        trust = Trust(manager, context)
        trust.refresh()

        def authorize(request: Request) -> bool:
            client = request.client
            fp = peers.by_peer.get((client.host, client.port)) if client else None
            return fp is not None and fp in trust.fingerprints

        remote_app = create_app(manager, authorize=authorize)
        tcp_config = uvicorn.Config(remote_app, log_level=log_level, access_log=True,
                                    lifespan="off", http=peers.protocol_class(),
                                    log_config=logging)  # fmt: skip
        tcp_config.load()
        tcp_config.ssl = context
        servers.append((_Server(tcp_config), [tcp_socket(listen)]))

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def stop() -> None:
            for server, _ in servers:
                server.should_exit = True
            loop.call_later(SHUTDOWN_GRACE_SECONDS, drop_idle)

        def drop_idle() -> None:
            # asyncio waits up to 30 s for a TLS client to answer close_notify: connections
            # still open after the grace period are cut
            for server, _ in servers:
                for connection in list(server.server_state.connections):
                    transport = getattr(connection, "transport", None)
                    if transport is not None:
                        transport.abort()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        tasks = [asyncio.create_task(server.serve(sockets=socks)) for server, socks in servers]
        refresher = asyncio.create_task(trust.keep_fresh()) if trust else None
        while not all(server.started for server, _ in servers):
            if any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.01)
        if ready is not None:
            ready([socket_path, *([listen] if listen else [])])
        await asyncio.gather(*tasks)
        if refresher:
            refresher.cancel()

    try:
        asyncio.run(main())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(socket_path)
