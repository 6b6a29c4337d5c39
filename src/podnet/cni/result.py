"""CNI results and their conversion between spec versions: the one place that knows the shapes.

podnet builds every result in the 1.x shape (1.0.0 and 1.1.0 are identical)::

    {"cniVersion": "1.1.0",
     "interfaces": [{"name": str, "mac": str, "mtu": int?, "sandbox": str?}],
     "ips": [{"address": "10.244.0.5/32", "gateway": "10.244.0.1", "interface": int}],
     "routes": [{"dst": "0.0.0.0/0", "gw": str?}],
     "dns": {}}

and converts it once, on output, to the config's version. 0.3.0, 0.3.1 and 0.4.0 results carry
``"version": "4"|"6"`` in each ip (CNI SPEC 0.4.0 "Result"); 1.0.0 removed it. Converters are
registered per (from-generation, to-generation) as in containernetworking/cni's convert table.
"""

from __future__ import annotations

from podnet.checked import interface
from podnet.cni.version import CURRENT_VERSION

TYPE_CHECKING = False  # typing costs ~10 ms of import per plugin call; type checkers see True

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    Result = dict[str, Any]


CURRENT = CURRENT_VERSION


def _generation(version: str) -> str:
    return "1" if version.startswith("1.") else "0"


def _v1_to_v04(result: Result) -> Result:
    out = {k: v for k, v in result.items() if k in ("interfaces", "routes", "dns")}
    ips = []
    for ip in result.get("ips", []):
        converted = dict(ip)
        converted["version"] = str(interface(ip["address"]).version)
        ips.append(converted)
    out["ips"] = ips
    return out


def _v04_to_v1(result: Result) -> Result:
    out = {k: v for k, v in result.items() if k in ("interfaces", "routes", "dns")}
    out["ips"] = [{k: v for k, v in ip.items() if k != "version"} for ip in result.get("ips", [])]
    return out


def _same(result: Result) -> Result:
    return {k: v for k, v in result.items() if k in ("interfaces", "ips", "routes", "dns")}


_CONVERTERS: dict[tuple[str, str], Callable[[Result], Result]] = {
    ("1", "1"): _same,
    ("0", "0"): _same,
    ("1", "0"): _v1_to_v04,
    ("0", "1"): _v04_to_v1,
}


def convert(result: Result, to_version: str) -> Result:
    """Return ``result`` (any supported version, its own ``cniVersion`` key) in ``to_version``.

    Empty lists are kept out of the output, as the reference plugins print them. Raises KeyError
    for an unsupported pair (callers validate versions before).
    """
    from_version = str(result.get("cniVersion", CURRENT))
    body = _CONVERTERS[(_generation(from_version), _generation(to_version))](result)
    if to_version != "1.1.0" and any("mtu" in i for i in body.get("interfaces", [])):
        # interfaces[].mtu (and socketPath, pciID) are new in 1.1.0.
        body["interfaces"] = [
            {k: v for k, v in i.items() if k not in ("mtu", "socketPath", "pciID")}
            for i in body["interfaces"]
        ]
    out: Result = {"cniVersion": to_version}
    for key in ("interfaces", "ips", "routes", "dns"):
        if key in body and (body[key] or key == "dns"):
            out[key] = body[key]
    return out


def sandbox_addresses(result: Result, ifname: str) -> list[str]:
    """The CIDR addresses of the sandbox interface ``ifname`` in a (prev)result of any version.

    An ip without an ``interface`` index is counted in (0.3.x results may omit it).
    """
    interfaces = result.get("interfaces", [])
    out = []
    for ip in result.get("ips", []):
        idx = ip.get("interface")
        if idx is None or (
            0 <= idx < len(interfaces)
            and interfaces[idx].get("name") == ifname
            and interfaces[idx].get("sandbox")
        ):
            out.append(ip["address"])
    return out


