"""Pods on OVN networks: the ``podnet`` plugin's verbs for a conflist whose ``network`` is an
``ovn`` network (issue 16, item 5).

ADD, each step on the undo stack:

1. the pod's logical switch port on the network's internal switch: one of this node's spare
   ports claimed (:func:`_port`; made ahead, addresses and binding ready, so no northd
   recompute is waited for), else ``pn-<network>-pod-<hash of container/ifname>`` made for it,
   ``"<MAC> dynamic"`` (northd assigns the addresses, unique on every node even when all ADD at
   once) and ``requested-chassis`` this node;
2. a port made for the pod: its addresses, once northd has written them (an OVSDB ``wait``,
   under the call's deadline);
3. the veth pair (host end ``pn<13 hex>``, alias ``podnet:<dataDir>``), the pod end addressed
   with the subnet's prefix and a default route via the router; MTU the network's ``bridge.mtu``;
4. the host end in the integration bridge with ``external_ids:iface-id`` = the port; TX
   checksum offload off on both ends where the datapath is userspace (``netdev``: FIELD-NOTES
   §8, else TCP stalls on bad checksums);
5. wait for ``external_ids:ovn-installed=true`` on the OVS interface (ovn-controller has wired
   the port on this chassis, as ovn-kubernetes waits), under the call's deadline;
6. the rows in the node's store (seed 001's ``pods``; the attachment names the network).

DEL removes the OVS port, the veth, the logical switch port (found by its attachment's
``external_ids``: a claimed spare's name is not derived) and the rows, and always succeeds:
an NB that does not answer only costs a warning (GC removes the port later).
"""

from __future__ import annotations

import time
from typing import Any

from podnet import errors, proc
from podnet.drivers.base import link_alias, open_store, refuse_existing, require_netns
from podnet.errors import CNIError
from podnet.link import names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.cni.skel import Call
    from podnet.drivers.conf import PodnetConf, StoreConf
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.store import Store
    from podnet.values import PortMapping

#: Seconds an ADD waits for northd's addresses and for ovn-controller, at most (and never past
#: the tools' deadline).
WAIT = 10.0
#: Seconds GC waits for each SB remote (the spares' sweep is optional; a GC never hangs on it).
SB_TIMEOUT = 2.0
PORT_IDS = ("podnet-container", "podnet-ifname", "podnet-chassis", "podnet-owner")


def _nb(store: Store) -> Ovsdb:
    from podnet.drivers import cluster

    nb = cluster.connect(store.config.all(), store.path)
    if nb is None:
        raise errors.InvalidConfig(
            "network: an ovn network needs network.ovn.northbound_connection"
        )
    return nb


#: Attempts of an ADD to make its port while the network's record changes under it.
ADD_TRIES = 3


def mirrored(store: Store, name: str) -> tuple[dict[str, str], str] | None:
    """OVN network ``name`` as this node's store mirrors it: its config and the registry record
    it was mirrored from (:meth:`podnet.ovn.nb.Record.dumps`); None when not mirrored. An ADD
    makes its port on the condition that the NB still holds that record
    (:func:`podnet.ovn.pod_ports.add_port`), so it need not read the registry, whose size grows with
    the cluster's forwards."""
    from podnet.ovn import nb as nbmod

    row = store.networks.get(name)
    if row is None or row.type != "ovn":
        return None
    config = dict(row.config)
    return config, nbmod.Record("ovn", row.description, config).dumps()


def network_record(store: Store, nb: Ovsdb, name: str) -> tuple[dict[str, str], str]:
    """The OVN network's config from the NB, mirrored into the node's store (seed 004's
    ``networks``: the node's view), and its record's text as the NB holds it (for
    :func:`podnet.ovn.pod_ports.add_port`'s condition); InvalidConfig (7) when it is not an ovn
    network."""
    from podnet.ovn import nb as nbmod

    registry = nbmod.read(nb)
    record = registry.records.get(name)
    if record is None or record.type != "ovn":
        raise errors.InvalidConfig(f"network: {name!r} is not an ovn network of the cluster")
    with store.write():  # read under the write lock: parallel ADDs mirror it once
        row = store.networks.get(name)
        if row is None:
            store.networks.insert(name, "ovn", record.description, record.config)
        elif dict(row.config) != record.config or row.description != record.description:
            store.networks.update(row.id, record.description, record.config)
    return record.config, registry.held(name) or record.dumps()


