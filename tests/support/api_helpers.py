"""Helpers for the REST API tests: ``podnetctl serve`` inside a node namespace, httpx
over its unix socket, LXD's ETags recomputed independently of podnet's code (Go's
``encoding/json`` as LXD 5.0.2 is built with it), the forward maps of table ``inet podnet`` and
the elements a list of forwards should put there, the real ``lxc`` client, and two programs run
inside a node namespace (a TLS client REPL and the schemathesis driver)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from netns import VENV_BIN, Lab, sh

PODNETCTL = str(VENV_BIN / "podnetctl")
PYTHON = str(VENV_BIN / "python")
TESTS = str(Path(__file__).resolve().parent)

#: LXD's envelope fields (``api.ResponseRaw``), in LXD's order.
ENVELOPE_FIELDS = ["type", "status", "status_code", "operation", "error_code", "error", "metadata"]
#: ``api.NetworkForwardPort``'s fields in struct order (the ETag encodes a port as a struct).
PORT_FIELDS = ("description", "protocol", "listen_port", "target_port", "target_address")
#: The kernel's forward state: the DNAT maps (``key : value`` elements) and the sets of listen
#: addresses whose unmatched traffic is dropped (LXD's network forwards: a forward without a default target).
FORWARD_MAPS = ("fwd_v4", "fwd_whole_v4", "fwd_v6", "fwd_whole_v6")
FORWARD_SETS = ("fwd_drop_v4", "fwd_drop_v6")

# -- the server -----------------------------------------------------------------------------------


class ApiServer:
    """``podnetctl serve --data-dir DATA [extra…]`` run inside namespace ``ns``; stdout and stderr
    go to files under ``logs``. :meth:`stop` sends SIGTERM and returns the exit status;
    :meth:`kill` is the teardown of last resort."""

    def __init__(self, ns: str, data: Path, logs: Path, *extra: str, nofile: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        """``nofile``: the server's RLIMIT_NOFILE (soft and hard); ``env``: its environment."""
        self.ns, self.data = ns, data
        data.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        self.socket = data / "unix.socket"
        self.stderr_path = logs / f"serve-{os.getpid()}-{time.monotonic_ns()}.err"
        self.stdout_path = self.stderr_path.with_suffix(".out")
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 - closed in stop()/kill()
        self._out = open(self.stdout_path, "w")  # noqa: SIM115
        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, PODNETCTL, "serve", "--data-dir", str(data), *extra],
            stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err, env=env,
            preexec_fn=limit if nofile is not None else None,
        )
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"podnetctl serve exited {self.proc.returncode}: {self.stderr()}")
            if self.socket.exists():
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(str(self.socket))
                    return
                except OSError:
                    pass
                finally:
                    probe.close()
            time.sleep(0.05)
        raise AssertionError(f"podnetctl serve not ready after {timeout}s: {self.stderr()}")

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket)),
                            base_url="http://lxd", timeout=60, **kwargs)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then the exit status (the socket must be gone afterwards)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        return rc

    def kill(self) -> None:
        kill_running(self.proc)
        for f in (self._err, self._out):
            if not f.closed:
                f.close()
        if self.proc.returncode not in (0, None) and self.socket.exists():
            self.socket.unlink()  # a killed server leaves it behind


@contextmanager
def serving(tmp: Path, *extra: str) -> Iterator[tuple[Lab, ApiServer]]:
    """A new :class:`~netns.Lab` and ``podnetctl serve`` in its node (data and logs under
    ``tmp``, ``extra`` arguments). After the body the server must stop cleanly (exit 0, its
    socket removed); whatever happens it is killed and the lab closed."""
    lab = Lab()
    server = None
    try:
        server = ApiServer(lab.node, tmp / "data", tmp / "logs", *extra)
        yield lab, server
        assert server.stop() == 0, server.stderr()
        assert not server.socket.exists()
    finally:
        if server is not None:
            server.kill()
        lab.close()


# -- envelopes ------------------------------------------------------------------------------------


