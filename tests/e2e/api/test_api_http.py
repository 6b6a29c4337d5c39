"""The REST API over its unix socket (the API's promise: "an HTTP test suite covers every
endpoint, status code, envelope, ETag/If-Match, PATCH semantics and bad bodies").

``podnetctl serve`` runs inside a node namespace (its bridges and table ``inet podnet`` live
there); the test talks to ``<dataDir>/unix.socket`` with httpx. Every endpoint is checked for its
status code and LXD's exact envelope; ETags are recomputed here from the returned object with
LXD's formula (sha256 of Go's JSON of ``[listen_address, description, config, ports]`` /
``[name, managed, type, description, config]``), not with podnet's code; a stale or wrong
``If-Match`` must change nothing, neither the object nor the kernel's forward maps."""

from __future__ import annotations

import grp
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_helpers import (
    PODNETCTL,
    ApiServer,
    assert_error,
    assert_sync,
    expected_maps,
    forward_etag,
    kernel_maps,
    network_etag,
    serving,
)
from envgate import need
from netns import Lab, sh

pytestmark = pytest.mark.root

HOST = socket.gethostname()
BR0 = {"ipv4.address": "10.0.0.1/24", "ipv6.address": "fd00:1::1/64", "ipv4.nat": "true",
       "ipv6.nat": "true"}
FWD = "/1.0/networks/br0/forwards"


@dataclass
class Api:
    lab: Lab
    server: ApiServer
    c: httpx.Client

    def forward(self, listen: str) -> tuple[dict[str, Any], str]:
        """(object, ETag without quotes) of one forward."""
        r = self.c.get(f"{FWD}/{listen}")
        meta = assert_sync(r)
        return meta, r.headers["etag"].strip('"')

    def network(self, name: str) -> tuple[dict[str, Any], str]:
        r = self.c.get(f"/1.0/networks/{name}")
        meta = assert_sync(r)
        return meta, r.headers["etag"].strip('"')

    def kernel(self) -> dict[str, set[str]]:
        return kernel_maps(self.lab.node)

    def create(self, body: dict[str, Any]) -> None:
        assert_sync(self.c.post(FWD, json=body), 201, None)

    def delete(self, listen: str) -> None:
        self.c.delete(f"{FWD}/{listen}")

    def listed(self) -> list[dict[str, Any]]:
        return list(assert_sync(self.c.get(FWD, params={"recursion": 1})))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    need("root", "ip", "nft")
    with serving(tmp_path_factory.mktemp("api-http")) as (lab, server):
        # a connection per request: a failed request never takes the next one with it
        with server.client(headers={"Connection": "close"}) as c:
            assert_sync(c.post("/1.0/networks", json={"name": "br0", "config": BR0}), 201, None)
            yield Api(lab, server, c)


@pytest.fixture
def forward(api: Api) -> Iterator[str]:
    """198.51.100.50 → default target 10.0.0.2 and tcp/80 → 10.0.0.3:8080, removed after."""
    listen = "198.51.100.50"
    api.create({"listen_address": listen, "description": "fixture",
                "config": {"target_address": "10.0.0.2", "user.a": "1", "user.b": "2"},
                "ports": [{"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.3",
                           "target_port": "8080"}]})
    try:
        yield listen
    finally:
        api.delete(listen)


# -- /1.0 and projects ------------------------------------------------------------------------


def test_server_document(api: Api) -> None:
    r = api.c.get("/1.0")
    meta = assert_sync(r)
    assert {"network", "network_forward", "projects"} <= set(meta["api_extensions"])
    assert meta["api_version"] == "1.0" and meta["api_status"] == "stable"
    assert meta["auth"] == "trusted" and meta["public"] is False
    assert meta["auth_methods"] == ["tls"]
    env = meta["environment"]
    from podnet import __version__

    assert env["server"] == "podnet" and env["server_version"] == __version__
    assert env["server_clustered"] is False
    assert env["storage"] != ""  # lxc's first run would suggest `lxd init` otherwise
    assert env["server_name"] == HOST


def test_projects(api: Api) -> None:
    assert_sync(api.c.get("/1.0/projects"), 200, ["/1.0/projects/default"])
    [project] = assert_sync(api.c.get("/1.0/projects", params={"recursion": 1}))
    assert project["name"] == "default"
    assert assert_sync(api.c.get("/1.0/projects/default"))["name"] == "default"
    assert_error(api.c.get("/1.0/projects/other"), 404, "Project not found")


# -- networks ---------------------------------------------------------------------------------


def _bridge_exists(api: Api, name: str) -> bool:
    return api.lab.exec(api.lab.node, "ip", "link", "show", "dev", name, check=False).returncode == 0


def test_network_create_list_get_delete(api: Api) -> None:
    config = {"ipv4.address": "10.1.0.1/24", "ipv6.address": "none", "user.k": "v"}
    r = api.c.post("/1.0/networks", json={"name": "brt", "description": "test net",
                                          "config": config, "type": "bridge"})
    assert_sync(r, 201, None)
    assert r.headers["location"] == "/1.0/networks/brt"
    try:
        assert _bridge_exists(api, "brt")
        assert sorted(assert_sync(api.c.get("/1.0/networks"))) == [
            "/1.0/networks/br0", "/1.0/networks/brt"]
        assert sorted(assert_sync(api.c.get("/1.0/networks", params={"recursion": 0}))) == [
            "/1.0/networks/br0", "/1.0/networks/brt"]
        listed = {n["name"]: n for n in assert_sync(api.c.get("/1.0/networks?recursion=1"))}
        assert sorted(listed) == ["br0", "brt"]
        meta, tag = api.network("brt")
        assert meta == listed["brt"]
        assert meta == {"config": config, "description": "test net", "name": "brt",
                        "type": "bridge", "used_by": [], "managed": True, "status": "Created",
                        "locations": [HOST]}
        assert tag == network_etag(meta)
        assert api.c.get("/1.0/networks/brt").headers["etag"] == f'"{tag}"'  # quoted
        assert_error(api.c.post("/1.0/networks", json={"name": "brt", "config": config}), 409,
                     "The network already exists")
    finally:
        r = api.c.delete("/1.0/networks/brt")
    assert_sync(r, 200, {})
    assert not _bridge_exists(api, "brt")
    assert_error(api.c.get("/1.0/networks/brt"), 404, "Network not found")
    assert_error(api.c.delete("/1.0/networks/brt"), 404,
                 "Failed loading network: Network not found")


