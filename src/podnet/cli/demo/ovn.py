"""The demo's multi-node part: one OVN network across three nodes, run by
:class:`podnet.cli.demo.Demo` after the networks-and-forwards part.

1. an OVN deployment in namespaces of its own (:class:`podnet.cli.demo.ovnlab.OvnLab`):
   central services (NB, SB, ovn-northd) on node 1, Open vSwitch (userspace datapath) and
   ovn-controller on each of nodes 1-3, a Geneve underlay between them, and an outside
   namespace behind node 1's uplink port ``ext0`` (203.0.113.254/24). Its daemons use their
   own run directories: the distribution's OVS and OVN services, if any run, are not used or
   touched;
2. each node's podnet store pointed at the NB (``podnetctl config set
   network.ovn.northbound_connection``: node 1 by its unix socket, nodes 2 and 3 over TCP);
3. an uplink ``demo-up`` (``physical`` on ``ext0``, routed ingress, routes 198.51.100.0/24)
   made on node 1, an OVN network ``demo-ovn`` with ``ipv4.nat.address=198.51.100.77`` made on
   node 2, both listed by node 3;
4. pod-x on node 2 and pod-y on node 3 through each node's runtime (``"network":
   "demo-ovn"``), each with an HTTP server; pod-x → pod-y and back across the tunnel;
5. a whole-address forward 198.51.100.20 → pod-x (made on node 3) and a port forward
   198.51.100.21 tcp 8090 → pod-y:80 (made on node 1): OVN load balancers, fetched from the
   outside namespace; what the outside sees of both pods' egress: the NAT address;
6. DEL of both pods, the forwards and the networks, a check that the NB holds no podnet port
   or load balancer and no node's integration bridge a pod port, then the lab stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from podnet import checked
from podnet.cli.demo.kit import Demo
from podnet.cli.demo.ovnlab import LabError, Node, OvnLab, missing_tools
from podnet.cli.demo.steps import POD_PORT, TIMEOUT, DemoError, Pod, make_url, run_cmd
from podnet.runtime import CNIRuntime, ResultCache, RuntimeConf, SubprocessExec, load_conflist

UPLINK, NETWORK = "demo-up", "demo-ovn"
OUTSIDE_GW = "203.0.113.254"
UPLINK_KEYS = {
    "parent": "ext0",
    "ipv4.gateway": f"{OUTSIDE_GW}/24",
    "ipv4.ovn.ranges": "203.0.113.10-203.0.113.19",
    "ipv4.routes": "198.51.100.0/24",
    "ovn.ingress_mode": "routed",
}
NAT_ADDRESS = "198.51.100.77"
WHOLE, PORTS = "198.51.100.20", "198.51.100.21"
#: The underlay's third octet: 192.168.248.0/24 inside the lab's namespaces (the tests use 249).
SUBNET = 248
WHOAMI_PORT = 8088
#: An HTTP server answering each GET with the address it sees the client at.
WHOAMI = (
    "import http.server as h, sys\n"
    "class H(h.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = ('seen from ' + self.client_address[0] + '\\n').encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "    def log_message(self, *a): pass\n"
    "h.HTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()\n"
)


def _podnetctl() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "podnetctl")


class _Cluster:
    """The demo's view of the lab: each node's data dir, podnetctl and runtime."""

    def __init__(self, demo: Demo, lab: OvnLab) -> None:
        self.demo, self.lab = demo, lab
        self.data = {n.name: demo.path_of(f"ovn-data-{n.name}") for n in lab.nodes}

    def ctl(self, node: Node, *args: str) -> str:
        """``podnetctl ARGS --data-dir <node's>`` in ``node``'s namespace; DemoError on failure."""
        argv = [
            "ip",
            "netns",
            "exec",
            node.netns,
            "env",
            *[f"{k}={v}" for k, v in node.env.items()],
            _podnetctl(),
            *args,
            "--data-dir",
            self.data[node.name],
        ]
        out = run_cmd(*argv, check=False)
        if out.returncode != 0:
            raise DemoError(f"podnetctl {' '.join(args)} on {node.name}: {out.stderr.strip()}")
        return out.stdout.strip()

    def runtime(self, node: Node) -> tuple[CNIRuntime, str]:
        """A runtime calling plugins inside ``node``'s namespace with its OVS, and its conf dir
        holding a conflist whose pods join the OVN network."""
        data = self.data[node.name]
        conf_dir = self.demo.path_of(f"ovn-net.d-{node.name}")
        os.makedirs(conf_dir, exist_ok=True)
        conf = {
            "cniVersion": "1.1.0",
            "name": NETWORK,
            "plugins": [{"type": "podnet", "network": NETWORK, "dataDir": data}],
        }
        with open(os.path.join(conf_dir, f"30-{NETWORK}.conflist"), "w") as f:
            json.dump(conf, f, indent=2)
        allowed = [os.environ.get("PODNET_DATA_DIRS", ""), data]
        environ = {**os.environ, **node.env, "PODNET_DATA_DIRS": ":".join(filter(None, allowed))}
        runtime = CNIRuntime(
            [self.demo.path_of("bin")],
            cache=ResultCache(self.demo.path_of(f"ovn-cache-{node.name}")),
            executor=SubprocessExec(wrapper=("ip", "netns", "exec", node.netns), timeout=TIMEOUT),
            environ=environ,
        )
        return runtime, conf_dir


def run_ovn(demo: Demo) -> None:
    """All steps of this part; DemoError from a failing fatal step. The lab is stopped
    whatever happens."""
    p = demo.progress
    p.section("OVN networks across nodes (LXD's OVN networks and forwards)")
    with p.step("OVN and Open vSwitch installed"):
        missing = missing_tools()
        if missing:
            raise DemoError(
                f"missing {', '.join(missing)} (apt-get install openvswitch-switch ovn-central "
                "ovn-host ethtool; scripts/setup.sh does)"
            )
    lab = OvnLab(f"pndemo-{demo.tag}-o", ("n1", "n2", "n3"), subnet=SUBNET, base=Path(demo.tmp))
    try:
        _run(demo, lab)
    finally:
        with p.step("OVN lab stopped: its daemons, namespaces and directory", fatal=False):
            lab.stop()


def _run(demo: Demo, lab: OvnLab) -> None:
    p = demo.progress
    n1, n2, n3 = lab.nodes
    with p.step(
        "3 nodes: NB, SB and ovn-northd on n1; OVS (netdev) and ovn-controller on each; "
        f"Geneve over 192.168.{SUBNET}.0/24"
    ) as detail:
        try:
            lab.start()
            outside = lab.outside(n1, f"{OUTSIDE_GW}/24")
        except LabError as err:
            raise DemoError(str(err)) from None
        detail.append(f"chassis {', '.join(n.name for n in lab.nodes)}; outside {outside}")
    cluster = _Cluster(demo, lab)
    with p.step("each node's store → the NB (n1: unix socket, n2 and n3: TCP)"):
        for node in lab.nodes:
            nb = lab.nb_unix if node is n1 else lab.nb_tcp
            cluster.ctl(node, "config", "set", "network.ovn.northbound_connection", nb, "--init")
    with p.step(f"uplink {UPLINK} (physical on ext0, routed, routes 198.51.100.0/24) from n1"):
        cluster.ctl(n1, "network", "create", UPLINK, "--type=physical",
                    f"parent={UPLINK_KEYS['parent']}", "--target", n1.name)  # fmt: skip
        cluster.ctl(
            n1,
            "network",
            "create",
            UPLINK,
            "--type=physical",
            *[f"{k}={v}" for k, v in UPLINK_KEYS.items() if k != "parent"],
        )
    with p.step(f"OVN network {NETWORK} (ipv4.nat.address={NAT_ADDRESS}) from n2") as detail:
        cluster.ctl(
            n2,
            "network",
            "create",
            NETWORK,
            "--type=ovn",
            f"network={UPLINK}",
            "ipv6.address=none",
            f"ipv4.nat.address={NAT_ADDRESS}",
        )
        shown = json.loads(cluster.ctl(n3, "network", "list", "-f", "json"))
        config = next(n["config"] for n in shown if n["name"] == NETWORK)
        detail.append(
            f"{config['ipv4.address']}, MTU {config['bridge.mtu']}, router "
            f"{config['volatile.network.ipv4.address']} (as n3 lists it)"
        )
    router = config["volatile.network.ipv4.address"]
    run_cmd("ip", "-n", outside, "route", "replace", "198.51.100.0/24", "via", router)
    pods: list[tuple[Pod, Node]] = []
    forwards: list[str] = []
    try:
        for label, node in (("pod-x", n2), ("pod-y", n3)):
            pod = Pod(label, f"pndemo-{demo.tag}-{label}", f"demo-{demo.tag}-{label}", 0)
            with p.step(f"ADD {label} on {node.name} (runtime in the node, port wired)") as detail:
                demo.add_netns(pod.netns)
                cni, conf_dir = cluster.runtime(node)
                result = cni.add(
                    load_conflist(NETWORK, conf_dir), RuntimeConf(pod.container_id, pod.path)
                )
                pod.ipv4 = next(
                    checked.text(checked.interface(i["address"]).ip) for i in result["ips"]
                )
                pod.host_if = result["interfaces"][0]["name"]
                detail.append(f"{pod.ipv4}, {pod.host_if} in br-int")
            pods.append((pod, node))
        demo.start_servers([pod for pod, _ in pods])
        (x, _), (y, _) = pods
        demo.check_fetches(
            [
                (x.netns, make_url(y.ipv4, POD_PORT), y, "pod-x (n2) → pod-y (n3) over the tunnel"),
                (y.netns, make_url(x.ipv4, POD_PORT), x, "pod-y (n3) → pod-x (n2) over the tunnel"),
            ]
        )
        with p.step(f"forward {WHOLE} → pod-x (every port), from n3"):
            cluster.ctl(
                n3, "network", "forward", "create", NETWORK, WHOLE, f"target_address={x.ipv4}"
            )
            forwards.append(WHOLE)
        with p.step(f"forward {PORTS}: tcp 8090 → pod-y:{POD_PORT}, from n1"):
            cluster.ctl(n1, "network", "forward", "create", NETWORK, PORTS)
            forwards.append(PORTS)
            cluster.ctl(
                n1,
                "network",
                "forward",
                "port",
                "add",
                NETWORK,
                PORTS,
                "tcp",
                "8090",
                y.ipv4,
                str(POD_PORT),
            )
        demo.check_fetches(
            [
                (
                    outside,
                    make_url(WHOLE, POD_PORT),
                    x,
                    f"outside → {WHOLE}:{POD_PORT} → pod-x on n2",
                ),
                (outside, make_url(PORTS, 8090), y, f"outside → {PORTS}:8090 → pod-y on n3"),
                (
                    y.netns,
                    make_url(WHOLE, POD_PORT),
                    x,
                    f"pod-y → {WHOLE} → pod-x (a forward from inside)",
                ),
            ]
        )
        _nat_seen(demo, outside, [x, y])
        with p.step(f"podnetctl network forward list {NETWORK} (on n2)"):
            listed = cluster.ctl(n2, "network", "forward", "list", NETWORK)
            p.console.print(listed, markup=False, highlight=False)
    finally:
        for pod, node in pods:
            with p.step(f"DEL {pod.label} on {node.name}", fatal=False):
                cni, conf_dir = cluster.runtime(node)
                cni.delete(
                    load_conflist(NETWORK, conf_dir), RuntimeConf(pod.container_id, pod.path)
                )
        for listen in forwards:
            with p.step(f"forward delete {listen}", fatal=False):
                cluster.ctl(n2, "network", "forward", "delete", NETWORK, listen)
        with p.step(f"network delete {NETWORK}, {UPLINK}", fatal=False):
            cluster.ctl(n3, "network", "delete", NETWORK)
            cluster.ctl(n1, "network", "delete", UPLINK)
    with p.step(
        "no podnet port or load balancer in the NB, no pod port in any br-int", fatal=False
    ):
        left = lab.nbctl("--bare", "--columns=name", "list", "Logical_Switch_Port").split()
        left += lab.nbctl("--bare", "--columns=name", "list", "Load_Balancer").split()
        for node in lab.nodes:
            left += [
                port
                for port in lab.vsctl(node, "list-ports", "br-int").split()
                if port.startswith("pn")
            ]
        if left:
            raise DemoError(f"left: {', '.join(left)}")


def _nat_seen(demo: Demo, outside: str, pods: list[Pod]) -> None:
    """An HTTP server in the outside namespace that answers with the client's address: both
    pods' egress is seen from the NAT address."""
    p = demo.progress
    server = subprocess.Popen(
        ["ip", "netns", "exec", outside, sys.executable, "-c", WHOAMI, str(WHOAMI_PORT)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    demo.servers.append(server)
    url = make_url(OUTSIDE_GW, WHOAMI_PORT)
    for pod in pods:
        with p.step(
            f"{pod.label} → outside {OUTSIDE_GW}: seen from {NAT_ADDRESS} (SNAT)", fatal=False
        ) as detail:
            body = ""
            for _ in range(50):  # the server may still be starting
                ok, body = demo.fetch(pod.netns, url, timeout=1.0)
                if ok:
                    break
            if body.strip() != f"seen from {NAT_ADDRESS}":
                raise DemoError(f"GET {url}: {body.strip()!r}")
            detail.append(repr(body.strip()))