def assert_sync(r: httpx.Response, status: int = 200, metadata: Any = ...) -> Any:
    """``r`` is LXD's sync envelope with HTTP ``status``; returns its metadata."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert list(body) == ENVELOPE_FIELDS, body
    assert {k: body[k] for k in ENVELOPE_FIELDS[:-1]} == {
        "type": "sync", "status": "Success", "status_code": 200, "operation": "",
        "error_code": 0, "error": ""}, body
    if metadata is not ...:
        assert body["metadata"] == metadata, body
    return body["metadata"]


def assert_error(r: httpx.Response, status: int, message: str | None = None) -> str:
    """``r`` is LXD's error envelope with HTTP and ``error_code`` ``status`` (and ``message``
    when given); returns the message."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json", r.headers
    body = r.json()
    assert sorted(body) == sorted(ENVELOPE_FIELDS), body
    assert body["type"] == "error" and body["status"] == "" and body["status_code"] == 0, body
    assert body["operation"] == "" and body["metadata"] is None, body
    assert body["error_code"] == status, body
    assert isinstance(body["error"], str) and body["error"], body
    if message is not None:
        assert body["error"] == message, body
    return str(body["error"])


# -- LXD's ETag, recomputed -----------------------------------------------------------------------


class Struct(tuple):  # type: ignore[type-arg]
    """(key, value) pairs encoded as a Go struct: fields in declaration order."""


def _go_string(text: str) -> str:
    """A string as Go 1.19's encoding/json ``Encoder`` (HTML escaping on) writes it; Debian 12
    builds LXD 5.0.2 with Go 1.19, where every control character but \\n \\r \\t is \\u00XX
    (Go 1.22 started writing \\b and \\f). Checked against the real LXD 5.0.2 daemon: forwards
    with ports, HTML characters, non-ASCII, U+2028 and control characters, and networks."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or ch in "<>&":
            out.append(f"\\u00{code:02x}")
        elif ch in "\u2028\u2029":
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # invalid UTF-8 becomes U+FFFD
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_json(value: Any) -> str:
    """``json.NewEncoder(h).Encode(value)``: compact, map keys sorted (by bytes), a newline."""

    def enc(v: Any) -> str:
        if v is True:
            return "true"
        if v is False:
            return "false"
        if v is None:
            return "null"
        if isinstance(v, str):
            return _go_string(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, Struct):
            return "{" + ",".join(f"{_go_string(k)}:{enc(x)}" for k, x in v) + "}"
        if isinstance(v, dict):
            keys = sorted(v, key=lambda k: k.encode("utf-8", "surrogatepass"))
            return "{" + ",".join(f"{_go_string(k)}:{enc(v[k])}" for k in keys) + "}"
        if isinstance(v, list | tuple):
            return "[" + ",".join(enc(x) for x in v) + "]"
        raise TypeError(type(v))

    return enc(value) + "\n"


def etag_hash(value: Any) -> str:
    """LXD's ``util.EtagHash``: sha256 hex of :func:`go_json`."""
    return hashlib.sha256(go_json(value).encode("utf-8")).hexdigest()


def forward_etag(forward: dict[str, Any]) -> str:
    """``NetworkForward.Etag()``: ``[listen_address, description, config, ports]``."""
    ports = [Struct((k, p[k]) for k in PORT_FIELDS) for p in forward["ports"]]
    return etag_hash([forward["listen_address"], forward["description"], forward["config"], ports])


def network_etag(network: dict[str, Any]) -> str:
    """A network's ETag: ``[name, managed, type, description, config]``."""
    return etag_hash([network["name"], network["managed"], network["type"],
                      network["description"], network["config"]])


# -- the kernel ---------------------------------------------------------------------------------


def map_elements(ns: str, name: str) -> set[str]:
    """The elements of map ``name`` of table ``inet podnet`` in ``ns``, as ``k . k : v . v``;
    of a set (``fwd_drop_*``), as the element."""
    kind = "set" if name in FORWARD_SETS else "map"
    out = sh("ip", "netns", "exec", ns, "nft", "-j", "list", kind, "inet", "podnet", name)
    items = json.loads(out.stdout)["nftables"]
    elems = next(i[kind] for i in items if kind in i).get("elem", [])
    if kind == "set":
        return {str(e) for e in elems}

    def text(x: Any) -> str:
        if isinstance(x, dict) and "concat" in x:
            return " . ".join(str(p) for p in x["concat"])
        return str(x)

    return {f"{text(k)} : {text(v)}" for k, v in elems}


def kernel_maps(ns: str) -> dict[str, set[str]]:
    """Every forward map and drop set of ``ns``'s table (what :func:`expected_maps` gives)."""
    return {name: map_elements(ns, name) for name in FORWARD_MAPS + FORWARD_SETS}