def test_network_create_type_defaults_to_bridge(api: Api) -> None:
    body = {"name": "brq", "type": "", "config": {"ipv4.address": "10.2.0.1/24",
                                                  "ipv6.address": "none"}}
    assert_sync(api.c.post("/1.0/networks", json=body), 201, None)
    try:
        assert api.network("brq")[0]["type"] == "bridge"
    finally:
        assert_sync(api.c.delete("/1.0/networks/brq"), 200, {})


@pytest.mark.parametrize("name", ["brd", "mtu", "dev", "master"])
def test_network_named_like_an_ip_keyword_is_not_a_server_error(api: Api, name: str) -> None:
    """Valid interface names that `ip link add NAME type bridge` reads as one of its keywords
    (LXD 5.0.2 fails the same way, with a 500): created (`ip link add name NAME`) or refused
    with 400, never a 500."""
    body = {"name": name, "config": {"ipv4.address": "10.2.1.1/24", "ipv6.address": "none"}}
    r = api.c.post("/1.0/networks", json=body)
    try:
        assert r.status_code in (201, 400), (r.status_code, r.text)
        if r.status_code == 201:
            assert _bridge_exists(api, name)
            assert api.network(name)[0]["name"] == name
        else:
            assert_error(r, 400)
            assert_error(api.c.get(f"/1.0/networks/{name}"), 404, "Network not found")
    finally:
        api.c.delete(f"/1.0/networks/{name}")
    assert not _bridge_exists(api, name)


@pytest.mark.parametrize("body, message", [
    ({"name": "brv", "config": {"ipv4.nat": "maybe"}},
     'Invalid value for network "brv" option "ipv4.nat": Invalid value for a boolean "maybe"'),
    ({"name": "brv", "config": {"foo": "bar"}}, 'Invalid option for network "brv" option "foo"'),
    ({"name": "brv", "config": {"ipv4.address": "10.3.0.0/24"}},
     'Invalid value for network "brv" option "ipv4.address": Not a usable IPv4 address '
     '"10.3.0.0/24"'),
    ({"name": "brv", "config": {"ipv4.address": "fd00::1/64"}},
     'Invalid value for network "brv" option "ipv4.address": Not an IPv4 address "fd00::1/64"'),
    ({"name": "brv", "config": {"bridge.mtu": "100"}},
     'Invalid value for network "brv" option "bridge.mtu": Out of MTU range (1280-16384) "100"'),
    ({"name": "brv", "config": {"bridge.mtu": "x"}},
     'Invalid value for network "brv" option "bridge.mtu": Invalid MTU "x"'),
    ({"name": "b", "config": {}}, "Network interface is too short (minimum 2 characters)"),
    ({"name": "b" * 16, "config": {}}, "Network interface is too long (maximum 15 characters)"),
    ({"name": "br/0", "config": {}}, "Network interface contains invalid characters"),
])
def test_network_create_validation_is_400_with_lxds_message(api: Api, body: dict[str, Any],
                                                             message: str) -> None:
    before = assert_sync(api.c.get("/1.0/networks"))
    assert_error(api.c.post("/1.0/networks", json=body), 400, message)  # LXD: 500
    assert assert_sync(api.c.get("/1.0/networks")) == before
    assert not _bridge_exists(api, "brv")


@pytest.fixture
def brn(api: Api) -> Iterator[str]:
    config = {"ipv4.address": "10.4.0.1/24", "ipv6.address": "none", "user.a": "1"}
    assert_sync(api.c.post("/1.0/networks", json={"name": "brn", "description": "orig",
                                                  "config": config}), 201, None)
    try:
        yield "brn"
    finally:
        api.c.delete("/1.0/networks/brn")


def test_network_if_match(api: Api, brn: str) -> None:
    meta, tag = api.network(brn)
    stale = network_etag({**meta, "description": "something else"})
    for method in ("PUT", "PATCH"):
        for sent in (f'"{stale}"', stale, "0" * 64, "garbage"):
            r = api.c.request(method, f"/1.0/networks/{brn}", headers={"If-Match": sent},
                              json={"description": "changed", "config": {"user.a": "2"}})
            assert_error(r, 412, f"ETag doesn't match: {tag} vs {sent.strip(chr(34))}")
            assert api.network(brn) == (meta, tag)  # nothing changed
    # the current tag, quoted as lxc sends it back: applied
    r = api.c.put(f"/1.0/networks/{brn}", headers={"If-Match": f'"{tag}"'},
                  json={"description": "v2", "config": {**meta["config"], "user.a": "2"}})
    assert_sync(r, 200, {})
    meta2, tag2 = api.network(brn)
    assert meta2["description"] == "v2" and meta2["config"]["user.a"] == "2"
    assert tag2 == network_etag(meta2) != tag
    # the old tag is stale now
    r = api.c.patch(f"/1.0/networks/{brn}", headers={"If-Match": f'"{tag}"'},
                    json={"config": {"user.a": "3"}})
    assert_error(r, 412, f"ETag doesn't match: {tag2} vs {tag}")
    assert api.network(brn) == (meta2, tag2)
    # unquoted current tag (LXD trims quotes): applied
    assert_sync(api.c.patch(f"/1.0/networks/{brn}", headers={"If-Match": tag2},
                            json={"config": {"user.a": "3"}}), 200, {})
    meta3, tag3 = api.network(brn)
    assert meta3["config"]["user.a"] == "3"
    # no If-Match: applied
    assert_sync(api.c.patch(f"/1.0/networks/{brn}", json={"config": {"user.a": "4"}}), 200, {})
    assert api.network(brn)[0]["config"]["user.a"] == "4"


