"""Firewall state as data: pure functions build nftables text, one backend applies it atomically.

The names of podnet's own table live here, so the incremental paths of ADD and DEL
(:mod:`podnet.firewall.hostports`, :mod:`podnet.reconcile`) need not import the whole-table
renderer :mod:`podnet.firewall.table`.
"""

TABLE = "podnet"
FAMILY = "inet"
#: ``inet podnet``, as nft commands name the table.
T = f"{FAMILY} {TABLE}"
#: Map name prefixes of the DNAT kinds (:mod:`podnet.firewall.dnat`).
HOSTPORTS = "hostports"
FORWARDS = "fwd"
