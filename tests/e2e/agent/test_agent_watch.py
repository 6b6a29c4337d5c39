"""The node agent's control loop against the stand-in kube-apiserver (tests/support/kubeapi.py), with the
unmodified ``kubernetes`` client: the first LIST, ADDED/MODIFIED/DELETED, bookmarks and the
resume from them, watch timeouts, 410 Gone in both forms, dropped streams and garbage, the API
down at start, sync failures retried without new events, SIGTERM/SIGINT, /healthz and /metrics,
and that an idle agent sends no request. The sink records what the loop hands it and the
server listens on 127.0.0.1 (no root), except in the last tests: the server inside a node
namespace, and ``podnetctl agent`` run there with the real dataplane."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kubeapi import KubeAPI, node
from netns import Lab
from podnet.agent.model import Node
from podnet.agent.settings import Settings

#: Generous bounds for things that happen in well under a second (the machine is shared).
WAIT = 30.0


class RecordingSink:
    """A sink that records every ``sync`` call; ``results`` gives the answers in turn (then
    True); ``gate``, when set, is waited for inside each sync."""

    def __init__(self, results: list[bool] | None = None) -> None:
        self.calls: list[tuple[Node | None, dict[str, Node]]] = []
        self.results = list(results or [])
        self.closed = 0
        self.gate: threading.Event | None = None
        self.cond = threading.Condition()

    def sync(self, me: Node | None, others: dict[str, Node]) -> bool:
        if self.gate is not None:
            self.gate.wait(WAIT)
        with self.cond:
            self.calls.append((me, dict(others)))
            self.cond.notify_all()
            return self.results.pop(0) if self.results else True

    def close(self) -> None:
        self.closed += 1

    def wait(self, pred: Callable[[Node | None, dict[str, Node]], bool],
             timeout: float = WAIT) -> tuple[Node | None, dict[str, Node]]:  # fmt: skip
        """Wait for a sync whose (me, others) satisfies ``pred``; returns it."""
        with self.cond:
            ok = self.cond.wait_for(lambda: bool(self.calls) and pred(*self.calls[-1]), timeout)
            assert ok, f"no sync matched; last: {self.calls[-1] if self.calls else None}"
            return self.calls[-1]

    def count(self) -> int:
        with self.cond:
            return len(self.calls)


def names(others: dict[str, Node]) -> set[str]:
    return set(others)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as server:
        yield server


@contextmanager
def agent(api: KubeAPI, tmp_path: Path, sink: RecordingSink, node_name: str = "a",
          **loop: Any) -> Iterator[Any]:  # fmt: skip
    """The loop (podnet.agent.watch.Agent) in a thread, through the real client and a
    kubeconfig for ``api``; stopped and joined at the end."""
    from podnet.agent.watch import Agent, connect

    loop.setdefault("backoff_base", 0.2)
    loop.setdefault("backoff_cap", 2.0)
    the = Agent(connect(api.kubeconfig(str(tmp_path / "kubeconfig"))), node_name, sink, **loop)
    thread = threading.Thread(target=the.run, name="test-agent")
    thread.start()
    try:
        yield the
    finally:
        the.stop()
        thread.join(WAIT)
        assert not thread.is_alive(), "the loop did not stop"
        the.close()


def until(pred: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


A = node("a", ["10.244.0.0/24", "fd00:10:244::/64"], ["192.168.50.1", "fd50::1"])
B = node("b", ["10.244.1.0/24", "fd00:10:244:1::/64"], ["192.168.50.2", "fd50::2"])


# -- the stand-in itself, through the client ---------------------------------------------------


def test_client_lists_and_watches_the_standin(api: KubeAPI, tmp_path: Path) -> None:
    """The unmodified client (CoreV1Api + watch.Watch, models deserialized) works against the
    stand-in: list_node, then a watch from the list's resourceVersion with every event type."""
    from kubernetes import client, config, watch

    api.create(A)
    v1 = client.CoreV1Api(config.new_client_from_config(api.kubeconfig(str(tmp_path / "kc"))))
    listed = v1.list_node()
    assert [n.metadata.name for n in listed.items] == ["a"]
    assert listed.items[0].spec.pod_cidrs == ["10.244.0.0/24", "fd00:10:244::/64"]
    rv = listed.metadata.resource_version
    assert client.VersionApi(v1.api_client).get_code().git_version.startswith("v1.")

    def changes() -> None:
        assert api.wait_streams(1)
        api.create(B)
        api.update(node("b", ["10.244.1.0/24"], ["192.168.50.9"]))
        api.bookmark()
        api.delete("a")

    threading.Thread(target=changes).start()
    seen = []
    w = watch.Watch()
    for event in w.stream(v1.list_node, resource_version=rv, allow_watch_bookmarks=True,
                          timeout_seconds=2):
        seen.append((event["type"], event["raw_object"]["metadata"].get("name")))
        if event["type"] == "MODIFIED":
            assert event["object"].status.addresses[0].address == "192.168.50.9"
    # the stream ended by itself (timeoutSeconds), after every change in order
    assert seen == [("ADDED", "b"), ("MODIFIED", "b"), ("BOOKMARK", None), ("DELETED", "a")]
    assert api.watches[0]["allowWatchBookmarks"] == "true"
    # a watch from an expired resourceVersion: 410 through the client, in both forms
    for gone in ("event", "http"):
        api.gone = gone
        api.expire()
        with pytest.raises(client.ApiException) as err:
            list(w.stream(v1.list_node, resource_version=rv, timeout_seconds=2))
        assert err.value.status == 410
    assert api.requests["gone"] == 2


