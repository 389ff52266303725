"""Aggregation to logical plans: GROUP BY (with GROUPING SETS, ROLLUP and CUBE), the aggregate calls of SQL
(with DISTINCT and FILTER) and GROUPING().

    >>> import sqlglot
    >>> from sql.logical import Scan, Column
    >>> from sql.types import INT
    >>> t = Scan("t", (Column("g", INT), Column("x", INT)))
    >>> q = sqlglot.parse_one("SELECT g, SUM(DISTINCT x), COUNT(*) FROM t GROUP BY g", dialect="postgres")
    >>> plan, _ = aggregate(t, lambda n: None if not isinstance(n, exp.Column) else ColRef(
    ...     ["g", "x"].index(n.name), INT), q.args["group"], _select_aggregates(q))
    >>> type(plan.input).__name__, [type(p).__name__ for p in plan.input.inputs]
    ('UnionAll', ['Project', 'Project'])

Every aggregate is computed from the rows present alone, so that views keep them by running states where
they can:

- ``agg(x) FILTER (WHERE c)`` is ``agg(CASE WHEN c THEN x END)`` (every aggregate skips NULLs; ``COUNT(*)``
  counts a value that is TRUE where ``c`` holds).
- ``agg(DISTINCT x)`` reads the distinct rows of (group keys, x): a ``Distinct`` (one running count per row,
  an arrangement another view computing the same shares) below the aggregate. When a query also has
  aggregates of all rows, or DISTINCT aggregates of other arguments, the rows of each are put side by side in
  one ``UnionAll`` (each row NULL in the others' columns, which every aggregate skips, and ``COUNT(*)``
  counting a column TRUE in the rows of all only), so one aggregate computes every column, NULL group keys
  grouped together as SQL groups them. MIN and MAX of DISTINCT values are MIN and MAX.
- ``BOOL_AND``/``EVERY`` and ``BOOL_OR`` are counts: of the values that are not NULL, and of those TRUE.
- ``STRING_AGG(x, sep [ORDER BY ...])`` joins the values in the order given and, for ties and without ORDER
  BY, in the order of the text (PostgreSQL leaves that order to how rows arrive).
- ``ARRAY_AGG(x [ORDER BY ...])`` is the text PostgreSQL writes for the array (ivm has no arrays): a
  ``STRING_AGG`` of each value as array_out writes it, in braces; its DISTINCT rows carry ``x`` beside that
  text, so that the values come in ``x``'s order.
- ``GROUPING SETS``, ``ROLLUP`` and ``CUBE`` are one aggregate per grouping set, the keys outside the set
  NULL, put together by ``UnionAll``; ``GROUPING(...)`` is a constant of each set. The grouping set ``()``
  has one row even over no rows, as in PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from sql.chars import shown
from sql.errors import error_at
from sql.functions import as_text
from sql.logical import AggCall, Aggregate, Call, ColRef, Column, Const, Distinct, Expr, Plan, Project, UnionAll
from sql.scalar import AGGREGATES, NULL_TYPE, aggregate_type, boolean, translate_scalar
from sql.types import BOOL, INT, INTEGER, TEXT, SqlType

__all__ = ["aggregate", "own_aggregates"]

Resolver = Callable[[exp.Expression], Expr | None]


@dataclass(frozen=True)
class _Call:
    """An aggregate to compute: one output column of the aggregation. ``order`` holds STRING_AGG's ordering
    as ``(expression, descending, NULLs first)``."""

    func: str
    arg: Expr | None
    distinct: bool
    type: SqlType
    sep: str | None = None
    order: tuple[tuple[Expr, bool, bool], ...] = ()


def own_aggregates(node: exp.Expression, select: exp.Select) -> list[exp.Expression]:
    """The aggregate calls in ``node`` that belong to ``select`` (not to a subquery inside it); an aggregate
    with FILTER as its ``Filter`` node."""
    out = []
    for a in node.find_all(*AGGREGATES):
        if a.parent_select is select or a.parent_select is None:
            out.append(a.parent if isinstance(a.parent, exp.Filter) else a)
    return out


def _select_aggregates(select: exp.Select) -> list[exp.Expression]:
    return [a for s in select.selects for a in own_aggregates(s, select)]


def aggregate(
    plan: Plan, resolve: Resolver, group: exp.Group | None, aggs: list[exp.Expression], groupings=()
) -> tuple[Plan, Resolver]:
    """The aggregation of ``plan`` (whose columns ``resolve`` reads) by ``group`` computing ``aggs``, and a
    resolver of what the query reads after it: the aggregate calls, GROUPING calls (``groupings``) and the
    group expressions (None for anything else). The plan's columns are the group expressions, then one per
    aggregate computed, then one per GROUPING call (with grouping sets)."""
    keys, sets = _grouping_sets(group)
    key_exprs = [translate_scalar(k, resolve) for k in keys]
    nk = len(key_exprs)
    calls: list[_Call] = []
    values: dict[str, Expr] = {}

    def column(c: _Call) -> Expr:
        if c.func in ("min", "max") and c.distinct:
            c = _Call(c.func, c.arg, False, c.type)
        if c not in calls:
            calls.append(c)
        return ColRef(nk + calls.index(c), c.type)

    for a in aggs:
        if a.sql() not in values:
            values[a.sql()] = _value(a, resolve, column)
    key_sql = {k.sql(): i for i, k in enumerate(keys)}
    grouping_sql: dict[str, tuple[int, ...]] = {}
    for g in groupings:
        args = []
        for e in g.expressions:
            if _bare(e).sql() not in key_sql:
                raise error_at(
                    e, "arguments to GROUPING must be grouping expressions of the associated query level"
                )
            args.append(key_sql[_bare(e).sql()])
        grouping_sql.setdefault(g.sql(), tuple(args))
    if sets is None:
        out = _grouped(plan, key_exprs, tuple(range(nk)), calls)
    else:
        out = _union_of_sets(plan, key_exprs, sets, calls, list(grouping_sql.values()))
    grouping_at = {s: i for i, s in enumerate(grouping_sql)}

    def resolve_after(node: exp.Expression) -> Expr | None:
        if isinstance(node, (exp.Filter, *AGGREGATES)) and node.sql() in values:
            return values[node.sql()]
        if isinstance(node, exp.Grouping):
            if sets is None:
                return Const(0, INTEGER)
            return ColRef(nk + len(calls) + grouping_at[node.sql()], INTEGER)
        i = key_sql.get(node.sql())
        if i is not None:
            return ColRef(i, key_exprs[i].type)
        return None

    return out, resolve_after


def _bare(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _grouping_sets(group: exp.Group | None) -> tuple[list[exp.Expression], list[tuple[int, ...]] | None]:
    """The distinct group expressions and, for GROUPING SETS, ROLLUP or CUBE, the grouping sets (as positions
    of those expressions, repeated sets kept as PostgreSQL keeps them); None for a plain GROUP BY."""
    if group is None:
        return [], None
    keys: list[exp.Expression] = []
    index: dict[str, int] = {}

    def key(e: exp.Expression) -> int:
        e = _bare(e)
        if e.sql() not in index:
            index[e.sql()] = len(keys)
            keys.append(e)
        return index[e.sql()]

    def unit(e: exp.Expression) -> tuple[int, ...]:
        e = _bare(e)
        return tuple(key(x) for x in e.expressions) if isinstance(e, exp.Tuple) else (key(e),)

    def sets_of(item: exp.Expression) -> list[tuple[int, ...]]:
        if isinstance(item, exp.Rollup):
            units = [unit(e) for e in item.expressions]
            return [sum(units[:i], ()) for i in range(len(units), -1, -1)]
        if isinstance(item, exp.Cube):
            units = [unit(e) for e in item.expressions]
            n = len(units)
            return [
                sum((units[i] for i in range(n) if not bits >> (n - 1 - i) & 1), ()) for bits in range(2**n)
            ]
        if isinstance(item, exp.GroupingSets):
            out = []
            for e in item.expressions:
                out += sets_of(e) if isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) else [unit(e)]
            return out
        return [unit(item)]

    product: list[tuple[int, ...]] = [()]
    for item in group.expressions:
        product = [a + b for a in product for b in sets_of(item)]
    if not any(isinstance(i, (exp.Rollup, exp.Cube, exp.GroupingSets)) for i in group.expressions):
        return keys, None
    return keys, [tuple(dict.fromkeys(s)) for s in product]


def _union_of_sets(
    plan: Plan,
    keys: list[Expr],
    sets: list[tuple[int, ...]],
    calls: list[_Call],
    groupings: list[tuple[int, ...]],
) -> Plan:
    """One aggregation per grouping set, each with every group column (NULL outside its set) and the value of
    each GROUPING call, all together."""
    cols = (
        tuple(Column(f"g{i}", k.type) for i, k in enumerate(keys))
        + tuple(Column(f"a{j}", c.type) for j, c in enumerate(calls))
        + tuple(Column(f"grouping{j}", INTEGER, False) for j in range(len(groupings)))
    )
    branches = []
    for s in sets:
        inner = _grouped(plan, keys, s, calls)
        exprs: list[Expr] = [
            ColRef(s.index(i), k.type) if i in s else Const(None, k.type) for i, k in enumerate(keys)
        ]
        exprs += [ColRef(len(s) + j, c.type) for j, c in enumerate(calls)]
        for args in groupings:
            bits = sum(1 << (len(args) - 1 - n) for n, i in enumerate(args) if i not in s)
            exprs.append(Const(bits, INTEGER))
        branches.append(Project(inner, tuple(exprs), cols))
    return branches[0] if len(branches) == 1 else UnionAll(tuple(branches), cols)


def _family(c: _Call) -> tuple[Expr, ...]:
    """What a DISTINCT call reads of each distinct row: its argument, then the keys it orders by that are not
    the argument (functions of it, as SQL requires of DISTINCT, so they make no more rows distinct)."""
    return tuple(dict.fromkeys((c.arg, *(k for k, _, _ in c.order))))


def _grouped(plan: Plan, keys: list[Expr], group: tuple[int, ...], calls: list[_Call]) -> Aggregate:
    """The aggregation of ``plan`` by the keys at ``group`` computing ``calls``: columns the keys, then one per
    call. DISTINCT calls read the distinct (keys, argument) rows, beside the other calls' rows when there are
    several kinds (see the module's docstring)."""
    ks = [keys[i] for i in group]
    ns = len(ks)
    base = [c for c in calls if not c.distinct]
    families = list(dict.fromkeys(_family(c) for c in calls if c.distinct))
    starts = [sum(len(f) for f in families[:n]) for n in range(len(families))]
    args = [c.arg for c in base if c.arg is not None]  # one column per call, as written
    orders = [o for c in base for o, _, _ in c.order]
    marker = bool(base) and bool(families)
    inputs: list[Plan] = []
    layout = ks + args + orders
    types = [e.type for e in layout] + [e.type for f in families for e in f] + ([BOOL] if marker else [])
    cols = tuple(Column(f"g{i}", t) for i, t in enumerate(types))
    nb = len(layout)
    if base or not families:  # (a GROUP BY without aggregates: the groups present)
        nulls = [Const(None, e.type) for f in families for e in f]
        exprs = layout + nulls + ([Const(True, BOOL)] if marker else [])
        inputs.append(Project(plan, tuple(exprs), cols))
    for n, f in enumerate(families):
        read = ks + list(f)
        pairs = Distinct(Project(plan, tuple(read), tuple(Column(f"g{i}", e.type) for i, e in enumerate(read))))
        if len(families) == 1 and not base:
            inputs.append(pairs)
            nb = ns
            break
        exprs = [ColRef(i, e.type) for i, e in enumerate(ks)] + [Const(None, e.type) for e in layout[ns:]]
        for m, g in enumerate(families):
            exprs += [ColRef(ns + i, e.type) if m == n else Const(None, e.type) for i, e in enumerate(g)]
        exprs += [Const(None, BOOL)] if marker else []
        inputs.append(Project(pairs, tuple(exprs), cols))
    source = inputs[0] if len(inputs) == 1 else UnionAll(tuple(inputs), cols)
    agg_calls = []
    at = ns
    order_at = ns + len(args)
    for c in calls:
        if c.distinct:
            family = _family(c)
            pos = nb + starts[families.index(family)]
            order = tuple((pos + family.index(k), desc, first) for k, desc, first in c.order)
        else:
            pos = None
            if c.arg is not None:
                pos, at = at, at + 1
            order = tuple((order_at + k, desc, first) for k, (_, desc, first) in enumerate(c.order))
            order_at += len(c.order)
        func = c.func
        if func == "count_star" and marker:
            func, pos = "count", len(types) - 1  # the rows of all are those TRUE in the marker column
        param = (c.sep, order) if func == "string_agg" else None
        agg_calls.append(AggCall(func, pos, False, c.type, param))
    out_cols = tuple(Column(f"g{i}", e.type) for i, e in enumerate(ks)) + tuple(
        Column(f"a{j}", c.type) for j, c in enumerate(calls)
    )
    return Aggregate(source, tuple(range(ns)), tuple(agg_calls), out_cols)


# -- one aggregate call --------------------------------------------------------------------------------------


def _value(node: exp.Expression, resolve: Resolver, column: Callable[[_Call], Expr]) -> Expr:
    """The value of the aggregate call ``node`` (with its FILTER, if any) over the aggregation's columns, which
    ``column`` gives for each call computed."""
    cond = None
    if isinstance(node, exp.Filter):
        where = node.expression.this if isinstance(node.expression, exp.Where) else node.expression
        if own_nested(where):
            raise error_at(where, "aggregate functions are not allowed in FILTER")
        cond = boolean(where, translate_scalar(where, resolve))
        node = node.this
    func = {
        "groupconcat": "string_agg",
        "logicaland": "bool_and",
        "logicalor": "bool_or",
        "arrayagg": "array_agg",
        "stddev": "stddev_samp",
        "stddevsamp": "stddev_samp",
        "stddevpop": "stddev_pop",
        "variance": "var_samp",
        "variancepop": "var_pop",
    }.get(node.key, node.key)
    arg = node.this
    order_nodes: list[exp.Expression] = []
    if isinstance(arg, exp.Order):  # ORDER BY changes STRING_AGG only; the others are of the values alone
        order_nodes = list(arg.expressions)
        arg = arg.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        if len(arg.expressions) != 1:
            raise error_at(node, f"{func.upper()}(DISTINCT ...) of several columns is not supported", True)
        arg = arg.expressions[0]
    if isinstance(arg, exp.Star):
        if cond is None:
            return column(_Call("count_star", None, False, INT))
        return column(_Call("count", _when(cond, Const(True, BOOL)), False, INT))
    if own_nested(arg):
        raise error_at(node, "aggregate calls cannot be nested")
    if func == "array_agg":
        return _array_agg(node, translate_scalar(arg, resolve), distinct, order_nodes, cond, resolve, column)
    e = translate_scalar(arg, resolve)
    if cond is not None:
        e = _when(cond, e)
    if func in ("bool_and", "bool_or"):
        e = boolean(node, e)
        n = column(_Call("count", e, False, INT))
        true = column(_Call("count", _when(e, Const(True, BOOL)), False, INT))
        test = Call("eq", (true, n), BOOL) if func == "bool_and" else Call("gt", (true, Const(0, INT)), BOOL)
        return Call("case", (Call("eq", (n, Const(0, INT)), BOOL), Const(None, BOOL), test), BOOL)
    if func == "string_agg":
        return column(_string_agg(node, e, distinct, order_nodes, resolve))
    return column(_Call(func, e, distinct, aggregate_type(node, func, e)))


# characters that make array_out quote an element: braces, quote, comma, backslash and white space
_QUOTED_IN_ARRAYS = '[{}",\\\\ \t\n\r\x0b\f]'
_ELEMENT = exp.column("__element")


def _array_text(v: exp.Expression) -> exp.Expression:
    """An array element given as text, as PostgreSQL's array_out writes it: NULL as ``NULL``; the empty text,
    ``NULL`` in any case, and text holding a character of ``_QUOTED_IN_ARRAYS`` in double quotes, with
    backslash before each double quote and backslash."""

    def lit(text: str) -> exp.Literal:
        return exp.Literal.string(text)

    needs = exp.or_(
        exp.EQ(this=v.copy(), expression=lit("")),
        exp.EQ(this=exp.Upper(this=v.copy()), expression=lit("NULL")),
        exp.RegexpLike(this=v.copy(), expression=lit(_QUOTED_IN_ARRAYS)),
    )
    escaped = exp.Replace(
        this=exp.Replace(this=v.copy(), expression=lit("\\"), replacement=lit("\\\\")),
        expression=lit('"'),
        replacement=lit('\\"'),
    )
    quoted = exp.DPipe(this=exp.DPipe(this=lit('"'), expression=escaped), expression=lit('"'))
    is_null = exp.Is(this=v.copy(), expression=exp.Null())
    return exp.Case(ifs=[exp.If(this=is_null, true=lit("NULL")), exp.If(this=needs, true=quoted)], default=v)


def _array_agg(
    node: exp.Expression,
    x: Expr,
    distinct: bool,
    order_nodes: list[exp.Expression],
    cond: Expr | None,
    resolve: Resolver,
    column: Callable[[_Call], Expr],
) -> Expr:
    """``ARRAY_AGG(x [ORDER BY ...])`` as the text PostgreSQL writes for the array (ivm has no arrays): each
    value as array_out writes it (NULLs kept), joined by commas in braces, NULL over no rows. The values are in
    the order given, then in the order of ``x`` (PostgreSQL leaves that to how rows arrive)."""
    if x.type == NULL_TYPE:
        raise error_at(node, "ARRAY_AGG of NULL needs a type: CAST it")
    order = _ordering(order_nodes, resolve, x if distinct else None)
    if distinct and x.type.kind == "float":  # -0 and 0 are one value: 0
        x = Call("add", (x, Const(0.0, x.type)), x.type)
        order = [(x, d, f) for _, d, f in order]
    order.append((x, False, False))
    if x.type.kind == "bool":
        cases = [exp.If(this=exp.Is(this=_ELEMENT, expression=exp.Null()), true=exp.Literal.string("NULL"))]
        cases.append(exp.If(this=_ELEMENT, true=exp.Literal.string("t")))
        element: exp.Expression = exp.Case(ifs=cases, default=exp.Literal.string("f"))
        value = x
    elif x.type.numeric or x.type.kind == "date":  # never quoted
        element = exp.Coalesce(this=_ELEMENT, expressions=[exp.Literal.string("NULL")])
        value = as_text(x)
    else:
        element, value = _array_text(_ELEMENT), shown(as_text(x))
    e = translate_scalar(element, lambda n: value if n == _ELEMENT else resolve(n))
    if cond is not None:
        e = _when(cond, e)
    joined = column(_Call("string_agg", e, distinct, TEXT, ",", tuple(order)))
    return Call("concat", (Call("concat", (Const("{", TEXT), joined), TEXT), Const("}", TEXT)), TEXT)


def own_nested(node: exp.Expression) -> bool:
    """Whether ``node`` holds an aggregate call of its own query."""
    return any(a.parent_select is node.parent_select for a in node.find_all(*AGGREGATES))


def _when(cond: Expr, e: Expr) -> Expr:
    """``CASE WHEN cond THEN e END``."""
    t = e.type if e.type != NULL_TYPE else INT
    return Call("case", (cond, e, Const(None, t)), t)


def _string_agg(node: exp.Expression, e: Expr, distinct: bool, order_nodes, resolve: Resolver) -> _Call:
    sep_node = node.args.get("separator")
    if sep_node is None:
        raise error_at(node, "STRING_AGG needs a separator: STRING_AGG(value, separator)")
    if isinstance(sep_node, exp.Null):
        sep = ""  # PostgreSQL joins with nothing between
    elif isinstance(sep_node, exp.Literal) and sep_node.is_string:
        sep = sep_node.this
    else:
        raise error_at(
            sep_node, "STRING_AGG with a separator that is not a constant text is not supported", True
        )
    if e.type.kind != "text" and e.type != NULL_TYPE:
        raise error_at(node, f"STRING_AGG needs text, got {e.type} (CAST it to TEXT)")
    if e.type == NULL_TYPE:
        e = Const(None, TEXT)
    return _Call(
        "string_agg", e, distinct, TEXT, sep, tuple(_ordering(order_nodes, resolve, e if distinct else None))
    )


def _ordering(order_nodes, resolve: Resolver, distinct_arg: Expr | None) -> list[tuple[Expr, bool, bool]]:
    """An aggregate's ORDER BY as (expression, descending, NULLs first); with DISTINCT, each expression must
    be the aggregate's argument ``distinct_arg``, as PostgreSQL requires."""
    order = []
    for o in order_nodes:
        k = translate_scalar(o.this, resolve)
        desc = bool(o.args.get("desc"))
        first = o.args.get("nulls_first")
        if distinct_arg is not None and k != distinct_arg:
            raise error_at(
                o, "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list"
            )
        order.append((k, desc, desc if first is None else bool(first)))
    return order
