"""A network type that exists only in the tests: ``labnet``, a routed IPv4 subnet recorded in
the node's store with forwards to its addresses. It is one class, registered in-process with
:func:`podnet.drivers.register`; nothing in the plugin, the manager or the API names it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from podnet import checked
from podnet.drivers.base import Driver
from podnet.networks.errors import NetworkError

if TYPE_CHECKING:
    from podnet.checked import Net

KEY = "ipv4.address"


class LabNetDriver(Driver):
    """``labnet`` networks: one key, ``ipv4.address`` (the gateway address and prefix of a
    private subnet); nothing of their own on the node; forwards may target the subnet."""

    type = "labnet"
    creatable = True

    def validate(self, name: str, config: Mapping[str, str]) -> dict[str, str]:
        extra = sorted(set(config) - {KEY})
        if extra:
            raise NetworkError(f'Invalid network configuration key "{extra[0]}"')
        try:
            iface = checked.interface(config.get(KEY, ""))
        except checked.BadValue as err:
            raise NetworkError(
                f'Invalid value for network "{name}" option "{KEY}": {err}'
            ) from None
        if iface.version != 4:
            raise NetworkError(f'Invalid value for network "{name}" option "{KEY}": not IPv4')
        return {KEY: str(iface)}

    def subnets(self, config: Mapping[str, str]) -> dict[int, list[Net]]:
        return {4: [checked.interface(config[KEY]).network], 6: []}


def register() -> None:
    """Register :class:`LabNetDriver` for ``labnet`` in this process."""
    from podnet import drivers

    drivers.register(LabNetDriver.type, LabNetDriver())
