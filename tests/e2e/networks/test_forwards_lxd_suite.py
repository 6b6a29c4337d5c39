"""LXD's own network-forward test suite (lxd-5.0.2 ``test/suites/network_forward.sh``, the steps
that apply to a bridge), run against ``podnetctl network …`` in a node namespace: the same verbs
with the same arguments, the same OK/FAIL outcome per step.

Where LXD lists its per-network nft chains (``fwdprert.$N``, ``fwdout.$N``, ``fwdpstrt.$N``), this
checks podnet's equivalent: the elements of the maps ``fwd_v4`` / ``fwd_whole_v4`` (and ``_v6``)
in table ``inet podnet`` must be exactly the translations the forward's config and ports imply
after the step (LXD's "chain absent" = no element; its rule count = the number of elements).
Step 3 (BGP, an LXD-internal test endpoint) does not apply. stable-5.0's two FAIL steps
(``create $N 0.0.0.0`` and ``::``, after step 1) are included.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from netns import VENV_BIN, Lab

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")
MAPS = ("fwd_v4", "fwd_whole_v4", "fwd_v6", "fwd_whole_v6")


def _text(value: Any) -> str:
    """One side of an nft JSON map element as ``nft list`` prints it (``a . b . c``)."""
    if isinstance(value, dict) and "concat" in value:
        return " . ".join(_text(v) for v in value["concat"])
    if isinstance(value, dict) and "elem" in value:
        return _text(value["elem"]["val"])
    return str(value)


def elements(lab: Lab) -> dict[str, set[str]]:
    """The elements of podnet's forward maps, ``"key : value"`` each; a missing table or map
    counts as empty."""
    out: dict[str, set[str]] = {name: set() for name in MAPS}
    listed = lab.exec(lab.node, "nft", "-j", "list", "table", "inet", "podnet", check=False)
    if listed.returncode != 0:
        return out
    for item in json.loads(listed.stdout)["nftables"]:
        m = item.get("map")
        if m and m["name"] in out:
            for key, value in m.get("elem", []):
                out[m["name"]].add(f"{_text(key)} : {_text(value)}")
    return out


def expect(**maps: set[str]) -> dict[str, set[str]]:
    return {name: set(maps.get(name, set())) for name in MAPS}


def test_lxd_network_forward_suite(lab: Lab, tmp_path: Path) -> None:
    n = f"lxdt{lab.tag}"  # the suite's N=lxdt$$ (a bridge name, at most 15 characters)

    def lxc(*args: str) -> subprocess.CompletedProcess[str]:
        return lab.exec(lab.node, PODNETCTL, "network", "--data-dir", str(tmp_path), "--init", *args,
                        check=False, input="")  # fmt: skip

    def ok(step: str, *args: str) -> None:
        proc = lxc(*args)
        assert proc.returncode == 0, (
            f"step {step}: `network {' '.join(args)}` must succeed (LXD: OK), got "
            f"{proc.returncode}: {proc.stderr.strip()}"
        )

    def fail(step: str, *args: str) -> None:
        before = elements(lab)
        proc = lxc(*args)
        assert proc.returncode != 0, (
            f"step {step}: `network {' '.join(args)}` must fail (LXD: FAIL), it succeeded: "
            f"{proc.stdout.strip()}"
        )
        assert proc.stderr.startswith("Error: "), f"step {step}: {proc.stderr!r}"
        assert elements(lab) == before, f"step {step}: a refused change touched the maps"

    def rules(step: str, want: dict[str, set[str]]) -> None:
        got = elements(lab)
        assert got == want, (
            f"step {step}: forward map elements differ from what the forward implies\n"
            f"  want {json.dumps({k: sorted(v) for k, v in want.items()})}\n"
            f"  got  {json.dumps({k: sorted(v) for k, v in got.items()})}"
        )

    # 1. OK: the bridge network.
    ok("1", "create", n, "ipv4.address=192.0.2.1/24", "ipv6.address=fd42:4242:4242:1010::1/64")
    link = lab.exec(lab.node, "ip", "-j", "link", "show", n, check=False)
    assert link.returncode == 0 and json.loads(link.stdout)[0]["ifname"] == n, "step 1: no bridge"
    rules("1", expect())

    # stable-5.0 (5.0.3+): unspecified listen addresses are refused.
    fail("1a", "forward", "create", n, "0.0.0.0")
    fail("1b", "forward", "create", n, "::")

    # 2. OK: a forward without a default target or ports translates nothing.
    ok("2", "forward", "create", n, "198.51.100.1")
    rules("2", expect())

    # 3. (BGP prefix through an LXD-internal endpoint: not applicable.)

    # 4. OK: delete it.
    ok("4", "forward", "delete", n, "198.51.100.1")
    rules("4", expect())

    # 5. OK: whole-address forward to the default target.
    ok("5", "forward", "create", n, "198.51.100.1", "target_address=192.0.2.2")
    rules("5", expect(fwd_whole_v4={"198.51.100.1 : 192.0.2.2"}))

    # 6. OK: unsetting the default target removes its translation.
    ok("6", "forward", "unset", n, "198.51.100.1", "target_address")
    rules("6", expect())

    # 7. OK: set it again.
    ok("7", "forward", "set", n, "198.51.100.1", "target_address=192.0.2.2")
    whole = {"198.51.100.1 : 192.0.2.2"}
    rules("7", expect(fwd_whole_v4=whole))

    # 8. FAIL: port target equal to the default target.
    fail("8", "forward", "port", "add", n, "198.51.100.1", "tcp", "80", "192.0.2.2")
    # 9. FAIL: one listen port, two target ports.
    fail("9", "forward", "port", "add", n, "198.51.100.1", "tcp", "80", "192.0.2.3", "80-81")

    # 10. OK: a range to the same ports of another address.
    ok("10", "forward", "port", "add", n, "198.51.100.1", "tcp", "80-81", "192.0.2.3")
    ports = {"198.51.100.1 . tcp . 80 : 192.0.2.3 . 80", "198.51.100.1 . tcp . 81 : 192.0.2.3 . 81"}
    rules("10", expect(fwd_v4=ports, fwd_whole_v4=whole))

    # 11. FAIL: tcp/80 is already forwarded.
    fail("11", "forward", "port", "add", n, "198.51.100.1", "tcp", "80", "192.0.2.3", "90")

    # 12. OK: udp/80 may coexist with tcp/80.
    ok("12", "forward", "port", "add", n, "198.51.100.1", "udp", "80", "192.0.2.3", "90")
    udp = {"198.51.100.1 . udp . 80 : 192.0.2.3 . 90"}
    rules("12", expect(fwd_v4=ports | udp, fwd_whole_v4=whole))

    # 13. FAIL: three listen ports, two target ports.
    fail("13", "forward", "port", "add", n, "198.51.100.1", "tcp", "82,83,84", "192.0.2.3",
         "90,91")  # fmt: skip

    # 14. OK: ranges and lists of the same length map in order: 82→90, 83→91, 84→92.
    ok("14", "forward", "port", "add", n, "198.51.100.1", "tcp", "82-83,84", "192.0.2.3",
       "90,91-92")  # fmt: skip
    mapped = {"198.51.100.1 . tcp . 82 : 192.0.2.3 . 90", "198.51.100.1 . tcp . 83 : 192.0.2.3 . 91",
              "198.51.100.1 . tcp . 84 : 192.0.2.3 . 92"}  # fmt: skip
    rules("14", expect(fwd_v4=ports | udp | mapped, fwd_whole_v4=whole))

    # 15. LXD counts 7 DNAT rules per chain: 6 port translations and the default target.
    got = elements(lab)
    assert len(got["fwd_v4"]) + len(got["fwd_whole_v4"]) == 7, f"step 15: {got}"

    # 16. FAIL: two tcp port specifications match, no --force.
    fail("16", "forward", "port", "remove", n, "198.51.100.1", "tcp")

    # 17. OK: --force removes both; udp 80 and the default target stay (LXD: 2 rules).
    ok("17", "forward", "port", "remove", n, "198.51.100.1", "tcp", "--force")
    rules("17", expect(fwd_v4=udp, fwd_whole_v4=whole))

    # 18. OK: deleting the network takes its forwards (and its bridge) with it.
    ok("18", "delete", n)
    rules("18", expect())
    gone = lab.exec(lab.node, "ip", "link", "show", n, check=False)
    assert gone.returncode != 0, f"step 18: bridge {n} still exists"
    listed = lxc("forward", "list", n)
    assert listed.returncode == 1, "step 18: the network's forwards are still listed"
    assert listed.stderr == "Error: Failed loading network: Network not found\n", listed.stderr
