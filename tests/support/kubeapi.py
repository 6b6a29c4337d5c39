"""A stand-in kube-apiserver for the node agent's tests: the real wire protocol of
``/api/v1/nodes``, with a test-side API to change Nodes and to break things on purpose.

What it speaks (Kubernetes "API Concepts", sections "Efficient detection of changes",
"Watch bookmarks" and "Resource versions"; ``k8s.io/apiserver`` ``pkg/storage/cacher``):

- ``GET /api/v1/nodes``: a ``NodeList`` with ``metadata.resourceVersion``;
- ``GET /api/v1/nodes?watch=true``: HTTP/1.1 chunked, one ``{"type", "object"}`` JSON event a
  line (``ADDED``, ``MODIFIED``, ``DELETED``; ``BOOKMARK`` only with ``allowWatchBookmarks=true``;
  ``ERROR`` carrying a ``Status``). From ``resourceVersion`` R it sends every change after R;
  without R (or ``"0"``) it starts with an ``ADDED`` for every Node. ``timeoutSeconds`` ends the
  stream cleanly (the terminating chunk). An R older than the retained window is ``410 Gone``:
  as an HTTP 410 ``Status`` (etcd's answer) or as a 200 whose first event is an ``ERROR`` with
  code 410 (the watch cache's), chosen by ``gone``;
- ``GET /api/v1/nodes/NAME``, ``/version``, ``/api``, ``/api/v1``, ``/apis`` (discovery, enough
  for the ``kubernetes`` client and ``kubectl``); anything else is a 404 ``Status``.

The test side: :meth:`KubeAPI.create` / :meth:`update` / :meth:`delete` Nodes (each a new
resourceVersion), :meth:`expire` the window (optionally ending the open watches with an ``ERROR``
410), :meth:`bookmark`, :meth:`drop_streams` (the connection cut mid-stream), :meth:`garbage`
(bytes that are no event), :meth:`down` / :meth:`up` (nothing listening), :meth:`fail` (every
request answered with an HTTP error), and request counts (:attr:`requests`, :attr:`watches`).

It listens on 127.0.0.1 (a free port), or inside a network namespace: the listening socket is made
by a thread that entered ``/run/netns/<netns>`` (:class:`podnet.link.netns.NetNS`), and served
from the test process, so a process in that namespace reaches it at ``address``. Plain HTTP; a
bearer token is checked when ``token`` is given.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import queue
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]

#: Seconds within which a watch's handler sees that its client has gone.
CLIENT_GONE_CHECK = 0.2
#: The server's ``gitVersion`` (``/version``).
GIT_VERSION = "v1.31.0-podnet-standin"


def node(name: str, pod_cidrs: list[str] | tuple[str, ...] = (),
         internal_ips: list[str] | tuple[str, ...] = (), **extra: Any) -> Obj:  # fmt: skip
    """A ``core/v1`` Node object: ``spec.podCIDRs`` (and ``spec.podCIDR``, the first) and
    ``status.addresses`` of type ``InternalIP`` plus a ``Hostname``; ``extra`` keys are merged
    into the top level (``spec``/``status`` dicts are merged one level deep)."""
    obj: Obj = {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {}, "status": {"addresses": [{"type": "InternalIP", "address": a}
                                             for a in internal_ips]
                               + [{"type": "Hostname", "address": name}]},
    }  # fmt: skip
    if pod_cidrs:
        obj["spec"] = {"podCIDR": pod_cidrs[0], "podCIDRs": list(pod_cidrs)}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(obj.get(key), dict):
            obj[key].update(value)
        else:
            obj[key] = value
    return obj


def status(code: int, reason: str, message: str) -> Obj:
    """A ``meta/v1`` ``Status`` of failure."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


def _line(event_type: str, obj: Obj) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


