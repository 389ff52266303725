"""Rewrites of a query's syntax tree before translation, and refusals of what a rewrite would answer wrongly.

As it is parsed: a VALUES list (but INSERT's rows) becomes UNION ALL of one-row SELECTs.

Before qualification: joins ``USING`` a column an earlier FULL or RIGHT join merged, and ``SELECT *`` over a
USING join beside another relation with that column, are refused (sqlglot's rewrite into ON and its expansion
of ``*`` would change the answer). After it (every column names its relation, so a column of a relation the
subquery does not name is the outer query's): EXISTS over an aggregate without GROUP BY is TRUE; IN and NOT IN
are refused where their NULL result matters (kept in conditions of WHERE and HAVING); NOT IN becomes EXISTS
conditions that keep SQL's NULL rules; a correlated IN becomes an EXISTS with one more equality. What remains
is for sqlglot's ``unnest_subqueries`` and the translator.
"""

from __future__ import annotations

from sqlglot import exp

from sql.errors import error_at
from sql.scalar import AGGREGATES

__all__ = [
    "values_as_selects",
    "check_merged_columns",
    "check_using_star",
    "always_exists",
    "check_in_subqueries",
    "not_in_subqueries",
    "correlated_in_as_exists",
    "check_scalar_subqueries",
    "single_row",
]


def values_as_selects(tree: exp.Expression, prefix: str = "column") -> exp.Expression:
    """``tree`` with each VALUES list other than INSERT's rows as UNION ALL of one-row SELECTs of columns
    ``column1``, ``column2``, ... (PostgreSQL's names; Spark's are ``col1``, ... with ``prefix`` ``"col"``; in
    FROM, its alias may rename them), which translate as any query does: PostgreSQL resolves a VALUES column's
    type as UNION's. The union is a balanced tree, so that many rows do not nest deeply."""
    for values in list(tree.find_all(exp.Values)):
        if isinstance(values.parent, exp.Insert) and values.arg_key == "expression":
            continue
        rows = [r.expressions if isinstance(r, exp.Tuple) else [r] for r in values.expressions]
        odd = next((n for n, r in enumerate(rows) if len(r) != len(rows[0])), None)
        if odd is not None:
            raise error_at(values.expressions[odd], "VALUES lists must all be the same length")
        selects: list[exp.Expression] = [
            exp.select(*[exp.alias_(e.copy(), f"{prefix}{i + 1}") for i, e in enumerate(r)]) for r in rows
        ]
        while len(selects) > 1:
            pairs = zip(selects[0::2], selects[1::2], strict=False)
            joined = [exp.union(a, b, distinct=False) for a, b in pairs]
            selects = joined + ([selects[-1]] if len(selects) % 2 else [])
        query = selects[0]
        for arg in ("order", "limit", "offset"):  # VALUES ... ORDER BY ... LIMIT ...: the union's
            if values.args.get(arg) is not None:
                query.set(arg, values.args[arg].copy())
        alias = values.args.get("alias")
        if alias is None and isinstance(values.parent, (exp.From, exp.Join)):
            alias = exp.TableAlias(this=exp.to_identifier("values"))  # FROM VALUES ... without a name (Spark)
        replacement = exp.Subquery(this=query, alias=alias.copy()) if alias is not None else query
        if values is tree:
            return replacement
        parent = values.parent
        if isinstance(parent, exp.In) and values.arg_key == "expressions" and len(parent.expressions) == 1:
            parent.set("expressions", None)  # x IN (VALUES ...): IN a query, as x IN (SELECT ...)
            parent.set("query", exp.Subquery(this=query))
            continue
        values.replace(replacement)
    return tree


def check_merged_columns(tree: exp.Expression) -> None:
    """Reject a join USING a column that an earlier FULL or RIGHT join merged (USING or NATURAL): SQL joins on
    the merged value, COALESCE of both sides, where the rewrite of USING into ON would take the left side's."""
    for select in tree.find_all(exp.Select):
        merged: set[str] = set()
        natural = False
        for j in select.args.get("joins") or []:
            using = {c.name for c in j.args.get("using") or []}
            is_natural = (j.method or "").upper() == "NATURAL"
            if using & merged or ((using or is_natural) and natural) or (is_natural and merged):
                raise error_at(
                    j, "a join USING a column merged by an earlier FULL or RIGHT join is not supported", True
                )
            if (j.side or "").upper() in ("FULL", "RIGHT"):
                merged |= using
                natural = natural or is_natural


