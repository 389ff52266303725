"""Subqueries of any kind, in any position, correlated in any way, as joins with derived tables: the unnesting
of Neumann and Kemper ("Unnesting Arbitrary Queries", BTW 2015), written as a rewrite of the qualified tree.

A subquery used as a value in a SELECT (its list, WHERE, HAVING, inside CASE or a function) that reads columns
F of that SELECT is computed once for each distinct value of F: the domain D, ``SELECT DISTINCT F`` over the
SELECT's own FROM clause and the conditions of its WHERE that hold no subquery, is joined into the subquery
(its reads of F become reads of D) and the subquery's result is grouped by D. The outer query then joins that
result on F, NULL meeting NULL, exactly one row for each of its rows:

- a scalar aggregate gives its value, or, for a domain value without rows, what it gives over no rows; a
  scalar ``ORDER BY ... LIMIT 1`` its first row per domain value (ROW_NUMBER over the domain's partitions);
- ``EXISTS`` is whether the domain value has a row;
- ``x op ANY/ALL (SELECT y ...)`` (``IN`` is ``= ANY``, ``NOT IN`` is ``NOT (= ANY)``) reads, per domain
  value of the subquery's own correlation (x is not part of it), the row count, the count of non-NULL y
  and their least and greatest, and for = and <> a join on x with the distinct y: enough for SQL's answer
  with NULLs, without pairing x with every y.

A subquery that reads nothing of its SELECT is the same with an empty domain: one row, cross-joined. Subqueries
nested in the subquery read D's columns where they read F, so the rewrite goes on from the outside in until
no subquery is left but those in FROM. A grouped SELECT whose list or HAVING holds a subquery is first split
into a SELECT over its groups; a subquery in an inner join's ON moves to WHERE. What no rewrite covers is
refused by name and position.

The translator tries its joins by shape first (``sql.hoist`` and sqlglot's unnesting: equality correlations
joined on the inner columns, with no domain) and takes this rewrite where those refuse, or where a subquery
reads a query two levels out.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from sql.errors import error_at
from sql.hoist import over_no_rows
from sql.lateral import fresh_numbers, join_domain
from sql.padded import outer_join_as_union
from sql.scalar import AGGREGATES, and_parts
from sql.scoping import binding, named

__all__ = ["aggregate_only", "decorrelate", "inside", "skips_a_level", "subquery_values"]

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def decorrelate(tree: exp.Expression) -> exp.Expression:
    """``tree`` (qualified: every column names its relation) with every subquery used as a value turned into
    joins with derived tables."""
    names = fresh_numbers(tree)
    for node in reversed(list(subquery_values(tree))):  # inner ones first: an outer one copies them
        if isinstance(node, exp.Subquery):
            _having_as_case(_query_of(node))
    while True:
        found = _next(tree)
        if found is None:
            return tree
        _unnest(*found, next(names))


def skips_a_level(tree: exp.Expression) -> bool:
    """Whether a subquery reads a column of a query enclosing the one it is used in (correlated two levels
    out or more)."""
    for node in subquery_values(tree):
        owner = node.parent_select
        for col in _query_of(node).find_all(exp.Column):
            bound = binding(col)
            if bound is not None and bound is not owner and not inside(bound, node):
                return True
    return False


def subquery_values(tree: exp.Expression) -> Iterator[exp.Expression]:
    """The subqueries used as values (EXISTS, IN, ANY/ALL comparisons and scalar subqueries) in ``tree``."""
    for node in tree.find_all(exp.Exists, exp.In, exp.Any, exp.All, exp.Subquery):
        if isinstance(node, exp.In) and node.args.get("query") is None:
            continue
        if isinstance(node, (exp.Any, exp.All)):
            if not isinstance(node.parent, _COMPARISONS) or node.parent.expression is not node:
                continue
            node = node.parent
        if isinstance(node, exp.Subquery) and isinstance(
            node.parent,
            (exp.From, exp.Join, exp.Lateral, exp.In, exp.Exists, exp.Any, exp.All, exp.SetOperation, exp.CTE),
        ):
            continue
        if isinstance(node, exp.Subquery) and node.parent is None:
            continue
        yield node


def _having_as_case(query: exp.Expression) -> None:
    """A scalar aggregate with HAVING gives its one row, or none (NULL) where HAVING does not hold: its value
    made ``CASE WHEN <having> THEN <value> END`` without HAVING (before anything splits it as grouped)."""
    if not isinstance(query, exp.Select) or len(query.selects) != 1 or not aggregate_only(query):
        return
    having = query.args.get("having")
    if having is None or _limit_value(query) == 0:
        return
    value = query.selects[0].unalias()
    query.set("expressions", [exp.Case(ifs=[exp.If(this=having.this.copy(), true=value.copy())])])
    query.set("having", None)


def _query_of(node: exp.Expression) -> exp.Expression:
    """The query of a subquery node (for a comparison with ANY/ALL, the one on its right)."""
    if isinstance(node, _COMPARISONS):
        node = node.expression
    q = node.args.get("query") if isinstance(node, exp.In) else node.this
    while isinstance(q, (exp.Subquery, exp.Paren)):
        q = q.this
    return q


def inside(node: exp.Expression, ancestor: exp.Expression) -> bool:
    """Whether ``node`` is ``ancestor`` or lies in its tree."""
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False


def _next(tree: exp.Expression):
    """The first SELECT (outermost first) using a subquery as a value, and that subquery; among a SELECT's
    subqueries, one holding no other."""
    for select in tree.find_all(exp.Select):
        own = [n for n in subquery_values(select) if n.parent_select is select]
        for node in own:
            if not any(other is not node and inside(other, node) for other in own):
                return select, node
    return None


def _unnest(select: exp.Select, node: exp.Expression, n: int) -> None:
    """Replace ``node``, a subquery ``select`` uses as a value, by a read of a derived table joined to it."""
    clause = _clause(select, node)
    if clause == "joins" and (
        _on_to_where(select, node) or _into_source(select, node, n) or _beside_left_values(select, node, n)
    ):
        return  # taken up next from WHERE, or from the SELECT list of the source it reads
    if clause == "joins":  # a RIGHT or FULL join's: its pairs and each kept side's rows alone, as a union
        join = next(j for j in select.args.get("joins") or [] if inside(node, j))
        if (join.side or "").upper() in ("RIGHT", "FULL") and inside(node, join.args.get("on")):
            outer_join_as_union(select, join, n)
            return
    if clause not in ("expressions", "where", "having"):
        where = {
            "joins": "the ON condition of a RIGHT or FULL join that reads several of the joined relations",
            "order": "ORDER BY",
            "group": "GROUP BY",
        }.get(clause, clause)
        raise error_at(node, f"a subquery in {where} is not supported", unsupported=True)
    if _grouped(select) and clause != "where" and not _in_own_aggregate(node, select):
        _split_grouping(select, n)  # the subquery is now in a SELECT over the groups; taken up next
        return
    query = _query_of(node)
    free = _free_columns(select, node)
    if isinstance(node, exp.Exists):
        derived, value = _exists(node, query, select, free, n)
        tables = [] if derived is None else [(derived, f"_sub{n}", free, None)]
    elif isinstance(node, exp.Subquery):
        derived, value = _scalar(node, query, select, free, n)
        tables = [] if derived is None else [(derived, f"_sub{n}", free, None)]
    else:
        tables, value = _quantified(node, query, select, n)
    for derived, alias, keys, also in tables:
        _join(select, derived, alias, keys, also)
    node.replace(value)


def _join(
    select: exp.Select, derived: exp.Select, alias: str, keys, also: exp.Expression | None = None
) -> None:
    """Join ``derived`` to ``select``'s FROM clause as ``alias``, one row (or none) per outer row: on the outer
    columns ``keys`` (and ``also``, read as ``alias._y``), NULL meeting NULL."""
    table = named(derived, alias)
    if not keys and also is None and "_m" in derived.named_selects:  # at most one row: kept apart
        marker = exp.EQ(this=exp.column("_m", alias), expression=exp.Literal.number(1))
        join = exp.Join(this=table, side="LEFT", on=marker)
    elif not keys and also is None:  # one row, always
        join = exp.Join(this=table, kind="CROSS")
    else:
        on = [
            exp.NullSafeEQ(this=exp.column(name, t), expression=exp.column(f"_d{i}", alias))
            for i, (t, name) in enumerate(keys)
        ]
        if also is not None:
            on.append(exp.NullSafeEQ(this=also.copy(), expression=exp.column("_y", alias)))
        join = exp.Join(this=table, side="LEFT", on=exp.and_(*on))
    if select.args.get("from_") or select.args.get("from"):
        select.append("joins", join)
    else:
        select.set("from_", exp.From(this=table))


def _on_to_where(select: exp.Select, node: exp.Expression) -> bool:
    """Move the condition holding ``node`` from an inner join's ON to WHERE, where it means the same when no
    later join pads rows with NULLs; whether it could."""
    joins = select.args.get("joins") or []
    at = next(i for i, j in enumerate(joins) if inside(node, j))
    join = joins[at]
    on = join.args.get("on")
    if (
        (join.side or "")
        or not inside(node, on)
        or any(j.side.upper() in ("RIGHT", "FULL") for j in joins[at:])
    ):
        return False
    parts = and_parts(on.this if isinstance(on, exp.Paren) else on)
    moved = [c for c in parts if inside(node, c)]
    kept = [c for c in parts if not inside(node, c)]
    join.set("on", exp.and_(*kept) if kept else None)
    if not kept and (join.kind or "").upper() != "CROSS":
        join.set("kind", "CROSS")
    select.where(*moved, copy=False)
    return True


def _into_source(select: exp.Select, node: exp.Expression, n: int) -> bool:
    """A subquery in an outer join's ON that reads one source of ``select`` (or none) computed beside that
    source's rows: the source becomes ``(SELECT its columns, the subquery AS _on<n> FROM it) AS alias`` and the
    condition reads ``alias._on<n>``. Whether it could (not when the subquery reads several sources)."""
    tables = {t for t, _ in _free_columns(select, node)}
    from_ = select.args.get("from_") or select.args.get("from")
    joins = select.args.get("joins") or []
    if len(tables) > 1:
        return False
    joined = next(j for j in joins if inside(node, j)).this.alias_or_name  # an uncorrelated one: beside it
    alias = next(iter(tables)) if tables else joined
    holder = next((h for h in [from_, *joins] if h.this.alias_or_name == alias), None)
    if holder is None or not isinstance(holder.this, (exp.Table, exp.Subquery)):
        return False
    names = []
    for col in select.find_all(exp.Column):
        if col.table == alias and col.name not in names and binding(col) is select:
            names.append(col.name)
    source = holder.this.copy()
    inner = exp.select(*(exp.alias_(exp.column(c, alias), c) for c in names))
    inner.set("from_", exp.From(this=source))
    node.replace(exp.column(f"_on{n}", alias))
    inner.append("expressions", exp.Alias(this=node, alias=exp.to_identifier(f"_on{n}")))
    holder.set("this", named(inner, alias))
    return True


def _beside_left_values(select: exp.Select, node: exp.Expression, n: int) -> bool:
    """A subquery in a LEFT join's ON that reads the joined relation and relations joined before it: the
    joined relation becomes ``(SELECT its columns, the distinct values it reads of the others (_l<i>), the
    subquery over both AS _on<n> FROM it CROSS JOIN those values) AS alias``, and the condition reads
    ``alias._on<n>`` where ``alias._l<i>`` are the left row's values (NULL meeting NULL). Each left row then
    meets each right row once, with the subquery's value for the two. Whether it could (a LEFT join only: the
    right rows unmatched would come once per value)."""
    joins = select.args.get("joins") or []
    at = next(i for i, j in enumerate(joins) if inside(node, j))
    join = joins[at]
    alias = join.this.alias_or_name
    free = _free_columns(select, node)
    if (join.side or "").upper() != "LEFT" or not isinstance(join.this, (exp.Table, exp.Subquery)):
        return False
    if not inside(node, join.args.get("on")):
        return False
    left = [(t, c) for t, c in free if t != alias]
    before = {(select.args.get("from_") or select.args.get("from")).this.alias_or_name}
    before |= {j.this.alias_or_name for j in joins[:at]}
    if not left or any(t not in before for t, _ in left):
        return False
    values = exp.select(*(exp.alias_(exp.column(c, t), f"_l{i}") for i, (t, c) in enumerate(left)))
    values.set("from_", (select.args.get("from_") or select.args.get("from")).copy())
    for j in joins[:at]:
        values.append("joins", j.copy())
    values.set("distinct", exp.Distinct())
    domain = f"_dom{n}"
    names = []
    for col in select.find_all(exp.Column):
        if col.table == alias and col.name not in names and binding(col) is select:
            names.append(col.name)
    subquery = node.copy()
    for col in list(subquery.find_all(exp.Column)):
        key = (col.table, col.name)
        if key in left and col.table != alias:
            col.replace(exp.column(f"_l{left.index(key)}", domain))
    inner = exp.select(
        *(exp.alias_(exp.column(c, alias), c) for c in names),
        *(exp.alias_(exp.column(f"_l{i}", domain), f"_l{i}") for i in range(len(left))),
        exp.Alias(this=subquery, alias=exp.to_identifier(f"_on{n}")),
    )
    inner.set("from_", exp.From(this=join.this.copy()))
    inner.append("joins", exp.Join(this=named(values, domain), kind="CROSS"))
    node.replace(exp.column(f"_on{n}", alias))
    match = [
        exp.NullSafeEQ(this=exp.column(f"_l{i}", alias), expression=exp.column(c, t))
        for i, (t, c) in enumerate(left)
    ]
    join.set("on", exp.and_(join.args["on"], *match))
    join.set("this", named(inner, alias))
    return True


def _split_grouping(select: exp.Select, n: int) -> None:
    """Make ``select``, grouped, a SELECT over its groups: its keys and aggregates become a derived table, which
    its list, HAVING and ORDER BY read; a subquery there then reads a group as it would read a row."""
    group = select.args.get("group")
    keys = _grouping_keys(group) if group is not None else []
    groups = f"_agg{n}"
    aggregates: list[exp.Expression] = []

    def outer(node: exp.Expression) -> bool:
        cols = list(node.find_all(exp.Column))
        return bool(cols) and all(binding(c) is select for c in cols)

    def lift(node: exp.Expression) -> exp.Expression:
        aggregate = isinstance(node, (*AGGREGATES, exp.AggFunc, exp.Grouping))
        aggregate = aggregate and not isinstance(node.parent, exp.Window)
        aggregate = aggregate or (isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc))
        if aggregate and (node.parent_select is select or outer(node)):
            for j, a in enumerate(aggregates):
                if a == node:
                    return exp.column(f"_a{j}", groups)
            aggregates.append(node.copy())
            return exp.column(f"_a{len(aggregates) - 1}", groups)
        if isinstance(node, exp.Column) and binding(node) is not select:
            return node
        if not isinstance(node, exp.Literal):
            for i, k in enumerate(keys):
                if node == k and (not isinstance(node, exp.Column) or binding(node) is select):
                    return exp.column(f"_g{i}", groups)
        if isinstance(node, exp.Column):
            raise error_at(node, f"column {node.sql()!r} must appear in GROUP BY or be used in an aggregate")
        for child in list(node.iter_expressions()):
            new = lift(child)
            if new is not child:
                child.replace(new)
        return node

    items = []
    for item in select.expressions:
        if not isinstance(item, exp.Alias):
            item = exp.alias_(item.copy(), item.alias_or_name) if item.alias_or_name else item
        items.append(lift(item))
    having = select.args.get("having")
    condition = lift(having.this) if having is not None else None
    order = select.args.get("order")
    if order is not None:
        for o in order.expressions:
            o.set("this", lift(o.this))
    inner = exp.select(
        *(exp.alias_(k.copy(), f"_g{i}") for i, k in enumerate(keys)),
        *(exp.alias_(a, f"_a{j}") for j, a in enumerate(aggregates)),
    )
    for key in ("from_", "joins", "where", "group"):
        inner.set(key, select.args.get(key))
    if not inner.expressions:
        inner.set("expressions", [exp.alias_(exp.Count(this=exp.Star()), "_a")])
    select.set("expressions", items)
    select.set("from_", exp.From(this=named(inner, groups)))
    for key in ("joins", "group", "having"):
        select.set(key, None)
    select.set("where", exp.Where(this=condition) if condition is not None else None)


def _grouping_keys(group: exp.Group) -> list[exp.Expression]:
    """The expressions GROUP BY groups on, each once: those inside GROUPING SETS, ROLLUP and CUBE too."""
    out: list[exp.Expression] = []

    def add(e: exp.Expression) -> None:
        while isinstance(e, exp.Paren):
            e = e.this
        if isinstance(e, (exp.Tuple, exp.Rollup, exp.Cube, exp.GroupingSets)):
            for x in e.expressions:
                add(x)
        elif e not in out:
            out.append(e)

    for e in group.expressions:
        add(e)
    return out


def _clause(select: exp.Select, node: exp.Expression) -> str:
    at = node
    while at.parent is not select:
        at = at.parent
    return at.arg_key


def _grouped(select: exp.Select) -> bool:
    if select.args.get("group") is not None:
        return True
    return any(a.parent_select is select for s in select.selects for a in s.find_all(*AGGREGATES))


def _in_own_aggregate(node: exp.Expression, select: exp.Select) -> bool:
    at = node.parent
    while at is not None and at is not select:
        if isinstance(at, AGGREGATES):
            return True
        at = at.parent
    return False


def _free_columns(select: exp.Select, node: exp.Expression) -> list[tuple[str, str]]:
    """The columns of ``select``'s relations that ``node`` reads (its left operand's, for IN and ANY/ALL), in
    the order first read."""
    out: list[tuple[str, str]] = []
    for col in node.find_all(exp.Column):
        key = (col.table, col.name)
        if key not in out and binding(col) is select:
            out.append(key)
    return out


def _domain(select: exp.Select, free: list[tuple[str, str]]) -> exp.Select:
    """``SELECT DISTINCT`` the free columns over ``select``'s FROM clause and the conditions of its WHERE that
    hold no subquery: every value the subquery is asked for, and few others."""
    out = exp.select(*(exp.alias_(exp.column(name, t), f"_d{i}") for i, (t, name) in enumerate(free)))
    from_ = select.args.get("from_") or select.args.get("from")
    out.set("from_", from_.copy())
    for j in select.args.get("joins") or []:
        if not j.this.alias_or_name.startswith("_sub"):  # one row per row: not needed for the domain
            out.append("joins", j.copy())
    where = select.args.get("where")
    conds = and_parts(where.this) if where is not None else []
    plain = [c for c in conds if not _holds_subquery(c) and not _reads_unnested(c)]
    if plain:
        out.set("where", exp.Where(this=exp.and_(*(c.copy() for c in plain))))
    out.set("distinct", exp.Distinct())
    return out


def _reads_unnested(node: exp.Expression) -> bool:
    """Whether ``node`` reads a subquery's result joined by an earlier unnesting (left out of domains)."""
    return any(c.table.startswith("_sub") for c in node.find_all(exp.Column))


