"""The ``ovn`` network type: one logical network for pods on every node (LXD's ``ovn`` driver,
lxd/network/driver_ovn.go). Its record and objects live in OVN's NB
(:mod:`podnet.ovn.nb`).

Create fills LXD's defaults: ``ipv4.address``/``ipv6.address`` ``auto`` (a free
``10.x.y.1/24`` / ``fd42:…::1/64`` no other OVN network or the uplink uses) turning NAT on;
the router's uplink address (``volatile.network.ipv4.address``) is the first free one of the
uplink's ``ipv4.ovn.ranges``; ``bridge.mtu`` is the underlay's MTU less Geneve's overhead.
``ipv4.nat.address`` must lie in the uplink's ``ipv4.routes`` with ``ovn.ingress_mode=routed``
(LXD's ``Validate`` of driver_ovn.go).
"""

from __future__ import annotations

import ipaddress
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from podnet import checked, proc
from podnet.drivers.ovn import hostports as ovn_hostports
from podnet.drivers.ovn.cluster_base import ClusterDriver, Context
from podnet.drivers.ovn.hooks import OvnPodSide
from podnet.drivers.ovn.hostports import holds, mgmt_ifname, peers
from podnet.errors import CNIError
from podnet.link.local import routes_over
from podnet.networks import ovnconfig
from podnet.networks.config import is_true
from podnet.networks.errors import NetworkError, in_use
from podnet.networks.server import NB_CONNECTION
from podnet.ovn import nb as nbmod
from podnet.ovn import vswitch
from podnet.ovn.ops import Op
from podnet.ovn.pod_ports import SPARE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

#: Keys a change may not touch (what the NB objects are made of); change them by re-creating.
FIXED = ("network", "ipv4.address", "ipv6.address", "bridge.mtu")
#: Keys a change may touch: they rewrite the router's SNAT rules.
NAT_KEYS = ("ipv4.nat", "ipv6.nat", "ipv4.nat.address", "ipv6.nat.address")


def _mac() -> str:
    return "00:16:3e:" + ":".join(f"{random.randrange(256):02x}" for _ in range(3))


def _underlay_mtu(encap_ip: str) -> tuple[int, int]:
    """The MTU (bytes) and family of the interface holding this node's encapsulation address;
    (1500, 4) when it cannot be found."""
    try:
        family = checked.ip(encap_ip).version
    except ValueError:
        return 1500, 4
    rc, out, _ = proc.spawn(["ip", "-j", "addr", "show", "to", encap_ip]).wait()
    try:
        links = json.loads(out) if rc == 0 and out.strip() else []
        return int(links[0]["mtu"]), family
    except (ValueError, LookupError, TypeError):
        return 1500, family


