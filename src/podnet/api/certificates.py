"""``/1.0/certificates``: the trusted client certificates, as LXD's lxd/certificates.go serves
them for what podnet supports (client certificates, trust tokens of :mod:`podnet.api.tokens`)."""

from __future__ import annotations

import base64
import binascii
import logging
import ssl
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from starlette.types import Scope

from podnet.api import tokens
from podnet.api.bodies import ERRORS, CertificatesPost, Envelope
from podnet.api.envelopes import error, sync
from podnet.api.guard import REFUSALS, client_key, describe_client
from podnet.api.protocol import fingerprint
from podnet.checked import one_line, show
from podnet.manage.manager import Manager

__all__ = ["add_routes"]

log = logging.getLogger("podnet.api")


def add_routes(app: FastAPI, manager: Manager, authorize: Callable[[Scope], bool] | None,
               trust_changed: Callable[[], None] | None) -> None:  # fmt: skip
    """Add the certificate routes to ``app`` (``authorize``, ``trust_changed``: see
    :func:`podnet.api.app.create_app`)."""

    @app.post("/1.0/certificates", status_code=201, response_model=Envelope, responses=ERRORS,
              summary="Trust the client's certificate (a trust token) or a given one")
    def add_certificate(body: CertificatesPost, request: Request) -> JSONResponse:
        return _add_certificate(manager, body, request.scope,
                                authorize is None or authorize(request.scope),
                                trust_changed)  # fmt: skip

    def _certificates() -> list[dict[str, Any]]:
        with manager.store() as store:
            return [{"name": name, "type": "client", "restricted": False, "projects": [],
                     "certificate": pem, "fingerprint": fp}
                    for fp, name, pem in store.trust.all()]  # fmt: skip

    @app.get("/1.0/certificates", response_model=Envelope, responses=ERRORS,
             summary="The trusted certificates")  # fmt: skip
    def list_certificates(recursion: int = Query(0, ge=0, le=2)) -> JSONResponse:
        found = _certificates()
        if recursion:
            return sync(found)
        return sync([f"/1.0/certificates/{c['fingerprint']}" for c in found])

    @app.get("/1.0/certificates/{fingerprint}", response_model=Envelope, responses=ERRORS,
             summary="One trusted certificate (by fingerprint)")  # fmt: skip
    def get_certificate(fingerprint: str) -> JSONResponse:
        found = [c for c in _certificates() if c["fingerprint"] == fingerprint.lower()]
        if not found:
            return error(404, "Certificate not found")
        return sync(found[0])

    @app.delete("/1.0/certificates/{fingerprint}", response_model=Envelope, responses=ERRORS,
                summary="Stop trusting a certificate (by fingerprint)")  # fmt: skip
    def delete_certificate(fingerprint: str) -> JSONResponse:
        prefix = fingerprint.lower()
        if not 12 <= len(prefix) <= 64 or any(c not in "0123456789abcdef" for c in prefix):
            return error(404, "Certificate not found")  # a prefix, as LXD takes, of 12 at least
        with manager.store() as store, store.write():
            removed = store.trust.remove(prefix)
        if not removed:
            return error(404, "Certificate not found")
        if len(removed) > 1:
            return error(400, "More than one certificate matches: give more of the fingerprint")
        if trust_changed is not None:
            trust_changed()
        return sync({})


def _client_certificate(scope: Scope) -> str | None:
    """The PEM certificate the request's TLS connection presented, None without one."""
    chain = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert_chain") or []
    return str(chain[0]) if chain else None


def _add_certificate(manager: Manager, body: CertificatesPost, scope: Scope, trusted: bool,
                     trust_changed: Callable[[], None] | None) -> JSONResponse:  # fmt: skip
    """``POST /1.0/certificates`` as lxd/certificates.go ``certificatesPost`` answers it for
    what podnet supports: an untrusted client redeeming a trust token gets its connection's
    certificate trusted (403 ``not authorized`` for no token or an unknown one, ``Token has
    expired``; the token used up and the certificate trusted in one write); a trusted client
    adds a ``certificate`` (400 ``Invalid certificate material: …`` unless it is one X.509
    certificate in DER, 400 ``Client is already trusted`` without one); a trusted client
    presenting a ``trust_token`` has it checked and used up and gets 409 ``Client is already
    trusted`` (403 for a token that is not pending). Tokens are issued by ``podnetctl trust
    add-token`` (400 for ``token``)."""
    if body.type not in ("", "client"):  # "": the token's type (lxc 5.0 sends none)
        return error(400, f"Only client certificates are supported, not {show(body.type, 40)}")
    if trusted:
        if body.token:
            return error(400, "Tokens are issued on the node: podnetctl trust add-token NAME")
        if body.trust_token:  # LXD: the token is checked and used up, the client told so
            try:
                with manager.store() as store:
                    tokens.redeem(store, body.trust_token)
            except tokens.Refused as err:
                return error(403, str(err))
            return error(409, "Client is already trusted")
        if not body.certificate:
            return error(400, "Client is already trusted")
        try:
            der = base64.b64decode(body.certificate, validate=True)
        except (binascii.Error, ValueError):
            return error(400, "Invalid certificate material: not base64")
        try:
            tokens.check_certificate(der)
        except ValueError as err:
            return error(400, f"Invalid certificate material: {err}")
        name = body.name or "client"
        if one_line(name) != name or len(name) > 255:
            return error(400, "Invalid certificate name: one line of at most 255 characters")
        fp = fingerprint(der)
        with manager.store() as store, store.write():
            added = store.trust.add(fp, name, ssl.DER_cert_to_PEM_cert(der))
    else:
        presented = body.trust_token or body.password
        pem = _client_certificate(scope)
        if not presented:
            REFUSALS.warn(client_key(scope), "refused POST /1.0/certificates of untrusted "
                          "client %s: no trust "
                          "token", describe_client(scope))  # fmt: skip
            return error(403, "not authorized", close=True)
        if pem is None:
            return error(400, "No client certificate provided", close=True)
        der = ssl.PEM_cert_to_DER_cert(pem)
        fp = fingerprint(der)
        try:
            with manager.store() as store:
                name, added = tokens.redeem(store, presented,
                                            trust=(fp, ssl.DER_cert_to_PEM_cert(der)))
        except tokens.Refused as err:
            REFUSALS.warn(client_key(scope), "refused a trust token from untrusted client %s: %s",
                          describe_client(scope), err)  # fmt: skip
            return error(403, str(err), close=True)
    if not added:
        return error(409, "Certificate already in trust store")
    log.info("trusted certificate %s as %r (%s)", fp, name,
             "trust token" if not trusted else "added by a trusted client")  # fmt: skip
    if trust_changed is not None:
        trust_changed()
    return sync(None, 201, {"Location": f"/1.0/certificates/{fp}"})