def _integration_bridge(store: Store) -> str:
    from podnet.networks import server

    return server.effective(store.config.all())[server.INTEGRATION_BRIDGE]


def plug(bridge: str, host_if: str, port: str, owner: str) -> None:
    """Put ``host_if`` into OVS ``bridge`` as logical switch port ``port`` (``iface-id``),
    marked ``podnet-owner`` (GC's); idempotent."""
    from podnet.ovn import vswitch

    vswitch.add_port(bridge, host_if, {"iface-id": port, "podnet-owner": owner})


def attach(call: Call, conf: PodnetConf) -> dict[str, Any]:
    """ADD on an OVN network (see the module). Errors: 7 bad config or OVS not set up for OVN,
    11 NB unreachable (naming it), 102 CNI_IFNAME exists, 104 kernel or OVS failure, or the
    port not wired by ovn-controller within the deadline (naming it)."""
    from podnet import reconcile
    from podnet.cni.netconf import parse_requested_mac
    from podnet.cni.result import attachment
    from podnet.drivers.ovn_hostports import ensure_mgmt, peers
    from podnet.drivers.pods import check_hostports, mappings_for
    from podnet.link import veth
    from podnet.link.local import start_reading_routes
    from podnet.ovn import vswitch
    from podnet.undo import Undo

    require_netns(call)
    veth.check_ifname(call.ifname)
    deadline = time.monotonic() + min(WAIT, proc.Limits.timeout)
    chassis = vswitch.chassis()
    requested = parse_requested_mac(call.config, call.args)
    host_if = names.host_ifname(call.container_id, call.ifname)
    network = str(conf.network)
    undo = Undo()
    # the node's routes, read while the NB is asked (checked before the port is taken)
    routes = start_reading_routes()
    undo.push("reaping ip", routes.reap)
    with open_store(conf) as store:
        refuse_existing(store, call.container_id)
        nb = _nb(store)
        entries: list[PortMapping] = []
        try:
            talks_to = peers(nb.remotes, chassis)  # checked with the routes
            config, port, (pod_mac, alloc, prefixes) = _port(
                store, nb, call, conf, chassis.system_id, requested, undo, deadline, routes,
                talks_to,
            )
            entries = mappings_for(conf, call.container_id, {f: a[0] for f, a in alloc.items()})
            if entries:  # refused early, before any link is made; checked again at the COMMIT
                check_hostports(store, entries)
            mtu = int(config.get("bridge.mtu") or 1500)
            link = veth.PodLink(
                host_if=host_if,
                ifname=call.ifname,
                netns=call.netns,
                mtu=mtu,
                addresses=[(f, a[0], a[1]) for f, a in sorted(alloc.items())],
                host_mac=names.random_mac(),
                pod_mac=pod_mac,
                alias=link_alias(conf),
                bridge="ovn",
                prefixes=prefixes,
            )
            _create_pair(link)
            undo.push(f"deleting {host_if}", lambda: veth.delete_host(host_if))
            # TX checksum offload off on both ends (userspace datapath), alongside the rest:
            # the host end's ethtool, the pod end's in the shell that configures the pod
            tx_off = None
            if chassis.userspace:
                tx_off = proc.spawn(["ethtool", "-K", host_if, "tx", "off"], die_with_parent=True)
                undo.push("reaping ethtool", tx_off.reap)
            configuring = veth.start_configure_pod(link, tx_off=chassis.userspace)
            bridge = _integration_bridge(store)
            plug(bridge, host_if, port, link.alias)
            undo.push(
                f"removing {host_if} from {bridge}",
                lambda: vswitch.del_port(host_if, bridge),
            )
            veth.finish_configure_pod(link, configuring)
            if tx_off is not None:
                tx_off.check()
            vswitch.wait_installed(host_if, port, deadline)
            if entries:
                ensure_mgmt(nb, network, config, chassis, bridge, link.alias, deadline,
                            talks_to)  # fmt: skip
            with store.write():
                check_hostports(store, entries)
                store.pods.insert(
                    ovn_port=port,
                    container_id=call.container_id,
                    netns=call.netns,
                    interface_name=host_if,
                    interface_mtu=mtu,
                    ifname=call.ifname,
                    network_name=conf.name,
                    host_mac=link.host_mac,
                    pod_mac=pod_mac,
                    ip_address_v4=alloc[4][0] if 4 in alloc else None,
                    ip_address_v6=alloc[6][0] if 6 in alloc else None,
                    ip_gateway_v4=alloc[4][1] if 4 in alloc else None,
                    ip_gateway_v6=alloc[6][1] if 6 in alloc else None,
                    name=call.args.get("K8S_POD_NAME"),
                    namespace=call.args.get("K8S_POD_NAMESPACE"),
                    uid=call.args.get("K8S_POD_UID"),
                )
                row = store.networks.get(network)
                if row is not None:
                    store.networks.attach_pod(call.container_id, row.id)
                store.pods.insert_portmaps(entries)
            undo.push("removing the rows", lambda: _delete_rows(store, call, entries))
            if entries:
                pending = reconcile.start_add(store, entries, ranges_changed=False)
                reconcile.finish_add(store, pending, call.log.warn)
        except BaseException as err:
            undo.run(err, call.log.warn)
            raise
    return attachment(
        host_if, link.host_mac, call.ifname, pod_mac, call.netns, mtu, alloc, prefixes
    )


