"""``podnetctl install``: plugin executables into a CNI bin dir, a conflist into a conf dir."""

from __future__ import annotations

import functools
from collections.abc import Callable

import click

from podnet.runtime import hostinstall, installer, uninstaller, units
from podnet.runtime.files import Installed
from podnet.runtime.sourcecheck import UnsafeSource


@click.command()
@click.option(
    "--bin-dir",
    default=installer.DEFAULT_BIN_DIR,
    show_default=True,
    help="CNI plugin directory to write the plugin executables into.",
)
@click.option(
    "--conf-dir",
    default="/etc/cni/net.d",
    show_default=True,
    help="Network config directory for the conflist.",
)
@click.option(
    "--range",
    "ranges",
    multiple=True,
    metavar="CIDR",
    help="Pod address range (repeatable; IPv4 and/or IPv6) "
    f"[default: {', '.join(installer.DEFAULT_RANGES)}].",
)
@click.option("--network", default=None, metavar="NETWORK",
              help="Write a conflist for this bridge or OVN network of the store ('network' "
              "instead of 'ranges'; excludes --range). --name defaults to it.")
@click.option("--name", default=None, help="Network name (the conflist's; its file is "
              "10-<name>.conflist) [default: podnet, or --network].")
@click.option(
    "--data-dir",
    default=None,
    help="The node's store (dataDir): written to the node config, so plugins allow it and "
    "podnetctl uses it [default: the node config's, else /var/lib/podnet].",
)
@click.option("--no-conflist", is_flag=True, help="Install the plugin executables only.")
@click.option("--systemd", is_flag=True,
              help="Also install and enable a systemd unit that runs 'podnetctl network restore' "
              "at boot (bridges, forwards and table inet podnet back from the store).")
@click.option("--unit-dir", default=units.DEFAULT_UNIT_DIR, show_default=True,
              help="Where --systemd writes units.")
@click.option("--node-conf", default=None, metavar="FILE",
              help="The node config file [default: $PODNET_CONF, else /etc/podnet/podnet.conf].")
@click.option("--bundle-dir", default=None, metavar="DIR",
              help="Run from a self-contained bundle (deploy/): copy it into DIR, where the "
              "node's /opt/podnet is mounted, and write plugin files that run it (no Python "
              "needed on the node); bundles no plugin file runs any more are removed.")
def install(
    bin_dir: str,
    conf_dir: str,
    ranges: tuple[str, ...],
    network: str | None,
    name: str | None,
    data_dir: str | None,
    no_conflist: bool,
    systemd: bool,
    unit_dir: str,
    node_conf: str | None,
    bundle_dir: str | None,
) -> None:
    """Install the podnet plugins and a conflist for network --name (idempotent).

    Plugin files run this Python by absolute path, so a runtime's PATH (pyenv shims, other
    virtualenvs) cannot change which podnet runs. Runtimes run them as root: the install is
    refused, and nothing written, when anyone but root could change this Python, its venv or
    podnet's source tree (one line 'podnetctl install: refusing: PATH …', exit status 1).

    With --data-dir, the node config (root's, 0644) names it as the node's store: every plugin
    call allows it and every podnetctl command uses it when given no --data-dir. Warnings go
    to stderr when the conflist replaces another's ranges or sorts first in --conf-dir.
    """
    if network is not None and ranges:
        raise click.UsageError("--network and --range exclude each other")
    try:
        if bundle_dir is not None:
            run: Callable[..., list[Installed]] = functools.partial(
                hostinstall.install_bundle, bundle_dir)
        else:
            run = installer.install
        done = run(
            bin_dir=bin_dir,
            conf_dir=conf_dir,
            name=name or network or "podnet",
            ranges=ranges or installer.DEFAULT_RANGES,
            network=network,
            data_dir=data_dir,
            conflist=not no_conflist,
            units={units.RESTORE_UNIT: units.restore_unit(data_dir)} if systemd else None,
            unit_dir=unit_dir,
            node_conf=node_conf,
            warn=lambda msg: click.echo(f"Warning: {msg}", err=True),
        )
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    except UnsafeSource as err:
        click.echo(f"podnetctl install: {err.msg}", err=True)
        click.get_current_context().exit(1)
    for item in done:
        click.echo(f"{item.action:9} {item.path}")


@click.command()
@click.option("--bin-dir", default=installer.DEFAULT_BIN_DIR, show_default=True,
              help="CNI plugin directory the plugin executables were written to.")
@click.option("--conf-dir", default="/etc/cni/net.d", show_default=True,
              help="Network config directory of the conflist.")
@click.option("--name", default="podnet", show_default=True,
              help="Network name of a conflist the node config does not list.")
@click.option("--unit-dir", default=units.DEFAULT_UNIT_DIR, show_default=True,
              help="Where --systemd wrote units.")
@click.option("--data-dir", default=None,
              help="The store [default: the node config's, else /var/lib/podnet].")
@click.option("--node-conf", default=None, metavar="FILE",
              help="The node config file [default: $PODNET_CONF, else /etc/podnet/podnet.conf].")
@click.option("--purge", is_flag=True, help="Also remove the store (podnet.db, its lock and "
              "socket; the data dir once empty).")
@click.option("--force", is_flag=True, help="Uninstall although the store holds pods or "
              "networks (their links stay).")
def uninstall(bin_dir: str, conf_dir: str, name: str, unit_dir: str, data_dir: str | None,
              node_conf: str | None, purge: bool, force: bool) -> None:  # fmt: skip
    """Remove what 'podnetctl install' made (idempotent): the plugin files, the conflist(s),
    the restore unit, the node config, table inet podnet of this network namespace and its
    owner records in /run/podnet/tables — each only when podnet made it — and with --purge the
    store. Refused while the store holds pods or networks (--force). Prints what it did."""
    done = uninstaller.uninstall(bin_dir=bin_dir, conf_dir=conf_dir, name=name, unit_dir=unit_dir,
                               data_dir=data_dir, node_conf=node_conf, purge=purge,
                               force=force)  # fmt: skip
    if not done:
        click.echo("nothing to remove")
    for item in done:
        click.echo(f"{item.action:9} {item.path}")
