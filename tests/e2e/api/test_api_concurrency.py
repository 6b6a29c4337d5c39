"""32 concurrent API clients (the API's promise: "no lost update (every PUT without a current
ETag is refused or applied exactly once), the kernel rules equal the database").

Each client is a thread with an httpx client of its own on the server's unix socket. All of them
edit one shared forward the way ``lxc`` does (GET, then PUT with ``If-Match``), retrying on 412:
every accepted edit appends the client's token to the description, one port specification, and
sets ``user.c<i>`` to its edit count. Afterwards the shared forward must hold every accepted
token and port exactly once and nothing else, a deliberately stale PUT of each client must have
been refused with 412, and the kernel's forward maps must equal what the API lists. Meanwhile
every client creates, patches, blindly replaces and (half of them) deletes a forward of its own,
and a few ``podnetctl network forward`` processes change forwards of their own through the CLI on
the same store."""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_helpers import (
    PODNETCTL,
    ApiServer,
    assert_sync,
    expected_maps,
    forward_etag,
    kernel_maps,
    serving,
)
from envgate import need
from netns import Lab

pytestmark = pytest.mark.root

CLIENTS = 32
EDITS = 3
CLI_WORKERS = 4
SHARED = "198.51.100.1"
FWD = "/1.0/networks/br0/forwards"


@dataclass
class Outcome:
    accepted: list[str] = field(default_factory=list)  # tokens of accepted shared edits
    ports: list[int] = field(default_factory=list)  # their listen ports
    refused_412: int = 0
    stale_answer: int = 0
    unexpected: list[str] = field(default_factory=list)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Lab, ApiServer]]:
    need("root", "ip", "nft")
    with serving(tmp_path) as (lab, srv):
        yield lab, srv


def _own(i: int) -> str:
    return f"198.51.100.{10 + i}"


def client_job(srv: ApiServer, i: int, start: threading.Barrier) -> Outcome:
    out = Outcome()
    rng = random.Random(i)

    def unexpected(what: str, r: httpx.Response) -> None:
        out.unexpected.append(f"client {i} {what}: {r.status_code} {r.text[:300]}")

    with srv.client() as c:
        start.wait()
        # a forward of its own: create, PATCH with If-Match (nobody else touches it)
        own = _own(i)
        port1 = {"description": "", "protocol": "tcp", "listen_port": str(1000 + i),
                 "target_port": "80", "target_address": f"10.0.0.{10 + i}"}
        r = c.post(FWD, json={"listen_address": own, "ports": [port1]})
        if r.status_code != 201:
            unexpected("create", r)
        # edits of the shared forward, lxc style
        first_tag = None
        k = 0
        while k < EDITS:
            r = c.get(f"{FWD}/{SHARED}")
            if r.status_code != 200:
                unexpected("get shared", r)
                break
            meta, tag = r.json()["metadata"], r.headers["etag"]
            first_tag = first_tag or tag
            token = f"c{i}e{k}"
            port = 20000 + i * EDITS + k
            body = {"description": f"{meta['description']} {token}".strip(),
                    "config": {**meta["config"], f"user.c{i}": str(k + 1)},
                    "ports": [*meta["ports"], {"description": token, "protocol": "tcp",
                                               "listen_port": str(port), "target_port": "",
                                               "target_address": "10.0.0.3"}]}
            r = c.put(f"{FWD}/{SHARED}", headers={"If-Match": tag}, json=body)
            if r.status_code == 200:
                out.accepted.append(token)
                out.ports.append(port)
                k += 1
            elif r.status_code == 412:
                out.refused_412 += 1
                threading.Event().wait(rng.uniform(0, 0.02))
            else:
                unexpected("put shared", r)
                break
        # a PUT with the first ETag it saw: its own edits made it stale, so 412
        if first_tag is not None:
            r = c.put(f"{FWD}/{SHARED}", headers={"If-Match": first_tag},
                      json={"description": f"c{i}STALE", "config": {}, "ports": []})
            if r.status_code == 412:
                out.stale_answer = 412
            else:
                unexpected("stale put", r)
        # its own forward again: PATCH with If-Match, then a blind PUT, then maybe DELETE
        r = c.get(f"{FWD}/{own}")
        if r.status_code == 200:
            port2 = {**port1, "listen_port": str(2000 + i)}
            r = c.patch(f"{FWD}/{own}", headers={"If-Match": r.headers["etag"]},
                        json={"ports": [port1, port2]})
            if r.status_code != 200:
                unexpected("patch own", r)
            r = c.put(f"{FWD}/{own}", json={"description": f"blind c{i}",
                                            "config": {"target_address": "10.0.0.250"},
                                            "ports": [port1, port2]})
            if r.status_code != 200:
                unexpected("blind put own", r)
        else:
            unexpected("get own", r)
        if i % 2:
            r = c.delete(f"{FWD}/{own}")
            if r.status_code != 200:
                unexpected("delete own", r)
    return out


