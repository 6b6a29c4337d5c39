"""Output and input in ``lxc``'s formats, for ``podnetctl network …``: tables as ``lxc`` draws
them (rich's ASCII2 box is tablewriter's ``+---+`` layout), csv/json/yaml/compact lists, YAML
as Go's yaml.v2 writes it (numbers, booleans and empty strings double-quoted), and the strict
YAML reading of ``lxc … edit``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from typing import Any

from podnet.checked import printable
from podnet.networks.errors import NetworkError

__all__ = ["FORMATS", "dump_yaml", "load_yaml", "natural_key", "render_list"]

FORMATS = ("table", "csv", "json", "yaml", "compact")


def natural_key(row: Sequence[str]) -> list[tuple[int, Any]]:
    """``lxc``'s row order: natural (digit-aware) comparison of every column in turn, empty
    strings last (198.51.100.9 before 198.51.100.10)."""
    out: list[tuple[int, Any]] = []
    for cell in row:
        parts = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", cell)]
        out.append((1 if cell == "" else 0, [(0, p) if isinstance(p, int) else (1, p)
                                              for p in parts]))  # fmt: skip
    return out


def render_list(headers: Sequence[str], rows: Sequence[Sequence[str]], fmt: str,
                raw: Any) -> str:  # fmt: skip
    """A list as ``lxc … list --format <fmt>`` prints it: ``table`` and ``compact`` (rows
    sorted naturally), ``csv`` (no header), ``json``/``yaml`` (the API objects ``raw``)."""
    if fmt not in FORMATS:
        raise NetworkError(f'Invalid format "{fmt}"')
    if fmt == "json":
        return json.dumps(raw, separators=(",", ":")) + "\n"
    if fmt == "yaml":
        return dump_yaml(raw)
    # values people stored (descriptions, user.* keys) are shown inert on a terminal
    rows = sorted([[printable(cell) for cell in row] for row in rows], key=natural_key)
    if fmt == "csv":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        return buf.getvalue()
    # rich only for tables: every podnetctl network call imports this module
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.ASCII2 if fmt == "table" else None, show_lines=fmt == "table",
                  padding=(0, 1) if fmt == "table" else (0, 2), pad_edge=True)  # fmt: skip
    for header in headers:
        table.add_column(Text(header, justify="center"), justify="left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    buf = io.StringIO()
    Console(file=buf, width=10_000, color_system=None, legacy_windows=False,
            highlight=False).print(table)  # fmt: skip
    return "\n".join(line.rstrip() if fmt == "table" else line
                     for line in buf.getvalue().splitlines()) + "\n"  # fmt: skip


def dump_yaml(value: Any) -> str:
    """YAML as ``lxc … show`` prints it (keys in the given order; yaml.v2 double-quotes a
    string that would read back as another type, and "")."""
    import yaml  # only when YAML is written or read: every network call imports this module

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        tag = dumper.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
        style = '"' if value == "" or tag != "tag:yaml.org,2002:str" else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(value, Dumper=Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=1 << 30)  # fmt: skip


def load_yaml(text: str, allowed: Sequence[str], type_name: str,
              strict: bool = True) -> dict[str, Any]:  # fmt: skip
    """A YAML document as ``lxc … edit`` reads it: a mapping (empty text: ``{}``); with
    ``strict``, keys outside ``allowed`` are refused as yaml.v2's UnmarshalStrict refuses them
    (``yaml: unmarshal errors:\\n  line N: field K not found in type T``)."""
    import yaml  # see dump_yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise NetworkError.lines(*f"yaml: {err}".splitlines()) from None
    if data is None:
        return {}
    if not isinstance(data, dict) or node is None or not isinstance(node, yaml.MappingNode):
        raise NetworkError.lines("yaml: unmarshal errors:",
                                 f"  cannot unmarshal into {type_name}")
    if strict:
        bad = [f"  line {k.start_mark.line + 1}: field {k.value} not found in type {type_name}"
               for k, _ in node.value if k.value not in allowed]  # fmt: skip
        if bad:
            raise NetworkError.lines("yaml: unmarshal errors:", *bad)
    return {k: v for k, v in data.items() if k in allowed}