# -- the loop ----------------------------------------------------------------------------------


def test_first_list_syncs_the_whole_view(api: KubeAPI, tmp_path: Path) -> None:
    api.create(A)
    api.create(B)
    rv = api.resource_version
    sink = RecordingSink()
    with agent(api, tmp_path, sink):
        me, others = sink.wait(lambda me, o: me is not None)
        assert me is not None and str(me.pod_cidrs[6]) == "fd00:10:244::/64"
        assert names(others) == {"b"} and str(others["b"].internal_ips[4]) == "192.168.50.2"
        assert api.wait_streams(1)
        assert api.requests["list"] == 1
        watch = api.watches[0]
        assert watch["resourceVersion"] == rv  # watched from the list's resourceVersion
        assert watch["allowWatchBookmarks"] == "true"
        assert 300 <= int(watch["timeoutSeconds"]) < 600  # server-side timeout, jittered
    assert sink.count() == 1


def test_added_modified_deleted(api: KubeAPI, tmp_path: Path,
                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="podnet.agent")
    api.create(A)
    sink = RecordingSink()
    with agent(api, tmp_path, sink):
        sink.wait(lambda me, o: me is not None)
        assert api.wait_streams(1)
        api.create(B)
        sink.wait(lambda me, o: names(o) == {"b"})
        api.update(node("b", ["10.244.1.0/24"], ["192.168.50.22"]))
        _, others = sink.wait(lambda me, o: "b" in o and str(o["b"].internal_ips[4]) ==
                              "192.168.50.22")  # fmt: skip
        assert 6 not in others["b"].pod_cidrs  # the IPv6 podCIDR went with the update
        n = sink.count()
        # a change the view does not hold (a label): no sync, no log line
        quiet = node("b", ["10.244.1.0/24"], ["192.168.50.22"])
        quiet["metadata"]["labels"]["x"] = "y"
        api.update(quiet)
        api.update(node("a", ["10.244.0.0/24"], ["192.168.50.1"]))  # a marker change after it
        sink.wait(lambda me, o: me is not None and 6 not in me.pod_cidrs)
        assert sink.count() == n + 1
        api.delete("b")
        sink.wait(lambda me, o: o == {})
        api.delete("a")
        sink.wait(lambda me, o: me is None)
        assert api.requests["list"] == 1  # all of it through the one watch
    lines = [r.getMessage() for r in caplog.records if r.name == "podnet.agent"]
    assert sum("node b" in m for m in lines) == 3, lines  # added, changed, deleted
    assert any(m.startswith("node b changed: podCIDRs 10.244.1.0/24;") for m in lines)
    assert "node b deleted" in lines and "node a deleted" in lines


def test_events_arriving_during_a_sync_are_one_batch(api: KubeAPI, tmp_path: Path) -> None:
    """Changes that arrive while a sync runs are applied together: one sync with all of
    them, not one per event."""
    api.create(A)
    sink = RecordingSink()
    sink.gate = threading.Event()
    with agent(api, tmp_path, sink):
        assert api.wait_streams(1)
        for i in range(40):
            api.create(node(f"n{i}", [f"10.245.{i}.0/24"], [f"192.168.51.{i + 1}"]))
        until(lambda: api.requests["watch"] >= 1)
        time.sleep(0.5)  # the events are read and queued behind the held first sync
        sink.gate.set()
        sink.wait(lambda me, o: len(o) == 40)
        assert sink.count() <= 3, [len(o) for _, o in sink.calls]


def test_bookmark_advances_the_resume(api: KubeAPI, tmp_path: Path) -> None:
    """A BOOKMARK moves the resourceVersion on: the next watch starts from it. The window is
    then compacted to the bookmark's resourceVersion, so a resume from anything older would
    be 410 Gone and a relist."""
    api.create(A)
    sink = RecordingSink()
    with agent(api, tmp_path, sink, watch_timeout=1):
        sink.wait(lambda me, o: me is not None)
        assert api.wait_streams(1)
        api.hold()  # the next watch waits here
        bookmarked = api.advance(5)  # other resources' writes: no Node event
        assert api.bookmark() == 1
        assert api.wait(lambda: api.waiting() == 1)  # the first watch ended (timeoutSeconds)
        api.expire()
        api.release()
        until(lambda: api.requests["watch"] >= 3)
        assert api.watches[1]["resourceVersion"] == bookmarked
        assert api.requests["gone"] == 0 and api.requests["list"] == 1


