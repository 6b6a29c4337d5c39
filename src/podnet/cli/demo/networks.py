"""The demo's networks-and-forwards part, run by :class:`podnet.cli.demo.Demo`
in its node namespace after the hostPort fetches:

1. bridge network ``demobr`` (10.0.3.1/24, fd00:3::1/64, NAT) made with ``podnetctl network
   create``, and a second conflist whose pods join it (``"network": "demobr"``);
2. pod-c and pod-d on the bridge, through the runtime, each with an HTTP server;
3. a whole-address forward 198.51.100.10 → pod-c and a port forward 198.51.100.11:8090 →
   pod-d:80 (``podnetctl network forward create`` / ``port add``), fetched from the client
   namespace, which routes 198.51.100.0/24 through the node; tcp 8080 on 198.51.100.11 →
   pod-d too (the node only routes that address: pod-a's hostPort 8080 never answers there),
   while a forward on the node's own 192.0.2.1 is refused (it would take that hostPort's
   traffic), and 198.51.100.11:9999 — no port, no default target — is dropped (as LXD
   drops it, docs/sources.md#lxd-network-forwards);
4. hairpin: pod-c and pod-d → 198.51.100.10 (the target itself and another pod of the bridge);
5. ``forward list``, then DEL of both pods, the forwards and the network, and a check that
   no bridge and no forward element is left.
"""

from __future__ import annotations

import json
import os
import sys

from podnet import checked
from podnet.cli.demo.kit import Demo
from podnet.cli.demo.steps import POD_PORT, DemoError, Pod, make_url, run_cmd
from podnet.runtime import RuntimeConf, load_conflist

BRIDGE = "demobr"
#: The node's own address facing the client namespace (the demo's setup gives it).
NODE_ADDR = "192.0.2.1"
BRIDGE_NETWORK = "demobr-pods"
WHOLE, PORTS = "198.51.100.10", "198.51.100.11"
LISTEN_RANGE = "198.51.100.0/24"


def _podnetctl() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "podnetctl")


