"""schemathesis against ``/openapi.json`` (the API's promise: "schemathesis against
/openapi.json finds no 5xx and no response that violates the schema").

The application is built with ``podnet.api.app.create_app(Manager(<tmp dir>))`` and driven
in-process by schemathesis (``from_asgi``) — inside a node namespace, in a process of its own
(:func:`api_helpers.schema_run`), since networks it manages to create are Linux bridges. Every
operation gets positive and negative data, with generated path parameters and with ones naming
an existing network and forward; derandomized with a fixed seed and a bounded number of examples.
Checks: not a server error, status code documented, content type and headers documented,
response body valid against the schema, negative data rejected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api_helpers import in_ns_python, kill_running
from envgate import need
from netns import Lab

pytestmark = pytest.mark.root

MAX_EXAMPLES = 50
SEED = 20261123


def test_schemathesis_finds_no_5xx_and_no_schema_violation(tmp_path: Path) -> None:
    need("root", "ip", "nft")
    lab = Lab()
    proc = None
    try:
        data = tmp_path / "data"
        data.mkdir()
        proc = in_ns_python(lab.node, f"import api_helpers; api_helpers.schema_run("
                                      f"{str(data)!r}, {MAX_EXAMPLES}, {SEED})",
                            stderr=open(tmp_path / "driver.err", "w"), cwd=str(tmp_path))
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, (tmp_path / "driver.err").read_text()[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
    finally:
        kill_running(proc)
        lab.close()
    cases = report["cases"]
    assert len(cases) == 22, cases  # every operation of the schema was exercised (PUT and PATCH /1.0, /1.0/certificates, GET / included)
    assert cases.pop("GET /1.0") >= 1  # no parameters: one request is all there is
    assert cases.pop("GET /") >= 1
    assert all(n >= MAX_EXAMPLES // 2 for n in cases.values()), cases
    failures = report["failures"]
    summary = "\n\n".join(f"{f['operation']} [{f['mode']}] -> {f['status']}\n{f['error']}"
                          for f in failures[:10])
    assert failures == [], f"{len(failures)} failures, first ones:\n{summary}"