def _holds_subquery(node: exp.Expression) -> bool:
    return next(subquery_values(node), None) is not None


def _dependent(query: exp.Select, select: exp.Select, free: list[tuple[str, str]], n: int) -> exp.Select:
    """``query`` with the domain of ``free`` joined into its FROM clause and its reads of ``select``'s columns
    made reads of the domain's (alias ``_dom<n>``); its SELECT list is left to the caller."""
    dom = f"_dom{n}"
    index = {key: i for i, key in enumerate(free)}
    for col in list(query.find_all(exp.Column)):
        if binding(col) is select:
            col.replace(exp.column(f"_d{index[(col.table, col.name)]}", dom))
    join_domain(query, named(_domain(select, free), dom))
    return query


def _domain_columns(table: str, free) -> list[exp.Expression]:
    return [exp.alias_(exp.column(f"_d{i}", table), f"_d{i}") for i in range(len(free))]


def aggregate_only(query: exp.Select) -> bool:
    """Whether ``query`` is an aggregate without GROUP BY: one row, whatever its WHERE lets through."""
    if query.args.get("group") is not None:
        return False
    return any(a.parent_select is query for s in query.selects for a in s.find_all(*AGGREGATES))


def _limit_value(query: exp.Select) -> int | None:
    limit = query.args.get("limit")
    if limit is None:
        return None
    value = limit.expression
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise error_at(limit, "a LIMIT in a subquery must be a number", unsupported=True)


