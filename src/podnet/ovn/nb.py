"""An OVN network's objects in the northbound database, laid out as LXD's
``lxd/network/driver_ovn.go`` lays them out, named ``pn-<name>-…`` and tagged
``external_ids:podnet-network=<name>``: router ``-lr``; internal switch ``-ls-int`` with
``other_config:subnet`` (OVN's own address assignment) and its router port; external switch
``-ls-ext`` with the router's uplink port and a ``localnet`` port (``network_name`` = the
uplink's name); an HA chassis group ``-chassis`` (the uplink's gateway chassis); SNAT of the
internal subnet to the router's uplink address (or ``ipv4.nat.address``); default routes via the
uplink's gateways. The operations come from :mod:`podnet.ovn.builders`.

The registry of the networks themselves is :mod:`podnet.ovn.registry`; its names are
importable from here too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podnet.ovn import builders as b
from podnet.ovn.ops import Condition, Op, eq, tagged
from podnet.ovn.ovsdb import Ovsdb
from podnet.ovn.registry import (
    FPREFIX,
    GENERATION,
    PREFIX,
    RETRIES,
    Change,
    Record,
    Registry,
    _valid,
    change,
    read,
)

__all__ = [
    "FPREFIX", "GENERATION", "PREFIX", "RETRIES", "TAG", "Change", "Plan", "Record", "Registry",
    "_valid", "change", "create_ops", "delete_ops", "gateway_chassis", "mine", "names", "ours",
    "read", "snat_ops", "taken_names", "used_addresses",
]  # fmt: skip

#: ``external_ids`` key of every row podnet makes for a network: the network's name.
TAG = "podnet-network"


def ours(network: str) -> Condition:
    """The OVSDB condition "made by podnet for ``network``": every update or delete of a
    network's rows carries it besides the name, so a row of the same name that someone else
    made is never touched."""
    return tagged({TAG: network})


def mine(network: str, name: str) -> list[Condition]:
    """The OVSDB ``where`` for row ``name`` of ``network``, made by podnet (:func:`ours`)."""
    return [eq("name", name), ours(network)]


def taken_names(nb: Ovsdb, network: str) -> list[str]:
    """Names ``network``'s objects would take that rows in the NB already hold (anyone's):
    creating the network must be refused then."""
    n = names(network)
    wanted = [(b.LR, n["lr"]), (b.LS, n["ls_int"]), (b.LS, n["ls_ext"]),
              (b.HA_GROUP, n["chassis"])]  # fmt: skip
    ops = [b.named_rows(t, name) for t, name in wanted]
    return [name for (_, name), r in zip(wanted, nb.transact(ops), strict=True) if r.get("rows")]


def names(network: str) -> dict[str, str]:
    """The NB names of ``network``'s objects."""
    p = f"pn-{network}"
    return {
        "lr": f"{p}-lr",
        "ls_int": f"{p}-ls-int",
        "ls_ext": f"{p}-ls-ext",
        "lrp_int": f"{p}-lr-lrp-int",
        "lrp_ext": f"{p}-lr-lrp-ext",
        "lsp_int_router": f"{p}-ls-int-lsp-router",
        "lsp_ext_router": f"{p}-ls-ext-lsp-router",
        "lsp_provider": f"{p}-ls-ext-lsp-provider",
        "chassis": f"{p}-chassis",
    }


@dataclass
class Plan:
    """What an OVN network is made of: the router's internal addresses (``internal``, CIDR
    interfaces), its uplink addresses (``uplink``), the uplink's gateways (``gateways``), SNAT
    ``(external address, internal subnet)`` pairs, the uplink's name (``physnet``), gateway
    chassis names by priority, MACs of the two router ports, the MTU (bytes)."""

    internal: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]
    uplink: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]
    gateways: list[ipaddress.IPv4Address | ipaddress.IPv6Address]
    snat: list[tuple[str, str]]
    physnet: str
    chassis: list[str]
    mac_int: str
    mac_ext: str
    mtu: int


