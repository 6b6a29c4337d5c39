"""Who may take a node's traffic: one conflict rule for podnet's hostPorts, podnet-portmap's and
network forwards.

Two claims conflict when some packet would match both (:meth:`podnet.values.Claim.overlaps`:
same family; same protocol and port, or one takes every port; same address, or one takes any
address). A hostPort answers only on the node's own addresses (``fib daddr type local``), so a
hostPort and a forward meet only when the forward's listen address is one of the node's
(:func:`podnet.link.local.is_local`); a forward on an address the node merely routes takes none of
a hostPort's traffic. Forwards among themselves are kept apart by their listen addresses (one
forward per address, :mod:`podnet.networks.forwards`), not here.

The three callers — the ``podnet`` plugin's ADD, ``podnet-portmap``'s ADD and a forward's
create or update — ask :func:`first_conflict` and word the answer for their own clients (CNI code
101 with :func:`hostport_message`, an HTTP 409 in LXD's words).
"""

from __future__ import annotations

from podnet.checked import FAMILIES
from podnet.values import FORWARD, HOSTPORT, PortMapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.checked import Net
    from podnet.store import Store
    from podnet.values import Claim, Holder


def first_conflict(store: Store, claims: Sequence[Claim], *, of: str, hostports: bool = True,
                   portmap: bool = True) -> tuple[Claim, Holder] | None:  # fmt: skip
    """The first of ``claims`` (of kind ``of``: :data:`~podnet.values.HOSTPORT` or
    :data:`~podnet.values.FORWARD`) whose traffic is already taken, with its holder; None when
    every claim is free. ``hostports``/``portmap`` choose whose hostPorts count (podnet's,
    podnet-portmap's); forwards count for hostPort claims only. The node's addresses are read
    (``ip``) only when a hostPort meets a forward."""
    local: list[Net] | None = None
    for claim in claims:
        for holder in store.pods.claim_holders(claim, hostports=hostports, portmap=portmap,
                                          forwards=of == HOSTPORT):  # fmt: skip
            if (holder.kind == FORWARD) == (of == FORWARD):
                return claim, holder  # hostPort against hostPort
            if local is None:
                from podnet.link.local import local_prefixes

                local = local_prefixes()
            from podnet.link.local import is_local

            listen = claim.listen if of == FORWARD else holder.claim.listen
            if listen is not None and is_local(listen, local):
                return claim, holder
    return None


def hostport_message(claim: Claim, holder: Holder) -> str:
    """The words of CNI code 101 for a hostPort ``claim`` whose traffic ``holder`` takes: the
    forward and its network, or the holding container's mapping."""
    host_ip = FAMILIES[claim.family].wildcard if claim.listen is None else claim.listen
    what = f"hostPort {claim.protocol}/{claim.port} on {host_ip}"
    h = holder.what
    if not isinstance(h, PortMapping):
        return (f"{what} is taken by the forward of {h.listen} (an address of this node) in "
                f"network {holder.name}")  # fmt: skip
    who = holder.name if holder.name.startswith("podnet-") else f"podnet container {holder.name}"
    return (f"{what} is already held by {who} ({h.host_ip}:{h.host_port}/{h.protocol} -> "
            f"{h.container_ip}:{h.container_port})")  # fmt: skip