def test_network_patch_and_put_semantics(api: Api, brn: str) -> None:
    meta, _ = api.network(brn)
    base = dict(meta["config"])
    assert_sync(api.c.patch(f"/1.0/networks/{brn}", json={"config": {"user.b": "2"}}), 200, {})
    meta, _ = api.network(brn)
    assert meta["config"] == {**base, "user.b": "2"}  # merged
    assert meta["description"] == "orig"  # kept when absent
    assert_sync(api.c.patch(f"/1.0/networks/{brn}", json={"config": {"user.a": ""}}), 200, {})
    meta, _ = api.network(brn)
    assert "user.a" not in meta["config"] and meta["config"]["user.b"] == "2"  # "" removes
    assert_sync(api.c.patch(f"/1.0/networks/{brn}", json={"description": "d2"}), 200, {})
    meta, _ = api.network(brn)  # a body without config is fine
    assert meta["description"] == "d2" and meta["config"]["user.b"] == "2"
    _, tag = api.network(brn)
    assert_sync(api.c.patch(f"/1.0/networks/{brn}", json={}), 200, {})
    assert api.network(brn)[1] == tag  # an empty PATCH changes nothing
    # PUT replaces: keys not sent go, an absent description becomes ""
    keep = {k: v for k, v in meta["config"].items() if not k.startswith("user.")}
    assert_sync(api.c.put(f"/1.0/networks/{brn}", json={"config": {**keep, "user.c": "3"}}),
                200, {})
    meta, tag = api.network(brn)
    assert meta["config"] == {**keep, "user.c": "3"} and meta["description"] == ""
    assert tag == network_etag(meta)


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_network_put_patch_take_the_object_as_get_returns_it(api: Api, brn: str,
                                                             method: str) -> None:
    """pylxd's save() and other clients send back the whole object: its read-only fields are
    accepted when unchanged (LXD ignores them), refused with a message naming them otherwise,
    and nothing is applied; a stale If-Match is still 412."""
    meta, tag = api.network(brn)
    url = f"/1.0/networks/{brn}"
    body = {**meta, "description": f"{method} whole", "config": {**meta["config"], "user.w": "1"},
            "used_by": list(reversed(meta["used_by"]))}
    assert_sync(api.c.request(method, url, headers={"If-Match": tag}, json=body), 200, {})
    meta2, tag2 = api.network(brn)
    assert meta2 == {**meta, "description": f"{method} whole",
                     "config": {**meta["config"], "user.w": "1"}}
    for field, value in (("name", "brz"), ("type", "ptp"), ("managed", False),
                         ("status", "Pending"), ("locations", ["elsewhere"]),
                         ("used_by", ["/1.0/instances/x"])):
        changed = {**meta2, "description": "not applied", field: value}
        assert_error(api.c.request(method, url, json=changed), 400,
                     f'Read-only field "{field}" cannot be changed')
        assert api.network(brn) == (meta2, tag2)
    assert_error(api.c.request(method, url, json={**meta2, "status": 1}), 400)
    assert_error(api.c.request(method, url, json={**meta2, "bogus": 1}), 400,
                 'Unknown field "bogus" in request body')
    stale = api.c.request(method, url, headers={"If-Match": tag},
                          json={**meta2, "description": "stale"})
    assert_error(stale, 412, f"ETag doesn't match: {tag2} vs {tag}")
    assert api.network(brn) == (meta2, tag2)


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_network_update_validation_is_400(api: Api, brn: str, method: str) -> None:
    before = api.network(brn)
    base = before[0]["config"]
    for config, message in (
        ({**base, "bridge.mtu": "100"},
         'Invalid value for network "brn" option "bridge.mtu": Out of MTU range (1280-16384) '
         '"100"'),
        ({**base, "bogus": "1"}, 'Invalid option for network "brn" option "bogus"'),
        ({**base, "ipv4.nat": "perhaps"},
         'Invalid value for network "brn" option "ipv4.nat": Invalid value for a boolean '
         '"perhaps"'),
    ):
        r = api.c.request(method, f"/1.0/networks/{brn}", json={"config": config})
        assert_error(r, 400, message)
        assert api.network(brn) == before


# -- forwards: create, list, get, delete ---------------------------------------------------------


def test_forward_create_list_get_delete(api: Api) -> None:
    before = api.kernel()
    body4 = {"listen_address": "198.51.100.10", "description": "web",
             "config": {"target_address": "10.0.0.2", "user.owner": "me"},
             "ports": [{"description": "http", "protocol": "tcp", "listen_port": "80,8000-8001",
                        "target_address": "10.0.0.3", "target_port": "8080,9000-9001"},
                       {"protocol": "udp", "listen_port": "53", "target_address": "10.0.0.3"}]}
    r = api.c.post(FWD, json=body4)
    assert_sync(r, 201, None)
    assert r.headers["location"] == f"{FWD}/198.51.100.10"
    r = api.c.post(FWD, json={"listen_address": "2001:DB8:F::0010",
                              "config": {"target_address": "FD00:1::0002"}})
    assert_sync(r, 201, None)
    assert r.headers["location"] == f"{FWD}/2001:db8:f::10"  # canonical
    try:
        urls = assert_sync(api.c.get(FWD))
        assert {f"{FWD}/198.51.100.10", f"{FWD}/2001:db8:f::10"} <= set(urls)
        assert assert_sync(api.c.get(FWD, params={"recursion": 0})) == urls
        listed = {f["listen_address"]: f for f in api.listed()}
        meta, tag = api.forward("198.51.100.10")
        assert meta == listed["198.51.100.10"]
        assert meta == {
            "description": "web",
            "config": {"target_address": "10.0.0.2", "user.owner": "me"},
            "ports": [{"description": "http", "protocol": "tcp", "listen_port": "80,8000-8001",
                       "target_port": "8080,9000-9001", "target_address": "10.0.0.3"},
                      {"description": "", "protocol": "udp", "listen_port": "53",
                       "target_port": "", "target_address": "10.0.0.3"}],
            "listen_address": "198.51.100.10",
            "location": HOST,
        }
        assert tag == forward_etag(meta)
        meta6, tag6 = api.forward("2001:db8:f::10")
        assert meta6 == {"description": "", "config": {"target_address": "fd00:1::2"},
                         "ports": [], "listen_address": "2001:db8:f::10", "location": HOST}
        assert tag6 == forward_etag(meta6)
        want = expected_maps([meta, meta6])
        assert want["fwd_v4"] == {
            "198.51.100.10 . tcp . 80 : 10.0.0.3 . 8080",
            "198.51.100.10 . tcp . 8000 : 10.0.0.3 . 9000",
            "198.51.100.10 . tcp . 8001 : 10.0.0.3 . 9001",
            "198.51.100.10 . udp . 53 : 10.0.0.3 . 53"}
        now = api.kernel()
        for name, elems in want.items():
            assert now[name] == before[name] | elems, name
        assert_error(api.c.post(FWD, json=body4), 409,
                     "Failed creating forward: A forward for that listen address already exists")
        assert api.forward("198.51.100.10") == (meta, tag)
    finally:
        r4 = api.c.delete(f"{FWD}/198.51.100.10")
        r6 = api.c.delete(f"{FWD}/2001:db8:f::10")
    assert_sync(r4, 200, {})
    assert_sync(r6, 200, {})
    assert_error(api.c.get(f"{FWD}/198.51.100.10"), 404, "Network forward not found")
    assert f"{FWD}/198.51.100.10" not in assert_sync(api.c.get(FWD))
    assert api.kernel() == before


