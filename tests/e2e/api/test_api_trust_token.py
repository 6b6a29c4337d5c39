"""Joining the API as with LXD: the real ``lxc`` client (Debian lxd-client 5.0.2) runs ``lxc
remote add`` against ``podnetctl serve --listen`` with a token from ``podnetctl trust
add-token``, then manages networks through that remote; an untrusted client gets LXD's
untrusted ``GET /1.0`` and nothing else.

The server runs in a node namespace (:func:`api_helpers.serving`) and listens on
127.0.0.1:8443 there with a self-signed certificate (SAN IP:127.0.0.1); ``lxc`` runs in the same
namespace with a configuration directory of its own per test (``LXD_CONF``), so it makes its
own client certificate, as a new user's ``lxc`` does."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from api_helpers import (
    PODNETCTL,
    ApiServer,
    assert_sync,
    in_ns_python,
    lxc_conf,
    self_signed,
    serving,
)
from envgate import need
from netns import Lab

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("api-trust-token")]

PORT = 8443
URL = f"https://127.0.0.1:{PORT}"


def _fingerprint_pem(pem: str) -> str:
    import hashlib

    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


@dataclass
class Node:
    lab: Lab
    server: ApiServer
    data: Path
    tmp: Path
    server_cert: str
    client_cert: tuple[str, str]

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.lab.exec(self.lab.node, PODNETCTL, *args, "--data-dir", str(self.data),
                             check=False)

    def token(self, name: str, *extra: str) -> str:
        out = self.ctl("trust", "add-token", name, *extra)
        assert out.returncode == 0, out
        return out.stdout.strip()

    def lxc(self, conf: Path, *args: str, input: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        """The real ``lxc`` in the node namespace with configuration ``conf``."""
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "HOME": str(conf), "LXD_CONF": str(conf), "LANG": "C.UTF-8"}
        argv = ["ip", "netns", "exec", self.lab.node, "env", "-i",
                *[f"{k}={v}" for k, v in env.items()], "lxc", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)

    def https(self, method: str, path: str, body: Any = None,
              cert: tuple[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
        """One request over TLS from the node namespace: (status, JSON body, Connection
        header); ``cert``: the client certificate presented (default: none)."""
        code = f"""
