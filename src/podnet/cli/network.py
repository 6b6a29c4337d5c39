"""``podnetctl network …`` and ``podnetctl network forward …``: networks and forwards with
``lxc``'s argument order, output and messages (``Network forward 198.51.100.1 created``,
``Error: …`` and exit 1), working on the store directly (``--data-dir`` / ``PODNET_DATA_DIR``),
no daemon. Each command is one call into :class:`podnet.drivers.manager.Manager`.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from podnet.checked import printable
from podnet.cli.lxcfmt import FORMATS, dump_yaml, load_yaml, render_list
from podnet.cli.node import SHOWN, default_data_dir
from podnet.networks.errors import NetworkError
from podnet.networks.model import FORWARD_KEYS, PORT_KEYS, Forward, ForwardPort

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

target_option = click.option("--target", "target", metavar="MEMBER",
                             help="Cluster member name (must be this node).")  # fmt: skip
member_option = click.option(
    "--target", "target", metavar="MEMBER",
    help="Cluster member name: this node for its own networks; for a cluster network any "
    "member (its OVN chassis name), whose own keys (a physical network's parent) are meant.")
format_option = click.option("--format", "-f", "fmt", default="table", show_default=True,
                             help=f"Format ({'|'.join(FORMATS)}).")  # fmt: skip
network_argument = click.argument("network_name", metavar="NETWORK")


def one_network(f: Any) -> Any:
    """``NAME [--target MEMBER]`` and the context: a command on one network as a whole."""
    return click.argument("name")(target_option(click.pass_context(f)))


def one_forward(f: Any) -> Any:
    """``NETWORK LISTEN_ADDRESS [--target MEMBER]`` and the context: a command on one forward
    as a whole."""
    return forward_arguments(target_option(click.pass_context(f)))


def forward_arguments(f: Any) -> Any:
    """``NETWORK LISTEN_ADDRESS``, the first two arguments of every command on one forward."""
    return network_argument(click.argument("listen_address")(f))


def _manager(ctx: click.Context) -> Any:
    """The :class:`~podnet.drivers.manager.Manager` for this run, made on first use from the
    store options (``--data-dir``, ``--busy-timeout``, ``--init``) given before or after the
    subcommand."""
    from podnet.drivers.manager import Manager

    obj = ctx.find_object(dict)
    assert obj is not None, "the network group sets ctx.obj"
    if "manager" not in obj:
        obj["manager"] = Manager(obj["data_dir"], busy_timeout=obj["busy_timeout"],
                                 create=obj["init"],
                                 warn=lambda msg: click.echo(f"Warning: {msg}", err=True))
    return obj["manager"]


def _checked_manager(ctx: click.Context, target: str | None) -> Any:
    """:func:`_manager` once ``--target`` is known to name this node (what every command that
    takes ``--target`` checks first)."""
    manager = _manager(ctx)
    manager.check_target(target)
    return manager


def _store_option(key: str) -> Any:
    """A callback keeping a store option's value in ``ctx.obj`` (the last one given wins)."""

    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False:
            ctx.ensure_object(dict)[key] = value

    return keep


def _store_options() -> list[click.Option]:
    """``--data-dir``, ``--busy-timeout`` and ``--init`` for a subcommand, so they may also
    follow it (``podnetctl network forward list br0 --data-dir …``)."""
    return [
        click.Option(["--data-dir"], default=None, expose_value=False, is_eager=True,
                     callback=_store_option("data_dir"),
                     help="podnet's state directory (podnet.db) [default: the group's].",
                     metavar="DIR"),
        click.Option(["--busy-timeout"], type=float, default=None, expose_value=False,
                     is_eager=True, callback=_store_option("busy_timeout"),
                     help="Seconds to wait for the store's write lock."),
        click.Option(["--init"], is_flag=True, default=False, expose_value=False, is_eager=True,
                     callback=_store_option("init"),
                     help="Create the state database if --data-dir holds none."),
    ]  # fmt: skip


def _pairs(args: tuple[str, ...], message: str) -> dict[str, str]:
    out = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise NetworkError(f"{message}: {arg}")
        out[key] = value
    return out


