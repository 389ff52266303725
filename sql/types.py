"""SQL types, their values, and how the engine holds them (the encoding itself is ``planner.values``).

| SQL | engine |
| --- | --- |
| SMALLINT, INTEGER, BIGINT | int64, computed in the type's width (16, 32 or 64 bits) |
| NUMERIC/DECIMAL(p, s), p <= 18 | int64 scaled by 10**s (exact sums) |
| REAL, DOUBLE PRECISION | float64 |
| TEXT, VARCHAR, CHAR(n) | int64 code into the engine's string pool (CHAR(n) without its trailing spaces) |
| DATE | int32 days since 1970-01-01 |
| TIMESTAMP | int64 microseconds since 1970-01-01 |
| TIMESTAMP WITH TIME ZONE | int64 microseconds since 1970-01-01 UTC (the session time zone is UTC) |
| INTERVAL (values of ``timestamp - timestamp``) | int64 microseconds (days of 24 hours and a time of day) |
| BOOLEAN | bool |

NULL is a validity mask beside each column.

The session's time zone is UTC, always: a TIMESTAMP WITH TIME ZONE is shown, extracted from, truncated and
compared with a TIMESTAMP or DATE in UTC, and a constant written with an offset is read as its instant.

An interval constant is (months, days, microseconds), as PostgreSQL holds one. A column of intervals holds what
``timestamp - timestamp`` gives: no months, and days of 24 hours with a time of day of the same sign under 24
hours (PostgreSQL's ``justify_hours``), so one number of microseconds says it exactly, and compares, groups and
shows as PostgreSQL's interval does. A constant of any other shape (``INTERVAL '1 month'``, ``INTERVAL '25
hours'``) may be added to dates and timestamps and compared with intervals, but is not a value of a column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from sql.errors import UnsupportedError

__all__ = [
    "SqlType",
    "INT",
    "INTEGER",
    "SMALLINT",
    "FLOAT",
    "TEXT",
    "VARCHAR",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMPTZ",
    "INTERVAL",
    "BOOL",
    "Domain",
    "decimal_type",
    "char_type",
    "varchar_type",
    "domain_of",
    "from_sqlglot",
    "unsupported_type",
    "sql_value",
    "parse_text",
    "format_text",
    "sql_literal",
    "parse_interval",
    "interval_text",
    "interval_value",
    "justified",
    "DAY_MICROS",
]

_DTYPES = {
    "int": np.dtype(np.int64),
    "decimal": np.dtype(np.int64),
    "float": np.dtype(np.float64),
    "text": np.dtype(np.int64),
    "date": np.dtype(np.int32),
    "timestamp": np.dtype(np.int64),
    "interval": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}


@dataclass(frozen=True)
class SqlType:
    """A column type: ``kind`` is one of int, decimal, float, text, date, timestamp, interval, bool. A
    timestamp's ``scale`` is 1 for TIMESTAMP WITH TIME ZONE (held alike, in UTC). An int's
    ``precision`` is its width in bits, 16 (SMALLINT) or 32 (INTEGER), or 0 for BIGINT's 64; every width is
    held in int64 and arithmetic fails where a result leaves the width, as PostgreSQL's does.

    Text is PostgreSQL's family of string types, told apart by ``precision`` and ``scale``: TEXT (0, 0),
    VARCHAR (0, 1), CHAR(n) (n, 0), and PostgreSQL's ``character`` without a length (bpchar) whose values are
    all CHAR(n) values (n, 1), such as MAX of a CHAR(n) column. A CHAR value is held without its trailing
    spaces and shown padded to n (see ``sql.chars``). VARCHAR(n) is VARCHAR with ``length`` n, as
    PostgreSQL's typmod carries it: a column of VARCHAR(n) and what passes it on unchanged (a reference, a
    CASE or COALESCE of VARCHAR(n) values alone) are VARCHAR(n), and everything else PostgreSQL types without
    the length (see ``sql.chars.common_string_type``)."""

    kind: str
    precision: int = 0
    scale: int = 0
    length: int = 0

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.kind]

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "decimal", "float")

    @property
    def bits(self) -> int:
        """An integer type's width in bits."""
        return self.precision or 64

    @property
    def pad(self) -> int:
        """The width a CHAR(n) or bpchar value is shown padded to with spaces; 0 for other types."""
        return self.precision if self.kind == "text" else 0

    @property
    def varchar(self) -> bool:
        """Whether this is VARCHAR (compared with a CHAR without trailing spaces, unlike TEXT)."""
        return self.kind == "text" and self.precision == 0 and self.scale == 1

    @property
    def tz(self) -> bool:
        """Whether this is TIMESTAMP WITH TIME ZONE."""
        return self.kind == "timestamp" and self.scale == 1

    @property
    def pg_name(self) -> str:
        """The type's name as PostgreSQL's input functions write it in their errors."""
        if self.tz:
            return "timestamp with time zone"
        if self.kind == "int":
            return {16: "smallint", 32: "integer"}.get(self.precision, "bigint")
        return {"decimal": "numeric", "float": "double precision", "bool": "boolean"}.get(self.kind, self.kind)

    def __str__(self) -> str:
        if self.varchar and self.length:
            return f"VARCHAR({self.length})"
        if self.kind == "text" and (self.precision or self.scale):
            return "VARCHAR" if not self.precision else "BPCHAR" if self.scale else f"CHAR({self.precision})"
        if self.kind == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.kind == "int":
            return {16: "SMALLINT", 32: "INTEGER"}.get(self.precision, "BIGINT")
        if self.tz:
            return "TIMESTAMPTZ"
        return {
            "float": "DOUBLE",
            "text": "TEXT",
            "date": "DATE",
            "timestamp": "TIMESTAMP",
            "interval": "INTERVAL",
            "bool": "BOOLEAN",
        }[self.kind]


