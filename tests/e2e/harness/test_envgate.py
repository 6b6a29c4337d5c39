"""The required-environment gate itself (tests/support/envgate.py, conftest.py), run on a small suite
in a child pytest: a skip nobody asked for fails, a missing need fails naming it, an opt-out
with a reason skips and is listed last, and PODNET_TEST_REQUIRE=all stops the run at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import paths

TESTS = paths.TESTS

CONFTEST = f"""
import importlib.util
import sys
sys.path.insert(0, {str(paths.SUPPORT)!r})
import envgate
envgate.REQUIREMENTS["no-such-tool"] = envgate._tool("no-such-tool", "nothing")
spec = importlib.util.spec_from_file_location("podnet_conftest", {str(TESTS / "conftest.py")!r})
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)
pytest_runtest_logreport = gate.pytest_runtest_logreport
pytest_runtest_makereport = gate.pytest_runtest_makereport
pytest_make_collect_report = gate.pytest_make_collect_report
pytest_sessionstart = gate.pytest_sessionstart
pytest_terminal_summary = gate.pytest_terminal_summary
"""

SUITE = """
import pytest
from envgate import need

def test_plain_skip():
    pytest.skip("just because")

@pytest.mark.skipif(True, reason="a machine detail")
def test_skipif():
    pass

def test_needs_a_missing_tool():
    need("no-such-tool")

def test_needs_what_is_here():
    need("ip")
"""


def run(tmp_path: Path, *args: str, suite: dict[str, str] | None = None,
        **env: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for name, text in (suite or {"test_suite.py": SUITE}).items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    full = {k: v for k, v in os.environ.items() if not k.startswith("PODNET_TEST_")} | env
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                           *args, str(tmp_path)],
                          capture_output=True, text=True, env=full, cwd=tmp_path, timeout=120)


def test_skips_nobody_asked_for_fail_and_a_missing_need_is_named(tmp_path: Path) -> None:
    out = run(tmp_path)
    assert out.returncode == 1, out.stdout
    # the skipif fires at setup: an error, the plain skip and the missing need: failures
    assert "2 failed, 1 passed, 1 error" in out.stdout, out.stdout
    assert "skipped without a person's opt-out (just because)" in out.stdout
    assert "skipped without a person's opt-out (a machine detail)" in out.stdout
    assert "required but missing: no-such-tool (Debian package nothing)" in out.stdout
    assert "podnet test gate: no test skipped" in out.stdout.rstrip().splitlines()[-2:-1]


def test_an_opt_out_with_a_reason_skips_and_is_listed_last(tmp_path: Path) -> None:
    out = run(tmp_path, PODNET_TEST_ALLOW_MISSING="no-such-tool=not on this laptop")
    assert "1 failed, 1 passed, 1 skipped, 1 error" in out.stdout, out.stdout
    assert out.stdout.rstrip().splitlines()[-3:-1] == [  # the last lines, before pytest's count
        "podnet test gate: 1 skipped, each by an opt-out:",
        "  SKIP test_suite.py::test_needs_a_missing_tool: allowed missing no-such-tool: not on this laptop"]


def test_an_opt_out_needs_a_reason(tmp_path: Path) -> None:
    out = run(tmp_path, PODNET_TEST_ALLOW_MISSING="no-such-tool")
    assert out.returncode != 0 and "has no reason" in out.stdout + out.stderr, out.stdout + out.stderr


def test_require_all_stops_before_the_first_test(tmp_path: Path) -> None:
    out = run(tmp_path, PODNET_TEST_REQUIRE="all")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "required but missing: no-such-tool (Debian package nothing)" in out.stdout + out.stderr
    assert "passed" not in out.stdout and "failed" not in out.stdout


MODULE_SKIP = """
import pytest
pytest.skip("this machine has no widget", allow_module_level=True)

def test_never_collected():
    pass
"""

XFAILS = """
import pytest
import envgate

@pytest.mark.xfail(strict=False, reason="flaky at times")
def test_xfail_not_strict():
    assert False

@pytest.mark.xfail(reason="the ini decides")
def test_xfail_ini():
    assert False

@pytest.mark.xfail(strict=True, reason="a known bug")
def test_xfail_strict():
    assert False

def test_imperative_xfail():
    pytest.xfail("not today")

def test_skip_that_reads_like_an_opt_out():
    pytest.skip("allowed missing ip: nobody said so")

def test_allowed_for_what_is_here():
    raise envgate.Allowed("allowed missing ip: ip is here", ("ip",))
"""


def _outcomes(stdout: str) -> dict[str, str]:
    """test name -> outcome word from ``-rA``'s short summary (PASSED, FAILED, XFAIL ...)."""
    out = {}
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS") and "::" in rest:
            out[rest.split("::")[1].split(" ")[0]] = word
    return out


def test_a_module_that_skips_itself_fails_its_collection(tmp_path: Path) -> None:
    out = run(tmp_path, suite={"test_widget.py": MODULE_SKIP})
    assert out.returncode != 0, out.stdout
    assert "1 error" in out.stdout, out.stdout
    assert ("test_widget.py skipped at collection (this machine has no widget); a module may not "
            "skip itself") in out.stdout, out.stdout
    assert "podnet test gate: no test skipped" in out.stdout


def test_xfails_not_strict_and_pytest_xfail_fail_and_forged_opt_outs_fail(tmp_path: Path) -> None:
    out = run(tmp_path, suite={"test_xfails.py": XFAILS})
    assert out.returncode == 1, out.stdout
    assert _outcomes(out.stdout) == {
        "test_xfail_not_strict": "ERROR", "test_xfail_ini": "ERROR", "test_xfail_strict": "XFAIL",
        "test_imperative_xfail": "FAILED", "test_skip_that_reads_like_an_opt_out": "FAILED",
        "test_allowed_for_what_is_here": "FAILED"}, out.stdout
    assert "an xfail that is not strict (flaky at times); mark it xfail(strict=True)" in out.stdout
    assert "pytest.xfail() called (not today); use a strict xfail mark" in out.stdout
    assert "skipped without a person's opt-out (allowed missing ip: nobody said so)" in out.stdout
    assert "skipped without a person's opt-out (allowed missing ip: ip is here)" in out.stdout


def test_xfail_strict_from_the_ini_is_enough(tmp_path: Path) -> None:
    out = run(tmp_path, "-o", "xfail_strict=true", suite={"test_xfails.py": XFAILS})
    assert _outcomes(out.stdout)["test_xfail_ini"] == "XFAIL", out.stdout
    assert _outcomes(out.stdout)["test_xfail_not_strict"] == "ERROR", out.stdout


def test_the_project_sets_xfail_strict() -> None:
    import tomllib

    config = tomllib.loads((paths.REPO / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["xfail_strict"] is True