def check_using_star(tree: exp.Expression, schema: dict) -> None:
    """Reject ``SELECT *`` over a join USING (or NATURAL) a column that another relation of the FROM clause
    also has without being joined on it: SQL keeps that relation's column, the expansion of ``*`` would drop it.
    Relations whose columns cannot be told here (a derived table selecting ``*``) are rejected alike."""
    ctes = {c.alias_or_name: c.this for c in tree.find_all(exp.CTE)}

    def columns(src: exp.Expression) -> set[str] | None:
        query = src.this if isinstance(src, exp.Subquery) else ctes.get(src.name)
        if isinstance(src, exp.Table) and query is None:
            return set(schema.get(src.name, {}))
        if isinstance(query, exp.Select) and not query.is_star:
            return set(query.named_selects)
        return None

    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_") or select.args.get("from")
        merging = [j for j in joins if j.args.get("using") or (j.method or "").upper() == "NATURAL"]
        if from_ is None or not merging or not any(isinstance(e, exp.Star) for e in select.expressions):
            continue
        names = [columns(src) for src in [from_.this, *(j.this for j in joins)]]
        if any(n is None for n in names):
            raise error_at(merging[0], "SELECT * over this join USING needs the columns listed", True)
        joined: dict[str, int] = {}  # column -> sources joined on it
        seen: set[str] = set(names[0])
        for k, j in enumerate(joins, start=1):
            using = {c.name for c in j.args.get("using") or []}
            if (j.method or "").upper() == "NATURAL":
                using = names[k] & seen
            for a in using:
                joined[a] = joined.get(a, 1) + 1
            seen |= names[k]
        for a, count in joined.items():
            if sum(a in n for n in names) != count:
                raise error_at(
                    merging[0],
                    f"SELECT * over a join USING ({a}) with another column {a} needs the columns listed",
                    True,
                )


def always_exists(tree: exp.Expression) -> None:
    """``EXISTS (SELECT count(*) ... )`` over an aggregate without GROUP BY or HAVING is TRUE: such a query
    gives one row whatever its WHERE lets through."""
    for node in list(tree.find_all(exp.Exists)):
        q = node.this
        if not isinstance(q, exp.Select) or any(q.args.get(k) for k in ("group", "having", "limit", "offset")):
            continue
        if any(a.parent_select is q for s in q.selects for a in s.find_all(*AGGREGATES)):
            node.replace(exp.true())


def check_in_subqueries(tree: exp.Expression) -> None:
    """Reject ``IN (subquery)`` and ``NOT IN (subquery)`` where their NULL result matters: they become joins
    and EXISTS conditions that answer FALSE where SQL answers NULL, which is the same only for a condition of
    WHERE or HAVING (through AND and OR), where NULL and FALSE both drop the row."""
    for node in tree.find_all(exp.In):
        if node.args.get("query") is None:
            continue
        at = node
        while isinstance(at.parent, exp.Paren):
            at = at.parent
        if isinstance(at.parent, exp.Not):
            at = at.parent
        up = at.parent
        while isinstance(up, (exp.And, exp.Or, exp.Paren)):
            up = up.parent
        if not isinstance(up, (exp.Where, exp.Having)):
            raise error_at(
                node, "IN (subquery) is supported as a condition of WHERE or HAVING only, not as a value", True
            )


def correlated_in_as_exists(tree: exp.Expression) -> None:
    """``x IN (SELECT y FROM ... WHERE <reads the outer query>)`` (a condition of WHERE or HAVING: see
    ``check_in_subqueries``) as ``EXISTS (SELECT ... WHERE ... AND y = x)``, the form decorrelated into a join;
    the tree is qualified, so a column of a relation the subquery does not name is the outer query's."""
    for node in list(tree.find_all(exp.In)):
        query = node.args.get("query")
        query = query.this if isinstance(query, exp.Subquery) else query
        if node.args.get("negate") or not isinstance(query, exp.Select) or len(query.selects) != 1:
            continue
        from_ = query.args.get("from_") or query.args.get("from")
        if from_ is None or any(query.args.get(k) for k in ("group", "having", "limit", "offset", "distinct")):
            continue
        if any(a.parent_select is query for a in query.selects[0].find_all(*AGGREGATES)):
            continue  # an aggregate's one value: not a condition to move into WHERE
        # every relation named inside, nested subqueries' included: a column of any other is the outer query's
        own = {t.alias_or_name for t in query.find_all(exp.Table, exp.Subquery) if t.alias_or_name}
        if all(c.table in own for c in query.find_all(exp.Column)):
            continue  # uncorrelated: a join with the subquery's distinct values
        inner = query.copy()
        match = exp.EQ(this=inner.selects[0].unalias().copy(), expression=node.this.copy())
        inner.set("expressions", [exp.Literal.number(1)])
        node.replace(exp.Exists(this=inner.where(match)))


