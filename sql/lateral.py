"""LATERAL subqueries in FROM as joins with derived tables that read nothing of the items before them.

``FROM t, LATERAL (q) AS s`` evaluates q once for each row of the items before s. As for a subquery used as a
value (``sql.decorrelate``, after Neumann and Kemper), q is instead evaluated once for each distinct value of
the columns F it reads of those items: the domain D, ``SELECT DISTINCT F`` over them (and the conditions of
WHERE that read them alone). The rewritten q puts D's columns before its own and is joined to the rows on
F = D, NULL meeting NULL. Inside q:

- the FROM clause gains D (cross-joined first, or last when q holds a RIGHT or FULL join), and the reads of
  F become reads of D; a subquery in that FROM clause which read F becomes LATERAL in turn;
- GROUP BY, DISTINCT ON and every window's PARTITION BY gain D's columns, so each domain value keeps its own
  groups, rows and partitions; an aggregate without GROUP BY is grouped by them, and a domain value without
  rows gets its aggregates' values over no rows, as q would give;
- ORDER BY with LIMIT or OFFSET keeps the rows each domain value ranks within them (ROW_NUMBER over D's
  partitions); ORDER BY alone orders nothing in FROM and goes;
- each branch of a set operation is rewritten so.

The join's own ON condition filters q's rows (reading D where it reads the items before), so that a LEFT JOIN
LATERAL pads an outer row that keeps none. A LATERAL subquery that reads nothing before it is a plain derived
table. What this does not cover is refused by name and position.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

from sqlglot import exp

from sql.errors import error_at
from sql.hoist import over_no_rows
from sql.scalar import AGGREGATES, and_parts
from sql.scoping import binding, named, sources

__all__ = ["fresh_numbers", "join_domain", "laterals_as_joins"]

_NUMBERED = re.compile(r"_[a-z]*(\d+)(?:_\d+)?$")


def laterals_as_joins(tree: exp.Expression) -> exp.Expression:
    """``tree`` (qualified: every column names its relation, ``*`` expanded) with every LATERAL subquery
    made a derived table joined to the items before it on the values it reads of them."""
    names = fresh_numbers(tree)
    while True:
        lateral = tree.find(exp.Lateral)  # the outermost first: its rewrite makes the inner ones read D
        if lateral is None:
            return tree
        _rewrite(lateral, next(names))


def fresh_numbers(tree: exp.Expression) -> Iterator[int]:
    """Numbers for the names of derived tables and columns a rewrite adds to ``tree``, beyond those of the
    names it holds already (an earlier rewrite's), so that none is taken twice."""
    taken = [int(m.group(1)) for i in tree.find_all(exp.Identifier) if (m := _NUMBERED.match(i.name))]
    return itertools.count(max(taken, default=-1) + 1)


def _rewrite(lateral: exp.Lateral, n: int) -> None:
    join = lateral.parent
    if not isinstance(lateral.this, exp.Subquery):
        what = lateral.this.sql(dialect="postgres").split("(", 1)[0]
        raise error_at(lateral, f"LATERAL over a function ({what}) is not supported", unsupported=True)
    select = join.parent if isinstance(join, (exp.Join, exp.From)) else None
    if not isinstance(select, exp.Select):
        raise error_at(lateral, "LATERAL inside a parenthesized join is not supported", unsupported=True)
    alias = lateral.args.get("alias")
    name = alias.name if alias is not None else f"_lateral{n}"
    query = _unwrap(lateral.this)
    joins = select.args.get("joins") or []
    at = joins.index(join) if isinstance(join, exp.Join) else -1
    from_ = select.args.get("from_") or select.args.get("from")
    before = [from_.this, *(j.this for j in joins[:at])] if at >= 0 else []
    earlier = {item.alias_or_name for item in before}
    free = _reads(query, select, name)
    for col in free.values():
        if col.table not in earlier:
            raise error_at(col, f'invalid reference to FROM-clause entry for table "{col.table}"')
    _rename_outputs(query, alias)
    if not free:  # reads nothing before it: a derived table
        lateral.replace(named(query, name))
        return
    side = (join.side or "").upper()
    if side in ("RIGHT", "FULL"):
        col = next(iter(free.values()))
        raise error_at(
            col,
            f'invalid reference to FROM-clause entry for table "{col.table}": '
            "a LATERAL subquery may read the items before it in an INNER or LEFT join only",
        )
    for later in joins[at + 1 :]:
        if _is_comma(later):
            break
        if _is_comma(join) and (later.side or "").upper() in ("RIGHT", "FULL"):
            raise error_at(later, "a LATERAL subquery followed by a RIGHT or FULL join is not supported", True)
    on = join.args.get("on")
    condition = None if on is None or on == exp.true() else on
    if condition is not None:  # the ON condition, evaluated inside, reads what it reads of the items before too
        for key, col in _reads(condition, select, name).items():
            if col.table not in earlier:
                raise error_at(col, f'invalid reference to FROM-clause entry for table "{col.table}"')
            free.setdefault(key, col)
    keys = list(free)
    domain = _domain(select, before, keys, n)
    dom = f"_ldom{n}"
    index = {key: i for i, key in enumerate(keys)}
    for col in [c for c in query.find_all(exp.Column) if _bound(c, select, name)]:
        col.replace(_placed(exp.column(_key(n, index[(col.table, col.name)]), dom), col))
    outputs = query.named_selects
    rewritten = _dependent(query, domain, dom, len(keys), n)
    if condition is not None:
        rewritten = _filtered(rewritten, condition, select, name, index, outputs, n)
    join.set("this", named(rewritten, name))
    match = [
        exp.NullSafeEQ(this=exp.column(c, t), expression=exp.column(_key(n, i), name))
        for i, (t, c) in enumerate(keys)
    ]
    join.set("on", exp.and_(*match))
    join.set("kind", None)
    join.set("side", "LEFT" if side == "LEFT" else None)


def _placed(new: exp.Column, old: exp.Column) -> exp.Column:
    """``new``, which takes ``old``'s place, at ``old``'s position in the statement (for errors)."""
    new.this.meta.update({k: v for k, v in old.this.meta.items() if k in ("line", "col", "start", "end")})
    return new


def _unwrap(node: exp.Expression) -> exp.Expression:
    while isinstance(node, (exp.Subquery, exp.Paren)):
        node = node.this
    return node


def _is_comma(join: exp.Join) -> bool:
    return not join.side and not join.kind and join.args.get("on") is None and not join.args.get("using")


def _bound(col: exp.Column, select: exp.Select, own: str) -> bool:
    """Whether ``col`` reads a relation of ``select``'s FROM clause other than ``own``."""
    return col.table != own and binding(col) is select


def _reads(node: exp.Expression, select: exp.Select, own: str) -> dict[tuple[str, str], exp.Column]:
    """The columns of ``select``'s relations (but ``own``) that ``node`` reads, in the order first read."""
    out: dict[tuple[str, str], exp.Column] = {}
    for col in node.find_all(exp.Column):
        if _bound(col, select, own):
            out.setdefault((col.table, col.name), col)
    return out


def _rename_outputs(query: exp.Expression, alias: exp.TableAlias | None) -> None:
    """Name ``query``'s columns as the alias's column list does (its first ones; the others keep theirs), and
    drop the list: the rewritten query adds columns of its own."""
    if alias is None or not alias.columns:
        return
    names = [c.name for c in alias.columns]
    for branch in _branches(query):
        for item, new in zip(list(branch.expressions), names, strict=False):
            item.replace(exp.alias_(item.unalias().copy(), new))
    alias.set("columns", None)


def _branches(query: exp.Expression) -> list[exp.Select]:
    if isinstance(query, exp.SetOperation):
        return [*_branches(_unwrap(query.this)), *_branches(_unwrap(query.expression))]
    return [query] if isinstance(query, exp.Select) else []


def _key(n: int, i: int) -> str:
    """The name of the ``i``-th domain column of the ``n``-th LATERAL subquery rewritten."""
    return f"_l{n}_{i}"


def _domain(
    select: exp.Select, before: list[exp.Expression], keys: list[tuple[str, str]], n: int
) -> exp.Select:
    """``SELECT DISTINCT`` the columns ``keys`` over the FROM items ``before`` and the conditions of
    ``select``'s WHERE that read those alone and hold no subquery."""
    out = exp.select(*(exp.alias_(exp.column(c, t), _key(n, i)) for i, (t, c) in enumerate(keys)))
    out.set("from_", exp.From(this=before[0].copy()))
    joins = select.args.get("joins") or []
    for j in joins[: len(before) - 1]:
        out.append("joins", j.copy())
    names = {item.alias_or_name for item in before}
    where = select.args.get("where")
    plain = [
        c.copy()
        for c in (and_parts(where.this) if where is not None else [])
        if {col.table for col in c.find_all(exp.Column)} <= names
        and not c.find(exp.Subquery, exp.Exists, exp.Select)
    ]
    if plain:
        out.set("where", exp.Where(this=exp.and_(*plain)))
    out.set("distinct", exp.Distinct())
    return out


def _dependent(query: exp.Expression, domain: exp.Select, dom: str, width: int, n: int) -> exp.Expression:
    """``query`` (reading the domain's columns as ``dom._d<i>``) evaluated for every domain value at once, with
    the domain's ``width`` columns ``_d<i>`` before its own."""
    if isinstance(query, exp.SetOperation):
        if query.args.get("limit") is not None or query.args.get("offset") is not None:
            raise error_at(query, "a LATERAL set operation with LIMIT or OFFSET is not supported", True)
        query.set("order", None)
        for arg in ("this", "expression"):
            query.set(arg, _dependent(_unwrap(query.args[arg]), domain.copy(), dom, width, n))
        return query
    if not isinstance(query, exp.Select):
        raise error_at(query, "this LATERAL subquery is not supported", unsupported=True)
    if query.args.get("with_") is not None:
        raise error_at(query.args["with_"], "WITH inside a LATERAL subquery is not supported", unsupported=True)
    join_domain(query, named(domain, dom))
    ds = [exp.column(_key(n, i), dom) for i in range(width)]
    for window in query.find_all(exp.Window):
        if window.parent_select is query:
            window.set("partition_by", [*(d.copy() for d in ds), *(window.args.get("partition_by") or [])])
    distinct = query.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        on = distinct.args["on"]
        keys = on.expressions if isinstance(on, exp.Tuple) else [on]
        distinct.set("on", exp.Tuple(expressions=[*(d.copy() for d in ds), *(k.copy() for k in keys)]))
    columns = [exp.alias_(d.copy(), _key(n, i)) for i, d in enumerate(ds)]
    if query.args.get("group") is None and (_aggregated(query) or query.args.get("having") is not None):
        return _per_value(query, domain, dom, ds, columns, n)
    group = query.args.get("group")
    sets = (
        [e for e in group.expressions if isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets))]
        if group
        else []
    )
    if sets:
        raise error_at(sets[0], "GROUPING SETS, ROLLUP or CUBE in a LATERAL subquery is not supported", True)
    if group is not None:
        group.set("expressions", [*(d.copy() for d in ds), *group.expressions])
    limit, offset = _count(query, "limit"), _count(query, "offset")
    if limit is None and offset is None:
        query.set("order", None)
        query.set("expressions", [*columns, *query.expressions])
        return query
    return _first_rows(query, columns, width, limit, offset or 0, n)