def _port(
    store: Store, nb: Ovsdb, call: Call, conf: PodnetConf, chassis: str, requested: str | None,
    undo: Any, deadline: float, routes: Any = None, talks_to: Any = (),
) -> tuple[dict[str, str], str, tuple[str, dict[int, Any], dict[int, int]]]:
    """The pod's logical switch port, its undo pushed: a spare of this node claimed
    (:func:`podnet.ovn.spares.claim_port`; not with a requested MAC, a spare's is fixed), else a
    port made for the attachment (``pn-<network>-pod-<hash>``), after which the node's spares
    are topped up (:func:`podnet.ovn.spares.top_up`) unless the subnet looked full. Both on the
    mirrored network record, re-read when it changed, and only once the network's subnets
    passed :func:`podnet.drivers.ovn_hostports.check_node` on this node (``routes``: the
    node's routes, being read since the ADD began; ``talks_to``: the addresses it talks to,
    :func:`podnet.drivers.ovn_hostports.peers`). The port's
    ``port_security`` is its own MAC and addresses (claimed with them, or set once northd gave
    them: :func:`podnet.ovn.pod_ports.secure_port`). ``(network config, port name, (MAC,
    {family: (address, gateway, subnet)}, {family: prefix}))``
    (:func:`podnet.drivers.ovn_hostports.own`). Errors: 7 a subnet not private or over a route
    of this node, or an address from the NB that is not one; 11 the record kept changing,
    northd assigned nothing in time or changed the addresses meanwhile; 100 no free address
    (after the spares gave theirs back, :func:`podnet.drivers.ovn_hostports.addresses`); 102
    another ADD or node holds a port for this attachment."""
    import functools
    import random

    from podnet.drivers.ovn_hostports import addresses, check_node, fits, own, security
    from podnet.ovn import pod_ports, spares
    from podnet.ovn.ovsdb import Conflict

    network = str(conf.network)
    # podnet-owner: the store's alias, so that a GC of another store on this node leaves it
    owner = link_alias(conf)
    ids = dict(zip(PORT_IDS, (call.container_id, call.ifname, chassis, owner), strict=True))
    known = mirrored(store, network)
    pool = [] if requested else spares.spare_rows(nb, network, chassis)
    port = pod_ports.port_name(network, call.container_id, call.ifname)
    passed: dict[str, str] | None = None  # the config check_node passed (``routes``: read)
    for _ in range(ADD_TRIES):
        known = known or network_record(store, nb, network)
        config = known[0]
        if config != passed:
            check_node(network, config, routes, owner=owner, talks_to=talks_to)
            passed, routes = config, None  # a changed record: the routes are read anew
        ready = []
        for name, text, uuid in pool:
            try:  # a spare's addresses as they will reach the tools, parsed now
                ready.append((name, text, own(config, text.split(), f"port {name}"), uuid))
            except errors.CNIError:
                continue  # not fitting (yet), or not podnet's shape: never claimed
        ready = [r for r in ready if fits(config, r[1].split())]
        # a spare northd could not address (or not in every family) means a full subnet:
        # then no replacement takes an address a pod needs
        refill = 1 if len(ready) == len(pool) <= spares.SPARES else 0
        random.shuffle(ready)  # parallel ADDs on this node try different spares
        try:
            for spare, dynamic, mine, uuid in ready:
                if spares.claim_port(nb, network, spare, dynamic, ids, known[1], refill,
                                    security(mine[0], mine[1]), uuid):  # fmt: skip
                    undo.push(f"deleting port {spare}", functools.partial(
                        pod_ports.delete_port, nb, network, spare))  # fmt: skip
                    return config, spare, mine
            mac = requested or names.random_mac()
            pod_ports.add_port(nb, network, port, mac, chassis, ids, known[1])
            break
        except Conflict:
            known = None
    else:
        raise errors.TryAgainLater(
            f"network {network} changed while this ADD made its port, {ADD_TRIES} times"
        )
    undo.push(f"deleting port {port}", lambda: pod_ports.delete_port(nb, network, port))
    found, gave_back = addresses(nb, network, port, config, chassis, ids, known[1], deadline,
                                 f"port {port}")  # fmt: skip
    mine = own(config, found, f"port {port}")
    try:
        pod_ports.secure_port(nb, network, port, " ".join(found), security(mine[0], mine[1]))
    except Conflict:
        raise errors.TryAgainLater(
            f"northd changed the addresses of port {port} while this ADD secured them"
        ) from None
    if not requested and not gave_back and len(pool) < spares.SPARES:
        spares.top_up(nb, network, chassis, spares.SPARES)
    return config, port, mine


