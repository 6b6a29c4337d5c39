"""Schema migrations, applied in order and recorded by name in ``schema_migrations``.

``0001_seed_schema`` is cni-kindnet's DDL verbatim (its three tables,
docs/sources.md#cni-kindnet); podnet's own
tables come only through later named migrations. ``PRAGMA user_version`` holds the number of
applied migrations, so an up-to-date database costs one pragma read per connection.
"""

from __future__ import annotations

SEED_SCHEMA = """
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
"""

# The pod-side interface name and network of each pod row (cni-kindnet keeps only the host side),
# needed by CHECK and by GC's valid-attachments (containerID, ifname); and per-range options.
ATTACHMENTS = """
CREATE TABLE pod_attachments (
  container_id TEXT PRIMARY KEY REFERENCES pods(container_id) ON DELETE CASCADE,
  ifname TEXT NOT NULL, -- CNI_IFNAME: the interface name inside the pod netns
  network_name TEXT NOT NULL, -- NetConf "name"
  host_mac TEXT,
  pod_mac TEXT
);
CREATE TABLE range_options (
  range_id INTEGER PRIMARY KEY REFERENCES ipam_ranges(id) ON DELETE CASCADE,
  ip_masq INTEGER NOT NULL DEFAULT 1 -- masquerade egress from this range (NetConf ipMasq)
);
"""

# Small key/value facts about the node, e.g. which boot and netns the nft table was built for.
NODE_STATE = """
CREATE TABLE podnet_state (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
"""

# Which plugin created a row of ``pods`` and releases it: the ``podnet`` main plugin (its rows are
# keyed by CNI_CONTAINERID) or the ``podnet-ipam`` IPAM plugin (keyed by
# ``<CNI_CONTAINERID>/<CNI_IFNAME>/<network>``, see podnet.store.pods.ipam_key). Each plugin's
# DEL, GC and CHECK only touch its own rows; addresses stay UNIQUE across both, so they never
# collide.
POD_OWNER = """
ALTER TABLE pod_attachments ADD COLUMN owner TEXT NOT NULL DEFAULT 'podnet'
"""

# Networks and network forwards. ``networks_forwards`` and ``networks_forwards_config`` are
# LXD's DDL verbatim (lxd/db/cluster/update.go); ``nodes``, ``networks`` and
# ``networks_config`` follow LXD's tables of those names (trimmed to what podnet uses).
# ``forward_dnats`` is podnet's: each forward expanded into the firewall's DNAT model (one row
# per listen port, one for the default target), so the kernel elements of a forward, and a
# clash with a hostPort, are found by index instead of by parsing every forward's ``ports``.
# ``pod_attachments.network_id`` ties a pod to the bridge network it joined.
NETWORKS = """
CREATE TABLE nodes (
  id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
  name TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  UNIQUE (name)
);
CREATE TABLE networks (
  id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
  name TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  type TEXT NOT NULL, -- bridge | ptp
  UNIQUE (name)
);
CREATE TABLE networks_config (
  id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
  network_id INTEGER NOT NULL,
  key VARCHAR(255) NOT NULL,
  value TEXT,
  UNIQUE (network_id, key),
  FOREIGN KEY (network_id) REFERENCES "networks" (id) ON DELETE CASCADE
);
CREATE TABLE "networks_forwards" (
id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
network_id INTEGER NOT NULL,
node_id INTEGER,
listen_address TEXT NOT NULL,
description TEXT NOT NULL,
ports TEXT NOT NULL,
UNIQUE (network_id, node_id, listen_address),
FOREIGN KEY (network_id) REFERENCES "networks" (id) ON DELETE CASCADE,
FOREIGN KEY (node_id) REFERENCES nodes(id) ON DELETE CASCADE
);
CREATE TABLE "networks_forwards_config" (
id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
network_forward_id INTEGER NOT NULL,
key VARCHAR(255) NOT NULL,
value TEXT,
UNIQUE (network_forward_id, key),
FOREIGN KEY (network_forward_id) REFERENCES "networks_forwards" (id) ON DELETE CASCADE
);
CREATE TABLE forward_dnats (
  forward_id INTEGER NOT NULL REFERENCES networks_forwards(id) ON DELETE CASCADE,
  family INTEGER NOT NULL,
  listen_address TEXT NOT NULL,
  protocol TEXT, -- NULL: the default target (every protocol and port)
  listen_port INTEGER,
  target_address TEXT NOT NULL,
  target_port INTEGER
);
CREATE INDEX forward_dnats_forward ON forward_dnats (forward_id);
CREATE INDEX forward_dnats_port ON forward_dnats (protocol, listen_port);
CREATE INDEX forward_dnats_listen ON forward_dnats (listen_address);
ALTER TABLE pod_attachments ADD COLUMN network_id INTEGER REFERENCES networks(id)
"""

