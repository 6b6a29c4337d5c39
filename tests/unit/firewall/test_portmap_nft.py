"""podnet.firewall.portmap_nft without root: a listing read from ``nft -j`` JSON (canned here,
as nft 1.0 prints it), the scripts built on it, CHECK's list of what is missing, and the three
listing calls with nft replaced by a stub (mutation testing of the pure core,
docs/testing.md)."""

from __future__ import annotations

import copy
from ipaddress import ip_address
from typing import Any

import pytest

from podnet.firewall import nft, portmap_nft
from podnet.firewall import portmap_nft as pn
from podnet.firewall.portmap_iptables import PortmapOptions
from podnet.values import ContainerNet, PortMappingArg

NET, CID = "mynet", "ctr1"
CHAIN = pn.chain_name(NET, CID)
OTHER = pn.chain_name(NET, "ctr2")
V4 = ContainerNet.from_cidr("172.16.30.2/24")
V6 = ContainerNet.from_cidr("fd00::2/64")
MAPS = [PortMappingArg(8080, 80, "tcp", None), PortMappingArg(5353, 53, "udp", ip_address("192.0.2.1"))]
T = "inet podnet_portmap"


def chain(name: str, comment: str | None = None, table: str = "podnet_portmap") -> dict[str, Any]:
    body: dict[str, Any] = {"family": "inet", "table": table, "name": name, "handle": 3}
    if comment is not None:
        body["comment"] = comment
    return {"chain": body}


def vmap(name: str, elems: list[Any], table: str = "podnet_portmap") -> dict[str, Any]:
    body: dict[str, Any] = {"family": "inet", "name": name, "table": table, "map": "verdict",
                            "type": ["inet_proto", "inet_service"], "handle": 2}  # fmt: skip
    if elems:
        body["elem"] = elems
    return {"map": body}


def masq_rule(mark: int, chain_name: str = "postrouting", op: str = "==") -> dict[str, Any]:
    return {"rule": {"family": "inet", "table": "podnet_portmap", "chain": chain_name, "handle": 9,
                     "expr": [{"match": {"op": op, "left": {"&": [{"meta": {"key": "mark"}}, mark]},
                                         "right": mark}},
                              {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}},
                                         "right": 6}},
                              {"counter": None}, {"masquerade": None}]}}  # fmt: skip


