"""Address choice (no root)."""

from __future__ import annotations

import ipaddress
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnet.errors import CNIError
from podnet.ipam.allocator import allocate, pick, usable_count


def test_never_network_gateway_or_last() -> None:
    net = ipaddress.ip_network("10.0.0.0/29")
    used: set[str] = set()
    while (addr := pick(net, used.__contains__, len(used))) is not None:
        used.add(addr)
    assert used == {f"10.0.0.{i}" for i in range(2, 7)}
    assert len(used) == usable_count(net)


@settings(max_examples=50)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=24, max_value=30))
def test_exhaustion_is_exact(seed: int, plen: int) -> None:
    net = ipaddress.ip_network(f"10.1.0.0/{plen}")
    rng = random.Random(seed)
    used: set[str] = set()
    for _ in range(usable_count(net)):
        addr = pick(net, used.__contains__, len(used), rng.randrange)
        assert addr is not None and addr not in used
        assert ipaddress.ip_address(addr) in net
        used.add(addr)
    assert pick(net, used.__contains__, len(used), rng.randrange) is None


def test_one_per_family_from_first_range_with_space() -> None:
    ranges = [ipaddress.ip_network(n) for n in ("10.0.0.0/30", "10.0.1.0/24", "fd00::/64")]
    used = {4: {"10.0.0.2"}, 6: set()}
    out = allocate(ranges, lambda f, a: a in used[f], {f: len(u) for f, u in used.items()})
    assert set(out) == {4, 6}
    assert ipaddress.ip_address(out[4][0]) in ranges[1] and out[4][1] == "10.0.1.1"
    assert out[6][1] == "fd00::1"


def test_full_ranges_raise_100() -> None:
    ranges = [ipaddress.ip_network("10.0.0.0/30")]
    with pytest.raises(CNIError) as info:
        allocate(ranges, lambda f, a: True, {4: 1})
    assert info.value.code == 100 and "10.0.0.0/30" in info.value.msg
