"""Pure spec logic: versions, result conversion, skeleton dispatch (no root)."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podnet.cni import fastjson, result, skel, version
from podnet.errors import CNIError

V1 = {
    "cniVersion": "1.1.0",
    "interfaces": [{"name": "pnx", "mac": "02:00:00:00:00:01"},
                   {"name": "eth0", "mac": "02:00:00:00:00:02", "sandbox": "/run/netns/p"}],
    "ips": [{"address": "10.244.0.5/32", "gateway": "10.244.0.1", "interface": 1},
            {"address": "fd00::5/128", "gateway": "fd00::1", "interface": 1}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.0.1"}],
    "dns": {},
}


@pytest.mark.parametrize("to", ["0.3.0", "0.3.1", "0.4.0"])
def test_v1_to_v0_adds_ip_version(to: str) -> None:
    out = result.convert(V1, to)
    assert out["cniVersion"] == to
    assert [ip["version"] for ip in out["ips"]] == ["4", "6"]
    assert out["interfaces"] == V1["interfaces"]


@pytest.mark.parametrize("to", ["1.0.0", "1.1.0"])
def test_v1_stays_without_version_key(to: str) -> None:
    out = result.convert(V1, to)
    assert out["cniVersion"] == to
    assert all("version" not in ip for ip in out["ips"])


def test_round_trip_through_v04() -> None:
    back = result.convert(result.convert(V1, "0.4.0"), "1.0.0")
    assert back["ips"] == V1["ips"] and back["routes"] == V1["routes"]


def test_sandbox_addresses_by_ifname() -> None:
    assert result.sandbox_addresses(V1, "eth0") == ["10.244.0.5/32", "fd00::5/128"]
    assert result.sandbox_addresses(V1, "net1") == []


def test_highest_common_version() -> None:
    assert version.highest_common(["0.4.0", "1.0.0", "9.9.9"]) == "1.0.0"
    assert version.highest_common(["9.9.9"]) is None


def _run(env: dict[str, str], stdin: str, handlers: dict | None = None) -> tuple[int, dict]:
    out = io.StringIO()
    rc = skel.run("t", handlers or {}, env=env, stdin=io.BytesIO(stdin.encode()), stdout=out)
    return rc, json.loads(out.getvalue())


def test_version_answers_without_handlers() -> None:
    rc, out = _run({"CNI_COMMAND": "VERSION"}, '{"cniVersion":"1.0.0"}')
    assert rc == 0
    assert out == {"cniVersion": "1.0.0", "supportedVersions": list(version.SUPPORTED_VERSIONS)}


ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin"}


@pytest.mark.parametrize(
    ("env", "stdin", "code"),
    [
        (ENV, "{not json", 6),
        (ENV, '{"cniVersion":"9.9.9","name":"n","type":"t"}', 1),
        ({**ENV, "CNI_NETNS": ""}, '{"cniVersion":"1.0.0","name":"n","type":"t"}', 4),
        ({**ENV, "CNI_IFNAME": "a/b"}, '{"cniVersion":"1.0.0","name":"n","type":"t"}', 4),
        ({**ENV, "CNI_CONTAINERID": "-bad"}, '{"cniVersion":"1.0.0","name":"n","type":"t"}', 4),
        ({**ENV, "CNI_COMMAND": "CHECK"}, '{"cniVersion":"0.3.1","name":"n","type":"t"}', 1),
        ({**ENV, "CNI_COMMAND": "GC"}, '{"cniVersion":"1.0.0","name":"n","type":"t"}', 1),
        ({**ENV, "CNI_COMMAND": "FOO"}, '{"cniVersion":"1.0.0","name":"n","type":"t"}', 4),
    ],
)
def test_skel_errors(env: dict[str, str], stdin: str, code: int) -> None:
    rc, out = _run(env, stdin)
    assert rc == 1
    assert out["code"] == code and out["msg"]


def test_del_does_not_need_netns() -> None:
    seen = []
    env = {**ENV, "CNI_COMMAND": "DEL", "CNI_NETNS": ""}
    out = io.StringIO()
    rc = skel.run("t", {"DEL": lambda call: seen.append(call.netns)}, env=env,
                  stdin=io.BytesIO(b'{"cniVersion":"1.0.0","name":"n","type":"t"}'), stdout=out)
    assert rc == 0 and seen == [""] and out.getvalue() == ""


def test_unexpected_exception_is_999() -> None:
    def boom(call: skel.Call) -> None:
        raise RuntimeError("kaput")

    rc, out = _run(ENV, '{"cniVersion":"0.4.0","name":"n","type":"t"}', {"ADD": boom})
    assert rc == 1 and out["code"] == 999 and "kaput" in out["msg"]
    assert out["cniVersion"] == "0.4.0"


def test_result_printed_in_config_version() -> None:
    rc, out = _run(ENV, '{"cniVersion":"0.3.1","name":"n","type":"t"}', {"ADD": lambda c: V1})
    assert rc == 0 and out["cniVersion"] == "0.3.1" and out["ips"][0]["version"] == "4"


def test_cni_error_json_shape() -> None:
    err = CNIError("m", "d", code=7)
    assert err.to_json("1.0.0") == {"cniVersion": "1.0.0", "code": 7, "msg": "m", "details": "d"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(json_values)
def test_fastjson_matches_json(value: object) -> None:
    text = fastjson.dumps(value)
    assert json.loads(text) == value
    assert fastjson.loads(text) == value
    assert fastjson.loads(json.dumps(value, indent=2).encode()) == value


@pytest.mark.parametrize("bad", ["", "{", "[1,]", '{"a": 1} x', "nul", '{"a": "\x01"}'])
def test_fastjson_rejects_what_json_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        fastjson.loads(bad)