def not_in_subqueries(tree: exp.Expression) -> exp.Expression:
    """``x NOT IN (SELECT y ...)`` as the EXISTS conditions that give SQL's answer with NULLs: no y equals x,
    and x is not NULL unless the subquery is empty, and no y is NULL. The tree is qualified: a subquery reading
    the outer query (correlated) gets the conditions added to its own WHERE, which needs a plain one (no
    grouping, DISTINCT or LIMIT); another is read as a derived table of one column."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        inside = node.this if isinstance(node, exp.Not) else None
        while isinstance(inside, exp.Paren):
            inside = inside.this
        if isinstance(node, exp.In) and node.args.get("negate") and node.args.get("query"):
            target = node
        elif isinstance(inside, exp.In) and not inside.args.get("negate") and inside.args.get("query"):
            target = inside
        else:
            return node
        x = target.this
        query = target.args["query"]
        query = query.this if isinstance(query, exp.Subquery) else query
        if not isinstance(query, exp.Select) or len(query.selects) != 1:
            raise error_at(node, "NOT IN needs a subquery of one column", unsupported=True)
        own = {t.alias_or_name for t in query.find_all(exp.Table, exp.Subquery) if t.alias_or_name}
        if any(c.table not in own for c in query.find_all(exp.Column)):
            if any(query.args.get(k) for k in ("group", "having", "distinct", "limit", "offset")) or any(
                a.parent_select is query for a in query.selects[0].find_all(*AGGREGATES)
            ):
                raise error_at(
                    node, "a correlated NOT IN over a grouped or limited subquery is not supported", True
                )
            y = query.selects[0].unalias()

            def inner(cond: exp.Expression | None) -> exp.Expression:
                sub = query.copy()
                sub.set("expressions", [exp.Literal.number(1)])
                return exp.Exists(this=sub.where(cond) if cond is not None else sub)

            match = inner(exp.EQ(this=y.copy(), expression=x.copy()))
            has_null = inner(exp.Is(this=y.copy(), expression=exp.Null()))
        else:
            alias, col = "_not_in", "_not_in_value"
            named = query.copy()
            named.set("expressions", [exp.alias_(query.selects[0].unalias().copy(), col)])
            table = exp.Subquery(this=named, alias=exp.TableAlias(this=exp.to_identifier(alias)))

            def inner(cond: exp.Expression | None) -> exp.Expression:
                sub = exp.select(exp.Literal.number(1)).from_(table.copy())
                return exp.Exists(this=sub.where(cond) if cond is not None else sub)

            ref = exp.column(col, table=alias)
            match = inner(exp.EQ(this=ref.copy(), expression=x.copy()))
            has_null = inner(exp.Is(this=ref.copy(), expression=exp.Null()))
        empty = exp.Not(this=inner(None))
        return exp.and_(
            exp.Not(this=match),
            exp.or_(exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null())), empty),
            exp.Not(this=has_null),
        )

    return tree.transform(rewrite)


def check_scalar_subqueries(tree: exp.Expression) -> None:
    """A subquery used as a value must give at most one row, or SQL raises an error where a join would give
    every row: refuse those that are not so by their form (an aggregate without GROUP BY, LIMIT 1, or no
    FROM)."""
    for sub in tree.find_all(exp.Subquery):
        parent = sub.parent
        if parent is None or isinstance(
            parent, (exp.From, exp.Join, exp.Lateral, exp.In, exp.Exists, exp.Any, exp.All, exp.SetOperation)
        ):
            continue
        if isinstance(parent, (exp.Subquery, exp.Paren)) or not isinstance(sub.this, exp.Select):
            continue
        if not single_row(sub.this):
            raise error_at(sub, "a scalar subquery that may return more than one row is not supported", True)


def single_row(select: exp.Select) -> bool:
    """Whether a query gives at most one row by its form: an aggregate without GROUP BY, LIMIT 0 or 1, or no
    FROM."""
    if select.args.get("group") is not None:
        return False
    limit = select.args.get("limit")
    if (
        isinstance(limit, exp.Limit)
        and isinstance(limit.expression, exp.Literal)
        and limit.expression.this in "01"
    ):
        return True
    if not (select.args.get("from_") or select.args.get("from")):
        return True
    return any(
        isinstance(s.unalias(), exp.AggFunc) or list(s.find_all(exp.AggFunc)) for s in select.expressions
    ) and not select.args.get("distinct")
