"""Hostile values in every field that can reach a tool: through the plugins
(NetConf keys, runtimeConfig, CNI_ARGS, CNI_* variables, prevResult, pod annotations), through
``podnetctl`` (arguments, --data-dir) and through the REST API (bodies, config keys).

One node namespace holds a working setup — a bridge network with a pod and a hostPort, a ptp
pod, a forward, podnet-portmap and podnet-redirect state, a ``podnetctl serve`` — and every tool
podnet runs is recorded (:mod:`tooltrace`). Each case sends one hostile value in one field and
asserts four things:

1. it is refused as bad input (CNI code 4, 6 or 7; a CLI error exit; HTTP 400/404/413/415);
2. no tool ran with it: the value's marker ``pwnd`` is in no tool's argv or stdin;
3. nothing changed: the database (every row), the node's and the pod's nft rulesets, links,
   addresses and routes are as before;
4. no output (stdout, stderr, response body, the server's log) carries the content of the file
   the hostile ``include`` names.

Hostile values: a zone with a newline and ``include "<canary file>"`` (the reported exploit), a
newline and an ``ip`` command, quotes, ``#``, ``;``, braces, ``%``, NUL, over-long text and a
value that is not UTF-8 — each carrying the marker.
"""

from __future__ import annotations

import difflib
import json
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from envgate import need
from netns import PLUGIN_ENV, VENV_BIN, Lab, sh
from tooltrace import ToolTrace

#: logFile cases write below /var/log/podnet, host-wide: with the other tests that do (xdist).
pytestmark = [pytest.mark.root, pytest.mark.xdist_group("var-log-podnet")]

MARK = "pwnd"
PODNETCTL = str(VENV_BIN / "podnetctl")
PLUGINS = {name: str(VENV_BIN / name)
           for name in ("podnet", "podnet-portmap", "podnet-redirect", "podnet-ipam")}
BAD_INPUT_CODES = {4, 6, 7}


def hostile(canary: Path, base: str = "10.0.0.9") -> list[tuple[str, str]]:
    """``(label, value)`` for one field whose valid form looks like ``base``; every value
    carries :data:`MARK`."""
    return [
        ("zone-include", f'fd00:1::9%{MARK}\ninclude "{canary}"'),
        ("newline-include", f'{base}\ninclude "{canary}" # {MARK}'),
        ("newline-command", f"{base}\nlink set dev lo down # {MARK}"),
        ("zone", f"fd00:1::9%{MARK}"),
        ("dquote", f'{base}"{MARK}'),
        ("squote", f"{base}'{MARK}"),
        ("hash", f"{base}#{MARK}"),
        ("semicolon", f"{base}; flush ruleset; {MARK}"),
        ("braces", f"{{ {base} }}{MARK}"),
        ("percent", f"{base}%{MARK}"),
        ("nul", f"{base}\x00{MARK}"),
        ("long", MARK + "9" * 5000),
        ("not-utf8", f"{base}\udcff{MARK}"),
    ]


def hostile_names(canary: Path) -> list[tuple[str, str]]:
    """Hostile interface names (CNI_IFNAME: at most 15 characters, no whitespace or '/')."""
    return [("dquote", f'e"{MARK}'), ("squote", f"e'{MARK}"), ("hash", f"e#{MARK}"),
            ("semicolon", f"e;{MARK}"), ("braces", f"e{{{MARK}}}"), ("percent", f"e%{MARK}"),
            ("backslash", f"e\\{MARK}"), ("not-utf8", f"e\udcff{MARK}")]  # fmt: skip


