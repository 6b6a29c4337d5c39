"""podnet: pod networking for Linux container hosts.

The package is split by concern (see README "Layout"): ``cni`` (spec types, versions,
result conversion, the plugin skeleton), ``store`` (the SQLite node state), ``ipam``,
``link`` (interfaces, addresses, routes, sysctls, namespaces), ``firewall`` (rules as
data and their nftables backend), ``plugins`` (one thin module per plugin), ``runtime``
(conflists, plugin execution, the result cache) and ``cli`` (podnetctl).

Modules on the plugin's path import only what their verb needs: a CNI plugin is a new
process per call, so import time is latency.
"""

__version__ = "0.1.0"
