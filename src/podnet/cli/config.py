"""``podnetctl config set|get|unset|show``: the server config (``network.ovn.*``) with ``lxc
config``'s argument order, output and messages, on the store directly, no daemon. The
API's ``PUT|PATCH /1.0`` change the same rows."""

from __future__ import annotations

import click

from podnet.checked import printable
from podnet.cli.lxcfmt import dump_yaml
from podnet.cli.netargs import add_store_options, config_args, manager_of
from podnet.cli.node import data_dir_option
from podnet.manage import server_config


@click.group()
@data_dir_option()
@click.option(
    "--busy-timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds to wait for the store's write lock.",
)
@click.option("--init", is_flag=True, help="Create the state database if --data-dir holds none.")
@click.pass_context
def config(ctx: click.Context, data_dir: str, busy_timeout: float, init: bool) -> None:
    """Manage the server config: network.ovn.northbound_connection, network.ovn.ca_cert,
    network.ovn.client_cert, network.ovn.client_key, network.ovn.integration_bridge."""
    ctx.ensure_object(dict).update(data_dir=data_dir, busy_timeout=busy_timeout, init=init)


@config.command("show")
@click.pass_context
def config_show(ctx: click.Context) -> None:
    """Show the server config (the keys that are set) as YAML."""
    values, _ = server_config.read(manager_of(ctx))
    click.echo(dump_yaml({"config": values}), nl=False)


@config.command("get")
@click.argument("key")
@click.pass_context
def config_get(ctx: click.Context, key: str) -> None:
    """Print a key's value (nothing when it is not set)."""
    values, _ = server_config.read(manager_of(ctx))
    if key in values:
        click.echo(printable(values[key]))


@config.command("set")
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...|KEY VALUE")
@click.pass_context
def config_set(ctx: click.Context, pairs: tuple[str, ...]) -> None:
    """Set server config keys."""
    server_config.update(manager_of(ctx), config_args(pairs), patch=True)


@config.command("unset")
@click.argument("key")
@click.pass_context
def config_unset(ctx: click.Context, key: str) -> None:
    """Unset a server config key."""
    server_config.update(manager_of(ctx), {key: ""}, patch=True)


add_store_options(config)