def cli_job(lab: Lab, data: Path, w: int, start: threading.Barrier) -> list[str]:
    """A podnetctl process on the same store: create, add a port, delete (odd workers)."""
    listen = f"198.51.100.{200 + w}"
    start.wait()
    errors = []
    steps = [("forward", "create", "br0", listen, "target_address=10.0.0.251"),
             ("forward", "port", "add", "br0", listen, "udp", str(3000 + w), "10.0.0.252", "53")]
    if w % 2:
        steps.append(("forward", "delete", "br0", listen))
    for args in steps:
        out = lab.exec(lab.node, PODNETCTL, "network", "--data-dir", str(data), "--init", *args,
                       check=False)
        if out.returncode != 0:
            errors.append(f"cli {w} {' '.join(args)}: {out.stderr.strip()}")
    return errors


def test_32_concurrent_clients_lose_no_update(server: tuple[Lab, ApiServer]) -> None:
    lab, srv = server
    with srv.client() as c:
        assert_sync(c.post("/1.0/networks", json={"name": "br0", "config": {
            "ipv4.address": "10.0.0.1/24", "ipv6.address": "none"}}), 201, None)
        assert_sync(c.post(FWD, json={"listen_address": SHARED,
                                      "config": {"target_address": "10.0.0.2"}}), 201, None)
    start = threading.Barrier(CLIENTS + CLI_WORKERS)
    with ThreadPoolExecutor(CLIENTS + CLI_WORKERS) as pool:
        api_jobs = [pool.submit(client_job, srv, i, start) for i in range(CLIENTS)]
        cli_jobs = [pool.submit(cli_job, lab, srv.data, w, start) for w in range(CLI_WORKERS)]
        outcomes = [j.result(timeout=600) for j in api_jobs]
        cli_errors = [e for j in cli_jobs for e in j.result(timeout=600)]

    unexpected = [u for o in outcomes for u in o.unexpected]
    assert unexpected == [] and cli_errors == [], (unexpected, cli_errors)
    # every client's deliberately stale PUT was refused
    assert [o.stale_answer for o in outcomes] == [412] * CLIENTS
    retries = sum(o.refused_412 for o in outcomes)
    assert retries > 0, "no contention: the test did not exercise If-Match"
    print(f"{CLIENTS * EDITS} edits accepted, {retries} refused with 412 and retried")

    with srv.client() as c:
        r = c.get(f"{FWD}/{SHARED}")
        shared = assert_sync(r)
        assert r.headers["etag"] == f'"{forward_etag(shared)}"'
        listed = list(assert_sync(c.get(FWD, params={"recursion": 1})))

    # no lost update: each accepted edit is in the result exactly once, nothing else is
    accepted = [t for o in outcomes for t in o.accepted]
    assert len(accepted) == CLIENTS * EDITS
    tokens = shared["description"].split()
    assert Counter(tokens) == Counter(accepted), Counter(tokens) - Counter(accepted)
    assert not any("STALE" in t for t in tokens)
    for i, o in enumerate(outcomes):  # a client's own edits in its order
        assert [t for t in tokens if re.fullmatch(f"c{i}e\\d+", t)] == o.accepted
    assert shared["config"] == {"target_address": "10.0.0.2",
                                **{f"user.c{i}": str(EDITS) for i in range(CLIENTS)}}
    ports = [int(p["listen_port"]) for p in shared["ports"]]
    assert Counter(ports) == Counter(p for o in outcomes for p in o.ports)
    assert [p["description"] for p in shared["ports"]] == tokens  # appended in the same order

    # own forwards: the even ones stay, as their blind PUT left them
    by_listen = {f["listen_address"]: f for f in listed}
    want = {SHARED} | {_own(i) for i in range(0, CLIENTS, 2)} | {
        f"198.51.100.{200 + w}" for w in range(0, CLI_WORKERS, 2)}
    assert set(by_listen) == want
    for i in range(0, CLIENTS, 2):
        f = by_listen[_own(i)]
        assert f["description"] == f"blind c{i}"
        assert f["config"] == {"target_address": "10.0.0.250"}
        assert [p["listen_port"] for p in f["ports"]] == [str(1000 + i), str(2000 + i)]
    for w in range(0, CLI_WORKERS, 2):
        f = by_listen[f"198.51.100.{200 + w}"]
        assert f["config"] == {"target_address": "10.0.0.251"}
        assert [(p["protocol"], p["listen_port"]) for p in f["ports"]] == [("udp", str(3000 + w))]

    # the kernel equals the database
    want_maps = expected_maps(listed)
    assert len(want_maps["fwd_v4"]) == CLIENTS * EDITS + 2 * (CLIENTS // 2) + CLI_WORKERS // 2
    got = kernel_maps(lab.node)
    assert got == want_maps, {k: (got[k] ^ want_maps[k]) for k in got if got[k] != want_maps[k]}

    # and everything goes away through the API
    with srv.client() as c:
        for f in listed:
            assert_sync(c.delete(f"{FWD}/{f['listen_address']}"), 200, {})
    assert kernel_maps(lab.node) == expected_maps([])


def test_concurrent_deletes_and_recreates_of_one_address(server: tuple[Lab, ApiServer]) -> None:
    """32 clients race to create, PATCH and delete the same listen address: every create is
    201 or 409, every change 200, 404 or 412, every delete 200 or 404 — never a 5xx — and the
    kernel ends equal to the database."""
    lab, srv = server
    with srv.client() as c:
        assert_sync(c.post("/1.0/networks", json={"name": "br0", "config": {
            "ipv4.address": "10.0.0.1/24", "ipv6.address": "none"}}), 201, None)
    start = threading.Barrier(CLIENTS)
    allowed = {"POST": {201, 409}, "GET": {200, 404}, "PATCH": {200, 404, 412},
               "DELETE": {200, 404}}

    def job(i: int) -> list[str]:
        bad = []
        with srv.client() as c:
            start.wait()
            for k in range(4):
                url = f"{FWD}/{SHARED}"
                steps: list[tuple[str, str, dict[str, Any]]] = [
                    ("POST", FWD, {"json": {"listen_address": SHARED, "config": {
                        "target_address": f"10.0.0.{2 + i}"}}}),
                    ("GET", url, {}),
                ]
                for method, path, kw in steps:
                    r = c.request(method, path, **kw)
                    if r.status_code not in allowed[method]:
                        bad.append(f"{method} {r.status_code} {r.text[:200]}")
                    if method == "GET" and r.status_code == 200:
                        r = c.patch(url, headers={"If-Match": r.headers["etag"]}, json={
                            "ports": [{"protocol": "tcp", "listen_port": str(5000 + i),
                                       "target_address": "10.0.0.200"}]})
                        if r.status_code not in allowed["PATCH"]:
                            bad.append(f"PATCH {r.status_code} {r.text[:200]}")
                if (i + k) % 3 == 0:
                    r = c.delete(url)
                    if r.status_code not in allowed["DELETE"]:
                        bad.append(f"DELETE {r.status_code} {r.text[:200]}")
        return bad

    with ThreadPoolExecutor(CLIENTS) as pool:
        bad = [b for bs in pool.map(job, range(CLIENTS)) for b in bs]
    assert bad == []
    with srv.client() as c:
        listed = list(assert_sync(c.get(FWD, params={"recursion": 1})))
    assert len(listed) <= 1
    assert kernel_maps(lab.node) == expected_maps(listed)
