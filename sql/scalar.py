"""Scalar expressions: sqlglot expression trees to typed logical expressions, with SQL's typing rules.

Numbers: integer op integer stays integer (division truncates, as in PostgreSQL); decimals keep exact scaled
integers for + - * (the result scale is the larger scale, or the sum of scales for *); anything with a float,
and any division involving a decimal, is double precision. Comparisons bring both sides to one representation
first.
"""

from __future__ import annotations

import calendar
import datetime as dt
import decimal
import re
import zoneinfo
from collections.abc import Callable

from sqlglot import exp

from sql import chars
from sql.allow import sql_name
from sql.errors import DataError, error_at
from sql.functions import as_text, translate_function
from sql.logical import Call, Const, Expr
from sql.types import (
    BOOL,
    DATE,
    FLOAT,
    INT,
    INTEGER,
    TEXT,
    TIMESTAMP,
    Domain,
    SqlType,
    char_type,
    decimal_type,
    domain_of,
    from_sqlglot,
    parse_text,
    sql_value,
    unsupported_type,
)

__all__ = [
    "AGGREGATES",
    "aggregate_type",
    "and_parts",
    "translate_scalar",
    "Resolver",
    "coerce",
    "cast_to",
    "assigned",
    "common_type",
    "result_type",
    "compare",
    "arithmetic",
    "boolean",
    "NULL_TYPE",
]

Resolver = Callable[[exp.Expression], Expr | None]
NULL_TYPE = SqlType("int", 0, -1)  # the type of a bare NULL until context gives it one

_SYMBOLS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.Neg: "-"}
_ARITH = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div", exp.Mod: "mod"}
_CMP = {exp.EQ: "eq", exp.NEQ: "ne", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt", exp.GTE: "ge"}


# the aggregate calls of SQL supported (EVERY is read as BOOL_AND, see ``sql.translate``)
AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.LogicalAnd, exp.LogicalOr, exp.GroupConcat)


def and_parts(cond: exp.Expression) -> list[exp.Expression]:
    """The conditions AND-ed together in ``cond`` (through parentheses)."""
    if isinstance(cond, exp.Paren):
        return and_parts(cond.this)
    if isinstance(cond, exp.And):
        return and_parts(cond.this) + and_parts(cond.expression)
    return [cond]


