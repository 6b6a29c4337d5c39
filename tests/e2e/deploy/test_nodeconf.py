"""The node's configuration file (``/etc/podnet/podnet.conf``; ``PODNET_CONF`` here): its
format and trust rule, the plugins' and podnetctl's use of it, ``podnetctl install``/
``uninstall`` around it, and the store a refused command must not leave behind.

The plugin and podnetctl run as the files ``podnetctl install`` writes / the venv's console
script, in subprocesses with exactly the environment given (no ``PODNET_DATA_DIRS``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envgate import need
from netns import VENV_BIN
from podnet import nodeconf
from podnet.errors import InvalidConfig
from podnet.netconf import store_keys

PODNETCTL = str(VENV_BIN / "podnetctl")
BASE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def ctl(*args: str, conf: Path, env: dict[str, str] | None = None,
        netns: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``podnetctl ARGS`` with only PATH and ``PODNET_CONF=conf`` in its environment."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, PODNETCTL, *args], capture_output=True, text=True, timeout=60,
                          env={**BASE_ENV, "PODNET_CONF": str(conf), **(env or {})})  # fmt: skip


# -- the format ------------------------------------------------------------------------------
def test_parse_keys_comments_and_below() -> None:
    conf = nodeconf.parse(
        "# comment\n\n  data_dir = /srv/pn  \nallow_data_dir=/srv/other\n"
        "allow_data_dir = /srv/tests/*\ninstalled = /opt/cni/bin/podnet\n",
        "/x/podnet.conf",
    )
    assert (conf.data_dir, conf.configured) == ("/srv/pn", True)
    assert conf.allowed == [("/srv/other", False), ("/srv/tests", True)]
    assert conf.installed == ["/opt/cni/bin/podnet"]
    assert conf.data_dirs() == [("/var/lib/podnet", False), ("/srv/pn", False),
                                ("/srv/other", False), ("/srv/tests", True)]  # fmt: skip
    assert nodeconf.parse(conf.render(), "/x/podnet.conf").data_dirs() == conf.data_dirs()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("data_dir /srv/pn\n", "line 1: not 'key = value'"),
        ("# ok\ndatadir = /srv/pn\n", "line 2: unknown key 'datadir'"),
        ("data_dir = srv/pn\n", "line 1: data_dir: 'srv/pn' is not an absolute path"),
        ("data_dir = /srv/p n\n", "line 1: data_dir: '/srv/p n' may only contain"),
        ("allow_data_dir = /srv/../etc\n", "is not a normal path"),
        ("data_dir = /a\ndata_dir = /b\n", "line 2: data_dir given twice"),
        ("installed = relative\n", "line 1: installed: 'relative' is not an absolute"),
        ("allow_data_dir = //*\n", "line 1: allow_data_dir: '//*' would allow every directory"),
        ("allow_data_dir = /*\n", "line 1: allow_data_dir: '/*' would allow every directory"),
        ("allow_data_dir = /\n", "line 1: allow_data_dir: '/' is the root directory"),
        ("data_dir = /\n", "line 1: data_dir: '/' is the root directory"),
        ("driver = x=os.path\n", "line 1: driver: 'x=os.path' is not type=module:Class"),
        ("driver = x y=m:C\n", "line 1: driver: 'x y=m:C' is not type=module:Class"),
        ("driver = x=a..b:C\n", "line 1: driver: 'x=a..b:C' is not type=module:Class"),
        ("driver = x=m:C\ndriver = x=m:D\n", "line 2: driver: type x given twice"),
    ],
)
def test_parse_refuses_malformed_lines(text: str, why: str) -> None:
    with pytest.raises(InvalidConfig) as err:
        nodeconf.parse(text, "/x/podnet.conf")
    assert err.value.code == 7 and err.value.msg.startswith("node config /x/podnet.conf: ")
    assert why in err.value.msg


def test_parse_driver_lines() -> None:
    conf = nodeconf.parse("driver = extbr=site_drivers.br:Bridge\ndriver=x=m:C\n", "/x/n.conf")
    assert conf.drivers == [("extbr", "site_drivers.br:Bridge"), ("x", "m:C")]


_PATH_PART = st.text(alphabet="abcXYZ019_.-+@,=~", min_size=1, max_size=8).filter(
    lambda p: p not in (".", ".."))
_DIR = st.lists(_PATH_PART, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
_INSTALLED = st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/"),
                              min_size=1, max_size=6), min_size=0, max_size=3).map(
    lambda parts: "/" + "/".join(parts))
_IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)


@st.composite
def _node_confs(draw: st.DrawFn) -> nodeconf.NodeConf:
    """Any configuration whose values pass the file's own checks (drawn wider, then filtered
    by them: ``installed`` from any printable text)."""
    installed = [p for p in draw(st.lists(_INSTALLED, max_size=3)) if nodeconf.installed_path(p)]
    kinds = draw(st.lists(_IDENT, unique=True, max_size=3))
    drivers = [(k, f"{draw(_IDENT)}.{draw(_IDENT)}:{draw(_IDENT)}") for k in kinds]
    return nodeconf.NodeConf("/x/n.conf", draw(st.none() | _DIR),
                             draw(st.lists(st.tuples(_DIR, st.booleans()), max_size=4)),
                             installed, exists=True, drivers=drivers)  # fmt: skip


@given(_node_confs())
@settings(max_examples=300, deadline=None)
def test_render_parse_round_trip(conf: nodeconf.NodeConf) -> None:
    """What install writes is what every later read sees: parse(render(x)) == x."""
    assert nodeconf.parse(conf.render(), conf.path) == conf


@pytest.mark.parametrize("entry", ["/tmp", "/tmp/*", "/srv/a"])
def test_render_of_below_entries_parses(entry: str) -> None:
    below = entry.endswith("/*")
    conf = nodeconf.NodeConf("/x/n.conf", None, [(entry.removesuffix("/*"), below)], exists=True)
    assert f"allow_data_dir = {entry}\n" in conf.render()
    assert nodeconf.parse(conf.render(), "/x/n.conf") == conf


@pytest.mark.parametrize("value", ["//*", "/*", "/"])
def test_environment_entry_for_root_allows_nothing(monkeypatch: pytest.MonkeyPatch,
                                                   value: str) -> None:  # fmt: skip
    from podnet.netconf import allowed_data_dirs, data_dir_allowed

    monkeypatch.setenv("PODNET_DATA_DIRS", value)
    allowed = allowed_data_dirs(nodeconf.NodeConf("/x/n.conf"))
    assert allowed == [("/var/lib/podnet", False)]
    assert not data_dir_allowed("/home/user/x", allowed)


# -- reading it: missing, trusted, untrusted ---------------------------------------------------
def test_missing_file_is_the_defaults(tmp_path: Path) -> None:
    conf = nodeconf.read(str(tmp_path / "none" / "podnet.conf"))
    assert (conf.data_dir, conf.configured, conf.exists) == ("/var/lib/podnet", False, False)
    assert conf.data_dirs() == [("/var/lib/podnet", False)]


def _conf(tmp_path: Path, text: str = "data_dir = /srv/pn\n") -> Path:
    path = tmp_path / "etc" / "podnet.conf"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return path


@pytest.mark.parametrize("fault", ["file-owner", "file-group-writable", "dir-world-writable",
                                   "symlink-via-user-dir", "directory", "too-large", "not-utf8"])
def test_untrusted_or_unreadable_file_is_refused(tmp_path: Path, fault: str) -> None:
    need("root")
    path = _conf(tmp_path)
    expect = {"file-owner": "is owned by uid 4242", "file-group-writable": "group-writable",
              "dir-world-writable": "is world-writable", "symlink-via-user-dir": "uid 4242",
              "directory": "is not a regular file", "too-large": "larger than 65536 bytes",
              "not-utf8": "not UTF-8"}[fault]  # fmt: skip
    if fault == "file-owner":
        os.chown(path, 4242, 0)
    elif fault == "file-group-writable":
        os.chown(path, 0, 4242)
        path.chmod(0o664)
    elif fault == "dir-world-writable":
        path.parent.chmod(0o777)
    elif fault == "symlink-via-user-dir":
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 4242, 4242)
        (theirs / "real.conf").write_text("data_dir = /srv/pn\n")
        path.unlink()
        path.symlink_to(theirs / "real.conf")
    elif fault == "directory":
        path.unlink()
        path.mkdir()
    elif fault == "too-large":
        path.write_text("# x\n" * 20000)
    else:
        path.write_bytes(b"# \xff\n")
    with pytest.raises(InvalidConfig) as err:
        nodeconf.read(str(path))
    assert err.value.code == 7 and err.value.msg.startswith(f"node config {path}: ")
    assert expect in err.value.msg


def test_root_symlink_to_a_root_file_is_read(tmp_path: Path) -> None:
    path = _conf(tmp_path)
    link = tmp_path / "link.conf"
    link.symlink_to(path)
    assert nodeconf.read(str(link)).data_dir == "/srv/pn"


# -- the plugins' data dirs ---------------------------------------------------------------------
def test_store_keys_use_the_node_store_and_allowed_dirs(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("PODNET_DATA_DIRS", raising=False)
    node = nodeconf.parse("data_dir = /srv/pn\nallow_data_dir = /srv/more/*\n", "/x/n.conf")
    assert store_keys({}, node=node) == ("/srv/pn", 5.0)  # no dataDir: the node's store
    assert store_keys({"dataDir": "/srv/more/a"}, node=node)[0] == "/srv/more/a"
    assert store_keys({"dataDir": "/var/lib/podnet"}, node=node)[0] == "/var/lib/podnet"
    with pytest.raises(InvalidConfig) as err:
        store_keys({"dataDir": "/srv/pn/below"}, node=node)
    assert "not a data dir this node allows" in err.value.msg and "/x/n.conf" in err.value.msg
    monkeypatch.setenv("PODNET_DATA_DIRS", "/srv/env")  # still adds to the file's
    assert store_keys({"dataDir": "/srv/env"}, node=node)[0] == "/srv/env"


def _installed_plugins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    out = ctl("install", "--bin-dir", str(bin_dir), "--no-conflist", conf=tmp_path / "unused")
    assert out.returncode == 0, out.stderr
    return bin_dir


def _plugin(bin_dir: Path, verb: str, netconf: dict[str, object], conf: Path,
            **env: str) -> dict[str, object]:  # fmt: skip
    proc = subprocess.run(
        [str(bin_dir / "podnet")], input=json.dumps(netconf), capture_output=True, text=True,
        timeout=60, env={**BASE_ENV, "PODNET_CONF": str(conf), "CNI_COMMAND": verb,
                         "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
                         "CNI_NETNS": "/run/netns/podnet-nodeconf-none", "CNI_PATH": "/x", **env},
    )  # fmt: skip
    return {"rc": proc.returncode, **(json.loads(proc.stdout) if proc.stdout else {})}


def test_plugin_del_allows_the_configured_store_without_environment(tmp_path: Path) -> None:
    """The runtime's cleanup process has no PODNET_DATA_DIRS: the node config alone allows the
    store (before it, this DEL answered 7 and the attachment leaked)."""
    need("root")
    bin_dir = _installed_plugins(tmp_path)
    data = tmp_path / "data"
    netconf = {"cniVersion": "1.0.0", "name": "pnconf", "type": "podnet",
               "ranges": ["10.244.77.0/24"], "dataDir": str(data)}  # fmt: skip
    missing = tmp_path / "no.conf"
    refused = _plugin(bin_dir, "DEL", netconf, missing)
    assert refused["rc"] != 0 and refused["code"] == 7, refused
    conf = _conf(tmp_path, f"data_dir = {data}\n")
    assert _plugin(bin_dir, "DEL", netconf, conf) == {"rc": 0}
    assert (data / "podnet.db").exists()  # the DEL used the allowed store


@pytest.mark.parametrize("verb", ["ADD", "DEL"])
def test_plugin_answers_7_naming_a_malformed_node_config(tmp_path: Path, verb: str) -> None:
    need("root")
    bin_dir = _installed_plugins(tmp_path)
    conf = _conf(tmp_path, "data_dir = /srv/pn\nbogus line\n")
    netconf = {"cniVersion": "1.0.0", "name": "pnconf", "type": "podnet",
               "ranges": ["10.244.77.0/24"]}  # fmt: skip
    answer = _plugin(bin_dir, verb, netconf, conf)
    assert answer["rc"] != 0 and answer["code"] == 7, answer
    assert str(answer["msg"]).startswith(f"node config {conf}: line 2: not 'key = value'"), answer


# -- podnetctl: the node's store as the default --------------------------------------------------
def test_podnetctl_uses_the_installed_store(tmp_path: Path) -> None:
    need("root")
    conf, data = tmp_path / "etc" / "podnet.conf", tmp_path / "data"
    out = ctl("install", "--bin-dir", str(tmp_path / "bin"), "--conf-dir", str(tmp_path / "net.d"),
              "--data-dir", str(data), "--range", "10.244.78.0/24", conf=conf)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "data_dir = " + str(data) in conf.read_text()
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    made = ctl("network", "--init", "list", "-f", "json", conf=conf)  # no --data-dir anywhere
    assert made.returncode == 0, made.stderr
    assert (data / "podnet.db").exists()
    pods = ctl("pods", "-o", "json", conf=conf)
    assert pods.returncode == 0 and json.loads(pods.stdout) == [], pods.stderr
    shown = ctl("config", "show", conf=conf)
    assert shown.returncode == 0, shown.stderr


def test_podnetctl_malformed_node_config_is_one_line(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "store = /srv/pn\n")
    for args in (["pods"], ["network", "list"], ["config", "show"]):
        out = ctl(*args, conf=conf)
        assert out.returncode == 1, out
        assert out.stderr.count("\n") == 1 and out.stderr.startswith(
            f"Error: node config {conf}: line 1: unknown key 'store'"), out.stderr


def test_missing_store_has_one_wording(tmp_path: Path) -> None:
    conf = tmp_path / "none.conf"
    a = ctl("pods", "--data-dir", str(tmp_path / "d"), conf=conf)
    b = ctl("network", "--data-dir", str(tmp_path / "d"), "list", conf=conf)
    prefix = f"Error: No podnet database in {tmp_path / 'd'}: give the data dir of the node's store"
    assert a.stderr.startswith(prefix) and b.stderr.startswith(prefix), (a.stderr, b.stderr)


def test_refused_init_commands_leave_no_store(tmp_path: Path) -> None:
    """Each is refused before anything reaches the kernel, after --init made the store: the
    store goes again. A command that succeeds keeps the store it made."""
    data = tmp_path / "d"
    for args in (["network", "create", "up0", "--type=physical", "parent=nope"],
                 ["network", "forward", "create", "nonet", "10.0.0.1"],
                 ["config", "set", "no.such.key", "1"]):  # fmt: skip
        out = ctl(*args, "--data-dir", str(data), "--init", conf=tmp_path / "none.conf")
        assert out.returncode == 1, out
        assert not data.exists(), (args, sorted(os.listdir(data)))
    out = ctl("config", "set", "network.ovn.integration_bridge", "br-int", "--data-dir",
              str(data), "--init", conf=tmp_path / "none.conf")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (data / "podnet.db").exists()


# -- install: --network, warnings -----------------------------------------------------------------
def _install(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ctl("install", "--bin-dir", str(tmp_path / "bin"), "--conf-dir", str(tmp_path / "net.d"),
               *args, conf=tmp_path / "podnet.conf")  # fmt: skip


def test_install_network_conflist(tmp_path: Path) -> None:
    out = _install(tmp_path, "--network", "br0")
    assert out.returncode == 0, out.stderr
    conf = json.loads((tmp_path / "net.d" / "10-br0.conflist").read_text())
    assert conf["name"] == "br0" and conf["plugins"] == [{
        "type": "podnet", "network": "br0",
        "capabilities": {"portMappings": True, "ips": True, "mac": True}}]  # fmt: skip
    both = _install(tmp_path, "--network", "br0", "--range", "10.244.9.0/24")
    assert both.returncode == 2 and "--network and --range exclude each other" in both.stderr


def test_install_warns_when_replacing_ranges_and_sorting_first(tmp_path: Path) -> None:
    first = _install(tmp_path, "--range", "10.244.30.0/24", "--name", "zz")
    assert first.returncode == 0 and "Warning" not in first.stderr, first.stderr
    again = _install(tmp_path, "--range", "10.244.31.0/24", "--name", "zz")
    assert again.stderr.splitlines() == [
        f"Warning: {tmp_path}/net.d/10-zz.conflist: replacing ranges 10.244.30.0/24 with ranges "
        "10.244.31.0/24 (pods keep their addresses until deleted)"]  # fmt: skip
    kind = _install(tmp_path, "--range", "10.244.32.0/24", "--name", "kindnet")
    assert kind.stderr.splitlines() == [
        f"Warning: 10-kindnet.conflist sorts first in {tmp_path}/net.d, before 10-zz.conflist: "
        "network kindnet becomes the default network of containerd's CRI, CRI-O and ctr run "
        "--cni (--name sets the file name)"]  # fmt: skip
    to_bridge = _install(tmp_path, "--network", "br0", "--name", "zz")
    assert to_bridge.stderr.splitlines() == [
        f"Warning: {tmp_path}/net.d/10-zz.conflist: replacing ranges 10.244.31.0/24 with network "
        "br0 (pods keep their addresses until deleted)"]  # fmt: skip


# -- uninstall --------------------------------------------------------------------------------------
def test_uninstall_removes_what_install_made_and_only_that(tmp_path: Path) -> None:
    need("root", "ip", "nft")
    conf, data = tmp_path / "etc" / "podnet.conf", tmp_path / "data"
    ns = f"pn-uninst-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        common = ["--bin-dir", str(tmp_path / "bin"), "--conf-dir", str(tmp_path / "net.d"),
                  "--unit-dir", str(tmp_path / "units")]  # fmt: skip
        out = ctl("install", *common, "--data-dir", str(data), "--systemd", "--name", "pn1",
                  conf=conf)  # fmt: skip
        assert out.returncode == 0, out.stderr
        mine = f"podnet:{data}"
        (tmp_path / "net.d" / "20-other.conflist").write_text('{"name": "other"}\n')
        (tmp_path / "bin" / "bridge").write_text("#!/bin/sh\n")
        made = ctl("network", "--init", "list", conf=conf, netns=ns)
        assert made.returncode == 0, made.stderr
        subprocess.run(["ip", "netns", "exec", ns, "nft", "add table inet podnet "
                        f'{{ comment "{mine}"; }}'], check=True)  # fmt: skip
        with sqlite3.connect(data / "podnet.db") as db:
            db.execute("INSERT INTO networks (name, type) VALUES ('br9', 'bridge')")
        refused = ctl("uninstall", *common, conf=conf, netns=ns)
        assert refused.returncode == 1 and "still holds network(s) br9" in refused.stderr, refused
        assert (tmp_path / "bin" / "podnet").exists(), refused  # refused: nothing removed
        with sqlite3.connect(data / "podnet.db") as db:
            db.execute("DELETE FROM networks")
        out = ctl("uninstall", *common, "--purge", conf=conf, netns=ns)
        assert out.returncode == 0, out.stderr
        removed = {line.split(None, 1)[1] for line in out.stdout.splitlines()
                   if line.startswith("removed")}  # fmt: skip
        assert {str(tmp_path / "bin" / "podnet"), str(tmp_path / "net.d" / "10-pn1.conflist"),
                str(tmp_path / "units" / "podnet-restore.service"), "table inet podnet",
                str(conf), str(data / "podnet.db"), str(data)} <= removed, out.stdout  # fmt: skip
        assert sorted(os.listdir(tmp_path / "bin")) == ["bridge"], out.stdout
        assert sorted(os.listdir(tmp_path / "net.d")) == ["20-other.conflist"], out.stdout
        assert not data.exists() and not conf.exists(), out.stdout
        listed = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"],
                                capture_output=True, text=True, check=True)  # fmt: skip
        assert "podnet" not in listed.stdout, (listed.stdout, out.stdout)
        again = ctl("uninstall", *common, "--purge", conf=conf, netns=ns)
        assert again.returncode == 0 and "removed" not in again.stdout, again.stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_uninstall_leaves_another_stores_table(tmp_path: Path) -> None:
    need("root", "ip", "nft")
    ns = f"pn-uninst-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "nft",
                        'add table inet podnet { comment "podnet:/srv/elsewhere"; }'], check=True)  # fmt: skip
        out = ctl("uninstall", "--bin-dir", str(tmp_path / "b"), "--conf-dir", str(tmp_path / "c"),
                  "--unit-dir", str(tmp_path / "u"), "--data-dir", str(tmp_path / "d"),
                  conf=tmp_path / "none.conf", netns=ns)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "left (its owner is podnet:/srv/elsewhere) table inet podnet" in " ".join(
            out.stdout.split()) or "table inet podnet" in out.stdout
        listed = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"],
                                capture_output=True, text=True, check=True)  # fmt: skip
        assert "inet podnet" in listed.stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# -- uninstall: which stores, what --purge may delete; install's order and its config -----------
@pytest.fixture
def node_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``PODNET_CONF`` (the file the plugins read) in ``tmp_path/etc``; no table is touched
    (``_remove_table`` reads this namespace's table: not what these tests are about)."""
    from podnet.runtime import uninstaller

    conf = tmp_path / "etc" / "podnet.conf"
    monkeypatch.setenv("PODNET_CONF", str(conf))
    monkeypatch.setattr(uninstaller, "_remove_table", lambda _store: [])
    nodeconf.forget()
    yield conf
    nodeconf.forget()


