"""Forwards of networks kept in this node's store (:class:`podnet.drivers.local.LocalBackend`):
rows of ``network_forwards`` and their DNAT entries, made real in table ``inet podnet``.

A forward's kernel change touches only that forward's map elements
(:func:`podnet.reconcile.forwards`), so its cost does not grow with the number of forwards. The
callers hold the store's write lock; each change is one write transaction, the table changed
before its COMMIT. Listen addresses follow LXD's rules for a bridge network (lxd/network/
driver_bridge.go ``ForwardCreate``): one forward per address on the node, outside every subnet
and range, not another network's SNAT address, and never taking a hostPort's traffic.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from podnet import checked
from podnet import reconcile as sync
from podnet.claims import first_conflict
from podnet.drivers.backend import Change, driver_of
from podnet.networks import forwards as fwd
from podnet.networks.errors import NetworkError
from podnet.networks.model import Forward, ForwardPort, canonical_address
from podnet.values import FORWARD, Dnat, PortMapping

if TYPE_CHECKING:
    from collections.abc import Callable

    from podnet.checked import Net
    from podnet.store import Store
    from podnet.store.networks import ForwardRow, NetworkRow


def view(row: NetworkRow) -> fwd.NetworkView:
    """What forward validation needs of a stored network: its subnets per family."""
    return fwd.NetworkView(row.name, row.type, driver_of(row.type).subnets(row.config))


def taken_subnets(store: Store, skip: str = "") -> list[tuple[Net, str]]:
    """Every subnet a network or podnet range holds, with its owner's description."""
    out: list[tuple[Net, str]] = []
    for row in store.networks.all():
        if row.name == skip:
            continue
        for nets in view(row).subnets.values():
            out += [(n, f'network "{row.name}"') for n in nets]
    for _, cidr, description, _ in store.ranges.all():
        out.append((checked.network(cidr), f"range {cidr} ({description or 'podnet'})"))
    return out


def forward_of(row: ForwardRow) -> Forward:
    """A stored forward as the API shows it (ports that cannot be read: none)."""
    try:
        ports = [ForwardPort.from_api(p) for p in json.loads(row.ports or "[]")]
    except (ValueError, TypeError, AttributeError):
        ports = []
    return Forward(row.listen_address, row.description, dict(row.config), ports, row.location)


def _ports_json(forward: Forward) -> str:
    return json.dumps([p.to_api() for p in forward.ports], separators=(",", ":"))


def listing(store: Store, row: NetworkRow) -> list[Forward]:
    """The forwards of network ``row``, oldest first."""
    return [forward_of(f) for f in store.networks.forwards(row.id)]


def one(store: Store, row: NetworkRow, listen: str) -> Forward:
    """The forward of ``row`` on ``listen`` (any spelling); 404 ``Network forward not found``."""
    found = store.networks.forward(row.id, canonical_address(listen))
    if found is None:
        raise NetworkError("Network forward not found", 404)
    return forward_of(found)


def check_listen(store: Store, row: NetworkRow, listen: str) -> None:
    """One forward per listen address across all networks; not inside any subnet."""
    holder = store.networks.forward_network_of(listen)
    if holder == row.name:
        raise NetworkError("A forward for that listen address already exists", 409)
    addr = checked.ip(listen)
    suffix = "/32" if addr.version == 4 else "/128"
    if holder is not None:
        raise NetworkError(
            f'Forward listen address "{listen}{suffix}" overlaps with another network or NIC',
            409,
        )
    for net, owner in taken_subnets(store):
        if net.version == addr.version and addr in net:
            raise NetworkError(
                f'Forward listen address "{listen}{suffix}" overlaps with another network or '
                f"NIC ({owner} holds {net})"
            )
    for other in store.networks.all():  # another network's SNAT address (its own is allowed)
        if other.name != row.name and listen in (
            other.config.get("ipv4.nat.address"),
            other.config.get("ipv6.nat.address"),
        ):
            raise NetworkError(
                f'Forward listen address "{listen}{suffix}" overlaps with another network or '
                f'NIC (the source NAT address of network "{other.name}")'
            )


