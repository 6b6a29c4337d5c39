"""Masquerade as kindnet's: pod traffic to the cluster keeps the pod's address, traffic leaving
it takes the node's. Built on podnet's own egress rule of table ``inet podnet``
(:mod:`podnet.firewall.table`): ``ip saddr @egress_v4 ip daddr != @ranges_v4 ip daddr !=
@cluster_v4 masquerade`` — the agent fills the sets ``cluster_v4``/``cluster_v6`` with every
Node's podCIDRs and its no-masquerade CIDRs (kindnetd's ``--no-masquerade-cidr`` / its
``ip-masq-agent`` list), so there is one NAT rule, not a second table fighting the first.

The destinations are rows of the store (``cluster_cidrs``), so whoever rebuilds the table (the
plugin after a new range, ``podnetctl network restore`` at boot) renders them too. The kernel
is brought in step element by element: its elements are listed, and what is gone and what is
new go in one nft transaction; elements are collapsed first (:func:`podnet.firewall.table.
cluster_elements`: an interval set refuses a 10.0.0.0/8 over a 10.244.1.0/24 already there).
A missing table or set (``nft flush ruleset``, a table of an older podnet, a reboot) is rebuilt
from the store with :func:`podnet.reconcile.rebuild`, which never takes another store's table.
"""

from __future__ import annotations

import ipaddress
import logging

from podnet import checked, reconcile
from podnet.agent.notes import LOG, Notes
from podnet.errors import CNIError, KernelError
from podnet.firewall import FAMILY, TABLE, T, nft
from podnet.firewall.table import cluster_elements, cluster_set

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.store import Store

__all__ = ["NO_MASQUERADE", "Masquerade", "kernel_elements"]

#: ``cluster_cidrs.source`` of the agent's no-masquerade CIDRs (a Node's is ``node:<name>``).
NO_MASQUERADE = "no-masquerade"


def _element_nets(item: object) -> list[str]:
    """One element of ``nft -j list set`` as CIDR texts: a prefix, an address, a range."""
    if isinstance(item, str):
        return [checked.text(checked.network(item))]
    if isinstance(item, dict) and isinstance(item.get("prefix"), dict):
        p = item["prefix"]
        return [checked.text(checked.network(f"{p.get('addr')}/{p.get('len')}"))]
    if isinstance(item, dict) and isinstance(item.get("range"), list) and len(item["range"]) == 2:
        first, last = (checked.ip(a) for a in item["range"])
        return [checked.text(n) for n in ipaddress.summarize_address_range(first, last)]
    raise ValueError(f"an element nft printed that podnet never adds: {checked.show(item)}")


def kernel_elements(family: int) -> list[str] | None:
    """The elements of ``cluster_v4``/``_v6`` in the kernel as CIDR texts, sorted; None when
    the table or the set is missing. KernelError (104) when nft fails otherwise or prints an
    element that is not a prefix, address or range."""
    items = nft.list_json("set", FAMILY, TABLE, cluster_set(family))
    if items is None:
        return None
    out: list[str] = []
    for item in items:
        body = item.get("set")
        if not isinstance(body, dict):
            continue
        elems = body.get("elem", [])
        for elem in elems if isinstance(elems, list) else []:
            if isinstance(elem, dict) and "elem" in elem:  # an element with options
                elem = elem["elem"].get("val") if isinstance(elem["elem"], dict) else None
            try:
                out += _element_nets(elem)
            except ValueError as err:
                raise KernelError(f"cannot read set {cluster_set(family)}", str(err)) from None
    return sorted(out)


class Masquerade:
    """The cluster sets; :meth:`sync` makes store and kernel hold the given destinations."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self._collapsed: tuple[list[tuple[str, str]], dict[int, list[str]]] | None = None

    def sync(self, store: Store, rows: list[tuple[str, str]]) -> bool:
        """Make the store's ``cluster_cidrs`` be ``rows`` (``(cidr, source)``, checked CIDR
        texts) and the kernel's cluster sets their collapsed elements. Logs one line per
        element added or removed, and a rebuild. False when nft or the store fails, or the
        table is another store's (logged)."""
        rows = sorted(set(rows))
        if store.cluster_cidrs() != rows:
            with store.write():
                store.set_cluster_cidrs(rows)
        if self._collapsed is None or self._collapsed[0] != rows:  # 1,000 Nodes: ~0.1 s
            cidrs = [cidr for cidr, _ in rows]
            self._collapsed = (rows, {f: cluster_elements(cidrs, f) for f in (4, 6)})
        want = self._collapsed[1]
        try:
            with store.locked():
                return self._kernel(store, want)
        except reconcile.TableOwned as err:
            self.notes.note(("masq", "owned"), f"cluster sets not updated: {err.msg}")
        except CNIError as err:
            detail = f": {err.details}" if err.details else ""
            self.notes.note(("masq", "failed", err.msg, err.details),
                            f"cluster sets of table inet podnet not updated: {err.msg}{detail}",
                            level=logging.ERROR)  # fmt: skip
        return False

    def _kernel(self, store: Store, want: dict[int, list[str]]) -> bool:
        have: dict[int, list[str]] = {}
        for family in (4, 6):
            held = None if not reconcile.current(store) else kernel_elements(family)
            if held is None:
                reconcile.rebuild(store, warn=lambda msg: LOG.warning("%s", msg))
                LOG.info("table inet podnet rebuilt from the store (cluster destinations: %s)",
                         ", ".join(want[4] + want[6]) or "none")  # fmt: skip
                return True
            have[family] = held
        script = ""
        changes: list[str] = []
        for family in (4, 6):
            gone = [e for e in have[family] if e not in want[family]]
            new = [e for e in want[family] if e not in have[family]]
            if gone:
                script += f"delete element {T} {cluster_set(family)} {{ {', '.join(gone)} }}\n"
                changes += [f"cluster destination {e} removed" for e in gone]
            if new:
                script += f"add element {T} {cluster_set(family)} {{ {', '.join(new)} }}\n"
                changes += [f"cluster destination {e} added" for e in new]
        if not script:
            return True
        done = nft.run(script, die_with_parent=False)
        if not done.ok:
            if done.missing:  # removed between the listing and the update
                reconcile.rebuild(store, warn=lambda msg: LOG.warning("%s", msg))
                LOG.info("table inet podnet rebuilt from the store")
                return True
            self.notes.note(("masq", "refused", done.stderr),
                            f"nft refused the cluster set update: {done.stderr}",
                            level=logging.ERROR)  # fmt: skip
            return False
        for line in changes:
            LOG.info("%s", line)
        return True
