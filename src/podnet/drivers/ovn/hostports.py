"""hostPorts for pods on OVN networks.

A node has no route into an OVN network's subnet: its pods sit behind the integration
bridge. The first ADD with ``portMappings`` on a network gives the node a **management port**
there, as ovn-kubernetes does (``k8s-<node>``):

- a logical switch port ``pn-<network>-mgmt-<hash of the chassis>`` on the internal switch,
  ``"<MAC> dynamic"`` (northd assigns its address like a pod's), ``requested-chassis`` this
  node, ``external_ids`` ``podnet-network`` and ``podnet-mgmt=<system-id>`` (not a pod: GC and
  "in use" pass it by);
- an OVS internal port ``pnm<12 hex of the network>`` on the integration bridge with that
  ``iface-id``, the port's MAC and addresses, the network's MTU, alias ``podnet:<dataDir>``
  (the node's link, podnet's); TX checksum offload off on a ``netdev`` datapath;
  ``ip_forward``/``forwarding`` and ``route_localnet`` as for a pod's host veth.

The hostPort then works as for ptp and bridge pods: the same rows (``portmap_entries``),
conflict checks and ``inet podnet`` map elements; the DNATed packet
leaves through the management port, and ``postrouting`` masquerades every DNATed connection
leaving through a ``pnm*`` link, so the pod's reply comes back through the node (the pod sees
the management port's address as the client). The management port is the node's, like an
uplink's bridge: it stays for later pods and goes with the network (``network restore`` on a
node forgets those of networks deleted elsewhere).
"""

from __future__ import annotations

import hashlib
from typing import Any

from podnet import checked, errors, proc
from podnet.drivers.ovn.addresses import addresses, fits, own, security, subnets
from podnet.firewall.table import MGMT_LINKS
from podnet.link import names
from podnet.ovn import pod_ports, vswitch
from podnet.ovn.ovsdb import Ovsdb
from podnet.ovn.vswitch import Chassis

__all__ = [
    "MGMT_ID", "MGMT_PREFIX", "RESOLV_CONF", "TUNNEL_TYPES", "addresses", "check_node",
    "ensure_mgmt", "fits", "forget_mgmt", "holds", "mgmt_ifname", "mgmt_port", "nameservers",
    "node_peers", "own", "peers", "remove_mgmt", "security", "subnets",
]  # fmt: skip

#: Links podnet makes as management ports; ``postrouting`` masquerades DNAT through them.
MGMT_PREFIX = MGMT_LINKS.rstrip("*")
MGMT_ID = "podnet-mgmt"


#: Where the node's resolver addresses are (resolv.conf(5)).
RESOLV_CONF = "/etc/resolv.conf"
#: OVS interface types of tunnels (ovn-controller makes one per other chassis).
TUNNEL_TYPES = ("geneve", "vxlan", "stt")


