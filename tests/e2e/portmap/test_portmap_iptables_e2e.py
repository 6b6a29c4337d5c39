"""podnet-portmap, iptables backend: the reference portmap's layout rule for rule
(containernetworking/plugins plugins/meta/portmap, 1.1.1 in Debian 12).

1. The golden scripts (tests/unit/firewall/test_portmap_iptables_golden.py compares them with
   the files) loaded into the kernel: the model of iptables-save used for the saved inputs is
   what the kernel prints.
2. The reference ``/usr/lib/cni/portmap`` (1.1.1) and podnet-portmap fed the same input in two
   node namespaces leave the same ``iptables-save -t nat`` / ``ip6tables-save -t nat``, after
   ADD and after DEL, with iptables-nft and with iptables-legacy.
3. Real TCP and UDP through hostPorts: reference ptp or bridge (+ host-local) → podnet-portmap,
   IPv4 and IPv6, from another host, from 127.0.0.1, hairpin, from another pod; CHECK; DEL.
4. No portMappings: no firewall command at all.
5. 32 containers in parallel (and a forced race on the table); DEL of one container leaves
   the others; concurrent DELs of one container.
6. UDP conntrack flushed after ADD and DEL.

Two bugs these tests found are fixed: CHECK now falls back to ``iptables -C`` for conditions
not written as iptables-save prints them, and a long entry comment is cut as the reference
cuts it (253 + "...", of which the kernel keeps 255).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from netns import CLIENT_ADDR4, CLIENT_ADDR6, NODE_ADDR4, NODE_ADDR6, REFUSED, Lab
from podnet.firewall import portmap_iptables as rules
from portmap_golden import (
    CID,
    GOLDEN_CASES,
    NET,
    add_scripts,
    extra_chains,
    saved_table,
)
from portmap_helpers import (
    BASE_PATH,
    PODNET_PORTMAP,
    REF_BRIDGE,
    REF_PORTMAP,
    REF_PTP,
    as_saved,
    bridge_conf,
    cni,
    cni_parallel,
    diff,
    entry_order_free,
    iptables_path,
    nat_lines,
    no_dad,
    node,
    normalized,
    only_top_level,
    pod,
    portmap_conf,
    ptp_conf,
    recording_path,
    rules_of,
    tcp,
    udp,
    user_chains,
)

# --- root: the model of iptables-save used above is what the kernel prints ---------------------

VARIANTS = ["nft", "legacy"]
needs_root = pytest.mark.root


@needs_root
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_scripts_in_kernel(lab: Lab, tmp_path: Path, case: str, variant: str) -> None:
    """The golden ADD scripts applied with ``iptables-restore --noflush`` leave exactly what
    :func:`as_saved` predicts (so the saved tables the teardown goldens start from are real),
    and the teardown script then leaves only the other container."""
    path = iptables_path(tmp_path / "bin", variant)
    family = GOLDEN_CASES[case][0]
    tool = "ip6tables" if family == 6 else "iptables"
    env = ["env", f"PATH={path}"]
    for chain in extra_chains(case):
        lab.exec(lab.node, *env, tool, "-t", "nat", "-N", chain)
    first, second = add_scripts(case)
    for script in (first, second):
        lab.exec(lab.node, *env, f"{tool}-restore", "--noflush", input=script)
    expected = as_saved(first, second, extra_chains=extra_chains(case))
    assert nat_lines(lab.node, family, path) == normalized(expected)
    script = rules.teardown_script(rules.SavedNat(saved_table(case)), NET, CID)
    assert script is not None
    lab.exec(lab.node, *env, f"{tool}-restore", "--noflush", input=script)
    assert nat_lines(lab.node, family, path) == normalized(
        as_saved(first, extra_chains=extra_chains(case)))


# --- 2. the reference portmap and podnet-portmap leave the same tables -------------------------

# Dual-stack pods; the reference portmap's option sets. Debian's portmap 1.1.1 predates ``masqAll`` and
# ignores it, so masqAll is left out here (its layout is pinned by the golden files).
COMPARE: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "defaults": ({}, [tcp(18080), udp(15353)]),
    "snat_false": ({"snat": False}, [tcp(18080), udp(15353)]),
    "mark_bit_5": ({"markMasqBit": 5}, [tcp(18080)]),
    "external_chain": ({"externalSetMarkChain": "KUBE-MARK-MASQ"}, [tcp(18080), udp(15353)]),
    "conditions": ({"conditionsV4": ["!", "-d", "192.0.2.0/24"],
                    "conditionsV6": ["!", "-d", "fc00::/7"]}, [tcp(18080), udp(15353)]),
    "conditions_match": ({"conditionsV4": ["-m", "addrtype", "!", "--src-type", "LOCAL",
                                           "!", "-s", "10.9.0.0/16"],
                          "conditionsV6": ["-m", "addrtype", "!", "--src-type", "LOCAL",
                                           "!", "-s", "fd00:9::/64"]}, [tcp(18080)]),
    # A hostIP of each family, and the unspecified address of each family (that family only).
    "host_ip": ({}, [tcp(18080, 80, "192.0.2.1"), tcp(18443, 443, "2001:db8:1::1"),
                     udp(15353, 53, "0.0.0.0"), udp(15354, 54, "::"), tcp(18081, 81)]),
    "ports20_tcp": ({}, [tcp(19000 + i, 80 + i) for i in range(20)]),
    "tcp_udp": ({}, [tcp(18080, 80), udp(18053, 53), tcp(18443, 443), udp(18054, 54)]),
    # name + container ID longer than an iptables comment (255 characters)
    "long_name": ({"name": "n" * 240}, [tcp(18080)]),
}
COMPARE_XFAIL: dict[str, str] = {}
READD = ("defaults", "tcp_udp", "host_ip")  # cases that also ADD a container again


def shifted(mappings: list[dict[str, Any]], by: int) -> list[dict[str, Any]]:
    return [{**m, "hostPort": m["hostPort"] + by} for m in mappings]


def compare_params() -> list[Any]:
    return [pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=COMPARE_XFAIL[case]))
            if case in COMPARE_XFAIL else case for case in sorted(COMPARE)]


def without_ports(line: str) -> str:
    """A rule with its destination port and DNAT target port blanked."""
    return re.sub(r"\]:\d+", "]:N", re.sub(r"--dport \d+", "--dport N", line))


def quirk_twin(line: str, ref: list[str]) -> bool:
    """True when ``ref`` has a different rule of the same chain equal to ``line`` but for its
    ports (the rule ip6tables-legacy's ``-C`` mistakes for ``line``), and no rule of that chain
    for ``line``'s destination port: the reference skipped that mapping whole."""
    chain = line.split()[1]
    same_chain = [other for other in ref if other.startswith("-A ") and other.split()[1] == chain]
    port = re.search(r"--dport (\d+)", line)
    if port is None or any(f"--dport {port.group(1)} " in other for other in same_chain):
        return False
    return any(other != line and without_ports(other) == without_ports(line) for other in same_chain)


@needs_root
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", compare_params())
def test_same_tables_as_reference(lab: Lab, tmp_path: Path, case: str, variant: str) -> None:
    """Two node namespaces, the same reference ptp + host-local results (a fresh dataDir per
    node), the same network name and container IDs; one chains the reference portmap, the
    other podnet-portmap, both run with the same iptables variant first in PATH.
    ADD c1, ADD c2, [ADD c1 again,] DEL c1, DEL c2: after each step ``iptables-save -t nat``
    and ``ip6tables-save -t nat`` are identical apart from counters (after a repeated ADD,
    apart from the order of different containers' entry rules); at the end only the
    top-level chains and their jumps are left."""
    path = iptables_path(tmp_path / "bin", variant)
    options, mappings = COMPARE[case]
    nodes = {"portmap": (lab.node, REF_PORTMAP), "podnet-portmap": (node(lab), PODNET_PORTMAP)}
    no_dad(lab, lab.node)
    external = options.get("externalSetMarkChain")
    for ns, _ in nodes.values():
        for tool in ("iptables", "ip6tables") if external else ():  # Kubernetes' chain
            lab.exec(ns, "env", f"PATH={path}", tool, "-t", "nat", "-N", external)
            lab.exec(ns, "env", f"PATH={path}", tool, "-t", "nat", "-A", external,
                     "-j", "MARK", "--or-mark", "0x4000")
    pods = {kind: {cid: pod(lab, f"{kind[:3]}{cid}") for cid in ("c1", "c2")} for kind in nodes}
    confs: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in nodes}
    for i, cid in enumerate(("c1", "c2")):  # one container at a time: same order of addresses
        calls = [(ns, "ADD", ptp_conf(tmp_path / f"ipam-{kind}"), REF_PTP, cid, pods[kind][cid])
                 for kind, (ns, _) in nodes.items()]
        for kind, (rc, prev, err) in zip(nodes, cni_parallel(calls, path=path), strict=True):
            assert rc == 0, (prev, err)
            confs[kind][cid] = portmap_conf(kind, prev, shifted(mappings, 100 * i), **options)
        assert confs["portmap"][cid]["prevResult"]["ips"] == confs["podnet-portmap"][cid]["prevResult"]["ips"]

    def step(command: str, cid: str, again: bool = False) -> None:
        calls = [(ns, command, confs[kind][cid], plugin, cid, pods[kind][cid])
                 for kind, (ns, plugin) in nodes.items()]
        for kind, (rc, out, err) in zip(nodes, cni_parallel(calls, path=path), strict=True):
            assert rc == 0, (kind, command, cid, out, err)
            if command == "ADD":
                assert out == confs[kind][cid]["prevResult"]
        for family in (4, 6):
            ref = nat_lines(nodes["portmap"][0], family, path)
            ours = nat_lines(nodes["podnet-portmap"][0], family, path)
            if again:
                ref, ours = entry_order_free(ref), entry_order_free(ours)
            if family == 6 and variant == "legacy":
                # ip6tables-legacy's -C ignores the port (test_reference_legacy_ip6_check_quirk):
                # the reference skips a rule when one differing only in its ports exists. Every
                # line is kept: each line podnet has and the reference lacks must be such a rule
                # of the same chain, and without them the two tables are identical, in order.
                extra = [line for line in ours if line not in ref]
                for line in extra:
                    assert line.startswith("-A CNI-DN-") and quirk_twin(line, ref), (
                        f"IPv{family} after {command} {cid}: {line!r} is not explained by the "
                        f"ip6tables-legacy -C quirk:\n{diff(ref, ours)}")
                ours = [line for line in ours if line not in extra]
            assert ours == ref, f"IPv{family} after {command} {cid}:\n{diff(ref, ours)}"

    step("ADD", "c1")
    step("ADD", "c2")
    if case in READD:
        step("ADD", "c1", again=True)
    step("DEL", "c1")
    step("DEL", "c2")
    for family in (4, 6):
        left = only_top_level(nat_lines(nodes["podnet-portmap"][0], family, path))
        assert [line for line in left if external is None or external not in line] == []


