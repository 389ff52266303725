"""``generate_series`` in FROM, as PostgreSQL runs it: alone (``FROM generate_series(1, 10) AS g``), or reading
the items before it, LATERAL whether written so or not (``FROM t, generate_series(t.lo, t.hi) AS g``, ``CROSS
JOIN LATERAL``, ``LEFT JOIN LATERAL ... ON true``): each row of those items once for every value of its series
(``sql.logical.Series``).

Integers give INTEGER, or BIGINT when an argument is BIGINT; timestamps and dates step by an interval
without months (a step of months moves by calendar, which is refused by name) and give TIMESTAMP, or TIMESTAMP
WITH TIME ZONE when an argument has a time zone or is a date or a string, as PostgreSQL resolves them. The
column is named as PostgreSQL names it: by the alias's column list, else by the alias, else
``generate_series``; WITH ORDINALITY adds a BIGINT column numbering the values from 1 (``ordinality``).
Elsewhere than FROM, generate_series is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sql.errors import error_at, position
from sql.logical import Column, Const, Expr, Plan, Series
from sql.scalar import translate_scalar
from sql.types import DAY_MICROS, INT, INTEGER, TIMESTAMP, TIMESTAMPTZ, SqlType, interval_value

__all__ = ["is_series", "named_series", "series_over"]

Resolver = Callable[[exp.Expression], Expr | None]


def is_series(node: exp.Expression) -> bool:
    """Whether ``node`` (an item of FROM) is a generate_series."""
    return isinstance(node, exp.Table) and isinstance(node.this, exp.ExplodingGenerateSeries)


def named_series(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every generate_series of a FROM clause a table whose alias names its columns (as
    PostgreSQL names them), written without LATERAL (which it always is); a generate_series anywhere else is
    refused by name."""
    for item in tree.find_all(exp.Table, exp.Lateral):
        if item.args.get("ordinality") and not isinstance(item.this, exp.ExplodingGenerateSeries):
            raise error_at(item, "WITH ORDINALITY is not supported here (only of generate_series)", True)
    for node in list(tree.find_all(exp.ExplodingGenerateSeries)):
        item = node.parent
        if isinstance(item, exp.Lateral) and isinstance(item.parent, exp.Join) and item.arg_key == "this":
            table = exp.Table(this=node, alias=item.args.get("alias"), ordinality=item.args.get("ordinality"))
            table.meta.update(item.meta)
            item.replace(table)
            item = table
        if not (
            isinstance(item, exp.Table)
            and item.arg_key == "this"
            and isinstance(item.parent, (exp.From, exp.Join))
        ):
            raise error_at(
                node, "generate_series() outside FROM is not supported (write it as an item of FROM)", True
            )
        alias = item.args.get("alias")
        name = alias.name if alias is not None and alias.name else "generate_series"
        columns = list(alias.columns) if alias is not None else []
        wanted = 2 if item.args.get("ordinality") else 1
        if len(columns) > wanted:
            raise error_at(alias, "too many column aliases specified for function generate_series")
        if not columns:
            columns.append(exp.to_identifier(name))
        if len(columns) < wanted:
            columns.append(exp.to_identifier("ordinality"))
        item.set("alias", exp.TableAlias(this=exp.to_identifier(name), columns=columns))
    return tree


def series_over(item: exp.Table, plan: Plan, resolve: Resolver, outer: bool = False) -> Series:
    """``plan``'s rows, each once for every value of the generate_series ``item`` (its arguments read through
    ``resolve``, ``plan``'s columns); with ``outer``, a row without values kept once with NULL."""
    node = item.this
    start, stop, step = node.args.get("start"), node.args.get("end"), node.args.get("step")
    bounds = [translate_scalar(a, resolve) for a in (start, stop)]
    by = translate_scalar(step, resolve) if step is not None else None
    kind = _kind(node, bounds, step, by)
    bounds = [
        e if _fits(e, kind) else translate_scalar(_as(a, kind), resolve)
        for e, a in zip(bounds, (start, stop), strict=True)
    ]
    if kind.kind == "int":
        by = Const(1, kind) if by is None else by
        if not _fits(by, kind):
            by = translate_scalar(_as(step, kind), resolve)
    else:
        by = _step_micros(node, step, resolve)
    names = [c.name for c in item.args["alias"].columns]
    own = (Column(names[0], kind, True),)
    if item.args.get("ordinality"):
        own += (Column(names[1], INT, outer),)
    return Series(plan, bounds[0], bounds[1], by, plan.columns + own, bool(item.args.get("ordinality")), outer)


def _fits(e: Expr, kind: SqlType) -> bool:
    """Whether ``e``'s values are the series' type's as they are (no cast needed)."""
    if _unknown(e) or e.type.kind != kind.kind:
        return False
    return e.type.bits <= kind.bits if kind.kind == "int" else e.type.tz == kind.tz


def _kind(node: exp.Expression, bounds: list[Expr], step: exp.Expression | None, by: Expr | None) -> SqlType:
    """The type of the series' values, as PostgreSQL resolves generate_series over these arguments (the step
    ``step`` translated as ``by``)."""
    known = [e.type for e in bounds if not _unknown(e)]
    step_type = by.type if by is not None else None
    if all(t.kind == "int" for t in known) and (step_type is None or step_type.kind in ("int", "text")):
        if not known:
            return INTEGER
        widths = [t.bits for t in known] + (
            [step_type.bits] if step_type is not None and step_type.kind == "int" else []
        )
        return INTEGER if max(widths) <= 32 else INT
    if all(t.kind in ("timestamp", "date", "text") for t in known) and known:
        if step is None:
            raise error_at(node, "generate_series of timestamps needs a step (an interval)")
        if step_type.kind not in ("interval", "text"):
            raise error_at(
                step, f"the step of generate_series of timestamps must be an interval, not {step_type.pg_name}"
            )
        plain = all(t.kind == "timestamp" and not t.tz for t in known)
        return TIMESTAMP if plain else TIMESTAMPTZ
    args = bounds + ([by] if by is not None else [])
    shown = ", ".join("unknown" if _unknown(e) else e.type.pg_name for e in args)
    raise error_at(
        node, f"generate_series({shown}) is not supported (integers, or timestamps and an interval)", True
    )


def _unknown(e: Expr) -> bool:
    """Whether ``e`` is a NULL or string constant, typed by the other arguments (as PostgreSQL's unknown)."""
    return isinstance(e, Const) and (e.value is None or e.type.kind == "text")


def _as(node: exp.Expression, kind: SqlType) -> exp.Expression:
    """``node`` cast to the series' type (its bounds and integer step)."""
    target = {
        "int": "INTEGER" if kind.bits <= 32 else "BIGINT",
        "timestamp": "TIMESTAMPTZ" if kind.tz else "TIMESTAMP",
    }
    return exp.cast(node.copy(), target[kind.kind], dialect="postgres")


def _step_micros(node: exp.Expression, step: exp.Expression, resolve: Resolver) -> Expr:
    """A timestamp series' step as microseconds: an interval without months (days of 24 hours, in the
    session's time zone, UTC)."""
    by = translate_scalar(exp.cast(step.copy(), "INTERVAL", dialect="postgres"), resolve)
    if isinstance(by, Const):
        if by.value is None:
            return Const(None, INT)
        months, days, micros = interval_value(by.value)
        if months:
            at = step if position(step)[0] is not None else node
            raise error_at(at, "generate_series with a step of months or years is not supported", True)
        return Const(days * DAY_MICROS + micros, INT)
    return by  # an interval column: microseconds, no months