def join_domain(query: exp.Select, domain: exp.Subquery) -> None:
    """Join ``domain`` (a derived table of the values of outer columns, which ``query`` now reads) into
    ``query``'s FROM clause: first, or last after a RIGHT or FULL join (which would pad it with NULLs); a
    derived table there that reads it becomes LATERAL."""
    dom = domain.alias_or_name
    from_ = query.args.get("from_") or query.args.get("from")
    if from_ is None:
        query.set("from_", exp.From(this=domain))
        return
    joins = query.args.get("joins") or []
    items = [from_, *joins]
    if any((j.side or "").upper() in ("RIGHT", "FULL") for j in joins):
        for item in items:
            if _reads_domain(item, dom):
                what = "a subquery with a RIGHT or FULL join that reads the outer query in its FROM clause"
                raise error_at(item, f"{what} is not supported", unsupported=True)
        query.append("joins", exp.Join(this=domain, kind="CROSS"))
        return
    for item in items:
        if isinstance(item.this, exp.Subquery) and _reads_domain(item.this, dom):
            sub = item.this
            item.set("this", exp.Lateral(this=exp.Subquery(this=sub.this), alias=sub.args.get("alias")))
    query.set("from_", exp.From(this=domain))
    query.set("joins", [exp.Join(this=from_.this, kind="CROSS"), *joins])


