"""ADD on a bridge network uses the network as it is when ADD's write transaction runs, not a
copy read before the store's write lock: a ``podnetctl network set`` or ``network delete``
that commits between the plugin's start and its write transaction is seen by the ADD.

Made deterministic with the store's first-come, first-served lock (:mod:`podnet.store.lock`):
the test holds the lock, ``podnetctl`` queues behind it, then the plugin starts (it reads the
network, then queues behind podnetctl); the test lets go, podnetctl commits its change, and the
ADD runs last."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netns import PLUGIN_ENV, VENV_BIN, Lab

pytestmark = [pytest.mark.root]

BIN = VENV_BIN
NET = "pnracebr0"


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()


def ctl(lab: Lab, data: Path, *args: str) -> subprocess.Popen[str]:
    env = [f"{k}={v}" for k, v in PLUGIN_ENV.items()]
    return subprocess.Popen(["ip", "netns", "exec", lab.node, "env", *env, str(BIN / "podnetctl"),
                             *args, "--data-dir", str(data)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def plugin(lab: Lab, data: Path, command: str, cid: str, pod: str) -> subprocess.Popen[str]:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/run/netns/{pod}",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni",
           "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **PLUGIN_ENV}  # fmt: skip
    conf = {"cniVersion": "1.1.0", "name": "pnrace", "type": "podnet", "network": NET,
            "dataDir": str(data)}  # fmt: skip
    p = subprocess.Popen(["ip", "netns", "exec", lab.node, "env", "-i",
                          *[f"{k}={v}" for k, v in env.items()], str(BIN / "podnet")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)  # fmt: skip
    assert p.stdin is not None
    p.stdin.write(json.dumps(conf))
    p.stdin.close()
    p.stdin = None
    return p


def queued(data: Path) -> int:
    d = data / "podnet.lock.d"
    return len(os.listdir(d)) if d.exists() else 0


def wait_queued(data: Path, n: int, what: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 20
    while queued(data) < n:
        assert what.poll() is None, f"exited early: {what.communicate()}"
        assert time.monotonic() < deadline, f"{n} waiters never queued"
        time.sleep(0.01)


def race(lab: Lab, data: Path, change: tuple[str, ...], cid: str, pod: str) -> tuple[Any, Any]:
    """``change`` (podnetctl args) queued first, then the ADD; both let go; their outcomes."""
    from podnet.store import open_store

    with open_store(str(data)) as store, store.locked():
        before = queued(data)
        change_p = ctl(lab, data, *change)
        wait_queued(data, before + 1, change_p)
        add_p = plugin(lab, data, "ADD", cid, pod)
        wait_queued(data, before + 2, add_p)  # it has read the network by now
    ch_out, ch_err = change_p.communicate(timeout=60)
    add_out, add_err = add_p.communicate(timeout=60)
    assert change_p.returncode == 0, ch_err
    return add_p.returncode, (json.loads(add_out) if add_out.strip() else add_err)


def test_add_sees_an_address_change_that_committed_first(lab: Lab, tmp_path: Path) -> None:
    """``network set ipv4.address=10.97.0.1/24`` commits just before ADD's transaction: the pod
    gets an address of 10.97.0.0/24 and the gateway 10.97.0.1 (the bridge's)."""
    data = tmp_path / "data"
    ctl(lab, data, "network", "create", NET, "ipv4.address=10.98.0.1/24", "ipv6.address=none",
        "--init").communicate(timeout=60)  # fmt: skip
    pod = lab.pod()
    rc, answer = race(lab, data, ("network", "set", NET, "ipv4.address=10.97.0.1/24"), "race-a", pod)
    try:
        assert rc == 0, answer
        ips = [(i["address"], i.get("gateway")) for i in answer["ips"]]
        shown = lab.exec(lab.node, "ip", "-o", "-4", "addr", "show", "dev", NET).stdout
        assert all(a.startswith("10.97.0.") and g == "10.97.0.1" for a, g in ips), (
            f"ADD used the network as read before the lock: pod {ips}; bridge {shown.strip()}"
        )
    finally:
        plugin(lab, data, "DEL", "race-a", pod).communicate(timeout=60)
        ctl(lab, data, "network", "delete", NET).communicate(timeout=60)


def test_add_refuses_a_network_deleted_first(lab: Lab, tmp_path: Path) -> None:
    """``network delete`` commits just before ADD's transaction: ADD answers 7 (the network
    does not exist), as when it was deleted before the call, and no bridge comes back."""
    data = tmp_path / "data"
    ctl(lab, data, "network", "create", NET, "ipv4.address=10.96.0.1/24", "ipv6.address=none",
        "--init").communicate(timeout=60)  # fmt: skip
    pod = lab.pod()
    rc, answer = race(lab, data, ("network", "delete", NET), "race-d", pod)
    try:
        links = lab.exec(lab.node, "ip", "-o", "link", "show").stdout
        assert rc != 0 and isinstance(answer, dict), answer
        assert answer.get("code") == 7 and "does not exist" in answer.get("msg", ""), answer
        assert f" {NET}:" not in links, f"the deleted network's bridge is back: {links}"
    finally:
        plugin(lab, data, "DEL", "race-d", pod).communicate(timeout=60)
