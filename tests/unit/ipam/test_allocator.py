"""podnet.ipam.allocator without root: exact addresses for a fixed start offset, the probe bound,
requested addresses at the edges of a range, custom gateways, the store wrapper and the STATUS
verdict (mutation testing of the pure core,
docs/testing.md)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

import pytest

from podnet.errors import ADDRESS_IN_USE, INVALID_CONFIG, NO_FREE_ADDRESS, CNIError
from podnet.ipam import allocator

N4 = ipaddress.ip_network("10.0.0.0/29")  # usable: .2 - .6
N4B = ipaddress.ip_network("10.0.1.0/29")
N6 = ipaddress.ip_network("fd00::/125")  # usable: ::2 - ::6


def first(n: int) -> int:
    return 0


def never(family: int, addr: str) -> bool:
    return False


def test_usable_count_and_default_gateway() -> None:
    assert allocator.usable_count(ipaddress.ip_network("10.0.0.0/30")) == 1
    assert allocator.usable_count(ipaddress.ip_network("10.0.0.0/31")) == 0
    assert allocator.usable_count(ipaddress.ip_network("10.0.0.0/32")) == 0
    assert allocator.usable_count(N4) == 5
    assert allocator.default_gateway(N4) == "10.0.0.1"
    assert allocator.default_gateway(N6) == "fd00::1"


def test_pick_walks_forward_from_the_offset_and_wraps() -> None:
    seen: list[str] = []

    def used(addr: str) -> bool:
        seen.append(addr)
        return addr in {"10.0.0.5", "10.0.0.6"}

    assert allocator.pick(N4, used, 2, rng=lambda n: 3) == "10.0.0.2"
    assert seen == ["10.0.0.5", "10.0.0.6", "10.0.0.2"]
    assert allocator.pick(N6, lambda a: False, 0, rng=lambda n: n - 1) == "fd00::6"


def test_pick_probes_used_count_plus_one() -> None:
    calls: list[str] = []

    def used(addr: str) -> bool:
        calls.append(addr)
        return addr == "10.0.0.2"

    # one allocation known: two probes are enough, the first is taken, the second is free
    assert allocator.pick(N4, used, 1, rng=first) == "10.0.0.3"
    calls.clear()
    # no allocation known: one probe only (None is exact only for a truthful count)
    assert allocator.pick(N4, used, 0, rng=first) is None
    assert calls == ["10.0.0.2"]
    calls.clear()
    assert allocator.pick(N4, lambda a: calls.append(a) or True, 100, rng=first) is None
    assert len(calls) == 5  # never more probes than usable addresses


def test_pick_of_an_empty_range_without_rng() -> None:
    assert allocator.pick(ipaddress.ip_network("10.0.0.0/31"), lambda a: False, 0) is None
    assert allocator.pick(ipaddress.ip_network("10.0.0.0/30"), lambda a: False, 0) == "10.0.0.2"
    got = allocator.pick(ipaddress.ip_network("10.0.0.0/16"), lambda a: False, 0)
    assert got is not None and ipaddress.ip_address(got) in ipaddress.ip_network("10.0.0.0/16")


def test_allocate_one_per_family_from_the_first_range_with_space() -> None:
    assert allocator.allocate([N6, N4, N4B], never, {}, rng=first) == {
        6: ("fd00::2", "fd00::1", N6), 4: ("10.0.0.2", "10.0.0.1", N4)}
    full = {"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}
    got = allocator.allocate([N4, N4B], lambda f, a: a in full, {4: 5}, rng=first)
    assert got == {4: ("10.0.1.2", "10.0.1.1", N4B)}


def test_allocate_passes_rng_family_and_used_count() -> None:
    big = ipaddress.ip_network("10.1.0.0/16")
    assert allocator.allocate([big], never, {}, rng=lambda n: n - 1) == {
        4: ("10.1.255.254", "10.1.0.1", big)}
    families: list[int] = []

    def used(family: int, addr: str) -> bool:
        families.append(family)
        return addr == "10.0.0.2"

    # the count of the family is read: 1 allocation known, so the second probe finds .3
    assert allocator.allocate([N4, N4B], used, {4: 1, 6: 0}, rng=first) == {
        4: ("10.0.0.3", "10.0.0.1", N4)}
    assert set(families) == {4}
    # no count for the family: 0, one probe, the range is given up for the next one
    assert allocator.allocate([N4, N4B], used, {6: 3}, rng=first) == {
        4: ("10.0.1.2", "10.0.1.1", N4B)}


def test_allocate_raises_100_naming_the_ranges() -> None:
    with pytest.raises(CNIError) as err:
        allocator.allocate([N4, N6, N4B], lambda f, a: f == 4, {4: 10}, rng=first)
    assert err.value.code == NO_FREE_ADDRESS
    assert err.value.msg == "no free IPv4 address in range(s) 10.0.0.0/29, 10.0.1.0/29"


def test_allocate_custom_gateway_is_never_handed_out() -> None:
    calls: list[tuple[int, str]] = []

    def used(family: int, addr: str) -> bool:
        calls.append((family, addr))
        return addr == "10.0.0.3"

    got = allocator.allocate([N4], used, {4: 3}, rng=first, gateways={N4: "10.0.0.2"})
    assert got == {4: ("10.0.0.4", "10.0.0.2", N4)}
    assert calls == [(4, "10.0.0.3"), (4, "10.0.0.4")]  # .2 is taken without asking the store
    # a range without a custom gateway keeps network + 1
    assert allocator.allocate([N4B], never, {}, rng=first, gateways={N4: "10.0.0.2"}) == {
        4: ("10.0.1.2", "10.0.1.1", N4B)}


@pytest.mark.parametrize(("wanted", "ok"), [
    ("10.0.0.0", False), ("10.0.0.1", False), ("10.0.0.2", True), ("10.0.0.6", True),
    ("10.0.0.7", False),
])  # fmt: skip
def test_requested_address_bounds(wanted: str, ok: bool) -> None:
    if ok:
        assert allocator.allocate([N4], never, {}, rng=first, requested={4: wanted}) == {
            4: (wanted, "10.0.0.1", N4)}
        return
    with pytest.raises(CNIError) as err:
        allocator.allocate([N4], never, {}, rng=first, requested={4: wanted})
    assert err.value.code == INVALID_CONFIG
    assert err.value.msg == (
        f"requested address {wanted} is the network, gateway or last address of 10.0.0.0/29")


def test_requested_addresses() -> None:
    calls: list[tuple[int, str]] = []

    def used(family: int, addr: str) -> bool:
        calls.append((family, addr))
        return addr == "fd00::3"

    # a requested v4 address and a free pick for v6: both families served
    got = allocator.allocate([N4, N6], used, {6: 1}, rng=first, requested={4: "10.0.0.5"})
    assert got == {4: ("10.0.0.5", "10.0.0.1", N4), 6: ("fd00::2", "fd00::1", N6)}
    assert calls[0] == (4, "10.0.0.5")
    # the requested address picks its own range (the second one here)
    assert allocator.allocate([N4, N4B], never, {}, rng=first, requested={4: "10.0.1.3"}) == {
        4: ("10.0.1.3", "10.0.1.1", N4B)}
    with pytest.raises(CNIError) as err:
        allocator.allocate([N4, N6], used, {}, rng=first, requested={6: "fd00::3"})
    assert err.value.code == ADDRESS_IN_USE
    assert err.value.msg == "requested address fd00::3 is already allocated"
    for family, wanted in ((4, "10.9.0.5"), (6, "10.0.0.5"), (4, "fd00::5")):
        with pytest.raises(CNIError) as err:
            allocator.allocate([N4, N6], never, {}, rng=first, requested={family: wanted})
        assert err.value.code == INVALID_CONFIG
        assert err.value.msg == f"requested address {wanted} is in none of the ranges"
    # the custom gateway may not be requested, even when it is not network + 1
    with pytest.raises(CNIError) as err:
        allocator.allocate([N4], never, {}, rng=first, requested={4: "10.0.0.4"},
                           gateways={N4: "10.0.0.4"})  # fmt: skip
    assert err.value.msg == (
        "requested address 10.0.0.4 is the network, gateway or last address of 10.0.0.0/29")
    assert allocator.allocate([N4], never, {}, rng=first, requested={4: "10.0.0.5"},
                              gateways={N4: "10.0.0.4"}) == {4: ("10.0.0.5", "10.0.0.4", N4)}


class Holder:
    def __init__(self, container_id: str) -> None:
        self.container_id = container_id


class FakeStore:
    """The queries :func:`allocator.allocate_in` makes of a store (``store.pods``)."""

    def __init__(self, used: dict[int, set[str]], holders: dict[tuple[int, str], str]) -> None:
        self.used = used
        self.holders = holders
        self.asked: list[int] = []
        self.looked_up: list[tuple[int, str]] = []

    def used_addresses(self, family: int) -> set[str]:
        self.asked.append(family)
        return set(self.used.get(family, set()))

    @property
    def pods(self) -> FakeStore:
        return self

    def address_used(self, family: int, addr: str) -> bool:
        self.looked_up.append((family, addr))
        return addr in self.used.get(family, set())

    def holder_of(self, family: int, addr: str) -> Holder | None:
        cid = self.holders.get((family, addr))
        return None if cid is None else Holder(cid)


def test_allocate_in_reads_the_store() -> None:
    store = FakeStore({4: {"10.0.0.2", "10.0.0.3"}, 6: {"fd00::2"}}, {})
    got = allocator.allocate_in(store, [N4, N6], rng=first)  # type: ignore[arg-type]
    assert got == {4: ("10.0.0.4", "10.0.0.1", N4), 6: ("fd00::3", "fd00::1", N6)}
    # a sparse range: one index lookup per candidate, no read of every address
    assert store.looked_up == [(4, "10.0.0.2"), (4, "10.0.0.3"), (4, "10.0.0.4"),
                               (6, "fd00::2"), (6, "fd00::3")]  # fmt: skip
    assert store.asked == []
    big = ipaddress.ip_network("10.1.0.0/16")
    assert allocator.allocate_in(store, [big], rng=lambda n: n - 1) == {  # type: ignore[arg-type]
        4: ("10.1.255.254", "10.1.0.1", big)}  # the rng is passed on
    got = allocator.allocate_in(store, [N4], requested={4: "10.0.0.6"}, rng=first,  # type: ignore[arg-type]
                                gateways={N4: "10.0.0.5"})  # fmt: skip
    assert got == {4: ("10.0.0.6", "10.0.0.5", N4)}
    assert allocator.allocate_in(store, [N4], rng=first, gateways={N4: "10.0.0.5"}) == {  # type: ignore[arg-type]
        4: ("10.0.0.4", "10.0.0.5", N4)}


def test_custom_gateway_does_not_shorten_the_probe() -> None:
    """A custom gateway inside the usable addresses counts in the probe bound: with .2 and .3
    used and the gateway at .4, the walk from .2 still reaches .5 (found by mutation testing)."""
    store = FakeStore({4: {"10.0.0.2", "10.0.0.3"}}, {})
    got = allocator.allocate_in(store, [N4], rng=first, gateways={N4: "10.0.0.4"})  # type: ignore[arg-type]
    assert got == {4: ("10.0.0.5", "10.0.0.4", N4)}


def test_allocate_in_reads_every_address_of_a_dense_range() -> None:
    """More than LOOKUPS taken candidates in a row: the family's addresses are read once and
    the walk starts again, bounded by their count; the answer is still the first free address
    from the start, in the first range that has one (never the next range instead)."""
    dense = ipaddress.ip_network("10.0.2.0/24")
    taken = {f"10.0.2.{i}" for i in range(2, 3 + allocator.LOOKUPS + 5)}
    store = FakeStore({4: taken}, {})
    got = allocator.allocate_in(store, [dense, N4B], rng=first)  # type: ignore[arg-type]
    assert got == {4: (f"10.0.2.{3 + allocator.LOOKUPS + 5}", "10.0.2.1", dense)}
    assert len(store.looked_up) == allocator.LOOKUPS + 1
    assert store.asked == [4]
    # a full range of more than LOOKUPS addresses: the next range serves, as before
    store = FakeStore({4: {str(a) for a in dense.hosts()}}, {})
    got = allocator.allocate_in(store, [dense, N4B], rng=first)  # type: ignore[arg-type]
    assert got == {4: ("10.0.1.2", "10.0.1.1", N4B)}
    assert store.asked == [4]


def test_allocate_in_names_the_holder() -> None:
    store = FakeStore({4: {"10.0.0.2"}, 6: {"fd00::5"}}, {(6, "fd00::5"): "ctr-9"})
    with pytest.raises(CNIError) as err:
        allocator.allocate_in(store, [N4, N6], requested={4: "10.0.0.3", 6: "fd00::5"})  # type: ignore[arg-type]
    assert err.value.code == ADDRESS_IN_USE
    assert err.value.msg == "requested address fd00::5 is already held by ctr-9"
    assert err.value.args == ("requested address fd00::5 is already held by ctr-9",)
    # no holder row (another owner's table): the allocator's message stays
    store = FakeStore({4: {"10.0.0.2"}}, {})
    with pytest.raises(CNIError) as err:
        allocator.allocate_in(store, [N4], requested={4: "10.0.0.2"})  # type: ignore[arg-type]
    assert err.value.msg == "requested address 10.0.0.2 is already allocated"
    # exhaustion passes through with its count: every usable address is held
    store = FakeStore({4: {"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}}, {})
    with pytest.raises(CNIError) as err:
        allocator.allocate_in(store, [N4])  # type: ignore[arg-type]
    assert err.value.code == NO_FREE_ADDRESS


def used_of(table: dict[int, list[str]]) -> Any:
    def used(family: int) -> Iterable[str]:
        return table.get(family, [])
    return used


def test_exhausted() -> None:
    full4 = ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
    full4b = ["10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6"]
    full6 = ["fd00::2", "fd00::3", "fd00::4", "fd00::5", "fd00::6"]
    assert allocator.exhausted([N4, N6], used_of({})) is None
    assert allocator.exhausted([N4, N6], used_of({4: full4[:4], 6: full6[:4]})) is None
    assert allocator.exhausted([N6, N4], used_of({4: full4, 6: full6})) == (
        "no free IPv4 address left in 10.0.0.0/29")
    assert allocator.exhausted([N4, N6], used_of({6: full6})) == (
        "no free IPv6 address left in fd00::/125")
    # a family is full only when every one of its ranges is
    assert allocator.exhausted([N4, N4B], used_of({4: full4})) is None
    assert allocator.exhausted([N4, N4B], used_of({4: full4 + full4b})) == (
        "no free IPv4 address left in 10.0.0.0/29, 10.0.1.0/29")
    assert allocator.exhausted([N4], used_of({4: ["10.9.9.9"] * 5})) is None  # outside the range
