"""The processes one ADD has started and not yet waited for, and their undo
(:func:`podnet.drivers.pods.attach`'s overlapped steps)."""

from __future__ import annotations

from podnet.errors import CNIError
from podnet.proc import ToolTimeout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.cni.skel import Call
    from podnet.link.veth import PodLink
    from podnet.proc import Spawned
    from podnet.reconcile import Pending
    from podnet.store import Store
    from podnet.values import PortMapping


class InFlight:
    """The processes one ADD has started and not yet waited for, and their undo.

    ``host_tool``: the node-side ``ip``, started before the store opens (its exec overlaps the
    allocation) and fed the pair's commands later; ``nft``: the hostPort elements being
    published; ``configuring``: the pod end's ``ip`` in its netns. ``published`` is what the
    kernel holds of the hostPorts: [] before nft ran, None when unknown."""

    __slots__ = ("host_tool", "pair", "nft", "published", "configuring")

    def __init__(self, host_tool: Spawned | None) -> None:
        self.host_tool = host_tool
        self.pair: Spawned | None = None
        self.nft: Pending | None = None
        self.published: list[PortMapping] | None = []
        self.configuring: Spawned | None = None

    def ask_mtu(self, ifname: str) -> int | None:
        """Bytes: the MTU of node link ``ifname``, asked of the ``ip`` not fed yet (replaced
        when the query ends it, :func:`podnet.link.veth.ask_mtu`)."""
        from podnet.link import veth

        assert self.host_tool is not None
        found, self.host_tool = veth.ask_mtu(self.host_tool, ifname)
        return found

    def start_pair(self, link: PodLink) -> None:
        """Feed the node-side ``ip`` the pair's commands."""
        from podnet.link import veth

        self.pair = veth.start_create_pair(link, self.host_tool)

    def wait_pair(self, link: PodLink, store: Store) -> None:
        """The pair made, or 102/104 (a leftover of this store no row holds is cleared)."""
        from podnet.link import veth

        created, self.pair = self.pair, None
        assert created is not None
        veth.finish_create_pair(link, created, stale=lambda dev: not store.pods.interface_used(dev))

    def start_nft(self, store: Store, entries: list[PortMapping], *, ranges_changed: bool,
                  table: bool) -> bool:  # fmt: skip
        """Start publishing ``entries`` (:func:`podnet.reconcile.start_add`; none and not
        ``table``: nothing); whether the store may be detached meanwhile (no rebuild due)."""
        from podnet import reconcile

        if not entries and not table and not ranges_changed:
            return True
        self.nft = reconcile.start_add(store, entries, ranges_changed=ranges_changed)
        return not self.nft.rebuild

    def wait_nft(self, store: Store, entries: list[PortMapping], call: Call) -> None:
        """Wait for :meth:`start_nft` (a rebuild when due); ``published`` follows."""
        from podnet import reconcile

        done, self.nft = self.nft, None
        if done is None:
            return
        try:
            reconcile.finish_add(store, done, call.log.warn)
        except BaseException as err:
            # a failed nft run changed nothing (one transaction); one killed at its deadline
            # may have committed before it hung
            self.published = None if isinstance(err, ToolTimeout) else []
            raise
        self.published = entries

    def start_configure(self, link: PodLink, *, tx_off: bool) -> None:
        from podnet.link import veth

        self.configuring = veth.start_configure_pod(link, tx_off=tx_off)

    def wait_configure(self, link: PodLink) -> None:
        from podnet.link import veth

        configuring, self.configuring = self.configuring, None
        if configuring is not None:
            veth.finish_configure_pod(link, configuring)

    def held(self, entries: list[PortMapping]) -> list[PortMapping]:
        """Which hostPort elements the kernel may hold now. An nft run still in flight (the
        veth failed first) is waited for — published only if it succeeded; when unknown, the
        kernel is asked (all of them when nft cannot even list them)."""
        from podnet import reconcile
        from podnet.firewall import nft

        pending = self.nft
        if pending is not None:
            if pending.spawned is None or pending.rebuild:
                return []
            try:
                return entries if nft.outcome(pending.spawned).ok else []
            except CNIError:
                self.published = None
        if self.published is not None:
            return self.published
        try:
            return reconcile.published(entries)
        except CNIError:
            return entries

    def undo_pair(self, host_if: str, alias: str) -> None:
        """Undo of the pair: let its ``ip`` runs finish, then delete the host end (if ours)."""
        from podnet.link import veth

        for busy in (self.pair, self.configuring):
            if busy is not None:
                try:
                    busy.wait()
                except CNIError:
                    pass
        self.pair = self.configuring = None
        veth.delete_host(host_if, owner=alias)