# -- the world ----------------------------------------------------------------------------------
class World:
    """The node: bridge network br0 with pod A (hostPort 8080), ptp network ``ptpnet`` with pod
    B, a forward on 198.51.100.8, podnet-portmap and podnet-redirect state on pod B, and
    ``podnetctl serve`` — every tool traced."""

    def __init__(self, lab: Lab, root: Path) -> None:
        self.lab, self.root = lab, root
        self.trace = ToolTrace(root / "trace")
        self.data = root / "data"
        self.canary = root / "canary.conf"
        self.secret = f"canary-content-{uuid.uuid4().hex}"
        self.canary.write_text(f"{self.secret}\n")
        self.env = {"PATH": self.trace.path}
        self.ctl("--init", "create", "br0", "ipv4.address=10.0.0.1/24",
                 "ipv6.address=fd00:1::1/64", "ipv4.nat=true")
        self.pod_a = lab.pod("a")
        self.pod_b = lab.pod("b")
        rc, out = self.plugin("podnet", "ADD", self.bridge_conf(), cid="pod-a", netns=self.pod_a)
        assert rc == 0, out
        rc, self.ptp_result = self.plugin("podnet", "ADD", self.ptp_conf(), cid="pod-b",
                                          netns=self.pod_b)
        assert rc == 0, self.ptp_result
        rc, out = self.plugin("podnet-portmap", "ADD", self.portmap_conf(), cid="pod-b",
                              netns=self.pod_b)
        assert rc == 0, out
        rc, out = self.plugin("podnet-redirect", "ADD", self.redirect_conf(), cid="pod-b",
                              netns=self.pod_b)
        assert rc == 0, out
        self.ctl("forward", "create", "br0", "198.51.100.8")
        self.ctl("forward", "port", "add", "br0", "198.51.100.8", "tcp", "80", "10.0.0.5")
        self.server_log = root / "serve.err"
        self._log = open(self.server_log, "w")  # noqa: SIM115 - closed in close()
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", lab.node, "env", f"PATH={self.trace.path}", PODNETCTL,
             "serve", "--data-dir", str(self.data)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        self.socket = self.data / "unix.socket"
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            assert self.server.poll() is None and time.monotonic() < deadline, \
                self.server_log.read_text()
            time.sleep(0.05)
        self.api = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket)),
                                base_url="http://lxd", timeout=30)

    def close(self) -> None:
        self.api.close()
        self.server.terminate()
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        self._log.close()

    # configs of the working setup; a case changes one field of a copy
    def bridge_conf(self) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": "br0-pods", "type": "podnet", "network": "br0",
                "dataDir": str(self.data), "runtimeConfig": {"portMappings": [
                    {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}

    def ptp_conf(self) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": "ptpnet", "type": "podnet",
                "ranges": ["10.244.0.0/24", "fd00:244::/64"], "dataDir": str(self.data)}

    def portmap_conf(self) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": "ptpnet", "type": "podnet-portmap",
                "backend": "iptables", "dataDir": str(self.data),
                "runtimeConfig": {"portMappings": [
                    {"hostPort": 9090, "containerPort": 80, "protocol": "tcp"}]},
                "prevResult": self.ptp_result}

    def redirect_conf(self) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": "ptpnet", "type": "podnet-redirect",
                "firewall": "iptables-nft", "pods": "all", "prevResult": self.ptp_result,
                "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {}}}

    def ipam_conf(self) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "name": "ipamnet", "type": "bridge",
                "ipam": {"type": "podnet-ipam", "ranges": ["10.77.0.0/24"],
                         "dataDir": str(self.data)}}

    # running things in the node
    def plugin(self, plugin: str, command: str, conf: dict[str, Any] | bytes, *, cid: str = "pod-x",
               netns: str | None = None, ifname: str = "eth0",
               env: dict[str, str] | None = None) -> tuple[int, Any]:
        out = self.plugin_raw(plugin, command, conf, cid=cid, netns=netns, ifname=ifname,
                              env=env)
        text = out.stdout.strip()
        return out.returncode, json.loads(text) if text else None

    def plugin_raw(self, plugin: str, command: str, conf: dict[str, Any] | bytes, *,
                   cid: str = "pod-x", netns: str | None = None, ifname: str = "eth0",
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        full = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid,
                "CNI_NETNS": f"/run/netns/{netns or self.pod_b}", "CNI_IFNAME": ifname,
                "CNI_PATH": str(VENV_BIN) + ":/usr/lib/cni", "PATH": self.trace.path,
                **PLUGIN_ENV}
        full.update(env or {})
        stdin = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
        argv = ["ip", "netns", "exec", self.lab.node, "env", "-i",
                *[os.fsencode(f"{k}={v}") for k, v in full.items()], PLUGINS[plugin]]
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=60)

    def ctl(self, *args: str, check: bool = True,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
        argv = ["ip", "netns", "exec", self.lab.node, "env", f"PATH={self.trace.path}",
                PODNETCTL, *([] if args and args[0] in ("proxy-init", "net") else
                             ["network", "--data-dir", str(self.data)]),
                *[os.fsencode(a) for a in args]]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, timeout=60,
                             input=stdin if stdin is not None else b"")  # fmt: skip
        if check:
            assert out.returncode == 0, out.stderr.decode(errors="replace")
        return out

    # what must not change
    def snapshot(self) -> dict[str, str]:
        commands = {}
        for ns in (self.lab.node, self.pod_a, self.pod_b):
            commands[f"{ns} nft"] = ("ip", "netns", "exec", ns, "nft", "list", "ruleset")
            commands[f"{ns} links"] = ("ip", "-n", ns, "link", "show")
            commands[f"{ns} addrs"] = ("ip", "-n", ns, "addr", "show")
            for family in ("-4", "-6"):
                commands[f"{ns} routes{family}"] = ("ip", "-n", ns, family, "route", "show",
                                                    "table", "all")  # fmt: skip
            commands[f"{ns} iptables"] = ("ip", "netns", "exec", ns, "iptables-save")
        with ThreadPoolExecutor(8) as pool:  # independent reads: ~3x faster side by side
            outputs = dict(zip(commands, pool.map(lambda argv: sh(*argv).stdout,
                                                  commands.values()), strict=True))
        state = {key: _stable(key, text) for key, text in outputs.items()}
        with sqlite3.connect(f"file:{self.data / 'podnet.db'}?mode=ro", uri=True) as db:
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
                rows = db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                state[f"db {table}"] = repr(rows)
        state["data dir"] = repr(sorted(p.name for p in self.data.iterdir()))
        return state