import json, httpx, ssl
ctx = ssl.create_default_context(cafile={self.server_cert!r})
cert = {list(cert) if cert else None!r}
if cert: ctx.load_cert_chain(*cert)
r = httpx.request({method!r}, {URL + path!r}, json={body!r}, verify=ctx, timeout=30)
print(json.dumps([r.status_code, r.json(), r.headers.get("connection", "")]))
"""
        proc = in_ns_python(self.lab.node, code)
        out, _ = proc.communicate(timeout=60)
        status, doc, connection = json.loads(out)
        return status, doc, connection


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    need("root", "ip", "nft", "lxc", "openssl")
    tmp = tmp_path_factory.mktemp("api-token")
    certs = tmp / "certs"
    certs.mkdir()
    server = self_signed(certs, "podnet-server", "-addext", "subjectAltName=IP:127.0.0.1")
    client = self_signed(certs, "someone")
    with serving(tmp, "--listen", f"127.0.0.1:{PORT}", "--tls-cert", server[0],
                 "--tls-key", server[1]) as (lab, srv):  # fmt: skip
        n = Node(lab, srv, tmp / "data", tmp, server[0], client)
        deadline = time.monotonic() + 30
        while True:  # the TCP listener is up once it answers
            try:
                n.https("GET", "/1.0")
                break
            except (json.JSONDecodeError, ValueError):
                assert time.monotonic() < deadline, srv.stderr()
                time.sleep(0.2)
        with srv.client() as c:
            assert_sync(c.post("/1.0/networks", json={
                "name": "brtok", "config": {"ipv4.address": "10.77.0.1/24",
                                            "ipv6.address": "none"}}), 201)
        try:
            yield n
        finally:
            with srv.client() as c:
                c.delete("/1.0/networks/brtok")


def test_the_token_is_lxds(node: Node) -> None:
    """base64 JSON with the client's name, the server certificate's fingerprint, the listen
    address, a 32-byte hex secret and an RFC 3339 expiry about an hour ahead."""
    text = node.token("laptop")
    doc = json.loads(base64.b64decode(text, validate=True))
    assert set(doc) == {"client_name", "fingerprint", "addresses", "secret", "expires_at"}
    assert doc["client_name"] == "laptop"
    assert doc["fingerprint"] == _fingerprint_pem(Path(node.server_cert).read_text())
    assert doc["addresses"] == [f"127.0.0.1:{PORT}"]
    assert len(doc["secret"]) == 64 and int(doc["secret"], 16) >= 0
    expires = time.mktime(time.strptime(doc["expires_at"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert 3500 < expires - time.time() <= 3600, doc["expires_at"]


def test_lxc_remote_add_with_a_token(node: Node) -> None:
    """``lxc remote add pn TOKEN`` (a new lxc: it makes its client certificate) is trusted, and
    ``lxc network list pn:`` lists the node's network; the same token then lets nobody else
    in (single use)."""
    conf = lxc_conf(node.tmp / "lxc-token")
    token = node.token("alice")
    out = node.lxc(conf, "remote", "add", "pn", token)
    assert out.returncode == 0, (out, node.server.stderr()[-3000:])
    listed = node.lxc(conf, "network", "list", "pn:", "--format", "csv")
    assert listed.returncode == 0, listed
    assert any(line.startswith("brtok,bridge,YES,10.77.0.1/24") for line in
               listed.stdout.splitlines()), listed.stdout
    fp = _fingerprint_pem((conf / "client.crt").read_text())
    assert f"{fp}  alice" in node.ctl("trust", "list").stdout.splitlines()
    trust = node.lxc(conf, "config", "trust", "list", "pn:", "--format", "csv")
    assert trust.returncode == 0 and any(
        line.startswith("client,alice,") and fp[:12] in line for line in trust.stdout.splitlines()
    ), trust
    # lxc config trust remove (a prefix, as with LXD) ends its own trust: then 403
    removed = node.lxc(conf, "config", "trust", "remove", f"pn:{fp[:16]}")
    assert removed.returncode == 0, removed
    assert fp not in node.ctl("trust", "list").stdout
    gone = node.lxc(conf, "network", "list", "pn:")
    assert gone.returncode == 1 and "not authorized" in gone.stderr, gone
    # used up: another client presenting it is refused, and stays untrusted
    other = lxc_conf(node.tmp / "lxc-token-again")
    again = node.lxc(other, "remote", "add", "pn", token)
    assert again.returncode == 1, again
    assert "not authorized" in again.stderr, again
    assert "Failed to create certificate" in again.stderr, again


def test_lxc_remote_add_url_then_the_prompt(node: Node) -> None:
    """``lxc remote add pn https://…`` as for LXD: the server's certificate is accepted
    (``--accept-certificate``: lxc reads each answer with a reader of its own, so two answers
    cannot be piped), the password prompt takes the token, the client is trusted. Before, the
    untrusted ``lxc`` got "EOF"."""
    conf = lxc_conf(node.tmp / "lxc-prompt")
    token = node.token("bob")
    out = node.lxc(conf, "remote", "add", "pn", URL, "--accept-certificate",
                   input=f"{token}\n")
    assert out.returncode == 0, (out, node.server.stderr()[-3000:])
    fp = _fingerprint_pem(Path(node.server_cert).read_text())
    assert "Admin password (or token) for pn:" in out.stdout, out.stdout
    assert "Client certificate now trusted by server: pn" in out.stdout, out.stdout
    listed = node.lxc(conf, "network", "list", "pn:", "--format", "csv")
    assert listed.returncode == 0 and "brtok,bridge" in listed.stdout, listed
    # and --password with a bad token: refused, nothing trusted
    bad = lxc_conf(node.tmp / "lxc-bad")
    wrong = base64.b64encode(json.dumps({"client_name": "x", "fingerprint": fp, "addresses": [
        f"127.0.0.1:{PORT}"], "secret": "00" * 32, "expires_at": "2099-01-01T00:00:00Z"}).encode())
    out = node.lxc(bad, "remote", "add", "pn", URL, "--accept-certificate", "--password",
                   wrong.decode())
    assert out.returncode == 1 and "not authorized" in out.stderr, out


def test_an_expired_token_is_refused_and_used_up(node: Node) -> None:
    conf = lxc_conf(node.tmp / "lxc-expired")
    token = node.token("late", "--expiry", "1s")
    time.sleep(2.5)
    out = node.lxc(conf, "remote", "add", "pn", token)
    assert out.returncode == 1 and "Token has expired" in out.stderr, out
    assert "late" not in node.ctl("trust", "list").stdout


def test_untrusted_clients_get_only_the_untrusted_document(node: Node) -> None:
    """An untrusted certificate passes the handshake (as with LXD) and gets ``auth:
    untrusted`` from ``GET /1.0``; every other request is 403 with the connection closed, a
    POST to /1.0/certificates without a valid token too; each refusal is logged with the
    client's fingerprint."""
    status, doc, connection = node.https("GET", "/1.0", cert=node.client_cert)
    assert status == 200 and doc["metadata"]["auth"] == "untrusted", doc
    assert "environment" not in doc["metadata"] and connection == "close"
    fp = _fingerprint_pem(Path(node.client_cert[0]).read_text())
    for method, path, body in (("GET", "/1.0/networks", None),
                               ("POST", "/1.0/networks", {"name": "brx"}),
                               ("DELETE", "/1.0/networks/brtok", None),
                               ("POST", "/1.0/certificates", {"password": "guess"}),
                               ("POST", "/1.0/certificates", {"type": "client"}),
                               ("POST", "/1.0/certificates", {"certificate": "MIIB"})):
        status, doc, connection = node.https(method, path, body, cert=node.client_cert)
        assert (status, doc["error"], connection) == (403, "not authorized", "close"), (
            method, path, doc)
    assert node.https("GET", "/1.0/networks")[0] == 403  # no certificate at all
    log = node.server.stderr()
    assert "refused GET /1.0/networks of untrusted client" in log and fp in log, log[-3000:]
    with node.server.client() as c:
        assert [n["name"] for n in assert_sync(c.get("/1.0/networks?recursion=1"))] == ["brtok"]
    assert fp not in node.ctl("trust", "list").stdout