def is_null_const(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is None


def aggregate_type(node: exp.Expression, func: str, e: Expr) -> SqlType:
    """The type of aggregate ``func`` (count, sum, avg, min, max) of ``e``, as PostgreSQL types it (in ivm's
    types: AVG is DOUBLE PRECISION, SUM of decimals DECIMAL(18, s))."""
    t = e.type
    if func == "count":
        return INT
    if func in ("sum", "avg") and not t.numeric:
        raise error_at(node, f"{func.upper()} needs numbers, got {t}")
    if func == "avg":
        return FLOAT
    if func == "sum" and t.kind == "decimal":
        return decimal_type(18, t.scale)
    if func == "sum" and t.kind == "int":
        return INT  # BIGINT for every width, as PostgreSQL's SUM of SMALLINT and INTEGER
    if t.pad:
        return char_type(t.pad, declared=False)  # PostgreSQL's MIN and MAX of CHAR(n) are bpchar
    if t.varchar:
        return TEXT  # and of VARCHAR, TEXT's
    return t


def translate_scalar(node: exp.Expression, resolve: Resolver) -> Expr:
    """The logical expression of ``node``; ``resolve`` maps columns (and other nodes it knows, such as
    aggregates or GROUP BY expressions) to expressions, returning None for nodes it does not handle."""
    known = resolve(node)
    if known is not None:
        return known
    if node.args.get("negate") and isinstance(node, (exp.Like, exp.ILike, exp.Is, exp.In, exp.Between)):
        positive = node.copy()
        positive.set("negate", False)
        return Call("not", (boolean(node, translate_scalar(positive, resolve)),), BOOL)
    if isinstance(node, exp.Paren):
        return translate_scalar(node.this, resolve)
    if isinstance(node, exp.Column):
        raise error_at(node, f"column {node.sql()!r} does not exist")
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.Null):
        return Const(None, NULL_TYPE)
    if isinstance(node, exp.Boolean):
        return Const(bool(node.this), BOOL)
    if isinstance(node, exp.Neg):
        inner = translate_scalar(node.this, resolve)
        if isinstance(inner, Const) and inner.value is not None and inner.type.numeric:
            return Const(-inner.value, inner.type)
        _need_numeric(node, inner)
        return Call("neg", (inner,), inner.type)
    for cls, op in _ARITH.items():
        if isinstance(node, cls):
            return arithmetic(
                node, op, translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
            )
    for cls, op in _CMP.items():
        if isinstance(node, cls):
            return compare(
                node, op, translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
            )
    if isinstance(node, (exp.And, exp.Or)):
        a = boolean(node.this, translate_scalar(node.this, resolve))
        b = boolean(node.expression, translate_scalar(node.expression, resolve))
        return Call("and" if isinstance(node, exp.And) else "or", (a, b), BOOL)
    if isinstance(node, exp.Not):
        return Call("not", (boolean(node.this, translate_scalar(node.this, resolve)),), BOOL)
    if isinstance(node, exp.Is):
        x = translate_scalar(node.this, resolve)
        if isinstance(node.expression, exp.Boolean):  # IS TRUE, IS FALSE: never NULL
            x = boolean(node, x)
            return Call("is_true" if node.expression.this else "is_false", (x,), BOOL)
        if not isinstance(node.expression, exp.Null):
            raise error_at(node, f"IS {node.expression.sql()} is not supported", unsupported=True)
        return Call("is_null", (x,), BOOL)
    if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):
        a, b = translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
        return _not_distinct(node, a, b)
    if isinstance(node, exp.Between):
        x = translate_scalar(node.this, resolve)
        lo = compare(node, "ge", x, translate_scalar(node.args["low"], resolve))
        hi = compare(node, "le", x, translate_scalar(node.args["high"], resolve))
        return Call("and", (lo, hi), BOOL)
    if isinstance(node, exp.In):
        if node.args.get("query") is not None:
            what = "this IN (subquery) (correlated over an aggregate, or not in WHERE or HAVING)"
            raise error_at(node, f"{what} is not supported", unsupported=True)
        x = translate_scalar(node.this, resolve)
        out: Expr | None = None
        for item in node.expressions:
            c = compare(item, "eq", x, translate_scalar(item, resolve))
            out = c if out is None else Call("or", (out, c), BOOL)
        return out
    if isinstance(node, (exp.Like, exp.ILike)):
        x = translate_scalar(node.this, resolve)
        pat = node.expression
        what = node.key.upper()
        if not (isinstance(pat, exp.Literal) and pat.is_string):
            raise error_at(pat, f"{what} needs a constant pattern", unsupported=True)
        if x.type.kind != "text":
            raise error_at(node, f"{what} needs text, got {x.type}")
        if _ends_escaped(pat.this):
            raise error_at(pat, f"{what} pattern must not end with escape character")
        # a CHAR(n) value is matched padded to n, as PostgreSQL stores it
        return Call("like", (x,), BOOL, (pat.this, what == "ILIKE", *((x.type.pad,) if x.type.pad else ())))
    if isinstance(node, exp.Case):
        return _case(node, resolve)
    if isinstance(node, exp.Coalesce):
        args = [translate_scalar(a, resolve) for a in [node.this, *node.expressions]]
        t = result_type(node, "COALESCE", args, nulls_dropped=True)
        return Call("coalesce", tuple(coerce(node, a, t) for a in args), t)
    if isinstance(node, exp.Nullif):
        a, b = translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
        t = chars.nullif_type(node, a, b)
        return Call("nullif", (coerce(node, a, t), compare(node, "eq", a, b)), t)
    if isinstance(node, exp.Cast):
        return cast(node, translate_scalar(node.this, resolve))
    if isinstance(node, exp.Interval):
        return _interval(node)
    if isinstance(node, exp.Extract):
        field = node.this.name.lower()
        x = translate_scalar(node.expression, resolve)
        if x.type.kind not in ("date", "timestamp") or field not in _FIELDS:
            raise error_at(node, f"EXTRACT({field.upper()} FROM {x.type}) is not supported", unsupported=True)
        if x.type.kind == "date" and field in _TIME_FIELDS:
            return Const(0, INT) if not is_null_const(x) else Const(None, INT)
        if field == "second":
            return Call("extract", (x,), decimal_type(8, 6), field)
        return Call("extract", (x,), INT, field)
    if isinstance(node, exp.AtTimeZone):
        return _at_time_zone(node, resolve)
    if isinstance(node, exp.TimestampTrunc):
        unit = node.args["unit"].name.lower() if node.args.get("unit") is not None else ""
        x = translate_scalar(node.this, resolve)
        if x.type.kind == "date":
            x = Call("date_to_ts", (x,), TIMESTAMP)
        if x.type.kind != "timestamp" or unit not in _TRUNC_UNITS:
            raise error_at(node, f"date_trunc({unit!r}, {x.type}) is not supported", unsupported=True)
        return Call("ts_trunc", (x,), TIMESTAMP, unit)
    if isinstance(node, exp.DPipe):
        a, b = translate_scalar(node.this, resolve), translate_scalar(node.expression, resolve)
        if a.type.kind != "text" and b.type.kind != "text":
            raise error_at(node, f"|| needs text, got {a.type} and {b.type} (CAST one of them)", True)
        # the other side is written as text, as PostgreSQL does
        return Call("concat", (as_text(a), as_text(b)), TEXT)
    out = translate_function(node, lambda a: translate_scalar(a, resolve))
    if out is not None:
        return out
    if isinstance(node, (exp.ArrayAgg, exp.ArrayAny, exp.Any)):  # how a correlated IN was decorrelated
        what = "a correlated IN subquery, or a correlated scalar subquery that is not an aggregate,"
        raise error_at(node, f"{what} is not supported", unsupported=True)
    if isinstance(node, exp.Subquery):
        raise error_at(node, "a subquery here (in the SELECT list, or in a function) is not supported", True)
    if isinstance(node, exp.Exists):
        raise error_at(node, "EXISTS here (a value, in HAVING, or in another subquery) is not supported", True)
    raise error_at(node, f"{sql_name(node)} is not supported", unsupported=True)