def _reads_domain(item: exp.Expression, dom: str) -> bool:
    return any(c.table == dom for c in item.find_all(exp.Column))


def _aggregated(query: exp.Select) -> bool:
    """Whether ``query``'s list or HAVING calls an aggregate of its own (not a window function)."""
    for node in [*query.expressions, query.args.get("having")]:
        for a in node.find_all(*AGGREGATES) if node is not None else []:
            if a.parent_select is query and not isinstance(a.parent, exp.Window):
                return True
    return False


def _count(query: exp.Select, arg: str) -> int | None:
    clause = query.args.get(arg)
    if clause is None:
        return None
    value = clause.args.get("count") if isinstance(clause, exp.Fetch) else clause.expression
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    word = "LIMIT" if arg == "limit" else "OFFSET"
    raise error_at(value or clause, f"a {word} in a LATERAL subquery must be a number", unsupported=True)


def _per_value(query: exp.Select, domain, dom: str, ds, columns, n: int) -> exp.Select:
    """An aggregate without GROUP BY: one row for each domain value, its aggregates' values over no rows for
    a value that has none (or no row, where HAVING does not hold over no rows)."""
    if _count(query, "limit") == 0 or _count(query, "offset"):
        raise error_at(query, "an aggregate LATERAL subquery with LIMIT 0 or OFFSET is not supported", True)
    for arg in ("limit", "offset", "order"):
        query.set(arg, None)
    query.set("group", exp.Group(expressions=[d.copy() for d in ds]))
    values = [(item.alias_or_name, item.unalias()) for item in query.expressions]
    having = query.args.get("having")
    query.set("having", None)
    query.set("expressions", [*columns, *(item.copy() for item in query.expressions)])
    query.append("expressions", exp.alias_(exp.Literal.number(1), "_m"))
    if having is not None:  # whether it holds, kept apart from whether the value has rows
        query.append("expressions", exp.alias_(having.this.copy(), "_h"))
    grouped = f"_lgrp{n}"
    absent = exp.Is(this=exp.column("_m", grouped), expression=exp.Null())

    def value(default: exp.Expression, found: exp.Expression) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=absent.copy(), true=default)], default=found)

    out = exp.select(
        *(d.copy() for d in columns),
        *(exp.alias_(value(over_no_rows(v), exp.column(a, grouped)), a) for a, v in values),
    )
    out.set("from_", exp.From(this=named(domain.copy(), dom)))
    on = exp.and_(
        *(exp.NullSafeEQ(this=d.copy(), expression=exp.column(_key(n, i), grouped)) for i, d in enumerate(ds))
    )
    out.append("joins", exp.Join(this=named(query, grouped), side="LEFT", on=on))
    if having is not None:
        out.set("where", exp.Where(this=value(over_no_rows(having.this), exp.column("_h", grouped))))
    return out


