"""The ``podnet`` plugin's NetConf (cni-kindnet's conflist with ``"type": "podnet"``,
docs/sources.md#cni-kindnet).

Keys: ``ranges`` (IPv4 and/or IPv6 CIDRs, several allowed, first with space wins; required
unless ``ipam`` or ``network`` is given), ``network`` (a bridge network made by ``podnetctl
network create``: the pod joins its bridge and gets an address of its subnet),
``capabilities.portMappings``, and optional ``dataDir`` (default the node's store:
:mod:`podnet.nodeconf`, ``/var/lib/podnet`` unless configured), ``mtu``
(bytes, 0 = the default-route link's or the bridge's), ``ipMasq`` (default true), ``logFile``,
``busyTimeout`` (seconds the database lock is waited for, default 5), ``toolTimeout`` (seconds
a spawned tool may run, default 10), ``ipam`` (an object with ``type``: the IPAM plugin in
CNI_PATH podnet delegates to instead of using ``ranges`` — host-local, static, podnet-ipam…).
``ranges``, ``network`` and ``ipam`` exclude each other. Invalid values → code 7 naming the key.
"""

from __future__ import annotations

from podnet.cni import netconf
from podnet.errors import InvalidConfig
from podnet.nodeconf import BELOW
from podnet.nodeconf import DEFAULT_DATA_DIR as DEFAULT_DATA_DIR  # re-exported

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.ipam.allocator import Network
    from podnet.nodeconf import NodeConf

#: Seconds: a runtime's own call timeout is shorter than this anyway (kubelet's CRI: 4 min).
MAX_BUSY_TIMEOUT = 3600.0
#: IPv6 needs 1280-byte links; IPv4 at least 68.
MIN_MTU = {4: 68, 6: 1280}


#: The variable of the runtime's environment that may add data dirs to those the node's
#: configuration allows (:mod:`podnet.nodeconf`): ``:``-separated entries, each a
#: directory allowing itself only, or ``<directory>/*`` allowing every directory below it.
DATA_DIRS_ENV = "PODNET_DATA_DIRS"


def allowed_data_dirs(node: NodeConf | None = None) -> list[tuple[str, bool]]:
    """``(directory, below)`` a NetConf's ``dataDir`` may be: those of the node's configuration
    (``node``, default :func:`podnet.nodeconf.load`; :meth:`~podnet.nodeconf.
    NodeConf.data_dirs`) and each entry of :data:`DATA_DIRS_ENV` whose directory is a checked
    path other than ``/`` (others are ignored: ``//*`` would allow every directory); ``below``:
    the entry ends in :data:`BELOW`. NodeConfError (7)
    naming the file when the node's configuration is malformed or untrusted."""
    import os

    from podnet import checked, nodeconf

    out = (node or nodeconf.load()).data_dirs()
    for item in os.environ.get(DATA_DIRS_ENV, "").split(":"):
        below = item.endswith(BELOW)
        try:
            entry = (checked.path(item.removesuffix(BELOW) if below else item), below)
        except checked.BadValue:
            continue
        if nodeconf.data_dir_problem(entry[0]):  # '/' or '//*': the whole node
            continue
        if entry not in out:
            out.append(entry)
    return out


def data_dir_allowed(data_dir: str, allowed: list[tuple[str, bool]]) -> bool:
    """Whether checked path ``data_dir`` is one of ``allowed`` or, for a ``below`` entry, lies
    under it."""
    return any(data_dir == d or (below and data_dir.startswith(d.rstrip("/") + "/"))
               for d, below in allowed)  # fmt: skip


def store_keys(section: dict[str, Any], where: str = "",
               node: NodeConf | None = None) -> tuple[str, float]:  # fmt: skip
    """``(dataDir, busyTimeout)`` of ``section`` (the NetConf, or its ``ipam`` object with
    ``where="ipam."``): an absolute, normal path of safe characters (default the node's store,
    ``data_dir`` of the node's configuration ``node`` — default :func:`podnet.nodeconf.
    load` —, else :data:`DEFAULT_DATA_DIR`; :func:`podnet.checked.path` — it reaches ``ip`` in
    the host veths' alias and nft in the table's comment) that the node's administrator allows
    (:func:`allowed_data_dirs`: a NetConf's author must not point root's store at a directory
    they can write, such as their container's rootfs) and seconds >= 0 (default 5). Code 7
    naming ``<where>dataDir`` / ``<where>busyTimeout``, or naming the node configuration's file
    when that is malformed or untrusted."""
    from podnet import checked, nodeconf

    node = node or nodeconf.load()
    data_dir = section.get("dataDir", node.data_dir)
    try:
        checked.path(data_dir)
    except checked.BadValue as err:
        raise InvalidConfig(f"{where}dataDir: {err}") from None
    allowed = allowed_data_dirs(node)
    if not data_dir_allowed(data_dir, allowed):
        shown = ":".join(d.rstrip("/") + BELOW if below else d for d, below in allowed)
        raise InvalidConfig(
            f"{where}dataDir: {data_dir} is not a data dir this node allows ({shown}; the "
            f"administrator adds others to {node.path}: podnetctl install --data-dir)"
        )
    timeout = netconf.opt_seconds(section, "busyTimeout", 5, 0, MAX_BUSY_TIMEOUT, where=where)
    return data_dir, timeout