@needs_root
def test_reference_legacy_ip6_check_quirk(lab: Lab, tmp_path: Path) -> None:
    """Why the comparison above tolerates missing CNI-DN rules on the reference's side with
    ip6tables-legacy: its ``-C`` says a rule with another port exists, so the reference
    portmap (which adds each rule only when ``-C`` fails) skips every mapping of a protocol
    but the first. podnet-portmap does not ask ``-C`` and writes them all."""
    path = iptables_path(tmp_path / "bin", "legacy")
    env = ["env", f"PATH={path}", "ip6tables", "-t", "nat"]
    lab.exec(lab.node, *env, "-N", "PROBE")
    lab.exec(lab.node, *env, "-A", "PROBE", "-p", "tcp", "--dport", "19000", "-s", "fd00:1::/64",
             "-j", "ACCEPT")
    other_port = lab.exec(lab.node, *env, "-C", "PROBE", "-p", "tcp", "--dport", "19001",
                          "-s", "fd00:1::/64", "-j", "ACCEPT", check=False)
    assert other_port.returncode == 0  # the ip6tables-legacy 1.8.9 quirk

    no_dad(lab, lab.node)
    p = pod(lab)
    rc, prev = cni(lab.node, "ADD", ptp_conf(tmp_path / "ipam", "6"), REF_PTP,
                   container_id="c1", netns=p, path=path)
    assert rc == 0, prev
    conf = portmap_conf("podnet-portmap", prev, [tcp(19000, 80), tcp(19001, 81)])
    rc, out = cni(lab.node, "ADD", conf, PODNET_PORTMAP, container_id="c1", netns=p, path=path)
    assert rc == 0, out
    chain = rules.dnat_chain_name("mynet", "c1")
    dnat = [r for r in rules_of(nat_lines(lab.node, 6, path), chain) if "DNAT" in r]
    assert dnat == ["-p tcp -m tcp --dport 19000 -j DNAT --to-destination [fd00:1::2]:80",
                    "-p tcp -m tcp --dport 19001 -j DNAT --to-destination [fd00:1::2]:81"]