def _ports(text: str) -> list[int]:
    out: list[int] = []
    for item in text.split(","):
        first, _, last = item.strip().partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def expected_maps(forwards: list[dict[str, Any]]) -> dict[str, set[str]]:
    """What the forward maps must hold for ``forwards`` (API objects, ``?recursion=1``): per
    listen port ``listen . proto . port : target . tport`` (target ports: the listen ports when
    empty, one for all when single), per default target ``listen : target``, and without one
    the listen address in the drop set (LXD's network forwards: "if not set then unmatched traffic will be
    dropped")."""
    want: dict[str, set[str]] = {name: set() for name in FORWARD_MAPS + FORWARD_SETS}
    for f in forwards:
        listen = ipaddress.ip_address(f["listen_address"])
        suffix = f"v{listen.version}"
        for p in f["ports"]:
            lports = _ports(p["listen_port"])
            tports = _ports(p["target_port"]) if p["target_port"] else lports
            target = ipaddress.ip_address(p["target_address"])
            for i, port in enumerate(lports):
                to = tports[0] if len(tports) == 1 else tports[i]
                want[f"fwd_{suffix}"].add(f"{listen} . {p['protocol']} . {port} : {target} . {to}")
        if f["config"].get("target_address"):
            target = ipaddress.ip_address(f["config"]["target_address"])
            want[f"fwd_whole_{suffix}"].add(f"{listen} : {target}")
        else:
            want[f"fwd_drop_{suffix}"].add(str(listen))
    return want


# -- lxc ------------------------------------------------------------------------------------------

LXC_CONFIG = """default-remote: local
remotes:
  images:
    addr: https://images.linuxcontainers.org
    protocol: simplestreams
    public: true
  local:
    addr: unix://
    public: false
aliases: {}
"""


def lxc_conf(path: Path) -> Path:
    """An ``LXD_CONF`` directory that is not a first run (no ``lxd init`` hint, no probe)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yml").write_text(LXC_CONFIG)
    return path


def lxc(data: Path, conf: Path, *args: str, input: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real ``lxc`` against the server of ``data`` (stdin /dev/null unless ``input``)."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": str(conf),
           "LXD_DIR": str(data), "LXD_CONF": str(conf), "LANG": "C.UTF-8"}
    return subprocess.run(["lxc", *args], env=env, capture_output=True, text=True, timeout=timeout,
                          input=input, stdin=subprocess.DEVNULL if input is None else None)


# -- programs run inside a node namespace --------------------------------------------------------


def kill_running(*procs: subprocess.Popen[Any] | None) -> None:
    """SIGKILL and reap each of ``procs`` still running (None: one never started)."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def in_ns_python(ns: str, code: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``python -c code`` in namespace ``ns`` with this directory importable, pipes on."""
    prelude = f"import sys; sys.path.insert(0, {TESTS!r}); "
    return subprocess.Popen(["ip", "netns", "exec", ns, PYTHON, "-c", prelude + code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kwargs)


def tls_repl(base_url: str, ca: str, certs: dict[str, list[str]], timeout: float = 10) -> None:
    """A TLS client reading one JSON request a line on stdin (``cert``: a key of ``certs`` or
    null, ``method``, ``path``, optional ``json``, ``fresh``: a new connection) and printing one
    JSON answer a line: ``{"status", "body", "seconds"}`` or ``{"error": "<exception type>: …"}``.
    One keep-alive connection per client certificate unless ``fresh``; ``timeout``: seconds
    for each of connecting, writing and reading."""
    import ssl

    clients: dict[str | None, httpx.Client] = {}

    def client(name: str | None, fresh: bool) -> httpx.Client:
        if fresh and name in clients:
            clients.pop(name).close()
        if name not in clients:
            context = ssl.create_default_context(cafile=ca)
            if name is not None:
                context.load_cert_chain(*certs[name])
            clients[name] = httpx.Client(base_url=base_url, verify=context, timeout=timeout)
        return clients[name]

    for line in sys.stdin:
        req = json.loads(line)
        start = time.monotonic()
        try:
            c = client(req.get("cert"), bool(req.get("fresh")))
            r = c.request(req["method"], req["path"], json=req.get("json"))
            answer: dict[str, Any] = {"status": r.status_code, "body": r.json(),
                                      "seconds": time.monotonic() - start}
        except Exception as err:  # noqa: BLE001 - reported to the test
            clients.pop(req.get("cert"), None)
            answer = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(answer), flush=True)


#: A request head sent one byte at a time by :func:`flood`'s ``trickle`` clients: longer than
#: any head timeout at one byte a second.
TRICKLED_HEAD = (b"GET /1.0/networks HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n"
                 b"X-Padding: " + b"p" * 200 + b"\r\n\r\n")


