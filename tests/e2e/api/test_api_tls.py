"""The API over TCP with TLS (the API's promise: "no client certificate, or an untrusted one →
refused; a trusted one → works").

``podnetctl serve --listen 127.0.0.1:<port> --tls-cert … --tls-key …`` runs in a node
namespace, so the listener and its clients live there: a TLS client (a small line-oriented
program, :func:`api_helpers.tls_repl`) runs in the same namespace and keeps one connection per
client certificate. Certificates are made with ``openssl`` in a temporary directory: the server's
(SAN 127.0.0.1, also the clients' CA) and two self-signed client certificates. The trust store is
changed with ``podnetctl trust add|list|remove`` on the same data dir while the server runs; the
server re-reads it every second."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from api_helpers import PODNETCTL, ApiServer, assert_sync, in_ns_python, self_signed, serving
from envgate import need
from netns import Lab, sh

pytestmark = pytest.mark.root

PORT = 8443  # the node namespace is new: nothing else listens there
#: Seconds: the store is re-read every second; only a hang reaches this deadline.
TRUST_DEADLINE = 30.0


def _fingerprint(crt: str) -> str:
    """sha256 of the DER certificate, as openssl computes it."""
    out = sh("openssl", "x509", "-in", crt, "-noout", "-fingerprint", "-sha256").stdout
    return out.strip().split("=", 1)[1].replace(":", "").lower()


@dataclass
class Tls:
    lab: Lab
    server: ApiServer
    data: Path
    certs: dict[str, tuple[str, str]]
    repl: subprocess.Popen[str]

    def ask(self, cert: str | None, method: str = "GET", path: str = "/1.0/networks",
            fresh: bool = True, body: Any = None) -> dict[str, Any]:
        """One request from the client in the node namespace; ``{"status", "body"}`` or
        ``{"error"}`` (a refused handshake)."""
        assert self.repl.stdin is not None and self.repl.stdout is not None
        self.repl.stdin.write(json.dumps({"cert": cert, "method": method, "path": path,
                                          "fresh": fresh, "json": body}) + "\n")
        self.repl.stdin.flush()
        line = self.repl.stdout.readline()
        assert line, "the TLS client died"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def trust(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.lab.exec(self.lab.node, PODNETCTL, "trust", *args, "--data-dir",
                             str(self.data), check=False)

    def until(self, cert: str | None, want: Any, timeout: float = TRUST_DEADLINE,
              fresh: bool = True) -> tuple[dict[str, Any], float]:
        """Ask until ``want(answer)``; (last answer, seconds it took)."""
        start = time.monotonic()
        while True:
            answer = self.ask(cert, fresh=fresh)
            took = time.monotonic() - start
            if want(answer) or took > timeout:
                return answer, took
            time.sleep(0.1)


def refused(answer: dict[str, Any]) -> bool:
    """403 with LXD's error envelope, or a TLS failure."""
    if "error" in answer:
        return True
    body = answer["body"]
    return bool(answer["status"] == 403 and body["type"] == "error"
                and body["error_code"] == 403 and body["error"] == "not authorized")


def ok(answer: dict[str, Any]) -> bool:
    return answer.get("status") == 200 and answer["body"]["type"] == "sync"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    need("root", "ip", "nft")
    directory = tmp_path_factory.mktemp("certs")
    return {"server": self_signed(directory, "podnet-test-server", "-addext",
                            "subjectAltName=IP:127.0.0.1"),
            "client1": self_signed(directory, "client1"), "client2": self_signed(directory, "client2")}


def _tls_args(certs: dict[str, tuple[str, str]]) -> tuple[str, ...]:
    return ("--listen", f"127.0.0.1:{PORT}", "--tls-cert", certs["server"][0],
            "--tls-key", certs["server"][1])  # fmt: skip


@contextmanager
def _tls_client(lab: Lab, certs: dict[str, tuple[str, str]]) -> Iterator[subprocess.Popen[str]]:
    """The TLS client REPL in the node namespace; killed after the body, so its connections go
    before the server stops (see test_sigterm_with_an_idle_tls_client)."""
    code = (f"import api_helpers; api_helpers.tls_repl('https://127.0.0.1:{PORT}', "
            f"{certs['server'][0]!r}, {json.dumps({k: list(v) for k, v in certs.items()})})")
    repl = in_ns_python(lab.node, code)
    try:
        yield repl
    finally:
        repl.kill()
        repl.wait()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory,
        certs: dict[str, tuple[str, str]]) -> Iterator[Tls]:
    tmp = tmp_path_factory.mktemp("api-tls")
    with serving(tmp, *_tls_args(certs)) as (lab, server), _tls_client(lab, certs) as repl:
        t = Tls(lab, server, tmp / "data", certs, repl)
        # the TCP listener is up once the unix socket is (both start before "ready")
        answer, _ = t.until(None, lambda a: "status" in a, timeout=10)
        assert "status" in answer, answer
        yield t