def test_trust_add_still_works_and_add_token_checks_its_input(node: Node) -> None:
    added = node.ctl("trust", "add", node.client_cert[0], "--name", "by-file")
    fp = _fingerprint_pem(Path(node.client_cert[0]).read_text())
    try:
        assert added.returncode == 0 and added.stdout.strip() == f"Added {fp}", added
        deadline = time.monotonic() + 30
        while (status := node.https("GET", "/1.0/networks", cert=node.client_cert)[0]) != 200:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
    finally:
        node.ctl("trust", "remove", fp)
    for bad, why in ((("x", "--expiry", "0s"), "--expiry: '0s' is not a duration"),
                     (("x", "--expiry", "1y"), "--expiry: '1y' is not a duration"),
                     (("x", "--address", "host:1"), "--address 'host:1'"),
                     (("two\nlines",), "NAME must be one line")):
        out = node.ctl("trust", "add-token", *bad)
        assert out.returncode == 2 and why in out.stderr, out
    assert "x" not in [line.split("  ")[-1] for line in node.ctl("trust", "list").stdout.splitlines()]


def test_a_trusted_client_adds_a_certificate(node: Node) -> None:
    """``POST /1.0/certificates`` from a trusted client (the unix socket) with a
    ``certificate`` (base64 DER), as ``lxc config trust add FILE`` sends it: trusted under its
    name; again 409; without one 400 ``Client is already trusted``; names stay one line."""
    pem = Path(node.client_cert[0]).read_text()
    der = base64.b64encode(ssl.PEM_cert_to_DER_cert(pem)).decode()
    fp = _fingerprint_pem(pem)
    with node.server.client() as c:
        try:
            r = c.post("/1.0/certificates", json={"name": "two\nlines", "certificate": der})
            assert r.status_code == 400 and "one line" in r.json()["error"], r.text
            r = c.post("/1.0/certificates", json={"name": "by-api", "type": "client",
                                                  "certificate": der})
            assert r.status_code == 201 and r.headers["location"] == f"/1.0/certificates/{fp}"
            assert f"{fp}  by-api" in node.ctl("trust", "list").stdout.splitlines()
            r = c.post("/1.0/certificates", json={"name": "by-api", "certificate": der})
            assert (r.status_code, r.json()["error"]) == (409, "Certificate already in trust store")
            r = c.post("/1.0/certificates", json={"password": "x"})
            assert (r.status_code, r.json()["error"]) == (400, "Client is already trusted")
            r = c.post("/1.0/certificates", json={"certificate": "bm90IGEgY2VydA=="})
            assert r.status_code == 400 and "Invalid certificate material" in r.json()["error"]
            r = c.post("/1.0/certificates", json={"type": "metrics", "certificate": der})
            assert r.status_code == 400, r.text
        finally:
            node.ctl("trust", "remove", fp)