# --- 3. real traffic ----------------------------------------------------------------------------

MAIN = {"ptp": (REF_PTP, ptp_conf), "bridge": (REF_BRIDGE, bridge_conf)}
NODE_ADDR = {4: NODE_ADDR4, 6: NODE_ADDR6}
CLIENT_ADDR = {4: f"::ffff:{CLIENT_ADDR4}", 6: CLIENT_ADDR6}
GATEWAY = {4: "::ffff:10.1.0.1", 6: "fd00:1::1"}  # what masqueraded traffic comes from


def add_chain(lab: Lab, ns: str, main: str, data: Path, cid: str, netns: str,
              mappings: list[dict[str, Any]] | None, path: str = BASE_PATH,
              families: str = "46") -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference ``main`` plugin + host-local, then podnet-portmap; ``(prevResult,
    podnet-portmap conf)``. podnet-portmap's ADD prints prevResult unchanged."""
    plugin, make = MAIN[main]
    rc, prev = cni(ns, "ADD", make(data, families), plugin, container_id=cid, netns=netns,
                   path=path)
    assert rc == 0, prev
    conf = portmap_conf("podnet-portmap", prev, mappings)
    rc, out = cni(ns, "ADD", conf, PODNET_PORTMAP, container_id=cid, netns=netns, path=path)
    assert rc == 0, out
    assert out == prev
    return prev, conf