INT = SqlType("int")  # BIGINT
INTEGER = SqlType("int", 32)
SMALLINT = SqlType("int", 16)
FLOAT = SqlType("float")
TEXT = SqlType("text")
VARCHAR = SqlType("text", 0, 1)
DATE = SqlType("date")
TIMESTAMP = SqlType("timestamp")
TIMESTAMPTZ = SqlType("timestamp", 0, 1)
INTERVAL = SqlType("interval")
BOOL = SqlType("bool")


def decimal_type(precision: int, scale: int) -> SqlType:
    if precision > 18:
        raise UnsupportedError(f"DECIMAL({precision},{scale}) exceeds the supported precision of 18 digits")
    return SqlType("decimal", precision, scale)


def char_type(n: int, declared: bool = True) -> SqlType:
    """CHAR(n); with ``declared`` False, PostgreSQL's ``character`` without a length holding CHAR(n) values."""
    return SqlType("text", n, 0 if declared else 1)


def varchar_type(n: int) -> SqlType:
    """VARCHAR(n): VARCHAR whose values are at most n characters long."""
    return SqlType("text", 0, 1, n)


_INTS = {exp.DataType.Type.SMALLINT: SMALLINT, exp.DataType.Type.INT: INTEGER, exp.DataType.Type.BIGINT: INT}
_FLOATS = {exp.DataType.Type.DOUBLE}
_VARCHARS = {exp.DataType.Type.VARCHAR, exp.DataType.Type.NVARCHAR}
_CHARS = {exp.DataType.Type.CHAR, exp.DataType.Type.NCHAR}


