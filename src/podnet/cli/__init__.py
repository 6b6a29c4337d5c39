"""``podnetctl``, the command line: a thin layer over :mod:`podnet.runtime` and
:mod:`podnet.store` (``main`` wires the commands, ``net`` the cnitool-compatible verbs,
``install`` the plugin installation, ``state`` the read-only views, ``demo`` the demo)."""
