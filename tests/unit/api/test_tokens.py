"""Trust tokens (:mod:`podnet.api.tokens`) without a server: LXD's encoding, what is accepted as
one, expiry texts, the addresses a wildcard listener lists, and redemption in a real store
(single use, expired ones used up too, only the secret's hash kept)."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import ssl
import subprocess
from pathlib import Path

import pytest

from envgate import need
from podnet.api import tokens
from podnet.store import open_store


def test_encoding_is_lxds_and_decodes_back() -> None:
    token = tokens.Token("laptop", "ab" * 32, ["192.0.2.1:8443", "[2001:db8::1]:8443"], "cd" * 32,
                         1_900_000_000)
    doc = json.loads(base64.b64decode(token.encode(), validate=True))
    assert doc == {"client_name": "laptop", "fingerprint": "ab" * 32,
                   "addresses": ["192.0.2.1:8443", "[2001:db8::1]:8443"], "secret": "cd" * 32,
                   "expires_at": "2030-03-17T17:46:40Z"}
    back = tokens.decode(token.encode())
    assert back is not None and (back.client_name, back.secret) == ("laptop", "cd" * 32)


@pytest.mark.parametrize("text", [
    "", "not base64!", base64.b64encode(b"[]").decode(), base64.b64encode(b"{}").decode(),
    base64.b64encode(json.dumps({"client_name": "x", "fingerprint": "f", "addresses": [],
                                 "secret": "s"}).encode()).decode(),
    base64.b64encode(json.dumps({"client_name": "x", "fingerprint": "f", "addresses": [1],
                                 "secret": "s"}).encode()).decode(),
    base64.b64encode(json.dumps({"client_name": "", "fingerprint": "f", "addresses": ["a"],
                                 "secret": "s"}).encode()).decode(),
    "A" * (tokens.MAX_TOKEN + 4),
])  # fmt: skip
def test_what_is_not_a_token(text: str) -> None:
    assert tokens.decode(text) is None


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("15m", 900), ("1h", 3600),
                                               ("7d", 604800)])  # fmt: skip
def test_expiry(text: str, seconds: int) -> None:
    assert tokens.parse_expiry(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-1h", "1y", "h", "1.5h", "１h"])
def test_bad_expiry(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        tokens.parse_expiry(text)


def test_listen_addresses() -> None:
    node = ["192.0.2.5", "2001:db8::5"]
    assert tokens.listen_addresses("192.0.2.9:8443", node) == ["192.0.2.9:8443"]
    assert tokens.listen_addresses("[2001:db8::9]:8443", node) == ["[2001:db8::9]:8443"]
    assert tokens.listen_addresses("0.0.0.0:8443", node) == ["192.0.2.5:8443"]
    assert tokens.listen_addresses("[::]:8443", node) == ["192.0.2.5:8443", "[2001:db8::5]:8443"]


def test_redeem_once_and_expired_ones_are_used_up(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        good = tokens.issue(store, "alice", "ab" * 32, ["192.0.2.1:8443"], 3600, now=1000)
        late = tokens.issue(store, "bob", "ab" * 32, ["192.0.2.1:8443"], 60, now=1000)
        kept = [r[0] for r in store.conn.execute("SELECT secret_sha256 FROM trust_tokens")]
        assert sorted(kept) == sorted(hashlib.sha256(t.secret.encode()).hexdigest()
                                      for t in (good, late))
        assert good.secret not in json.dumps(store.conn.execute(
            "SELECT * FROM trust_tokens").fetchall())  # only the hash is kept
        assert tokens.redeem(store, good.encode(), now=2000) == ("alice", False)
        with pytest.raises(tokens.Refused, match="not authorized"):
            tokens.redeem(store, good.encode(), now=2000)  # single use
        with pytest.raises(tokens.Refused, match="Token has expired"):
            tokens.redeem(store, late.encode(), now=2000)
        with pytest.raises(tokens.Refused, match="not authorized"):
            tokens.redeem(store, late.encode(), now=1001)  # used up by the expired attempt
        forged = tokens.Token("alice", "ab" * 32, ["192.0.2.1:8443"], "00" * 32, 9_999_999_999)
        with pytest.raises(tokens.Refused, match="not authorized"):
            tokens.redeem(store, forged.encode(), now=1001)
        assert store.trust.tokens() == []


def _self_signed(tmp: Path) -> bytes:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(tmp / "k.pem"),
                    "-out", str(tmp / "c.pem"), "-days", "2", "-subj", "/CN=pntok"],
                   check=True, capture_output=True)  # fmt: skip
    return ssl.PEM_cert_to_DER_cert((tmp / "c.pem").read_text())


def test_redeeming_trusts_in_the_same_transaction(tmp_path: Path) -> None:
    """The token is used up and the certificate trusted in one write: when the insert of the
    certificate fails (an SQLite trigger aborting it, as a full disk would), the token is still
    pending and nothing is trusted; then it works once."""
    need("openssl")
    der = _self_signed(tmp_path)
    pem, fp = ssl.DER_cert_to_PEM_cert(der), hashlib.sha256(der).hexdigest()
    with open_store(str(tmp_path)) as store:
        token = tokens.issue(store, "carol", "ab" * 32, ["192.0.2.1:8443"], 3600)
        store.conn.execute("CREATE TEMP TRIGGER pn_full BEFORE INSERT ON certificates "
                           "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
        with pytest.raises(sqlite3.DatabaseError, match="disk is full"):
            tokens.redeem(store, token.encode(), trust=(fp, pem))
        assert [n for n, _ in store.trust.tokens()] == ["carol"]
        assert store.trust.all() == []
        store.conn.execute("DROP TRIGGER pn_full")
        assert tokens.redeem(store, token.encode(), trust=(fp, pem)) == ("carol", True)
        assert store.trust.tokens() == [] and [r[:2] for r in store.trust.all()] == [(fp, "carol")]


def test_check_certificate(tmp_path: Path) -> None:
    """One X.509 certificate in DER passes; a DER SEQUENCE that is no certificate, two
    certificates, one with bytes after it, and no DER at all are refused."""
    need("openssl")
    der = _self_signed(tmp_path)
    tokens.check_certificate(der)
    for bad in (b"\x30\x03\x02\x01\x00", b"\x30" + b"\x00" * 40, der + der, der + b"\x00",
                der[:-1], b"not a cert", b""):
        with pytest.raises(ValueError, match="DER certificate"):
            tokens.check_certificate(bad)