def create_ops(network: str, plan: Plan) -> list[Op]:
    """The operations that make ``network``'s objects (one transaction with the registry)."""
    n = names(network)
    tag = {TAG: network}
    v4 = [i for i in plan.internal if i.version == 4]
    v6 = [i for i in plan.internal if i.version == 6]
    other: dict[str, str] = {}
    if v4:
        other["subnet"] = str(v4[0].network)
        other["exclude_ips"] = str(v4[0].ip)
    if v6:
        other["ipv6_prefix"] = str(v6[0].network.network_address)
    other["mcast_snoop"] = "false"
    hach = [f"hach{i}" for i in range(len(plan.chassis))]
    return [
        b.port(n["lsp_int_router"], "lspir", type="router", addresses="router",
               options={"router-port": n["lrp_int"]}, external_ids=tag),
        b.switch(n["ls_int"], "lsint", ports=["lspir"], other_config=other, external_ids=tag),
        b.port(n["lsp_ext_router"], "lsper", type="router", addresses="router",
               options={"router-port": n["lrp_ext"]}, external_ids=tag),
        b.port(n["lsp_provider"], "lspprov", type="localnet", addresses="unknown",
               options={"network_name": plan.physnet}, external_ids=tag),
        b.switch(n["ls_ext"], "lsext", ports=["lsper", "lspprov"], external_ids=tag),
        b.chassis_group(n["chassis"], "hagrp", members=hach, external_ids=tag),
        *(b.ha_chassis(h, c, 32767 - i)
          for i, (h, c) in enumerate(zip(hach, plan.chassis, strict=True))),
        b.router_port(n["lrp_int"], "lrpint", mac=plan.mac_int,
                      networks=[str(i) for i in plan.internal], external_ids=tag),
        b.router_port(n["lrp_ext"], "lrpext", mac=plan.mac_ext,
                      networks=[str(i) for i in plan.uplink], external_ids=tag,
                      ha_chassis_group="hagrp"),
        *_snat_rows(network, plan.snat),
        *(b.static_route(f"route{i}", "0.0.0.0/0" if gw.version == 4 else "::/0", str(gw), tag)
          for i, gw in enumerate(plan.gateways)),
        b.router(n["lr"], "lr", ports=["lrpint", "lrpext"],
                 nat=[f"nat{i}" for i in range(len(plan.snat))],
                 static_routes=[f"route{i}" for i in range(len(plan.gateways))],
                 external_ids=tag),
    ]  # fmt: skip


def _snat_rows(network: str, snat: list[tuple[str, str]]) -> list[Op]:
    """NAT rows ``nat<i>`` for SNAT ``(external address, internal subnet)`` pairs."""
    return [b.snat(f"nat{i}", ext, internal, {TAG: network})
            for i, (ext, internal) in enumerate(snat)]  # fmt: skip


def snat_ops(network: str, snat: list[tuple[str, str]]) -> list[Op]:
    """The operations that make ``network``'s router SNAT exactly ``snat`` (``(external
    address, internal subnet)`` pairs; [] for none). The old NAT rows are collected by OVSDB
    once no router refers to them."""
    where = [eq("name", names(network)["lr"]), ours(network)]
    return [*_snat_rows(network, snat), b.router_nat(where, [f"nat{i}" for i in range(len(snat))])]


def delete_ops(network: str) -> list[Op]:
    """The operations that remove ``network``'s root objects (ports, NAT rules and routes go
    with them: they are referenced strongly, OVSDB collects them). Absent rows are no error."""
    n = names(network)
    return [
        # the router port's reference first: the group is a root row, deleted by name below
        b.router_port_ungroup(mine(network, n["lrp_ext"])),
        b.router_delete(mine(network, n["lr"])),
        b.switch_delete(mine(network, n["ls_int"])),
        b.switch_delete(mine(network, n["ls_ext"])),
        b.chassis_group_delete(mine(network, n["chassis"])),
        b.load_balancers_delete([ours(network)]),
    ]


def gateway_chassis(sb: Ovsdb, physnet: str) -> list[str]:
    """The chassis that reach OVN physical network ``physnet`` (their ``ovn-bridge-mappings``
    name it), sorted by name: the HA chassis group of routers on that uplink."""
    out = []
    for row in sb.select("Chassis", [], ["name", "other_config", "external_ids"]):
        ids = {**row.external_ids, **row.other_config}
        mappings = ids.get("ovn-bridge-mappings", "")
        if any(m.partition(":")[0] == physnet for m in mappings.split(",")):
            out.append(row.name)
    return sorted(out)


def used_addresses(records: Mapping[str, Record], keys: Sequence[str]) -> set[str]:
    """The values of ``keys`` over every record (addresses taken on an uplink)."""
    return {r.config[k].split("/")[0] for r in records.values() for k in keys if r.config.get(k)}
