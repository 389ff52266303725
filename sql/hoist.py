"""Subqueries used as values in a SELECT list, as joins with derived tables (sqlglot decorrelates the
conditions of WHERE and HAVING only).

- A scalar subquery computing one aggregate (no GROUP BY) is joined once per outer row: uncorrelated, it is one
  row, cross-joined; correlated by equalities ``inner = outer`` in its WHERE (its other conditions reading
  inner columns only), it is grouped by the inner sides and LEFT-joined on the outer sides. An outer row
  without a group gets what the aggregate gives over no rows (COUNT 0, the others NULL), through a marker
  column that is NULL only then.
- ``EXISTS (...)``, correlated the same way, is whether the LEFT join found the outer row's keys among the
  subquery's distinct keys (uncorrelated: whether the subquery's count is above 0).
- ``x [NOT] IN (SELECT y ...)``, uncorrelated, keeps SQL's NULLs: TRUE when a y equals x, else NULL when x is
  NULL and the subquery has rows or when a y is NULL, else FALSE; from a LEFT join with the distinct y and a
  cross join with the subquery's row and value counts.

Other shapes are left for the translator to refuse by name.
"""

from __future__ import annotations

from sqlglot import exp

from sql.scalar import AGGREGATES, and_parts

__all__ = ["hoist_select_subqueries"]


def hoist_select_subqueries(tree: exp.Expression) -> exp.Expression:
    """``tree`` (qualified: every column names its relation) with the subqueries its SELECT lists use as
    values joined, where their shape allows."""
    n = 0
    for select in list(tree.find_all(exp.Select)):
        if not (select.args.get("from_") or select.args.get("from")) or _grouped(select):
            continue
        for item in select.selects:
            for node in list(item.find_all(exp.Subquery, exp.In, exp.Exists)):
                if node.parent_select is not select:
                    continue  # inside another subquery, or gone with one replaced already
                alias = f"_sq{n}"
                if isinstance(node, exp.In):
                    joined = _in_as_joins(node, alias) if node.args.get("query") else None
                elif isinstance(node, exp.Exists):
                    joined = _exists_as_join(node.this, alias)
                elif isinstance(node.parent, exp.In):
                    continue
                else:
                    joined = _scalar_as_join(node.this, alias)
                if joined is None:
                    continue
                joins, value = joined
                for join in joins:
                    select.append("joins", join)
                node.replace(value)
                n += 1
    return tree


def _grouped(select: exp.Select) -> bool:
    """Whether ``select`` aggregates (a subquery's value would then have to be grouped by as well)."""
    if select.args.get("group") or select.args.get("having"):
        return True
    return any(a.parent_select is select for s in select.selects for a in s.find_all(*AGGREGATES))


def _correlation(inner: exp.Select):
    """``inner``'s FROM, its equalities with the outer query as (inner side, outer side) pairs, and its other
    conditions (reading its own columns only); None when it reads the outer query otherwise, or holds a
    subquery."""
    if not isinstance(inner, exp.Select) or inner.find(exp.Subquery, exp.Exists) is not None:
        return None
    from_ = inner.args.get("from_") or inner.args.get("from")
    if from_ is None:
        return None
    joins = inner.args.get("joins") or []
    own = {from_.this.alias_or_name, *(j.this.alias_or_name for j in joins)}

    def outer(node: exp.Expression) -> bool:
        return any(c.table not in own for c in node.find_all(exp.Column))

    def only_outer(node: exp.Expression) -> bool:
        return all(c.table not in own for c in node.find_all(exp.Column))

    if any(outer(s) for s in inner.selects) or any(outer(j) for j in joins):
        return None
    keys: list[tuple[exp.Expression, exp.Expression]] = []
    rest: list[exp.Expression] = []
    where = inner.args.get("where")
    for cond in and_parts(where.this) if where is not None else []:
        if not outer(cond):
            rest.append(cond)
        elif isinstance(cond, exp.EQ) and only_outer(cond.expression) and not outer(cond.this):
            keys.append((cond.this, cond.expression))
        elif isinstance(cond, exp.EQ) and only_outer(cond.this) and not outer(cond.expression):
            keys.append((cond.expression, cond.this))
        else:
            return None
    return from_, joins, keys, rest


def _derived(from_, joins, rest, *columns: exp.Expression) -> exp.Select:
    """``SELECT columns FROM from_ joins WHERE rest``."""
    out = exp.select(*columns).from_(from_.this.copy())
    for j in joins:
        out.append("joins", j.copy())
    if rest:
        out = out.where(exp.and_(*(c.copy() for c in rest)))
    return out


def _table(query: exp.Select, alias: str) -> exp.Subquery:
    return exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _on(keys, alias: str) -> exp.Expression:
    return exp.and_(
        *(exp.EQ(this=exp.column(f"_k{i}", alias), expression=o.copy()) for i, (_, o) in enumerate(keys))
    )