def _stable(key: str, text: str) -> str:
    """``text`` without what changes by itself: address lifetimes count down, iptables-save
    dates its output."""
    if key.endswith("addrs"):
        return "\n".join(line for line in text.splitlines() if "valid_lft" not in line)
    if key.endswith("iptables"):
        return "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return text


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    need("root", "ip", "nft")
    lab = Lab()
    w = None
    try:
        w = World(lab, tmp_path_factory.mktemp("injection"))
        yield w
    finally:
        if w is not None:
            w.close()
        lab.close()


def refused_safely(world: World, run: Callable[[], str]) -> str:
    """Run one hostile call (``run`` returns everything it printed or answered) and check
    points 2-4 of the module docstring; returns the output for point 1."""
    before = world.snapshot()
    mark = world.trace.mark()
    output = run()
    logged = world.trace.since(mark)
    assert MARK not in logged, f"a tool was given the hostile value:\n{logged[-2000:]}"
    after = world.snapshot()
    changed = [k for k in before if before[k] != after.get(k)]
    diff = "".join("".join(difflib.unified_diff(before[k].splitlines(True),
                                                after.get(k, "").splitlines(True), k, k))
                   for k in changed)  # fmt: skip
    assert not changed, f"changed: {changed}\n{diff[-3000:]}\n{output[-1500:]}"
    served = world.server_log.read_text(errors="replace")
    for text in (output, logged, served):
        assert world.secret not in text, "a file's content reached an output"
    return output


# -- plugins ------------------------------------------------------------------------------------
def _set(conf: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(conf))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


