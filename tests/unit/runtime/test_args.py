"""What the runtime hands a plugin: ``runtimeConfig`` only for the capabilities a plugin declares,
the name, version and ``prevResult`` injected into its stdin (CNI SPEC, "Section 4: Plugin
Delegation" and "Deriving execution configuration from plugin configuration"), and cnitool's
arguments (``CNI_ARGS``, ``CAP_ARGS``, ``--port``) of :mod:`podnet.runtime.args`. No root."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from cni_confs import conflist, result
from podnet.runtime import (
    ArgsError,
    PluginConf,
    conflist_from_bytes,
    default_container_id,
    parse_cap_args,
    parse_cni_args,
    parse_port,
    plugin_config,
)


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
