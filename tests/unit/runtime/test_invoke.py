"""The real subprocess exec of :mod:`podnet.runtime.invoke` (libcni's ``pkg/invoke``): a script
plugin run with the CNI environment and stdin, its failures (exit codes, bad output, a
timeout) as CNI errors, and plugin lookup along ``CNI_PATH``. No root."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from cni_confs import conflist
from podnet.runtime import (
    CNIRuntime,
    PluginFailed,
    PluginNotFound,
    ResultCache,
    RuntimeConf,
    conflist_from_bytes,
)
from podnet.runtime.invoke import SubprocessExec, decode_error, find_in_path

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
