"""podnet.runtime: conflist loading, version choice, capability injection, the result cache and
the verb chains (with a fake exec, no root), a real subprocess exec with a script plugin, and a
real chain podnet + reference ``tuning`` in namespaces (root)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import podnet.runtime as runtime
from envgate import need
from podnet.errors import CNIError
from podnet.runtime import (
    ArgsError,
    Attachment,
    CacheEntry,
    CNIRuntime,
    ConfigError,
    ExecOutput,
    IncompatibleVersion,
    NetworkNotFound,
    PluginConf,
    PluginFailed,
    PluginNotFound,
    ResultCache,
    RuntimeConf,
    conflist_from_bytes,
    default_container_id,
    load_conflist,
    parse_cap_args,
    parse_cni_args,
    parse_port,
    plugin_config,
)
from podnet.runtime.cache import CACHE_KIND
from podnet.runtime.conflist import choose_version
from podnet.runtime.invoke import SubprocessExec, decode_error, find_in_path


def write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


def conflist(
    name: str = "net1",
    version: str = "1.1.0",
    plugins: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {"cniVersion": version, "name": name, "plugins": plugins or [{"type": "p1"}], **extra}


def result(address: str = "10.0.0.2/32", version: str = "1.1.0") -> dict[str, Any]:
    return {
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/x"}],
        "ips": [{"address": address, "gateway": "10.0.0.1", "interface": 0}],
    }


# -- conflist loading ---------------------------------------------------------------------------
def test_load_conflist_by_name(tmp_path: Path) -> None:
    write_json(tmp_path / "10-a.conflist", conflist("a"))
    write_json(tmp_path / "20-b.conflist", conflist("b", plugins=[{"type": "pb"}]))
    net = load_conflist("b", str(tmp_path))
    assert net.name == "b" and [p.type for p in net.plugins] == ["pb"]
    assert net.source == str(tmp_path / "20-b.conflist")
    assert net.raw == (tmp_path / "20-b.conflist").read_bytes()


def test_first_file_by_name_wins(tmp_path: Path) -> None:
    write_json(tmp_path / "20-late.conflist", conflist("n", plugins=[{"type": "late"}]))
    write_json(tmp_path / "10-early.conflist", conflist("n", plugins=[{"type": "early"}]))
    assert load_conflist("n", str(tmp_path)).plugins[0].type == "early"


def test_conflist_files_before_single_confs(tmp_path: Path) -> None:
    # libcni LoadNetworkConf: *.conflist first, then *.conf / *.json.
    write_json(tmp_path / "00-single.conf", {"cniVersion": "1.0.0", "name": "n", "type": "one"})
    write_json(tmp_path / "99-list.conflist", conflist("n", plugins=[{"type": "listed"}]))
    assert load_conflist("n", str(tmp_path)).plugins[0].type == "listed"


@pytest.mark.parametrize("filename", ["10-x.conf", "10-x.json"])
def test_single_conf_wrapped_as_list(tmp_path: Path, filename: str) -> None:
    single = {"cniVersion": "0.4.0", "name": "x", "type": "bridge", "bridge": "br0"}
    write_json(tmp_path / filename, single)
    net = load_conflist("x", str(tmp_path))
    assert net.cni_version == "0.4.0"
    assert [p.raw for p in net.plugins] == [single]


def test_other_files_ignored(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("not json")
    (tmp_path / "sub.conflist").mkdir()
    write_json(tmp_path / "10-a.conflist", conflist("a"))
    assert load_conflist("a", str(tmp_path)).name == "a"


def test_not_found_names_known_networks(tmp_path: Path) -> None:
    write_json(tmp_path / "10-a.conflist", conflist("a"))
    write_json(tmp_path / "20-b.conf", {"cniVersion": "1.0.0", "name": "b", "type": "x"})
    with pytest.raises(NetworkNotFound, match=r'"zzz".*found: a, b') as err:
        load_conflist("zzz", str(tmp_path))
    assert err.value.code == 7


@pytest.mark.parametrize("make_dir", [True, False])
def test_no_configs(tmp_path: Path, make_dir: bool) -> None:
    d = tmp_path / "confs"
    if make_dir:
        d.mkdir()
    with pytest.raises(NetworkNotFound, match="no net configurations found"):
        load_conflist("a", str(d))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        (json.dumps({"cniVersion": "1.0.0", "plugins": [{"type": "x"}]}), "no name"),
        (json.dumps(conflist(plugins=[])).replace('[{"type": "p1"}]', "[]"), "non-empty list"),
        (json.dumps(conflist(plugins=[{"bridge": "x"}])), r"plugins\[0\].*missing 'type'"),
        (json.dumps({"cniVersion": "1.0.0", "name": "s"}), "missing 'type'"),
        (json.dumps(conflist(disableCheck="maybe")), "disableCheck"),
    ],
)
def test_invalid_config_names_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "10-bad.conflist"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message) as err:
        load_conflist("net1", str(tmp_path))
    assert str(path) in err.value.msg and err.value.code == 7


def test_disable_flags_accept_strings() -> None:
    net = conflist_from_bytes(json.dumps(conflist(disableCheck="true", disableGC=True)).encode())
    assert net.disable_check and net.disable_gc


# -- version choice -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cni_version", "cni_versions", "chosen"),
    [
        ("1.0.0", None, "1.0.0"),
        ("0.3.1", None, "0.3.1"),
        ("1.0.0", ["1.0.0", "1.1.0"], "1.1.0"),
        ("1.0.0", ["1.1.0", "9.9.9"], "1.1.0"),  # unknown versions are skipped
        (None, ["0.4.0", "1.0.0"], "1.0.0"),
        ("1.1.0", ["0.4.0"], "1.1.0"),  # cniVersion takes part in the choice (libcni)
    ],
)
def test_choose_version(
    cni_version: str | None, cni_versions: list[str] | None, chosen: str
) -> None:
    assert choose_version(cni_version, cni_versions) == chosen


@pytest.mark.parametrize(
    ("cni_version", "cni_versions", "error"),
    [
        ("0.2.0", None, IncompatibleVersion),
        ("2.0.0", None, IncompatibleVersion),
        (None, ["9.9.9"], IncompatibleVersion),
        (None, None, ConfigError),
        (1, None, ConfigError),
        ("1.0.0", "1.1.0", ConfigError),
    ],
)
def test_choose_version_errors(cni_version: object, cni_versions: object, error: type) -> None:
    with pytest.raises(error):
        choose_version(cni_version, cni_versions)


# -- capability injection and plugin stdin ------------------------------------------------------
def test_runtime_config_only_for_declared_capabilities() -> None:
    net = conflist_from_bytes(
        json.dumps(
            conflist(
                plugins=[
                    {"type": "a", "capabilities": {"portMappings": True, "bandwidth": False}},
                    {"type": "b"},
                    {"type": "c", "capabilities": {"bandwidth": True}},
                ]
            )
        ).encode()
    )
    caps = {
        "portMappings": [{"hostPort": 80, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1},
        "ips": ["10.0.0.9/24"],
    }
    a, b, c = (plugin_config(net, p, capability_args=caps) for p in net.plugins)
    assert a["runtimeConfig"] == {"portMappings": caps["portMappings"]}
    assert "runtimeConfig" not in b
    assert c["runtimeConfig"] == {"bandwidth": {"ingressRate": 1}}


def test_plugin_config_injects_name_version_prev_result() -> None:
    net = conflist_from_bytes(
        json.dumps(
            conflist(
                "outer",
                "1.0.0",
                plugins=[
                    {"type": "a", "name": "inner", "cniVersion": "0.3.1", "keep": 1},
                ],
            )
        ).encode()
    )
    conf = plugin_config(net, net.plugins[0], prev_result=result(version="1.0.0"))
    assert conf["name"] == "outer" and conf["cniVersion"] == "1.0.0" and conf["keep"] == 1
    assert conf["prevResult"]["ips"][0]["address"] == "10.0.0.2/32"
    assert "runtimeConfig" not in conf
    assert net.plugins[0].raw["name"] == "inner"  # the loaded config is not modified


def test_plugin_capabilities_need_true() -> None:
    plugin = PluginConf({"type": "a", "capabilities": {"x": True, "y": "true", "z": 1}})
    assert plugin.capabilities == {"x"}
    assert PluginConf({"type": "a", "capabilities": ["x"]}).capabilities == frozenset()


# -- cnitool arguments ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "mapping"),
    [
        ("8080:80", {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}),
        ("53:53/udp", {"hostPort": 53, "containerPort": 53, "protocol": "udp"}),
        ("8080:80/TCP", {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}),
        (
            "127.0.0.1:8080:80/tcp",
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "127.0.0.1"},
        ),
        (
            "[2001:db8::1]:8443:443",
            {"hostPort": 8443, "containerPort": 443, "protocol": "tcp", "hostIP": "2001:db8::1"},
        ),
        (
            "2001:db8:0::1:8443:443/udp",
            {"hostPort": 8443, "containerPort": 443, "protocol": "udp", "hostIP": "2001:db8::1"},
        ),
    ],
)
def test_parse_port(spec: str, mapping: dict[str, Any]) -> None:
    assert parse_port(spec) == mapping


@pytest.mark.parametrize(
    "spec",
    ["80", "0:80", "8080:70000", "a:80", "8080:80/icmp", "1.2.3:8080:80", "8080:", ":80", ""],
)
def test_parse_port_invalid(spec: str) -> None:
    with pytest.raises(ArgsError, match="invalid port spec"):
        parse_port(spec)


def test_parse_cni_args() -> None:
    assert parse_cni_args("") == ()
    assert parse_cni_args("IgnoreUnknown=1;K8S_POD_NAME=web") == (
        ("IgnoreUnknown", "1"),
        ("K8S_POD_NAME", "web"),
    )
    for bad in ("A", "A=", "=b", "A=b;", "A=b=c"):
        with pytest.raises(ArgsError, match="invalid CNI_ARGS pair"):
            parse_cni_args(bad)


def test_parse_cap_args() -> None:
    assert parse_cap_args("") == {}
    assert parse_cap_args('{"portMappings": []}') == {"portMappings": []}
    with pytest.raises(ArgsError, match="not valid JSON"):
        parse_cap_args("{")
    with pytest.raises(ArgsError, match="JSON object"):
        parse_cap_args("[]")


def test_default_container_id_is_cnitools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = "cnitool-" + hashlib.sha512(b"/run/netns/pod1").digest()[:10].hex()
    assert default_container_id("/run/netns/pod1") == expected
    monkeypatch.chdir(tmp_path)
    assert default_container_id("ns") == default_container_id(str(tmp_path / "ns"))


# -- the result cache ---------------------------------------------------------------------------
def test_cache_path_and_modes(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path / "cni"))
    path = cache.path("net1", "cid", "eth0")
    assert path == str(tmp_path / "cni" / "results" / "net1-cid-eth0")
    entry = CacheEntry(
        "net1",
        "cid",
        "eth0",
        result(),
        netns="/run/netns/x",
        config=b"{}",
        cni_args=(("K", "V"),),
        capability_args={"portMappings": []},
    )
    assert cache.save(entry) == path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cache.results_dir).st_mode) == 0o700
    raw = json.loads(Path(path).read_text())
    assert raw["kind"] == CACHE_KIND and raw["containerId"] == "cid" and raw["ifName"] == "eth0"
    assert (
        raw["networkName"] == "net1" and raw["config"] == "e30=" and raw["cniArgs"] == [["K", "V"]]
    )
    assert cache.load("net1", "cid", "eth0") == entry
    assert cache.load("net1", "other", "eth0") is None
    cache.remove("net1", "cid", "eth0")
    cache.remove("net1", "cid", "eth0")  # missing is fine
    assert not os.path.exists(path)
    assert os.listdir(cache.results_dir) == []  # no temporary files left


def test_cache_path_needs_all_parts(tmp_path: Path) -> None:
    with pytest.raises(runtime.CacheError, match="requires network name"):
        ResultCache(str(tmp_path)).path("net", "", "eth0")


def test_cache_legacy_and_corrupt(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path))
    os.makedirs(cache.results_dir)
    write_json(Path(cache.path("n", "legacy", "eth0")), result())
    loaded = cache.load("n", "legacy", "eth0")
    assert loaded is not None and loaded.result == result()
    Path(cache.path("n", "bad", "eth0")).write_text("{")
    with pytest.raises(runtime.CacheError, match="not valid JSON"):
        cache.load("n", "bad", "eth0")


def test_cache_entries_by_network(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path))
    for net, cid in (("a", "c1"), ("a", "c2"), ("b", "c3")):
        cache.save(CacheEntry(net, cid, "eth0", result()))
    Path(cache.path("a", "legacy", "eth0")).write_text(json.dumps(result()))
    Path(cache.path("a", "junk", "eth0")).write_text("junk")
    assert [e.container_id for e in cache.entries("a")] == ["c1", "c2"]
    assert [e.container_id for e in cache.entries()] == ["c1", "c2", "c3"]
    assert ResultCache(str(tmp_path / "none")).entries() == []


# -- verbs with a fake exec --------------------------------------------------------------------
Handler = Callable[[dict[str, Any], Mapping[str, str]], ExecOutput]


class FakeExec:
    """Plugins as Python functions; records every call as (type, stdin object, env)."""

    def __init__(self, handlers: dict[str, Handler]) -> None:
        self.handlers = handlers
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []

    def find(self, plugin_type: str, paths: Sequence[str]) -> str:
        if plugin_type not in self.handlers:
            raise PluginNotFound(f'failed to find plugin "{plugin_type}"')
        return f"/fake/{plugin_type}"

    def run(self, path: str, stdin: bytes, env: Mapping[str, str]) -> ExecOutput:
        ptype = os.path.basename(path)
        conf = json.loads(stdin)
        self.calls.append((ptype, conf, dict(env)))
        return self.handlers[ptype](conf, env)

    def verbs(self) -> list[tuple[str, str]]:
        return [(t, env["CNI_COMMAND"]) for t, _, env in self.calls]


def ok(stdout: Any = None) -> ExecOutput:
    return ExecOutput(0, b"" if stdout is None else json.dumps(stdout).encode())


def passthrough(extra_mac: str = "") -> Handler:
    """A plugin that answers ADD with its prevResult (or a fresh result when first)."""

    def handler(conf: dict[str, Any], env: Mapping[str, str]) -> ExecOutput:
        if env["CNI_COMMAND"] == "ADD":
            out = dict(conf.get("prevResult") or result(version="1.1.0"))
            out["cniVersion"] = conf["cniVersion"]
            if extra_mac:
                out["interfaces"] = [{**out["interfaces"][0], "mac": extra_mac}]
            return ok(out)
        return ok()

    return handler


def failing(code: int, msg: str, details: str = "") -> Handler:
    def handler(conf: dict[str, Any], env: Mapping[str, str]) -> ExecOutput:
        err = {"cniVersion": conf["cniVersion"], "code": code, "msg": msg, "details": details}
        return ExecOutput(1, json.dumps(err).encode())

    return handler


def make_net(
    version: str = "1.1.0", types: Sequence[str] = ("first", "second"), **extra: Any
) -> runtime.NetworkConfigList:
    plugins = [{"type": t} for t in types]
    plugins[-1]["capabilities"] = {"portMappings": True}
    return conflist_from_bytes(json.dumps(conflist("net1", version, plugins, **extra)).encode())


RT = RuntimeConf(
    container_id="c1",
    netns="/run/netns/pod1",
    ifname="eth1",
    args=(("K8S_POD_NAME", "web"),),
    capability_args={"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
)


def make_runtime(tmp_path: Path, handlers: dict[str, Handler]) -> tuple[CNIRuntime, FakeExec]:
    fake = FakeExec(handlers)
    rt = CNIRuntime(
        ["/a", "/b"],
        cache=ResultCache(str(tmp_path / "cache")),
        executor=fake,
        environ={"PATH": "/usr/bin", "CNI_COMMAND": "stale", "KEEP": "1"},
    )
    return rt, fake


def test_add_chains_prev_result_and_caches(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough("02:aa")})
    net = make_net()
    out = cni.add(net, RT)
    assert fake.verbs() == [("first", "ADD"), ("second", "ADD")]
    (_, first, env1), (_, second, _) = fake.calls
    assert "prevResult" not in first and "runtimeConfig" not in first
    assert second["prevResult"]["ips"] == result()["ips"]
    assert second["runtimeConfig"] == {"portMappings": RT.capability_args["portMappings"]}
    assert env1 == {
        "PATH": "/usr/bin",
        "KEEP": "1",
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "c1",
        "CNI_NETNS": "/run/netns/pod1",
        "CNI_ARGS": "K8S_POD_NAME=web",
        "CNI_IFNAME": "eth1",
        "CNI_PATH": "/a:/b",
    }
    assert out["interfaces"][0]["mac"] == "02:aa"
    cached = cni.cache.load("net1", "c1", "eth1")
    assert cached is not None and cached.result == out and cached.config == net.raw
    assert cached.netns == "/run/netns/pod1" and dict(cached.capability_args) == RT.capability_args


def test_add_converts_results_to_the_network_version(tmp_path: Path) -> None:
    def v1_plugin(conf: dict[str, Any], env: Mapping[str, str]) -> ExecOutput:
        return ok(result(version="1.0.0"))  # a plugin answering in the wrong version

    cni, fake = make_runtime(tmp_path, {"first": v1_plugin, "second": passthrough()})
    out = cni.add(make_net("0.4.0"), RT)
    assert fake.calls[1][1]["prevResult"]["ips"][0]["version"] == "4"
    assert out["cniVersion"] == "0.4.0" and out["ips"][0]["version"] == "4"


def test_add_failure_wraps_and_keeps_code(tmp_path: Path) -> None:
    cni, fake = make_runtime(
        tmp_path, {"first": passthrough(), "second": failing(101, "hostPort 8080 held", "by c0")}
    )
    with pytest.raises(PluginFailed) as err:
        cni.add(make_net(), RT)
    assert err.value.msg == "plugin second failed (add): hostPort 8080 held"
    assert err.value.code == 101 and err.value.details == "by c0"
    assert (err.value.plugin, err.value.verb) == ("second", "add")
    assert cni.cache.load("net1", "c1", "eth1") is None


@pytest.mark.parametrize(
    ("output", "code", "message"),
    [
        (ExecOutput(1, b"", b"panic: boom\n"), 999, "netplugin failed: 'panic: boom'"),
        (ExecOutput(2, b""), 999, "no error message (exit status 2)"),
        (ExecOutput(1, b"garbage"), 999, "not an error object"),
        (ExecOutput(0, b"garbage"), 6, "invalid result"),
        (ExecOutput(0, b"[]"), 6, "not a JSON object"),
        (ExecOutput(0, json.dumps(result(version="0.2.0")).encode()), 1, "cannot be converted"),
    ],
)
def test_add_bad_plugin_output(tmp_path: Path, output: ExecOutput, code: int, message: str) -> None:
    cni, _ = make_runtime(tmp_path, {"first": lambda conf, env: output})
    with pytest.raises(PluginFailed, match=re.escape(message)) as err:
        cni.add(make_net(types=["first"]), RT)
    assert err.value.code == code and err.value.msg.startswith("plugin first failed (add): ")


def test_add_plugin_not_found(tmp_path: Path) -> None:
    cni, _ = make_runtime(tmp_path, {})
    with pytest.raises(PluginNotFound, match='"first"'):
        cni.add(make_net(), RT)


@pytest.mark.parametrize(
    "rt",
    [
        RuntimeConf(container_id="-bad", netns="/x"),
        RuntimeConf(container_id="c1", netns="/x", ifname="a/b"),
        RuntimeConf(container_id="c1", netns="/x", ifname="x" * 16),
    ],
)
def test_add_validates_ids(tmp_path: Path, rt: RuntimeConf) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    with pytest.raises(ArgsError):
        cni.add(make_net(), rt)
    assert fake.calls == []


def test_del_reverse_with_cached_result_then_uncached(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    net = make_net()
    added = cni.add(net, RT)
    fake.calls.clear()
    bare = RuntimeConf(container_id="c1", netns="", ifname="eth1")  # DEL without CAP_ARGS/netns
    cni.delete(net, bare)
    assert fake.verbs() == [("second", "DEL"), ("first", "DEL")]
    for _, conf, env in fake.calls:
        assert conf["prevResult"] == added and env["CNI_NETNS"] == ""
        assert env["CNI_ARGS"] == "K8S_POD_NAME=web"  # from the cache
    assert fake.calls[0][1]["runtimeConfig"] == {"portMappings": RT.capability_args["portMappings"]}
    assert cni.cache.load("net1", "c1", "eth1") is None
    fake.calls.clear()
    cni.delete(net, bare)  # again: no cache → no prevResult, still fine
    assert [("prevResult" in c) for _, c, _ in fake.calls] == [False, False]


def test_del_corrupt_cache_is_dropped(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    os.makedirs(cni.cache.results_dir)
    Path(cni.cache.path("net1", "c1", "eth1")).write_text("{")
    cni.delete(make_net(), RT)
    assert all("prevResult" not in c for _, c, _ in fake.calls)
    assert not os.path.exists(cni.cache.path("net1", "c1", "eth1"))


def test_del_failure_keeps_cache(tmp_path: Path) -> None:
    handlers = {"first": passthrough(), "second": passthrough()}
    cni, _ = make_runtime(tmp_path, handlers)
    net = make_net()
    cni.add(net, RT)
    handlers["first"] = failing(104, "nft failed")
    with pytest.raises(PluginFailed, match=r"plugin first failed \(delete\): nft failed"):
        cni.delete(net, RT)
    assert cni.cache.load("net1", "c1", "eth1") is not None


def test_del_before_0_4_0_has_no_prev_result(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    net = make_net("0.3.1")
    cni.add(net, RT)
    fake.calls.clear()
    cni.delete(net, RT)
    assert [("prevResult" in c) for _, c, _ in fake.calls] == [False, False]


def test_check_uses_cached_result(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    net = make_net()
    added = cni.add(net, RT)
    fake.calls.clear()
    cni.check(net, RT)
    assert fake.verbs() == [("first", "CHECK"), ("second", "CHECK")]
    assert all(c["prevResult"] == added for _, c, _ in fake.calls)


def test_check_errors(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    with pytest.raises(CNIError, match="no cached result") as err:
        cni.check(make_net(), RT)
    assert err.value.code == 3
    with pytest.raises(IncompatibleVersion, match="does not support the CHECK command"):
        cni.check(make_net("0.3.1"), RT)
    cni.check(make_net(disableCheck=True), RT)
    assert fake.calls == []


def test_gc_valid_attachments_from_cache(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    net = make_net()
    cni.add(net, RT)
    cni.add(net, RuntimeConf(container_id="c2", netns="/run/netns/pod2"))
    cni.cache.save(CacheEntry("othernet", "c3", "eth0", result()))
    fake.calls.clear()
    cni.gc(net)
    assert fake.verbs() == [("first", "GC"), ("second", "GC")]
    for _, conf, env in fake.calls:
        assert conf["cni.dev/valid-attachments"] == [
            {"containerID": "c1", "ifname": "eth1"},
            {"containerID": "c2", "ifname": "eth0"},
        ]
        assert conf["name"] == "net1" and "runtimeConfig" not in conf
        assert env["CNI_CONTAINERID"] == "" and env["CNI_PATH"] == "/a:/b"


def test_gc_explicit_valid_deletes_stale_cached(tmp_path: Path) -> None:
    cni, fake = make_runtime(tmp_path, {"first": passthrough(), "second": passthrough()})
    net = make_net()
    cni.add(net, RT)
    cni.add(net, RuntimeConf(container_id="c2", netns="/run/netns/pod2"))
    fake.calls.clear()
    cni.gc(net, [Attachment("c2", "eth0")])
    assert fake.verbs() == [("second", "DEL"), ("first", "DEL"), ("first", "GC"), ("second", "GC")]
    assert fake.calls[0][2]["CNI_CONTAINERID"] == "c1"
    assert fake.calls[0][2]["CNI_NETNS"] == "/run/netns/pod1"  # from the cache entry
    assert [e.container_id for e in cni.cache.entries("net1")] == ["c2"]


def test_gc_collects_errors_and_respects_version(tmp_path: Path) -> None:
    handlers = {"first": failing(999, "first broke"), "second": failing(5, "second broke")}
    cni, fake = make_runtime(tmp_path, handlers)
    with pytest.raises(CNIError, match="first broke.*second broke"):
        cni.gc(make_net())
    fake.calls.clear()
    cni.gc(make_net("1.0.0"))
    cni.gc(make_net(disableGC=True))
    assert fake.calls == []


def test_status(tmp_path: Path) -> None:
    handlers = {"first": passthrough(), "second": passthrough()}
    cni, fake = make_runtime(tmp_path, handlers)
    cni.status(make_net())
    assert fake.verbs() == [("first", "STATUS"), ("second", "STATUS")]
    handlers["first"] = failing(50, "no free IPv4 address")
    with pytest.raises(PluginFailed, match=r"plugin first failed \(status\)") as err:
        cni.status(make_net())
    assert err.value.code == 50
    fake.calls.clear()
    cni.status(make_net("1.0.0"))
    assert fake.calls == []


def test_public_surface() -> None:
    for name in runtime.__all__:
        assert hasattr(runtime, name), name


# -- the real subprocess exec --------------------------------------------------------------------
SCRIPT = """#!{exe}
import json, os, sys
conf = json.load(sys.stdin)
log = os.environ.get("FAKE_LOG")
if log:
    with open(log, "a") as f:
        f.write(json.dumps({{"env": {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}},
                            "conf": conf}}) + "\\n")
