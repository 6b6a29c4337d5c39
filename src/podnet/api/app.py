"""The REST API as LXD serves it (docs/sources.md, "LXD network forwards"): routes, request and
response shapes, envelopes, ETags — and what LXD 5.0.2 gets wrong, done right: validation errors
are 400 (not 500), ``If-Match`` is enforced on forwards as on networks (412), a PATCH without
``config`` is fine, unknown fields are refused (400).

PUT and PATCH take the whole object as GET returns it (pylxd's ``save()`` sends it back): its
read-only fields (a network's ``name``, ``type``, ``managed``, ``status``, ``locations``,
``used_by``; a forward's ``listen_address``, ``location``) are accepted when they equal the
stored value and refused (400 ``Read-only field "<name>" cannot be changed``) when they differ.
LXD decodes the body into its ``NetworkPut``/``NetworkForwardPut`` and ignores them silently, so
it has no message of its own; a field LXD does not define at all is still 400 ``Unknown field``.

``POST /1.0/certificates`` is LXD's (:mod:`podnet.api.certificates`): an untrusted TLS client
redeems a trust token (:mod:`podnet.api.tokens`), a trusted one adds a certificate. OVSDB
failures answer the remote and a reason of a fixed set (:mod:`podnet.ovn.ovsdb`), all OVSDB
transactions of one request sharing :data:`OVSDB_SECONDS`.

Failures that are not the client's (kernel, store, anything unexpected) answer a short reason
(``Failed applying the change to the kernel; see the server log``); the tool's stderr, paths
and exception types go to the server's log only. Envelopes: :mod:`podnet.api.envelopes`; what
may reach the routes at all (trust, content type, size): :mod:`podnet.api.guard`.

POST answers 201 with a ``Location`` and ``metadata: null``; PUT, PATCH and DELETE answer 200
with ``metadata: {}``. Single-object GETs carry ``ETag: "<sha256 hex>"`` computed as LXD
computes it, so the ``lxc`` client's ``If-Match`` matches. Every handler is one call into
:class:`podnet.manage.manager.Manager`, the same operations ``podnetctl network`` runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from podnet import __version__
from podnet.api import certificates
from podnet.api.bodies import (
    ERRORS,
    FORWARD_READ_ONLY,
    NETWORK_READ_ONLY,
    Envelope,
    ForwardPut,
    ForwardsPost,
    NetworkPut,
    NetworksPost,
    ServerPut,
    check_read_only,
    ports,
    validation_message,
)
from podnet.api.document import API_EXTENSIONS, default_project, server_document
from podnet.api.envelopes import error, sync
from podnet.api.guard import Guard
from podnet.errors import IO_FAILURE, KERNEL_FAILURE, TRY_AGAIN_LATER, CNIError
from podnet.manage import server_config
from podnet.manage.manager import Manager
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward
from podnet.ovn.ovsdb import Unreachable, shared_deadline
from podnet.reconcile import TableOwned

__all__ = ["API_EXTENSIONS", "create_app"]

log = logging.getLogger("podnet.api")

#: What the client is told when a failure is not its own (code of the CNIError → reason); the
#: details go to the server's log.
SERVER_SIDE = {
    KERNEL_FAILURE: "Failed applying the change to the kernel; see the server log",
    IO_FAILURE: "Failed reading or writing the state database; see the server log",
    TRY_AGAIN_LATER: "The state database is busy; try again later",
}
INTERNAL = "Internal server error; see the server log"
#: Seconds all OVSDB transactions of one request share (the NB's remotes split them): a
#: request never holds a worker thread for a timeout per remote and per read.
OVSDB_SECONDS = 5.0


class _OvsdbDeadline:
    """ASGI middleware: each HTTP request's OVSDB transactions share :data:`OVSDB_SECONDS`
    from the request's start (:func:`podnet.ovn.ovsdb.shared_deadline`; the handler's worker
    thread runs in a copy of this context)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with shared_deadline(OVSDB_SECONDS) as deadline:
            deadline.left()  # counted from the request's start: waits for a thread or the lock
            await self.app(scope, receive, send)



