"""Malformed CNI calls for the fuzz test (tests/e2e/safety/test_fuzz.py): hypothesis strategies, one per
plugin, that build inputs which are invalid BY CONSTRUCTION — a call that succeeds on any of
them is a bug.

Each :class:`Case` starts from a valid call of one verb (ADD, DEL, CHECK, GC, STATUS) against
the fuzz node's seeded state and adds one to three defects:

- **stdin**: cut short (``{``, ``{"a"``, random cuts of the valid config), a raw control
  character or a byte that is not UTF-8 inserted, garbage after the object, JSON that is not an
  object, nesting far deeper than any parser allows, numbers no double holds;
- **keys**: a wrong type or an out-of-range value for a key the verb reads (the keys of each
  plugin's NetConf: ``src/podnet/plugins/*_conf.py``, ``src/podnet/cni/netconf.py``; a DEL is
  only given defects in the keys it reads, as podnet documents that DEL reads no others);
  ``prevResult`` shapes; GC's ``cni.dev/valid-attachments``; pod annotations;
- **version**: a cniVersion that is missing, unknown, or too old for the verb;
- **env**: an unknown CNI_COMMAND, a missing required variable, a bad CNI_CONTAINERID, a bad or
  non-UTF-8 CNI_IFNAME, a CNI_NETNS that is no network namespace (``/``, ``/dev/null``, a
  regular file, a missing path) where the verb enters the netns.

Values the test only knows at run time are placeholders (``@@DATA@@``: dataDir, ``@@SEEDNS@@``
and ``@@FUZZNS@@``: netns paths, ``@@FILE@@``: a regular file, ``@@SEEDIF@@``: the seed pod's
host veth), replaced by :meth:`Case.render`.
Numbers JSON can write but Python's encoder cannot (``1e400``, ``NaN``, 5,000 digits) are
written as ``@@RAW:…@@`` and spliced in raw.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

DATA, SEEDNS, FUZZNS, FILE = "@@DATA@@", "@@SEEDNS@@", "@@FUZZNS@@", "@@FILE@@"
V4, V6 = "10.244.0.0/24", "fd00:10:244::/64"
IPAM_RANGE = "10.88.0.0/24"
SEED, SEED_IPAM = "seed", "seedipam"
SEED_PORTMAP = {"iptables": "seedpm", "nftables": "seedpmnft"}
SEED_HOST_IF = "@@SEEDIF@@"  # the seed pod's host veth
PM_NETWORK, IPAM_NETWORK, REDIRECT_NETWORK = "pmnet", "ipamnet", "rdnet"
BASE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
VERBS = ("ADD", "DEL", "CHECK", "GC", "STATUS")
VERSIONS = {"ADD": ("0.3.1", "0.4.0", "1.0.0", "1.1.0"), "DEL": ("0.3.1", "0.4.0", "1.0.0", "1.1.0"),
            "CHECK": ("0.4.0", "1.0.0", "1.1.0"), "GC": ("1.1.0",), "STATUS": ("1.1.0",)}


def raw(token: str) -> str:
    return f"@@RAW:{token}@@"


HUGE = [10**400, -(10**400), raw("1e400"), raw("-1e400"), raw("1E+999999999"), raw("1" + "0" * 5000)]
NOT_JSON_NUMBERS = [raw("NaN"), raw("Infinity"), raw("-Infinity")]
MISSING = object()  # "delete this key"


def prev_result(ifname: str = "eth0") -> dict[str, Any]:
    """The seed pod's ADD result, as the fuzz node's first podnet ADD returns it (MACs and MTU
    left out: CHECK then takes podnet's own)."""
    return {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": SEED_HOST_IF}, {"name": ifname, "sandbox": SEEDNS}],
        "ips": [{"address": "10.244.0.2/32", "gateway": "10.244.0.1", "interface": 1},
                {"address": "fd00:10:244::2/128", "gateway": "fd00:10:244::1", "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.0.1"}, {"dst": "::/0", "gw": "fd00:10:244::1"}],
        "dns": {},
    }


# --- valid calls --------------------------------------------------------------------------------


def base_call(plugin: str, verb: str, version: str, backend: str, firewall: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A valid ``(config, env)`` of ``verb`` for ``plugin`` against the seeded fuzz node. Calls
    that would succeed change state visibly (new pods, other ports or options than the seeds'),
    except the read-only verbs."""
    env: dict[str, Any] = {"CNI_COMMAND": verb, "CNI_CONTAINERID": "fuzz", "CNI_NETNS": FUZZNS,
                           "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni", "PATH": BASE_PATH,
                           "PODNET_DATA_DIRS": "/tmp/*"}
    if verb in ("GC", "STATUS"):
        env["CNI_CONTAINERID"] = ""
        env["CNI_NETNS"] = ""
    conf: dict[str, Any]
    if plugin == "podnet":
        conf = {"cniVersion": version, "name": "kindnet", "type": "podnet", "ranges": [V4, V6],
                "dataDir": DATA, "capabilities": {"portMappings": True}}
        if verb == "ADD":
            conf["runtimeConfig"] = {"portMappings": [{"hostPort": 8081, "containerPort": 80, "protocol": "tcp"}]}
        if verb in ("DEL", "CHECK"):
            env.update(CNI_CONTAINERID=SEED, CNI_NETNS=SEEDNS)
        if verb == "CHECK":
            conf["prevResult"] = prev_result()
        if verb == "GC":
            conf["cni.dev/valid-attachments"] = [{"containerID": SEED, "ifname": "eth0"}]
    elif plugin == "podnet-ipam":
        conf = {"cniVersion": version, "name": IPAM_NETWORK, "type": "bridge",
                "ipam": {"type": "podnet-ipam", "ranges": [IPAM_RANGE], "dataDir": DATA}}
        if verb in ("DEL", "CHECK"):
            env.update(CNI_CONTAINERID=SEED_IPAM, CNI_NETNS=SEEDNS)
        if verb == "CHECK":
            conf["prevResult"] = {"cniVersion": "1.1.0", "ips": [{"address": "10.88.0.2/24", "gateway": "10.88.0.1"}]}
        if verb == "GC":
            conf["cni.dev/valid-attachments"] = [{"containerID": SEED_IPAM, "ifname": "eth0"}]
    elif plugin == "podnet-portmap":
        conf = {"cniVersion": version, "name": PM_NETWORK, "type": "podnet-portmap",
                "capabilities": {"portMappings": True}, "backend": backend, "dataDir": DATA}
        if verb in ("ADD", "DEL", "CHECK"):
            conf["runtimeConfig"] = {"portMappings": [{"hostPort": 9095, "containerPort": 80, "protocol": "tcp"}]}
            conf["prevResult"] = prev_result()
            env["CNI_NETNS"] = SEEDNS
        if verb in ("DEL", "CHECK"):
            env["CNI_CONTAINERID"] = SEED_PORTMAP[backend]
            conf["runtimeConfig"]["portMappings"][0]["hostPort"] = 9090 if backend == "iptables" else 9190
        if verb == "GC":
            conf["cni.dev/valid-attachments"] = [{"containerID": c, "ifname": "eth0"} for c in SEED_PORTMAP.values()]
    elif plugin == "podnet-redirect":
        conf = {"cniVersion": version, "name": REDIRECT_NETWORK, "type": "podnet-redirect",
                "capabilities": {"io.kubernetes.cri.pod-annotations": True},
                "firewall": firewall, "ipv6": True, "pods": "all",
                "inboundPortsToIgnore": ["4190", "4191"]}
        env["CNI_NETNS"] = SEEDNS if verb not in ("GC", "STATUS") else ""
        if verb in ("ADD", "CHECK"):
            conf["prevResult"] = prev_result()
        if verb == "ADD":
            conf["outboundPortsToIgnore"] = ["443"]  # differs from the seed: a success shows
    else:
        raise ValueError(plugin)
    return conf, env


# --- defects --------------------------------------------------------------------------------------

WRONG_TYPES = [True, False, 0, -1, 1.5, "x", [], {}, [1], {"a": 1}]


def _not(*valid_types: type) -> list[Any]:
    return [v for v in WRONG_TYPES if not any(type(v) is t for t in valid_types)]


NAME_BAD = [MISSING, "", 7, [], {}, True]
DATADIR_BAD = ["relative/dir", "", 7, [], True, {"a": 1}, raw("1e400"), "/etc/podnet-not-allowed"]
TIMEOUT_BAD = [-1, -0.5, "5", True, [], {}, *HUGE, *NOT_JSON_NUMBERS]
LOGFILE_BAD = [7, [], {}, True, 1.5, "/tmp/podnet.log", "rel.log"]
RANGES_BAD = [MISSING, [], V4, 7, [7], ["nope"], ["10.244.300.0/24"], ["10.244.0.1/24"], ["10.244.0.0/31"],
              ["fd00::/127"], [V4, V4], [V4, None], {}, [[V4]], True, [V4, 10**400]]
MTU_BAD = [-1, 65536, "1500", 1500.5, True, [], {}, 67, 1279, *HUGE, *NOT_JSON_NUMBERS]
BOOL_BAD = ["true", 1, 0, [], {}, "yes", 1.0]
PORT_BAD = [MISSING, 0, -1, 65536, "80", 80.5, True, None, [], {}, *HUGE, *NOT_JSON_NUMBERS]
PROTOCOL_BAD = ["icmp", "sctp", 7, [], {}, True, "tcp "]
HOSTIP_BAD = ["nope", 7, "10.0.0.1/24", "300.1.1.1", [], {}, True, "::g"]
MAPPING_ITEM_BAD = ["x", 7, [], None, True]
MAPPINGS_BAD = ["x", 7, {}, True, {"hostPort": 80}]
RUNTIME_BAD = ["x", 7, [], True]
IPS_BAD = ["10.244.0.9", 7, [7], ["nope"], ["10.244.0.9", "10.244.0.10"], {}, [None], ["10.244.0.9/33"],
           ["192.168.77.5"]]
MAC_BAD = ["zz:zz:zz:zz:zz:zz", "01:00:5e:00:00:01", 7, [], "aa:bb:cc", "aa:bb:cc:dd:ee:ff:00", True, "0a:1b:2c:3d:4e"]
IPAM_OBJ_BAD = ["x", 7, [], True]
IPAM_TYPE_BAD = [MISSING, 7, "", "../x", "a/b", ".", "..", [], True]
ROUTES_BAD = ["x", 7, {}, [7], [{}], [{"dst": 7}], [{"dst": "nope"}], [{"dst": "10.0.0.0/8", "gw": "fd00::1"}],
              [{"dst": "10.0.0.0/8", "gw": 7}], [{"dst": "10.0.0.0/8", "gw": "nope"}], True]
TOOL_TIMEOUT_BAD = [-1, "2", True, [], {}, 10**400, raw("1e400"), raw("NaN")]


def _attachments_bad(seed: str, strict_ifname: bool) -> list[Any]:
    """Malformed GC ``cni.dev/valid-attachments`` values. ``strict_ifname``: the plugin needs
    an ifname in each item (podnet-ipam documents that an item without one keeps the whole
    container, so that one is not malformed there)."""
    good = {"containerID": seed, "ifname": "eth0"}
    bad: list[Any] = ["", "x", 7, {}, True, False, 0, [7], [seed], [{}], [{"ifname": "eth0"}],
                      [{"containerID": 7, "ifname": "eth0"}], [{"containerID": seed, "ifname": 7}],
                      [{"containerID": "", "ifname": "eth0"}], [[seed, "eth0"]], [good, 7], [good, {}],
                      [good, {"ifname": "eth0"}], [None]]
    if strict_ifname:
        bad += [[{"containerID": seed}], [good, {"containerID": "x"}]]
    return bad


PREV_SHAPES_BAD = [
    {"ips": "x"}, {"ips": 7}, {"ips": [7]}, {"ips": [{}]}, {"ips": [{"address": 7}]},
    {"ips": [{"address": "nope", "interface": 1}]}, {"ips": [{"address": None}]},
    "INTERFACES_X", "INTERFACE_INDEX_STR", "INTERFACES_ITEM_INT", "INTERFACE_NAME_INT", "ADDRESS_7",
    {"ips": [{"address": "10.244.0.2/32", "interface": 1}], "interfaces": "x"},
]
PREV_TOP_BAD = ["x", 7, [], True]


SHAPE_LABELS = {"INTERFACES_X": "prevResult.interfaces = 'x'",
                "INTERFACE_INDEX_STR": "prevResult.ips[0].interface = '1'",
                "INTERFACES_ITEM_INT": "prevResult.interfaces = [7, 7]",
                "INTERFACE_NAME_INT": "prevResult.interfaces[1].name = 7",
                "ADDRESS_7": "prevResult.ips[0].address = 7"}


def _shape_label(shape: Any) -> str:
    if isinstance(shape, str) and shape in SHAPE_LABELS:
        return SHAPE_LABELS[shape]
    return "prevResult = {interfaces…, " + json.dumps(shape)[1:-1] + "}"


def _prev_shape(shape: Any) -> Any:
    prev = prev_result()
    if shape == "INTERFACES_X":
        prev["interfaces"] = "x"
    elif shape == "INTERFACE_INDEX_STR":
        prev["ips"][0]["interface"] = "1"
    elif shape == "INTERFACES_ITEM_INT":
        prev["interfaces"] = [7, 7]
    elif shape == "INTERFACE_NAME_INT":
        prev["interfaces"][1]["name"] = 7
    elif shape == "ADDRESS_7":
        prev["ips"][0]["address"] = 7
    else:
        prev = {"cniVersion": "1.1.0", "interfaces": prev["interfaces"], **shape}
    return prev


@dataclass(frozen=True)
class KeyDefect:
    """Set ``path`` (keys and list indices) to one of ``values`` (MISSING deletes it) for the
    verbs in ``verbs``; ``when``: only for that portmap backend / redirect firewall."""

    path: tuple[Any, ...]
    values: tuple[Any, ...]
    verbs: tuple[str, ...]
    prepare: str = ""  # a change of the base config the defect needs


ALL = VERBS
NOT_DEL = ("ADD", "CHECK", "STATUS")
PM = ("runtimeConfig", "portMappings", 0)


def _podnet_defects() -> list[KeyDefect]:
    d = [
        KeyDefect(("name",), tuple(NAME_BAD), ALL),
        KeyDefect(("dataDir",), tuple(DATADIR_BAD), ALL),
        KeyDefect(("busyTimeout",), tuple(TIMEOUT_BAD), ALL),
        KeyDefect(("logFile",), tuple(LOGFILE_BAD), ALL),
        KeyDefect(("ipam",), tuple(IPAM_OBJ_BAD), ALL),
        KeyDefect(("ipam", "type"), tuple(IPAM_TYPE_BAD), ALL, prepare="ipam-object"),
        KeyDefect(("ipam",), ({"type": "podnet-ipam", "ranges": [IPAM_RANGE]},), NOT_DEL),  # with ranges
        KeyDefect(("ranges",), tuple(RANGES_BAD), NOT_DEL),
        KeyDefect(("mtu",), tuple(MTU_BAD), NOT_DEL),
        KeyDefect(("ipMasq",), tuple(BOOL_BAD), NOT_DEL),
        KeyDefect(("runtimeConfig",), tuple(RUNTIME_BAD), ("ADD",)),
        KeyDefect(("runtimeConfig", "portMappings"), tuple(MAPPINGS_BAD), ("ADD",)),
        KeyDefect(PM, tuple(MAPPING_ITEM_BAD), ("ADD",)),
        KeyDefect((*PM, "hostPort"), tuple(PORT_BAD), ("ADD",)),
        KeyDefect((*PM, "containerPort"), tuple(PORT_BAD), ("ADD",)),
        KeyDefect((*PM, "protocol"), tuple(PROTOCOL_BAD), ("ADD",)),
        KeyDefect((*PM, "hostIP"), tuple(HOSTIP_BAD), ("ADD",)),
        KeyDefect(("runtimeConfig", "portMappings", 1), ({"hostPort": 8081, "containerPort": 81},), ("ADD",)),
        KeyDefect(("runtimeConfig", "ips"), tuple(IPS_BAD), ("ADD",)),
        KeyDefect(("runtimeConfig", "mac"), tuple(MAC_BAD), ("ADD",)),
        KeyDefect(("CNI_ARGS",), ("IP=nope", "IP=10.244.0.9,10.244.0.10", "MAC=zz", "MAC=01:00:5e:00:00:01",
                                  "IP=192.168.77.5"), ("ADD",)),
        KeyDefect(("toolTimeout",), tuple(TOOL_TIMEOUT_BAD), ("ADD",)),
        KeyDefect(("prevResult",), (MISSING, *PREV_TOP_BAD, *PREV_SHAPES_BAD), ("CHECK",)),
        KeyDefect(("cni.dev/valid-attachments",), tuple(_attachments_bad(SEED, True)), ("GC",)),
    ]
    return d


def _ipam_defects() -> list[KeyDefect]:
    return [
        KeyDefect(("name",), tuple(NAME_BAD), ALL),
        KeyDefect(("ipam",), (MISSING, *IPAM_OBJ_BAD), ALL),
        KeyDefect(("ipam", "dataDir"), tuple(DATADIR_BAD), ALL),
        KeyDefect(("ipam", "busyTimeout"), tuple(TIMEOUT_BAD), ALL),
        KeyDefect(("ipam", "ranges"), tuple(RANGES_BAD), ("ADD", "STATUS")),
        KeyDefect(("ipam", "routes"), tuple(ROUTES_BAD), ("ADD",)),
        KeyDefect(("runtimeConfig",), tuple(RUNTIME_BAD), ("ADD",)),
        KeyDefect(("runtimeConfig", "ips"), tuple(IPS_BAD), ("ADD",)),
        KeyDefect(("CNI_ARGS",), ("IP=nope", "IP=10.88.0.9,10.88.0.10", "IP=192.168.77.5"), ("ADD",)),
        KeyDefect(("prevResult",), (*PREV_TOP_BAD, {"ips": "x"}, {"ips": 7}, {"ips": {"a": 1}}), ("CHECK",)),
        KeyDefect(("cni.dev/valid-attachments",), tuple(_attachments_bad(SEED_IPAM, False)), ("GC",)),
    ]


def _portmap_defects() -> list[KeyDefect]:
    options = ("ADD", "DEL", "CHECK", "GC", "STATUS")
    with_maps = ("ADD", "DEL", "CHECK")
    return [
        KeyDefect(("name",), tuple(NAME_BAD), ALL),
        KeyDefect(("snat",), tuple(BOOL_BAD), options),
        KeyDefect(("masqAll",), tuple(BOOL_BAD), options),
        KeyDefect(("markMasqBit",), (-1, 32, "13", True, 13.5, [], *HUGE, *NOT_JSON_NUMBERS), options),
        KeyDefect(("externalSetMarkChain",), (7, "", "a b", "x" * 29, [], True), options, prepare="iptables"),
        KeyDefect(("externalSetMarkChain",), ("CNI-EXT",), options, prepare="markMasqBit"),
        KeyDefect(("conditionsV4",), ("x", 7, {}, [7], [["-d"]], True, "", 0, False, [None]), options, prepare="iptables"),
        KeyDefect(("conditionsV6",), ("x", 7, {}, [7], [["-d"]], True, "", 0, False), options, prepare="iptables"),
        KeyDefect(("conditionsV4",), (["!", "-d", "192.0.2.0/24"],), options, prepare="nftables"),
        KeyDefect(("externalSetMarkChain",), ("CNI-EXT",), options, prepare="nftables"),
        KeyDefect(("backend",), ("pf", 7, [], "", "IPTABLES", False, {}, 0, "nft"), options),
        KeyDefect(("runtimeConfig",), tuple(RUNTIME_BAD), with_maps),
        KeyDefect(("runtimeConfig", "portMappings"), tuple(MAPPINGS_BAD), with_maps),
        KeyDefect(PM, tuple(MAPPING_ITEM_BAD), with_maps),
        KeyDefect((*PM, "hostPort"), tuple(PORT_BAD), with_maps),
        KeyDefect((*PM, "containerPort"), tuple(PORT_BAD), with_maps),
        KeyDefect((*PM, "protocol"), tuple(PROTOCOL_BAD), with_maps),
        KeyDefect((*PM, "hostIP"), tuple(HOSTIP_BAD), with_maps),
        KeyDefect(("prevResult",), (MISSING,), ("ADD", "CHECK")),
        KeyDefect(("prevResult",), tuple(PREV_TOP_BAD), with_maps),
        KeyDefect(("prevResult",), tuple(PREV_SHAPES_BAD), ("ADD", "CHECK")),
        KeyDefect(("cni.dev/valid-attachments",), tuple(_attachments_bad(SEED_PORTMAP["iptables"], True)), ("GC",)),
    ]


def _redirect_defects() -> list[KeyDefect]:
    v = ("ADD", "DEL", "CHECK")
    port_values = (0, 70000, "x", True, -1, 1.5, [], *HUGE)
    ports_lists = ("abc", ["70000"], ["1-"], ["5-3"], 7, [True], ["x"], {}, ["0"], [[80]])
    ann = ("runtimeConfig", "io.kubernetes.cri.pod-annotations")
    return [
        KeyDefect(("linkerd",), ("x", 7, [], True), v),
        KeyDefect(("linkerd", "proxy-uid"), ("x", -1, 70000, True, []), v, prepare="linkerd"),
        KeyDefect(("linkerd", "ports-to-redirect"), ports_lists, v, prepare="linkerd"),
        KeyDefect(("linkerd", "incoming-proxy-port"), port_values, v, prepare="linkerd"),
        KeyDefect(("firewall",), ("pf", 7, [], True, "iptables", "legacy-nft"), v),
        KeyDefect(("ipv6",), tuple(BOOL_BAD), v),
        KeyDefect(("pods",), ("some", 7, [], True, ""), v),
        KeyDefect(("runtimeConfig",), tuple(RUNTIME_BAD), v),
        KeyDefect(ann, ("x", 7, [], True), v),
        KeyDefect((*ann, "config.linkerd.io/skip-inbound-ports"), ("abc", 7, ["x"], "70000", {}), v),
        KeyDefect((*ann, "config.linkerd.io/skip-outbound-ports"), ("abc", 7, ["x"], "1-", {}), v),
        KeyDefect((*ann, "config.linkerd.io/skip-subnets"), ("nope", 7, "10.0.0.0/33", [], {}), v),
        KeyDefect((*ann, "config.linkerd.io/proxy-uid"), ("abc", [1], {}, "-5", "70000", 1.5), v),
        KeyDefect(("inboundPortsToIgnore",), ports_lists, v),
        KeyDefect(("outboundPortsToIgnore",), ports_lists, v),
        KeyDefect(("portsToRedirect",), ports_lists, v),
        KeyDefect(("subnetsToIgnore",), ("x", 7, ["nope"], [7], {}, True, ["10.0.0.0/33"]), v),
        KeyDefect(("incomingProxyPort",), port_values, v),
        KeyDefect(("outgoingProxyPort",), port_values, v),
        KeyDefect(("proxyUID",), ("x", -1, 70000, True, False, "", [], 1.5, *HUGE), v),
        KeyDefect(("proxyGID",), ("x", -1, 70000, True, [], 1.5, *HUGE), v),
        KeyDefect(("prevResult",), (MISSING,), ("ADD", "CHECK")),
        KeyDefect(("prevResult",), tuple(PREV_TOP_BAD), v),
        KeyDefect(("prevResult",), tuple(PREV_SHAPES_BAD), ("ADD",)),
    ]


DEFECTS = {"podnet": _podnet_defects(), "podnet-ipam": _ipam_defects(),
           "podnet-portmap": _portmap_defects(), "podnet-redirect": _redirect_defects()}
#: Verbs whose calls enter CNI_NETNS (a netns that is none is then an invalid env).
ENTERS_NETNS = {"podnet": ("ADD", "CHECK"), "podnet-redirect": ("ADD", "CHECK")}
#: Verbs each plugin's config keys are fuzzed for; the others get stdin/env/version defects only
#: (podnet-redirect implements no GC or STATUS).
KEYED_VERBS = {"podnet": VERBS, "podnet-ipam": VERBS, "podnet-portmap": VERBS,
               "podnet-redirect": ("ADD", "DEL", "CHECK")}


def _set(conf: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = conf
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, list):
            while len(node) <= key:
                node.append({"hostPort": 8082, "containerPort": 80})
            node = node[key]
            continue
        if key not in node or not isinstance(node[key], dict | list):
            node[key] = [] if isinstance(nxt, int) else {}
        node = node[key]
    last = path[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append({"hostPort": 8082, "containerPort": 80})
        node[last] = value
    elif value is MISSING:
        node.pop(last, None)
    else:
        node[last] = value


def _path_text(path: tuple[Any, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _value_text(value: Any) -> str:
    if value is MISSING:
        return "<missing>"
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    if isinstance(value, int) and abs(value) > 10**20:
        text = f"{'-' if value < 0 else ''}10**{len(str(abs(value))) - 1}"
    if text.startswith("'@@RAW:"):
        token = value[len("@@RAW:"):-2]
        text = token if len(token) < 20 else f"{token[:4]}…({len(token)} digits)"
    return text if len(text) < 90 else text[:87] + "…"


# --- cases --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One malformed call: ``plugin``, ``verb`` (the env's CNI_COMMAND may differ), ``why``
    (the defects, for failure messages), ``env`` (bytes pairs) and ``stdin`` (bytes), both with
    placeholders until :meth:`render`."""

    plugin: str
    verb: str
    why: str
    env: tuple[tuple[bytes, bytes], ...]
    stdin: bytes

    def render(self, values: dict[str, str]) -> tuple[list[tuple[bytes, bytes]], bytes]:
        def sub(b: bytes) -> bytes:
            for k, v in values.items():
                b = b.replace(k.encode(), v.encode())
            return b

        return [(k, sub(v)) for k, v in self.env], sub(self.stdin)

    def show(self) -> str:
        data = self.stdin
        excerpt = repr(data[:240]) + (f"…(+{len(data) - 240} bytes)" if len(data) > 240 else "")
        env = " ".join(f"{k.decode(errors='replace')}={v!r}"[:80] for k, v in self.env
                       if k in (b"CNI_COMMAND", b"CNI_CONTAINERID", b"CNI_NETNS", b"CNI_IFNAME", b"CNI_ARGS")
                       or not any(k == b for b in (b"PATH", b"CNI_PATH")))
        return f"{self.plugin} {self.verb} [{self.why}] env: {env} stdin: {excerpt}"


def dumps(conf: Any) -> bytes:
    text = json.dumps(conf)
    while '"@@RAW:' in text:
        start = text.index('"@@RAW:')
        end = text.index('@@"', start + 7)
        text = text[:start] + text[start + 7:end] + text[end + 3:]
    return text.encode()


FIXED_STDIN = [b"", b"  \n", b"{", b'{"a"', b"[1", b'"abc', b'{"a":', b'{"a":}', b'{"a" 1}', b"nul", b"tru",
               b"{'cniVersion': '1.0.0'}", b'{"a": 01}', b"\xef\xbb\xbf", b"}", b"{}}", b"[}", b'{"a":1,}',
               b'{"a":1 "b":2}', b'{"\\x41": 1}', b'{"a": "\\ud800', b"\x00", b"\xff\xfe{\x00}\x00",
               b"/* config */ {}", b"{\"a\": tru}", b"-", b"1.", b".5", b'{"a": [1, 2,]}']
NON_OBJECTS = [b"[]", b"1", b'"x"', b"null", b"true", b"false", b"-0", b"1e400", b"1" + b"0" * 5000,
               b"NaN", b"[{}]"]
CONTROL = [bytes([c]) for c in range(32) if c not in (9, 10, 13)]
BAD_UTF8 = [b"\xff", b"\xc0", b"\xed\xa0\x80", b"\xc3", b"\xf8\x88\x80\x80\x80", b"\x80"]
TRAILING = [b"x", b"}", b"]", b"{}", b",", b"\x00", b"null", b'"a"', b"{", b"/* c */", b"\xff", b"1"]
BAD_COMMANDS = [b"add", b"FOO", b"VERSIONX", b"GCC", b"\xff", b"ADD ", b" DEL", b"del"]
BAD_CONTAINER_IDS = [b"-x", b"_x", b".x", b"a b", b"a/b", b"a;b", "\u00e9t\u00e9".encode(), b"a\xff", b"a\nb", b"a:b"]
BAD_IFNAMES = [b"a" * 16, b"a/b", b"a b", b"a:b", b"a\tb", b".", b"..", b"e\xff", b"\xc3\x28", b"eth0\n",
               b"\xe2\x80\x83"]
BAD_NETNS = [b"/", b"/dev/null", FILE.encode(), b"/run/netns/pnt-no-such-netns", b"relative/netns",
             b"/proc/self/ns/mnt", b"/run/netns"]
REQUIRED = {"ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
            "DEL": ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"),
            "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
            "GC": ("CNI_PATH",), "STATUS": ("CNI_PATH",)}
BAD_VERSIONS = [MISSING, "0.2.0", "0.1.0", "2.0.0", "1.1", 1.1, "", [], None, "1.0.0 ", 7]


def _group(defect: KeyDefect) -> str:
    """Defects of one group are never combined: a later one could overwrite an earlier one (a
    ``runtimeConfig`` of "x" replaced by an object) or make it valid (``ranges`` removed and a
    valid ``ipam`` given)."""
    top = str(defect.path[0])
    return "ipam/ranges" if top in ("ipam", "ranges") else top


@st.composite
def cases(draw: st.DrawFn, plugin: str) -> Case:
    """One malformed call of ``plugin``."""
    verb = draw(st.sampled_from(VERBS))
    version = draw(st.sampled_from(VERSIONS[verb]))
    backend = draw(st.sampled_from(["iptables", "nftables"]))
    firewall = draw(st.sampled_from(["nftables", "iptables-nft"]))
    conf, env = base_call(plugin, verb, version, backend, firewall)
    conf = copy.deepcopy(conf)
    whys: list[str] = []
    used_groups: set[str] = set()
    keyed = verb in KEYED_VERBS[plugin]
    kinds = ["stdin", "env", "version"] + (["key"] * 3 if keyed else [])
    n = draw(st.integers(1, 3))
    chosen = [draw(st.sampled_from(kinds)) for _ in range(n)]
    # At most one stdin defect; it is applied last, on the serialized config.
    stdin_defect = "stdin" in chosen
    for kind in [k for k in chosen if k != "stdin"]:
        if kind == "key":
            pool = [d for d in DEFECTS[plugin] if verb in d.verbs and _group(d) not in used_groups
                    and not (d.prepare == "iptables" and backend == "nftables")
                    and not (d.prepare == "nftables" and backend == "iptables")]
            if not pool:
                continue
            defect = draw(st.sampled_from(pool))
            value = draw(st.sampled_from(defect.values))
            used_groups.add(_group(defect))
            if defect.prepare == "ipam-object":
                conf.pop("ranges", None)
                conf["ipam"] = {"type": "podnet-ipam", "ranges": [IPAM_RANGE], "dataDir": DATA}
            elif defect.prepare == "markMasqBit":
                conf["markMasqBit"] = 13
            elif defect.prepare == "linkerd":
                conf.setdefault("linkerd", {})
            label = ""
            if isinstance(value, str) and value in SHAPE_LABELS or isinstance(value, dict) and \
                    defect.path == ("prevResult",) and "cniVersion" not in value:
                label = _shape_label(value)
                value = _prev_shape(value)
            if defect.path == ("CNI_ARGS",):
                env["CNI_ARGS"] = value
                whys.append(f"CNI_ARGS={value!r}")
                continue
            _set(conf, defect.path, value)
            whys.append(label or f"{_path_text(defect.path)} = {_value_text(value)}"
                        + (f" (with {defect.prepare})" if defect.prepare and defect.prepare not in ("iptables", "nftables") else ""))
        elif kind == "version":
            if "version" in used_groups:
                continue
            used_groups.add("version")
            if verb in ("GC", "STATUS") and draw(st.booleans()):
                value = draw(st.sampled_from(["0.3.1", "0.4.0", "1.0.0"]))
            else:
                value = draw(st.sampled_from(BAD_VERSIONS))
            _set(conf, ("cniVersion",), value)
            whys.append(f"cniVersion = {_value_text(value)}" + (f" for {verb}" if verb in ("GC", "STATUS") else ""))
        elif kind == "env":
            options = ["command", "missing"]
            if verb in ("ADD", "DEL", "CHECK"):
                options += ["container", "ifname", "ifname"]
            if verb in ENTERS_NETNS.get(plugin, ()):
                options += ["netns"]
            which = draw(st.sampled_from([o for o in options if "env " + o not in used_groups] or options))
            used_groups.add("env " + which)
            if which == "command":
                env["CNI_COMMAND"] = draw(st.sampled_from(BAD_COMMANDS))
                whys.append(f"CNI_COMMAND={env['CNI_COMMAND']!r}")
            elif which == "missing":
                var = draw(st.sampled_from(REQUIRED[verb]))
                env[var] = MISSING if draw(st.booleans()) else ""
                whys.append(f"{var} {'unset' if env[var] is MISSING else 'empty'}")
            elif which == "container":
                env["CNI_CONTAINERID"] = draw(st.sampled_from(BAD_CONTAINER_IDS))
                whys.append(f"CNI_CONTAINERID={env['CNI_CONTAINERID']!r}")
            elif which == "ifname":
                env["CNI_IFNAME"] = draw(st.sampled_from(BAD_IFNAMES))
                whys.append(f"CNI_IFNAME={env['CNI_IFNAME']!r}")
            else:
                env["CNI_NETNS"] = draw(st.sampled_from(BAD_NETNS))
                whys.append(f"CNI_NETNS={env['CNI_NETNS']!r}")
    if not whys:
        stdin_defect = True  # every case carries at least one defect
    data = dumps(conf)
    if stdin_defect:
        how = draw(st.sampled_from(["fixed", "nonobject", "cut", "cut", "control", "utf8", "trailing", "deep",
                                    "deep-key"]))
        if how == "fixed":
            data = draw(st.sampled_from(FIXED_STDIN))
            whys.append(f"stdin {data[:30]!r}")
        elif how == "nonobject":
            data = draw(st.sampled_from([*NON_OBJECTS, b"[" + dumps(conf) + b"]", json.dumps(dumps(conf).decode()).encode()]))
            whys.append(f"stdin not an object: {data[:30]!r}")
        elif how == "cut":
            cut = draw(st.integers(1, len(data) - 1))
            whys.append(f"stdin cut at {cut}/{len(data)} bytes")
            data = data[:cut]
        elif how == "control":
            pos = draw(st.integers(0, len(data)))
            ch = draw(st.sampled_from(CONTROL))
            data = data[:pos] + ch + data[pos:]
            whys.append(f"raw control byte {ch!r} at {pos}")
        elif how == "utf8":
            pos = draw(st.integers(0, len(data)))
            bad = draw(st.sampled_from(BAD_UTF8))
            data = data[:pos] + bad + data[pos:]
            whys.append(f"invalid UTF-8 {bad!r} at {pos}")
        elif how == "trailing":
            tail = draw(st.sampled_from(TRAILING))
            data = data + tail
            whys.append(f"garbage {tail!r} after the object")
        elif how == "deep":
            depth = draw(st.sampled_from([5000, 100_000]))
            shape = draw(st.sampled_from(["list", "object"]))
            data = (b"[" * depth + b"]" * depth) if shape == "list" else (b'{"a":' * depth + b"1" + b"}" * depth)
            whys.append(f"stdin nested {depth} deep ({shape})")
        else:
            depth = draw(st.sampled_from([5000, 100_000]))
            key = b'"cniVersion"'  # read by every verb of every plugin
            nested = b"[" * depth + b"]" * depth
            data = data[:-1] + b", " + key + b": " + nested + b"}" if data.endswith(b"}") else data
            whys.append(f"{key.decode()} nested {depth} deep")
    env_pairs = tuple((k.encode(), v if isinstance(v, bytes) else str(v).encode())
                      for k, v in env.items() if v is not MISSING)
    return Case(plugin, verb, "; ".join(whys), env_pairs, data)


# --- generation ----------------------------------------------------------------------------------


def _one_round(plugin: str, examples: int, seed: int) -> list[Case]:
    found: list[Case] = []

    @hypothesis.seed(seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases(plugin))
    def collect(case: Case) -> None:
        found.append(case)

    collect()
    return found


def generate(plugin: str, count: int, seed: int) -> list[Case]:
    """``count`` distinct cases for ``plugin`` from hypothesis with fixed seeds and no example
    database. Hypothesis also draws constants from the local modules loaded in the process, so
    the same inputs need the same modules: :func:`generate_fresh` runs this in a new
    interpreter."""
    out: dict[tuple[Any, ...], Case] = {}
    round_ = 0
    while len(out) < count:
        for case in _one_round(plugin, int((count - len(out)) * 1.7) + 50, seed + round_):
            out.setdefault((case.env, case.stdin), case)
        round_ += 1
        assert round_ < 20, f"only {len(out)} distinct {plugin} cases"
    return list(out.values())[:count]


def generate_fresh(counts: dict[str, int], seed: int) -> dict[str, list[Case]]:
    """:func:`generate` for each plugin, in a new interpreter that imports only this module:
    the same cases whatever the calling test session has imported."""
    import marshal
    import os
    import subprocess
    import sys

    argv = [sys.executable, os.path.abspath(__file__), str(seed),
            *[f"{plugin}={n}" for plugin, n in counts.items()]]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    raw = subprocess.run(argv, check=True, capture_output=True, env=env, timeout=900).stdout
    return {plugin: [Case(*t) for t in items] for plugin, items in marshal.loads(raw).items()}


if __name__ == "__main__":
    import marshal
    import sys

    seed = int(sys.argv[1])
    wanted = dict(arg.split("=") for arg in sys.argv[2:])
    result = {plugin: [(c.plugin, c.verb, c.why, c.env, c.stdin) for c in generate(plugin, int(n), seed)]
              for plugin, n in wanted.items()}
    sys.stdout.buffer.write(marshal.dumps(result))
