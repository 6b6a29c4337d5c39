"""OVN networks across nodes: the server config that reaches OVN, ``physical`` uplinks and
``ovn`` networks made from one node and seen from every other, their northbound objects,
concurrent changes from two nodes, an unreachable or TLS northbound, the ``lxc`` client, and
what others wrote in the NB left alone.

A real OVN deployment in namespaces (:class:`podnet.cli.demo.ovnlab.OvnLab`, tests/support/
ovn_cluster.py): central services and OVS (userspace datapath) with ``ovn-controller`` on three
nodes, and an outside namespace behind ``n1``'s uplink. Each node has its own podnet store;
``podnetctl`` runs inside the node's namespace with the node's OVS (``OVS_RUNDIR``).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import ovn_cluster as oc
from envgate import need
from ovn_cluster import Cluster
from podnet.cli.demo.ovnlab import Node

pytestmark = pytest.mark.root


def test_uplink_and_ovn_network_are_one_for_every_node(cluster: Cluster) -> None:
    """An uplink made on n1 and an OVN network made on n2 are listed alike by both nodes (same
    config, same ETag); the network's NB objects exist (router with SNAT to its uplink address
    and a default route, internal switch with OVN's subnet, external switch with a localnet
    port on the uplink, the HA chassis group of n1, the only chassis mapping the uplink); n1's
    OVS maps the uplink to a bridge holding ext0. Delete removes all of it."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up0", oc.UPLINK)
    mappings = cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids:ovn-bridge-mappings")
    assert mappings.strip('"').startswith("up0:pnu"), mappings
    bridge = mappings.strip('"').split(":")[1]
    assert "ext0" in cluster.lab.vsctl(n1, "list-ports", bridge).split()
    cluster.ok(n2, "network", "create", "ovn0", "--type=ovn", "network=up0",
               "ipv4.address=10.40.0.1/24", "ipv4.nat=true", "ipv6.address=none", "user.k=v")  # fmt: skip
    seen = [cluster.networks(n) for n in (n1, n2)]
    assert seen[0] == seen[1], seen
    ovn0 = seen[0]["ovn0"]
    assert ovn0["type"] == "ovn" and ovn0["config"]["volatile.network.ipv4.address"] == "203.0.113.10"
    assert ovn0["config"]["ipv4.nat"] == "true" and ovn0["config"]["bridge.mtu"] == "1442", ovn0
    shows = [cluster.ok(n, "network", "show", "ovn0") for n in (n1, n2)]
    assert shows[0] == shows[1]
    assert oc.nbctl(cluster, "--bare", "--columns=other_config", "list", "Logical_Switch",
                 "pn-ovn0-ls-int").find("subnet=10.40.0.0/24") >= 0  # fmt: skip
    nat = oc.nbctl(cluster, "lr-nat-list", "pn-ovn0-lr")
    assert "203.0.113.10" in nat and "10.40.0.0/24" in nat, nat
    assert "203.0.113.254" in oc.nbctl(cluster, "lr-route-list", "pn-ovn0-lr")
    assert "localnet" in oc.nbctl(cluster, "--bare", "--columns=type", "list", "Logical_Switch_Port",
                               "pn-ovn0-ls-ext-lsp-provider")  # fmt: skip
    assert oc.nbctl(cluster, "--bare", "--columns=chassis_name", "list", "HA_Chassis").split() == ["n1"]
    refused = cluster.ctl(n1, "network", "delete", "up0")
    assert refused.returncode == 1 and "currently in use" in refused.stderr, refused.stderr
    cluster.ok(n1, "network", "delete", "ovn0")
    assert "ovn0" not in cluster.networks(n2)
    assert oc.nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Router") == ""
    assert oc.nbctl(cluster, "--bare", "--columns=name", "list", "Logical_Switch") == ""
    assert oc.nbctl(cluster, "--bare", "--columns=name", "list", "HA_Chassis_Group") == ""
    cluster.ok(n2, "network", "delete", "up0")  # n2 has no ext0: the record goes, n1 keeps its side
    assert "up0" not in cluster.networks(n1)
    assert bridge in cluster.lab.vsctl(n1, "list-br").split()
    done = cluster.ok(n1, "network", "restore")  # n1 forgets its side of the deleted uplink
    assert f"uplink up0: deleted, OVS bridge {bridge} removed" in done, done
    assert bridge not in cluster.lab.vsctl(n1, "list-br").split()
    assert "up0:" not in cluster.lab.vsctl(n1, "get", "open_vswitch", ".", "external_ids")