def nameservers(path: str = RESOLV_CONF) -> list[tuple[Any, str]]:
    """``(address, why)`` of each ``nameserver`` line of resolv.conf(5) at ``path`` (an IPv6
    zone index dropped); [] when it cannot be read. Lines that are not an address are passed
    by."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                found.append((checked.ip(words[1].partition("%")[0]),
                              f"a nameserver of this node ({path})"))  # fmt: skip
            except checked.BadValue:
                continue
    return found


def _remote_addresses(text: str, what: str) -> list[tuple[Any, str]]:
    """``(address, why)`` of each ``tcp:``/``ssl:`` item of an OVSDB remote list ``text``
    (comma-separated, ovsdb(7)); items without an IP address (``unix:``) are passed by."""
    from podnet.networks import server

    found = []
    for item in text.split(","):
        try:
            remotes = server.remotes(item.strip())
        except ValueError:
            continue
        found += [(r.address, f"{what} ({r.text()})") for r in remotes
                  if r.address is not None]  # fmt: skip
    return found


def peers(nb_remotes: Any = (), chassis: Chassis | None = None, *, tunnels: bool = True,
          resolv_conf: str = RESOLV_CONF) -> list[tuple[Any, str]]:  # fmt: skip
    """The addresses this node talks to whatever its routes say, as ``(address, why)``: the NB
    remotes it uses (``nb_remotes``: OVSDB remote texts, ``network.ovn.northbound_connection``),
    the SB remotes and tunnel endpoint of its ``chassis`` (OVS ``external_ids:ovn-remote``,
    ``ovn-encap-ip``), the tunnel endpoints of the other chassis (``options:remote_ip`` of the
    tunnel interfaces ovn-controller made in the local OVS, when ``tunnels``) and its
    nameservers (:func:`nameservers`). A subnet holding one of them would take that traffic
    into the network when the node reaches it through a default route (:func:`check_node`).
    Unreachable (11) when ``tunnels`` and the local OVS does not answer."""
    found = []
    for text in nb_remotes:
        found += _remote_addresses(str(text), "the OVN northbound database this node uses")
    if chassis is not None:
        found += _remote_addresses(chassis.ovn_remote,
                                   "the OVN southbound database this node uses")  # fmt: skip
        for item in chassis.encap_ip.split(","):
            try:
                found.append((checked.ip(item.strip()), "this node's tunnel endpoint "
                              "(ovn-encap-ip)"))  # fmt: skip
            except checked.BadValue:
                continue
    if tunnels and chassis is not None:
        rows = vswitch.local_db().select(
            "Interface", [["type", "!=", ""], ["type", "!=", "internal"]],
            ["name", "type", "options"],
        )
        for row in rows:
            if row.get("type") not in TUNNEL_TYPES:
                continue
            try:
                address = checked.ip(row.options.get("remote_ip", ""))
            except checked.BadValue:
                continue  # "flow" and the like
            name = row.name
            plain = name.isascii() and name.replace("-", "").replace("_", "").isalnum()
            shown = name if plain and len(name) <= 15 else checked.show(name, 40)
            found.append((address, f"another chassis's tunnel endpoint (OVS interface "
                                   f"{shown})"))  # fmt: skip
    return found + nameservers(resolv_conf)


def node_peers(nb_connection: str) -> list[tuple[Any, str]]:
    """:func:`peers` of this node for NB connection text ``nb_connection``, its chassis read
    from the local OVS (its SB remotes, tunnels); only the NB's and the nameservers when OVS
    is not set up for OVN or does not answer."""
    try:
        chassis: Chassis | None = vswitch.chassis()
    except errors.CNIError:
        chassis = None
    try:
        return peers([nb_connection] if nb_connection else [], chassis)
    except errors.CNIError:
        return peers([nb_connection] if nb_connection else [], chassis, tunnels=False)


def check_node(network: str, config: dict[str, str], started: Any = None, *, owner: str = "",
               talks_to: Any = ()) -> None:  # fmt: skip
    """Refuse (InvalidConfig, 7) to put anything of OVN network ``network`` on this node when
    one of its subnets is not a private range (:func:`podnet.checked.pod_range_problem`),
    holds an address the node talks to (``talks_to``: ``(address, why)``, :func:`peers` — the
    NB it uses, say, reached through the default route, which no route check sees), or
    overlaps a route of this node (:func:`podnet.link.local.routes_over`) other than those on
    its own management link (which carries ``owner``'s alias): the management port's address
    would take that traffic into the network. The message names the address and why, or the
    route. ``started``: the routes being read already
    (:func:`podnet.link.local.start_reading_routes`). KernelError (104) when the routes cannot
    be read."""
    from podnet.link.local import routes_over

    nets = subnets(config)
    for net in nets:
        problem = checked.pod_range_problem(net)
        if problem:
            raise errors.InvalidConfig(f"network {network}: its subnet {problem}")
    clash = routes_over(nets, skip_dev=mgmt_ifname(network), owner=owner,
                        started=started) if nets else []  # fmt: skip
    if clash:
        dst, dev = clash[0]
        mine = next(n for n in nets if n.overlaps(checked.network(dst, strict=False)))
        raise errors.InvalidConfig(
            f"network {network}: its subnet {mine} overlaps this node's route to {dst} (dev "
            f"{dev}); refusing to take that route over"
        )
    held = holds(nets, talks_to)
    if held:
        raise errors.InvalidConfig(f"network {network}: {held}; refusing to take it over")


def holds(nets: Any, talks_to: Any) -> str:
    """"its subnet N holds A, WHY" for the first address of ``talks_to`` (``(address, why)``)
    inside one of ``nets``; "" when none is."""
    for net in nets:
        for address, why in talks_to:
            if address.version == net.version and address in net:
                return f"its subnet {net} holds {address}, {why}"
    return ""


def mgmt_ifname(network: str) -> str:
    """The node's management link on ``network`` (15 characters, an interface name's most)."""
    return MGMT_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:12]


def mgmt_port(network: str, system_id: str) -> str:
    """The logical switch port of ``system_id``'s management port on ``network``."""
    return f"pn-{network}-mgmt-{hashlib.sha256(system_id.encode()).hexdigest()[:12]}"