def _delete_rows(store: Store, call: Call, entries: list[PortMapping]) -> None:
    """Undo of the rows: the hostPort elements the kernel may hold first, then the rows."""
    from podnet import reconcile

    reconcile.delete(store, entries, call.container_id, call.log.warn)
    with store.write():
        store.pods.delete(call.container_id)


def _create_pair(link: Any) -> None:
    from podnet.link import veth

    lines = [
        f"link add {link.host_if} mtu {link.mtu} address {link.host_mac} type veth "
        f"peer name {veth.q(link.ifname)} mtu {link.mtu} address {link.pod_mac} "
        f"netns {veth.q(link.netns)}",
        f"link set dev {link.host_if} alias {veth.q(link.alias)}",
        f"link set dev {link.host_if} up",
    ]
    rc, _, err = proc.spawn(["ip", "-batch", "-"], veth.batch(lines), die_with_parent=True).wait()
    if rc != 0:
        if "File exists" in err:
            raise errors.InterfaceExists(
                f"interface {link.ifname} or {link.host_if} already exists"
            )
        raise errors.KernelError(f"failed to create veth {link.host_if}", err.strip())
    try:
        quiet_host_end(link.host_if)
    except BaseException:
        proc.spawn(["ip", "link", "del", link.host_if]).wait()  # before its undo is pushed
        raise


def quiet_host_end(host_if: str) -> None:
    """Keep the node's own IP stack off an OVS port's host end: no ARP answers for the node's
    addresses (``arp_ignore=8``) and no IPv6 on it. With the userspace datapath the kernel also
    sees every frame on the veth; it answered a pod's ARP for the management port's address
    with the veth's MAC, so replies to hostPort connections from 127.0.0.1 bypassed OVS and
    died as martians. KernelError when a setting cannot be written."""
    import os

    from podnet.link import sysctl

    try:
        sysctl.write_path(f"/proc/sys/net/ipv4/conf/{host_if}/arp_ignore", "8")
        ipv6 = f"/proc/sys/net/ipv6/conf/{host_if}/disable_ipv6"
        if os.path.exists(ipv6):  # absent when the node runs without IPv6
            sysctl.write_path(ipv6, "1")
    except OSError as err:
        raise errors.KernelError(f"failed to configure {host_if}", str(err)) from None