def test_concurrent_changes_from_two_nodes_lose_nothing(cluster: Cluster) -> None:
    """Two nodes set different keys of one OVN network at the same time, 10 rounds: every key
    is there afterwards; an If-Match ETag read before another node's change gets 412."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.uplink(n1, "up1", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn1", "--type=ovn", "network=up1", "ipv6.address=none")
    try:
        errors: list[str] = []

        def setter(node: Node, key: str) -> None:
            for i in range(10):
                out = cluster.ctl(node, "network", "set", "ovn1", f"user.{key}{i}=x")
                if out.returncode != 0:
                    errors.append(out.stderr)

        oc.at_once(setter, ((n1, "a"), (n2, "b")))
        assert not errors, errors
        config = cluster.networks(n2)["ovn1"]["config"]
        assert {f"user.{k}{i}" for k in "ab" for i in range(10)} <= set(config), config
        from podnet.drivers.ovn.cluster import connect, update
        from podnet.networks.errors import NetworkError

        nb = connect({"network.ovn.northbound_connection": cluster.lab.nb_unix})
        assert nb is not None
        stale = cluster.networks(n1)["ovn1"]
        cluster.ok(n2, "network", "set", "ovn1", "user.later=1")
        with pytest.raises(NetworkError) as err:
            update(nb, "t", "ovn1", None, {"user.x": "1"}, True, _etag(stale))
        assert err.value.status == 412
    finally:
        cluster.ctl(n1, "network", "delete", "ovn1")
        cluster.ctl(n1, "network", "delete", "up1")


def _etag(network: dict[str, Any]) -> str:
    from podnet.networks.model import Network

    return Network(network["name"], network["type"], network["description"],
                   network["config"]).etag()  # fmt: skip


@pytest.mark.parametrize(("extra", "message"), [
    (["ipv4.nat.address=198.51.100.7"], None),
    (["ipv4.nat.address=192.0.2.7"], 'Uplink network does not contain "192.0.2.7" in its routes'),
    (["ipv4.address=10.50.0.1/33"], 'Invalid value for network "bad" option "ipv4.address"'),
    (["bogus=1"], 'Invalid option for network "bad" option "bogus"'),
    ([], None),
])  # fmt: skip
def test_ovn_network_config_is_checked(cluster: Cluster, extra: list[str], message: str | None) -> None:
    """LXD's rules and messages; a refused create leaves no record and no NB object."""
    n1 = cluster.lab.nodes[0]
    cluster.uplink(n1, "up2", oc.UPLINK)
    try:
        before = oc.nbctl(cluster, "show")
        out = cluster.ctl(n1, "network", "create", "bad", "--type=ovn", "network=up2", "ipv6.address=none", *extra)
        if message is None:
            assert out.returncode == 0, out.stderr
            snat = oc.nbctl(cluster, "lr-nat-list", "pn-bad-lr")
            want = extra[0].split("=")[1] if extra else "203.0.113.10"
            assert want in snat, snat
            cluster.ok(n1, "network", "delete", "bad")
        else:
            assert out.returncode == 1 and message in out.stderr, out.stderr
            assert "bad" not in cluster.networks(n1)
            assert oc.nbctl(cluster, "show") == before
    finally:
        cluster.ctl(n1, "network", "delete", "bad")
        cluster.ctl(n1, "network", "delete", "up2")


def test_nat_address_needs_a_routed_uplink(cluster: Cluster) -> None:
    n1 = cluster.lab.nodes[0]
    l2 = {**oc.UPLINK, "ovn.ingress_mode": "l2proxy"}
    cluster.uplink(n1, "up3", l2)
    try:
        out = cluster.ctl(n1, "network", "create", "nat3", "--type=ovn", "network=up3",
                          "ipv6.address=none", "ipv4.nat.address=198.51.100.9")  # fmt: skip
        assert out.returncode == 1
        assert 'Cannot specify "ipv4.nat.address" when uplink ovn.ingress_mode is not "routed"' in out.stderr
    finally:
        cluster.ctl(n1, "network", "delete", "up3")


