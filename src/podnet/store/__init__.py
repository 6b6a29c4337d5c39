"""The node's state: one SQLite database (cni-kindnet's three tables plus named
migrations; docs/sources.md#cni-kindnet)."""

from podnet.store.db import DB_NAME, Store, open_store

__all__ = ["DB_NAME", "Store", "open_store"]
