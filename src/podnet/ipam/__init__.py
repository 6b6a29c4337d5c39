"""IP address management on the node state database (seed 001 ``ipam_ranges`` / ``pods``)."""