INTERVAL = SqlType("interval")
_TIME_FIELDS = ("hour", "minute", "second")
_FIELDS = ("year", "quarter", "month", "day", "dow", "doy", *_TIME_FIELDS)
_TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")
_MICROS = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
}
DAY_MICROS = 86_400_000_000


def _at_time_zone(node: exp.AtTimeZone, resolve: Resolver) -> Expr:
    """``(ts AT TIME ZONE 'UTC') AT TIME ZONE 'zone'``: the wall time in ``zone`` of the instant that the
    TIMESTAMP ``ts`` is in UTC (the inner AT TIME ZONE makes a TIMESTAMP WITH TIME ZONE, the outer one takes
    it back to a TIMESTAMP, as PostgreSQL does). ivm has no TIMESTAMP WITH TIME ZONE values, so the pair is
    all it takes."""
    inner = node.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    zones = [_zone(n) for n in (inner, node) if isinstance(n, exp.AtTimeZone)]
    if not isinstance(inner, exp.AtTimeZone) or None in zones or zones[0] != "UTC":
        raise error_at(
            node, "AT TIME ZONE is supported only as (timestamp AT TIME ZONE 'UTC') AT TIME ZONE 'zone'", True
        )
    x = translate_scalar(inner.this, resolve)
    if x.type.kind != "timestamp" and not is_null_const(x):
        raise error_at(node, f"AT TIME ZONE needs a TIMESTAMP, got {x.type}")
    if is_null_const(x):
        return Const(None, TIMESTAMP)
    try:
        zoneinfo.ZoneInfo(zones[1])
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
        raise error_at(node.args["zone"], f"time zone {zones[1]!r} not recognized") from err
    return Call("ts_zone", (x,), TIMESTAMP, (zones[0], zones[1]))


def _zone(node: exp.AtTimeZone) -> str | None:
    zone = node.args.get("zone")
    return zone.this if isinstance(zone, exp.Literal) and zone.is_string else None