@needs_root
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("main", sorted(MAIN))
def test_traffic(lab: Lab, tmp_path: Path, main: str, variant: str) -> None:
    """Reference ptp or bridge (isGateway, hairpinMode) + host-local → podnet-portmap, dual
    stack: TCP and UDP through the hostPorts from another host, from 127.0.0.1 (IPv4 only:
    route_localnet), from the pod itself (hairpin) and from a second pod; CHECK; DEL removes
    the container's chain in both families; DEL again succeeds."""
    path = iptables_path(tmp_path / "bin", variant)
    no_dad(lab, lab.node)
    client = lab.client()
    pod_a, pod_b = pod(lab, "a"), pod(lab, "b")
    maps_a = [tcp(18080), udp(15353), tcp(18090)]  # two tcp ports: see the legacy quirk above
    _, conf_a = add_chain(lab, lab.node, main, tmp_path / "ipam", "pod-a", pod_a, maps_a, path)
    _, conf_b = add_chain(lab, lab.node, main, tmp_path / "ipam", "pod-b", pod_b, [tcp(18081)],
                          path)
    lab.serve(pod_a, "A", 80)
    lab.serve(pod_b, "B", 80)

    for family in (4, 6):
        node_addr = NODE_ADDR[family]
        # Another host: DNAT only, the pod sees the client's address.
        assert lab.talk(client, "tcp", node_addr, 18080) == f"A {CLIENT_ADDR[family]}"
        assert lab.talk(client, "udp", node_addr, 15353) == f"A {CLIENT_ADDR[family]}"
        assert lab.talk(client, "tcp", node_addr, 18090) == f"A {CLIENT_ADDR[family]}"
        assert lab.talk(client, "tcp", node_addr, 18081) == f"B {CLIENT_ADDR[family]}"
        # Hairpin (the pod through its own hostPort) and another pod: masqueraded.
        for proto, port in (("tcp", 18080), ("udp", 15353)):
            assert lab.talk(pod_a, proto, node_addr, port) == f"A {GATEWAY[family]}", (family, proto)
            assert lab.talk(pod_b, proto, node_addr, port) == f"A {GATEWAY[family]}", (family, proto)
        assert lab.talk(pod_a, "tcp", node_addr, 18081) == f"B {GATEWAY[family]}"
    # 127.0.0.1 on the node: DNAT in OUTPUT, masqueraded out of the pod's interface.
    assert lab.talk(lab.node, "tcp", "127.0.0.1", 18080) == f"A {GATEWAY[4]}"
    assert lab.talk(lab.node, "udp", "127.0.0.1", 15353) == f"A {GATEWAY[4]}"
    # ([::1] is not port-mapped: the reference portmap's README, "Known issues"; the DNATed packet is dropped.)

    rc, out = cni(lab.node, "CHECK", conf_a, PODNET_PORTMAP, container_id="pod-a", netns=pod_a,
                  path=path)
    assert rc == 0, out

    chain = rules.dnat_chain_name("mynet", "pod-a")
    rc, out = cni(lab.node, "DEL", conf_a, PODNET_PORTMAP, container_id="pod-a", netns=pod_a,
                  path=path)
    assert rc == 0 and out is None, out
    for family in (4, 6):
        lines = nat_lines(lab.node, family, path)
        assert chain not in "\n".join(lines), f"IPv{family}"
        assert rules.dnat_chain_name("mynet", "pod-b") in user_chains(lines)
    assert lab.talk(client, "tcp", NODE_ADDR4, 18080) == REFUSED
    assert lab.talk(client, "tcp", NODE_ADDR6, 18081) == f"B {CLIENT_ADDR6}"
    rc, out = cni(lab.node, "DEL", conf_a, PODNET_PORTMAP, container_id="pod-a", netns=pod_a,
                  path=path)
    assert rc == 0 and out is None, out  # DEL twice