def detach(call: Call, conf: StoreConf, network: str) -> None:
    """DEL on an OVN network: the OVS port, the veth, the logical switch port and the rows;
    never fails for what is already gone or for an NB that does not answer (warned; GC later).
    The pod's hostPort elements and rows go as for any podnet pod."""
    from podnet import reconcile
    from podnet.drivers.teardown import flush_udp
    from podnet.link import veth
    from podnet.ovn import pod_ports, vswitch

    host_if = names.host_ifname(call.container_id, call.ifname)
    entries: list[PortMapping] = []
    with open_store(conf) as store, store.write():
        pod = store.pods.get(call.container_id)
        mine = pod is not None and pod.ifname == call.ifname and pod.network_name == conf.name
        if pod is not None and not mine:
            return  # another attachment of the container: not this DEL's
        try:
            bridge = _integration_bridge(store)
            vswitch.del_port(host_if, bridge)
        except CNIError as err:
            call.log.warn(f"removing {host_if} from OVS: {err.msg}")
        if veth.alias_of(host_if) in ("", link_alias(conf)):
            veth.delete_host(host_if)
        try:  # the row's port; without a row, by the attachment on this chassis
            if mine and pod is not None and pod.ovn_port:
                pod_ports.delete_port(_nb(store), network, pod.ovn_port)
            else:
                attachment = (call.container_id, call.ifname, vswitch.chassis().system_id)
                pod_ports.delete_port(_nb(store), network, "", attachment)
        except CNIError as err:
            call.log.warn(f"the port of {call.container_id}/{call.ifname} stays in the NB "
                          f"until a GC: {err.msg}")  # fmt: skip
        if mine:
            rows = store.pods.portmaps(call.container_id)
            entries = reconcile.renderable(rows, call.log.warn)
            reconcile.delete(store, entries, call.container_id, call.log.warn)
            store.pods.delete(call.container_id)
    flush_udp(call, entries)


def check(call: Call, conf: PodnetConf) -> None:
    """CHECK on an OVN network: the row, the host link (this store's), its OVS interface with
    ``iface-id`` = the port and ``ovn-installed``, the logical switch port (``up`` in the NB,
    bound here) and the pod's address on CNI_IFNAME; the first difference is code 103."""
    from podnet.cni.result import prev_result
    from podnet.link import veth
    from podnet.ovn import pod_ports, vswitch

    if prev_result(call.config) is None:
        raise errors.InvalidConfig("prevResult: required for CHECK (the result of the ADD chain)")
    require_netns(call)
    network = str(conf.network)
    host_if = names.host_ifname(call.container_id, call.ifname)
    with open_store(conf) as store:
        pod = store.pods.get(call.container_id)
        nb = _nb(store)
    if pod is None or pod.ifname != call.ifname or pod.network_name != conf.name:
        raise CNIError(f"container {call.container_id} has no podnet attachment {call.ifname} in "
                       f"network {conf.name}", code=errors.UNKNOWN_CONTAINER)  # fmt: skip
    port = pod.ovn_port or pod_ports.port_name(network, call.container_id, call.ifname)
    if veth.alias_of(host_if) != link_alias(conf):
        raise errors.CheckFailed(f"host interface {host_if} is missing or not this store's")
    rows = vswitch.local_db().select("Interface", [["name", "==", host_if]], ["external_ids"])
    ids = rows[0].external_ids if rows else {}
    if ids.get("iface-id") != port:
        raise errors.CheckFailed(f"{host_if} is not the OVS port of {port} "
                                 "(podnetctl network restore puts it back)")  # fmt: skip
    if ids.get("ovn-installed") != "true":
        raise errors.CheckFailed(f"port {port} is not wired on this chassis (ovn-controller)")
    lsp = nb.select("Logical_Switch_Port", [["name", "==", port]], ["up", "dynamic_addresses"])
    if not lsp:
        raise errors.CheckFailed(f"logical switch port {port} is missing from the NB")
    if lsp[0].set("up") != [True]:
        raise errors.CheckFailed(f"logical switch port {port} is not up (not bound; is "
                                 "ovn-northd running?)")
    found = lsp[0].first("dynamic_addresses").split()
    want = [a for a in (pod.ip_address_v4, pod.ip_address_v6) if a]
    if not set(want) <= set(found[1:]):
        raise errors.CheckFailed(f"port {port} has addresses {found[1:]}, the pod {want}")
    rc, out, _ = proc.spawn(["nsenter", f"--net={call.netns}", "ip", "-o", "addr", "show", "dev",
                             call.ifname]).wait()  # fmt: skip
    for address in want:
        if rc != 0 or f" {address}/" not in out:
            raise errors.CheckFailed(f"{call.ifname} in {call.netns} lacks {address}")