def _interval(node: exp.Interval) -> Const:
    """An interval constant as (months, days, microseconds)."""
    text = node.this.this if isinstance(node.this, exp.Literal) else None
    unit = node.unit.name.lower() if node.unit is not None else None
    parts = str(text).split() if text is not None else []
    if unit is None and len(parts) == 2:
        parts, unit = [parts[0]], parts[1].lower()
    if len(parts) != 1 or not parts[0].lstrip("-").isdigit():
        raise error_at(node, f"interval {node.sql()} is not supported", unsupported=True)
    n = int(parts[0])
    unit = unit.rstrip("s")
    if unit not in ("year", "month", "week", "day", *_MICROS):
        raise error_at(node, f"interval unit {unit!r} is not supported", unsupported=True)
    months = {"year": 12 * n, "month": n}.get(unit, 0)
    days = {"day": n, "week": 7 * n}.get(unit, 0)
    return Const((months, days, _MICROS.get(unit, 0) * n), INTERVAL)


def _literal(node: exp.Literal) -> Const:
    if node.is_string:
        return Const(node.this, TEXT)
    text = node.this
    if re.fullmatch(r"\d+", text) and int(text) < 2**63:  # INTEGER when it fits, as in PostgreSQL
        return Const(int(text), INTEGER if int(text) < 2**31 else INT)
    try:
        d = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise error_at(node, f"invalid number {text!r}") from None
    # a constant with a point or an exponent is NUMERIC, as in PostgreSQL: exact, in as many digits as it has
    _, digits, exponent = d.as_tuple()
    scale = max(-exponent, 0)
    width = max(len(digits) + max(exponent, 0), scale + 1)
    if width > 18:
        raise error_at(node, f"the numeric constant {text} has more than the 18 digits ivm holds", True)
    t = decimal_type(width, scale)
    return Const(sql_value(d, t), t)


def _need_numeric(node: exp.Expression, *args: Expr) -> None:
    for a in args:
        if not (a.type.numeric or is_null_const(a)):
            op = _SYMBOLS.get(type(node), node.key.upper())
            raise error_at(node, f"operator {op} needs numbers, got {a.type}")


def coerce(node: exp.Expression, e: Expr, t: SqlType) -> Expr:
    """``e`` in type ``t`` (integers to decimals or floats, decimals to other scales or floats, a string as
    another string type held the same way: see ``sql.chars.retype``)."""
    if e.type == t:
        return e
    if is_null_const(e):
        return Const(None, t)
    s = e.type
    if s.kind == "text" and t.kind == "text":
        return chars.retype(e, t)
    if isinstance(e, Const):
        if s.kind == "int" and t.kind == "decimal":
            return Const(decimal.Decimal(e.value), t)
        if s.kind == "decimal" and t.kind == "decimal" and t.scale >= s.scale:
            return Const(e.value, t)
        if s.kind in ("int", "decimal") and t.kind == "float":
            return Const(float(e.value), t)
    if s.kind == "int" and t.kind == "int" and s.bits <= t.bits:
        return Const(e.value, t) if isinstance(e, Const) else Call("to_type", (e,), t, s)
    if (s.kind, t.kind) in (("int", "decimal"), ("decimal", "decimal"), ("int", "float"), ("decimal", "float")):
        return Call("to_type", (e,), t, s)
    raise error_at(node, f"cannot use {s} as {t}")


def common_type(node: exp.Expression, types: list[SqlType]) -> SqlType:
    real = [t for t in types if t != NULL_TYPE]
    if not real:
        return INT
    kinds = {t.kind for t in real}
    if kinds == {"int"}:
        return max(real, key=lambda t: t.bits)
    if kinds == {"text"}:
        return chars.common_string_type(node, "this expression", list(real), [False] * len(real))
    if len(kinds) == 1 and kinds != {"decimal"}:
        return real[0]
    if kinds <= {"int", "decimal", "float"}:
        if "float" in kinds:
            return FLOAT
        scale = max(t.scale for t in real if t.kind == "decimal")
        return decimal_type(18, scale)
    raise error_at(node, "incompatible types: " + ", ".join(sorted(str(t) for t in real)))


def result_type(node: exp.Expression, what: str, values: list[Expr], nulls_dropped: bool = False) -> SqlType:
    """The type of ``what`` (CASE, COALESCE, GREATEST, LEAST) whose value is one of ``values`` (in
    PostgreSQL's order of resolution: CASE's ELSE first): their common type, strings as ``sql.chars`` says."""
    types = [v.type for v in values]
    if {t.kind for t in types if t != NULL_TYPE} == {"text"}:
        marks = [chars.NULL if t == NULL_TYPE else t for t in types]
        literals = [chars.untyped(v) for v in values]
        return chars.common_string_type(node, what, marks, literals, nulls_dropped)
    return common_type(node, types)