@needs_root
def test_check_ipv4_only_pod_against_reference(lab: Lab, tmp_path: Path) -> None:
    """CHECK passes for an IPv4-only pod, where the reference 1.1.1 fails its own CHECK
    (it looks for the chain in ip6tables too); after a rule is deleted by hand, CHECK fails
    with code 103 naming that rule; ADD again repairs it."""
    no_dad(lab, lab.node)
    ref_node = node(lab, "refnode")
    maps = [tcp(18080), udp(15353)]
    # Reference ptp + reference portmap on one node...
    ref_pod = pod(lab, "ref")
    rc, prev = cni(ref_node, "ADD", ptp_conf(tmp_path / "ipam-ref", "4"), REF_PTP,
                   container_id="c1", netns=ref_pod)
    assert rc == 0, prev
    ref_conf = portmap_conf("portmap", prev, maps)
    assert cni(ref_node, "ADD", ref_conf, REF_PORTMAP, container_id="c1", netns=ref_pod)[0] == 0
    rc, out = cni(ref_node, "CHECK", ref_conf, REF_PORTMAP, container_id="c1", netns=ref_pod)
    assert rc != 0 and "ipv6" in out["msg"], out  # the reference's own bug
    # ... reference ptp + podnet-portmap on the other.
    p = pod(lab, "ours")
    _, conf = add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "c1", p, maps, families="4")
    rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 0, out

    chain = rules.dnat_chain_name("mynet", "c1")
    localhost = "-s 127.0.0.1/32 -p udp -m udp --dport 15353 -j CNI-HOSTPORT-SETMARK"
    assert localhost in rules_of(nat_lines(lab.node, 4, BASE_PATH), chain)
    lab.exec(lab.node, "iptables", "-t", "nat", "-D", chain, *localhost.split())
    rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 1 and out["code"] == 103, out
    assert f"IPv4 hostPort rule missing: {chain} {localhost}" in out["msg"], out

    lab.exec(lab.node, "iptables", "-t", "nat", "-D", "OUTPUT", *rules.toplevel_rule().split())
    rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 1 and out["code"] == 103, out
    assert f"OUTPUT {rules.toplevel_rule()}" in out["msg"] + out.get("details", ""), out

    assert cni(lab.node, "ADD", conf, PODNET_PORTMAP, container_id="c1", netns=p)[0] == 0
    assert cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)[0] == 0


@needs_root
def test_check_dual_stack_names_the_ipv6_rule(lab: Lab, tmp_path: Path) -> None:
    no_dad(lab, lab.node)
    p = pod(lab)
    _, conf = add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "c1", p, [tcp(18080)])
    assert cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)[0] == 0
    chain = rules.dnat_chain_name("mynet", "c1")
    dnat = "-p tcp -m tcp --dport 18080 -j DNAT --to-destination [fd00:1::2]:80"
    lab.exec(lab.node, "ip6tables", "-t", "nat", "-D", chain, *dnat.split())
    rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 1 and out["code"] == 103, out
    assert out["msg"] == f"IPv6 hostPort rule missing: {chain} {dnat}", out


# --- 4. no portMappings: no firewall command ----------------------------------------------------


