"""The server config that reaches OVN: ``podnetctl config set|get|unset|show``,
``GET|PUT|PATCH /1.0`` and the real ``lxc config`` client on the same rows; values parsed where
they enter, bad ones refused naming the key and changing nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import paths
from api_helpers import PODNETCTL, ApiServer, assert_error, assert_sync, lxc, lxc_conf, serving
from envgate import need
from netns import Lab

pytestmark = pytest.mark.root

NB = "network.ovn.northbound_connection"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Lab, ApiServer, Path]]:
    need("root", "lxc")
    with serving(tmp_path) as (lab, server):
        yield lab, server, lxc_conf(tmp_path / "lxc-conf")


def ctl(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PODNETCTL, "config", *args, "--data-dir", str(data)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_lxc_config_set_get_unset_show(served: tuple[Lab, ApiServer, Path]) -> None:
    """``lxc config set`` through the API is what ``podnetctl config get`` reads, and back."""
    _, server, conf = served
    out = lxc(server.data, conf, "config", "set", NB, "tcp:192.0.2.1:6641")
    assert out.returncode == 0, out.stderr
    assert lxc(server.data, conf, "config", "get", NB).stdout.strip() == "tcp:192.0.2.1:6641"
    assert ctl(server.data, "get", NB).stdout.strip() == "tcp:192.0.2.1:6641"
    shown = yaml.safe_load(lxc(server.data, conf, "config", "show").stdout)
    assert shown["config"] == {NB: "tcp:192.0.2.1:6641"}, shown
    assert ctl(server.data, "set", "network.ovn.integration_bridge=br-pods").returncode == 0
    assert lxc(server.data, conf, "config", "get", "network.ovn.integration_bridge").stdout.strip() == "br-pods"
    assert lxc(server.data, conf, "config", "unset", NB).returncode == 0
    assert ctl(server.data, "show").stdout == "config:\n  network.ovn.integration_bridge: br-pods\n"


@pytest.mark.parametrize(("key", "value", "reason"), [
    (NB, "tcp:ovn.example:6641", "the address must be an IP address and a port"),
    (NB, "tcp:[192.0.2.1]:6641", "an IPv6 address goes in brackets, an IPv4 one does not"),
    (NB, "tcp:192.0.2.1:70000", "port 70000 is out of range"),
    (NB, "unix:relative/nb.sock", "is not an absolute path"),
    (NB, "unix:/run/ovn/nb.sock;touch /tmp/x", "may only contain"),
    (NB, "ssl:192.0.2.1:6641", "without network.ovn.ca_cert"),
    (NB, "http:192.0.2.1:6641", "is not unix:PATH, tcp:IP:PORT or ssl:IP:PORT"),
    ("network.ovn.integration_bridge", "br int", "may only contain"),
    ("network.ovn.integration_bridge", "--all", "starts with '-'"),
    (NB, ",".join(f"tcp:192.0.2.{i}:6641" for i in range(1, 10)), "9 connections: at most 8"),
    (NB, "tcp:192.0.2.1:6641,tcp:192.0.2.1:6641", "a connection is named twice"),
    ("network.ovn.ca_cert", "-----BEGIN CERTIFICATE-----\nAB\x7f\n-----END CERTIFICATE-----\n",
     "PEM text holds only printable ASCII"),
    ("network.ovn.ca_cert", "not a certificate", "not PEM text with a CERTIFICATE"),
    ("core.https_address", "[::]:8443", "unknown key"),
])  # fmt: skip
def test_bad_values_are_refused_and_change_nothing(served: tuple[Lab, ApiServer, Path], key: str,
                                                   value: str, reason: str) -> None:  # fmt: skip
    """Through lxc (exit 1, ``Error: cannot set 'KEY' to …: REASON``), the API (400) and
    podnetctl (exit 1): refused, and the config is what it was."""
    _, server, conf = served
    assert ctl(server.data, "set", NB, "unix:/run/ovn/ovnnb_db.sock").returncode == 0
    before = ctl(server.data, "show").stdout
    out = lxc(server.data, conf, "config", "set", f"{key}={value}")  # KEY=VALUE: "-…" is no flag
    assert out.returncode == 1 and f"Error: cannot set '{key}'" in out.stderr and reason in out.stderr, out.stderr
    with server.client() as client:
        r = client.patch("http://podnet/1.0", json={"config": {key: value}})
        assert reason in assert_error(r, 400)
    out = ctl(server.data, "set", f"{key}={value}")
    assert out.returncode == 1 and reason in out.stderr, out.stderr
    assert ctl(server.data, "show").stdout == before


def test_etag_guards_put(served: tuple[Lab, ApiServer, Path]) -> None:
    """``GET /1.0`` carries the config's ETag; a PUT with an ETag from before a change gets
    412 and changes nothing; with the current one it replaces the config."""
    _, server, _ = served
    with server.client() as client:
        r = client.get("http://podnet/1.0")
        stale = r.headers["ETag"]
        assert assert_sync(r)["config"] == {}
        assert_sync(client.patch("http://podnet/1.0", json={"config": {NB: "tcp:192.0.2.1:6641"}}))
        r = client.put("http://podnet/1.0", json={"config": {NB: "tcp:192.0.2.9:6641"}},
                       headers={"If-Match": stale})  # fmt: skip
        assert_error(r, 412)
        r = client.get("http://podnet/1.0")
        assert assert_sync(r)["config"] == {NB: "tcp:192.0.2.1:6641"}
        r = client.put("http://podnet/1.0", json={"config": {}}, headers={"If-Match": r.headers["ETag"]})
        assert_sync(r)
        assert assert_sync(client.get("http://podnet/1.0"))["config"] == {}


def test_the_client_key_is_never_shown(served: tuple[Lab, ApiServer, Path], tmp_path: Path) -> None:
    """``GET /1.0`` (and ``lxc config show``) show ``network.ovn.client_key`` as ``(hidden)``,
    never its PEM text; a PUT sending back what GET showed (``lxc config edit``, with its ETag)
    keeps the stored key; ``lxc config unset`` removes it."""
    import sqlite3

    _, server, conf = served
    key_file = tmp_path / "client.key"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key_file)], check=True)
    pem = key_file.read_text()
    body = pem.split("-----")[2].strip().splitlines()[0]
    assert ctl(server.data, "set", f"network.ovn.client_key={pem}").returncode == 0

    def stored() -> str | None:
        with sqlite3.connect(server.data / "podnet.db") as db:
            row = db.execute("SELECT value FROM server_config WHERE key = 'network.ovn.client_key'").fetchone()
        return row[0] if row else None

    with server.client() as client:
        r = client.get("http://podnet/1.0")
        shown = assert_sync(r)
        assert shown["config"]["network.ovn.client_key"] == "(hidden)" and body not in r.text
        r = client.put("http://podnet/1.0", json={"config": shown["config"]}, headers={"If-Match": r.headers["ETag"]})
        assert_sync(r)
    assert stored() == pem.strip() or stored() == pem, "PUT of the shown config changed the key"
    out = lxc(server.data, conf, "config", "show")
    assert body not in out.stdout and "(hidden)" in out.stdout, out.stdout
    assert lxc(server.data, conf, "config", "unset", "network.ovn.client_key").returncode == 0
    assert stored() is None


def test_ssl_files_written_by_parallel_calls() -> None:
    """Eight processes writing the same new PEM files at once (a node's parallel ADDs on an
    ``ssl:`` NB after a key change), 40 times: all succeed and find the files complete, 0600 in
    a 0700 directory. Each writes through a temporary file of its own (they once shared
    ``<file>.new``, and one renamed another's away: FileNotFoundError, CNI 999)."""
    import shutil
    import sys
    import uuid

    marker = uuid.uuid4().hex
    src = str(paths.SRC)
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from podnet.drivers.ovn.cluster import _ssl_files\n"
            "for i in range(40):\n"
            "    m = sys.argv[2] + str(i)\n"
            "    config = {'network.ovn.client_key': 'K' + m, 'network.ovn.client_cert': 'C' + m,"
            " 'network.ovn.ca_cert': 'A' + m}\n"
            "    paths = _ssl_files(config)\n"
            "    assert [open(p).read() for p in paths] == ['K' + m, 'C' + m, 'A' + m]\n"
            "    print(paths[0])\n")  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-c", code, src, marker], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    bases = {Path(line).parent for out, _ in outs for line in out.split()}
    try:
        assert all(p.returncode == 0 for p in procs), [err[-300:] for _, err in outs]
        assert len(bases) == 40
        for base in bases:
            assert oct(base.stat().st_mode & 0o777) == "0o700"
            assert sorted(f.name for f in base.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
            assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in base.iterdir())
    finally:
        for base in bases:
            shutil.rmtree(base, ignore_errors=True)


