"""Questions about links are answered in the caller's network namespace, not in the one ``/sys``
was mounted in.

``nsenter --net`` only calls setns(2): ``/sys/class/net`` stays the test host's (unlike
``ip netns exec``, which remounts it). That is how tests/support/runtimes.py runs podman, and how a
runtime running in a container calls its plugins. A bridge network's pods are added, checked,
reached and deleted that way, and the network deleted with its bridge; podnet.link's readers are
asked from a thread inside a lab netns."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envgate import need
from netns import PLUGIN, PLUGIN_ENV, VENV_BIN, Lab

pytestmark = pytest.mark.root

PODNETCTL = str(VENV_BIN / "podnetctl")


def nsenter(lab: Lab, *argv: str, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``argv`` in the lab node's netns by setns only: the mount namespace, and with it /sys,
    stays this host's."""
    prefix = ["nsenter", f"--net=/run/netns/{lab.node}", "--"]
    if env is not None:
        prefix += ["env", "-i", *[f"{k}={v}" for k, v in env.items()]]
    return subprocess.run([*prefix, *argv], input=input, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def cni(lab: Lab, command: str, conf: dict[str, Any], container_id: str,
        pod: str) -> tuple[int, Any]:  # fmt: skip
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": container_id,
           "CNI_NETNS": f"/run/netns/{pod}", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
           "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), **PLUGIN_ENV}  # fmt: skip
    out = nsenter(lab, PLUGIN, input=json.dumps(conf), env=env)
    text = out.stdout.strip()
    return out.returncode, (json.loads(text) if text else None)


def link_json(lab: Lab, name: str) -> dict[str, Any] | None:
    out = lab.exec(lab.node, "ip", "-j", "link", "show", "dev", name, check=False)
    return json.loads(out.stdout)[0] if out.returncode == 0 else None


def test_bridge_pods_added_checked_and_deleted_under_nsenter_net(tmp_path: Path) -> None:
    """Under ``nsenter --net``, where ``/sys/class/net`` shows the test host's links and not the
    node's: the network is made, two pods join its bridge (the first ADD finds the bridge
    ``network create`` made, and takes it as podnet's), reach each other over it, pass CHECK,
    are deleted, and ``network delete`` removes the bridge."""
    need("root", "ip", "nft", "nsenter")
    lab = Lab()
    data = tmp_path / "data"
    name = f"b{lab.tag}"  # the bridge is named after the network
    try:
        assert not os.path.exists(f"/sys/class/net/{name}")  # this /sys is not the node's
        ctl = [PODNETCTL, "network", "--data-dir", str(data), "--init"]
        made = nsenter(lab, *ctl, "create", name, "ipv4.address=10.61.0.1/24",
                       "ipv6.address=fd00:61::1/64")  # fmt: skip
        assert made.returncode == 0, made.stderr
        conf = {"cniVersion": "1.1.0", "name": f"{name}-pods", "type": "podnet",
                "network": name, "dataDir": str(data)}  # fmt: skip
        pods: dict[str, tuple[str, dict[str, Any]]] = {}
        for who in ("a", "b"):
            ns = lab.pod(who)
            rc, out = cni(lab, "ADD", conf, f"c-{who}-{lab.tag}", ns)
            assert rc == 0, out
            pods[who] = (ns, out)
            host = next(i["name"] for i in out["interfaces"] if not i.get("sandbox"))
            assert (link_json(lab, host) or {}).get("master") == name
        bridge = link_json(lab, name)
        assert bridge is not None and bridge.get("ifalias") == f"podnet:{data}"
        ns_a, res_a = pods["a"]
        ns_b, res_b = pods["b"]
        addr_b = [i["address"].split("/")[0] for i in res_b["ips"]]
        lab.serve(ns_b, "b", 8080)
        for addr in addr_b:  # pod to pod across the bridge, IPv4 and IPv6
            assert lab.talk(ns_a, "tcp", addr, 8080).split(" ")[0] == "b"
        rc, out = cni(lab, "CHECK", {**conf, "prevResult": res_a}, f"c-a-{lab.tag}", ns_a)
        assert rc == 0, out
        for who, (ns, _) in pods.items():
            rc, out = cni(lab, "DEL", conf, f"c-{who}-{lab.tag}", ns)
            assert rc == 0, out
        assert nsenter(lab, *ctl, "delete", name).returncode == 0
        assert link_json(lab, name) is None
    finally:
        lab.close()


def test_link_readers_answer_for_the_calling_threads_netns() -> None:
    """From a thread that entered a lab netns (this process's /sys is the host's): a link's
    alias, whether a bridge is podnet's, a port's bridge, a bridge port refused as a bridge,
    and a name that is no link there."""
    need("root", "ip")
    from podnet.link import bridge, veth
    from podnet.link.netns import NetNS

    lab = Lab()
    br, port, peer = f"q{lab.tag}", f"qh{lab.tag}", f"qp{lab.tag}"
    mark = "podnet:/tmp/elsewhere"
    try:
        for argv in (
            ["link", "add", br, "type", "bridge"],
            ["link", "set", br, "alias", mark],
            ["link", "add", port, "type", "veth", "peer", "name", peer],
            ["link", "set", port, "master", br],
            ["link", "set", port, "alias", mark],
        ):
            lab.exec(lab.node, "ip", *argv)
        assert not os.path.exists(f"/sys/class/net/{br}")
        assert veth.alias_of(br) is None  # not a link of this thread's netns
        with NetNS(f"/run/netns/{lab.node}") as ns, ns.entered():
            assert veth.alias_of(br) == mark
            assert veth.alias_of(peer) == ""
            assert veth.alias_of(f"z{lab.tag}") is None
            assert bridge.exists(br)
            assert bridge.owned(br, mark) is True
            assert bridge.owned(br, "podnet:/tmp/other") is False
            assert bridge.port_of(port) == br
            with pytest.raises(bridge.NotOurs, match="a bridge port named"):
                bridge.require_ours(port, mark)
    finally:
        lab.close()


def test_default_route_link_from_a_thread_in_another_netns() -> None:
    """The default route's link (ADD's MTU) is the calling thread's netns's even when that thread
    is not the process's first: ``/proc/net`` is the first thread's, ``/proc/thread-self/net``
    the caller's."""
    need("root", "ip")
    import threading

    from podnet.link import mtu
    from podnet.link.netns import NetNS

    lab = Lab()
    up = f"u{lab.tag}"
    try:
        lab.exec(lab.node, "ip", "link", "add", up, "mtu", "1420", "type", "veth", "peer", "name",
                 f"v{lab.tag}")  # fmt: skip
        lab.exec(lab.node, "ip", "link", "set", up, "up")
        lab.exec(lab.node, "ip", "addr", "add", "192.0.2.9/24", "dev", up)
        lab.exec(lab.node, "ip", "route", "add", "default", "via", "192.0.2.10")
        seen: list[object] = []

        def inside() -> None:
            try:
                with NetNS(f"/run/netns/{lab.node}") as ns, ns.entered():
                    seen.append((mtu.default_route_ifname(), mtu.default_mtu()))
            except BaseException as err:  # noqa: BLE001 - reported by the assert below
                seen.append(err)

        worker = threading.Thread(target=inside)
        worker.start()
        worker.join(30)
        assert seen == [(up, 1420)]
    finally:
        lab.close()


def test_rtnl_parses_a_link_message_and_refuses_impossible_names() -> None:
    """An ``RTM_NEWLINK`` payload as the kernel packs it (host byte order, 4-byte aligned
    attributes, a nested ``IFLA_LINKINFO``); a truncated attribute ends the walk. Names no link
    can have are answered None without asking the kernel."""
    import sys

    from podnet.link import rtnl

    def attr(kind: int, data: bytes) -> bytes:
        size = 4 + len(data)
        return (
            size.to_bytes(2, sys.byteorder)
            + kind.to_bytes(2, sys.byteorder)
            + data
            + bytes(-size % 4)
        )

    def u32(n: int) -> bytes:
        return n.to_bytes(4, sys.byteorder)

    info = attr(1, b"veth\0") + attr(4, b"bridge\0")
    payload = (bytes(4) + u32(7) + u32(rtnl.IFF_UP) + bytes(4) + attr(3, b"h0\0") + attr(4, u32(1500))
               + attr(20, b"podnet:/x\0") + attr(10, u32(3)) + attr(5, u32(9)) + attr(37, u32(0))
               + attr(18, info) + (200).to_bytes(2, sys.byteorder) + bytes(2))  # fmt: skip
    link = rtnl._link(payload)
    assert (link.index, link.name, link.alias, link.master, link.lower) == (
        7,
        "h0",
        "podnet:/x",
        3,
        9,
    )
    assert link.lower_elsewhere and link.flags & rtnl.IFF_UP
    assert (link.kind, link.port_kind) == ("veth", "bridge")
    bare = rtnl._link(bytes(4) + u32(1) + u32(rtnl.IFF_LOOPBACK) + bytes(4) + attr(3, b"lo\0"))
    assert (bare.name, bare.alias, bare.kind, bare.master) == ("lo", "", "", 0)
    for name in ("", "x" * 16, "lo\0x", "a/b"):
        assert not rtnl.possible(name)
        assert rtnl.link(name) is None
