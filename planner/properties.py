"""Properties of logical plans that rewrites and connectors both read: which columns are a key of the rows,
which are never NULL, and where a plan's rows hold another's. Each is derived from the plan's shape alone,
conservatively: None (or False) when the shape does not show it."""

from __future__ import annotations

from collections.abc import Callable

from sql.logical import Aggregate, Canon, ColRef, Distinct, Filter, Join, Plan, Project, Scan, SemiJoin, TopK

__all__ = ["Keys", "join_key", "one_partner", "rows_of", "carried", "unique_key", "non_null"]

Keys = Callable[[str], tuple[int, ...]]  # a relation's name -> the positions of its primary key, if any


def join_key(plan: Plan, keys: Keys) -> tuple[int, ...] | None:
    """Positions of columns of ``plan`` that are never NULL and determine the rest of each row (rows equal on
    them are equal), when known."""
    if isinstance(plan, Scan):
        return keys(plan.table) or None
    if isinstance(plan, (Filter, Canon)):
        return join_key(plan.input, keys)
    if isinstance(plan, Project):
        return carried(plan, join_key(plan.input, keys))
    if isinstance(plan, Join) and plan.kind == "inner":
        nl = len(plan.left.columns)
        kl, kr = join_key(plan.left, keys), join_key(plan.right, keys)
        if kl is not None and one_partner(plan.right, plan.right_keys, kr):
            return kl
        if kr is not None and one_partner(plan.left, plan.left_keys, kl):
            return tuple(nl + j for j in kr)
        if kl is not None and kr is not None:
            return kl + tuple(nl + j for j in kr)
    return None


def one_partner(side: Plan, on: tuple[int, ...], key: tuple[int, ...] | None) -> bool:
    """Whether a join on ``side``'s columns ``on`` meets at most one of its rows per row of the other side."""
    if key is not None and set(key) <= set(on):
        return True
    return isinstance(side, Distinct) and set(on) == set(range(len(side.columns)))


def rows_of(plan: Plan, base: Plan) -> tuple[int, ...] | None:
    """Positions in ``plan``'s rows that hold a row of ``base`` (each of ``plan``'s rows, read at them, is one
    of ``base``'s rows), when the plan's shape shows it."""
    if plan == base:
        return tuple(range(len(base.columns)))
    if isinstance(plan, (Filter, Canon, Distinct)):
        return rows_of(plan.input, base)
    if isinstance(plan, Project):
        return carried(plan, rows_of(plan.input, base))
    if isinstance(plan, SemiJoin):
        return rows_of(plan.left, base)
    if isinstance(plan, Join):
        if plan.kind in ("inner", "left"):
            found = rows_of(plan.left, base)
            if found is not None:
                return found
        if plan.kind in ("inner", "right"):
            found = rows_of(plan.right, base)
            if found is not None:
                return tuple(len(plan.left.columns) + j for j in found)
    return None


def carried(plan: Project, positions: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """Where a projection's output holds the input columns at ``positions`` (the first place it picks each),
    when it picks them all."""
    if positions is None:
        return None
    at = {e.index: k for k, e in reversed(list(enumerate(plan.exprs))) if isinstance(e, ColRef)}
    return tuple(at[i] for i in positions) if all(i in at for i in positions) else None


def unique_key(plan: Plan, keys: dict[str, tuple[int, ...]] | None = None) -> tuple[int, ...] | None:
    """Output positions that are a unique, non-NULL key of a view's rows, when the plan shows one: GROUP BY
    columns, DISTINCT, or the primary key of a table it only filters and projects (``keys`` maps relation
    names to their keys); else None."""
    key = _output_key(plan, keys or {})
    if not key or not all(non_null(plan, i) for i in key):
        return None
    return key


def non_null(plan: Plan, pos: int) -> bool:
    """Whether output column ``pos`` is never NULL: it comes unchanged from a NOT NULL table column (or is a
    count). The SQL layer's own flags are conservative after projections."""
    if isinstance(plan, Scan):
        return not plan.columns[pos].nullable
    if isinstance(plan, (Filter, TopK, Distinct, Canon)):
        return non_null(plan.input, pos)
    if isinstance(plan, Project):
        e = plan.exprs[pos]
        return isinstance(e, ColRef) and non_null(plan.input, e.index)
    if isinstance(plan, Aggregate):
        if pos < len(plan.group):
            return non_null(plan.input, plan.group[pos])
        return plan.aggs[pos - len(plan.group)].func in ("count", "count_star")
    return False


def _output_key(plan: Plan, keys: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    """Output positions whose values tell rows apart (NULLs aside)."""
    if isinstance(plan, Scan):
        return keys.get(plan.table) or None
    if isinstance(plan, Aggregate):
        return tuple(range(len(plan.group))) if plan.group else None
    if isinstance(plan, Distinct):
        return tuple(range(len(plan.columns)))
    if isinstance(plan, (Filter, TopK, Canon)):
        return _output_key(plan.input, keys)
    if isinstance(plan, Project):
        return carried(plan, _output_key(plan.input, keys))
    return None
