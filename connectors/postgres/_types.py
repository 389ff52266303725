"""Postgres column types: which ivm can represent, and converting their text form into Arrow columns.

Values arrive as Postgres' text output (from pgoutput and from COPY ... CSV), read with ``TimeZone = UTC`` and
``DateStyle = ISO``. A whole column of them is converted with one Arrow cast; ``timestamptz`` values are held
as UTC timestamps, ``real`` values as the doubles Postgres widens them to, ``char(n)`` without its padding
(as Postgres compares and concatenates it); ``bpchar`` without a length is not represented (a primary key of it
is held as text without its trailing spaces, as Postgres compares such keys). A value of a representable type
that ivm still cannot hold (numeric 'NaN', a timestamp at infinity or before year 1) becomes NULL and is
reported as a bad value: the views that read its column are in error until it is gone (``_changes.BadValues``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["PgType", "pg_type", "text_to_arrow", "UnsupportedType", "SUPPORTED", "BPCHAR"]

_INT = {21: "int2", 23: "int4", 20: "int8"}
FLOAT4, FLOAT8 = 700, 701
TEXT, VARCHAR, BPCHAR = 25, 1043, 1042
DATE, TIMESTAMP, TIMESTAMPTZ, BOOL, NUMERIC = 1082, 1114, 1184, 16, 1700
SUPPORTED = (
    "smallint, integer, bigint, numeric(p,s) with p <= 18, real, double precision, text, varchar, char(n), "
    "date, timestamp, timestamptz, boolean"
)


class UnsupportedType(ValueError):
    pass


@dataclass(frozen=True)
class PgType:
    """A source column's type: ``oid``/``typmod`` as Postgres reports them, ``shown`` as Postgres formats it,
    ``sql`` its ivm SQL type."""

    oid: int
    typmod: int
    sql: str
    arrow: pa.DataType
    shown: str = ""


def pg_type(oid: int, typmod: int, shown: str) -> PgType:
    """The ivm representation of a Postgres type, or ``UnsupportedType`` naming it (``shown`` is how Postgres
    formats the type, used in messages)."""
    if oid in _INT:
        return PgType(oid, typmod, "BIGINT", pa.int64(), shown)
    if oid in (FLOAT4, FLOAT8):
        return PgType(oid, typmod, "DOUBLE", pa.float64(), shown)
    if oid == BPCHAR:
        if typmod < 5:
            # bpchar without a length: each value keeps its own trailing spaces, shown but ignored by
            # comparisons and length(); ivm holds character(n) padded to n, and varchar and text whose spaces
            # count, so no type of its gives Postgres' answers (see ``sql.chars``)
            raise UnsupportedType(
                f"{shown} (a character without a length: its values keep their own trailing spaces, shown but "
                "ignored when compared, as no ivm type does; declare the column character(n), varchar or text)"
            )
        # trailing spaces are insignificant in char(n); ivm's CHAR(n) drops them on the way in
        return PgType(oid, typmod, f"CHAR({typmod - 4})", pa.string(), shown)
    if oid == VARCHAR:  # compared with char(n) as Postgres does, without trailing spaces; varchar(n) keeps n
        return PgType(oid, typmod, f"VARCHAR({typmod - 4})" if typmod >= 5 else "VARCHAR", pa.string(), shown)
    if oid == TEXT:
        return PgType(oid, typmod, "TEXT", pa.string(), shown)
    if oid == DATE:
        return PgType(oid, typmod, "DATE", pa.date32(), shown)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return PgType(oid, typmod, "TIMESTAMP", pa.timestamp("us"), shown)
    if oid == BOOL:
        return PgType(oid, typmod, "BOOLEAN", pa.bool_(), shown)
    if oid == NUMERIC:
        if typmod < 4:
            raise UnsupportedType(f"{shown} without a precision (ivm needs numeric(p,s) with p <= 18)")
        p, s = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        if p > 18:
            raise UnsupportedType(f"{shown} (ivm represents numeric(p,s) exactly only for p <= 18)")
        return PgType(oid, typmod, f"DECIMAL({p},{s})", pa.decimal128(p, s), shown)
    raise UnsupportedType(f"{shown} (supported: {SUPPORTED})")


def text_to_arrow(values: pa.Array, t: PgType) -> tuple[pa.Array, np.ndarray | None]:
    """A string (or binary) Arrow array of Postgres text values as a typed array of ``t.arrow``, and a mask of
    the values ivm cannot hold (NULL in the array), or None when there are none."""
    if pa.types.is_binary(values.type):
        values = values.cast(pa.string())
    if t.oid == BOOL:
        return pc.equal(values, "t"), None
    if t.oid == BPCHAR:
        return pc.utf8_rtrim(values, " "), None
    if t.oid in (TEXT, VARCHAR):
        return values, None
    if t.oid == TIMESTAMPTZ:
        # with TimeZone = UTC every value ends in +00
        values = pc.replace_substring_regex(values, r"\+00$", "")
    target = pa.float32() if t.oid == FLOAT4 else t.arrow
    try:
        out = values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bad = _unreadable(values, target)
        out = pc.if_else(pa.array(bad), pa.nulls(len(values), values.type), values).cast(target)
    else:
        bad = None
    if t.oid == FLOAT4:  # exactly the double Postgres computes with
        out = out.cast(pa.float64())
    return out, bad


def _unreadable(values: pa.Array, target: pa.DataType) -> np.ndarray:
    """Which values do not cast to ``target``: halves that fail are split until each failing value is found
    (a few casts per bad value; bad values are rare)."""
    bad = np.zeros(len(values), dtype=bool)
    stack = [(0, len(values))]
    while stack:
        lo, hi = stack.pop()
        try:
            values.slice(lo, hi - lo).cast(target)
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        if hi - lo == 1:
            bad[lo] = True
        else:
            mid = (lo + hi) // 2
            stack += [(lo, mid), (mid, hi)]
    return bad
