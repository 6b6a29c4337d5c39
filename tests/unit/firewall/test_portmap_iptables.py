"""podnet.firewall.portmap_iptables without root: CHECK's list of missing rules against saved
tables, the comment cut, the order of conditions (mutation testing of the pure
core)."""

from __future__ import annotations

from ipaddress import ip_address

from podnet.firewall import portmap_iptables as rules
from podnet.firewall.portmap_iptables import PortmapOptions, SavedNat
from podnet.values import ContainerNet, PortMappingArg
from portmap_helpers import as_saved

NET, CID = "mynet", "ctr1"
V4 = ContainerNet.from_cidr("172.16.30.2/24")
V6 = ContainerNet.from_cidr("fd00:10:30::2/64")
MAPS = [PortMappingArg(8080, 80, "tcp", None), PortMappingArg(5353, 53, "udp", ip_address("192.0.2.1"))]
CHAIN = rules.dnat_chain_name(NET, CID)


def test_entry_comment_cut() -> None:
    # 'dnat name: "' + network + '" id: "' + id + '"': 20 characters around the two
    def full(n: int, c: int) -> str:
        return f'dnat name: "{"n" * n}" id: "{"c" * c}"'

    assert len(full(118, 117)) == 255
    assert rules.entry_comment("n" * 118, "c" * 117) == full(118, 117)
    # 256 characters: not cut with "..." (upstream cuts only longer ones), xt_comment keeps 255
    assert rules.entry_comment("n" * 118, "c" * 118) == full(118, 118)[:255]
    # longer: 253 characters and "...", of which the kernel keeps 255 characters
    assert rules.entry_comment("n" * 200, "c" * 200) == full(200, 200)[:253] + ".."


def test_split_standard() -> None:
    split = rules._split_standard
    assert split(["-i", "eth0", "-m", "addrtype", "!", "-o", "lo", "-x"]) == (
        ["-i", "eth0", "!", "-o", "lo"], ["-m", "addrtype", "-x"])
    assert split(["!", "-s", "10.0.0.0/8", "-d", "10.1.0.0/16"]) == (
        ["!", "-s", "10.0.0.0/8", "-d", "10.1.0.0/16"], [])
    assert split(["-m", "comment", "-d"]) == ([], ["-m", "comment", "-d"])  # -d without value
    assert split(["!", "-d"]) == ([], ["!", "-d"])
    assert split(["-s", "1.2.3.4", "!"]) == (["-s", "1.2.3.4"], ["!"])
    assert split([]) == ([], [])


def test_entry_rules_put_standard_conditions_first() -> None:
    options = PortmapOptions(conditions_v4=["-m", "addrtype", "-i", "eth0", "!", "-o", "lo"])
    got = rules.entry_rules(options, 4, NET, CID, [PortMappingArg(80, 80, "tcp", None)])
    assert got == [f'-i eth0 ! -o lo -p tcp -m comment --comment "dnat name: \\"mynet\\" id: '
                   f'\\"ctr1\\"" -m multiport --dports 80 -m addrtype -j {CHAIN}']  # fmt: skip


def saved_after_add(options: PortmapOptions, container: ContainerNet) -> str:
    return as_saved(rules.setup_script(SavedNat(as_saved()), options, NET, CID, container, MAPS))


def test_nothing_missing_after_setup() -> None:
    for options in (PortmapOptions(), PortmapOptions(snat=False), PortmapOptions(masq_all=True),
                    PortmapOptions(external_set_mark_chain="KUBE-MARK-MASQ")):  # fmt: skip
        for container in (V4, V6):
            saved = SavedNat(saved_after_add(options, container))
            assert rules.missing_rules(saved, options, NET, CID, container, MAPS) == []


def test_missing_rules_of_an_empty_table() -> None:
    got = rules.missing_rules(SavedNat(as_saved()), PortmapOptions(), NET, CID, V4, MAPS)
    comment = '"dnat name: \\"mynet\\" id: \\"ctr1\\""'
    assert got == [
        "PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        'CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK '
        "--set-xmark 0x2000/0x2000",
        "CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
        'POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ',
        f"{CHAIN} -s 172.16.30.0/24 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
        f"{CHAIN} -s 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
        f"{CHAIN} -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.16.30.2:80",
        f"{CHAIN} -s 172.16.30.0/24 -d 192.0.2.1/32 -p udp -m udp --dport 5353 -j CNI-HOSTPORT-SETMARK",
        f"{CHAIN} -s 127.0.0.1/32 -d 192.0.2.1/32 -p udp -m udp --dport 5353 -j CNI-HOSTPORT-SETMARK",
        f"{CHAIN} -d 192.0.2.1/32 -p udp -m udp --dport 5353 -j DNAT --to-destination 172.16.30.2:53",
        f"CNI-HOSTPORT-DNAT -p tcp -m comment --comment {comment} -m multiport --dports 8080 -j {CHAIN}",
        f"CNI-HOSTPORT-DNAT -p udp -m comment --comment {comment} -m multiport --dports 5353 -j {CHAIN}",
    ]


def test_missing_rules_names_only_what_is_gone() -> None:
    options = PortmapOptions(snat=False)
    full = saved_after_add(options, V6)
    # snat false: no SETMARK/MASQ wanted; remove the container's DNAT rule only
    lines = [line for line in full.splitlines() if "--to-destination" not in line]
    got = rules.missing_rules(SavedNat("\n".join(lines)), options, NET, CID, V6, MAPS)
    assert got == [f"{CHAIN} -p tcp -m tcp --dport 8080 -j DNAT --to-destination [fd00:10:30::2]:80"]
    # another container's chain is not this one's
    got = rules.missing_rules(SavedNat(full), options, NET, "ctr2", V6, MAPS)
    other = rules.dnat_chain_name(NET, "ctr2")
    assert got[0] == f"{other} -p tcp -m tcp --dport 8080 -j DNAT --to-destination [fd00:10:30::2]:80"
    # its DNAT and its two entry rules (tcp, udp); the top-level jumps are shared
    assert len(got) == 3
    assert all(line.endswith(other) for line in got[1:])


def test_missing_rules_use_the_containers_family_conditions() -> None:
    options = PortmapOptions(conditions_v4=["!", "-d", "192.0.2.0/24"],
                             conditions_v6=["!", "-d", "fc00::/7"])  # fmt: skip
    saved = SavedNat(saved_after_add(options, V6))
    assert rules.missing_rules(saved, options, NET, CID, V6, MAPS) == []
    assert "! -d fc00::/7 -p tcp" in saved_after_add(options, V6)