def arithmetic(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    if op in ("add", "sub") and {a.type.kind, b.type.kind} & {"timestamp"}:
        return _timestamp_arith(node, op, a, b)
    if op in ("add", "sub") and {a.type.kind, b.type.kind} & {"date"}:
        return _date_arith(node, op, a, b)
    _need_numeric(node, a, b)
    kinds = {a.type.kind, b.type.kind}
    if is_null_const(a) or is_null_const(b):
        t = common_type(node, [a.type, b.type])
        return Const(None, FLOAT if op == "div" and t.kind == "decimal" else t)
    if "float" in kinds or (op == "div" and "decimal" in kinds):
        return Call(op, (coerce(node, a, FLOAT), coerce(node, b, FLOAT)), FLOAT)
    if kinds == {"int"}:  # in the wider operand's width, as PostgreSQL's int2/int4/int8 operators
        t = common_type(node, [a.type, b.type])
        return Call(op, (coerce(node, a, t), coerce(node, b, t)), t)
    if op == "mul":
        sa = a.type.scale if a.type.kind == "decimal" else 0
        sb = b.type.scale if b.type.kind == "decimal" else 0
        return Call("mul", (a, b), decimal_type(18, sa + sb))
    t = common_type(node, [a.type, b.type])
    return Call(op, (coerce(node, a, t), coerce(node, b, t)), t)


def _date_arith(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    """date +/- interval (or integer days); date - date is the number of days between them."""
    if a.type.kind == "date" and b.type.kind == "date" and op == "sub":
        days = (Call("to_type", (a,), INTEGER, DATE), Call("to_type", (b,), INTEGER, DATE))
        return Call("sub", days, INTEGER)
    if b.type.kind == "date" and op == "add":
        a, b = b, a
    if a.type.kind != "date":
        raise error_at(node, f"cannot {op} {a.type} and {b.type}")
    if b.type.kind == "int":
        months, days = 0, b
    elif b.type == INTERVAL and isinstance(b, Const):
        months, days, micros = b.value
        if micros:  # a date plus a time of day is a timestamp, as in PostgreSQL
            return _timestamp_arith(node, op, Call("date_to_ts", (a,), TIMESTAMP), b)
        days = Const(days, INT)
    else:
        raise error_at(node, f"cannot {op} DATE and {b.type}")
    if op == "sub":
        months = -months
        days = Call("neg", (days,), INT) if not isinstance(days, Const) else Const(-days.value, INT)
    if isinstance(a, Const) and isinstance(days, Const):
        if a.value is None or days.value is None:
            return Const(None, DATE)
        return Const(add_months_days(a.value, months, days.value), DATE)
    return Call("date_add", (a, days), DATE, months)


def _timestamp_arith(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    """timestamp +/- interval; other arithmetic on timestamps is rejected by name."""
    if b.type.kind == "timestamp" and op == "add":
        a, b = b, a
    if a.type.kind == "date":
        a = Call("date_to_ts", (a,), TIMESTAMP)
    if a.type.kind != "timestamp" or not (b.type == INTERVAL and isinstance(b, Const)):
        raise error_at(
            node, f"cannot {op} {a.type} and {b.type} (only timestamp +/- interval)", unsupported=True
        )
    months, days, micros = b.value
    if op == "sub":
        months, days, micros = -months, -days, -micros
    return Call("ts_add", (a,), TIMESTAMP, (months, days * DAY_MICROS + micros))


def add_months_days(d: dt.date, months: int, days: int) -> dt.date:
    """A date after adding months (clamped to the month's end, as PostgreSQL) then days."""
    if months:
        m = d.month - 1 + months
        y, m = d.year + m // 12, m % 12 + 1
        d = dt.date(y, m, min(d.day, calendar.monthrange(y, m)[1]))
    return d + dt.timedelta(days=days)


def compare(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    a, b = _typed_literal(node, a, b.type), _typed_literal(node, b, a.type)
    ta, tb = a.type, b.type
    if ta.kind == "text" or tb.kind == "text":
        if not ({ta.kind, tb.kind} <= {"text"} or is_null_const(a) or is_null_const(b)):
            raise error_at(node, f"cannot compare {ta} with {tb}")
        a, b = chars.comparable(a, b)
        return Call(op, tuple(x if x.type.kind == "text" else Const(None, TEXT) for x in (a, b)), BOOL)
    if ta == tb or is_null_const(a) or is_null_const(b):
        t = tb if ta == NULL_TYPE else ta
        return Call(op, (coerce(node, a, t), coerce(node, b, t)), BOOL)
    if {ta.kind, tb.kind} == {"date", "timestamp"}:  # a date is its midnight
        a, b = (Call("date_to_ts", (x,), TIMESTAMP) if x.type.kind == "date" else x for x in (a, b))
        return Call(op, (a, b), BOOL)
    if ta.kind in ("date", "timestamp", "bool") or tb.kind in ("date", "timestamp", "bool"):
        raise error_at(node, f"cannot compare {ta} with {tb}")
    t = common_type(node, [ta, tb])
    return Call(op, (coerce(node, a, t), coerce(node, b, t)), BOOL)


def _typed_literal(node: exp.Expression, e: Expr, other: SqlType) -> Expr:
    """A text constant compared with a date or timestamp, read as one (or an error naming the text)."""
    if not (isinstance(e, Const) and e.type.kind == "text" and e.value is not None):
        return e
    if other.kind not in ("date", "timestamp"):
        return e
    text = e.value
    try:
        return Const(sql_value(text, other), other)
    except (TypeError, ValueError) as err:
        raise error_at(node, f"invalid {other} literal {text!r}") from err


def boolean(node: exp.Expression, e: Expr) -> Expr:
    if e.type.kind != "bool" and not is_null_const(e):
        raise error_at(node, f"argument of {node.key.upper()} must be boolean, not {e.type}")
    return e if e.type == BOOL else Const(None, BOOL)


def _not_distinct(node: exp.Expression, a: Expr, b: Expr) -> Expr:
    """``a IS NOT DISTINCT FROM b`` (or ``IS DISTINCT FROM``): equality with NULL equal to NULL, never NULL."""
    a_null, b_null = Call("is_null", (a,), BOOL), Call("is_null", (b,), BOOL)
    known = Call("and", (Call("not", (a_null,), BOOL), Call("not", (b_null,), BOOL)), BOOL)
    same = Call("and", (compare(node, "eq", a, b), known), BOOL)  # FALSE, not NULL, when one side is NULL
    out = Call("or", (same, Call("and", (a_null, b_null), BOOL)), BOOL)
    return out if isinstance(node, exp.NullSafeEQ) else Call("not", (out,), BOOL)


def _case(node: exp.Case, resolve: Resolver) -> Expr:
    if node.this is not None:
        base = translate_scalar(node.this, resolve)
        conds = [compare(i, "eq", base, translate_scalar(i.this, resolve)) for i in node.args["ifs"]]
    else:
        conds = [boolean(i.this, translate_scalar(i.this, resolve)) for i in node.args["ifs"]]
    values = [translate_scalar(i.args["true"], resolve) for i in node.args["ifs"]]
    default = node.args.get("default")
    values.append(translate_scalar(default, resolve) if default is not None else Const(None, NULL_TYPE))
    t = result_type(node, "CASE", [values[-1], *values[:-1]])  # PostgreSQL resolves the ELSE value first
    values = [coerce(node, v, t) for v in values]
    return Call("case", tuple(conds) + tuple(values), t)


def cast(node: exp.Cast, e: Expr) -> Expr:
    if node.to.this == exp.DataType.Type.BPCHAR and not node.to.expressions:
        if not e.type.pad:  # a string of another type would keep its trailing spaces
            raise error_at(
                node,
                f"CAST of {e.type} to bpchar (character without a length) is not supported: its values keep "
                "their trailing spaces, which ivm does not hold; CAST to CHAR(n), VARCHAR or TEXT",
                unsupported=True,
            )
        return chars.retype(e, char_type(e.type.pad, declared=False))
    t = from_sqlglot(node.to)
    if t is None:
        raise error_at(node, unsupported_type(node.to), unsupported=True)
    return in_domain(cast_to(node, e, t), domain_of(node.to))


def in_domain(e: Expr, domain: Domain | None) -> Expr:
    """A value cast to a declared type narrower than its engine type: an integer checked against the range of
    SMALLINT or INTEGER, text cut to the length of VARCHAR(n) or CHAR(n) (CHAR's trailing spaces dropped)."""
    if domain is None:
        return e
    if domain.low is not None:
        if isinstance(e, Const) and e.value is not None and not domain.low <= e.value <= domain.high:
            raise DataError(f"{domain.name} out of range: {e.value}")
        return Call("fit_int", (e,), e.type, (domain.name, domain.low, domain.high))
    if domain.length is not None:
        return Call("clip_text", (e,), e.type, (domain.length, domain.padded))
    return e


def assigned(node: exp.Expression, e: Expr, t: SqlType, column: str) -> Expr:
    """``e`` as the value of a column of type ``t`` (UPDATE's SET, INSERT ... SELECT): numbers converted as
    CAST converts them (rounded to the column's scale, an error when too wide for it), a date as a timestamp
    and back; other types must match."""
    if e.type == NULL_TYPE:  # an untyped NULL, as a constant or a column of a query
        return Const(None, t)
    if e.type == t or is_null_const(e) or e.type.kind == t.kind == "text":
        return coerce(node, e, t)  # a string is cut or refused by the column's domain
    if isinstance(e, Const) and e.type.kind == "text" and t.kind != "text":
        return cast_to(node, e, t)  # a string constant is read as the column's type, as PostgreSQL does
    kinds = {e.type.kind, t.kind}
    if (e.type.numeric and t.numeric) or kinds == {"date", "timestamp"}:
        return cast_to(node, e, t)
    raise error_at(node, f"column {column!r} is of type {t} but the value is of type {e.type}")


def cast_to(node: exp.Expression, e: Expr, t: SqlType) -> Expr:
    """``CAST(e AS t)``."""
    if isinstance(e, Const) and e.type.kind == "text" and e.value is not None and t.kind != "text":
        try:
            return Const(parse_text(e.value, t), t)
        except ValueError as err:
            raise error_at(node, str(err), cls=DataError) from err
    if e.type == t and not chars.untyped(e):
        return e
    if is_null_const(e):
        return Const(None, t)
    if e.type.kind == t.kind == "text":  # CHAR(n) is cut by the domain ``cast`` adds
        return chars.retype(e, t)
    if (e.type.kind, t.kind) == ("date", "timestamp"):
        return Call("date_to_ts", (e,), t)
    if (e.type.kind, t.kind) == ("timestamp", "date"):
        return Call("ts_to_date", (e,), t)
    if t.kind == "text" and e.type.kind != "text":
        return Call("to_text", (e,), t, e.type)
    if e.type.kind == "text":
        return Call("from_text", (e,), t)
    if e.type.numeric and t.numeric:
        if t.kind == "int" and e.type.kind != "int":
            return Call("to_int", (e,), t, e.type)
        if t.kind == "int":  # a narrower width: ``in_domain`` or the column's domain checks the range
            return Const(e.value, t) if isinstance(e, Const) else Call("to_type", (e,), t, e.type)
        if t.kind == "decimal" and e.type.kind == "float":
            out = Call("float_to_decimal", (e,), t)
        elif t.kind == "decimal" and e.type.kind == "decimal" and t.scale < e.type.scale:
            out = Call("round_decimal", (e,), t, e.type)
        else:
            out = coerce(node, e, t)
        if t.kind == "decimal" and not _fits(e.type, t):
            out = Call("fit_decimal", (out,), t)  # a value too wide for the type is an error, not a wrong value
        return out
    raise error_at(node, f"CAST from {e.type} to {t} is not supported", unsupported=True)


def _fits(src: SqlType, t: SqlType) -> bool:
    """Whether every value of numeric type ``src`` fits in decimal type ``t`` (as many digits before the
    point at least)."""
    if src.kind == "decimal":
        return src.precision - src.scale <= t.precision - t.scale
    return False


def _ends_escaped(pattern: str) -> bool:
    """Whether a LIKE pattern ends with its escape character (a backslash, as PostgreSQL's default) that
    escapes nothing."""
    trailing = len(pattern) - len(pattern.rstrip("\\"))
    return trailing % 2 == 1