def test_forward_list_of_a_network_without_forwards(api: Api) -> None:
    assert_sync(api.c.post("/1.0/networks", json={"name": "bre", "config": {
        "ipv4.address": "10.5.0.1/24", "ipv6.address": "none"}}), 201, None)
    try:
        assert_sync(api.c.get("/1.0/networks/bre/forwards"), 200, [])
        assert_sync(api.c.get("/1.0/networks/bre/forwards?recursion=1"), 200, [])
    finally:
        api.c.delete("/1.0/networks/bre")


@pytest.mark.parametrize("description, config", [
    ("", {}),
    ("web <&> \"quoted\" \\ back", {"user.z": "1", "user.a": "2", "target_address": "10.0.0.2"}),
    ("naïve – ünïcode ✓ 日本", {"user.ü": "é", "user.A": "x"}),
    ("tab\tnewline\nreturn\r", {"user.k": "line\nbreak"}),
    ("line separator \u2028 and \u2029 inside", {}),
])
def test_forward_etag_is_lxds(api: Api, description: str, config: dict[str, str]) -> None:
    listen = "198.51.100.11"
    ports = [{"description": "p<0>", "protocol": "tcp", "listen_port": "81",
              "target_address": "10.0.0.3", "target_port": ""}]
    api.create({"listen_address": listen, "description": description, "config": config,
                "ports": ports})
    try:
        meta, tag = api.forward(listen)
        assert meta["description"] == description.strip()
        assert tag == forward_etag(meta)
        # and the tag is what If-Match accepts
        assert_sync(api.c.patch(f"{FWD}/{listen}", headers={"If-Match": f'"{tag}"'},
                                json={"config": {"user.x": "y"}}), 200, {})
    finally:
        api.delete(listen)


def test_forward_etag_with_control_characters_is_go_119s(api: Api) -> None:
    """Go 1.19 (Debian 12's LXD 5.0.2 is built with go1.19.8) writes \\b and \\f as \\u0008 and
    \\u000c. The real LXD 5.0.2 daemon answers this very forward with the pinned ETag."""
    listen, description = "198.51.100.12", "bell\x07 back\x08 feed\x0c esc\x1b <&>"
    api.create({"listen_address": listen, "description": description})
    try:
        meta, tag = api.forward(listen)
        assert meta["description"] == description
        assert forward_etag(meta) == \
            "9650a7a5f6627ed5c12a3e08ad1ce9e16c50944d04c97afb647bf6135c88a383"  # LXD's
        assert tag == forward_etag(meta)
    finally:
        api.delete(listen)


# -- forwards: If-Match ------------------------------------------------------------------------


def test_forward_stale_or_wrong_if_match_is_412_and_changes_nothing(api: Api, forward: str) -> None:
    meta, tag = api.forward(forward)
    kernel = api.kernel()
    assert "198.51.100.50 : 10.0.0.2" in kernel["fwd_whole_v4"]
    # make the current tag stale by a change, then try the old tag
    assert_sync(api.c.patch(f"{FWD}/{forward}", headers={"If-Match": f'"{tag}"'},
                            json={"config": {"user.a": "changed"}}), 200, {})
    meta2, tag2 = api.forward(forward)
    assert tag2 != tag and tag2 == forward_etag(meta2)
    kernel = api.kernel()
    change = {"description": "stale write", "config": {"target_address": "10.0.0.9"},
              "ports": [{"protocol": "udp", "listen_port": "99", "target_address": "10.0.0.8"}]}
    for method in ("PUT", "PATCH"):
        for sent in (f'"{tag}"', tag, "0" * 64, '"garbage"', "*"):
            r = api.c.request(method, f"{FWD}/{forward}", headers={"If-Match": sent},
                              json=change)
            assert_error(r, 412, f"ETag doesn't match: {tag2} vs {sent.strip(chr(34))}")
            assert api.forward(forward) == (meta2, tag2), (method, sent)
            assert api.kernel() == kernel, (method, sent)
    # the current tag: applied, also in the kernel
    assert_sync(api.c.put(f"{FWD}/{forward}", headers={"If-Match": f'"{tag2}"'}, json=change),
                200, {})
    meta3, tag3 = api.forward(forward)
    assert meta3["description"] == "stale write"
    assert meta3["config"] == {"target_address": "10.0.0.9"}
    assert tag3 == forward_etag(meta3)
    now = api.kernel()
    assert "198.51.100.50 : 10.0.0.9" in now["fwd_whole_v4"]
    assert "198.51.100.50 : 10.0.0.2" not in now["fwd_whole_v4"]
    assert "198.51.100.50 . udp . 99 : 10.0.0.8 . 99" in now["fwd_v4"]
    assert "198.51.100.50 . tcp . 80 : 10.0.0.3 . 8080" not in now["fwd_v4"]
    # no If-Match: applied
    assert_sync(api.c.put(f"{FWD}/{forward}", json={"description": "blind"}), 200, {})
    assert api.forward(forward)[0]["description"] == "blind"
    assert not any(e.startswith("198.51.100.50 ") for e in api.kernel()["fwd_v4"])


def test_forward_put_with_the_current_etag_twice_second_is_412(api: Api, forward: str) -> None:
    _, tag = api.forward(forward)
    r1 = api.c.patch(f"{FWD}/{forward}", headers={"If-Match": tag}, json={"description": "one"})
    r2 = api.c.patch(f"{FWD}/{forward}", headers={"If-Match": tag}, json={"description": "two"})
    assert_sync(r1, 200, {})
    assert_error(r2, 412)
    assert api.forward(forward)[0]["description"] == "one"


# -- forwards: PATCH and PUT semantics ----------------------------------------------------------


