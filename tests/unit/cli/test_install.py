"""``podnetctl install``: the plugins and the conflist it writes, its refusals, an installed plugin
that ignores the caller's Python environment, and the systemd unit that restores the networks
at boot. Everything under a temporary directory; no root."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli_calls import run
from podnet.cli.main import cli
from podnet.runtime import PLUGINS


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
