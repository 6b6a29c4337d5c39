"""Serving the API: the unix socket and the optional TLS listener, on uvicorn.

- **Data directory** (``--data-dir``): mode 0750, owner root, group ``--group`` (default root's),
  so only that group's members reach the socket in it; a directory others may write to (such
  as /tmp) is refused.
- **Unix socket** ``<dataDir>/unix.socket`` (so ``LXD_DIR=<dataDir> lxc …`` talks to podnet):
  created by podnet, not uvicorn (which would make it 0666), mode 0660, owner root, group
  ``--group``. Its clients are trusted.
- **TCP** (``--listen ADDR:PORT``) with TLS (``--tls-cert``, ``--tls-key``): a client is let in
  only with a certificate whose SHA-256 fingerprint is in the trust store (``podnetctl trust
  add``, or a trust token redeemed, kept in the store; re-read every second). As LXD, the TLS
  handshake takes any client certificate (:mod:`podnet.api.anycert`) and trust is checked on
  every request: an untrusted client, or one without a certificate, gets LXD's untrusted
  ``GET /1.0`` and may redeem a trust token (``POST /1.0/certificates``,
  :mod:`podnet.api.tokens`); anything else is 403 and the connection is closed. Identity is
  the connection's own certificate, handed to the application by the connection's protocol
  (:mod:`podnet.api.listener`); proxy headers are off, so ``X-Forwarded-For`` and the like are
  headers like any other. The listen address and the server certificate's fingerprint are
  recorded in the store (``podnetctl trust add-token`` puts them into a token).
- **Limits**: connections per listener are capped below RLIMIT_NOFILE, worker threads too
  (:func:`podnet.api.listener.budget`); at the cap idle and untrusted connections are closed
  for new ones; a TLS handshake gets 10 s, a request's head 10 s, its body 30 s, an idle
  keep-alive connection 5 s (:class:`~podnet.api.protocol.Limits`); a head at most
  ``HEAD_LIMIT`` bytes, a body 1 MiB of JSON (:mod:`podnet.api.guard`).

Both listeners share one event loop; SIGTERM or SIGINT stops both gracefully (requests in flight
finish). One log line per request (uvicorn's access log); failures are logged in full, while
clients get a short reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import grp
import logging
import os
import signal
import socket
import ssl
import stat
import threading
from collections.abc import Callable, Generator, Mapping
from typing import Any

import uvicorn
from anyio import to_thread
from uvicorn.config import LOGGING_CONFIG

from podnet import checked
from podnet.api.anycert import accept_any
from podnet.api.listener import Budget, Listener, budget
from podnet.api.protocol import Connection, GuardedProtocol, Limits, fingerprint
from podnet.manage.manager import Manager
from podnet.store import open_store

__all__ = ["SOCKET_NAME", "fingerprint", "serve"]

SOCKET_NAME = "unix.socket"
TRUST_REFRESH_SECONDS = 1.0
#: Seconds requests in flight get to finish after SIGTERM before connections are cut.
SHUTDOWN_GRACE_SECONDS = 3.0
#: Largest request head (request line and headers) in bytes; larger: 400 and closed.
HEAD_LIMIT = 16 * 1024
#: Below this RLIMIT_NOFILE the minimum connection caps may not leave the store descriptors.
LOW_NOFILE = 160
#: Seconds an idle keep-alive connection is kept (uvicorn's timer, reset by any byte received;
#: the head timer of Limits is not).
KEEP_ALIVE_SECONDS = 5

log = logging.getLogger("podnet.api")


class _Server(uvicorn.Server):
    """uvicorn's server accepting through :class:`Listener` (capped, evicting, with TLS
    handshake, head and body timeouts) instead of asyncio's own accept loop, which has none of
    these, and without uvicorn's signal handling (two servers run side by side)."""

    def __init__(self, config: uvicorn.Config, *, cap: int, limits: Limits,
                 context: ssl.SSLContext | None = None,
                 trusted: Callable[[str | None], bool] = lambda fp: True) -> None:  # fmt: skip
        super().__init__(config)
        self.cap, self.limits, self.context, self.trusted = cap, limits, context, trusted
        self.listeners: list[Listener] = []

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup for listening ``sockets``, with a :class:`Listener` each in place
        of ``loop.create_server`` (the only change)."""
        await self.lifespan.startup()  # lifespan "off": nothing to start
        config, state = self.config, self.server_state

        def protocol(conn: Connection, listener: Listener) -> GuardedProtocol:
            return GuardedProtocol(config, state, self.lifespan.state, connection=conn,
                                   listener=listener)  # fmt: skip

        for sock in sockets or []:
            listener = Listener(sock, protocol, cap=self.cap, limits=self.limits,
                                context=self.context, trusted=self.trusted)  # fmt: skip
            listener.start()
            self.listeners.append(listener)
        # uvicorn's shutdown closes and awaits these as asyncio servers; a Listener does both
        self.servers = self.listeners  # type: ignore[assignment]
        self.started = True


def _gid(group: str | None) -> int:
    """The id of ``group`` (KeyError: unknown), default the process's group (root's)."""
    return grp.getgrnam(group).gr_gid if group else os.getegid()


def secure_data_dir(path: str, gid: int) -> None:
    """Make the data directory ``path`` owner root (when running as root), group ``gid``, mode
    0750: the group's members reach the socket (0660) inside, nobody else reaches anything.
    OSError when others may write to it (mode o+w or sticky, as /tmp): making such a shared
    directory 0750 would lock its other users out, and keeping the database in it is unsafe."""
    refuse_shared(path)
    os.chown(path, 0 if os.geteuid() == 0 else -1, gid)
    os.chmod(path, 0o750)


def refuse_shared(path: str) -> None:
    """OSError when others may write to the existing directory ``path`` (see
    :func:`secure_data_dir`); nothing when it does not exist yet."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if mode & (stat.S_IWOTH | stat.S_ISVTX):
        raise OSError(f"{path} is writable by others (mode {stat.S_IMODE(mode):04o}): give "
                      "podnet a data directory of its own")  # fmt: skip


