"""The validation rules of network forwards and of bridge network config through ``podnetctl
network …`` in a node namespace, each with its exact message (LXD 5.0.2's where LXD has one:
``forwardValidate`` in lxd/network/driver_common.go, the bridge driver's ``Validate``, and what
``lxc`` 5.0.2 printed; podnet's own for subnet overlaps and hostPort clashes): ``Error:
<message>`` on stderr and exit 1, and every refusal leaves the database (``network list`` /
``forward list -f json``), the node's bridges and table ``inet podnet`` exactly as they were.
The pure rules are tests/unit/networks/test_forwards.py and test_config.py."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import VENV_BIN, Lab

PODNETCTL = str(VENV_BIN / "podnetctl")

# ------------------------------------------------------------------------------------------------
# Root: podnetctl network … in a node namespace
# ------------------------------------------------------------------------------------------------

N1 = ("n1", "ipv4.address=10.0.0.1/24", "ipv6.address=fd00:1::1/64")
N2 = ("n2", "ipv4.address=10.0.1.1/24", "ipv6.address=fd00:2::1/64", "ipv4.nat=true",
      "ipv4.nat.address=198.51.100.200")  # fmt: skip
# Forwards every refusal case starts from (on n1).
SETUP: list[tuple[str, ...]] = [
    ("create", *N1),
    ("create", *N2),
    ("forward", "create", "n1", "198.51.100.1", "target_address=10.0.0.2"),
    ("forward", "port", "add", "n1", "198.51.100.1", "tcp", "80-81", "10.0.0.3"),
    ("forward", "port", "add", "n1", "198.51.100.1", "tcp", "90", "10.0.0.4"),
    ("forward", "port", "add", "n1", "198.51.100.1", "udp", "53", "10.0.0.3"),
    ("forward", "create", "n1", "2001:db8::1", "target_address=fd00:1::2"),
]


def _strip_handles(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_handles(v) for k, v in value.items() if k != "handle"}
    if isinstance(value, list):
        return [_strip_handles(v) for v in value]
    return value


class Node:
    """A node namespace with its own data dir: ``ctl(…)`` runs ``podnetctl network …`` there;
    ``state()`` is what a refusal must not change."""

    def __init__(self, lab: Lab, data_dir: Path) -> None:
        self.lab = lab
        self.data_dir = data_dir
        self.last: dict[str, Any] | None = None  # state() after the last refusal

    def argv(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.lab.node, PODNETCTL, "network", "--data-dir",
                str(self.data_dir), "--init", *args]  # fmt: skip

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, input="",
                              timeout=60)  # fmt: skip

    def must(self, *args: str) -> str:
        self.last = None
        proc = self.ctl(*args)
        assert proc.returncode == 0, f"network {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def state(self, names: list[str] | None = None) -> dict[str, Any]:
        """Networks, the forwards of each network in ``names`` (default: all), the node's
        bridges and veths, table inet podnet (without handles), and the store's rows of pods,
        hostPorts, forwards and their translations — read side by side."""
        ns = ["ip", "netns", "exec", self.lab.node]
        if names is None:
            listed = self.ctl("list", "-f", "json")
            assert listed.returncode == 0, listed.stderr
            names = [n["name"] for n in json.loads(listed.stdout)]
        cmds: dict[str, list[str]] = {
            "networks": self.argv("list", "-f", "json"),
            "bridges": [*ns, "ip", "-j", "link", "show", "type", "bridge"],
            "veths": [*ns, "ip", "-j", "link", "show", "type", "veth"],
            "nft": [*ns, "nft", "-j", "list", "table", "inet", "podnet"],
        }
        for name in names:
            cmds[f"forwards {name}"] = self.argv("forward", "list", name, "-f", "json")
        procs = {k: subprocess.Popen(v, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k, v in cmds.items()}  # fmt: skip
        out: dict[str, Any] = {}
        for key, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=60)
            if key == "nft" and proc.returncode != 0:
                out[key] = None  # no table
                continue
            assert proc.returncode == 0, f"{key}: {stderr}"
            data = json.loads(stdout or "[]")
            if key in ("bridges", "veths"):
                data = sorted((link["ifname"], link.get("mtu")) for link in data)
            out[key] = _strip_handles(data)
        db = self.data_dir / "podnet.db"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            for table in ("pods", "portmap_entries", "networks_forwards", "forward_dnats"):
                out[f"db {table}"] = sorted(map(repr, conn.execute(f"SELECT * FROM {table}")))
        return out

    def refuse(self, args: tuple[str, ...], message: str, *, prefix: bool = False) -> None:
        """``network <args>`` fails with ``Error: <message>`` and changes nothing."""
        before = self.last or self.state()
        proc = self.ctl(*args)
        after = self.state([n["name"] for n in before["networks"]])
        self.last = after
        shown = f"network {' '.join(args)}"
        assert proc.returncode == 1, f"{shown}: exit {proc.returncode}, {proc.stdout}{proc.stderr}"
        assert proc.stdout == "", f"{shown}: {proc.stdout!r}"
        if prefix:
            assert proc.stderr.startswith(f"Error: {message}"), f"{shown}: {proc.stderr!r}"
        else:
            assert proc.stderr == f"Error: {message}\n", f"{shown}: {proc.stderr!r}"
        changed = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
        assert not changed, f"{shown} was refused but changed {changed}"


def _setup(lab: Lab, data_dir: Path) -> Node:
    node = Node(lab, data_dir)
    for args in SETUP:
        node.must(*args)
    return node


class Shared:
    """The module's node: ``node`` (with ``SETUP`` done) in ``lab``; ``fresh()`` replaces both."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.lab: Lab | None = None
        self._node: Node | None = None

    @property
    def node(self) -> Node:
        if self._node is None:
            self.fresh()
        assert self._node is not None
        return self._node

    def fresh(self) -> None:
        self.close()
        self.lab = Lab()
        self._node = _setup(self.lab, self.factory.mktemp("podnet"))

    def close(self) -> None:
        if self.lab is not None:
            self.lab.close()
            self.lab = None
            self._node = None


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """One node namespace with n1/n2 and their forwards (``SETUP``) for all refusal cases: a
    refusal changes nothing, so they can share it (a case that did change something, or failed
    otherwise, has the next one start on a fresh node). Torn down like the ``lab`` fixture."""
    need("root", "ip", "nft")
    shared = Shared(tmp_path_factory)
    try:
        yield shared
    finally:
        shared.close()


