"""Window functions (``f(...) OVER (PARTITION BY ... ORDER BY ...)``) of a SELECT list as ``Window`` plans.

Windows apply after FROM, WHERE, GROUP BY and HAVING, and before DISTINCT, ORDER BY and LIMIT, as in SQL. The
rows they read (the FROM clause's, or the groups') get the expressions the windows partition, order and
compute on as extra columns; then each distinct (PARTITION BY, ORDER BY) gets one ``Window`` node, which
appends one column per function, and the SELECT list reads those columns where it names the functions.

Frames are ROWS, RANGE (offsets of numbers over numbers, of intervals over dates, timestamps and intervals) or
GROUPS, with EXCLUDE; named windows are written out in each OVER clause when parsed (``sql.shorthands``).
What PostgreSQL has and this does not implement is refused by name and position: IGNORE NULLS, FILTER,
DISTINCT inside a window function, offsets and NTILE counts that are not constants, and window functions in a
recursive query or outside the SELECT list.
"""

from __future__ import annotations

import decimal
import math

from sqlglot import exp

from sql.datetimes import interval_from_text
from sql.errors import error_at, position
from sql.logical import ColRef, Column, Const, Expr, Plan, Project, Window, WindowCall
from sql.scalar import AGGREGATES, Resolver, aggregate_type, coerce, translate_scalar
from sql.types import DAY_MICROS, FLOAT, INT, INTEGER, interval_value

__all__ = ["window_nodes", "is_window_function", "translate_windows", "check_no_windows", "check_placement"]

_RANKING = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
    exp.PercentRank: "percent_rank",
    exp.CumeDist: "cume_dist",
}
_VALUE = {exp.FirstValue: "first_value", exp.LastValue: "last_value", exp.NthValue: "nth_value"}
_CLAUSES = {"where": "WHERE", "group": "GROUP BY", "having": "HAVING", "joins": "JOIN conditions"}


def window_nodes(select: exp.Select) -> list[exp.Window]:
    """The window function calls of ``select`` itself (not of its subqueries)."""
    return [w for w in select.find_all(exp.Window) if w.parent_select is select]


def is_window_function(node: exp.Expression) -> bool:
    """Whether ``node`` is the function a window computes (an aggregate there is not the query's own)."""
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


def check_no_windows(tree: exp.Expression, what: str) -> None:
    """Refuse window functions anywhere in ``tree`` (``what`` names the context, e.g. a recursive query)."""
    for w in tree.find_all(exp.Window):
        raise error_at(w, f"window functions in {what} are not supported", unsupported=True)


def translate_windows(select: exp.Select, plan: Plan, resolve: Resolver) -> tuple[Plan, Resolver]:
    """``plan`` (the rows the SELECT list reads, as ``resolve`` reads them) followed by the columns of the
    window functions of ``select``, and the resolver that reads those columns for them."""
    nodes = window_nodes(select)
    if not nodes:
        return plan, resolve
    base = len(plan.columns)
    extra: list[Expr] = []

    def position(e: Expr) -> int:
        if isinstance(e, ColRef):
            return e.index
        if e not in extra:
            extra.append(e)
        return base + extra.index(e)

    specs: dict[tuple, list[tuple[exp.Window, WindowCall]]] = {}
    for w in nodes:
        partition = tuple(position(translate_scalar(p, resolve)) for p in w.args.get("partition_by") or [])
        order = []
        for o in (w.args.get("order") or exp.Order(expressions=[])).expressions:
            desc = bool(o.args.get("desc"))
            first = o.args.get("nulls_first")
            key = position(translate_scalar(o.this, resolve))
            order.append((key, desc, desc if first is None else bool(first)))
        call = _call(w, resolve, position, order, plan, extra)
        specs.setdefault((partition, tuple(order)), []).append((w, call))
    columns = list(plan.columns) + [Column(f"_w{i}", e.type) for i, e in enumerate(extra)]
    refs = tuple(ColRef(i, c.type) for i, c in enumerate(plan.columns))
    out: Plan = Project(plan, refs + tuple(extra), tuple(columns)) if extra else plan
    found: dict[int, ColRef] = {}
    for (partition, order), calls in specs.items():
        width = len(columns)
        for j, (w, call) in enumerate(calls):
            found[id(w)] = ColRef(width + j, call.type)
        columns += [Column(f"_window{width + j}", call.type) for j, (_, call) in enumerate(calls)]
        out = Window(out, partition, order, tuple(c for _, c in calls), tuple(columns))

    def reads(node: exp.Expression) -> Expr | None:
        if id(node) in found:
            return found[id(node)]
        return resolve(node)

    return out, reads


