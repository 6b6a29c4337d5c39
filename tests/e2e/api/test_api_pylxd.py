"""pylxd 2.4.2, a real LXD client library, manages podnet through ``podnetctl serve``: its ``save()`` sends back the whole object as GET returned it (a network's ``name``
and ``type``, a forward's ``listen_address`` and ``location``), which LXD accepts by ignoring
them. podnet accepts them when unchanged, refuses a changed one (400, naming it), and still
enforces ``If-Match`` (412, nothing changed).

The server runs in a node namespace (its bridges and table ``inet podnet`` live there); pylxd
talks to ``<dataDir>/unix.socket`` from the test process, as it would to LXD's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pylxd
import pytest
from pylxd.exceptions import LXDAPIException, NotFound

from api_helpers import ApiServer, assert_sync, expected_maps, kernel_maps
from envgate import need
from netns import Lab

pytestmark = pytest.mark.root

CONFIG = {"ipv4.address": "10.40.0.1/24", "ipv6.address": "none"}
LISTEN = "198.51.100.80"


@dataclass
class Py:
    lab: Lab
    server: ApiServer
    client: Any  # pylxd.Client

    def forwards(self, network: str) -> list[dict[str, Any]]:
        with self.server.client() as c:
            return list(assert_sync(c.get(f"/1.0/networks/{network}/forwards",
                                          params={"recursion": 1})))

    def kernel_matches(self, network: str) -> None:
        assert kernel_maps(self.lab.node) == expected_maps(self.forwards(network))


@pytest.fixture
def py(tmp_path: Path) -> Iterator[Py]:
    need("root", "ip", "nft")
    lab = Lab()
    server = None
    try:
        server = ApiServer(lab.node, tmp_path / "data", tmp_path / "logs")
        client = pylxd.Client(endpoint=str(server.socket))
        assert client.trusted and client.has_api_extension("network_forward")
        yield Py(lab, server, client)
        assert server.stop() == 0, server.stderr()
    finally:
        if server is not None:
            server.kill()
        lab.close()


def _refused(call: Any) -> tuple[int, str]:
    with pytest.raises(LXDAPIException) as caught:
        call()
    return caught.value.response.status_code, str(caught.value)


def test_network_lifecycle_with_save(py: Py) -> None:
    net = py.client.networks.create("brpy", description="made by pylxd", type="bridge",
                                    config=dict(CONFIG))
    assert (net.name, net.type, net.description, net.managed) == (
        "brpy", "bridge", "made by pylxd", True)
    assert py.client.networks.exists("brpy")
    net = py.client.networks.get("brpy")
    net.description = "saved by pylxd"
    net.config = {**net.config, "user.owner": "pylxd", "ipv4.nat": "true"}
    net.save()
    again = py.client.networks.get("brpy")
    assert again.description == "saved by pylxd"
    assert again.config == {**CONFIG, "user.owner": "pylxd", "ipv4.nat": "true"}

    # a read-only field changed: refused with its name, nothing applied
    again.type = "macvlan"
    again.description = "not applied"
    assert _refused(again.save) == (400, 'Read-only field "type" cannot be changed')
    body = {**py.client.networks.get("brpy").marshall(), "name": "brother"}
    assert _refused(lambda: py.client.api.networks["brpy"].put(json=body)) == (
        400, 'Read-only field "name" cannot be changed')
    now = py.client.networks.get("brpy")
    assert (now.type, now.description) == ("bridge", "saved by pylxd")

    # If-Match still holds: a tag from before the last change is stale
    stale = py.client.api.networks["brpy"].get().headers["ETag"]
    now.description = "newer"
    now.save()
    tag = py.client.api.networks["brpy"].get().headers["ETag"]
    status, message = _refused(lambda: py.client.api.networks["brpy"].put(
        json={**now.marshall(), "description": "stale"}, headers={"If-Match": stale}))
    assert status == 412 and message == (
        f"ETag doesn't match: {tag.strip(chr(34))} vs {stale.strip(chr(34))}")
    assert py.client.networks.get("brpy").description == "newer"

    now.delete()
    assert not py.client.networks.exists("brpy")
    with pytest.raises(NotFound):
        py.client.networks.get("brpy")


def test_forward_lifecycle_with_save(py: Py) -> None:
    net = py.client.networks.create("brpf", type="bridge", config=dict(CONFIG))
    try:
        net.forwards.create({
            "listen_address": LISTEN, "description": "web",
            "config": {"target_address": "10.40.0.2"},
            "ports": [{"description": "http", "protocol": "tcp", "listen_port": "80",
                       "target_port": "8080", "target_address": "10.40.0.3"}]})
        fwd = net.forwards.get(LISTEN)
        assert (fwd.listen_address, fwd.description, fwd.config) == (
            LISTEN, "web", {"target_address": "10.40.0.2"})
        assert fwd.location  # this node
        py.kernel_matches("brpf")

        fwd.description = "web and dns"
        fwd.ports = [*fwd.ports, {"description": "dns", "protocol": "udp", "listen_port": "53",
                                  "target_port": "", "target_address": "10.40.0.4"}]
        fwd.ports[0]["listen_port"] = "80,443"
        fwd.ports[0]["target_port"] = "8080,8443"
        fwd.save()
        again = net.forwards.get(LISTEN)
        assert again.description == "web and dns"
        assert [(p["protocol"], p["listen_port"], p["target_port"], p["target_address"])
                for p in again.ports] == [("tcp", "80,443", "8080,8443", "10.40.0.3"),
                                          ("udp", "53", "", "10.40.0.4")]
        py.kernel_matches("brpf")
        kernel = kernel_maps(py.lab.node)
        assert f"{LISTEN} . udp . 53 : 10.40.0.4 . 53" in kernel["fwd_v4"]

        # read-only fields changed: refused with their names, nothing applied
        again.location = "another-member"
        again.description = "not applied"
        assert _refused(again.save) == (
            400, 'Failed updating forward: Read-only field "location" cannot be changed')
        body = {**net.forwards.get(LISTEN).marshall(), "listen_address": "198.51.100.81"}
        api = py.client.api.networks["brpf"].forwards[LISTEN]
        assert _refused(lambda: api.put(json=body)) == (
            400, 'Failed updating forward: Read-only field "listen_address" cannot be changed')
        assert net.forwards.get(LISTEN).description == "web and dns"
        assert kernel_maps(py.lab.node) == kernel

        # If-Match: a stale tag changes nothing, in the store or the kernel
        stale = api.get().headers["ETag"]
        now = net.forwards.get(LISTEN)
        now.ports = now.ports[:1]
        now.save()
        kernel = kernel_maps(py.lab.node)
        tag = api.get().headers["ETag"]
        status, message = _refused(lambda: api.put(json={**now.marshall(), "ports": []},
                                                   headers={"If-Match": stale}))
        assert status == 412 and message == (
            f"ETag doesn't match: {tag.strip(chr(34))} vs {stale.strip(chr(34))}")
        assert len(net.forwards.get(LISTEN).ports) == 1
        assert kernel_maps(py.lab.node) == kernel
        py.kernel_matches("brpf")

        now.delete()
        with pytest.raises(NotFound):
            net.forwards.get(LISTEN)
        assert py.forwards("brpf") == []
        py.kernel_matches("brpf")
    finally:
        net.delete()
    assert not py.client.networks.exists("brpf")
