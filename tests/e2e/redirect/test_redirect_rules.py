"""podnet-redirect's rules loaded for real: linkerd2-proxy-init's chains and comments
(linkerd/linkerd2-proxy-init, iptables/iptables.go) per option set, with iptables-nft,
iptables-legacy and nft, in a node namespace; a run again or after a half-applied one leaves the
same rules. The text itself: tests/unit/firewall/test_redirect_golden.py."""

from __future__ import annotations

import subprocess

import pytest

from envgate import need
from netns import Lab
from podnet.firewall import redirect as r
from redirect_cases import CASES


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
