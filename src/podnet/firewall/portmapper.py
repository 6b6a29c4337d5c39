"""podnet-portmap's two backends behind one interface (upstream portmap's ``PortMapper``):
``iptables`` (the reference layout, :mod:`podnet.firewall.portmap_iptables`) and ``nftables``
(verdict maps, :mod:`podnet.firewall.portmap_nft`). The plugin picks one by the ``backend`` key
and calls the same five methods whatever it is.

Both serialise their read-modify-write of the shared tables with an flock
(:data:`LOCK_PATH`): two ADDs that both saw no CNI-HOSTPORT-DNAT would otherwise both declare
it, and under --noflush the second declaration flushes the first's rules (likewise for nft's
listing). Every failure is a :class:`~podnet.errors.KernelError` (104) with the tool's text.
"""

from __future__ import annotations

from podnet.errors import CheckFailed, KernelError
from podnet.firewall import iptables

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from podnet.firewall.portmap_iptables import PortmapOptions
    from podnet.values import ContainerNet, PortMappingArg

    class PortMapper(Protocol):
        """What a backend does for one network (``name``) and its options."""

        def setup(self, container_id: str, nets: Sequence[ContainerNet],
                  mappings: Sequence[PortMappingArg]) -> None: ...  # fmt: skip

        def teardown(self, container_id: str) -> list[int]:
            """Remove the container's rules; the families (4, 6) that were looked at."""
            ...

        def check(self, container_id: str, nets: Sequence[ContainerNet],
                  mappings: Sequence[PortMappingArg]) -> None: ...  # fmt: skip

        def gc(self, valid: set[str]) -> None: ...

        def status(self) -> None: ...


LOCK_PATH = "/run/podnet/portmap.lock"


class TableLock:
    """An exclusive flock on :data:`LOCK_PATH`, held from reading the rules to applying the
    change."""

    def __enter__(self) -> None:
        import fcntl
        import os

        try:
            os.makedirs(os.path.dirname(LOCK_PATH), mode=0o755, exist_ok=True)
            self.fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as err:
            raise KernelError(f"cannot open lock file {LOCK_PATH}", str(err)) from err
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        import os

        os.close(self.fd)  # releases the lock


class _Backend:
    """What both backends hold: the network's name and podnet-portmap's options."""

    def __init__(self, network: str, options: PortmapOptions) -> None:
        self.network = network
        self.options = options


class IptablesMapper(_Backend):
    """The reference portmap's nat-table layout, one ``iptables-restore`` per family."""

    def setup(self, container_id: str, nets: Sequence[ContainerNet],
              mappings: Sequence[PortMappingArg]) -> None:  # fmt: skip
        from podnet.firewall import portmap_iptables as rules

        for net in nets:
            with TableLock():
                saved = iptables.Saved(iptables.save(net.family))
                script = rules.setup_script(saved, self.options, self.network, container_id,
                                            net, mappings)  # fmt: skip
                iptables.restore(net.family, script, f"add hostPorts of {container_id}")

    def teardown(self, container_id: str) -> list[int]:
        """Both families; one whose iptables is missing or unusable holds nothing of ours. When
        neither works: success if both tools are missing (nothing can exist), else 104."""
        from podnet.firewall import portmap_iptables as rules
        from podnet.proc import ToolMissing

        families, missing, errors = [], 0, []
        for family in (4, 6):
            with TableLock():
                try:
                    saved = iptables.Saved(iptables.save(family))
                except ToolMissing:
                    missing += 1
                    continue
                except KernelError as err:
                    errors.append(f"{err.msg}: {err.details}")
                    continue
                families.append(family)
                script = rules.teardown_script(saved, self.network, container_id)
                if script:
                    iptables.restore(family, script, f"remove hostPorts of {container_id}")
        if not families and missing < 2:
            raise KernelError("neither iptables nor ip6tables is usable", "; ".join(errors))
        return families

    def check(self, container_id: str, nets: Sequence[ContainerNet],
              mappings: Sequence[PortMappingArg]) -> None:  # fmt: skip
        from podnet.firewall import portmap_iptables as rules

        for net in nets:
            saved = iptables.Saved(iptables.save(net.family))
            missing = rules.missing_rules(saved, self.options, self.network, container_id, net,
                                          mappings)  # fmt: skip
            # Text comparison first; what differs may only be spelled differently by the kernel.
            missing = [m for m in missing if not iptables.has_rule(net.family, *m.split(" ", 1))]
            if missing:
                raise CheckFailed(f"IPv{net.family} hostPort rule missing: {missing[0]}",
                                  "; ".join(missing[1:]))  # fmt: skip

    def gc(self, valid: set[str]) -> None:
        """Tear down the chains of this network's containers missing from ``valid`` (found by
        the entry rules' ``dnat name: … id: …`` comment)."""
        from podnet.firewall import portmap_iptables as rules

        prefix = f'dnat name: "{self.network}" id: "'
        for family in (4, 6):
            if not iptables.usable(family):
                continue
            with TableLock():
                saved = iptables.Saved(iptables.save(family))
                stale: set[str] = set()
                for rule in saved.rules.get(rules.TOP_DNAT, []):
                    for word in iptables.tokens(rule):
                        if word.startswith(prefix) and word.endswith('"'):
                            cid = word[len(prefix) : -1]
                            if cid not in valid:
                                stale.add(cid)
                for cid in sorted(stale):
                    script = rules.teardown_script(saved, self.network, cid)
                    if script:
                        iptables.restore(family, script, f"garbage-collect hostPorts of {cid}")

    def status(self) -> None:
        from podnet.errors import Unavailable

        if not (iptables.usable(4) or iptables.usable(6)):
            raise Unavailable("neither iptables nor ip6tables is usable")


