"""Rows as an OVSDB server sends them (RFC 7047 section 5.1), read through one type: :class:`Row`.

A column's value arrives as an atom, a ``["set", [...]]`` (a one-element set as the element
alone), a ``["map", [[k, v], ...]]``, or a ``["uuid", "..."]``; :func:`pyatom`, :func:`pyset` and
:func:`pymap` turn each into Python values. ``external_ids``, ``options`` and
``other_config`` are ``map<string, string>`` in the OVN and Open vSwitch schemas
(ovn-nb(5), ovn-sb(5), ovs-vswitchd.conf.db(5)): :class:`Row` gives them as
``dict[str, str]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def pyatom(value: Any) -> Any:
    """An atom's value; a ``<uuid>`` or ``<named-uuid>`` as its text."""
    if isinstance(value, list) and len(value) == 2 and value[0] in ("uuid", "named-uuid"):
        return value[1]
    return value


def pyset(value: Any) -> list[Any]:
    """A column's value as a list (OVSDB sends a one-element set as the element)."""
    if isinstance(value, list) and value and value[0] == "set":
        return [pyatom(v) for v in value[1]]
    return [pyatom(value)]


def pymap(value: Any) -> dict[str, Any]:
    """A ``<map>`` as a dict ({} for anything else)."""
    if isinstance(value, list) and value and value[0] == "map":
        return {k: pyatom(v) for k, v in value[1]}
    return {}


class Row(Mapping[str, Any]):
    """One row of a ``select``'s result. Read as a mapping it is the wire's row (``row["_uuid"]``
    is the ``<uuid>`` pair, ready to go back into an operation); the properties read its
    columns as Python values."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw

    def __getitem__(self, column: str) -> Any:
        return self._raw[column]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"Row({dict(self._raw)!r})"

    @property
    def uuid(self) -> str:
        """``_uuid`` as text ("" when not selected)."""
        return str(pyatom(self._raw.get("_uuid")) or "")

    @property
    def name(self) -> str:
        """``name`` as text ("" when not selected)."""
        return str(self._raw.get("name", ""))

    def text(self, column: str) -> str:
        """A string column's value ("" when not selected)."""
        return str(self._raw.get(column, ""))

    def map(self, column: str) -> dict[str, str]:
        """A ``map<string, string>`` column as a dict ({} when not selected)."""
        return {str(k): str(v) for k, v in pymap(self._raw.get(column)).items()}

    def set(self, column: str) -> list[Any]:
        """A set column's members (a ``<uuid>`` as its text); [] when not selected or empty."""
        if column not in self._raw:
            return []
        return pyset(self._raw[column])

    def first(self, column: str) -> str:
        """A set column's first member as text ("" when empty): an optional string column
        such as ``dynamic_addresses``."""
        values = self.set(column)
        return str(values[0]) if values else ""

    @property
    def external_ids(self) -> dict[str, str]:
        return self.map("external_ids")

    @property
    def options(self) -> dict[str, str]:
        return self.map("options")

    @property
    def other_config(self) -> dict[str, str]:
        return self.map("other_config")


def rows(result: Mapping[str, Any]) -> list[Row]:
    """The rows of one operation's result (a ``select``'s; [] for others)."""
    return [Row(r) for r in result.get("rows", [])]