def ensure_mgmt(
    nb: Ovsdb,
    network: str,
    config: dict[str, str],
    chassis: Chassis,
    bridge: str,
    owner: str,
    deadline: float,
    talks_to: Any = None,
) -> str:
    """The node's management port on ``network`` (see the module), made when missing and
    checked otherwise; returns the link's name. ``talks_to``: :func:`peers`, when read
    already. Errors: 7 a subnet of the network is not a
    private range or overlaps a route of this node, named (:func:`check_node`, before anything
    is made), or the NB gave the port a MAC or address that is not one (:func:`own`); 11 northd
    gave no address in time,
    100 the subnet is full (after the spare ports gave theirs back, :func:`addresses`), 104
    OVS or the kernel refused, or ovn-controller did not wire it
    before ``deadline`` (monotonic seconds)."""
    from podnet.link import sysctl, veth

    dev = mgmt_ifname(network)
    port = mgmt_port(network, chassis.system_id)
    # before anything is made: the port's address takes a route
    talks = peers(nb.remotes, chassis) if talks_to is None else talks_to
    check_node(network, config, owner=owner, talks_to=talks)
    rows = nb.select("Logical_Switch_Port", [["name", "==", port]], ["dynamic_addresses"])
    ids = {MGMT_ID: chassis.system_id}
    if not rows:
        pod_ports.add_port(nb, network, port, names.random_mac(), chassis.system_id, ids)
    found, _ = addresses(nb, network, port, config, chassis.system_id, ids, None, deadline,
                         f"management port {port}")  # fmt: skip
    mac, alloc, prefixes = own(config, found, f"management port {port}")
    existing = veth.alias_of(dev)
    if existing is not None and existing != owner:
        raise errors.KernelError(f"{dev} exists and is not this store's: refusing to use it")
    vswitch.add_port(bridge, dev, {"iface-id": port, "podnet-owner": owner}, internal=True)
    mtu = int(config.get("bridge.mtu") or 1500)
    lines = [
        f"link set dev {dev} address {mac} mtu {mtu}",
        f"link set dev {dev} alias {veth.q(owner)}",
        *(
            f"address replace {a[0]}/{prefixes[f]} dev {dev}" + (" nodad" if f == 6 else "")
            for f, a in sorted(alloc.items())
        ),
        f"link set dev {dev} up",
    ]
    if existing is not None:  # only the port's own addresses stay on the link
        lines[2:2] = [f"address del {a} dev {dev}" for a in _stale(dev, alloc, prefixes)]
    rc, _, err = proc.spawn(["ip", "-batch", "-"], veth.batch(lines)).wait()
    if rc != 0:
        raise errors.KernelError(f"failed to configure management port {dev}", err.strip())
    try:
        sysctl.configure_host_side(dev, alloc)
    except OSError as exc:
        raise errors.KernelError(f"failed to configure management port {dev}", str(exc)) from None
    if chassis.userspace:
        proc.run(["ethtool", "-K", dev, "tx", "off"])
    vswitch.wait_installed(dev, port, deadline)
    return dev


def _stale(dev: str, alloc: dict[int, tuple[str, str, Any]], prefixes: dict[int, int]) -> list[str]:
    """The addresses (``a/len``) on management link ``dev`` other than its port's own
    (``alloc``), link-local ones aside: left from an earlier address of the port. [] when
    ``dev`` does not exist yet."""
    from podnet.cni.fastjson import loads

    rc, out, _ = proc.spawn(["ip", "-j", "addr", "show", "dev", dev]).wait()
    try:
        links = loads(out) if rc == 0 and out.strip() else []
    except ValueError:
        return []
    want = {f"{a[0]}/{prefixes[f]}" for f, a in alloc.items()}
    found = []
    for link in links if isinstance(links, list) else []:
        for info in link.get("addr_info", []) if isinstance(link, dict) else []:
            if not isinstance(info, dict) or info.get("scope") == "link":
                continue
            try:
                iface = checked.interface(f"{info.get('local')}/{info.get('prefixlen')}")
            except checked.BadValue:
                continue
            if str(iface) not in want:
                found.append(str(iface))
    return found


def forget_mgmt(keep: set[str], owner: str) -> list[str]:
    """Remove this node's management links (of store ``owner``) of networks not in ``keep``
    (their switch went with the network); what was removed, as lines."""
    wanted = {mgmt_ifname(n) for n in keep}
    done = []
    for row in vswitch.local_db().select("Interface", [], ["name", "external_ids"]):
        name, ids = row.name, row.external_ids
        if name.startswith(MGMT_PREFIX) and name not in wanted and ids.get("podnet-owner") == owner:
            _remove(name, owner)
            done.append(f"management port {name} removed (its network is gone)")
    return done


def remove_mgmt(network: str, owner: str) -> None:
    """Remove this node's management link on ``network`` if store ``owner`` made it."""
    from podnet.link import veth

    name = mgmt_ifname(network)
    if veth.alias_of(name) == owner:
        _remove(name, owner)


def _remove(name: str, owner: str) -> None:
    from podnet.link import veth

    vswitch.del_port(name)
    if veth.alias_of(name) == owner:
        veth.delete_host(name, owner=owner)
