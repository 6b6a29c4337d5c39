"""Choosing pod addresses from configured ranges — for the ``podnet`` main plugin and the
``podnet-ipam`` IPAM plugin alike (both call :func:`allocate_in` and :func:`exhausted`).

Rules (as cni-kindnet's, docs/sources.md#cni-kindnet): one address per family, from the first range
of that family with a free address; never a range's network address, its gateway (network + 1) or
its last address (the IPv4 broadcast; excluded for IPv6 too, to keep one rule). Probing starts at a
random offset and walks forward, so allocation costs O(pods) at worst and O(1) on a sparse range,
and a freed address is not handed out again at once.
"""

from __future__ import annotations

import ipaddress
import os

from podnet import checked
from podnet.errors import AddressInUse, InvalidConfig, NoFreeAddress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from podnet.store import Store

    Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def default_gateway(network: Network) -> str:
    """The range's gateway: its first host address (network + 1)."""
    return str(network.network_address + 1)


def usable_count(network: Network) -> int:
    """Addresses a range can give pods: all but network, gateway and last."""
    return max(network.num_addresses - 3, 0)


def pick(
    network: Network,
    is_used: Callable[[str], bool],
    used_count: int,
    rng: Callable[[int], int] | None = None,
) -> str | None:
    """A free address of ``network`` or None when it is full.

    ``rng(n)`` gives the start offset in ``range(n)`` (default: from os.urandom; the random
    module costs ~2 ms of import per call). ``is_used(addr)`` answers for one address;
    ``used_count`` bounds the probe: after
    ``used_count + 1`` probes of a range holding only ``used_count`` allocations, one must have
    been free, so a None answer is exact.
    """
    size = usable_count(network)
    if size <= 0:
        return None
    first = int(network.network_address) + 2
    offset = rng(size) if rng else int.from_bytes(os.urandom(16), "big") % size
    cls = type(network.network_address)
    for step in range(min(size, used_count + 1)):
        candidate = str(cls(first + (offset + step) % size))
        if not is_used(candidate):
            return candidate
    return None


def allocate(
    ranges: Sequence[Network],
    is_used: Callable[[int, str], bool],
    used_counts: dict[int, int],
    rng: Callable[[int], int] | None = None,
    requested: dict[int, str] | None = None,
    gateways: Mapping[Network, str] | None = None,
) -> dict[int, tuple[str, str, Network]]:
    """One address per family present in ``ranges``: ``{family: (address, gateway, range)}``.

    ``is_used(family, addr)`` and ``used_counts[family]`` describe current allocations.
    ``requested`` (``{family: address}``, from the ``ips`` capability or CNI_ARGS ``IP=``) must
    be a usable address of a configured range (else code 7) and free (else
    :class:`AddressInUse`, code 105).
    ``gateways``: a range's gateway when it is not network + 1 (a bridge network's address);
    it is never handed out either. Raises :class:`NoFreeAddress` (code 100) naming the family's
    ranges when all are full.
    """
    gateways = gateways or {}
    if gateways:
        plain = is_used
        taken = set(gateways.values())

        def is_used(family: int, addr: str) -> bool:
            return addr in taken or plain(family, addr)

    def gateway(net: Network) -> str:
        return gateways.get(net) or default_gateway(net)

    out: dict[int, tuple[str, str, Network]] = {}
    for family, wanted in (requested or {}).items():
        ip = checked.ip(wanted)
        net = next((n for n in ranges if n.version == family and ip in n), None)
        if net is None:
            raise InvalidConfig(f"requested address {wanted} is in none of the ranges")
        offset = int(ip) - int(net.network_address)
        if offset < 2 or offset >= net.num_addresses - 1 or wanted == gateway(net):
            raise InvalidConfig(
                f"requested address {wanted} is the network, gateway or last address of {net}"
            )
        if is_used(family, wanted):
            raise AddressInUse(f"requested address {wanted} is already allocated")
        out[family] = (wanted, gateway(net), net)
    families = []
    for net in ranges:
        if net.version not in families:
            families.append(net.version)
    for family in families:
        if family in out:
            continue
        candidates = [n for n in ranges if n.version == family]
        for net in candidates:

            def used(addr: str, family: int = family) -> bool:
                return is_used(family, addr)

            # a custom gateway inside the usable addresses is one more used address to probe past
            inside = sum(1 for g in gateways.values() if checked.ip(g) in net)
            addr = pick(net, used, used_counts.get(family, 0) + inside, rng)
            if addr is not None:
                out[family] = (addr, gateway(net), net)
                break
        else:
            names = ", ".join(str(n) for n in candidates)
            raise NoFreeAddress(f"no free IPv{family} address in range(s) {names}")
    return out


#: Addresses in a row :func:`allocate_in` finds taken by index lookups before it reads them all.
LOOKUPS = 8


class _Dense(Exception):
    """:func:`allocate_in`: more than :data:`LOOKUPS` taken addresses in a row."""


def allocate_in(
    store: Store,
    ranges: Sequence[Network],
    requested: dict[int, str] | None = None,
    rng: Callable[[int], int] | None = None,
    gateways: Mapping[Network, str] | None = None,
) -> dict[int, tuple[str, str, Network]]:
    """:func:`allocate` against every address ``store`` holds (rows of any owner), so the
    ``podnet`` plugin and ``podnet-ipam`` sharing a database never hand out one address twice.

    Each candidate is first one lookup in the address's UNIQUE index; only when more than
    :data:`LOOKUPS` candidates in a row are taken (a dense range) are all the family's addresses
    read and the walk started again, bounded as :func:`pick` says. Either way the answer is the
    first free address from the random start, and a sparse range costs no read of every
    row.

    Call it inside ``store.write()`` (``BEGIN IMMEDIATE``) and insert the row in the same
    transaction. Same result and errors as :func:`allocate` (7, 100).
    """
    families = {n.version for n in ranges}
    taken = 0

    def looked_up(family: int, addr: str) -> bool:
        nonlocal taken
        if not store.pods.address_used(family, addr):
            taken = 0
            return False
        taken += 1
        if taken > LOOKUPS:
            raise _Dense
        return True

    try:
        try:
            # no bound of its own: pick() walks until looked_up() answers free or gives up
            size = max(map(usable_count, ranges), default=0)
            unbounded: dict[int, int] = dict.fromkeys(families, size)
            return allocate(ranges, looked_up, unbounded, rng, requested, gateways)
        except _Dense:
            pass
        used: dict[int, set[str]] = {f: store.pods.used_addresses(f) for f in families}
        return allocate(
            ranges,
            lambda family, addr: addr in used[family],
            {f: len(u) for f, u in used.items()},
            rng,
            requested,
            gateways,
        )
    except AddressInUse as err:
        for family, wanted in (requested or {}).items():
            holder = store.pods.holder_of(family, wanted)
            if holder is not None:
                err.msg = f"requested address {wanted} is already held by {holder.container_id}"
                err.args = (err.msg,)
        raise


def exhausted(ranges: Sequence[Network], used: Callable[[int], Iterable[str]]) -> str | None:
    """The STATUS verdict: a message naming the first family (4 before 6) whose ranges have no
    usable address left, or None when every family can serve one more ADD. ``used(family)``
    gives the allocated addresses of that family."""
    for family in sorted({n.version for n in ranges}):
        nets = [n for n in ranges if n.version == family]
        addrs = [checked.ip(a) for a in used(family)]
        if all(sum(1 for a in addrs if a in n) >= usable_count(n) for n in nets):
            return f"no free IPv{family} address left in {', '.join(str(n) for n in nets)}"
    return None
