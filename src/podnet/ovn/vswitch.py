"""The node's Open vSwitch: its OVN chassis identity (ovn-controller(8), ``Open_vSwitch``
``external_ids``), and the bridges, ports and bridge mappings podnet adds to it.

The local database is found as ``ovs-vsctl`` finds it: ``$OVS_RUNDIR/db.sock``, else
``/var/run/openvswitch/db.sock``. Its rows are read and changed with ``ovsdb-client transact``
(:mod:`podnet.ovn.ovsdb`): one round trip, whatever the number of ports. Bridges and ports are
added and removed with ``ovs-vsctl`` (ovs-vsctl(8)), here only: each name is an argument of its
own, refused (InvalidConfig, 7) unless it is plain (``[A-Za-z0-9_.-]``, not starting with ``-``:
nothing ``ovs-vsctl`` would read as an option or a ``column:key=value`` separator), as is each
``external_ids`` key; each value must be a word of :data:`podnet.checked.WORD_CHARS`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from podnet import checked, proc
from podnet.errors import InvalidConfig, KernelError
from podnet.ovn import builders
from podnet.ovn.ovsdb import Ovsdb

#: Seconds ``ovs-vsctl`` may take (its ``--timeout``).
VSCTL_TIMEOUT = 10

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
    ids = rows[0].external_ids if rows else {}
    missing = [k for k in ("system-id", "ovn-remote") if not ids.get(k)]
    if missing:
        raise InvalidConfig(
            f"this node's Open vSwitch is not set up for OVN: external_ids "
            f"{', '.join(missing)} unset",
            f"database {db.describe()}",
        )
    mappings = {}
    for item in ids.get("ovn-bridge-mappings", "").split(","):
        physnet, sep, bridge = item.strip().partition(":")
        if sep and physnet and bridge:
            mappings[physnet] = bridge
    return Chassis(
        ids["system-id"],
        ids["ovn-remote"],
        ids.get("ovn-encap-ip", ""),
        ids.get("ovn-encap-type", "geneve"),
        ids.get("ovn-bridge-datapath-type", "system"),
        mappings,
    )


def set_bridge_mapping(physnet: str, bridge: str | None, db: Ovsdb | None = None) -> None:
    """Map OVN physical network ``physnet`` to OVS ``bridge`` on this node (None: unmap),
    keeping the other mappings; the change is atomic against a concurrent one."""
    db = db or local_db()
    rows = db.select("Open_vSwitch", [], ["_uuid", "external_ids"])
    ids = rows[0].external_ids
    mappings = [
        m
        for m in ids.get("ovn-bridge-mappings", "").split(",")
        if m.strip() and m.partition(":")[0] != physnet
    ]
    if bridge is not None:
        mappings.append(f"{physnet}:{bridge}")
    new = {**ids, "ovn-bridge-mappings": ",".join(mappings)}
    if not mappings:
        new.pop("ovn-bridge-mappings")
    db.transact(builders.vswitch_ids(rows[0]["external_ids"], new))


# -- ovs-vsctl ---------------------------------------------------------------------------------


#: Characters of a name or ``external_ids`` key: none separates ``column:key=value``.
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _name(value: str, what: str) -> str:
    """A bridge, port or interface name as one argument: 1-255 of ``[A-Za-z0-9_.-]``, not
    starting with ``-`` (an option to ``ovs-vsctl``). Longer than a kernel link's name: OVS's
    own ports (ovn-controller's ``patch-…``) are no kernel links."""
    if not value or len(value) > 255 or value.startswith("-") or not _KEY_CHARS.issuperset(value):
        raise InvalidConfig(f"Open vSwitch {what} {checked.show(value)}: not a plain name")
    return value


def _word(value: str, what: str) -> str:
    if not value or value.startswith("-") or not checked.WORD_CHARS.issuperset(value):
        raise InvalidConfig(f"Open vSwitch {what}: {checked.show(value)} is not a plain word")
    return value


def _key(value: str) -> str:
    if not value or value.startswith("-") or not _KEY_CHARS.issuperset(value):
        raise InvalidConfig(f"Open vSwitch external_ids key {checked.show(value)} is not plain")
    return value


def _vsctl(*args: str) -> str:
    """Run ``ovs-vsctl args``; its output. ToolError (104) when it fails."""
    return proc.run(["ovs-vsctl", f"--timeout={VSCTL_TIMEOUT}", *args])


def _ask(*args: str) -> str | None:
    """``ovs-vsctl args``' output, stripped; None when it fails (no such port or bridge, no
    OVS here)."""
    try:
        rc, out, _ = proc.spawn(["ovs-vsctl", f"--timeout={VSCTL_TIMEOUT}", *args]).wait()
    except proc.ToolMissing:
        return None
    return out.strip() if rc == 0 else None


def add_bridge(bridge: str, datapath_type: str, port: str) -> None:
    """Make OVS bridge ``bridge`` (kept when it exists) with ``datapath_type`` (``system``,
    ``netdev``) and ``port`` in it (kept when it is). ToolError (104) when OVS refuses."""
    _name(bridge, "bridge")
    _name(port, "port")
    _word(datapath_type, "datapath type")
    kind = f"datapath_type={datapath_type}"
    _vsctl("--may-exist", "add-br", bridge, "--", "set", "bridge", bridge, kind,
           "--", "--may-exist", "add-port", bridge, port)  # fmt: skip


def del_bridge(bridge: str) -> None:
    """Remove OVS bridge ``bridge`` and its ports (none: no error)."""
    _vsctl("--if-exists", "del-br", _name(bridge, "bridge"))


def add_port(bridge: str, port: str, external_ids: Mapping[str, str], *,
             internal: bool = False) -> None:  # fmt: skip
    """Put link ``port`` into OVS ``bridge`` (kept when it is) with ``external_ids`` on its
    interface (``iface-id``: the logical switch port it is, ``podnet-owner``); ``internal``:
    an OVS internal port, made by OVS. ToolError (104) when OVS refuses."""
    _name(bridge, "bridge")
    _name(port, "port")
    sets = ["type=internal"] if internal else []
    for key, value in external_ids.items():
        sets.append(f"external_ids:{_key(key)}={_word(value, key)}")
    _vsctl("--may-exist", "add-port", bridge, port, "--", "set", "Interface", port, *sets)


def del_port(port: str, bridge: str = "") -> None:
    """Remove ``port`` from OVS ``bridge`` (any bridge when ""); none: no error."""
    where = [_name(bridge, "bridge")] if bridge else []
    _vsctl("--if-exists", "del-port", *where, _name(port, "port"))


def bridge_exists(bridge: str) -> bool:
    """Whether OVS has bridge ``bridge`` (False also without OVS)."""
    return _ask("br-exists", _name(bridge, "bridge")) is not None


def bridge_of(port: str) -> str | None:
    """The OVS bridge holding port ``port``; None when none does (or no OVS here)."""
    return _ask("port-to-br", _name(port, "port"))


def list_ports(bridge: str) -> list[str] | None:
    """The ports of OVS bridge ``bridge``; None when it fails (no such bridge, no OVS)."""
    out = _ask("list-ports", _name(bridge, "bridge"))
    return None if out is None else out.split()


def patch_ports() -> list[str]:
    """The names of OVS's patch interfaces (ovn-controller's, between bridges); [] when OVS
    does not answer."""
    out = _ask("--bare", "--columns=name", "find", "Interface", "type=patch")
    return out.split() if out else []


def wait_installed(interface: str, port: str, deadline: float) -> None:
    """Wait until ovn-controller marks OVS interface ``interface`` ``ovn-installed`` (it has
    wired logical switch port ``port`` on this chassis, as ovn-kubernetes waits), at most
    until ``deadline`` (monotonic seconds; one second at least). KernelError (104) naming the
    port when it did not."""
    left = max(1, int(deadline - time.monotonic()))
    argv = ["ovs-vsctl", f"--timeout={left}", "wait-until", "Interface",
            _name(interface, "interface"), "external_ids:ovn-installed=true"]  # fmt: skip
    rc, _, err = proc.spawn(argv, timeout=left + 2).wait()
    if rc != 0:
        raise KernelError(
            f"port {port} was not wired on this chassis within the deadline "
            "(is ovn-controller running?)",
            err.strip(),
        )
