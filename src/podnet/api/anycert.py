"""Letting every client certificate through the TLS handshake, as LXD's listener does
(Go's ``tls.RequestClientCert``: lxd/endpoints/network.go), so that trust is decided per
request from the certificate's fingerprint (:mod:`podnet.api.guard`): an untrusted client must
get LXD's untrusted ``GET /1.0`` and may redeem a trust token (``POST /1.0/certificates``),
which is how ``lxc remote add`` joins.

Python's :mod:`ssl` has no such mode: with ``CERT_OPTIONAL`` a certificate that the context
cannot verify fails the handshake, and ``CERT_NONE`` never asks for one. OpenSSL has it:
``SSL_CTX_set_cert_verify_callback`` replaces the chain verification of the peer's
certificate (OpenSSL's ssl/ssl_cert.c ``ssl_verify_cert_chain``), and a callback that returns 1
accepts whatever was presented; the certificate is still the one whose private key signed the
handshake (TLS 1.3 ``CertificateVerify``, RFC 8446 §4.4.3), so its fingerprint identifies
the client. The callback is installed on the ``SSL_CTX`` of a Python :class:`ssl.SSLContext`
through :mod:`ctypes`, on the libssl that :mod:`ssl` itself loaded.

Finding that ``SSL_CTX``: CPython's ``PySSLContext`` starts with the object header and then
the ``SSL_CTX *`` (Modules/_ssl.c, 3.7 to 3.13). That layout is not an API, so nothing is read
through it unless, first, the interpreter is a CPython of :data:`CPYTHON` with the GIL (a
free-threaded build has another object header), and the libssl found reports the very
OpenSSL :mod:`ssl` reports (``OpenSSL_version_num() == ssl.OPENSSL_VERSION_NUMBER``); then
the pointer is checked before anything is written: OpenSSL must report, for it, the options
and the verify mode the Python object reports. When anything does not match, :func:`accept_any`
returns False, logs a warning and leaves the context as it was (untrusted certificates then
fail the handshake; trusted ones, loaded as the context's verification store, still pass).
"""

from __future__ import annotations

import ctypes
import logging
import ssl
import sys
import sysconfig

__all__ = ["CPYTHON", "accept_any"]

#: CPython versions (first, last; major and minor) whose ``PySSLContext`` layout is known.
CPYTHON = ((3, 8), (3, 13))

log = logging.getLogger("podnet.api")

_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _accept(store_ctx: int | None, arg: int | None) -> int:
    return 1  # the chain is not judged here: the fingerprint is, per request


#: Kept for the life of the process: OpenSSL holds the pointer.
_CALLBACK = _VERIFY_CB(_accept)


def _libssl() -> ctypes.CDLL | None:
    """The libssl mapped into this process by :mod:`ssl` (imported above; its path from
    /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libssl.so" in line}
    except OSError:
        return None
    if len(paths) != 1:
        return None
    return ctypes.CDLL(paths.pop())


def layout_known(lib: ctypes.CDLL) -> bool:
    """Whether this interpreter and ``lib`` are ones whose ``PySSLContext`` layout is known
    (see the module): checked before any read through it."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    if not CPYTHON[0] <= sys.version_info[:2] <= CPYTHON[1]:
        return False
    lib.OpenSSL_version_num.restype = ctypes.c_ulong
    lib.OpenSSL_version_num.argtypes = []
    return bool(lib.OpenSSL_version_num() == ssl.OPENSSL_VERSION_NUMBER)


def _ssl_ctx(context: ssl.SSLContext, lib: ctypes.CDLL) -> int | None:
    """The ``SSL_CTX *`` of ``context``, when OpenSSL confirms it (see the module)."""
    if not layout_known(lib):
        return None
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer:
        return None
    lib.SSL_CTX_get_options.restype = ctypes.c_uint64
    lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    modes = {ssl.CERT_NONE: 0, ssl.CERT_OPTIONAL: 1, ssl.CERT_REQUIRED: 3}
    if lib.SSL_CTX_get_options(pointer) != int(context.options):
        return None
    if lib.SSL_CTX_get_verify_mode(pointer) != modes[context.verify_mode]:
        return None
    return pointer


def accept_any(context: ssl.SSLContext) -> bool:
    """Make ``context`` (a server context with ``CERT_OPTIONAL``) accept any client
    certificate; True when done, False (context unchanged, a warning logged) when this
    interpreter or libssl does not allow it."""
    if context.verify_mode != ssl.CERT_OPTIONAL:
        raise ValueError("accept_any needs a context with verify_mode CERT_OPTIONAL")
    try:
        lib = _libssl()
        pointer = _ssl_ctx(context, lib) if lib is not None else None
        if lib is None or pointer is None:
            log.warning("cannot let untrusted client certificates through the TLS handshake "
                        "here: they are refused there (lxc remote add with a token needs it)")
            return False
        lib.SSL_CTX_set_cert_verify_callback.restype = None
        lib.SSL_CTX_set_cert_verify_callback.argtypes = [ctypes.c_void_p, _VERIFY_CB,
                                                         ctypes.c_void_p]  # fmt: skip
        lib.SSL_CTX_set_cert_verify_callback(pointer, _CALLBACK, None)
    except (OSError, AttributeError, ValueError) as err:
        log.warning("cannot let untrusted client certificates through the TLS handshake: %s",
                    err)  # fmt: skip
        return False
    return True
