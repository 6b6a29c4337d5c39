"""The agent's control loop against the Kubernetes API: the reflector
(:mod:`podnet.agent.reflector`) LISTs the Nodes, then WATCHes them from the list's
resourceVersion; the loop hands the whole view to a sink after every batch of changes.

Two threads: the *reflector* speaks to the API and queues what it reads; the *loop* (the
caller's thread) keeps the view ``{name: Node}`` (:func:`podnet.agent.model.parse_node`; an
object it cannot parse is logged once and left out, never half used), logs one line per Node
that changes it, and calls ``sink.sync(me, others)`` after each batch and after each relist
(with the complete new view; a relist that leaves the view as it was is not synced unless the
last sync failed). A sync that returns False is retried with backoff even when no
event comes.

The official ``kubernetes`` client is imported here and nowhere else in podnet.

The official ``kubernetes`` client is imported here and in :mod:`podnet.agent.reflector`,
nowhere else in podnet.
"""

from __future__ import annotations

import logging
import os
import random
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from kubernetes import client as kclient
from kubernetes import config

from podnet import checked
from podnet.agent.health import Health, Metrics
from podnet.agent.model import BadNode, Node, parse_node
from podnet.agent.reflector import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    LIST_DEADLINE,
    WATCH_TIMEOUT,
    Backoff,
    Item,
    Reflector,
    _describe,
)

__all__ = ["Agent", "ApiConfigError", "Backoff", "Reflector", "Sink", "connect"]

log = logging.getLogger("podnet.agent")


class Sink(Protocol):
    """What the loop drives: ``sync`` makes the node hold what the view calls for (True when
    all is applied, False to be retried); ``close`` releases what it holds."""

    def sync(self, me: Node | None, others: dict[str, Node]) -> bool: ...

    def close(self) -> None: ...


class ApiConfigError(ValueError):
    """The API's configuration (kubeconfig or in-cluster service account) cannot be loaded."""


def connect(kubeconfig: str | None) -> kclient.CoreV1Api:
    """A ``CoreV1Api`` for the cluster: from the kubeconfig file(s) ``kubeconfig`` (``:``
    separated, as ``KUBECONFIG``), or with None the in-cluster service account (the
    ``KUBERNETES_SERVICE_HOST``/``_PORT`` environment and
    ``/var/run/secrets/kubernetes.io/serviceaccount``). Nothing is asked of the server yet.
    :class:`ApiConfigError` naming the cause otherwise."""
    try:
        if kubeconfig is None:
            conf = kclient.Configuration()
            config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
            api_client = kclient.ApiClient(conf)
        else:
            api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except Exception as err:  # the loaders raise ConfigException, OSError, YAML errors
        raise ApiConfigError(f"cannot load the Kubernetes API configuration "
                             f"({kubeconfig or 'in-cluster service account'}): "
                             f"{checked.one_line(str(err))}") from None  # fmt: skip
    return kclient.CoreV1Api(api_client)