def _node_routes() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every destination this node routes (default routes aside), both families."""
    every = [checked.network("0.0.0.0/0"), checked.network("::/0")]
    return [checked.network(dst, strict=False) for dst, _ in routes_over(every)]


def _check_subnets(name: str, config: Mapping[str, str], internal: list[Any], owner: str = "",
                   talks_to: Any = ()) -> None:  # fmt: skip
    """The rules of a bridge's subnet, on the creating node: NetworkError 400 for a subnet that
    is not a private range (:func:`podnet.checked.pod_range_problem`), 409 for one holding an
    address the node talks to (``talks_to``: ``(address, why)``,
    :func:`podnet.drivers.ovn.hostports.peers`; the NB, reached through the default route
    say) or overlapping a route of this node (:func:`podnet.link.local.routes_over`; those on
    the network's own management link aside), naming it — a management port's address there
    would take that traffic. Every node checks again before it puts anything of the network
    on itself (:func:`podnet.drivers.ovn.hostports.check_node`)."""
    for iface in internal:
        problem = checked.pod_range_problem(iface.network)
        if problem:
            raise NetworkError(
                f'Invalid value for network "{name}" option "ipv{iface.version}.address": '
                f"{problem}"
            )
    nets = [iface.network for iface in internal]
    clash = routes_over(nets, skip_dev=mgmt_ifname(name), owner=owner) if nets else []
    if clash:
        dst, dev = clash[0]
        mine = next(n for n in nets if n.overlaps(checked.network(dst, strict=False)))
        raise NetworkError(
            f'Invalid value for network "{name}" option "ipv{mine.version}.address": its subnet '
            f"{mine} overlaps the route to {dst} (dev {dev}) of the node",
            409,
        )
    for net in nets:
        held = holds([net], talks_to)
        if held:
            raise NetworkError(
                f'Invalid value for network "{name}" option "ipv{net.version}.address": {held}',
                409,
            )


def _talks_to(ctx: Context, chassis: Any) -> list[tuple[Any, str]]:
    """:func:`podnet.drivers.ovn.hostports.peers` of the creating node, and every chassis's
    tunnel endpoint as the SB lists them (``Encap``; none when the SB does not answer)."""
    found = peers(ctx.nb.remotes, chassis)
    try:
        encaps = ctx.sb().select("Encap", [], ["ip", "chassis_name"])
    except CNIError:
        encaps = []
    for row in encaps:
        try:
            address = checked.ip(str(row.get("ip", "")))
        except checked.BadValue:
            continue
        who = checked.show(str(row.get("chassis_name", "")), 64)
        found.append((address, f"the tunnel endpoint of chassis {who} (OVN southbound Encap)"))
    return found


class OvnDriver(OvnPodSide, ClusterDriver):
    """OVN networks; their pods' hooks are :class:`podnet.drivers.ovn.hooks.OvnPodSide`'s."""

    type = "ovn"
    creatable = True

    def restore(self, store: Store, row: NetworkRow, owner: str) -> list[str]:
        """The OVS ports of this node's pods on the network (the node's view of it): each host
        end that exists goes back into the integration bridge with its ``iface-id``; none when
        the network's subnets fail :func:`podnet.drivers.ovn.hostports.check_node` here (7,
        naming the route)."""
        from podnet.drivers.ovn import pods as ovn_pods

        talks = ovn_hostports.node_peers(store.config.all().get(NB_CONNECTION, ""))
        ovn_hostports.check_node(row.name, dict(row.config), owner=owner, talks_to=talks)
        return ovn_pods.restore(store, row, owner)

    def restore_node(self, ctx: Context, name: str, config: Mapping[str, str]) -> list[str]:
        """``network restore``: nothing to bring back for the network itself (its management
        port comes with a hostPort's ADD), but a subnet that is not private or that overlaps a
        route of this node is named (7, :func:`podnet.drivers.ovn.hostports.check_node`):
        no pod or management port of it is put on this node."""
        talks = ovn_hostports.node_peers(",".join(ctx.nb.remotes))
        ovn_hostports.check_node(name, dict(config), owner=ctx.owner, talks_to=talks)
        return []

    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        return ovnconfig.validate_ovn(name, config)

    def _uplink(self, ctx: Context, config: Mapping[str, str]) -> nbmod.Record:
        uplink = ctx.registry.uplink(config["network"])
        if uplink is None:
            raise NetworkError(
                f'Invalid value for network option "network": uplink network '
                f'"{config["network"]}" not found (a physical network, or a bridge network with '
                "ipv4.ovn.ranges or ipv6.ovn.ranges on this node)"
            )
        return uplink

    def _taken(self, ctx: Context) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for record in [*ctx.registry.records.values(), *ctx.registry.local_uplinks.values()]:
            for key in ("ipv4.address", "ipv6.address", "ipv4.gateway", "ipv6.gateway"):
                value = record.config.get(key, "")
                if value not in ("", "auto", "none"):
                    out.append(checked.interface(value).network)
        return out

    def _auto(self, family: int, taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
        for _ in range(1000):
            if family == 4:
                net: ipaddress.IPv4Network | ipaddress.IPv6Network = checked.network(
                    f"10.{random.randrange(256)}.{random.randrange(256)}.0/24"
                )
            else:
                net = checked.network(
                    f"fd42:{random.randrange(65536):x}:{random.randrange(65536):x}:"
                    f"{random.randrange(65536):x}::/64"
                )
            if not any(net.overlaps(t) for t in taken if t.version == family):
                return f"{net[1]}/{net.prefixlen}"
        raise NetworkError(f"Failed to find a free IPv{family} subnet")

    def _uplink_address(self, ctx: Context, name: str, uplink: nbmod.Record, family: int) -> str:
        key = f"ipv{family}.ovn.ranges"
        if not uplink.config.get(key):
            raise NetworkError(f'Missing required "{key}" config key on uplink network')
        used = nbmod.used_addresses(
            {n: r for n, r in ctx.registry.records.items() if n != name},
            (f"volatile.network.ipv{family}.address",),
        )
        used.add(uplink.config[f"ipv{family}.gateway"].split("/")[0])
        for first, last in ovnconfig.ranges(uplink.config[key], family):
            for value in range(int(first), int(last) + 1):
                address = str(first + (value - int(first)))
                if address not in used:
                    return address
        raise NetworkError(f"No free address left in the uplink's {key}")

    def cluster_create(
        self, ctx: Context, name: str, config: dict[str, str]
    ) -> tuple[dict[str, str], list[Op], Callable[[], list[str]]]:  # noqa: E501
        uplink = self._uplink(ctx, config)
        clash = nbmod.taken_names(ctx.nb, name)
        if clash:  # someone else's rows: podnet would act on them later
            raise NetworkError(
                f"OVN already has {', '.join(clash)}, not made by podnet for this network", 409
            )
        taken = self._taken(ctx)
        chassis = vswitch.chassis()
        talks_to = _talks_to(ctx, chassis)
        auto = [f for f in (4, 6) if config.get(f"ipv{f}.address", "auto") == "auto"]
        # auto subnets also avoid this node's routes and the addresses it talks to
        near = _node_routes() + [checked.network(str(a)) for a, _ in talks_to] if auto else []
        for family in auto:
            config[f"ipv{family}.address"] = self._auto(family, taken + near)
            config.setdefault(f"ipv{family}.nat", "true")
        internal, uplink_ifaces, gateways = [], [], []
        for family in (4, 6):
            address = config[f"ipv{family}.address"]
            gateway = uplink.config.get(f"ipv{family}.gateway")
            if address == "none":
                continue
            iface = checked.interface(address)
            for other in taken:
                if other.version == family and iface.network.overlaps(other):
                    raise NetworkError(
                        f"Subnet {iface.network} overlaps another network's {other}", 409
                    )
            internal.append(iface)
            if not gateway:
                continue
            own = self._uplink_address(ctx, name, uplink, family)
            config[f"volatile.network.ipv{family}.address"] = own
            gw = checked.interface(gateway)
            uplink_ifaces.append(checked.interface(f"{own}/{gw.network.prefixlen}"))
            gateways.append(gw.ip)
        if internal and not uplink_ifaces:  # the router's uplink port would have no address
            keys = " or ".join(f'"ipv{i.version}.gateway"' for i in internal)
            raise NetworkError(
                f'Uplink network "{config["network"]}" has no {keys} for the network\'s '
                f"subnets: the router needs an uplink address of one of their families"
            )
        _check_subnets(name, config, internal, ctx.owner, talks_to)
        snat = self._snat(uplink, config)
        if "bridge.mtu" not in config:
            mtu, family = _underlay_mtu(chassis.encap_ip)
            config["bridge.mtu"] = str(ovnconfig.default_mtu(mtu, family))
        plan = nbmod.Plan(
            internal,
            uplink_ifaces,
            gateways,
            snat,
            config["network"],
            nbmod.gateway_chassis(ctx.sb(), config["network"]),
            _mac(),
            _mac(),
            int(config["bridge.mtu"]),
        )
        return config, nbmod.create_ops(name, plan), lambda: []

    @classmethod
    def _snat(cls, uplink: nbmod.Record, config: dict[str, str]) -> list[tuple[str, str]]:
        """The router's SNAT ``(external address, internal subnet)`` pairs: per family with
        an internal subnet, ``ipv{n}.nat`` true and an uplink address, to ``ipv{n}.nat.address``
        (checked against the uplink, LXD's messages) or else the router's uplink address."""
        snat = []
        for family in (4, 6):
            address = config.get(f"ipv{family}.address", "none")
            nat_address = config.get(f"ipv{family}.nat.address")
            own = config.get(f"volatile.network.ipv{family}.address")
            if address == "none":
                continue
            if nat_address:
                cls._check_nat_address(uplink, family, nat_address)
            if own and is_true(config.get(f"ipv{family}.nat", "false")):
                snat.append((nat_address or own, str(checked.interface(address).network)))
        return snat

    @staticmethod
    def _check_nat_address(uplink: nbmod.Record, family: int, value: str) -> None:
        key = f"ipv{family}.nat.address"
        if uplink.config.get("ovn.ingress_mode", "l2proxy") != "routed":
            raise NetworkError(
                f'Cannot specify "{key}" when uplink ovn.ingress_mode is not "routed"'
            )
        address = checked.ip(value)
        routes = uplink.config.get(f"ipv{family}.routes", "")
        if not routes or not any(address in net for net in ovnconfig.routes(routes, family)):
            raise NetworkError(f'Uplink network does not contain "{value}" in its routes')

    def cluster_update(
        self, ctx: Context, name: str, before: nbmod.Record, config: dict[str, str]
    ) -> tuple[dict[str, str], list[Op]]:
        changed = [k for k in FIXED if config.get(k) != before.config.get(k)]
        if changed:
            raise NetworkError(
                f'Changing "{changed[0]}" of an OVN network is not supported: '
                "delete and create the network again"
            )
        if all(config.get(k) == before.config.get(k) for k in NAT_KEYS):
            return config, []
        return config, nbmod.snat_ops(name, self._snat(self._uplink(ctx, config), config))

    def cluster_delete(
        self, ctx: Context, name: str
    ) -> tuple[list[Op], Callable[[], None]]:
        n = nbmod.names(name)
        ports = ctx.nb.select(
            "Logical_Switch_Port",
            [nbmod.ours(name)],
            ["name", "external_ids"],
        )
        pods = [
            p.name
            for p in ports
            if p.name not in (n["lsp_int_router"], n["lsp_ext_router"], n["lsp_provider"])
            and ovn_hostports.MGMT_ID not in p.external_ids  # the nodes' hostPorts
            and SPARE not in p.external_ids  # the nodes' spare ports
        ]
        if pods:  # named by their containers (a port podnet did not make: by its name)
            raise in_use(ctx.pods(name) or sorted(checked.show(p, 80) for p in pods))
        for where in ctx.registry.forwards:  # its forwards go with it (their LBs: delete_ops)
            if where[0] == name:
                ctx.registry.forward_changes[where] = None
        # this node's management port now; other nodes' at their `network restore`
        return nbmod.delete_ops(name), lambda: ovn_hostports.remove_mgmt(name, ctx.owner)

    def forget_node(self, ctx: Context) -> list[str]:
        keep = {n for n, r in ctx.registry.records.items() if r.type == "ovn"}
        return ovn_hostports.forget_mgmt(keep, ctx.owner)
