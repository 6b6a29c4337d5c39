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
    """One registered network: ``type``, ``description``, ``config`` (LXD keys)."""

    type: str
    description: str = ""
    config: dict[str, str] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(
            {
                "type": self.type,
                "description": self.description,
                "config": dict(sorted(self.config.items())),
            },
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, text: str) -> Record | None:
        try:
            data = json.loads(text)
            return cls(
                str(data["type"]),
                str(data.get("description", "")),
                {str(k): str(v) for k, v in dict(data.get("config", {})).items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # not podnet's shape: ignored, never overwritten blindly


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
    try:
        check_name(name)
        validators[record.type](name, record.config)
    except (NetworkError, ValueError):
        return False
    return True


def _canonical_ip(text: str) -> bool:
    try:
        return checked.text(checked.ip(text)) == text
    except ValueError:
        return False


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
            if sep and _canonical_ip(listen):  # another writer's malformed key: ignored
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


# -- pods' logical switch ports ---------------------------------------------------------------


def port_name(network: str, container_id: str, ifname: str) -> str:
    """The logical switch port of one attachment: unique per (container, CNI_IFNAME, network),
    derived, so a DEL finds it without any state."""
    import hashlib

    digest = hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:20]
    return f"pn-{network}-pod-{digest}"


def add_port(
    nb: Ovsdb, network: str, port: str, mac: str, chassis: str, ids: Mapping[str, str]
) -> None:
    """Create logical switch port ``port`` on ``network``'s internal switch with ``"<mac>
    dynamic"`` (northd assigns the addresses: unique across every node) and
    ``requested-chassis`` this node. TxnFailed when the switch does not exist or the port
    does (a duplicate name is a constraint violation)."""
    n = names(network)
    nb.transact(
        [
            {"op": "wait", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "columns": ["name"], "until": "==", "rows": [{"name": n["ls_int"]}], "timeout": 0},
            {"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "pod",
             "row": {"name": port, "addresses": f"{mac} dynamic",
                     "options": omap({"requested-chassis": chassis}),
                     "external_ids": omap({TAG: network, **ids})}},
            {"op": "mutate", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "mutations": [["ports", "insert", oset([named("pod")])]]},
        ]
    )  # fmt: skip


def port_addresses(nb: Ovsdb, port: str, timeout_ms: int) -> list[str]:
    """The port's ``dynamic_addresses`` (``MAC IPv4 [IPv6]``) split, waiting up to
    ``timeout_ms`` for northd to assign them; [] when it did not."""
    from podnet.ovn.ovsdb import WaitTimedOut, pyset

    try:
        results = nb.transact(
            [
                {"op": "wait", "table": "Logical_Switch_Port", "where": [["name", "==", port]],
                 "columns": ["dynamic_addresses"], "until": "!=",
                 "rows": [{"dynamic_addresses": oset([])}], "timeout": timeout_ms},
                {"op": "select", "table": "Logical_Switch_Port", "where": [["name", "==", port]],
                 "columns": ["dynamic_addresses"]},
            ]
        )  # fmt: skip
    except WaitTimedOut:
        return []
    rows = results[1].get("rows", [])
    values = pyset(rows[0]["dynamic_addresses"]) if rows else []
    return str(values[0]).split() if values else []


def delete_port(nb: Ovsdb, network: str, port: str) -> None:
    """Remove ``port`` from ``network``'s internal switch (the port row goes with it); no error
    when either is gone."""
    n = names(network)
    rows = nb.select("Logical_Switch_Port", mine(network, port), ["_uuid"])
    if not rows:
        return
    uuid = rows[0]["_uuid"]
    nb.transact(
        [
            {"op": "mutate", "table": "Logical_Switch", "where": mine(network, n["ls_int"]),
             "mutations": [["ports", "delete", oset([uuid])]]},
        ]
    )  # fmt: skip


def ports_of_chassis(nb: Ovsdb, chassis: str) -> list[dict[str, Any]]:
    """Every pod port podnet made for ``chassis``: ``name``, ``external_ids`` (a dict)."""
    rows = nb.select(
        "Logical_Switch_Port",
        [["external_ids", "includes", omap({"podnet-chassis": chassis})]],
        ["name", "external_ids"],
    )
    return [{"name": r["name"], "external_ids": pymap(r["external_ids"])} for r in rows]


# -- forwards: load balancers -----------------------------------------------------------------


def _vip(address: str, port: int | None) -> str:
    if port is None:
        return address
    if checked.ip(address).version == 6:  # canonical text podnet validated
        return f"[{address}]:{port}"
    return f"{address}:{port}"


def forward_ops(
    nb: Ovsdb, network: str, listen: str, dnats: Sequence[Any] | None
) -> list[dict[str, Any]]:
    """The operations that make ``network``'s forward on ``listen`` what ``dnats`` (the
    :class:`podnet.values.Dnat` of a validated forward; None: no forward) say: its load
    balancers replaced — one per protocol with port VIPs, one with the portless VIP of a default
    target — on the router and the internal switch (so pods reach their own forwards); without a
    default target a ``discard`` route for the listen address drops what no port matches (seed
    004). Reads the forward's current route to replace it."""
    n = names(network)
    tag = {TAG: network, "podnet-forward": listen}
    ops: list[dict[str, Any]] = [
        {"op": "delete", "table": "Load_Balancer",
         "where": [["external_ids", "includes", omap(tag)]]},
    ]  # fmt: skip
    routes = nb.select(
        "Logical_Router_Static_Route", [["external_ids", "includes", omap(tag)]], ["_uuid"]
    )
    if routes:
        ops.append(
            {"op": "mutate", "table": "Logical_Router", "where": mine(network, n["lr"]),
             "mutations": [["static_routes", "delete", oset([r["_uuid"] for r in routes])]]}
        )  # fmt: skip
    if dnats is None:
        return ops
    vips: dict[str, dict[str, str]] = {}
    for d in dnats:
        kind = d.protocol or "ip"
        vips.setdefault(kind, {})[_vip(d.listen, d.port)] = _vip(d.target, d.target_port)
    lbs = []
    for kind, vip_map in sorted(vips.items()):
        lbs.append(f"lb{kind}")
        row: dict[str, Any] = {"name": f"{n['lr'][:-3]}-lb-{listen}-{kind}", "vips": omap(vip_map),
                               "external_ids": omap(tag)}  # fmt: skip
        if kind != "ip":
            row["protocol"] = kind
        ops.append({"op": "insert", "table": "Load_Balancer", "uuid-name": f"lb{kind}", "row": row})
    for table, name in (("Logical_Router", n["lr"]), ("Logical_Switch", n["ls_int"])):
        ops.append(
            {"op": "mutate", "table": table, "where": mine(network, name),
             "mutations": [["load_balancer", "insert", oset([named(x) for x in lbs])]]}
        )  # fmt: skip
    if "ip" not in vips:
        prefix = f"{listen}/{checked.ip(listen).max_prefixlen}"
        ops += [
            {"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "drop",
             "row": {"ip_prefix": prefix, "nexthop": "discard", "external_ids": omap(tag)}},
            {"op": "mutate", "table": "Logical_Router", "where": mine(network, n["lr"]),
             "mutations": [["static_routes", "insert", oset([named("drop")])]]},
        ]  # fmt: skip
    return ops