def test_unreachable_northbound_is_a_clean_error(cluster: Cluster) -> None:
    """With the NB server stopped, list and create fail with one line naming the connection
    (exit 1; the API's 503) and nothing is made; a bridge network of the node is still there
    once the NB is back."""
    n1, n2, n3 = cluster.lab.nodes
    cluster.lab.stop_nb()
    try:
        for node, conn in ((n1, cluster.lab.nb_unix), (n2, cluster.lab.nb_tcp)):
            out = cluster.ctl(node, "network", "list")
            assert out.returncode == 1 and conn in out.stderr and "unreachable" in out.stderr, out.stderr
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr
            out = cluster.ctl(node, "network", "create", "up9", "--type=physical", "parent=ext0",
                              "--target", "n1")  # fmt: skip
            assert out.returncode == 1 and conn in out.stderr, out.stderr
    finally:
        cluster.lab.start_nb()
    assert "up9" not in cluster.networks(n1) and "up9" not in cluster.networks(n2)


def _pki(d: Path, ca: str, *names: str) -> None:
    """A CA ``<ca>.crt`` and, for each of ``names``, a key and certificate it signed (EC P-256,
    one day)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
    subprocess.run(["openssl", "req", "-x509", *ec, "-subj", f"/CN={ca}", "-keyout", str(d / f"{ca}.key"),
                    "-out", str(d / f"{ca}.crt")], check=True, capture_output=True)  # fmt: skip
    for name in names:
        subprocess.run(["openssl", "req", *[a for a in ec if a not in ("-days", "1")], "-subj", f"/CN={name}",
                        "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr")],
                       check=True, capture_output=True)  # fmt: skip
        subprocess.run(["openssl", "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.crt"),
                        "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-days", "1",
                        "-out", str(d / f"{name}.crt")], check=True, capture_output=True)  # fmt: skip


def test_ssl_northbound_with_a_real_ca(cluster: Cluster, tmp_path: Path) -> None:
    """The NB over ``ssl:`` with certificates of a real CA: n3, configured with the CA, its
    client certificate and key, makes an uplink seen by n1 (unix socket) and lists what n1
    made. A CA that did not sign the server's certificate, and a client certificate the
    server's CA did not sign, are each refused: one line naming the connection, exit 1,
    nothing made (no TLS trust is skipped)."""
    n1, n2, n3 = cluster.lab.nodes
    _pki(tmp_path, "ca", "nb", "n3")
    _pki(tmp_path, "rogue", "mallory")
    pem = {f.stem + f.suffix: f.read_text() for f in tmp_path.iterdir() if f.suffix in (".crt", ".key")}
    ssl = f"ssl:{n1.address}:6643"
    cluster.lab.nbctl("set-ssl", str(tmp_path / "nb.key"), str(tmp_path / "nb.crt"), str(tmp_path / "ca.crt"))
    cluster.lab.nbctl("set-connection", f"pssl:6643:{n1.address}")

    def use(key: str, cert: str, ca: str) -> None:
        cluster.ok(n3, "config", "set", f"network.ovn.client_key={pem[key]}",
                   f"network.ovn.client_cert={pem[cert]}", f"network.ovn.ca_cert={pem[ca]}",
                   f"network.ovn.northbound_connection={ssl}")  # fmt: skip

    try:
        use("n3.key", "n3.crt", "ca.crt")
        deadline = time.monotonic() + 15  # ovsdb-server opens a remote of the NB's on its next run
        while cluster.ctl(n3, "network", "list").returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        made = cluster.ctl(n3, "network", "create", "up13", "--type=physical", "parent=nosuch0",
                           "--target", "n1")  # fmt: skip
        assert made.returncode == 0, made.stderr
        made = cluster.ctl(n3, "network", "create", "up13", "--type=physical",
                           *[f"{k}={v}" for k, v in oc.UPLINK.items() if k != "parent"])  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert cluster.networks(n1)["up13"]["config"] == cluster.networks(n3)["up13"]["config"]
        for key, cert, ca, who in (("n3.key", "n3.crt", "rogue.crt", "a CA that did not sign the NB"),
                                   ("mallory.key", "mallory.crt", "ca.crt", "a client the NB's CA did not sign")):  # fmt: skip
            use(key, cert, ca)
            out = cluster.ctl(n3, "network", "list")
            assert out.returncode == 1 and ssl in out.stderr and len(out.stderr.strip().splitlines()) == 1, (who, out.stderr)
            out = cluster.ctl(n3, "network", "create", "up14", "--type=physical", "parent=nosuch1",
                              "--target", "n1")  # fmt: skip
            assert out.returncode == 1 and ssl in out.stderr, (who, out.stderr)
        assert "up14" not in cluster.networks(n1)
    finally:
        cluster.ctl(n1, "network", "delete", "up13")
        cluster.lab.nbctl("del-connection")
        cluster.lab.nbctl("del-ssl")
        for key in ("northbound_connection", "client_key", "client_cert", "ca_cert"):
            cluster.ctl(n3, "config", "unset", f"network.ovn.{key}")
        cluster.ok(n3, "config", "set", "network.ovn.northbound_connection", cluster.lab.nb_tcp)


def test_lxc_client_manages_ovn_networks_and_forwards(cluster: Cluster, tmp_path: Path) -> None:
    """The real ``lxc`` client against ``podnetctl serve`` on n1 creates an uplink, an OVN
    network and a forward; ``podnetctl`` on n2 sees them; ``lxc network set`` with a key the
    network's objects are made of is refused with a reason; ``lxc network delete`` removes it."""
    import os

    from api_helpers import ApiServer, lxc, lxc_conf

    need("lxc")
    n1, n2, n3 = cluster.lab.nodes
    server = ApiServer(n1.netns, cluster.data["n1"], tmp_path / "logs", env={**os.environ, **n1.env})
    conf = lxc_conf(tmp_path / "lxc-conf")
    try:
        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return lxc(server.data, conf, *args)

        out = run("network", "create", "up9", "--type=physical", "parent=ext0", "--target", "n1")
        assert out.returncode == 0 and "Network up9 pending on member n1" in out.stdout, out.stderr
        out = run("network", "create", "up9", "--type=physical", *[f"{k}={v}" for k, v in oc.UPLINK.items() if k != "parent"])
        assert out.returncode == 0 and "Network up9 created" in out.stdout, out.stderr
        out = run("network", "get", "up9", "parent", "--target", "n1")
        assert out.returncode == 0 and out.stdout.strip() == "ext0", (out.stdout, out.stderr)
        out = run("network", "set", "up9", "parent=ext0", "user.k=v", "--target", "n1")
        assert out.returncode == 1 and 'Config key "user.k" may not be used as member-specific key' in out.stderr
        out = run("network", "set", "up9", "parent=ext0", "--target", "n1")  # GET and PUT ?target=, If-Match
        assert out.returncode == 0, out.stderr
        shown = oc.yaml_load(run("network", "show", "up9").stdout)
        assert "parent" not in shown["config"] and shown["locations"] == ["n1"], shown
        out = run("network", "create", "ovn9", "--type=ovn", "network=up9", "ipv6.address=none")
        assert out.returncode == 0, out.stderr
        out = run("network", "forward", "create", "ovn9", "198.51.100.40", "target_address=10.1.1.1")
        assert out.returncode == 1 and "Default target address is not within the network subnet" in out.stderr
        router = cluster.networks(n2)["ovn9"]["config"]["ipv4.address"]
        target = router.rsplit(".", 1)[0] + ".7"
        out = run("network", "forward", "create", "ovn9", "198.51.100.40", f"target_address={target}")
        assert out.returncode == 0, out.stderr
        listed = run("network", "list", "--format", "csv").stdout
        assert "ovn9,ovn,YES" in listed and "up9,physical,YES" in listed, listed
        shown = oc.yaml_load(run("network", "show", "ovn9").stdout)
        assert shown["config"] == cluster.networks(n2)["ovn9"]["config"]
        assert "198.51.100.40" in cluster.ok(n2, "network", "forward", "list", "ovn9")
        out = run("network", "set", "ovn9", "bridge.mtu=1300")
        assert out.returncode == 1 and 'Changing "bridge.mtu" of an OVN network is not supported' in out.stderr
        assert run("network", "set", "ovn9", "ipv4.nat=false").returncode == 0  # SNAT rules follow
        assert oc.nbctl(cluster, "--bare", "--columns=_uuid", "list", "NAT") == ""
        assert run("network", "set", "ovn9", "user.owner=team-a").returncode == 0
        assert cluster.networks(n2)["ovn9"]["config"]["user.owner"] == "team-a"
        assert run("network", "delete", "ovn9").returncode == 0
        assert "ovn9" not in cluster.networks(n2)
    finally:
        server.stop()
        cluster.ctl(n1, "network", "delete", "ovn9")
        cluster.ctl(n1, "network", "delete", "up9")


