"""``podnetctl net add|check|del|gc|status``: cnitool-compatible runs of a network's plugins.

Environment as cnitool reads it: NETCONFPATH (config dir, default /etc/cni/net.d), CNI_PATH
(plugin dirs, colon-separated, default /opt/cni/bin), CAP_ARGS (JSON capability arguments),
CNI_ARGS (``K=V;K2=V2``), CNI_IFNAME (default eth0); plus CNI_CONTAINERID (default: cnitool's
hash of the netns path) and PODNETCTL_CACHE_DIR (result cache, default /var/lib/cni).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from podnet.runtime import (
    DEFAULT_CACHE_DIR,
    DEFAULT_CONF_DIR,
    DEFAULT_IFNAME,
    CNIRuntime,
    ResultCache,
    RuntimeConf,
    build_runtime_conf,
    load_conflist,
)
from podnet.runtime.errors import ArgsError

F = TypeVar("F", bound=Callable[..., Any])


def _network_options(f: F) -> F:
    options = [
        click.option(
            "--conf-dir",
            envvar="NETCONFPATH",
            default=DEFAULT_CONF_DIR,
            show_default=True,
            show_envvar=True,
            help="Directory of network configs.",
        ),
        click.option(
            "--cni-path",
            envvar="CNI_PATH",
            default="/opt/cni/bin",
            show_default=True,
            show_envvar=True,
            help="Plugin directories, colon-separated.",
        ),
        click.option(
            "--cache-dir",
            envvar="PODNETCTL_CACHE_DIR",
            default=DEFAULT_CACHE_DIR,
            show_default=True,
            show_envvar=True,
            help="Result cache directory (entries under results/).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _attachment_options(f: F) -> F:
    options = [
        click.option(
            "-i",
            "--ifname",
            envvar="CNI_IFNAME",
            default=DEFAULT_IFNAME,
            show_default=True,
            show_envvar=True,
            help="Interface name in the netns.",
        ),
        click.option(
            "--container-id",
            envvar="CNI_CONTAINERID",
            default="",
            show_envvar=True,
            help="Container ID [default: cnitool-<sha512 of the netns path>].",
        ),
        click.option(
            "--cni-args",
            envvar="CNI_ARGS",
            default="",
            show_envvar=True,
            help="Plugin arguments, K=V;K2=V2.",
        ),
        click.option(
            "--cap-args",
            envvar="CAP_ARGS",
            default="",
            show_envvar=True,
            help="Capability arguments as a JSON object.",
        ),
        click.option(
            "-p",
            "--port",
            "ports",
            multiple=True,
            metavar="[HOSTIP:]HOST:CONTAINER[/PROTO]",
            help="Publish a port (portMappings capability); repeatable.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _runtime(cni_path: str, cache_dir: str) -> CNIRuntime:
    return CNIRuntime([p for p in cni_path.split(":") if p], cache=ResultCache(cache_dir))


def _rt(netns: str, opts: dict[str, Any]) -> RuntimeConf:
    try:
        return build_runtime_conf(
            netns,
            container_id=opts["container_id"],
            ifname=opts["ifname"],
            cni_args=opts["cni_args"],
            cap_args=opts["cap_args"],
            ports=opts["ports"],
        )
    except ArgsError as err:
        if any(p in err.msg for p in opts["ports"]):
            raise click.BadParameter(err.msg, param_hint="--port") from None
        raise


@click.group()
def net() -> None:
    """Run a network's plugins like cnitool: add, check, del, gc, status."""


@net.command()
@click.argument("network")
@click.argument("netns")
@_network_options
@_attachment_options
def add(
    network: str, netns: str, conf_dir: str, cni_path: str, cache_dir: str, **opts: Any
) -> None:
    """ADD NETNS to NETWORK and print the result JSON (cached for check/del)."""
    rt = _rt(netns, opts)
    result = _runtime(cni_path, cache_dir).add(load_conflist(network, conf_dir), rt)
    click.echo(json.dumps(result, indent=2))


@net.command()
@click.argument("network")
@click.argument("netns")
@_network_options
@_attachment_options
def check(
    network: str, netns: str, conf_dir: str, cni_path: str, cache_dir: str, **opts: Any
) -> None:
    """CHECK NETNS's attachment to NETWORK against its cached result; silent when it is fine."""
    rt = _rt(netns, opts)
    _runtime(cni_path, cache_dir).check(load_conflist(network, conf_dir), rt)


@net.command(name="del")
@click.argument("network")
@click.argument("netns", required=False, default="")
@_network_options
@_attachment_options
def delete(
    network: str, netns: str, conf_dir: str, cni_path: str, cache_dir: str, **opts: Any
) -> None:
    """DEL NETNS's attachment from NETWORK (plugins in reverse, with the cached result).

    NETNS may be omitted when --container-id / CNI_CONTAINERID is given (as containerd does).
    """
    rt = _rt(netns, opts)
    _runtime(cni_path, cache_dir).delete(load_conflist(network, conf_dir), rt)


@net.command()
@click.argument("network")
@_network_options
def gc(network: str, conf_dir: str, cni_path: str, cache_dir: str) -> None:
    """GC NETWORK: plugins remove every attachment not in this runtime's result cache."""
    _runtime(cni_path, cache_dir).gc(load_conflist(network, conf_dir))


@net.command()
@click.argument("network")
@_network_options
def status(network: str, conf_dir: str, cni_path: str, cache_dir: str) -> None:
    """STATUS of NETWORK's plugins; exit 0 when ADD can be served, else the plugin's error."""
    _runtime(cni_path, cache_dir).status(load_conflist(network, conf_dir))