def flood(host: str, port: int, counts: dict[str, int], trickle_every: float = 1.0,
          connecting: int = 200) -> None:
    """Idle and slow clients against ``host:port`` (run in the server's namespace), until told
    to stop. ``counts`` per kind: ``tcp`` connects and sends nothing; ``tls`` completes a TLS
    handshake without a client certificate and sends nothing; ``trickle`` does the same, then
    sends :data:`TRICKLED_HEAD` one byte every ``trickle_every`` seconds. Each client reconnects
    as soon as the server closes it (or refuses it), so the pressure stays on; at most
    ``connecting`` connection attempts are under way at once.

    Commands on stdin, one a line; each is answered with one JSON line on stdout:
    ``status`` → ``{kind: {"clients", "attempts", "held", "closed", "failed", "longest"}}``
    (``held``: connections open now; ``closed``: ones the server closed after they were set up;
    ``failed``: attempts refused, reset or timed out while being set up; ``longest``: seconds
    the longest-held one lasted); ``stop`` → no more reconnecting (``{"stopped": true}``);
    ``quit`` → exit."""
    import asyncio
    import ssl
    from dataclasses import asdict, dataclass

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    @dataclass
    class Stats:
        clients: int = 0
        attempts: int = 0
        held: int = 0
        closed: int = 0
        failed: int = 0
        longest: float = 0.0

    stats = {kind: Stats(clients=n) for kind, n in counts.items()}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # an attacker does not care who answers
    stopping = False

    async def trickle(writer: asyncio.StreamWriter) -> None:
        for i in range(len(TRICKLED_HEAD)):
            writer.write(TRICKLED_HEAD[i:i + 1])
            await asyncio.sleep(trickle_every)

    async def client(kind: str, gate: asyncio.Semaphore) -> None:
        st = stats[kind]
        while not stopping:
            st.attempts += 1
            try:
                async with gate:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(
                        host, port, ssl=None if kind == "tcp" else context), timeout=120)
            except (TimeoutError, OSError, ssl.SSLError, EOFError):
                st.failed += 1
                await asyncio.sleep(0.1)
                continue
            st.held += 1
            start = time.monotonic()
            sender = asyncio.ensure_future(trickle(writer)) if kind == "trickle" else None
            try:
                while await reader.read(65536):
                    pass
            except (OSError, ssl.SSLError):
                pass
            finally:
                st.held -= 1
                st.closed += 1
                st.longest = max(st.longest, time.monotonic() - start)
                if sender is not None:
                    sender.cancel()
                writer.transport.abort()

    async def main() -> None:
        nonlocal stopping
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(connecting)
        tasks = [asyncio.ensure_future(client(kind, gate))
                 for kind, n in counts.items() for _ in range(n)]
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if line in ("quit", ""):
                break
            if line == "stop":
                stopping = True
                print(json.dumps({"stopped": True}), flush=True)
            else:
                print(json.dumps({k: asdict(v) for k, v in stats.items()}), flush=True)
        for task in tasks:
            task.cancel()

    asyncio.run(main())


def tls_exchange(host: str, port: int, request: bytes, cert: list[str] | None = None,
                 timeout: float = 30) -> dict[str, Any]:
    """Send ``request`` (raw bytes) on one new TLS connection (client certificate ``cert``:
    [certfile, keyfile], or none), then read until the server closes the connection or
    ``timeout`` seconds pass. ``{"response": text received, "closed": whether the server
    closed}``."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert:
        context.load_cert_chain(*cert)
    raw = socket.create_connection((host, port), timeout=timeout)
    with context.wrap_socket(raw) as conn:
        conn.sendall(request)
        received = b""
        closed = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                break
            except (ssl.SSLError, OSError):
                closed = True  # an unclean end is still the server closing
                break
            if not chunk:
                closed = True
                break
            received += chunk
    return {"response": received.decode("latin-1"), "closed": closed}


def _answer(conn: Any) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP/1.1 response (with a Content-Length) from ``conn``: status, headers
    (lowercase names), body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = conn.recv(65536)
        assert chunk, "connection closed in the body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def trusted_then_forged(host: str, port: int, cert: list[str]) -> dict[str, Any]:
    """Impersonation through proxy headers: a trusted client (certificate ``cert``) keeps its
    connection open after one request; a client without a certificate then names that
    connection's address and port in ``X-Forwarded-For``, ``Forwarded`` and ``X-Real-IP``;
    then the trusted client asks again on its connection. Returns both trusted statuses, the
    trusted connection's ``address:port``, and the forged request's :func:`tls_exchange`."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(*cert)
    ask = f"GET /1.0/networks HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    raw = socket.create_connection((host, port), timeout=30)
    with context.wrap_socket(raw) as trusted:
        trusted.sendall(ask)
        first, _, _ = _answer(trusted)
        address, local_port = trusted.getsockname()[:2]
        who = f"{address}:{local_port}"
        forged = (f"GET /1.0/networks HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: {who}\r\n"
                  f'Forwarded: for="{who}"\r\nX-Real-IP: {address}\r\nX-Forwarded-Proto: https'
                  "\r\n\r\n").encode()
        out = tls_exchange(host, port, forged)
        try:
            trusted.sendall(ask)
            again: int | None = _answer(trusted)[0]
        except (AssertionError, OSError):
            again = None  # the trusted connection was closed meanwhile
    return {"trusted": first, "again": again, "who": who, **out}


