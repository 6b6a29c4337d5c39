"""OVN networks, traffic that only the feature under test explains (a three-node OVN lab of
its own, tests/e2e/ovn/conftest.py):

- a forward's drop: a forward without a default target drops what no port matches. The listen
  address is also held by the uplink's router (the outside namespace), which answers on it: so
  without the drop the router's default route would carry the packet there and an answer
  would come back; only the drop gives the timeout (before, the address was merely routed back
  to the OVN router, and the packet looped until its TTL ran out: a timeout either way);
- ``ipv6.nat.address``: a pod's IPv6 connection to the outside leaves from that address (the
  server sees it), and from the router's IPv6 uplink address once it is unset.
"""

from __future__ import annotations

import subprocess

import ovn_cluster as oc
from ovn_cluster import Cluster

SINK = "198.51.100.66"


def test_a_forward_without_default_target_drops_what_the_uplink_would_answer(
        cluster: Cluster) -> None:  # fmt: skip
    n1, n2, _ = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    cluster.uplink(n1, "up31", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn31", "--type=ovn", "network=up31", "ipv6.address=none")
    pods = {"a": (n2, f"{cluster.lab.prefix}-da"), "b": (n1, f"{cluster.lab.prefix}-db")}
    servers: list[oc.Echo] = []
    subprocess.run(["ip", "-n", out, "addr", "add", f"{SINK}/32", "dev", "lo"], check=True)
    try:
        ip = {}
        for k, (node, ns) in pods.items():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            result = oc.plugin(cluster, node, "ADD", f"d-{k}", ns, "ovn31")
            ip[k] = result["ips"][0]["address"].split("/")[0]
            servers.append(oc.Echo(ns, f"POD-{k.upper()}", 9000))
        servers.append(oc.Echo(out, "SINK", 80))
        client = pods["a"][1]
        # the control: before any forward, the router's default route takes the listen address
        # to the outside, which answers (from the router's SNAT address)
        assert oc.tcp(client, SINK, 80).startswith("SINK "), oc.tcp(client, SINK, 80)
        cluster.ok(n1, "network", "forward", "create", "ovn31", SINK)
        cluster.ok(n1, "network", "forward", "port", "add", "ovn31", SINK, "tcp", "7000", ip["b"], "9000")
        assert oc.tcp(client, SINK, 7000).startswith("POD-B ")  # the forward's port
        assert oc.tcp(client, SINK, 80) == "<timeout>"  # the rest: dropped, not sent on
        cluster.ok(n1, "network", "forward", "set", "ovn31", SINK, f"target_address={ip['a']}")
        assert oc.tcp(client, SINK, 9000).startswith("POD-A ")  # a default target: nothing dropped
        cluster.ok(n1, "network", "forward", "unset", "ovn31", SINK, "target_address")
        assert oc.tcp(client, SINK, 80) == "<timeout>"
        cluster.ok(n1, "network", "forward", "delete", "ovn31", SINK)
        assert oc.tcp(client, SINK, 80).startswith("SINK ")  # the drop went with the forward
    finally:
        oc.release(cluster, servers, pods, "d", "ovn31")
        subprocess.run(["ip", "-n", out, "addr", "del", f"{SINK}/32", "dev", "lo"], capture_output=True)
        cluster.ctl(n1, "network", "delete", "ovn31")
        cluster.ctl(n1, "network", "delete", "up31")


def test_ipv6_nat_address_is_what_the_outside_sees(cluster: Cluster) -> None:
    n1, n2, n3 = cluster.lab.nodes
    out = f"{cluster.lab.prefix}-out"
    subprocess.run(["ip", "-n", out, "addr", "add", "2001:db8:ff::254/64", "dev", "gw0", "nodad"],
                   check=True)  # fmt: skip
    cluster.uplink(n1, "up32", oc.UPLINK6)
    cluster.ok(n2, "network", "create", "ovn32", "--type=ovn", "network=up32", "ipv4.nat=false",
               "ipv6.nat.address=2001:db8:ee::77")  # fmt: skip
    router6 = cluster.networks(n3)["ovn32"]["config"]["volatile.network.ipv6.address"]
    subprocess.run(["ip", "-n", out, "-6", "route", "replace", "2001:db8:ee::/64", "via", router6],
                   check=True)  # fmt: skip
    pods = {"b": (n2, f"{cluster.lab.prefix}-sb"), "c": (n3, f"{cluster.lab.prefix}-sc")}
    servers = [oc.Echo(out, "OUTSIDE6", 8086)]
    try:
        oc.add_pods(cluster, pods, "s", "ovn32")
        oc.seen_from(pods, "2001:db8:ff::254", 8086, "OUTSIDE6 2001:db8:ee::77")
        cluster.ok(n1, "network", "unset", "ovn32", "ipv6.nat.address")
        assert oc.tcp(pods["b"][1], "2001:db8:ff::254", 8086) == f"OUTSIDE6 {router6}"
        cluster.ok(n3, "network", "set", "ovn32", "ipv6.nat.address=2001:db8:ee::78")
        assert oc.tcp(pods["c"][1], "2001:db8:ff::254", 8086) == "OUTSIDE6 2001:db8:ee::78"
    finally:
        oc.release(cluster, servers, pods, "s", "ovn32")
        subprocess.run(["ip", "-n", out, "-6", "route", "del", "2001:db8:ee::/64"], capture_output=True)
        subprocess.run(["ip", "-n", out, "addr", "del", "2001:db8:ff::254/64", "dev", "gw0"],
                       capture_output=True)  # fmt: skip
        cluster.ctl(n1, "network", "delete", "ovn32")
        cluster.ctl(n1, "network", "delete", "up32")
