"""A network driver that lives in the tests (issue 15, acceptance): pods join an existing Linux
bridge that podnet does not manage — named by the network's ``parent`` key, never created,
never deleted, never required to carry podnet's alias. Loaded by the real plugin through
``PODNET_DRIVERS=extbridge=ext_driver:ExtBridgeDriver`` with this directory on PYTHONPATH."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from podnet import errors
from podnet.drivers.bridge import BridgeDriver

if TYPE_CHECKING:
    from podnet.cni.skel import Call
    from podnet.drivers.base import Choice
    from podnet.drivers.conf import PodnetConf
    from podnet.store import Store
    from podnet.store.networks import NetworkRow


class ExtBridgeDriver(BridgeDriver):
    type = "extbridge"

    def bridge_name(self, net: NetworkRow) -> str:
        return net.config["parent"]

    def before_pair(self, call: Call, conf: PodnetConf, store: Store, choice: Choice,
                    host_if: str) -> None:
        if not os.path.exists(f"/sys/class/net/{choice.bridge}/bridge"):
            raise errors.InvalidConfig(f"parent: bridge {choice.bridge} does not exist")