def ipam_type(raw: dict[str, Any]) -> str:
    """``ipam.type`` (spec "Network Configuration": the IPAM plugin's file name in CNI_PATH),
    or "" without an ``ipam`` object. Code 7 when ``ipam`` is not an object or its type is not
    a plain file name."""
    ipam = raw.get("ipam")
    if ipam is None:
        return ""
    if not isinstance(ipam, dict):
        raise InvalidConfig(f"ipam: must be an object, got {ipam!r}")
    from podnet import checked

    kind = ipam.get("type")
    if (not isinstance(kind, str) or not 0 < len(kind) <= 255 or kind in (".", "..")
            or not checked.PATH_CHARS.issuperset(kind) or "/" in kind):  # fmt: skip
        raise InvalidConfig(
            f"ipam.type: must name a plugin file in CNI_PATH (letters, digits, '_', '.', '-'), "
            f"got {checked.show(kind)}"
        )
    return kind


class StoreConf:
    """The keys every verb needs: ``name``, ``dataDir``, ``busyTimeout``, ``logFile``, and
    ``ipam.type`` (``ipam_type``, "" when podnet allocates from its own ``ranges``).

    DEL and GC read only these, so a DEL is never refused over a key it does not use (and
    does not pay for importing :mod:`ipaddress`).
    """

    __slots__ = ("raw", "cni_version", "name", "data_dir", "log_file", "busy_timeout",
                 "ipam_type")  # fmt: skip

    def __init__(self, raw: dict[str, Any], node: NodeConf | None = None) -> None:
        self.raw = raw
        self.cni_version = netconf.require_version(raw)
        self.name = netconf.require_name(raw)
        self.data_dir, self.busy_timeout = store_keys(raw, node=node)
        self.log_file = netconf.log_file(raw)
        self.ipam_type = ipam_type(raw)


class PodnetConf(StoreConf):
    """A validated ``podnet`` NetConf (what ADD, CHECK and STATUS need). ``ranges`` is empty
    when an ``ipam`` plugin chooses the addresses."""

    __slots__ = ("ranges", "mtu", "ip_masq", "port_mappings", "network")

    def __init__(self, raw: dict[str, Any], node: NodeConf | None = None) -> None:
        super().__init__(raw, node)
        #: A bridge network (``podnetctl network create``) the pods join instead of ptp links.
        self.network = netconf.require_str(raw, "network", optional=True)
        if self.network:
            from podnet import checked

            try:
                checked.name(self.network)
            except checked.BadValue as err:
                raise InvalidConfig(f"network: {err} (a bridge network's name)") from None
        if self.network and (self.ipam_type or raw.get("ranges") is not None):
            raise InvalidConfig(
                f"network: a pod of bridge network {self.network!r} gets its address from the "
                "network's subnet; give network, ranges or ipam, not several"
            )
        if self.ipam_type and raw.get("ranges") is not None:
            raise InvalidConfig(
                f"ranges: not used with ipam (the {self.ipam_type} plugin chooses the "
                "addresses); give one of them"
            )
        own = not (self.ipam_type or self.network)
        self.ranges = parse_ranges(raw.get("ranges")) if own else []
        self.mtu = netconf.opt_int(raw, "mtu", 0, 0, 65535)
        self.check_mtu({n.version for n in self.ranges})
        self.ip_masq = netconf.opt_bool(raw, "ipMasq", True)
        self.port_mappings = netconf.parse_port_mappings(raw)

    @property
    def range_strings(self) -> list[str]:
        return [str(n) for n in self.ranges]

    def check_mtu(self, families: set[int]) -> None:
        """Code 7 when ``mtu`` is set below the minimum of one of ``families`` (4, 6)."""
        for family in sorted(families):
            if self.mtu and self.mtu < MIN_MTU[family]:
                raise InvalidConfig(
                    f"mtu: {self.mtu} is below the IPv{family} minimum of {MIN_MTU[family]}"
                )


def parse_ranges(value: object, key: str = "ranges") -> list[Network]:
    """``ranges`` (or ``key``, e.g. ``ipam.ranges``): a non-empty list of CIDRs with no host
    bits, each with >= 1 usable address. Code 7 naming ``key[i]``."""
    from podnet import checked

    if not isinstance(value, list) or not value:
        raise InvalidConfig(f"{key}: must be a non-empty list of CIDRs")
    out: list[Network] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidConfig(f"{key}[{i}]: must be a CIDR string, got {checked.show(item)}")
        try:
            net = checked.network(item, strict=True)
        except checked.BadValue as err:
            raise InvalidConfig(f"{key}[{i}]: {err}") from None
        if net.num_addresses < 4:
            raise InvalidConfig(
                f"{key}[{i}]: {item} is too small (needs network, gateway, one pod, last)"
            )
        problem = checked.pod_range_problem(net)
        if problem:
            raise InvalidConfig(f"{key}[{i}]: {problem}")
        if net in out:
            raise InvalidConfig(f"{key}[{i}]: {item} is listed twice")
        for j, other in enumerate(out):
            if other.version == net.version and net.overlaps(other):
                raise InvalidConfig(f"{key}[{i}]: {item} overlaps {key}[{j}] {other}")
        out.append(net)
    return out
