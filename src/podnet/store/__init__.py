"""The node's state: one SQLite database (seed 001's three tables plus named migrations)."""

from podnet.store.db import DB_NAME, Store, open_store

__all__ = ["DB_NAME", "Store", "open_store"]