def check_hostports(store: Store, dnats: Sequence[Dnat]) -> None:
    """A forward may not take traffic a hostPort publishes (and the reverse is refused by
    the plugins). hostPorts answer only on the node's own addresses, so only a forward
    whose listen address is local can: one listing a hostPort's protocol and port on that
    address or on any address of its family, or a default target on an address where any
    hostPort answers. 409 naming the holder (podnet's or podnet-portmap's)."""
    found = first_conflict(store, dnats, of=FORWARD)
    if found is not None:
        d, holder = found
        h = holder.what
        assert isinstance(h, PortMapping)
        where = "any address" if h.wildcard else h.host_ip
        what = f"{d.protocol}/{d.port}" if d.protocol else "every port"
        raise NetworkError(
            f"Forward {what} on {d.listen} (an address of this node) would take the "
            f"traffic of hostPort {h.protocol}/{h.host_port} on {where} held by container "
            f"{holder.name}",
            409,
        )


def create(store: Store, row: NetworkRow, forward: Forward, node: str,
           warn: Callable[[str], None] | None) -> Forward:  # fmt: skip
    """Create a forward of network ``row`` recorded for member ``node``. Errors: 409 an
    existing forward on that address (this network: ``A forward for that listen address
    already exists``; another: overlap) or a hostPort clash; 400 anything invalid (LXD's
    messages, prefixed ``Failed creating forward:``)."""
    prefix = "Failed creating forward: "
    new = forward.normalised()
    try:
        fwd.listen_address(new.listen_address)
        check_listen(store, row, new.listen_address)
        dnats = fwd.validate(view(row), new)
        check_hostports(store, dnats)
    except NetworkError as err:
        raise NetworkError(prefix + str(err), err.status) from None
    new.config = {k: v for k, v in new.config.items() if v != ""}
    with store.write():
        node_id = store.networks.node_id(node)
        fid = store.networks.insert_forward(row.id, node_id, new.listen_address, new.description,
                                            _ports_json(new), new.config)  # fmt: skip
        for d in dnats:
            d.owner = str(fid)
        store.networks.set_forward_dnats(fid, dnats)
        sync.forwards(store, new.listen_address, None, dnats, warn)
    found = store.networks.forward(row.id, new.listen_address)
    assert found is not None
    return forward_of(found)


def modify(store: Store, row: NetworkRow, listen: str, change: Change, client: bool,
           warn: Callable[[str], None] | None) -> Forward:  # fmt: skip
    """Read, change and write the forward of ``row`` on ``listen``: ``change(current) -> new``
    (NetworkError to refuse), validated like a created one; an unchanged forward is not
    written. 404 (``client``: the bare ``Network forward not found`` ``lxc`` shows), 400/409
    prefixed ``Failed updating forward:``."""
    prefix = "Failed updating forward: "
    found = store.networks.forward(row.id, canonical_address(listen))
    if found is None:
        raise NetworkError(("" if client else prefix) + "Network forward not found", 404)
    current = forward_of(found)
    new = change(current).normalised()
    try:
        dnats = fwd.validate(view(row), new)
        check_hostports(store, dnats)
    except NetworkError as err:
        raise NetworkError(prefix + str(err), err.status) from None
    new.config = {k: v for k, v in new.config.items() if v != ""}
    if new.etag() == current.etag():
        return current
    old = store.networks.forward_dnats(found.id)
    with store.write():
        store.networks.update_forward(found.id, new.description, _ports_json(new), new.config)
        for d in dnats:
            d.owner = str(found.id)
        store.networks.set_forward_dnats(found.id, dnats)
        sync.forwards(store, new.listen_address, old, dnats, warn)
    again = store.networks.forward(row.id, new.listen_address)
    assert again is not None
    return forward_of(again)


def delete(store: Store, row: NetworkRow, listen: str,
           warn: Callable[[str], None] | None) -> None:  # fmt: skip
    """Delete the forward of ``row`` on ``listen`` and its map elements; 404."""
    found = store.networks.forward(row.id, canonical_address(listen))
    if found is None:
        raise NetworkError("Failed deleting forward: Network forward not found", 404)
    old = store.networks.forward_dnats(found.id)
    with store.write():
        store.networks.delete_forward(found.id)
        sync.forwards(store, found.listen_address, old, None, warn)