def run_networks(demo: Demo) -> None:
    """All steps of this part; DemoError from a failing fatal step."""

    p = demo.progress
    data = demo.path_of("data")

    def ctl(*args: str) -> str:
        out = run_cmd("ip", "netns", "exec", demo.node, _podnetctl(), "network", "--data-dir", data,
                   *args, check=False)  # fmt: skip
        if out.returncode != 0:
            raise DemoError(f"podnetctl network {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout.strip()

    p.section("Networks and forwards (LXD's network forwards)")
    with p.step(f"network {BRIDGE} (bridge, 10.0.3.1/24 + fd00:3::1/64, NAT)") as detail:
        detail.append(ctl("create", BRIDGE, "ipv4.address=10.0.3.1/24", "ipv6.address=fd00:3::1/64",
                          "ipv4.nat=true", "ipv6.nat=true"))
    with p.step(f"conflist {BRIDGE_NETWORK}: podnet pods join {BRIDGE}"):
        conf = {"cniVersion": "1.1.0", "name": BRIDGE_NETWORK,
                "plugins": [{"type": "podnet", "network": BRIDGE, "dataDir": data}]}  # fmt: skip
        with open(os.path.join(demo.path_of("net.d"), f"20-{BRIDGE_NETWORK}.conflist"), "w") as f:
            json.dump(conf, f, indent=2)
    net = load_conflist(BRIDGE_NETWORK, demo.path_of("net.d"))
    cni = demo.runtime()
    bridge_pods: list[Pod] = []
    try:
        for label in ("pod-c", "pod-d"):
            pod = Pod(label, f"pndemo-{demo.tag}-{label}", f"demo-{demo.tag}-{label}", 0)
            with p.step(f"ADD {label} to {BRIDGE}") as detail:
                demo.add_netns(pod.netns)
                result = cni.add(net, RuntimeConf(pod.container_id, pod.path))
                for ip in result.get("ips", []):
                    if checked.interface(ip["address"]).version == 6:
                        pod.ipv6 = ip["address"].split("/")[0]
                    else:
                        pod.ipv4 = ip["address"].split("/")[0]
                detail.append(f"{pod.ipv4} {pod.ipv6}")
            bridge_pods.append(pod)
        demo.start_servers(bridge_pods)
        c, d = bridge_pods
        client = f"pndemo-{demo.tag}-client"
        with p.step(f"client routes {LISTEN_RANGE} through the node"):
            run_cmd("ip", "-n", client, "route", "add", LISTEN_RANGE, "via", "192.0.2.1")
        with p.step(f"forward {WHOLE} → pod-c (every port)") as detail:
            detail.append(ctl("forward", "create", BRIDGE, WHOLE, f"target_address={c.ipv4}"))
        with p.step(f"forward {PORTS}: tcp 8090 → pod-d:{POD_PORT}") as detail:
            detail.append(ctl("forward", "create", BRIDGE, PORTS))
            ctl("forward", "port", "add", BRIDGE, PORTS, "tcp", "8090", d.ipv4, str(POD_PORT))
        with p.step(f"forward {PORTS}: tcp 8080 → pod-d:{POD_PORT} (the node only routes "
                    f"{PORTS}: pod-a's hostPort 8080 never answers there)"):
            ctl("forward", "port", "add", BRIDGE, PORTS, "tcp", "8080", d.ipv4, str(POD_PORT))
        with p.step(f"forward on the node's own {NODE_ADDR} refused: pod-a's hostPort 8080 "
                    "answers there") as detail:
            try:
                ctl("forward", "create", BRIDGE, NODE_ADDR, f"target_address={c.ipv4}")
            except DemoError as err:
                detail.append(str(err).split("Error: ", 1)[-1])
            else:
                raise DemoError("a forward taking a hostPort's traffic was accepted")
        with p.step(f"{PORTS}:9999 dropped: no port of the forward, no default target "
                    "(as LXD drops it)") as detail:
            ok, body = demo.fetch(client, make_url(PORTS, 9999), timeout=1.0)
            if ok:
                raise DemoError(f"answered: {body!r}")
            detail.append(body.strip().splitlines()[-1] if body.strip() else "no answer")
        checks = [
            (client, make_url(WHOLE, POD_PORT), c, f"client → {WHOLE}:{POD_PORT} → pod-c"),
            (client, make_url(PORTS, 8090), d, f"client → {PORTS}:8090 → pod-d"),
            (client, make_url(PORTS, 8080), d, f"client → {PORTS}:8080 → pod-d"),
            (c.netns, make_url(WHOLE, POD_PORT), c, f"pod-c → {WHOLE} → pod-c (hairpin, itself)"),
            (d.netns, make_url(WHOLE, POD_PORT), c,
             f"pod-d → {WHOLE} → pod-c (hairpin, another pod of the bridge)"),  # fmt: skip
        ]
        demo.check_fetches(checks)
        with p.step(f"podnetctl network forward list {BRIDGE}"):
            p.console.print(ctl("forward", "list", BRIDGE), markup=False, highlight=False)
    finally:
        for pod in bridge_pods:
            with p.step(f"DEL {pod.label}", fatal=False):
                cni.delete(net, RuntimeConf(pod.container_id, pod.path))
        for listen in (WHOLE, PORTS):
            with p.step(f"forward delete {listen}", fatal=False):
                ctl("forward", "delete", BRIDGE, listen)
        with p.step(f"network delete {BRIDGE}", fatal=False):
            ctl("delete", BRIDGE)
    with p.step("no bridge and no forward element left", fatal=False):
        links = json.loads(run_cmd("ip", "-n", demo.node, "-j", "link", "show").stdout)
        if any(li["ifname"] == BRIDGE for li in links):
            raise DemoError(f"bridge {BRIDGE} is still there")
        out = run_cmd("ip", "netns", "exec", demo.node, "nft", "-j", "list", "table", "inet",
                      "podnet")
        maps = [o["map"] for o in json.loads(out.stdout)["nftables"] if "map" in o]
        full = [m["name"] for m in maps if m["name"].startswith("fwd") and m.get("elem")]
        if full:
            raise DemoError(f"forward maps with elements: {', '.join(full)}")
