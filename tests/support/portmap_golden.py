"""The golden cases of podnet-portmap's iptables backend: one per option combination (the
reference portmap's options, containernetworking/plugins plugins/meta/portmap), and the
restore scripts podnet-portmap makes for each, on an empty nat table or on one another
container's ADD left. tests/unit/firewall/test_portmap_iptables_golden.py compares them with
the files in golden/portmap; tests/e2e/portmap/test_portmap_iptables_e2e.py loads them into
the kernel."""

from __future__ import annotations

from typing import Any

import golden
import paths
from podnet.firewall import portmap_iptables as rules
from podnet.plugins.podnet_portmap import PortmapConf
from podnet.values import ContainerNet
from portmap_helpers import as_saved, portmap_conf, tcp, udp

GOLDEN = paths.GOLDEN / "portmap"

NET = "mynet"
CID = "0f3b2c1d9e8a"
OTHER_CID = "77aa55bb33cc"  # a second container of the same network in the saved tables
V4 = ContainerNet.from_cidr("172.16.30.2/24")  # the example of the reference portmap's README
V6 = ContainerNet.from_cidr("fd00:10:30::2/64")
OTHER_V4 = ContainerNet.from_cidr("172.16.30.3/24")
OTHER_V6 = ContainerNet.from_cidr("fd00:10:30::3/64")
SEED_PORTS = [tcp(8080, 80), tcp(8043, 443)]
HOST_IP_PORTS = [tcp(8080, 80, "192.0.2.1"), tcp(8443, 443, "2001:db8:1::1"), udp(5353, 53),
                 udp(5354, 54, "0.0.0.0"), tcp(8444, 444, "::")]

# name → (container family, options, mappings)
GOLDEN_CASES: dict[str, tuple[int, dict[str, Any], list[dict[str, Any]]]] = {
    "defaults": (4, {}, SEED_PORTS),
    "snat_false": (4, {"snat": False}, SEED_PORTS),
    "mark_bit_5": (4, {"markMasqBit": 5}, SEED_PORTS),
    "external_chain": (4, {"externalSetMarkChain": "KUBE-MARK-MASQ"}, SEED_PORTS),
    "conditions_v4": (4, {"conditionsV4": ["!", "-d", "192.0.2.0/24"],
                          "conditionsV6": ["!", "-d", "fc00::/7"]}, SEED_PORTS),
    "conditions_v6": (6, {"conditionsV4": ["!", "-d", "192.0.2.0/24"],
                          "conditionsV6": ["!", "-d", "fc00::/7"]}, SEED_PORTS),
    "conditions_match": (4, {"conditionsV4": ["-m", "addrtype", "!", "--src-type", "LOCAL",
                                              "!", "-s", "10.9.0.0/16"]}, SEED_PORTS),
    "masq_all": (4, {"masqAll": True}, SEED_PORTS),
    "masq_all_v6": (6, {"masqAll": True}, SEED_PORTS),
    "host_ip": (4, {}, HOST_IP_PORTS),
    "host_ip_v6": (6, {}, HOST_IP_PORTS),
    "ipv6": (6, {}, SEED_PORTS),
    "ports20_tcp": (4, {}, [tcp(9000 + i, 80 + i) for i in range(20)]),
    "tcp_udp": (4, {}, [tcp(8080, 80), udp(8053, 53), tcp(8443, 443), udp(8054, 54)]),
}


def parsed(options: dict[str, Any], mappings: list[dict[str, Any]]) -> PortmapConf:
    """The options and mappings as podnet-portmap parses them from a NetConf."""
    return PortmapConf(portmap_conf("podnet-portmap", None, mappings, name=NET, **options))


def container(family: int, other: bool = False) -> ContainerNet:
    if other:
        return OTHER_V6 if family == 6 else OTHER_V4
    return V6 if family == 6 else V4


def setup_text(case: str, saved: str = "", cid: str = CID, other: bool = False) -> str:
    family, options, mappings = GOLDEN_CASES[case]
    conf = parsed(options, mappings)
    return rules.setup_script(rules.SavedNat(saved), conf.options, NET, cid,
                              container(family, other), conf.port_mappings)


def extra_chains(case: str) -> tuple[str, ...]:
    """The externally managed chain of ``case``, which exists before any ADD."""
    return tuple(v for k, v in GOLDEN_CASES[case][1].items() if k == "externalSetMarkChain")


def add_scripts(case: str) -> list[str]:
    """The restore scripts of ADD OTHER_CID then ADD CID through ``case``, each generated from
    the table the one before left."""
    extra = extra_chains(case)
    first = setup_text(case, as_saved(extra_chains=extra), OTHER_CID, other=True)
    second = setup_text(case, as_saved(first, extra_chains=extra))
    return [first, second]


def saved_table(case: str) -> str:
    """The nat table after :func:`add_scripts`, as iptables-save prints it."""
    return as_saved(*add_scripts(case), extra_chains=extra_chains(case))


def check_golden(name: str, text: str) -> None:
    golden.match(GOLDEN / name, text)
