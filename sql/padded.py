"""FROM items holding RIGHT or FULL joins, each made a derived table of its own.

A comma binds looser than any JOIN: ``FROM a RIGHT JOIN b ON ..., c FULL JOIN d ON ...`` is the cross product
of two joins, each of which pads rows with NULLs. The translator builds FROM as one left-deep chain of joins,
where an item holding such a join can only come first (``translate._padded_first``). So every such item but
the first becomes ``(SELECT <the columns the query reads of it> FROM <the item>) AS _padded<n>``, and the
query's reads of those columns read the derived table's.

A RIGHT or FULL join whose ON condition holds a subquery reading both sides (``outer_join_as_union``) is
made such a derived table too, holding what the join means: the pairs the condition holds for (an inner join,
whose condition may move to WHERE), the left rows no right row meets (``NOT EXISTS`` of those) with NULLs, and
the right rows no left row meets with NULLs; then the subqueries are unnested as in any WHERE.
"""

from __future__ import annotations

from sqlglot import exp

from sql.lateral import fresh_numbers
from sql.scoping import binding, named

__all__ = ["outer_join_as_union", "padded_items_apart"]


def padded_items_apart(tree: exp.Expression) -> exp.Expression:
    """``tree`` (qualified: every column names its relation) with each FROM item holding a RIGHT or FULL join,
    but the first of its FROM clause, made a derived table."""
    names = fresh_numbers(tree)
    for select in list(tree.find_all(exp.Select)):
        groups = _groups(select)
        padding = [g for g in groups if any((j.side or "").upper() in ("RIGHT", "FULL") for j in g[1:])]
        for group in padding[1:]:
            _apart(select, group, next(names))
    return tree


def _groups(select: exp.Select) -> list[list[exp.Expression]]:
    """FROM's comma-separated items, each its first relation (a From or a Join) and the joins that follow it."""
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        return []
    groups: list[list[exp.Expression]] = [[from_]]
    for j in select.args.get("joins") or []:
        comma = not j.side and not j.kind and j.args.get("on") is None and not j.args.get("using")
        if comma:
            groups.append([j])
        else:
            groups[-1].append(j)
    return groups


def _apart(select: exp.Select, group: list[exp.Expression], n: int) -> None:
    """Make the FROM item ``group`` (its first relation and the joins that follow it) a derived table."""

    def inner(columns: list[tuple[str, str]], names: list[str]) -> exp.Select:
        out = exp.select(
            *(exp.alias_(exp.column(c, t), name) for (t, c), name in zip(columns, names, strict=True))
        )
        if not columns:
            out = exp.select(exp.alias_(exp.Literal.number(1), "_p"))
        out.set("from_", exp.From(this=group[0].this.copy()))
        out.set("joins", [j.copy() for j in group[1:]])
        return out

    _as_derived(select, group, inner, f"_padded{n}")


def outer_join_as_union(select: exp.Select, join: exp.Join, n: int) -> None:
    """Make ``join`` (RIGHT or FULL), with the items before it in its FROM item, a derived table of the union
    of its pairs and the rows of each side kept whole that no row of the other meets (see the module's text)."""
    group = next(g for g in _groups(select) if any(item is join for item in g))
    items = group[: next(i for i, item in enumerate(group) if item is join) + 1]
    left, right = items[:-1], join.this
    kept = {"right": ["right"], "full": ["left", "right"]}[(join.side or "").lower()]

    def relations(parts: list[exp.Expression]) -> exp.Select:
        out = exp.select()
        out.set("from_", exp.From(this=parts[0].this.copy()))
        out.set("joins", [j.copy() for j in parts[1:]])
        return out

    def inner(columns: list[tuple[str, str]], names: list[str]) -> exp.Expression:
        lefts = {item.this.alias_or_name for item in left}

        def listed(side: str | None) -> list[exp.Expression]:
            return [
                exp.alias_(
                    exp.column(c, t) if side is None or (t in lefts) == (side == "left") else exp.Null(), a
                )
                for (t, c), a in zip(columns, names, strict=True)
            ] or [exp.alias_(exp.Literal.number(1), "_p")]

        condition = join.args.get("on")
        pairs = relations(items)
        pairs.args["joins"][-1].set("side", None)
        pairs.set("expressions", listed(None))
        branches: list[exp.Expression] = [pairs]
        for side in kept:
            alone = relations(left) if side == "left" else exp.select().from_(right.copy(), copy=False)
            others = exp.select(exp.Literal.number(1)).from_(right.copy(), copy=False)
            if side == "right":
                others = relations(left).select(exp.Literal.number(1), copy=False)
            others.set("where", exp.Where(this=condition.copy()))
            alone.set("expressions", listed(side))
            alone.set("where", exp.Where(this=exp.Not(this=exp.Exists(this=others))))
            branches.append(alone)
        out = branches[0]
        for b in branches[1:]:
            out = exp.Union(this=out, expression=b, distinct=False)
        return out

    _as_derived(select, items, inner, f"_outer{n}")


def _as_derived(select: exp.Select, group: list[exp.Expression], inner, alias: str) -> None:
    """Replace the FROM items ``group`` of ``select`` (a relation and the joins that follow it) by the derived
    table ``inner(columns, names)`` as ``alias``: the columns ``select`` reads of them (but in their own ON
    conditions), named ``names``, which its reads then read."""
    held = {item.this.alias_or_name for item in group}
    within = {id(node) for j in group[1:] for node in j.walk()}
    columns: dict[tuple[str, str], str] = {}
    for col in list(select.find_all(exp.Column)):
        if col.table not in held or id(col) in within or binding(col) is not select:
            continue
        name = columns.setdefault((col.table, col.name), f"_p{len(columns)}")
        col.replace(exp.column(name, alias))
    derived = inner(list(columns), list(columns.values()))
    first, rest = group[0], group[1:]
    first.set("this", named(derived, alias))
    select.set("joins", [j for j in select.args.get("joins") or [] if not any(j is r for r in rest)])
