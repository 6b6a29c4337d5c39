"""A podnet ``bridge`` network as an uplink of OVN networks (LXD: a managed bridge with
``ipv4.ovn.ranges`` is an uplink; docs/sources.md#how-lxd-builds-ovn-networks).

The bridge keys (:mod:`podnet.networks.config`): ``ipv{4,6}.ovn.ranges`` (addresses OVN routers
take on the bridge's subnet; the bridge's own address is their gateway) and ``ipv{4,6}.routes``
(external subnets the node routes onto the bridge: forwards' listen addresses).

- **The uplink's view** (:func:`view`): what an OVN network and its forwards need of an uplink,
  in a ``physical`` network's keys — ``ipvN.gateway`` (the bridge's address), ranges, routes,
  ``ovn.ingress_mode`` ``l2proxy`` (the node itself reaches the routes on-link through the
  bridge, and OVN answers ARP/NDP for the forwards). A bridge is this node's, so its view is
  not in the NB: OVN networks on it are made, changed and given forwards from a node that has
  it (elsewhere the uplink is not found); every node lists them.
- **On the node** (:func:`attach`): a veth pair ``pnv<10 hex>a`` (a port of the bridge) and
  ``…b`` (a port of an OVS bridge ``pnb<10 hex>``, the integration bridge's datapath type), both
  carrying podnet's alias, and the mapping ``<network>:pnb<…>`` in ``ovn-bridge-mappings``: the
  node is a gateway chassis of the routers on this uplink. ``ipvN.routes`` become routes
  ``dev <bridge> proto static`` (:func:`sync_routes`). :func:`detach` undoes it, touching only
  links with podnet's alias and a mapping to podnet's bridge name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from podnet import proc
from podnet.networks.errors import NetworkError

if TYPE_CHECKING:
    from podnet.ovn.nb import Record, Registry
    from podnet.store import Store

#: Keys that make a bridge an uplink.
RANGES = ("ipv4.ovn.ranges", "ipv6.ovn.ranges")


def is_uplink(config: Mapping[str, str]) -> bool:
    return any(config.get(k) for k in RANGES)


def view(config: Mapping[str, str]) -> Record | None:
    """Bridge network ``config`` as an uplink (``physical`` keys), or None when it has no
    ``ipvN.ovn.ranges``."""
    from podnet.ovn.nb import Record

    if not is_uplink(config):
        return None
    keys = {"ovn.ingress_mode": "l2proxy"}
    for family in (4, 6):
        address = config.get(f"ipv{family}.address", "")
        if address in ("", "none", "auto"):
            continue
        keys[f"ipv{family}.gateway"] = address
        for key in (f"ipv{family}.ovn.ranges", f"ipv{family}.routes"):
            if config.get(key):
                keys[key] = config[key]
    return Record("bridge", "", keys)


def local_uplinks(store: Store) -> dict[str, Record]:
    """This node's bridge networks that are uplinks: name → :func:`view`."""
    out = {}
    for row in store.networks.all():
        if row.type == "bridge" and (found := view(row.config)) is not None:
            out[row.name] = found
    return out


def ovn_users(store: Store, name: str) -> list[str]:
    """The OVN networks (in the NB the store's server config names) whose uplink is ``name``;
    NetworkError 503 when the NB does not answer (a bridge uplink is not deleted blind)."""
    from podnet.drivers.ovn import cluster_base as cluster
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Unreachable

    nb = cluster.connect(store.config.all(), store.path)
    if nb is None:
        return []
    try:
        registry = nbmod.read(nb)
    except Unreachable as err:
        raise cluster.failure(err) from None
    return sorted(n for n, r in registry.records.items()
                  if r.type == "ovn" and r.config.get("network") == name)  # fmt: skip


def needs_registry(before: Mapping[str, str], config: Mapping[str, str]) -> bool:
    """Whether :func:`check_change` from ``before`` to ``config`` reads the NB (the bridge
    becomes an uplink, or ceases to be one)."""
    return is_uplink(before) != is_uplink(config)


