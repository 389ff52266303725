"""EXPLAIN: the dataflow compiling a view made, as an indented tree.

The compiler records a ``Step`` as it creates each part of the dataflow (see ``planner.compile``), so the tree
shows what was built, not what a plan walk supposes: which arrangements were built, reused from another
dataflow, or avoided by a reduction keeping running state, and every arrangement an outer join builds. This
module only words the steps: one line per plan node, constants as SQL literals. The text names columns, keys
and relations only (no object identities), so it is deterministic and serves as a golden file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sql.logical import (
    Aggregate,
    Call,
    Canon,
    ColRef,
    Const,
    Distinct,
    Expr,
    Filter,
    FixpointResult,
    Join,
    Negate,
    Plan,
    Positive,
    Project,
    RecRef,
    Scan,
    SemiJoin,
    Series,
    TopK,
    UnionAll,
    Values,
    Window,
)
from sql.types import INTERVAL, TEXT, sql_literal

__all__ = ["Step", "describe", "render"]


@dataclass(eq=False)
class Step:
    """One node of the tree: ``what`` was made (a plan node or an arrangement), ``how`` (built, reused, the
    aggregate's, running state, above...), and the steps feeding it."""

    what: str
    how: str = ""
    inputs: list[Step] = field(default_factory=list)


def render(step: Step) -> list[str]:
    """The lines of the tree under ``step`` (the root itself is not shown)."""
    out: list[str] = []

    def walk(s: Step, depth: int) -> None:
        out.append("  " * depth + s.what + (f" ({s.how})" if s.how else ""))
        for i in s.inputs:
            walk(i, depth + 1)

    for s in step.inputs:
        walk(s, 0)
    return out


def describe(plan: Plan) -> str:
    """One line naming what ``plan``'s node computes."""
    if isinstance(plan, Scan):
        return f"Scan {plan.table}"
    if isinstance(plan, Filter):
        return f"Filter {_expr(plan.predicate, plan.input)}"
    if isinstance(plan, Project):
        items = ", ".join(
            c.name
            if isinstance(e, ColRef) and plan.input.columns[e.index].name == c.name
            else f"{_expr(e, plan.input)} AS {c.name}"
            for e, c in zip(plan.exprs, plan.columns, strict=True)
        )
        return f"Project {items or '(no columns)'}"
    if isinstance(plan, Join):
        eq = " IS NOT DISTINCT FROM " if plan.nulls_match else " = "
        on = ", ".join(
            f"{plan.left.columns[a].name}{eq}{plan.right.columns[b].name}"
            for a, b in zip(plan.left_keys, plan.right_keys, strict=True)
        )
        return f"Join {plan.kind}" + (f" on {on}" if on else " (cross)")
    if isinstance(plan, SemiJoin):
        return f"{'AntiJoin' if plan.anti else 'SemiJoin'} on all columns"
    if isinstance(plan, Aggregate):
        args = ["*" if a.arg is None else plan.input.columns[a.arg].name for a in plan.aggs]
        args = [arg + _agg_order(plan, a) for a, arg in zip(plan.aggs, args, strict=True)]
        aggs = ", ".join(
            f"{a.func}({'DISTINCT ' if a.distinct else ''}{arg})"
            for a, arg in zip(plan.aggs, args, strict=True)
        )
        group = [plan.input.columns[i].name for i in plan.group]
        return f"Aggregate group=[{', '.join(group)}] aggs=[{aggs}]"
    if isinstance(plan, Series):
        args = ", ".join(_expr(e, plan.input) for e in (plan.start, plan.stop, plan.step))
        n = len(plan.input.columns)
        names = ", ".join(c.name for c in plan.columns[n:])
        extra = (" with ordinality" if plan.ordinality else "") + (" (left, padded)" if plan.outer else "")
        return f"Series generate_series({args}) AS {names}{extra}"
    if isinstance(plan, Distinct):
        return "Distinct"
    if isinstance(plan, UnionAll):
        return "UnionAll"
    if isinstance(plan, Canon):
        return f"Canonical text [{', '.join(plan.columns[i].name for i in plan.positions)}]"
    if isinstance(plan, (Negate, Positive)):
        return type(plan).__name__
    if isinstance(plan, TopK):
        nulls = {(False, True): " NULLS FIRST", (True, False): " NULLS LAST"}
        order = ", ".join(
            plan.columns[i].name + (" DESC" if d else "") + nulls.get((d, f), "") for i, d, f in plan.order
        )
        per = f" per=[{', '.join(plan.columns[i].name for i in plan.group)}]" if plan.group else ""
        return f"TopK{per} order=[{order}] limit={plan.limit} offset={plan.offset}"
    if isinstance(plan, Window):
        return _window(plan)
    if isinstance(plan, RecRef):
        return f"Recursive {plan.name}"
    if isinstance(plan, FixpointResult):
        fx = plan.fixpoint
        limit = f"{'return' if fx.on_limit == 'return' else 'error'} at {fx.limit} rounds"
        return f"Fixpoint {fx.names[plan.index]} ({limit})"
    if isinstance(plan, Values):
        rows = "; ".join(
            ", ".join(sql_literal(v, c.type) for v, c in zip(r, plan.columns, strict=True))
            for r in plan.rows[:3]
        )
        more = f"; ... {len(plan.rows)} rows" if len(plan.rows) > 3 else ""
        return f"Values ({rows}{more})" if plan.rows else "Values (no rows)"
    return type(plan).__name__


def _window(plan: Window) -> str:
    cols = plan.input.columns
    nulls = {(False, True): " NULLS FIRST", (True, False): " NULLS LAST"}
    order = ", ".join(cols[i].name + (" DESC" if d else "") + nulls.get((d, f), "") for i, d, f in plan.order)
    calls = []
    for c, out in zip(plan.calls, plan.columns[len(cols) :], strict=True):
        args = [] if c.arg is None else [cols[c.arg].name]
        if c.func == "count_star":
            args = ["*"]
        if c.param is not None:
            args.append(str(c.param))
        if c.default is not None:
            args.append(sql_literal(c.default, c.type))
        mode, start, end, exclude = c.frame
        frame = f" {mode} {_bound(start)} to {_bound(end)}" if c.func not in _UNFRAMED else ""
        if exclude is not None and c.func not in _UNFRAMED:
            frame += f" exclude {exclude}"
        name = "count" if c.func == "count_star" else c.func
        calls.append(f"{name}({', '.join(args)}){frame} AS {out.name}")
    part = ", ".join(cols[i].name for i in plan.partition)
    return f"Window partition=[{part}] order=[{order}] calls=[{', '.join(calls)}]"


_UNFRAMED = frozenset({"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead"})


def _bound(b: tuple) -> str:
    kind, offset = b[:2]
    if kind in ("unbounded", "current"):
        return kind
    if len(b) > 2:  # an interval of months and microseconds
        return f"{b[2]} months {offset} us {kind}"
    return f"{offset} {kind}"


def arrangement(plan: Plan, key: tuple[int, ...]) -> str:
    """The line of an arrangement of ``plan`` by the columns at ``key`` (all rows under one key for the
    constant group of a global aggregate or top-k)."""
    names = [plan.columns[i].name for i in key if plan.columns[i].name != "?group"]
    return f"ArrangeBy key=[{', '.join(names)}]"


def _expr(e: Expr, src: Plan) -> str:
    if isinstance(e, ColRef):
        return src.columns[e.index].name
    if isinstance(e, Const):
        return sql_literal(e.value, e.type)
    if isinstance(e, Call):
        args = [_expr(a, src) for a in e.args]
        if e.op == "like":
            pattern, what, escape, *_ = e.param
            escaped = f" ESCAPE {sql_literal(escape, TEXT)}" if escape != "\\" else ""
            return f"{args[0]} {what} {sql_literal(pattern, TEXT)}{escaped}"
        if e.op == "regex":
            pattern, what, *_ = e.param
            return f"{args[0]} {what} {sql_literal(pattern, TEXT)}"
        if e.op in ("to_type", "to_text", "to_int", "round_decimal"):
            return f"CAST({args[0]} AS {e.type})"
        if e.op == "extract":
            return f"EXTRACT({str(e.param).upper()} FROM {args[0]})"
        if e.op in ("to_char", "to_date", "to_timestamp"):
            return f"{e.op}({args[0]}, {sql_literal(e.param[0], TEXT)})"
        if e.op == "epoch_to_ts":
            return f"to_timestamp({args[0]})"
        if e.op == "ts_add":
            months, micros = e.param
            return f"{args[0]} + {sql_literal((months, 0, micros), INTERVAL)}"
        if e.param is not None:
            args.append(str(e.param))
        return f"{e.op}({', '.join(args)})"
    return "?"


def _agg_order(plan: Aggregate, a) -> str:
    """STRING_AGG's separator and ORDER BY, as written."""
    if a.func != "string_agg":
        return ""
    sep, order = a.param
    keys = ", ".join(
        plan.input.columns[p].name + (" DESC" if desc else "") + (" NULLS FIRST" if first else " NULLS LAST")
        for p, desc, first in order
    )
    quoted = "'" + sep.replace("'", "''") + "'"
    return f", {quoted}" + (f" ORDER BY {keys}" if keys else "")
