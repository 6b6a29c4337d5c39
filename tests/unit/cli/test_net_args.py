"""``podnetctl net``: the errors found before any plugin runs (an unknown network, a bad
``--port``, a bad environment, DEL without a netns or container ID, a plugin not found), each a
one-line error. No root; tests/e2e/cli/test_cli.py runs ``net`` in a node namespace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_calls import run


# -- net: errors before any plugin runs ---------------------------------------------------------
def test_net_unknown_network_is_one_line_error(tmp_path: Path) -> None:
    out = run("net", "add", "nope", "/run/netns/x", env={"NETCONFPATH": str(tmp_path)})
    assert out.exit_code == 1
    assert out.stderr == f"Error: no net configurations found in {tmp_path} [CNI code 7]\n"
    assert out.stdout == ""


def test_net_bad_port_is_a_usage_error(tmp_path: Path) -> None:
    out = run(
        "net",
        "add",
        "podnet",
        "/run/netns/x",
        "--port",
        "8080:70000",
        env={"NETCONFPATH": str(tmp_path)},
    )
    assert out.exit_code == 2
    assert "Invalid value for --port" in out.stderr and "70000" in out.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CNI_ARGS": "A"}, "invalid CNI_ARGS pair 'A'"),
        ({"CAP_ARGS": "{"}, "CAP_ARGS is not valid JSON"),
        ({"CNI_IFNAME": "x" * 16}, "invalid interface name"),
        ({"CNI_CONTAINERID": "-x"}, "invalid container ID"),
    ],
)
def test_net_bad_env(tmp_path: Path, env: dict[str, str], message: str) -> None:
    out = run("net", "add", "podnet", "/run/netns/x", env={"NETCONFPATH": str(tmp_path), **env})
    assert out.exit_code == 1
    assert (
        out.stderr.startswith("Error: ") and message in out.stderr and "[CNI code 4]" in out.stderr
    )
    assert out.stderr.count("\n") == 1


def test_net_del_needs_netns_or_container_id(tmp_path: Path) -> None:
    out = run("net", "del", "podnet", env={"NETCONFPATH": str(tmp_path)})
    assert out.exit_code == 1 and "container ID" in out.stderr


def test_net_plugin_not_found(tmp_path: Path) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10-x.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "nothere"}]})
    )
    out = run(
        "net",
        "add",
        "x",
        "/run/netns/x",
        env={
            "NETCONFPATH": str(conf),
            "CNI_PATH": str(tmp_path / "bin"),
            "PODNETCTL_CACHE_DIR": str(tmp_path / "cache"),
        },
    )
    assert out.exit_code == 1
    assert out.stderr == (
        f'Error: failed to find plugin "nothere" in path [{tmp_path / "bin"}] [CNI code 7]\n'
    )
