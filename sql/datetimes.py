"""Dates, timestamps and intervals: arithmetic, interval constants, EXTRACT and ``date_part``, ``date_trunc``,
AT TIME ZONE, and the current time (PostgreSQL's semantics, in a session whose time zone is UTC).

- ``timestamp - timestamp`` is an INTERVAL (days of 24 hours and a time of day, as PostgreSQL's
  ``justify_hours`` leaves it; see ``sql.types``); a DATE beside a TIMESTAMP is its midnight, and a TIMESTAMP
  beside a TIMESTAMP WITH TIME ZONE is read in UTC. ``date - date`` is the INTEGER number of days, ``date
  +/- integer`` a DATE, and ``date +/- interval`` a TIMESTAMP, as PostgreSQL's operators have it.
- ``timestamp +/- interval`` adds the months first (the day cut to the month's last), then the days and the
  time; an interval column (of ``timestamp - timestamp``) adds its microseconds.
- Interval constants are read by ``sql.types.parse_interval``. They compare with intervals as PostgreSQL's do
  (a month is 30 days, a day 24 hours), and may be added to dates and timestamps; as a value of their own
  only those of the shape of ``timestamp - timestamp`` (see ``sql.types``).
- ``now()``, ``current_timestamp``, ``transaction_timestamp()``, ``current_date`` and ``localtimestamp`` are
  the start of the current transaction, one constant for the whole statement (``statement_time``); a view is
  not maintained as time passes, so they are refused in views.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from sqlglot import exp

from sql.errors import DataError, UnsupportedError, error_at
from sql.logical import Call, Const, Expr
from sql.types import (
    DATE,
    DAY_MICROS,
    FLOAT,
    INT,
    INTEGER,
    INTERVAL,
    TIMESTAMP,
    TIMESTAMPTZ,
    SqlType,
    decimal_type,
    interval_value,
    justified,
    parse_interval,
)

__all__ = [
    "arithmetic",
    "interval_constant",
    "comparable_interval",
    "unjustified",
    "extract",
    "date_part",
    "date_trunc",
    "at_time_zone",
    "current_time",
    "statement_time",
    "statement_now",
    "TIME_FUNCTIONS",
    "add_months_days",
]

Translate = Callable[[exp.Expression], Expr]

# the start of the current transaction for the statement being translated, or why there is none (a view)
_NOW: ContextVar[dt.datetime | str | None] = ContextVar("ivm_statement_time", default=None)


@contextlib.contextmanager
def statement_time(now: dt.datetime | str | None) -> Iterator[None]:
    """Translate within this block with ``now`` as the current time (an aware datetime: the start of the
    transaction), or with a description of what refuses it (``"a view"``) when it is text."""
    token = _NOW.set(now)
    try:
        yield
    finally:
        _NOW.reset(token)


def statement_now() -> dt.datetime | str | None:
    """What ``statement_time`` set: the current time, or why there is none."""
    return _NOW.get()


def _is_null(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is None


def _null_type() -> SqlType:
    from sql.scalar import NULL_TYPE

    return NULL_TYPE


# -- the current time -------------------------------------------------------------------------------------

# sqlglot's node of each function of the current time, with its SQL name (now() and current_timestamp are
# one node) and its type
TIME_FUNCTIONS: dict[type[exp.Expression], tuple[str, SqlType]] = {
    exp.CurrentTimestamp: ("now()", TIMESTAMPTZ),
    exp.CurrentDate: ("current_date", DATE),
    exp.Localtimestamp: ("localtimestamp", TIMESTAMP),
}


def current_time(node: exp.Expression, name: str | None = None) -> Const:
    """The value of ``now()`` and its relatives: the start of the current transaction, in UTC."""
    what, t = TIME_FUNCTIONS.get(type(node), ("transaction_timestamp()", TIMESTAMPTZ))
    what = name or what
    now = _NOW.get()
    if not isinstance(now, dt.datetime):
        if now == "a view":
            raise error_at(
                node,
                f"{what} is not allowed in a view: time-dependent views are not maintained (the view would "
                "go stale as time passes); compare with a constant, or run the query when needed",
                unsupported=True,
            )
        raise error_at(node, f"{what} is not supported {'in ' + now if now else 'here'}", unsupported=True)
    utc = now.astimezone(dt.UTC)
    if t == DATE:
        return Const(utc.date(), DATE)
    if t == TIMESTAMP:  # the wall time in the session's time zone, UTC
        return Const(utc.replace(tzinfo=None), TIMESTAMP)
    return Const(utc, TIMESTAMPTZ)


# -- interval constants -----------------------------------------------------------------------------------


def interval_constant(node: exp.Interval) -> Const:
    """``INTERVAL '...'`` (with a field named after the string, as ``INTERVAL '2' HOUR``), as the constant
    (months, days, microseconds)."""
    literal = node.this
    unit = node.args.get("unit")
    if isinstance(unit, exp.IntervalSpan):
        raise error_at(node, f"INTERVAL ... {unit.sql(dialect='postgres')} is not supported", unsupported=True)
    if not (isinstance(literal, exp.Literal) and literal.is_string):
        raise error_at(node, "INTERVAL needs a constant string ('1 day')", unsupported=True)
    return interval_from_text(node, literal.this, unit.name.upper() if unit is not None else None)


def interval_from_text(node: exp.Expression, text: str, field: str | None = None) -> Const:
    try:
        return Const(parse_interval(text, field), INTERVAL)
    except UnsupportedError as err:
        raise error_at(node, err.message, unsupported=True) from None
    except (ValueError, OverflowError):
        raise error_at(node, f'invalid input syntax for type interval: "{text}"', cls=DataError) from None


def unjustified(e: Expr) -> bool:
    """Whether ``e`` is an interval constant that cannot be a value of an interval column (see
    ``sql.types``)."""
    if not (isinstance(e, Const) and e.type.kind == "interval" and e.value is not None):
        return False
    months, days, micros = interval_value(e.value)
    return bool(months) or justified(days * DAY_MICROS + micros) != (0, days, micros)


def comparable_interval(e: Expr) -> Expr:
    """An interval constant as the interval column value that compares as it does: PostgreSQL compares
    intervals by their length with 30-day months and 24-hour days."""
    if not (isinstance(e, Const) and e.type.kind == "interval" and e.value is not None):
        return e
    months, days, micros = interval_value(e.value)
    return Const(justified((months * 30 + days) * DAY_MICROS + micros), INTERVAL)


# -- arithmetic -------------------------------------------------------------------------------------------


def arithmetic(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    """``a op b`` where one side is a date, timestamp or interval (the other side's untyped string constant
    already read by ``sql.scalar``)."""
    ka, kb = a.type.kind, b.type.kind
    if op not in ("add", "sub"):
        what = {"mul": "*", "div": "/", "mod": "%"}[op]
        raise error_at(node, f"operator {what} of {a.type} and {b.type} is not supported", unsupported=True)
    if op == "add" and kb in ("date", "timestamp") and ka not in ("date", "timestamp"):
        a, b, ka, kb = b, a, kb, ka  # interval + timestamp, integer + date
    if ka == "interval" and kb == "interval":
        raise error_at(
            node, f"operator {'+' if op == 'add' else '-'} of two intervals is not supported", unsupported=True
        )
    if ka == "date" and kb == "int":
        return _date_plus_days(op, a, b)
    if op == "sub" and ka == kb == "date":
        return Call(
            "sub", (Call("to_type", (a,), INTEGER, DATE), Call("to_type", (b,), INTEGER, DATE)), INTEGER
        )
    if op == "sub" and ka in ("date", "timestamp") and kb in ("date", "timestamp"):
        t = TIMESTAMPTZ if a.type.tz or b.type.tz else TIMESTAMP
        return Call("sub", (as_timestamp(a, t), as_timestamp(b, t)), INTERVAL)
    if ka in ("date", "timestamp") and kb == "interval":
        return _shifted(node, op, a, b)
    if ka in ("date", "timestamp") and _is_null(b):
        if ka == "date":
            raise error_at(node, f"operator is not unique: date {'+' if op == 'add' else '-'} unknown")
        return Const(None, a.type if op == "add" else INTERVAL)
    raise error_at(
        node,
        f"operator {'+' if op == 'add' else '-'} of {a.type} and {b.type} is not supported",
        unsupported=True,
    )


def _date_plus_days(op: str, a: Expr, b: Expr) -> Expr:
    """``date +/- integer``: a DATE."""
    if _is_null(a) or _is_null(b):
        return Const(None, DATE)
    if isinstance(b, Const):
        days: Expr = Const(b.value if op == "add" else -b.value, b.type)
    else:
        days = b if op == "add" else Call("neg", (b,), b.type)
    if isinstance(a, Const) and isinstance(days, Const):
        try:
            return Const(a.value + dt.timedelta(days=days.value), DATE)
        except OverflowError:
            pass  # beyond Python's dates: computed by the engine, which holds it
    return Call("date_add", (a, days), DATE, 0)


def _shifted(node: exp.Expression, op: str, a: Expr, b: Expr) -> Expr:
    """A date or timestamp plus or minus an interval: a TIMESTAMP (WITH TIME ZONE for one)."""
    t = a.type if a.type.kind == "timestamp" else TIMESTAMP
    if _is_null(a) or _is_null(b):
        return Const(None, t)
    if isinstance(b, Const):
        months, days, micros = interval_value(b.value)
        if op == "sub":
            months, days, micros = -months, -days, -micros
        if isinstance(a, Const):
            start = a.value if a.type.kind == "timestamp" else dt.datetime.combine(a.value, dt.time())
            try:
                return Const(add_months_days(start, months, days) + dt.timedelta(microseconds=micros), t)
            except (OverflowError, ValueError):
                pass  # beyond Python's datetimes: computed by the engine, which holds it
        return Call("ts_add", (as_timestamp(a, t),), t, (months, days * DAY_MICROS + micros))
    return Call(op, (as_timestamp(a, t), b), t)  # microseconds added to microseconds


def as_timestamp(e: Expr, t: SqlType) -> Expr:
    """A date (its midnight) or timestamp as a TIMESTAMP, or WITH TIME ZONE (read in UTC)."""
    if e.type == t:
        return e
    if _is_null(e):
        return Const(None, t)
    if isinstance(e, Const):
        v = e.value if e.type.kind == "timestamp" else dt.datetime.combine(e.value, dt.time())
        return Const(v.replace(tzinfo=dt.UTC) if t.tz else v.replace(tzinfo=None), t)
    if e.type.kind == "date":
        return Call("date_to_ts", (e,), t)
    return Call("to_type", (e,), t, e.type)


def add_months_days(d, months: int, days: int):
    """A date or timestamp after adding months (the day cut to the month's last, as PostgreSQL) then
    days."""
    if months:
        m = d.month - 1 + months
        y, m = d.year + m // 12, m % 12 + 1
        d = d.replace(year=y, month=m, day=min(d.day, calendar.monthrange(y, m)[1]))
    return d + dt.timedelta(days=days)


# -- EXTRACT and date_part --------------------------------------------------------------------------------

_ALIASES = {
    "years": "year",
    "months": "month",
    "days": "day",
    "hours": "hour",
    "minutes": "minute",
    "seconds": "second",
    "milliseconds": "millisecond",
    "microseconds": "microsecond",
    "weeks": "week",
    "quarters": "quarter",
    "decades": "decade",
    "centuries": "century",
    "millennia": "millennium",
    "millenniums": "millennium",
    "epoch": "epoch",
}
_DATE_FIELDS = frozenset(
    {"year", "month", "day", "quarter", "week", "isoyear", "dow", "isodow", "doy", "epoch"}
    | {"decade", "century", "millennium"}
)
_TIME_FIELDS = frozenset({"hour", "minute", "second", "millisecond", "microsecond"})
_INTERVAL_FIELDS = frozenset(
    {"year", "month", "day", "quarter", "epoch", "decade", "century", "millennium"} | _TIME_FIELDS
)
# PostgreSQL's fields ivm does not compute
_OTHER_FIELDS = frozenset({"julian", "timezone", "timezone_hour", "timezone_minute"})


def extract(node: exp.Expression, field: str, x: Expr, double: bool = False) -> Expr:
    """``EXTRACT(field FROM x)`` of a date, timestamp or interval, as PostgreSQL's NUMERIC (in ivm's types:
    INTEGER-valued fields as BIGINT, SECOND as DECIMAL(8,6), MILLISECOND as DECIMAL(8,3), EPOCH of a timestamp
    or interval as DECIMAL(18,6)); ``double``: ``date_part``, DOUBLE PRECISION."""
    name = _ALIASES.get(field.lower(), field.lower())
    kind = x.type.kind
    if kind == "date" and double:  # date_part reads a date as the timestamp of its midnight
        x, kind = as_timestamp(x, TIMESTAMP), "timestamp"
    what = f"EXTRACT({field.upper()} FROM {x.type})" if not double else f"date_part('{field}', {x.type})"
    if _is_null(x) and x.type == _null_type():
        raise error_at(node, f"{what} is not supported", unsupported=True)
    if kind not in ("date", "timestamp", "interval"):
        raise error_at(node, f"{what} needs a date, timestamp or interval, got {x.type}")
    fields = {"date": _DATE_FIELDS, "timestamp": _DATE_FIELDS | _TIME_FIELDS, "interval": _INTERVAL_FIELDS}[
        kind
    ]
    if name not in fields:
        pg = {"date": "date", "interval": "interval"}.get(kind, x.type.pg_name)
        if (
            name in _OTHER_FIELDS
            and kind != "interval"
            and not (kind == "date" and name.startswith("timezone"))
        ):
            raise error_at(node, f"{what} is not supported", unsupported=True)
        known = name in _DATE_FIELDS | _TIME_FIELDS | _OTHER_FIELDS
        message = (
            f'unit "{field.lower()}" not supported for type {pg}'
            if known
            else f'unit "{field.lower()}" not recognized for type {pg}'
        )
        raise error_at(node, message, unsupported=known)
    if name == "second":
        t = decimal_type(8, 6) if kind != "interval" else decimal_type(18, 6)
    elif name == "millisecond":
        t = decimal_type(8, 3) if kind != "interval" else decimal_type(18, 3)
    elif name == "epoch" and kind != "date":
        t = decimal_type(18, 6)
    else:
        t = INT
    if _is_null(x):
        return Const(None, FLOAT if double else t)
    if isinstance(x, Const) and kind == "interval":
        value = _interval_field(name, *interval_value(x.value))
        out: Expr = Const(decimal.Decimal(value) if t.kind == "decimal" else int(value), t)
    else:
        out = Call("extract", (x,), t, name)
    if double:
        from sql.scalar import coerce

        out = coerce(node, out, FLOAT)
    return out


def _c_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def _interval_field(name: str, months: int, days: int, micros: int):
    """A field of an interval constant, as PostgreSQL's interval_part gives it (C's divisions, toward zero)."""
    year, month = _c_div(months, 12), months - _c_div(months, 12) * 12
    hour = _c_div(micros, 3_600_000_000)
    rest = micros - hour * 3_600_000_000
    minute = _c_div(rest, 60_000_000)
    within = rest - minute * 60_000_000  # microseconds of the minute, with their sign
    if name == "epoch":
        return (
            decimal.Decimal(31_557_600 * year + 2_592_000 * month + 86_400 * days) * 1_000_000 + micros
        ) / 10**6
    return {
        "microsecond": within,
        "millisecond": decimal.Decimal(within) / 1000,
        "second": decimal.Decimal(within) / 1_000_000,
        "minute": minute,
        "hour": hour,
        "day": days,
        "month": month,
        "quarter": _c_div(month, 3) + 1,
        "year": year,
        "decade": _c_div(year, 10),
        "century": _c_div(year, 100),
        "millennium": _c_div(year, 1000),
    }[name]


def date_part(node: exp.Anonymous, translate: Translate) -> Expr:
    """``date_part('field', x)``: EXTRACT in DOUBLE PRECISION."""
    args = node.expressions
    if len(args) != 2:
        raise error_at(node, "date_part takes a field and a value")
    field = args[0]
    if not (isinstance(field, exp.Literal) and field.is_string):
        raise error_at(field, "date_part needs a constant field name ('epoch')", unsupported=True)
    return extract(node, field.this, translate(args[1]), double=True)


# -- date_trunc and AT TIME ZONE ---------------------------------------------------------------------------

_TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")


def date_trunc(node: exp.TimestampTrunc, x: Expr) -> Expr:
    """``date_trunc('unit', x)`` of a timestamp (its type kept) or of a date, which PostgreSQL reads as a
    TIMESTAMP WITH TIME ZONE (in UTC here)."""
    unit = node.args["unit"].name.lower() if node.args.get("unit") is not None else ""
    if x.type.kind == "date":
        x = as_timestamp(x, TIMESTAMPTZ)
    if x.type.kind != "timestamp" or unit not in _TRUNC_UNITS:
        raise error_at(node, f"date_trunc({unit!r}, {x.type}) is not supported", unsupported=True)
    return Call("ts_trunc", (x,), x.type, unit)


def at_time_zone(node: exp.AtTimeZone, x: Expr) -> Expr:
    """``x AT TIME ZONE 'zone'``: of a TIMESTAMP WITH TIME ZONE, its wall time in ``zone`` (a TIMESTAMP); of a
    TIMESTAMP, the instant of that wall time in UTC only (a TIMESTAMP WITH TIME ZONE). Other zones would turn
    wall times back into instants, which is not supported."""
    import zoneinfo

    zone_node = node.args.get("zone")
    zone = zone_node.this if isinstance(zone_node, exp.Literal) and zone_node.is_string else None
    if zone is None:
        raise error_at(node, "AT TIME ZONE needs a constant zone name", unsupported=True)
    if _is_null(x) and x.type.kind != "timestamp":
        return Const(None, TIMESTAMP)
    if x.type.kind == "date":  # PostgreSQL reads a date as its midnight in the session's zone, UTC
        x = as_timestamp(x, TIMESTAMPTZ)
    if x.type.kind != "timestamp":
        raise error_at(node, f"AT TIME ZONE needs a TIMESTAMP, got {x.type}")
    if not x.type.tz:
        if zone.upper() not in ("UTC", "GMT", "Z", "ETC/UTC", "UCT"):
            raise error_at(
                node,
                f"TIMESTAMP AT TIME ZONE {zone!r} is not supported (it reads a wall time in that zone as an "
                "instant); only 'UTC', the session's time zone, is",
                unsupported=True,
            )
        return as_timestamp(x, TIMESTAMPTZ)
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
        raise error_at(zone_node, f"time zone {zone!r} not recognized") from err
    if isinstance(x, Const):
        return Const(x.value.astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None), TIMESTAMP)
    return Call("ts_zone", (x,), TIMESTAMP, ("UTC", zone))


# -- functions called by name -------------------------------------------------------------------------------

BY_NAME = frozenset({"date_part", "transaction_timestamp", "to_char", "to_date", "to_timestamp"})
_YEARS = frozenset({"YYYY", "YYY", "YY", "Y"})


def call_by_name(node: exp.Anonymous, translate: Translate) -> Expr:
    """``date_part``, ``transaction_timestamp()``, ``to_char``, ``to_date`` and ``to_timestamp``."""
    from sql.templates import FORMATTED, PARSED, parse_template

    name = str(node.this).lower()
    args = node.expressions
    if name == "date_part":
        return date_part(node, translate)
    if name == "transaction_timestamp":
        if args:
            raise error_at(node, "transaction_timestamp() takes no arguments")
        return current_time(node, "transaction_timestamp()")
    if name == "to_timestamp" and len(args) == 1:
        return _epoch_to_timestamp(node, translate(args[0]))
    if len(args) != 2:
        raise error_at(node, f"{name}() takes a value and a template")
    x = translate(args[0])
    fmt = args[1]
    if isinstance(fmt, exp.Null):
        return Const(None, {"to_char": _text(), "to_date": DATE}.get(name, TIMESTAMPTZ))
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise error_at(fmt, f"{name}() needs a constant template", unsupported=True)
    try:
        nodes = parse_template(fmt.this, FORMATTED if name == "to_char" else PARSED, f"{name}()")
    except UnsupportedError as err:
        raise error_at(fmt, err.message, unsupported=True) from None
    if name == "to_char":
        if x.type.kind == "date":
            x = as_timestamp(x, TIMESTAMPTZ)  # PostgreSQL reads a date as its midnight in the session's zone
        if _is_null(x):
            return Const(None, _text())
        if x.type.kind != "timestamp":
            what = "numbers" if x.type.numeric else "intervals" if x.type.kind == "interval" else str(x.type)
            raise error_at(node, f"to_char() of {what} is not supported", unsupported=True)
        return Call("to_char", (x,), _text(), (fmt.this, nodes))
    if x.type.kind != "text" and not _is_null(x):
        raise error_at(node, f"{name}() needs text, got {x.type}")
    if not any(n.kind == "pattern" and n.name in _YEARS for n in nodes):
        raise error_at(
            fmt,
            f"{name}() without a year in its template (YYYY) is not supported: PostgreSQL's answer is then in "
            "the year 1 BC, which ivm does not hold",
            unsupported=True,
        )
    t = DATE if name == "to_date" else TIMESTAMPTZ
    if _is_null(x):
        return Const(None, t)
    return Call(name, (x,), t, (fmt.this, nodes))  # a CHAR(n) value without its padding, as text


def _text() -> SqlType:
    from sql.types import TEXT

    return TEXT


def _epoch_to_timestamp(node: exp.Expression, x: Expr) -> Expr:
    """``to_timestamp(seconds)``: the instant that many seconds after 1970-01-01 00:00 UTC."""
    if _is_null(x):
        return Const(None, TIMESTAMPTZ)
    if not x.type.numeric:
        raise error_at(node, f"to_timestamp() needs a number of seconds, got {x.type}")
    from sql.scalar import coerce

    return Call("epoch_to_ts", (coerce(node, x, FLOAT),), TIMESTAMPTZ)