def test_watch_timeout_resumes_without_relist(api: KubeAPI, tmp_path: Path) -> None:
    api.create(A)
    sink = RecordingSink()
    with agent(api, tmp_path, sink, watch_timeout=1):
        sink.wait(lambda me, o: me is not None)
        until(lambda: api.requests["watch"] >= 3)
        rv = api.create(B)
        sink.wait(lambda me, o: "b" in o)
        until(lambda: api.requests["watch"] >= 5)
        assert api.requests["list"] == 1
        assert all(w["timeoutSeconds"] == "1" for w in api.watches)
        assert api.watches[-1]["resourceVersion"] == rv  # resumed from the last event
    assert sink.count() == 2


def test_watches_the_server_ends_at_once_are_not_hammered(tmp_path: Path) -> None:
    """A server that ends every watch at once, cleanly: each is resumed (no relist), after a
    backoff (first delay 0.4 s, doubling): 6 s hold at most 5 watches, not thousands."""
    with KubeAPI(max_watch=0) as api:
        api.create(A)
        sink = RecordingSink()
        with agent(api, tmp_path, sink, backoff_base=0.4, backoff_cap=30.0):
            sink.wait(lambda me, o: me is not None)
            until(lambda: api.requests["watch"] >= 1)
            time.sleep(6)
            watched = api.requests["watch"]
            assert 3 <= watched <= 6, watched
            assert api.requests["list"] == 1
            assert {w["resourceVersion"] for w in api.watches} == {api.resource_version}


def _converged(me: Node | None, others: dict[str, Node]) -> bool:
    return (me is not None and str(me.internal_ips[4]) == "192.168.50.111"
            and names(others) == {"c"})  # fmt: skip


def _change_unseen(api: KubeAPI) -> None:
    """Changes the agent's open watch does not deliver: a converged view needs a relist."""
    api.delete("b")
    api.create(node("c", ["10.244.2.0/24"], ["192.168.50.3"]))
    api.update(node("a", ["10.244.0.0/24"], ["192.168.50.111"]))


@contextmanager
def _missed_change(api: KubeAPI, tmp_path: Path) -> Iterator[tuple[RecordingSink, Any]]:
    """The agent running on nodes a and b, its first LIST applied and its watch open, then
    :func:`_change_unseen` while the stream is muted; yields the sink and the agent."""
    api.create(A)
    api.create(B)
    sink = RecordingSink()
    with agent(api, tmp_path, sink) as the:
        sink.wait(lambda me, o: names(o) == {"b"})
        assert api.wait_streams(1)
        api.mute()
        _change_unseen(api)
        api.mute(False)
        yield sink, the


@pytest.mark.parametrize("gone", ["http", "event"])
def test_gone_at_watch_start_relists(api: KubeAPI, tmp_path: Path, gone: str) -> None:
    """The watch is resumed from a resourceVersion the server no longer has: 410 (an HTTP
    status, or an ERROR event as the first line) → a relist, and the view converges."""
    api.gone = gone
    api.create(A)
    api.create(B)
    sink = RecordingSink()
    with agent(api, tmp_path, sink, watch_timeout=1) as the:
        sink.wait(lambda me, o: names(o) == {"b"})
        assert api.wait_streams(1)
        api.hold()
        assert api.wait(lambda: api.waiting() == 1)  # between two watches
        _change_unseen(api)
        api.expire()
        api.release()
        sink.wait(_converged)
        assert api.requests["gone"] == 1 and api.requests["list"] == 2
        assert the.metrics.relists.labels("expired")._value.get() == 1
        assert the.metrics.api_errors._value.get() == 0  # no backoff for a 410
        until(lambda: api.streams() == 1)
        assert api.watches[-1]["resourceVersion"] == api.resource_version


@pytest.mark.parametrize("gone", ["http", "event"])
def test_gone_storm_backs_off_and_does_not_resync(api: KubeAPI, tmp_path: Path,
                                                  gone: str) -> None:
    """Every watch is 410 Gone: the first relist comes at once, the repeated ones after a
    growing backoff (first delay 0.2 s jittered to half, cap 2 s: at most ~10 LISTs in 5 s;
    without backoff there are hundreds), and relists that bring the same view sync nothing."""
    api.gone = gone
    api.create(A)
    api.create(B)
    sink = RecordingSink()
    with agent(api, tmp_path, sink) as the:
        sink.wait(lambda me, o: names(o) == {"b"})
        api.always_gone = True
        assert api.drop_streams() <= 1
        until(lambda: api.requests["gone"] >= 2)
        lists = api.requests["list"]
        time.sleep(5)
        storm = api.requests["list"] - lists
        assert 1 <= storm <= 12, storm
        assert sink.count() == 1 and the.syncs == 1  # the same view: no sync
        assert the.metrics.relists.labels("expired")._value.get() >= 2
        api.always_gone = False
        api.create(node("c", ["10.244.2.0/24"], ["192.168.50.3"]))
        sink.wait(lambda me, o: names(o) == {"b", "c"})  # a changed view is synced