def from_sqlglot(dtype: exp.DataType) -> SqlType | None:
    """The SqlType of a sqlglot data type, or None when ivm cannot represent it exactly: REAL (4-byte floats),
    NUMERIC without a precision (unbounded), TIMESTAMP with fewer than 6 fractional digits, and types it has
    no engine representation for."""
    t = dtype.this
    params = dtype.expressions
    if t in _INTS:
        return _INTS[t]
    if t in _FLOATS:
        return FLOAT
    if t == exp.DataType.Type.TEXT:
        return TEXT
    if t in _VARCHARS:
        if not params:
            return VARCHAR
        n = _param(params[0])
        return varchar_type(n) if n is not None and n >= 1 else None
    if t in _CHARS:
        n = _param(params[0]) if params else 1  # CHAR alone is CHAR(1)
        return char_type(n) if n is not None and n >= 1 else None
    if t == exp.DataType.Type.DATE:
        return DATE
    if t == exp.DataType.Type.TIMESTAMP:
        return TIMESTAMP if not params or _param(params[0]) == 6 else None
    if t == exp.DataType.Type.TIMESTAMPTZ:
        return TIMESTAMPTZ if not params or _param(params[0]) == 6 else None
    if t == exp.DataType.Type.BOOLEAN:
        return BOOL
    if t == exp.DataType.Type.DECIMAL and params:
        precision = _param(params[0])
        scale = _param(params[1]) if len(params) > 1 else 0
        if precision is None or scale is None or not precision >= 1 or not 0 <= scale <= precision:
            return None
        return decimal_type(precision, scale)
    return None


def _param(p: exp.Expression) -> int | None:
    v = p.this if isinstance(p, exp.DataTypeParam) else p
    if isinstance(v, exp.Literal) and not v.is_string and v.this.isdigit():
        return int(v.this)
    return None


@dataclass(frozen=True)
class Domain:
    """What a declared type allows beyond the engine type holding it, named as PostgreSQL names the type:
    the range of SMALLINT and INTEGER, the length of VARCHAR(n) and CHAR(n), and CHAR's trailing spaces,
    which are insignificant (dropped on the way in, as PostgreSQL drops them whenever a CHAR value is
    compared, measured or converted to text)."""

    name: str
    low: int | None = None
    high: int | None = None
    length: int | None = None
    padded: bool = False


_RANGES = {
    exp.DataType.Type.SMALLINT: ("smallint", -(2**15), 2**15 - 1),
    exp.DataType.Type.INT: ("integer", -(2**31), 2**31 - 1),
}


def domain_of(dtype: exp.DataType) -> Domain | None:
    """The domain of a declared type, or None when its engine type allows exactly what it does."""
    t = dtype.this
    if t in _RANGES:
        name, low, high = _RANGES[t]
        return Domain(name, low=low, high=high)
    if t in (exp.DataType.Type.CHAR, exp.DataType.Type.NCHAR):
        n = _param(dtype.expressions[0]) if dtype.expressions else 1  # CHAR alone is CHAR(1)
        return Domain(f"character({n})", length=n, padded=True)
    if t in (exp.DataType.Type.VARCHAR, exp.DataType.Type.NVARCHAR) and dtype.expressions:
        n = _param(dtype.expressions[0])
        return Domain(f"character varying({n})", length=n)
    return None


def unsupported_type(dtype: exp.DataType) -> str:
    """Why a declared type that ``from_sqlglot`` does not take is refused, in SQL's words."""
    t = dtype.this
    text = dtype.sql(dialect="postgres")
    if t == exp.DataType.Type.FLOAT:
        return f"type {text} (a 4-byte float) is not supported; use DOUBLE PRECISION"
    if t == exp.DataType.Type.DECIMAL and not dtype.expressions:
        return f"type {text} without a precision is not supported; declare NUMERIC(p, s) with p <= 18"
    if t == exp.DataType.Type.DECIMAL:
        return f"type {text} is not supported; NUMERIC(p, s) needs 1 <= p <= 18 and 0 <= s <= p"
    if t in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ):
        return f"type {text} is not supported; TIMESTAMP keeps 6 fractional digits"
    if t == exp.DataType.Type.INTERVAL:
        return f"type {text} is not supported for a column (intervals are values of date and time arithmetic)"
    if t in (exp.DataType.Type.TIME, exp.DataType.Type.TIMETZ):
        return f"type {text} is not supported (a time of day without a date); use TIMESTAMP"
    return f"type {text} is not supported"


