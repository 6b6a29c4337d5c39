"""OVN: OVSDB transactions, the northbound objects of podnet's OVN networks, and the node's
Open vSwitch (issue 16)."""
