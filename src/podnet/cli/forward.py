"""``podnetctl network forward …``: network forwards with ``lxc``'s argument order, output and
messages (``Network forward 198.51.100.1 created``, ``Error: …`` and exit 1), on the store
directly. Each command is one call into :class:`podnet.manage.manager.Manager`.
"""

from __future__ import annotations

from typing import Any

import click

from podnet.checked import printable
from podnet.cli.lxcfmt import dump_yaml, load_yaml, render_list
from podnet.cli.netargs import (
    checked_manager,
    config_args,
    edit,
    format_option,
    forward_arguments,
    is_tty,
    manager_of,
    network_argument,
    one_forward,
    pairs,
    target_option,
    yaml_text,
)
from podnet.networks.errors import NetworkError
from podnet.networks.model import FORWARD_KEYS, PORT_KEYS, Forward, ForwardPort

__all__ = ["forward", "forward_put"]

FORWARD_TEMPLATE = """### This is a YAML representation of the network forward.
### Any line starting with a '# will be ignored.
###
### A network forward consists of a default target address and optional set of port \
forwards for a listen address.
###
### An example would look like:
### listen_address: 192.0.2.1
### config:
###   target_address: 198.51.100.2
### description: test desc
### port:
### - description: port forward
###   protocol: tcp
###   listen_port: 80,81,8080-8090
###   target_address: 198.51.100.3
###   target_port: 80,81,8080-8090
### location: lxd01
###
### Note that the listen_address and location cannot be changed."""


@click.group("forward")
def forward() -> None:
    """Manage network forwards."""


@forward.command("list")
@network_argument
@format_option
@click.pass_context
def forward_list(ctx: click.Context, network_name: str, fmt: str) -> None:
    """List available network forwards."""
    forwards = manager_of(ctx).list_forwards(network_name)
    rows = [[f.listen_address, f.description, f.default_target, str(len(f.ports))]
            for f in forwards]  # fmt: skip
    headers = ["LISTEN ADDRESS", "DESCRIPTION", "DEFAULT TARGET ADDRESS", "PORTS"]
    click.echo(render_list(headers, rows, fmt, [f.to_api() for f in forwards]), nl=False)


@forward.command("show")
@one_forward
def forward_show(ctx: click.Context, network_name: str, listen_address: str,
                 target: str | None) -> None:  # fmt: skip
    """Show network forward configurations."""
    manager = checked_manager(ctx, target)
    click.echo(dump_yaml(manager.get_forward(network_name, listen_address).to_api()), nl=False)


@forward.command("create")
@forward_arguments
@click.argument("config", nargs=-1)
@click.option("--description", default="", help="Forward description.")
@target_option
@click.pass_context
def forward_create(
    ctx: click.Context, network_name: str, listen_address: str, config: tuple[str, ...],
    description: str, target: str | None,
) -> None:
    """Create new network forwards (KEY=VALUE: target_address, user.*)."""
    manager = checked_manager(ctx, target)
    created = manager.create_forward(network_name, Forward(
        listen_address, description, pairs(config, "Bad key/value pair")))  # fmt: skip
    click.echo(f"Network forward {created.listen_address} created")


@forward.command("get")
@forward_arguments
@click.argument("key")
@click.pass_context
def forward_get(ctx: click.Context, network_name: str, listen_address: str, key: str) -> None:
    """Get values for network forward configuration keys (an unset key prints nothing; a key
    that cannot exist is an error)."""
    found = manager_of(ctx).get_forward(network_name, listen_address)
    if key != "target_address" and not key.startswith("user."):
        raise NetworkError(f'Invalid option "{key}"')
    if key in found.config:
        click.echo(printable(found.config[key]))


@forward.command("set")
@forward_arguments
@click.argument("config", nargs=-1, required=True)
@target_option
@click.pass_context
def forward_set(ctx: click.Context, network_name: str, listen_address: str,
                config: tuple[str, ...], target: str | None) -> None:  # fmt: skip
    """Set network forward keys (KEY=VALUE…, or KEY VALUE)."""
    manager = checked_manager(ctx, target)
    manager.update_forward(network_name, listen_address, config=config_args(config),
                           patch=True, client=True)  # fmt: skip