def _config_args(args: tuple[str, ...]) -> dict[str, str]:
    """``lxc``'s ``getConfig``: ``key value`` when exactly two words and the first has no
    ``=``, else every word ``key=value``."""
    if len(args) == 2 and "=" not in args[0]:
        return {args[0]: args[1]}
    return _pairs(args, "Invalid key=value configuration")


def _is_tty() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _edit(text: str, template: str, apply: Any) -> None:
    """``lxc … edit``: YAML from stdin when it is not a terminal, else $EDITOR with the help
    template, reopened after a parse or apply error until it succeeds or is aborted."""
    if not _is_tty():
        apply(sys.stdin.read())
        return
    content = f"{template}\n\n{text}"
    while True:
        edited = click.edit(content, extension=".yaml")
        if edited is None:
            return
        body = "\n".join(line for line in edited.splitlines() if not line.startswith("#"))
        try:
            apply(body)
            return
        except NetworkError as err:
            click.echo(f"Config parsing error: {err}", err=True)
            click.echo("Press enter to open the editor again or ctrl+c to abort change")
            sys.stdin.readline()
            content = edited


@click.group()
@click.option("--data-dir", envvar="PODNET_DATA_DIR", default=default_data_dir, show_default=SHOWN,
              show_envvar=True, help="podnet's state directory (podnet.db).")
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
    nets = _manager(ctx).list_networks()
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
    shown = _manager(ctx).get_network(name, target)
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
    manager = _manager(ctx)
    manager.create_network(name, type=type_, description=description,
                           config=_pairs(config, "Bad key/value pair"), target=target)  # fmt: skip
    click.echo(f"Network {name} pending on member {target}" if target else
               f"Network {name} created")  # fmt: skip


@network.command("get")
@click.argument("name")
@click.argument("key")
@member_option
@click.pass_context
def network_get(ctx: click.Context, name: str, key: str, target: str | None) -> None:
    """Get values for network configuration keys (a key that is not set prints nothing)."""
    value = _manager(ctx).get_network(name, target).config.get(key)
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
    _manager(ctx).update_network(name, config=_config_args(config), patch=True, target=target)


@network.command("unset")
@click.argument("name")
@click.argument("key")
@member_option
@click.pass_context
def network_unset(ctx: click.Context, name: str, key: str, target: str | None) -> None:
    """Unset network configuration keys."""
    _manager(ctx).update_network(name, config={key: ""}, patch=True, target=target)


@network.command("edit")
@click.argument("name")
@member_option
@click.pass_context
def network_edit(ctx: click.Context, name: str, target: str | None) -> None:
    """Edit network configurations as YAML (stdin when it is not a terminal, else $EDITOR)."""
    manager = _manager(ctx)
    current = manager.get_network(name, target)

    def apply(text: str) -> None:
        allowed = ("config", "description", "name", "type", "used_by", "managed", "status",
                   "locations")  # fmt: skip
        data = load_yaml(text, allowed, "api.NetworkPut", strict=False)
        config = data.get("config") or {}
        if not isinstance(config, dict):
            raise NetworkError("yaml: config must be a mapping")
        manager.update_network(name, description=str(data.get("description") or ""),
                               config={str(k): _text(v) for k, v in config.items()},
                               target=target)  # fmt: skip

    _edit(dump_yaml(current.to_api()), NETWORK_TEMPLATE, apply)


@network.command("delete")
@one_network
def network_delete(ctx: click.Context, name: str, target: str | None) -> None:
    """Delete networks (refused while pods use them; their forwards go with them).

    --target must name this node; a cluster network is deleted on every member, so it takes
    none."""
    _manager(ctx).delete_network(name, target)
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
    for line in _manager(ctx).restore(attach_new=attach_new):
        click.echo(line)