def sql_value(value: object, t: SqlType) -> object:
    """A Python value as the SQL value of type ``t`` (int, Decimal at the type's scale, float, str, date,
    datetime, bool; None is NULL); TypeError or ValueError when it is not one or does not fit."""
    if value is None:
        return None
    k = t.kind
    if k == "int":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if isinstance(value, (float, decimal.Decimal)) and value == int(value):
                return int(value)
            raise TypeError(f"{value!r} is not an integer")
        v = int(value)
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"{v} is out of range for BIGINT")
        return v  # a narrower width is a domain, checked where the value is stored
    if k == "decimal":
        d = decimal.Decimal(str(value)) if not isinstance(value, decimal.Decimal) else value
        scaled = d.scaleb(t.scale).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP)
        if abs(scaled) >= 10**t.precision:
            raise ValueError(f"{value} does not fit in {t}")
        return scaled.scaleb(-t.scale)
    if k == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal, np.number)):
            raise TypeError(f"{value!r} is not a number")
        return float(value)
    if k == "text":
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not text")
        return value.rstrip(" ") if t.pad else value  # a CHAR value's trailing spaces are insignificant
    if k == "date":
        if isinstance(value, str):
            value = dt.date.fromisoformat(value)
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise TypeError(f"{value!r} is not a date")
        return value
    if k == "timestamp":
        if isinstance(value, str):
            value = _timestamp_text(value)
        if not isinstance(value, dt.datetime):
            raise TypeError(f"{value!r} is not a timestamp")
        if t.tz:  # an instant, in UTC; a wall time without a zone is read in the session's (UTC)
            return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
        return value.replace(tzinfo=None)  # PostgreSQL's TIMESTAMP ignores a zone written with it
    if k == "interval":
        return interval_value(value)
    if k == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{value!r} is not a boolean")
        return bool(value)
    raise AssertionError(k)


_TRUE = {"t", "true", "y", "yes", "on", "1"}
_FALSE = {"f", "false", "n", "no", "off", "0"}


def parse_text(text: str, t: SqlType) -> object:
    """A text value read as type ``t`` the way PostgreSQL reads input (surrounding blanks ignored), as an SQL
    value; ValueError naming the text when it is not one."""
    s = text.strip()
    try:
        if "_" in s and t.kind in ("int", "decimal", "float"):
            raise ValueError  # Python reads 1_000 as a number, PostgreSQL does not
        if t.kind == "int":
            return sql_value(int(s), t)
        if t.kind == "decimal":
            return sql_value(decimal.Decimal(s), t)
        if t.kind == "float":
            return float(s)
        if t.kind == "bool":
            low = s.lower()
            if low in _TRUE or low in _FALSE:
                return low in _TRUE
            raise ValueError
        if t.kind in ("date", "timestamp"):
            return sql_value(s, t)
        if t.kind == "interval":
            return parse_interval(s)
    except (ValueError, ArithmeticError, TypeError):
        pass
    else:
        if t.kind == "text":
            return text
    raise ValueError(f'invalid input syntax for type {t.pg_name}: "{text}"')


def format_text(value: object, t: SqlType) -> str:
    """An SQL value written as PostgreSQL writes it as text."""
    if t.kind == "decimal":
        return format(value, "f")  # never in exponent notation
    if t.kind == "date":
        return value.isoformat()
    if t.kind == "timestamp":
        if t.tz:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        text = value.isoformat(sep=" ")
        text = text.rstrip("0") if "." in text else text  # fractional seconds without trailing zeros
        return text + "+00" if t.tz else text
    if t.kind == "interval":
        return interval_text(*interval_value(value))
    if t.kind == "bool":
        return "true" if value else "false"
    if t.kind == "float":
        return _float_text(float(value))
    return str(value)