def test_a_registry_larger_than_one_argument_still_changes(cluster: Cluster) -> None:
    """With 400 KB of forwards registered (more than one argument of ``ovsdb-client`` may
    hold), forward create and delete still work from two nodes, and each change bumps the
    registry's generation by one instead of re-sending the whole map. The 200 of them inside
    the uplink's routes are held: ``0.0.0.0`` allocates the first address after them, and one
    of them is refused as existing."""
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Ovsdb, omap

    n1, n2, _ = cluster.lab.nodes
    cluster.uplink(n1, "up11", oc.UPLINK)
    cluster.ok(n1, "network", "create", "ovn11", "--type=ovn", "network=up11", "ipv6.address=none")
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    pad = "x" * 1000
    keys = [f"{nbmod.FPREFIX}ovn11|198.51.100.{i + 1}" for i in range(200)]  # in the routes
    keys += [f"{nbmod.FPREFIX}ovn11|198.51.{101 + i // 250}.{i % 250 + 1}" for i in range(200)]
    keys.append(f"{nbmod.FPREFIX}ovn11|198.51.100.300")  # another writer's malformed key: ignored
    try:
        for chunk in range(0, len(keys), 50):  # as if made earlier (descriptions of 1,000 bytes)
            put = {k: f'{{"description":"{pad}","config":{{}},"ports":[]}}' for k in keys[chunk : chunk + 50]}
            nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                          "mutations": [["external_ids", "insert", omap(put)]]}])  # fmt: skip
        before = nbmod.read(nb).generation
        cluster.ok(n1, "network", "forward", "create", "ovn11", "198.51.100.249")
        cluster.ok(n2, "network", "forward", "delete", "ovn11", "198.51.100.249")
        assert nbmod.read(nb).generation == before + 2
        held = cluster.ctl(n2, "network", "forward", "create", "ovn11", "198.51.100.7")
        assert held.returncode == 1 and "already exists" in held.stderr, held.stderr
        made = cluster.ctl(n2, "network", "forward", "create", "ovn11", "0.0.0.0")
        assert made.returncode == 0 and "198.51.100.201" in made.stdout, made.stdout + made.stderr
    finally:
        nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                      "mutations": [["external_ids", "delete", ["set", keys]]]}])  # fmt: skip
        cluster.ctl(n1, "network", "delete", "ovn11")
        cluster.ctl(n1, "network", "delete", "up11")


