""":class:`podnet.runtime.CNIRuntime`'s verbs over a fake exec (libcni's ``api.go``): ADD chains
``prevResult`` through the plugins and caches the result, DEL runs in reverse with the cached
result, CHECK and GC read the cache, STATUS; failures keep their codes. No root."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import podnet.runtime as runtime
from cni_confs import conflist, result
from podnet.errors import CNIError
from podnet.runtime import (
    ArgsError,
    Attachment,
    CacheEntry,
    CNIRuntime,
    ExecOutput,
    IncompatibleVersion,
    PluginFailed,
    PluginNotFound,
    ResultCache,
    RuntimeConf,
    conflist_from_bytes,
)

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
