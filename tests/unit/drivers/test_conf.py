"""NetConf validation (no root): every bad value is code 7 naming its key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podnet.errors import CNIError
from podnet.netconf import PodnetConf

BASE = {"cniVersion": "1.0.0", "name": "kindnet", "type": "podnet", "ranges": ["10.244.2.0/24"]}


def conf(**kw: object) -> PodnetConf:
    return PodnetConf({**BASE, **kw})


def test_seed_conflist_entry_defaults() -> None:
    c = conf(capabilities={"portMappings": True})
    assert c.data_dir == "/var/lib/podnet" and c.mtu == 0 and c.ip_masq is True
    assert c.range_strings == ["10.244.2.0/24"] and c.port_mappings == []


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"ranges": []}, "ranges"),
        ({"ranges": ["10.244.2.0/33"]}, "ranges[0]"),
        ({"ranges": ["10.244.2.5/24"]}, "ranges[0]"),
        ({"ranges": ["10.0.0.0/24", "banana"]}, "ranges[1]"),
        ({"ranges": ["10.0.0.0/31"]}, "ranges[0]"),
        ({"mtu": -1}, "mtu"),
        ({"mtu": 70000}, "mtu"),
        ({"mtu": 1000, "ranges": ["fd00::/64"]}, "mtu"),
        ({"ipMasq": "yes"}, "ipMasq"),
        ({"dataDir": "relative"}, "dataDir"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 0, "containerPort": 80}]}},
         "portMappings[0].hostPort"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 70000, "containerPort": 80}]}},
         "portMappings[0].hostPort"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80,
                                              "protocol": "icmp"}]}}, "portMappings[0].protocol"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80,
                                              "hostIP": "nope"}]}}, "portMappings[0].hostIP"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80},
                                             {"hostPort": 80, "containerPort": 81}]}},
         "portMappings[1]"),
    ],
)
def test_invalid_values_name_the_key(kw: dict, key: str) -> None:
    with pytest.raises(CNIError) as info:
        conf(**kw)
    assert info.value.code == 7
    assert key in info.value.msg


def test_port_mapping_normalisation() -> None:
    c = conf(runtimeConfig={"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "TCP", "hostIP": "0.0.0.0"},
        {"hostPort": 53, "containerPort": 53, "protocol": "udp", "hostIP": "2001:DB8::1"},
    ]})
    assert [(str(m.host_ip), m.protocol) for m in c.port_mappings] == [("0.0.0.0", "tcp"), ("2001:db8::1", "udp")]


@given(st.integers())
def test_any_port_outside_range_is_rejected(port: int) -> None:
    mappings = {"portMappings": [{"hostPort": port, "containerPort": 80}]}
    if 1 <= port <= 65535:
        assert conf(runtimeConfig=mappings).port_mappings[0].host_port == port
    else:
        with pytest.raises(CNIError):
            conf(runtimeConfig=mappings)
