"""The server config of a node's store: LXD's ``config`` of ``/1.0`` (LXD's doc/rest-api.yaml), read
and changed for the CLI (``podnetctl config``) and the API (``GET|PUT|PATCH /1.0``). The keys,
their parsing and messages: :mod:`podnet.networks.server`."""

from __future__ import annotations

from collections.abc import Mapping

from podnet.manage.manager import Manager, stale


def shown(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` as the API shows it: secret values (the client key) replaced by
    :data:`podnet.networks.server.HIDDEN`."""
    from podnet.networks import server

    return {k: server.HIDDEN if k in server.SECRET else v for k, v in config.items()}


def read(manager: Manager) -> tuple[dict[str, str], str]:
    """The server config as the API shows it (keys that are set; secrets hidden) and its ETag
    (LXD's: sha256 of that map, so a client's If-Match is the tag it was given)."""
    from podnet.networks.model import etag

    with manager.store() as store:
        config = shown(store.config.all())
    return config, etag(config)


def update(
    manager: Manager, config: Mapping[str, str], *, patch: bool = False, etag: str | None = None
) -> dict[str, str]:
    """PUT (``patch`` False: ``config`` replaces the whole config) or PATCH (merged; an
    empty value unsets a key) ``/1.0``'s config; a secret sent back as GET shows it
    (:data:`~podnet.networks.server.HIDDEN`) keeps its value. ``etag`` (If-Match) must be the
    current one (412); 400 naming the key for a bad value (nothing is changed then)."""
    from podnet.networks import server
    from podnet.networks.model import etag as etag_of

    with manager.store() as store, store.locked():
        current = store.config.all()
        tag = etag_of(shown(current))
        if etag is not None and etag.strip('"') != tag:
            raise stale(tag, etag)
        merged = {**current, **config} if patch else dict(config)
        for key in server.SECRET:  # sent back as shown (lxc config edit): kept as it is
            if merged.get(key) == server.HIDDEN and key in current:
                merged[key] = current[key]
        valid = server.validate(merged)
        with store.write():
            store.config.replace(valid)
        from podnet.drivers.ovn import cluster

        cluster.drop_ssl_dir(current, valid, store.path)
        return valid
