"""CREATE TABLE statements from Spark and Arrow schemas: the table they declare takes the stream's rows."""

import decimal

import pyarrow as pa
import pytest
from pyspark.sql import types as T

import ivm
from connectors.spark import table_sql
from sql.errors import SqlError
from sql.spark import schema_types

SPARK = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("qty", T.IntegerType()),
        T.StructField("price", T.DecimalType(15, 2)),
        T.StructField("ratio", T.DoubleType()),
        T.StructField("name", T.StringType()),
        T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("wall", T.TimestampNTZType()),
        T.StructField("ok", T.BooleanType()),
        T.StructField("_change_type", T.StringType()),
    ]
)


def test_spark_schema_declares_a_table_that_takes_arrow_rows():
    sql = table_sql("items", SPARK, primary_key=["id"], skip=["_change_type"])
    assert sql == (
        "CREATE TABLE items (id BIGINT NOT NULL, qty INTEGER, price DECIMAL(15,2), ratio DOUBLE, name TEXT, "
        "day DATE, at TIMESTAMP WITH TIME ZONE, wall TIMESTAMP, ok BOOLEAN, PRIMARY KEY (id))"
    )
    db = ivm.connect()
    db.execute(schema_types(sql)[0])  # as the sink declares it: instants held as TIMESTAMP in UTC
    rows = pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "qty": pa.array([2], pa.int32()),
            "price": pa.array([decimal.Decimal("3.25")], pa.decimal128(15, 2)),
            "ratio": [0.5],
            "name": ["x"],
            "day": pa.array([19000], pa.int32()).cast(pa.date32()),
            "at": pa.array([1_000_000], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "wall": pa.array([1_000_000], pa.int64()).cast(pa.timestamp("us")),
            "ok": [True],
        }
    )
    db.insert_arrow("items", rows)
    assert db.execute("SELECT id, qty, price, name, ok FROM items").fetchall() == [
        (1, 2, decimal.Decimal("3.25"), "x", True)
    ]


def test_arrow_schema_declares_the_same_table():
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("qty", pa.int32()),
            pa.field("price", pa.decimal128(15, 2)),
        ]
    )
    assert table_sql("t", schema) == "CREATE TABLE t (id BIGINT NOT NULL, qty INTEGER, price DECIMAL(15,2))"


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            T.StructType([T.StructField("xs", T.ArrayType(T.IntegerType()))]),
            "column 'xs': Spark type array<int>",
        ),
        (T.StructType([T.StructField("d", T.DecimalType(30, 2))]), "DECIMAL(30,2) is wider than the 18 digits"),
        (
            T.StructType([T.StructField("Name", T.StringType())]),
            "column 'Name' of table 't' is not a lower-case",
        ),
        (pa.schema([pa.field("u", pa.uint64())]), "column 'u': Arrow type uint64"),
        (T.StructType([T.StructField("a", T.StringType())]), "primary key column 'b'"),
    ],
)
def test_columns_ivm_cannot_hold_are_named(schema, message):
    with pytest.raises(SqlError) as err:
        table_sql("t", schema, primary_key=["b"] if "primary" in message else ())
    assert message in str(err.value)