def _float_text(f: float) -> str:
    """A double as PostgreSQL's float8out writes it: the shortest digits that read back as the value, in
    positional notation when the leading digit's place is from 10**-4 to 10**14 (without a trailing ``.0``),
    else as ``1.5e+20`` with at least two digits of exponent; -0.0 as ``-0``.

    >>> [_float_text(v) for v in (1.0, -0.0, 1e15, 0.0001, 1e-05, 123456.5, float("nan"))]
    ['1', '-0', '1e+15', '0.0001', '1e-05', '123456.5', 'NaN']
    """
    if f != f:
        return "NaN"
    if f in (math.inf, -math.inf):
        return "Infinity" if f > 0 else "-Infinity"
    shortest = decimal.Decimal(repr(f)).normalize()  # repr: the shortest digits that read back as f
    sign, digits, exponent = shortest.as_tuple()
    place = exponent + len(digits) - 1  # of the leading digit
    if -4 <= place < 15:
        return format(shortest, "f")
    text = "".join(map(str, digits))
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if place < 0 else '+'}{abs(place):02d}"


def sql_literal(value: object, t: SqlType) -> str:
    """An SQL value written as a constant of SQL: 'BRASS', DATE '1995-03-15', 0.05, NULL."""
    if value is None:
        return "NULL"
    if t.kind == "text":
        return "'" + str(value).replace("'", "''") + "'"
    if t.kind in ("date", "timestamp", "interval"):
        return f"{t} '{format_text(value, t)}'"
    if t.kind == "bool":
        return "TRUE" if value else "FALSE"
    if t.kind == "float" and not math.isfinite(value):
        return f"'{format_text(value, t)}'::DOUBLE"
    if t.kind == "float":
        return repr(float(value))  # a constant of SQL that reads back as a double, never as an integer
    if t.kind in ("int", "decimal"):
        return format_text(value, t)
    return repr(value)


def _timestamp_text(text: str) -> dt.datetime:
    """A timestamp written as PostgreSQL reads one in ISO form: a date, a time of day, and optionally an offset
    (``+02``, ``-01:30``, ``Z``) or the zone ``UTC``/``GMT``; ValueError otherwise (other zone names
    included)."""
    s = text.strip()
    low = s.lower()
    for name in (" utc", " gmt", " z"):
        if low.endswith(name):
            s = s[: -len(name)].rstrip() + "+00:00"
            break
    if s[-1:].isalpha() and not s.endswith("Z") and re.search(r"\d\s*[A-Za-z][A-Za-z_/+-]*$", s):
        raise UnsupportedError(f"time zone names in timestamps are not supported ({text!r}); write an offset")
    return dt.datetime.fromisoformat(s)


# -- intervals ------------------------------------------------------------------------------------------------

DAY_MICROS = 86_400_000_000
_HOUR = 3_600_000_000
_MINUTE = 60_000_000
_SECOND = 1_000_000

# PostgreSQL's units of interval input (its ``deltatktbl``, names compared in their first 10 characters):
# (unit, microseconds or days or months it counts, in which field)
_UNITS: dict[str, tuple[str, int, str]] = {}
for _names, _unit, _size, _field in [
    (("us", "usec", "usecs", "useconds", "microsecon"), "microsecond", 1, "us"),
    (("ms", "msec", "msecs", "mseconds", "millisecon"), "millisecond", 1_000, "us"),
    (("s", "sec", "secs", "second", "seconds"), "second", _SECOND, "us"),
    (("m", "min", "mins", "minute", "minutes"), "minute", _MINUTE, "us"),
    (("h", "hr", "hrs", "hour", "hours"), "hour", _HOUR, "us"),
    (("d", "day", "days"), "day", 1, "day"),
    (("w", "week", "weeks"), "week", 7, "day"),
    (("mon", "mons", "month", "months"), "month", 1, "month"),
    (("y", "yr", "yrs", "year", "years"), "year", 12, "month"),
    (("dec", "decs", "decade", "decades"), "decade", 120, "month"),
    (("c", "cent", "century", "centuries"), "century", 1200, "month"),
    (("mil", "mils", "millennia", "millennium"), "millennium", 12000, "month"),
]:
    for _name in _names:
        _UNITS[_name] = (_unit, _size, _field)