@needs_root
def test_no_port_mappings_runs_no_firewall_command(lab: Lab, tmp_path: Path) -> None:
    """Without portMappings, ADD prints prevResult unchanged and DEL (and CHECK) do nothing,
    without running iptables*, ip6tables*, nft or conntrack (CP #510): those are recording
    scripts first in PATH. A call with a mapping shows the recording works."""
    no_dad(lab, lab.node)
    p = pod(lab)
    rc, prev = cni(lab.node, "ADD", ptp_conf(tmp_path / "ipam"), REF_PTP, container_id="c1",
                   netns=p)
    assert rc == 0, prev
    path, log = recording_path(tmp_path / "rec")
    for runtime_config in (None, []):
        conf = portmap_conf("podnet-portmap", prev, runtime_config)
        rc, out = cni(lab.node, "ADD", conf, PODNET_PORTMAP, container_id="c1", netns=p,
                      path=path)
        assert rc == 0 and out == prev, out
        rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p,
                      path=path)
        assert rc == 0 and out is None, out
        for netns in (p, None):  # DEL with and without the sandbox
            rc, out = cni(lab.node, "DEL", conf, PODNET_PORTMAP, container_id="c1",
                          netns=netns, path=path)
            assert rc == 0 and out is None, out
        assert log.read_text() == ""
    rc, out = cni(lab.node, "DEL", portmap_conf("podnet-portmap", prev, [udp(15353)]),
                  PODNET_PORTMAP, container_id="c1", netns=p, path=path)
    assert rc == 1, out  # the recording tools fail
    assert log.read_text().startswith("iptables-save -t nat"), log.read_text()


# --- 5. many containers at once; containers side by side -----------------------------------------

N_PARALLEL = 32


def top_level_counts(lines: list[str]) -> dict[str, int]:
    """How many times each shared rule is in the table (each must be there exactly once)."""
    shared = [f"-A PREROUTING {rules.toplevel_rule()}", f"-A OUTPUT {rules.toplevel_rule()}",
              f"-A POSTROUTING {rules.postrouting_rule()}",
              f"-A {rules.SETMARK} {rules.setmark_rule(rules.PortmapOptions())}",
              f"-A {rules.MASQ} {rules.masq_rule(rules.PortmapOptions())}"]
    return {rule: lines.count(rule) for rule in shared}


@needs_root
def test_parallel_add_then_parallel_del(lab: Lab, tmp_path: Path) -> None:
    """32 containers (reference ptp, dual stack) ADDed through podnet-portmap as parallel
    processes on a node without any portmap chain yet, then DELed in parallel: after ADD every
    container has its chain and entry rules and the shared rules are there once; after DEL
    nothing is left but the top-level chains and their jumps. (iptables-nft; legacy: next.)"""
    path = iptables_path(tmp_path / "bin", "nft")
    no_dad(lab, lab.node)
    pods = [pod(lab, f"p{i}-") for i in range(N_PARALLEL)]
    cids = [f"c{i}" for i in range(N_PARALLEL)]
    ptp = ptp_conf(tmp_path / "ipam")
    results = cni_parallel([(lab.node, "ADD", ptp, REF_PTP, cid, p) for cid, p in zip(cids, pods, strict=True)])
    assert all(rc == 0 for rc, _, _ in results), [r for r in results if r[0]][:2]
    confs = [portmap_conf("podnet-portmap", prev, [tcp(20000 + i), udp(21000 + i)])
             for i, (_, prev, _) in enumerate(results)]

    def every_container(command: str) -> None:
        """``command`` of podnet-portmap for every container at once; none may fail."""
        results = cni_parallel([(lab.node, command, conf, PODNET_PORTMAP, cid, p)
                                for conf, cid, p in zip(confs, cids, pods, strict=True)], path=path)
        failed = [(cid, out, err) for cid, (rc, out, err) in zip(cids, results, strict=True) if rc]
        assert not failed, failed[:2]

    every_container("ADD")
    for family in (4, 6):
        lines = nat_lines(lab.node, family, path)
        chains = set(user_chains(lines))
        entries = rules_of(lines, rules.TOP_DNAT)
        missing = [cid for cid in cids if rules.dnat_chain_name("mynet", cid) not in chains
                   or sum(r.endswith(rules.dnat_chain_name("mynet", cid)) for r in entries) != 2]
        assert missing == [], f"IPv{family}: {len(missing)} containers lost rules: {missing[:5]}"
        assert set(top_level_counts(lines).values()) == {1}, top_level_counts(lines)

    every_container("DEL")
    for family in (4, 6):
        lines = nat_lines(lab.node, family, path)
        assert only_top_level(lines) == [], f"IPv{family}"
        assert set(top_level_counts(lines).values()) == {1}, top_level_counts(lines)