def test_relist_with_same_view_retries_a_failed_sync(api: KubeAPI, tmp_path: Path) -> None:
    """A relist that brings the same view syncs only when the last sync failed."""
    api.create(A)
    sink = RecordingSink(results=[False])
    with agent(api, tmp_path, sink, backoff_base=30.0, backoff_cap=60.0):
        sink.wait(lambda me, o: me is not None)
        assert api.wait_streams(1)
        api.expire(streams=True)  # a 410 relist at once; the sync retry is 15 s away
        until(lambda: sink.count() == 2, timeout=10)


def test_gone_mid_stream_relists(api: KubeAPI, tmp_path: Path) -> None:
    """An ERROR event carrying a Status with code 410 on an open watch → relist."""
    with _missed_change(api, tmp_path) as (sink, the):
        api.expire(streams=True)
        sink.wait(_converged)
        assert api.requests["list"] == 2
        assert the.metrics.relists.labels("expired")._value.get() == 1
        assert the.metrics.events.labels("ERROR")._value.get() == 1


GARBAGE = [
    pytest.param(b"{this is not json\n", id="not-json"),
    pytest.param(b'["an", "array"]\n', id="not-an-object"),
    pytest.param(b'{"type": "SURPRISE", "object": {"metadata": {"resourceVersion": "1"}}}\n',
                 id="unknown-type"),
    pytest.param(b'{"type": "ADDED", "object": {"metadata": {"name": "x"}}}\n', id="no-rv"),
    pytest.param(b'{"type": "ADDED"}\n', id="no-object"),
    pytest.param(b"\n", id="empty-line"),
    pytest.param(b'{"type": "ERROR", "object": "boom"}\n', id="error-not-status"),
    pytest.param(b'{"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": '
                 b'"InternalError", "message": "etcd"}}\n', id="error-500"),
    # a line that never ends: read by a bounded line reader, garbage past 4 MiB
    pytest.param(b'{"type": "ADDED", "object": "' + b"x" * (5 * 2**20), id="line-over-4MiB"),
]


@pytest.mark.parametrize("data", GARBAGE)
def test_garbage_on_the_stream_relists(api: KubeAPI, tmp_path: Path, data: bytes) -> None:
    with _missed_change(api, tmp_path) as (sink, the):
        assert api.garbage(data) == 1
        sink.wait(_converged)
        assert api.requests["list"] == 2
        assert the.metrics.relists.labels("error")._value.get() == 1
        assert the.metrics.api_errors._value.get() == 1  # after a backoff