# The REST API's trust store: client certificates allowed over TCP, by SHA-256
# fingerprint, as LXD keeps them (``lxc config trust``).
CERTIFICATES = """
CREATE TABLE certificates (
  id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
  fingerprint TEXT NOT NULL, -- sha256 of the DER certificate, lowercase hex
  type INTEGER NOT NULL DEFAULT 1, -- LXD's client type
  name TEXT NOT NULL DEFAULT '',
  certificate TEXT NOT NULL, -- PEM
  added DATETIME DEFAULT CURRENT_TIMESTAMP,
  UNIQUE (fingerprint)
)
"""

# hostPorts that podnet-portmap publishes: recorded in the node's store so
# that podnet's hostPorts, network forwards and podnet-portmap's see each other both ways, and
# ``podnetctl ports`` lists them all. One row per published mapping and family, as
# ``portmap_entries`` (host_ip "0.0.0.0" / "::" for any address of that family).
PORTMAP_CLAIMS = """
CREATE TABLE portmap_claims (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  network TEXT NOT NULL, -- the podnet-portmap NetConf's name
  container_id TEXT NOT NULL,
  host_ip TEXT NOT NULL,
  host_port INTEGER NOT NULL,
  protocol TEXT NOT NULL,
  container_ip TEXT NOT NULL,
  container_port INTEGER NOT NULL
);
CREATE INDEX portmap_claims_port ON portmap_claims (protocol, host_port);
CREATE INDEX portmap_claims_owner ON portmap_claims (network, container_id)
"""

# Indexes for lookups every ADD or DEL makes, which scanned
# ``portmap_entries`` (0.1-0.6 ms each at 1,000 pods): a container's hostPorts (DEL's list, and
# the ON DELETE CASCADE of its pod row, which SQLite resolves by the child's key), and the
# holders of a hostPort (ADD's clash check; cni-kindnet's UNIQUE index leads with host_ip, which
# the check leaves open). cni-kindnet's tables and columns are unchanged.
HOT_INDEXES = """
CREATE INDEX portmap_entries_container ON portmap_entries (container_id);
CREATE INDEX portmap_entries_port ON portmap_entries (protocol, host_port)
"""

# The server config (LXD's ``config`` of ``/1.0``: ``network.ovn.*``), one row per
# key that is set; validated by podnet.networks.server before it is written.
SERVER_CONFIG = """
CREATE TABLE server_config (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
)
"""

# The logical switch port of a pod on an OVN network: a spare port the ADD claimed
# from the node's pool (podnet.ovn.spares) has a name no DEL can derive; NULL for other pods.
OVN_PORT = """
ALTER TABLE pod_attachments ADD COLUMN ovn_port TEXT
"""

# Trust tokens of the REST API (``podnetctl trust add-token``, LXD's certificate add token): a
# client that presents one once, before it expires, has its certificate trusted. Only the
# secret's SHA-256 is kept.
TRUST_TOKENS = """
CREATE TABLE trust_tokens (
  secret_sha256 TEXT PRIMARY KEY, -- lowercase hex
  name TEXT NOT NULL, -- the client's name, given to its certificate
  expires_at INTEGER NOT NULL, -- Unix time, seconds
  created DATETIME DEFAULT CURRENT_TIMESTAMP
)
"""

# The destinations pod traffic reaches without masquerade besides the node's own ranges: every
# Kubernetes Node's podCIDRs and the node agent's no-masquerade CIDRs, as the agent last saw
# them. Table ``inet podnet`` renders them (collapsed) as its ``cluster_v4``/``cluster_v6`` sets,
# so a rebuild of the table by anyone keeps them.
CLUSTER_CIDRS = """
CREATE TABLE cluster_cidrs (
  cidr TEXT NOT NULL, -- canonical CIDR, no host bits
  source TEXT NOT NULL, -- 'node:<Node name>' (a podCIDR) or 'no-masquerade' (a setting)
  PRIMARY KEY (cidr, source)
)
"""

#: (name, DDL) in order; append only.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("0001_seed_schema", SEED_SCHEMA),
    ("0002_pod_attachments_range_options", ATTACHMENTS),
    ("0003_podnet_state", NODE_STATE),
    ("0004_pod_owner", POD_OWNER),
    ("0005_networks", NETWORKS),
    ("0006_certificates", CERTIFICATES),
    ("0007_portmap_claims", PORTMAP_CLAIMS),
    ("0008_hot_indexes", HOT_INDEXES),
    ("0009_server_config", SERVER_CONFIG),
    ("0010_ovn_port", OVN_PORT),
    ("0011_trust_tokens", TRUST_TOKENS),
    ("0012_cluster_cidrs", CLUSTER_CIDRS),
)
