"""Trust tokens: how a new client gets its certificate trusted without copying it to the node,
as with LXD (``lxc config trust add`` prints a token; ``lxc remote add NAME TOKEN``, or ``lxc
remote add NAME https://… --password TOKEN``, or the password prompt, presents it).

The token is LXD's certificate add token (shared/api/certificate.go ``CertificateAddToken``):
base64 (standard alphabet, padded) of the JSON object ``{"client_name", "fingerprint",
"addresses", "secret", "expires_at"}`` — the client's name, the SHA-256 fingerprint of the
server's TLS certificate (the client pins it), the server's ``ADDR:PORT`` addresses, a random
secret (32 bytes, hex), and the expiry (RFC 3339). The client, still untrusted, sends the whole
token as ``password`` (lxc 5.0) or ``trust_token`` (later LXD) of ``POST /1.0/certificates``
over a TLS connection made with its own certificate; that certificate is then trusted under
the token's client name (lxd/certificates.go ``certificatesPost``).

The node keeps only the secret's SHA-256, the name and the expiry (store table
``trust_tokens``). A token works once: redeeming removes it, expired or not.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from podnet import checked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.store import Store

__all__ = ["Token", "check_certificate", "decode", "issue", "redeem", "parse_expiry", "Refused"]

#: Longest token text accepted from a client (a token with a few addresses is ~400 bytes).
MAX_TOKEN = 8192
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Refused(Exception):
    """A token that does not let the client in; ``str()`` is the client's message."""


@dataclass(frozen=True, slots=True)
class Token:
    client_name: str
    fingerprint: str
    addresses: list[str]
    secret: str
    expires_at: int  # Unix seconds

    def encode(self) -> str:
        """The token as ``lxc`` reads it (``shared.CertificateTokenDecode``)."""
        expires = datetime.fromtimestamp(self.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"client_name": self.client_name, "fingerprint": self.fingerprint,
               "addresses": self.addresses, "secret": self.secret,
               "expires_at": expires}  # fmt: skip
        return base64.b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode()


def decode(text: str) -> Token | None:
    """The token in ``text``, or None when it is not one (LXD's checks: base64 JSON with a
    client name, at least one address, a secret and a fingerprint)."""
    if not text or len(text) > MAX_TOKEN:
        return None
    try:
        doc = json.loads(base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    name, fp, secret = doc.get("client_name"), doc.get("fingerprint"), doc.get("secret")
    addresses = doc.get("addresses")
    if not (isinstance(name, str) and name and isinstance(fp, str) and fp
            and isinstance(secret, str) and secret and isinstance(addresses, list)
            and addresses and all(isinstance(a, str) for a in addresses)):  # fmt: skip
        return None
    return Token(name, fp, addresses, secret, 0)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_expiry(text: str) -> int:
    """``30s``, ``15m``, ``1h``, ``7d`` (a positive whole number and a unit) as seconds;
    ValueError otherwise."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not (number.isascii() and number.isdigit()) or int(number) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 1h or 7d")
    return int(number) * _UNITS[unit]


def issue(store: Store, name: str, fingerprint: str, addresses: list[str], seconds: int, *,
          now: float | None = None) -> Token:  # fmt: skip
    """A new token for client ``name``, recorded in ``store`` (its own write transaction),
    valid ``seconds`` from ``now``. ``fingerprint``: the server certificate's;
    ``addresses``: ``ADDR:PORT`` texts."""
    at = int(time.time() if now is None else now)
    token = Token(name, fingerprint, list(addresses), secrets.token_hex(32), at + seconds)
    with store.write():
        store.trust.add_token(_digest(token.secret), name, token.expires_at, at)
    return token


def redeem(store: Store, presented: str, *, now: float | None = None,
           trust: tuple[str, str] | None = None) -> tuple[str, bool]:
    """Use up the token ``presented`` (its whole text) and, with ``trust`` (``(fingerprint,
    pem)`` of the client's certificate), trust that certificate under the token's client name
    in the same write transaction: a token is never spent without its certificate trusted, nor
    the reverse. Returns ``(client name, whether the certificate was added)`` (False: it was
    trusted already, or no ``trust``). Refused (``not authorized``, LXD's 403 text) when it is
    not a token or not a pending one, ``Token has expired`` when its time is over (it is used
    up all the same, and nothing is trusted)."""
    token = decode(presented)
    if token is None:
        raise Refused("not authorized")
    digest = _digest(token.secret)
    if not store.trust.has_token(digest):  # no write lock for a guess: plugins share it
        raise Refused("not authorized")
    at = time.time() if now is None else now
    added = False
    with store.write():
        found = store.trust.redeem(digest)
        if found is not None and at < found[1] and trust is not None:
            added = store.trust.add(trust[0], found[0], trust[1])
    if found is None:
        raise Refused("not authorized")
    if at >= found[1]:
        raise Refused("Token has expired")
    return found[0], added


def check_certificate(der: bytes) -> None:
    """ValueError (its text the reason, one line) unless ``der`` is exactly one X.509
    certificate in DER (RFC 5280 §4.1), as OpenSSL parses it for the TLS listener's
    verification store: what the trust store keeps must load there and in every client that
    lists it (LXD: ``x509.ParseCertificate``, lxd/certificates.go ``certificatesPost``)."""
    if not der.startswith(b"\x30"):
        raise ValueError("not a DER certificate")
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cadata=der)
    except (ssl.SSLError, ValueError):
        raise ValueError("not a DER certificate") from None
    if probe.get_ca_certs(binary_form=True) != [der]:
        raise ValueError("not exactly one DER certificate")


def listen_addresses(listen: str, node_addresses: list[str]) -> list[str]:
    """What a token lists for a server listening on ``listen`` (``ADDR:PORT``, ``[v6]:PORT``):
    that address, or for a wildcard (``0.0.0.0``, ``::``) each of ``node_addresses`` of a
    family it covers (``::`` covers both), as lxd/util ``ListenAddresses`` does."""
    host, _, port = listen.rpartition(":")
    addr = checked.ip(host.removeprefix("[").removesuffix("]") or "::")
    if not addr.is_unspecified:
        found = [addr]
    else:
        found = []
        for text in node_addresses:
            node = checked.ip(text)
            if addr.version == 6 or node.version == 4:
                found.append(node)
    return [f"[{a}]:{port}" if a.version == 6 else f"{a}:{port}" for a in found]
