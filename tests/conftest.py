from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envgate
from netns import Lab

#: The privilege and tools a namespace test needs (the ``lab`` fixture and the API servers).
NAMESPACES = ("root", "ip", "nft")

#: Every skip of this session, for the summary at the very end: (test id, reason).
_SKIPS: list[tuple[str, str]] = []


#: The tests that need no root, no namespace and no tool (``pytest tests/unit``).
UNIT = Path(__file__).resolve().parent / "unit"

#: What a test under ``tests/unit`` may not ask for: the marks and the fixtures of root tests.
ROOT_MARKS = ("root", "runtime")
ROOT_FIXTURES = ("lab",)


def _only_units(config: pytest.Config) -> bool:
    """Whether every path this run was given lies in ``tests/unit`` (then the machine's
    privileges and tools are no requirement of the run)."""
    paths = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
             for arg in config.args]  # fmt: skip
    return bool(paths) and all(p == UNIT or UNIT in p.parents for p in paths)


def _in_units(item: pytest.Item) -> bool:
    return UNIT in Path(str(item.path)).resolve().parents


def pytest_sessionstart(session: pytest.Session) -> None:
    """With ``PODNET_TEST_REQUIRE=all`` (scripts/test.sh), stop before the first test when the
    machine lacks a requirement nobody opted out of, naming each one; a run of ``tests/unit``
    alone requires nothing of the machine."""
    if os.environ.get(envgate.REQUIRE_ENV) == "all" and not _only_units(session.config):
        problem = envgate.check_all()
        if problem:
            pytest.exit(problem, returncode=3)
    else:
        envgate.allowed()  # a malformed opt-out is a usage error even when not gated


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No test under ``tests/unit`` carries a root mark or asks for a namespace (``lab``).

    In an xdist worker under ``--dist loadgroup``: every test with an ``xdist_group`` mark
    must carry its group in its node id (how xdist keeps a group on one worker). pytest 9 broke
    that silently (node ids are no longer settable; pyproject pins pytest < 9): stop rather
    than run grouped tests side by side."""
    rooted = [i.nodeid for i in items if _in_units(i)
              and (any(i.get_closest_marker(m) for m in ROOT_MARKS)
                   or any(f in getattr(i, "fixturenames", ()) for f in ROOT_FIXTURES))]  # fmt: skip
    if rooted:
        raise pytest.UsageError(f"tests/unit holds tests that need root (a mark {ROOT_MARKS} or "
                                f"the fixture {ROOT_FIXTURES}): {', '.join(rooted)}; they belong "
                                "in tests/e2e")
    if not os.environ.get("PYTEST_XDIST_WORKER") or config.getvalue("dist") != "loadgroup":
        return
    lost = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"xdist groups are not applied (pytest {pytest.__version__}): "
                                f"{lost[0]} and {len(lost) - 1} more would run apart")


def _reason(longrepr: object) -> str:
    """A skip report's reason, without the exception's name pytest puts first."""
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    for prefix in ("Skipped: ", "envgate.Allowed: "):
        reason = reason.removeprefix(prefix)
    return reason


def _not_strict(item: pytest.Item) -> str | None:
    """The reason of an ``xfail`` mark on ``item`` that is not strict (its own ``strict=`` or
    the ini's ``xfail_strict``), else None."""
    for mark in item.iter_markers("xfail"):
        if not mark.kwargs.get("strict", item.config.getini("xfail_strict")):
            return str(mark.kwargs.get("reason", mark.args[1:2] or ""))
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """A skip the gate did not allow (an :class:`envgate.Allowed` from ``need()``, its
    requirements still missing and opted out of) is a failure, as are an ``xfail`` mark that
    is not strict (an expected failure that may pass unnoticed) and ``pytest.xfail()`` (it ends
    the test where it is called, passing or not): nothing skips or fails quietly."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    why = None
    if report.when == "setup" and (reason := _not_strict(item)) is not None:
        why = f"an xfail that is not strict ({reason}); mark it xfail(strict=True)"
    elif call.excinfo is not None and call.excinfo.errisinstance(pytest.xfail.Exception):
        why = f"pytest.xfail() called ({call.excinfo.value.msg}); use a strict xfail mark"
    elif report.skipped and not hasattr(report, "wasxfail"):
        reason = _reason(report.longrepr)
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, envgate.Allowed) and envgate.granted(exc.names):
            return
        why = (f"skipped without a person's opt-out ({reason}); state the need with "
               f"envgate.need() or opt out with {envgate.ALLOW_ENV}")
    if why is None:
        return
    report.outcome = "failed"
    report.longrepr = why
    if hasattr(report, "wasxfail"):
        del report.wasxfail


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """A module that skips itself (``pytest.skip(..., allow_module_level=True)``, a
    ``pytest.importorskip``) fails its collection: its tests would vanish with exit 0."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped:
        reason = _reason(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid} skipped at collection ({reason}); a module "
                           f"may not skip itself: state each test's need with envgate.need()")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the (allowed) skips where the reports arrive: in the one process, or in the
    controller of an xdist run (each worker's makereport above has already judged them)."""
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPS.append((report.nodeid, _reason(report.longrepr)))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """The run's last lines (after pytest's short summary, before its count line): every skip
    with its reason, or that none happened."""
    yield
    if not _SKIPS:
        terminalreporter.write_line("podnet test gate: no test skipped")
        return
    terminalreporter.write_line(f"podnet test gate: {len(_SKIPS)} skipped, each by an opt-out:")
    for nodeid, reason in _SKIPS:
        terminalreporter.write_line(f"  SKIP {nodeid}: {reason}")


@pytest.fixture(scope="session", autouse=True)
def _table_owner_records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the session, forget the table owner records (/run/podnet/tables) of the
    stores the tests made: every one in the session's temporary directory, and those whose
    database a test has removed. Records of other stores stay."""
    yield
    from podnet.reconcile import prune_claims

    prune_claims(str(tmp_path_factory.getbasetemp()))


@pytest.fixture
def lab() -> Iterator[Lab]:
    """A node namespace (plus pods/clients made on demand), torn down even on failure."""
    envgate.need(*NAMESPACES)
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()
