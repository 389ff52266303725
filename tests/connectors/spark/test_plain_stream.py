"""A streaming query of change rows in the plain shape (one table, an operation column and a commit column;
the table declared from the stream's schema) hands each micro-batch's view diffs to a user function as a Spark
DataFrame, one logical time per source commit, updates as a retraction and an insertion."""

import pyarrow as pa
import pyarrow.parquet as pq

from connectors.spark import DiffsTo, ParquetDiffs, plain, table_sql, view_sink

VIEW = "SELECT sensor, COUNT(*) AS n, SUM(value) AS total FROM readings GROUP BY sensor"


def changes(rows):
    op, lsn, ids, sensors, values = zip(*rows, strict=True)
    return pa.table(
        {
            "op": list(op),
            "lsn": pa.array(lsn, pa.int64()),
            "id": pa.array(ids, pa.int32()),
            "sensor": list(sensors),
            "value": pa.array(values, pa.float64()),
        }
    )


def test_plain_change_rows_give_diff_dataframes_per_commit(spark, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    got = []

    def collect(view, df, batch_id):
        assert view == "by_sensor" and set(df.columns) == {"sensor", "n", "total", "time", "diff"}
        got.append((batch_id, sorted(tuple(d.values()) for d in df.toArrow().to_pylist())))

    batches = [
        [
            ("insert", 10, 1, "a", 1.5),
            ("insert", 10, 2, "a", 2.0),
            ("insert", 10, 3, "b", 4.0),
            ("update_preimage", 11, 2, "a", 2.0),
            ("update_postimage", 11, 2, "b", 0.5),
        ],
        [("delete", 12, 1, "a", 1.5), ("insert", 13, 4, "a", 3.0)],
    ]
    pq.write_table(changes(batches[0]), source / "0.parquet")
    schema = spark.read.parquet(str(source)).schema
    # the table is declared from the stream's own schema
    declared = table_sql("readings", schema, primary_key=["id"], skip=["op", "lsn"])
    assert declared == "CREATE TABLE readings (id INTEGER, sensor TEXT, value DOUBLE, PRIMARY KEY (id))"
    sink = view_sink(
        declared,
        {"by_sensor": VIEW},
        tmp_path / "state",
        shape=plain(operation="op", commit="lsn", table="readings"),
        outputs=[DiffsTo(collect), ParquetDiffs("by_sensor", tmp_path / "diffs")],
    )
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt")).start()
    try:
        query.processAllAvailable()
        pq.write_table(changes(batches[1]), source / "1.parquet")
        query.processAllAvailable()
    finally:
        query.stop()
    assert got == [
        (
            0,
            sorted(
                [
                    ("a", 2, 3.5, 10, 1),
                    ("b", 1, 4.0, 10, 1),
                    ("a", 2, 3.5, 11, -1),
                    ("a", 1, 1.5, 11, 1),
                    ("b", 1, 4.0, 11, -1),
                    ("b", 2, 4.5, 11, 1),
                ]
            ),
        ),
        (1, sorted([("a", 1, 1.5, 12, -1), ("a", 1, 3.0, 13, 1)])),
    ]
    appended = spark.read.parquet(str(tmp_path / "diffs")).toArrow()
    assert appended.num_rows == 8 and sorted(appended.column("time").to_pylist()) == [
        10,
        10,
        11,
        11,
        11,
        11,
        12,
        13,
    ]
