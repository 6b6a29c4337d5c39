"""hostPorts in podnet's table (:mod:`podnet.firewall.table`): a ``portmap_entries`` row as a
:class:`~podnet.firewall.dnat.Dnat` and its map elements (pure).

A specific hostIP goes to ``hostports_v4`` (``hostIP . proto . port``), any hostIP to
``hostports_any_v4`` (``proto . port``), and their ``_v6`` twins; the store refuses a wildcard
and a specific hostIP on the same port, so at most one map answers. They are looked up only for
``fib daddr type local`` (no transit traffic hijacked: CP #1209/#1115).
"""

from __future__ import annotations

from podnet.firewall import FAMILY, HOSTPORTS, TABLE, T

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from podnet.values import Dnat, PortMapping

__all__ = ["FAMILY", "TABLE", "add_script", "delete_script", "dnat_of", "expected_element",
           "map_name"]  # fmt: skip


def dnat_of(m: PortMapping) -> Dnat:
    """A hostPort as the table's DNAT model (:meth:`podnet.values.PortMapping.dnat`)."""
    return m.dnat()


def map_name(m: PortMapping) -> str:
    """The map holding ``m``: ``hostports_v4``, ``hostports_any_v4``, ``…_v6``."""
    from podnet.firewall.dnat import map_of

    return map_of(HOSTPORTS, dnat_of(m))


def expected_element(m: PortMapping) -> str:
    """How nft prints the element of ``m`` (addresses in canonical form)."""
    return dnat_of(m).element()


def add_script(mappings: Sequence[PortMapping]) -> str:
    """Incremental ADD: the mappings' map elements (the table must exist)."""
    from podnet.firewall.dnat import add_script

    return add_script(T, HOSTPORTS, [dnat_of(m) for m in mappings])


def delete_script(mappings: Sequence[PortMapping]) -> str:
    """Incremental DEL: remove the mappings' map elements (fails if one is missing)."""
    from podnet.firewall.dnat import delete_script

    return delete_script(T, HOSTPORTS, [dnat_of(m) for m in mappings])
