"""The one conflict rule, through the real store: every kind of holder (podnet's hostPort,
podnet-portmap's claim, a forward's port, a forward's whole address) against every kind of new
claim (a hostPort, a forward's port, a forward's whole address), on any address or a given
one, in both families, with the same port, another port, another protocol and the other
family. ``Store.pods.claim_holders`` answers from a real SQLite database (no root).

The expected answer is written out here, not computed by the product: two claims meet when
their families are the same, their listen addresses are the same or either is "any address",
and their (protocol, port) are the same or either takes every port."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from podnet.store import Store, open_store
from podnet.values import FORWARD, HOSTPORT, Claim, Dnat, PortMapping

ADDR = {4: {"any": "0.0.0.0", "A": "192.0.2.1", "B": "192.0.2.2"},
        6: {"any": "::", "A": "2001:db8::1", "B": "2001:db8::2"}}  # fmt: skip
POD = {4: ("10.88.0.2", "10.88.0.3"), 6: ("fd00:88::2", "fd00:88::3")}
HELD_KINDS = ("hostport", "portmap", "forward_port", "forward_whole")
ASKED_KINDS = ("hostport", "forward_port", "forward_whole")
#: holder kind and name per held kind
HOLDER = {"hostport": (HOSTPORT, "a"), "portmap": (HOSTPORT, "podnet-portmap pm/c1"),
          "forward_port": (FORWARD, "fwnet"), "forward_whole": (FORWARD, "fwnet")}  # fmt: skip


def _cases() -> list[tuple[str, str, str, str, int]]:
    out = []
    for family in (4, 6):
        for held in HELD_KINDS:
            for held_at in ("any", "A"):
                if held.startswith("forward") and held_at == "any":
                    continue  # a forward always has its listen address
                for asked in ASKED_KINDS:
                    for asked_at in ("any", "A", "B"):
                        if asked.startswith("forward") and asked_at == "any":
                            continue
                        out.append((held, held_at, asked, asked_at, family))
    return out


def _hold(store, kind: str, at: str, family: int) -> None:  # type: ignore[no-untyped-def]
    """Record one holder of ``tcp/80`` (or the whole address) on ``at``."""
    listen, pod = ADDR[family][at], POD[family][0]
    column = "ip_address_v4" if family == 4 else "ip_address_v6"
    if kind == "hostport":
        store.pods.insert(container_id="a", netns="/x", interface_name="pna", interface_mtu=1500,
                          ifname="eth0", network_name="n", host_mac="", pod_mac="",
                          **{column: pod})  # fmt: skip
        store.pods.insert_portmaps([PortMapping("a", listen, 80, "tcp", pod, 8080)])
    elif kind == "portmap":
        store.pods.set_portmap_claims("pm", "c1", [PortMapping("c1", listen, 80, "tcp", pod, 8080)])
    else:
        nid = store.networks.insert("fwnet", "bridge", "", {})
        fid = store.networks.insert_forward(nid, store.networks.node_id("node1"), listen, "",
                                            "[]", {})  # fmt: skip
        dnat = (Dnat(family, listen, "tcp", 80, pod, 8080, str(fid)) if kind == "forward_port"
                else Dnat(family, listen, None, None, pod, None, str(fid)))  # fmt: skip
        store.networks.set_forward_dnats(fid, [dnat])


def _ask(kind: str, at: str, family: int, protocol: str, port: int) -> Claim:
    listen, pod = ADDR[family][at], POD[family][1]
    if kind == "hostport":
        return PortMapping("b", listen, port, protocol, pod, 80).dnat()
    if kind == "forward_port":
        return Dnat(family, listen, protocol, port, pod, 80)
    return Dnat(family, listen, None, None, pod, None)


def _meet(held: str, held_at: str, asked: str, asked_at: str, same_port: bool) -> bool:
    listens = "any" in (held_at, asked_at) or held_at == asked_at
    ports = same_port or "forward_whole" in (held, asked)
    return listens and ports


class _Undo(Exception):
    """Raised at the end of a case: its transaction is rolled back, the store stays empty."""


@pytest.fixture(scope="module")
def matrix_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store for the matrix (making a store's schema takes most of a case's time)."""
    with open_store(str(tmp_path_factory.mktemp("matrix"))) as store:
        yield store


@pytest.fixture
def store(matrix_store: Store) -> Iterator[Store]:
    """The matrix's store inside one transaction that is rolled back after the case (a
    failed assertion rolls it back too): every case starts from an empty store."""
    with contextlib.suppress(_Undo), matrix_store.write():
        yield matrix_store
        raise _Undo


@pytest.mark.parametrize(("held", "held_at", "asked", "asked_at", "family"), _cases())
def test_conflict_matrix(store: Store, held: str, held_at: str, asked: str, asked_at: str,
                         family: int) -> None:  # fmt: skip
    _hold(store, held, held_at, family)
    holder = [HOLDER[held]]
    for protocol, port, same in (("tcp", 80, True), ("tcp", 81, False), ("udp", 80, False)):
        claim = _ask(asked, asked_at, family, protocol, port)
        got = [(h.kind, h.name) for h in store.pods.claim_holders(claim)]
        want = holder if _meet(held, held_at, asked, asked_at, same) else []
        assert got == want, (protocol, port)
    other = 6 if family == 4 else 4
    claim = _ask(asked, "any" if asked == "hostport" else "A", other, "tcp", 80)
    assert store.pods.claim_holders(claim) == [], "another family never meets"


def test_holders_come_forwards_first_then_hostports_in_order(tmp_path: Path) -> None:
    """Several holders at once: every one that meets, forwards first, then podnet's hostPorts,
    then podnet-portmap's; the choice of kinds leaves the others out."""
    with open_store(str(tmp_path)) as store, store.write():  # a store of its own
        _hold(store, "portmap", "A", 4)
        _hold(store, "hostport", "any", 4)
        _hold(store, "forward_whole", "A", 4)
        claim = _ask("hostport", "A", 4, "tcp", 80)
        assert [(h.kind, h.name) for h in store.pods.claim_holders(claim)] == [
            (FORWARD, "fwnet"), (HOSTPORT, "a"), (HOSTPORT, "podnet-portmap pm/c1")]
        assert [h.name for h in store.pods.claim_holders(claim, forwards=False)] == [
            "a", "podnet-portmap pm/c1"]
        assert [h.name for h in store.pods.claim_holders(claim, hostports=False)] == [
            "fwnet", "podnet-portmap pm/c1"]
        assert [h.name for h in store.pods.claim_holders(claim, portmap=False)] == ["fwnet", "a"]
        assert store.pods.claim_holders(_ask("hostport", "B", 4, "tcp", 81)) == []
