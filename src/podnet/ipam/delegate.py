"""Calling a delegated IPAM plugin from a main plugin (CNI SPEC 1.1.0 "Plugin Delegation").

The plugin named by ``ipam.type`` is looked up in CNI_PATH (first executable file), run with the
main plugin's environment and the *same* stdin (the whole network config), with CNI_COMMAND the
main plugin's verb — except the DEL that undoes an ADD that failed after the IPAM ADD. Its stderr
is copied to ours. When it fails, the error object it printed is raised as a :class:`CNIError`
with its own ``code``, ``msg`` and ``details`` (passed through unchanged, as the reference
plugins do); a failure without one becomes code 999 naming the plugin.

This runs on the plugin path: :mod:`podnet.proc` and :mod:`podnet.cni.fastjson`, no subprocess
or json imports. The runtime's own lookup (:func:`podnet.runtime.invoke.find_in_path`) is not
reused for the same reason; the rule is the same.
"""

from __future__ import annotations

import os

from podnet import proc
from podnet.cni import errors, fastjson
from podnet.cni.errors import CNIError, InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from podnet.cni.skel import Call
    from podnet.ipam.allocator import Network

    #: ``{family: (address, gateway, network)}``, as :func:`podnet.ipam.allocator.allocate`.
    Allocation = dict[int, tuple[str, str, Network]]


def find(plugin_type: str, paths: Sequence[str]) -> str:
    """``<dir>/<plugin_type>`` for the first CNI_PATH ``dir`` holding an executable file of that
    name. Code 7 when none does (libcni: ``failed to find plugin "x" in path [...]``)."""
    for d in paths:
        candidate = os.path.join(d, plugin_type)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise InvalidConfig(f'failed to find IPAM plugin "{plugin_type}" in path [{" ".join(paths)}]')


class Running:
    """A started IPAM plugin call; collect it with :func:`finish`."""

    __slots__ = ("plugin_type", "command", "spawned")

    def __init__(self, plugin_type: str, command: str, spawned: proc.Spawned) -> None:
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
    env = dict(os.environ)
    env.update(
        CNI_COMMAND=command or call.command,
        CNI_CONTAINERID=call.container_id,
        CNI_NETNS=call.netns,
        CNI_IFNAME=call.ifname,
        CNI_PATH=os.pathsep.join(call.path),
    )
    try:
        spawned = proc.spawn([path], call.stdin, env)
    except OSError as err:
        raise CNIError(f"cannot execute IPAM plugin {path}: {err}", code=errors.IO_FAILURE) from err
    return Running(plugin_type, env["CNI_COMMAND"], spawned)


def finish(running: Running) -> dict[str, Any] | None:
    """Wait for a started call. ADD: the IPAM result (a dict, any spec version); other verbs:
    None. Raises the plugin's own error (its code), or 999 / 6 for unreadable output."""
    rc, out, err = running.spawned.wait()
    if err:
        try:
            os.write(2, err.encode())
        except OSError:
            pass
    what = f"IPAM plugin {running.plugin_type} ({running.command})"
    if rc != 0:
        raise _error(out, err, rc, what)
    if running.command != "ADD":
        return None
    try:
        result = fastjson.loads(out)
    except ValueError as exc:
        raise CNIError(
            f"{what} printed an invalid result: {exc}", code=errors.DECODE_FAILURE
        ) from None
    if not isinstance(result, dict):
        raise CNIError(f"{what} printed a result that is not an object", code=errors.DECODE_FAILURE)
    return result


def run(call: Call, plugin_type: str, command: str | None = None) -> dict[str, Any] | None:
    """:func:`start` then :func:`finish`."""
    return finish(start(call, plugin_type, command))


def _error(out: str, err: str, rc: int, what: str) -> CNIError:
    try:
        raw = fastjson.loads(out) if out.strip() else None
    except ValueError:
        raw = None
    if isinstance(raw, dict) and isinstance(raw.get("msg"), str):
        code = raw.get("code")
        return CNIError(
            raw["msg"],
            str(raw.get("details") or ""),
            code=code
            if isinstance(code, int) and not isinstance(code, bool) and code > 0
            else errors.INTERNAL,
        )
    text = (err or out).strip()[:500]
    return CNIError(f"{what} failed with exit status {rc}", text, code=errors.INTERNAL)


def parse_result(result: dict[str, Any], plugin_type: str) -> tuple[Allocation, dict[str, Any]]:
    """An IPAM result (spec "Delegated plugins (IPAM)", any version) → ``(allocation, dns)``.

    ``allocation``: ``{family: (address, gateway, network)}`` with ``network`` the subnet of the
    returned ``address/prefix``. podnet's veth carries one address per family and needs a
    gateway: a missing ``gateway`` becomes the subnet's first host (network + 1) when that is
    not the address itself. Code 7 when there is no address, more than one of a family, or no
    usable gateway; 6 when an entry is malformed. ``dns`` is passed through (``{}`` if absent).
    """
    import ipaddress

    ips = result.get("ips")
    if not isinstance(ips, list) or not ips:
        raise InvalidConfig(f"IPAM plugin {plugin_type} returned no addresses")
    out: Allocation = {}
    for i, ip in enumerate(ips):
        try:
            iface = ipaddress.ip_interface(ip["address"])
        except (KeyError, TypeError, ValueError):
            raise CNIError(
                f"IPAM plugin {plugin_type} returned a malformed ips[{i}]: {ip!r}",
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
                gw = ipaddress.ip_address(gw_text)
            except ValueError:
                raise CNIError(
                    f"IPAM plugin {plugin_type} returned a malformed gateway {gw_text!r}",
                    code=errors.DECODE_FAILURE,
                ) from None
            if gw.version != family or gw == addr:
                raise InvalidConfig(
                    f"IPAM plugin {plugin_type}: gateway {gw} cannot serve address {iface}"
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