def validate(result: Any, where: str = "prevResult") -> Result:
    """Check that ``result`` has the shape of a CNI result (any supported version) before a
    plugin reads or passes it on: an object; ``interfaces`` a list of objects with a string
    ``name`` (``mac``/``sandbox`` strings, ``mtu`` an integer when present); ``ips`` a list of
    objects with an ``address`` in CIDR form, an optional ``gateway`` address and an optional
    ``interface`` index into ``interfaces``; ``routes`` a list of objects with a CIDR ``dst``
    and an optional ``gw``; ``dns`` an object. Returns ``result``.

    Raises :class:`~podnet.errors.InvalidConfig` (code 7) naming the first bad key, e.g.
    ``prevResult.ips[0].address: 7 is not an address in CIDR form``.
    """
    from podnet import checked
    from podnet.errors import InvalidConfig

    def bad(key: str, what: str) -> InvalidConfig:
        return InvalidConfig(f"{where}.{key}: {what}"[:400])

    if not isinstance(result, dict):
        raise InvalidConfig(f"{where}: must be an object")
    for key in ("interfaces", "ips", "routes"):
        if key in result and not isinstance(result[key], list):
            raise bad(key, "must be a list")
    if "dns" in result and not isinstance(result["dns"], dict):
        raise bad("dns", "must be an object")
    if "cniVersion" in result and not isinstance(result["cniVersion"], str):
        raise bad("cniVersion", "must be a string")
    interfaces = result.get("interfaces", [])
    for i, iface in enumerate(interfaces):
        if not isinstance(iface, dict):
            raise bad(f"interfaces[{i}]", "must be an object")
        if not isinstance(iface.get("name"), str) or not iface["name"]:
            raise bad(f"interfaces[{i}].name", "must be a non-empty string")
        for key in ("mac", "sandbox"):
            if key in iface and not isinstance(iface[key], str):
                raise bad(f"interfaces[{i}].{key}", "must be a string")
        mtu = iface.get("mtu")
        if mtu is not None and (isinstance(mtu, bool) or not isinstance(mtu, int)):
            raise bad(f"interfaces[{i}].mtu", "must be an integer")
    def parsed(key: str, value: Any, parse: Callable[[str], object], what: str,
               required: bool = False) -> None:  # fmt: skip
        """``value`` must be a string ``parse`` accepts; None only for an optional key."""
        if value is None and not required:
            return
        try:
            if not isinstance(value, str):
                raise ValueError
            parse(value)
        except checked.ScopedAddress as err:
            raise bad(key, str(err)) from None
        except ValueError:
            raise bad(key, f"{checked.show(value)} is not {what}") from None

    def cidr(text: str) -> object:
        return checked.interface(text)

    for i, ip in enumerate(result.get("ips", [])):
        if not isinstance(ip, dict):
            raise bad(f"ips[{i}]", "must be an object")
        if "address" not in ip:
            raise bad(f"ips[{i}].address", "missing")
        parsed(f"ips[{i}].address", ip["address"], cidr, "an address in CIDR form", True)
        parsed(f"ips[{i}].gateway", ip.get("gateway"), checked.ip, "an IP address")
        index = ip.get("interface")
        if index is not None and (
            isinstance(index, bool) or not isinstance(index, int)
            or not 0 <= index < len(interfaces)
        ):  # fmt: skip
            raise bad(f"ips[{i}].interface", f"{index!r} is not an index into interfaces")
    for i, route in enumerate(result.get("routes", [])):
        if not isinstance(route, dict):
            raise bad(f"routes[{i}]", "must be an object")
        if "dst" not in route:
            raise bad(f"routes[{i}].dst", "missing")
        parsed(f"routes[{i}].dst", route["dst"], lambda t: checked.network(t, strict=False),
               "a CIDR", True)  # fmt: skip
        parsed(f"routes[{i}].gw", route.get("gw"), checked.ip, "an IP address")
    return result


def prev_result(config: dict[str, Any]) -> Result | None:
    """The config's ``prevResult`` validated with :func:`validate`, or None when absent. Code 7.

    A result that passed :func:`validate` converts to every version (:func:`convert`: an
    unknown version string reads as generation 0, and each ``ips[].address`` is already an
    interface address), so a plugin that passes it on cannot fail printing it after it changed
    something."""
    raw = config.get("prevResult")
    return None if raw is None else validate(raw)


def attachment(host_if: str, host_mac: str, ifname: str, pod_mac: str, netns: str, mtu: int,
               alloc: Mapping[int, tuple[str, str, object]],
               prefixes: Mapping[int, int]) -> Result:  # fmt: skip
    """podnet's 1.x result for one attachment (spec "Success"): both veth ends (the pod end,
    index 1, in ``netns``; ``mtu`` bytes), per family of ``alloc`` (``{family: (address,
    gateway, range)}``) the address with the subnet's prefix from ``prefixes`` (a bridge port)
    or ``/32``/``/128`` (a routed pod) and a default route through its gateway; empty ``dns``.
    The version is :data:`podnet.cni.version.CURRENT_VERSION`."""
    from podnet.checked import FAMILIES

    ips, routes = [], []
    for version, (addr, gw, _range) in sorted(alloc.items()):
        plen = prefixes.get(version) or FAMILIES[version].host_prefix
        ips.append({"address": f"{addr}/{plen}", "gateway": gw, "interface": 1})
        routes.append({"dst": FAMILIES[version].default_route, "gw": gw})
    return {
        "cniVersion": CURRENT_VERSION,
        "interfaces": [
            {"name": host_if, "mac": host_mac, "mtu": mtu},
            {"name": ifname, "mac": pod_mac, "mtu": mtu, "sandbox": netns},
        ],
        "ips": ips,
        "routes": routes,
        "dns": {},
    }
