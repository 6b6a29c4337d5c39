"""podnetctl: help texts, one-line errors, --port handling, install, the state views (no root),
and ``podnetctl net …`` driving the installed plugin inside a node namespace (root)."""

from __future__ import annotations

import inspect
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml  # type: ignore[import-untyped]
from click.testing import CliRunner

from podnet.cli.main import cli, error_line
from podnet.runtime import PLUGINS, ResultCache
from podnet.store import open_store
from podnet.values import PortMapping

PODNETCTL = str(Path(sys.executable).parent / "podnetctl")


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    # click < 8.2 mixes stderr into output unless told not to; 8.2 removed the option.
    separate = "mix_stderr" in inspect.signature(CliRunner).parameters
    runner = CliRunner(mix_stderr=False) if separate else CliRunner()  # type: ignore[call-arg]
    return runner.invoke(cli, list(args), env=env)


def walk(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the public API: subcommands may load lazily
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk(command, (*path, name))


COMMANDS = list(walk(cli))


def test_command_set() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert names >= {
        "net",
        "net add",
        "net check",
        "net del",
        "net gc",
        "net status",
        "install",
        "pods",
        "ports",
        "ranges",
        "demo",
    }


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    command = dict(COMMANDS)[path]
    assert command.help and command.help.strip(), f"{' '.join(path)} has no help text"
    out = run(*path, "--help")
    assert out.exit_code == 0, out.output
    assert command.help.strip().splitlines()[0][:40] in " ".join(out.output.split())
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{' '.join(path)} {param.opts[0]} has no help text"


def test_top_level_help_and_version() -> None:
    out = run("--help")
    assert out.exit_code == 0 and "net" in out.output and "install" in out.output
    assert run("--version").output.startswith("podnetctl, version ")


def test_error_line_is_one_line() -> None:
    from podnet.errors import CNIError

    err = CNIError("plugin podnet failed (add): nft failed", "line one\nline two", code=104)
    assert (
        error_line(err)
        == "plugin podnet failed (add): nft failed [CNI code 104]; line one line two"
    )
    assert error_line(FileNotFoundError(2, "No such file or directory", "/x")) == (
        "No such file or directory: /x"
    )


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


# -- install ------------------------------------------------------------------------------------
def install(tmp_path: Path, *args: str) -> Any:
    """``podnetctl install`` into ``tmp_path``'s ``bin`` and ``net.d``."""
    return run("install", "--bin-dir", str(tmp_path / "bin"), "--conf-dir", str(tmp_path / "net.d"),
               "--node-conf", str(tmp_path / "podnet.conf"), *args)


def test_install_writes_plugins_and_conflist(tmp_path: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    args = ["--range", "10.244.2.0/24", "--range", "fd00:10:244:2::/64",
            "--data-dir", str(tmp_path / "data")]  # fmt: skip
    out = install(tmp_path, *args)
    assert out.exit_code == 0, out.stderr
    plugin = bin_dir / "podnet"
    assert set(os.listdir(bin_dir)) == set(PLUGINS)
    assert stat.S_IMODE(plugin.stat().st_mode) == 0o755
    text = plugin.read_text()
    assert text.splitlines()[0] == f"#!{sys.executable} -IS"
    assert "from podnet.plugins.podnet import main\nmain()\n" in text
    conflist = json.loads((conf_dir / "10-podnet.conflist").read_text())
    assert conflist == {
        "cniVersion": "1.0.0",
        "cniVersions": ["1.0.0", "1.1.0"],
        "name": "podnet",
        "plugins": [
            {
                "type": "podnet",
                "ranges": ["10.244.2.0/24", "fd00:10:244:2::/64"],
                "dataDir": str(tmp_path / "data"),
                "capabilities": {"portMappings": True, "ips": True, "mac": True},
            }
        ],
    }
    files = [str(bin_dir / name) for name in PLUGINS]
    files.append(str(tmp_path / "podnet.conf"))  # the node config: --data-dir is the node's store
    files.append(str(conf_dir / "10-podnet.conflist"))  # after it: its dataDir is allowed first
    assert out.stdout.split() == [word for f in files for word in ("created", f)]
    again = install(tmp_path, *args)
    assert again.stdout.split()[::2] == ["unchanged"] * len(files)
    changed = install(tmp_path)
    assert changed.stdout.split()[::2] == ["unchanged"] * len(PLUGINS) + ["unchanged", "updated"]
    assert json.loads((conf_dir / "10-podnet.conflist").read_text())["plugins"][0]["ranges"] == [
        "10.244.2.0/24"
    ]
    assert [n for n in os.listdir(conf_dir) if n.startswith(".")] == []  # no temp files left


def test_install_no_conflist_and_name(tmp_path: Path) -> None:
    out = install(tmp_path, "--no-conflist")
    assert out.exit_code == 0 and not (tmp_path / "net.d").exists()
    out = install(tmp_path, "--name", "kindnet")
    assert json.loads((tmp_path / "net.d" / "10-kindnet.conflist").read_text())["name"] == "kindnet"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--range", "10.244.2.1/24"], "ranges[0]"),
        (["--range", "nonsense"], "ranges[0]"),
        (["--data-dir", "relative"], "dataDir"),
        (["--name", "bad name"], "invalid network name"),
    ],
)
def test_install_rejects_bad_config(tmp_path: Path, args: list[str], message: str) -> None:
    out = install(tmp_path, *args)
    assert out.exit_code == 1 and out.stderr.startswith("Error: ") and message in out.stderr
    assert not (tmp_path / "bin").exists()  # nothing written when the config is bad


