"""OVSDB operations (RFC 7047 section 5.2) as values: :class:`Op`, made by the constructors of
this module, turned into the wire's JSON object by :meth:`Op.json` — the one place that writes
one. The per-table builders (:mod:`podnet.ovn.builders`) return them, a caller composes them
into one transaction (:meth:`podnet.ovn.ovsdb.Ovsdb.transact`), as ovn-kubernetes'
``go-controller/pkg/libovsdb/ops`` functions return ``[]ovsdb.Operation``.

Values of the wire (RFC 7047 section 5.1, ``<set>``, ``<map>``, ``<uuid>``,
``<named-uuid>``): :func:`oset`, :func:`omap`, :func:`uuid`, :func:`named`. Conditions
(section 5.1, ``<condition>``): :func:`eq`, :func:`ne`, :func:`includes`. Mutations
(section 5.1, ``<mutation>``): :func:`insert_into`, :func:`delete_from`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A ``<condition>``: ``[column, function, value]``.
Condition = list[Any]
#: A ``<mutation>``: ``[column, mutator, value]``.
Mutation = list[Any]


def oset(items: Iterable[Any]) -> list[Any]:
    """A ``<set>``: ``["set", [items]]``."""
    return ["set", list(items)]


def omap(items: Mapping[str, str]) -> list[Any]:
    """A ``<map>`` of ``items``, sorted by key: ``["map", [[k, v], ...]]``."""
    return ["map", [[k, v] for k, v in sorted(items.items())]]


def uuid(value: str) -> list[str]:
    """A ``<uuid>`` (a row's ``_uuid``)."""
    return ["uuid", value]


def named(value: str) -> list[str]:
    """A ``<named-uuid>``: the row an ``insert`` of the same transaction named ``value``."""
    return ["named-uuid", value]


def eq(column: str, value: Any) -> Condition:
    return [column, "==", value]


def ne(column: str, value: Any) -> Condition:
    return [column, "!=", value]


def includes(column: str, value: Any) -> Condition:
    """``column`` (a set or map) includes ``value`` (a set or map of the same type)."""
    return [column, "includes", value]


def tagged(ids: Mapping[str, str]) -> Condition:
    """``external_ids`` includes every pair of ``ids``."""
    return includes("external_ids", omap(ids))


def insert_into(column: str, value: Any) -> Mutation:
    return [column, "insert", value]


def delete_from(column: str, value: Any) -> Mutation:
    return [column, "delete", value]


@dataclass(frozen=True, slots=True)
class Op:
    """One operation: ``op`` (``insert``, ``update``, ``mutate``, ``delete``, ``select``,
    ``wait``) on ``table``, with the members that operation takes (RFC 7047 section 5.2):
    ``where`` (conditions), ``row``, ``uuid_name`` (an insert's ``uuid-name``), ``mutations``,
    ``columns``, and a wait's ``until``, ``rows`` and ``timeout`` (milliseconds; 0 fails at
    once when the condition does not hold)."""

    op: str
    table: str
    where: tuple[Condition, ...] = ()
    row: Mapping[str, Any] = field(default_factory=dict)
    uuid_name: str = ""
    mutations: tuple[Mutation, ...] = ()
    columns: tuple[str, ...] | None = None
    until: str = "=="
    rows: tuple[Mapping[str, Any], ...] = ()
    timeout: int = 0

    def json(self) -> dict[str, Any]:
        """The operation as RFC 7047 section 5.2 writes it."""
        out: dict[str, Any] = {"op": self.op, "table": self.table}
        if self.op == "insert":
            out["row"] = dict(self.row)
            if self.uuid_name:
                out["uuid-name"] = self.uuid_name
            return out
        out["where"] = [list(c) for c in self.where]
        if self.op == "update":
            out["row"] = dict(self.row)
        elif self.op == "mutate":
            out["mutations"] = [list(m) for m in self.mutations]
        elif self.op == "select":
            if self.columns is not None:
                out["columns"] = list(self.columns)
        elif self.op == "wait":
            out["columns"] = list(self.columns or ())
            out["until"] = self.until
            out["rows"] = [dict(r) for r in self.rows]
            out["timeout"] = self.timeout
        return out


def insert(table: str, row: Mapping[str, Any], uuid_name: str = "") -> Op:
    """Insert ``row``; ``uuid_name`` names it for the other operations of the transaction."""
    return Op("insert", table, row=row, uuid_name=uuid_name)


def update(table: str, where: Sequence[Condition], row: Mapping[str, Any]) -> Op:
    """Set the columns of ``row`` on every row matching ``where``."""
    return Op("update", table, where=tuple(where), row=row)


def mutate(table: str, where: Sequence[Condition], mutations: Sequence[Mutation]) -> Op:
    """Apply ``mutations`` to every row matching ``where``."""
    return Op("mutate", table, where=tuple(where), mutations=tuple(mutations))


def delete(table: str, where: Sequence[Condition]) -> Op:
    """Delete every row matching ``where`` (none matching is no error)."""
    return Op("delete", table, where=tuple(where))


def select(table: str, where: Sequence[Condition] = (), columns: Sequence[str] | None = None) -> Op:
    """The ``columns`` (None: all) of the rows matching ``where``."""
    return Op("select", table, where=tuple(where),
              columns=None if columns is None else tuple(columns))  # fmt: skip


def wait(
    table: str, where: Sequence[Condition], columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]], *, until: str = "==", timeout: int = 0,
) -> Op:  # fmt: skip
    """Hold the transaction until the ``columns`` of the rows matching ``where`` are
    (``until`` ``==``) or are not (``!=``) exactly ``rows``; ``timeout`` milliseconds (0: fail
    at once, :class:`podnet.ovn.ovsdb.Conflict`)."""
    return Op("wait", table, where=tuple(where), columns=tuple(columns), until=until,
              rows=tuple(rows), timeout=timeout)  # fmt: skip


def unchanged(table: str, where: Sequence[Condition], column: str, value: Any) -> Op:
    """A ``wait`` (timeout 0) that the rows matching ``where`` still hold ``column`` =
    ``value``: the condition a change made from a read is taken under."""
    return wait(table, where, [column], [{column: value}])


def wire(ops: Iterable[Op | Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``ops`` as the wire's JSON objects (a mapping passes as it is)."""
    return [op.json() if isinstance(op, Op) else op for op in ops]
