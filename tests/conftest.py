from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from netns import Lab

NEEDS_ROOT = os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None


@pytest.fixture(scope="session", autouse=True)
def _table_owner_records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the session, forget the table owner records (/run/podnet/tables) of the
    stores the tests made: every one in the session's temporary directory, and those whose
    database a test has removed. Records of other stores stay."""
    yield
    from podnet.firewall.sync import prune_claims

    prune_claims(str(tmp_path_factory.getbasetemp()))


@pytest.fixture
def lab() -> Iterator[Lab]:
    """A node namespace (plus pods/clients made on demand), torn down even on failure."""
    if NEEDS_ROOT:
        pytest.skip("needs root, iproute2 and nftables")
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()
