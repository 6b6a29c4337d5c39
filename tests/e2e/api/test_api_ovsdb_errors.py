"""What the REST API tells a client when the OVN northbound database it may configure
(``network.ovn.northbound_connection``, set through ``PATCH /1.0``) cannot be used: the remote
and one reason of a fixed set, never what ``ovsdb-client`` said (a probe of the server's files
and ports otherwise), and within one deadline per request however many remotes hang.

``podnetctl serve`` runs in a node namespace of its own (:func:`api_helpers.serving`); the
"remotes" are made there: a regular file and a missing path (as ``/root/.bashrc`` and
``/root/.ssh/authorized_keys`` were), a unix and a TCP socket that greet with a banner, a closed
port, and addresses routed into a veth whose peer drops every frame (blackholed: their
neighbour entries are permanent, so no ARP failure ends the wait)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api_helpers import PODNETCTL, ApiServer, in_ns_python, serving
from envgate import need
from netns import Lab, sh

pytestmark = pytest.mark.root

REASONS = ("connection refused", "unreachable", "timed out", "TLS failure", "not an OVSDB server")
BANNER = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"
#: What ovsdb-client says of such remotes: none of it may reach a client.
TOOL_WORDS = ("Connection refused", "No such file", "Protocol error", "invalid character",
              "error parsing", "failed to connect", "ovsdb-client", "SSH", "Alarm")  # fmt: skip
BLACKHOLED = ["tcp:192.0.2.21:6641", "tcp:192.0.2.22:6641", "tcp:192.0.2.23:6641"]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, ApiServer, Path]]:
    need("root", "ip", "ovsdb-client")
    tmp = tmp_path_factory.mktemp("api-ovsdb")
    with serving(tmp) as (lab, server):
        yield lab, server, tmp


def _banner_servers(lab: Lab, sock_path: Path, port: int) -> object:
    """A unix socket at ``sock_path`` and TCP 127.0.0.1:``port`` in the node, each greeting
    every client with :data:`BANNER` (an SSH server's, say)."""
    code = f"""
import os, socket, threading
u = socket.socket(socket.AF_UNIX); u.bind({str(sock_path)!r}); u.listen(16)
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", {port})); t.listen(16)
def serve(s):
    while True:
        c, _ = s.accept(); c.sendall({(BANNER + chr(13) + chr(10)).encode()!r})
for s in (u, t):
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""
    proc = in_ns_python(lab.node, code)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _answer(client: httpx.Client, connection: str) -> tuple[int, str, float]:
    """Set the NB connection, then list the networks: (status, error message, seconds)."""
    r = client.patch("/1.0", json={"config": {"network.ovn.northbound_connection": connection}})
    assert r.status_code == 200, r.text
    start = time.monotonic()
    r = client.get("/1.0/networks")
    took = time.monotonic() - start
    body = r.json()
    return r.status_code, str(body.get("error", "")), took


def _clean(message: str) -> None:
    for word in TOOL_WORDS:
        assert word not in message, (word, message)


def test_unix_remotes_do_not_tell_what_a_path_is(api: tuple[Lab, ApiServer, Path]) -> None:
    """A regular file, a missing path and a socket that answers something else: the same
    answer, "unreachable"; ovsdb-client's words (refused / no such file / protocol error) go
    to the server's log only."""
    lab, server, tmp = api
    secret = tmp / "root-only"
    secret.write_text("export SECRET=1\n")
    secret.chmod(0o600)
    banner_sock = tmp / "banner.sock"
    proc = _banner_servers(lab, banner_sock, 2222)
    try:
        with server.client() as c:
            answers = {}
            for path in (secret, tmp / "missing" / "authorized_keys", banner_sock):
                status, message, _ = _answer(c, f"unix:{path}")
                assert status == 503, (path, message)
                _clean(message)
                answers[path] = message.replace(str(path), "PATH")
            assert len(set(answers.values())) == 1, answers
            assert next(iter(answers.values())) == \
                "OVN OVN_Northbound database unreachable at unix:PATH (unreachable)"
    finally:
        proc.kill()
        proc.wait()
    log = server.stderr()
    assert "Connection refused" in log and "No such file" in log, log[-3000:]


def test_tcp_reasons_and_no_byte_of_the_remote(api: tuple[Lab, ApiServer, Path]) -> None:
    """tcp: a closed port is refused, a port that greets with a banner is not an OVSDB server,
    and not one character of the banner reaches the client (the log has ovsdb-client's
    words)."""
    lab, server, tmp = api
    proc = _banner_servers(lab, tmp / "banner2.sock", 2223)
    try:
        with server.client() as c:
            status, message, _ = _answer(c, "tcp:127.0.0.1:2223")
            assert (status, message) == (
                503, "OVN OVN_Northbound database unreachable at tcp:127.0.0.1:2223 "
                "(not an OVSDB server)")
            _clean(message)
            status, message, _ = _answer(c, "tcp:127.0.0.1:1")
            assert (status, message) == (
                503, "OVN OVN_Northbound database unreachable at tcp:127.0.0.1:1 "
                "(connection refused)")
            # two remotes: each named with its own reason
            status, message, _ = _answer(c, "tcp:127.0.0.1:1,tcp:127.0.0.1:2223")
            assert message == ("OVN OVN_Northbound database unreachable at tcp:127.0.0.1:1 "
                               "(connection refused), tcp:127.0.0.1:2223 (not an OVSDB server)")
    finally:
        proc.kill()
        proc.wait()
    assert "invalid character 'S'" in server.stderr()


@contextmanager
def _blackholed(lab: Lab) -> Iterator[None]:
    """:data:`BLACKHOLED` routed, in the node, into a veth whose peer drops every frame."""
    sh("ip", "-n", lab.node, "link", "add", "pnblack0", "type", "veth", "peer", "name",
       "pnblack1")
    try:
        for link in ("pnblack0", "pnblack1"):
            sh("ip", "-n", lab.node, "link", "set", link, "up")
        sh("ip", "-n", lab.node, "addr", "add", "192.0.2.1/24", "dev", "pnblack0")
        for remote in BLACKHOLED:
            sh("ip", "-n", lab.node, "neigh", "replace", remote.split(":")[1], "lladdr",
               "02:00:5e:00:53:01", "dev", "pnblack0", "nud", "permanent")
        yield
    finally:
        sh("ip", "-n", lab.node, "link", "del", "pnblack0")


def test_blackholed_remotes_share_one_deadline(api: tuple[Lab, ApiServer, Path]) -> None:
    """Three tcp remotes whose SYNs are dropped (routed into a veth): the request is
    answered 503 "timed out" within the request's one OVSDB deadline (5 s), not after a
    10 s timeout per remote; the next request is as quick."""
    lab, server, _ = api
    with _blackholed(lab), server.client() as c:
        for _ in range(2):
            status, message, took = _answer(c, ",".join(BLACKHOLED))
            assert status == 503, message
            assert message == "OVN OVN_Northbound database unreachable at " + ", ".join(
                f"{r} (timed out)" for r in BLACKHOLED), message
            assert took < 15, f"{took:.1f} s for one request with three blackholed remotes"
        c.patch("/1.0", json={"config": {"network.ovn.northbound_connection": ""}})
        r = c.get("/1.0/networks")
        assert r.status_code == 200, r.text
    assert json.dumps(BLACKHOLED[0])[1:-1] in server.stderr()


def test_a_blackholed_nb_never_holds_the_store_lock(api: tuple[Lab, ApiServer, Path]) -> None:
    """Three uplink bridges (``ipv4.ovn.ranges``: the NB is asked whether the name is a
    cluster network's) created at once while the NB is blackholed: each is answered 503 within
    its own deadline, not one after the other, and a store writer running meanwhile (``podnetctl
    trust add``, which waits on the lock the plugin's ADD and DEL take) is not kept
    waiting by the NB at all. No network is made."""
    lab, server, tmp = api
    answers: dict[int, tuple[int, float]] = {}
    cert = tmp / "pnlock.pem"
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", str(tmp / "pnlock.key"), "-out", str(cert), "-days", "2", "-subj",
       "/CN=pnlock")

    def create(i: int) -> None:
        body = {"name": f"pnup{i}", "type": "bridge", "config": {
            "ipv4.address": f"10.231.{20 + i}.1/24", "ipv6.address": "none",
            "ipv4.ovn.ranges": f"10.231.{20 + i}.100-10.231.{20 + i}.110"}}  # fmt: skip
        start = time.monotonic()
        with server.client() as c:
            r = c.post("/1.0/networks", json=body)
        answers[i] = (r.status_code, time.monotonic() - start)

    with _blackholed(lab), server.client() as c:
        r = c.patch("/1.0", json={"config": {
            "network.ovn.northbound_connection": ",".join(BLACKHOLED)}})  # fmt: skip
        assert r.status_code == 200, r.text
        try:
            threads = [threading.Thread(target=create, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            time.sleep(1.0)  # the three are waiting on the NB
            start = time.monotonic()
            out = lab.exec(lab.node, PODNETCTL, "trust", "add", str(cert), "--data-dir",
                           str(server.data), check=False)  # fmt: skip
            writer = time.monotonic() - start
            for t in threads:
                t.join(60)
        finally:
            c.patch("/1.0", json={"config": {"network.ovn.northbound_connection": ""}})
        assert out.returncode == 0 and writer < 2.5, (out, f"{writer:.1f} s")
        assert {s for s, _ in answers.values()} == {503}, answers
        assert max(t for _, t in answers.values()) < 8, answers
        names = [n["name"] for n in c.get("/1.0/networks", params={"recursion": 1}).json()[
            "metadata"]]  # fmt: skip
        assert not [n for n in names if n.startswith("pnup")], names
