"""OVSDB transactions (RFC 7047) through the OVS project's ``ovsdb-client transact``: one
process and one round trip, whatever the database holds (why this tool and not ``ovn-nbctl`` or
the Python IDL: docs/decisions/0020-ovsdb-client-transport.md).

A transaction is a list of operations (:class:`podnet.ovn.ops.Op`, RFC 7047 section 5.2); a
``wait`` on the columns a change read makes it fail instead of losing a concurrent update (the
API's ETag/If-Match across nodes). Values are built by :mod:`podnet.ovn.ops` and rows read
through :class:`podnet.ovn.row.Row`; the value constructors are importable from here too.

Errors: :class:`Unreachable` (CNI 11, the API's 503) names the connection; :class:`TxnFailed`
(the server refused an operation: its ``error`` and ``details``); a ``wait`` that did not hold
is :class:`Conflict`, one that ran out of its time :class:`WaitTimedOut`.

What a failure tells. The message (``msg``) of :class:`Unreachable` names each remote with one
reason of a fixed set (:data:`REASONS`: refused, unreachable, timed out, TLS, protocol), never
``ovsdb-client``'s words; its stderr goes to ``details`` only, for the server's log and the
node's operator. The REST API lets its clients set the connection, so its answer must not turn
the server into a probe: a ``unix:`` remote is only ever "unreachable" (connecting to
``unix:/root/.bashrc`` is refused, to a missing path "No such file", and a socket that answers
something else a "Protocol error" — three facts about root's files), and no byte a remote sent
reaches the message. A ``tcp:`` or ``ssl:`` remote's reason tells what any TCP client learns
by connecting.

Time. Each remote gets ``timeout`` seconds. Transactions run inside :func:`shared_deadline`
(the API: one per request) share its seconds instead: the remotes left split what is left, so
three blackholed remotes cost the deadline, not three timeouts.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from podnet import proc
from podnet.errors import KernelError, TryAgainLater
from podnet.ovn import ops as opsmod
from podnet.ovn.ops import Op, named, omap, oset, uuid
from podnet.ovn.row import Row, rows

__all__ = [
    "Conflict", "Deadline", "Ovsdb", "TxnFailed", "Unreachable", "WaitTimedOut", "named",
    "omap", "oset", "reason", "shared_deadline", "uuid",
]  # fmt: skip

#: Seconds ``ovsdb-client`` may take to connect and answer.
DEFAULT_TIMEOUT = 10.0

#: Why a remote did not answer: the only words of a failure that leave the server.
REFUSED = "connection refused"
UNREACHABLE = "unreachable"
TIMED_OUT = "timed out"
TLS = "TLS failure"
PROTOCOL = "not an OVSDB server"
REASONS = (REFUSED, UNREACHABLE, TIMED_OUT, TLS, PROTOCOL)

#: ``ovsdb-client``'s words (OVS lib/stream*.c, lib/jsonrpc.c: strerror texts under the C
#: locale, and its own) → reason, first match wins; anything else is :data:`UNREACHABLE`.
_CLUES = (
    ("(Connection refused)", REFUSED),
    ("(Connection timed out)", TIMED_OUT),
    ("timed out", TIMED_OUT),
    ("|stream_ssl|", TLS),
    ("(Protocol not available)", TLS),  # ssl: without usable PEM files
    ("error parsing stream", PROTOCOL),
    ("(Protocol error)", PROTOCOL),
    ("unexpected reply", PROTOCOL),
)
_SIGALRM = 14  # ovsdb-client --timeout ends itself with it


class Unreachable(TryAgainLater):
    """The OVSDB server could not be reached (CNI 11; the API answers 503). ``msg`` names the
    remotes and their :data:`REASONS`; ``details`` holds what the tool said."""


def reason(remote: str, rc: int | None, stderr: str) -> str:
    """Why ``remote`` (connection text) failed, from ``ovsdb-client``'s exit status ``rc``
    (None: killed at the deadline) and ``stderr``: one of :data:`REASONS`. A ``unix:``
    remote is always :data:`UNREACHABLE` (see the module's docstring)."""
    if remote.startswith("unix:"):
        return UNREACHABLE
    if rc is None or rc in (-_SIGALRM, 128 + _SIGALRM):
        return TIMED_OUT
    for clue, why in _CLUES:
        if clue in stderr:
            return why
    return UNREACHABLE


class Deadline:
    """``seconds`` shared by the transactions run while it is in force (:func:`shared_deadline`),
    counted from the first one."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends: float | None = None

    def left(self) -> float:
        now = time.monotonic()
        if self.ends is None:
            self.ends = now + self.seconds
        return self.ends - now


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "podnet_ovsdb_deadline", default=None
)


@contextlib.contextmanager
def shared_deadline(seconds: float) -> Iterator[Deadline]:
    """Every transaction in this context (threads started with a copy of it included, as
    anyio's worker threads are) shares ``seconds``, from the first one on."""
    deadline = Deadline(seconds)
    token = _deadline.set(deadline)
    try:
        yield deadline
    finally:
        _deadline.reset(token)


#: Fewer seconds left of a shared deadline than this: the remote is not tried.
MIN_ATTEMPT = 0.5


class TxnFailed(KernelError):
    """The server refused the transaction (an operation's ``error``)."""


class Conflict(TxnFailed):
    """A ``wait`` operation did not hold: the rows changed since they were read. ``op``: the
    index of that operation in the transaction."""

    op: int = -1


class WaitTimedOut(TxnFailed):
    """A ``wait`` given time (``timeout`` > 0 ms) ran out before its condition held."""


class Ovsdb:
    """Database ``database`` at ``remotes`` (OVSDB connection texts, tried in order: a
    clustered NB lists each member). ``ssl``: ``(private key, certificate, CA certificate)``
    file paths for ``ssl:`` remotes. ``timeout``: seconds per attempt."""

    def __init__(
        self,
        remotes: Sequence[str],
        database: str,
        *,
        ssl: tuple[str, str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.remotes = list(remotes)
        self.database = database
        self.ssl = ssl
        self.timeout = timeout

    def describe(self) -> str:
        return ",".join(self.remotes)

    def transact(self, ops: Sequence[Op | Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Run ``ops`` (:class:`podnet.ovn.ops.Op`, or their JSON objects) as one transaction;
        each operation's result. Unreachable (11) when no remote answers; Conflict for a failed
        ``wait`` (``timeout`` 0), WaitTimedOut for one whose time ran out; TxnFailed for any
        other error (the whole transaction was then rolled back by the server)."""
        sent = opsmod.wire(ops)
        body = json.dumps([self.database, *sent], separators=(",", ":"))
        shared = _deadline.get()
        reasons, said = [], []
        for i, remote in enumerate(self.remotes):
            timeout = self.timeout
            if shared is not None:
                left = shared.left()
                if left < MIN_ATTEMPT:
                    reasons.append(f"{remote} ({TIMED_OUT})")
                    said.append(f"{remote}: not tried, the deadline was spent")
                    continue
                # the remotes not tried yet share what is left; ovsdb-client counts whole s
                timeout = min(timeout, max(1.0, float(int(left / (len(self.remotes) - i)))))
            argv = ["ovsdb-client", f"--timeout={max(1, round(timeout))}"]
            if self.ssl is not None:
                key, cert, ca = self.ssl
                argv += [f"--private-key={key}", f"--certificate={cert}", f"--ca-cert={ca}"]
            argv += ["transact", remote, body]
            env = {**os.environ, "LC_ALL": "C"}  # strerror's words as _CLUES knows them
            rc: int | None
            try:
                rc, out, err = proc.spawn(argv, None, env=env, timeout=timeout + 0.5).wait()
            except proc.ToolTimeout as tool:
                rc, out, err = None, "", tool.details
            if rc == 0:
                return self._results(json.loads(out), sent)
            reasons.append(f"{remote} ({reason(remote, rc, err)})")
            said.append(f"{remote}: {' '.join(err.split())[:300]}")
        raise Unreachable(
            f"OVN {self.database} database unreachable at {', '.join(reasons)}", "; ".join(said)
        )

    def _results(
        self, results: list[Any], ops: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        for i, result in enumerate(results):
            if isinstance(result, dict) and "error" in result:
                op = ops[i]["op"] if i < len(ops) else "commit"
                message = f"{result['error']}: {result.get('details', '')}".strip(": ")
                if result["error"] == "timed out" and op == "wait":
                    if ops[i].get("timeout", 0):
                        raise WaitTimedOut(f"OVN {self.database}: waited in vain", message)
                    conflict = Conflict(f"OVN {self.database}: changed concurrently", message)
                    conflict.op = i
                    raise conflict
                raise TxnFailed(f"OVN {self.database} refused the change ({op})", message)
        return [r if isinstance(r, dict) else {} for r in results]

    def select(
        self, table: str, where: Sequence[Any] = (), columns: Sequence[str] | None = None
    ) -> list[Row]:
        """The rows of ``table`` matching ``where`` (OVSDB conditions)."""
        return rows(self.transact([opsmod.select(table, where, columns)])[0])