def test_installed_plugin_ignores_callers_python_environment(tmp_path: Path) -> None:
    """Runtimes pass their whole environment: a pyenv-shim PATH and a PYTHONPATH with another
    ``podnet`` must not change what runs."""
    run("install", "--bin-dir", str(tmp_path / "bin"), "--no-conflist")
    shims, shadow = tmp_path / "shims", tmp_path / "shadow" / "podnet"
    shims.mkdir()
    shadow.mkdir(parents=True)
    for name in ("python", "python3"):
        (shims / name).write_text("#!/bin/sh\necho shim >&2\nexit 42\n")
        (shims / name).chmod(0o755)
    (shadow / "__init__.py").write_text("raise ImportError('shadowed')\n")
    env = {
        "PATH": f"{shims}:/usr/bin:/bin",
        "PYTHONPATH": str(shadow.parent),
        "PYTHONHOME": "/nonexistent",
        "CNI_COMMAND": "VERSION",
    }
    proc = subprocess.run(
        [str(tmp_path / "bin" / "podnet")],
        input=b'{"cniVersion":"1.0.0"}',
        capture_output=True,
        env=env,
        timeout=30,
    )
    if b"PYTHONHOME" in proc.stderr or b"encodings" in proc.stderr:
        pytest.fail(f"plugin honoured PYTHONHOME: {proc.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["supportedVersions"][-1] == "1.1.0"


# -- state views ----------------------------------------------------------------------------------
@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    d = str(tmp_path / "data")
    with open_store(d) as store, store.write():
        store.ranges.sync(["10.244.2.0/24", "fd00:1::/64"], True, "network podnet")
        store.pods.insert(
            container_id="c1",
            netns="/run/netns/p1",
            interface_name="pn0000000000001",
            interface_mtu=1500,
            ifname="eth0",
            network_name="podnet",
            host_mac="02:00:00:00:00:01",
            pod_mac="02:00:00:00:00:02",
            ip_address_v4="10.244.2.5",
            ip_address_v6="fd00:1::5",
            ip_gateway_v4="10.244.2.1",
            ip_gateway_v6="fd00:1::1",
            name="web",
            namespace="prod",
        )
        store.pods.insert_portmaps(
            [
                PortMapping("c1", "0.0.0.0", 8080, "tcp", "10.244.2.5", 80),
                PortMapping("c1", "::", 8080, "tcp", "fd00:1::5", 80),
            ]
        )
    return d


def test_pods_table(data_dir: str) -> None:
    out = run("pods", "--data-dir", data_dir)
    assert out.exit_code == 0, out.stderr
    for text in ("CONTAINER", "c1", "prod/web", "10.244.2.5", "fd00:1::5", "pn0000000000001"):
        assert text in out.stdout


def test_ports_table_and_formats(data_dir: str) -> None:
    out = run("ports", "--data-dir", data_dir)
    assert out.exit_code == 0, out.stderr
    assert "0.0.0.0:8080" in out.stdout and "[fd00:1::5]:80" in out.stdout
    as_json = json.loads(run("ports", "--data-dir", data_dir, "-o", "json").stdout)
    assert [(p["host_ip"], p["host_port"], p["container_ip"]) for p in as_json] == [
        ("0.0.0.0", 8080, "10.244.2.5"),
        ("::", 8080, "fd00:1::5"),
    ]
    as_yaml = yaml.safe_load(run("ports", "--data-dir", data_dir, "--output", "yaml").stdout)
    assert as_yaml == as_json


def test_ranges_and_pods_json(data_dir: str) -> None:
    ranges = json.loads(run("ranges", "--data-dir", data_dir, "-o", "json").stdout)
    assert [(r["subnet"], r["used"], r["usable"], r["ip_masq"]) for r in ranges] == [
        ("10.244.2.0/24", 1, 253, True),
        ("fd00:1::/64", 1, str(2**64 - 3), True),  # beyond 2^53: a string, exact in any reader
    ]
    assert isinstance(ranges[0]["usable"], int)
    pods = json.loads(run("pods", "--data-dir", data_dir, "-o", "json").stdout)
    assert pods[0]["container_id"] == "c1" and pods[0]["ifname"] == "eth0"
    assert "10.244.2.0/24" in run("ranges", "--data-dir", data_dir).stdout


def test_state_views_read_only(tmp_path: Path) -> None:
    out = run("pods", "--data-dir", str(tmp_path / "none"))
    assert out.exit_code == 1
    assert out.stderr.startswith("Error: No podnet database in ")
    assert not (tmp_path / "none").exists()


def test_state_env_var(data_dir: str) -> None:
    out = run("pods", "-o", "json", env={"PODNET_DATA_DIR": data_dir})
    assert json.loads(out.stdout)[0]["container_id"] == "c1"


# -- real runs inside a node namespace ------------------------------------------------------------
class Node:
    """podnetctl run inside the lab's node namespace with tmp NETCONFPATH/CNI_PATH/cache."""

    def __init__(self, lab: Any, tmp: Path) -> None:
        self.lab, self.tmp = lab, tmp
        self.env = {
            "NETCONFPATH": str(tmp / "net.d"),
            "CNI_PATH": str(tmp / "bin"),
            "PODNETCTL_CACHE_DIR": str(tmp / "cache"),
            "PODNET_CONF": str(tmp / "podnet.conf"),  # written by install --data-dir below
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        subprocess.run(
            [
                PODNETCTL,
                "install",
                "--bin-dir",
                str(tmp / "bin"),
                "--conf-dir",
                str(tmp / "net.d"),
                "--range",
                "10.244.9.0/24",
                "--range",
                "fd00:9::/64",
                "--data-dir",
                str(tmp / "data"),
                "--node-conf",
                str(tmp / "podnet.conf"),
            ],
            check=True,
            capture_output=True,
        )

    def ctl(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        argv = [
            "ip",
            "netns",
            "exec",
            self.lab.node,
            "env",
            "-i",
            *(f"{k}={v}" for k, v in {**self.env, **env}.items()),
            PODNETCTL,
            *args,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.root
def test_net_lifecycle_in_node_namespace(lab: Any, tmp_path: Path) -> None:
    node = Node(lab, tmp_path)
    pod = lab.pod()
    add = node.ctl(
        "net",
        "add",
        "podnet",
        f"/run/netns/{pod}",
        "--port",
        "8080:80",
        "--port",
        "127.0.0.1:5353:53/udp",
        CNI_ARGS="K8S_POD_NAME=web",
    )
    assert add.returncode == 0, add.stderr
    result = json.loads(add.stdout)
    assert result["cniVersion"] == "1.1.0"
    assert {ip["address"].split("/")[0].split(".")[0] for ip in result["ips"]} >= {"10"}
    ports = json.loads(node.ctl("ports", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
    assert {(p["host_ip"], p["host_port"], p["protocol"]) for p in ports} == {
        ("0.0.0.0", 8080, "tcp"),
        ("::", 8080, "tcp"),
        ("127.0.0.1", 5353, "udp"),
    }
    pods = json.loads(node.ctl("pods", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
    assert [p["name"] for p in pods] == ["web"]
    entries = ResultCache(str(tmp_path / "cache")).entries("podnet")
    assert len(entries) == 1 and entries[0].container_id.startswith("cnitool-")

    check = node.ctl("net", "check", "podnet", f"/run/netns/{pod}")
    assert check.returncode == 0 and check.stdout == "", check.stderr
    status = node.ctl("net", "status", "podnet")
    assert status.returncode == 0, status.stderr

    other = lab.pod()
    clash = node.ctl("net", "add", "podnet", f"/run/netns/{other}", "--port", "8080:80")
    assert clash.returncode == 1
    assert clash.stderr.startswith("Error: plugin podnet failed (add): ")
    assert "[CNI code 101]" in clash.stderr and clash.stderr.count("\n") == 1

    delete = node.ctl("net", "del", "podnet", f"/run/netns/{pod}")
    assert delete.returncode == 0, delete.stderr
    assert node.ctl("net", "del", "podnet", f"/run/netns/{pod}").returncode == 0  # idempotent
    assert (
        json.loads(node.ctl("pods", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
        == []
    )
    assert ResultCache(str(tmp_path / "cache")).entries() == []


@pytest.mark.root
def test_net_gc_keeps_cached_attachments_only(lab: Any, tmp_path: Path) -> None:
    node = Node(lab, tmp_path)
    kept, leaked = lab.pod(), lab.pod()
    assert node.ctl("net", "add", "podnet", f"/run/netns/{kept}").returncode == 0
    leak = node.ctl("net", "add", "podnet", f"/run/netns/{leaked}", CNI_CONTAINERID="leaked1")
    assert leak.returncode == 0, leak.stderr
    (tmp_path / "cache" / "results" / "podnet-leaked1-eth0").unlink()  # the runtime forgot it
    gc = node.ctl("net", "gc", "podnet")
    assert gc.returncode == 0, gc.stderr
    pods = json.loads(node.ctl("pods", "--data-dir", str(tmp_path / "data"), "-o", "json").stdout)
    assert [p["container_id"] for p in pods] == [
        ResultCache(str(tmp_path / "cache")).entries()[0].container_id
    ]
    assert node.ctl("net", "del", "podnet", f"/run/netns/{kept}").returncode == 0


def test_install_systemd_writes_and_enables_the_restore_unit(tmp_path: Path) -> None:
    args = ["install", "--bin-dir", str(tmp_path / "bin"), "--conf-dir", str(tmp_path / "conf"),
            "--data-dir", str(tmp_path / "data"), "--systemd", "--unit-dir", str(tmp_path / "units"),
            "--node-conf", str(tmp_path / "podnet.conf")]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    unit = tmp_path / "units" / "podnet-restore.service"
    text = unit.read_text()
    assert "Type=oneshot" in text and "WantedBy=multi-user.target" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    argv = exec_start.removeprefix("ExecStart=").split()
    assert os.access(argv[0], os.X_OK) and argv[1:] == ["network", "--data-dir", str(tmp_path / "data"), "--init", "restore"]
    link = tmp_path / "units" / "multi-user.target.wants" / "podnet-restore.service"
    assert os.readlink(link) == str(unit)
    again = CliRunner().invoke(cli, args)  # idempotent
    assert again.exit_code == 0 and "unchanged" in again.output and "created" not in again.output, again.output
