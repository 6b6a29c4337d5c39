"""``podnetctl install``: plugin executables into a CNI bin dir, a conflist into a conf dir."""

from __future__ import annotations

import click

from podnet.runtime import installer


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
@click.option("--name", default="podnet", show_default=True, help="Network name.")
@click.option(
    "--data-dir",
    default=None,
    help="Plugin state directory (dataDir) [default: the plugin's, /var/lib/podnet].",
)
@click.option("--no-conflist", is_flag=True, help="Install the plugin executables only.")
@click.option("--systemd", is_flag=True,
              help="Also install and enable a systemd unit that runs 'podnetctl network restore' "
              "at boot (bridges, forwards and table inet podnet back from the store).")
@click.option("--unit-dir", default=installer.DEFAULT_UNIT_DIR, show_default=True,
              help="Where --systemd writes units.")
def install(
    bin_dir: str,
    conf_dir: str,
    ranges: tuple[str, ...],
    name: str,
    data_dir: str | None,
    no_conflist: bool,
    systemd: bool,
    unit_dir: str,
) -> None:
    """Install the podnet plugins and a conflist for network --name (idempotent).

    Plugin files run this Python by absolute path, so a runtime's PATH (pyenv shims, other
    virtualenvs) cannot change which podnet runs. Runtimes run them as root: the install is
    refused, and nothing written, when anyone but root could change this Python, its venv or
    podnet's source tree (one line 'podnetctl install: refusing: PATH …', exit status 1).
    """
    try:
        done = installer.install(
            bin_dir=bin_dir,
            conf_dir=conf_dir,
            name=name,
            ranges=ranges or installer.DEFAULT_RANGES,
            data_dir=data_dir,
            conflist=not no_conflist,
        )
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    except installer.UnsafeSource as err:
        click.echo(f"podnetctl install: {err.msg}", err=True)
        click.get_current_context().exit(1)
    if systemd:
        units = {installer.RESTORE_UNIT: installer.restore_unit(data_dir)}
        done += installer.install_units(units, unit_dir)
    for item in done:
        click.echo(f"{item.action:9} {item.path}")
