from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from netns import Lab

NEEDS_ROOT = os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None


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