_INTERVAL_TOKEN = re.compile(
    r"\s*(?:(?P<time>[+-]?\d+:\d+(?::\d+(?:\.\d*)?)?)|(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"|(?P<word>[a-z@]+))"
)


def parse_interval(text: str, field: str | None = None) -> tuple[int, int, int]:
    """An interval written as PostgreSQL's input reads it, as (months, days, microseconds): numbers with
    units (``1 year 2 mons 3 days``, ``1.5 hours``, ``90 minutes``; a fraction spills into the smaller units
    as PostgreSQL's does), a time ``[-]hh:mm[:ss[.ffffff]]``, ``@`` before and ``ago`` after; a number alone
    counts seconds, or ``field`` (``INTERVAL '2' HOUR``), which also drops what is smaller than it. ValueError
    for anything else (``NotSupportedError`` for the ISO 8601 and SQL standard forms, ``P1D`` and ``1-2``)."""
    s = text.strip().lower()
    if re.fullmatch(r"[+-]?p.*|[+-]?\d+-\d+.*|[+-]?\d+ [+-]?\d+:.*", s):
        raise UnsupportedError(
            f"interval {text!r}: the ISO 8601 and SQL standard forms are not supported; write units ('1 day')"
        )
    months = days = micros = 0
    seen: set[str] = set()
    at, pending, ago, items = 0, None, False, 0
    while at < len(s):
        m = _INTERVAL_TOKEN.match(s, at)
        if m is None or m.end() == at:
            if s[at:].strip() == "":
                break
            raise ValueError(text)
        at = m.end()
        if ago:
            raise ValueError(text)  # nothing follows ``ago``
        if m.group("time"):
            if pending is not None or seen & {"time", "hour", "minute", "second"}:
                raise ValueError(text)
            seen.add("time")
            micros += _time_micros(m.group("time"), text)
            items += 1
        elif m.group("number"):
            if pending is not None:
                raise ValueError(text)
            pending = m.group("number")
        else:
            word = m.group("word")
            if word == "@" and items == 0 and pending is None:
                continue
            if word == "ago" and pending is None and items:
                ago = True
                continue
            unit = _UNITS.get(word[:10])
            if unit is None or pending is None:
                raise ValueError(text)
            name, size, kind = unit
            if name in seen or (name in ("hour", "minute", "second") and "time" in seen):
                raise ValueError(text)
            seen.add(name)
            dm, dd, du = _amount(pending, name, size, kind)
            months, days, micros = months + dm, days + dd, micros + du
            pending, items = None, items + 1
    if pending is not None:  # a number without a unit: seconds, or the field named after the string
        name = field.lower() if field else "second"
        if name in seen or (items and field is None):
            raise ValueError(text)
        unit = _UNITS[name if name != "minute" else "min"]
        dm, dd, du = _amount(pending, *unit)
        months, days, micros = months + dm, days + dd, micros + du
        items += 1
    if not items:
        raise ValueError(text)
    if ago:
        months, days, micros = -months, -days, -micros
    if field:
        months, days, micros = _truncated(months, days, micros, field.lower())
    return months, days, micros


def _time_micros(time: str, text: str) -> int:
    sign = -1 if time.startswith("-") else 1
    parts = time.lstrip("+-").split(":")
    hours, minutes = int(parts[0]), int(parts[1])
    seconds = decimal.Decimal(parts[2]) if len(parts) > 2 else decimal.Decimal(0)
    if minutes > 59 or seconds >= 60:
        raise ValueError(text)
    total = (
        hours * _HOUR + minutes * _MINUTE + int((seconds * _SECOND).to_integral_value(decimal.ROUND_HALF_EVEN))
    )
    return sign * total


