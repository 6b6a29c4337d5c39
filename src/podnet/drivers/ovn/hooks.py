"""The ``ovn`` network type's hooks into the pod pipeline every driver shares
(:mod:`podnet.drivers.pods`); ovn-kubernetes' CNI server and LXD's ``lxd/network/driver_ovn.go``
(``InstanceDevicePortAdd``) do the same steps.

ADD, each step's undo on the pipeline's stack:

1. :func:`prepare`, before the write transaction: the pod's logical switch port on the
   network's internal switch — one of this node's spare ports claimed (addresses and binding
   ready, so no northd recompute is waited for), else ``pn-<network>-pod-<hash of
   container/ifname>`` made for it, ``"<MAC> dynamic"`` (northd assigns the addresses, unique on
   every node even when all ADD at once) and ``requested-chassis`` this node, and its addresses
   waited for (:func:`podnet.drivers.ovn.pods.claim`);
2. :func:`choose`, inside it: those addresses, the network's ``bridge.mtu`` and the port's MAC
   for the pod; the row records the port;
3. the pipeline's veth pair (host end ``pn<13 hex>``, alias ``podnet:<dataDir>``, an OVS port:
   the node's stack kept off it), the pod end addressed with the subnet's prefix and a default
   route via the router;
4. :func:`after_pair`: the host end into the integration bridge with ``external_ids:iface-id``
   = the port, TX checksum offload off on both ends where the datapath is userspace
   (``netdev``: OVS does not finish offloaded checksums there, and TCP stalls), then
   ``external_ids:ovn-installed=true`` waited for (ovn-controller has wired the port on this
   chassis, as ovn-kubernetes waits), under the call's deadline; with hostPorts, the node's
   management port (:func:`podnet.drivers.ovn.hostports.ensure_mgmt`).

DEL (:func:`release`, after the pipeline removed the veth and the rows): the OVS port and the
logical switch port (the row's; without a row, found by its attachment's ``external_ids``);
an NB that does not answer only costs a warning (GC removes the port later).
"""

from __future__ import annotations

import time

from podnet import errors, proc
from podnet.drivers.base import Choice, Driver, link_alias, refuse_existing
from podnet.drivers.ovn.pods import WAIT, claim, gc_also, integration_bridge, nb_of, plug, status
from podnet.drivers.teardown import names_this
from podnet.errors import CNIError
from podnet.link import names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.link.veth import PodLink
    from podnet.netconf import PodnetConf, StoreConf
    from podnet.ovn.ovsdb import Ovsdb
    from podnet.ovn.vswitch import Chassis
    from podnet.store import Store
    from podnet.store.networks import NetworkRow
    from podnet.store.pods import Pod
    from podnet.undo import Undo


class OvnPodSide(Driver):
    """The pod side of the ``ovn`` driver (:class:`podnet.drivers.ovn.driver.OvnDriver`): the hooks
    of the shared pipeline, this module's steps."""

    takes_pods = True
    checks_table = False  # the network's router masquerades, not podnet's table
    early_ip = False  # the port's claim comes first
    requested_ips = False  # northd assigns the addresses

    def __init__(self) -> None:
        self._claimed: dict[str, Claimed] = {}  # container → what prepare claimed for its ADD

    def prepare(self, call: Call, conf: PodnetConf, store: Store, undo: Undo,
                net: NetworkRow | None) -> None:  # fmt: skip
        """The pod's logical switch port, claimed or made (:func:`prepare`)."""
        self._claimed[call.container_id] = prepare(call, conf, store, undo, net)

    def choose(self, call: Call, conf: PodnetConf, store: Store, requested: dict[int, str],
               net: NetworkRow | None) -> Choice:  # fmt: skip
        """The claimed port's addresses and MAC; the row records the port (:func:`choose`)."""
        return choose(self._claimed[call.container_id], conf, store, net)

    def pod_mtu(self, conf: PodnetConf, choice: Choice) -> int:
        """Bytes: the network's ``bridge.mtu`` (the overlay's; a NetConf's ``mtu`` is not
        used)."""
        return choice.mtu

    def after_pair(self, call: Call, conf: PodnetConf, link: PodLink, choice: Choice,
                   undo: Undo) -> None:  # fmt: skip
        """The host end into the integration bridge, ``ovn-installed`` waited for
        (:func:`after_pair`)."""
        after_pair(self._claimed.pop(call.container_id), conf, link, undo)

    def release(self, call: Call, conf: StoreConf, store: Store, pod: Pod | None,
                network: str | None) -> None:  # fmt: skip
        """The OVS port and the logical switch port (:func:`release`)."""
        release(call, conf, store, pod, network)

    def check_attachment(self, call: Call, conf: PodnetConf, store: Store, pod: Pod,
                         net: NetworkRow | None) -> None:  # fmt: skip
        """OVS and the NB as ADD left them (:func:`check_attachment`)."""
        check_attachment(call, conf, store, pod)

    def status_also(self, call: Call, conf: PodnetConf) -> None:
        """STATUS: the NB answers and has the network; this node's OVS is set up for OVN
        (:func:`podnet.drivers.ovn.pods.status`)."""
        status(conf)

    def gc_also(self, call: Call, conf: StoreConf, failures: list[str]) -> None:
        """GC's OVN part (:func:`podnet.drivers.ovn.pods.gc_also`)."""
        gc_also(call, conf, failures)


