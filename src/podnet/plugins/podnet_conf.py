"""The ``podnet`` plugin's NetConf (seed 001's conflist with ``"type": "podnet"``).

Keys: ``ranges`` (required: IPv4 and/or IPv6 CIDRs, several allowed, first with space wins),
``capabilities.portMappings``, and optional ``dataDir`` (default ``/var/lib/podnet``), ``mtu``
(bytes, 0 = the default-route link's), ``ipMasq`` (default true), ``logFile``, ``busyTimeout``
(seconds the database lock is waited for, default 5). Invalid values → code 7 naming the key.
"""

from __future__ import annotations

from podnet.cni import netconf
from podnet.cni.errors import InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.ipam.allocator import Network

DEFAULT_DATA_DIR = "/var/lib/podnet"
#: IPv6 needs 1280-byte links; IPv4 at least 68.
MIN_MTU = {4: 68, 6: 1280}


class StoreConf:
    """The keys every verb needs: ``name``, ``dataDir``, ``busyTimeout``, ``logFile``.

    DEL and GC read only these, so a DEL is never refused over a key it does not use (and
    does not pay for importing :mod:`ipaddress`).
    """

    __slots__ = ("raw", "cni_version", "name", "data_dir", "log_file", "busy_timeout")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.cni_version = netconf.require_version(raw)
        self.name = netconf.require_str(raw, "name")
        self.data_dir = netconf.require_str(raw, "dataDir", optional=True) or DEFAULT_DATA_DIR
        if not self.data_dir.startswith("/"):
            raise InvalidConfig(f"dataDir: must be an absolute path, got {self.data_dir!r}")
        self.log_file = netconf.require_str(raw, "logFile", optional=True)
        timeout = raw.get("busyTimeout", 5)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidConfig(f"busyTimeout: must be a number of seconds >= 0, got {timeout!r}")
        self.busy_timeout = float(timeout)


class PodnetConf(StoreConf):
    """A validated ``podnet`` NetConf (what ADD, CHECK and STATUS need)."""

    __slots__ = ("ranges", "mtu", "ip_masq", "port_mappings")

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(raw)
        self.ranges = parse_ranges(raw.get("ranges"))
        self.mtu = netconf.opt_int(raw, "mtu", 0, 0, 65535)
        families = {n.version for n in self.ranges}
        for family in families:
            if self.mtu and self.mtu < MIN_MTU[family]:
                raise InvalidConfig(
                    f"mtu: {self.mtu} is below the IPv{family} minimum of {MIN_MTU[family]}"
                )
        self.ip_masq = netconf.opt_bool(raw, "ipMasq", True)
        self.port_mappings = netconf.parse_port_mappings(raw)

    @property
    def range_strings(self) -> list[str]:
        return [str(n) for n in self.ranges]


def parse_ranges(value: object) -> list[Network]:
    """``ranges``: a non-empty list of CIDRs with no host bits, each with >= 1 usable address."""
    import ipaddress

    if not isinstance(value, list) or not value:
        raise InvalidConfig("ranges: must be a non-empty list of CIDRs")
    out: list[Network] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidConfig(f"ranges[{i}]: must be a CIDR string, got {item!r}")
        try:
            net = ipaddress.ip_network(item, strict=True)
        except ValueError as err:
            raise InvalidConfig(f"ranges[{i}]: {item!r} is not a valid CIDR: {err}") from None
        if net.num_addresses < 4:
            raise InvalidConfig(
                f"ranges[{i}]: {item} is too small (needs network, gateway, one pod, last)"
            )
        if net in out:
            raise InvalidConfig(f"ranges[{i}]: {item} is listed twice")
        out.append(net)
    return out
