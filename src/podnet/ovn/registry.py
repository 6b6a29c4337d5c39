"""The registry of podnet's cluster-wide networks in OVN's northbound database.

The NB database is the cluster's shared truth: every node reads the same records, whichever
node wrote them. Each podnet network that spans nodes (``physical`` uplinks, ``ovn`` networks) is
one key of ``NB_Global`` ``external_ids``: ``podnet:network:<name>`` → JSON ``{"type",
"description", "config"}``. ``podnet:generation`` counts the registry's changes. A change is one
transaction that first ``wait``\\s for the generation it read, then bumps it and mutates only
the keys it changes: a concurrent change (from any node) makes it fail and
:func:`change` reads again and re-applies — per network, an update is never lost, and a stale
ETag is still a 412. The transaction's size does not grow with the registry: a ``wait`` on the
whole map would not fit one argument of ``ovsdb-client`` past some 800 forwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from podnet import checked
from podnet.ovn import builders
from podnet.ovn.ops import Op
from podnet.ovn.ovsdb import Conflict, Ovsdb
from podnet.ovn.row import Row, rows

PREFIX = "podnet:network:"
#: Forwards of OVN networks: ``podnet:forward:<network>|<listen address>`` → JSON forward.
FPREFIX = "podnet:forward:"
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
    #: (:func:`podnet.drivers.ovn.bridge_uplink.view`): not in the NB, set by the caller.
    local_uplinks: dict[str, Record] = field(default_factory=dict)

    def held(self, name: str) -> str | None:
        """Network ``name``'s record as the NB holds it (its JSON text, for a ``wait`` that it
        is unchanged); None when there is none."""
        return Row({"external_ids": self.raw}).external_ids.get(PREFIX + name)

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
    # the plugin's ADD imports this module: the validators only when a record is read
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
    found = rows(nb.transact([builders.global_select()])[0])
    raw = found[0]["external_ids"] if found else ["map", []]
    ids = Row({"external_ids": raw}).external_ids
    records = {}
    forwards = {}
    for key, value in ids.items():
        if key.startswith(PREFIX):
            record = Record.loads(value)
            name = key[len(PREFIX) :]
            if record is not None and _valid(name, record):
                records[name] = record
        elif key.startswith(FPREFIX):
            network, sep, listen = key[len(FPREFIX) :].partition("|")
            if sep and checked.canonical(listen):  # another writer's malformed key: ignored
                forwards[(network, listen)] = value
    generation = ids.get(GENERATION, "")
    valid = generation.isascii() and generation.isdigit()
    count = int(generation) if valid and len(generation) < 19 else 0
    return Registry(records, raw, forwards, generation=count)


Change = Callable[[Registry], tuple[dict[str, "Record | None"], Sequence[Op]]]


def _wait_unchanged(registry: Registry) -> Op:
    """A ``wait`` that fails when the registry changed since ``registry`` was read: the one
    ``NB_Global`` row still holds the generation read (or, before any podnet change counted
    them or when the counter is not a count, still holds the whole map read)."""
    if registry.generation == 0:  # never counted, or not a count: the whole map
        return builders.global_ids_are(registry.raw)
    return builders.global_ids_hold({GENERATION: str(registry.generation)})


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
        put[GENERATION] = str(registry.generation + 1)
        txn = [_wait_unchanged(registry), builders.global_ids([*drop, GENERATION], put)]
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
