"""The order a query's rows are returned in: its ORDER BY, applied to the result.

A maintained relation has no order, so ORDER BY without LIMIT changes nothing a view holds; a query's rows are
still handed back in that order (``fetchall``, ``fetch_arrow``, the shell). Expressions the query orders by
without selecting them are computed as hidden columns after its own, and dropped once the rows are sorted.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from ivm.errors import ProgrammingError

__all__ = ["Order", "display_order", "sort_indices", "sorted_table"]


@dataclass
class Order:
    """How to return a query's rows in its ORDER BY order: the query to run (with the order expressions that
    are not result columns added as hidden columns) and the sort keys, each a result column by position (a
    hidden one counted from -1) or by name (for names that come from a ``*``)."""

    query: exp.Expression
    keys: list[tuple[int | str, bool, bool]]  # (result column, descending, nulls first)
    hidden: int

    def positions(self, names: list[str]) -> list[tuple[int, bool, bool]] | None:
        """The keys as positions among the result's ``names`` (hidden ones included); None when a key names
        no single column of the result."""
        out = []
        for col, desc, nulls_first in self.keys:
            if isinstance(col, str):
                if names.count(col) != 1:
                    return None
                col = names.index(col)
            elif col < 0:
                col = len(names) - self.hidden + (-1 - col)
            elif col >= len(names) - self.hidden:
                raise ProgrammingError(f"ORDER BY position {col + 1} is not in select list")
            out.append((col, desc, nulls_first))
        return out


def display_order(tree: exp.Expression) -> Order | None:
    """The ORDER BY of a query, as result columns to sort by; ``None`` when it has none or it cannot be
    applied to the result."""
    order = tree.args.get("order")
    if order is None or not isinstance(tree, (exp.Select, exp.SetOperation)):
        return None
    items = tree.expressions if isinstance(tree, exp.Select) else tree.selects
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star) for e in items)
    names = [e.alias_or_name for e in items]
    bare = [e.unalias() if isinstance(e, exp.Alias) else e for e in items]
    widen = isinstance(tree, exp.Select) and not tree.args.get("distinct")
    keys: list[tuple[int | str, bool, bool]] = []
    extra: list[exp.Expression] = []
    for o in order.expressions:
        e = o.this
        col: int | str | None = None
        if isinstance(e, exp.Literal) and e.is_int:
            col = int(e.this) - 1
        elif isinstance(e, exp.Column) and not e.table and names.count(e.name) == 1 and not star:
            col = names.index(e.name)
        elif e in bare and not star:
            col = bare.index(e)
        elif isinstance(e, exp.Column) and not e.table and star:
            col = e.name
        elif widen:
            col = -1 - len(extra)  # a hidden column, placed after the result's own
            extra.append(e)
        if col is None or (isinstance(col, int) and col >= len(items) and not star and col >= 0):
            return None
        desc = bool(o.args.get("desc"))
        first = o.args.get("nulls_first")
        keys.append((col, desc, desc if first is None else bool(first)))
    if not extra:
        return Order(tree, keys, 0)
    widened = tree.copy()
    for k, e in enumerate(extra):
        widened = widened.select(exp.alias_(e.copy(), f"__order{k}"), copy=False)
    return Order(widened, keys, len(extra))


def sort_indices(columns: list[pa.Array], keys: list[tuple[int, bool, bool]]) -> pa.Array:
    """The order of rows sorting ``columns`` by (column, descending, nulls first) keys; each key may place its
    NULLs differently, and equal rows keep their order."""
    cols, sort_keys = {}, []
    for i, (at, desc, nulls_first) in enumerate(keys):
        col = columns[at]
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols[f"n{i}"] = pc.is_null(col)
        sort_keys += [(f"n{i}", "descending" if nulls_first else "ascending")]
        if pa.types.is_floating(col.type):  # NaN above every other double, as in PostgreSQL
            cols[f"f{i}"] = pc.is_nan(col).fill_null(False)
            sort_keys += [(f"f{i}", "descending" if desc else "ascending")]
        cols[f"k{i}"] = col
        sort_keys += [(f"k{i}", "descending" if desc else "ascending")]
    return pc.sort_indices(pa.table(cols), sort_keys=sort_keys)


def sorted_table(t: pa.Table, keys: list[tuple[str, bool, bool]]) -> pa.Table:
    """``t`` sorted by (column name, descending, nulls first) keys."""
    if t.num_rows < 2 or not keys:
        return t
    names = t.column_names
    return t.take(sort_indices(t.columns, [(names.index(n), d, f) for n, d, f in keys]))
