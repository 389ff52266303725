"""RETURNING, and the names a statement that writes a table reads its columns by.

A write's expressions (UPDATE's SET, ON CONFLICT's, RETURNING's) read the target table under its alias (or
its name), ``excluded`` in ON CONFLICT DO UPDATE, and values a query computed for the statement (the columns
of UPDATE's FROM, subqueries): ``resolver`` maps such names to positions in one array per column, and the
expressions run vectorized over the rows the statement writes. RETURNING's items are those expressions over
the rows written (new rows, or for DELETE the rows deleted), named as PostgreSQL names them, and the
statement's result is their rows, as a query's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from ivm.engine.operators.basic import EvaluationError
from ivm.errors import DataError
from planner.expr import evaluate
from sql.catalog import Table
from sql.errors import error_at
from sql.logical import ColRef, Column, Const, Expr
from sql.scalar import NULL_TYPE, translate_scalar
from sql.types import TEXT

__all__ = ["MARK", "Scope", "resolver", "pg_name", "Returning", "items", "marker"]

MARK = "__ivm"  # the qualifier of columns standing for values a query computed for the statement


@dataclass
class Scope:
    """Columns a qualifier names: their names and types, from position ``offset`` in the rows' arrays."""

    names: list[str]
    types: list
    offset: int = 0


def resolver(scopes: dict[str, Scope], table: Table, alias: str) -> Callable[[exp.Expression], Expr | None]:
    """What resolves column references for ``sql.scalar.translate_scalar`` through ``scopes`` (qualifier ->
    columns), with PostgreSQL's errors: an unqualified name found under two qualifiers is ambiguous, and the
    table's own name is no qualifier when the statement gave it an alias."""

    def resolve(node: exp.Expression) -> Expr | None:
        if not isinstance(node, exp.Column):
            return None
        if isinstance(node.this, exp.Star):
            raise error_at(node, f"{node.sql()} is not supported here", unsupported=True)
        q = node.table
        if q:
            if q not in scopes:
                if q == table.name and alias != table.name or q in ("excluded", alias):
                    raise error_at(node, f"invalid reference to FROM-clause entry for table {q!r}")
                raise error_at(node, f"missing FROM-clause entry for table {q!r}")
            found = [q]
        else:
            found = [k for k, s in scopes.items() if k != MARK and node.name in s.names]
            if len(found) > 1:
                raise error_at(node, f"column reference {node.name!r} is ambiguous")
            if not found:
                raise error_at(node, f"column {node.name!r} does not exist")
        s = scopes[found[0]]
        if node.name not in s.names:
            what = table.name if found[0] in (alias, "excluded") else found[0]
            raise error_at(node, f"column {node.name!r} of relation {what!r} does not exist")
        i = s.names.index(node.name)
        return ColRef(s.offset + i, s.types[i])

    return resolve


def marker(j: int) -> exp.Column:
    """The column standing for the ``j``-th value a query computed for the statement."""
    return exp.column(f"__x{j}", MARK)


_TYPE_NAMES = {
    exp.DataType.Type.INT: "int4",
    exp.DataType.Type.BIGINT: "int8",
    exp.DataType.Type.SMALLINT: "int2",
    exp.DataType.Type.DOUBLE: "float8",
    exp.DataType.Type.FLOAT: "float4",
    exp.DataType.Type.DECIMAL: "numeric",
    exp.DataType.Type.BOOLEAN: "bool",
    exp.DataType.Type.CHAR: "bpchar",
    exp.DataType.Type.VARCHAR: "varchar",
    exp.DataType.Type.TEXT: "text",
    exp.DataType.Type.DATE: "date",
    exp.DataType.Type.TIMESTAMP: "timestamp",
}
_FUNCTION_NAMES = {
    exp.Coalesce: "coalesce",
    exp.Nullif: "nullif",
    exp.Greatest: "greatest",
    exp.Least: "least",
    exp.Case: "case",
    exp.Exists: "exists",
}


def pg_name(node: exp.Expression) -> str:
    """The name PostgreSQL gives an output column computing ``node`` (its FigureColname): a column's name,
    a function's, CAST's operand's (or its type's), ``?column?`` for anything else."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Cast):
        inner = pg_name(node.this)
        if inner != "?column?":
            return inner
        to = node.args.get("to")
        return _TYPE_NAMES.get(to.this, "?column?") if isinstance(to, exp.DataType) else "?column?"
    for cls, name in _FUNCTION_NAMES.items():
        if isinstance(node, cls):
            return name
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Unary, exp.Connector)):
        text = node.sql(dialect="postgres")
        head = text.split("(", 1)[0].strip()
        if head and " " not in head and "(" in text:
            return head.lower()
    return "?column?"


def items(node: exp.Returning) -> tuple[list[exp.Expression], dict[str, str]]:
    """RETURNING's items ready to qualify: each that is no ``*`` aliased (a mark for those the statement did
    not name), and the name PostgreSQL gives each mark. Aggregates, window functions and subqueries are
    refused with PostgreSQL's words (or as not supported)."""
    out, names = [], {}
    for i, item in enumerate(node.expressions):
        for sub in item.find_all(exp.Subquery, exp.Exists):
            raise error_at(sub, "a subquery in RETURNING is not supported", unsupported=True)
        for bad in item.find_all(exp.AggFunc, exp.Window):
            what = "window functions" if isinstance(bad, exp.Window) else "aggregate functions"
            raise error_at(bad, f"{what} are not allowed in RETURNING")
        star = isinstance(item, exp.Star) or isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
        if star or isinstance(item, exp.Alias):
            out.append(item.copy())
        else:
            mark = f"__ret{i}"
            names[mark] = pg_name(item)
            out.append(exp.alias_(item.copy(), mark))
    return out, names


@dataclass
class Returning:
    """RETURNING's items translated over the rows a statement writes (``exprs`` read the row's columns, then
    the values a query computed for it), with their output columns."""

    exprs: list[Expr]
    columns: tuple[Column, ...]

    @staticmethod
    def of(qualified: Sequence[exp.Expression], names: dict[str, str], resolve) -> Returning:
        exprs, columns = [], []
        for item in qualified:
            e = translate_scalar(item.unalias() if isinstance(item, exp.Alias) else item, resolve)
            if e.type == NULL_TYPE:  # a bare NULL: text, as PostgreSQL types an unknown output
                e = Const(None, TEXT)
            exprs.append(e)
            name = item.alias if isinstance(item, exp.Alias) else pg_name(item)
            columns.append(Column(names.get(name, name), e.type))
        return Returning(exprs, tuple(columns))

    def result(self, cols: Sequence[np.ndarray], valid: Sequence, n: int) -> tuple:
        """The statement's result (columns, validity, multiplicities, output columns) over ``n`` rows."""
        out_cols, out_valid = [], []
        for e, c in zip(self.exprs, self.columns, strict=True):
            try:
                data, mask = evaluate(e, list(cols), list(valid), n)
            except EvaluationError as err:
                raise DataError(f"RETURNING {c.name!r}: {err}") from None
            if len(data) != n:
                data = np.broadcast_to(data, (n,)).copy()
            out_cols.append(data.astype(c.type.dtype, copy=False))
            out_valid.append(mask)
        return out_cols, out_valid, np.ones(n, np.int64), self.columns
