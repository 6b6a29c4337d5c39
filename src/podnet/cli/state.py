"""``podnetctl pods|ports|ranges``: the node state from the SQLite database, read-only.

Each command reads through :mod:`podnet.store` (``Store.pods()``, ``portmaps()``,
``ranges()``), turns the rows into plain records (:func:`pod_records` …, also used by the demo)
and prints them as a rich table (default), JSON or YAML. A missing database is an error: these
commands never create one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from podnet import checked
from podnet.cli.node import data_dir_option
from podnet.ipam.allocator import usable_count
from podnet.nodeconf import no_store

if TYPE_CHECKING:  # rich, yaml and the store load only when a view runs (net commands skip them)
    from rich.console import Console
    from rich.table import Table

    from podnet.store import Store
    from podnet.values import PortMapping

Record = dict[str, Any]

#: Table columns per view: (record key, heading).
COLUMNS: dict[str, Sequence[tuple[str, str]]] = {
    "pods": (
        ("container_id", "CONTAINER"),
        ("pod", "POD"),
        ("ifname", "IFNAME"),
        ("ip_address_v4", "IPv4"),
        ("ip_address_v6", "IPv6"),
        ("interface_name", "HOST IF"),
        ("netns", "NETNS"),
        ("creation_timestamp", "CREATED"),
    ),
    "ports": (
        ("host", "HOST"),
        ("protocol", "PROTO"),
        ("target", "POD"),
        ("container_id", "CONTAINER"),
        ("plugin", "PLUGIN"),
    ),
    "ranges": (
        ("id", "ID"),
        ("subnet", "SUBNET"),
        ("used", "USED"),
        ("usable", "USABLE"),
        ("ip_masq", "MASQ"),
        ("description", "DESCRIPTION"),
    ),
}


def _endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if checked.ip(ip).version == 6 else f"{ip}:{port}"


def pod_records(store: Store) -> list[Record]:
    """Every pod (``Pod.as_dict()``) plus ``pod`` = ``namespace/name`` when known."""
    out = []
    for pod in store.pods.all():
        rec = pod.as_dict()
        rec["pod"] = "/".join(str(rec[k]) for k in ("namespace", "name") if rec.get(k))
        out.append(rec)
    return out


def port_records(store: Store) -> list[Record]:
    """Every published hostPort — podnet's (``portmap_entries``, ``plugin`` "podnet") and
    podnet-portmap's (``portmap_claims``, ``plugin`` "podnet-portmap", with its ``network``) —
    plus ``host`` and ``target`` as ``ip:port`` text."""
    out = []
    mappings: list[tuple[str, str | None, PortMapping]] = [
        ("podnet", None, m) for m in store.pods.portmaps()]
    mappings += [("podnet-portmap", network, m) for network, m in store.pods.portmap_claims()]
    for plugin, network, m in mappings:
        rec = m.as_dict()
        rec["plugin"] = plugin
        if network is not None:
            rec["network"] = network
        rec["host"] = _endpoint(m.host_ip, m.host_port)
        rec["target"] = _endpoint(m.container_ip, m.container_port)
        out.append(rec)
    return out


def range_records(store: Store) -> list[Record]:
    """Every range: ``id, subnet, description, ip_masq``, ``used`` and ``usable`` addresses."""
    out = []
    for rid, subnet, description, masq in store.ranges.all():
        net = checked.network(subnet)
        used = sum(1 for a in store.pods.used_addresses(net.version) if checked.ip(a) in net)
        out.append(
            {
                "id": rid,
                "subnet": subnet,
                "description": description,
                "ip_masq": masq,
                "used": used,
                "usable": usable_count(net),
            }
        )
    return out


def render_table(view: str, records: Sequence[Record], title: str | None = None) -> Table:
    """A rich table of ``records`` with the columns of ``view``."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", header_style="bold")
    for _, heading in COLUMNS[view]:
        table.add_column(heading, overflow="fold")
    for rec in records:
        cells = ("" if rec.get(k) is None else str(rec.get(k)) for k, _ in COLUMNS[view])
        table.add_row(*(Text(c) for c in cells))  # Text: "[fd00::1]:80" is not markup
    return table


def render_text(records: Sequence[Record], output: str) -> str:
    """``records`` as JSON (indented) or YAML text."""
    import yaml

    if output == "json":
        return json.dumps([_json_safe(r) for r in records], indent=2, default=str)
    text: str = yaml.safe_dump(list(records), sort_keys=False, default_flow_style=False)
    return text


#: Integers JSON readers take exactly (IEEE doubles: JavaScript, jq); larger become strings.
_JSON_INT_MAX = 2**53


def _json_safe(record: Record) -> Record:
    """``record`` with integers beyond ±2^53 (an IPv6 range's address count) as strings, which
    every JSON reader keeps exact."""
    return {k: str(v) if isinstance(v, int) and not isinstance(v, bool)
            and abs(v) > _JSON_INT_MAX else v for k, v in record.items()}  # fmt: skip


def console() -> Console:
    """A console for tables: the terminal's width, or 200 columns when piped."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=200)


def _open(data_dir: str) -> Store:
    # the store only when a view runs: podnetctl net imports this module and needs none
    from podnet.store import open_store

    try:
        return open_store(data_dir, create=False)
    except FileNotFoundError:
        raise click.ClickException(no_store(data_dir)) from None


def _command(view: str, load: Callable[[Store], list[Record]], help_text: str) -> click.Command:
    @click.command(name=view, help=help_text)
    @data_dir_option("The plugin's dataDir.")
    @click.option(
        "-o",
        "--output",
        type=click.Choice(["table", "json", "yaml"]),
        default="table",
        show_default=True,
        help="Output format.",
    )
    def command(data_dir: str, output: str) -> None:
        with _open(data_dir) as store:
            records = load(store)
        if output == "table":
            console().print(render_table(view, records))
        else:
            click.echo(render_text(records, output).rstrip("\n"))

    return command


pods = _command("pods", pod_records, "Show the pods (attachments) in the state database.")
ports = _command("ports", port_records, "Show the published hostPorts in the state database.")
ranges = _command("ranges", range_records,
                  "Show the address ranges and how many addresses are used.")  # fmt: skip
COMMANDS = [pods, ports, ranges]
