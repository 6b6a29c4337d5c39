"""OVN: OVSDB transactions (:mod:`.ovsdb`) of typed operations (:mod:`.ops`, built per table
by :mod:`.builders`, rows read as :class:`.row.Row`); the registry of cluster-wide networks
(:mod:`.registry`) and an OVN network's objects (:mod:`.nb`); pods' ports (:mod:`.pod_ports`),
each node's spares (:mod:`.spares`) and their collection (:mod:`.orphans`); forwards' load
balancers (:mod:`.forward_lbs`); and the node's Open vSwitch (:mod:`.vswitch`)."""