F = ("forward",)
NF = "Network forward not found"
FC, FU = "Failed creating forward: ", "Failed updating forward: "


def _overlap(addr: str, holder: str = "") -> str:
    suffix = "/128" if ":" in addr else "/32"
    text = f'{FC}Forward listen address "{addr}{suffix}" overlaps with another network or NIC'
    return f"{text} ({holder})" if holder else text


CLI_REFUSED: list[tuple[str, tuple[str, ...], str]] = [
    # one forward per listen address
    ("dup-same-network", (*F, "create", "n1", "198.51.100.1"),
     FC + "A forward for that listen address already exists"),
    ("dup-same-network-with-config", (*F, "create", "n1", "198.51.100.1", "target_address=10.0.0.9"),
     FC + "A forward for that listen address already exists"),
    ("dup-same-network-mapped-spelling", (*F, "create", "n1", "::ffff:198.51.100.1"),
     FC + "A forward for that listen address already exists"),
    ("dup-same-network-v6-spelling", (*F, "create", "n1", "2001:DB8:0::0001"),
     FC + "A forward for that listen address already exists"),
    ("dup-other-network", (*F, "create", "n2", "198.51.100.1"), _overlap("198.51.100.1")),
    ("dup-other-network-v6", (*F, "create", "n2", "2001:db8::1"), _overlap("2001:db8::1")),
    # not inside any network's subnet
    ("in-own-subnet", (*F, "create", "n1", "10.0.0.50"),
     _overlap("10.0.0.50", 'network "n1" holds 10.0.0.0/24')),
    ("own-gateway", (*F, "create", "n1", "10.0.0.1"),
     _overlap("10.0.0.1", 'network "n1" holds 10.0.0.0/24')),
    ("own-gateway-v6", (*F, "create", "n1", "fd00:1::1"),
     _overlap("fd00:1::1", 'network "n1" holds fd00:1::/64')),
    ("in-own-subnet-v6", (*F, "create", "n1", "fd00:1::50"),
     _overlap("fd00:1::50", 'network "n1" holds fd00:1::/64')),
    ("in-other-subnet", (*F, "create", "n1", "10.0.1.50"),
     _overlap("10.0.1.50", 'network "n2" holds 10.0.1.0/24')),
    ("other-gateway", (*F, "create", "n1", "10.0.1.1"),
     _overlap("10.0.1.1", 'network "n2" holds 10.0.1.0/24')),
    ("in-other-subnet-v6", (*F, "create", "n1", "fd00:2::7"),
     _overlap("fd00:2::7", 'network "n2" holds fd00:2::/64')),
    ("in-nat-subnet-from-other", (*F, "create", "n2", "10.0.0.7"),
     _overlap("10.0.0.7", 'network "n1" holds 10.0.0.0/24')),
    # listen address and config through the CLI
    ("unspecified", (*F, "create", "n1", "0.0.0.0"), FC + 'Cannot use unspecified address: "0.0.0.0"'),
    ("unspecified-v6", (*F, "create", "n1", "::"), FC + 'Cannot use unspecified address: "::"'),
    ("listen-cidr", (*F, "create", "n1", "198.51.100.5/32"), FC + ('Failed parsing address forward listen address "198.51.100.5/32": '
                                                              "invalid CIDR address: 198.51.100.5/32/32")),
    ("create-bad-key", (*F, "create", "n1", "198.51.100.4", "foo=bar"), FC + 'Invalid option "foo"'),
    ("create-description-key", (*F, "create", "n1", "198.51.100.4", "description=hi"),
     FC + 'Invalid option "description"'),
    ("create-broadcast-target", (*F, "create", "n1", "198.51.100.4", "target_address=10.0.0.255"),
     FC + "Default target address cannot be a broadcast address"),
    ("create-no-equals", (*F, "create", "n1", "198.51.100.4", "user.a"), "Bad key/value pair: user.a"),
    ("create-no-equals-last", (*F, "create", "n1", "198.51.100.4", "target_address=10.0.0.2",
                               "target_address"), "Bad key/value pair: target_address"),
    # unknown network / forward
    ("net-unknown-create", (*F, "create", "n9", "198.51.100.7"), "Failed loading network: Network not found"),
    ("net-unknown-list", (*F, "list", "n9"), "Failed loading network: Network not found"),
    ("net-unknown-show", (*F, "show", "n9", "198.51.100.1"), "Failed loading network: Network not found"),
    ("net-unknown-get", (*F, "get", "n9", "198.51.100.1", "target_address"),
     "Failed loading network: Network not found"),
    ("net-unknown-delete", (*F, "delete", "n9", "198.51.100.1"), "Failed loading network: Network not found"),
    ("net-unknown-port-add", (*F, "port", "add", "n9", "198.51.100.1", "tcp", "80", "10.0.0.3"),
     "Failed loading network: Network not found"),
    ("fwd-unknown-show", (*F, "show", "n1", "198.51.100.9"), NF),
    ("fwd-unknown-show-other-network", (*F, "show", "n2", "198.51.100.1"), NF),
    ("fwd-unknown-get", (*F, "get", "n1", "198.51.100.9", "target_address"), NF),
    ("fwd-unknown-delete", (*F, "delete", "n1", "198.51.100.9"), "Failed deleting forward: " + NF),
    # lxc GETs the forward before set/unset/port add/port remove, so LXD 5.0.2 prints the bare
    # "Network forward not found" for these, as for show and get.
    ("fwd-unknown-set", (*F, "set", "n1", "198.51.100.77", "user.a=1"), NF),
    ("fwd-unknown-unset", (*F, "unset", "n1", "198.51.100.77", "user.a"), NF),
    ("fwd-unknown-port-add", (*F, "port", "add", "n1", "198.51.100.77", "tcp", "80", "10.0.0.9"), NF),
    ("fwd-unknown-port-remove", (*F, "port", "remove", "n1", "198.51.100.77", "tcp"), NF),
    # port remove: exact string match on protocol and listen ports
    ("remove-no-match-in-range", (*F, "port", "remove", "n1", "198.51.100.1", "tcp", "80"),
     "No matching port(s) found"),
    ("remove-no-match-81", (*F, "port", "remove", "n1", "198.51.100.1", "tcp", "81"),
     "No matching port(s) found"),
    ("remove-no-match-upper", (*F, "port", "remove", "n1", "198.51.100.1", "TCP", "80-81"),
     "No matching port(s) found"),
    ("remove-no-match-proto", (*F, "port", "remove", "n1", "198.51.100.1", "sctp"),
     "No matching port(s) found"),
    ("remove-no-match-wrong-proto", (*F, "port", "remove", "n1", "198.51.100.1", "udp", "80-81"),
     "No matching port(s) found"),
    ("remove-no-ports", (*F, "port", "remove", "n1", "2001:db8::1"), "No matching port(s) found"),
    ("remove-no-ports-force", (*F, "port", "remove", "n1", "2001:db8::1", "--force"),
     "No matching port(s) found"),
    ("remove-multiple-proto", (*F, "port", "remove", "n1", "198.51.100.1", "tcp"),
     "Multiple ports match. Use --force to remove them all"),
    ("remove-multiple-all", (*F, "port", "remove", "n1", "198.51.100.1"),
     "Multiple ports match. Use --force to remove them all"),
    # set / unset / get
    ("set-pairs-without-equals", (*F, "set", "n1", "198.51.100.1", "user.e", "5", "user.f", "6"),
     "Invalid key=value configuration: user.e"),
    ("set-key-alone", (*F, "set", "n1", "198.51.100.1", "user.g"), "Invalid key=value configuration: user.g"),
    ("set-bad-key", (*F, "set", "n1", "198.51.100.1", "foo=bar"), FU + 'Invalid option "foo"'),
    ("set-bad-key-kv-form", (*F, "set", "n1", "198.51.100.1", "foo", "bar"), FU + 'Invalid option "foo"'),
    ("set-description", (*F, "set", "n1", "198.51.100.1", "description=hello"),
     FU + 'Invalid option "description"'),
    ("set-target-outside", (*F, "set", "n1", "198.51.100.1", "target_address=10.0.9.9"),
     FU + "Default target address is not within the network subnet"),
    ("set-target-kv-form-invalid", (*F, "set", "n1", "198.51.100.1", "target_address", "010.0.0.3"),
     FU + "Invalid default target address"),
    ("set-target-equal-port-target", (*F, "set", "n1", "198.51.100.1", "target_address=10.0.0.3"),
     FU + "Target address is same as default target address in port specification 0"),
    ("unset-bad-key", (*F, "unset", "n1", "198.51.100.1", "foo"), FU + 'Invalid option "foo"'),
    ("get-bad-key", (*F, "get", "n1", "198.51.100.1", "foo"), 'Invalid option "foo"'),
    ("get-description", (*F, "get", "n1", "198.51.100.1", "description"), 'Invalid option "description"'),
    # port add (the new specification is number 3)
    ("add-dup", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "81", "10.0.0.9"),
     FU + 'Duplicate listen port 81 for protocol "tcp" in port specification 3'),
    ("add-dup-range", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "85-95", "10.0.0.9"),
     FU + 'Duplicate listen port 90 for protocol "tcp" in port specification 3'),
    ("add-target-default", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "10.0.0.2"),
     FU + "Target address is same as default target address in port specification 3"),
    ("add-port-70000", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "70000", "10.0.0.8"),
     FU + "Invalid listen port in port specification 3: Port 70000 is out of range (1-65535)"),
    ("add-port-0", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "0", "10.0.0.8"),
     FU + "Invalid listen port in port specification 3: Port 0 is out of range (1-65535)"),
    ("add-target-port-abc", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "96", "10.0.0.8", "abc"),
     FU + "Invalid target port in port specification 3"),
    ("add-target-port-70000", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "98", "10.0.0.8", "70000"),
     FU + "Invalid target port in port specification 3"),
    ("add-proto-upper", (*F, "port", "add", "n1", "198.51.100.1", "TCP", "100", "10.0.0.8"),
     FU + "Invalid port protocol in port specification 3, protocol must be one of: tcp, udp"),
    ("add-mismatch", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "10.0.0.8", "100-101"),
     FU + "Mismatch of listen port(s) and target port(s) count in port specification 3"),
    ("add-target-family", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "fd00:1::5"),
     FU + "Cannot mix IP versions in listen address and port specification 3 target address"),
    ("add-target-network", (*F, "port", "add", "n1", "198.51.100.1", "tcp", "100", "10.0.0.0"),
     FU + "Target address cannot be a network address"),
    ("add-v6-target-outside", (*F, "port", "add", "n1", "2001:db8::1", "tcp", "80", "fd00:2::3"),
     FU + "Target address is not within the network subnet in port specification 0"),
    # networks
    ("net-exists", ("create", "n1"), "The network already exists"),
    ("net-exists-with-config", ("create", "n1", "ipv4.address=10.0.5.1/24"), "The network already exists"),
    ("net-bad-key", ("create", "n3", "foo=bar"), 'Invalid option for network "n3" option "foo"'),
    ("net-empty-key", ("create", "n3", "=value"), 'Invalid option for network "n3" option ""'),
    ("net-no-equals", ("create", "n3", "key"), "Bad key/value pair: key"),
    ("net-bool", ("create", "n3", "ipv4.nat=maybe"),
     'Invalid value for network "n3" option "ipv4.nat": Invalid value for a boolean "maybe"'),
    ("net-mtu-abc", ("create", "n3", "bridge.mtu=abc"), 'Invalid value for network "n3" option "bridge.mtu": Invalid MTU "abc"'),
    ("net-mtu-low", ("create", "n3", "bridge.mtu=1000"),
     'Invalid value for network "n3" option "bridge.mtu": Out of MTU range (1280-16384) "1000"'),
    ("net-nat-address", ("create", "n3", "ipv4.nat.address=nonsense"),
     'Invalid value for network "n3" option "ipv4.nat.address": Not an IPv4 address "nonsense"'),
    ("net-nat-address-cidr", ("create", "n3", "ipv4.nat.address=10.0.4.1/24"),
     'Invalid value for network "n3" option "ipv4.nat.address": Not an IPv4 address "10.0.4.1/24"'),
    ("net-address-nonsense", ("create", "n3", "ipv4.address=nonsense"),
     'Invalid value for network "n3" option "ipv4.address": invalid CIDR address: nonsense'),
    ("net-address-network", ("create", "n3", "ipv4.address=10.0.4.0/24"),
     'Invalid value for network "n3" option "ipv4.address": Not a usable IPv4 address "10.0.4.0/24"'),
    ("net-address-overlap", ("create", "n3", "ipv4.address=10.0.0.5/24", "ipv6.address=none"),
     'Invalid value for network "n3" option "ipv4.address": subnet 10.0.0.0/24 overlaps network "n1"'),
    ("net-address-overlap-v6", ("create", "n3", "ipv4.address=10.0.3.1/24", "ipv6.address=fd00:2::5/64"),
     'Invalid value for network "n3" option "ipv6.address": subnet fd00:2::/64 overlaps network "n2"'),
    ("net-type", ("create", "n3", "--type", "foo"), "Unknown driver"),
    ("net-name-short", ("create", "a"), "Network interface is too short (minimum 2 characters)"),
    ("net-name-long", ("create", "averyveryverylongnetworkname"),
     "Network interface is too long (maximum 15 characters)"),
    ("net-name-space", ("create", "bad name"), "Network interface contains invalid characters"),
    ("net-name-slash", ("create", "bad/name"), "Network interface contains invalid characters"),
    ("net-set-bool-kv-form", ("set", "n1", "ipv4.nat", "maybe"),
     'Invalid value for network "n1" option "ipv4.nat": Invalid value for a boolean "maybe"'),
    ("net-set-mtu", ("set", "n1", "bridge.mtu=20000"),
     'Invalid value for network "n1" option "bridge.mtu": Out of MTU range (1280-16384) "20000"'),
    ("net-set-pairs-without-equals", ("set", "n1", "user.e", "5", "user.f", "6"),
     "Invalid key=value configuration: user.e"),
    ("net-unset-bad-key", ("unset", "n1", "foo"), 'Invalid option for network "n1" option "foo"'),
    ("net-unknown-get", ("get", "nx", "foo"), "Network not found"),
    ("net-unknown-show", ("show", "nx"), "Network not found"),
    ("net-unknown-set", ("set", "nx", "user.a=1"), "Network not found"),
    ("net-unknown-unset", ("unset", "nx", "user.a"), "Network not found"),
    ("net-unknown-delete", ("delete", "nx"), "Failed loading network: Network not found"),
]


