"""podnet-redirect's rules as data (issue 4, in progress): linkerd2-proxy-init's chains and
comments (seed 003, FIELD-NOTES §5), golden text per option set, and loading them for real."""

from __future__ import annotations

import subprocess
from ipaddress import ip_network

import pytest

import golden
import paths
from envgate import need
from netns import Lab
from podnet.firewall import redirect as r

GOLDEN = paths.GOLDEN / "redirect"

CASES = {
    "defaults": r.RedirectOptions(),
    "ignores": r.RedirectOptions(
        inbound_ports_to_ignore=r.parse_ports("4190,4191,25-27"),
        outbound_ports_to_ignore=r.parse_ports("443,6443"),
        subnets_to_ignore=[ip_network("10.0.0.0/8"), ip_network("fd00::/8")], proxy_gid=2103,
    ),
    "redirect_listed": r.RedirectOptions(ports_to_redirect=r.parse_ports("80,8080-8090"), proxy_uid=0),
    "custom_ports_no_uid": r.RedirectOptions(incoming_proxy_port=15006, outgoing_proxy_port=15001,
                                             proxy_uid=0, proxy_gid=1337,
                                             outbound_ports_to_ignore=r.parse_ports("1-1024")),
    "many_ports": r.RedirectOptions(inbound_ports_to_ignore=r.parse_ports(
        ",".join(str(p) for p in range(1000, 1012)) + ",2000-2001,3000-3001,4000")),
}


def test_multiport_split_counts_ranges_twice() -> None:
    ports = r.parse_ports(",".join(str(p) for p in range(1, 14)) + ",100-101,200")
    sizes = [sum(p.refs for p in chunk) for chunk in r.chunks(ports)]
    assert sizes == [15, 1]  # 13 ports + the range (2 refs) fill a rule; 200 starts the next
    assert [len(c) for c in r.chunks(ports)] == [14, 1]


@pytest.mark.parametrize("bad", ["0", "70000", "10-5", "a", "1-b"])
def test_bad_ports(bad: str) -> None:
    with pytest.raises(ValueError):
        r.parse_ports(bad)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("family", [4, 6])
def test_restore_golden(name: str, family: int) -> None:
    text = r.restore_script(CASES[name], family, set())
    golden.match(GOLDEN / f"{name}_v{family}.rules", text)


@pytest.mark.parametrize("ipv6", [True, False], ids=["ipv6", "ipv4-only"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_nft_golden(name: str, ipv6: bool) -> None:
    text = r.nft_script(CASES[name], ipv6)
    golden.match(GOLDEN / (f"{name}.nft" if ipv6 else f"{name}_ipv4_only.nft"), text)


def _jumps(save: str) -> set[str]:
    return r.present(save)[0]


@pytest.mark.root
@pytest.mark.parametrize("variant", ["nft", "legacy"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rules_load_and_rerun_gives_the_same_rules(lab: Lab, name: str, variant: str) -> None:
    need(f"iptables-{variant}-restore", f"iptables-{variant}-save")
    saves = []
    for _ in range(2):
        save = lab.exec(lab.node, f"iptables-{variant}-save", "-t", "nat").stdout
        text = r.restore_script(CASES[name], 4, _jumps(save))
        lab.exec(lab.node, f"iptables-{variant}-restore", "--noflush", input=text)
        saves.append("\n".join(line for line in lab.exec(lab.node, f"iptables-{variant}-save", "-t", "nat").stdout.splitlines()
                               if not line.startswith("#")))
    assert saves[0] == saves[1]
    assert saves[0].count("install-proxy-init-prerouting") == 1
    cleanup = r.cleanup_script(_jumps(saves[1]), {r.REDIRECT_CHAIN, r.OUTPUT_CHAIN})
    assert cleanup is not None
    lab.exec(lab.node, f"iptables-{variant}-restore", "--noflush", input=cleanup)
    assert "PROXY_INIT" not in lab.exec(lab.node, f"iptables-{variant}-save", "-t", "nat").stdout


@pytest.mark.root
@pytest.mark.parametrize("name", sorted(CASES))
def test_nft_table_loads_and_is_replaced(lab: Lab, name: str) -> None:
    """Loading the script twice leaves one table's worth of rules (replaced, not appended):
    the second listing equals the first, with one inbound and one outbound redirect to the
    case's proxy ports."""
    options = CASES[name]
    listings = []
    for _ in range(2):
        subprocess.run(["ip", "netns", "exec", lab.node, "nft", "-f", "-"], input=r.nft_script(options),
                       text=True, check=True, capture_output=True)
        listings.append(lab.exec(lab.node, "nft", "list", "table", "inet", r.NFT_TABLE).stdout)
    assert listings[0] == listings[1]
    assert listings[1].count("redirect to :") == 2, listings[1]
    assert listings[1].count(f"redirect to :{options.incoming_proxy_port}") == 1, listings[1]
    assert listings[1].count(f"redirect to :{options.outgoing_proxy_port}") == 1, listings[1]


@pytest.mark.root
@pytest.mark.parametrize("variant", ["nft", "legacy"])
def test_half_applied_run_is_repaired(lab: Lab, variant: str) -> None:
    """A run that stopped half-way (the redirect chain with one stale rule, no output chain, no
    jumps) is completed to exactly the rules of a clean run (linkerd2 #5786, #9267)."""
    need(f"iptables-{variant}-restore", f"iptables-{variant}-save")
    options = CASES["ignores"]
    clean = lab.netns("clean")
    for ns in (clean, lab.node):
        if ns == lab.node:
            lab.exec(ns, f"iptables-{variant}-restore", "--noflush",
                     input="*nat\n:PROXY_INIT_REDIRECT - [0:0]\n-A PROXY_INIT_REDIRECT -p tcp -j RETURN\nCOMMIT\n")
        save = lab.exec(ns, f"iptables-{variant}-save", "-t", "nat").stdout
        lab.exec(ns, f"iptables-{variant}-restore", "--noflush", input=r.restore_script(options, 4, _jumps(save)))

    def rules(ns: str) -> list[str]:
        return sorted(line for line in lab.exec(ns, f"iptables-{variant}-save", "-t", "nat").stdout.splitlines()
                      if line.startswith("-A"))

    assert rules(lab.node) == rules(clean)