def _text(value: Any) -> str:
    """A YAML scalar as the string LXD stores (``true`` → "true", 80 → "80")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        raise NetworkError(f"yaml: cannot unmarshal {type(value).__name__} into string")
    return str(value)


# -- forwards ------------------------------------------------------------------------------------
@network.group("forward")
def forward() -> None:
    """Manage network forwards."""


@forward.command("list")
@network_argument
@format_option
@click.pass_context
def forward_list(ctx: click.Context, network_name: str, fmt: str) -> None:
    """List available network forwards."""
    forwards = _manager(ctx).list_forwards(network_name)
    rows = [[f.listen_address, f.description, f.default_target, str(len(f.ports))]
            for f in forwards]  # fmt: skip
    headers = ["LISTEN ADDRESS", "DESCRIPTION", "DEFAULT TARGET ADDRESS", "PORTS"]
    click.echo(render_list(headers, rows, fmt, [f.to_api() for f in forwards]), nl=False)


@forward.command("show")
@one_forward
def forward_show(ctx: click.Context, network_name: str, listen_address: str,
                 target: str | None) -> None:  # fmt: skip
    """Show network forward configurations."""
    manager = _checked_manager(ctx, target)
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
    manager = _checked_manager(ctx, target)
    created = manager.create_forward(network_name, Forward(
        listen_address, description, _pairs(config, "Bad key/value pair")))  # fmt: skip
    click.echo(f"Network forward {created.listen_address} created")


@forward.command("get")
@forward_arguments
@click.argument("key")
@click.pass_context
def forward_get(ctx: click.Context, network_name: str, listen_address: str, key: str) -> None:
    """Get values for network forward configuration keys (an unset key prints nothing; a key
    that cannot exist is an error)."""
    found = _manager(ctx).get_forward(network_name, listen_address)
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
    manager = _checked_manager(ctx, target)
    manager.update_forward(network_name, listen_address, config=_config_args(config),
                           patch=True, client=True)  # fmt: skip


@forward.command("unset")
@forward_arguments
@click.argument("key")
@target_option
@click.pass_context
def forward_unset(ctx: click.Context, network_name: str, listen_address: str, key: str,
                  target: str | None) -> None:  # fmt: skip
    """Unset network forward configuration keys."""
    manager = _checked_manager(ctx, target)
    manager.update_forward(network_name, listen_address, config={key: ""}, patch=True,
                           client=True)  # fmt: skip


@forward.command("edit")
@one_forward
def forward_edit(ctx: click.Context, network_name: str, listen_address: str,
                 target: str | None) -> None:  # fmt: skip
    """Edit network forward configurations as YAML (stdin when it is not a terminal, else
    $EDITOR); ``listen_address`` and ``location`` cannot be changed."""
    manager = _checked_manager(ctx, target)
    current = manager.get_forward(network_name, listen_address)

    def apply(text: str) -> None:
        data = load_yaml(text, (*FORWARD_KEYS, "listen_address", "location"),
                         "api.NetworkForward")  # fmt: skip
        manager.update_forward(network_name, listen_address, **forward_put(data),
                               etag=None if not _is_tty() else current.etag())  # fmt: skip

    _edit(dump_yaml(current.to_api()), FORWARD_TEMPLATE, apply)


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
        parsed.append(ForwardPort(**{k: _text(item.get(k)) for k in PORT_KEYS}))
    return {"description": _text(data.get("description")),
            "config": {str(k): _text(v) for k, v in config.items()}, "ports": parsed}  # fmt: skip


@forward.command("delete")
@one_forward
def forward_delete(ctx: click.Context, network_name: str, listen_address: str,
                   target: str | None) -> None:  # fmt: skip
    """Delete network forwards."""
    manager = _checked_manager(ctx, target)
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
    manager = _checked_manager(ctx, target)
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
    manager = _checked_manager(ctx, target)
    manager.remove_forward_ports(network_name, listen_address, protocol, listen_ports,
                                 force=force)  # fmt: skip


for _group, _aliases in ((network, {"list": "ls", "delete": "rm"}),
                         (forward, {"list": "ls", "delete": "rm"})):  # fmt: skip
    for _name, _alias in _aliases.items():
        _group.add_command(_group.commands[_name], _alias)


def _add_store_options(group: click.Group) -> None:
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _add_store_options(command)
        elif not any(p.name == "data_dir" for p in command.params):
            command.params.extend(_store_options())


_add_store_options(network)