def gc_also(call: Call, conf: StoreConf, failures: list[str]) -> None:
    """GC's OVN part, after the rows and veths: this chassis's logical switch ports and OVS
    ports of this store (``podnet-owner``; ports made before it was recorded count as this
    store's) whose attachment is not valid (nor in the store any more); spares stay, but those
    of chassis that stay out of the SB go (:func:`podnet.ovn.orphans.sweep_spares`; an SB that
    does not answer within :data:`SB_TIMEOUT` costs only a warning)."""
    from podnet.cni.netconf import parse_valid_attachments
    from podnet.drivers.cluster import southbound
    from podnet.ovn import nb as nbmod
    from podnet.ovn import orphans, pod_ports, vswitch
    from podnet.ovn.ovsdb import Unreachable

    valid = parse_valid_attachments(call.config)
    alias = link_alias(conf)
    try:
        with open_store(conf) as store:
            nb = _nb(store)
            known = {(str(p.container_id), str(p.ifname)) for p in store.pods.all()}
            bridge = _integration_bridge(store)
        here = vswitch.chassis()
        system_id = here.system_id
        for lsp in pod_ports.ports_of_chassis(nb, system_id):
            ids = lsp.external_ids
            if ids.get(pod_ports.SPARE):
                continue  # the node's spares: no pod's yet
            if ids.get("podnet-owner", alias) != alias:
                continue  # another store's pod on this node (a port without one is older)
            key = (str(ids.get("podnet-container")), str(ids.get("podnet-ifname")))
            if key not in valid and key not in known:
                pod_ports.delete_port(nb, str(ids.get(nbmod.TAG)), lsp.name)
        for row in vswitch.local_db().select("Interface", [], ["name", "external_ids"]):
            ids = row.external_ids
            if ids.get("podnet-owner") == alias and not _link_exists(row.name):
                vswitch.del_port(row.name, bridge)
        try:
            sb = southbound(nb, here.ovn_remote, SB_TIMEOUT)
            chassis, switches = orphans.southbound_view(sb)
        except Unreachable as err:
            call.log.warn(f"spares of chassis gone from the SB stay: {err.msg}")
        else:
            orphans.sweep_spares(nb, chassis, switches, system_id, int(time.time()))
    except CNIError as err:
        failures.append(f"OVN: {err.msg}: {err.details}")


def _link_exists(name: str) -> bool:
    import os

    return os.path.exists(f"/proc/sys/net/ipv4/conf/{name}")


def restore(store: Store, row: Any, owner: str) -> list[str]:
    """``network restore``: this node's pods on OVN network ``row`` back in the integration
    bridge (after OVS lost its ports); a pod whose host end is gone is named, not remade."""
    from podnet.link import veth
    from podnet.ovn import pod_ports

    done = []
    bridge = _integration_bridge(store)
    for container_id, ifname, host_if in store.networks.pods(row.id):
        pod = store.pods.get(container_id)
        port = (pod and pod.ovn_port) or pod_ports.port_name(row.name, container_id, ifname)
        if veth.alias_of(host_if) != owner:
            done.append(f"pod {container_id}: its host end {host_if} is gone (ADD it again)")
            continue
        plug(bridge, host_if, port, owner)
        done.append(f"pod {container_id}: {host_if} in {bridge} as {port}")
    return done


def status(conf: PodnetConf) -> None:
    """STATUS (code 50 naming the cause): the NB answers and has the network, this node's OVS
    is set up for OVN."""
    from podnet.ovn import vswitch

    try:
        with open_store(conf) as store:
            network_record(store, _nb(store), str(conf.network))
        vswitch.chassis()
    except CNIError as err:
        raise errors.Unavailable(err.msg, err.details) from None