def test_forward_patch_semantics(api: Api, forward: str) -> None:
    url = f"{FWD}/{forward}"
    meta, _ = api.forward(forward)
    p1 = meta["ports"]
    assert_sync(api.c.patch(url, json={"config": {"user.a": "10", "user.c": "3"}}), 200, {})
    meta, tag = api.forward(forward)
    assert meta["config"] == {"target_address": "10.0.0.2", "user.a": "10", "user.b": "2",
                              "user.c": "3"}  # keys merged
    assert meta["description"] == "fixture" and meta["ports"] == p1  # kept when absent
    assert tag == forward_etag(meta)
    assert_sync(api.c.patch(url, json={"config": {"user.b": ""}}), 200, {})
    meta, _ = api.forward(forward)
    assert meta["config"] == {"target_address": "10.0.0.2", "user.a": "10", "user.c": "3"}
    p2 = [{"description": "new", "protocol": "udp", "listen_port": "5353",
           "target_port": "53", "target_address": "10.0.0.4"}]
    assert_sync(api.c.patch(url, json={"ports": p2}), 200, {})
    meta, _ = api.forward(forward)
    assert meta["ports"] == p2 and meta["description"] == "fixture"  # replaced when present
    assert meta["config"]["user.a"] == "10"
    kernel = api.kernel()["fwd_v4"]
    assert "198.51.100.50 . udp . 5353 : 10.0.0.4 . 53" in kernel
    assert "198.51.100.50 . tcp . 80 : 10.0.0.3 . 8080" not in kernel
    assert_sync(api.c.patch(url, json={"description": "desc only"}), 200, {})  # no config: fine
    meta, tag = api.forward(forward)
    assert meta["description"] == "desc only" and meta["ports"] == p2
    assert meta["config"] == {"target_address": "10.0.0.2", "user.a": "10", "user.c": "3"}
    assert_sync(api.c.patch(url, json={}), 200, {})
    assert api.forward(forward) == (meta, tag)  # an empty PATCH changes nothing
    assert_sync(api.c.patch(url, json={"config": None, "ports": None, "description": None}),
                200, {})
    assert api.forward(forward) == (meta, tag)  # null is absent
    assert_sync(api.c.patch(url, json={"config": {"target_address": ""}}), 200, {})
    meta, _ = api.forward(forward)
    assert "target_address" not in meta["config"]
    assert not any(e.startswith("198.51.100.50 ") for e in api.kernel()["fwd_whole_v4"])
    assert_sync(api.c.patch(url, json={"ports": []}), 200, {})
    meta, _ = api.forward(forward)
    assert meta["ports"] == [] and meta["description"] == "desc only"
    assert not any(e.startswith("198.51.100.50 ") for e in api.kernel()["fwd_v4"])


def test_forward_put_replaces_everything(api: Api, forward: str) -> None:
    url = f"{FWD}/{forward}"
    assert_sync(api.c.put(url, json={"description": "only this"}), 200, {})
    meta, tag = api.forward(forward)
    assert meta["description"] == "only this"
    assert meta["config"] == {} and meta["ports"] == []
    assert tag == forward_etag(meta)
    assert not any(e.startswith("198.51.100.50 ") for name, elems in api.kernel().items()
                   for e in elems)
    assert_sync(api.c.put(url, json={"config": {"target_address": "10.0.0.7"}}), 200, {})
    meta, _ = api.forward(forward)
    assert meta["description"] == "" and meta["config"] == {"target_address": "10.0.0.7"}
    assert "198.51.100.50 : 10.0.0.7" in api.kernel()["fwd_whole_v4"]


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_forward_put_patch_take_the_object_as_get_returns_it(api: Api, forward: str,
                                                             method: str) -> None:
    """The whole forward as GET returns it (pylxd's save()): ``listen_address`` (in any
    spelling of the address) and ``location`` accepted when unchanged, refused otherwise."""
    url = f"{FWD}/{forward}"
    meta, tag = api.forward(forward)
    ports = [*meta["ports"], {"description": "dns", "protocol": "udp", "listen_port": "53",
                              "target_port": "", "target_address": "10.0.0.5"}]
    body = {**meta, "description": "whole", "ports": ports,
            "listen_address": "::ffff:198.51.100.50"}
    assert_sync(api.c.request(method, url, headers={"If-Match": tag}, json=body), 200, {})
    meta2, tag2 = api.forward(forward)
    assert meta2 == {**meta, "description": "whole", "ports": ports}
    assert "198.51.100.50 . udp . 53 : 10.0.0.5 . 53" in api.kernel()["fwd_v4"]
    kernel = api.kernel()
    for field, value in (("listen_address", "198.51.100.51"), ("location", "elsewhere")):
        changed = {**meta2, "description": "not applied", field: value}
        assert_error(api.c.request(method, url, json=changed), 400,
                     f'Failed updating forward: Read-only field "{field}" cannot be changed')
        assert api.forward(forward) == (meta2, tag2)
        assert api.kernel() == kernel
    stale = api.c.request(method, url, headers={"If-Match": tag}, json={**meta2, "ports": []})
    assert_error(stale, 412, f"ETag doesn't match: {tag2} vs {tag}")
    assert api.forward(forward) == (meta2, tag2)
    assert api.kernel() == kernel


# -- bad bodies ---------------------------------------------------------------------------------

BAD_POST_BODIES = [
    pytest.param(b'{"listen_address": "198.51.100.40",', None, id="malformed-json"),
    pytest.param(b"", None, id="empty-body"),
    pytest.param(b"not json", None, id="not-json"),
    pytest.param(b"[]", None, id="json-array"),
    pytest.param(b'"198.51.100.40"', None, id="json-string"),
    pytest.param({"listen_address": "198.51.100.40", "ports": [
        {"protocol": "tcp", "listen_port": 80, "target_address": "10.0.0.3"}]}, "listen_port",
        id="listen_port-int"),
    pytest.param({"listen_address": "198.51.100.40", "description": 5}, "description",
                 id="description-int"),
    pytest.param({"listen_address": "198.51.100.40", "config": {"user.a": 1}}, "config",
                 id="config-value-int"),
    pytest.param({"listen_address": "198.51.100.40", "config": ["a"]}, "config",
                 id="config-list"),
    pytest.param({"listen_address": "198.51.100.40", "ports": {}}, "ports", id="ports-object"),
    pytest.param({"listen_address": "198.51.100.40", "ports": ["tcp"]}, "ports",
                 id="port-string"),
    pytest.param({"listen_address": 3325256744}, "listen_address", id="listen_address-int"),
    pytest.param({"listen_address": None}, "listen_address", id="listen_address-null"),
    pytest.param({"listen_address": "198.51.100.40", "bogus": 1}, "bogus", id="unknown-field"),
    pytest.param({"listen_address": "198.51.100.40", "location": "x"}, "location",
                 id="unknown-field-location"),
    pytest.param({"listen_address": "198.51.100.40", "ports": [
        {"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.3", "bogus": ""}]},
        "bogus", id="unknown-port-field"),
    pytest.param({"description": "no address"}, "listen_address", id="missing-listen_address"),
    pytest.param({}, "listen_address", id="empty-object"),
]


def _send(c: httpx.Client, method: str, url: str, body: Any) -> httpx.Response:
    if isinstance(body, bytes):
        return c.request(method, url, content=body, headers={"Content-Type": "application/json"})
    return c.request(method, url, json=body)


