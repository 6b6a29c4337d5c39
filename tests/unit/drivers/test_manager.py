""":mod:`podnet.manage.manager` loads and dispatches: no branch on the kind of network (a
``.cluster`` attribute, an NB connection tested against None, a type's name), no backend's work
of its own. Where a network is kept is its type's (:attr:`podnet.drivers.network.NetworkType.
backend`) and the backend's (:mod:`podnet.drivers.local`, :mod:`podnet.drivers.ovn.cluster_backend`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labnet_driver import LabNetDriver
from podnet import drivers
from podnet.drivers.local import LocalBackend
from podnet.drivers.network import CLUSTER, LOCAL
from podnet.manage import manager
from podnet.networks.errors import NetworkError

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
    assert not {"podnet.drivers.ovn.cluster", "podnet.drivers.ovn.forwards",
                "podnet.reconcile", "podnet.drivers.ovn.bridge_uplink"} & imported  # fmt: skip


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


class _NoForwards(LabNetDriver):
    """A node network type without forwards."""

    type = "labnoforward"
    has_forwards = False


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's types registered in this process only for the test."""
    monkeypatch.setattr(drivers, "_loaded", dict(drivers._loaded))
    monkeypatch.setattr(drivers, "_registered", set(drivers._registered))
    drivers.register(LabNetDriver.type, LabNetDriver())
    drivers.register(_NoForwards.type, _NoForwards())


def _manager(tmp_path: Path) -> manager.Manager:
    """A manager whose store holds network ``lab0`` (labnet) and ``bare0`` (no forwards),
    recorded as rows (no kernel involved)."""
    m = manager.Manager(str(tmp_path), create=True)
    with m.store() as store, store.write():
        store.networks.insert("lab0", "labnet", "", {"ipv4.address": "10.78.0.1/24"})
        store.networks.insert("bare0", "labnoforward", "", {"ipv4.address": "10.79.0.1/24"})
    return m


@pytest.mark.usefixtures("registry")
def test_a_type_says_whether_it_has_forwards(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    assert m.list_forwards("lab0") == []
    with pytest.raises(NetworkError) as refused:
        m.list_forwards("bare0")
    assert (refused.value.status, str(refused.value)) == (
        400, 'Network "bare0" of type labnoforward has no forwards')  # fmt: skip
    with pytest.raises(NetworkError, match="has no forwards"):
        m.delete_forward("bare0", "192.0.2.1")
    with pytest.raises(NetworkError) as missing:
        m.list_forwards("nowhere")
    assert (missing.value.status, str(missing.value)) == (
        404, "Failed loading network: Network not found")  # fmt: skip


@pytest.mark.usefixtures("registry")
def test_registered_types_are_listed_and_loaded(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    shown = {n.name: (n.type, n.status, n.config) for n in m.list_networks()}
    assert shown == {"bare0": ("labnoforward", "Created", {"ipv4.address": "10.79.0.1/24"}),
                     "lab0": ("labnet", "Created", {"ipv4.address": "10.78.0.1/24"})}  # fmt: skip
    net = m.load("lab0")
    assert isinstance(net.backend, LocalBackend) and net.row is not None
    assert net.driver.type == "labnet"
    assert "labnet" in drivers.types()


def test_a_type_naming_no_backend_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Elsewhere(LabNetDriver):
        type = "labelsewhere"
        backend = "elsewhere"

    monkeypatch.setattr(drivers, "_loaded", dict(drivers._loaded))
    monkeypatch.setattr(drivers, "_registered", set(drivers._registered))
    drivers.register(Elsewhere.type, Elsewhere())
    m = manager.Manager(str(tmp_path), create=True)
    with pytest.raises(NetworkError) as refused:
        m.create_network("far0", type="labelsewhere", config={"ipv4.address": "10.80.0.1/24"})
    assert (refused.value.status, str(refused.value)) == (
        400, "Network type labelsewhere names an unknown backend 'elsewhere'")  # fmt: skip
    with m.store() as store:
        assert store.networks.get("far0") is None
