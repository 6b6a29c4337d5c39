"""The OVSDB operations podnet sends (:mod:`podnet.ovn.ops`, :mod:`podnet.ovn.builders` and the
modules composing them), without a database: each builder's output has the members RFC 7047
section 5.2 gives its operation, and the transactions the OVN modules compose are, byte for
byte, the ones recorded in ``ovn_wire_golden.json`` (written from podnet's hand-written
operations before the builders replaced them). Rows are read through
:class:`podnet.ovn.row.Row`. And no module of ``src/`` writes an operation object but
:mod:`podnet.ovn.ops`."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from podnet.ovn import builders as b
from podnet.ovn import forward_lbs, orphans, pod_ports, registry, spares, vswitch
from podnet.ovn import nb as nbmod
from podnet.ovn.ops import Op, eq, named, omap, oset, select, uuid, wire
from podnet.ovn.ovsdb import Conflict, Ovsdb
from podnet.ovn.row import Row, pyset

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2] / "src" / "podnet"
GOLDEN = json.loads((HERE / "ovn_wire_golden.json").read_text())

#: RFC 7047 section 5.2: the members each operation has ("row"/"uuid-name" of an insert,
#: "columns" of a select, optional).
MEMBERS = {
    "insert": ({"op", "table", "row"}, {"uuid-name"}),
    "update": ({"op", "table", "where", "row"}, set()),
    "mutate": ({"op", "table", "where", "mutations"}, set()),
    "delete": ({"op", "table", "where"}, set()),
    "select": ({"op", "table", "where"}, {"columns"}),
    "wait": ({"op", "table", "where", "columns", "until", "rows"}, {"timeout"}),
}


def shape_ok(op: dict[str, Any]) -> bool:
    required, optional = MEMBERS[op["op"]]
    keys = set(op)
    return required <= keys <= required | optional


def every_builder_op() -> list[Op]:
    w = [eq("name", "x")]
    return [
        b.switch("ls", "u1", ports=["p1"], other_config={"subnet": "10.0.0.0/24"},
                 external_ids={"k": "v"}),
        b.switch_exists(w, "ls"), b.switch_has_port("ls", "u-1"), b.switch_add_ports(w, ["p1"]),
        b.switch_remove_ports(w, [uuid("u-1")]), b.switch_ports("ls"), b.switch_delete(w),
        b.port("lsp", "p1", addresses="router", external_ids={}, type="router",
               options={"router-port": "lrp"}),
        b.port_update(w, external_ids={"a": "b"}, port_security="0a:00:00:00:00:01 10.0.0.2"),
        b.port_ids(w, ["a"], {"b": "c"}), b.ports_select(w, ["name"]),
        b.ports_are(w, [uuid("u-1")]), b.ports_none(w), b.port_addresses_are(w, "x"),
        b.port_addressed("lsp", 500),
        b.router("lr", "lr", ports=["a"], nat=["n"], static_routes=["r"], external_ids={}),
        b.router_nat(w, ["n"]), b.router_add_routes(w, ["r"]),
        b.router_remove_routes(w, [uuid("u")]), b.router_delete(w),
        b.router_port("lrp", "u", mac="0a:00:00:00:00:01", networks=["10.0.0.1/24"],
                      external_ids={}, ha_chassis_group="g"),
        b.router_port_ungroup(w), b.snat("n", "192.0.2.1", "10.0.0.0/24", {}),
        b.static_route("r", "0.0.0.0/0", "192.0.2.1", {}), b.routes_select(w),
        b.load_balancer("lb", "u", vips={"192.0.2.1:80": "10.0.0.2:80"}, external_ids={},
                        options=omap({}), protocol="tcp"),
        b.attach_load_balancers(b.LR, w, ["u"]), b.load_balancers_options(w, omap({})),
        b.load_balancers_select(w, ["options"]), b.load_balancers_delete(w),
        b.chassis_group("g", "g", members=["h"], external_ids={}), b.ha_chassis("h", "ch", 1),
        b.chassis_group_delete(w), b.named_rows(b.LS, "ls"), b.global_ids_are(omap({})),
        b.global_ids_hold({"a": "b"}), b.global_ids(["a"], {"b": "c"}), b.global_select(),
        b.sb_chassis(), b.sb_datapaths(), *b.vswitch_ids(omap({}), {"a": "b"}),
    ]  # fmt: skip


def test_every_builder_writes_rfc7047_operations() -> None:
    ops = every_builder_op()
    assert {op.op for op in ops} == set(MEMBERS)
    for op in ops:
        assert shape_ok(op.json()), op.json()


def test_builders_write_the_wire_values() -> None:
    assert b.port("lsp", "p1", addresses="0a:00:00:00:00:01 dynamic", external_ids={"z": "1",
                  "a": "2"}, options={"requested-chassis": "ch"}).json() == {
        "op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p1",
        "row": {"name": "lsp", "addresses": "0a:00:00:00:00:01 dynamic",
                "options": ["map", [["requested-chassis", "ch"]]],
                "external_ids": ["map", [["a", "2"], ["z", "1"]]]},
    }  # fmt: skip
    assert b.switch_remove_ports([eq("name", "ls")], [uuid("u-1")]).json() == {
        "op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "ls"]],
        "mutations": [["ports", "delete", ["set", [["uuid", "u-1"]]]]],
    }  # fmt: skip
    assert b.port_addressed("lsp", 250).json() == {
        "op": "wait", "table": "Logical_Switch_Port", "where": [["name", "==", "lsp"]],
        "columns": ["dynamic_addresses"], "until": "!=",
        "rows": [{"dynamic_addresses": ["set", []]}], "timeout": 250,
    }  # fmt: skip
    assert b.global_ids_hold({"podnet:generation": "3"}).json() == {
        "op": "wait", "table": "NB_Global",
        "where": [["external_ids", "includes", ["map", [["podnet:generation", "3"]]]]],
        "columns": [], "until": "==", "rows": [{}], "timeout": 0,
    }  # fmt: skip
    assert b.router_port_ungroup([]).json()["row"] == {"ha_chassis_group": ["set", []]}
    assert b.load_balancer("lb", "u", vips={}, external_ids={}, options=omap({})).json()[
        "row"
    ].keys() == {"name", "vips", "external_ids", "options"}  # no protocol: portless
    assert select(b.LS).json() == {"op": "select", "table": "Logical_Switch", "where": []}
    assert named("x") == ["named-uuid", "x"] and oset([1]) == ["set", [1]]
    assert wire([b.ports_none([]), {"op": "abort"}]) == [b.ports_none([]).json(), {"op": "abort"}]


# -- the transactions the OVN modules compose, against the recorded wire ----------------------


class Recorder(Ovsdb):
    """An :class:`Ovsdb` that records each transaction's wire and answers from ``answers``
    (one list of results per transaction; an exception is raised; missing: empty results)."""

    def __init__(self, answers: list[Any] | None = None) -> None:
        super().__init__(["unix:/nonexistent"], "OVN_Northbound")
        self.sent: list[list[Any]] = []
        self.answers = list(answers or [])

    def transact(self, ops: Any) -> list[dict[str, Any]]:
        sent = json.loads(json.dumps(wire(ops)))
        self.sent.append(sent)
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer if answer is not None else [{} for _ in sent]


class FakeNb:
    """``select`` only, as :func:`podnet.ovn.forward_lbs.forward_ops` reads."""

    def __init__(self, routes: list[str]) -> None:
        self.routes, self.asked = routes, []  # type: list[str], list[Any]

    def select(self, table: str, where: Any = (), columns: Any = None) -> list[Row]:
        self.asked.append([table, json.loads(json.dumps(where)), columns])
        if table == "Logical_Router_Static_Route":
            return [Row({"_uuid": ["uuid", u]}) for u in self.routes]
        return [Row({"options": ["map", [["neighbor_responder", "all"]]]})]


def js(ops: list[Op]) -> list[Any]:
    return json.loads(json.dumps(wire(ops)))


PLAN = nbmod.Plan(
    internal=[ipaddress.ip_interface("10.9.0.1/24"), ipaddress.ip_interface("fd09::1/64")],
    uplink=[ipaddress.ip_interface("192.0.2.10/24")],
    gateways=[ipaddress.ip_address("192.0.2.1"), ipaddress.ip_address("2001:db8::1")],
    snat=[("192.0.2.10", "10.9.0.0/24")], physnet="up0", chassis=["ch-a", "ch-b"],
    mac_int="0a:00:00:00:00:01", mac_ext="0a:00:00:00:00:02", mtu=1442)  # fmt: skip


def test_network_objects_match_the_recorded_wire() -> None:
    assert js(nbmod.create_ops("net1", PLAN)) == GOLDEN["create"]
    snat = [("192.0.2.10", "10.9.0.0/24"), ("2001:db8::10", "fd09::/64")]
    assert js(nbmod.snat_ops("net1", snat)) == GOLDEN["snat"]
    assert js(nbmod.snat_ops("net1", [])) == GOLDEN["snat0"]
    assert js(nbmod.delete_ops("net1")) == GOLDEN["delete"]
    assert js(forward_lbs.ingress_ops("net1", True)) == GOLDEN["ingress"]
    for op in GOLDEN["create"]:
        assert shape_ok(op)


def test_create_ops_name_every_row_they_refer_to() -> None:
    ops = js(nbmod.create_ops("net1", PLAN))
    made = {op["uuid-name"] for op in ops if op["op"] == "insert"}
    text = json.dumps(ops)
    # the root rows (router, switches) are referred to by nothing; every other row by its owner
    assert set(re.findall(r'\["named-uuid", ?"([^"]+)"\]', text)) == made - {"lr", "lsint", "lsext"}


def test_forward_load_balancers_match_the_recorded_wire() -> None:
    def d(**k: Any) -> Any:
        return SimpleNamespace(**k)

    dnats = [
        d(protocol="tcp", listen="192.0.2.20", port=80, target="10.9.0.5", target_port=8080),
        d(protocol="udp", listen="192.0.2.20", port=53, target="10.9.0.6", target_port=None),
    ]
    dnats6 = [d(protocol=None, listen="2001:db8::20", port=None, target="fd09::5",
                target_port=None),
              d(protocol="tcp", listen="2001:db8::20", port=443, target="fd09::6",
                target_port=8443)]  # fmt: skip
    for key, routes, args in (
        ("fwd4", ["r-1", "r-2"], ("192.0.2.20", dnats, True)),
        ("fwd6", [], ("2001:db8::20", dnats6, None)),
        ("fwdnone", ["r-3"], ("192.0.2.20", None, False)),
    ):
        fake = FakeNb(routes)
        ops = forward_lbs.forward_ops(fake, "net1", args[0], args[1], l2proxy=args[2])  # type: ignore[arg-type]
        assert js(ops) == GOLDEN[key], key
        assert fake.asked == GOLDEN[f"{key}_asked"], key


ATTACHMENT = {"podnet-container": "c1", "podnet-ifname": "eth0", "podnet-chassis": "ch-a"}


def test_pod_ports_match_the_recorded_wire() -> None:
    r = Recorder()
    pod_ports.add_port(r, "net1", "pn-net1-pod-x", "0a:00:00:00:00:01", "ch-a", ATTACHMENT,
                       '{"type":"ovn"}')  # fmt: skip
    assert r.sent == GOLDEN["add"]
    r = Recorder()
    pod_ports.add_port(r, "net1", "pn-net1-mgmt-x", "0a:00:00:00:00:01", "ch-a",
                       {"podnet-mgmt": "ch-a"})  # fmt: skip
    assert r.sent == GOLDEN["add_mgmt"]
    r = Recorder()
    pod_ports.secure_port(
        r, "net1", "p1", "0a:00:00:00:00:05 10.9.0.5", "0a:00:00:00:00:05 10.9.0.5"
    )
    assert r.sent == GOLDEN["secure"]
    r = Recorder([[{}, {"rows": [{"dynamic_addresses": "0a:00:00:00:00:05 10.9.0.5"}]}]])
    assert pod_ports.port_addresses(r, "p1", 500) == GOLDEN["addr_result"]
    assert r.sent == GOLDEN["addr"]
    for key, args in (("delport", ("p1",)), ("delport_att", ("", ("c1", "eth0", "ch-a")))):
        r = Recorder([[{"rows": [{"_uuid": ["uuid", "u-1"]}]}]])
        pod_ports.delete_port(r, "net1", *args)  # type: ignore[arg-type]
        assert r.sent == GOLDEN[key], key


def test_a_taken_attachment_is_refused_by_its_wait() -> None:
    """The ``wait`` that no port holds the attachment comes right after the record's and the
    switch's: its failure is InterfaceExists (102), another wait's is the Conflict."""
    from podnet.errors import InterfaceExists

    held = Conflict("changed", "")
    held.op = 2
    with pytest.raises(InterfaceExists):
        pod_ports.add_port(Recorder([held]), "net1", "p", "0a:00:00:00:00:01", "ch-a",
                           ATTACHMENT, '{"type":"ovn"}')  # fmt: skip
    other = Conflict("changed", "")
    other.op = 0
    with pytest.raises(Conflict):
        pod_ports.add_port(Recorder([other]), "net1", "p", "0a:00:00:00:00:01", "ch-a",
                           ATTACHMENT, '{"type":"ovn"}')  # fmt: skip


def test_spares_match_the_recorded_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spares.secrets, "token_hex", lambda n: "ab" * n)
    monkeypatch.setattr(spares, "random_mac", lambda: "0a:00:00:00:00:99")
    r = Recorder()
    assert spares.claim_port(
        r,
        "net1",
        "pn-net1-pod-s",
        "0a:00:00:00:00:05 10.9.0.5",
        ATTACHMENT,
        '{"r":1}',
        1,
        "0a:00:00:00:00:05 10.9.0.5",
        "u-1",
    )
    assert r.sent == GOLDEN["claim"]
    r = Recorder([[{"rows": [{"_uuid": ["uuid", "u-1"]}]}]])
    assert spares.top_up(r, "net1", "ch-a", 3) == GOLDEN["topup_n"]
    assert r.sent == GOLDEN["topup"]
    r = Recorder([[{"rows": [{"_uuid": ["uuid", "u-1"]}, {"_uuid": ["uuid", "u-2"]}]}]])
    assert spares.delete_spares(r, "net1") == GOLDEN["delsp_n"]
    assert r.sent == GOLDEN["delsp"]
    named_ok = "pn-net1-pod-" + "ab" * 10
    r = Recorder([[
        {"rows": [{"ports": ["set", [["uuid", "u-1"], ["uuid", "u-9"]]]}]},
        {"rows": [{"_uuid": ["uuid", "u-1"], "name": named_ok,
                   "dynamic_addresses": "0a:00:00:00:00:05 10.9.0.5"},
                  {"_uuid": ["uuid", "u-2"], "name": "pn-net1-pod-" + "cd" * 10,
                   "dynamic_addresses": ["set", []]},
                  {"_uuid": ["uuid", "u-9"], "name": "other", "dynamic_addresses": ["set", []]}]},
    ]])  # fmt: skip
    assert [list(x) for x in spares.spare_rows(r, "net1", "ch-a")] == GOLDEN["sparerows"]
    assert r.sent == GOLDEN["sparerows_sent"]


def test_orphan_sweep_matches_the_recorded_wire() -> None:
    r = Recorder([[{"rows": [{"name": "ch-a"}, {"name": "ch-b"}]},
                   {"rows": [{"external_ids": ["map", [["logical-switch", "ls-1"]]]},
                             {"external_ids": ["map", []]}]}]])  # fmt: skip
    chassis, switches = orphans.southbound_view(r)
    assert [sorted(chassis), sorted(switches)] == GOLDEN["sbview"]
    assert r.sent == GOLDEN["sbview_sent"]
    now = 10_000_000

    def spare(u: str, chassis: str, mark: str = "") -> dict[str, Any]:
        ids = [["podnet-chassis", chassis], ["podnet-network", "net1"]]
        ids += [["podnet-orphaned-since", mark]] if mark else []
        return {"_uuid": ["uuid", u], "external_ids": ["map", [*ids, ["podnet-spare", "true"]]]}

    switch = {"_uuid": ["uuid", "ls-1"], "name": "pn-net1-ls-int",
              "external_ids": ["map", [["podnet-network", "net1"]]],
              "ports": ["set", [["uuid", f"p{i}"] for i in range(6)]]}  # fmt: skip
    found = [spare("p0", "ch-a"), spare("p1", "gone"), spare("p2", "gone", f"{now - 1000}@ch-a"),
             spare("p3", "ch-b", f"{now - 10}@ch-a"), spare("p4", "gone", f"{now - 10}@ch-b"),
             spare("p9", "gone")]  # fmt: skip
    r = Recorder([[{"rows": [switch]}], [{"rows": found}]])
    assert orphans.sweep_spares(r, {"ch-a", "ch-b"}, {"ls-1"}, "ch-a", now) == GOLDEN["sweep_n"]
    assert r.sent == GOLDEN["sweep"]


def test_registry_change_matches_the_recorded_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_valid", lambda name, record: True)
    rec = nbmod.Record("ovn", "d", {"network": "up0"})
    raw = ["map", [["podnet:generation", "7"], ["podnet:network:net1", rec.dumps()],
                   ["podnet:forward:net1|192.0.2.20", "{}"], ["other", "x"]]]  # fmt: skip

    def fn(reg: nbmod.Registry) -> Any:
        reg.forward_changes[("net1", "192.0.2.20")] = None
        reg.forward_changes[("net1", "192.0.2.21")] = '{"a":1}'
        return ({"net1": nbmod.Record("ovn", "e", {"network": "up0"}), "net2": None},
                nbmod.delete_ops("net2"))  # fmt: skip

    r = Recorder([[{"rows": [{"external_ids": raw}]}]])
    written = nbmod.change(r, fn)
    assert r.sent == GOLDEN["change"]
    assert sorted(written.records) == GOLDEN["change_records"]
    assert sorted(map(list, written.forwards)) == GOLDEN["change_fw"]
    assert written.held("net1") == rec.dumps()
    r = Recorder([[{"rows": [{"external_ids": ["map", [["podnet:network:net1", rec.dumps()]]]}]}]])
    nbmod.change(r, lambda reg: ({"net1": None}, []))
    assert r.sent == GOLDEN["change0"]


def test_reads_match_the_recorded_wire() -> None:
    r = Recorder(
        [[{"rows": [{"name": "x"}]}, {"rows": []}, {"rows": []}, {"rows": [{"name": "y"}]}]]
    )
    assert nbmod.taken_names(r, "net1") == GOLDEN["taken"]
    assert r.sent == GOLDEN["taken_sent"]
    r = Recorder([[{"rows": [
        {"name": "ch-b", "other_config": ["map", [["ovn-bridge-mappings", "up0:br"]]],
         "external_ids": ["map", []]},
        {"name": "ch-a", "external_ids": ["map", [["ovn-bridge-mappings", "x:br,up0:b"]]],
         "other_config": ["map", []]},
        {"name": "ch-c", "external_ids": ["map", []], "other_config": ["map", []]}]}]])  # fmt: skip
    assert nbmod.gateway_chassis(r, "up0") == GOLDEN["gw"]
    assert r.sent == GOLDEN["gw_sent"]
    r = Recorder([[{"rows": [
        {"external_ids": ["map", [["podnet-network", "net1"], ["podnet-container", "c" * 64]]]},
        {"external_ids": ["map", [["podnet-network", "net1"], ["podnet-container", "b" * 64],
                                  ["podnet-spare", "true"]]]},
        {"external_ids": ["map", [["podnet-network", "Bad Name"], ["podnet-container", "a" * 64]]]},
        {"external_ids": ["map", [["podnet-network", "net2"], ["podnet-container", "a/../"]]]},
    ]}]])  # fmt: skip
    assert pod_ports.pods_by_network(r) == GOLDEN["pbn"]


def test_the_local_vswitch_rows_match_the_recorded_wire() -> None:
    ids = [["ovn-bridge-mappings", "a:br-a,up0:old"], ["system-id", "ch-a"]]
    r = Recorder([[{"rows": [{"_uuid": ["uuid", "o"], "external_ids": ["map", ids]}]}]])
    vswitch.set_bridge_mapping("up0", "pnu1", r)
    assert r.sent == GOLDEN["vsw"]
    ids = [["ovn-bridge-mappings", "up0:old"], ["system-id", "ch-a"]]
    r = Recorder([[{"rows": [{"_uuid": ["uuid", "o"], "external_ids": ["map", ids]}]}]])
    vswitch.set_bridge_mapping("up0", None, r)
    assert r.sent == GOLDEN["vsw0"]
    ids = [["ovn-bridge-mappings", "up0:br-x, bad ,:y"], ["ovn-remote", "tcp:1.2.3.4:6642"],
           ["system-id", "ch-a"], ["ovn-encap-ip", "10.0.0.1"]]  # fmt: skip
    c = vswitch.chassis(Recorder([[{"rows": [{"external_ids": ["map", ids]}]}]]))
    assert [c.system_id, c.ovn_remote, c.encap_ip, c.encap_type, c.datapath_type,
            c.bridge_mappings] == GOLDEN["chassis"]  # fmt: skip


# -- the row type --------------------------------------------------------------------------------


def test_row_reads_columns_as_python_values() -> None:
    row = Row({"_uuid": ["uuid", "u-1"], "name": "p", "up": True,
               "external_ids": ["map", [["a", "1"], ["b", "2"]]],
               "options": ["map", [["requested-chassis", "ch"]]],
               "ports": ["set", [["uuid", "x"], ["uuid", "y"]]],
               "dynamic_addresses": ["set", []], "one": "0a:00:00:00:00:01 10.0.0.2"})  # fmt: skip
    assert row.uuid == "u-1" and row["_uuid"] == ["uuid", "u-1"] and row.name == "p"
    assert row.external_ids == {"a": "1", "b": "2"}
    assert row.options == {"requested-chassis": "ch"} and row.other_config == {}
    assert row.set("ports") == ["x", "y"] and row.set("up") == [True] and row.set("nope") == []
    assert row.first("dynamic_addresses") == "" and row.first("one").split()[1] == "10.0.0.2"
    assert dict(row) == dict(row.items()) and len(row) == 8
    assert Row({}).uuid == "" and Row({}).external_ids == {}
    assert pyset("a") == ["a"]


# -- where operations are written ----------------------------------------------------------------

#: An OVSDB operation object written as a literal (RFC 7047's operation names).
OP_LITERAL = re.compile(
    r"""["']op["']\s*:\s*["'](insert|select|update|mutate|delete|wait|commit|abort|comment"""
    r"""|assert)["']""")  # fmt: skip