@pytest.mark.parametrize("body, names", BAD_POST_BODIES)
def test_bad_forward_post_body_is_400(api: Api, body: Any, names: str | None) -> None:
    before = api.listed()
    message = assert_error(_send(api.c, "POST", FWD, body), 400)
    if names:
        assert names in message, message
    assert api.listed() == before


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize("body, names", [
    (b'{"description": ', None),
    (b"[1, 2]", None),
    ({"description": ["x"]}, "description"),
    ({"config": {"user.a": True}}, "config"),
    ({"ports": [{"protocol": "tcp", "listen_port": 80, "target_address": "10.0.0.3"}]},
     "listen_port"),
    ({"ports": [{"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.3",
                 "target_port": 8080}]}, "target_port"),
    ({"listen_address": "198.51.100.51"}, "listen_address"),  # read-only: another address
    ({"location": "elsewhere"}, "location"),  # read-only: another member
    ({"name": "198.51.100.50"}, "name"),  # not a field of a forward at all
    ({"bogus": "x"}, "bogus"),
])
def test_bad_forward_put_patch_body_is_400_and_changes_nothing(
        api: Api, forward: str, method: str, body: Any, names: str | None) -> None:
    before, kernel = api.forward(forward), api.kernel()
    message = assert_error(_send(api.c, method, f"{FWD}/{forward}", body), 400)
    if names:
        assert names in message, message
    assert api.forward(forward) == before
    assert api.kernel() == kernel


@pytest.mark.parametrize("body, names", [
    (b"{", None),
    ({"config": {}}, "name"),
    ({"name": 5}, "name"),
    ({"name": "brx", "config": {"ipv4.nat": True}}, "config"),
    ({"name": "brx", "bogus": 1}, "bogus"),
])
def test_bad_network_post_body_is_400(api: Api, body: Any, names: str | None) -> None:
    before = assert_sync(api.c.get("/1.0/networks"))
    message = assert_error(_send(api.c, "POST", "/1.0/networks", body), 400)
    if names:
        assert names in message, message
    assert assert_sync(api.c.get("/1.0/networks")) == before


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_bad_network_put_patch_body_is_400(api: Api, method: str) -> None:
    before = api.network("br0")
    for body, names in ((b"{x", None), ({"config": {"user.a": 1}}, "config"),
                        ({"name": "other"}, "name"), ({"bogus": 1}, "bogus")):
        message = assert_error(_send(api.c, method, "/1.0/networks/br0", body), 400)
        if names:
            assert names in message, message
        assert api.network("br0") == before


# -- validation: 400 with LXD's messages --------------------------------------------------------

T = "10.0.0.3"


def _port(**kw: str) -> dict[str, str]:
    return {"protocol": "tcp", "listen_port": "80", "target_address": T, **kw}


VALIDATION = [
    ("unspecified-v4", "0.0.0.0", {}, [], 'Cannot use unspecified address: "0.0.0.0"'),
    ("unspecified-v6", "::", {}, [], 'Cannot use unspecified address: "::"'),
    ("listen-not-ip", "foo", {}, [],
     'Failed parsing address forward listen address "foo": invalid CIDR address: foo/32'),
    ("config-unknown-key", None, {"foo": "bar"}, [], 'Invalid option "foo"'),
    ("default-target-not-ip", None, {"target_address": "bad"}, [], "Invalid default target address"),
    ("default-target-outside", None, {"target_address": "192.0.2.5"}, [],
     "Default target address is not within the network subnet"),
    ("default-target-family", None, {"target_address": "fd00:1::2"}, [],
     "Cannot mix IP versions in listen address and default target address"),
    ("protocol-sctp", None, {}, [_port(protocol="sctp")],
     "Invalid port protocol in port specification 0, protocol must be one of: tcp, udp"),
    ("protocol-upper", None, {}, [_port(protocol="TCP")],
     "Invalid port protocol in port specification 0, protocol must be one of: tcp, udp"),
    ("port-target-not-ip", None, {}, [_port(target_address="x")], "Invalid target address in port specification 0"),
    ("port-target-is-default", None, {"target_address": T}, [_port()],
     "Target address is same as default target address in port specification 0"),
    ("port-target-family", None, {}, [_port(target_address="fd00:1::3")],
     "Cannot mix IP versions in listen address and port specification 0 target address"),
    ("port-target-outside", None, {}, [_port(target_address="192.0.2.3")],
     "Target address is not within the network subnet in port specification 0"),
    ("listen-port-empty", None, {}, [_port(listen_port="")], "Missing listen port in port specification 0"),
    ("listen-port-reversed", None, {}, [_port(listen_port="81-80")],
     "Invalid listen port in port specification 0: End port should be higher than start port"),
    ("listen-port-not-number", None, {}, [_port(listen_port="abc")],
     'Invalid listen port in port specification 0: strconv.ParseInt: parsing "abc": '
     "invalid syntax"),
    ("listen-port-three-parts", None, {}, [_port(listen_port="1-2-3")],
     'Invalid listen port in port specification 0: Invalid port range "1-2-3"'),
    ("listen-port-superscript-digit", None, {}, [_port(listen_port="²")],
     'Invalid listen port in port specification 0: strconv.ParseInt: parsing "²": '
     "invalid syntax"),
    ("listen-port-arabic-digit", None, {}, [_port(listen_port="٣")],
     'Invalid listen port in port specification 0: strconv.ParseInt: parsing "٣": '
     "invalid syntax"),
    ("listen-port-70000", None, {}, [_port(listen_port="70000")],
     "Invalid listen port in port specification 0: Port 70000 is out of range (1-65535)"),
    ("listen-port-0", None, {}, [_port(listen_port="0")],
     "Invalid listen port in port specification 0: Port 0 is out of range (1-65535)"),
    ("target-port-not-number", None, {}, [_port(target_port="x")], "Invalid target port in port specification 0"),
    ("target-port-superscript-digit", None, {}, [_port(target_port="²")], "Invalid target port in port specification 0"),
    ("port-count-mismatch", None, {}, [_port(listen_port="80,81,82", target_port="90,91")],
     "Mismatch of listen port(s) and target port(s) count in port specification 0"),
    ("duplicate-across-specs", None, {}, [_port(), _port(listen_port="79-80")],
     'Duplicate listen port 80 for protocol "tcp" in port specification 1'),
    ("duplicate-in-spec", None, {}, [_port(listen_port="80,80")],
     'Duplicate listen port 80 for protocol "tcp" in port specification 0'),
]


@pytest.mark.parametrize("case, listen, config, ports, message", VALIDATION,
                         ids=[v[0] for v in VALIDATION])
def test_forward_create_validation_is_400(api: Api, case: str, listen: str | None,
                                          config: dict[str, str],
                                          ports: list[dict[str, str]], message: str) -> None:
    listen = listen or "198.51.100.41"
    before, kernel = api.listed(), api.kernel()
    r = api.c.post(FWD, json={"listen_address": listen, "config": config, "ports": ports})
    try:
        assert_error(r, 400, f"Failed creating forward: {message}")  # LXD: 500
    finally:
        if r.status_code == 201:
            api.delete(listen)
    assert api.listed() == before
    assert api.kernel() == kernel


