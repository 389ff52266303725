"""SQL types, their values, and how the engine holds them (the encoding itself is ``planner.values``).

| SQL | engine |
| --- | --- |
| SMALLINT, INTEGER, BIGINT | int64, computed in the type's width (16, 32 or 64 bits) |
| NUMERIC/DECIMAL(p, s), p <= 18 | int64 scaled by 10**s (exact sums) |
| REAL, DOUBLE PRECISION | float64 |
| TEXT, VARCHAR, CHAR(n) | int64 code into the engine's string pool (CHAR(n) without its trailing spaces) |
| DATE | int32 days since 1970-01-01 |
| TIMESTAMP | int64 microseconds since 1970-01-01 |
| BOOLEAN | bool |

NULL is a validity mask beside each column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
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
]

_DTYPES = {
    "int": np.dtype(np.int64),
    "decimal": np.dtype(np.int64),
    "float": np.dtype(np.float64),
    "text": np.dtype(np.int64),
    "date": np.dtype(np.int32),
    "timestamp": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}


@dataclass(frozen=True)
class SqlType:
    """A column type: ``kind`` is one of int, decimal, float, text, date, timestamp, bool. An int's
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
    def pg_name(self) -> str:
        """The type's name as PostgreSQL's input functions write it in their errors."""
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
        return {
            "float": "DOUBLE",
            "text": "TEXT",
            "date": "DATE",
            "timestamp": "TIMESTAMP",
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
    if t == exp.DataType.Type.TIMESTAMP:
        return f"type {text} is not supported; TIMESTAMP keeps 6 fractional digits"
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
            value = dt.datetime.fromisoformat(value)
        if not isinstance(value, dt.datetime):
            raise TypeError(f"{value!r} is not a timestamp")
        return value
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
        text = value.isoformat(sep=" ")
        return text.rstrip("0") if "." in text else text  # fractional seconds without trailing zeros
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
    if t.kind in ("date", "timestamp"):
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
