"""OVN networks and their uplinks: the ``ovn`` and ``physical`` drivers, the pod side of an
OVN network, and the cluster backend that keeps their networks and forwards in OVN's NB."""
