"""Outputs on Arrow micro-batches (no Spark): a view a micro-batch leaves unchanged costs no call, no
DataFrame and no file write."""

import decimal

import pyarrow as pa
import pyarrow.parquet as pq

from connectors.spark import DiffsTo, ParquetContents, view_sink
from tests.connectors.spark.test_sink import SCHEMA, SHAPE, change_rows, rows

UNCHANGED_VIEWS = {
    "by_cust": "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust",
    "regions": "SELECT region, COUNT(*) AS n FROM customers GROUP BY region",
    "negative": "SELECT cust FROM orders WHERE cust < 0",
}


def order(key, cust):
    return pa.table(
        {"o_key": [key], "cust": [cust], "total": pa.array([decimal.Decimal("1.00")]), "note": ["n"]}
    )


def customer(key, region):
    return change_rows("customers", "insert", key, pa.table({"c_key": [key], "region": [region]}))


class FakeSpark:
    """Counts the DataFrames made from Arrow tables."""

    def __init__(self):
        self.frames = []

    def createDataFrame(self, table):  # noqa: N802 - Spark's name
        self.frames.append(table)
        return table


def test_a_view_left_unchanged_costs_no_call_frame_or_file_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"cust": [99]}), out / "negative.parquet")  # left by an earlier query
    calls, spark = [], FakeSpark()
    outputs = [DiffsTo(lambda view, diffs, batch_id: calls.append((view, batch_id)))]
    outputs += [ParquetContents(v, out / f"{v}.parquet") for v in UNCHANGED_VIEWS]
    sink = view_sink(SCHEMA, UNCHANGED_VIEWS, tmp_path / "state", shape=SHAPE, outputs=outputs)
    reads = []
    contents_of = sink._contents_of

    def counted(view):
        read = contents_of(view)
        return lambda: (reads.append(view), read())[1]

    sink._contents_of = counted
    batch = pa.concat_tables(
        [change_rows("orders", "insert", 1, order(1, 7)), customer(2, "x")], promote_options="permissive"
    )
    sink.apply(batch, 0, spark=spark)
    # the first micro-batch of a process writes every contents file: none left by another query passes for its
    assert calls == [("by_cust", 0), ("regions", 0)] and len(spark.frames) == 2
    assert sorted(reads) == sorted(UNCHANGED_VIEWS) and rows(pq.read_table(out / "negative.parquet")) == []
    before = {v: (out / f"{v}.parquet").stat().st_mtime_ns for v in UNCHANGED_VIEWS}
    reads.clear()
    sink.apply(customer(3, "y"), 1, spark=spark)
    assert calls[2:] == [("regions", 1)] and len(spark.frames) == 3
    assert reads == ["regions"]
    after = {v: (out / f"{v}.parquet").stat().st_mtime_ns for v in UNCHANGED_VIEWS}
    assert after["by_cust"] == before["by_cust"] and after["negative"] == before["negative"]
    assert pq.read_schema(out / "by_cust.parquet").metadata[b"ivm.batch_id"] == b"0"  # written at batch 0
    assert pq.read_schema(out / "regions.parquet").metadata[b"ivm.batch_id"] == b"1"
    diffs = sink.apply(change_rows("orders", "insert", 4, order(2, 8)), 2, spark=spark)
    assert diffs["regions"].num_rows == 0 and diffs["regions"].column_names == ["region", "n", "time", "diff"]
    assert calls[3:] == [("by_cust", 2)]
    sink.close()
