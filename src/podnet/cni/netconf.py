"""Parsing the spec's common NetConf keys and capability arguments into typed objects.

Every check raises :class:`~podnet.errors.InvalidConfig` (code 7) whose message names the
key (``runtimeConfig.portMappings[1].hostPort: …``), before any state is touched.
"""

from __future__ import annotations

from podnet import checked
from podnet.cni.version import SUPPORTED_VERSIONS
from podnet.errors import IncompatibleVersion, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.values import PortMappingArg


PROTOCOLS = ("tcp", "udp")


def require_version(raw: dict[str, Any]) -> str:
    """The config's ``cniVersion``; code 1 when absent from SUPPORTED_VERSIONS."""
    version = raw.get("cniVersion")
    if not isinstance(version, str) or version not in SUPPORTED_VERSIONS:
        raise IncompatibleVersion(
            f"incompatible CNI versions: config is {version!r}, "
            f"plugin supports {list(SUPPORTED_VERSIONS)}"
        )
    return version


def require_str(raw: dict[str, Any], key: str, *, optional: bool = False) -> str:
    value = raw.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value:
        raise InvalidConfig(f"{key}: must be a non-empty string, got {value!r}")
    return value


#: Longest network name accepted: a DNS subdomain (Kubernetes object names, Multus network
#: attachments). libcni sets no bound; podnet writes the name into rule comments and rows.
MAX_NAME = 253


def valid_network_name(name: str) -> bool:
    """libcni's network name rule: a letter or digit, then letters, digits, ``_``, ``.``,
    ``-`` (ASCII) — at most :data:`MAX_NAME` characters."""
    return (
        0 < len(name) <= MAX_NAME
        and name.isascii()
        and name[0].isalnum()
        and all(c.isalnum() or c in "_.-" for c in name)
    )


def require_name(raw: dict[str, Any]) -> str:
    """The NetConf's ``name`` (libcni's rule, :func:`valid_network_name`): it ends up in rule
    comments, chain comments and row keys. Code 7."""
    name = require_str(raw, "name")
    if not valid_network_name(name):
        raise InvalidConfig(
            f"name: {checked.show(name)} is not a valid network name (a letter or digit, then "
            f"letters, digits, '_', '.', '-'; at most {MAX_NAME} characters)"
        )
    return name


#: The directory a NetConf's ``logFile`` lies in (a file directly in it). Its author is not
#: the node's administrator and the plugin runs as root: a log created in /etc/profile.d, a
#: crontab directory or through a symlink planted under /var/log would be read as code. podnet
#: makes this directory itself (0700) and writes there only while no one but root can change it
#: (:class:`podnet.cni.skel.Log`); CNI_LOG_FILE (the runtime's environment, the
#: administrator's) may name any path.
LOG_DIR = "/var/log/podnet"


def log_file(raw: dict[str, Any]) -> str:
    """``logFile``: "" (no log) or a file directly in :data:`LOG_DIR` (a plain name of safe
    characters: :func:`podnet.checked.path`). Code 7 naming the key."""
    value = raw.get("logFile")
    if value is None or value == "":
        return ""
    try:
        path = checked.path(value)
    except checked.BadValue as err:
        raise InvalidConfig(f"logFile: {err}") from None
    if path.rpartition("/")[0] != LOG_DIR:
        raise InvalidConfig(
            f"logFile: {checked.show(path)} is not a file in {LOG_DIR}/ (a NetConf's log goes "
            "there; CNI_LOG_FILE in the runtime's environment may name any path)"
        )
    return path