def _scalar(node: exp.Subquery, query: exp.Expression, select: exp.Select, free, n: int):
    """A scalar subquery: the derived table and the expression reading its value."""
    if not isinstance(query, exp.Select) or len(query.selects) != 1:
        raise error_at(node, "a scalar subquery must be a SELECT of one column", unsupported=True)
    if query.args.get("offset") is not None or query.args.get("with_") is not None:
        raise error_at(node, "a scalar subquery with OFFSET or WITH is not supported", unsupported=True)
    _having_as_case(query)
    value = query.selects[0].unalias()
    from_ = query.args.get("from_") or query.args.get("from")
    if from_ is None and query.args.get("where") is None and not aggregate_only(query):
        return None, exp.Paren(this=value.copy())  # SELECT expression: the expression
    alias = f"_sub{n}"
    if aggregate_only(query):
        if _limit_value(query) == 0 or query.args.get("having") is not None:
            raise error_at(node, "a scalar aggregate subquery with LIMIT 0 is not supported", True)
        query.set("limit", None)
        query.set("order", None)
        if not free:
            query.set("expressions", [exp.alias_(value.copy(), "_v")])
            return query, exp.column("_v", alias)
        empty = over_no_rows(value)
        dependent = _dependent(query, select, free, n)
        dom = f"_dom{n}"
        v = dependent.selects[0].unalias()
        dependent.set(
            "expressions",
            [*_domain_columns(dom, free), exp.alias_(v.copy(), "_v"), exp.alias_(exp.Literal.number(1), "_m")],
        )
        dependent.set("group", exp.Group(expressions=[exp.column(f"_d{i}", dom) for i in range(len(free))]))
        read = exp.Case(
            ifs=[exp.If(this=exp.Is(this=exp.column("_m", alias), expression=exp.Null()), true=empty)],
            default=exp.column("_v", alias),
        )
        return dependent, exp.Paren(this=read)
    if _limit_value(query) != 1 or query.args.get("group") is not None:
        raise error_at(node, "a scalar subquery that may return more than one row is not supported", True)
    # LIMIT 1: the first row in ORDER BY of each domain value's rows (any one without ORDER BY)
    query.set("limit", None)
    order = query.args.get("order")
    query.set("order", None)
    if order is not None:  # ORDER BY an output name orders by what the name stands for
        outputs = {s.alias_or_name: s.unalias() for s in query.selects}
        for o in order.expressions:
            if isinstance(o.this, exp.Column) and not o.this.table and o.this.name in outputs:
                o.set("this", outputs[o.this.name].copy())
    if free:
        query = _dependent(query, select, free, n)
    dom = f"_dom{n}"
    v = query.selects[0].unalias()
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column(f"_d{i}", dom) for i in range(len(free))] or None,
        order=order.copy() if order is not None else None,
    )
    query.set(
        "expressions",
        [
            *_domain_columns(dom, free),
            exp.alias_(v.copy(), "_v"),
            exp.alias_(exp.Literal.number(1), "_m"),
            exp.alias_(window, "_rn"),
        ],
    )
    ranked = f"_rank{n}"
    first = exp.select(
        *_domain_columns(ranked, free), exp.alias_(exp.column("_v", ranked), "_v"), exp.column("_m", ranked)
    )
    first.set("from_", exp.From(this=named(query, ranked)))
    first.set("where", exp.Where(this=exp.EQ(this=exp.column("_rn", ranked), expression=exp.Literal.number(1))))
    return first, exp.column("_v", alias)


