"""``podnetctl serve``: an LXD-compatible REST API for networks and network forwards
(docs/sources.md#lxd-network-forwards), so the real ``lxc`` client, pylxd or Terraform's lxd
provider manage podnet.

- :mod:`podnet.api.app` — the FastAPI application: LXD's routes, envelopes, ETags, If-Match;
  every handler is one call into :class:`podnet.manage.manager.Manager` (the CLI's operations);
- :mod:`podnet.api.server` — the unix socket (``<dataDir>/unix.socket``, 0660) and the
  optional TCP listener with TLS and a client-certificate trust store, on uvicorn.
"""