def opt_bool(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise InvalidConfig(f"{key}: must be true or false, got {value!r}")
    return value


def opt_int(raw: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidConfig(f"{key}: must be an integer in {low}-{high}, got {value!r}")
    return value


def opt_seconds(raw: dict[str, Any], key: str, default: float, low: float, high: float,
                *, where: str = "") -> float:  # fmt: skip
    """A number of seconds in [low, high] (``where`` prefixes the key in the message, e.g.
    ``ipam.``); code 7 otherwise — booleans, NaN, infinities and huge integers included."""
    value = raw.get(key, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        try:
            ok = low <= float(value) <= high
        except OverflowError:
            ok = False
    if not ok:
        raise InvalidConfig(
            f"{where}{key}: must be a number of seconds in {low:g}-{high:g}, got {value!r}"[:300]
        )
    return float(value)


#: ``toolTimeout`` bounds: seconds a spawned tool (ip, nft, …) may run before it is killed.
TOOL_TIMEOUT = (10.0, 0.1, 600.0)


def tool_timeout(raw: dict[str, Any]) -> float:
    """``toolTimeout`` (every podnet plugin): seconds a spawned tool may run, default 10,
    0.1-600. Code 7 naming the key."""
    default, low, high = TOOL_TIMEOUT
    return opt_seconds(raw, "toolTimeout", default, low, high)


def _port(item: dict[str, Any], key: str, where: str) -> int:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfig(f"{where}.{key}: must be an integer port, got {value!r}")
    if not 1 <= value <= 65535:
        raise InvalidConfig(f"{where}.{key}: {value} is out of range 1-65535")
    return value


def runtime_config(raw: dict[str, Any]) -> dict[str, Any]:
    """``runtimeConfig`` (the capability arguments the runtime passes; spec "Deriving
    runtimeConfig"): an object, ``{}`` when absent or null. Code 7 otherwise."""
    runtime = raw.get("runtimeConfig")
    if runtime is None:
        return {}
    if not isinstance(runtime, dict):
        raise InvalidConfig("runtimeConfig: must be an object")
    return runtime


def parse_port_mappings(raw: dict[str, Any]) -> list[PortMappingArg]:
    """``runtimeConfig.portMappings`` validated; [] when absent. Code 7 on any bad item."""
    items = runtime_config(raw).get("portMappings")
    if items is None:
        return []
    from podnet.values import PortMappingArg  # not on DEL's path (it reads no portMappings)

    if not isinstance(items, list):
        raise InvalidConfig("runtimeConfig.portMappings: must be a list")
    out = []
    for i, item in enumerate(items):
        where = f"runtimeConfig.portMappings[{i}]"
        if not isinstance(item, dict):
            raise InvalidConfig(f"{where}: must be an object")
        host_port = _port(item, "hostPort", where)
        container_port = _port(item, "containerPort", where)
        protocol = item.get("protocol")
        if protocol is None:
            protocol = "tcp"
        if not isinstance(protocol, str) or protocol.lower() not in PROTOCOLS:
            raise InvalidConfig(f"{where}.protocol: {protocol!r} is not tcp or udp")
        raw_host_ip = item.get("hostIP")
        host_ip = None
        if raw_host_ip is not None and raw_host_ip != "":
            try:
                host_ip = checked.ip(raw_host_ip)
            except checked.BadValue as err:
                raise InvalidConfig(f"{where}.hostIP: {err}") from None
        out.append(PortMappingArg(host_port, container_port, protocol.lower(), host_ip))
    # (hostPort, protocol) → what holds it: "any" (both families), "any4"/"any6" (one family's
    # wildcard), "4"/"6" (the first specific address of the family), each address: linear time
    seen: dict[tuple[int, str], dict[object, int]] = {}
    for i, m in enumerate(out):
        held = seen.setdefault((m.host_port, m.protocol), {})
        if m.host_ip is None:
            clash = next(iter(held.values()), None)
            keys: list[object] = ["any", "any4", "any6", "4", "6"]
        elif m.host_ip.is_unspecified:
            v = m.host_ip.version
            clash = next((held[k] for k in ("any", f"any{v}", str(v)) if k in held), None)
            keys = [f"any{v}", str(v)]
        else:
            v = m.host_ip.version
            clash = next((held[k] for k in ("any", f"any{v}", m.host_ip) if k in held), None)
            keys = [str(v), m.host_ip]
        if clash is not None:
            other = out[clash]
            raise InvalidConfig(
                f"runtimeConfig.portMappings[{i}]: {m.protocol} hostPort {m.host_port} on "
                f"{m.host_ip or 'any address'} overlaps portMappings[{clash}] "
                f"({other.host_ip or 'any address'})"
            )
        for k in keys:
            held.setdefault(k, i)
    return out


def parse_cni_args(value: str) -> dict[str, str]:
    """CNI_ARGS ``K=V;K2=V2`` as a dict (``IgnoreUnknown`` kept); malformed pairs are skipped."""
    out = {}
    for pair in value.split(";"):
        key, sep, val = pair.partition("=")
        if sep and key:
            out[key.strip()] = val.strip()
    return out


def parse_requested_ips(raw: dict[str, Any], cni_args: dict[str, str]) -> dict[int, str]:
    """Addresses the runtime asks for: ``runtimeConfig.ips`` (the ``ips`` capability: CIDRs or
    addresses) or ``IP=`` in CNI_ARGS (comma-separated, as podman sends after ``network
    reload``); at most one per family: ``{4: "10.244.2.7", 6: …}`` (canonical text of a parsed
    address; a scoped IPv6 address is refused). Code 7 naming the key."""
    items = runtime_config(raw).get("ips")
    where = "runtimeConfig.ips"
    if items is None and cni_args.get("IP"):
        items = [x for x in cni_args["IP"].split(",") if x.strip()]
        where = "CNI_ARGS IP"
    if items is None:
        return {}
    if not isinstance(items, list):
        raise InvalidConfig(f"{where}: must be a list of addresses")
    out: dict[int, str] = {}
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidConfig(f"{where}[{i}]: must be a string, got {checked.show(item)}")
        try:
            addr = checked.interface(item.strip(), prefix=False).ip
        except checked.BadValue as err:
            raise InvalidConfig(f"{where}[{i}]: {err}") from None
        if addr.version in out:
            raise InvalidConfig(f"{where}[{i}]: more than one IPv{addr.version} address requested")
        out[addr.version] = str(addr)
    return out


def parse_requested_mac(raw: dict[str, Any], cni_args: dict[str, str]) -> str:
    """The pod-side MAC asked for by ``runtimeConfig.mac`` (the ``mac`` capability) or ``MAC=``
    in CNI_ARGS, lower-cased; "" when none. Code 7 when it is not a unicast MAC."""
    mac = runtime_config(raw).get("mac")
    where = "runtimeConfig.mac"
    if mac is None and cni_args.get("MAC"):
        mac, where = cni_args["MAC"], "CNI_ARGS MAC"
    if mac is None or mac == "":
        return ""
    parts = mac.split(":") if isinstance(mac, str) else []
    if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p)
                                  for p in parts):
        raise InvalidConfig(f"{where}: {mac!r} is not a MAC address")
    if int(parts[0], 16) & 1:
        raise InvalidConfig(f"{where}: {mac} is a multicast address")
    return str(mac).lower()


def parse_valid_attachments(raw: dict[str, Any]) -> set[tuple[str, str]]:
    """GC's ``cni.dev/valid-attachments`` (spec 1.1 "GC") as ``{(containerID, ifname)}``.

    Every item must carry both strings: a malformed item would otherwise make GC remove a live
    attachment, so it is code 7 naming the item.
    """
    items = raw.get("cni.dev/valid-attachments")
    if items is None:
        return set()
    if not isinstance(items, list):
        raise InvalidConfig("cni.dev/valid-attachments: must be a list")
    out = set()
    for i, item in enumerate(items):
        cid = item.get("containerID") if isinstance(item, dict) else None
        ifname = item.get("ifname") if isinstance(item, dict) else None
        if not isinstance(cid, str) or not cid or not isinstance(ifname, str) or not ifname:
            raise InvalidConfig(
                f"cni.dev/valid-attachments[{i}]: needs string containerID and ifname, got {item!r}"
            )
        out.add((cid, ifname))
    return out