def _first_rows(query: exp.Select, columns, width: int, limit: int | None, offset: int, n: int) -> exp.Select:
    """The rows ranked ``offset + 1`` to ``offset + limit`` in ORDER BY, for each domain value."""
    order = query.args.get("order")
    for arg in ("limit", "offset", "order"):
        query.set(arg, None)
    outputs = {item.alias_or_name: item.unalias() for item in query.expressions}
    listed = [item.unalias() for item in query.expressions]
    keys: list[exp.Ordered] = []
    hidden = []
    for j, o in enumerate(order.expressions if order is not None else []):
        e = o.this
        if isinstance(e, exp.Column) and not e.table and e.name in outputs:
            name = e.name
        elif isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            at = int(e.this) - 1
            if not 0 <= at < len(listed):
                raise error_at(e, f"ORDER BY position {at + 1} is not in select list")
            name = query.expressions[at].alias_or_name
        else:
            same = [item.alias_or_name for item in query.expressions if item.unalias() == e]
            if same:
                name = same[0]
            elif query.args.get("distinct") is not None and query.args["distinct"].args.get("on") is None:
                raise error_at(e, "for SELECT DISTINCT, ORDER BY expressions must appear in select list")
            else:
                name = f"_o{j}"
                hidden.append(exp.alias_(e.copy(), name))
        key = o.copy()
        key.set("this", exp.column(name, f"_lrows{n}"))
        keys.append(key)
    shown = [item.alias_or_name for item in query.expressions]
    query.set("expressions", [*columns, *query.expressions, *hidden])
    rows = f"_lrows{n}"
    ranked = exp.select(
        *(exp.column(_key(n, i), rows) for i in range(width)),
        *(exp.column(c, rows) for c in shown),
        exp.alias_(
            exp.Window(
                this=exp.RowNumber(),
                partition_by=[exp.column(_key(n, i), rows) for i in range(width)],
                order=exp.Order(expressions=keys) if keys else None,
            ),
            "_rn",
        ),
    )
    ranked.set("from_", exp.From(this=named(query, rows)))
    kept = f"_lkept{n}"
    rn = exp.column("_rn", kept)
    out = exp.select(
        *(exp.column(_key(n, i), kept) for i in range(width)), *(exp.column(c, kept) for c in shown)
    )
    out.set("from_", exp.From(this=named(ranked, kept)))
    conds = []
    if offset:
        conds.append(exp.GT(this=rn.copy(), expression=exp.Literal.number(offset)))
    if limit is not None:
        conds.append(exp.LTE(this=rn.copy(), expression=exp.Literal.number(offset + limit)))
    out.set("where", exp.Where(this=exp.and_(*conds)))
    return out


def _filtered(query, condition, select, name: str, index, outputs: list[str], n: int) -> exp.Select:
    """``query``'s rows (the domain's columns, then ``outputs``) where the lateral join's ON condition holds,
    read with the subquery's columns and the domain's values."""
    rows = f"_lon{n}"
    cond = condition.copy()
    for col in list(cond.find_all(exp.Column)):
        if col.table == name:
            col.set("table", exp.to_identifier(rows))
        elif (col.table, col.name) in index and _bound_copy(col, select):
            col.replace(exp.column(_key(n, index[(col.table, col.name)]), rows))
    out = exp.select(
        *(exp.column(_key(n, i), rows) for i in range(len(index))), *(exp.column(c, rows) for c in outputs)
    )
    out.set("from_", exp.From(this=named(query, rows)))
    out.set("where", exp.Where(this=cond))
    return out


def _bound_copy(col: exp.Column, select: exp.Select) -> bool:
    """Whether ``col``, a column of a copy of a condition of ``select``, reads a relation of ``select`` (not
    one of a subquery inside the condition)."""
    return binding(col) is None and col.table in sources(select)
