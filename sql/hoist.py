"""Scalar subqueries of a SELECT list as joins with derived tables (sqlglot decorrelates those of WHERE and
HAVING only).

A subquery computing one aggregate value (no GROUP BY) is joined once per outer row: uncorrelated, it is one
row, cross-joined; correlated by equalities ``inner = outer`` in its WHERE (its other conditions reading inner
columns only), it is grouped by the inner sides and LEFT-joined on the outer sides. An outer row without a group
gets what the aggregate gives over no rows (COUNT 0, the others NULL), through a marker column that is NULL
only then. Other shapes are left for the translator to refuse by name.
"""

from __future__ import annotations

from sqlglot import exp

from sql.scalar import and_parts

__all__ = ["hoist_select_subqueries"]

_AGGS = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


def hoist_select_subqueries(tree: exp.Expression) -> exp.Expression:
    """``tree`` (qualified: every column names its relation) with the scalar subqueries of its SELECT lists
    that can be joined, joined."""
    n = 0
    for select in list(tree.find_all(exp.Select)):
        if not (select.args.get("from_") or select.args.get("from")) or _grouped(select):
            continue
        for item in select.selects:
            for sub in list(item.find_all(exp.Subquery)):
                if sub.parent_select is not select:
                    continue
                joined = _as_join(sub.this, f"_sq{n}")
                if joined is None:
                    continue
                join, value = joined
                select.append("joins", join)
                sub.replace(value)
                n += 1
    return tree


def _grouped(select: exp.Select) -> bool:
    """Whether ``select`` aggregates (a subquery's value would then have to be grouped by as well)."""
    if select.args.get("group") or select.args.get("having"):
        return True
    return any(a.parent_select is select for s in select.selects for a in s.find_all(*_AGGS))


def _as_join(inner: exp.Expression, alias: str) -> tuple[exp.Join, exp.Expression] | None:
    """The join bringing ``inner``'s value, and the expression that reads it; None for other shapes."""
    if not isinstance(inner, exp.Select) or len(inner.selects) != 1:
        return None
    if any(inner.args.get(k) for k in ("group", "having", "order", "limit", "offset", "distinct", "with_")):
        return None
    value = inner.selects[0].unalias()
    if not any(a.parent_select is inner for a in value.find_all(*_AGGS)):
        return None  # not an aggregate: zero or several rows
    if inner.find(exp.Subquery, exp.Exists) is not None:
        return None  # a subquery inside: left alone
    from_ = inner.args.get("from_") or inner.args.get("from")
    if from_ is None:
        return None
    own = {from_.this.alias_or_name, *(j.this.alias_or_name for j in inner.args.get("joins") or [])}

    def outer(node: exp.Expression) -> bool:
        return any(c.table not in own for c in node.find_all(exp.Column))

    if outer(value) or any(outer(j) for j in inner.args.get("joins") or []):
        return None
    keys: list[tuple[exp.Expression, exp.Expression]] = []
    rest: list[exp.Expression] = []
    where = inner.args.get("where")
    for cond in and_parts(where.this) if where is not None else []:
        if not outer(cond):
            rest.append(cond)
            continue
        if not isinstance(cond, exp.EQ):
            return None
        a, b = cond.this, cond.expression
        if outer(b) and not outer(a) and all(c.table not in own for c in b.find_all(exp.Column)):
            keys.append((a, b))
        elif outer(a) and not outer(b) and all(c.table not in own for c in a.find_all(exp.Column)):
            keys.append((b, a))
        else:
            return None
    derived = exp.select(exp.alias_(value.copy(), "_v"), exp.alias_(exp.Literal.number(1), "_p"))
    derived = derived.from_(from_.this.copy())
    for j in inner.args.get("joins") or []:
        derived.append("joins", j.copy())
    for i, (k, _) in enumerate(keys):
        derived = derived.select(exp.alias_(k.copy(), f"_k{i}"))
    if rest:
        derived = derived.where(exp.and_(*(c.copy() for c in rest)))
    if keys:
        derived = derived.group_by(*(k.copy() for k, _ in keys))
    table = exp.Subquery(this=derived, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    if not keys:  # one row, always
        return exp.Join(this=table, kind="CROSS"), exp.column("_v", alias)
    on = exp.and_(
        *(exp.EQ(this=exp.column(f"_k{i}", alias), expression=o.copy()) for i, (_, o) in enumerate(keys))
    )
    empty = value.copy().transform(_over_no_rows)
    read = exp.Case(
        ifs=[exp.If(this=exp.Is(this=exp.column("_p", alias), expression=exp.Null()), true=empty)],
        default=exp.column("_v", alias),
    )
    return exp.Join(this=table, side="LEFT", on=on), exp.Paren(this=read)


def _over_no_rows(node: exp.Expression) -> exp.Expression:
    """An aggregate call as its value over no rows."""
    if isinstance(node, exp.Count):
        return exp.Literal.number(0)
    if isinstance(node, _AGGS):
        return exp.Null()
    return node
