"""podnet-ipam's configuration (:class:`podnet.plugins.podnet_ipam_conf.IpamConf`), the podnet
plugin's NetConf with an ``ipam`` section, the result a delegated IPAM plugin returns
(:func:`podnet.ipam.delegate.parse_result`) and the shape of podnet-ipam's result: every refusal
is code 7 (or 6 for an unparsable address) naming the key. No root."""

from __future__ import annotations

from typing import Any

import pytest

from plugin_calls import ipam_conf
from podnet.cni import env as cni_env
from podnet.errors import CNIError
from podnet.ipam import delegate
from podnet.netconf import PodnetConf
from podnet.plugins import podnet_ipam
from podnet.plugins.podnet_ipam_conf import IpamConf
from podnet.store.pods import ipam_key


# -- configuration (no root) ----------------------------------------------------------------------
def test_ipam_conf_defaults_and_routes() -> None:
    c = IpamConf(ipam_conf("/var/lib/podnet", ["10.22.0.0/24", "fd00:22::/64"],
                           routes=[{"dst": "10.0.0.5/8"}, {"dst": "fd00::/8", "gw": "fd00:22::fe"}]))
    assert c.name == "brnet" and c.data_dir == "/var/lib/podnet" and c.busy_timeout == 5.0
    assert c.range_strings == ["10.22.0.0/24", "fd00:22::/64"]
    assert c.routes == [{"dst": "10.0.0.0/8"}, {"dst": "fd00::/8", "gw": "fd00:22::fe"}]
    bare = IpamConf({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "podnet-ipam",
                                                                   "ranges": ["10.1.0.0/16"]}})
    assert bare.data_dir == "/var/lib/podnet" and bare.routes is None


@pytest.mark.parametrize(("ipam", "key"), [
    ({"ranges": None}, "ipam.ranges"),
    ({"ranges": ["10.22.0.1/24"]}, "ipam.ranges[0]"),
    ({"ranges": ["10.22.0.0/24", "x"]}, "ipam.ranges[1]"),
    ({"dataDir": "rel"}, "ipam.dataDir"),
    ({"busyTimeout": -1}, "ipam.busyTimeout"),
    ({"routes": {"dst": "0.0.0.0/0"}}, "ipam.routes"),
    ({"routes": [{"gw": "10.22.0.1"}]}, "ipam.routes[0].dst"),
    ({"routes": [{"dst": "0.0.0.0/0", "gw": "fd00::1"}]}, "ipam.routes[0].gw"),
    ({"routes": [{"dst": "0.0.0.0/0", "gw": "nope"}]}, "ipam.routes[0].gw"),
])
def test_ipam_conf_errors_name_the_key(ipam: dict[str, Any], key: str) -> None:
    raw = ipam_conf("/tmp/d")
    raw["ipam"].update(ipam)
    with pytest.raises(CNIError) as err:
        IpamConf(raw)
    assert err.value.code == 7 and err.value.msg.startswith(key + ":"), err.value.msg


def test_podnet_conf_with_ipam() -> None:
    base = {"cniVersion": "1.0.0", "name": "n", "type": "podnet"}
    c = PodnetConf({**base, "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}})
    assert c.ipam_type == "host-local" and c.ranges == []
    assert PodnetConf({**base, "ranges": ["10.1.0.0/24"]}).ipam_type == ""
    for raw, key in [({"ipam": {"type": "host-local"}, "ranges": ["10.1.0.0/24"]}, "ranges"),
                     ({"ipam": "host-local"}, "ipam"), ({"ipam": {}}, "ipam.type"),
                     ({"ipam": {"type": "../bin/x"}}, "ipam.type"), ({}, "ranges")]:
        with pytest.raises(CNIError) as err:
            PodnetConf({**base, **raw})
        assert err.value.code == 7 and err.value.msg.startswith(key + ":"), err.value.msg


# -- results ----------------------------------------------------------------------------------------
def test_ipam_result_shape() -> None:
    import ipaddress

    alloc = {4: ("10.22.0.7", "10.22.0.1", ipaddress.ip_network("10.22.0.0/24")),
             6: ("fd00:22::7", "fd00:22::1", ipaddress.ip_network("fd00:22::/64"))}
    res = podnet_ipam.ipam_result(alloc, None)
    assert res == {"cniVersion": "1.1.0",
                   "ips": [{"address": "10.22.0.7/24", "gateway": "10.22.0.1"},
                           {"address": "fd00:22::7/64", "gateway": "fd00:22::1"}],
                   "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1"}, {"dst": "::/0", "gw": "fd00:22::1"}],
                   "dns": {}}
    assert podnet_ipam.ipam_result(alloc, [])["routes"] == []
    assert podnet_ipam.ipam_result(alloc, [{"dst": "10.0.0.0/8"}])["routes"] == [{"dst": "10.0.0.0/8"}]


def test_parse_delegated_result() -> None:
    alloc, dns = delegate.parse_result({
        "cniVersion": "0.4.0",
        "ips": [{"version": "4", "address": "10.1.2.3/24", "gateway": "10.1.2.254"},
                {"version": "6", "address": "fd00:1::3/64"}],
        "dns": {"nameservers": ["10.1.2.254"]}}, "host-local")
    assert {f: (a, g, str(n)) for f, (a, g, n) in alloc.items()} == {
        4: ("10.1.2.3", "10.1.2.254", "10.1.2.0/24"), 6: ("fd00:1::3", "fd00:1::1", "fd00:1::/64")}
    assert dns == {"nameservers": ["10.1.2.254"]}
    bad = [
        ({"ips": []}, 7),
        ({}, 7),
        ({"ips": [{"address": "10.1.2.3/24"}, {"address": "10.1.2.4/24"}]}, 7),
        ({"ips": [{"address": "10.1.2.3/32"}]}, 7),  # no gateway can be derived
        ({"ips": [{"address": "10.1.2.1/24"}]}, 7),  # the derived gateway is the address
        ({"ips": [{"address": "10.1.2.3/24", "gateway": "fd00::1"}]}, 7),
        ({"ips": [{"address": "banana"}]}, 6),
        ({"ips": [{"address": "10.1.2.3/24", "gateway": "x"}]}, 6),
    ]
    for result, code in bad:
        with pytest.raises(CNIError) as err:
            delegate.parse_result(result, "static")
        assert err.value.code == code, (result, err.value.msg)



def test_ipam_key_never_equals_a_container_id() -> None:
    assert ipam_key("c1", "eth0", "net") == "c1/eth0/net"
    assert cni_env.valid_container_id("c1") and not cni_env.valid_container_id(ipam_key("c1", "eth0", "n"))