def _read_from(query: exp.Expression, columns: list[exp.Expression], alias: str) -> exp.Select:
    """``SELECT columns FROM (query) AS alias``, in ``query``'s place in the tree (a derived table that reads
    the outer query's columns becomes LATERAL when the domain joins it)."""
    select = exp.select(*columns)
    query.replace(select)
    select.set("from_", exp.From(this=named(query, alias)))
    return select


def _exists(node: exp.Exists, query: exp.Expression, select: exp.Select, free, n: int):
    """``EXISTS (query)``: the derived table and the expression reading whether the outer row's has rows."""
    alias = f"_sub{n}"
    if not isinstance(query, exp.Select):
        query = _read_from(query, [exp.Literal.number(1)], f"_set{n}")
    if query.args.get("offset") is not None:
        raise error_at(node, "EXISTS over a subquery with OFFSET is not supported", unsupported=True)
    if _limit_value(query) == 0:
        return None, exp.false()
    query.set("limit", None)
    query.set("order", None)
    if aggregate_only(query):
        if query.args.get("having") is None:
            return None, exp.true()
        raise error_at(node, "EXISTS over an aggregate with HAVING and no GROUP BY is not supported", True)
    grouped = query.args.get("group") is not None
    query.set("expressions", [exp.alias_(exp.Literal.number(1), "_one")])
    if not free:
        query.set("distinct", None)
        counted = exp.select(
            exp.alias_(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)), "_v")
        )
        counted.set("from_", exp.From(this=named(query, f"_set{n}")))
        return counted, exp.column("_v", alias)
    dependent = _dependent(query, select, free, n)
    dom = f"_dom{n}"
    dependent.set("expressions", _domain_columns(dom, free))
    if grouped:
        group = dependent.args["group"]
        for i in range(len(free)):
            group.append("expressions", exp.column(f"_d{i}", dom))
        inner = f"_grp{n}"
        found = exp.select(*_domain_columns(inner, free))
        found.set("from_", exp.From(this=named(dependent, inner)))
        dependent = found
    dependent.set("expressions", [*dependent.expressions, exp.alias_(exp.Literal.number(1), "_m")])
    dependent.set("distinct", exp.Distinct())
    read = exp.Not(this=exp.Is(this=exp.column("_m", alias), expression=exp.Null()))
    return dependent, exp.Paren(this=read)


