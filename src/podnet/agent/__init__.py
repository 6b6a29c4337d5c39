"""``podnetctl agent``: the node agent that kindnetd is for cni-kindnet. It LISTs and WATCHes
the cluster's Nodes and keeps this node in step with them: the podnet conflist from its own
Node's ``spec.podCIDRs``, a route to every other Node's podCIDRs through its InternalIP, and the
set of cluster destinations that pod traffic reaches without masquerade.

Modules: :mod:`podnet.agent.model` (a Node object parsed once, into a type),
:mod:`podnet.agent.dataplane` (what the node is made to hold), :mod:`podnet.agent.watch` (the
LIST/WATCH loop). Never on a plugin's path (:data:`podnet.cni.budget.COLD_PACKAGES`).
"""
