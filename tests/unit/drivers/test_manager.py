""":mod:`podnet.drivers.manager` loads and dispatches: no branch on the kind of network (a
``.cluster`` attribute, an NB connection tested against None, a type's name), no backend's work
of its own. Where a network is kept is its type's (:attr:`podnet.drivers.network.NetworkType.
backend`) and the backend's (:mod:`podnet.drivers.local`, :mod:`podnet.drivers.cluster_backend`)."""

from __future__ import annotations

import ast
from pathlib import Path

from podnet import drivers
from podnet.drivers import manager
from podnet.drivers.local import LocalBackend
from podnet.drivers.network import CLUSTER, LOCAL

SOURCE = Path(manager.__file__).read_text()
TREE = ast.parse(SOURCE)


def test_no_attribute_says_which_kind_of_network() -> None:
    read = sorted({n.attr for n in ast.walk(TREE) if isinstance(n, ast.Attribute)})
    assert not {"cluster", "nb", "_nb", "_cluster_nb", "_forwards_nb"} & set(read), read


def test_no_none_test_of_a_connection() -> None:
    found = []
    for node in ast.walk(TREE):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Is | ast.IsNot)
                                                 for op in node.ops):  # fmt: skip
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names & {"nb", "ovsdb"}:
                found.append(ast.unparse(node))
    assert found == []


def test_no_network_type_named() -> None:
    """No type's name in the code (``create_network``'s default ``type="bridge"``, LXD's
    default, aside)."""
    defaults = {id(d) for f in ast.walk(TREE) if isinstance(f, ast.FunctionDef)
                for d in f.args.kw_defaults if d is not None}  # fmt: skip
    strings = {n.value for n in ast.walk(TREE) if isinstance(n, ast.Constant)
               and isinstance(n.value, str) and id(n) not in defaults}  # fmt: skip
    assert not {"bridge", "ptp", "ovn", "physical"} & strings
    imported = {n.module for n in ast.walk(TREE) if isinstance(n, ast.ImportFrom)}
    assert not {"podnet.drivers.cluster", "podnet.drivers.cluster_forwards",
                "podnet.reconcile", "podnet.drivers.bridge_uplink"} & imported  # fmt: skip


def test_each_builtin_type_names_its_backend() -> None:
    kinds = {kind: drivers.get(kind).backend for kind in drivers.BUILTIN}
    assert kinds == {"ptp": LOCAL, "bridge": LOCAL, "delegated": LOCAL, "physical": CLUSTER,
                     "ovn": CLUSTER}  # fmt: skip
    assert not drivers.get("physical").has_forwards and drivers.get("ovn").has_forwards


def test_an_unknown_name_loads_as_the_stores(tmp_path: Path) -> None:
    """With no NB set and no such row, a name is the node store's: its operations answer 404
    with their own words."""
    m = manager.Manager(str(tmp_path), create=True)
    net = m.load("nowhere")
    assert isinstance(net.backend, LocalBackend) and net.row is None
    assert list(m.backends) == [LOCAL, CLUSTER]