@needs_root
def test_del_of_one_container_leaves_the_other(lab: Lab, tmp_path: Path) -> None:
    """Two containers of one network, nothing else shared: DEL of one leaves every rule of
    the other (and its traffic and CHECK)."""
    no_dad(lab, lab.node)
    client = lab.client()
    p1, p2 = pod(lab, "one"), pod(lab, "two")
    _, conf1 = add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "c1", p1, [tcp(18080), udp(15353)])
    _, conf2 = add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "c2", p2, [tcp(18081), udp(15354)])
    lab.serve(p2, "TWO", 80)
    chain1, chain2 = rules.dnat_chain_name("mynet", "c1"), rules.dnat_chain_name("mynet", "c2")

    def of_c2(family: int) -> list[str]:
        return [line for line in nat_lines(lab.node, family, BASE_PATH) if chain2 in line]

    before = {f: of_c2(f) for f in (4, 6)}
    # chain declaration, 3 rules a mapping (2 in IPv6: no localhost rule), 2 entry rules
    assert len(before[4]) == 1 + 2 * 3 + 2 and len(before[6]) == 1 + 2 * 2 + 2
    rc, out = cni(lab.node, "DEL", conf1, PODNET_PORTMAP, container_id="c1", netns=p1)
    assert rc == 0, out
    for family in (4, 6):
        assert of_c2(family) == before[family]
        assert chain1 not in "\n".join(nat_lines(lab.node, family, BASE_PATH))
    assert cni(lab.node, "CHECK", conf2, PODNET_PORTMAP, container_id="c2", netns=p2)[0] == 0
    assert lab.talk(client, "tcp", NODE_ADDR4, 18081) == f"TWO ::ffff:{CLIENT_ADDR4}"
    assert lab.talk(client, "udp", NODE_ADDR6, 15354) == f"TWO {CLIENT_ADDR6}"


@needs_root
def test_parallel_add_with_slow_save_keeps_every_rule(lab: Lab, tmp_path: Path) -> None:
    """The read-modify-write of the nat table must be serialised: with ``iptables-save``
    slowed down (0.2 s after printing, like a busy node with a large table) and 6 ADDs started
    at once on an empty node, two ADDs that both saw no CNI-HOSTPORT-DNAT would both declare it
    (under --noflush that flushes the other's entry rule) and both add the jumps. iptables-legacy
    here (the 32-container test above runs iptables-nft)."""
    path = iptables_path(tmp_path / "bin", "legacy")
    slow = tmp_path / "slow"
    slow.mkdir()
    save = slow / "iptables-save"
    save.write_text(f'#!/bin/sh\n{tmp_path}/bin/iptables-save "$@"\nrc=$?\nsleep 0.2\nexit $rc\n')
    save.chmod(0o755)
    no_dad(lab, lab.node)
    n = 6
    pods = [pod(lab, f"s{i}-") for i in range(n)]
    cids = [f"s{i}" for i in range(n)]
    results = cni_parallel([(lab.node, "ADD", ptp_conf(tmp_path / "ipam", "4"), REF_PTP, cid, p)
                            for cid, p in zip(cids, pods, strict=True)])
    confs = [portmap_conf("podnet-portmap", prev, [tcp(20000 + i)])
             for i, (_, prev, _) in enumerate(results)]
    results = cni_parallel([(lab.node, "ADD", conf, PODNET_PORTMAP, cid, p)
                            for conf, cid, p in zip(confs, cids, pods, strict=True)],
                           path=f"{slow}:{path}")
    assert all(rc == 0 for rc, _, _ in results), results
    lines = nat_lines(lab.node, 4, path)
    entries = rules_of(lines, rules.TOP_DNAT)
    assert sorted(r.rsplit(" ", 1)[-1] for r in entries) == sorted(
        rules.dnat_chain_name("mynet", cid) for cid in cids)
    assert set(top_level_counts(lines).values()) == {1}, top_level_counts(lines)


@needs_root
def test_parallel_del_of_the_same_container(lab: Lab, tmp_path: Path) -> None:
    """Two DELs of one container at once both succeed (CP #418) and leave nothing."""
    no_dad(lab, lab.node)
    p = pod(lab)
    _, conf = add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "c1", p, [tcp(18080), udp(15353)])
    results = cni_parallel([(lab.node, "DEL", conf, PODNET_PORTMAP, "c1", p)] * 3)
    assert [rc for rc, _, _ in results] == [0, 0, 0], results
    for family in (4, 6):
        assert only_top_level(nat_lines(lab.node, family, BASE_PATH)) == []


