"""Postgres column types: which ivm can represent, and converting their text form into Arrow columns.

Values arrive as Postgres' text output (from pgoutput and from COPY ... CSV), read with ``TimeZone = UTC`` and
``DateStyle = ISO``. A whole column of them is converted with one Arrow cast; ``timestamptz`` values are held
as UTC timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["PgType", "pg_type", "text_to_arrow", "UnsupportedType"]

_INT = {21: "int2", 23: "int4", 20: "int8"}
_FLOAT = {700: "float4", 701: "float8"}
_TEXT = {25: "text", 1043: "varchar", 1042: "bpchar"}
DATE, TIMESTAMP, TIMESTAMPTZ, BOOL, NUMERIC = 1082, 1114, 1184, 16, 1700
SUPPORTED = (
    "smallint, integer, bigint, numeric(p,s) with p <= 18, real, double precision, text, varchar, char, date, "
    "timestamp, timestamptz, boolean"
)


class UnsupportedType(ValueError):
    pass


@dataclass(frozen=True)
class PgType:
    """A source column's type: ``oid``/``typmod`` as Postgres reports them, ``sql`` its ivm SQL type."""

    oid: int
    typmod: int
    sql: str
    arrow: pa.DataType


def pg_type(oid: int, typmod: int, shown: str) -> PgType:
    """The ivm representation of a Postgres type, or ``UnsupportedType`` naming it (``shown`` is how Postgres
    formats the type, used in the message)."""
    if oid in _INT:
        return PgType(oid, typmod, "BIGINT", pa.int64())
    if oid in _FLOAT:
        return PgType(oid, typmod, "DOUBLE", pa.float64())
    if oid in _TEXT:
        return PgType(oid, typmod, "TEXT", pa.string())
    if oid == DATE:
        return PgType(oid, typmod, "DATE", pa.date32())
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return PgType(oid, typmod, "TIMESTAMP", pa.timestamp("us"))
    if oid == BOOL:
        return PgType(oid, typmod, "BOOLEAN", pa.bool_())
    if oid == NUMERIC:
        if typmod < 4:
            raise UnsupportedType(f"{shown} without a precision (ivm needs numeric(p,s) with p <= 18)")
        p, s = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        if p > 18:
            raise UnsupportedType(f"{shown} (ivm represents numeric(p,s) exactly only for p <= 18)")
        return PgType(oid, typmod, f"DECIMAL({p},{s})", pa.decimal128(p, s))
    raise UnsupportedType(f"{shown} (supported: {SUPPORTED})")


def text_to_arrow(values: pa.Array, t: PgType, column: str) -> pa.Array:
    """A string (or binary) Arrow array of Postgres text values as a typed array of ``t.arrow``."""
    if pa.types.is_binary(values.type):
        values = values.cast(pa.string())
    try:
        if t.oid == BOOL:
            return pc.equal(values, "t")
        if t.oid == TIMESTAMPTZ:
            # with TimeZone = UTC every value ends in +00
            values = pc.replace_substring_regex(values, r"\+00$", "")
        if t.oid in _TEXT:
            return values
        return values.cast(t.arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise UnsupportedType(f"column {column!r}: a value cannot be read as {t.sql}: {err}") from err
