"""Generated nftables text equals the expected files (no root); the text loads in a real nft
(checked in tests/test_plugin_e2e.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podnet.firewall import hostports
from podnet.store.db import PortMapping

GOLDEN = Path(__file__).parent / "golden"

MAPPINGS = [
    PortMapping("a", "0.0.0.0", 8080, "tcp", "10.244.2.5", 80),
    PortMapping("a", "::", 8080, "tcp", "fd00:10:244::5", 80),
    PortMapping("b", "192.0.2.1", 5353, "udp", "10.244.2.6", 53),
]
RANGES = [("10.244.2.0/24", True), ("10.244.3.0/24", True), ("fd00:10:244::/64", False)]

CASES = {
    "table_full.nft": lambda: hostports.table_script(RANGES, MAPPINGS),
    "table_empty.nft": lambda: hostports.table_script([], []),
    "add.nft": lambda: hostports.add_script(MAPPINGS),
    "delete.nft": lambda: hostports.delete_script(MAPPINGS),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    text = CASES[name]()
    path = GOLDEN / name
    if os.environ.get("PODNET_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_adjacent_ranges_collapse() -> None:
    text = hostports.table_script(RANGES, [])
    assert "set ranges_v4 { type ipv4_addr; flags interval; elements = { 10.244.2.0/23 }; }" in text
