"""podnet-redirect's rules as text: linkerd2-proxy-init's chains and comments
(linkerd/linkerd2-proxy-init, iptables/iptables.go), iptables-restore and nft text per option
set equal to the golden files (golden/redirect), the port list split as multiport takes it. No
root; tests/e2e/redirect/test_redirect_rules.py loads the same text into the kernel.

Regenerate the golden files with ``PODNET_UPDATE_GOLDEN=1``: the run rewrites them and fails;
review the diff, then run again without it."""

from __future__ import annotations

import pytest

import golden
from podnet.firewall import redirect as r
from redirect_cases import CASES, GOLDEN


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
