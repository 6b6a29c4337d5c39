"""IP address management on the node state database (cni-kindnet's ``ipam_ranges`` / ``pods``:
docs/sources.md#cni-kindnet)."""
