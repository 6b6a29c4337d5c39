"""Builders of the operations podnet sends, one group per table: each returns
:class:`podnet.ovn.ops.Op` values that the caller composes into one transaction, as
ovn-kubernetes' ``go-controller/pkg/libovsdb/ops`` (``switch.go``, ``router.go``,
``lbs.go``, ``lsp.go``) return operations for its callers to commit together.

Columns and their types are OVN's northbound schema (ovn-nb(5)): ``Logical_Switch``,
``Logical_Switch_Port``, ``Logical_Router`` and its ``Logical_Router_Port``, ``NAT``,
``Logical_Router_Static_Route``, ``Load_Balancer``, ``HA_Chassis_Group``/``HA_Chassis``,
``NB_Global``; the southbound's ``Chassis`` and ``Datapath_Binding`` (ovn-sb(5)); and
Open vSwitch's ``Open_vSwitch`` (ovs-vswitchd.conf.db(5)). ``where``: RFC 7047 conditions
(:func:`podnet.ovn.ops.eq` and friends).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from podnet.ovn.ops import (
    Condition,
    Op,
    delete,
    delete_from,
    eq,
    insert,
    insert_into,
    mutate,
    named,
    omap,
    oset,
    select,
    tagged,
    unchanged,
    update,
    wait,
)

LS = "Logical_Switch"
LSP = "Logical_Switch_Port"
LR = "Logical_Router"
LRP = "Logical_Router_Port"
NAT = "NAT"
ROUTE = "Logical_Router_Static_Route"
LB = "Load_Balancer"
HA_GROUP = "HA_Chassis_Group"
HA_CHASSIS = "HA_Chassis"
NB_GLOBAL = "NB_Global"
OPEN_VSWITCH = "Open_vSwitch"

# -- Logical_Switch ---------------------------------------------------------------------------


def switch(
    name: str, uuid_name: str, *, ports: Sequence[str] = (),
    other_config: Mapping[str, str] | None = None, external_ids: Mapping[str, str],
) -> Op:  # fmt: skip
    """Insert switch ``name`` with the ports the same transaction inserts (``ports``: their
    uuid-names) and ``other_config`` (``subnet``, ``exclude_ips``, ...; None: unset)."""
    row: dict[str, Any] = {"name": name, "ports": oset(named(p) for p in ports)}
    if other_config is not None:
        row["other_config"] = omap(other_config)
    row["external_ids"] = omap(external_ids)
    return insert(LS, row, uuid_name)


def switch_exists(where: Sequence[Condition], name: str) -> Op:
    """Wait: the switch ``name`` matching ``where`` exists."""
    return wait(LS, where, ["name"], [{"name": name}])


def switch_has_port(name: str, port_uuid: str) -> Op:
    """Wait: switch ``name``'s ``ports`` include the port whose ``_uuid`` is ``port_uuid``."""
    return wait(LS, [eq("name", name), ["ports", "includes", ["uuid", port_uuid]]], ["name"],
                [{"name": name}])  # fmt: skip


def switch_add_ports(where: Sequence[Condition], uuid_names: Sequence[str]) -> Op:
    """Add the ports the same transaction inserts (their uuid-names) to the switch."""
    return mutate(LS, where, [insert_into("ports", oset(named(p) for p in uuid_names))])


def switch_remove_ports(where: Sequence[Condition], uuids: Sequence[Any]) -> Op:
    """Remove ports (``<uuid>`` values, as a row's ``_uuid`` reads) from the switch: OVSDB
    then collects the port rows, referenced from nowhere else."""
    return mutate(LS, where, [delete_from("ports", oset(uuids))])


def switch_ports(name: str) -> Op:
    """Select switch ``name``'s ``ports``."""
    return select(LS, [eq("name", name)], ["ports"])


def switch_delete(where: Sequence[Condition]) -> Op:
    return delete(LS, where)


# -- Logical_Switch_Port ----------------------------------------------------------------------


def port(
    name: str, uuid_name: str, *, addresses: str, external_ids: Mapping[str, str],
    type: str = "", options: Mapping[str, str] | None = None,
) -> Op:  # fmt: skip
    """Insert logical switch port ``name``: ``addresses`` (``"router"``, ``"unknown"``, ``"<MAC>
    dynamic"``), ``type`` ("" a VIF, ``router``, ``localnet``), ``options``
    (``router-port``, ``network_name``, ``requested-chassis``)."""
    row: dict[str, Any] = {"name": name}
    if type:
        row["type"] = type
    row["addresses"] = addresses
    if options is not None:
        row["options"] = omap(options)
    row["external_ids"] = omap(external_ids)
    return insert(LSP, row, uuid_name)