def read_registry(store: Store) -> Registry | None:
    """The NB's networks as the store's server config names the NB (None: no NB set), read
    without the store's lock held (the NB's deadline must never be the lock's). NetworkError
    503 when the NB does not answer."""
    from podnet.drivers.ovn import cluster_base as cluster
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Unreachable

    nb = cluster.connect(store.config.all(), store.path)
    if nb is None:
        return None
    try:
        return nbmod.read(nb)
    except Unreachable as err:
        raise cluster.failure(err) from None


class Unread(Exception):
    """:func:`check_change` needs the NB but was given no snapshot of it (the network changed
    between the read and the lock): read it again, without the lock, and retry."""


def check_change(store: Store, name: str, before: Mapping[str, str],
                 config: Mapping[str, str], registry: Registry | None | bool = False,
                 ) -> None:  # fmt: skip
    """Before bridge ``name`` goes from ``before`` to ``config``: becoming an uplink, its name
    must be no cluster network's (409: the two would share the OVN mapping and the listing);
    ceasing to be one, no OVN network may use it (400). ``registry``: the NB's networks as
    :func:`read_registry` read them before the store's lock was taken (None: no NB), or False
    when not read (:class:`Unread` is raised when they are needed)."""
    if not needs_registry(before, config):
        return
    if registry is False:
        raise Unread(name)
    assert registry is not True
    if registry is None:
        return
    if is_uplink(before):
        users = sorted(n for n, r in registry.records.items()
                       if r.type == "ovn" and r.config.get("network") == name)  # fmt: skip
        if users:
            raise NetworkError(f"The network is currently in use (OVN network {users[0]})")
        return
    if name in registry.records:
        raise NetworkError(
            f'A {registry.records[name].type} network "{name}" exists in the cluster: an '
            "uplink bridge needs a name of its own",
            409,
        )


def ovs_bridge(network: str) -> str:
    """The OVS bridge of bridge uplink ``network`` (its own name space, never a ``physical``
    uplink's :func:`podnet.drivers.ovn.physical.bridge_name`)."""
    return "pnb" + hashlib.sha256(b"uplink:" + network.encode()).hexdigest()[:10]


def veth_names(network: str) -> tuple[str, str]:
    """The veth pair joining bridge ``network`` to its OVS bridge: (bridge end, OVS end)."""
    h = hashlib.sha256(b"uplink:" + network.encode()).hexdigest()[:10]
    return f"pnv{h}a", f"pnv{h}b"


def attach(network: str, config: Mapping[str, str], owner: str) -> list[str]:
    """Join bridge ``network`` to OVN on this node (idempotent); what was done. NetworkError 400
    when this node has no Open vSwitch, 409 when the mapping is someone else's."""
    from podnet.drivers.ovn.physical import _check_mapping
    from podnet.drivers.ovn.pods import quiet_host_end
    from podnet.link import mtu as mtumod
    from podnet.link import veth
    from podnet.link.veth import alias_of
    from podnet.ovn import vswitch

    try:
        chassis = vswitch.chassis()
    except Exception as err:  # noqa: BLE001 - no OVS, or no chassis identity
        raise NetworkError(
            f'Network "{network}" is an OVN uplink (ipv4/ipv6.ovn.ranges), which needs Open '
            f"vSwitch with ovn-controller on this node: {err}"
        ) from None
    ovs = ovs_bridge(network)
    _check_mapping(network, ovs)
    here, there = veth_names(network)
    ports = _ports(ovs)
    if ports is not None and set(ports) - {there}:
        raise NetworkError(f"OVS bridge {ovs} exists with ports podnet did not add", 409)
    for end in (here, there):
        alias = alias_of(end)
        if alias is not None and alias != owner:
            raise NetworkError(f"Link {end} exists and is not this store's", 409)
    fresh = alias_of(here) is None
    if fresh:
        size = int(config.get("bridge.mtu", "0")) or mtumod.DEFAULT_MTU
        lines = [
            f"link add {here} mtu {size} type veth peer name {there} mtu {size}",
            f"link set dev {here} alias {veth.q(owner)}",
            f"link set dev {there} alias {veth.q(owner)}",
            f"link set dev {here} master {veth.q(network)}",
            f"link set dev {here} up",
            f"link set dev {there} up",
        ]
        rc, _, failed = proc.spawn(["ip", "-batch", "-"], veth.batch(lines)).wait()
        if rc != 0:
            proc.spawn(["ip", "link", "del", here]).wait()
            raise NetworkError(f"Failed joining {network} to OVN: {failed.strip()}", 500)
        quiet_host_end(there)
    if fresh:  # a port row left from a removed link stays dead: removed first, on its own
        vswitch.del_port(there, ovs)
    vswitch.add_bridge(ovs, chassis.datapath_type, there)
    if chassis.userspace:  # no TX checksum offload into OVS's userspace datapath
        for end in (here, there):
            proc.run(["ethtool", "-K", end, "tx", "off"])
    proc.run(["ip", "link", "set", ovs, "up"])
    vswitch.set_bridge_mapping(network, ovs)
    return [f"uplink {network}: bridge joined to OVS bridge {ovs} by {here}/{there}"]


