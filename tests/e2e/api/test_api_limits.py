"""What a client that is not the node's administrator cannot do to ``podnetctl serve``:
impersonate a trusted client, starve trusted clients and the unix socket with
idle or slow connections, grow the server with huge bodies, slip a non-JSON body in, or learn
the server's tools, paths and exception types from its errors.

The server runs in a node namespace of its own with ``RLIMIT_NOFILE`` 256 (as the issue
measured: ~250 idle TLS connections were enough to make the unix socket answer 500), TLS on
127.0.0.1:8443 and one trusted client certificate. Idle and slow clients come from
:func:`api_helpers.flood`, run in that namespace: 1,000 each of plain TCP connects, TLS
handshakes without a certificate followed by silence, and request heads trickled one byte a
second, each reconnecting as soon as it is closed, so the pressure stays on while the trusted
client and the unix socket are asked. Waits are on events, with deadlines only a hang reaches.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_helpers import (
    PODNETCTL,
    ApiServer,
    assert_error,
    assert_sync,
    in_ns_python,
    kernel_maps,
    kill_running,
)
from envgate import need
from netns import Lab, sh

pytestmark = pytest.mark.root

PORT = 8443
NOFILE = 256
CLIENTS = 1000  # per kind of idle or slow client
MIB = 1 << 20
DEADLINE = 180.0  # seconds: only a hang reaches it
BR = {"ipv4.address": "10.30.0.1/24", "ipv6.address": "none"}


def _cert(directory: Path, name: str, *extra: str) -> tuple[str, str]:
    crt, key = directory / f"{name}.pem", directory / f"{name}.key"
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}",
       *extra)
    return str(crt), str(key)


def _tcp_cap() -> int:
    from podnet.api.listener import budget

    return budget(NOFILE).tcp


@dataclass
class Node:
    lab: Lab
    server: ApiServer
    certs: dict[str, tuple[str, str]]
    repl: subprocess.Popen[str]
    figures: dict[str, Any] = field(default_factory=dict)

    def ask(self, method: str = "GET", path: str = "/1.0/networks") -> dict[str, Any]:
        """One request of the trusted client, on a new TLS connection."""
        assert self.repl.stdin is not None and self.repl.stdout is not None
        self.repl.stdin.write(json.dumps({"cert": "trusted", "method": method, "path": path,
                                          "fresh": True}) + "\n")
        self.repl.stdin.flush()
        line = self.repl.stdout.readline()
        assert line, "the TLS client died"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, code: str) -> Any:
        """``code`` (an expression using ``api_helpers``) evaluated in the node namespace."""
        proc = in_ns_python(self.lab.node, f"import json, api_helpers; print(json.dumps({code}))")
        out, _ = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, out
        return json.loads(out.strip().splitlines()[-1])

    def pid(self) -> int:
        return self.server.proc.pid  # `ip netns exec` execs the server in place

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid()}/fd"))

    def rss(self) -> int:
        """The server's resident memory, bytes."""
        for line in Path(f"/proc/{self.pid()}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def established(self) -> int:
        """TCP connections to the TLS port the kernel holds (accepted or in the backlog)."""
        out = self.lab.exec(self.lab.node, "ss", "-Htn", "state", "established",
                            f"( sport = :{PORT} )").stdout
        return len(out.splitlines())


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    need("root", "ip", "nft")
    tmp = tmp_path_factory.mktemp("api-limits")
    certs = {"server": _cert(tmp, "podnet-limits-server", "-addext",
                             "subjectAltName=IP:127.0.0.1"),
             "trusted": _cert(tmp, "trusted-client")}
    data = tmp / "data"
    sh(PODNETCTL, "trust", "add", certs["trusted"][0], "--data-dir", str(data))
    lab = Lab()
    server = repl = None
    try:
        server = ApiServer(lab.node, data, tmp / "logs", "--listen", f"127.0.0.1:{PORT}",
                           "--tls-cert", certs["server"][0], "--tls-key", certs["server"][1],
                           nofile=NOFILE)
        limit = Path(f"/proc/{server.proc.pid}/limits").read_text()
        assert f"Max open files            {NOFILE}" in limit, limit
        repl = in_ns_python(lab.node, (
            f"import api_helpers; api_helpers.tls_repl('https://127.0.0.1:{PORT}', "
            f"{certs['server'][0]!r}, {json.dumps({'trusted': list(certs['trusted'])})}, "
            f"timeout={DEADLINE})"))
        node = Node(lab, server, certs, repl)
        deadline = time.monotonic() + 30  # the unix socket is ready first, TLS a moment later
        while "status" not in (answer := node.ask()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer.get("status") == 200, answer
        yield node
        repl.stdin.close()  # type: ignore[union-attr]
        repl.wait(timeout=60)
        assert server.stop() == 0, server.stderr()[-3000:]
        print(f"\nfigures: {json.dumps(node.figures, indent=1)}")
    finally:
        kill_running(repl)
        if server is not None:
            server.kill()
        lab.close()


class Flood:
    """:func:`api_helpers.flood` in the node namespace; killed by :meth:`close`."""

    def __init__(self, node: Node, counts: dict[str, int]) -> None:
        self.proc = in_ns_python(node.lab.node, (
            f"import api_helpers; api_helpers.flood('127.0.0.1', {PORT}, {counts!r})"))

    def command(self, line: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the flood died"
        return json.loads(answer)

    def until(self, want: Any, what: str) -> dict[str, dict[str, Any]]:
        """Status lines until ``want(status)``; AssertionError at the deadline."""
        deadline = time.monotonic() + DEADLINE
        while True:
            status: dict[str, dict[str, Any]] = self.command("status")
            if want(status):
                return status
            assert time.monotonic() < deadline, f"{what}: {status}"
            time.sleep(0.5)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# -- starvation ----------------------------------------------------------------------------------


def test_idle_and_slow_clients_starve_neither_trusted_clients_nor_the_unix_socket(
        node: Node) -> None:
    cap = _tcp_cap()
    baseline = {"rss": node.rss(), "fds": node.fds()}

    def held() -> int:
        """Connections the server holds: its descriptors beyond those it had idle."""
        return node.fds() - baseline["fds"]

    flood = Flood(node, {"tcp": CLIENTS, "tls": CLIENTS, "trickle": CLIENTS})

    def served() -> tuple[dict[str, Any], float, tuple[int, int], tuple[int, int]]:
        """The trusted client over TLS and a request on the unix socket, while the flood goes
        on: (the TLS answer, seconds the unix request took, the server's connections and the
        kernel's established ones before and after)."""
        before = (held(), node.established())
        trusted = node.ask()
        with node.server.client() as c:
            start = time.monotonic()
            local = c.get("/1.0/networks")
            unix_seconds = time.monotonic() - start
        after = (held(), node.established())
        assert trusted.get("status") == 200, trusted
        assert trusted["body"]["type"] == "sync", trusted
        assert_sync(local)
        # the pressure was on while they were served: the server's slots were full
        assert before[0] >= cap - 4 and after[0] >= cap - 4, (before, after, cap)
        return trusted, unix_seconds, before, after

    try:
        # every client has tried at least once, and the server's slots are full
        status = flood.until(lambda s: all(k["attempts"] >= k["clients"] for k in s.values())
                             and held() >= cap - 4, "clients not all started")
        first = served()
        # each kind got through to the server many times (then was closed or evicted)
        full = flood.until(lambda s: all(k["held"] + k["closed"] >= 100 for k in s.values())
                           and held() >= cap - 4, "a kind of client never got through")
        trusted, unix_seconds, before, after = served()
        under = flood.command("status")
        fds, rss = node.fds(), node.rss()
        assert sum(k["attempts"] for k in under.values()) > \
            sum(k["attempts"] for k in full.values()), (full, under)  # still coming
        assert fds < NOFILE, fds
        # idle ones are closed in the end: once nobody reconnects, the server holds none (a
        # plain TCP client may still believe it is connected: when the listen queue overflows,
        # Linux drops the handshake's last ACK and later the half-open connection, silently)
        assert flood.command("stop") == {"stopped": True}
        stopped = time.monotonic()
        done = flood.until(lambda s: s["tls"]["held"] == s["trickle"]["held"] == 0 and
                           held() <= 0 and node.established() == 0,
                           "idle connections still held")
        closed_after = time.monotonic() - stopped
    finally:
        flood.close()
    log = node.server.stderr()
    assert "cannot accept" not in log, log[-3000:]  # never out of descriptors
    assert "Traceback" not in log, log[-3000:]
    assert node.ask().get("status") == 200
    node.figures["starvation"] = {
        "tcp_cap": cap, "nofile": NOFILE, "clients_per_kind": CLIENTS,
        "attempts": {k: v["attempts"] for k, v in done.items()},
        "refused_or_reset_while_connecting": {k: v["failed"] for k, v in done.items()},
        "held_by_clients_when_full": {k: v["held"] for k, v in full.items()},
        "held_by_server_and_established_before_after": [before, after],
        "tcp_clients_left_half_open_by_the_kernel": done["tcp"]["held"],
        "trusted_tls_request_s": [round(first[0]["seconds"], 3), round(trusted["seconds"], 3)],
        "unix_request_s": [round(first[1], 3), round(unix_seconds, 3)],
        "server_fds_baseline_under_flood": [baseline["fds"], fds],
        "server_rss_mb_baseline_under_flood": [baseline["rss"] >> 20, rss >> 20],
        "all_closed_s_after_stop": round(closed_after, 1),
        "longest_held_s": {k: round(v["longest"], 1) for k, v in done.items()},
        "started": {k: v["attempts"] for k, v in status.items()},
    }


def test_each_kind_of_idle_client_is_closed_by_the_server(node: Node) -> None:
    """On a quiet server (no evictions), each kind is closed by its own timer: the TLS
    handshake's, or the head's, which bytes trickling in do not reset."""
    flood = Flood(node, {"tcp": 1, "tls": 1, "trickle": 1})
    try:
        flood.until(lambda s: all(k["held"] == 1 for k in s.values()), "not connected")
        flood.command("stop")
        done = flood.until(lambda s: all(k["closed"] == 1 and k["held"] == 0
                                         for k in s.values()), "not closed")
    finally:
        flood.close()
    for kind, st in done.items():
        assert st["longest"] < 60, (kind, st)  # the timers are 10 s
    node.figures["single_idle_client_held_s"] = {k: round(v["longest"], 1)
                                                 for k, v in done.items()}


# -- identity ------------------------------------------------------------------------------------


def test_forwarded_headers_do_not_make_a_client_trusted(node: Node) -> None:
    out = node.run(f"api_helpers.trusted_then_forged('127.0.0.1', {PORT}, "
                   f"{list(node.certs['trusted'])!r})")
    head, _, body = out["response"].partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 403"), out
    assert out["trusted"] == 200 and out["again"] == 200, out
    assert "connection: close" in head.lower(), out
    assert json.loads(body) == {"type": "error", "status": "", "status_code": 0,
                                "operation": "", "error_code": 403, "error": "not authorized",
                                "metadata": None}
    assert out["closed"], out  # answered once, then closed: never held


def test_untrusted_get_of_the_server_document_is_answered_then_closed(node: Node) -> None:
    out = node.run(f"api_helpers.tls_exchange('127.0.0.1', {PORT}, "
                   "b'GET /1.0 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')")
    head, _, body = out["response"].partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200") and "connection: close" in head.lower(), out
    assert json.loads(body)["metadata"]["auth"] == "untrusted"
    assert out["closed"], out
    # keep-alive asked for: still closed
    out = node.run(f"api_helpers.tls_exchange('127.0.0.1', {PORT}, b'GET /1.0/networks "
                   "HTTP/1.1\\r\\nHost: x\\r\\nConnection: keep-alive\\r\\n\\r\\n')")
    assert out["response"].startswith("HTTP/1.1 403") and out["closed"], out


# -- bodies ------------------------------------------------------------------------------------


def _raw_unix(path: Path, head: bytes, chunks: list[bytes] | None = None,
              timeout: float = 60) -> tuple[str, bool]:
    """Send ``head``, then ``chunks`` until the server answers, on a new connection to the
    unix socket ``path``; read until the server closes or ``timeout`` seconds pass. (Text
    received, whether the server closed.)"""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.setblocking(False)
    pending = [head, *(chunks or [])]
    out = memoryview(b"")
    received, closed = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not out and pending:
                out = memoryview(pending.pop(0))
            sending = bool(out) and not received  # an answer ends the sending
            readable, writable, _ = select.select([sock], [sock] if sending else [], [], 1)
            if readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    closed = True
                    break
                received += chunk
            if writable and sending:
                try:
                    out = out[sock.send(out):]
                except (BrokenPipeError, ConnectionResetError):
                    out, pending = memoryview(b""), []
    finally:
        sock.close()
    return received.decode("latin-1"), closed


def _error_of(text: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = text.partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_bodies_over_1_mib_are_413_and_never_stored(node: Node) -> None:
    sock = node.server.socket
    with node.server.client() as c:
        assert_sync(c.post("/1.0/networks", json={"name": "brlim", "config": BR}), 201)
    try:
        with node.server.client() as c:
            before = assert_sync(c.get("/1.0/networks/brlim/forwards", params={"recursion": 1}))
        rss = node.rss()
        url = b"/1.0/networks/brlim/forwards"
        # a declared length over 1 MiB: refused before reading (30 MB, as the issue sent)
        for size in (MIB + 1, 30 * MIB):
            head = (b"POST " + url + b" HTTP/1.1\r\nHost: lxd\r\nContent-Type: application/json"
                    b"\r\nContent-Length: " + str(size).encode() + b"\r\n\r\n")
            text, closed = _raw_unix(sock, head)
            status, headers, body = _error_of(text)
            assert status == 413 and body["error_code"] == 413, text
            assert body["error"] == f"Request body is larger than {MIB} bytes", body
            assert headers["connection"] == "close" and closed, text
        # chunked, growing past 1 MiB: refused once it does, the rest never read
        description = b"x" * (3 * MIB)
        payload = b'{"listen_address": "198.51.100.60", "description": "' + description + b'"}'
        chunks = [b"%x\r\n%s\r\n" % (len(payload[i:i + 65536]), payload[i:i + 65536])
                  for i in range(0, len(payload), 65536)] + [b"0\r\n\r\n"]
        head = (b"POST " + url + b" HTTP/1.1\r\nHost: lxd\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        text, closed = _raw_unix(sock, head, chunks)
        status, headers, body = _error_of(text)
        assert status == 413 and body["error"] == f"Request body is larger than {MIB} bytes"
        assert headers["connection"] == "close" and closed, text
        # exactly 1 MiB is a body like any other; one byte more is not
        with node.server.client() as c:
            for size, want in ((MIB, 201), (MIB + 1, 413)):
                filler = "y" * (size - len(json.dumps({"listen_address": "198.51.100.61",
                                                       "description": ""})))
                raw = json.dumps({"listen_address": "198.51.100.61", "description": filler})
                assert len(raw.encode()) == size
                r = c.post("/1.0/networks/brlim/forwards", content=raw,
                           headers={"Content-Type": "application/json"})
                assert r.status_code == want, r.text[:300]
                if want == 201:
                    assert_sync(c.delete("/1.0/networks/brlim/forwards/198.51.100.61"))
            after = assert_sync(c.get("/1.0/networks/brlim/forwards", params={"recursion": 1}))
        assert after == before  # nothing stored
        grown = node.rss() - rss
        node.figures["rss_growth_mb_after_413s"] = round(grown / MIB, 1)
        assert grown < 64 * MIB, grown  # a 30 MB body grew the server by 190 MB before
    finally:
        with node.server.client() as c:
            c.delete("/1.0/networks/brlim")


WRITES = [("POST", "/1.0/networks"), ("PUT", "/1.0/networks/brct"),
          ("PATCH", "/1.0/networks/brct"), ("POST", "/1.0/networks/brct/forwards"),
          ("PUT", "/1.0/networks/brct/forwards/198.51.100.70"),
          ("PATCH", "/1.0/networks/brct/forwards/198.51.100.70")]
NOT_JSON = [
    (None, "Missing Content-Type: the request body must be application/json"),
    ("text/plain", 'Unsupported Content-Type "text/plain": the request body must be '
                   "application/json"),
    ("application/x-www-form-urlencoded", 'Unsupported Content-Type '
     '"application/x-www-form-urlencoded": the request body must be application/json'),
    ("application/json; charset=latin-1",
     'Unsupported Content-Type charset "latin-1": JSON is UTF-8'),
    ("application/jsonp", 'Unsupported Content-Type "application/jsonp": the request body must '
                          "be application/json"),
]


@pytest.mark.parametrize("method, path", WRITES, ids=[f"{m} {p}" for m, p in WRITES])
def test_writes_without_a_json_content_type_are_415_and_change_nothing(
        node: Node, method: str, path: str) -> None:
    other = {"ipv4.address": "10.31.0.1/24", "ipv6.address": "none"}
    bodies = {"POST /1.0/networks": {"name": "brct2", "config": other},
              "POST /1.0/networks/brct/forwards": {"listen_address": "198.51.100.71"},
              "PUT /1.0/networks/brct": {"description": "changed", "config": BR}}
    body = json.dumps(bodies.get(f"{method} {path}", {"description": "changed"})).encode()
    with node.server.client() as c:
        assert_sync(c.post("/1.0/networks", json={"name": "brct", "config": BR}), 201)
        try:
            assert_sync(c.post("/1.0/networks/brct/forwards",
                               json={"listen_address": "198.51.100.70"}), 201)
            state = (assert_sync(c.get("/1.0/networks", params={"recursion": 1})),
                     assert_sync(c.get("/1.0/networks/brct/forwards", params={"recursion": 1})),
                     kernel_maps(node.lab.node))
            for content_type, message in NOT_JSON:
                headers = {"Content-Type": content_type} if content_type else {}
                r = c.request(method, path, content=body, headers=headers)
                assert_error(r, 415, message)
                assert r.headers["connection"] == "close"
                assert (assert_sync(c.get("/1.0/networks", params={"recursion": 1})),
                        assert_sync(c.get("/1.0/networks/brct/forwards",
                                          params={"recursion": 1})),
                        kernel_maps(node.lab.node)) == state
            r = c.request(method, path, content=body,
                          headers={"Content-Type": "application/json; charset=utf-8"})
            assert r.status_code in (200, 201), r.text
        finally:
            c.delete("/1.0/networks/brct2")
            c.delete("/1.0/networks/brct")


def test_writes_to_urls_without_that_method_are_404_or_501_not_415(node: Node) -> None:
    with node.server.client() as c:
        assert_error(c.post("/1.0/nothing", content=b"x"), 404, "not found")
        assert_error(c.post("/1.0/networks/x/forwards/198.51.100.1", content=b"x"), 501,
                     "not implemented")


# -- errors the server does not tell ---------------------------------------------------------


FAKE_NFT = """#!/bin/sh
echo "Error: Could not process rule: Operation not permitted" >&2
echo "/etc/podnet/rules-$$.nft:1:1-5: Error: {marker}" >&2
exit 1
"""


def test_kernel_and_store_failures_tell_the_log_not_the_client(tmp_path: Path) -> None:
    """nft fails (a fake one first in PATH, writing a marker to stderr): 500 with a short
    reason, nothing applied; the log has the tool's stderr, its path and the exception type.
    Then the database cannot be opened: 500 without its path, which the log has."""
    need("root", "ip", "nft")
    marker = f"SECRET-{uuid.uuid4().hex}"
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "nft").write_text(FAKE_NFT.format(marker=marker))
    (bin_dir / "nft").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"}
    lab = Lab()
    server = None
    try:
        data = tmp_path / "data"
        server = ApiServer(lab.node, data, tmp_path / "logs", env=env)
        with server.client() as c:
            r = c.post("/1.0/networks", json={"name": "brfail", "config": BR})
            assert_error(r, 500, "Failed applying the change to the kernel; see the server log")
            for secret in (marker, "/", "nft", "Error", "ToolError", "KernelError", "CNIError",
                           str(bin_dir)):
                assert secret not in r.text, (secret, r.text)
            assert_error(c.get("/1.0/networks/brfail"), 404)  # nothing half-applied
            assert lab.exec(lab.node, "ip", "link", "show", "brfail", check=False).returncode
            # the store: its database replaced by a directory
            db = data / "podnet.db"
            db.rename(data / "podnet.db.away")
            db.mkdir()
            r = c.get("/1.0/networks")
            assert_error(r, 500, "Failed reading or writing the state database; see the "
                                 "server log")
            assert str(data) not in r.text and "podnet.db" not in r.text, r.text
        deadline = time.monotonic() + 30
        while str(db) not in server.stderr() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = server.stderr()
        for known in (marker, "KernelError", "nft failed", "Operation not permitted",
                      "POST /1.0/networks failed", "Traceback", str(db)):
            assert known in log, (known, log[-3000:])
    finally:
        if server is not None:
            server.kill()
        lab.close()


def test_an_unexpected_exception_tells_the_log_not_the_client(tmp_path: Path,
                                                               caplog: Any) -> None:
    """The application alone (no root needed): an exception that is not a refusal answers
    500 with a short reason; its type and text (here a path) go to the log."""
    import asyncio

    from podnet.api.app import create_app
    from podnet.manage.manager import Manager

    class Broken(Manager):
        def list_networks(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"cannot read {tmp_path}/secret.conf")

    app = create_app(Broken(str(tmp_path)))

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://lxd") as c:
            return await c.get("/1.0/networks")

    with caplog.at_level("ERROR", logger="podnet.api"):
        r = asyncio.run(ask())
    assert_error(r, 500, "Internal server error; see the server log")
    assert str(tmp_path) not in r.text and "RuntimeError" not in r.text, r.text
    assert "RuntimeError" in caplog.text and f"{tmp_path}/secret.conf" in caplog.text


def test_clients_that_never_read_their_answers_do_not_hold_the_unix_socket(node: Node) -> None:
    """Every unix slot taken by a client that pipelines thousands of requests and never reads
    an answer (the server's writes stall): the administrator's request is still answered, and
    the stalled connections are closed by the write-stall and answer timers — a busy connection
    is never evicted, so without them the socket would be held for as long as they like."""
    from podnet.api.listener import budget

    cap = budget(NOFILE).unix
    before = node.fds()
    request = b"GET /1.0 HTTP/1.1\r\nHost: lxd\r\n\r\n" * 3000
    stalled = []
    try:
        for _ in range(cap + 5):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            s.connect(str(node.server.socket))
            s.setblocking(False)
            try:
                s.send(request)
            except BlockingIOError:
                pass
            stalled.append(s)
        deadline = time.monotonic() + DEADLINE
        while node.server.stderr().count('"GET /1.0 HTTP/1.1" 200') < 20 * cap:
            assert time.monotonic() < deadline, "the pipelined requests were not served"
            time.sleep(0.2)  # until their answers pile up unread: the writes stall
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(node.server.socket)),
                          base_url="http://lxd", timeout=DEADLINE) as admin:  # fmt: skip
            started = time.monotonic()
            assert admin.get("/1.0").status_code == 200
            node.figures["admin_answered_s_with_unix_slots_stalled"] = round(
                time.monotonic() - started, 1)
        deadline = time.monotonic() + DEADLINE
        while node.fds() > before + 2:  # the stalled ones closed, by the server
            assert time.monotonic() < deadline, (node.fds(), before)
            time.sleep(0.5)
    finally:
        for s in stalled:
            s.close()