@pytest.mark.parametrize("case, listen, config, ports, message",
                         [v for v in VALIDATION if v[1] is None],
                         ids=[v[0] for v in VALIDATION if v[1] is None])
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_forward_update_validation_is_400(api: Api, forward: str, method: str, case: str,
                                          listen: str | None, config: dict[str, str],
                                          ports: list[dict[str, str]], message: str) -> None:
    before, kernel = api.forward(forward), api.kernel()
    body: dict[str, Any] = {"config": config, "ports": ports}
    if method == "PATCH" and "target_address" not in config:
        body["config"] = {**config, "target_address": ""}  # the fixture's target would clash
    r = api.c.request(method, f"{FWD}/{forward}", json=body)
    assert_error(r, 400, f"Failed updating forward: {message}")
    assert api.forward(forward) == before
    assert api.kernel() == kernel


def test_unpaired_surrogate_is_not_a_server_error(api: Api) -> None:
    """JSON may spell a lone UTF-16 surrogate (\\ud800); Go replaces it with U+FFFD. podnet may
    refuse it (400) or store a replacement, but never answer 500 or drop the connection."""
    outcomes: dict[bytes, int | str] = {}
    for raw in (b'{"listen_address": "198.51.100.42", "description": "\\ud800"}',
                b'{"listen_address": "198.51.100.42", "config": {"user.\\udfff": "x"}}',
                b'{"listen_address": "198.51.100.42", "ports": [{"protocol": "tcp", '
                b'"listen_port": "80", "target_address": "10.0.0.3", "description": "\\udbff"}]}'):
        try:
            r = api.c.post(FWD, content=raw, headers={"Content-Type": "application/json"})
            outcomes[raw] = r.status_code
            if r.status_code == 400:
                assert_error(r, 400)
        except httpx.TransportError as err:
            outcomes[raw] = f"{type(err).__name__}: {err}"
        finally:
            api.c.delete(f"{FWD}/198.51.100.42")
    assert all(v in (201, 400) for v in outcomes.values()), outcomes
    assert_sync(api.c.get("/1.0"))


# -- not found, conflicts, methods ------------------------------------------------------------


def test_unknown_network_and_forward_are_404(api: Api, forward: str) -> None:
    c = api.c
    assert_error(c.get("/1.0/networks/nope"), 404, "Network not found")
    assert_error(c.put("/1.0/networks/nope", json={}), 404, "Network not found")
    assert_error(c.patch("/1.0/networks/nope", json={}), 404, "Network not found")
    assert_error(c.delete("/1.0/networks/nope"), 404, "Failed loading network: Network not found")
    nope = "/1.0/networks/nope/forwards"
    assert_error(c.get(nope), 404, "Failed loading network: Network not found")
    assert_error(c.get(nope, params={"recursion": 1}), 404,
                 "Failed loading network: Network not found")
    assert_error(c.post(nope, json={"listen_address": "198.51.100.43"}), 404,
                 "Failed loading network: Network not found")
    for method in ("GET", "DELETE"):
        assert_error(c.request(method, f"{nope}/{forward}"), 404,
                     "Failed loading network: Network not found")
    for method in ("PUT", "PATCH"):
        assert_error(c.request(method, f"{nope}/{forward}", json={}), 404,
                     "Failed loading network: Network not found")
    missing = f"{FWD}/198.51.100.44"
    assert_error(c.get(missing), 404, "Network forward not found")
    assert_error(c.put(missing, json={}), 404, "Failed updating forward: Network forward not found")
    assert_error(c.patch(missing, json={}), 404,
                 "Failed updating forward: Network forward not found")
    assert_error(c.delete(missing), 404, "Failed deleting forward: Network forward not found")


def test_target_names_this_node_on_every_endpoint(api: Api, forward: str) -> None:
    """``?target=`` is taken by every network, forward and server endpoint (LXD's forward to a
    member, lxd/networks.go, lxd/network_forwards.go, lxd/api_1.0.go): a name that is no member
    is 404 ``Member "x" not found`` and changes nothing — a DELETE least of all; this node's
    name is served as without a target."""
    c = api.c
    bogus = {"target": "nosuchmember"}
    config = {"ipv4.address": "10.7.0.1/24", "ipv6.address": "none"}
    assert_sync(c.post("/1.0/networks", json={"name": "brtg", "config": config}), 201, None)
    try:
        fwd = f"{FWD}/{forward}"
        for method, url, body in (
            ("DELETE", "/1.0/networks/brtg", None),
            ("GET", "/1.0/networks", None),
            ("GET", "/1.0/networks/brtg", None),
            ("PATCH", "/1.0/networks/brtg", {"config": {"user.x": "1"}}),
            ("GET", FWD, None),
            ("POST", FWD, {"listen_address": "198.51.100.61"}),
            ("GET", fwd, None),
            ("PUT", fwd, {"config": {"target_address": "10.0.0.9"}}),
            ("PATCH", fwd, {"description": "changed"}),
            ("DELETE", fwd, None),
            ("GET", "/1.0", None),
            ("PATCH", "/1.0", {"config": {}}),
        ):
            r = c.request(method, url, params=bogus, json=body)
            assert_error(r, 404, 'Member "nosuchmember" not found')
        assert _bridge_exists(api, "brtg")
        meta, _ = api.network("brtg")
        assert meta["config"] == config, meta
        assert [f["listen_address"] for f in api.listed()] == [forward]
        got, _ = api.forward(forward)
        assert got["description"] == "fixture" and got["config"]["target_address"] == "10.0.0.2", got
        here = {"target": HOST}
        assert "/1.0/networks/brtg" in assert_sync(c.get("/1.0/networks", params=here))
        assert assert_sync(c.get(FWD, params=here)) == [f"{FWD}/{forward}"]
        assert assert_sync(c.get(fwd, params=here))["description"] == "fixture"
        assert_sync(c.delete("/1.0/networks/brtg", params=here), 200, {})
        assert not _bridge_exists(api, "brtg")
    finally:
        c.delete("/1.0/networks/brtg")


def test_duplicate_is_409(api: Api, forward: str) -> None:
    assert_error(api.c.post(FWD, json={"listen_address": forward}), 409,
                 "Failed creating forward: A forward for that listen address already exists")
    assert_error(api.c.post("/1.0/networks", json={"name": "br0", "config": BR0}), 409,
                 "The network already exists")


