"""What PostgreSQL lets a query write in several ways, written one way as it is parsed (before the allow-list
check), so that the translator knows one form:

- a named window (``WINDOW w AS (...)``, ``OVER w``, ``OVER (w ORDER BY ...)``) is written out in each OVER
  clause, with PostgreSQL's rules for what a window may copy of another;
- ``LIMIT ALL``, ``LIMIT NULL`` and ``OFFSET NULL`` are no LIMIT or OFFSET;
- ``FROM ONLY t`` is ``FROM t`` (ivm has no table inheritance);
- ``x BETWEEN SYMMETRIC a AND b`` is ``x BETWEEN a AND b OR x BETWEEN b AND a``.
"""

from __future__ import annotations

from sqlglot import exp

from sql.errors import error_at

__all__ = ["one_form"]


def one_form(tree: exp.Expression) -> exp.Expression:
    """``tree`` with the shorthands above written out."""
    for select in list(tree.find_all(exp.Select)):
        _named_windows(select)
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
    PARTITION BY always, its ORDER BY unless it has none, and its frame only when ``window`` adds nothing."""
    alias = window.args["alias"]
    name = alias.name
    base = named.get(name)
    if base is None or name in seen:
        raise error_at(alias, f'window "{name}" does not exist')
    if base.args.get("alias") is not None:
        _copy_into(base, named, seen | {name})
    window.set("alias", None)
    own = {k: window.args.get(k) for k in ("partition_by", "order", "spec")}
    if not any(own.values()):  # OVER w: the window as it is
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