def test_what_others_wrote_in_the_nb_is_left_alone(cluster: Cluster) -> None:
    """Rows and records podnet did not make (a review's finding): a registry record of another
    type or with a bad config is not a network (no bridge appears on a node, listing works); a
    malformed forward key is not listed; ``network create`` is refused (409) when a router of
    the names it would take exists, and that router survives; ``volatile.*`` keys are podnet's
    (400), a PUT sending the stored value back is fine."""
    from podnet.ovn import nb as nbmod
    from podnet.ovn.ovsdb import Ovsdb, omap

    n1, n2, _ = cluster.lab.nodes
    nb = Ovsdb([cluster.lab.nb_unix], "OVN_Northbound")
    planted = {f"{nbmod.PREFIX}evb": '{"type":"bridge","config":{"ipv4.address":"8.8.8.1/24"}}',
               f"{nbmod.PREFIX}evo": '{"type":"ovn","config":{"network":"x","ipv4.address":"garbage"}}',
               f"{nbmod.PREFIX}ev;x": '{"type":"physical","config":{"parent":"eth0"}}'}  # fmt: skip
    nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                  "mutations": [["external_ids", "insert", omap(planted)]]}])  # fmt: skip
    cluster.lab.nbctl("lr-add", "pn-xy-lr", "--", "set", "Logical_Router", "pn-xy-lr", "external_ids:owner=admin")
    ns = f"{cluster.lab.prefix}-ev"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        listed = cluster.networks(n2)
        assert not {"evb", "evo", "ev;x"} & set(listed), listed
        out = oc.run_plugin(cluster, n2, "ADD", "ev-1", ns, "evb")
        assert out.returncode == 1 and '"code": 7' in out.stdout, out.stdout
        assert "evb" not in subprocess.run(["ip", "-n", n2.netns, "-o", "link"], capture_output=True, text=True).stdout
        cluster.uplink(n1, "upx", oc.UPLINK)
        bad = cluster.ctl(n1, "network", "create", "xy", "--type=ovn", "network=upx", "ipv6.address=none")
        assert bad.returncode == 1 and "pn-xy-lr" in bad.stderr and "not made by podnet" in bad.stderr, bad.stderr
        assert "xy" not in cluster.networks(n1)
        assert cluster.lab.nbctl("--bare", "--columns=external_ids", "find", "Logical_Router", "name=pn-xy-lr") == "owner=admin"
        cluster.ok(n1, "network", "create", "ovx", "--type=ovn", "network=upx", "ipv6.address=none")
        bad = cluster.ctl(n2, "network", "set", "ovx", "volatile.network.ipv4.address=8.8.4.4")
        assert bad.returncode == 1 and "read-only" in bad.stderr, bad.stderr
        bad = cluster.ctl(n2, "network", "create", "ovy", "--type=ovn", "network=upx",
                          "volatile.network.ipv4.address=203.0.113.10")  # fmt: skip
        assert bad.returncode == 1 and "read-only" in bad.stderr, bad.stderr
        shown = oc.yaml_load(cluster.ok(n2, "network", "show", "ovx"))
        edited = cluster.ctl(n2, "network", "edit", "ovx", input=oc.yaml_dump({"config": {**shown["config"], "user.a": "b"}}))
        assert edited.returncode == 0, edited.stderr
        mappings = cluster.lab.vsctl(n1, "get", "Open_vSwitch", ".", "external_ids:ovn-bridge-mappings").strip('"')
        cluster.lab.vsctl(n1, "set", "Open_vSwitch", ".", f'external_ids:ovn-bridge-mappings="{mappings},adm:br-int"')
        cluster.lab.run(n1.netns, "ip", "link", "add", "vadm0", "type", "veth", "peer", "name", "vadm1")
        try:  # a free parent (ext0 is upx's), so that the mapping is what refuses
            bad = cluster.ctl(n1, "network", "create", "adm", "--type=physical", "parent=vadm0", "--target", "n1")
            assert bad.returncode == 1 and "already mapped to bridge br-int" in bad.stderr, bad.stderr
            assert "vadm0" not in cluster.lab.vsctl(n1, "list-ports", "br-int")
            assert "adm:br-int" in cluster.lab.vsctl(n1, "get", "Open_vSwitch", ".", "external_ids:ovn-bridge-mappings")
        finally:
            cluster.lab.vsctl(n1, "set", "Open_vSwitch", ".", f'external_ids:ovn-bridge-mappings="{mappings}"')
            cluster.lab.run(n1.netns, "ip", "link", "del", "vadm0", check=False)
        bad = cluster.ctl(n2, "network", "set", "upx", "parent=eth0")
        assert bad.returncode == 1 and 'Config key "parent" is cluster member specific' in bad.stderr, bad.stderr
        made = cluster.ctl(n2, "network", "forward", "create", "ovx", "0.0.0.0")
        assert made.returncode == 0, made.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        nb.transact([{"op": "mutate", "table": "NB_Global", "where": [],
                      "mutations": [["external_ids", "delete", ["set", list(planted)]]]}])  # fmt: skip
        cluster.lab.nbctl("--if-exists", "lr-del", "pn-xy-lr")
        for name in ("ovx", "ovy", "xy", "upx"):
            cluster.ctl(n1, "network", "delete", name)
