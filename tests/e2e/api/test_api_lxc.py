"""The real ``lxc`` client (Debian lxd-client 5.0.2) manages podnet (the API's promise: "runs
the whole forward lifecycle … with the same outcomes as ``podnetctl network …``, and the forwards
carry real traffic afterwards").

Two nodes side by side: node A runs ``podnetctl serve`` and ``lxc`` talks to it through
``LXD_DIR``; node B gets the same commands from ``podnetctl network`` on a data dir of its own.
Each step must give the same exit status, stdout and stderr on both (and, where lxc's output is
known, exactly that), and afterwards the same forwards, listed by the API, and the same elements
in the kernel's forward maps of both nodes. Pods with the same addresses and container IDs sit on
both bridges; A's pods serve, and a client namespace routed to the listen addresses through A
checks that the forwards carry TCP and UDP, IPv4 and IPv6."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from api_helpers import (
    PODNETCTL,
    ApiServer,
    assert_sync,
    expected_maps,
    kernel_maps,
    lxc,
    lxc_conf,
)
from envgate import need
from netns import NODE_ADDR4, NODE_ADDR6, PLUGIN, PLUGIN_ENV, REFUSED, TIMEOUT, Lab, sh

#: test_01 … test_08 are steps on one module-scoped pair of nodes: one xdist worker, in order.
pytestmark = [pytest.mark.root, pytest.mark.xdist_group("api-lxc")]

A_IP, B_IP = "10.0.0.10", "10.0.0.11"
L4, L6 = "198.51.100.1", "2001:db8:f::1"
#: A listen-range address no test forwards: how traffic to an address without a forward fares.
NEVER = "198.51.100.250"


class Twin:
    """Node A (server + lxc) and node B (podnetctl network), kept in step."""

    def __init__(self, lab: Lab, tmp: Path) -> None:
        self.lab, self.tmp = lab, tmp
        self.node_b = lab.netns("nodeb")
        sh("ip", "-n", self.node_b, "link", "set", "lo", "up")
        self.data_a, self.data_b = tmp / "a", tmp / "b"
        self.data_b.mkdir()
        self.conf = lxc_conf(tmp / "lxc-conf")
        self.client = lab.client()
        sh("ip", "-n", self.client, "route", "add", "198.51.100.0/24", "via", NODE_ADDR4)
        sh("ip", "-n", self.client, "-6", "route", "add", "2001:db8:f::/64", "via", NODE_ADDR6)
        self.pods: dict[str, dict[str, Any]] = {}
        self.server = ApiServer(lab.node, self.data_a, tmp / "logs")  # last: nothing can leak it

    def lxc(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``lxc network ARGS`` against A."""
        return lxc(self.data_a, self.conf, "network", *args, input=input)

    def ctl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = ["ip", "netns", "exec", self.node_b, PODNETCTL, "network", "--data-dir",
                str(self.data_b), "--init", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)

    def both(self, *args: str, stdout: str | None = None, error: str | None = None,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``lxc network ARGS`` on A and ``podnetctl network ARGS`` on B: the same exit status,
        stdout and stderr; ``stdout`` (success) or ``error`` (``Error: <error>``, exit 1) when
        given. Afterwards both hold the same forwards and kernel maps."""
        a = self.lxc(*args, input=input)
        b = self.ctl(*args, input=input)
        where = f"network {' '.join(args)}"
        if error is not None:
            assert (a.returncode, a.stderr) == (1, f"Error: {error}\n"), (where, a)
        else:
            assert a.returncode == 0, (where, a)
            if stdout is not None:
                assert a.stdout == stdout, (where, a.stdout)
        assert (b.returncode, b.stdout, b.stderr) == (a.returncode, a.stdout, a.stderr), (
            where, a, b)
        self.same_state()
        return a

    def forwards(self, data: Path, node: str) -> list[dict[str, Any]]:
        if data == self.data_a:
            with self.server.client() as c:
                r = c.get("/1.0/networks/br0/forwards", params={"recursion": 1})
                return [] if r.status_code == 404 else list(assert_sync(r))
        out = self.ctl("forward", "list", "br0", "-f", "json")
        return json.loads(out.stdout) if out.returncode == 0 else []

    def same_state(self) -> None:
        fa = sorted(self.forwards(self.data_a, self.lab.node), key=lambda f: f["listen_address"])
        fb = sorted(self.forwards(self.data_b, self.node_b), key=lambda f: f["listen_address"])
        assert fa == fb
        ka, kb = kernel_maps(self.lab.node), kernel_maps(self.node_b)
        assert ka == kb == expected_maps(fa), (ka, kb)

    def cni(self, node: str, data: Path, command: str, name: str, ip: str) -> dict[str, Any]:
        conf = {"cniVersion": "1.1.0", "name": "br0-pods", "type": "podnet", "network": "br0",
                "dataDir": str(data)}
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": f"c-{name}",
               "CNI_NETNS": f"/run/netns/{self.pods[name][node]}", "CNI_IFNAME": "eth0",
               "CNI_PATH": "/opt/cni/bin:/usr/lib/cni",
               "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **PLUGIN_ENV}
        if ip:
            env["CNI_ARGS"] = f"IP={ip}"
        argv = ["ip", "netns", "exec", node, "env", "-i",
                *[f"{k}={v}" for k, v in env.items()], PLUGIN]
        proc = subprocess.run(argv, input=json.dumps(conf), capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc
        return json.loads(proc.stdout) if proc.stdout.strip() else {}

    def add_pod(self, name: str, ip: str, ports: tuple[int, ...]) -> None:
        self.pods[name] = {self.lab.node: self.lab.pod(name), self.node_b: self.lab.pod(name + "b")}
        out = self.cni(self.lab.node, self.data_a, "ADD", name, ip)
        self.cni(self.node_b, self.data_b, "ADD", name, ip)
        self.pods[name]["ips"] = {6 if ":" in i["address"] else 4: i["address"].split("/")[0]
                                  for i in out["ips"]}
        for port in ports:
            self.lab.serve(self.pods[name][self.lab.node], name, port)

    def del_pods(self) -> None:
        for name in list(self.pods):
            self.cni(self.lab.node, self.data_a, "DEL", name, "")
            self.cni(self.node_b, self.data_b, "DEL", name, "")
            del self.pods[name]

    def talk(self, proto: str, host: str, port: int) -> str:
        """The name of the pod that answered the client through A ("" when none)."""
        return self.lab.talk(self.client, proto, host, port).split(" ")[0]


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    need("root", "ip", "nft", "lxc")
    lab = Lab()
    t = None
    try:
        t = Twin(lab, tmp_path_factory.mktemp("api-lxc"))
        yield t
        assert t.server.stop() == 0, t.server.stderr()
        assert not t.server.socket.exists()
    finally:
        if t is not None:
            t.server.kill()
        lab.close()


def test_01_first_run_of_lxc(twin: Twin, tmp_path: Path) -> None:
    """With an empty LXD_CONF lxc probes /1.0/projects and writes its config: exit 0."""
    out = lxc(twin.data_a, tmp_path / "fresh", "network", "list")
    assert out.returncode == 0, out
    assert "NAME" in out.stdout and "MANAGED" in out.stdout
    assert "lxd init" not in out.stdout + out.stderr  # the server names a storage
    assert (tmp_path / "fresh" / "config.yml").exists()


def test_02_networks(twin: Twin) -> None:
    twin.both("create", "br0", "ipv4.address=10.0.0.1/24", "ipv6.address=fd00:1::1/64",
              "ipv4.nat=true", "ipv6.nat=true", stdout="Network br0 created\n")
    twin.both("create", "br0", "ipv4.address=10.0.0.1/24", error="The network already exists")
    twin.both("create", "b", error="Network interface is too short (minimum 2 characters)")
    out = twin.both("list")
    assert "| br0  | bridge | YES     | 10.0.0.1/24 | fd00:1::1/64 |             | 0       |" \
        " CREATED |" in out.stdout, out.stdout
    assert twin.both("list", "-f", "csv").stdout == \
        "br0,bridge,YES,10.0.0.1/24,fd00:1::1/64,,0,CREATED\n"
    shown = yaml.safe_load(twin.both("show", "br0").stdout)
    assert shown["config"] == {"ipv4.address": "10.0.0.1/24", "ipv6.address": "fd00:1::1/64",
                               "ipv4.nat": "true", "ipv6.nat": "true"}
    assert shown["managed"] is True and shown["status"] == "Created"
    twin.both("set", "br0", "user.purpose=test", stdout="")
    twin.both("get", "br0", "user.purpose", stdout="test\n")
    twin.both("set", "br0", "user.other", "two words", stdout="")
    twin.both("get", "br0", "user.other", stdout="two words\n")
    twin.both("set", "br0", "ipv4.nat=maybe",
              error='Invalid value for network "br0" option "ipv4.nat": Invalid value for a '
                    'boolean "maybe"')
    twin.both("set", "br0", "bogus=1", error='Invalid option for network "br0" option "bogus"')
    twin.both("unset", "br0", "user.other", stdout="")
    twin.both("get", "br0", "user.other", stdout="")
    assert yaml.safe_load(twin.both("show", "br0").stdout)["config"]["user.purpose"] == "test"
    twin.both("show", "nope", error="Network not found")


def test_03_pods_join_the_bridge(twin: Twin) -> None:
    twin.add_pod("a", A_IP, (80, 8080))
    twin.add_pod("b", B_IP, (80, 81, 53))
    shown = yaml.safe_load(twin.both("show", "br0").stdout)
    assert shown["used_by"] == ["/1.0/instances/c-a", "/1.0/instances/c-b"]


def test_04_forward_create_set_get_unset(twin: Twin) -> None:
    twin.both("forward", "create", "br0", L4, stdout=f"Network forward {L4} created\n")
    twin.both("forward", "create", "br0", "2001:DB8:F::0001",
              stdout=f"Network forward {L6} created\n")  # normalised
    twin.both("forward", "create", "br0", "0.0.0.0",
              error='Failed creating forward: Cannot use unspecified address: "0.0.0.0"')
    twin.both("forward", "create", "br0", L4,
              error="Failed creating forward: A forward for that listen address already exists")
    twin.both("forward", "create", "br0", "198.51.100.2", "target_address=192.0.2.9",
              error="Failed creating forward: Default target address is not within the "
                    "network subnet")
    assert twin.talk("tcp", L4, 80) == TIMEOUT  # no target yet: dropped (LXD's network forwards: unmatched traffic is dropped)
    twin.both("forward", "set", "br0", L4, f"target_address={A_IP}", stdout="")
    twin.both("forward", "get", "br0", L4, "target_address", stdout=f"{A_IP}\n")
    assert twin.talk("tcp", L4, 80) == "a"
    assert twin.talk("udp", L4, 80) == "a"
    twin.both("forward", "set", "br0", L4, "user.owner", "alice", stdout="")
    twin.both("forward", "get", "br0", L4, "user.owner", stdout="alice\n")
    twin.both("forward", "set", "br0", L4, "foo=bar",
              error='Failed updating forward: Invalid option "foo"')
    twin.both("forward", "set", "br0", L4, f"target_address={B_IP}", "user.x=1", stdout="")
    assert twin.talk("tcp", L4, 80) == "b"
    twin.both("forward", "set", "br0", L4, f"target_address={A_IP}", stdout="")
    twin.both("forward", "unset", "br0", L4, "user.x", stdout="")
    twin.both("forward", "get", "br0", L4, "user.x", stdout="")
    twin.both("forward", "unset", "br0", L4, "user.owner", stdout="")
    twin.both("forward", "show", "nope", L4,
              error="Failed loading network: Network not found")
    twin.both("forward", "show", "br0", "198.51.100.99", error="Network forward not found")
    twin.both("forward", "set", "br0", "198.51.100.99", "user.a=1",
              error="Network forward not found")  # lxc reads the forward first
    assert twin.talk("tcp", L4, 80) == "a"


def test_05_forward_ports_add(twin: Twin) -> None:
    b6 = twin.pods["b"]["ips"][6]
    twin.both("forward", "port", "add", "br0", L4, "tcp", "80", A_IP,
              error="Failed updating forward: Target address is same as default target address "
                    "in port specification 0")
    twin.both("forward", "port", "add", "br0", L4, "tcp", "8080", B_IP, "80", stdout="")
    assert twin.talk("tcp", L4, 8080) == "b"
    twin.both("forward", "port", "add", "br0", L4, "tcp", "6000-6001", B_IP, "80-81", stdout="")
    assert twin.talk("tcp", L4, 6000) == "b" and twin.talk("tcp", L4, 6001) == "b"
    twin.both("forward", "port", "add", "br0", L4, "udp", "7000-7002", B_IP, "53", stdout="")
    for port in (7000, 7001, 7002):
        assert twin.talk("udp", L4, port) == "b", port
    twin.both("forward", "port", "add", "br0", L4, "tcp", "9000,9001,9002", B_IP, "80,81",
              error="Failed updating forward: Mismatch of listen port(s) and target port(s) "
                    "count in port specification 3")
    twin.both("forward", "port", "add", "br0", L4, "tcp", "8080", B_IP, "81",
              error='Failed updating forward: Duplicate listen port 8080 for protocol "tcp" in '
                    "port specification 3")
    twin.both("forward", "port", "add", "br0", L4, "udp", "8080", B_IP, "53", stdout="")
    assert twin.talk("udp", L4, 8080) == "b"  # tcp/8080 and udp/8080 coexist
    twin.both("forward", "port", "add", "br0", L6, "tcp", "8080", b6, "81", stdout="")
    assert twin.talk("tcp", L6, 8080) == "b"
    assert twin.talk("tcp", L6, 80) == TIMEOUT  # no default target on the IPv6 forward: dropped
    assert twin.talk("tcp", L4, 80) == "a"  # not a listed port: the default target


def test_06_forward_list_show_edit(twin: Twin) -> None:
    table = twin.both("forward", "list", "br0").stdout
    assert f"| {L4} " in table and f"| {A_IP} " in table
    assert twin.both("forward", "list", "br0", "-f", "csv").stdout.splitlines() == [
        f"{L4},,{A_IP},4", f"{L6},,,1"]
    a = twin.lxc("forward", "list", "br0", "-f", "json")
    b = twin.ctl("forward", "list", "br0", "-f", "json")
    assert a.returncode == b.returncode == 0
    assert json.loads(a.stdout) == json.loads(b.stdout)
    twin.both("forward", "list", "br0", "-f", "yaml")
    shown = twin.both("forward", "show", "br0", L4).stdout
    assert shown.startswith("description: \"\"\nconfig:\n  target_address: 10.0.0.10\nports:\n")
    assert f"listen_address: {L4}\nlocation: " in shown
    assert "  listen_port: \"8080\"\n" in shown  # yaml.v2 quotes number-like strings
    # edit: YAML on stdin (show's output is accepted; listen_address/location are ignored)
    edited = shown.replace('description: ""', "description: edited <by> yaml", 1)
    twin.both("forward", "edit", "br0", L4, input=edited, stdout="")
    after = yaml.safe_load(twin.both("forward", "show", "br0", L4).stdout)
    assert after["description"] == "edited <by> yaml"
    assert after["ports"] == yaml.safe_load(shown)["ports"]
    assert after["config"] == {"target_address": A_IP}
    twin.both("forward", "edit", "br0", L4, input="bogus: 1\n",
              error="yaml: unmarshal errors:\n  line 1: field bogus not found in type "
                    "api.NetworkForward")
    # edit replaces: a document without ports drops them (lxc sends ports: null on PUT)
    doc = yaml.safe_load(shown)
    doc["ports"] = [p for p in doc["ports"] if p["protocol"] == "tcp"] + [
        {"description": "web", "protocol": "udp", "listen_port": "7000-7002",
         "target_address": B_IP, "target_port": "53"}]
    twin.both("forward", "edit", "br0", L4, input=yaml.safe_dump(doc), stdout="")
    assert twin.talk("udp", L4, 8080) == "a"  # udp/8080 gone: the default target
    assert twin.talk("udp", L4, 7001) == "b"
    assert twin.talk("tcp", L4, 8080) == "b"


def test_07_forward_ports_remove(twin: Twin) -> None:
    twin.both("forward", "port", "remove", "br0", L4, "tcp",
              error="Multiple ports match. Use --force to remove them all")
    twin.both("forward", "port", "remove", "br0", L4, "udp", "9999",
              error="No matching port(s) found")
    twin.both("forward", "port", "remove", "br0", L4, "tcp", "6000",
              error="No matching port(s) found")  # exact match: 6000 is not 6000-6001
    twin.both("forward", "port", "remove", "br0", L4, "tcp", "8080", stdout="")
    assert twin.talk("tcp", L4, 8080) == "a"  # the default target took over
    twin.both("forward", "port", "add", "br0", L4, "tcp", "8081", B_IP, "80", stdout="")
    twin.both("forward", "port", "remove", "br0", L4, "tcp", "--force", stdout="")
    ports = yaml.safe_load(twin.both("forward", "show", "br0", L4).stdout)["ports"]
    assert [(p["protocol"], p["listen_port"]) for p in ports] == [("udp", "7000-7002")]
    assert twin.talk("tcp", L4, 8081) == REFUSED  # to pod a, which does not listen there
    assert twin.talk("udp", L4, 7000) == "b"
    twin.both("forward", "port", "remove", "br0", L6, stdout="")  # no filter: the only one
    assert yaml.safe_load(twin.both("forward", "show", "br0", L6).stdout)["ports"] == []
    assert twin.talk("tcp", L6, 8080) == TIMEOUT  # no port, no default target: dropped


def test_08_delete(twin: Twin) -> None:
    twin.both("forward", "delete", "br0", L4, stdout=f"Network forward {L4} deleted\n")
    # like an address that never had a forward (the node routes it back to the client: a loop
    # until the TTL runs out), and its drop is gone from the kernel (checked below)
    assert twin.talk("tcp", L4, 80) == twin.talk("tcp", NEVER, 80) == TIMEOUT
    twin.both("forward", "delete", "br0", L4,
              error="Failed deleting forward: Network forward not found")
    twin.both("forward", "rm", "br0", L6, stdout=f"Network forward {L6} deleted\n")
    assert twin.both("forward", "list", "br0", "-f", "csv").stdout == ""
    twin.both("forward", "create", "br0", "198.51.100.3", f"target_address={B_IP}",
              stdout="Network forward 198.51.100.3 created\n")
    assert twin.talk("tcp", "198.51.100.3", 81) == "b"
    twin.both("delete", "br0", error="The network is currently in use by c-a, c-b")
    twin.del_pods()
    twin.both("delete", "br0", stdout="Network br0 deleted\n")  # its forwards go with it
    for node in (twin.lab.node, twin.node_b):
        assert twin.lab.exec(node, "ip", "link", "show", "br0", check=False).returncode != 0
    assert kernel_maps(twin.lab.node) == kernel_maps(twin.node_b) == expected_maps([])
    assert twin.talk("tcp", "198.51.100.3", 81) == twin.talk("tcp", NEVER, 81) == TIMEOUT
    twin.both("list", "-f", "csv", stdout="")
    twin.both("delete", "br0", error="Failed loading network: Network not found")