def _dirs(tmp_path: Path) -> dict[str, str]:
    return {"bin_dir": str(tmp_path / "bin"), "conf_dir": str(tmp_path / "net.d"),
            "unit_dir": str(tmp_path / "units")}  # fmt: skip


def _busy_store(data_dir: Path) -> None:
    from podnet.store import open_store

    with open_store(str(data_dir)) as store, store.write():
        store.networks.insert("busy", "bridge", "", {"ipv4.address": "10.251.0.1/24"})


@pytest.mark.parametrize("where", ["replaced-store", "below-entry"])
def test_uninstall_checks_every_store_of_the_node_config(tmp_path: Path, node_env: Path,
                                                         where: str) -> None:  # fmt: skip
    """Whatever --data-dir names, a store the node configuration still lets plugins use that
    holds a network refuses the uninstall, and nothing is removed."""
    from podnet.errors import CNIError
    from podnet.runtime import installer, uninstaller

    real = tmp_path / "realstore"
    installer.install(**_dirs(tmp_path), data_dir=str(real), plugins=["podnet"],
                      ranges=["10.250.0.0/24"])  # fmt: skip
    if where == "replaced-store":  # the old store stays allowed
        installer.install(**_dirs(tmp_path), data_dir=str(tmp_path / "newstore"),
                          plugins=["podnet"], ranges=["10.250.0.0/24"])  # fmt: skip
        busy = real
    else:
        text = node_env.read_text() + f"allow_data_dir = {tmp_path}/tests/*\n"
        node_env.write_text(text)
        busy = tmp_path / "tests" / "t1" / "store"
    _busy_store(busy)
    other = tmp_path / "otherapp"
    other.mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(CNIError) as err:
        uninstaller.uninstall(**_dirs(tmp_path), data_dir=str(other), purge=True)
    assert err.value.code == 7, err.value.msg
    assert f"the store in {busy} still holds network(s) busy" in err.value.msg
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing removed


