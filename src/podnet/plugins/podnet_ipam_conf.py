"""The ``podnet-ipam`` NetConf: the ``ipam`` object of a main plugin's config (CNI SPEC 1.1.0
"Network Configuration" ``ipam``, "IP Allocation"). The IPAM plugin receives the main plugin's
whole config and reads::

    {"cniVersion": "1.0.0", "name": "mynet", "type": "bridge", …,
     "ipam": {"type": "podnet-ipam",
              "ranges": ["10.22.0.0/24", "fd00:22::/64"],      (required)
              "dataDir": "/var/lib/podnet",                     (optional, the default)
              "busyTimeout": 5,                                 (optional, seconds)
              "routes": [{"dst": "10.0.0.0/8", "gw": "10.22.0.254"}]}}   (optional)

``ranges`` follow the ``podnet`` plugin's rules (one address per family, from the first range of
that family with a free one; never a range's network, gateway (network + 1) or last address).
``routes`` replace the default route per allocated family that podnet-ipam returns otherwise;
``[]`` returns none (for a main plugin that adds its own, e.g. bridge's ``isDefaultGateway``).
Invalid values → code 7 naming the key (``ipam.ranges[1]: …``).
"""

from __future__ import annotations

from podnet.cni import netconf
from podnet.errors import InvalidConfig
from podnet.netconf import parse_ranges, store_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _section(raw: dict[str, Any]) -> dict[str, Any]:
    ipam = raw.get("ipam")
    if not isinstance(ipam, dict):
        raise InvalidConfig(f"ipam: must be an object, got {ipam!r}")
    return ipam


class IpamStoreConf:
    """What DEL, CHECK and GC need: ``name`` (the network), ``cni_version``, ``data_dir`` and
    ``busy_timeout`` (seconds) from the ``ipam`` object. Ranges are not read, so a DEL is never
    refused over them."""

    __slots__ = ("raw", "ipam", "cni_version", "name", "data_dir", "busy_timeout")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.cni_version = netconf.require_version(raw)
        self.name = netconf.require_name(raw)
        self.ipam = _section(raw)
        self.data_dir, self.busy_timeout = store_keys(self.ipam, "ipam.")


class IpamConf(IpamStoreConf):
    """The whole ``ipam`` object, validated (ADD and STATUS): ``ranges`` (ip_network objects),
    ``routes`` (``[{"dst": cidr, "gw"?: addr}]`` in canonical form, or None for the default
    route per family)."""

    __slots__ = ("ranges", "routes")

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(raw)
        self.ranges = parse_ranges(self.ipam.get("ranges"), "ipam.ranges")
        self.routes = parse_routes(self.ipam.get("routes"))

    @property
    def range_strings(self) -> list[str]:
        return [str(n) for n in self.ranges]


def parse_routes(value: object, key: str = "ipam.routes") -> list[dict[str, str]] | None:
    """``routes``: None when absent; else a list of ``{"dst": CIDR, "gw"?: address}`` (spec
    "Routes"), returned in canonical form (``dst`` without host bits). ``gw`` must be of the
    family of ``dst``. Code 7 naming ``key[i].dst`` / ``.gw``."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidConfig(f'{key}: must be a list of {{"dst": CIDR, "gw"?: address}}')
    from podnet import checked

    out: list[dict[str, str]] = []
    for i, item in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise InvalidConfig(f"{where}: must be an object")
        try:
            net = checked.network(item.get("dst"), strict=False)
        except checked.BadValue as err:
            raise InvalidConfig(f"{where}.dst: {err}") from None
        route = {"dst": str(net)}
        gw = item.get("gw")
        if gw is not None:
            try:
                gw_ip = checked.ip(gw)
            except checked.BadValue as err:
                raise InvalidConfig(f"{where}.gw: {err}") from None
            if gw_ip.version != net.version:
                raise InvalidConfig(f"{where}.gw: {gw} is not of the family of {net}")
            route["gw"] = str(gw_ip)
        out.append(route)
    return out
