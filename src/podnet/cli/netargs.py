"""What ``podnetctl network``, ``network forward`` and ``config`` share: the ``lxc``-style
options and arguments, the store options any subcommand takes, the run's
:class:`~podnet.manage.manager.Manager`, ``key=value`` arguments and ``lxc … edit``."""

from __future__ import annotations

import sys
from typing import Any

import click

from podnet.cli.lxcfmt import FORMATS
from podnet.manage.manager import Manager
from podnet.networks.errors import NetworkError

__all__ = [
    "add_store_options",
    "checked_manager",
    "config_args",
    "edit",
    "format_option",
    "is_tty",
    "forward_arguments",
    "manager_of",
    "member_option",
    "network_argument",
    "one_forward",
    "one_network",
    "pairs",
    "store_options",
    "target_option",
    "yaml_text",
]

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


def manager_of(ctx: click.Context) -> Any:
    """The :class:`~podnet.manage.manager.Manager` for this run, made on first use from the
    store options (``--data-dir``, ``--busy-timeout``, ``--init``) given before or after the
    subcommand."""
    obj = ctx.find_object(dict)
    assert obj is not None, "the network group sets ctx.obj"
    if "manager" not in obj:
        obj["manager"] = Manager(obj["data_dir"], busy_timeout=obj["busy_timeout"],
                                 create=obj["init"],
                                 warn=lambda msg: click.echo(f"Warning: {msg}", err=True))
    return obj["manager"]


def checked_manager(ctx: click.Context, target: str | None) -> Any:
    """:func:`manager_of` once ``--target`` is known to name this node (what every command that
    takes ``--target`` checks first)."""
    manager = manager_of(ctx)
    manager.check_target(target)
    return manager


def _store_option(key: str) -> Any:
    """A callback keeping a store option's value in ``ctx.obj`` (the last one given wins)."""

    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False:
            ctx.ensure_object(dict)[key] = value

    return keep


def store_options() -> list[click.Option]:
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


def pairs(args: tuple[str, ...], message: str) -> dict[str, str]:
    """Every word ``key=value`` (NetworkError ``<message>: <word>`` for one without ``=``)."""
    out = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise NetworkError(f"{message}: {arg}")
        out[key] = value
    return out


def config_args(args: tuple[str, ...]) -> dict[str, str]:
    """``lxc``'s ``getConfig``: ``key value`` when exactly two words and the first has no
    ``=``, else every word ``key=value``."""
    if len(args) == 2 and "=" not in args[0]:
        return {args[0]: args[1]}
    return pairs(args, "Invalid key=value configuration")


def is_tty() -> bool:
    """Whether stdin is a terminal (``edit`` opens $EDITOR then)."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def edit(text: str, template: str, apply: Any) -> None:
    """``lxc … edit``: YAML from stdin when it is not a terminal, else $EDITOR with the help
    template, reopened after a parse or apply error until it succeeds or is aborted."""
    if not is_tty():
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


def yaml_text(value: Any) -> str:
    """A YAML scalar as the string LXD stores (``true`` → "true", 80 → "80")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        raise NetworkError(f"yaml: cannot unmarshal {type(value).__name__} into string")
    return str(value)


def add_store_options(group: click.Group) -> None:
    """Give every command under ``group`` the store options (:func:`store_options`), so they
    may follow the subcommand too."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            add_store_options(command)
        elif not any(p.name == "data_dir" for p in command.params):
            command.params.extend(store_options())
