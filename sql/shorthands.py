"""What PostgreSQL lets a query write in several ways, written one way as it is parsed (before the allow-list
check), so that the translator knows one form:

- a named window (``WINDOW w AS (...)``, ``OVER w``, ``OVER (w ORDER BY ...)``) is written out in each OVER
  clause, with PostgreSQL's rules for what a window may copy of another;
- ``LIMIT ALL``, ``LIMIT NULL`` and ``OFFSET NULL`` are no LIMIT or OFFSET;
- ``FROM ONLY t`` is ``FROM t`` (ivm has no table inheritance);
- ``x BETWEEN SYMMETRIC a AND b`` is ``x BETWEEN a AND b OR x BETWEEN b AND a``;
- a comparison of rows (``(a, b) = (1, 2)``, ``ROW(a, b) < ROW(c, d)``, ``(a, b) IN ((1, 2), (3, 4))``) is
  one of their members, as SQL defines it: ``=`` all members equal, ``<>`` not that, ``<`` ordered by the
  first pair that differs; a NULL member makes the answer NULL where it decides it;
- ``(a, b) [NOT] IN (SELECT x, y ...)`` is TRUE when some row equals, NULL when none does but some could (a
  NULL member), FALSE otherwise: EXISTS of the equal rows, and where its answer can be NULL and that matters
  (not a condition of WHERE or ON), EXISTS of the rows with no member known to differ.
"""

from __future__ import annotations

from sqlglot import exp

from sql.errors import error_at

__all__ = ["one_form"]


def one_form(tree: exp.Expression) -> exp.Expression:
    """``tree`` with the shorthands above written out."""
    for select in list(tree.find_all(exp.Select)):
        _named_windows(select)
    for node in list(tree.find_all(exp.Anonymous)):
        if node.name.upper() == "ROW":
            node.replace(exp.Tuple(expressions=node.expressions))
    for node in reversed(list(tree.find_all(*_ORDERS, exp.In))):  # the inner ones first
        if isinstance(node, exp.In) and isinstance(node.this, exp.Tuple):
            target, written = _row_in(node)
            target.replace(written)
        elif _compares_rows(node):
            node.replace(
                exp.Paren(
                    this=_row_compare(node, type(node), node.this.expressions, node.expression.expressions)
                )
            )
    for node in list(tree.find_all(exp.Limit, exp.Offset, exp.Table, exp.Between)):
        if isinstance(node, (exp.Limit, exp.Offset)):
            value = node.expression
            if isinstance(value, exp.Null) or (isinstance(value, exp.Var) and value.name.upper() == "ALL"):
                node.pop()
        elif isinstance(node, exp.Table):
            node.set("only", None)
        elif node.args.get("symmetric"):
            x, low, high = node.this, node.args["low"], node.args["high"]
            node.set("symmetric", None)
            swapped = exp.Between(this=x.copy(), low=high.copy(), high=low.copy())
            node.replace(exp.Paren(this=exp.or_(node.copy(), swapped)))
    return tree


def _named_windows(select: exp.Select) -> None:
    """Write each window of ``select`` that names one of its WINDOW clause out in full, and drop the clause."""
    named = {w.name: w for w in select.args.get("windows") or []}
    for w in named.values():
        if w.args.get("alias") is not None:
            _copy_into(w, named, set())
    for w in select.find_all(exp.Window):
        if w.parent_select is select and w.args.get("alias") is not None and w.arg_key != "windows":
            _copy_into(w, named, set())
    select.set("windows", None)


def _copy_into(window: exp.Window, named: dict[str, exp.Window], seen: set[str]) -> None:
    """Fill ``window`` (which names another) in from the window it names, as PostgreSQL copies one: its
    PARTITION BY always, its ORDER BY unless it has none, and its frame only when ``window`` is the name alone
    (``OVER w``; ``OVER (w)`` copies a window without a frame, as PostgreSQL)."""
    alias = window.args["alias"]
    name = alias.name
    base = named.get(name)
    if base is None or name in seen:
        raise error_at(alias, f'window "{name}" does not exist')
    if base.args.get("alias") is not None:
        _copy_into(base, named, seen | {name})
    window.set("alias", None)
    own = {k: window.args.get(k) for k in ("partition_by", "order", "spec")}
    if not any(own.values()) and "partition_by" not in window.args:  # OVER w (not OVER (w)): as it is
        window.set("partition_by", [p.copy() for p in base.args.get("partition_by") or []] or None)
        for k in ("order", "spec"):
            if base.args.get(k) is not None:
                window.set(k, base.args[k].copy())
        return
    if own["partition_by"]:
        raise error_at(window, f'cannot override PARTITION BY clause of window "{name}"')
    if own["order"] is not None and base.args.get("order") is not None:
        raise error_at(window, f'cannot override ORDER BY clause of window "{name}"')
    if base.args.get("spec") is not None:
        raise error_at(window, f'cannot copy window "{name}" because it has a frame clause')
    window.set("partition_by", [p.copy() for p in base.args.get("partition_by") or []] or None)
    if own["order"] is None and base.args.get("order") is not None:
        window.set("order", base.args["order"].copy())


