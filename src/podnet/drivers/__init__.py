"""Network drivers: one interface per network type, and the registry keyed by type (modelled on
LXD's lxd/network drivers and the reference plugins' ``PortMapper``).

A driver (:class:`podnet.drivers.base.Driver`) does for its network type what the layers below
offer: validate a network's config; create, restore and delete the network on the node; attach
and detach a pod (address choice, link, the reach of its hostPorts and forwards); check; GC.
The ``podnet`` plugin, the CLI and the API only ever ask :func:`get` (a network's ``type``) or
:func:`for_netconf` (a conflist) — adding a type touches the registry, nothing else.

Built in: ``ptp`` (addresses from the conflist's ``ranges``, one veth pair per pod with a host
route), ``bridge`` (a podnet-managed Linux bridge, LXD's keys) and ``delegated`` (``ptp`` links
with addresses from an IPAM plugin, CNI SPEC "Plugin Delegation"). An administrator adds
drivers with ``driver = type=module:Class`` lines in the node configuration
(:mod:`podnet.nodeconf`, read by every plugin call whatever the runtime's environment)
and with ``PODNET_DRIVERS`` in the environment of the runtime and of podnetctl —
``type=module:Class`` entries separated by commas; a type both name must name the same class.
Each is imported only when a network of that type is met; like the data dirs, a node setting no
NetConf or API client can change. A built-in type cannot be replaced.

Only the chosen driver's module is imported: the plugin's start-up pays for one.
"""

from __future__ import annotations

import os

from podnet.errors import InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from podnet.drivers.base import Driver
    from podnet.netconf import StoreConf

#: Built-in drivers: type → ``module:Class``.
BUILTIN = {
    "ptp": "podnet.drivers.ptp:PtpDriver",
    "bridge": "podnet.drivers.bridge:BridgeDriver",
    "delegated": "podnet.drivers.delegated:DelegatedDriver",
    "physical": "podnet.drivers.ovn.physical:PhysicalDriver",
    "ovn": "podnet.drivers.ovn.driver:OvnDriver",
}
#: Types the ``network`` commands and the API may create (``ptp`` networks come from conflists,
#: ``delegated`` attachments have no network of their own).
CREATABLE_BUILTIN = ("bridge", "physical", "ovn")
#: Built-in types whose DEL is the generic veth release with no driver step of its own
#: (:func:`podnet.drivers.teardown.detach`, ``release`` None): the plugin's DEL of their pods
#: loads no driver (tests/e2e/networks/test_driver_registry.py holds each class to it).
VETH_TEARDOWN = ("ptp", "bridge")
ENV = "PODNET_DRIVERS"

_loaded: dict[str, Driver] = {}
#: Types :func:`register` gave a driver in this process.
_registered: set[str] = set()


def _extra() -> dict[str, str]:
    """The administrator's drivers as ``{type: "module:Class"}``: the node configuration's
    ``driver`` lines, then ``PODNET_DRIVERS``. InvalidConfig (7) for a malformed entry or a
    type the two name differently, naming it; NodeConfError (7) for a malformed or untrusted
    node configuration."""
    from podnet import nodeconf

    node = nodeconf.load()
    out = dict(node.drivers)
    for item in os.environ.get(ENV, "").split(","):
        if not item.strip():
            continue
        entry = nodeconf.driver_entry(item.strip())
        if entry is None:
            raise InvalidConfig(f"{ENV}: {item.strip()!r} is not type=module:Class")
        kind, where = entry
        if out.get(kind, where) != where:
            raise InvalidConfig(f"{ENV}: type {kind!r} is {where} there but {out[kind]} in "
                                f"{node.path}: name one class")  # fmt: skip
        out[kind] = where
    return out


def types() -> list[str]:
    """Every registered type: built in, then ``PODNET_DRIVERS``', then those :func:`register`
    gave a driver in this process."""
    out = [*BUILTIN, *(t for t in _extra() if t not in BUILTIN)]
    return out + sorted(t for t in _registered if t not in out)


def creatable() -> list[str]:
    """Types a ``network create`` may name: ``bridge`` and every ``PODNET_DRIVERS`` type."""
    return [*CREATABLE_BUILTIN, *(t for t in _extra() if t not in BUILTIN)]


def register(kind: str, driver: Driver) -> None:
    """Register ``driver`` for ``kind`` in this process (in-process users and tests)."""
    _loaded[kind] = driver
    _registered.add(kind)


def get(kind: str) -> Driver:
    """The driver of network type ``kind``; InvalidConfig (7) for an unknown type or a driver
    that cannot be imported or made (its error in ``details``)."""
    if kind in _loaded:
        return _loaded[kind]
    where = BUILTIN.get(kind) or _extra().get(kind)
    if where is None:
        raise InvalidConfig(f"network type {kind!r} has no driver (known: {', '.join(types())})")
    module_name, _, class_name = where.partition(":")
    from podnet.drivers.base import Driver

    try:
        cls = getattr(__import__(module_name, fromlist=[class_name]), class_name)
    except Exception as err:  # noqa: BLE001 - importing runs the module: anything can fail
        raise InvalidConfig(f"{ENV}: driver {where} for type {kind!r} cannot be loaded",
                            f"{type(err).__name__}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise InvalidConfig(f"{ENV}: {where} for type {kind!r} is not a network driver "
                            "(a podnet.drivers.base.Driver)")
    try:
        driver = cls()
    except Exception as err:  # noqa: BLE001 - the administrator's class
        raise InvalidConfig(f"{ENV}: driver {where} for type {kind!r} cannot be loaded",
                            f"{type(err).__name__}: {err}") from None
    _loaded[kind] = driver
    return driver


def plain_veth_teardown(conf: StoreConf, network_type: str | None) -> bool:
    """Whether DEL of this conflist (``network_type``: its network's, None for its own ranges)
    is :func:`podnet.drivers.teardown.detach` with no driver step: a built-in type of
    :data:`VETH_TEARDOWN` that no driver registered in this process replaces."""
    kind = network_type or "ptp"
    return not conf.ipam_type and kind in VETH_TEARDOWN and kind not in _registered


def for_netconf(conf: StoreConf, network_type: str | None) -> Driver:
    """The driver a conflist asks for: ``delegated`` with an ``ipam`` object, the type of its
    ``network`` (``network_type``, read from the store by the caller), else ``ptp``."""
    if conf.ipam_type:
        return get("delegated")
    return get(network_type or "ptp")

