"""podnet's cluster-wide networks in OVN's northbound database (issue 16, items 3 and 4).

The NB database is the cluster's shared truth: every node reads the same records, whichever
node wrote them.

- **The registry.** Each podnet network that spans nodes (``physical`` uplinks, ``ovn``
  networks) is one key of ``NB_Global`` ``external_ids``: ``podnet:network:<name>`` → JSON
  ``{"type", "description", "config"}``. ``podnet:generation`` counts the registry's changes.
  A change is one transaction that first ``wait``\\s for the generation it read, then bumps it
  and mutates only the keys it changes: a concurrent change (from any node) makes it fail and
  :func:`change` reads again and re-applies — per network, an update is never lost, and a
  stale ETag is still a 412. The transaction's size does not grow with the registry (the
  ``wait`` once held the whole map: past about 800 forwards it no longer fit one argument of
  ``ovsdb-client``).
- **An OVN network's objects** (LXD's layout, FIELD-NOTES §8a), named ``pn-<name>-…`` and
  tagged ``external_ids:podnet-network=<name>``: router ``-lr``; internal switch ``-ls-int``
  with ``other_config:subnet`` (OVN's own address assignment) and its router port; external
  switch ``-ls-ext`` with the router's uplink port and a ``localnet`` port (``network_name`` =
  the uplink's name); an HA chassis group ``-chassis`` (the uplink's gateway chassis); SNAT of
  the internal subnet to the router's uplink address (or ``ipv4.nat.address``); default routes
  via the uplink's gateways.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podnet import checked
from podnet.ovn.ovsdb import Conflict, Ovsdb, named, omap, oset, pymap

PREFIX = "podnet:network:"
#: Forwards of OVN networks: ``podnet:forward:<network>|<listen address>`` → JSON forward.
FPREFIX = "podnet:forward:"
TAG = "podnet-network"
#: The registry's change counter (decimal text) in ``NB_Global`` ``external_ids``.
GENERATION = "podnet:generation"
#: Attempts of :func:`change` when other writers keep changing the registry meanwhile.
RETRIES = 8


@dataclass
class Record:
    """One registered network: ``type``, ``description``, ``config`` (LXD keys, the cluster's),
    ``members`` (chassis name → that node's own keys: a ``physical`` network's ``parent``, as
    LXD keeps member-specific config) and ``status`` (LXD's ``Pending`` until the network is
    created without a target, then ``Created``). ``members`` and a ``Created`` status are left
    out of the JSON when empty, so a record without them reads as before."""

    type: str
    description: str = ""
    config: dict[str, str] = field(default_factory=dict)
    members: dict[str, dict[str, str]] = field(default_factory=dict)
    status: str = "Created"

    def dumps(self) -> str:
        data: dict[str, Any] = {
            "type": self.type,
            "description": self.description,
            "config": dict(sorted(self.config.items())),
        }
        if self.members:
            data["members"] = {m: dict(sorted(c.items())) for m, c in sorted(self.members.items())}
        if self.status != "Created":
            data["status"] = self.status
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Record | None:
        try:
            data = json.loads(text)
            members = {
                str(m): {str(k): str(v) for k, v in dict(c).items()}
                for m, c in dict(data.get("members", {})).items()
            }
            status = str(data.get("status", "Created"))
            if status not in ("Pending", "Created"):
                return None
            return cls(
                str(data["type"]),
                str(data.get("description", "")),
                {str(k): str(v) for k, v in dict(data.get("config", {})).items()},
                members,
                status,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # not podnet's shape: ignored, never overwritten blindly

    @property
    def pending(self) -> bool:
        """Whether the network is only defined on members so far (LXD's ``Pending``)."""
        return self.status == "Pending"


@dataclass
class Registry:
    """The registry as read: ``records`` (name → :class:`Record`), ``forwards`` ((network,
    listen address) → the forward's JSON) and the raw map, for the ``wait`` of the transaction
    that changes it. A change function sets :attr:`forward_changes` (None: remove)."""

    records: dict[str, Record]
    raw: Any
    forwards: dict[tuple[str, str], str] = field(default_factory=dict)
    forward_changes: dict[tuple[str, str], str | None] = field(default_factory=dict)
    #: :data:`GENERATION` as read (0: absent or not a count).
    generation: int = 0
    #: This node's bridge networks that are uplinks, as :class:`Record` of ``physical`` keys
    #: (:func:`podnet.drivers.bridge_uplink.view`): not in the NB, set by the caller.
    local_uplinks: dict[str, Record] = field(default_factory=dict)

    def uplink(self, name: str) -> Record | None:
        """Uplink ``name``: a registered ``physical`` network, else one of this node's bridges
        (:attr:`local_uplinks`); None when there is neither."""
        record = self.records.get(name)
        if record is not None:
            return record if record.type == "physical" and not record.pending else None
        return self.local_uplinks.get(name)


def _valid(name: str, record: Record) -> bool:
    """Whether a registry record is one podnet could have written: a ``physical`` or ``ovn``
    network with a valid name and config. Another NB writer's malformed or foreign record is
    ignored (never turned into a node's bridge, never a traceback)."""
    from podnet.networks import ovnconfig
    from podnet.networks.config import check_name
    from podnet.networks.errors import NetworkError

    validators = {"physical": ovnconfig.validate_physical, "ovn": ovnconfig.validate_ovn}
    if record.type not in validators:
        return False
    if record.type != "physical" and (record.members or record.pending):
        return False
    try:
        check_name(name)
        validators[record.type](name, record.config)
        for member, keys in record.members.items():
            ovnconfig.validate_member(name, member, keys)
    except (NetworkError, ValueError):
        return False
    return True


def read(nb: Ovsdb) -> Registry:
    """Every registered network (Unreachable, 11, naming the connection)."""
    rows = nb.select("NB_Global", [], ["external_ids"])
    raw = rows[0]["external_ids"] if rows else ["map", []]
    records = {}
    forwards = {}
    for key, value in pymap(raw).items():
        if key.startswith(PREFIX) and isinstance(value, str):
            record = Record.loads(value)
            name = key[len(PREFIX) :]
            if record is not None and _valid(name, record):
                records[name] = record
        elif key.startswith(FPREFIX) and isinstance(value, str):
            network, sep, listen = key[len(FPREFIX) :].partition("|")
            if sep and checked.canonical(listen):  # another writer's malformed key: ignored
                forwards[(network, listen)] = value
    generation = pymap(raw).get(GENERATION)
    valid = isinstance(generation, str) and generation.isascii() and generation.isdigit()
    count = int(generation) if valid and len(generation) < 19 else 0  # type: ignore[arg-type]
    return Registry(records, raw, forwards, generation=count)


Change = Callable[[Registry], tuple[dict[str, "Record | None"], list[dict[str, Any]]]]


def _wait_unchanged(registry: Registry) -> dict[str, Any]:
    """A ``wait`` that fails when the registry changed since ``registry`` was read: the one
    ``NB_Global`` row still holds the generation read (or, before any podnet change counted
    them or when the counter is not a count, still holds the whole map read)."""
    if registry.generation == 0:  # never counted, or not a count: the whole map
        return {
            "op": "wait",
            "table": "NB_Global",
            "where": [],
            "columns": ["external_ids"],
            "until": "==",
            "rows": [{"external_ids": registry.raw}],
            "timeout": 0,
        }
    held = omap({GENERATION: str(registry.generation)})
    return {
        "op": "wait",
        "table": "NB_Global",
        "where": [["external_ids", "includes", held]],
        "columns": [],
        "until": "==",
        "rows": [{}],
        "timeout": 0,
    }


def change(nb: Ovsdb, fn: Change) -> Registry:
    """Apply ``fn`` to the registry as it is now: ``fn(registry)`` returns the records to set
    (None: remove) and further operations of the same transaction (the network's objects);
    it raises to refuse. Retried from a fresh read when another writer got in between; the
    registry as written is returned."""
    for _ in range(RETRIES):
        registry = read(nb)
        records, ops = fn(registry)
        drop = [PREFIX + name for name in records if name in registry.records]
        put = {PREFIX + name: r.dumps() for name, r in records.items() if r is not None}
        for (net, listen), text in registry.forward_changes.items():
            key = f"{FPREFIX}{net}|{listen}"
            if (net, listen) in registry.forwards:
                drop.append(key)
            if text is not None:
                put[key] = text
        txn = [_wait_unchanged(registry)]
        put[GENERATION] = str(registry.generation + 1)
        txn.append(
            {
                "op": "mutate",
                "table": "NB_Global",
                "where": [],
                "mutations": [
                    ["external_ids", "delete", oset([*drop, GENERATION])],
                    ["external_ids", "insert", omap(put)],
                ],
            }
        )
        try:
            nb.transact([*txn, *ops])
        except Conflict:
            continue
        for name, r in records.items():
            if r is None:
                registry.records.pop(name, None)
            else:
                registry.records[name] = r
        for where, text in registry.forward_changes.items():
            if text is None:
                registry.forwards.pop(where, None)
            else:
                registry.forwards[where] = text
        return registry
    raise Conflict("OVN Northbound: the registry kept changing", f"{RETRIES} attempts")


# -- an OVN network's objects ----------------------------------------------------------------


def ours(network: str) -> list[Any]:
    """The OVSDB condition "made by podnet for ``network``": every update or delete of a
    network's rows carries it besides the name, so a row of the same name that someone else
    made is never touched."""
    return ["external_ids", "includes", omap({TAG: network})]


def mine(network: str, name: str) -> list[Any]:
    """The OVSDB ``where`` for row ``name`` of ``network``, made by podnet (:func:`ours`)."""
    return [["name", "==", name], ours(network)]


def taken_names(nb: Ovsdb, network: str) -> list[str]:
    """Names ``network``'s objects would take that rows in the NB already hold (anyone's):
    creating the network must be refused then."""
    n = names(network)
    wanted = [("Logical_Router", n["lr"]), ("Logical_Switch", n["ls_int"]),
              ("Logical_Switch", n["ls_ext"]), ("HA_Chassis_Group", n["chassis"])]  # fmt: skip
    ops = [{"op": "select", "table": t, "where": [["name", "==", name]], "columns": ["name"]}
           for t, name in wanted]  # fmt: skip
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


def create_ops(network: str, plan: Plan) -> list[dict[str, Any]]:
    """The operations that make ``network``'s objects (one transaction with the registry)."""
    n = names(network)
    tag = omap({TAG: network})
    v4 = [i for i in plan.internal if i.version == 4]
    v6 = [i for i in plan.internal if i.version == 6]
    other: dict[str, str] = {}
    if v4:
        other["subnet"] = str(v4[0].network)
        other["exclude_ips"] = str(v4[0].ip)
    if v6:
        other["ipv6_prefix"] = str(v6[0].network.network_address)
    other["mcast_snoop"] = "false"
    ops: list[dict[str, Any]] = [
        {
            "op": "insert",
            "table": "Logical_Switch_Port",
            "uuid-name": "lspir",
            "row": {
                "name": n["lsp_int_router"],
                "type": "router",
                "addresses": "router",
                "options": omap({"router-port": n["lrp_int"]}),
                "external_ids": tag,
            },
        },
        {
            "op": "insert",
            "table": "Logical_Switch",
            "uuid-name": "lsint",
            "row": {
                "name": n["ls_int"],
                "ports": oset([named("lspir")]),
                "other_config": omap(other),
                "external_ids": tag,
            },
        },
        {
            "op": "insert",
            "table": "Logical_Switch_Port",
            "uuid-name": "lsper",
            "row": {
                "name": n["lsp_ext_router"],
                "type": "router",
                "addresses": "router",
                "options": omap({"router-port": n["lrp_ext"]}),
                "external_ids": tag,
            },
        },
        {
            "op": "insert",
            "table": "Logical_Switch_Port",
            "uuid-name": "lspprov",
            "row": {
                "name": n["lsp_provider"],
                "type": "localnet",
                "addresses": "unknown",
                "options": omap({"network_name": plan.physnet}),
                "external_ids": tag,
            },
        },
        {
            "op": "insert",
            "table": "Logical_Switch",
            "uuid-name": "lsext",
            "row": {
                "name": n["ls_ext"],
                "ports": oset([named("lsper"), named("lspprov")]),
                "external_ids": tag,
            },
        },
        {
            "op": "insert",
            "table": "HA_Chassis_Group",
            "uuid-name": "hagrp",
            "row": {
                "name": n["chassis"],
                "external_ids": tag,
                "ha_chassis": oset([named(f"hach{i}") for i in range(len(plan.chassis))]),
            },
        },
        *(
            {
                "op": "insert",
                "table": "HA_Chassis",
                "uuid-name": f"hach{i}",
                "row": {"chassis_name": c, "priority": 32767 - i},
            }
            for i, c in enumerate(plan.chassis)
        ),
        {
            "op": "insert",
            "table": "Logical_Router_Port",
            "uuid-name": "lrpint",
            "row": {
                "name": n["lrp_int"],
                "external_ids": tag,
                "mac": plan.mac_int,
                "networks": oset([str(i) for i in plan.internal]),
            },
        },
        {
            "op": "insert",
            "table": "Logical_Router_Port",
            "uuid-name": "lrpext",
            "row": {
                "name": n["lrp_ext"],
                "external_ids": tag,
                "mac": plan.mac_ext,
                "networks": oset([str(i) for i in plan.uplink]),
                "ha_chassis_group": named("hagrp"),
            },
        },
        *_snat_rows(network, plan.snat),
        *(
            {
                "op": "insert",
                "table": "Logical_Router_Static_Route",
                "uuid-name": f"route{i}",
                "row": {
                    "ip_prefix": "0.0.0.0/0" if gw.version == 4 else "::/0",
                    "nexthop": str(gw),
                    "external_ids": tag,
                },
            }
            for i, gw in enumerate(plan.gateways)
        ),
        {
            "op": "insert",
            "table": "Logical_Router",
            "uuid-name": "lr",
            "row": {
                "name": n["lr"],
                "ports": oset([named("lrpint"), named("lrpext")]),
                "nat": oset([named(f"nat{i}") for i in range(len(plan.snat))]),
                "static_routes": oset([named(f"route{i}") for i in range(len(plan.gateways))]),
                "external_ids": tag,
            },
        },
    ]
    return ops


def _snat_rows(network: str, snat: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """NAT rows ``nat<i>`` for SNAT ``(external address, internal subnet)`` pairs."""
    return [
        {
            "op": "insert",
            "table": "NAT",
            "uuid-name": f"nat{i}",
            "row": {
                "type": "snat",
                "external_ip": ext,
                "logical_ip": internal,
                "external_ids": omap({TAG: network}),
            },
        }
        for i, (ext, internal) in enumerate(snat)
    ]


def snat_ops(network: str, snat: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The operations that make ``network``'s router SNAT exactly ``snat`` (``(external
    address, internal subnet)`` pairs; [] for none). The old NAT rows are collected by OVSDB
    once no router refers to them."""
    return [
        *_snat_rows(network, snat),
        {
            "op": "update",
            "table": "Logical_Router",
            "where": [["name", "==", names(network)["lr"]], ours(network)],
            "row": {"nat": oset([named(f"nat{i}") for i in range(len(snat))])},
        },
    ]


def delete_ops(network: str) -> list[dict[str, Any]]:
    """The operations that remove ``network``'s root objects (ports, NAT rules and routes go
    with them: they are referenced strongly, OVSDB collects them). Absent rows are no error."""
    n = names(network)
    return [
        # the router port's reference first: the group is a root row, deleted by name below
        {
            "op": "update",
            "table": "Logical_Router_Port",
            "where": mine(network, n["lrp_ext"]),
            "row": {"ha_chassis_group": oset([])},
        },
        {"op": "delete", "table": "Logical_Router", "where": mine(network, n["lr"])},
        {"op": "delete", "table": "Logical_Switch", "where": mine(network, n["ls_int"])},
        {"op": "delete", "table": "Logical_Switch", "where": mine(network, n["ls_ext"])},
        {"op": "delete", "table": "HA_Chassis_Group", "where": mine(network, n["chassis"])},
        {
            "op": "delete",
            "table": "Load_Balancer",
            "where": [["external_ids", "includes", omap({TAG: network})]],
        },
    ]


def gateway_chassis(sb: Ovsdb, physnet: str) -> list[str]:
    """The chassis that reach OVN physical network ``physnet`` (their ``ovn-bridge-mappings``
    name it), sorted by name: the HA chassis group of routers on that uplink."""
    out = []
    for row in sb.select("Chassis", [], ["name", "other_config", "external_ids"]):
        ids = {**pymap(row.get("external_ids")), **pymap(row.get("other_config"))}
        mappings = str(ids.get("ovn-bridge-mappings", ""))
        if any(m.partition(":")[0] == physnet for m in mappings.split(",")):
            out.append(str(row["name"]))
    return sorted(out)


def used_addresses(records: Mapping[str, Record], keys: Sequence[str]) -> set[str]:
    """The values of ``keys`` over every record (addresses taken on an uplink)."""
    return {r.config[k].split("/")[0] for r in records.values() for k in keys if r.config.get(k)}
