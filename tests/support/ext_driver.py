"""A network driver that lives in the tests: pods join an existing Linux
bridge that podnet does not manage — named by the network's ``parent`` key, never created,
never deleted, never required to carry podnet's alias. Loaded by the real plugin through
``PODNET_DRIVERS=extbridge=ext_driver:ExtBridgeDriver`` with this directory on PYTHONPATH."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from podnet import checked, errors
from podnet.drivers.base import Driver
from podnet.drivers.bridge import BridgeDriver
from podnet.drivers.pods import VethDriver
from podnet.networks.errors import NetworkError

if TYPE_CHECKING:
    from collections.abc import Callable

    from podnet.cni.skel import Call
    from podnet.drivers.base import Choice
    from podnet.netconf import PodnetConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow


class ExtBridgeDriver(BridgeDriver):
    type = "extbridge"

    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        unknown = sorted(set(config) - {"parent", "ipv4.address"})
        if unknown:
            raise NetworkError(f'Invalid option for network "{name}": {unknown[0]}')
        try:
            checked.name(config.get("parent", ""))
            checked.interface(config.get("ipv4.address", ""))
        except checked.BadValue as err:
            raise NetworkError(f'Invalid value for network "{name}": {err}') from None
        return dict(config)

    def settle(self, name: str, config: dict[str, str], taken, owner: str,
               before: Mapping[str, str] | None = None) -> dict[str, str]:
        return config

    # the bridge is the administrator's: never created, changed or deleted
    def create(self, name: str, config: Mapping[str, str], owner: str) -> Callable[[], object]:
        return lambda: None

    def delete(self, name: str, owner: str, warn) -> Callable[[], object]:
        return lambda: None

    def restore(self, store, row, owner: str) -> list[str]:
        return []

    def bridge_name(self, net: NetworkRow) -> str:
        return net.config["parent"]

    def before_pair(self, call: Call, conf: PodnetConf, store: Store, choice: Choice,
                    host_if: str) -> None:
        if not os.path.exists(f"/sys/class/net/{choice.bridge}/bridge"):
            raise errors.InvalidConfig(f"parent: bridge {choice.bridge} does not exist")


class NoPodsDriver(Driver):
    """A type whose networks hold no pods (like a ``physical`` uplink): every pod verb is the
    base driver's default."""

    type = "extnopods"


class HalfDriver(VethDriver):
    """A veth driver that never implemented :meth:`choose`: its ADD raises
    NotImplementedError from inside the verb (after the undo stack is set up)."""

    type = "exthalf"
