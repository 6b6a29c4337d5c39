"""The node's Open vSwitch: its OVN chassis identity, and the ports and bridge mappings podnet
adds to it (issue 16, items 1 and 5; FIELD-NOTES §8).

The local database is found as ``ovs-vsctl`` finds it: ``$OVS_RUNDIR/db.sock``, else
``/var/run/openvswitch/db.sock``. It is read and changed with ``ovsdb-client transact``
(:mod:`podnet.ovn.ovsdb`): one round trip, whatever the number of ports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from podnet.errors import InvalidConfig
from podnet.ovn.ovsdb import Ovsdb, omap, pymap

DEFAULT_RUNDIR = "/var/run/openvswitch"


def local_db(timeout: float = 10.0) -> Ovsdb:
    """The node's ``Open_vSwitch`` database."""
    rundir = os.environ.get("OVS_RUNDIR") or DEFAULT_RUNDIR
    return Ovsdb([f"unix:{rundir}/db.sock"], "Open_vSwitch", timeout=timeout)


@dataclass(frozen=True, slots=True)
class Chassis:
    """This node as OVN knows it, from ``Open_vSwitch`` ``external_ids``: ``system_id``
    (the chassis name), ``ovn_remote`` (the SB connection), ``encap_ip``, ``encap_type``,
    ``datapath_type`` (``netdev``: Open vSwitch's userspace datapath, ``system``: the kernel
    module) and ``bridge_mappings`` (``physnet:bridge``)."""

    system_id: str
    ovn_remote: str
    encap_ip: str
    encap_type: str
    datapath_type: str
    bridge_mappings: dict[str, str]

    @property
    def userspace(self) -> bool:
        """Whether packets go through the userspace datapath (its veths need TX offload off)."""
        return self.datapath_type == "netdev"


def chassis(db: Ovsdb | None = None) -> Chassis:
    """This node's :class:`Chassis`; InvalidConfig (7) when OVS is not set up for OVN (no
    ``system-id`` or ``ovn-remote``), Unreachable (11) when its database does not answer."""
    db = db or local_db()
    rows = db.select("Open_vSwitch", [], ["external_ids"])
    ids = pymap(rows[0]["external_ids"]) if rows else {}
    missing = [k for k in ("system-id", "ovn-remote") if not ids.get(k)]
    if missing:
        raise InvalidConfig(
            f"this node's Open vSwitch is not set up for OVN: external_ids "
            f"{', '.join(missing)} unset",
            f"database {db.describe()}",
        )
    mappings = {}
    for item in str(ids.get("ovn-bridge-mappings", "")).split(","):
        physnet, sep, bridge = item.strip().partition(":")
        if sep and physnet and bridge:
            mappings[physnet] = bridge
    return Chassis(
        str(ids["system-id"]),
        str(ids["ovn-remote"]),
        str(ids.get("ovn-encap-ip", "")),
        str(ids.get("ovn-encap-type", "geneve")),
        str(ids.get("ovn-bridge-datapath-type", "system")),
        mappings,
    )


def set_bridge_mapping(physnet: str, bridge: str | None, db: Ovsdb | None = None) -> None:
    """Map OVN physical network ``physnet`` to OVS ``bridge`` on this node (None: unmap),
    keeping the other mappings; the change is atomic against a concurrent one."""
    db = db or local_db()
    rows = db.select("Open_vSwitch", [], ["_uuid", "external_ids"])
    ids = pymap(rows[0]["external_ids"])
    mappings = [
        m
        for m in str(ids.get("ovn-bridge-mappings", "")).split(",")
        if m.strip() and m.partition(":")[0] != physnet
    ]
    if bridge is not None:
        mappings.append(f"{physnet}:{bridge}")
    new = {**ids, "ovn-bridge-mappings": ",".join(mappings)}
    if not mappings:
        new.pop("ovn-bridge-mappings")
    db.transact(
        [
            {
                "op": "wait",
                "table": "Open_vSwitch",
                "where": [],
                "columns": ["external_ids"],
                "until": "==",
                "rows": [{"external_ids": rows[0]["external_ids"]}],
                "timeout": 0,
            },
            {
                "op": "update",
                "table": "Open_vSwitch",
                "where": [],
                "row": {"external_ids": omap(new)},
            },
        ]
    )
