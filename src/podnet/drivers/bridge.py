"""The ``bridge`` driver: pods as ports of a podnet-managed Linux bridge, LXD's bridge network
keys (LXD's ``lxd/network/driver_bridge.go``; :mod:`podnet.networks.config`). The bridge
carries the alias ``podnet:<dataDir>``; a link of its name that is not podnet's is never
taken over."""

from __future__ import annotations

from podnet import checked, errors
from podnet.drivers.base import Choice, link_alias, unknown_network
from podnet.drivers.pods import VethDriver
from podnet.networks.errors import NetworkError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from podnet.checked import Iface, Net
    from podnet.cni.skel import Call
    from podnet.link.bridge import BridgeState
    from podnet.netconf import PodnetConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow
    from podnet.store.pods import Pod


class BridgeDriver(VethDriver):
    """Pods on the bridge of a ``bridge`` network: an address of each subnet the network has,
    the bridge's own address as gateway, the subnet's prefix on the pod's interface."""

    type = "bridge"
    pair_before_commit = False
    creatable = True

    # -- network side ----------------------------------------------------------------------
    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        """LXD's bridge keys and messages (:func:`podnet.networks.config.validate`)."""
        from podnet.networks import config as netconfig

        return netconfig.validate(name, dict(config))

    def settle(self, name: str, config: dict[str, str], taken: Sequence[tuple[Net, str]],
               owner: str, before: Mapping[str, str] | None = None) -> dict[str, str]:  # fmt: skip
        """``auto`` subnets picked clear of ``taken`` and the node's routes (kept on an existing
        network), NAT defaults; 409 when a subnet overlaps another network or range, or a route
        of the node that is not this store's."""
        from podnet.networks import config as netconfig

        if before is not None:
            for family in (4, 6):
                key = f"ipv{family}.address"
                if config.get(key) == "auto" and netconfig.subnet(before, family):
                    config[key] = before[key]  # auto on an existing network keeps its subnet
        config = netconfig.fill_defaults(config, [n for n, _ in taken] + _routes(),
                                         create=before is None)  # fmt: skip
        config = netconfig.validate(name, config)  # uplink keys against the settled subnet
        _check_overlap(name, config, taken)
        _check_routes(name, config, owner, before)
        _check_uplink_routes(name, config, taken, owner, before)
        return config

    def subnets(self, config: Mapping[str, str]) -> dict[int, list[Net]]:
        """The bridge's subnet per family (``ipvN.address``)."""
        from podnet.networks.config import addresses

        out: dict[int, list[Net]] = {4: [], 6: []}
        for family, iface in addresses(config).items():
            out[family].append(iface.network)
        return out

    def users(self, store: Store, row: NetworkRow, *, any_owner: bool = False) -> list[str]:
        """Its pods; with ``any_owner`` (before a delete) also the OVN networks that use it as
        their uplink (:func:`podnet.drivers.ovn.bridge_uplink.ovn_users`), as ``OVN network
        <name>``."""
        from podnet.drivers.ovn import bridge_uplink

        pods = [cid for cid, _, _ in store.networks.pods(row.id)]
        if any_owner and bridge_uplink.is_uplink(row.config):
            pods += [f"OVN network {n}" for n in bridge_uplink.ovn_users(store, row.name)]
        return pods

    def create(self, name: str, config: Mapping[str, str], owner: str) -> Callable[[], object]:
        """The bridge with its addresses and MTU; the undo deletes it unless it was already
        this store's (a leftover). 409 when a link of that name is not podnet's."""
        from podnet.link import bridge
        from podnet.networks.config import addresses

        mine = _ours(name, owner)
        bridge.create(name, list(addresses(config).values()), int(config.get("bridge.mtu", "0")),
                      owner=owner)  # fmt: skip
        undo = (lambda: None) if mine else (lambda: bridge.delete(name, owner=owner))
        try:
            _uplink(name, {}, config, owner)
        except BaseException:
            _uplink(name, config, {}, owner)
            undo()
            raise

        def back() -> None:
            _uplink(name, config, {}, owner)
            undo()

        return back

    def update(self, name: str, before: Mapping[str, str], config: Mapping[str, str],
               owner: str) -> Callable[[], object]:  # fmt: skip
        """New addresses and MTU on the bridge (an unset ``bridge.mtu`` goes back to the
        default, not the last value set); 409 when the bridge is gone."""
        from podnet.link import bridge
        from podnet.networks import config as netconfig

        if not _ours(name, owner):
            raise NetworkError(
                f'The bridge of network "{name}" is gone: run podnetctl network restore', 409
            )
        old = list(netconfig.addresses(before).values())
        new = list(netconfig.addresses(config).values())
        bridge.configure(name, old, new, netconfig.mtu(config), owner=owner)
        try:
            _uplink(name, before, config, owner)
        except BaseException:
            bridge.configure(name, new, old, netconfig.mtu(before), owner=owner)
            raise

        def back() -> None:
            bridge.configure(name, new, old, netconfig.mtu(before), owner=owner)
            _uplink(name, config, before, owner)

        return back

    def delete(self, name: str, owner: str,
               warn: Callable[[str], None] | None) -> Callable[[], object]:  # fmt: skip
        """The bridge, once the rows are gone — only a bridge podnet made: a link of that name
        without this store's mark is left alone (with a warning)."""
        from podnet.link import bridge

        try:
            mine = _ours(name, owner)
        except NetworkError as err:  # a link of that name that is not podnet's
            if warn is not None:
                warn(f"{err}; left it alone")
            mine = False
        if not mine:
            return lambda: None

        def remove() -> None:
            from podnet.drivers.ovn import bridge_uplink

            bridge_uplink.detach(name, owner)
            bridge.delete(name, owner=owner)

        return remove

    def restore(self, store: Store, row: NetworkRow, owner: str) -> list[str]:
        """The bridge with its addresses, and the host ends of its pods' veths back on it.
        One line for the bridge and one per port, each saying what was changed or that it was
        already as the store has it; a pod whose host end is gone is named (a new ADD makes
        it)."""
        from podnet.link import bridge
        from podnet.networks.config import addresses

        want = list(addresses(row.config).values())
        mtu = int(row.config.get("bridge.mtu", "0"))
        try:
            before = bridge.state(row.name, owner)
            bridge.create(row.name, want, mtu, owner=owner)
        except bridge.NotOurs as err:
            return [f"nothing for bridge {row.name}: {err.msg}"]
        done = [f"bridge {row.name}: {_bridge_change(before, want, mtu)}"]
        for _, _, host_if in store.networks.pods(row.id):
            if bridge.alias_of(host_if) != owner:
                done.append(f"  port {host_if}: gone (its pod needs a new ADD)")
            elif bridge.port_of(host_if) == row.name:
                done.append(f"  port {host_if}: already on it")
            else:
                bridge.attach(host_if, row.name, owner=owner)
                done.append(f"  port {host_if}: put back on it")
        return done + _uplink(row.name, {}, row.config, owner, restoring=True)  # pods first

    def status(self, row: NetworkRow, owner: str) -> str:
        """``Created`` while the network's bridge is on the node, this store's and up;
        ``Unavailable`` (LXD's status for a network that cannot start on this server) when it
        is missing, down, or a link of its name is not podnet's."""
        from podnet.link import bridge

        return "Created" if bridge.ours_and_up(row.name, owner) else "Unavailable"

    # -- pod side --------------------------------------------------------------------------

    def bridge_name(self, net: NetworkRow) -> str:
        """The Linux bridge of network ``net``: podnet names it after the network."""
        return net.name

    def choose(self, call: Call, conf: PodnetConf, store: Store, requested: dict[int, str],
               net: NetworkRow | None) -> Choice:  # fmt: skip
        """An address of each subnet of network ``net`` (the conflist's, loaded by the plugin);
        7 when it is missing or has no address; 100 when a subnet is full."""
        from podnet.ipam.allocator import allocate_in
        from podnet.networks.config import addresses

        if net is None:
            raise unknown_network(conf)
        ifaces = addresses(net.config)
        if not ifaces:
            raise errors.InvalidConfig(f"network: {conf.network!r} has no IPv4 or IPv6 address")
        gateways = {i.network: str(i.ip) for i in ifaces.values()}
        alloc = allocate_in(store, list(gateways), requested, gateways=gateways)
        return Choice(alloc, bridge=self.bridge_name(net), network_id=net.id,
                      prefixes={f: i.network.prefixlen for f, i in ifaces.items()},
                      bridge_addresses=list(ifaces.values()),
                      mtu=int(net.config.get("bridge.mtu", "0")))  # fmt: skip

    def before_pair(self, call: Call, conf: PodnetConf, store: Store, choice: Choice,
                    host_if: str) -> None:  # fmt: skip
        """A pod joins a bridge that a reboot (or a cleanup) removed: bring it back first, with
        the network's addresses, and put the other pods of the network back on it — their host
        ends were released when the bridge went (``podnetctl network restore`` does the same
        for every network). KernelError (104) when a link of the bridge's name is not podnet's
        (:class:`podnet.link.bridge.NotOurs`)."""
        from podnet.link import bridge

        owner = link_alias(conf)
        if bridge.require_ours(choice.bridge, owner):
            return
        bridge.create(choice.bridge, choice.bridge_addresses, choice.mtu, owner=owner)
        assert choice.network_id is not None
        for _, _, other in store.networks.pods(choice.network_id):
            if other != host_if and bridge.alias_of(other) == owner:
                bridge.attach(other, choice.bridge, owner=owner)

    def default_mtu(self, choice: Choice) -> int:
        """Bytes: the bridge's MTU (the default when it cannot be read)."""
        from podnet.link import mtu

        try:
            return mtu.link_mtu(choice.bridge)
        except OSError:
            return mtu.DEFAULT_MTU

    def prefixes(self, net: NetworkRow | None, pod: Pod) -> tuple[str, dict[int, int]]:
        """The bridge and subnet prefixes of a stored pod of network ``net`` (CHECK); ("", {})
        when the pod is not on ``net`` (the conflist was given another network since)."""
        from podnet.networks.config import addresses

        if net is None or net.id != pod.network_id:
            return "", {}
        ifaces = addresses(net.config)
        return self.bridge_name(net), {f: i.network.prefixlen for f, i in ifaces.items()}