class NftMapper(_Backend):
    """Verdict maps in table ``inet podnet_portmap``, one ``nft -f`` transaction per change."""

    def setup(self, container_id: str, nets: Sequence[ContainerNet],
              mappings: Sequence[PortMappingArg]) -> None:  # fmt: skip
        from podnet.firewall import nft, portmap_nft

        with TableLock():
            listing = portmap_nft.list_maps(postrouting=self.options.snat)
            script = portmap_nft.setup_script(listing, self.options, self.network, container_id,
                                              nets, mappings)  # fmt: skip
            nft.apply(script, f"add hostPorts of {container_id}")

    def teardown(self, container_id: str) -> list[int]:
        from podnet.firewall import nft, portmap_nft

        with TableLock():
            listing = portmap_nft.list_maps(postrouting=False)
            script = portmap_nft.teardown_script(listing, self.network, container_id)
            if script:
                nft.apply(script, f"remove hostPorts of {container_id}")
        return [4, 6]

    def check(self, container_id: str, nets: Sequence[ContainerNet],
              mappings: Sequence[PortMappingArg]) -> None:  # fmt: skip
        from podnet.firewall import portmap_nft

        chain = portmap_nft.chain_name(self.network, container_id)
        absent = portmap_nft.missing(portmap_nft.list_table(), self.network, container_id, nets,
                                     mappings, portmap_nft.chain_text(chain))  # fmt: skip
        if absent:
            raise CheckFailed(f"hostPort rule missing: {absent[0]}", "; ".join(absent[1:]))

    def gc(self, valid: set[str]) -> None:
        from podnet.firewall import nft, portmap_nft

        with TableLock():
            listing = portmap_nft.list_table()
            for owner in sorted(listing.owners.values()):
                network, _, cid = owner.partition(" ")
                if network == self.network and cid not in valid:
                    script = portmap_nft.teardown_script(listing, self.network, cid)
                    if script:
                        nft.apply(script, f"garbage-collect hostPorts of {cid}")

    def status(self) -> None:
        from podnet import proc
        from podnet.errors import CNIError, Unavailable

        try:
            proc.which("nft")
        except CNIError as err:
            raise Unavailable(err.msg, err.details) from None


BACKENDS = ("iptables", "nftables")


def mapper(backend: str, network: str, options: PortmapOptions) -> PortMapper:
    """The backend named ``backend`` (one of :data:`BACKENDS`) for ``network``."""
    if backend == "nftables":
        return NftMapper(network, options)
    return IptablesMapper(network, options)
