"""The ``bridge`` driver: pods as ports of a podnet-managed Linux bridge, LXD's bridge network
keys (seed 004; :mod:`podnet.networks.config`). The bridge carries the alias
``podnet:<dataDir>``; a link of its name that is not podnet's is never taken over."""

from __future__ import annotations

from podnet import errors
from podnet.drivers.base import Choice, Driver, link_alias

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.cni.skel import Call
    from podnet.drivers.conf import PodnetConf
    from podnet.store import Store
    from podnet.store.db import Pod
    from podnet.store.networks import NetworkRow


class BridgeDriver(Driver):
    """Pods on the bridge of a ``bridge`` network: an address of each subnet the network has,
    the bridge's own address as gateway, the subnet's prefix on the pod's interface."""

    type = "bridge"
    pair_before_commit = False

    def network_of(self, conf: PodnetConf, store: Store) -> NetworkRow:
        """The conflist's ``network``; 7 when it does not exist or is of another type."""
        net = store.network(conf.network)
        if net is None or net.type != self.type:
            what = ("does not exist" if net is None
                    else f"is a {net.type} network, not a {self.type}")  # fmt: skip
            raise errors.InvalidConfig(
                f"network: {conf.network!r} {what} (podnetctl network create {conf.network})"
            )
        return net

    def bridge_name(self, net: NetworkRow) -> str:
        """The Linux bridge of network ``net``: podnet names it after the network."""
        return net.name

    def choose(self, call: Call, conf: PodnetConf, store: Store,
               requested: dict[int, str]) -> Choice:  # fmt: skip
        """Code 7 when the network does not exist, is of another type or has no address; 100
        when a subnet is full."""
        from podnet.ipam.allocator import allocate_in
        from podnet.networks.config import addresses

        net = self.network_of(conf, store)
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
        for _, _, other in store.network_pods(choice.network_id):
            if other != host_if and bridge.alias_of(other) == owner:
                bridge.attach(other, choice.bridge, owner=owner)

    def default_mtu(self, choice: Choice) -> int:
        """Bytes: the bridge's MTU (the default when it cannot be read)."""
        from podnet.link import mtu

        try:
            return mtu.link_mtu(choice.bridge)
        except OSError:
            return mtu.DEFAULT_MTU

    def prefixes(self, store: Store, pod: Pod) -> tuple[str, dict[int, int]]:
        """The bridge and subnet prefixes of a stored pod of this network (CHECK)."""
        from podnet.networks.config import addresses

        net = next((n for n in store.networks() if n.id == pod.network_id), None)
        if net is None:
            return "", {}
        ifaces = addresses(net.config)
        return self.bridge_name(net), {f: i.network.prefixlen for f, i in ifaces.items()}
