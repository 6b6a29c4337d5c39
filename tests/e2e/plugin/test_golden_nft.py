"""Every nftables golden file (tests/support/golden: podnet's table and hostPort updates, podnet-portmap's
and podnet-redirect's scripts) applied with a real ``nft -f`` in a network namespace made for
it and removed after: the reviewed text is text the kernel takes, and what the kernel then holds
is what the text says (its maps' elements, its chains)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import paths
from envgate import need

pytestmark = pytest.mark.root

GOLDEN = paths.GOLDEN


@pytest.fixture
def ns() -> Iterator[str]:
    """A throwaway network namespace (its own, empty nftables ruleset)."""
    need("root", "ip", "nft")
    name = f"pn-golden-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def nft(ns: str, *args: str, script: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", ns, "nft", *args]
    if script is not None:
        argv += ["-f", str(script)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def apply(ns: str, script: Path) -> None:
    out = nft(ns, script=script)
    assert out.returncode == 0, f"{script.name}: {out.stderr}"


def ruleset(ns: str) -> list[dict[str, Any]]:
    out = nft(ns, "-j", "list", "ruleset")
    assert out.returncode == 0, out.stderr
    items: list[dict[str, Any]] = json.loads(out.stdout)["nftables"]
    return items


def _text(x: Any) -> str:
    if isinstance(x, dict) and "concat" in x:
        return " . ".join(_text(p) for p in x["concat"])
    if isinstance(x, dict) and "prefix" in x:
        return f"{x['prefix']['addr']}/{x['prefix']['len']}"
    if isinstance(x, dict) and "goto" in x:
        return f"goto {x['goto']['target']}"
    if isinstance(x, dict) and "jump" in x:
        return f"jump {x['jump']['target']}"
    return str(x)


def contents(ns: str, table: str) -> dict[str, set[str]]:
    """``table``'s maps and sets (name -> elements as nft prints them) and its chains
    (``chain:<name>`` -> the set of its rule counts, one item)."""
    out: dict[str, set[str]] = {}
    items = ruleset(ns)
    for item in items:
        for kind in ("map", "set"):
            if kind in item and item[kind]["table"] == table:
                elems = item[kind].get("elem", [])
                out[item[kind]["name"]] = {
                    f"{_text(e[0])} : {_text(e[1])}" if kind == "map" else _text(e) for e in elems}
        if "chain" in item and item["chain"]["table"] == table:
            rules = [i for i in items if "rule" in i and i["rule"]["table"] == table
                     and i["rule"]["chain"] == item["chain"]["name"]]  # fmt: skip
            out[f"chain:{item['chain']['name']}"] = {str(len(rules))}
    return out


def golden_elements(script: str, name: str) -> set[str]:
    """The elements the golden text gives map or set ``name`` (``elements = { … }``)."""
    for line in script.splitlines():
        head = line.strip()
        if head.startswith((f"map {name} ", f"set {name} ")):
            if "elements = {" not in head:
                return set()
            inner = head.split("elements = {", 1)[1].rsplit("}", 2)[0]
            return {e.strip() for e in inner.split(",") if e.strip()}
    raise AssertionError(f"no map or set {name} in the golden text")


def golden_chains(script: str) -> dict[str, int]:
    """Chain name -> number of rules, read from a ``table … { chain x { … } }`` text."""
    chains: dict[str, int] = {}
    current = None
    for line in script.splitlines():
        head = line.strip()
        if head.startswith("chain ") and head.endswith("{"):
            current = head.split()[1]
            chains[current] = 0
        elif head == "}":
            current = None
        elif current is not None and head and not head.startswith(("type ", "comment ")):
            chains[current] += 1
    return chains


@pytest.mark.parametrize("name", ["table_empty.nft", "table_full.nft", "table_networks.nft"])
def test_podnet_table_applies_as_written(ns: str, name: str) -> None:
    """Applied twice (a rebuild replaces the table: ``add``, ``delete``, then the table), the
    kernel holds every map and set with the golden text's elements, and every chain with its
    number of rules."""
    path = GOLDEN / name
    script = path.read_text()
    apply(ns, path)
    apply(ns, path)
    held = contents(ns, "podnet")
    for key, elements in held.items():
        if key.startswith("chain:"):
            continue
        assert elements == golden_elements(script, key), key
    chains = {k.removeprefix("chain:"): int(next(iter(v))) for k, v in held.items()
              if k.startswith("chain:")}  # fmt: skip
    assert chains == golden_chains(script)
    assert chains["prerouting"] > 0 and "fwd_drop_v6" in held


def test_hostport_add_and_delete_apply_on_the_table(ns: str) -> None:
    apply(ns, GOLDEN / "table_empty.nft")
    apply(ns, GOLDEN / "add.nft")
    held = contents(ns, "podnet")
    assert held["hostports_any_v4"] == {"tcp . 8080 : 10.244.2.5 . 80"}
    assert held["hostports_any_v6"] == {"tcp . 8080 : fd00:10:244::5 . 80"}
    assert held["hostports_v4"] == {"192.0.2.1 . udp . 5353 : 10.244.2.6 . 53"}
    apply(ns, GOLDEN / "delete.nft")
    held = contents(ns, "podnet")
    assert held["hostports_any_v4"] == held["hostports_any_v6"] == held["hostports_v4"] == set()
    assert nft(ns, script=GOLDEN / "delete.nft").returncode == 1  # a missing element: refused


PORTMAP_NFT = sorted(p.name for p in (GOLDEN / "portmap_nft").glob("*.nft") if p.name != "teardown.nft")
REDIRECT_NFT = sorted(p.name for p in (GOLDEN / "redirect").glob("*.nft"))


@pytest.mark.parametrize("name", PORTMAP_NFT)
def test_portmap_nft_setup_applies(ns: str, name: str) -> None:
    apply(ns, GOLDEN / "portmap_nft" / name)
    held = contents(ns, "podnet_portmap")
    assert any(k.startswith("chain:dn-") for k in held), held  # the container's DNAT chain
    assert any(held.get(m) for m in ("dispatch_v4", "dispatch_any_v4", "dispatch_v6",
                                     "dispatch_any_v6")), held  # fmt: skip


def test_portmap_nft_teardown_applies_to_the_state_it_was_made_for(ns: str, tmp_path: Path) -> None:
    """teardown.nft is made from a listing (tests/unit/firewall/test_portmap_nft_golden.py) where ctr1 holds
    tcp/8080 and ctr2 tcp/9090: that state, built on defaults.nft, loses ctr1's chain and
    element and keeps ctr2's."""
    ctr1, ctr2 = "dn-5145007e2a8415ce07579", "dn-ctr2"
    apply(ns, GOLDEN / "portmap_nft" / "defaults.nft")
    state = tmp_path / "state.nft"
    state.write_text(
        "delete element inet podnet_portmap dispatch_any_v4 { tcp . 8043 }\n"
        f"add chain inet podnet_portmap {ctr2}\n"
        f"add element inet podnet_portmap dispatch_any_v4 {{ tcp . 9090 : jump {ctr2} }}\n")
    apply(ns, state)
    assert contents(ns, "podnet_portmap")["dispatch_any_v4"] == {
        f"tcp . 8080 : jump {ctr1}", f"tcp . 9090 : jump {ctr2}"}
    apply(ns, GOLDEN / "portmap_nft" / "teardown.nft")
    after = contents(ns, "podnet_portmap")
    assert f"chain:{ctr1}" not in after and f"chain:{ctr2}" in after
    assert after["dispatch_any_v4"] == {f"tcp . 9090 : jump {ctr2}"}


@pytest.mark.parametrize("name", REDIRECT_NFT)
def test_redirect_nft_applies(ns: str, name: str) -> None:
    path = GOLDEN / "redirect" / name
    apply(ns, path)
    apply(ns, path)  # it replaces its table
    chains = {k.removeprefix("chain:"): int(next(iter(v)))
              for k, v in contents(ns, "podnet_redirect").items() if k.startswith("chain:")}
    assert chains == golden_chains(path.read_text())