#: Any ``"op":`` key in a module that speaks OVSDB (imports podnet.ovn).
OP_KEY = re.compile(r"""["']op["']\s*:""")


def test_no_operation_object_outside_the_builders() -> None:
    """Only :mod:`podnet.ovn.ops` (``Op.json``) writes an operation object; every other module
    goes through the builders. Checked on the text: an ``"op":`` key in a module that imports
    ``podnet.ovn`` (or is in it), or a literal with an RFC 7047 operation name anywhere."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "ovn" / "ops.py":
            continue
        text = path.read_text()
        speaks_ovsdb = path.parent.name == "ovn" or "podnet.ovn" in text
        for number, line in enumerate(text.splitlines(), 1):
            if OP_LITERAL.search(line) or (speaks_ovsdb and OP_KEY.search(line)):
                found.append(f"{path.relative_to(SRC.parent)}:{number}: {line.strip()}")
    assert found == []
    assert OP_KEY.search((SRC / "ovn" / "ops.py").read_text())  # the one place, still there


def test_no_module_reads_rows_as_raw_maps() -> None:
    """Rows are read through :class:`podnet.ovn.row.Row`: no module but ``ovn/row.py`` calls
    the wire decoders (``pymap``, ``pyset``, ``pyatom``)."""
    found = [f"{p.relative_to(SRC.parent)}" for p in sorted(SRC.rglob("*.py"))
             if p != SRC / "ovn" / "row.py"
             and re.search(r"\bpy(map|set|atom)\(", p.read_text())]  # fmt: skip
    assert found == []