def create_app(manager: Manager, *, authorize: Callable[[Scope], bool] | None = None,
               trust_changed: Callable[[], None] | None = None) -> FastAPI:  # fmt: skip
    """The application for ``manager``'s store. ``authorize(scope)``: whether the request may
    go on (the TLS listener's trust check; None: every request is trusted, the unix socket's
    case); refused requests get 403 and the connection is closed (``GET /1.0`` answers the
    untrusted document, ``POST /1.0/certificates`` takes a trust token), see
    :class:`podnet.api.guard.Guard`. ``trust_changed()``: called once a certificate was
    trusted here, so that the listener knows it before its next request."""
    app = FastAPI(
        title="podnet",
        version=__version__,
        description="LXD-compatible REST API for podnet's networks and network forwards.",
        docs_url=None,
        redoc_url=None,
    )

    app.add_middleware(_OvsdbDeadline)
    app.add_middleware(Guard, authorize=authorize, routes=app.router.routes,
                       untrusted=lambda: server_document(False, manager.data_dir),
                       open_to_untrusted=[("POST", "/1.0/certificates")])  # fmt: skip

    @app.exception_handler(NetworkError)
    async def network_error(request: Request, err: NetworkError) -> JSONResponse:
        if err.detail:  # what a tool or a remote said: the log's, never the client's
            log.warning("%s %s failed: %s\n%s", request.method, request.url.path, err,
                        err.detail)  # fmt: skip
        return error(err.status, str(err))

    @app.exception_handler(CNIError)
    async def cni_error(request: Request, err: CNIError) -> JSONResponse:
        # the message and details name tools, their stderr, paths: the log gets them
        busy = err.code == TRY_AGAIN_LATER
        log.log(logging.WARNING if busy else logging.ERROR, "%s %s failed: %s (code %d): %s%s",
                request.method, request.url.path, type(err).__name__, err.code, err.msg,
                f"\n{err.details}" if err.details else "",
                exc_info=None if busy else err)  # fmt: skip
        if isinstance(err, Unreachable):  # msg: the remotes and a reason of a fixed set
            return error(503, err.msg)
        if isinstance(err, TableOwned):  # this server's data dir is not the node's store
            return error(409, "Table inet podnet of this node belongs to another podnet store; "
                         "see the server log")  # fmt: skip
        status = 503 if busy else 500
        return error(status, SERVER_SIDE.get(err.code, INTERNAL))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError) -> JSONResponse:
        return error(400, validation_message(err))

    @app.exception_handler(Exception)
    async def internal(request: Request, err: Exception) -> JSONResponse:
        # Starlette re-raises the exception after this answer: uvicorn logs its traceback
        log.error("%s %s failed: %s: %s", request.method, request.url.path,
                  type(err).__name__, err)  # fmt: skip
        return error(500, INTERNAL)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == 405:
            return error(501, "not implemented")
        return error(err.status_code, "not found" if err.status_code == 404 else str(err.detail))

    def check_target(target: str | None) -> None:
        manager.check_target(target)

    # -- server --------------------------------------------------------------------------------
    @app.get("/", response_model=Envelope, responses=ERRORS, summary="The API versions")
    def root() -> JSONResponse:
        return sync(["/1.0"])

    @app.get("/1.0", response_model=Envelope, responses=ERRORS, summary="The server document")
    def server(request: Request, target: str | None = None) -> JSONResponse:
        check_target(target)
        config, tag = server_config.read(manager)
        return sync(server_document(True, manager.data_dir, config), headers={"ETag": f'"{tag}"'})

    def _update_server(body: ServerPut, patch: bool, if_match: str | None,
                       target: str | None) -> JSONResponse:  # fmt: skip
        check_target(target)
        server_config.update(manager, body.config or {}, patch=patch, etag=if_match or None)
        return sync({})

    @app.put("/1.0", response_model=Envelope, responses=ERRORS,
             summary="Replace the server config (network.ovn.*)")  # fmt: skip
    def put_server(body: ServerPut, if_match: str | None = Header(None),
                   target: str | None = None) -> JSONResponse:  # fmt: skip
        return _update_server(body, False, if_match, target)

    @app.patch("/1.0", response_model=Envelope, responses=ERRORS,
               summary="Merge into the server config")  # fmt: skip
    def patch_server(body: ServerPut, if_match: str | None = Header(None),
                     target: str | None = None) -> JSONResponse:  # fmt: skip
        return _update_server(body, True, if_match, target)

    certificates.add_routes(app, manager, authorize, trust_changed)

    @app.get("/1.0/projects", response_model=Envelope, responses=ERRORS,
             summary="Projects (only 'default')")  # fmt: skip
    def projects(recursion: int = Query(0, ge=0, le=2)) -> JSONResponse:
        if recursion:
            return sync([default_project()])
        return sync(["/1.0/projects/default"])

    @app.get("/1.0/projects/{name}", response_model=Envelope, responses=ERRORS)
    def project(name: str) -> JSONResponse:
        if name != "default":
            return error(404, "Project not found")
        return sync(default_project(), headers={"ETag": '"default"'})

    # -- networks -------------------------------------------------------------------------------
    @app.get("/1.0/networks", response_model=Envelope, responses=ERRORS,
             summary="List networks")  # fmt: skip
    def list_networks(recursion: int = Query(0, ge=0, le=2),
                      target: str | None = None) -> JSONResponse:  # fmt: skip
        nets = manager.list_networks(target)
        if recursion:
            return sync([n.to_api() for n in nets])
        return sync([f"/1.0/networks/{quote(n.name, safe='')}" for n in nets])

    @app.post("/1.0/networks", status_code=201, response_model=Envelope, responses=ERRORS,
              summary="Create a bridge network")  # fmt: skip
    def create_network(body: NetworksPost, target: str | None = None) -> JSONResponse:
        manager.create_network(body.name, type=body.type or "bridge",
                               description=body.description or "", config=body.config or {},
                               target=target)  # fmt: skip
        location = f"/1.0/networks/{quote(body.name, safe='')}"
        return sync(None, 201, {"Location": location})

    @app.get("/1.0/networks/{name}", response_model=Envelope, responses=ERRORS,
             summary="One network (with its ETag)")  # fmt: skip
    def get_network(name: str, target: str | None = None) -> JSONResponse:
        net = manager.get_network(name, target)
        return sync(net.to_api(), headers={"ETag": f'"{net.etag()}"'})

    def _update_network(name: str, body: NetworkPut, patch: bool, if_match: str | None,
                        target: str | None) -> Any:  # fmt: skip
        if any(getattr(body, f) is not None for f in NETWORK_READ_ONLY):
            # name, type, managed, status and locations never change; used_by may, but it is
            # only compared, never applied, so a check outside the write lock suffices
            check_read_only(body, manager.get_network(name, target).to_api(), NETWORK_READ_ONLY)
        manager.update_network(name, description=body.description, config=body.config,
                               patch=patch, etag=if_match or None, target=target)  # fmt: skip
        return sync({})

    @app.put("/1.0/networks/{name}", response_model=Envelope, responses=ERRORS,
             summary="Replace a network's description and config")  # fmt: skip
    def put_network(name: str, body: NetworkPut, if_match: str | None = Header(None),
                    target: str | None = None) -> JSONResponse:  # fmt: skip
        return _update_network(name, body, False, if_match, target)  # type: ignore[no-any-return]

    @app.patch("/1.0/networks/{name}", response_model=Envelope, responses=ERRORS,
               summary="Merge into a network's config")  # fmt: skip
    def patch_network(name: str, body: NetworkPut, if_match: str | None = Header(None),
                      target: str | None = None) -> JSONResponse:  # fmt: skip
        return _update_network(name, body, True, if_match, target)  # type: ignore[no-any-return]

    @app.delete("/1.0/networks/{name}", response_model=Envelope, responses=ERRORS,
                summary="Delete a network with its forwards")  # fmt: skip
    def delete_network(name: str, target: str | None = None) -> JSONResponse:
        manager.delete_network(name, target)
        return sync({})

    # -- forwards -------------------------------------------------------------------------------
    base = "/1.0/networks/{name}/forwards"

    @app.get(base, response_model=Envelope, responses=ERRORS, summary="List forwards")
    def list_forwards(name: str, recursion: int = Query(0, ge=0, le=2),
                      target: str | None = None) -> JSONResponse:  # fmt: skip
        check_target(target)
        forwards = manager.list_forwards(name)
        if recursion:
            return sync([f.to_api() for f in forwards])
        prefix = f"/1.0/networks/{quote(name, safe='')}/forwards/"
        return sync([prefix + quote(f.listen_address, safe=":") for f in forwards])

    @app.post(base, status_code=201, response_model=Envelope, responses=ERRORS,
              summary="Create a forward")  # fmt: skip
    def create_forward(name: str, body: ForwardsPost, target: str | None = None) -> JSONResponse:
        check_target(target)
        created = manager.create_forward(name, Forward(
            body.listen_address, body.description or "", dict(body.config or {}),
            ports(body.ports) or []))  # fmt: skip
        location = (f"/1.0/networks/{quote(name, safe='')}/forwards/"
                    f"{quote(created.listen_address, safe=':')}")  # fmt: skip
        return sync(None, 201, {"Location": location})

    @app.get(base + "/{listen_address}", response_model=Envelope, responses=ERRORS,
             summary="One forward (with its ETag)")  # fmt: skip
    def get_forward(name: str, listen_address: str, target: str | None = None) -> JSONResponse:
        check_target(target)
        forward = manager.get_forward(name, listen_address)
        return sync(forward.to_api(), headers={"ETag": f'"{forward.etag()}"'})

    def _update_forward(name: str, listen: str, body: ForwardPut, patch: bool,
                        if_match: str | None, target: str | None) -> JSONResponse:  # fmt: skip
        check_target(target)
        if any(getattr(body, f) is not None for f in FORWARD_READ_ONLY):
            current = manager.get_forward(name, listen).to_api()  # both fields never change
            try:
                check_read_only(body, current, FORWARD_READ_ONLY)
            except NetworkError as err:
                raise NetworkError(f"Failed updating forward: {err}") from None
        manager.update_forward(name, listen, description=body.description, config=body.config,
                               ports=ports(body.ports), patch=patch,
                               etag=if_match or None)  # fmt: skip
        return sync({})

    @app.put(base + "/{listen_address}", response_model=Envelope, responses=ERRORS,
             summary="Replace a forward's description, config and ports")  # fmt: skip
    def put_forward(name: str, listen_address: str, body: ForwardPut,
                    if_match: str | None = Header(None),
                    target: str | None = None) -> JSONResponse:  # fmt: skip
        return _update_forward(name, listen_address, body, False, if_match, target)

    @app.patch(base + "/{listen_address}", response_model=Envelope, responses=ERRORS,
               summary="Merge into a forward (config keys; ports and description when given)")
    def patch_forward(name: str, listen_address: str, body: ForwardPut,
                      if_match: str | None = Header(None),
                      target: str | None = None) -> JSONResponse:  # fmt: skip
        return _update_forward(name, listen_address, body, True, if_match, target)

    @app.delete(base + "/{listen_address}", response_model=Envelope, responses=ERRORS,
                summary="Delete a forward")  # fmt: skip
    def delete_forward(name: str, listen_address: str,
                       target: str | None = None) -> JSONResponse:  # fmt: skip
        check_target(target)
        manager.delete_forward(name, listen_address)
        return sync({})

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> Response:
        return JSONResponse(app.openapi())

    return app

