"""``podnetctl serve`` (the LXD-compatible REST API) and ``podnetctl trust
add|add-token|list|remove`` (the client certificates the API's TLS listener lets in)."""

from __future__ import annotations

import json
import ssl
import subprocess
from typing import TextIO

import click

from podnet.api import tokens
from podnet.api.tokens import check_certificate
from podnet.checked import one_line
from podnet.cli import node
from podnet.manage.manager import Manager
from podnet.store import open_store

data_dir_option = node.data_dir_option("podnet's state directory (podnet.db, unix.socket).")


@click.command()
@data_dir_option
@click.option("--group", default=None,
              help="Group owning the data directory (mode 0750) and the unix socket (mode "
                   "0660): its members may use the API [default: root's group].")
@click.option("--listen", default=None, metavar="ADDR:PORT",
              help="Also listen on TCP with TLS ([::]:8443); needs --tls-cert and --tls-key.")
@click.option("--tls-cert", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Server certificate (PEM) for --listen.")
@click.option("--tls-key", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Server key (PEM) for --listen.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="Server log level (info logs one line per request).")
def serve(data_dir: str, group: str | None, listen: str | None, tls_cert: str | None,
          tls_key: str | None, log_level: str) -> None:  # fmt: skip
    """Serve the LXD-compatible REST API for networks and forwards on <data-dir>/unix.socket
    (so `LXD_DIR=<data-dir> lxc network forward …` works), optionally also over TLS.

    Stops gracefully on SIGTERM. Every request is logged on one line."""
    # uvicorn only when a command needs it: podnetctl --help lists these commands
    from podnet.api.server import parse_listen
    from podnet.api.server import serve as run

    if listen and not (tls_cert and tls_key):
        raise click.UsageError("--listen needs --tls-cert and --tls-key (TCP is TLS only)")
    if listen:
        try:
            parse_listen(listen)
        except ValueError as err:
            raise click.UsageError(str(err)) from None
    manager = Manager(data_dir, warn=lambda msg: click.echo(f"Warning: {msg}", err=True))
    try:
        run(manager, group=group, listen=listen, tls_cert=tls_cert, tls_key=tls_key,
            log_level=log_level)  # fmt: skip
    except KeyError as err:
        raise click.ClickException(f"unknown group {err}") from None
    except OSError as err:
        raise click.ClickException(str(err)) from None


@click.group()
def trust() -> None:
    """Manage the client certificates trusted by `podnetctl serve --listen`."""


def _store(data_dir: str):  # type: ignore[no-untyped-def]

    return open_store(data_dir)


@trust.command("add")
@click.argument("certificate", type=click.File("r"))
@click.option("--name", default="", help="A name for the client.")
@data_dir_option
def trust_add(certificate: TextIO, name: str, data_dir: str) -> None:
    """Trust a client certificate (a PEM file, '-' for stdin)."""
    from podnet.api.server import fingerprint  # uvicorn: see serve

    pem = certificate.read()
    try:
        der = ssl.PEM_cert_to_DER_cert(pem.strip())
    except ValueError as err:
        raise click.ClickException(f"not a PEM certificate: {err}") from None
    try:
        check_certificate(der)
    except ValueError as err:
        raise click.ClickException(f"not a PEM certificate: {err}") from None
    fp = fingerprint(der)
    with _store(data_dir) as store, store.write():
        added = store.trust.add(fp, name or certificate.name, ssl.DER_cert_to_PEM_cert(der))
    click.echo(f"{'Added' if added else 'Already trusted'} {fp}")


def _node_addresses() -> list[str]:
    """This node's global addresses (``ip -j addr``), for a token of a wildcard listener."""
    out = subprocess.run(["ip", "-j", "addr", "show", "scope", "global"], capture_output=True,
                         text=True, timeout=30, check=False)  # fmt: skip
    if out.returncode != 0:
        return []
    return [a["local"] for link in json.loads(out.stdout or "[]")
            for a in link.get("addr_info", []) if a.get("local")]  # fmt: skip


@trust.command("add-token")
@click.argument("name")
@click.option("--expiry", default="1h", show_default=True,
              help="How long the token stays valid (30s, 15m, 1h, 7d).")
@click.option("--address", "addresses", multiple=True, metavar="ADDR:PORT",
              help="Where clients reach the API (repeatable) [default: serve's --listen, or "
                   "this node's addresses when it listens on all].")
@data_dir_option
def trust_add_token(name: str, expiry: str, addresses: tuple[str, ...], data_dir: str) -> None:
    """Print a trust token for client NAME: `lxc remote add REMOTE TOKEN` (or the token as the
    password `lxc remote add` asks for) then trusts that client's certificate. A token works
    once, until it expires. Needs `podnetctl serve --listen` to have run on this data dir (the
    token names its address and certificate)."""
    from podnet.api.server import CERT_STATE, LISTEN_STATE, parse_listen  # uvicorn: see serve

    if one_line(name) != name or not name.strip() or len(name) > 255:
        raise click.UsageError("NAME must be one line of at most 255 characters")
    try:
        seconds = tokens.parse_expiry(expiry)
    except ValueError as err:
        raise click.UsageError(f"--expiry: {err}") from None
    for address in addresses:
        try:
            parse_listen(address)
        except ValueError as err:
            raise click.UsageError(str(err).replace("--listen", "--address", 1)) from None
    with _store(data_dir) as store:
        listen, fingerprint = store.get_state(LISTEN_STATE), store.get_state(CERT_STATE)
        if fingerprint is None or (listen is None and not addresses):
            raise click.ClickException(
                "the API has not listened on TCP with this data dir yet: run podnetctl serve "
                "--listen ADDR:PORT --tls-cert … --tls-key … first")  # fmt: skip
        found = list(addresses) or tokens.listen_addresses(str(listen), _node_addresses())
        if not found:
            raise click.ClickException(f"{listen} listens on every address and this node has "
                                       "none: give --address ADDR:PORT")  # fmt: skip
        token = tokens.issue(store, name, fingerprint, found, seconds)
    click.echo(token.encode())


@trust.command("list")
@data_dir_option
def trust_list(data_dir: str) -> None:
    """List the trusted client certificates (fingerprint and name)."""
    with _store(data_dir) as store:
        for fp, name, _ in store.trust.all():
            click.echo(f"{fp}  {name}")


@trust.command("remove")
@click.argument("fingerprint_prefix", metavar="FINGERPRINT")
@data_dir_option
def trust_remove(fingerprint_prefix: str, data_dir: str) -> None:
    """Stop trusting a certificate (its fingerprint, or at least its first 12 hex digits)."""
    if len(fingerprint_prefix) < 12:
        raise click.ClickException("give at least 12 hex digits of the fingerprint")
    with _store(data_dir) as store, store.write():
        removed = store.trust.remove(fingerprint_prefix.lower())
    if not removed:
        raise click.ClickException("Certificate not found")
    if len(removed) > 1:
        raise click.ClickException("Several certificates match; give more of the fingerprint")
    click.echo(f"Removed {removed[0]}")