def test_gzip_list_is_refused_not_decoded(api: KubeAPI, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """A LIST answered with ``Content-Encoding: gzip`` (not asked for; here a bomb of 256 KiB
    that inflates to 256 MiB) is refused without being inflated, and retried with backoff."""
    api.create(A)
    api.list_gzip = 2**28
    sink = RecordingSink()
    with agent(api, tmp_path, sink) as the:
        until(lambda: the.metrics.api_errors._value.get() >= 2)
        assert sink.count() == 0
        api.list_gzip = None
        sink.wait(lambda me, o: me is not None)
    assert any("Content-Encoding 'gzip'" in r.getMessage() for r in caplog.records)


def test_dripping_list_has_a_deadline_and_healthz_goes_stale(
        api: KubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """A LIST whose bytes come one at a time, each well within the read timeout, is cut at
    the LIST's deadline; while the API gives no LIST, watch or event, /healthz's check turns
    to 503 after its staleness bound."""
    from podnet.agent import watch
    from podnet.agent.health import Health

    monkeypatch.setattr(watch, "LIST_DEADLINE", 2.0, raising=False)
    api.create(A)
    sink = RecordingSink()
    health = Health()
    health.stale = 4.0
    with agent(api, tmp_path, sink, health=health) as the:
        sink.wait(lambda me, o: me is not None)
        assert api.wait_streams(1)
        assert health.check() == (True, "ok")
        api.list_drip = 0.2
        assert api.drop_streams() == 1
        until(lambda: the.metrics.api_errors._value.get() >= 2, timeout=15)
        until(lambda: not health.check()[0], timeout=15)
        assert health.check()[1].startswith("no LIST, watch or event from the API for ")
        api.list_drip = None
        until(lambda: health.check() == (True, "ok"))
    assert any("the LIST took longer than 2 s" in r.getMessage() for r in caplog.records)


def test_dropped_stream_relists(api: KubeAPI, tmp_path: Path) -> None:
    with _missed_change(api, tmp_path) as (sink, the):
        assert api.drop_streams() == 1
        sink.wait(_converged)
        assert api.requests["list"] == 2
        assert the.metrics.relists.labels("error")._value.get() == 1
        until(lambda: api.streams() == 1)


def test_api_down_at_start_backs_off_then_converges(api: KubeAPI, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens at start: the agent retries with backoff and converges once the API is
    up; no sync before the first LIST."""
    caplog.set_level(logging.INFO, logger="podnet.agent")
    api.create(A)
    api.down()
    sink = RecordingSink()
    with agent(api, tmp_path, sink) as the:
        until(lambda: the.metrics.api_errors._value.get() >= 3)
        assert sink.count() == 0 and not the.health.check()[0]
        api.up()
        sink.wait(lambda me, o: me is not None)
        assert the.health.check() == (True, "ok")
    failures = [r.getMessage() for r in caplog.records if "LIST nodes failed" in r.getMessage()]
    assert len(failures) >= 3 and all("retrying in" in m for m in failures)


def test_api_errors_back_off_exponentially(api: KubeAPI, tmp_path: Path) -> None:
    """An API answering 503 is retried with growing delays: with a first delay of 0.4 s
    (jittered down to half) the n-th retry comes after at least 0.2 * (2**n - 1) s, so 6 s
    hold at most 5 LISTs; without backoff there would be hundreds."""
    api.fail(503)
    sink = RecordingSink()
    with agent(api, tmp_path, sink, backoff_base=0.4, backoff_cap=30.0):
        until(lambda: api.requests["list"] >= 1)
        time.sleep(6)
        tried = api.requests["list"]
        assert 3 <= tried <= 5, tried
        assert sink.count() == 0
        api.fail(None)
        sink.wait(lambda me, o: True, timeout=60)  # the next retry: 12.8 s at most
        assert api.wait_streams(1)


def test_bearer_token_and_refusals(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The kubeconfig's token reaches the server as a bearer token; a wrong one is a 401, and
    RBAC refusing the list a 403: each logged with its status and retried with backoff."""
    caplog.set_level(logging.INFO, logger="podnet.agent")
    with KubeAPI(token="s3cret") as api:
        api.create(A)
        sink = RecordingSink()
        with agent(api, tmp_path, sink):
            sink.wait(lambda me, o: me is not None)
        assert api.requests["unauthorized"] == 0
        from podnet.agent.watch import Agent, connect

        bad = connect(api.kubeconfig(str(tmp_path / "bad"), token="wrong"))
        the = Agent(bad, "a", sink, backoff_base=0.2, backoff_cap=1.0)
        thread = threading.Thread(target=the.run)
        thread.start()
        try:
            until(lambda: api.requests["unauthorized"] >= 2)
            assert not the.health.check()[0] and sink.count() == 1
        finally:
            the.stop()
            thread.join(WAIT)
            the.close()
    with KubeAPI() as api:
        api.fail(403)
        with agent(api, tmp_path, RecordingSink()) as the:
            until(lambda: the.metrics.api_errors._value.get() >= 2)
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("LIST nodes failed: HTTP 401 Unauthorized; retrying in ")
               for m in lines), lines  # fmt: skip
    assert any(m.startswith("LIST nodes failed: HTTP 403 ") for m in lines), lines


def test_sync_failure_is_retried_without_events(api: KubeAPI, tmp_path: Path) -> None:
    api.create(A)
    sink = RecordingSink(results=[False, False, False])
    with agent(api, tmp_path, sink, backoff_base=0.1) as the:
        until(lambda: sink.count() >= 4)
        assert len({repr(c) for c in sink.calls}) == 1  # the same view each time
        assert api.requests["list"] == 1 and api.requests["watch"] == 1  # no new request
        assert the.metrics.sync_failures._value.get() == 3
        assert the.metrics.last_sync._value.get() > 0
        time.sleep(1)
        assert sink.count() == 4  # success: no more retries


def test_refused_node_logged_once_and_left_out(api: KubeAPI, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podnet.agent")
    api.create(A)
    api.create(B)
    sink = RecordingSink()
    bad = node("b", ["10.244.1.0/24", "10.244.9.0/24"], ["192.168.50.2"])  # two IPv4 podCIDRs
    with agent(api, tmp_path, sink) as the:
        sink.wait(lambda me, o: names(o) == {"b"})
        assert api.wait_streams(1)
        api.update(bad)
        sink.wait(lambda me, o: o == {})  # a Node that turns bad leaves the view
        for i in range(3):  # the same refusal again: quiet
            again = json.loads(json.dumps(bad))
            again["metadata"]["labels"]["n"] = str(i)
            api.update(again)
        api.create(node("c", ["10.244.2.0/24"], ["not-an-ip"]))
        api.create(node("d", ["10.244.3.0/24"], ["192.168.50.4"]))
        sink.wait(lambda me, o: names(o) == {"d"})
        assert the.refused.keys() == {"b", "c"}
        api.update(node("b", ["10.244.1.0/24"], ["192.168.50.2"]))  # mended: back in
        sink.wait(lambda me, o: names(o) == {"b", "d"})
        assert the.refused.keys() == {"c"}
        assert the.metrics.refused._value.get() == 1
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert sum("Node b: spec.podCIDRs[1]" in m for m in refused) == 1, refused
    assert sum("Node c: status.addresses[0]" in m for m in refused) == 1, refused


def test_idle_agent_sends_no_request(api: KubeAPI, tmp_path: Path) -> None:
    """Never polls: with nothing changing, the one open watch is all there is."""
    api.create(A)
    sink = RecordingSink()
    with agent(api, tmp_path, sink) as the:
        sink.wait(lambda me, o: me is not None)
        assert api.wait_streams(1)
        before = dict(api.requests)
        time.sleep(5)
        assert dict(api.requests) == before == {"list": 1, "watch": 1}
        assert sink.count() == 1 and the.syncs == 1
    assert api.wait(lambda: api.streams() == 0)  # stopped: the watch was closed


# -- the process: /healthz, /metrics, signals ------------------------------------------------


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def test_healthz_and_metrics(api: KubeAPI, tmp_path: Path) -> None:
    from podnet.agent.main import AgentProcess
    from podnet.agent.watch import connect

    api.create(A)
    api.create(B)
    api.fail(503)
    port = free_port()
    settings = Settings("a", data_dir=str(tmp_path), metrics_address="127.0.0.1",
                        metrics_port=port)  # fmt: skip
    sink = RecordingSink(results=[True] + [False] * 1000)
    proc = AgentProcess(settings, connect(api.kubeconfig(str(tmp_path / "kc"))), sink,
                        grace=1.0, backoff_base=0.2, backoff_cap=1.0)  # fmt: skip
    thread = threading.Thread(target=proc.run)
    thread.start()
    try:
        assert proc.started.wait(WAIT)
        base = f"http://127.0.0.1:{port}"
        code, body = _get(base + "/healthz")
        assert (code, body) == (503, "no LIST of Nodes has succeeded yet\n")
        until(lambda: proc.metrics.api_errors._value.get() >= 1)  # a LIST answered 503
        api.fail(None)
        sink.wait(lambda me, o: names(o) == {"b"})
        assert _get(base + "/healthz") == (200, "ok\n")
        api.create(node("c", ["10.244.2.0/24"], ["192.168.50.3"]))  # its sync fails from now on
        until(lambda: _get(base + "/healthz")[0] == 503)
        code, body = _get(base + "/healthz")
        assert body.startswith("syncing the node has failed for ") and "grace 1 s" in body
        code, text = _get(base + "/metrics")
        assert code == 200
        m = _metrics(text)
        assert m[("podnet_agent_nodes", ())] == 3
        assert m[("podnet_agent_watch_events_total", (("type", "ADDED"),))] == 1
        assert m[("podnet_agent_watch_events_total", (("type", "DELETED"),))] == 0
        assert m[("podnet_agent_api_errors_total", ())] >= 1
        assert m[("podnet_agent_sync_failures_total", ())] >= 1
        assert m[("podnet_agent_relists_total", (("reason", "expired"),))] == 0
        assert abs(m[("podnet_agent_last_sync_success_timestamp_seconds", ())] - time.time()) < 600
        assert _get(base + "/nothing")[0] == 404
    finally:
        proc.stop()
        thread.join(WAIT)
    assert not thread.is_alive() and sink.closed == 1
    with pytest.raises(OSError):  # the server is gone with the process
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


#: A process that runs podnet.agent.main.run with a sink appending JSON lines to a file.
AGENT_PROGRAM = textwrap.dedent("""
    import json, logging, sys
    from podnet.agent.main import run
    from podnet.agent.settings import Settings
    from podnet.agent.watch import connect

    kubeconfig, out, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

    class FileSink:
        def sync(self, me, others):
            with open(out, "a") as f:
                f.write(json.dumps({"me": repr(me), "others": sorted(others)}) + "\\n")
            return True

        def close(self):
            with open(out, "a") as f:
                f.write(json.dumps({"closed": True}) + "\\n")

    settings = Settings("a", kubeconfig=kubeconfig, data_dir="/nonexistent",
                        metrics_address="127.0.0.1", metrics_port=port)
    sys.exit(run(settings, api=connect(kubeconfig), sink=FileSink()))
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_the_process_cleanly(api: KubeAPI, tmp_path: Path, sig: int) -> None:
    api.create(A)
    api.create(B)
    out = tmp_path / "syncs"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", AGENT_PROGRAM,
                             api.kubeconfig(str(tmp_path / "kc")), str(out), str(port)],
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        until(lambda: out.exists() and "others" in out.read_text())
        assert api.wait_streams(1)
        assert _get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        proc.send_signal(sig)
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        stderr = proc.communicate()[1]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["others"] == ["b"] and lines[-1] == {"closed": True}
    assert f"stopped by {signal.Signals(sig).name}" in stderr
    assert api.wait(lambda: api.streams() == 0)  # the watch was closed
    assert "Traceback" not in stderr


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_connections_do_not_starve_the_agent(api: KubeAPI, tmp_path: Path) -> None:
    """300 idle connections to /healthz against an agent limited to 64 descriptors: it keeps
    a few connections (the oldest idle ones are evicted, the rest time out), /healthz still
    answers, the accept loop does not spin, and the agent keeps syncing."""
    import resource

    api.create(A)
    api.create(B)
    out = tmp_path / "syncs"
    port = free_port()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.Popen([sys.executable, "-c", AGENT_PROGRAM,
                             api.kubeconfig(str(tmp_path / "kc")), str(out), str(port)],
                            stderr=subprocess.PIPE, text=True, preexec_fn=limit)  # fmt: skip
    idle: list[socket.socket] = []
    try:
        until(lambda: out.exists() and "others" in out.read_text())
        assert api.wait_streams(1)
        for _ in range(300):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        time.sleep(1)
        cpu = _cpu_seconds(proc.pid)
        time.sleep(3)
        spent = _cpu_seconds(proc.pid) - cpu
        assert spent < 0.5, f"the agent spent {spent:.2f} s of CPU in 3 s with idle connections"
        for _ in range(3):
            assert _get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        api.create(node("c", ["10.244.2.0/24"], ["192.168.50.3"]))
        until(lambda: '"others": ["b", "c"]' in out.read_text())
        assert proc.poll() is None
    finally:
        for s in idle:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr = proc.communicate()[1]
    assert "Traceback" not in stderr, stderr[-2000:]


# -- podnetctl agent: options --------------------------------------------------------------


def _podnetctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "podnetctl")
    return subprocess.run([exe, "agent", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.parametrize(("args", "message"), [
    (["--node-name", "Node_1"], "Error: --node-name: not a Node name (RFC 1123 subdomain): "
                                "'Node_1'"),
    (["--node-name", "a" * 254], "Error: --node-name: not a Node name"),
    (["--node-name", "n1", "--no-masquerade-cidr", "10.0.0.1/8"],
     "Error: --no-masquerade-cidr: '10.0.0.1/8' is not a valid CIDR"),
    (["--node-name", "n1", "--no-masquerade-cidr", "fe80::1%eth0/64"],
     "Error: --no-masquerade-cidr: 'fe80::1%eth0/64' is a scoped IPv6 address"),
    (["--node-name", "n1", "--cni-conf-dir", "etc/cni"], "Error: --cni-conf-dir: 'etc/cni' is "
                                                         "not an absolute path"),
    (["--node-name", "n1", "--data-dir", "/var/lib/pod net"], "Error: --data-dir: "),
    (["--node-name", "n1", "--data-dir", "/"], "Error: --data-dir: '/' is the root directory"),
    (["--node-name", "n1", "--network-name", "-x"], "Error: --network-name: '-x' is not a "
                                                    "network name"),
    (["--node-name", "n1", "--metrics-port", "65536"], "Error: --metrics-port: '65536' is not "
                                                       "a TCP port"),
    (["--node-name", "n1", "--metrics-port", "８０"], "Error: --metrics-port: "),
    (["--node-name", "n1", "--metrics-address", "localhost"], "Error: --metrics-address: "
                                                              "'localhost' is not an IP address"),
    (["--node-name", "n1", "--kubeconfig", "/nonexistent/kc"], "Error: --kubeconfig: no such "
                                                               "file: /nonexistent/kc"),
    ([], "Error: --node-name: required (or NODE_NAME"),
])  # fmt: skip
def test_bad_option_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    more = [] if "--data-dir" in args else ["--data-dir", str(tmp_path)]
    run = _podnetctl(*args, *more, env={"NODE_NAME": ""})
    assert run.returncode == 1
    assert run.stderr.startswith(message) and run.stderr.count("\n") == 1, run.stderr
    assert run.stdout == ""


def test_bad_kubeconfig_is_one_line(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    kc.write_text("clusters: [this is not a kubeconfig\n")
    run = _podnetctl("--node-name", "n1", "--kubeconfig", str(kc), "--data-dir", str(tmp_path))
    assert run.returncode == 1
    assert run.stderr.startswith("Error: cannot load the Kubernetes API configuration")
    assert run.stderr.count("\n") == 1, run.stderr


def test_settings_from_options_and_environment(tmp_path: Path) -> None:
    """Defaults: NODE_NAME; in-cluster when KUBERNETES_SERVICE_HOST is set and the token
    exists; else KUBECONFIG; else ~/.kube/config."""
    import ipaddress

    import click

    from podnet.cli.agent import api_config, settings_from

    token = tmp_path / "token"
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    opts: dict[str, Any] = dict(
        node_name="node-1.example", kubeconfig=None, cni_conf_dir="/etc/cni/net.d",
        data_dir=str(tmp_path), no_masquerade_cidr=("10.0.0.0/8", "fd00::/8", "10.0.0.0/8"),
        network_name="podnet", metrics_address="::", metrics_port="19080")  # fmt: skip
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBECONFIG": "/k", "HOME": str(home)}
    assert api_config(None, env, str(token)) == "/k"  # no token file: not in a pod
    token.write_text("t")
    assert api_config(None, env, str(token)) is None  # in a pod: the service account
    with pytest.raises(click.ClickException, match="no Kubernetes API configuration"):
        api_config(None, {"HOME": str(home)}, str(token))
    (home / ".kube" / "config").write_text("{}")
    assert api_config(None, {"HOME": str(home)}, str(token)) == str(home / ".kube" / "config")
    given = tmp_path / "given"
    given.write_text("{}")
    assert api_config(str(given), env, str(token)) == str(given)  # an explicit file wins
    s = settings_from(**opts, environ={"KUBECONFIG": "/k"})
    assert s.node_name == "node-1.example" and s.kubeconfig == "/k"
    assert s.no_masquerade_cidrs == (ipaddress.ip_network("10.0.0.0/8"),
                                     ipaddress.ip_network("fd00::/8"))  # fmt: skip
    assert (s.metrics_address, s.metrics_port) == ("::", 19080)
    assert (s.cni_conf_dir, s.data_dir, s.network_name) == ("/etc/cni/net.d", str(tmp_path),
                                                            "podnet")  # fmt: skip


# -- the stand-in inside a node namespace ----------------------------------------------------

LIST_IN_NS = textwrap.dedent("""
    import sys
    from kubernetes import client, config
    v1 = client.CoreV1Api(config.new_client_from_config(sys.argv[1]))
    print(" ".join(n.metadata.name for n in v1.list_node().items))
""")


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_standin_listens_inside_a_namespace(lab: Lab, tmp_path: Path, address: str) -> None:
    """The listening socket is made inside the node namespace (a thread that entered it) and
    served from the test process: a client in that namespace reaches it; nothing listens on
    that port in the test's own namespace."""
    with KubeAPI(address, netns=lab.node) as api:
        api.create(A)
        api.create(B)
        listening = lab.exec(lab.node, "ss", "-Htln", f"sport = :{api.port}").stdout
        assert api.hostport in listening
        here = subprocess.run(["ss", "-Htln", f"sport = :{api.port}"], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
        assert api.hostport not in here
        kc = api.kubeconfig(str(tmp_path / "kc"))
        out = lab.exec(lab.node, sys.executable, "-c", LIST_IN_NS, kc).stdout
        assert out == "a b\n"
        assert api.requests["list"] == 1


def _until_ok(pred: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert proc.poll() is None, f"the agent exited: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_podnetctl_agent_in_a_node_namespace(lab: Lab, tmp_path: Path) -> None:
    """``podnetctl agent`` as a process in a node namespace, against the stand-in listening in
    it, with the real dataplane: the conflist from the Node's podCIDRs, a route to another
    Node's podCIDR that follows it away, /healthz on kindnetd's port; SIGTERM ends it with
    status 0, and a restart rewrites nothing."""
    if importlib.util.find_spec("podnet.agent.dataplane") is None:
        pytest.fail("podnet.agent.dataplane is missing: this test needs the agent's dataplane")
    lab.client()  # 192.0.2.0/24 and 2001:db8:1::/64 on the node's up0: the "LAN"
    conf, data = tmp_path / "net.d", tmp_path / "data"
    podnetctl = str(Path(sys.executable).parent / "podnetctl")
    with KubeAPI("127.0.0.1", netns=lab.node) as api:
        api.create(node("a", ["10.244.0.0/24", "fd00:10:244::/64"], ["192.0.2.1",
                                                                      "2001:db8:1::1"]))
        api.create(node("b", ["10.244.1.0/24", "fd00:10:244:1::/64"], ["192.0.2.2",
                                                                        "2001:db8:1::2"]))
        argv = ["ip", "netns", "exec", lab.node, podnetctl, "agent", "--kubeconfig",
                api.kubeconfig(str(tmp_path / "kc")), "--node-name", "a", "--cni-conf-dir",
                str(conf), "--data-dir", str(data)]  # fmt: skip

        def route(prefix: str) -> str:
            return lab.exec(lab.node, "ip", "route", "show", prefix).stdout.strip()

        def healthz() -> str:
            r = lab.exec(lab.node, "curl", "-s", "-m", "5", "http://127.0.0.1:19080/healthz",
                         check=False)  # fmt: skip
            return r.stdout

        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        try:
            _until_ok(lambda: conf.is_dir() and any(conf.glob("*.conflist")), proc)
            _until_ok(lambda: "via 192.0.2.2" in route("10.244.1.0/24"), proc)
            _until_ok(lambda: "via 2001:db8:1::2" in lab.exec(
                lab.node, "ip", "-6", "route", "show", "fd00:10:244:1::/64").stdout, proc)
            (path,) = conf.glob("*.conflist")
            text = path.read_text()
            assert "10.244.0.0/24" in text and "fd00:10:244::/64" in text
            _until_ok(lambda: healthz() == "ok\n", proc)
            api.delete("b")
            _until_ok(lambda: route("10.244.1.0/24") == "", proc)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(WAIT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr = proc.communicate()[1]
        assert "stopped by SIGTERM" in stderr and "Traceback" not in stderr, stderr
        assert "node b deleted" in stderr
        written = path.stat().st_mtime_ns
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        try:
            _until_ok(lambda: healthz() == "ok\n", proc)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(WAIT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert path.stat().st_mtime_ns == written and path.read_text() == text
        assert api.requests["list"] == 2