def test_pylxd_authenticates_with_a_token(node: Node) -> None:
    """pylxd 2.4.2 over TLS (pinning the server's certificate; requests would take a
    ``REQUESTS_CA_BUNDLE`` of the environment over it) with a certificate nobody trusted: the
    client connects (untrusted
    ``GET /1.0``), ``authenticate(token)`` sends it as ``trust_token`` (the server lists
    ``explicit_trust_token``), and it is trusted and lists the networks."""
    token = node.token("pylxd-user")
    code = f"""
import json, pylxd
c = pylxd.Client(endpoint={URL!r}, cert={tuple(node.client_cert)!r}, verify={node.server_cert!r})
before = c.trusted
c.authenticate({token!r})
print(json.dumps([before, c.trusted, [n.name for n in c.networks.all()]]))
"""
    fp = _fingerprint_pem(Path(node.client_cert[0]).read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    proc = in_ns_python(node.lab.node, code, stderr=subprocess.PIPE, env=env)
    try:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out) == [False, True, ["brtok"]], out
        assert f"{fp}  pylxd-user" in node.ctl("trust", "list").stdout.splitlines()
    finally:
        node.ctl("trust", "remove", fp)


def test_a_refused_handshake_is_logged(node: Node) -> None:
    """Plain HTTP on the TLS port fails the handshake: the server says so in its log, with the
    client's address (before, such a refusal was a debug line)."""
    code = f"""
import socket
s = socket.create_connection(("127.0.0.1", {PORT}), timeout=10)
s.sendall(b"GET /1.0 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
try:
    s.recv(100)
except OSError:
    pass
print("done")
"""
    proc = in_ns_python(node.lab.node, code)
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "done"
    deadline = time.monotonic() + 30
    while "TLS handshake refused for 127.0.0.1:" not in node.server.stderr():
        assert time.monotonic() < deadline, node.server.stderr()[-2000:]
        time.sleep(0.2)


def _pending(node: Node) -> list[str]:
    from podnet.store import open_store

    with open_store(str(node.data)) as store:
        return [name for name, _ in store.trust.tokens()]


def test_what_is_not_a_certificate_is_never_trusted(node: Node) -> None:
    """A DER SEQUENCE that is no X.509 certificate, from a trusted client (``lxc config trust
    add`` sends base64 DER) or ``podnetctl trust add`` (PEM armour around it): 400 ``Invalid
    certificate material`` / exit 1, and the trust store is left as it was (the TLS listener
    would otherwise fail to load it, and every ``lxc config trust list`` with it)."""
    junk = b"\x30\x0a\x02\x01\x00\x30\x05\x06\x03\x2a\x03\x04"
    before = node.ctl("trust", "list").stdout
    with node.server.client() as c:
        r = c.post("/1.0/certificates", json={"name": "junk",
                                              "certificate": base64.b64encode(junk).decode()})
        assert (r.status_code, r.json()["error"]) == (
            400, "Invalid certificate material: not a DER certificate"), r.text
        pem = Path(node.client_cert[0]).read_text()
        two = base64.b64encode(ssl.PEM_cert_to_DER_cert(pem) * 2).decode()
        r = c.post("/1.0/certificates", json={"name": "two", "certificate": two})
        assert r.status_code == 400 and "Invalid certificate material" in r.json()["error"]
    armoured = node.tmp / "junk.pem"
    armoured.write_text(ssl.DER_cert_to_PEM_cert(junk))
    out = node.ctl("trust", "add", str(armoured), "--name", "junk")
    assert out.returncode == 1 and "not a PEM certificate: not a DER certificate" in out.stderr, out
    assert node.ctl("trust", "list").stdout == before