def test_a_replaced_client_key_leaves_no_copy_in_run(tmp_path: Path) -> None:
    """The PEM files an ``ssl:`` NB was reached with (``/run/podnet/ovn-<hash>``) are removed
    when ``podnetctl config set`` replaces the key or ``unset`` removes it; another store's
    files with the same PEM text stay (the hash covers the store)."""
    import shutil

    from podnet.drivers.ovn import cluster

    need("root")
    pems = {}
    for name in ("key", "cert", "other"):
        f = tmp_path / f"{name}.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-subj", f"/CN={name}", "-days", "1", "-keyout", str(f),
                        "-out", str(tmp_path / f"{name}.crt")], check=True, capture_output=True)  # fmt: skip
        pems[name] = (f.read_text(), (tmp_path / f"{name}.crt").read_text())
    data, other = tmp_path / "node", tmp_path / "other-node"
    dirs = []
    try:
        for d in (data, other):
            key, cert = pems["key"]
            out = ctl(d, "set", f"network.ovn.client_key={key}", f"network.ovn.client_cert={cert}",
                      f"network.ovn.ca_cert={cert}", f"{NB}=ssl:192.0.2.1:6642", "--init")  # fmt: skip
            assert out.returncode == 0, out.stderr
        configs = {d: {"network.ovn.client_key": pems["key"][0], "network.ovn.client_cert": pems["key"][1],
                       "network.ovn.ca_cert": pems["key"][1]} for d in (data, other)}  # fmt: skip
        for d in (data, other):
            cluster._ssl_files(configs[d], str(d / "podnet.db"))  # as a call reaching the NB does
        first, kept = (Path(str(cluster.ssl_dir(configs[d], str(d / "podnet.db")))) for d in (data, other))
        dirs += [first, kept]
        assert first != kept and (first / "key.pem").exists() and (kept / "key.pem").exists()
        out = ctl(data, "set", f"network.ovn.client_key={pems['other'][0]}",
                  f"network.ovn.client_cert={pems['other'][1]}")  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert not first.exists(), "the replaced key's files stayed in /run"
        config = {**configs[data], "network.ovn.client_key": pems["other"][0],
                  "network.ovn.client_cert": pems["other"][1]}  # fmt: skip
        second = Path(cluster._ssl_files(config, str(data / "podnet.db"))[0]).parent
        dirs.append(second)
        assert ctl(data, "unset", NB).returncode == 0
        assert ctl(data, "unset", "network.ovn.client_key").returncode == 0
        assert not second.exists(), "the unset key's files stayed in /run"
        assert (kept / "key.pem").read_text() == pems["key"][0], "another store's files were removed"
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