_ORDERS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _compares_rows(node: exp.Expression) -> bool:
    """Whether ``node`` compares two rows (not the assignment ``SET (a, b) = (x, y)``, written alike)."""
    if isinstance(node.parent, (exp.Update, exp.OnConflict)) and node.arg_key == "expressions":
        return False
    return (
        isinstance(node, _ORDERS)
        and isinstance(node.this, exp.Tuple)
        and isinstance(node.expression, exp.Tuple)
    )


def _row_compare(node: exp.Expression, op: type, left: list, right: list) -> exp.Expression:
    """``(left) op (right)`` of rows, member by member."""
    if len(left) != len(right):
        raise error_at(node, "unequal number of entries in row expressions")
    pairs = [(a.copy(), b.copy()) for a, b in zip(left, right, strict=True)]
    if op is exp.EQ:
        return exp.and_(*(exp.EQ(this=a, expression=b) for a, b in pairs))
    if op is exp.NEQ:
        return exp.Not(this=exp.Paren(this=exp.and_(*(exp.EQ(this=a, expression=b) for a, b in pairs))))
    strict = {exp.LTE: exp.LT, exp.GTE: exp.GT}.get(op, op)
    (a, b), rest = pairs[0], pairs[1:]
    if not rest:
        return op(this=a, expression=b)
    later = _row_compare(node, op, [x for x, _ in rest], [y for _, y in rest])
    decided = exp.and_(exp.EQ(this=a.copy(), expression=b.copy()), exp.Paren(this=later))
    return exp.or_(strict(this=a, expression=b), exp.Paren(this=decided))


def _row_in(node: exp.In) -> tuple[exp.Expression, exp.Expression]:
    """``(a, b) IN (...)`` of a list of rows or of a subquery, member by member: the node to replace (the IN, or
    the NOT around it) and what replaces it."""
    members = node.this.expressions
    query = node.args.get("query")
    if query is None:
        rows = [e.expressions if isinstance(e, exp.Tuple) else [e] for e in node.expressions]
        return node, exp.Paren(
            this=exp.or_(*(exp.Paren(this=_row_compare(node, exp.EQ, members, r)) for r in rows))
        )
    inner = query.this if isinstance(query, exp.Subquery) else query
    names = [f"_r{i}" for i in range(len(members))]
    listed = isinstance(inner, exp.Select) and not any(isinstance(e, exp.Star) for e in inner.expressions)
    if listed and len(inner.expressions) != len(members):
        what = "many" if len(inner.expressions) > len(members) else "few"
        raise error_at(node, f"subquery has too {what} columns")

    def rows_where(cond) -> exp.Exists:
        alias = exp.TableAlias(this=exp.to_identifier("_row"), columns=[exp.to_identifier(n) for n in names])
        sub = exp.Subquery(this=inner.copy(), alias=alias)
        conds = [cond(exp.column(n, "_row"), m.copy()) for n, m in zip(names, members, strict=True)]
        return exp.Exists(
            this=exp.select(exp.Literal.number(1)).from_(sub, copy=False).where(*conds, copy=False)
        )

    equal = rows_where(lambda x, m: exp.EQ(this=x, expression=m))
    if _condition(node):
        return node, equal
    negated = isinstance(node.parent, exp.Not)
    maybe = rows_where(
        lambda x, m: exp.Not(
            this=exp.Is(this=exp.Paren(this=exp.EQ(this=x, expression=m)), expression=exp.false())
        )
    )
    if negated and _condition(node.parent):  # NOT IN holds where no row could be equal
        return node.parent, exp.Not(this=maybe)
    null = exp.Cast(this=exp.Null(), to=exp.DataType.build("BOOLEAN"))
    value = exp.Case(
        ifs=[exp.If(this=equal, true=exp.true()), exp.If(this=maybe, true=null)], default=exp.false()
    )
    return node, exp.Paren(this=value)


def _condition(node: exp.Expression) -> bool:
    """Whether ``node`` is a conjunct of a WHERE or a join's ON (where NULL is FALSE), not negated."""
    at = node
    while isinstance(at.parent, (exp.And, exp.Paren)):
        at = at.parent
    return isinstance(at.parent, exp.Where) or (isinstance(at.parent, exp.Join) and at.arg_key == "on")