def check_placement(select: exp.Select) -> None:
    """Window functions belong to the SELECT list, not nested in each other or in aggregates (checked before
    anything of the SELECT is translated, so that the error says so)."""
    selects = {id(s) for s in select.selects}
    for w in window_nodes(select):
        for a in w.iter_expressions():
            for inner in a.find_all(exp.Window):
                raise error_at(inner, "window function calls cannot be nested")
        node: exp.Expression | None = w
        while node is not None and node.parent is not select:
            if isinstance(node.parent, AGGREGATES) and not is_window_function(node.parent):
                raise error_at(w, "aggregate function calls cannot contain window function calls")
            node = node.parent
        if node is None or id(node) in selects:
            continue
        clause = _CLAUSES.get(node.arg_key)
        if clause is not None:
            raise error_at(w, f"window functions are not allowed in {clause}")
        raise error_at(w, "window functions outside the SELECT list are not supported", unsupported=True)


def _call(w: exp.Window, resolve: Resolver, position, order: list, plan: Plan, extra: list) -> WindowCall:
    """The ``WindowCall`` of one window function; its argument gets a column of its own by ``position``."""
    f = w.this
    if w.args.get("alias") is not None:  # OVER w: a window named in a WINDOW clause
        raise error_at(w, "named windows (OVER name) are not supported", unsupported=True)
    frame = _frame(w, order, plan, extra, resolve)
    name = type(f).__name__.upper()

    def arg(node: exp.Expression) -> tuple[int, Expr]:
        e = translate_scalar(node, resolve)
        return position(e), e

    if type(f) in _RANKING:
        return WindowCall(_RANKING[type(f)], None, frame, None, None, _rank_type(f))
    if isinstance(f, exp.Ntile):
        n = _constant(f.this, resolve, "NTILE's bucket count")
        if n <= 0:
            raise error_at(f, "argument of ntile must be greater than zero")
        return WindowCall("ntile", None, frame, n, None, INTEGER)
    if isinstance(f, (exp.Lag, exp.Lead)):
        pos, e = arg(f.this)
        offset = f.args.get("offset")
        n = 1 if offset is None else _constant(offset, resolve, f"{name}'s offset")
        default = f.args.get("default")
        value = None
        if default is not None:
            d = translate_scalar(default, resolve)
            if not isinstance(d, Const):
                raise error_at(default, f"{name} with a default that is not a constant is not supported", True)
            d = coerce(default, d, e.type)
            if not isinstance(d, Const):
                raise error_at(default, f"{name}'s default cannot be made a {e.type}")
            value = d.value
        return WindowCall(name.lower(), pos, frame, n, value, e.type)
    if type(f) in _VALUE:
        pos, e = arg(f.this)
        n = None
        if isinstance(f, exp.NthValue):
            n = _constant(f.args["offset"], resolve, "NTH_VALUE's position")
            if n <= 0:
                raise error_at(f, "argument of nth_value must be greater than zero")
        return WindowCall(_VALUE[type(f)], pos, frame, n, None, e.type)
    if isinstance(f, AGGREGATES):
        func = f.key
        if type(f) in _SPREADS:
            raise error_at(f, f"{_SPREADS[type(f)]}() as a window function is not supported", unsupported=True)
        target = f.this
        if isinstance(target, exp.Distinct):
            raise error_at(f, "DISTINCT is not implemented for window functions", unsupported=True)
        if isinstance(target, exp.Star):
            return WindowCall("count_star", None, frame, None, None, INT)
        for inner in target.find_all(exp.Window):
            raise error_at(inner, "window function calls cannot be nested")
        pos, e = arg(target)
        return WindowCall(func, pos, frame, None, None, aggregate_type(f, func, e))
    if isinstance(f, exp.Filter):
        raise error_at(f, "FILTER (WHERE ...) in a window function is not supported", unsupported=True)
    raise error_at(f, f"{name.lower()}() as a window function is not supported", unsupported=True)


