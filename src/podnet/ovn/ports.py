"""The names of :mod:`podnet.ovn.pod_ports`, :mod:`podnet.ovn.spares`,
:mod:`podnet.ovn.orphans` and :mod:`podnet.ovn.forward_lbs` under one module, for callers that
import them from here (the tests of OVN networks). podnet's own code imports those modules.
"""

from __future__ import annotations

from podnet.ovn.forward_lbs import forward_ops, ingress_ops, lb_options
from podnet.ovn.orphans import (
    ORPHAN_GRACE,
    ORPHAN_SLACK,
    ORPHAN_TAKEOVER,
    ORPHANED,
    SWEEP_BATCH,
    southbound_view,
    sweep_spares,
)
from podnet.ovn.pod_ports import (
    SPARE,
    add_port,
    delete_port,
    pods_by_network,
    port_addresses,
    port_name,
    ports_of_chassis,
    secure_port,
)
from podnet.ovn.spares import (
    SPARES,
    claim_port,
    delete_spares,
    spare_ops,
    spare_rows,
    spares,
    top_up,
)

__all__ = [
    "ORPHANED", "ORPHAN_GRACE", "ORPHAN_SLACK", "ORPHAN_TAKEOVER", "SPARE", "SPARES",
    "SWEEP_BATCH", "add_port", "claim_port", "delete_port", "delete_spares", "forward_ops",
    "ingress_ops", "lb_options", "pods_by_network", "port_addresses", "port_name",
    "ports_of_chassis", "secure_port", "southbound_view", "spare_ops", "spare_rows", "spares",
    "sweep_spares", "top_up",
]  # fmt: skip
