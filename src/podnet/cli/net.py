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
    NetworkConfigList,
    ResultCache,
    RuntimeConf,
    build_runtime_conf,
    load_conflist,
)
from podnet.runtime.errors import ArgsError

F = TypeVar("F", bound=Callable[..., Any])


def _env_option(*decls: str, envvar: str, default: str, help: str,
                show_default: bool | None = None) -> Callable[[F], F]:
    """An option that falls back to cnitool's environment variable ``envvar``."""
    return click.option(*decls, envvar=envvar, default=default, show_default=show_default,
                        show_envvar=True, help=help)  # fmt: skip


def _apply(f: F, options: list[Callable[[F], F]]) -> F:
    for option in reversed(options):
        f = option(f)
    return f


def _network_options(f: F) -> F:
    return _apply(f, [
        _env_option("--conf-dir", envvar="NETCONFPATH", default=DEFAULT_CONF_DIR,
                    show_default=True, help="Directory of network configs."),
        _env_option("--cni-path", envvar="CNI_PATH", default="/opt/cni/bin", show_default=True,
                    help="Plugin directories, colon-separated."),
        _env_option("--cache-dir", envvar="PODNETCTL_CACHE_DIR", default=DEFAULT_CACHE_DIR,
                    show_default=True, help="Result cache directory (entries under results/)."),
    ])  # fmt: skip


def _attachment_options(f: F) -> F:
    return _apply(f, [
        _env_option("-i", "--ifname", envvar="CNI_IFNAME", default=DEFAULT_IFNAME,
                    show_default=True, help="Interface name in the netns."),
        _env_option("--container-id", envvar="CNI_CONTAINERID", default="",
                    help="Container ID [default: cnitool-<sha512 of the netns path>]."),
        _env_option("--cni-args", envvar="CNI_ARGS", default="",
                    help="Plugin arguments, K=V;K2=V2."),
        _env_option("--cap-args", envvar="CAP_ARGS", default="",
                    help="Capability arguments as a JSON object."),
        click.option("-p", "--port", "ports", multiple=True,
                     metavar="[HOSTIP:]HOST:CONTAINER[/PROTO]",
                     help="Publish a port (portMappings capability); repeatable."),
    ])  # fmt: skip


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


Verb = Callable[[CNIRuntime, NetworkConfigList, RuntimeConf], None]
Command = Callable[..., None]


def _attachment_command(netns_argument: Callable[[Command], Command]) -> Callable[[Verb], Command]:
    """A command on one attachment (add, check, del): ``NETWORK NETNS`` (``netns_argument``
    declares the second), the network's and the attachment's options, handed to the verb as
    the runtime, the network's conflist and the runtime config."""

    def wrap(verb: Verb) -> Command:
        def command(network: str, netns: str, conf_dir: str, cni_path: str, cache_dir: str,
                    **opts: Any) -> None:  # fmt: skip
            rt = _rt(netns, opts)
            runtime = _runtime(cni_path, cache_dir)
            verb(runtime, load_conflist(network, conf_dir), rt)

        command.__name__, command.__doc__ = verb.__name__, verb.__doc__
        options = netns_argument(_network_options(_attachment_options(command)))
        return click.argument("network")(options)

    return wrap


@net.command()
@_attachment_command(click.argument("netns"))
def add(runtime: CNIRuntime, conflist: NetworkConfigList, rt: RuntimeConf) -> None:
    """ADD NETNS to NETWORK and print the result JSON (cached for check/del)."""
    click.echo(json.dumps(runtime.add(conflist, rt), indent=2))


@net.command()
@_attachment_command(click.argument("netns"))
def check(runtime: CNIRuntime, conflist: NetworkConfigList, rt: RuntimeConf) -> None:
    """CHECK NETNS's attachment to NETWORK against its cached result; silent when it is fine."""
    runtime.check(conflist, rt)


@net.command(name="del")
@_attachment_command(click.argument("netns", required=False, default=""))
def delete(runtime: CNIRuntime, conflist: NetworkConfigList, rt: RuntimeConf) -> None:
    """DEL NETNS's attachment from NETWORK (plugins in reverse, with the cached result).

    NETNS may be omitted when --container-id / CNI_CONTAINERID is given (as containerd does).
    """
    runtime.delete(conflist, rt)


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