def port_update(
    where: Sequence[Condition], *, external_ids: Mapping[str, str] | None = None,
    port_security: str = "",
) -> Op:  # fmt: skip
    """Set the ports' ``external_ids`` (None: kept) and ``port_security`` (``"MAC IPv4
    [IPv6]"``; "": kept)."""
    row: dict[str, Any] = {}
    if external_ids is not None:
        row["external_ids"] = omap(external_ids)
    if port_security:
        row["port_security"] = port_security
    return update(LSP, where, row)


def port_ids(where: Sequence[Condition], drop: Sequence[str],
             put: Mapping[str, str] | None = None) -> Op:  # fmt: skip
    """Remove keys ``drop`` from the ports' ``external_ids``, then add ``put``."""
    mutations = [delete_from("external_ids", oset(drop))]
    if put:
        mutations.append(insert_into("external_ids", omap(put)))
    return mutate(LSP, where, mutations)


def ports_select(where: Sequence[Condition], columns: Sequence[str]) -> Op:
    return select(LSP, where, columns)


def ports_are(where: Sequence[Condition], uuids: Sequence[Any]) -> Op:
    """Wait: the ports matching ``where`` are exactly those of ``uuids`` (``<uuid>`` values)."""
    return wait(LSP, where, ["_uuid"], [{"_uuid": u} for u in uuids])


def ports_none(where: Sequence[Condition]) -> Op:
    """Wait: no port matches ``where``."""
    return wait(LSP, where, ["name"], [])


def port_addresses_are(where: Sequence[Condition], dynamic: Any) -> Op:
    """Wait: the ports' ``dynamic_addresses`` are still ``dynamic``."""
    return unchanged(LSP, where, "dynamic_addresses", dynamic)


def port_addressed(name: str, timeout_ms: int) -> Op:
    """Wait up to ``timeout_ms`` for port ``name``'s ``dynamic_addresses`` to be set."""
    return wait(LSP, [eq("name", name)], ["dynamic_addresses"],
                [{"dynamic_addresses": oset([])}], until="!=", timeout=timeout_ms)  # fmt: skip


# -- Logical_Router and its ports, NAT rules and static routes -------------------------------


def router(
    name: str, uuid_name: str, *, ports: Sequence[str], nat: Sequence[str],
    static_routes: Sequence[str], external_ids: Mapping[str, str],
) -> Op:  # fmt: skip
    """Insert router ``name`` with the ports, NAT rules and routes the same transaction
    inserts (their uuid-names)."""
    return insert(LR, {"name": name, "ports": oset(named(p) for p in ports),
                       "nat": oset(named(n) for n in nat),
                       "static_routes": oset(named(r) for r in static_routes),
                       "external_ids": omap(external_ids)}, uuid_name)  # fmt: skip


def router_nat(where: Sequence[Condition], nat: Sequence[str]) -> Op:
    """Set the router's NAT rules to those the same transaction inserts (uuid-names); the rows
    no router refers to any more are collected by OVSDB."""
    return update(LR, where, {"nat": oset(named(n) for n in nat)})


def router_add_routes(where: Sequence[Condition], uuid_names: Sequence[str]) -> Op:
    return mutate(LR, where, [insert_into("static_routes", oset(named(r) for r in uuid_names))])


def router_remove_routes(where: Sequence[Condition], uuids: Sequence[Any]) -> Op:
    return mutate(LR, where, [delete_from("static_routes", oset(uuids))])


def router_delete(where: Sequence[Condition]) -> Op:
    return delete(LR, where)


def router_port(
    name: str, uuid_name: str, *, mac: str, networks: Sequence[str],
    external_ids: Mapping[str, str], ha_chassis_group: str = "",
) -> Op:  # fmt: skip
    """Insert router port ``name`` (``networks``: CIDR interfaces); ``ha_chassis_group``: the
    uuid-name of a group the same transaction inserts ("" none)."""
    row: dict[str, Any] = {"name": name, "external_ids": omap(external_ids), "mac": mac,
                           "networks": oset(networks)}  # fmt: skip
    if ha_chassis_group:
        row["ha_chassis_group"] = named(ha_chassis_group)
    return insert(LRP, row, uuid_name)


def router_port_ungroup(where: Sequence[Condition]) -> Op:
    """Clear the router port's ``ha_chassis_group`` (before the group, a root row, goes)."""
    return update(LRP, where, {"ha_chassis_group": oset([])})


def snat(uuid_name: str, external_ip: str, logical_ip: str, external_ids: Mapping[str, str]) -> Op:
    """Insert a ``snat`` NAT rule: ``logical_ip`` (a subnet) leaves as ``external_ip``."""
    return insert(NAT, {"type": "snat", "external_ip": external_ip, "logical_ip": logical_ip,
                        "external_ids": omap(external_ids)}, uuid_name)  # fmt: skip