def test_no_client_certificate_is_refused(tls: Tls) -> None:
    answer = tls.ask(None)
    assert answer["status"] == 403, answer
    assert answer["body"] == {"type": "error", "status": "", "status_code": 0, "operation": "",
                              "error_code": 403, "error": "not authorized", "metadata": None}
    for method, path in (("POST", "/1.0/networks"), ("GET", "/1.0/networks/br0/forwards"),
                         ("DELETE", "/1.0/networks/br0"), ("GET", "/openapi.json")):
        assert refused(tls.ask(None, method, path, body={"name": "brx"} if method == "POST"
                               else None)), (method, path)
    # GET /1.0 answers the untrusted server document, as LXD does
    answer = tls.ask(None, "GET", "/1.0")
    assert answer["status"] == 200, answer
    assert answer["body"]["metadata"]["auth"] == "untrusted"
    assert "environment" not in answer["body"]["metadata"]


def test_trust_lifecycle(tls: Tls) -> None:
    crt1 = tls.certs["client1"][0]
    fp1 = _fingerprint(crt1)
    # untrusted certificate: refused (TLS failure or 403); so is the other one
    assert refused(tls.ask("client1")), "untrusted client1 let in"
    assert refused(tls.ask("client2")), "untrusted client2 let in"
    assert fp1 not in tls.trust("list").stdout

    added = tls.trust("add", crt1, "--name", "client-one")
    assert added.returncode == 0 and added.stdout.strip() == f"Added {fp1}", added
    answer, _ = tls.until("client1", ok)
    assert ok(answer), answer
    listed = tls.trust("list")
    assert listed.returncode == 0 and f"{fp1}  client-one" in listed.stdout.splitlines(), listed
    again = tls.trust("add", crt1)
    assert again.returncode == 0 and again.stdout.strip() == f"Already trusted {fp1}", again

    # trusted: the whole API works, over a kept-alive connection too
    doc = tls.ask("client1", "GET", "/1.0", fresh=False)
    assert doc["status"] == 200 and doc["body"]["metadata"]["auth"] == "trusted", doc
    created = tls.ask("client1", "POST", "/1.0/networks", fresh=False, body={
        "name": "brtls", "config": {"ipv4.address": "10.7.0.1/24", "ipv6.address": "none"}})
    assert created["status"] == 201, created
    try:
        forward = tls.ask("client1", "POST", "/1.0/networks/brtls/forwards", fresh=False,
                          body={"listen_address": "198.51.100.77"})
        assert forward["status"] == 201, forward
        with tls.server.client() as c:  # the same store behind the unix socket
            assert assert_sync(c.get("/1.0/networks/brtls/forwards")) == [
                "/1.0/networks/brtls/forwards/198.51.100.77"]
        # the other certificate is still refused
        assert refused(tls.ask("client2"))

        # removed: refused again (403: the fingerprint is checked on every request), also on the
        # connection opened while it was trusted
        assert ok(tls.ask("client1", fresh=False))
        removed = tls.trust("remove", fp1)
        assert removed.returncode == 0 and removed.stdout.strip() == f"Removed {fp1}", removed
        answer, _ = tls.until("client1", lambda a: a.get("status") == 403, fresh=False)
        assert answer.get("status") == 403 and refused(answer), answer
        assert refused(tls.ask("client1", fresh=True))
        assert tls.ask("client1", fresh=True).get("status") == 403
        assert fp1 not in tls.trust("list").stdout
        gone = tls.trust("remove", fp1)
        assert gone.returncode == 1 and "Certificate not found" in gone.stderr, gone
        with tls.server.client() as c:
            assert_sync(c.delete("/1.0/networks/brtls"), 200, {})
    finally:  # the network goes even when a check above failed (later tests share the store)
        with tls.server.client() as c:
            c.delete("/1.0/networks/brtls/forwards/198.51.100.77")
            c.delete("/1.0/networks/brtls")


