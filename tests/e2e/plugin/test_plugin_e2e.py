"""The podnet plugin end to end, in real namespaces with real TCP and UDP.

Every supported spec version × IPv4 / IPv6 / dual stack: ADD, the result's shape, reachability
through the pod IP, a node address from another host, 127.0.0.1, hairpin and another pod; CHECK;
DEL leaves nothing; DEL again succeeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from netns import CLIENT_ADDR4, NODE_ADDR4, NODE_ADDR6, REFUSED, Lab, sh
from plugin_calls import RANGES, db_rows, host_veths, map_elements, netconf

pytestmark = pytest.mark.root

VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
def pod_ips(result: dict[str, Any]) -> dict[int, str]:
    return {6 if ":" in ip["address"] else 4: ip["address"].split("/")[0] for ip in result["ips"]}


def url_host(addr: str) -> str:
    return addr


@pytest.mark.parametrize("stack", ["v4", "v6", "dual"])
@pytest.mark.parametrize("version", VERSIONS)
def test_lifecycle(lab: Lab, tmp_path: Path, version: str, stack: str) -> None:
    client = lab.client()
    pod_a, pod_b = lab.pod("a"), lab.pod("b")
    maps = [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 15353, "containerPort": 80, "protocol": "udp"}]
    conf_a = netconf(tmp_path, version, RANGES[stack], maps)
    rc, res_a = lab.cni("ADD", conf_a, container_id="pod-a", netns=pod_a)
    assert rc == 0, res_a
    rc, res_b = lab.cni("ADD", netconf(tmp_path, version, RANGES[stack],
                                       [{"hostPort": 18081, "containerPort": 80}]),
                        container_id="pod-b", netns=pod_b)
    assert rc == 0, res_b

    # Result shape in the config's version.
    assert res_a["cniVersion"] == version
    assert [i["name"] for i in res_a["interfaces"]][1] == "eth0"
    assert res_a["interfaces"][1]["sandbox"] == f"/run/netns/{pod_a}"
    assert ("mtu" in res_a["interfaces"][1]) is (version == "1.1.0")  # a 1.1.0 field
    for ip in res_a["ips"]:
        assert ("version" in ip) is version.startswith("0."), ip
        assert ip["interface"] == 1
    ips_a = pod_ips(res_a)
    assert set(pod_ips(res_b)) == set(ips_a)
    assert set(ips_a) == ({4} if stack == "v4" else {6} if stack == "v6" else {4, 6})

    lab.serve(pod_a, "A", 80)
    lab.serve(pod_b, "B", 80)
    node_addr = {4: NODE_ADDR4, 6: NODE_ADDR6}
    for family, ip in ips_a.items():
        # The pod itself from the node, and through the hostPort from another host (client ns).
        assert lab.talk(lab.node, "tcp", ip, 80).startswith("A ")
        assert lab.talk(client, "tcp", node_addr[family], 18080).startswith("A ")
        assert lab.talk(client, "udp", node_addr[family], 15353).startswith("A ")
        # Hairpin: pod A through its own hostPort, and pod B through A's.
        assert lab.talk(pod_a, "tcp", node_addr[family], 18080).startswith("A ")
        assert lab.talk(pod_b, "tcp", node_addr[family], 18080).startswith("A ")
        assert lab.talk(pod_a, "tcp", node_addr[family], 18081).startswith("B ")
    if 4 in ips_a:
        answer = lab.talk(lab.node, "tcp", "127.0.0.1", 18080)
        assert answer.startswith("A "), answer  # localhost, masqueraded
        assert lab.talk(lab.node, "udp", "127.0.0.1", 15353).startswith("A ")
        # Traffic from the other host is not masqueraded: the pod sees the client's address.
        assert lab.talk(client, "tcp", NODE_ADDR4, 18080) == f"A ::ffff:{CLIENT_ADDR4}"

    if version not in ("0.3.0", "0.3.1"):
        rc, out = lab.cni("CHECK", {**conf_a, "prevResult": res_a}, container_id="pod-a", netns=pod_a)
        assert rc == 0, out

    for cid, ns in (("pod-a", pod_a), ("pod-b", pod_b)):
        rc, out = lab.cni("DEL", conf_a, container_id=cid, netns=ns)
        assert rc == 0 and out is None, out
    assert db_rows(tmp_path, "pods") == [] and db_rows(tmp_path, "portmap_entries") == []
    assert host_veths(lab) == []
    assert "18080" not in map_elements(lab) and "18081" not in map_elements(lab)
    assert lab.talk(client, "tcp", NODE_ADDR4 if 4 in ips_a else NODE_ADDR6, 18080) == REFUSED
    rc, out = lab.cni("DEL", conf_a, container_id="pod-a", netns=pod_a)  # again
    assert rc == 0, out


def test_udp_conntrack_flushed_on_add_and_del(lab: Lab, tmp_path: Path) -> None:
    """A UDP flow seen before the mapping (or towards a deleted pod) must not blackhole the
    hostPort (CP #123): podnet flushes conntrack entries of mapped UDP ports."""
    client = lab.client()
    other = netconf(tmp_path, ranges=RANGES["v4"], mappings=[{"hostPort": 1, "containerPort": 1}])
    assert lab.cni("ADD", other, container_id="other", netns=lab.pod())[0] == 0  # nat table → conntrack on
    # A listener on the node itself answers before the mapping exists, creating the entry.
    lab.serve(lab.node, "NODE", 15353)
    assert lab.talk(client, "udp", NODE_ADDR4, 15353, sport=40000).startswith("NODE ")
    flows = lab.exec(lab.node, "conntrack", "-L", "-p", "udp", "--orig-port-dst", "15353", check=False)
    assert "dport=15353" in flows.stdout + flows.stderr
    pod = lab.pod()
    lab.serve(pod, "POD", 53)
    conf = netconf(tmp_path, ranges=RANGES["v4"],
                   mappings=[{"hostPort": 15353, "containerPort": 53, "protocol": "udp"}])
    rc, res = lab.cni("ADD", conf, container_id="c1", netns=pod)
    assert rc == 0, res
    # Same 5-tuple as before: only a fresh conntrack entry gets the DNAT.
    assert lab.talk(client, "udp", NODE_ADDR4, 15353, sport=40000).startswith("POD ")
    assert lab.cni("DEL", conf, container_id="c1", netns=pod)[0] == 0
    assert lab.talk(client, "udp", NODE_ADDR4, 15353, sport=40000).startswith("NODE ")


def test_ask_mtu_answers_and_survives_a_missing_link() -> None:
    """:func:`veth.ask_mtu` reads a link's MTU from the ``ip -batch`` ADD starts early; for a
    link that is gone it answers None and a new ``ip`` (the failed query ended the first), which
    still runs a batch (``link show`` only: read-only, in the test's own netns)."""
    from podnet.link import veth

    mtu, tool = veth.ask_mtu(veth.prespawn_host(), "lo")
    assert mtu == int(Path("/sys/class/net/lo/mtu").read_text()), mtu
    tool.feed(b"link show dev lo\n")
    rc, out, _ = tool.wait()
    assert rc == 0 and out.count("\n") == 1 and " lo: " in out, out  # the answer is not repeated
    first = veth.prespawn_host()
    mtu, tool = veth.ask_mtu(first, "pnnosuch0")
    assert mtu is None and tool is not first
    tool.feed(b"link show dev lo\n")
    assert tool.wait()[0] == 0


@pytest.mark.parametrize("uplink_mtu", [1400, 9000])
def test_default_mtu_is_the_default_route_links(lab: Lab, tmp_path: Path, uplink_mtu: int) -> None:
    """Without ``mtu`` in the NetConf the pod's veth takes the MTU (bytes) of the link holding
    the node's default route (cni-kindnet's choice), asked of the node-side ``ip`` (the first
    line of its batch, before the pair)."""
    lab.client()
    sh("ip", "-n", lab.node, "link", "set", "up0", "mtu", str(uplink_mtu))
    pod = lab.pod()
    rc, res = lab.cni("ADD", netconf(tmp_path, "1.1.0", RANGES["v4"]), container_id="mtu", netns=pod)
    assert rc == 0, res
    assert res["interfaces"][0]["mtu"] == res["interfaces"][1]["mtu"] == uplink_mtu
    shown = sh("ip", "-n", pod, "-o", "link", "show", "dev", "eth0").stdout
    assert f" mtu {uplink_mtu} " in shown, shown
    rc, _ = lab.cni("DEL", netconf(tmp_path, "1.1.0", RANGES["v4"]), container_id="mtu", netns=pod)
    assert rc == 0


#: Prepended to the plugin's own ``main()`` line: the podnet modules loaded when DEL gives ``ip``
#: its ``link del`` are written to the file named by PODNET_TEST_FEED_LOG.
_FEED_PROBE = """import os as _os
from podnet import proc as _proc
_feed = _proc.Spawned.feed
def _probe(self, data):
    if data.startswith(b"link del "):
        loaded = sorted(m for m in sys.modules if m == "podnet" or m.startswith("podnet."))
        with open(_os.environ["PODNET_TEST_FEED_LOG"], "w") as f:
            f.write("\\n".join(loaded))
    _feed(self, data)
_proc.Spawned.feed = _probe
"""


def test_del_starts_the_veth_deletion_before_the_hostport_modules(lab: Lab, tmp_path: Path) -> None:
    """DEL's wall time is what it does before ``ip`` gets ``link del``: the deletion's RCU grace
    period then hides the rest (nft, the COMMIT). So the modules for the hostPort elements
    (``podnet.reconcile``, ``podnet.firewall.*``, ``podnet.values``) load only after the
    deletion started, and what this DEL never uses (ADD's ``podnet.undo`` and
    ``podnet.link.sysctl``, the store's networks without a ``network`` in the conflist) not at
    all before it; the DEL still removes the veth, the row and the map element."""
    from podnet.runtime.installer import plugin_script

    data, log = tmp_path / "data", tmp_path / "feed.log"
    text = plugin_script("podnet.plugins.podnet:main")  # as podnetctl install writes it
    head, main_line = text.rsplit("from podnet.plugins.podnet import main", 1)
    probed = tmp_path / "podnet-probed"
    probed.write_text(head + _FEED_PROBE + "from podnet.plugins.podnet import main" + main_line)
    probed.chmod(0o755)
    pod = lab.pod()
    conf = netconf(data, ranges=RANGES["v4"],
                   mappings=[{"hostPort": 18090, "containerPort": 80, "protocol": "tcp"}])
    rc, res = lab.cni("ADD", conf, container_id="pod-probe", netns=pod)
    assert rc == 0, res
    assert host_veths(lab) and "18090" in map_elements(lab)

    rc, out = lab.cni("DEL", conf, container_id="pod-probe", netns=pod, plugin=str(probed),
                      env={"PODNET_TEST_FEED_LOG": str(log)})
    assert rc == 0 and out is None, out
    loaded = set(log.read_text().split())
    assert {"podnet.store.db", "podnet.link.hostend"} <= loaded  # the probe saw the real feed
    early = sorted(m for m in loaded if m in ("podnet.reconcile", "podnet.values", "podnet.undo",
                                              "podnet.link.sysctl", "podnet.store.networks")
                   or m.startswith("podnet.firewall"))
    assert early == [], f"loaded before the veth deletion started: {early}"
    assert host_veths(lab) == [] and db_rows(data, "pods") == []
    assert db_rows(data, "portmap_entries") == [] and "18090" not in map_elements(lab)
