"""Helpers for the podnet-portmap iptables tests (tests/e2e/portmap/test_portmap_iptables_e2e.py).

- CNI calls into any node namespace (the reference ptp/bridge/host-local/portmap and
  podnet-portmap), one at a time or as parallel processes;
- PATH directories: one whose iptables tools are the ``-legacy`` or ``-nft`` variant (so both
  plugins and the test's own ``*-save`` use the same rule set), one whose firewall tools only
  record that they were run;
- ``iptables-save`` text without its comments and counters;
- :func:`as_saved`: what ``iptables-save -t nat`` prints after ``iptables-restore`` scripts are
  applied to an empty table (for the golden teardown inputs; checked against the kernel).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from netns import PLUGIN_ENV, VENV_BIN, Lab, sh

PODNET_PORTMAP = str(VENV_BIN / "podnet-portmap")
#: The store podnet-portmap records its hostPorts in during the tests — never the machine's
#: /var/lib/podnet: one private directory for the session, removed at its end.
PORTMAP_DATA = tempfile.mkdtemp(prefix="podnet-portmap-test-")
atexit.register(shutil.rmtree, PORTMAP_DATA, True)
REF_DIR = Path("/usr/lib/cni")
REF_PORTMAP = str(REF_DIR / "portmap")
REF_PTP = str(REF_DIR / "ptp")
REF_BRIDGE = str(REF_DIR / "bridge")
SBIN = "/usr/sbin"
BASE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

V4_SUBNET, V6_SUBNET = "10.1.0.0/24", "fd00:1::/64"
TOP_CHAINS = ("CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK")
BUILTIN = ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")
FIREWALL_TOOLS = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save",
                  "ip6tables-restore", "iptables-nft", "iptables-legacy", "nft", "conntrack")


# --- PATH directories -----------------------------------------------------------------------


def iptables_path(directory: Path, variant: str) -> str:
    """A PATH whose ``ip(6)tables[-save|-restore]`` are the ``variant`` ("nft" | "legacy")
    binaries: the multi-call binary picks the family and tool from argv[0]'s basename, and the
    rule set (nf_tables or legacy xtables) from which binary it is."""
    directory.mkdir(parents=True, exist_ok=True)
    for fam in ("iptables", "ip6tables"):
        os.symlink(f"{SBIN}/{fam}-{variant}", directory / fam)
        for tool in ("save", "restore"):
            os.symlink(f"{SBIN}/{fam}-{variant}-{tool}", directory / f"{fam}-{tool}")
    return f"{directory}:{BASE_PATH}"


def recording_path(directory: Path) -> tuple[str, Path]:
    """A PATH whose firewall tools append their argv to a log and fail; ``(PATH, log)``."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "calls.log"
    log.write_text("")
    for tool in FIREWALL_TOOLS:
        script = directory / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexit 97\n')
        script.chmod(0o755)
    return f"{directory}:{BASE_PATH}", log


# --- CNI calls ------------------------------------------------------------------------------


def cni_argv(node: str, command: str, plugin: str, *, container_id: str, netns: str | None,
             ifname: str = "eth0", path: str = BASE_PATH) -> list[str]:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": f"/run/netns/{netns}" if netns else "",
        "CNI_IFNAME": ifname,
        "CNI_PATH": str(REF_DIR),
        "PATH": path,
        **PLUGIN_ENV,
    }
    return ["ip", "netns", "exec", node, "env", "-i", *[f"{k}={v}" for k, v in env.items()], plugin]


def _parse(out: str) -> Any:
    out = out.strip()
    return json.loads(out) if out else None