if conf.get("fail") == "stderr":
    sys.stderr.write("something broke\\n")
    sys.exit(3)
if conf.get("fail") == "json":
    print(json.dumps({{"cniVersion": conf["cniVersion"], "code": 11, "msg": "try later"}}))
    sys.exit(1)
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps(conf.get("prevResult") or {{"cniVersion": conf["cniVersion"],
          "ips": [{{"address": "10.1.0.2/24"}}]}}))
"""


def install_script(bin_dir: Path, name: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(SCRIPT.format(exe=sys.executable))
    path.chmod(0o755)


def test_subprocess_exec_runs_plugins(tmp_path: Path) -> None:
    install_script(tmp_path / "bin", "scripted")
    log = tmp_path / "log"
    net = conflist_from_bytes(
        json.dumps(conflist(plugins=[{"type": "scripted"}, {"type": "scripted"}])).encode()
    )
    cni = CNIRuntime(
        [str(tmp_path / "nothing"), str(tmp_path / "bin")],
        cache=ResultCache(str(tmp_path / "cache")),
        environ={"FAKE_LOG": str(log), "PATH": os.environ["PATH"]},
    )
    out = cni.add(net, RuntimeConf(container_id="c1", netns="/run/netns/x"))
    assert out == {"cniVersion": "1.1.0", "ips": [{"address": "10.1.0.2/24"}]}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["env"]["CNI_COMMAND"] for c in calls] == ["ADD", "ADD"]
    assert calls[1]["conf"]["prevResult"] == out
    assert calls[0]["env"]["CNI_PATH"] == f"{tmp_path / 'nothing'}:{tmp_path / 'bin'}"


@pytest.mark.parametrize(
    ("fail", "code", "message"),
    [("stderr", 999, "something broke"), ("json", 11, "try later")],
)
def test_subprocess_exec_failures(tmp_path: Path, fail: str, code: int, message: str) -> None:
    install_script(tmp_path / "bin", "scripted")
    net = conflist_from_bytes(
        json.dumps(conflist(plugins=[{"type": "scripted", "fail": fail}])).encode()
    )
    cni = CNIRuntime([str(tmp_path / "bin")], cache=ResultCache(str(tmp_path / "cache")))
    with pytest.raises(PluginFailed, match=message) as err:
        cni.add(net, RuntimeConf(container_id="c1", netns="/run/netns/x"))
    assert err.value.code == code


def test_subprocess_exec_timeout(tmp_path: Path) -> None:
    (tmp_path / "slow").write_text("#!/bin/sh\nsleep 5\n")
    (tmp_path / "slow").chmod(0o755)
    out = SubprocessExec(timeout=0.2).run(str(tmp_path / "slow"), b"{}", {})
    assert out.returncode != 0 and b"killed after" in out.stderr
    assert "killed after 0.2 s" in decode_error(out).msg


def test_find_in_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "p").write_text("not executable")
    (b / "p").write_text("#!/bin/sh\n")
    (b / "p").chmod(0o755)
    (a / "dir").mkdir()
    assert find_in_path("p", [str(a), str(b)]) == str(b / "p")
    for bad in ("../b/p", "", "dir", "missing"):
        with pytest.raises(PluginNotFound):
            find_in_path(bad, [str(a), str(b)])


# -- a real chain in namespaces ----------------------------------------------------------------
def chain_runtime(
    lab: Any, tmp_path: Path, version: str, tuning: dict[str, Any]
) -> tuple[CNIRuntime, runtime.NetworkConfigList]:
    need("reference-plugins")
    runtime.install(bin_dir=str(tmp_path / "bin"), conflist=False)
    net = conflist_from_bytes(
        json.dumps(
            {
                "cniVersion": version,
                "name": "chain",
                "plugins": [
                    {
                        "type": "podnet",
                        "ranges": ["10.244.7.0/24"],
                        "dataDir": str(tmp_path / "data"),
                        "capabilities": {"portMappings": True},
                    },
                    {"type": "tuning", **tuning},
                ],
            }
        ).encode()
    )
    cni = CNIRuntime(
        [str(tmp_path / "bin"), "/usr/lib/cni"],
        cache=ResultCache(str(tmp_path / "cache")),
        executor=SubprocessExec(wrapper=("ip", "netns", "exec", lab.node), timeout=60),
    )
    return cni, net


@pytest.mark.root
@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_chain_podnet_then_reference_tuning(lab: Any, tmp_path: Path, version: str) -> None:
    """tuning (reference, up to 1.0.0) refuses to run without prevResult: it acting on
    podnet's eth0 shows the chain works; DEL runs in reverse with the cached result."""
    from netns import sh

    cni, net = chain_runtime(
        lab, tmp_path, version, {"promisc": True, "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}}
    )
    pod = lab.pod()
    rt = RuntimeConf(
        container_id=f"chain-{lab.tag}",
        netns=f"/run/netns/{pod}",
        capability_args={"portMappings": [parse_port("8080:80")]},
    )
    out = cni.add(net, rt)
    assert out["cniVersion"] == version
    address = out["ips"][0]["address"]
    assert address.startswith("10.244.7.") and address.endswith("/32")
    link = json.loads(sh("ip", "-n", pod, "-j", "-d", "link", "show", "eth0").stdout)[0]
    assert link["promiscuity"] == 1  # tuning ran on podnet's interface
    assert lab.exec(pod, "sysctl", "-n", "net.ipv4.conf.eth0.arp_notify").stdout.strip() == "1"
    cni.check(net, rt)
    cni.delete(net, RuntimeConf(container_id=rt.container_id, netns=rt.netns))
    assert cni.cache.entries() == []
    assert sh("ip", "-n", pod, "link", "show", "eth0", check=False).returncode != 0
    host_links = json.loads(sh("ip", "-n", lab.node, "-j", "link", "show").stdout)
    assert [li["ifname"] for li in host_links if li["ifname"].startswith("pn")] == []


@pytest.mark.root
def test_chain_check_after_tuning_changes_mtu(lab: Any, tmp_path: Path) -> None:
    """tuning (after podnet) sets eth0's MTU to 1400, away from the MTU podnet set and
    recorded: the pod's link has 1400, and podnet's CHECK passes (a later plugin of the chain
    may change the link; Debian's tuning 1.1.1 does not report the MTU in its result, so
    podnet must not hold the link to its own value)."""
    from netns import sh

    cni, net = chain_runtime(lab, tmp_path, "1.0.0", {"mtu": 1400})
    pod = lab.pod()
    rt = RuntimeConf(container_id=f"mtu-{lab.tag}", netns=f"/run/netns/{pod}")
    cni.add(net, rt)
    try:
        link = json.loads(sh("ip", "-n", pod, "-j", "link", "show", "eth0").stdout)[0]
        assert link["mtu"] == 1400
        with sqlite3.connect(tmp_path / "data" / "podnet.db") as db:
            recorded = db.execute("SELECT interface_mtu FROM pods").fetchall()
        assert len(recorded) == 1 and recorded[0][0] not in (None, 1400), recorded
        cni.check(net, rt)
    finally:
        cni.delete(net, rt)