@needs_root
def test_add_failure_changes_nothing(lab: Lab, tmp_path: Path) -> None:
    """externalSetMarkChain naming a chain that does not exist: ADD fails with code 104 naming
    iptables-restore, and the transaction leaves the nat table as it was."""
    no_dad(lab, lab.node)
    p = pod(lab)
    rc, prev = cni(lab.node, "ADD", ptp_conf(tmp_path / "ipam", "4"), REF_PTP,
                   container_id="c1", netns=p)
    assert rc == 0, prev
    before = nat_lines(lab.node, 4, BASE_PATH)
    conf = portmap_conf("podnet-portmap", prev, [tcp(18080)],
                        externalSetMarkChain="KUBE-MARK-MASQ")
    rc, out = cni(lab.node, "ADD", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 1 and out["code"] == 104 and "iptables-restore" in out["msg"], out
    assert nat_lines(lab.node, 4, BASE_PATH) == before


# Conditions written another way than iptables-save prints them (found by iptables -C).
CHECK_CONDITIONS = [
    pytest.param(["!", "-d", "192.0.2.0/24"], id="canonical"),
    pytest.param(["-m", "addrtype", "!", "--src-type", "LOCAL"], id="match"),
    pytest.param(["!", "-d", "192.0.2.1"], id="bare-address"),
    pytest.param(["-d", "192.0.2.0/255.255.255.0"], id="netmask"),
    pytest.param(["--destination", "192.0.2.0/24"], id="long-option"),
]


@needs_root
@pytest.mark.parametrize("conditions", CHECK_CONDITIONS)
def test_check_after_add_with_conditions(lab: Lab, tmp_path: Path, conditions: list[str]) -> None:
    no_dad(lab, lab.node)
    p = pod(lab)
    rc, prev = cni(lab.node, "ADD", ptp_conf(tmp_path / "ipam", "4"), REF_PTP,
                   container_id="c1", netns=p)
    assert rc == 0, prev
    conf = portmap_conf("podnet-portmap", prev, [tcp(18080)], conditionsV4=conditions)
    assert cni(lab.node, "ADD", conf, PODNET_PORTMAP, container_id="c1", netns=p)[0] == 0
    rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 0, out


@needs_root
def test_check_after_add_with_a_long_network_name(lab: Lab, tmp_path: Path) -> None:
    no_dad(lab, lab.node)
    p = pod(lab)
    rc, prev = cni(lab.node, "ADD", ptp_conf(tmp_path / "ipam", "4"), REF_PTP,
                   container_id="c1", netns=p)
    assert rc == 0, prev
    conf = portmap_conf("podnet-portmap", prev, [tcp(18080)], name="n" * 240)
    assert cni(lab.node, "ADD", conf, PODNET_PORTMAP, container_id="c1", netns=p)[0] == 0
    rc, out = cni(lab.node, "CHECK", conf, PODNET_PORTMAP, container_id="c1", netns=p)
    assert rc == 0, out


# --- 6. UDP conntrack -----------------------------------------------------------------------------


@needs_root
def test_udp_conntrack_flushed_on_add_and_del(lab: Lab, tmp_path: Path) -> None:
    """A UDP flow that reached the node before the mapping existed (or a pod since gone) must
    not blackhole the hostPort (CP #123): podnet-portmap flushes the entries of its UDP ports
    after ADD and after DEL. The client keeps one source port, so one conntrack entry."""
    no_dad(lab, lab.node)
    client = lab.client()
    # Another container's mapping first: the nat table exists, so conntrack tracks flows.
    add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "other", pod(lab, "other"), [tcp(1)])
    lab.serve(lab.node, "NODE", 15353)
    for family in (4, 6):
        assert lab.talk(client, "udp", NODE_ADDR[family], 15353, sport=40000).startswith("NODE ")
    for family in ("ipv4", "ipv6"):
        flows = lab.exec(lab.node, "conntrack", "-L", "-f", family, "-p", "udp",
                         "--orig-port-dst", "15353", check=False)
        assert "dport=15353" in flows.stdout + flows.stderr, family
    p = pod(lab, "udp")
    _, conf = add_chain(lab, lab.node, "ptp", tmp_path / "ipam", "c1", p, [udp(15353, 53)])
    lab.serve(p, "POD", 53)
    for family in (4, 6):
        assert lab.talk(client, "udp", NODE_ADDR[family], 15353, sport=40000).startswith("POD "), family
    assert cni(lab.node, "DEL", conf, PODNET_PORTMAP, container_id="c1", netns=p)[0] == 0
    for family in (4, 6):
        assert lab.talk(client, "udp", NODE_ADDR[family], 15353, sport=40000).startswith("NODE "), family