def _amount(number: str, name: str, size: int, kind: str) -> tuple[int, int, int]:
    """``number`` of a unit as (months, days, microseconds), a fraction spilling into smaller units as
    PostgreSQL's ``DecodeInterval`` spills it (in double precision, as it does)."""
    whole = int(float(number)) if "." in number else int(number)
    frac = float(number) - whole if "." in number else 0.0
    if kind == "us":
        return 0, 0, whole * size + _round_half_away(frac * size)
    if kind == "day":
        days = whole * size
        if not frac:
            return 0, days, 0
        spill = frac * size
        extra = int(spill)
        return 0, days + extra, _round_half_away((spill - extra) * DAY_MICROS)
    if name == "month":
        if not frac:
            return whole, 0, 0
        spill = frac * 30
        extra = int(spill)
        return whole, extra, _round_half_away((spill - extra) * DAY_MICROS)
    return whole * size + int(_rint(frac * size)), 0, 0  # years and longer: whole months


def _round_half_away(x: float) -> int:
    """``(int64) x`` plus one where the fraction left is beyond a half, as PostgreSQL rounds microseconds."""
    whole = int(x)
    rest = x - whole
    return whole + (1 if rest > 0.5 else -1 if rest < -0.5 else 0)


def _rint(x: float) -> float:
    return float(round(x))  # C's rint: to the nearest, ties to even, as Python's round


def _truncated(months: int, days: int, micros: int, field: str) -> tuple[int, int, int]:
    """An interval cut to a field named after its string (``INTERVAL '1 day 2 hours' DAY`` is 1 day), toward
    zero, as PostgreSQL's typmod cuts it."""
    if field == "year":
        return _trunc_div(months, 12) * 12, 0, 0
    if field == "month":
        return months, 0, 0
    if field == "day":
        return months, days, 0
    unit = {"hour": _HOUR, "minute": _MINUTE}.get(field)
    if unit is None:
        return months, days, micros
    return months, days, _trunc_div(micros, unit) * unit


def interval_value(value: object) -> tuple[int, int, int]:
    """An interval as (months, days, microseconds), from that triple or a ``timedelta`` (the days and time of
    day of a column's interval, see ``justified``)."""
    if isinstance(value, dt.timedelta):
        return justified(value // dt.timedelta(microseconds=1))
    if isinstance(value, tuple) and len(value) == 3 and all(isinstance(v, int) for v in value):
        return value
    if isinstance(value, str):
        return parse_interval(value)
    raise TypeError(f"{value!r} is not an interval")


def justified(micros: int) -> tuple[int, int, int]:
    """Microseconds as PostgreSQL's ``timestamp - timestamp`` gives them: whole days of 24 hours and a time of
    day under 24 hours of the same sign, no months."""
    days = _trunc_div(micros, DAY_MICROS)
    return 0, days, micros - days * DAY_MICROS


def interval_text(months: int, days: int, micros: int) -> str:
    """An interval as PostgreSQL writes it (IntervalStyle postgres): ``1 year 2 mons -3 days +04:05:06.5``."""
    parts = []
    before = False
    for value, unit in ((_trunc_div(months, 12), "year"), (_trunc_rem(months, 12), "mon"), (days, "day")):
        if value:
            parts.append(f"{'+' if before and value > 0 else ''}{value} {unit}{'s' if value != 1 else ''}")
            before = value < 0
    if not parts or micros:
        sign = "-" if micros < 0 else "+" if before else ""
        a = abs(micros)
        hours, rest = divmod(a, _HOUR)
        minutes, rest = divmod(rest, _MINUTE)
        seconds, fraction = divmod(rest, _SECOND)
        text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
        if fraction:
            text += f".{fraction:06d}".rstrip("0")
        parts.append(text)
    return " ".join(parts)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def _trunc_rem(a: int, b: int) -> int:
    return a - _trunc_div(a, b) * b
