"""``podnetctl proxy-init``: Linkerd's proxy-init redirection for a network namespace, with the
options of linkerd2-proxy-init (docs/sources.md#linkerd-proxy-init)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from podnet import checked
from podnet.firewall import redirect, redirect_apply

F = TypeVar("F", bound=Callable[..., Any])
_PORT = click.IntRange(1, 65535)
_ID = click.IntRange(0)  # a user or group ID


def _int_option(name: str, kind: click.IntRange, default: int, help: str) -> Callable[[F], F]:
    return click.option(name, type=kind, default=default, show_default=True, help=help)


def _list_option(name: str, metavar: str, help: str) -> Callable[[F], F]:
    """A comma-separated list, empty by default."""
    return click.option(name, default="", metavar=metavar, help=help)


@click.command("proxy-init")
@click.option("--netns", default=None, metavar="PATH",
              help="Network namespace file [default: the current one].")
@_int_option("--incoming-proxy-port", _PORT, 4143,
             "Proxy's inbound port: incoming TCP is redirected there.")
@_int_option("--outgoing-proxy-port", _PORT, 4140,
             "Proxy's outbound port: outgoing TCP is redirected there.")
@_int_option("--proxy-uid", _ID, 2102,
             "The proxy's user ID: its own traffic is not redirected (0: no rule).")
@_int_option("--proxy-gid", _ID, 0, "The proxy's group ID (0: no rule).")
@_list_option("--inbound-ports-to-ignore", "PORTS",
              "Inbound ports and a-b ranges (comma-separated) that bypass the proxy.")
@_list_option("--outbound-ports-to-ignore", "PORTS",
              "Outbound ports and a-b ranges that bypass the proxy.")
@_list_option("--subnets-to-ignore", "CIDRS",
              "Inbound source subnets (comma-separated) that bypass the proxy.")
@_list_option("--ports-to-redirect", "PORTS",
              "Redirect only these inbound ports (linkerd's redirect-listed mode).")
@click.option(
    "--firewall",
    type=click.Choice(["iptables-legacy", "iptables-nft", "nftables"]),
    default="iptables-nft",
    show_default=True,
    help="Which firewall to program.",
)
@click.option("--ipv6", is_flag=True, help="Also redirect IPv6 (an IPv6 failure is an error).")
@click.option("--simulate", is_flag=True, help="Print the rules; change nothing.")
@click.option("--cleanup", is_flag=True, help="Remove everything proxy-init installed.")
def proxy_init(netns: str | None, incoming_proxy_port: int, outgoing_proxy_port: int,
               proxy_uid: int, proxy_gid: int, inbound_ports_to_ignore: str,
               outbound_ports_to_ignore: str, subnets_to_ignore: str, ports_to_redirect: str,
               firewall: str, ipv6: bool, simulate: bool, cleanup: bool) -> None:  # fmt: skip
    """Redirect a pod's TCP through its proxy: inbound to --incoming-proxy-port, outbound to
    --outgoing-proxy-port, except the proxy's own traffic, loopback and ignored ports/subnets."""
    if cleanup:
        for tool, text in redirect_apply.cleanup(firewall, ipv6, netns):
            click.echo(f"# {tool}\n{text}", nl=False)
        return
    def parsed(option: str, parse: Any, value: str) -> Any:
        try:
            return parse(value)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint=f"'--{option}'") from None

    subnets = [parsed("subnets-to-ignore", checked.network, s.strip())
               for s in subnets_to_ignore.split(",") if s.strip()]  # fmt: skip
    options = redirect.RedirectOptions(
        incoming_proxy_port=incoming_proxy_port, outgoing_proxy_port=outgoing_proxy_port,
        proxy_uid=proxy_uid, proxy_gid=proxy_gid,
        inbound_ports_to_ignore=parsed("inbound-ports-to-ignore", redirect.parse_ports,
                                       inbound_ports_to_ignore),
        outbound_ports_to_ignore=parsed("outbound-ports-to-ignore", redirect.parse_ports,
                                        outbound_ports_to_ignore),
        subnets_to_ignore=subnets,
        ports_to_redirect=parsed("ports-to-redirect", redirect.parse_ports, ports_to_redirect),
    )  # fmt: skip
    steps = (redirect_apply.plan if simulate else redirect_apply.apply)(
        options, firewall, ipv6, netns
    )
    for tool, text in steps:
        click.echo(f"# {tool}\n{text}", nl=False)