def _bridge_change(before: BridgeState | None, want: Sequence[Iface], mtu: int) -> str:
    """What ``network restore`` changed on a bridge that was ``before`` (None: missing) to give
    it addresses ``want`` and ``mtu`` (0: any), as one phrase."""
    shown = ", ".join(str(a) for a in want) or "no address"
    if before is None:
        return f"made again ({shown})"
    changes = []
    added = [str(a) for a in want if a not in before.addresses]
    if added:
        changes.append(f"added {', '.join(added)}")
    if mtu and before.mtu != mtu:
        changes.append(f"MTU {before.mtu} set to {mtu}")
    if not before.up:
        changes.append("set up")
    return "; ".join(changes) if changes else f"already up with its addresses ({shown})"


def _uplink(name: str, before: Mapping[str, str], config: Mapping[str, str],
            owner: str, *, restoring: bool = False) -> list[str]:  # fmt: skip
    """Bridge ``name`` as an OVN uplink going from ``before`` to ``config``
    (:mod:`podnet.drivers.ovn.bridge_uplink`): its routes, joined to OVS when it becomes an uplink
    (or is restored as one), detached when it stops being one. What was done."""
    from podnet.drivers.ovn import bridge_uplink

    bridge_uplink.sync_routes(name, before, config)
    try:
        if bridge_uplink.is_uplink(config):
            return bridge_uplink.attach(name, config, owner)
        if bridge_uplink.is_uplink(before):
            bridge_uplink.detach(name, owner)
    except BaseException:
        if not restoring:  # a change: the routes as they were (a restore keeps the network's)
            bridge_uplink.sync_routes(name, config, before)
        raise
    return []


