"""Pods on OVN networks: the logical switch port of a pod (claimed or made by
:func:`claim`), the OVS side of a node's pods (:func:`plug`, :func:`restore`), and the
``podnet`` plugin's GC and STATUS for an ``ovn`` network. The ADD, DEL and CHECK steps are the
shared pipeline's with the hooks of :mod:`podnet.drivers.ovn.hooks`.
"""

from __future__ import annotations

import time
from typing import Any

from podnet import errors
from podnet.drivers.base import link_alias, open_store
from podnet.errors import CNIError
from podnet.link import names
from podnet.link.veth import quiet_host_end as quiet_host_end  # bridge uplinks use it too

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.cni.skel import Call
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.store import Store
    from podnet.store.networks import NetworkRow

#: Seconds an ADD waits for northd's addresses and for ovn-controller, at most (and never past
#: the tools' deadline).
WAIT = 10.0
#: Seconds GC waits for each SB remote (the spares' sweep is optional; a GC never hangs on it).
SB_TIMEOUT = 2.0
PORT_IDS = ("podnet-container", "podnet-ifname", "podnet-chassis", "podnet-owner")


def nb_of(store: Store) -> Ovsdb:
    """The NB of the server config; 7 when none is configured."""
    from podnet.drivers.ovn import cluster

    nb = cluster.connect(store.config.all(), store.path)
    if nb is None:
        raise errors.InvalidConfig(
            "network: an ovn network needs network.ovn.northbound_connection"
        )
    return nb


#: Attempts of an ADD to make its port while the network's record changes under it.
ADD_TRIES = 3


def mirrored(store: Store, name: str,
             row: NetworkRow | None = None) -> tuple[dict[str, str], str] | None:  # fmt: skip
    """OVN network ``name`` as this node's store mirrors it: its config and the registry record
    it was mirrored from (:meth:`podnet.ovn.nb.Record.dumps`); None when not mirrored. ``row``: the
    network's row when the caller has read it already. An ADD
    makes its port on the condition that the NB still holds that record
    (:func:`podnet.ovn.pod_ports.add_port`), so it need not read the registry, whose size grows with
    the cluster's forwards."""
    from podnet.ovn import nb as nbmod

    if row is None or row.name != name:
        row = store.networks.get(name)
    if row is None or row.type != "ovn":
        return None
    config = dict(row.config)
    return config, nbmod.Record("ovn", row.description, config).dumps()


def network_record(store: Store, nb: Ovsdb, name: str) -> tuple[dict[str, str], str]:
    """The OVN network's config from the NB, mirrored into the node's store (the node's
    ``networks`` table: the node's view), and its record's text as the NB holds it (for
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


def integration_bridge(store: Store) -> str:
    """The name of this node's OVS integration bridge (the server config's)."""
    from podnet.networks import server

    return server.effective(store.config.all())[server.INTEGRATION_BRIDGE]


def plug(bridge: str, host_if: str, port: str, owner: str) -> None:
    """Put ``host_if`` into OVS ``bridge`` as logical switch port ``port`` (``iface-id``),
    marked ``podnet-owner`` (GC's); idempotent."""
    from podnet.ovn import vswitch

    vswitch.add_port(bridge, host_if, {"iface-id": port, "podnet-owner": owner})


def claim(
    store: Store, nb: Ovsdb, call: Call, conf: PodnetConf, chassis: str, requested: str | None,
    undo: Any, deadline: float, routes: Any = None, talks_to: Any = (),
    net: NetworkRow | None = None,
) -> tuple[dict[str, str], str, tuple[str, dict[int, Any], dict[int, int]]]:
    """The pod's logical switch port, its undo pushed: a spare of this node claimed
    (:func:`podnet.ovn.spares.claim_port`; not with a requested MAC, a spare's is fixed), else a
    port made for the attachment (``pn-<network>-pod-<hash>``), after which the node's spares
    are topped up (:func:`podnet.ovn.spares.top_up`) unless the subnet looked full. Both on the
    mirrored network record, re-read when it changed, and only once the network's subnets
    passed :func:`podnet.drivers.ovn.hostports.check_node` on this node (``routes``: the
    node's routes, being read since the ADD began; ``talks_to``: the addresses it talks to,
    :func:`podnet.drivers.ovn.hostports.peers`). The port's
    ``port_security`` is its own MAC and addresses (claimed with them, or set once northd gave
    them: :func:`podnet.ovn.pod_ports.secure_port`). ``(network config, port name, (MAC,
    {family: (address, gateway, subnet)}, {family: prefix}))``
    (:func:`podnet.drivers.ovn.hostports.own`). Errors: 7 a subnet not private or over a route
    of this node, or an address from the NB that is not one; 11 the record kept changing,
    northd assigned nothing in time or changed the addresses meanwhile; 100 no free address
    (after the spares gave theirs back, :func:`podnet.drivers.ovn.hostports.addresses`); 102
    another ADD or node holds a port for this attachment."""
    import functools
    import random

    from podnet.drivers.ovn.hostports import addresses, check_node, fits, own, security
    from podnet.ovn import pod_ports, spares
    from podnet.ovn.ovsdb import Conflict

    network = str(conf.network)
    # podnet-owner: the store's alias, so that a GC of another store on this node leaves it
    owner = link_alias(conf)
    ids = dict(zip(PORT_IDS, (call.container_id, call.ifname, chassis, owner), strict=True))
    known = mirrored(store, network, net)
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


def gc_also(call: Call, conf: StoreConf, failures: list[str]) -> None:
    """GC's OVN part, after the rows and veths: this chassis's logical switch ports and OVS
    ports of this store (``podnet-owner``; ports made before it was recorded count as this
    store's) whose attachment is not valid (nor in the store any more); spares stay, but those
    of chassis that stay out of the SB go (:func:`podnet.ovn.orphans.sweep_spares`; an SB that
    does not answer within :data:`SB_TIMEOUT` costs only a warning)."""
    from podnet.cni.netconf import parse_valid_attachments
    from podnet.drivers.ovn.cluster import southbound
    from podnet.ovn import nb as nbmod
    from podnet.ovn import orphans, pod_ports, vswitch
    from podnet.ovn.ovsdb import Unreachable

    valid = parse_valid_attachments(call.config)
    alias = link_alias(conf)
    try:
        with open_store(conf) as store:
            nb = nb_of(store)
            known = {(str(p.container_id), str(p.ifname)) for p in store.pods.all()}
            bridge = integration_bridge(store)
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
    bridge = integration_bridge(store)
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
            network_record(store, nb_of(store), str(conf.network))
        vswitch.chassis()
    except CNIError as err:
        raise errors.Unavailable(err.msg, err.details) from None