@forward.command("unset")
@forward_arguments
@click.argument("key")
@target_option
@click.pass_context
def forward_unset(ctx: click.Context, network_name: str, listen_address: str, key: str,
                  target: str | None) -> None:  # fmt: skip
    """Unset network forward configuration keys."""
    manager = checked_manager(ctx, target)
    manager.update_forward(network_name, listen_address, config={key: ""}, patch=True,
                           client=True)  # fmt: skip


@forward.command("edit")
@one_forward
def forwardedit(ctx: click.Context, network_name: str, listen_address: str,
                 target: str | None) -> None:  # fmt: skip
    """Edit network forward configurations as YAML (stdin when it is not a terminal, else
    $EDITOR); ``listen_address`` and ``location`` cannot be changed."""
    manager = checked_manager(ctx, target)
    current = manager.get_forward(network_name, listen_address)

    def apply(text: str) -> None:
        data = load_yaml(text, (*FORWARD_KEYS, "listen_address", "location"),
                         "api.NetworkForward")  # fmt: skip
        manager.update_forward(network_name, listen_address, **forward_put(data),
                               etag=None if not is_tty() else current.etag())  # fmt: skip

    edit(dump_yaml(current.to_api()), FORWARD_TEMPLATE, apply)


def forward_put(data: dict[str, Any]) -> dict[str, Any]:
    """A forward's YAML/JSON body (``description``, ``config``, ``ports``) as keyword arguments
    of :meth:`Manager.update_forward`; 400 for wrong types or unknown port keys."""
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise NetworkError("yaml: config must be a mapping")
    ports = data.get("ports") or []
    if not isinstance(ports, list):
        raise NetworkError("yaml: ports must be a list")
    parsed = []
    for i, item in enumerate(ports):
        if not isinstance(item, dict):
            raise NetworkError(f"yaml: ports[{i}] must be a mapping")
        unknown = [k for k in item if k not in PORT_KEYS]
        if unknown:
            raise NetworkError.lines("yaml: unmarshal errors:",
                                     f"  field {unknown[0]} not found in type "
                                     "api.NetworkForwardPort")  # fmt: skip
        parsed.append(ForwardPort(**{k: yaml_text(item.get(k)) for k in PORT_KEYS}))
    return {"description": yaml_text(data.get("description")),
            "config": {str(k): yaml_text(v) for k, v in config.items()},
            "ports": parsed}  # fmt: skip


@forward.command("delete")
@one_forward
def forward_delete(ctx: click.Context, network_name: str, listen_address: str,
                   target: str | None) -> None:  # fmt: skip
    """Delete network forwards."""
    manager = checked_manager(ctx, target)
    manager.delete_forward(network_name, listen_address)
    click.echo(f"Network forward {listen_address} deleted")


@forward.group("port")
def port() -> None:
    """Manage network forward ports."""


@port.command("add")
@forward_arguments
@click.argument("protocol")
@click.argument("listen_ports", metavar="LISTEN_PORTS")
@click.argument("target_address")
@click.argument("target_ports", metavar="[TARGET_PORTS]", required=False, default="")
@click.option("--description", default="", help="Port description.")
@target_option
@click.pass_context
def port_add(ctx: click.Context, network_name: str, listen_address: str, protocol: str,
             listen_ports: str, target_address: str, target_ports: str, description: str,
             target: str | None) -> None:  # fmt: skip
    """Add ports to a forward (ports and a-b ranges, comma-separated; TARGET_PORTS: empty =
    the same, one = many-to-one, else the same count)."""
    manager = checked_manager(ctx, target)
    manager.add_forward_port(network_name, listen_address, ForwardPort(
        description, protocol, listen_ports, target_ports, target_address))  # fmt: skip


@port.command("remove")
@forward_arguments
@click.argument("protocol", required=False)
@click.argument("listen_ports", metavar="[LISTEN_PORTS]", required=False)
@click.option("--force", is_flag=True, help="Remove all ports that match.")
@target_option
@click.pass_context
def port_remove(ctx: click.Context, network_name: str, listen_address: str,
                protocol: str | None, listen_ports: str | None, force: bool,
                target: str | None) -> None:  # fmt: skip
    """Remove ports from a forward (exact match of PROTOCOL and LISTEN_PORTS as listed)."""
    manager = checked_manager(ctx, target)
    manager.remove_forward_ports(network_name, listen_address, protocol, listen_ports,
                                 force=force)  # fmt: skip


for _name, _alias in {"list": "ls", "delete": "rm"}.items():
    forward.add_command(forward.commands[_name], _alias)
