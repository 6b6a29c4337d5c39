"""The addresses northd gives an OVN network's pod and management ports
(``dynamic_addresses``, ovn-nb(5)), checked before they reach a tool: one per family the
network has, inside its subnets (:func:`own`, :func:`fits`), asked for under a deadline and
with the spare ports giving theirs back when the subnet is full (:func:`addresses`).
"""

from __future__ import annotations

import time
from typing import Any

from podnet import checked, errors
from podnet.ovn import pod_ports, spares
from podnet.ovn.ovsdb import Conflict, Ovsdb


def own(
    config: dict[str, str], found: list[str], what: str
) -> tuple[str, dict[int, tuple[str, str, Any]], dict[int, int]]:
    """The port's own MAC and addresses from northd's ``dynamic_addresses`` split (``found``:
    ``MAC IPv4 [IPv6]``), each parsed before it reaches a tool: ``(MAC, {family: (address,
    gateway, subnet)}, {family: prefix length})``. One address per family the network has,
    inside its subnet, neither the router's address nor the subnet's network or broadcast
    address. InvalidConfig (7) naming ``what`` for anything else (an NB record another writer
    made), NoFreeAddress (100) when no family has one."""
    nets: dict[int, Any] = {}
    for family in (4, 6):
        router = config.get(f"ipv{family}.address", "none")
        if router not in ("", "none", "auto"):
            nets[family] = checked.interface(router)
    try:
        mac = checked.mac(found[0] if found else "")
    except checked.BadValue as err:
        raise errors.InvalidConfig(f"{what}: the NB's MAC address: {err}") from None
    alloc: dict[int, tuple[str, str, Any]] = {}
    for text in found[1:]:
        try:
            address = checked.ip(text)
        except checked.BadValue as err:
            raise errors.InvalidConfig(f"{what}: the NB's addresses: {err}") from None
        router_if = nets.get(address.version)
        bad = router_if is None or address.version in alloc
        if router_if is not None:
            net = router_if.network
            edge = address.version == 4 and address == net.broadcast_address
            bad = bad or edge or address not in net or address in (router_if.ip,
                                                                  net.network_address)  # fmt: skip
        if bad or router_if is None:
            raise errors.InvalidConfig(
                f"{what}: the NB lists {checked.show(text)}, not an address of the network's "
                f"subnets for a port (one per family)",
                f"dynamic_addresses {found}",
            )
        alloc[address.version] = (str(address), str(router_if.ip), net)
    if not alloc:
        raise errors.NoFreeAddress("OVN assigned no address in the network's subnets", f"{found}")
    return mac, alloc, {f: a[2].prefixlen for f, a in alloc.items()}


def security(mac: str, alloc: dict[int, tuple[str, str, Any]]) -> str:
    """A pod port's ``port_security`` (``"MAC IPv4 [IPv6]"``, ovn-nb(5)): OVN drops what the
    pod sends from any other MAC or address (ARP and neighbour discovery included; the
    link-local address derived from the MAC and ``::`` stay allowed) and what is sent to
    others."""
    return " ".join([mac, *(alloc[f][0] for f in sorted(alloc))])


def subnets(config: dict[str, str]) -> list[Any]:
    """An OVN network's subnets (``ipvN.address``), as networks."""
    return [checked.interface(config[k]).network for k in ("ipv4.address", "ipv6.address")
            if config.get(k, "none") not in ("", "none", "auto")]  # fmt: skip


def fits(config: dict[str, str], found: list[str]) -> bool:
    """True when northd's addresses ``found`` (``MAC IPv4 [IPv6]`` split) hold one address in
    each subnet the network's ``config`` has: northd leaves a family out when its subnet is
    full, and moves addresses after a subnet change."""
    want = {}
    for family in (4, 6):
        router = config.get(f"ipv{family}.address", "none")
        if router not in ("", "none", "auto"):
            want[family] = checked.interface(router).network
    have = set()
    for text in found[1:]:
        try:
            address = checked.ip(text)
        except ValueError:
            return False
        if address.version in want and address in want[address.version]:
            have.add(address.version)
    return bool(want) and have == set(want)


def ask(nb: Ovsdb, port: str, deadline: float, what: str) -> list[str]:
    """The port's ``dynamic_addresses`` split, once northd has written them; TryAgainLater
    (11) naming ``what`` when it did not before ``deadline`` (monotonic seconds)."""
    left = max(1, int((deadline - time.monotonic()) * 1000))
    found = pod_ports.port_addresses(nb, port, left)
    if not found:
        raise errors.TryAgainLater(
            f"OVN assigned no address to {what} in time (is ovn-northd running?)",
            f"dynamic_addresses still empty after {left} ms",
        )
    return found


def addresses(
    nb: Ovsdb,
    network: str,
    port: str,
    config: dict[str, str],
    chassis: str,
    ids: dict[str, str],
    registered: str | None,
    deadline: float,
    what: str,
) -> tuple[list[str], bool]:
    """The addresses northd gives port ``port`` (just made), every family of ``config``
    (:func:`fits`). When the subnet is full, the nodes' spare ports
    (:func:`podnet.ovn.spares.delete_spares`) give theirs back and the port is made again to
    ask anew, as long as spares keep competing and the deadline allows; with none left it asks
    twice more (another ADD may have given them back while this port asked). ``(found, True when
    spares were given back)``. Errors: 100 no free address and no spare left, 11 northd did
    not answer or spares competed until the deadline, or the network changed meanwhile."""
    found = ask(nb, port, deadline, what)
    gave_back, quiet = False, 0
    while not fits(config, found):
        try:
            given = spares.delete_spares(nb, network)
        except Conflict:
            given = 1  # the spares changed while they were given back: read them again
        # no spare left: another ADD may have given them back, or made and given back new
        # ones, while this port asked; full only when two asks in a row found no spare
        # before or after them
        quiet = 0 if given else quiet + 1
        if quiet > 2:
            break
        gave_back = True
        if time.monotonic() >= deadline:
            raise errors.TryAgainLater(
                f"network {network} is nearly full: spare ports took its last addresses "
                f"from {what} until the deadline",
                f"dynamic_addresses {found}",
            )
        try:
            pod_ports.delete_port(nb, network, port)
            pod_ports.add_port(nb, network, port, found[0], chassis, ids, registered)
        except Conflict:
            raise errors.TryAgainLater(
                f"network {network} changed while {what} asked for an address"
            ) from None
        found = ask(nb, port, deadline, what)
    if not fits(config, found):
        raise errors.NoFreeAddress(
            f"network {network} has no free address for {what}", f"dynamic_addresses {found}"
        )
    return found, gave_back