#: (plugin, verb, which config, path to the field, template with None where the value goes —
#: or None for the value itself —, the field's valid form the hostile values are built on)
PLUGIN_FIELDS: list[tuple[str, str, str, tuple[Any, ...], Any, str]] = [
    ("podnet", "ADD", "ptp", ("dataDir",), None, "/var/lib/podnet"),
    ("podnet", "ADD", "ptp", ("logFile",), None, "/var/log/podnet/podnet.log"),
    ("podnet", "ADD", "ptp", ("ranges", 0), None, "10.245.0.0/24"),
    ("podnet", "ADD", "ptp", ("runtimeConfig",), {"portMappings": [
        {"hostPort": 7070, "containerPort": 80, "hostIP": None}]}, "10.0.0.9"),
    ("podnet", "ADD", "ptp", ("runtimeConfig",), {"ips": [None]}, "10.244.0.77"),
    ("podnet", "ADD", "ptp", ("runtimeConfig",), {"mac": None}, "02:00:00:00:00:01"),
    ("podnet", "ADD", "ptp", ("runtimeConfig",), {"portMappings": [
        {"hostPort": 7070, "containerPort": 80, "protocol": None}]}, "tcp"),
    ("podnet", "ADD", "bridge", ("network",), None, "br0"),
    ("podnet", "ADD", "ptp", ("name",), None, "ptpnet"),
    ("podnet", "ADD", "ptp", ("ipam",), {"type": None}, "host-local"),
    ("podnet", "DEL", "ptp", ("dataDir",), None, "/var/lib/podnet"),
    ("podnet", "CHECK", "ptp", ("prevResult",), {"cniVersion": "1.1.0", "ips": [
        {"address": None}]}, "10.244.0.9/32"),
    ("podnet-portmap", "ADD", "portmap", ("runtimeConfig",), {"portMappings": [
        {"hostPort": 7071, "containerPort": 80, "hostIP": None}]}, "10.0.0.9"),
    ("podnet-portmap", "ADD", "portmap", ("conditionsV4",), [None], "-d"),
    ("podnet-portmap", "ADD", "portmap", ("externalSetMarkChain",), None, "CNI-MARK"),
    ("podnet-portmap", "ADD", "portmap", ("prevResult", "ips", 0, "address"), None,
     "10.244.0.9/24"),
    ("podnet-portmap", "ADD", "portmap", ("dataDir",), None, "/var/lib/podnet"),
    ("podnet-redirect", "ADD", "redirect", ("runtimeConfig", "io.kubernetes.cri.pod-annotations",
                                            "config.linkerd.io/skip-subnets"), None, "10.0.0.0/8"),
    ("podnet-redirect", "ADD", "redirect", ("runtimeConfig", "io.kubernetes.cri.pod-annotations",
                                            "config.linkerd.io/skip-inbound-ports"), None, "4190"),
    ("podnet-redirect", "ADD", "redirect", ("runtimeConfig", "io.kubernetes.cri.pod-annotations",
                                            "config.linkerd.io/proxy-uid"), None, "2102"),
    ("podnet-redirect", "ADD", "redirect", ("subnetsToIgnore",), [None], "10.0.0.0/8"),
    ("podnet-redirect", "ADD", "redirect", ("firewall",), None, "nftables"),
    ("podnet-redirect", "ADD", "redirect", ("linkerd",), {"subnets-to-ignore": [None]},
     "10.0.0.0/8"),
    ("podnet-redirect", "ADD", "redirect", ("linkerd",), {"ports-to-redirect": [None]}, "80"),
    ("podnet-ipam", "ADD", "ipam", ("ipam", "ranges", 0), None, "10.78.0.0/24"),
    ("podnet-ipam", "ADD", "ipam", ("ipam", "routes"), [{"dst": None}], "0.0.0.0/0"),
    ("podnet-ipam", "ADD", "ipam", ("ipam", "routes"), [{"dst": "0.0.0.0/0", "gw": None}],
     "10.78.0.1"),
    ("podnet-ipam", "ADD", "ipam", ("ipam", "dataDir"), None, "/var/lib/podnet"),
]


def _place(template: Any, value: str) -> Any:
    """``template`` with its None replaced by ``value`` (None: ``value`` itself)."""
    if template is None:
        return value
    if isinstance(template, dict):
        return {k: _place(v, value) if v is None or isinstance(v, dict | list) else v
                for k, v in template.items()}  # fmt: skip
    if isinstance(template, list):
        return [_place(v, value) if v is None or isinstance(v, dict | list) else v
                for v in template]  # fmt: skip
    return template


def _plugin_cases() -> list[Any]:
    cases = []
    for n, (plugin, verb, _which, path, _template, base) in enumerate(PLUGIN_FIELDS):
        for label, _ in hostile(Path("/canary"), base):
            field = ".".join(str(p) for p in path)
            cases.append(pytest.param(n, label, id=f"{n}-{plugin}-{verb}-{field}-{label}"))
    return cases


def _check_refused_cni(rc: int, out: bytes) -> None:
    assert rc == 1, out
    answer = json.loads(out)
    assert answer["code"] in BAD_INPUT_CODES, answer
    assert "\n" not in answer["msg"], answer


@pytest.mark.parametrize(("n", "label"), _plugin_cases())
def test_plugin_field(world: World, n: int, label: str) -> None:
    plugin, verb, which, path, template, base = PLUGIN_FIELDS[n]
    value = dict(hostile(world.canary, base))[label]
    conf = {"ptp": world.ptp_conf, "bridge": world.bridge_conf, "portmap": world.portmap_conf,
            "redirect": world.redirect_conf, "ipam": world.ipam_conf}[which]()
    if verb == "CHECK":
        conf["prevResult"] = None
    conf = _set(conf, path, _place(template, value))

    def run() -> str:
        out = world.plugin_raw(plugin, verb, conf, cid="hostile")
        _check_refused_cni(out.returncode, out.stdout)
        return (out.stdout + out.stderr).decode(errors="replace")

    refused_safely(world, run)