def static_route(uuid_name: str, prefix: str, nexthop: str,
                 external_ids: Mapping[str, str]) -> Op:  # fmt: skip
    """Insert a static route to ``prefix`` via ``nexthop`` (an address, or ``discard``)."""
    return insert(ROUTE, {"ip_prefix": prefix, "nexthop": nexthop,
                          "external_ids": omap(external_ids)}, uuid_name)  # fmt: skip


def routes_select(where: Sequence[Condition]) -> Op:
    return select(ROUTE, where, ["_uuid"])


# -- Load_Balancer ----------------------------------------------------------------------------


def load_balancer(
    name: str, uuid_name: str, *, vips: Mapping[str, str], external_ids: Mapping[str, str],
    options: Any, protocol: str = "",
) -> Op:  # fmt: skip
    """Insert load balancer ``name``: ``vips`` (``"VIP[:port]"`` → ``"backend[:port]"``),
    ``options`` (a ``<map>`` as built or read), ``protocol`` (``tcp``, ``udp``, ``sctp``; "":
    unset, a portless VIP)."""
    row: dict[str, Any] = {"name": name, "vips": omap(vips), "external_ids": omap(external_ids),
                           "options": options}  # fmt: skip
    if protocol:
        row["protocol"] = protocol
    return insert(LB, row, uuid_name)


def attach_load_balancers(table: str, where: Sequence[Condition], uuid_names: Sequence[str]) -> Op:
    """Add the load balancers the same transaction inserts to a router or switch (``table``
    :data:`LR` or :data:`LS`)."""
    return mutate(table, where, [insert_into("load_balancer", oset(named(x) for x in uuid_names))])


def load_balancers_options(where: Sequence[Condition], options: Any) -> Op:
    return update(LB, where, {"options": options})


def load_balancers_select(where: Sequence[Condition], columns: Sequence[str]) -> Op:
    return select(LB, where, columns)


def load_balancers_delete(where: Sequence[Condition]) -> Op:
    return delete(LB, where)


# -- HA_Chassis_Group, HA_Chassis -------------------------------------------------------------


def chassis_group(name: str, uuid_name: str, *, members: Sequence[str],
                  external_ids: Mapping[str, str]) -> Op:  # fmt: skip
    """Insert HA chassis group ``name`` of the ``HA_Chassis`` rows the same transaction inserts
    (``members``: uuid-names)."""
    return insert(HA_GROUP, {"name": name, "external_ids": omap(external_ids),
                             "ha_chassis": oset(named(m) for m in members)}, uuid_name)  # fmt: skip


def ha_chassis(uuid_name: str, chassis_name: str, priority: int) -> Op:
    return insert(HA_CHASSIS, {"chassis_name": chassis_name, "priority": priority}, uuid_name)


def chassis_group_delete(where: Sequence[Condition]) -> Op:
    return delete(HA_GROUP, where)


# -- any table --------------------------------------------------------------------------------


def named_rows(table: str, name: str) -> Op:
    """Select the ``name`` of ``table``'s rows called ``name`` (anyone's)."""
    return select(table, [eq("name", name)], ["name"])


# -- NB_Global: the registry ------------------------------------------------------------------


def global_ids_are(value: Any) -> Op:
    """Wait: ``NB_Global`` ``external_ids`` is still exactly ``value`` (as read)."""
    return unchanged(NB_GLOBAL, [], "external_ids", value)


def global_ids_hold(ids: Mapping[str, str]) -> Op:
    """Wait: ``NB_Global`` ``external_ids`` still holds every pair of ``ids``."""
    return wait(NB_GLOBAL, [tagged(ids)], [], [{}])


def global_ids(drop: Sequence[str], put: Mapping[str, str]) -> Op:
    """Remove keys ``drop`` from ``NB_Global`` ``external_ids``, then add ``put``."""
    return mutate(NB_GLOBAL, [], [delete_from("external_ids", oset(drop)),
                                  insert_into("external_ids", omap(put))])  # fmt: skip


def global_select() -> Op:
    return select(NB_GLOBAL, [], ["external_ids"])


# -- the southbound ---------------------------------------------------------------------------


def sb_chassis(columns: Sequence[str] = ("name",)) -> Op:
    return select("Chassis", [], columns)


def sb_datapaths() -> Op:
    return select("Datapath_Binding", [], ["external_ids"])


# -- Open_vSwitch -----------------------------------------------------------------------------


def vswitch_ids(before: Any, after: Mapping[str, str]) -> list[Op]:
    """Set the ``Open_vSwitch`` row's ``external_ids`` to ``after``, on the condition that it
    still is ``before`` (as read)."""
    return [unchanged(OPEN_VSWITCH, [], "external_ids", before),
            update(OPEN_VSWITCH, [], {"external_ids": omap(after)})]  # fmt: skip
