"""``podnetctl network …`` and ``podnetctl network forward …``: networks and forwards with
``lxc``'s argument order, output and messages (``Network forward 198.51.100.1 created``,
``Error: …`` and exit 1), working on the store directly (``--data-dir`` / ``PODNET_DATA_DIR``),
no daemon. Each command is one call into :class:`podnet.manage.manager.Manager`.
"""

from __future__ import annotations

from typing import Any

import click

from podnet.checked import printable
from podnet.cli.forward import forward
from podnet.cli.lxcfmt import dump_yaml, load_yaml, render_list
from podnet.cli.netargs import (
    add_store_options,
    config_args,
    edit,
    format_option,
    manager_of,
    member_option,
    one_network,
    pairs,
    yaml_text,
)
from podnet.cli.node import data_dir_option
from podnet.networks.errors import NetworkError

__all__ = ["network"]

NETWORK_TEMPLATE = """### This is a YAML representation of the network.
### Any line starting with a '# will be ignored.
###
### A network consists of a set of configuration items.
###
### An example would look like:
### name: lxdbr0
### config:
###   ipv4.address: 10.62.42.1/24
###   ipv4.nat: true
###   ipv6.address: fd00:56ad:9f7a:9800::1/64
###   ipv6.nat: true
### managed: true
### type: bridge
###
### Note that only the configuration can be changed."""

@click.group()
@data_dir_option()
@click.option("--busy-timeout", type=float, default=5.0, show_default=True,
              help="Seconds to wait for the store's write lock.")
@click.option("--init", is_flag=True,
              help="Create the state database if --data-dir holds none (else refused: a "
              "mistyped data dir must not become an empty store).")
@click.pass_context
def network(ctx: click.Context, data_dir: str, busy_timeout: float, init: bool) -> None:
    """Manage networks (bridge networks pods join; the ptp networks of podnet conflists).

    The store options (--data-dir, --busy-timeout, --init) may also follow any subcommand."""
    obj = ctx.ensure_object(dict)
    obj.update(data_dir=data_dir, busy_timeout=busy_timeout, init=init)


# -- networks ------------------------------------------------------------------------------------
@network.command("list")
@format_option
@click.pass_context
def network_list(ctx: click.Context, fmt: str) -> None:
    """List available networks."""
    nets = manager_of(ctx).list_networks()
    rows = [[n.name, n.type, "YES", n.config.get("ipv4.address", ""),
             n.config.get("ipv6.address", ""), n.description, str(len(n.used_by)),
             n.status.upper()] for n in nets]  # fmt: skip
    headers = ["NAME", "TYPE", "MANAGED", "IPV4", "IPV6", "DESCRIPTION", "USED BY", "STATE"]
    click.echo(render_list(headers, rows, fmt, [n.to_api() for n in nets]), nl=False)
    _hint_unavailable(nets)


def _hint_unavailable(nets: Any) -> None:
    """On stderr, for each network that is ``Unavailable`` on this node: how to bring it back."""
    for n in nets:
        if n.status == "Unavailable":
            click.echo(f"network {n.name} is unavailable on this node: 'podnetctl network "
                       "restore' brings back what it can and names what it cannot",
                       err=True)  # fmt: skip


@network.command("show")
@click.argument("name")
@member_option
@click.pass_context
def network_show(ctx: click.Context, name: str, target: str | None) -> None:
    """Show network configurations (with --target: that member's own keys and status)."""
    shown = manager_of(ctx).get_network(name, target)
    click.echo(dump_yaml(shown.to_api()), nl=False)
    _hint_unavailable([shown])


@network.command("create")
@click.argument("name")
@click.argument("config", nargs=-1)
@click.option("--type", "-t", "type_", default="bridge", show_default=True,
              help="Network type (bridge, physical, ovn).")