#: Labels of values an environment variable or a command-line argument can carry (execve
#: cannot pass NUL, so no caller can send the "nul" value there).
ARG_LABELS = [label for label, value in hostile(Path("/c")) if "\x00" not in value]


@pytest.mark.parametrize("label", ARG_LABELS)
@pytest.mark.parametrize("variable", ["CNI_ARGS IP", "CNI_ARGS MAC", "CNI_NETNS",
                                      "CNI_CONTAINERID"])
def test_plugin_environment(world: World, variable: str, label: str) -> None:
    value = dict(hostile(world.canary))[label]
    env = {"CNI_ARGS": f"IgnoreUnknown=1;{variable.split()[1]}={value}"} if "ARGS" in variable \
        else {"CNI_NETNS": f"/run/netns/{value}"} if variable == "CNI_NETNS" \
        else {"CNI_CONTAINERID": f"c{value}"}

    def run() -> str:
        out = world.plugin_raw("podnet", "ADD", world.ptp_conf(), cid="hostile", env=env)
        _check_refused_cni(out.returncode, out.stdout)
        return (out.stdout + out.stderr).decode(errors="replace")

    refused_safely(world, run)


@pytest.mark.parametrize("label", [label for label, _ in hostile_names(Path("/c"))])
def test_plugin_ifname(world: World, label: str) -> None:
    value = dict(hostile_names(world.canary))[label]

    def run() -> str:
        out = world.plugin_raw("podnet", "ADD", world.ptp_conf(), cid="hostile", ifname=value)
        _check_refused_cni(out.returncode, out.stdout)
        return (out.stdout + out.stderr).decode(errors="replace")

    refused_safely(world, run)


# -- podnetctl ----------------------------------------------------------------------------------
CLI_FIELDS: list[tuple[str, Callable[[str], list[str]]]] = [
    ("data-dir", lambda v: ["list", "--data-dir", f"/var/lib/{v}"]),
    ("network-name", lambda v: ["create", v]),
    ("ipv4.address", lambda v: ["create", "br9", f"ipv4.address={v}/24"]),
    ("ipv6.address", lambda v: ["create", "br9", f"ipv6.address={v}"]),
    ("ipv4.nat.address", lambda v: ["set", "br0", f"ipv4.nat.address={v}"]),
    ("ipv6.nat.address", lambda v: ["set", "br0", f"ipv6.nat.address={v}"]),
    ("bridge.mtu", lambda v: ["set", "br0", f"bridge.mtu={v}"]),
    ("listen_address", lambda v: ["forward", "create", "br0", v]),
    ("target_address", lambda v: ["forward", "create", "br0", "198.51.100.9",
                                  f"target_address={v}"]),
    ("port-target", lambda v: ["forward", "port", "add", "br0", "198.51.100.8", "tcp", "81", v]),
    ("port-listen", lambda v: ["forward", "port", "add", "br0", "198.51.100.8", "tcp", v,
                               "10.0.0.6"]),
    ("port-protocol", lambda v: ["forward", "port", "add", "br0", "198.51.100.8", v, "82",
                                 "10.0.0.6"]),
    ("target-port", lambda v: ["forward", "port", "add", "br0", "198.51.100.8", "tcp", "83",
                               "10.0.0.6", v]),
    ("proxy-init-subnets", lambda v: ["proxy-init", "--firewall", "nftables",
                                      "--subnets-to-ignore", v]),
    ("proxy-init-ports", lambda v: ["proxy-init", "--firewall", "nftables",
                                    "--inbound-ports-to-ignore", v]),
    ("net-port", lambda v: ["net", "add", "ptpnet", "/run/netns/none", "--port", f"{v}:8080:80"]),
]


@pytest.mark.parametrize("label", ARG_LABELS)
@pytest.mark.parametrize("field", [name for name, _ in CLI_FIELDS])
def test_cli_field(world: World, field: str, label: str) -> None:
    value = dict(hostile(world.canary))[label]
    args = dict(CLI_FIELDS)[field](value)
    if args[0] == "proxy-init":
        args = [*args[:1], "--netns", f"/run/netns/{world.pod_b}", *args[1:]]

    def run() -> str:
        out = world.ctl(*args, check=False)
        assert out.returncode in (1, 2), out
        err = out.stderr.decode(errors="replace")
        assert "Error" in err, err
        return err + out.stdout.decode(errors="replace")

    refused_safely(world, run)