class _Stream:
    """One open watch: the handler thread writes what arrives in ``items``."""

    def __init__(self, conn: socket.socket, bookmarks: bool, query: dict[str, str]) -> None:
        self.conn = conn
        self.bookmarks = bookmarks
        self.query = query
        self.items: queue.Queue[tuple[str, bytes]] = queue.Queue()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    api: KubeAPI


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def setup(self) -> None:
        super().setup()
        self.server.api._conns.add(self.connection)

    def finish(self) -> None:
        self.server.api._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_gzip(self, body: Obj, pad: int) -> None:
        """``body`` gzip-compressed with ``pad`` bytes of blanks inside the JSON (a bomb: the
        blanks compress ~1000:1), as ``Content-Encoding: gzip``, asked for or not."""
        import zlib

        comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
        text = json.dumps(body).encode()
        parts = [comp.compress(text[:-1])]
        blanks = b" " * 2**20
        for _ in range(pad // len(blanks)):
            parts.append(comp.compress(blanks))
        parts.append(comp.compress(text[-1:]))
        parts.append(comp.flush())
        data = b"".join(parts)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_drip(self, body: Obj, every: float) -> None:
        """``body`` one byte every ``every`` seconds, until it ends or the client leaves."""
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(every)
                if self._client_gone():
                    break
        except OSError:
            pass
        self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _client_gone(self) -> bool:
        """Whether the client closed its end (EOF waiting to be read on the connection)."""
        ready, _, _ = select.select([self.connection], [], [], 0)
        if not ready:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        api = self.server.api
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/")
        watch = path == "/api/v1/nodes" and query.get("watch") in ("true", "1")
        kind = ("watch" if watch else "list" if path == "/api/v1/nodes"
                else "get" if path.startswith("/api/v1/nodes/") else "discovery")  # fmt: skip
        with api._cond:
            api.requests[kind] += 1
            api.log.append((kind, self.path))
            failing = api._failing
            api._cond.notify_all()
        if api.token is not None and self.headers.get("Authorization") != f"Bearer {api.token}":
            api.requests["unauthorized"] += 1
            self._send(401, status(401, "Unauthorized", "Unauthorized"))
            return
        if failing is not None and kind in ("list", "watch", "get"):
            self._send(failing, status(failing, "InternalError", "the stand-in fails on purpose"))
            return
        if path == "/version":
            self._send(200, {"major": "1", "minor": "31", "gitVersion": GIT_VERSION,
                             "gitCommit": "0" * 40, "gitTreeState": "clean",
                             "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.22.0",
                             "compiler": "gc", "platform": "linux/amd64"})  # fmt: skip
        elif path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                             "serverAddressByClientCIDRs": [
                                 {"clientCIDR": "0.0.0.0/0", "serverAddress": api.hostport}]})
        elif path == "/apis":
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        elif path == "/api/v1":
            self._send(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node",
                 "verbs": ["get", "list", "watch"], "shortNames": ["no"]}]})
        elif watch:
            self._watch(query)
        elif path == "/api/v1/nodes":
            with api._lock:
                items = [copy.deepcopy(o) for _, o in sorted(api._nodes.items())]
                rv = str(api._rv)
            for item in items:  # a list's items carry no kind/apiVersion
                item.pop("kind", None)
                item.pop("apiVersion", None)
            body = {"kind": "NodeList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": rv}, "items": items}
            if api.list_gzip is not None:
                self._send_gzip(body, api.list_gzip)
            elif api.list_drip is not None:
                self._send_drip(body, api.list_drip)
            else:
                self._send(200, body)
        elif path.startswith("/api/v1/nodes/"):
            name = path.removeprefix("/api/v1/nodes/")
            with api._lock:
                obj = copy.deepcopy(api._nodes.get(name))
            if obj is None:
                self._send(404, status(404, "NotFound", f'nodes "{name}" not found'))
            else:
                self._send(200, obj)
        else:
            self._send(404, status(404, "NotFound", "the server could not find the requested "
                                                    "resource"))  # fmt: skip

    def _watch(self, query: dict[str, str]) -> None:
        api = self.server.api
        raw_rv = query.get("resourceVersion", "")
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        try:
            timeout = float(query["timeoutSeconds"]) if "timeoutSeconds" in query else None
            start = int(raw_rv) if raw_rv not in ("", "0") else None
            if start is not None and start < 0:
                raise ValueError(raw_rv)
        except ValueError:
            self._send(400, status(400, "BadRequest", f"invalid query: {query}"))
            return
        stream = _Stream(self.connection, bookmarks, query)
        with api._cond:
            api.watches.append(query)
            api._waiting += 1
            api._cond.notify_all()
            api._cond.wait_for(lambda: not api._held)
            api._waiting -= 1
            gone = start is not None and (start < api._oldest or api.always_gone)
            if not gone:
                if start is None:
                    backlog = [_line("ADDED", o) for _, o in sorted(api._nodes.items())]
                else:
                    backlog = [line for rv, line in api._history if rv > start]
                api._streams.add(stream)
            api._cond.notify_all()
        if gone:
            api.requests["gone"] += 1
            body = status(410, "Expired", f"too old resource version: {start} ({api._oldest})")
            if api.gone == "http":
                self._send(410, body)
                return
            backlog = [_line("ERROR", body)]
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in backlog:
                self._chunk(line)
            if gone:
                self._chunk(b"")
                return
            deadline = time.monotonic() + min(api.max_watch, timeout if timeout is not None
                                              else api.max_watch)  # fmt: skip
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._chunk(b"")  # timeoutSeconds: the stream ends cleanly
                    return
                wait = left if api.bookmark_every is None else min(left, api.bookmark_every)
                try:
                    # the client's leaving is seen within CLIENT_GONE_CHECK seconds
                    what, data = stream.items.get(timeout=min(wait, CLIENT_GONE_CHECK))
                except queue.Empty:
                    if self._client_gone():
                        self.close_connection = True
                        return
                    if wait <= CLIENT_GONE_CHECK and api.bookmark_every is not None \
                            and bookmarks and time.monotonic() < deadline:  # fmt: skip
                        self._chunk(api._bookmark_line())
                    continue
                if what == "drop":
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if what == "bookmark" and not bookmarks:
                    continue
                self._chunk(data)
                if what == "end":
                    self._chunk(b"")
                    return
        except OSError:  # the client went away
            self.close_connection = True
        finally:
            with api._cond:
                api._streams.discard(stream)
                api._cond.notify_all()


