"""The ``cluster`` fixture of the OVN tests: a lab of three nodes per test module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from envgate import need
from ovn_cluster import Cluster
from podnet.cli.demo.ovnlab import OvnLab, missing_tools


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need("root")
    if missing_tools():
        pytest.fail(f"OVN tools missing: {missing_tools()} (.ci/run installs them)")
    lab = OvnLab(f"pno{uuid.uuid4().hex[:4]}", ("n1", "n2", "n3"), subnet=249)
    try:
        lab.start()
        lab.outside(lab.nodes[0])
        yield Cluster(lab, tmp_path_factory.mktemp("ovn"))
    finally:
        lab.stop()
