"""The node's store as ``podnetctl``'s default ``--data-dir`` (:mod:`podnet.nodeconf`)."""

from __future__ import annotations

from typing import Any

import click

from podnet import nodeconf

#: ``show_default`` of every ``--data-dir`` that defaults to the node's store.
SHOWN = "the node config's data_dir, else /var/lib/podnet"


def default_data_dir() -> str:
    """The node's store: ``data_dir`` of the node configuration, else ``/var/lib/podnet``. A
    malformed or untrusted node configuration is a one-line error (click: ``Error: …``, exit
    status 1)."""
    try:
        return nodeconf.load().data_dir
    except nodeconf.NodeConfError as err:
        raise click.ClickException(err.msg) from None


def data_dir_option(help_text: str = "podnet's state directory (podnet.db).") -> Any:
    """``--data-dir``: the node's store unless given (``PODNET_DATA_DIR``, else
    :func:`default_data_dir`), for every command that opens it."""
    return click.option("--data-dir", envvar="PODNET_DATA_DIR", default=default_data_dir,
                        show_default=SHOWN, show_envvar=True, help=help_text)  # fmt: skip