def test_purge_deletes_only_a_podnet_store(tmp_path: Path, node_env: Path) -> None:
    """--purge of a directory that is not a podnet store (another program's unix.socket and
    podnet.lock; an SQLite file named podnet.db that is not podnet's) leaves every file; a
    symlinked data dir is refused before anything goes; a podnet store goes."""
    import sqlite3

    from podnet.errors import CNIError
    from podnet.runtime import installer, uninstaller
    from podnet.store import open_store

    other = tmp_path / "otherapp"
    other.mkdir()
    for name in ("unix.socket", "podnet.lock", "app.data"):
        (other / name).write_text("not podnet's\n")
    done = uninstaller.uninstall(**_dirs(tmp_path), data_dir=str(other), purge=True, force=True)
    assert sorted(os.listdir(other)) == ["app.data", "podnet.lock", "unix.socket"], done
    assert installer.Installed(str(other), "left (not a podnet store: no podnet.db)") in done

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with sqlite3.connect(foreign / "podnet.db") as db:
        db.execute("CREATE TABLE notes (x)")
    (foreign / "podnet.lock").write_text("theirs\n")
    done = uninstaller.uninstall(**_dirs(tmp_path), data_dir=str(foreign), purge=True)
    assert sorted(os.listdir(foreign)) == ["podnet.db", "podnet.lock"], done
    with sqlite3.connect(foreign / "podnet.db") as db:  # not migrated into a podnet store
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["notes"]

    store = tmp_path / "store"
    open_store(str(store)).close()
    link = tmp_path / "link"
    link.symlink_to(store)
    (tmp_path / "bin").mkdir()
    plugin = tmp_path / "bin" / "podnet"
    plugin.write_text(installer.plugin_script(installer.PLUGINS["podnet"]))
    with pytest.raises(CNIError) as err:
        uninstaller.uninstall(**_dirs(tmp_path), data_dir=str(link), purge=True)
    assert err.value.code == 7 and "is a symlink" in err.value.msg
    assert plugin.exists() and (store / "podnet.db").exists()  # refused: nothing removed

    done = uninstaller.uninstall(**_dirs(tmp_path), data_dir=str(store), purge=True)
    assert not store.exists() and not plugin.exists(), done


