"""podnet-portmap's iptables-restore text equals the golden files (golden/portmap), one per
option combination: ``setup_script`` on an empty table and on one another container's ADD
left, ``teardown_script`` on a saved one; the DNAT chain's name as the reference portmap cuts
it (plugins/meta/portmap/chain.go in containernetworking/plugins). No root.

Regenerate the golden files with ``PODNET_UPDATE_GOLDEN=1``: the run rewrites them and fails;
review the diff, then run again without it."""

from __future__ import annotations

import pytest

from podnet.firewall import portmap_iptables as rules
from portmap_golden import (
    CID,
    GOLDEN,
    GOLDEN_CASES,
    NET,
    add_scripts,
    check_golden,
    extra_chains,
    saved_table,
    setup_text,
)
from portmap_helpers import (
    as_saved,
)


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_setup(case: str) -> None:
    check_golden(f"{case}.setup.rules", setup_text(case))


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_teardown(case: str) -> None:
    script = rules.teardown_script(rules.SavedNat(saved_table(case)), NET, CID)
    assert script is not None
    check_golden(f"{case}.teardown.rules", script)
    # What is left is exactly the table with only the other container.
    first, second = add_scripts(case)
    extra = extra_chains(case)
    assert as_saved(first, second, script, extra_chains=extra) == as_saved(first, extra_chains=extra)


def test_golden_setup_on_existing_table() -> None:
    """A second container and a repeated ADD: shared chains and jumps are neither declared
    again (that would flush them) nor duplicated; the container's old entry rules go first."""
    saved = saved_table("tcp_udp")
    check_golden("existing_readd.setup.rules", setup_text("tcp_udp", saved))
    fresh = setup_text("tcp_udp", saved, "1234fresh")
    check_golden("existing_new.setup.rules", fresh)


def test_golden_teardown_old_snat_chain() -> None:
    """DEL also removes the ``CNI-SN-`` chain of plugin versions before 0.8 (as reference)."""
    sn_chain = "CNI-SN-" + rules.dnat_chain_name(NET, CID)[7:]
    old = (f"*nat\n:CNI-HOSTPORT-SNAT - [0:0]\n:{sn_chain} - [0:0]\n"
           f"-A POSTROUTING -j CNI-HOSTPORT-SNAT\n"
           f"-A CNI-HOSTPORT-SNAT -s 127.0.0.1/32 ! -d 127.0.0.1/32 -j {sn_chain}\n"
           f"-A {sn_chain} -s 127.0.0.1/32 -d 172.16.30.2/32 -p tcp -m tcp --dport 80 -j MASQUERADE\n")
    saved = as_saved(old, extra_chains=())
    script = rules.teardown_script(rules.SavedNat(saved), NET, CID)
    assert script is not None
    check_golden("old_snat.teardown.rules", script)


def test_teardown_of_absent_container_is_nothing() -> None:
    assert rules.teardown_script(rules.SavedNat(saved_table("defaults")), NET, "absent") is None
    assert rules.teardown_script(rules.SavedNat(""), NET, CID) is None


def test_no_stale_golden_files() -> None:
    wanted = {f"{case}.{kind}.rules" for case in GOLDEN_CASES for kind in ("setup", "teardown")}
    wanted |= {"existing_readd.setup.rules", "existing_new.setup.rules", "old_snat.teardown.rules"}
    assert {p.name for p in GOLDEN.iterdir()} == wanted


def test_chain_name_is_cut_sha512() -> None:
    import hashlib

    name = rules.dnat_chain_name(NET, CID)
    assert name == ("CNI-DN-" + hashlib.sha512((NET + CID).encode()).hexdigest())[:28]
    assert len(name) == 28
