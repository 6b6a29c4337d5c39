"""``podnetctl``: the command line over podnet's libraries.

Thin by design (sqlite-utils' model): each command parses its options, calls one library
function and prints what it returns. Library errors (:class:`~podnet.errors.CNIError` and
its runtime subclasses, OS errors) become one line ``Error: …`` on stderr and exit status 1;
usage errors exit 2 (click).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from podnet import __version__
from podnet.errors import CNIError
from podnet.networks.errors import NetworkError

#: Subcommands imported only when run (or listed): ``podnetctl network …`` does not pay for the
#: runtime's, the installer's or the API's imports (~25 ms of every call, measured).
LAZY_COMMANDS = {
    "agent": "podnet.cli.agent:agent",
    "config": "podnet.cli.config:config",
    "install": "podnet.cli.install:install",
    "net": "podnet.cli.net:net",
    "network": "podnet.cli.network:network",
    "pods": "podnet.cli.state:pods",
    "ports": "podnet.cli.state:ports",
    "proxy-init": "podnet.cli.proxy_init:proxy_init",
    "ranges": "podnet.cli.state:ranges",
    "serve": "podnet.cli.serve:serve",
    "trust": "podnet.cli.serve:trust",
    "uninstall": "podnet.cli.install:uninstall",
}


def error_line(err: BaseException) -> str:
    """One line for a library error: ``msg [CNI code N]; details`` / ``strerror: filename``."""
    if isinstance(err, CNIError):
        text = f"{err.msg} [CNI code {err.code}]"
        if err.details:
            text += f"; {err.details}"
    elif isinstance(err, OSError) and err.strerror:
        text = f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    else:
        text = str(err)
    return " ".join(text.split())


class _Group(click.Group):
    """The top-level group: loads subcommands on demand (:data:`LAZY_COMMANDS`) and maps library
    exceptions of any subcommand to a one-line error."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            module, _, attr = LAZY_COMMANDS[cmd_name].partition(":")
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        obj = ctx.ensure_object(dict)  # shared with the subcommands' contexts
        try:
            return super().invoke(ctx)
        except BaseException as err:
            # a store the failed command made (--init) and left empty goes again
            manager = obj.get("manager")
            ok = (isinstance(err, SystemExit) and not err.code) or (
                isinstance(err, click.exceptions.Exit) and not err.exit_code)
            if manager is not None and not ok:
                manager.discard_unused()
            if isinstance(err, NetworkError):  # lxc's wording: the message alone
                raise click.ClickException(str(err)) from err
            if isinstance(err, (CNIError, OSError)):
                raise click.ClickException(error_line(err)) from err
            raise


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podnetctl")
def cli() -> None:
    """podnet's command line: run CNI networks (cnitool-compatible), install the plugin, show
    the node state, and run the demo."""


@cli.command()
def demo() -> None:
    """Run the end-to-end demo in private network namespaces (root; ~10 s).

    Two pods with a hostPort each, HTTP through pod IPs, a node address, 127.0.0.1 and pod to
    pod's hostPort, the SQLite state, then DEL and a check that nothing is left. The machine's
    own interfaces, routes and firewall are not touched. Exit status 1 if any check fails.
    """
    # rich and the runtime only when the demo runs: podnetctl --help lists this command
    from podnet.cli.demo import run_demo

    raise SystemExit(0 if run_demo() else 1)


def main() -> None:
    """Console script ``podnetctl``."""
    cli(prog_name="podnetctl")