def test_uninstall_leaves_a_node_config_podnet_did_not_write(tmp_path: Path,
                                                              node_env: Path) -> None:  # fmt: skip
    from podnet.runtime import installer, uninstaller

    node_env.parent.mkdir()
    node_env.write_text(f"data_dir = {tmp_path / 'data'}\n")  # the administrator's own file
    done = uninstaller.uninstall(**_dirs(tmp_path))
    assert node_env.exists(), done
    assert installer.Installed(str(node_env), "left (not written by podnetctl install)") in done


def test_install_writes_the_node_config_before_the_conflist(tmp_path: Path, node_env: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A runtime that reads the conflist as soon as it appears finds its dataDir allowed."""
    from podnet.runtime import installer

    order: list[str] = []
    write = installer._write

    def recording(path: str, text: str, mode: int) -> installer.Installed:
        order.append(path)
        if path.endswith(".conflist"):  # what a plugin called now would read
            nodeconf.forget()
            assert nodeconf.load().data_dirs()[-1] == (str(tmp_path / "data"), False)
        return write(path, text, mode)

    monkeypatch.setattr(installer, "_write", recording)
    installer.install(**_dirs(tmp_path), data_dir=str(tmp_path / "data"), plugins=["podnet"],
                      ranges=["10.250.0.0/24"], units={"podnet-restore.service": "[Unit]\n"})  # fmt: skip
    conflist = str(tmp_path / "net.d" / "10-podnet.conflist")
    assert order.index(str(node_env)) < order.index(conflist), order
    assert nodeconf.read(str(node_env)).installed == [
        str(tmp_path / "bin" / "podnet"), conflist,
        str(tmp_path / "units" / "podnet-restore.service"),
        str(tmp_path / "units" / "multi-user.target.wants" / "podnet-restore.service")]  # fmt: skip


def test_install_node_conf_elsewhere_is_checked_against_the_plugins_file(
        tmp_path: Path, node_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """``--node-conf X`` other than the file the plugins read: the conflist's dataDir must be
    allowed by theirs (what the plugins will check on every call), else nothing is written."""
    from podnet.runtime import installer

    monkeypatch.delenv("PODNET_DATA_DIRS", raising=False)
    elsewhere = tmp_path / "elsewhere" / "podnet.conf"
    with pytest.raises(InvalidConfig) as err:
        installer.install(**_dirs(tmp_path), data_dir=str(tmp_path / "data"), plugins=[],
                          ranges=["10.250.0.0/24"], node_conf=str(elsewhere))  # fmt: skip
    assert f"the plugins read {node_env}, not {elsewhere}" in err.value.msg, err.value.msg
    assert not elsewhere.exists() and not (tmp_path / "net.d").exists()
    installer.install(**_dirs(tmp_path), data_dir=str(tmp_path / "data"), plugins=[],
                      ranges=["10.250.0.0/24"], node_conf=str(node_env))  # the plugins' file
    assert nodeconf.read(str(node_env)).data_dir == str(tmp_path / "data")