def full_listing_items() -> list[dict[str, Any]]:
    return [
        {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
        {"table": {"family": "inet", "name": "podnet_portmap", "handle": 1}},
        vmap("dispatch_v4", [[{"concat": ["192.0.2.1", "udp", 5353]}, {"jump": {"target": CHAIN}}]]),
        vmap("dispatch_any_v4", [[{"concat": ["tcp", 8080]}, {"goto": {"target": CHAIN}}],
                                 [{"concat": ["tcp", 9090]}, {"jump": {"target": OTHER}}],
                                 [{"concat": ["udp", 7]}, {"accept": None}]]),
        vmap("dispatch_v6", []),
        vmap("dispatch_any_v6", [[{"concat": ["tcp", 8080]}, {"jump": {"target": CHAIN}}]]),
        vmap("unrelated", [[{"concat": ["tcp", 1]}, {"jump": {"target": CHAIN}}]]),
        vmap("dispatch_v4", [[{"concat": ["tcp", 1]}, {"jump": {"target": "x"}}]], table="other"),
        chain("prerouting"), chain("postrouting"), chain(CHAIN, comment="mynet ctr1"),
        chain(OTHER, comment=""), chain("foreign", table="other"),
        masq_rule(0x2000), masq_rule(0x10, op="!="), masq_rule(0x20, chain_name="output"),
        {"rule": {"family": "inet", "table": "podnet_portmap", "chain": "postrouting",
                  "expr": [{"match": {"op": "==", "left": {"meta": {"key": "oif"}}, "right": 1}}]}},
        {"rule": {"family": "inet", "table": "podnet_portmap", "chain": "postrouting"}},
        {},
        {"set": ["not", "a", "dict"]},
    ]  # fmt: skip


def test_listing_of_nothing() -> None:
    empty = pn.Listing(None)
    assert empty.exists is False
    assert (empty.chains, empty.owners, empty.masq_marks, empty.maps_seen) == (set(), {}, set(), set())
    assert empty.elements == {name: {} for name in pn.MAPS}
    assert empty.complete is False


def test_listing_reads_chains_elements_and_marks() -> None:
    listing = pn.Listing({"nftables": full_listing_items()})
    assert listing.exists is True
    assert listing.complete is False
    assert listing.chains == {"prerouting", "postrouting", CHAIN, OTHER}
    assert listing.owners == {CHAIN: "mynet ctr1"}
    assert listing.maps_seen == {"dispatch_v4", "dispatch_any_v4", "dispatch_v6", "dispatch_any_v6"}
    assert listing.elements == {
        "dispatch_v4": {"192.0.2.1 . udp . 5353": CHAIN},
        "dispatch_any_v4": {"tcp . 8080": CHAIN, "tcp . 9090": OTHER, "udp . 7": ""},
        "dispatch_v6": {},
        "dispatch_any_v6": {"tcp . 8080": CHAIN},
    }
    assert listing.masq_marks == {0x2000}
    # a single (not concatenated) key is its own text
    one = pn.Listing({"nftables": [vmap("dispatch_v4", [["10.0.0.1", {"jump": {"target": CHAIN}}]])]})
    assert one.elements["dispatch_v4"] == {"10.0.0.1": CHAIN}
    assert pn.Listing({"nftables": []}).exists is True


def test_key_text() -> None:
    assert pn._key_text({"concat": ["192.0.2.1", "udp", 5353]}) == "192.0.2.1 . udp . 5353"
    assert pn._key_text(8080) == "8080"  # a single-field key (a map of inet_service)
    assert pn._key_text("concat") == "concat"  # a plain string is never indexed


def listing_with(maps: list[str], marks: tuple[int, ...] = ()) -> pn.Listing:
    items = [vmap(name, []) for name in maps] + [masq_rule(m) for m in marks]
    return pn.Listing({"nftables": items})


def test_base_script_only_when_a_map_is_missing() -> None:
    all_maps = list(pn.MAPS)
    assert pn.base_script(listing_with(all_maps, (0x2000,)), PortmapOptions()) == []
    assert pn.base_script(listing_with(all_maps), PortmapOptions()) == [
        f"add rule {T} postrouting meta mark & 0x00002000 == 0x00002000 masquerade"]
    assert pn.base_script(listing_with(all_maps, (0x2000,)), PortmapOptions(mark_masq_bit=5)) == [
        f"add rule {T} postrouting meta mark & 0x00000020 == 0x00000020 masquerade"]
    assert pn.base_script(listing_with(all_maps), PortmapOptions(snat=False)) == []
    three = pn.base_script(listing_with(all_maps[:3], (0x2000,)), PortmapOptions())
    assert three[0] == f"add table {T}"
    assert three[-1] == f"add rule {T} hostports {pn.HOSTPORTS_RULES[-1]}"
    assert len(three) == 1 + 4 + 4 + 3 + 2 + 4
    fresh = pn.base_script(pn.Listing(None), PortmapOptions(mark_masq_bit=0))
    assert fresh[-1] == f"add rule {T} postrouting meta mark & 0x00000001 == 0x00000001 masquerade"
    assert pn.base_script(pn.Listing(None), PortmapOptions(snat=False))[-1] == fresh[-2]


def test_setup_script_replaces_and_takes_over_elements() -> None:
    listing = pn.Listing({"nftables": full_listing_items()})
    # the container now maps only tcp 8080 on any address, and also takes tcp 9090 from OTHER
    maps = [PortMappingArg(8080, 80, "tcp", None), PortMappingArg(9090, 90, "tcp", None)]
    text = pn.setup_script(listing, PortmapOptions(snat=False), 'my"net', CID, [V4], maps)
    lines = text.splitlines()
    chain_ = pn.chain_name('my"net', CID)
    assert lines[0] == f'add chain {T} {chain_} {{ comment "mynet ctr1"; }}'
    assert lines[1] == f"flush chain {T} {chain_}"
    text = pn.setup_script(listing, PortmapOptions(snat=False), NET, CID, [V4], maps)
    assert text.splitlines() == [
        f'add chain {T} {CHAIN} {{ comment "mynet ctr1"; }}',
        f"flush chain {T} {CHAIN}",
        # elements of this chain the new mappings no longer have
        f"delete element {T} dispatch_v4 {{ 192.0.2.1 . udp . 5353 }}",
        f"delete element {T} dispatch_any_v6 {{ tcp . 8080 }}",
        f"add rule {T} {CHAIN} tcp dport 8080 dnat ip to 172.16.30.2:80",
        f"add rule {T} {CHAIN} tcp dport 9090 dnat ip to 172.16.30.2:90",
        # tcp 8080 is already this chain's: not added again; tcp 9090 is taken from OTHER
        f"delete element {T} dispatch_any_v4 {{ tcp . 9090 }}",
        f"add element {T} dispatch_any_v4 {{ tcp . 9090 : jump {CHAIN} }}",
    ]


def test_teardown_script() -> None:
    listing = pn.Listing({"nftables": full_listing_items()})
    assert pn.teardown_script(listing, NET, CID) == "\n".join([
        f"delete element {T} dispatch_v4 {{ 192.0.2.1 . udp . 5353 }}",
        f"delete element {T} dispatch_any_v4 {{ tcp . 8080 }}",
        f"delete element {T} dispatch_any_v6 {{ tcp . 8080 }}",
        f"add chain {T} {CHAIN}", f"flush chain {T} {CHAIN}", f"delete chain {T} {CHAIN}",
    ]) + "\n"  # fmt: skip
    assert pn.teardown_script(pn.Listing(None), NET, CID) is None
    # a complete listing without the chain: only the elements go
    complete = pn.Listing({"nftables": [vmap(n, []) for n in pn.MAPS]})
    complete.complete = True
    assert pn.teardown_script(complete, NET, CID) == "\n"
    complete.chains.add(CHAIN)
    assert pn.teardown_script(complete, NET, CID) == (
        f"add chain {T} {CHAIN}\nflush chain {T} {CHAIN}\ndelete chain {T} {CHAIN}\n")
    # a maps-only listing cannot tell: the chain is made sure of and removed
    partial = pn.Listing({"nftables": [vmap(n, []) for n in pn.MAPS]})
    assert pn.teardown_script(partial, NET, CID) == (
        f"add chain {T} {CHAIN}\nflush chain {T} {CHAIN}\ndelete chain {T} {CHAIN}\n")


CHAIN_TEXT = f"""table inet podnet_portmap {{
	chain {CHAIN} {{
		comment "mynet ctr1"
		tcp dport 8080 dnat ip to 172.16.30.2:80
		ip daddr 192.0.2.1 udp dport 5353 dnat ip to 172.16.30.2:53
		tcp dport 8080 dnat ip6 to [fd00::2]:80
	}}
}}
"""


def test_missing() -> None:
    listing = pn.Listing({"nftables": full_listing_items()})
    assert pn.missing(pn.Listing(None), NET, CID, [V4], MAPS, CHAIN_TEXT) == [
        f"chain {CHAIN} of table {T}"]
    assert pn.missing(listing, NET, CID, [V4, V6], MAPS, CHAIN_TEXT) == []
    assert pn.missing(listing, NET, CID, [V4, V6], MAPS, "") == [
        "DNAT tcp/8080 to 172.16.30.2:80 in chain " + CHAIN,
        "DNAT udp/5353 to 172.16.30.2:53 in chain " + CHAIN,
        "DNAT tcp/8080 to [fd00::2]:80 in chain " + CHAIN,
    ]
    other_maps = [PortMappingArg(9090, 90, "tcp", None), PortMappingArg(53, 53, "udp", ip_address("fd00::1"))]
    assert pn.missing(listing, NET, CID, [V6], other_maps, "dport 9090 dnat ip6 to [fd00::2]:90") == [
        "element tcp . 9090 of map dispatch_any_v6",
        "element fd00::1 . udp . 53 of map dispatch_v6",
        f"DNAT udp/53 to [fd00::2]:53 in chain {CHAIN}",
    ]


class NftStub:
    """nft.list_json / nft.list_text answering from canned data, recording the calls."""

    def __init__(self, answers: dict[tuple[str, ...], Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def list_json(self, *what: str) -> Any:
        self.calls.append(what)
        return copy.deepcopy(self.answers.get(what))  # a fresh list per call, as nft gives

    def list_text(self, *what: str, terse: bool = False) -> Any:
        self.calls.append(what)
        return self.answers.get(what)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> NftStub:
    s = NftStub({})
    monkeypatch.setattr(nft, "list_json", s.list_json)
    monkeypatch.setattr(nft, "list_text", s.list_text)
    return s


def test_list_table(stub: NftStub) -> None:
    missing = pn.list_table()
    assert (missing.exists, missing.complete) == (False, False)
    assert stub.calls == [("table", "inet", "podnet_portmap")]
    stub.answers[("table", "inet", "podnet_portmap")] = full_listing_items()
    listing = pn.list_table()
    assert (listing.exists, listing.complete) == (True, True)
    assert listing.owners == {CHAIN: "mynet ctr1"}


def test_list_maps(stub: NftStub) -> None:
    assert pn.list_maps(True).maps_seen == set()
    assert stub.calls == [("maps", "inet")]  # no map: postrouting is not asked for
    stub.calls.clear()
    stub.answers[("maps", "inet")] = [vmap("dispatch_v4", []), vmap("dispatch_any_v4", [])]
    stub.answers[("chain", "inet", "podnet_portmap", "postrouting")] = [masq_rule(0x2000)]
    listing = pn.list_maps(True)
    assert stub.calls == [("maps", "inet"), ("chain", "inet", "podnet_portmap", "postrouting")]
    assert (listing.exists, listing.complete) == (True, False)
    assert listing.maps_seen == {"dispatch_v4", "dispatch_any_v4"}
    assert listing.masq_marks == {0x2000}
    stub.calls.clear()
    assert pn.list_maps(False).masq_marks == set()
    assert stub.calls == [("maps", "inet")]
    del stub.answers[("chain", "inet", "podnet_portmap", "postrouting")]
    assert pn.list_maps(True).maps_seen == {"dispatch_v4", "dispatch_any_v4"}


def test_chain_text(stub: NftStub) -> None:
    assert pn.chain_text(CHAIN) == ""
    assert stub.calls == [("chain", "inet", "podnet_portmap", CHAIN)]
    stub.answers[("chain", "inet", "podnet_portmap", CHAIN)] = CHAIN_TEXT
    assert pn.chain_text(CHAIN) == CHAIN_TEXT


def test_setup_text_on_an_empty_node() -> None:
    listing = portmap_nft.Listing(None)
    nets = [ContainerNet.from_cidr("172.16.30.2/24"), ContainerNet.from_cidr("fd00::2/64")]
    maps = [PortMappingArg(8080, 80, "tcp", None), PortMappingArg(5353, 53, "udp", ip_address("192.0.2.1"))]
    text = portmap_nft.setup_script(listing, PortmapOptions(), "mynet", "ctr1", nets, maps)
    chain = portmap_nft.chain_name("mynet", "ctr1")
    assert chain == "dn-5145007e2a8415ce07579"  # the iptables backend's hash
    assert f"add element inet podnet_portmap dispatch_any_v4 {{ tcp . 8080 : jump {chain} }}" in text
    assert f"add element inet podnet_portmap dispatch_any_v6 {{ tcp . 8080 : jump {chain} }}" in text
    assert f"add element inet podnet_portmap dispatch_v4 {{ 192.0.2.1 . udp . 5353 : jump {chain} }}" in text
    assert "dispatch_v6 { 192.0.2.1" not in text  # a v4 hostIP never maps to the v6 address
    rules = [line.split(f"{chain} ", 1)[1] for line in text.splitlines() if line.startswith(f"add rule inet podnet_portmap {chain}")]
    assert rules == [
        "tcp dport 8080 ip saddr 172.16.30.0/24 meta mark set meta mark | 0x00002000",
        "tcp dport 8080 ip saddr 127.0.0.1 meta mark set meta mark | 0x00002000",
        "tcp dport 8080 dnat ip to 172.16.30.2:80",
        "ip daddr 192.0.2.1 udp dport 5353 ip saddr 172.16.30.0/24 meta mark set meta mark | 0x00002000",
        "ip daddr 192.0.2.1 udp dport 5353 ip saddr 127.0.0.1 meta mark set meta mark | 0x00002000",
        "ip daddr 192.0.2.1 udp dport 5353 dnat ip to 172.16.30.2:53",
        "tcp dport 8080 ip6 saddr fd00::/64 meta mark set meta mark | 0x00002000",
        "tcp dport 8080 dnat ip6 to [fd00::2]:80",
    ]
    assert "meta mark & 0x00002000 == 0x00002000 masquerade" in text


def test_options_snat_false_and_masq_all() -> None:
    net = [ContainerNet.from_cidr("10.1.0.2/24")]
    maps = [PortMappingArg(80, 80, "tcp", None)]
    no_snat = portmap_nft.container_rules(PortmapOptions(snat=False), net[0], maps)
    assert no_snat == ["tcp dport 80 dnat ip to 10.1.0.2:80"]
    masq_all = portmap_nft.container_rules(PortmapOptions(masq_all=True, mark_masq_bit=5), net[0], maps)
    assert masq_all == ["tcp dport 80 meta mark set meta mark | 0x00000020", "tcp dport 80 dnat ip to 10.1.0.2:80"]
