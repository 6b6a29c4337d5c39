"""``podnetctl``: the command line over podnet's libraries.

Thin by design (sqlite-utils' model): each command parses its options, calls one library
function and prints what it returns. Library errors (:class:`~podnet.cni.errors.CNIError` and
its runtime subclasses, OS errors) become one line ``Error: …`` on stderr and exit status 1;
usage errors exit 2 (click).
"""

from __future__ import annotations

from typing import Any

import click

from podnet import __version__
from podnet.cli import install as install_cmd
from podnet.cli import net as net_cmd
from podnet.cli import network as network_cmd
from podnet.cli import proxy_init as proxy_init_cmd
from podnet.cli import serve as serve_cmd
from podnet.cli import state as state_cmd
from podnet.cni.errors import CNIError


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
    """The top-level group: maps library exceptions of any subcommand to a one-line error."""

    def invoke(self, ctx: click.Context) -> Any:
        from podnet.networks.errors import NetworkError

        try:
            return super().invoke(ctx)
        except NetworkError as err:  # lxc's wording: the message alone
            raise click.ClickException(str(err)) from err
        except (CNIError, OSError) as err:
            raise click.ClickException(error_line(err)) from err


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podnetctl")
def cli() -> None:
    """podnet's command line: run CNI networks (cnitool-compatible), install the plugin, show
    the node state, and run the demo."""


cli.add_command(net_cmd.net)
cli.add_command(network_cmd.network)
cli.add_command(install_cmd.install)
cli.add_command(proxy_init_cmd.proxy_init)
cli.add_command(serve_cmd.serve)
cli.add_command(serve_cmd.trust)
for command in state_cmd.COMMANDS:
    cli.add_command(command)


@cli.command()
def demo() -> None:
    """Run the end-to-end demo in private network namespaces (root; ~10 s).

    Two pods with a hostPort each, HTTP through pod IPs, a node address, 127.0.0.1 and pod to
    pod's hostPort, the SQLite state, then DEL and a check that nothing is left. The machine's
    own interfaces, routes and firewall are not touched. Exit status 1 if any check fails.
    """
    from podnet.cli.demo import run_demo

    raise SystemExit(0 if run_demo() else 1)


def main() -> None:
    """Console script ``podnetctl``."""
    cli(prog_name="podnetctl")