class KubeAPI:
    """The stand-in server; a context manager (``start`` / ``stop``).

    ``address``/``port``: where to listen (port 0: a free one, kept across :meth:`down` /
    :meth:`up`); ``netns``: a name under ``/run/netns`` to listen inside; ``token``: the bearer
    token every request must carry (None: no check); ``gone``: ``"event"`` or ``"http"``, how a
    watch from an expired resourceVersion is refused; ``retain``: how many changes the window
    keeps (None: all, until :meth:`expire`); ``bookmark_every``: seconds of quiet after which an
    open watch that allows bookmarks gets one (None: only on :meth:`bookmark`); ``max_watch``:
    the longest a watch lasts (seconds; as the API server's own cap on requests).

    Hostile modes, attributes set by a test: ``always_gone`` (every watch from a
    resourceVersion is 410 Gone: a 410 storm), ``list_gzip`` (bytes of blanks: the LIST is a
    gzip bomb sent as ``Content-Encoding: gzip``), ``list_drip`` (seconds: the LIST comes one
    byte at a time)."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0, *, netns: str | None = None,
                 token: str | None = None, gone: str = "event", retain: int | None = None,
                 bookmark_every: float | None = None, max_watch: float = 1800) -> None:  # fmt: skip
        if gone not in ("event", "http"):
            raise ValueError(f"gone must be 'event' or 'http', not {gone!r}")
        self.address = address
        self.port = port
        self.netns = netns
        self.token = token
        self.gone = gone
        self.always_gone = False
        self.list_gzip: int | None = None
        self.list_drip: float | None = None
        self.retain = retain
        self.bookmark_every = bookmark_every
        self.max_watch = max_watch
        self._lock = threading.RLock()  # predicates of wait() may call the methods below
        self._cond = threading.Condition(self._lock)
        self._nodes: dict[str, Obj] = {}
        self._history: list[tuple[int, bytes]] = []
        self._rv = 1000
        #: a watch from a resourceVersion below this one is 410 Gone
        self._oldest = self._rv
        self._streams: set[_Stream] = set()
        self._conns: set[socket.socket] = set()
        self._failing: int | None = None
        self._held = False
        self._waiting = 0
        self._muted = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        #: requests by kind: list, watch, get, discovery, gone (410s), unauthorized
        self.requests: Counter[str] = Counter()
        #: the query of every watch request, in order
        self.watches: list[dict[str, str]] = []
        #: (kind, path) of every request, in order
        self.log: list[tuple[str, str]] = []

    # -- the server ------------------------------------------------------------------------

    def __enter__(self) -> KubeAPI:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def hostport(self) -> str:
        """``address:port`` (IPv6 in brackets)."""
        if ipaddress.ip_address(self.address).version == 6:
            return f"[{self.address}]:{self.port}"
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.hostport}"

    def _listen(self) -> socket.socket:
        family = socket.AF_INET6 if ipaddress.ip_address(self.address).version == 6 \
            else socket.AF_INET  # fmt: skip
        made: list[socket.socket | BaseException] = []

        def make() -> None:
            try:
                if self.netns is None:
                    made.append(self._bind(family))
                    return
                from podnet.link.netns import NetNS

                with NetNS(f"/run/netns/{self.netns}") as ns, ns.entered():
                    made.append(self._bind(family))
            except BaseException as err:  # handed to the caller below
                made.append(err)

        thread = threading.Thread(target=make, name="kubeapi-listen")
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]

    def _bind(self, family: int) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.address, self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        return sock

    def start(self) -> None:
        """Listen and serve (in a thread); also what :meth:`up` does."""
        if self._server is not None:
            return
        sock = self._listen()
        server = _Server((self.address, self.port), _Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = sock
        server.server_address = sock.getsockname()[:2]
        server.api = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="kubeapi", daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and cut every connection (also what :meth:`down` does)."""
        server, self._server = self._server, None
        if server is None:
            return
        self.release()
        server.shutdown()
        server.server_close()
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()

    def down(self) -> None:
        """Nothing listens any more (connections are refused) and open connections are cut."""
        self.stop()

    def up(self) -> None:
        """Listen again, on the same address and port."""
        self.start()

    def fail(self, code: int | None = 503) -> None:
        """Answer every list, watch and get with HTTP ``code`` (None: serve again)."""
        with self._cond:
            self._failing = code

    def kubeconfig(self, path: str, token: str | None = None) -> str:
        """Write a kubeconfig at ``path`` (JSON, which is YAML) for this server; returns it."""
        user: Obj = {}
        if token or self.token:
            user["token"] = token or self.token
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": user}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin",
                                                         "user": "standin"}}],
        }  # fmt: skip
        with open(path, "w") as f:
            json.dump(config, f)
        return path

    # -- the test side ---------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion (a decimal string, as the API's are opaque strings)."""
        with self._lock:
            return str(self._rv)

    def _change(self, event_type: str, obj: Obj, key: str) -> str:
        with self._cond:
            self._rv += 1
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {}) if isinstance(obj, dict) else None
            if isinstance(meta, dict):
                meta["resourceVersion"] = str(self._rv)
                meta.setdefault("uid", f"00000000-0000-4000-8000-{self._rv:012d}")
            obj.setdefault("kind", "Node")
            obj.setdefault("apiVersion", "v1")
            if event_type == "DELETED":
                del self._nodes[key]
            else:
                self._nodes[key] = obj
            line = _line(event_type, obj)
            self._history.append((self._rv, line))
            if self.retain is not None:
                while len(self._history) > self.retain:
                    self._oldest = self._history.pop(0)[0]
            if not self._muted:
                for stream in self._streams:
                    stream.items.put(("event", line))
            self._cond.notify_all()
            return str(self._rv)

    def advance(self, n: int = 1) -> str:
        """Move the resourceVersion on by ``n`` with no Node changing (as writes of other
        resources move etcd's revision); returns the newest resourceVersion."""
        with self._cond:
            self._rv += n
            self._cond.notify_all()
            return str(self._rv)

    def hold(self) -> None:
        """Keep new watch requests waiting (counted, not answered) until :meth:`release`."""
        with self._cond:
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def waiting(self) -> int:
        """How many watch requests :meth:`hold` keeps waiting."""
        with self._lock:
            return self._waiting

    def mute(self, muted: bool = True) -> None:
        """Stop (or, with False, resume) delivering changes to open watches: a watcher that
        falls behind. Changes are still recorded in the window and listed."""
        with self._cond:
            self._muted = muted

    @staticmethod
    def _key(obj: Obj) -> str:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else json.dumps(name)

    def create(self, obj: Obj) -> str:
        """Add a Node (an ``ADDED`` event); returns its resourceVersion. The object is not
        validated: a hostile one reaches the clients as it is."""
        key = self._key(obj)
        if key in self._nodes:
            raise KeyError(f"node {key} exists")
        return self._change("ADDED", obj, key)

    def update(self, obj: Obj) -> str:
        """Replace a Node (``MODIFIED``); returns the new resourceVersion."""
        key = self._key(obj)
        if key not in self._nodes:
            raise KeyError(f"no node {key}")
        return self._change("MODIFIED", obj, key)

    def delete(self, name: str) -> str:
        """Remove a Node (``DELETED`` carrying its last state); returns the resourceVersion."""
        with self._lock:
            obj = self._nodes[name]
        return self._change("DELETED", obj, name)

    def get(self, name: str) -> Obj:
        with self._lock:
            return copy.deepcopy(self._nodes[name])

    def _bookmark_line(self) -> bytes:
        return _line("BOOKMARK", {"kind": "Node", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": str(self._rv)}})  # fmt: skip

    def _broadcast(self, what: str, data: bytes = b"") -> int:
        with self._cond:
            for stream in self._streams:
                stream.items.put((what, data))
            return len(self._streams)

    def bookmark(self) -> int:
        """Send a ``BOOKMARK`` at the newest resourceVersion to every open watch that allows
        them; returns the number of open watches."""
        with self._lock:
            line = self._bookmark_line()
        return self._broadcast("bookmark", line)

    def expire(self, *, streams: bool = False) -> None:
        """Compact the window: a watch from any resourceVersion older than the newest is 410
        Gone. With ``streams``, every open watch also gets an ``ERROR`` event with code 410 and
        ends (the watch cache's answer to a watcher it dropped)."""
        with self._cond:
            self._history.clear()
            self._oldest = self._rv
        if streams:
            body = status(410, "Expired", "too old resource version: the window moved on")
            self._broadcast("end", _line("ERROR", body))

    def drop_streams(self) -> int:
        """Cut every open watch's connection mid-stream (no terminating chunk)."""
        return self._broadcast("drop")

    def garbage(self, data: bytes = b"{this is not an event\n") -> int:
        """Write ``data`` into every open watch as it is."""
        return self._broadcast("raw", data)

    def streams(self) -> int:
        """How many watches are open now."""
        with self._lock:
            return len(self._streams)

    def wait(self, predicate: Callable[[], bool], timeout: float = 30) -> bool:
        """Wait until ``predicate()`` (called under the server's lock, re-checked on every
        request and stream change) holds; False after ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def wait_streams(self, n: int = 1, timeout: float = 30) -> bool:
        """Wait until at least ``n`` watches are open."""
        return self.wait(lambda: self.streams() >= n, timeout)

    def events(self) -> Iterator[Obj]:
        """The retained change events, oldest first (decoded)."""
        with self._lock:
            lines = [line for _, line in self._history]
        for line in lines:
            yield json.loads(line)