def unix_socket(path: str, gid: int) -> socket.socket:
    """A listening unix socket at ``path`` (a stale one is replaced), mode 0660, group
    ``gid``. OSError otherwise."""
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


def parse_listen(listen: str) -> tuple[str, int, int]:
    """``ADDR:PORT`` (``[v6]:PORT``; no address: ``::``) as ``(address, port, family)``: the
    address parsed (:func:`podnet.checked.ip`: no host names, no scoped IPv6), the port
    1-65535. ValueError naming what is wrong."""
    host, sep, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") or "::"
    try:
        addr = checked.ip(host)
    except checked.BadValue as err:
        raise ValueError(f"--listen {listen!r}: {err}") from None
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--listen {listen!r}: the port must be 1-65535 (ADDR:PORT)")
    return checked.text(addr), int(port), checked.family(addr)


def tcp_socket(listen: str) -> socket.socket:
    """A listening TCP socket on ``ADDR:PORT`` (``[v6]:PORT`` for IPv6; :func:`parse_listen`)."""
    host, port, family = parse_listen(listen)
    sock = socket.socket(socket.AF_INET6 if family == 6 else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class Trust:
    """The trust store as the TLS listener sees it: re-read from the store (every second, and
    at once when a token was redeemed), checked per request, and loaded into the SSL context
    as its verification store (what lets trusted certificates through the handshake where
    :func:`podnet.api.anycert.accept_any` cannot let all through)."""

    def __init__(self, manager: Manager, context: ssl.SSLContext) -> None:
        self.manager = manager
        self.context = context
        self.fingerprints: set[str] = set()
        self.loaded: set[str] = set()
        self.unusable: set[str] = set()  # rows that would not load, logged once
        self._lock = threading.Lock()  # the timer (event loop) and a request's worker thread

    def refresh(self) -> None:
        with self._lock:
            with open_store(self.manager.data_dir,
                            busy_timeout=self.manager.busy_timeout) as store:  # fmt: skip
                rows = store.trust.all()
            good = set()
            for fp, name, pem in rows:
                if fp in self.loaded:
                    good.add(fp)
                    continue
                if fp in self.unusable:
                    continue
                try:
                    self.context.load_verify_locations(cadata=pem)
                except (ssl.SSLError, ValueError) as err:
                    # a row no TLS library can read (written by hand, or by an older podnet):
                    # said once, left out; the other certificates stay trusted
                    self.unusable.add(fp)
                    log.warning("trusted certificate %s (%r) is not a certificate, ignored: "
                                "%s; remove it: podnetctl trust remove %s", fp, name[:80],
                                err, fp[:12])  # fmt: skip
                    continue
                self.loaded.add(fp)
                good.add(fp)
            self.fingerprints = good

    def trusted(self, fp: str | None) -> bool:
        return fp is not None and fp in self.fingerprints

    def authorize(self, scope: Mapping[str, Any]) -> bool:
        """Whether the request's own connection presented a trusted certificate (the ASGI TLS
        extension :class:`~podnet.api.protocol.GuardedProtocol` puts into its scope)."""
        tls = (scope.get("extensions") or {}).get("tls") or {}
        chain = tls.get("client_cert_chain") or []
        return bool(chain) and self.trusted(fingerprint(ssl.PEM_cert_to_DER_cert(chain[0])))

    async def keep_fresh(self) -> None:
        while True:
            await asyncio.sleep(TRUST_REFRESH_SECONDS)
            try:
                self.refresh()
            except Exception as err:  # noqa: BLE001 - a busy store must not stop the server
                log.warning("cannot re-read the trust store: %s", err)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context asking for (not requiring) a client certificate and taking any
    (:func:`podnet.api.anycert.accept_any`; where that cannot be done, only the trusted
    ones, which :class:`Trust` loads as its verification store)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_OPTIONAL
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # self-signed client certificates
    accept_any(context)
    return context


#: ``podnet_state`` keys: the TLS listener's ``ADDR:PORT`` and its certificate's fingerprint.
LISTEN_STATE, CERT_STATE = "api.listen", "api.certificate"


def server_fingerprint(cert: str) -> str:
    """The SHA-256 fingerprint of the first certificate in the PEM file ``cert``."""
    with open(cert) as f:
        text = f.read()
    end = "-----END CERTIFICATE-----"
    return fingerprint(ssl.PEM_cert_to_DER_cert(text[: text.index(end) + len(end)]))


def _config(app: Any, log_level: str, log_config: dict[str, Any]) -> uvicorn.Config:
    config = uvicorn.Config(
        app, log_level=log_level, access_log=True, lifespan="off", log_config=log_config,
        http="h11", ws="none", proxy_headers=False, timeout_keep_alive=KEEP_ALIVE_SECONDS,
        h11_max_incomplete_event_size=HEAD_LIMIT,
    )  # fmt: skip
    config.load()
    return config


def _log_config(log_level: str) -> dict[str, Any]:
    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"  # every log line on stderr
    config["loggers"]["podnet"] = {"handlers": ["default"], "level": log_level.upper(),
                                   "propagate": False}  # fmt: skip
    return config


def serve(manager: Manager, *, group: str | None = None, listen: str | None = None,
          tls_cert: str | None = None, tls_key: str | None = None, log_level: str = "info",
          ready: Any = None, limits: Limits | None = None) -> None:  # fmt: skip
    """Serve until SIGTERM/SIGINT. ``ready(paths)``: called once listening (for tests);
    ``limits``: timeouts (default :class:`Limits`). Raises KeyError (unknown ``group``),
    OSError (data directory or sockets), ValueError (``listen`` without ``tls_cert`` and
    ``tls_key``)."""
    # FastAPI only when serving: ``podnetctl trust add-token`` imports this module for its names
    from podnet.api.app import create_app

    gid = _gid(group)
    if listen and not (tls_cert and tls_key):
        raise ValueError("--listen needs --tls-cert and --tls-key (TCP is TLS only)")
    refuse_shared(manager.data_dir)  # before the store is created in it
    with open_store(manager.data_dir, busy_timeout=manager.busy_timeout):
        pass  # create and migrate the store before the first request
    secure_data_dir(manager.data_dir, gid)
    limits = limits or Limits()
    shares: Budget = budget()
    log_config = _log_config(log_level)
    socket_path = os.path.join(manager.data_dir, SOCKET_NAME)
    unix = unix_socket(socket_path, gid)
    servers: list[tuple[_Server, list[socket.socket]]] = [
        (_Server(_config(create_app(manager), log_level, log_config), cap=shares.unix,
                 limits=limits), [unix]),
    ]  # fmt: skip
    trust: Trust | None = None
    if listen:
        assert tls_cert and tls_key
        context = tls_context(tls_cert, tls_key)
        trust = Trust(manager, context)
        trust.refresh()
        with open_store(manager.data_dir, busy_timeout=manager.busy_timeout) as store, \
                store.write():  # fmt: skip
            store.set_state(LISTEN_STATE, listen)
            store.set_state(CERT_STATE, server_fingerprint(tls_cert))
        remote_app = create_app(manager, authorize=trust.authorize,
                                trust_changed=trust.refresh)
        servers.append((_Server(_config(remote_app, log_level, log_config), cap=shares.tcp,
                                limits=limits, context=context, trusted=trust.trusted),
                        [tcp_socket(listen)]))  # fmt: skip

    async def main() -> None:
        loop = asyncio.get_running_loop()
        # each request's operation runs in a worker thread holding the store's descriptors
        to_thread.current_default_thread_limiter().total_tokens = shares.threads

        def stop() -> None:
            for server, _ in servers:
                server.should_exit = True
            loop.call_later(SHUTDOWN_GRACE_SECONDS, drop_idle)

        def drop_idle() -> None:
            # asyncio waits up to ssl_shutdown_timeout for a TLS client to answer
            # close_notify: connections still open after the grace period are cut
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
        log.info("serving %s%s (nofile %d: at most %d unix and %d TCP connections, %d worker "
                 "threads)", socket_path, f" and {listen}" if listen else "", shares.nofile,
                 shares.unix, shares.tcp, shares.threads)  # fmt: skip
        if shares.nofile < LOW_NOFILE:
            log.warning("nofile %d is too low to keep descriptors free for every listener and "
                        "the store under load; give the server at least %d", shares.nofile,
                        LOW_NOFILE)  # fmt: skip
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