@pytest.mark.root
@pytest.mark.parametrize(("args", "message"), [c[1:] for c in CLI_REFUSED],
                         ids=[c[0] for c in CLI_REFUSED])  # fmt: skip
def test_cli_refused(shared_node: Shared, args: tuple[str, ...], message: str) -> None:
    try:
        shared_node.node.refuse(args, message)
    except BaseException:
        shared_node.close()  # the next case starts from SETUP again
        raise


@pytest.mark.root
def test_cli_refused_other_networks_nat_address(shared_node: Shared) -> None:
    """A listen address may not be another network's SNAT address (LXD counts
    ``ipvN.nat.address`` as an external subnet: ``Forward listen address "…/32" overlaps with
    another network or NIC``). Only LXD's text is required here; podnet may add the holder."""
    try:
        shared_node.node.refuse((*F, "create", "n1", "198.51.100.200"), _overlap("198.51.100.200"),
                                prefix=True)  # fmt: skip
    except BaseException:
        shared_node.close()
        raise


@pytest.fixture
def node(lab: Lab, tmp_path: Path) -> Node:
    return _setup(lab, tmp_path)


@pytest.mark.root
def test_cli_accepts(node: Node) -> None:
    """The accepted counterparts: ``set`` in both forms, ``get`` of set/unset/valid keys,
    ``port remove`` of an exact match, ``unset`` of an absent user key."""
    fw = (*F, "get", "n1", "198.51.100.1")
    assert node.must(*fw, "target_address") == "10.0.0.2\n"
    assert node.must(*fw, "user.none") == ""  # a valid key that is not set: nothing, exit 0
    assert node.must(*F, "set", "n1", "198.51.100.1", "user.k", "v") == ""  # key value
    assert node.must(*fw, "user.k") == "v\n"
    assert node.must(*F, "set", "n1", "198.51.100.1", "user.a=1", "user.b=x=y") == ""
    assert (node.must(*fw, "user.a"), node.must(*fw, "user.b")) == ("1\n", "x=y\n")
    assert node.must(*F, "unset", "n1", "198.51.100.1", "user.zzz") == ""
    assert node.must(*F, "unset", "n1", "198.51.100.1", "user.a") == ""
    assert node.must(*fw, "user.a") == ""
    assert node.must("get", "n1", "foo") == ""  # lxc network get: unknown key prints nothing

    def ports() -> list[tuple[str, str]]:
        shown = json.loads(node.must(*F, "list", "n1", "-f", "json"))
        found = next(f for f in shown if f["listen_address"] == "198.51.100.1")
        return [(p["protocol"], p["listen_port"]) for p in found["ports"]]

    assert ports() == [("tcp", "80-81"), ("tcp", "90"), ("udp", "53")]
    assert node.must(*F, "port", "remove", "n1", "198.51.100.1", "tcp", "80-81") == ""
    assert ports() == [("tcp", "90"), ("udp", "53")]
    assert node.must(*F, "port", "remove", "n1", "198.51.100.1", "udp") == ""
    assert ports() == [("tcp", "90")]
    assert node.must(*F, "port", "remove", "n1", "198.51.100.1", "--force") == ""
    assert ports() == []