@click.option("--description", default="", help="Network description.")
@member_option
@click.pass_context
def network_create(ctx: click.Context, name: str, config: tuple[str, ...], type_: str,
                   description: str, target: str | None) -> None:  # fmt: skip
    """Create new networks: a Linux bridge NAME with its gateway addresses and NAT.

    Keys: ipv4.address, ipv6.address (CIDR, auto, none), ipv4.nat, ipv6.nat, ipv4.nat.address,
    ipv6.nat.address, bridge.mtu, user.*.

    A physical network is made as in an LXD cluster: first each member's parent
    (parent=IFACE --target MEMBER: the network is pending), then the network itself, without
    --target."""
    manager = manager_of(ctx)
    manager.create_network(name, type=type_, description=description,
                           config=pairs(config, "Bad key/value pair"), target=target)  # fmt: skip
    click.echo(f"Network {name} pending on member {target}" if target else
               f"Network {name} created")  # fmt: skip


@network.command("get")
@click.argument("name")
@click.argument("key")
@member_option
@click.pass_context
def network_get(ctx: click.Context, name: str, key: str, target: str | None) -> None:
    """Get values for network configuration keys (a key that is not set prints nothing)."""
    value = manager_of(ctx).get_network(name, target).config.get(key)
    if value is not None:
        click.echo(printable(value))


@network.command("set")
@click.argument("name")
@click.argument("config", nargs=-1, required=True)
@member_option
@click.pass_context
def network_set(ctx: click.Context, name: str, config: tuple[str, ...],
                target: str | None) -> None:  # fmt: skip
    """Set network configuration keys (KEY=VALUE…, or KEY VALUE; a member's own, such as a
    physical network's parent, with --target)."""
    manager_of(ctx).update_network(name, config=config_args(config), patch=True, target=target)


@network.command("unset")
@click.argument("name")
@click.argument("key")
@member_option
@click.pass_context
def network_unset(ctx: click.Context, name: str, key: str, target: str | None) -> None:
    """Unset network configuration keys."""
    manager_of(ctx).update_network(name, config={key: ""}, patch=True, target=target)


@network.command("edit")
@click.argument("name")
@member_option
@click.pass_context
def networkedit(ctx: click.Context, name: str, target: str | None) -> None:
    """Edit network configurations as YAML (stdin when it is not a terminal, else $EDITOR)."""
    manager = manager_of(ctx)
    current = manager.get_network(name, target)

    def apply(text: str) -> None:
        allowed = ("config", "description", "name", "type", "used_by", "managed", "status",
                   "locations")  # fmt: skip
        data = load_yaml(text, allowed, "api.NetworkPut", strict=False)
        config = data.get("config") or {}
        if not isinstance(config, dict):
            raise NetworkError("yaml: config must be a mapping")
        manager.update_network(name, description=str(data.get("description") or ""),
                               config={str(k): yaml_text(v) for k, v in config.items()},
                               target=target)  # fmt: skip

    edit(dump_yaml(current.to_api()), NETWORK_TEMPLATE, apply)


@network.command("delete")
@one_network
def network_delete(ctx: click.Context, name: str, target: str | None) -> None:
    """Delete networks (refused while pods use them; their forwards go with them).

    --target must name this node; a cluster network is deleted on every member, so it takes
    none."""
    manager_of(ctx).delete_network(name, target)
    click.echo(f"Network {name} deleted")


@network.command("restore")
@click.option("--attach-new", is_flag=True,
              help="Also attach an uplink parent recorded for this node that is not attached "
              "yet (restore alone only keeps one already in its OVS bridge).")  # fmt: skip
@click.pass_context
def network_restore(ctx: click.Context, attach_new: bool) -> None:
    """Bring bridges, their pods' ports and table inet podnet back from the store (at boot).

    One line per bridge, port, uplink and the table: what was changed, or that it was already
    as the store has it. A physical uplink's parent not attached yet is named, not attached,
    unless --attach-new."""
    for line in manager_of(ctx).restore(attach_new=attach_new):
        click.echo(line)


network.add_command(forward)
for _name, _alias in {"list": "ls", "delete": "rm"}.items():
    network.add_command(network.commands[_name], _alias)

add_store_options(network)