_SPREADS = {
    exp.Stddev: "STDDEV",
    exp.StddevSamp: "STDDEV_SAMP",
    exp.StddevPop: "STDDEV_POP",
    exp.Variance: "VAR_SAMP",
    exp.VariancePop: "VAR_POP",
}


def _rank_type(f: exp.Expression):
    if isinstance(f, (exp.PercentRank, exp.CumeDist)):
        return FLOAT
    return INT


def _constant(node: exp.Expression, resolve: Resolver, what: str) -> int:
    """An integer constant argument (the engine takes counts and offsets per view, not per row)."""
    e = translate_scalar(node, resolve)
    if not isinstance(e, Const) or e.type.kind != "int":
        raise error_at(node, f"{what} must be an integer constant", unsupported=True)
    if e.value is None:
        raise error_at(node, f"{what} must not be NULL", unsupported=True)
    return int(e.value)


def _frame(w: exp.Window, order: list, plan: Plan, extra: list, resolve: Resolver) -> tuple:
    """The frame as ``(mode, start, end, exclude)``: PostgreSQL's default without a frame clause, checked as
    PostgreSQL checks it; RANGE offsets in the ORDER BY column's stored units (see ``_offset``); ``exclude``
    None, or the rows EXCLUDE takes out: ``current row``, ``group`` or ``ties``."""
    spec = w.args.get("spec")
    if spec is None:
        return ("range", ("unbounded", 0), ("current", 0), None)
    mode = str(spec.args.get("kind") or "range").lower()
    if mode not in ("rows", "range", "groups"):
        raise error_at(spec, f"{mode.upper()} window frames are not supported", unsupported=True)
    if mode == "groups" and not order:
        raise error_at(spec if position(spec)[0] is not None else w, "GROUPS mode requires an ORDER BY clause")
    exclude = spec.args.get("exclude")
    if exclude is not None:
        exclude = " ".join(exclude.name.lower().split())
        exclude = None if exclude == "no others" else exclude
    start = _side(spec, "start")
    end = _side(spec, "end") if spec.args.get("end") is not None else ("current", None)
    if start == ("unbounded", "following"):
        raise error_at(spec, "frame start cannot be UNBOUNDED FOLLOWING")
    if end == ("unbounded", "preceding"):
        raise error_at(spec, "frame end cannot be UNBOUNDED PRECEDING")
    if start[0] == "current" and end[1] == "preceding":
        raise error_at(spec, "frame starting from current row cannot have preceding rows")
    if start[1] == "following" and end[0] == "current":
        raise error_at(spec, "frame starting from following row cannot end with current row")
    if start[1] == "following" and end[1] == "preceding":
        raise error_at(spec, "frame starting from following row cannot have preceding rows")
    bounds = []
    for (what, side), is_start in ((start, True), (end, False)):
        node = spec.args.get("start" if is_start else "end")
        if what in ("unbounded", "current"):
            bounds.append((what, 0))
            continue
        bounds.append((side, *_offset(node, mode, side, is_start, order, plan, extra, resolve)))
    return (mode, bounds[0], bounds[1], exclude)


def _side(spec: exp.WindowSpec, which: str) -> tuple[str, str | None]:
    """A bound as (unbounded | current | offset, preceding | following | None)."""
    value = spec.args.get(which)
    side = spec.args.get(f"{which}_side")
    side = str(side).lower() if side else None
    if isinstance(value, str):
        if value.upper() == "UNBOUNDED":
            return "unbounded", side
        if value.upper() == "CURRENT ROW":
            return "current", None
    return "offset", side


