"""The server config of a node's store: LXD's ``config`` of ``/1.0`` (issue 16, item 1), read
and changed for the CLI (``podnetctl config``) and the API (``GET|PUT|PATCH /1.0``). The keys,
their parsing and messages: :mod:`podnet.networks.server`."""

from __future__ import annotations

from collections.abc import Mapping

from podnet.drivers.manager import Manager, stale


def read(manager: Manager) -> tuple[dict[str, str], str]:
    """The server config (keys that are set) and its ETag (LXD's: sha256 of the map)."""
    from podnet.networks.model import etag

    with manager.store() as store:
        config = store.config.all()
    return config, etag(config)


def update(
    manager: Manager, config: Mapping[str, str], *, patch: bool = False, etag: str | None = None
) -> dict[str, str]:
    """PUT (``patch`` False: ``config`` replaces the whole config) or PATCH (merged; an
    empty value unsets a key) ``/1.0``'s config. ``etag`` (If-Match) must be the current
    one (412); 400 naming the key for a bad value (nothing is changed then)."""
    from podnet.networks import server
    from podnet.networks.model import etag as etag_of

    with manager.store() as store, store.locked():
        current = store.config.all()
        if etag is not None and etag.strip('"') != etag_of(current):
            raise stale(etag_of(current), etag)
        merged = {**current, **config} if patch else dict(config)
        valid = server.validate(merged)
        with store.write():
            store.config.replace(valid)
        return valid