# ------------------------------------------------------------------------------------------------
# Root: a forward port and a hostPort never shadow each other, both ways
# ------------------------------------------------------------------------------------------------


def ptp_conf(data_dir: Path, *mappings: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": "kindnet", "type": "podnet",
            "ranges": ["10.244.2.0/24"], "dataDir": str(data_dir),
            "capabilities": {"portMappings": True},
            "runtimeConfig": {"portMappings": list(mappings)}}  # fmt: skip


@pytest.mark.root
def test_hostport_refuses_forward(lab: Lab, tmp_path: Path) -> None:
    """A forward on one of the node's own addresses (here on lo) may not take a hostPort's
    traffic; on an address the node only routes it takes none, and is accepted (hostPorts answer only behind ``fib daddr type local``)."""
    node = Node(lab, tmp_path)
    node.must("create", *N1)
    for local in ("198.51.100.5", "198.51.100.7"):
        lab.exec(lab.node, "ip", "addr", "add", f"{local}/32", "dev", "lo")
    pod = lab.pod()
    rc, res = lab.cni("ADD", ptp_conf(tmp_path,
                                      {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                                      {"hostPort": 8081, "containerPort": 81, "protocol": "tcp",
                                       "hostIP": "198.51.100.7"}),
                      container_id="ctr-a", netns=pod)  # fmt: skip
    assert rc == 0, res
    node.must(*F, "create", "n1", "198.51.100.5")
    shadow = ("Forward {what} on {addr} (an address of this node) would take the traffic of "
              "hostPort tcp/{port} on {where} held by container ctr-a")
    node.refuse((*F, "port", "add", "n1", "198.51.100.5", "tcp", "8080", "10.0.0.4"),
                FU + shadow.format(what="tcp/8080", addr="198.51.100.5", port=8080,
                                   where="any address"))  # fmt: skip
    node.refuse((*F, "port", "add", "n1", "198.51.100.5", "tcp", "8000-8090", "10.0.0.4", "80"),
                FU + shadow.format(what="tcp/8080", addr="198.51.100.5", port=8080,
                                   where="any address"))  # fmt: skip
    # a default target on a node address takes the wildcard hostPort's traffic there too
    node.refuse((*F, "create", "n1", "198.51.100.7", "target_address=10.0.0.4"),
                FC + shadow.format(what="every port", addr="198.51.100.7", port=8080,
                                   where="any address"))  # fmt: skip
    node.must(*F, "create", "n1", "198.51.100.7")
    node.refuse((*F, "port", "add", "n1", "198.51.100.7", "tcp", "8081", "10.0.0.4"),
                FU + shadow.format(what="tcp/8081", addr="198.51.100.7", port=8081,
                                   where="198.51.100.7"))  # fmt: skip
    # Not a clash: another protocol, or the port on another address than the hostPort's.
    node.must(*F, "port", "add", "n1", "198.51.100.5", "udp", "8080", "10.0.0.4")
    node.must(*F, "port", "add", "n1", "198.51.100.5", "tcp", "8081", "10.0.0.4")
    # Not a clash: the wildcard hostPort's port, or a whole address, on an address the node
    # does not own (a wildcard hostPort never answers there).
    node.must(*F, "create", "n1", "198.51.100.9")
    node.must(*F, "port", "add", "n1", "198.51.100.9", "tcp", "8080", "10.0.0.4")
    node.must(*F, "create", "n1", "198.51.100.10", "target_address=10.0.0.4")


@pytest.mark.root
def test_forward_refuses_hostport(lab: Lab, tmp_path: Path) -> None:
    """A hostPort is refused when a forward on one of the node's own addresses takes its
    traffic, not when the forward's listen address is one the node only routes."""
    node = Node(lab, tmp_path)
    node.must("create", *N1)
    for local in ("198.51.100.6", "198.51.100.8"):
        lab.exec(lab.node, "ip", "addr", "add", f"{local}/32", "dev", "lo")
    node.must(*F, "create", "n1", "198.51.100.11")
    node.must(*F, "port", "add", "n1", "198.51.100.11", "tcp", "9191", "10.0.0.5")
    node.must(*F, "create", "n1", "198.51.100.12", "target_address=10.0.0.7")
    node.must(*F, "create", "n1", "198.51.100.6")
    node.must(*F, "port", "add", "n1", "198.51.100.6", "tcp", "9090", "10.0.0.5")
    node.must(*F, "create", "n1", "198.51.100.8", "target_address=10.0.0.6")
    cases = [
        ({"hostPort": 9090, "containerPort": 80, "protocol": "tcp"},
         "hostPort tcp/9090 on 0.0.0.0 is taken by the forward of 198.51.100.6 (an address of "
         "this node) in network n1"),
        ({"hostPort": 9090, "containerPort": 80, "protocol": "tcp", "hostIP": "198.51.100.6"},
         "hostPort tcp/9090 on 198.51.100.6 is taken by the forward of 198.51.100.6 (an address "
         "of this node) in network n1"),
        ({"hostPort": 1234, "containerPort": 80, "protocol": "udp", "hostIP": "198.51.100.8"},
         "hostPort udp/1234 on 198.51.100.8 is taken by the forward of 198.51.100.8 (an address "
         "of this node) in network n1"),
        ({"hostPort": 1235, "containerPort": 80, "protocol": "udp"},
         "hostPort udp/1235 on 0.0.0.0 is taken by the forward of 198.51.100.8 (an address of "
         "this node) in network n1"),
    ]  # fmt: skip
    for i, (mapping, message) in enumerate(cases):
        pod = lab.pod()
        before = node.state()
        rc, res = lab.cni("ADD", ptp_conf(tmp_path, mapping), container_id=f"ctr-{i}", netns=pod)
        after = node.state()
        assert rc != 0 and res is not None, (mapping, rc, res)
        assert (res["code"], res["msg"]) == (101, message), res
        changed = [k for k in before if before[k] != after.get(k)]
        assert not changed, f"refused ADD {mapping} changed {changed}"
        assert lab.exec(pod, "ip", "link", "show", "eth0", check=False).returncode != 0
    # Not a clash once the default target on the node's .8 is gone: udp/9090 on any address,
    # tcp/9090 on another address, and the ports of the forwards on addresses the node only
    # routes (.11 with tcp/9191, .12 whole).
    node.must(*F, "delete", "n1", "198.51.100.8")
    pod = lab.pod()
    rc, res = lab.cni("ADD", ptp_conf(tmp_path,
                                      {"hostPort": 9090, "containerPort": 80, "protocol": "udp"},
                                      {"hostPort": 9090, "containerPort": 80, "protocol": "tcp",
                                       "hostIP": "198.51.100.9"},
                                      {"hostPort": 9191, "containerPort": 80, "protocol": "tcp"},
                                      {"hostPort": 9192, "containerPort": 80, "protocol": "tcp"}),
                      container_id="ctr-ok", netns=pod)  # fmt: skip
    assert rc == 0, res