def _name_key(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else checked.show(name)


class Agent:
    """The loop: the view of Nodes, the sink's syncs and their retries. ``api``: a
    ``CoreV1Api`` (:func:`connect`); ``node_name``: this node's Node; ``sink``: a
    :class:`Sink`. :meth:`run` until :meth:`stop` (from any thread or a signal handler)."""

    def __init__(self, api: kclient.CoreV1Api, node_name: str, sink: Sink, *,
                 metrics: Metrics | None = None, health: Health | None = None,
                 watch_timeout: int = WATCH_TIMEOUT, backoff_base: float = BACKOFF_BASE,
                 backoff_cap: float = BACKOFF_CAP, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self.node_name = node_name
        self.sink = sink
        self.metrics = metrics or Metrics()
        self.health = health or Health(clock=clock)
        self.clock = clock
        rng = rng or random.Random()
        self.reflector = Reflector(api, self._receive, self.metrics,
                                   watch_timeout=watch_timeout,
                                   backoff=Backoff(backoff_base, backoff_cap, rng), clock=clock,
                                   rng=rng, contact=self.health.api_ok,
                                   list_deadline=LIST_DEADLINE)  # fmt: skip
        self.sync_backoff = Backoff(backoff_base, backoff_cap, rng)
        #: the view: every Node that parsed, by name
        self.view: dict[str, Node] = {}
        #: Nodes left out: name → why (logged once per reason)
        self.refused: dict[str, str] = {}
        self.syncs = 0
        self._synced_ok = False
        self._inbox: deque[Item] = deque()
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @property
    def wakeup_fd(self) -> int:
        """The write end of the loop's wake-up pipe (for ``signal.set_wakeup_fd``)."""
        return self._wake_w

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:  # full: the loop has wake-ups pending anyway
            pass

    def _receive(self, item: Item) -> None:
        self._inbox.append(item)
        self._wake()

    def stop(self) -> None:
        """Make :meth:`run` return after the sync under way, if any (no lock is taken: safe
        from a signal handler)."""
        if self._stopping:
            return
        self._stopping = True
        self._wake()
        self.reflector.stop()

    def run(self) -> None:
        """LIST/WATCH and sync until :meth:`stop`; then the watch is closed (the sink is the
        caller's to close)."""
        reader = threading.Thread(target=self.reflector.run, name="podnet-agent-watch",
                                  daemon=True)  # fmt: skip
        reader.start()
        retry_at: float | None = None
        listed = False
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    if not self._inbox:
                        wait = None if retry_at is None else max(0.0, retry_at - self.clock())
                        sel.select(wait)
                    self._drain()
                    if self._stopping:
                        break
                    changed = False
                    while self._inbox:
                        item = self._inbox.popleft()
                        first = not listed and item[0] == "list"
                        changed = self._apply(item) or first or changed
                        listed = listed or item[0] == "list"
                    due = retry_at is not None and self.clock() >= retry_at
                    if listed and (changed or due):
                        retry_at = None if self._sync() else self.clock() + self.sync_backoff.next()
        finally:
            self.reflector.stop()
            reader.join(timeout=5)
            if reader.is_alive():
                log.warning("the watch did not close within 5 s; leaving it to the exit")

    def close(self) -> None:
        """Release the wake-up pipe (after :meth:`run`)."""
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _drain(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _sync(self) -> bool:
        me = self.view.get(self.node_name)
        others = {n: node for n, node in self.view.items() if n != self.node_name}
        self.syncs += 1
        try:
            ok = bool(self.sink.sync(me, others))
            why = "the sink reported a failure"
        except Exception as err:  # the contract says False; a bug must not end the agent
            log.exception("sync raised")
            ok, why = False, _describe(err)
        self._synced_ok = ok
        if ok:
            if self.sync_backoff.failures:
                log.info("sync succeeded after %d failures", self.sync_backoff.failures)
            self.sync_backoff.reset()
            self.health.sync_ok()
            self.metrics.last_sync.set(time.time())
        else:
            self.metrics.sync_failures.inc()
            self.health.sync_failed(why)
            log.warning("sync failed (%s); retrying with backoff", why)
        return ok

    # -- the view --------------------------------------------------------------------------

    def _apply(self, item: Item) -> bool:
        """Apply one queued item to the view; whether a sync is called for."""
        if item[0] == "list":
            # a relist whose view equals the current one is synced only to retry a failure
            changed = self._relisted(item[1]) or not self._synced_ok
            self.health.list_ok()
        else:
            changed = self._event(item[1], item[2])
        self.metrics.nodes.set(len(self.view))
        self.metrics.refused.set(len(self.refused))
        return changed

    def _parse(self, obj: object) -> tuple[str, Node | None]:
        key = _name_key(obj)
        try:
            if not isinstance(obj, dict):
                raise BadNode(f"not an object: {checked.show(obj)}")
            node = parse_node(obj)
        except BadNode as err:
            why = checked.one_line(str(err))
            if self.refused.get(key) != why:
                log.warning("refused a Node, left out of the view: %s", why)
            self.refused[key] = why
            return key, None
        self.refused.pop(key, None)
        return key, node

    def _put(self, node: Node) -> bool:
        old = self.view.get(node.name)
        if old == node:
            return False
        self.view[node.name] = node
        log.info("node %s %s: %s", node.name, "added" if old is None else "changed",
                 _summary(node))  # fmt: skip
        return True

    def _remove(self, key: str, why: str) -> bool:
        if self.view.pop(key, None) is None:
            return False
        log.info("node %s %s", key, why)  # a key of the view: a checked Node name
        return True

    def _event(self, kind: str, obj: object) -> bool:
        if kind == "DELETED":
            key = _name_key(obj)
            self.refused.pop(key, None)
            return self._remove(key, "deleted")
        key, node = self._parse(obj)
        if node is None:
            return self._remove(key, "removed from the view (refused)")
        return self._put(node)

    def _relisted(self, items: list[object]) -> bool:
        """Replace the view with the Nodes of a LIST; whether the view changed."""
        changed = False
        seen: set[str] = set()
        refused_before = dict(self.refused)
        self.refused.clear()
        for obj in items:
            key = _name_key(obj)
            if key in refused_before:  # log once: a refusal already logged stays quiet
                self.refused[key] = refused_before[key]
            k, node = self._parse(obj)
            if node is not None:
                changed = self._put(node) or changed
                seen.add(k)
        for key in [k for k in self.view if k not in seen]:
            changed = self._remove(key, "removed from the view (refused)" if key in self.refused
                                   else "gone (not in the new list)") or changed  # fmt: skip
        return changed


def _summary(node: Node) -> str:
    cidrs = ", ".join(str(n) for n in node.pod_cidrs.values()) or "none"
    ips = ", ".join(str(a) for a in node.internal_ips.values()) or "none"
    return f"podCIDRs {cidrs}; InternalIP {ips}"
