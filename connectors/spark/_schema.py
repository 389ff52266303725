"""CREATE TABLE statements from the schemas Spark or Arrow already know, so a sink can be declared from a
stream's own schema instead of SQL written by hand."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa

from sql.errors import SqlError

__all__ = ["table_sql"]

_NAME = re.compile(r"[a-z_][a-z0-9_]*$")
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)$")
_SPARK = {
    "tinyint": "INTEGER",
    "smallint": "INTEGER",
    "int": "INTEGER",
    "bigint": "BIGINT",
    "float": "DOUBLE",
    "double": "DOUBLE",
    "string": "TEXT",
    "date": "DATE",
    "timestamp": "TIMESTAMP WITH TIME ZONE",  # an instant
    "timestamp_ntz": "TIMESTAMP",  # a wall time
    "boolean": "BOOLEAN",
}


def table_sql(name: str, schema, primary_key: Sequence[str] = (), skip: Sequence[str] = ()) -> str:
    """``CREATE TABLE name (...)`` for a Spark ``StructType`` or a ``pyarrow.Schema``: columns in order,
    NOT NULL where the schema says so, ``primary_key`` if given; columns named in ``skip`` (such as the
    change columns ``_change_type``, ``_commit_version``) are left out. Spark's ``timestamp`` (an instant;
    in Arrow one with a time zone) is ``TIMESTAMP WITH TIME ZONE``, ``timestamp_ntz`` is ``TIMESTAMP``.
    Raises ``SqlError`` naming a column whose name or type ivm cannot hold."""
    if isinstance(schema, pa.Schema):
        columns = [(f.name, _arrow_type(f.name, f.type), f.nullable) for f in schema]
    else:  # a Spark StructType: its fields' simpleString() names the type
        columns = [(f.name, _spark_type(f.name, f.dataType.simpleString()), f.nullable) for f in schema.fields]
    columns = [c for c in columns if c[0] not in set(skip)]
    if not columns:
        raise SqlError(f"table {name!r} would have no columns")
    for col, _, _ in columns:
        if not _NAME.match(col):
            raise SqlError(
                f"column {col!r} of table {name!r} is not a lower-case identifier; rename it "
                "(e.g. withColumnRenamed) before it reaches the sink"
            )
    names = {c[0] for c in columns}
    missing = [k for k in primary_key if k not in names]
    if missing:
        raise SqlError(f"primary key column {missing[0]!r} is not a column of table {name!r}")
    parts = [f"{col} {sql}{'' if nullable else ' NOT NULL'}" for col, sql, nullable in columns]
    if primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(primary_key)})")
    return f"CREATE TABLE {name} ({', '.join(parts)})"


def _decimal(column: str, precision: int, scale: int) -> str:
    if precision > 18:
        raise SqlError(f"column {column!r}: DECIMAL({precision},{scale}) is wider than the 18 digits ivm holds")
    return f"DECIMAL({precision},{scale})"


def _spark_type(column: str, name: str) -> str:
    if name in _SPARK:
        return _SPARK[name]
    if name.startswith(("varchar(", "char(")):
        return "TEXT"
    m = _DECIMAL.match(name)
    if m:
        return _decimal(column, int(m.group(1)), int(m.group(2)))
    raise SqlError(f"column {column!r}: Spark type {name} has no ivm equivalent")


def _arrow_type(column: str, t: pa.DataType) -> str:
    if pa.types.is_integer(t) and t != pa.uint64():
        return "BIGINT" if t.bit_width == 64 else "INTEGER"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "TEXT"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz is not None else "TIMESTAMP"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_decimal(t):
        return _decimal(column, t.precision, t.scale)
    raise SqlError(f"column {column!r}: Arrow type {t} has no ivm equivalent")
