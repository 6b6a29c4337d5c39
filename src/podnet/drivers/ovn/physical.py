"""The ``physical`` network type: an uplink for OVN networks (LXD's ``physical`` driver,
lxd/network/driver_physical.go).

Cluster-wide (its record is in OVN's NB, :mod:`podnet.ovn.nb`): every node sees it. Its
``parent`` is each member's own, as in LXD's clustered creation: ``network create NAME
--type=physical parent=eth1 --target <member>`` records one member's parent (the network is
``Pending``), ``network create NAME --type=physical KEY=VALUE…`` without a target makes it
(``Created``). A member is a node's OVN chassis name
(:func:`podnet.drivers.ovn.cluster_base.local_member`).

A node attaches only the parent recorded for its own chassis, never one recorded for another
node: an OVS bridge ``pnu<8 hex>`` (the integration bridge's datapath type) holding the parent,
and the bridge mapping ``<network>:<bridge>`` — the node is then a gateway chassis of the routers
on this uplink. A node with no parent recorded attaches nothing (and drops the bridge it had).
``parent`` must hold no IP address (LXD's rule: its addresses would be bypassed) and be free.

A parent is first attached only by a run on its own node that an operator sees: ``network
create``/``network set … --target <this node>`` (its checks answer there and then), or ``network
restore --attach-new``. ``network restore`` as the boot unit runs it keeps a parent that is
already a port of the uplink's bridge (Open vSwitch's database keeps ports across reboots) and
never adds one: at boot an interface may be up without its addresses yet (DHCP has not answered),
looking free, and taking it would take an interface the node needs. It names a parent left
unattached and how to attach it (exit 1, after everything else). ``--attach-new`` attaches it
once it is up (``IFF_UP`` and an operational state ``UP`` or ``UNKNOWN``) and free.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from podnet import proc
from podnet.drivers.ovn.cluster_base import ClusterDriver, Context, local_member
from podnet.drivers.ovn.uplink_parent import link_state, parent_addresses, routes_through
from podnet.errors import CNIError
from podnet.link import rtnl
from podnet.networks import ovnconfig
from podnet.networks.errors import NetworkError
from podnet.ovn import forward_lbs, vswitch
from podnet.ovn import nb as nbmod
from podnet.ovn.ops import Op


def bridge_name(network: str) -> str:
    """The OVS bridge that carries uplink ``network`` on a node (15 characters at most)."""
    return "pnu" + hashlib.sha256(network.encode()).hexdigest()[:8]


#: Devices Open vSwitch makes for its datapaths (never a port).
OVS_DEVICES = ("ovs-system", "ovs-netdev")


def _held(parent: str, ours: str) -> str:
    """What already holds or uses ``parent`` in this netns ("": nothing, or only ``ours``, the
    uplink's own OVS bridge) — an uplink never takes a link over from someone else, nor one
    podnet made for a pod or a network:

    - a master (a Linux bridge, a bond) or another OVS bridge (kernel or userspace datapath);
    - devices stacked on it (a VLAN, a macvlan: ``upper_*``), or ports of its own (a bridge
      with ports, a bond with slaves);
    - routes through it (a CNI plugin's host veth carries a /32 route and no address);
    - the loopback device, an OVS bridge's own device, a link podnet made (its alias)."""
    if parent in OVS_DEVICES:
        return "Open vSwitch's own datapath device"
    try:  # the kernel's answer for this netns (/sys/class/net is the one sysfs was mounted in)
        every = rtnl.links()
    except OSError as err:
        return f"not readable over netlink ({err.strerror})"
    link = next((x for x in every if x.name == parent), None)
    if link is None:
        return "not a link of this network namespace"
    names = {x.index: x.name for x in every}
    master = names.get(link.master, "") if link.master else ""
    in_ovs = vswitch.bridge_of(parent)
    if in_ovs is not None and in_ovs != ours:
        return f"a port of OVS bridge {in_ovs}"
    if master == "ovs-system" and in_ovs != ours:  # a kernel-datapath port OVS cannot name
        return "attached to ovs-system"
    if master and master != "ovs-system":
        return f"attached to {master}"
    if link.alias.startswith("podnet:"):
        return "a link podnet made"
    if link.flags & rtnl.IFF_LOOPBACK:
        return "the loopback device"
    # stacked on it (a VLAN, a macvlan: sysfs's upper_*); a veth's IFLA_LINK is its peer
    uppers = sorted(
        x.name
        for x in every
        if x.lower == link.index and not x.lower_elsewhere and x.kind != "veth"
    )
    if uppers:
        return f"the lower device of {', '.join(uppers)}"
    ports = sorted(x.name for x in every if x.master == link.index)  # a bridge's, a bond's
    if ports:
        return f"a bridge or bond with ports ({', '.join(ports)})"
    if vswitch.bridge_exists(parent):
        return "an OVS bridge"
    routes = routes_through(parent)
    if routes:
        return f"used by routes ({', '.join(routes[:4])}{', …' if len(routes) > 4 else ''})"
    return ""


def _check_mapping(name: str, ours: str | None = None) -> None:
    """NetworkError (409) when this node's OVS maps OVN physical network ``name`` to a bridge
    other than ``ours`` (default :func:`bridge_name`), one podnet did not make for this uplink
    (``ovn-bridge-mappings``): the uplink would take over that mapping."""
    mapped = vswitch.chassis().bridge_mappings.get(name)
    if mapped not in (None, ours or bridge_name(name)):
        raise NetworkError(
            f'OVN physical network "{name}" is already mapped to bridge {mapped} on this node '
            "(ovn-bridge-mappings), not by podnet",
            409,
        )


def _ports(bridge: str) -> list[str] | None:
    """The ports of OVS bridge ``bridge`` (None: no such bridge)."""
    if not vswitch.bridge_exists(bridge):
        return None
    return vswitch.list_ports(bridge) or []


def _me() -> str | None:
    """This node's member name (its OVN chassis name); None when its OVS is not set up for OVN
    or does not answer (then no member is this node)."""
    try:
        return local_member()
    except CNIError:
        return None


class PhysicalDriver(ClusterDriver):
    """Uplinks of OVN networks."""

    type = "physical"
    has_forwards = False
    creatable = True
    member_keys = ("parent",)

    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        return ovnconfig.validate_physical(name, config)

    @staticmethod
    def check_parent(name: str, parent: str) -> bool:
        """Whether ``parent`` exists on this node; NetworkError (400) when it is not free
        (:func:`_held`) or holds IP addresses (LXD's rule)."""
        found = parent_addresses(parent)
        if found is None:
            return False
        held = _held(parent, bridge_name(name))
        if held:
            raise NetworkError(
                f'Parent interface "{parent}" is {held}; an uplink takes only a free interface'
            )
        if found:
            raise NetworkError(
                f'Parent interface "{parent}" has IP addresses configured '
                f"({', '.join(found)}); an uplink's parent must have none"
            )
        _check_mapping(name)
        return True

    def check_member_keys(self, name: str, member: str, config: Mapping[str, str]) -> None:
        """On this node's own member: its ``parent`` exists here and is free (400 otherwise).
        Another member's parent is checked by that node when it attaches it."""
        if member != _me():
            return
        if not self.check_parent(name, config["parent"]):
            raise NetworkError(
                f'Parent interface "{config["parent"]}" not found on member "{member}"'
            )

    def attach_node(self, ctx: Context, name: str, record: nbmod.Record, *,
                    boot: bool = False) -> list[str]:  # fmt: skip
        """This node's side of uplink ``name`` as ``record`` has it: the parent recorded for
        this node's chassis in the uplink's OVS bridge and mapped for OVN; nothing (and the
        bridge it had removed) when none is. What was done, one line each. NetworkError (400)
        naming the parent when it does not exist here or is not free. ``boot`` (``network
        restore``): a parent not in the bridge yet is never added — NetworkError (400) naming
        it and how to attach it, nothing changed — unless ``ctx.attach_new`` (``restore
        --attach-new``), which adds it only once it is up."""
        chassis = vswitch.chassis()
        me = chassis.system_id
        bridge = bridge_name(name)
        ours = chassis.bridge_mappings.get(name) == bridge
        parent = record.members.get(me, {}).get("parent")
        if parent is None:
            if "parent" in record.config:  # one parent for every node (an earlier podnet)
                return [f'uplink {name}: "parent" is recorded for every node, not per member: '
                        f"nothing changed here; record this node's with: network set {name} "
                        f"parent=<interface> --target {me}"]  # fmt: skip
            if not ours:
                return []
            self.detach_node(ctx, name)
            return [f"uplink {name}: no parent recorded for member {me}: OVS bridge {bridge} "
                    "removed"]  # fmt: skip
        ports = _ports(bridge) or []
        if parent not in ports:
            if parent_addresses(parent) is None:
                raise NetworkError(
                    f'Parent interface "{parent}" recorded for member "{me}" does not exist on '
                    "this node"
                )
            if boot and not ctx.attach_new:
                raise NetworkError(
                    f'Parent interface "{parent}" recorded for member "{me}" is not attached: '
                    f"restore keeps only a parent already in OVS bridge {bridge}; attach it on "
                    'this node with "podnetctl network restore --attach-new" (or "podnetctl '
                    f'network set {name} parent={parent} --target {me}")'
                )
            up, state = link_state(parent)
            if boot and not up:
                raise NetworkError(
                    f'Parent interface "{parent}" is not up yet ({state}): not attached; run '
                    '"podnetctl network restore --attach-new" again once it is up'
                )
            self.check_parent(name, parent)
        for stale in ports:  # a parent this node had before: podnet's port of its own bridge
            if stale != parent:
                vswitch.del_port(stale, bridge)
        vswitch.add_bridge(bridge, chassis.datapath_type, parent)
        if chassis.userspace:
            proc.run(["ethtool", "-K", parent, "tx", "off"])
        proc.run(["ip", "link", "set", parent, "up"])
        proc.run(["ip", "link", "set", bridge, "up"])
        vswitch.set_bridge_mapping(name, bridge)
        return [f"uplink {name}: {parent} in OVS bridge {bridge}, mapped for OVN"]

    def member_status(self, ctx: Context, name: str, record: nbmod.Record, member: str) -> str:
        """``Pending`` while the network is; for a member without a parent ``Unavailable``;
        for this node ``Created`` only when its parent is in the uplink's bridge and mapped
        (``Unavailable`` otherwise: missing, down, not attached yet); another member's
        ``Created`` (only that node sees its own interfaces)."""
        if record.pending:
            return "Pending"
        parent = record.members.get(member, {}).get("parent")
        if parent is None:
            return "Unavailable"
        try:
            chassis = vswitch.chassis()
        except Exception:  # noqa: BLE001 - no OVS here: this node is not the member
            return "Created"
        if member != chassis.system_id:
            return "Created"
        attached = chassis.bridge_mappings.get(name) == bridge_name(name) and parent in (
            _ports(bridge_name(name)) or [])  # fmt: skip
        return "Created" if attached else "Unavailable"

    def detach_node(self, ctx: Context, name: str) -> None:
        """Undo :meth:`attach_node` on this node (nothing when it was not attached)."""
        try:
            chassis = vswitch.chassis()
        except Exception:  # noqa: BLE001 - no OVS here: nothing of ours to undo
            return
        if chassis.bridge_mappings.get(name) != bridge_name(name):
            return  # not attached here, or mapped by someone else: not ours to undo
        vswitch.set_bridge_mapping(name, None)
        vswitch.del_bridge(bridge_name(name))

    def cluster_create(
        self, ctx: Context, name: str, config: dict[str, str]
    ) -> tuple[dict[str, str], list[Op], Callable[[], list[str]]]:  # noqa: E501
        """Instantiate pending uplink ``name``: this node's recorded parent is checked before
        anything is recorded, and attached after."""
        pending = ctx.registry.records.get(name) or nbmod.Record(self.type)
        me = _me()
        mine = pending.members.get(me) if me is not None else None
        if me is not None and mine is not None:
            self.check_member_keys(name, me, mine)
        record = nbmod.Record(self.type, "", config, dict(pending.members))
        return config, [], lambda: self.attach_node(ctx, name, record) if mine else []

    def member_changed(self, ctx: Context, name: str, record: nbmod.Record,
                       member: str) -> list[str]:  # fmt: skip
        """This node's new parent (or none) applied at once when ``member`` is this node;
        another node's new parent is attached only by that node's ``network restore
        --attach-new`` (or a ``set`` run there); its ``network restore`` removes a parent unset."""
        if member != _me():
            return []
        return self.attach_node(ctx, name, record)

    def cluster_update(
        self, ctx: Context, name: str, before: nbmod.Record, config: dict[str, str]
    ) -> tuple[dict[str, str], list[Op]]:
        mode = config.get("ovn.ingress_mode", "l2proxy")
        if mode == before.config.get("ovn.ingress_mode", "l2proxy"):
            return config, []
        ops = []
        for net, record in ctx.registry.records.items():  # their forwards' neighbour answers
            if record.type == "ovn" and record.config.get("network") == name:
                nat = [k for k in ("ipv4.nat.address", "ipv6.nat.address") if record.config.get(k)]
                if nat and mode != "routed":
                    raise NetworkError(
                        f'Cannot set ovn.ingress_mode to "{mode}": network "{net}" uses {nat[0]}, '
                        'which needs "routed"'
                    )
                ops += forward_lbs.ingress_ops(net, mode == "l2proxy")
        return config, ops

    def cluster_delete(
        self, ctx: Context, name: str
    ) -> tuple[list[Op], Callable[[], None]]:
        users = [
            n
            for n, r in ctx.registry.records.items()
            if r.type == "ovn" and r.config.get("network") == name
        ]
        if users:
            raise NetworkError("The network is currently in use")
        return [], lambda: self.detach_node(ctx, name)

    def restore_node(self, ctx: Context, name: str, config: Mapping[str, str]) -> list[str]:
        record = ctx.registry.records.get(name)
        if record is None or record.pending or _me() is None:  # no chassis here: no member
            return []
        return self.attach_node(ctx, name, record, boot=True)

    def forget_node(self, ctx: Context) -> list[str]:
        """Detach this node from uplinks no longer registered (deleted from another node): only
        mappings to a bridge of podnet's name for that uplink (:func:`bridge_name`)."""
        try:
            chassis = vswitch.chassis()
        except Exception:  # noqa: BLE001 - no OVS here: nothing of ours to undo
            return []
        done = []
        for physnet, bridge in chassis.bridge_mappings.items():
            record = ctx.registry.records.get(physnet)
            if physnet in ctx.registry.local_uplinks:  # a bridge uplink of this node's
                continue
            if bridge == bridge_name(physnet) and (record is None or record.type != self.type):
                self.detach_node(ctx, physnet)
                done.append(f"uplink {physnet}: deleted, OVS bridge {bridge} removed")
        return done
