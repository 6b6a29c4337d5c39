-- cni-kindnet's design (its SQLite schema): its three CREATE TABLE statements,
-- copied verbatim. tests/unit/store/test_store.py compares podnet's tables with these, column for column.
CREATE TABLE IF NOT EXISTS ipam_ranges (
id INTEGER PRIMARY KEY AUTOINCREMENT, -- Unique identifier for the IP range
subnet TEXT NOT NULL, -- Subnet in CIDR notation (e.g., "10.244.0.0/16")
description TEXT -- Optional description of the IP range
);
CREATE TABLE IF NOT EXISTS pods (
container_id TEXT PRIMARY KEY, -- ID of the pod Sandbox on the container runtime
name TEXT, -- Kubernetes name of the pod
namespace TEXT, -- Kubernetes namespace of the pod
uid TEXT, -- Kubernetes UID of the pod
netns TEXT NOT NULL, -- Network namespace path of the pod
ip_address_v4 TEXT, -- IPv4 address assigned to the pod
ip_address_v6 TEXT, -- IPv6 address assigned to the pod
ip_gateway_v4 TEXT, -- IPv4 gateway assigned to the pod
ip_gateway_v6 TEXT, -- IPv6 gateway assigned to the pod
interface_name TEXT NOT NULL, -- Name of the network interface of the pod in the host
interface_mtu INTEGER, -- Interface mtu
creation_timestamp DATETIME DEFAULT CURRENT_TIMESTAMP, -- Timestamp of pod creation
UNIQUE (ip_address_v4), -- Unique constraint for IPv4 address
UNIQUE (ip_address_v6) -- Unique constraint for IPv6 address
);
CREATE TABLE IF NOT EXISTS portmap_entries (
id INTEGER PRIMARY KEY AUTOINCREMENT,
container_id TEXT NOT NULL,
host_ip TEXT NOT NULL,
host_port INTEGER NOT NULL,
protocol TEXT NOT NULL,
container_ip TEXT NOT NULL,
container_port INTEGER NOT NULL,
FOREIGN KEY (container_id) REFERENCES pods(container_id) ON DELETE CASCADE,
UNIQUE (host_ip, host_port, protocol) -- Unique constraint
);