def cni(node: str, command: str, conf: dict[str, Any], plugin: str, *, container_id: str,
        netns: str | None = None, ifname: str = "eth0", path: str = BASE_PATH,
        timeout: float = 60) -> tuple[int, Any]:
    """One plugin call in ``node``: ``(exit status, parsed stdout or None)``."""
    argv = cni_argv(node, command, plugin, container_id=container_id, netns=netns,
                    ifname=ifname, path=path)
    proc = subprocess.run(argv, input=json.dumps(conf), capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, _parse(proc.stdout)


Call = tuple[str, str, dict[str, Any], str, str, "str | None"]  # node, command, conf, plugin, cid, netns


def cni_parallel(calls: list[Call], *, path: str = BASE_PATH,
                 timeout: float = 120) -> list[tuple[int, Any, str]]:
    """Start one process per ``(node, command, conf, plugin, container_id, netns)`` before
    waiting for any; ``(exit status, parsed stdout, stderr)`` of each, in order. Processes
    still running at the deadline are killed."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for ns, command, conf, plugin, cid, netns in calls:
            argv = cni_argv(ns, command, plugin, container_id=cid, netns=netns, path=path)
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(conf))  # all inputs given before any output is read
            proc.stdin.close()
            proc.stdin = None  # so communicate() only reads
        out = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout)
            out.append((proc.returncode, _parse(stdout), stderr))
        return out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# --- configurations ---------------------------------------------------------------------------


def ipam(data_dir: Path, families: str) -> dict[str, Any]:
    """host-local with a private dataDir (a fresh one per node gives every node the same
    addresses in the same order)."""
    ranges, routes = [], []
    if "4" in families:
        ranges.append([{"subnet": V4_SUBNET}])
        routes.append({"dst": "0.0.0.0/0"})
    if "6" in families:
        ranges.append([{"subnet": V6_SUBNET}])
        routes.append({"dst": "::/0"})
    return {"type": "host-local", "dataDir": str(data_dir), "ranges": ranges, "routes": routes}


def ptp_conf(data_dir: Path, families: str = "46", name: str = "mynet") -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "type": "ptp", "ipam": ipam(data_dir, families)}


def bridge_conf(data_dir: Path, families: str = "46", name: str = "mynet") -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": "cni-pm0",
            "isGateway": True, "hairpinMode": True, "ipam": ipam(data_dir, families)}


def portmap_conf(kind: str, prev: dict[str, Any] | None, mappings: list[dict[str, Any]] | None,
                 name: str = "mynet", **options: Any) -> dict[str, Any]:
    """A chained portmap config: ``kind`` "portmap" (reference) or "podnet-portmap"."""
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": name, "type": kind,
                            "capabilities": {"portMappings": True}, **options}
    if kind == "podnet-portmap":
        conf.setdefault("dataDir", PORTMAP_DATA)
    if prev is not None:
        conf["prevResult"] = prev
    if mappings is not None:
        conf["runtimeConfig"] = {"portMappings": mappings}
    return conf


def tcp(host_port: int, container_port: int = 80, host_ip: str = "") -> dict[str, Any]:
    m: dict[str, Any] = {"hostPort": host_port, "containerPort": container_port, "protocol": "tcp"}
    if host_ip:
        m["hostIP"] = host_ip
    return m


def udp(host_port: int, container_port: int = 80, host_ip: str = "") -> dict[str, Any]:
    return {**tcp(host_port, container_port, host_ip), "protocol": "udp"}


# --- reading the nat table ------------------------------------------------------------------


def save_tool(family: int) -> str:
    return "ip6tables-save" if family == 6 else "iptables-save"


def normalized(text: str) -> list[str]:
    """iptables-save text without comments and chain counters (``:X ACCEPT [3:180]`` →
    ``:X ACCEPT``)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith(":"):
            line = line.rsplit(" [", 1)[0]
        out.append(line)
    return out


def nat_lines(node: str, family: int, path: str) -> list[str]:
    """``ip(6)tables-save -t nat`` in ``node`` with the tools of ``path``, :func:`normalized`."""
    argv = ["ip", "netns", "exec", node, "env", f"PATH={path}", save_tool(family), "-t", "nat"]
    return normalized(sh(*argv, timeout=30).stdout)


def diff(expected: list[str], got: list[str]) -> str:
    """A unified diff for assertion messages."""
    import difflib

    return "\n".join(difflib.unified_diff(expected, got, "expected", "got", lineterm=""))


def entry_order_free(lines: list[str]) -> list[str]:
    """``lines`` with the CNI-HOSTPORT-DNAT rules grouped per container chain (their order
    within one container kept): the order of different containers' entry rules is the order of
    their last ADD, which the reference does not change on a repeated ADD."""
    entries = [line for line in lines if line.startswith("-A CNI-HOSTPORT-DNAT ")]
    grouped = sorted(entries, key=lambda line: line.rsplit(" -j ", 1)[-1])
    it = iter(grouped)
    return [next(it) if line.startswith("-A CNI-HOSTPORT-DNAT ") else line for line in lines]


def user_chains(lines: list[str]) -> list[str]:
    return [line[1:].split(" ")[0] for line in lines
            if line.startswith(":") and line[1:].split(" ")[0] not in BUILTIN]


def rules_of(lines: list[str], chain: str) -> list[str]:
    prefix = f"-A {chain} "
    return [line[len(prefix):] for line in lines if line.startswith(prefix)]


def only_top_level(lines: list[str]) -> list[str]:
    """What is left that is not a top-level chain or a jump into one (empty: clean)."""
    left = []
    for line in lines:
        if line.startswith(":"):
            name = line[1:].split(" ")[0]
            if name not in BUILTIN and name not in TOP_CHAINS:
                left.append(line)
        elif line.startswith("-A "):
            chain = line.split(" ")[1]
            target = line.rsplit(" -j ", 1)[-1].split(" ")[0]
            if chain in TOP_CHAINS and chain != "CNI-HOSTPORT-DNAT":
                continue  # SETMARK's MARK rule, MASQ's MASQUERADE rule
            if chain in BUILTIN and target in TOP_CHAINS:
                continue
            left.append(line)
    return left


# --- a model of iptables-save, for the golden inputs -----------------------------------------


def as_saved(*scripts: str, extra_chains: tuple[str, ...] = ()) -> str:
    """``iptables-save -t nat`` after applying ``iptables-restore --noflush`` ``scripts`` (as
    generated by podnet: chain declarations, ``-A``, ``-I CHAIN 1``, ``-D``, ``-F``, ``-X``) to
    an empty table: built-in chains first, user chains sorted, rules grouped by chain."""
    chains: dict[str, list[str]] = {c: [] for c in BUILTIN}
    for name in extra_chains:
        chains.setdefault(name, [])
    for script in scripts:
        for line in script.splitlines():
            if line.startswith(":"):
                chains[line[1:].split(" ")[0]] = []  # declaring flushes
            elif line.startswith("-A "):
                _, chain, rule = line.split(" ", 2)
                chains[chain].append(rule)
            elif line.startswith("-I "):
                _, chain, pos, rule = line.split(" ", 3)
                chains[chain].insert(int(pos) - 1, rule)
            elif line.startswith("-D "):
                _, chain, rule = line.split(" ", 2)
                chains[chain].remove(rule)
            elif line.startswith("-F "):
                chains[line.split(" ")[1]] = []
            elif line.startswith("-X "):
                del chains[line.split(" ")[1]]
    order = list(BUILTIN) + sorted(c for c in chains if c not in BUILTIN)
    out = ["*nat"]
    out += [f":{c} ACCEPT [0:0]" if c in BUILTIN else f":{c} - [0:0]" for c in order]
    out += [f"-A {c} {r}" for c in order for r in chains[c]]
    return "\n".join([*out, "COMMIT", ""])


# --- namespaces -------------------------------------------------------------------------------


def no_dad(lab: Lab, ns: str) -> None:
    """No IPv6 duplicate address detection in ``ns``: ptp and bridge wait for tentative
    addresses to settle (about 2 s a call) otherwise."""
    for scope in ("all", "default"):
        lab.exec(ns, "sysctl", "-qw", f"net.ipv6.conf.{scope}.accept_dad=0")


def node(lab: Lab, role: str = "node2") -> str:
    """Another node namespace in ``lab`` (loopback up, no DAD); torn down with the lab."""
    name = lab.netns(role)
    lab.exec(name, "ip", "link", "set", "lo", "up")
    no_dad(lab, name)
    return name


def pod(lab: Lab, role: str = "pod") -> str:
    name = lab.pod(role)
    no_dad(lab, name)
    return name