def schema_run(data_dir: str, max_examples: int, seed: int) -> None:
    """schemathesis against ``/openapi.json`` of the application on ``data_dir`` (run inside a
    node namespace: created networks are bridges there). Every operation, positive and negative
    data, with generated path parameters and with ones naming a network and forward that exist
    (re-created before each example when a case deleted them); derandomized, ``max_examples``
    a variant. Prints one JSON document: ``{"cases": {operation: n}, "failures": [...]}``."""
    from collections import Counter

    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fixed_seed
    from hypothesis.errors import Unsatisfiable
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        negative_data_rejection,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )
    from starlette.testclient import TestClient

    from podnet.api.app import create_app
    from podnet.manage.manager import Manager

    inner = create_app(Manager(data_dir, create=True))
    crashes: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        """As uvicorn serves it: an exception the application raises after its error
        middleware answered 500 is logged, not raised into the client."""
        try:
            await inner(scope, receive, send)
        except Exception as err:  # noqa: BLE001 - the client got the 500
            crashes.append(f"{type(err).__name__}: {err}")

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_headers_conformance, response_schema_conformance, negative_data_rejection]
    setup = TestClient(app)
    known = {"name": "br0", "listen_address": "198.51.100.1"}

    def ensure_known() -> None:
        if setup.get("/1.0/networks/br0").status_code == 404:
            r = setup.post("/1.0/networks", json={"name": "br0", "config": {
                "ipv4.address": "10.0.0.1/24", "ipv6.address": "fd00:1::1/64"}})
            assert r.status_code == 201, r.text
        if setup.get("/1.0/networks/br0/forwards/198.51.100.1").status_code == 404:
            r = setup.post("/1.0/networks/br0/forwards", json={
                "listen_address": "198.51.100.1", "config": {"target_address": "10.0.0.2"},
                "ports": [{"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.3"}]})
            assert r.status_code == 201, r.text

    cases: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []

    def examples(op: Any, mode: Any, strategy: Any) -> Any:
        @fixed_seed(seed)
        @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck),
                  phases=[Phase.explicit, Phase.generate], print_blob=False)
        @given(case=strategy)
        def run(case: Any) -> None:
            ensure_known()
            cases[op.label] += 1
            crashes.clear()
            response = case.call()
            try:
                case.validate_response(response, checks=checks)
            except BaseException as err:  # noqa: BLE001 - collected, reported
                if len(failures) < 200:
                    failures.append({
                        "operation": op.label, "mode": mode.value,
                        "status": response.status_code, "error": str(err).strip()[:1500],
                        "body": response.text[:300], "exception": "; ".join(crashes),
                    })

        return run

    for result in schema.get_all_operations():
        op = result.ok()  # type: ignore[union-attr]  # an invalid schema raises here
        names = {p.name for p in op.path_parameters}
        variants: list[dict[str, str] | None] = [None]
        if names:
            variants.append({n: known.get(n, "default") for n in names})
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            for fixed in variants:
                strategy = op.as_strategy(generation_mode=mode, path_parameters=fixed)
                try:
                    examples(op, mode, strategy)()
                except Unsatisfiable:
                    # nothing to negate (GET /1.0 has no parameters): nothing to send
                    assert mode == schemathesis.GenerationMode.NEGATIVE, op.label
    print(json.dumps({"cases": cases, "failures": failures}))


def self_signed(directory: Path, name: str, *extra: str) -> tuple[str, str]:
    """A self-signed P-256 certificate for ``CN=name`` valid two days, made by ``openssl req``
    with ``extra`` arguments (``-addext subjectAltName=…``): (certificate, key) file paths."""
    crt, key = directory / f"{name}.pem", directory / f"{name}.key"
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}",
       *extra)  # fmt: skip
    return str(crt), str(key)