class Claimed:
    """What :func:`prepare` claimed for one ADD: the network's ``config``, the logical switch
    ``port``, the pod's ``mac``, ``alloc`` (``{family: (address, gateway, subnet)}``),
    ``prefixes``, and for the later steps the NB, this ``chassis``, the integration ``bridge``,
    the addresses the node talks to and the call's ``deadline`` (monotonic seconds)."""

    __slots__ = ("config", "port", "mac", "alloc", "prefixes", "nb", "chassis", "bridge",
                 "talks_to", "deadline")  # fmt: skip

    def __init__(self, config: dict[str, str], port: str, mine: tuple[str, Any, Any],
                 nb: Ovsdb, chassis: Chassis, bridge: str, talks_to: Any,
                 deadline: float) -> None:  # fmt: skip
        self.config, self.port = config, port
        self.mac, self.alloc, self.prefixes = mine
        self.nb, self.chassis, self.bridge = nb, chassis, bridge
        self.talks_to, self.deadline = talks_to, deadline


def prepare(call: Call, conf: PodnetConf, store: Store, undo: Undo,
            net: NetworkRow | None) -> Claimed:  # fmt: skip
    """Step 1 (see the module), outside the write lock. Errors: 7 bad config, OVS not set up
    for OVN, a subnet not private or over a route of this node; 11 NB unreachable (naming it),
    the network's record kept changing, northd assigned nothing in time; 100 no free address;
    102 the container already has an attachment, or another ADD holds its port."""
    from podnet.cni.netconf import parse_requested_mac
    from podnet.drivers.ovn.hostports import peers
    from podnet.link.local import start_reading_routes
    from podnet.ovn import vswitch

    deadline = time.monotonic() + min(WAIT, proc.Limits.timeout)
    chassis = vswitch.chassis()
    requested = parse_requested_mac(call.config, call.args)
    # the node's routes, read while the NB is asked (checked before the port is taken)
    routes = start_reading_routes()
    undo.push("reaping ip", routes.reap)
    refuse_existing(store, call.container_id)
    nb = nb_of(store)
    talks_to = peers(nb.remotes, chassis)  # checked with the routes
    config, port, mine = claim(store, nb, call, conf, chassis.system_id, requested, undo,
                               deadline, routes, talks_to, net)  # fmt: skip
    return Claimed(config, port, mine, nb, chassis, integration_bridge(store), talks_to,
                   deadline)  # fmt: skip


def choose(claimed: Claimed, conf: PodnetConf, store: Store, net: NetworkRow | None) -> Choice:
    """Step 2, inside the write transaction: the claimed port's addresses and MAC, the
    network's ``bridge.mtu`` (1500 unset), the OVS layout."""
    if net is None:
        net = store.networks.get(str(conf.network))
    return Choice(claimed.alloc, network_id=None if net is None else net.id,
                  prefixes=claimed.prefixes, mtu=int(claimed.config.get("bridge.mtu") or 1500),
                  pod_mac=claimed.mac, port=claimed.port, ovs=True,
                  tx_off=claimed.chassis.userspace)  # fmt: skip


