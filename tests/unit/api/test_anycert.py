"""Letting any client certificate through the TLS handshake (:mod:`podnet.api.anycert`), and
what happens where that cannot be done: real TLS 1.3 handshakes over loopback between an
:class:`ssl.SSLContext` made as the API's listener makes it and clients with self-signed
certificates (one trusted, that is loaded as the context's verification store, one not)."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import sh
from podnet.api import anycert


def _cert_pair(directory: Path, name: str) -> tuple[str, str]:
    crt, key = directory / f"{name}.pem", directory / f"{name}.key"
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}")
    return str(crt), str(key)


def _server_context(certs: dict[str, tuple[str, str]]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(*certs["server"])
    context.verify_mode = ssl.CERT_OPTIONAL
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def _handshake(context: ssl.SSLContext, client: tuple[str, str]) -> Any:
    """One handshake with ``client``'s certificate: the DER the server saw, or the server's
    SSLError."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[Any] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                seen.append(tls.getpeercert(binary_form=True))
                tls.sendall(b"ok")
        except ssl.SSLError as err:
            seen.append(err)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    client_ctx.load_cert_chain(*client)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client_ctx.wrap_socket(raw) as tls:  # fmt: skip
            tls.recv(2)
    except (ssl.SSLError, OSError):
        pass
    thread.join(10)
    listener.close()
    return seen[0]


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, tuple[str, str]]:
    need("openssl")
    return {name: _cert_pair(tmp_path, f"pnany-{name}") for name in ("server", "trusted", "other")}


def _der(cert: tuple[str, str]) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(cert[0]).read_text())


def test_accept_any_lets_an_unknown_certificate_through(certs: dict[str, tuple[str, str]]
                                                        ) -> None:  # fmt: skip
    """This interpreter and libssl are ones whose layout is known; with :func:`accept_any` a
    certificate nobody trusted completes the handshake and the server sees exactly it (trust
    is decided per request, from its fingerprint). Without it, the same handshake fails."""
    lib = anycert._libssl()
    assert lib is not None and anycert.layout_known(lib)
    plain = _server_context(certs)
    assert isinstance(_handshake(plain, certs["other"]), ssl.SSLError)
    context = _server_context(certs)
    assert anycert.accept_any(context) is True
    assert _handshake(context, certs["other"]) == _der(certs["other"])
    with pytest.raises(ValueError, match="CERT_OPTIONAL"):
        anycert.accept_any(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))


@pytest.mark.parametrize("force", ["openssl", "python"])
def test_where_the_layout_is_not_known_it_fails_closed(certs: dict[str, tuple[str, str]],
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture,
                                                       force: str) -> None:  # fmt: skip
    """A libssl other than the one :mod:`ssl` reports, or a CPython outside the known range:
    nothing is read through the object, :func:`accept_any` answers False with a warning, an
    untrusted certificate fails the handshake and a trusted one (in the verification store)
    still passes."""
    if force == "openssl":
        monkeypatch.setattr(ssl, "OPENSSL_VERSION_NUMBER", ssl.OPENSSL_VERSION_NUMBER + 1)
    else:
        monkeypatch.setattr(anycert, "CPYTHON", ((2, 6), (2, 7)))
    reads: list[int] = []
    monkeypatch.setattr(anycert.ctypes.c_void_p, "from_address", reads.append, raising=False)
    context = _server_context(certs)
    context.load_verify_locations(cadata=Path(certs["trusted"][0]).read_text())
    with caplog.at_level(logging.WARNING, logger="podnet.api"):
        assert anycert.accept_any(context) is False
    assert reads == []
    assert "cannot let untrusted client certificates through the TLS handshake" in caplog.text
    assert isinstance(_handshake(context, certs["other"]), ssl.SSLError)
    assert _handshake(context, certs["trusted"]) == _der(certs["trusted"])
