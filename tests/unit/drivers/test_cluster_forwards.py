"""``0.0.0.0``/``::`` forwards of OVN networks take the first free address of the uplink's
routes (:mod:`podnet.drivers.ovn.forwards`). The work is bounded by the candidates tried,
not by the uplink's OVN ranges times the taken addresses: with thousands of ranges and
thousands of forwards the allocation is counted in Python calls (``sys.setprofile``), and a
run of taken addresses is passed over in one candidate check."""

from __future__ import annotations

import ipaddress
import sys
from types import FrameType
from typing import Any

import pytest

from podnet.drivers.ovn import forwards as cf
from podnet.networks.errors import NetworkError
from podnet.ovn import nb as nbmod

#: OVN ranges of the uplink and forwards holding the gaps between them.
RANGES = 3000
ROUTE4 = ipaddress.ip_network("10.128.0.0/16")
ROUTE6 = ipaddress.ip_network("fd77:1:2:3::/64")


class TooMuchWork(Exception):
    """More Python calls than the bound: the allocation does not scale with its tries."""


class Calls:
    """Counts Python function calls (``sys.setprofile`` ``call`` events, generator resumptions
    included) while active; raises :class:`TooMuchWork` past ``bound`` so an allocation that
    grows with ranges × taken fails at once instead of running for minutes."""

    def __init__(self, bound: int) -> None:
        self.bound, self.count = bound, 0

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.count += 1
            if self.count > self.bound:
                sys.setprofile(None)
                raise TooMuchWork(f"more than {self.bound} Python calls")

    def __enter__(self) -> Calls:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


def _crowded(route: Any) -> tuple[nbmod.Registry, nbmod.Record, str]:
    """An uplink whose ``ipvN.ovn.ranges`` are :data:`RANGES` two-address ranges from the
    route's second address on, each followed by one address a forward holds; the OVN network
    on it; and the first free address (right after the last gap)."""
    family = route.version
    base = int(route.network_address) + 1
    ranges, forwards = [], {}
    for i in range(RANGES):
        first = ipaddress.ip_address(base + 3 * i)
        ranges.append(f"{first}-{first + 1}")
        forwards[("ova", str(first + 2))] = "{}"
    gateway = "203.0.113.254/24" if family == 4 else "2001:db8:77::1/64"
    uplink = nbmod.Record("physical", "", {
        "parent": "ext0", f"ipv{family}.gateway": gateway,
        f"ipv{family}.ovn.ranges": ",".join(ranges), f"ipv{family}.routes": str(route),
        "ovn.ingress_mode": "routed"})  # fmt: skip
    subnet = "10.40.0.1/24" if family == 4 else "fd42:1:2:3::1/64"
    network = nbmod.Record("ovn", "", {"network": "upa", f"ipv{family}.address": subnet})
    registry = nbmod.Registry({"upa": uplink, "ova": network}, ["map", []], forwards)
    free = str(ipaddress.ip_address(base + 3 * RANGES))
    return registry, network, free


@pytest.mark.parametrize("route", [ROUTE4, ROUTE6], ids=["ipv4", "ipv6"])
def test_allocation_is_bounded_by_its_tries(route: Any) -> None:
    """3,000 ranges and 3,000 forwards in the uplink's route: the first free address is found
    in at most 40 Python calls per range and forward (parsing the ranges included; a check
    per taken address against every range took tens of millions). Ranges and forwards are
    merged into runs of taken addresses, so the whole run costs one candidate check and the
    next is free: two checks in all; one is refused naming the bound."""
    registry, network, free = _crowded(route)
    with Calls(40 * 2 * RANGES) as calls:
        found = cf._allocate(registry, network, route.version)
    assert found == free, (found, free)
    assert calls.count > RANGES  # the counter saw the work (the ranges were parsed)
    assert cf._allocate(registry, network, route.version, 2) == free
    with pytest.raises(NetworkError, match="within 1 tries"):
        cf._allocate(registry, network, route.version, 1)


@pytest.mark.parametrize("family", [4, 6])
def test_a_run_of_forwards_longer_than_the_tries_is_passed_over(family: int) -> None:
    """More consecutive forwards than :data:`ALLOCATE_TRIES` (70,000) from a route's first
    address on, a free address right after them: that address is allocated (each forward
    checked on its own gave up at 65,536 though addresses were free), in two checks; with
    every address of a route held by forwards the answer is that none is free."""
    route = ipaddress.ip_network("10.200.0.0/15" if family == 4 else "fd77:9::/110")
    run = 70_000
    assert run > cf.ALLOCATE_TRIES
    start = int(route.network_address) + 1
    forwards = {("ova", str(ipaddress.ip_address(start + i))): "{}" for i in range(run)}
    gateway = "203.0.113.254/24" if family == 4 else "2001:db8:77::1/64"
    uplink = nbmod.Record("physical", "", {
        "parent": "ext0", f"ipv{family}.gateway": gateway,
        f"ipv{family}.ovn.ranges": "203.0.113.10-203.0.113.19" if family == 4
        else "2001:db8:77::10-2001:db8:77::19",
        f"ipv{family}.routes": str(route), "ovn.ingress_mode": "routed"})  # fmt: skip
    subnet = "10.40.0.1/24" if family == 4 else "fd42:1:2:3::1/64"
    network = nbmod.Record("ovn", "", {"network": "upa", f"ipv{family}.address": subnet})
    registry = nbmod.Registry({"upa": uplink, "ova": network}, ["map", []], forwards)
    free = str(ipaddress.ip_address(start + run))
    assert cf._allocate(registry, network, family) == free
    assert cf._allocate(registry, network, family, 2) == free
    small = ipaddress.ip_network("10.201.0.0/29" if family == 4 else "fd77:a::/125")
    hosts = list(small.hosts()) if family == 4 else list(small)[1:]
    full = {("ova", str(a)): "{}" for a in hosts}
    uplink.config[f"ipv{family}.routes"] = str(small)
    registry = nbmod.Registry({"upa": uplink, "ova": network}, ["map", []], full)
    with pytest.raises(NetworkError, match="No free address in the uplink's routes$"):
        cf._allocate(registry, network, family)


def test_allocation_skips_what_is_taken() -> None:
    """A route fully taken by one OVN range (a /16: 65,534 addresses) is passed over in one
    check for the next route; there the network's subnet, its router address and forwards are
    skipped, and an IPv4 route's network and broadcast addresses are never listen addresses;
    with nothing free the answer says so."""
    uplink = nbmod.Record("physical", "", {
        "parent": "ext0", "ipv4.gateway": "203.0.113.254/24",
        "ipv4.ovn.ranges": "10.129.0.1-10.129.255.254",
        "ipv4.routes": "10.129.0.0/16,192.0.2.0/29", "ovn.ingress_mode": "routed"})  # fmt: skip
    network = nbmod.Record("ovn", "", {"network": "upa", "ipv4.address": "192.0.2.1/30",
                                       "volatile.network.ipv4.address": "192.0.2.5"})  # fmt: skip
    registry = nbmod.Registry({"upa": uplink, "ova": network}, ["map", []])
    assert cf._allocate(registry, network, 4) == "192.0.2.4"  # after the subnet's .0-.3
    registry.forwards[("ova", "192.0.2.4")] = "{}"
    assert cf._allocate(registry, network, 4) == "192.0.2.6"  # .5 is the router's
    registry.forwards[("ova", "192.0.2.6")] = "{}"
    with pytest.raises(NetworkError, match="No free address in the uplink's routes$"):
        cf._allocate(registry, network, 4)