def after_pair(claimed: Claimed, conf: PodnetConf, link: PodLink, undo: Undo) -> None:
    """Step 4, after the pod end is configured. Errors: 104 OVS failure, or the port not wired
    by ovn-controller within the deadline (naming it); the management port's."""
    from podnet.drivers.ovn.hostports import ensure_mgmt
    from podnet.ovn import vswitch

    host_if, bridge, port = link.host_if, claimed.bridge, claimed.port
    tx_off = None
    if claimed.chassis.userspace:
        tx_off = proc.spawn(["ethtool", "-K", host_if, "tx", "off"], die_with_parent=True)
        undo.push("reaping ethtool", tx_off.reap)
    plug(bridge, host_if, port, link.alias)
    undo.push(f"removing {host_if} from {bridge}", lambda: vswitch.del_port(host_if, bridge))
    if tx_off is not None:
        tx_off.check()
    vswitch.wait_installed(host_if, port, claimed.deadline)
    if conf.port_mappings:  # hostPorts reach the pod through this node's management port
        ensure_mgmt(claimed.nb, str(conf.network), claimed.config, claimed.chassis, bridge,
                    link.alias, claimed.deadline, claimed.talks_to)  # fmt: skip


def release(call: Call, conf: StoreConf, store: Store, pod: Pod | None,
            network: str | None) -> None:  # fmt: skip
    """DEL's OVN part, once the veth and the rows are gone: the OVS port and the logical switch
    port of this attachment; nothing when the container's row is another attachment's. Never
    fails: what cannot be removed is warned about (a GC removes it later)."""
    from podnet.ovn import pod_ports, vswitch

    if not network or (pod is not None and not names_this(pod, call, conf)):
        return
    host_if = names.host_ifname(call.container_id, call.ifname)
    try:
        vswitch.del_port(host_if, integration_bridge(store))
    except CNIError as err:
        call.log.warn(f"removing {host_if} from OVS: {err.msg}")
    try:  # the row's port; without a row, by the attachment on this chassis
        if pod is not None and pod.ovn_port:
            pod_ports.delete_port(nb_of(store), network, pod.ovn_port)
        else:
            attachment = (call.container_id, call.ifname, vswitch.chassis().system_id)
            pod_ports.delete_port(nb_of(store), network, "", attachment)
    except CNIError as err:
        call.log.warn(f"the port of {call.container_id}/{call.ifname} stays in the NB "
                      f"until a GC: {err.msg}")  # fmt: skip


def check_attachment(call: Call, conf: PodnetConf, store: Store, pod: Pod) -> None:
    """CHECK of an OVN pod (``pod``: its row): the host link (this store's), its OVS interface
    with ``iface-id`` = the port and ``ovn-installed``, the logical switch port (``up`` in the
    NB, bound here) and the pod's address on CNI_IFNAME; the first difference is code 103."""
    from podnet.link import veth
    from podnet.ovn import pod_ports, vswitch

    network = str(conf.network)
    host_if = names.host_ifname(call.container_id, call.ifname)
    nb = nb_of(store)
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
        raise errors.CheckFailed(
            f"logical switch port {port} is not up (not bound; is ovn-northd running?)"
        )
    found = lsp[0].first("dynamic_addresses").split()
    want = [a for a in (pod.ip_address_v4, pod.ip_address_v6) if a]
    if not set(want) <= set(found[1:]):
        raise errors.CheckFailed(f"port {port} has addresses {found[1:]}, the pod {want}")
    rc, out, _ = proc.spawn(["nsenter", f"--net={call.netns}", "ip", "-o", "addr", "show", "dev",
                             call.ifname]).wait()  # fmt: skip
    for address in want:
        if rc != 0 or f" {address}/" not in out:
            raise errors.CheckFailed(f"{call.ifname} in {call.netns} lacks {address}")
