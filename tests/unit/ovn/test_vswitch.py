"""The node's Open vSwitch through :mod:`podnet.ovn.vswitch`, without OVS: the ``ovs-vsctl``
command lines it runs (ovs-vsctl(8)), what it refuses to put on one, and that no other module
of ``src/`` runs ``ovs-vsctl``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from podnet import proc
from podnet.errors import InvalidConfig
from podnet.ovn import vswitch

SRC = Path(__file__).resolve().parents[3] / "src" / "podnet"
#: Modules still allowed to run ``ovs-vsctl`` themselves: the demo lab builds whole nodes'
#: OVS (bridges, ``external_ids``), no part of podnet's own path.
KNOWN = {Path("cli/demo/ovnlab.py")}


class Spawns:
    """Stands in for :mod:`podnet.proc`: records each command line, answers ``(rc, out)``."""

    def __init__(self, rc: int = 0, out: str = "") -> None:
        self.argv: list[list[str]] = []
        self.rc, self.out = rc, out

    def run(self, argv: list[str], *_: Any, **__: Any) -> str:
        self.argv.append(list(argv))
        return self.out

    def spawn(self, argv: list[str], *_: Any, **__: Any) -> Any:
        self.argv.append(list(argv))
        answer = (self.rc, self.out, "")
        return type("Spawned", (), {"wait": lambda _self: answer})()


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> Spawns:
    fake = Spawns()
    monkeypatch.setattr(proc, "run", fake.run)
    monkeypatch.setattr(proc, "spawn", fake.spawn)
    return fake


def test_command_lines(spawns: Spawns) -> None:
    owner = "podnet:/var/lib/podnet"
    vswitch.add_port("br-int", "pn0123456789abc", {"iface-id": "pn-n-pod-1", "podnet-owner": owner})
    vswitch.add_port("br-int", "pnm0123", {"iface-id": "pn-n-mgmt-1"}, internal=True)
    vswitch.del_port("pn0123456789abc", "br-int")
    vswitch.del_port("pnm0123")
    vswitch.del_port("patch-pnu1234abcd-to-br-int", "pnu1234abcd")  # ovn-controller's, not a link
    vswitch.add_bridge("pnu1", "netdev", "eth1")
    vswitch.del_bridge("pnu1")
    t = "--timeout=10"
    assert spawns.argv == [
        ["ovs-vsctl", t, "--may-exist", "add-port", "br-int", "pn0123456789abc", "--", "set",
         "Interface", "pn0123456789abc", "external_ids:iface-id=pn-n-pod-1",
         f"external_ids:podnet-owner={owner}"],
        ["ovs-vsctl", t, "--may-exist", "add-port", "br-int", "pnm0123", "--", "set",
         "Interface", "pnm0123", "type=internal", "external_ids:iface-id=pn-n-mgmt-1"],
        ["ovs-vsctl", t, "--if-exists", "del-port", "br-int", "pn0123456789abc"],
        ["ovs-vsctl", t, "--if-exists", "del-port", "pnm0123"],
        ["ovs-vsctl", t, "--if-exists", "del-port", "pnu1234abcd", "patch-pnu1234abcd-to-br-int"],
        ["ovs-vsctl", t, "--may-exist", "add-br", "pnu1", "--", "set", "bridge", "pnu1",
         "datapath_type=netdev", "--", "--may-exist", "add-port", "pnu1", "eth1"],
        ["ovs-vsctl", t, "--if-exists", "del-br", "pnu1"],
    ]  # fmt: skip


def test_questions_answer_none_when_ovs_says_no(spawns: Spawns) -> None:
    spawns.out = "eth1\npatch-x\n"
    assert vswitch.list_ports("pnu1") == ["eth1", "patch-x"]
    assert vswitch.bridge_exists("pnu1") is True
    assert vswitch.bridge_of("eth1") == "eth1\npatch-x"
    spawns.rc = 2
    assert vswitch.list_ports("pnu1") is None
    assert vswitch.bridge_exists("pnu1") is False
    assert vswitch.bridge_of("eth1") is None
    assert vswitch.patch_ports() == []
    assert spawns.argv[-1] == ["ovs-vsctl", "--timeout=10", "--bare", "--columns=name", "find",
                               "Interface", "type=patch"]  # fmt: skip


@pytest.mark.parametrize(
    "call",
    [
        lambda: vswitch.add_port("br-int", "-x", {}),
        lambda: vswitch.add_port("br int", "pn0", {}),
        lambda: vswitch.add_port("br-int", "pn0", {"iface-id": "a b"}),
        lambda: vswitch.add_port("br-int", "pn0", {"iface-id": ""}),
        lambda: vswitch.add_port("br-int", "pn0", {"iface-id": 'a"b'}),
        lambda: vswitch.add_port("br-int", "pn0", {"k=v": "x"}),
        lambda: vswitch.add_port("br-int", "pn0", {"a:b": "x"}),
        lambda: vswitch.del_port("eth0", "--all"),
        lambda: vswitch.del_port("a/b"),
        lambda: vswitch.del_port("a" * 256),
        lambda: vswitch.add_bridge("pnu1", "system -- del-br br-int", "eth1"),
        lambda: vswitch.del_bridge("br-int;"),
        lambda: vswitch.bridge_of("--help"),
        lambda: vswitch.list_ports(""),
        lambda: vswitch.wait_installed("-x", "p", 0.0),
    ],
)
def test_refuses_what_ovs_vsctl_would_read_otherwise(spawns: Spawns, call: Any) -> None:
    """A name that is not an interface name, or an ``external_ids`` word that is not plain, is
    refused (7) before any command runs: ``ovs-vsctl`` would read it as an option, another
    argument or a ``key=value`` pair."""
    with pytest.raises(InvalidConfig):
        call()
    assert spawns.argv == []


def _strings_outside_docstrings(tree: ast.AST) -> list[tuple[int, str]]:
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]  # fmt: skip


def test_ovs_vsctl_runs_only_from_vswitch() -> None:
    """No module but ``ovn/vswitch.py`` (and :data:`KNOWN`) has ``ovs-vsctl`` in a string that
    is not a docstring: a command line is a string. Comments and docstrings may name it."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel == Path("ovn/vswitch.py") or rel in KNOWN:
            continue
        for line, text in _strings_outside_docstrings(ast.parse(path.read_text())):
            if "ovs-vsctl" in text:
                found.append(f"{rel}:{line}")
    assert found == []
    assert all((SRC / k).exists() for k in KNOWN), "a known exception is gone: drop it"