@pytest.mark.parametrize("path", ["/nope", "/1.0/nope", "/2.0", "/1.0/networks/br0/nope",
                                  "/1.0/networks/br0/forwards/198.51.100.50/extra",
                                  "/1.0/instances"])
def test_unknown_url_is_404(api: Api, path: str) -> None:
    assert_error(api.c.get(path), 404, "not found")


def test_the_root_lists_the_api_versions(api: Api) -> None:
    """``GET /`` is LXD's list of API versions, ``["/1.0"]``."""
    assert assert_sync(api.c.get("/")) == ["/1.0"]


@pytest.mark.parametrize("method, path", [
    ("DELETE", "/1.0"), ("POST", "/1.0"), ("PUT", "/1.0/networks"),
    ("DELETE", "/1.0/networks"), ("POST", "/1.0/networks/br0"),
    ("DELETE", FWD), ("PUT", FWD), ("POST", f"{FWD}/198.51.100.50"),
    ("POST", "/1.0/projects"),
])
def test_unsupported_method_is_501(api: Api, method: str, path: str) -> None:
    assert_error(api.c.request(method, path, json={}), 501, "not implemented")


def test_openapi_document(api: Api) -> None:
    r = api.c.get("/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert {"/1.0", "/1.0/networks", "/1.0/networks/{name}", "/1.0/networks/{name}/forwards",
            "/1.0/networks/{name}/forwards/{listen_address}"} <= set(paths)
    assert set(paths["/1.0/networks/{name}/forwards/{listen_address}"]) == {
        "get", "put", "patch", "delete"}


# -- the request log ----------------------------------------------------------------------------


def _log_lines(api: Api, requests: list[tuple[str, str]], marker: str,
               stream: str) -> list[str]:
    for method, path in requests:
        api.c.request(method, path)
    deadline = time.monotonic() + 30  # only a hang reaches it
    while True:
        text = api.server.stderr() if stream == "stderr" else \
            api.server.stderr() + api.server.stdout()
        lines = [x for x in text.splitlines() if marker in x]
        if len(lines) >= len(requests) or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def test_one_log_line_per_request(api: Api) -> None:
    marker = uuid.uuid4().hex
    requests = [("GET", f"/1.0/{marker}"), ("GET", f"/1.0/networks/{marker}"),
                ("DELETE", f"{FWD}/{marker}"), ("POST", f"/1.0/networks/{marker}")]
    lines = _log_lines(api, requests, marker, "both")
    assert len(lines) == len(requests), lines
    for line, (method, path), status in zip(lines, requests, (404, 404, 404, 501), strict=True):
        assert f"{method} {path}" in line and str(status) in line, line


def test_request_log_goes_to_stderr(api: Api) -> None:
    """Logs go to stderr (with the server's other messages and tracebacks); stdout stays
    empty."""
    marker = uuid.uuid4().hex
    lines = _log_lines(api, [("GET", f"/1.0/{marker}")], marker, "stderr")
    assert len(lines) == 1, (lines, api.server.stdout()[-500:])
    assert marker not in api.server.stdout()


# -- the socket ---------------------------------------------------------------------------------


def test_socket_mode_owner_group_and_graceful_stop(tmp_path: Path) -> None:
    """A server of its own in a world-traversable directory, so only the socket's own mode
    keeps other users out: 0660, owner root, group --group; SIGTERM: exit 0, socket gone."""
    need("root", "ip", "nft", "group:nogroup")
    group = "nogroup"
    gid = grp.getgrnam(group).gr_gid
    other_gid = next(g.gr_gid for g in grp.getgrall() if g.gr_gid not in (0, gid))
    lab = Lab()
    top = Path(tempfile.mkdtemp(prefix="podnet-api-sock-", dir="/tmp"))
    server = None
    try:
        top.chmod(0o755)
        data = top / "data"
        data.mkdir(mode=0o755)
        data.chmod(0o755)
        server = ApiServer(lab.node, data, tmp_path / "logs", "--group", group)
        st = os.stat(server.socket)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert (st.st_uid, st.st_gid) == (0, gid)
        st = os.stat(data)  # the data directory: the group may reach the socket, no one else
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o750, 0, gid)
        probe = ("import socket, sys; s = socket.socket(socket.AF_UNIX); "
                 "s.connect(sys.argv[1]); s.sendall(b'GET /1.0 HTTP/1.0\\r\\n\\r\\n'); "
                 "print(s.recv(100).split(b'\\r\\n')[0].decode())")

        def connect_as(uid: int, gid_: int) -> subprocess.CompletedProcess[str]:
            return sh("setpriv", f"--reuid={uid}", f"--regid={gid_}", "--clear-groups",
                      "/usr/bin/python3", "-c", probe, str(server.socket),
                      check=False)

        other = connect_as(65534, other_gid)  # neither owner nor group
        assert other.returncode != 0 and "PermissionError" in other.stderr, other
        member = connect_as(65534, gid)  # the group may
        assert member.returncode == 0 and member.stdout.startswith("HTTP/1.1 200"), member
        with server.client() as c:
            assert_sync(c.get("/1.0"))
        assert server.stop() == 0, server.stderr()
        assert not server.socket.exists()
        assert "Shutting down" in server.stderr() or "Finished" in server.stderr()
    finally:
        if server is not None:
            server.kill()
        lab.close()
        shutil.rmtree(top, ignore_errors=True)


def test_default_group_is_roots_and_socket_of_the_module_server(api: Api) -> None:
    st = os.stat(api.server.socket)
    assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_mode & 0o007 == 0
    assert (st.st_uid, st.st_gid) == (0, 0)
    st = os.stat(api.server.data)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o750, 0, 0)


def test_a_data_dir_others_may_write_is_refused(tmp_path: Path) -> None:
    """podnet would make it 0750: a shared directory such as /tmp (sticky, world-writable) is
    refused instead, and left as it was."""
    need("root", "ip", "nft")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    out = sh(PODNETCTL, "serve", "--data-dir", str(shared), check=False, timeout=60)
    assert out.returncode == 1, out
    assert f"Error: {shared} is writable by others (mode 1777)" in out.stderr, out.stderr
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
    assert list(shared.iterdir()) == []  # no store, no socket


def test_json_content_type_with_parameters_is_accepted(api: Api) -> None:
    """Bodies must be application/json (415 otherwise: test_api_limits.py); parameters such as
    a UTF-8 charset are fine."""
    r = api.c.post(FWD, content=json.dumps({"listen_address": "198.51.100.45"}).encode(),
                   headers={"Content-Type": "Application/JSON; charset=UTF-8"})
    try:
        assert_sync(r, 201, None)
    finally:
        api.delete("198.51.100.45")