def test_a_row_that_is_no_certificate_is_skipped_once(node: Node) -> None:
    """A trust store row that no TLS library reads (written by an older podnet or by hand):
    the listener logs it once, with its fingerprint, and keeps re-reading the store every
    second; a certificate trusted after it still gets in."""
    import hashlib

    from podnet.store import open_store

    junk = b"\x30\x0a\x02\x01\x00\x30\x05\x06\x03\x2a\x03\x04"
    bad_fp = hashlib.sha256(junk).hexdigest()
    pem = Path(node.client_cert[0]).read_text()
    fp = _fingerprint_pem(pem)
    with open_store(str(node.data)) as store, store.write():
        store.trust.add(bad_fp, "junk-row", ssl.DER_cert_to_PEM_cert(junk))
    try:
        time.sleep(1.5)
        assert node.ctl("trust", "add", node.client_cert[0], "--name", "after-junk").returncode == 0
        deadline = time.monotonic() + 30
        while (status := node.https("GET", "/1.0/networks", cert=node.client_cert)[0]) != 200:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        time.sleep(2.5)  # two more re-reads
        log = node.server.stderr()
        assert log.count(f"trusted certificate {bad_fp}") == 1, log[-3000:]
        assert "cannot re-read the trust store" not in log, log[-3000:]
    finally:
        node.ctl("trust", "remove", bad_fp)
        node.ctl("trust", "remove", fp)


def test_a_trusted_client_presenting_a_token_uses_it_up(node: Node) -> None:
    """As LXD: a trusted client sending a pending ``trust_token`` gets 409 ``Client is already
    trusted`` and the token is used up; a token that is not pending (or not a token) is
    403."""
    token = node.token("already")
    assert "already" in _pending(node)
    with node.server.client() as c:
        r = c.post("/1.0/certificates", json={"trust_token": token})
        assert (r.status_code, r.json()["error"]) == (409, "Client is already trusted"), r.text
        assert "already" not in _pending(node)
        r = c.post("/1.0/certificates", json={"trust_token": token})
        assert (r.status_code, r.json()["error"]) == (403, "not authorized"), r.text
        r = c.post("/1.0/certificates", json={"trust_token": "bm90IGEgdG9rZW4="})
        assert r.status_code == 403, r.text


def test_the_root_is_answered_to_everyone(node: Node) -> None:
    """``GET /`` (what ``lxc remote add`` asks first, without a certificate) is LXD's
    ``["/1.0"]`` to an untrusted client, one without a certificate and a trusted one; not a
    refusal in the log."""
    for cert in (None, node.client_cert):
        status, doc, connection = node.https("GET", "/", cert=cert)
        assert (status, doc["metadata"], connection) == (200, ["/1.0"], "close"), doc
    with node.server.client() as c:
        assert assert_sync(c.get("/")) == ["/1.0"]
    assert "refused GET  of" not in node.server.stderr()


def test_refusals_are_logged_with_their_path_and_not_flooded(node: Node) -> None:
    """A refused request is logged with the path it asked for (``/1.0/networks/`` as sent);
    forty refused requests of one client in a row leave the burst of lines a client gets a
    minute (10), not forty."""
    cert = self_signed(node.tmp / "certs", "flooder")
    fp = _fingerprint_pem(Path(cert[0]).read_text())
    code = f"""
import httpx, ssl
ctx = ssl.create_default_context(cafile={node.server_cert!r})
ctx.load_cert_chain(*{list(cert)!r})
with httpx.Client(verify=ctx, timeout=30) as c:
    print(sorted({{c.get({URL + "/1.0/networks/"!r}).status_code for _ in range(40)}}))
"""
    proc = in_ns_python(node.lab.node, code)
    out, _ = proc.communicate(timeout=120)
    assert out.strip() == "[403]", out
    time.sleep(0.5)
    log = node.server.stderr()
    mine = [line for line in log.splitlines() if fp in line]
    assert len(mine) == 10, (len(mine), log[-3000:])
    assert all("refused GET /1.0/networks/ of untrusted client 127.0.0.1:" in line
               for line in mine), mine[:3]  # fmt: skip