def _scalar_as_join(inner: exp.Expression, alias: str):
    """The joins bringing a scalar subquery's value, and the expression reading it; None for other shapes."""
    found = _correlation(inner)
    if found is None or len(inner.selects) != 1:
        return None
    if any(inner.args.get(k) for k in ("group", "having", "order", "limit", "offset", "distinct", "with_")):
        return None
    value = inner.selects[0].unalias()
    if not any(a.parent_select is inner for a in value.find_all(*AGGREGATES)):
        return None  # not an aggregate: zero or several rows
    from_, joins, keys, rest = found
    columns = [exp.alias_(value.copy(), "_v"), exp.alias_(exp.Literal.number(1), "_p")]
    columns += [exp.alias_(k.copy(), f"_k{i}") for i, (k, _) in enumerate(keys)]
    derived = _derived(from_, joins, rest, *columns)
    if not keys:  # one row, always
        return [exp.Join(this=_table(derived, alias), kind="CROSS")], exp.column("_v", alias)
    derived = derived.group_by(*(k.copy() for k, _ in keys))
    empty = over_no_rows(value)
    read = exp.Case(
        ifs=[exp.If(this=exp.Is(this=exp.column("_p", alias), expression=exp.Null()), true=empty)],
        default=exp.column("_v", alias),
    )
    return [exp.Join(this=_table(derived, alias), side="LEFT", on=_on(keys, alias))], exp.Paren(this=read)


def _exists_as_join(inner: exp.Expression, alias: str):
    """The join telling whether an EXISTS subquery has rows for the outer row, and the expression reading it."""
    found = _correlation(inner)
    if found is None or any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "with_")):
        return None
    from_, joins, keys, rest = found
    if not keys:
        counted = _derived(from_, joins, rest, exp.alias_(exp.Count(this=exp.Star()), "_n"))
        read = exp.GT(this=exp.column("_n", alias), expression=exp.Literal.number(0))
        return [exp.Join(this=_table(counted, alias), kind="CROSS")], exp.Paren(this=read)
    columns = [exp.alias_(k.copy(), f"_k{i}") for i, (k, _) in enumerate(keys)]
    derived = _derived(from_, joins, rest, *columns, exp.alias_(exp.Literal.number(1), "_p"))
    derived.set("distinct", exp.Distinct())
    read = exp.Not(this=exp.Is(this=exp.column("_p", alias), expression=exp.Null()))
    return [exp.Join(this=_table(derived, alias), side="LEFT", on=_on(keys, alias))], exp.Paren(this=read)


def _in_as_joins(node: exp.In, alias: str):
    """The joins giving ``x [NOT] IN (SELECT y ...)`` its SQL value (NULLs included), and the expression."""
    query = node.args["query"]
    query = query.this if isinstance(query, exp.Subquery) else query
    if not isinstance(query, exp.Select) or len(query.selects) != 1:
        return None
    own = {t.alias_or_name for t in query.find_all(exp.Table, exp.Subquery) if t.alias_or_name}
    if any(c.table not in own for c in query.find_all(exp.Column)):
        return None  # correlated
    x = node.this
    named = query.copy()
    named.set("expressions", [exp.alias_(query.selects[0].unalias().copy(), "_y")])
    y = exp.column("_y", f"{alias}q")
    values = exp.select(exp.alias_(y.copy(), "_m")).from_(_table(named.copy(), f"{alias}q"))
    values = values.where(exp.Not(this=exp.Is(this=y.copy(), expression=exp.Null())))
    values.set("distinct", exp.Distinct())
    counts = exp.select(
        exp.alias_(exp.Count(this=exp.Star()), "_n"), exp.alias_(exp.Count(this=y.copy()), "_nn")
    ).from_(_table(named, f"{alias}q"))
    match, stats = f"{alias}m", f"{alias}s"
    joins = [
        exp.Join(
            this=_table(values, match),
            side="LEFT",
            on=exp.EQ(this=exp.column("_m", match), expression=x.copy()),
        ),
        exp.Join(this=_table(counts, stats), kind="CROSS"),
    ]
    n, nn = exp.column("_n", stats), exp.column("_nn", stats)
    unknown = exp.or_(exp.Is(this=x.copy(), expression=exp.Null()), exp.GT(this=n.copy(), expression=nn))
    read = exp.Case(
        ifs=[
            exp.If(
                this=exp.Not(this=exp.Is(this=exp.column("_m", match), expression=exp.Null())), true=exp.true()
            ),
            exp.If(this=exp.EQ(this=n, expression=exp.Literal.number(0)), true=exp.false()),
            exp.If(this=unknown, true=exp.Null()),
        ],
        default=exp.false(),
    )
    value = exp.Paren(this=read)
    return joins, (exp.Not(this=value) if node.args.get("negate") else value)


def over_no_rows(value: exp.Expression) -> exp.Expression:
    """A copy of a subquery's value with each of its aggregate calls as its value over no rows (COUNT 0, the
    others NULL); those of subqueries inside it are theirs, and stay."""
    out = value.copy()
    for node in list(out.find_all(*AGGREGATES)):
        if node.find_ancestor(exp.Subquery, exp.Select) is not None:
            continue  # inside a subquery of the value
        call = node.parent if isinstance(node.parent, exp.Filter) else node
        replaced = exp.Literal.number(0) if isinstance(node, exp.Count) else exp.Null()
        if call is out:
            return replaced
        call.replace(replaced)
    return out
