"""At its connection cap the TLS listener evicts connections that are not serving a request;
an untrusted client whose request is being served (a trust token being redeemed, the store's
lock busy meanwhile) is serving one, and keeps its connection (:mod:`podnet.api.listener`).

``podnetctl serve`` runs in a node namespace with ``RLIMIT_NOFILE`` 120 (a TCP cap of 16,
:func:`podnet.api.listener.budget`), TLS on 127.0.0.1:8443 there; the store's write lock is
held by the test (as a plugin's ADD would hold it) while the token is redeemed, and plain TCP
connections (in their TLS handshake, evictable) are opened past the cap."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from api_helpers import PODNETCTL, ApiServer, in_ns_python, kill_running, self_signed
from envgate import need
from netns import Lab

pytestmark = pytest.mark.root

PORT = 8443
NOFILE = 120


def test_an_untrusted_client_being_served_is_not_evicted(tmp_path: Path) -> None:
    need("root", "ip", "openssl")
    from podnet.api.listener import budget
    from podnet.store import open_store

    cap = budget(NOFILE).tcp
    server_cert = self_signed(tmp_path, "pnev-server", "-addext", "subjectAltName=IP:127.0.0.1")
    client = self_signed(tmp_path, "pnev-client")
    data = tmp_path / "data"
    lab = Lab()
    server = joiner = flood = None
    try:
        server = ApiServer(lab.node, data, tmp_path / "logs", "--listen", f"127.0.0.1:{PORT}",
                           "--tls-cert", server_cert[0], "--tls-key", server_cert[1],
                           nofile=NOFILE)  # fmt: skip
        deadline = time.monotonic() + 30
        while True:  # the TLS listener records its address once it listens
            token = lab.exec(lab.node, PODNETCTL, "trust", "add-token", "joiner", "--data-dir",
                             str(data), check=False)  # fmt: skip
            if token.returncode == 0:
                break
            assert time.monotonic() < deadline, token
            time.sleep(0.2)
        time.sleep(1.0)
        joiner_code = f"""
import json, ssl, httpx
ctx = ssl.create_default_context(cafile={server_cert[0]!r})
ctx.load_cert_chain(*{list(client)!r})
try:
    r = httpx.post("https://127.0.0.1:{PORT}/1.0/certificates",
                   json={{"trust_token": {token.stdout.strip()!r}}}, verify=ctx, timeout=30)
    print(json.dumps([r.status_code, r.json().get("error", "")]))
except httpx.HTTPError as err:
    print(json.dumps([0, type(err).__name__]))
"""
        flood_code = f"""
import socket, sys, time
held = []
for _ in range({cap + 10}):
    held.append(socket.create_connection(("127.0.0.1", {PORT}), timeout=10))
    time.sleep(0.02)
print("flooded", flush=True)
sys.stdin.read()
"""
        with open_store(str(data)) as store, store.write():  # the lock a plugin's ADD takes
            joiner = in_ns_python(lab.node, joiner_code)
            time.sleep(1.5)  # handshake done, request in, waiting on the lock
            flood = in_ns_python(lab.node, flood_code)
            assert flood.stdout is not None and flood.stdout.readline().strip() == "flooded"
            time.sleep(0.5)
        out, _ = joiner.communicate(timeout=60)
        assert json.loads(out) == [201, ""], (out, server.stderr()[-3000:])
        assert "held (the cap)" in server.stderr()  # evictions happened meanwhile
        listed = lab.exec(lab.node, PODNETCTL, "trust", "list", "--data-dir", str(data)).stdout
        assert "joiner" in listed, listed
    finally:
        kill_running(joiner, flood)
        if server is not None:
            server.kill()
        lab.close()