def test_trust_add_refuses_non_certificates(tls: Tls, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    out = tls.trust("add", str(bogus))
    assert out.returncode == 1 and "not a PEM certificate" in out.stderr, out
    short = tls.trust("remove", "abc")
    assert short.returncode == 1 and "12 hex digits" in short.stderr, short


def test_remove_by_prefix_and_two_clients(tls: Tls) -> None:
    crt1, crt2 = tls.certs["client1"][0], tls.certs["client2"][0]
    fp1, fp2 = _fingerprint(crt1), _fingerprint(crt2)
    assert tls.trust("add", crt1).returncode == 0
    assert tls.trust("add", crt2).returncode == 0
    try:
        for name in ("client1", "client2"):
            answer, _ = tls.until(name, ok)
            assert ok(answer), (name, answer)
        out = tls.trust("remove", fp2[:12])
        assert out.returncode == 0 and out.stdout.strip() == f"Removed {fp2}", out
        answer, _ = tls.until("client2", lambda a: a.get("status") == 403)
        assert answer.get("status") == 403, answer
        assert ok(tls.ask("client1"))  # the other one stays trusted
    finally:
        tls.trust("remove", fp1)
        tls.trust("remove", fp2)


def test_plain_http_on_the_tls_port_is_refused(tls: Tls) -> None:
    code = (f"import httpx\ntry:\n    r = httpx.get('http://127.0.0.1:{PORT}/1.0/networks', "
            "timeout=5)\n    print(r.status_code)\nexcept httpx.HTTPError as e:\n"
            "    print('error', type(e).__name__, e)")
    out = tls.lab.exec(tls.lab.node, str(Path(PODNETCTL).parent / "python"), "-c", code,
                       check=False)
    assert out.returncode == 0, out
    answer = out.stdout.strip()
    # the TLS listener reads no HTTP: no status at all (a plaintext listener would answer one)
    assert answer == ("error RemoteProtocolError Server disconnected without sending a "
                      "response."), answer


def test_unix_socket_stays_trusted_alongside(tls: Tls) -> None:
    with tls.server.client() as c:
        doc = assert_sync(c.get("/1.0"))
    assert doc["auth"] == "trusted"


def test_sigterm_with_an_idle_tls_client_stops_promptly(tmp_path: Path,
                                                        certs: dict[str, tuple[str, str]]) -> None:
    """A client that keeps its connection open (as httpx, Go's net/http and lxc do) must not
    hold the server's graceful stop: uvicorn closes idle connections, but asyncio waits for
    the peer's TLS close_notify (ssl_shutdown_timeout). The client is trusted: an untrusted one
    is closed right after its 403."""
    sh(PODNETCTL, "trust", "add", certs["client1"][0], "--data-dir", str(tmp_path / "data"))
    with serving(tmp_path, *_tls_args(certs)) as (lab, server), _tls_client(lab, certs) as repl:
        t = Tls(lab, server, tmp_path / "data", certs, repl)
        answer, _ = t.until("client1", ok, timeout=10, fresh=False)
        assert ok(answer), answer  # and the connection stays open, idle
        start = time.monotonic()
        server.proc.send_signal(15)
        try:
            rc = server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - start
        assert rc == 0, (rc, server.stderr())
        assert took < 10, f"SIGTERM took {took:.1f}s with one idle TLS client"
        assert not server.socket.exists()


@pytest.mark.parametrize(("listen", "why"), [
    ("localhost:8443", "--listen 'localhost:8443'"),
    ("[fe80::1%eth0]:8443", "scoped"),
    ("127.0.0.1:0", "the port must be 1-65535"),
    ("127.0.0.1:x", "the port must be 1-65535"),
    ("127.0.0.1", "--listen '127.0.0.1'"),
])  # fmt: skip
def test_listen_is_an_address_and_a_port(tmp_path: Path, listen: str, why: str) -> None:
    """--listen takes ADDR:PORT, the address parsed where it enters (no host name, no zone):
    anything else is a one-line usage error (exit 2) and no server starts."""
    pem = tmp_path / "x.pem"
    pem.write_text("")
    out = subprocess.run([PODNETCTL, "serve", "--data-dir", str(tmp_path / "data"), "--listen",
                          listen, "--tls-cert", str(pem), "--tls-key", str(pem)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and why in out.stderr, out
    assert not (tmp_path / "data").exists()
