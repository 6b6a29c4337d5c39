"""Calling a delegated IPAM plugin from a main plugin (CNI SPEC 1.1.0 "Plugin Delegation").

The plugin named by ``ipam.type`` is looked up in CNI_PATH (first executable file), run with the
main plugin's environment and the *same* stdin (the whole network config), with CNI_COMMAND the
main plugin's verb — except the DEL that undoes an ADD that failed after the IPAM ADD. Its stderr
is copied to ours. Finding, running and decoding are :mod:`podnet.cni.invoke`'s (the runtime
uses the same module): the plugin's error passes through with its own ``code``, ``msg`` and
``details``; a failure without an error object becomes code 999 naming the plugin.
"""

from __future__ import annotations

import os

from podnet.cni import invoke
from podnet.errors import CNIError, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.ipam.allocator import Network
    from podnet.proc import Spawned

    #: ``{family: (address, gateway, network)}``, as :func:`podnet.ipam.allocator.allocate`.
    Allocation = dict[int, tuple[str, str, Network]]


def find(plugin_type: str, paths: Sequence[str]) -> str:
    """``<dir>/<plugin_type>`` for the first CNI_PATH ``dir`` holding an executable file of that
    name. Code 7 when none does (libcni: ``failed to find plugin "x" in path [...]``)."""
    try:
        return invoke.find(plugin_type, paths)
    except InvalidConfig:
        raise InvalidConfig(
            f'failed to find IPAM plugin "{plugin_type}" in path [{" ".join(paths)}]'
        ) from None


class Running:
    """A started IPAM plugin call; collect it with :func:`finish`."""

    __slots__ = ("plugin_type", "command", "spawned")

    def __init__(self, plugin_type: str, command: str, spawned: Spawned) -> None:
        self.plugin_type = plugin_type
        self.command = command
        self.spawned = spawned


def start(call: Call, plugin_type: str, command: str | None = None) -> Running:
    """Start ``plugin_type`` for ``call`` with CNI_COMMAND ``command`` (default: the call's).

    The environment is this process's, with the CNI_* variables of ``call`` set again (so a
    skeleton run with an explicit env delegates the same values); CNI_ARGS is inherited.
    Code 7 when the plugin is not in CNI_PATH, 5 when it cannot be started.
    """
    path = find(plugin_type, call.path)
    verb = command or call.command
    env = invoke.env(os.environ, command=verb, container_id=call.container_id,
                     netns=call.netns, ifname=call.ifname,
                     cni_args=os.environ.get("CNI_ARGS", ""), cni_path=call.path)  # fmt: skip
    return Running(plugin_type, verb, invoke.start(path, call.stdin, env))


def finish(running: Running) -> dict[str, Any] | None:
    """Wait for a started call. ADD: the IPAM result (a dict, any spec version); other verbs:
    None. Raises the plugin's own error (its code), or 999 / 6 for unreadable output."""
    rc, out, err = running.spawned.wait_raw()
    if err:
        try:
            os.write(2, err)
        except OSError:
            pass
    what = f"IPAM plugin {running.plugin_type} ({running.command})"
    if rc != 0:
        raise invoke.decode_error(out, err, rc, what)
    if running.command != "ADD":
        return None
    return invoke.decode_result(out, what)


def run(call: Call, plugin_type: str, command: str | None = None) -> dict[str, Any] | None:
    """:func:`start` then :func:`finish`."""
    return finish(start(call, plugin_type, command))


def parse_result(result: dict[str, Any], plugin_type: str) -> tuple[Allocation, dict[str, Any]]:
    """An IPAM result (spec "Delegated plugins (IPAM)", any version) → ``(allocation, dns)``.

    ``allocation``: ``{family: (address, gateway, network)}`` with ``network`` the subnet of the
    returned ``address/prefix``. podnet's veth carries one address per family and needs a
    gateway: a missing ``gateway`` becomes the subnet's first host (network + 1) when that is
    not the address itself. Code 7 when there is no address, more than one of a family, or no
    usable gateway; 6 when an entry is malformed. ``dns`` is passed through (``{}`` if absent).
    """
    from podnet import checked, errors

    ips = result.get("ips")
    if not isinstance(ips, list) or not ips:
        raise InvalidConfig(f"IPAM plugin {plugin_type} returned no addresses")
    out: Allocation = {}
    for i, ip in enumerate(ips):
        try:
            iface = checked.interface(ip["address"], prefix=False)
        except (KeyError, TypeError, checked.BadValue):
            raise CNIError(
                f"IPAM plugin {plugin_type} returned a malformed ips[{i}]: {checked.show(ip)}",
                code=errors.DECODE_FAILURE,
            ) from None
        family, addr, net = iface.version, iface.ip, iface.network
        if family in out:
            raise InvalidConfig(
                f"IPAM plugin {plugin_type} returned more than one IPv{family} address "
                f"({out[family][0]}, {addr}); podnet gives a pod one address per family"
            )
        gw_text = ip.get("gateway")
        if gw_text:
            try:
                gw = checked.ip(gw_text)
            except checked.BadValue:
                raise CNIError(
                    f"IPAM plugin {plugin_type} returned a malformed gateway "
                    f"{checked.show(gw_text)}",
                    code=errors.DECODE_FAILURE,
                ) from None
            if gw.version != family or gw == addr or gw not in net:
                # podnet puts the gateway on the node side of the pod's veth: one outside the
                # pod's subnet could be any address (another pod's, the node's router)
                raise InvalidConfig(
                    f"IPAM plugin {plugin_type}: gateway {gw} cannot serve address {iface} "
                    f"(it must be another address of {net})"
                )
        else:
            gw = net.network_address + 1
            if net.num_addresses < 4 or gw == addr:
                raise InvalidConfig(
                    f"IPAM plugin {plugin_type} returned {iface} without a gateway and none "
                    "can be derived; set one in the ipam config"
                )
        out[family] = (str(addr), str(gw), net)
    dns = result.get("dns")
    return out, dns if isinstance(dns, dict) else {}