def _ports(ovs: str) -> list[str] | None:
    """The ports of OVS bridge ``ovs`` but ovn-controller's patch ports to the integration
    bridge (None: no such bridge)."""
    from podnet.ovn import vswitch

    ports = vswitch.list_ports(ovs)
    if ports is None:
        return None
    patches = vswitch.patch_ports()
    return [p for p in ports if p not in patches]


def detach(network: str, owner: str) -> None:
    """Undo :func:`attach` (nothing when it was not attached): the mapping when it is to
    podnet's bridge, that OVS bridge, and the veth pair when it carries ``owner``'s alias."""
    from podnet.link.veth import alias_of
    from podnet.ovn import vswitch

    ovs = ovs_bridge(network)
    try:
        chassis = vswitch.chassis()
    except Exception:  # noqa: BLE001 - no OVS here: only the veth can be ours
        chassis = None
    if chassis is not None and chassis.bridge_mappings.get(network) == ovs:
        vswitch.set_bridge_mapping(network, None)
        vswitch.del_bridge(ovs)
    here, _ = veth_names(network)
    if alias_of(here) == owner:
        proc.spawn(["ip", "link", "del", here]).wait()


def sync_routes(network: str, before: Mapping[str, str], config: Mapping[str, str]) -> None:
    """The bridge's ``ipvN.routes`` as routes ``dev <bridge> proto static`` (LXD's bridge
    ``ipv4.routes``): those no longer in ``config`` removed (only from this bridge), the new
    ones added (:func:`_add_route`)."""
    from podnet.networks import ovnconfig

    for family in (4, 6):
        key = f"ipv{family}.routes"
        old = set(ovnconfig.routes(before[key], family)) if before.get(key) else set()
        new = set(ovnconfig.routes(config[key], family)) if config.get(key) else set()
        for net in old - new:
            proc.spawn(["ip", f"-{family}", "route", "del", str(net), "dev", network]).wait()
        for net in sorted(new - old, key=str):
            _add_route(network, family, str(net))


def _add_route(network: str, family: int, net: str) -> None:
    """Route ``net`` onto bridge ``network`` (``add``: a route of that destination elsewhere is
    never replaced; one already onto the bridge, as after a restore, is kept). NetworkError 409
    naming the route that holds the destination."""
    rc, _, err = proc.spawn(["ip", f"-{family}", "route", "add", net, "dev", network, "proto",
                             "static"]).wait()  # fmt: skip
    if rc == 0:
        return
    rc2, out, _ = proc.spawn(["ip", f"-{family}", "route", "show", "exact", net]).wait()
    if rc2 == 0 and f"dev {network} " in out + " ":
        return
    held = out.strip().splitlines()[0] if rc2 == 0 and out.strip() else err.strip()
    raise NetworkError(f'Route {net} onto bridge "{network}" not added: {held}', 409)