@pytest.mark.parametrize("label", [label for label, _ in hostile(Path("/c"))])
@pytest.mark.parametrize("target", ["network", "forward"])
def test_cli_edit_yaml(world: World, target: str, label: str) -> None:
    """``edit`` reads YAML on stdin: a hostile config value there is refused the same way."""
    value = dict(hostile(world.canary))[label]
    if target == "network":
        args = ["edit", "br0"]
        body = {"config": {"ipv4.address": "10.0.0.1/24", "ipv6.address": "fd00:1::1/64",
                           "ipv4.nat": "true", "ipv4.nat.address": value}}
    else:
        args = ["forward", "edit", "br0", "198.51.100.8"]
        body = {"config": {"target_address": value},
                "ports": [{"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.5"}]}

    def run() -> str:
        out = world.ctl(*args, check=False, stdin=json.dumps(body).encode())  # JSON is YAML
        assert out.returncode == 1, out
        err = out.stderr.decode(errors="replace")
        assert err.startswith("Error: "), err
        return err + out.stdout.decode(errors="replace")

    refused_safely(world, run)


# -- the REST API -------------------------------------------------------------------------------
API_FIELDS: list[tuple[str, str, str, Callable[[str], Any]]] = [
    ("network-name", "POST", "/1.0/networks", lambda v: {"name": v, "config": {}}),
    ("ipv4.address", "POST", "/1.0/networks",
     lambda v: {"name": "br8", "config": {"ipv4.address": f"{v}/24"}}),
    ("ipv6.nat.address", "PATCH", "/1.0/networks/br0",
     lambda v: {"config": {"ipv6.nat.address": v}}),
    ("ipv4.nat.address", "PUT", "/1.0/networks/br0",
     lambda v: {"config": {"ipv4.address": "10.0.0.1/24", "ipv6.address": "fd00:1::1/64",
                           "ipv4.nat": "true", "ipv4.nat.address": v}}),
    ("listen_address", "POST", "/1.0/networks/br0/forwards", lambda v: {"listen_address": v}),
    ("target_address", "POST", "/1.0/networks/br0/forwards",
     lambda v: {"listen_address": "198.51.100.9", "config": {"target_address": v}}),
    ("port-target", "PATCH", "/1.0/networks/br0/forwards/198.51.100.8",
     lambda v: {"ports": [{"protocol": "tcp", "listen_port": "80", "target_address": v}]}),
    ("port-listen", "PUT", "/1.0/networks/br0/forwards/198.51.100.8",
     lambda v: {"ports": [{"protocol": "tcp", "listen_port": v, "target_address": "10.0.0.5"}]}),
    ("port-protocol", "PUT", "/1.0/networks/br0/forwards/198.51.100.8",
     lambda v: {"ports": [{"protocol": v, "listen_port": "80", "target_address": "10.0.0.5"}]}),
    ("target-port", "PUT", "/1.0/networks/br0/forwards/198.51.100.8",
     lambda v: {"ports": [{"protocol": "tcp", "listen_port": "80", "target_port": v,
                           "target_address": "10.0.0.5"}]}),
]


@pytest.mark.parametrize("label", [label for label, _ in hostile(Path("/c"))])
@pytest.mark.parametrize("field", [name for name, *_ in API_FIELDS])
def test_api_field(world: World, field: str, label: str) -> None:
    value = dict(hostile(world.canary))[label]
    _, method, url, body = next(f for f in API_FIELDS if f[0] == field)

    def run() -> str:
        payload = json.dumps(body(value)).encode()  # lone surrogates as \\udcff escapes
        r = world.api.request(method, url, content=payload,
                              headers={"Content-Type": "application/json"})
        assert r.status_code in (400, 404, 409), (r.status_code, r.text)
        answer = r.json()
        assert answer["type"] == "error" and answer["error"], answer
        assert "\n" not in answer["error"], answer
        return r.text

    refused_safely(world, run)


def test_world_is_traced(world: World) -> None:
    """The control: a valid change does run tools, and the trace sees them (else every 'no tool
    ran with it' above would hold vacuously)."""
    mark = world.trace.mark()
    world.ctl("forward", "create", "br0", "198.51.100.7")
    world.ctl("forward", "delete", "br0", "198.51.100.7")
    calls = world.trace.calls(mark)
    assert any(c.startswith("CALL nft") for c in calls), calls
    assert "198.51.100.7" in world.trace.since(mark)
