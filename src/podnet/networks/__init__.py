"""Networks and network forwards (LXD's ``/1.0/networks`` API): LXD-style bridge networks that
pods join, the ``ptp`` networks the ``podnet`` plugin serves from ``ranges``, external addresses
forwarded whole or per port to addresses inside a network, and a network's source NAT address.

- :mod:`podnet.networks.model` — the API shapes (``NetworkForward``, ``NetworkForwardPort``,
  ``Network``) and their canonical form;
- :mod:`podnet.networks.config` — bridge network keys, values and defaults, LXD's messages;
- :mod:`podnet.networks.forwards` — forward validation in LXD's order with LXD's messages (and
  the checks LXD lacks: port bounds, unspecified/loopback listen addresses, network/broadcast
  targets), expansion into the firewall's DNAT model;
- :mod:`podnet.manage.manager` — the operations the CLI and the API run: each validates, writes
  the store and changes the kernel under the store's write lock, and undoes itself on failure.
"""