_INVALID_SIZE = "invalid preceding or following size in window function"


def _offset(node, mode: str, side: str, is_start: bool, order: list, plan: Plan, extra: list, resolve) -> tuple:
    """A frame offset as the engine takes it: rows for ROWS, peer groups for GROUPS; for RANGE, a distance in
    the ORDER BY column's stored units (a decimal's scaled integers, rounded so that the frame holds exactly
    the values within it; a date's days, likewise, for an interval of days and time), or for an interval with
    months ``(microseconds, months, dates)``: the calendar interval the engine adds to each row's value (a
    date's, as PostgreSQL does, as a timestamp)."""
    word = "starting" if is_start else "ending"
    if mode in ("rows", "groups"):
        value = _literal(node)
        if value is None:
            raise error_at(node, f"frame {word} offsets must be constants", unsupported=True)
        if value < 0:
            raise error_at(node, f"frame {word} offset must not be negative")
        if value != int(value):
            raise error_at(node, f"{mode.upper()} offsets must be integers", unsupported=True)
        return (int(value),)
    if len(order) != 1:
        raise error_at(node, "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column")
    pos = order[0][0]
    columns = list(plan.columns) + [Column("", e.type) for e in extra]
    t = columns[pos].type
    if t.kind not in ("int", "decimal", "float", "date", "timestamp", "interval"):
        what = f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type {t.pg_name}"
        raise error_at(node, what, unsupported=True)
    value = _literal(node)
    interval = None
    if value is None:
        e = translate_scalar(node, resolve)
        untyped = isinstance(e, Const) and e.type.kind == "text" and e.value is not None  # '1 day'
        if untyped and t.kind in ("date", "timestamp", "interval"):
            e = interval_from_text(node, e.value)
        if not isinstance(e, Const) or e.value is None:
            raise error_at(node, f"frame {word} offsets must be constants", unsupported=True)
        if e.type.kind != "interval":
            raise error_at(node, f"RANGE offsets of type {e.type} are not supported", unsupported=True)
        interval = interval_value(e.value)
    if (interval is not None) != (t.kind in ("date", "timestamp", "interval")):
        offset_type = "interval" if interval is not None else "integer" if value == int(value) else "numeric"
        raise error_at(
            node,
            f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type {t.pg_name} and offset "
            f"type {offset_type}",
            unsupported=True,
        )
    if interval is not None:
        months, days, micros = interval
        if (months * 30 + days) * DAY_MICROS + micros < 0:  # PostgreSQL's order of intervals
            raise error_at(node, _INVALID_SIZE)
        if t.kind == "interval":  # an interval column holds days of 24 hours: months count 30 days
            return ((months * 30 + days) * DAY_MICROS + micros,)
        micros += days * DAY_MICROS
        if months:
            return (micros, months, t.kind == "date")
        if t.kind == "timestamp":
            return (micros,)
        return (_inward(decimal.Decimal(micros) / DAY_MICROS, side, is_start),)
    if value < 0:
        raise error_at(node, _INVALID_SIZE)
    if t.kind == "float":
        return (float(value),)
    if t.kind == "int":
        if value != int(value):
            raise error_at(node, f"RANGE with a fractional offset over {t} is not supported", unsupported=True)
        return (int(value),)
    return (_inward(value * (decimal.Decimal(10) ** t.scale), side, is_start),)


def _inward(scaled: decimal.Decimal, side: str, is_start: bool) -> int:
    """An offset in units coarser than it as a whole number of them: a start PRECEDING or an end FOLLOWING
    reaches values within the offset (rounded down); the others exclude values nearer than it (rounded up)."""
    inward = (side == "preceding") == is_start
    return int(math.floor(scaled) if inward else math.ceil(scaled))


def _literal(node: exp.Expression) -> decimal.Decimal | None:
    """The number a constant offset writes, or None for anything else."""
    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return decimal.Decimal(node.this)
        except decimal.InvalidOperation:
            return None
    if isinstance(node, exp.Neg):
        inner = _literal(node.this)
        return None if inner is None else -inner
    return None