def _quantified(node: exp.Expression, query: exp.Expression, select: exp.Select, n: int):
    """``x [NOT] IN (query)`` or ``x op ANY/ALL (query)``: the derived tables giving, per value of the outer
    columns the query reads, its row count, its count of non-NULL values and their least and greatest (and, for
    = and <>, whether x is among them), and the expression giving SQL's answer from them, NULLs included."""
    if isinstance(node, exp.In):
        op, x, every, negate = exp.EQ, node.this, False, bool(node.args.get("negate"))
    else:
        op, x, every, negate = type(node), node.this, isinstance(node.expression, exp.All), False
    if not isinstance(query, exp.Query):
        word = "ALL" if every else "ANY"
        raise error_at(node, f"{word} over a list or an array is not supported, only over a subquery", True)
    if isinstance(x, exp.Tuple):
        raise error_at(node, "a row of several values compared with a subquery is not supported", True)
    free = _free_columns(select, query)
    if not isinstance(query, exp.Select):  # its rows, read from FROM (as LATERAL when correlated)
        names = query.named_selects
        if len(names) != 1:
            raise error_at(node, "a subquery compared with a value must have one column", unsupported=True)
        query = _read_from(query, [exp.column(names[0], f"_set{n}")], f"_set{n}")
    if len(query.selects) != 1:
        raise error_at(node, "a subquery compared with a value must have one column", unsupported=True)
    if query.args.get("limit") is not None or query.args.get("offset") is not None:
        raise error_at(node, "a subquery with LIMIT or OFFSET compared with a value is not supported", True)
    if aggregate_only(query) and query.args.get("having") is None:  # one row: a plain comparison
        compared = op(this=x.copy(), expression=exp.Subquery(this=query))
        return [], exp.Not(this=compared) if negate else compared
    query.set("order", None)
    if free:
        grouped = query.args.get("group") is not None
        base = _dependent(query, select, free, n)
        dom = f"_dom{n}"
        y = base.selects[0].unalias()
        base.set("expressions", [*_domain_columns(dom, free), exp.alias_(y.copy(), "_y")])
        if grouped:
            for i in range(len(free)):
                base.args["group"].append("expressions", exp.column(f"_d{i}", dom))
    else:
        base = query
        base.set("expressions", [exp.alias_(query.selects[0].unalias().copy(), "_y")])
    values = f"_vals{n}"
    y = exp.column("_y", values)
    stats = exp.select(
        *_domain_columns(values, free),
        exp.alias_(exp.Count(this=exp.Star()), "_n"),
        exp.alias_(exp.Count(this=y.copy()), "_nn"),
        exp.alias_(exp.Min(this=y.copy()), "_lo"),
        exp.alias_(exp.Max(this=y.copy()), "_hi"),
    )
    stats.set("from_", exp.From(this=named(base.copy(), values)))
    if free:
        stats.set("group", exp.Group(expressions=[exp.column(f"_d{i}", values) for i in range(len(free))]))
    st = f"_sub{n}"
    tables = [(stats, st, free, None)]
    zero = exp.Literal.number(0)
    rows = exp.Coalesce(this=exp.column("_n", st), expressions=[zero.copy()])
    nonnull = exp.Coalesce(this=exp.column("_nn", st), expressions=[zero.copy()])
    lo, hi = exp.column("_lo", st), exp.column("_hi", st)

    def known(cond: exp.Expression) -> exp.Expression:  # NULL (no values, or x NULL) as FALSE
        return exp.Coalesce(this=exp.Paren(this=cond), expressions=[exp.false()])

    def differs() -> exp.Expression:  # some value is not x
        return known(
            exp.or_(exp.NEQ(this=lo.copy(), expression=x.copy()), exp.NEQ(this=hi.copy(), expression=x.copy()))
        )

    if op in (exp.EQ, exp.NEQ):
        found = exp.select(
            *_domain_columns(values, free), exp.alias_(y.copy(), "_y"), exp.alias_(exp.Literal.number(1), "_m")
        )
        found.set("from_", exp.From(this=named(base, values)))
        found.set("where", exp.Where(this=exp.Not(this=exp.Is(this=y.copy(), expression=exp.Null()))))
        found.set("distinct", exp.Distinct())
        match = f"_sub{n}m"
        tables.append((found, match, free, x))
        equal = exp.Not(this=exp.Is(this=exp.column("_m", match), expression=exp.Null()))
        some_true, some_false = (equal, differs()) if op is exp.EQ else (differs(), equal)
    else:
        flipped = {exp.LT: exp.GTE, exp.LTE: exp.GT, exp.GT: exp.LTE, exp.GTE: exp.LT}[op]
        below = op in (exp.LT, exp.LTE)  # x < some y: against the greatest; x >= some y: against the least
        some_true = known(op(this=x.copy(), expression=(hi if below else lo).copy()))
        some_false = known(flipped(this=x.copy(), expression=(lo if below else hi).copy()))
    unknown = exp.or_(
        exp.and_(
            exp.GT(this=rows.copy(), expression=zero.copy()), exp.Is(this=x.copy(), expression=exp.Null())
        ),
        exp.GT(this=rows.copy(), expression=nonnull.copy()),
    )
    null = exp.Cast(this=exp.Null(), to=exp.DataType.build("BOOLEAN"))
    if every:  # FALSE when some comparison is FALSE, else NULL when some is NULL, else TRUE
        ifs = [exp.If(this=some_false, true=exp.false()), exp.If(this=unknown, true=null)]
        value = exp.Case(ifs=ifs, default=exp.true())
    else:  # TRUE when some comparison is TRUE, else NULL when some is NULL, else FALSE
        ifs = [exp.If(this=some_true, true=exp.true()), exp.If(this=unknown, true=null)]
        value = exp.Case(ifs=ifs, default=exp.false())
    value = exp.Paren(this=value)
    return tables, exp.Not(this=value) if negate else value
