"""Which relation a column of a qualified query reads, as SQL's scoping finds it, and a derived table's
making: shared by the rewrites that move subqueries and FROM items about (``sql.decorrelate``,
``sql.lateral``, ``sql.padded``) and by the translator."""

from __future__ import annotations

from sqlglot import exp

__all__ = ["binding", "named", "sources"]


def sources(select: exp.Select) -> set[str]:
    """The names (aliases) of the relations ``select``'s FROM clause holds."""
    from_ = select.args.get("from_") or select.args.get("from")
    items = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
    return {item.alias_or_name for item in items}


def binding(col: exp.Column) -> exp.Select | None:
    """The SELECT whose FROM clause holds the relation ``col`` reads (the nearest one, as SQL's scoping), or
    None when no SELECT of its tree does."""
    s = col.parent_select
    while s is not None:
        if isinstance(s, exp.Select) and col.table in sources(s):
            return s
        s = s.parent_select
    return None


def named(query: exp.Expression, alias: str) -> exp.Subquery:
    """``(query) AS alias``."""
    return exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias)))
