"""``podnetctl serve`` (the LXD-compatible REST API) and ``podnetctl trust add|list|remove``
(the client certificates the API's TLS listener lets in)."""

from __future__ import annotations

from typing import TextIO

import click

from podnet.cli.node import SHOWN, default_data_dir

data_dir_option = click.option(
    "--data-dir", envvar="PODNET_DATA_DIR", default=default_data_dir, show_default=SHOWN,
    show_envvar=True, help="podnet's state directory (podnet.db, unix.socket).",
)  # fmt: skip


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
    from podnet.api.server import parse_listen
    from podnet.api.server import serve as run
    from podnet.drivers.manager import Manager

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
    from podnet.store import open_store

    return open_store(data_dir)


@trust.command("add")
@click.argument("certificate", type=click.File("r"))
@click.option("--name", default="", help="A name for the client.")
@data_dir_option
def trust_add(certificate: TextIO, name: str, data_dir: str) -> None:
    """Trust a client certificate (a PEM file, '-' for stdin)."""
    import ssl

    from podnet.api.server import fingerprint

    pem = certificate.read()
    try:
        der = ssl.PEM_cert_to_DER_cert(pem.strip())
    except ValueError as err:
        raise click.ClickException(f"not a PEM certificate: {err}") from None
    fp = fingerprint(der)
    with _store(data_dir) as store, store.write():
        added = store.trust.add(fp, name or certificate.name, ssl.DER_cert_to_PEM_cert(der))
    click.echo(f"{'Added' if added else 'Already trusted'} {fp}")


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