def _ours(name: str, owner: str) -> bool:
    """Whether a bridge ``name`` exists and carries ``owner``'s mark (a leftover of a network of
    this store); NetworkError 409 when a link of that name is not podnet's."""
    from podnet.link import bridge

    try:
        return bridge.require_ours(name, owner)
    except bridge.NotOurs as err:
        raise NetworkError(err.msg, 409) from None


def _check_routes(name: str, config: Mapping[str, str], owner: str,
                  before: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """409 when a subnet new to the network overlaps a route of the node that is not this
    store's (:func:`podnet.link.local.foreign_routes`): the bridge would take the traffic of
    hosts the node already reaches."""
    from podnet.link.local import foreign_routes
    from podnet.networks import config as netconfig

    new = [n for f in (4, 6) if (n := netconfig.subnet(config, f)) is not None
           and (before is None or netconfig.subnet(before, f) != n)]  # fmt: skip
    clash = foreign_routes(new, owner) if new else []
    if clash:
        dst, dev = clash[0]
        raise NetworkError(
            f'Invalid value for network "{name}": its subnet overlaps the route to {dst} '
            f"(dev {dev}) of the node",
            409,
        )


def _check_uplink_routes(name: str, config: Mapping[str, str], taken: Sequence[tuple[Net, str]],
                         owner: str, before: Mapping[str, str] | None) -> None:  # fmt: skip
    """409 when a route of ``ipvN.routes`` overlaps another network's subnet or a range, or a
    new one a route of the node that is not this store's: the route onto this bridge would
    take their traffic."""
    from podnet.link.local import foreign_routes
    from podnet.networks import config as netconfig

    for family in (4, 6):
        key = f"ipv{family}.routes"
        listed = netconfig.routes(config[key], family) if config.get(key) else []
        kept = netconfig.routes(before[key], family) if before and before.get(key) else []
        fresh = [n for n in listed if n not in kept]
        held = [(str(r), holder) for r in listed for other, holder in taken
                if other.version == family and r.overlaps(other)]  # fmt: skip
        for dst, dev in foreign_routes(fresh, owner) if fresh else []:
            mine = next(r for r in fresh if r.overlaps(checked.network(dst, strict=False)))
            held.append((str(mine), f"the route to {dst} (dev {dev}) of the node"))
        if held:
            raise NetworkError(
                f'Invalid value for network "{name}" option "{key}": {held[0][0]} overlaps '
                f"{held[0][1]}",
                409,
            )


def _check_overlap(name: str, config: Mapping[str, str],
                   taken: Sequence[tuple[Net, str]]) -> None:  # fmt: skip
    from podnet.networks import config as netconfig

    for family in (4, 6):
        net = netconfig.subnet(config, family)
        if net is None:
            continue
        for other, holder in taken:
            if other.version == family and net.overlaps(other):
                raise NetworkError(
                    f'Invalid value for network "{name}" option "ipv{family}.address": '
                    f"subnet {net} overlaps {holder}",
                    409,
                )


def _routes() -> list[Net]:
    """Destinations the node already routes (``auto`` must not pick one of them)."""
    from podnet import proc
    from podnet.cni.fastjson import loads

    out: list[Net] = []
    for family in ("-4", "-6"):
        try:
            rc, text, _ = proc.spawn(["ip", "-j", family, "route", "show"]).wait()
            routes = loads(text) if rc == 0 and text.strip() else []
        except (ValueError, Exception):  # noqa: BLE001 - a best-effort hint only
            continue
        for route in routes if isinstance(routes, list) else []:
            dst = route.get("dst") if isinstance(route, dict) else None
            if isinstance(dst, str) and dst != "default":
                try:
                    out.append(checked.network(dst, strict=False))
                except checked.BadValue:
                    pass
    return out
