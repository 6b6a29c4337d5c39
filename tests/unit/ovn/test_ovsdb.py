"""How :func:`podnet.ovn.ovsdb.reason` reads ``ovsdb-client``'s failures (the texts below are
what ovsdb-client 3.1 of Debian 12 printed for each case, but ``UNROUTED``, which is that same
line with another errno), and the message
:class:`~podnet.ovn.ovsdb.Unreachable` carries: the remote and one of the fixed reasons."""

from __future__ import annotations

import pytest

from podnet.ovn import ovsdb

REFUSED = 'ovsdb-client: failed to connect to "tcp:127.0.0.1:1" (Connection refused)\n'
NO_FILE = ('ovsdb-client: failed to connect to "unix:/root/.ssh/authorized_keys" (No such file or '
           'directory)\n')  # fmt: skip
BANNER = ("2026-11-28T14:30:57Z|00001|jsonrpc|WARN|tcp:127.0.0.1:18765: error parsing stream: "
          "line 0, column 0, byte 0: invalid character 'S'\novsdb-client: transaction failed "
          "(Protocol error)\n")  # fmt: skip
NO_PEM = ("2026-11-28T14:30:57Z|00001|stream_ssl|ERR|Private key must be configured to use SSL\n"
          'ovsdb-client: failed to connect to "ssl:127.0.0.1:1" (Protocol not available)\n')
HANDSHAKE = ("2026-11-28T14:30:57Z|00001|stream_ssl|WARN|SSL_connect: error:0A00010B:SSL "
             "routines::wrong version number\novsdb-client: failed to connect to "
             '"ssl:127.0.0.1:6641" (Protocol error)\n')  # fmt: skip
ALARM = "2026-11-28T14:31:01Z|00001|fatal_signal|WARN|terminating with signal 14 (Alarm clock)\n"
UNROUTED = 'ovsdb-client: failed to connect to "tcp:192.0.2.1:6641" (No route to host)\n'


@pytest.mark.parametrize(("remote", "rc", "stderr", "why"), [
    ("tcp:127.0.0.1:1", 1, REFUSED, ovsdb.REFUSED),
    ("tcp:127.0.0.1:18765", 1, BANNER, ovsdb.PROTOCOL),
    ("ssl:127.0.0.1:1", 1, NO_PEM, ovsdb.TLS),
    ("ssl:127.0.0.1:6641", 1, HANDSHAKE, ovsdb.TLS),
    ("tcp:192.0.2.1:6641", -14, ALARM, ovsdb.TIMED_OUT),
    ("tcp:192.0.2.1:6641", None, "", ovsdb.TIMED_OUT),
    ("tcp:192.0.2.1:6641", 1, UNROUTED, ovsdb.UNREACHABLE),
    # a unix: remote says nothing of the path: file, missing, socket of something else, slow
    ("unix:/root/.bashrc", 1, REFUSED.replace("tcp:127.0.0.1:1", "unix:/root/.bashrc"),
     ovsdb.UNREACHABLE),
    ("unix:/root/.ssh/authorized_keys", 1, NO_FILE, ovsdb.UNREACHABLE),
    ("unix:/run/sshd.sock", 1, BANNER, ovsdb.UNREACHABLE),
    ("unix:/run/x.sock", None, "", ovsdb.UNREACHABLE),
])  # fmt: skip
def test_reason(remote: str, rc: int | None, stderr: str, why: str) -> None:
    assert ovsdb.reason(remote, rc, stderr) == why
    assert why in ovsdb.REASONS


def test_a_spent_deadline_tries_no_remote() -> None:
    """Inside :func:`ovsdb.shared_deadline`, once its time is spent no tool is run: each remote
    is "timed out" at once (the tool is not even looked up)."""
    db = ovsdb.Ovsdb(["tcp:192.0.2.1:6641", "unix:/nonexistent"], "OVN_Northbound")
    with ovsdb.shared_deadline(0.0):
        with pytest.raises(ovsdb.Unreachable) as raised:
            db.transact([])
    assert raised.value.msg == ("OVN OVN_Northbound database unreachable at tcp:192.0.2.1:6641 "
                                "(timed out), unix:/nonexistent (timed out)")
    assert "deadline" in raised.value.details
