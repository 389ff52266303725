"""FROM items holding RIGHT or FULL joins, each made a derived table of its own.

A comma binds looser than any JOIN: ``FROM a RIGHT JOIN b ON ..., c FULL JOIN d ON ...`` is the cross product
of two joins, each of which pads rows with NULLs. The translator builds FROM as one left-deep chain of joins,
where an item holding such a join can only come first (``translate._padded_first``). So every such item but
the first becomes ``(SELECT <the columns the query reads of it> FROM <the item>) AS _padded<n>``, and the
query's reads of those columns read the derived table's.
"""

from __future__ import annotations

from sqlglot import exp

from sql.decorrelate import inside
from sql.lateral import fresh_numbers

__all__ = ["padded_items_apart"]


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
    alias = f"_padded{n}"
    held = {item.this.alias_or_name for item in group}
    columns: dict[tuple[str, str], str] = {}
    for col in list(select.find_all(exp.Column)):
        if col.table not in held or any(inside(col, j) for j in group[1:]) or not _reads(col, select):
            continue
        name = columns.setdefault((col.table, col.name), f"_p{len(columns)}")
        col.replace(exp.column(name, alias))
    inner = exp.select(*(exp.alias_(exp.column(c, t), name) for (t, c), name in columns.items()))
    if not columns:
        inner = exp.select(exp.alias_(exp.Literal.number(1), "_p"))
    first, rest = group[0], group[1:]
    inner.set("from_", exp.From(this=first.this.copy()))
    inner.set("joins", [j.copy() for j in rest])
    first.set("this", exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    select.set("joins", [j for j in select.args.get("joins") or [] if not any(j is r for r in rest)])


def _reads(col: exp.Column, select: exp.Select) -> bool:
    """Whether ``col`` reads a relation of ``select``'s FROM clause (none nearer names its relation)."""
    s = col.parent_select
    while s is not None and s is not select:
        from_ = s.args.get("from_") or s.args.get("from")
        items = ([from_.this] if from_ is not None else []) + [j.this for j in s.args.get("joins") or []]
        if col.table in {item.alias_or_name for item in items}:
            return False
        s = s.parent_select
    return s is select
