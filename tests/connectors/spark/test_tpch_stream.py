"""A Structured Streaming query feeds TPC-H refresh changes (Delta change data feed shape, several commits per
micro-batch) into the sink; after every micro-batch each maintained query equals Spark SQL's recompute over the
accumulated tables, both as the Parquet contents output and as the sum of the diff DataFrames. A replayed
batch id changes no output; a stopped and restarted query (new sink, state opened from the state directory)
continues with correct results."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ivm
from connectors.spark import DiffsTo, ParquetContents, ParquetDiffs, view_sink
from connectors.spark.tpch_stream import ChangeFiles, spark_query
from tests.oracle import same_rows
from tpch import SCHEMA
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import query

QUERIES = ["q01", "q03", "q05", "q10", "q13", "q18", "q21"]


def rows(table: pa.Table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


def char_columns(queries: list[str]) -> dict[str, list[int]]:
    """Per query, the positions of its CHAR(n) columns, which ivm outputs padded to n and Spark SQL, reading
    the tables as strings, does not."""
    db = ivm.connect()
    db.execute(SCHEMA)
    out = {}
    for q in queries:
        types = [d[1] for d in db.execute(f"SELECT * FROM ({query(q)}) q LIMIT 0").description]
        out[q] = [i for i, t in enumerate(types) if t.startswith(("CHAR(", "BPCHAR"))]
    return out


def unpadded(rows: list[tuple], positions: list[int]) -> list[tuple]:
    return [
        tuple(v.rstrip(" ") if i in positions and v is not None else v for i, v in enumerate(r)) for r in rows
    ]


def net_rows(diffs: list[pa.Table]) -> list[tuple]:
    """The rows that a sequence of diff tables adds up to, each repeated by its multiplicity."""
    every = pa.concat_tables(diffs)
    columns = [c for c in every.column_names if c not in ("time", "diff")]
    net = every.group_by(columns).aggregate([("diff", "sum")])
    assert pc.min(net.column("diff_sum")).as_py() >= 0, "a row's multiplicity went negative"
    counts = net.column("diff_sum").to_numpy()
    return rows(net.select(columns).take(pa.array(np.repeat(np.arange(len(counts)), counts))))


class Harness:
    def __init__(self, spark, tmp):
        self.spark = spark
        self.tmp = tmp
        stream = refresh_stream(generate(0.01), fraction=0.03, batches=3, seed=5)
        self.files = ChangeFiles(stream, tmp / "source")
        self.diffs = {q: [] for q in QUERIES}
        self.calls = []
        self.spark_sql = {q: spark_query(q) for q in QUERIES}
        self.padded = char_columns(QUERIES)

    def record(self, view, df, batch_id):
        self.calls.append((view, batch_id))
        self.diffs[view].append(df.toArrow())

    def sink(self):
        outputs = [DiffsTo(self.record)]
        outputs += [ParquetContents(q, self.tmp / "out" / f"{q}.parquet") for q in QUERIES]
        outputs += [ParquetDiffs("q18", self.tmp / "out" / "q18_diffs")]
        views = {q: query(q) for q in QUERIES}
        # the TPC-H queries are written for ivm's PostgreSQL dialect
        ckpt = self.tmp / "ckpt.ivm"
        return view_sink(SCHEMA, views, ckpt, checkpoint_bytes=200_000, outputs=outputs, dialect="postgres")

    def start(self, sink, schema):
        changes = (
            self.spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.files.directory))
        )
        return (
            changes.writeStream.foreachBatch(sink).option("checkpointLocation", str(self.tmp / "ckpt")).start()
        )

    def check(self, label):
        for t in TABLES:
            self.spark.createDataFrame(self.files.tables[t]).createOrReplaceTempView(t)
        for q in QUERIES:
            expected = rows(self.spark.sql(self.spark_sql[q]).toArrow())
            contents = unpadded(rows(pq.read_table(self.tmp / "out" / f"{q}.parquet")), self.padded[q])
            assert same_rows(contents, expected), f"{q} contents {label}: {contents[:3]} vs {expected[:3]}"
            summed = unpadded(net_rows(self.diffs[q]), self.padded[q])
            assert same_rows(summed, expected), f"{q} diffs {label}: {summed[:3]} vs {expected[:3]}"

    def outputs_snapshot(self):
        out = self.tmp / "out"
        return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def harness(spark, tmp_path_factory):
    return Harness(spark, tmp_path_factory.mktemp("tpch_stream"))


def test_tpch_refresh_stream_matches_spark_sql_with_replay_and_restart(harness):
    h = harness
    h.files.initial()
    schema = h.spark.read.parquet(str(h.files.directory)).schema
    sink = h.sink()
    query_ = h.start(sink, schema)
    try:
        query_.processAllAvailable()
        h.check("after the initial load")
        for i in range(2):
            h.files.refresh(i)
            query_.processAllAvailable()
            h.check(f"after refresh batch {i + 1}")
    finally:
        query_.stop()
    batch_ids = sorted({b for _, b in h.calls})
    assert batch_ids == [0, 1, 2]
    # the time of each diff is its source commit: micro-batch 2 holds commits 3 (RF1) and 4 (RF2)
    assert set(pc.unique(h.diffs["q01"][-1].column("time")).to_pylist()) == {3, 4}

    # replaying the last micro-batch with its batch id changes no output
    before, calls = h.outputs_snapshot(), len(h.calls)
    sink(h.spark.read.schema(schema).parquet(str(h.files.directory / "changes-000002.parquet")), 2)
    assert h.outputs_snapshot() == before and len(h.calls) == calls

    # a new sink (as after a process restart) on the same checkpoint and state directory continues exactly
    sink.close()
    restarted = h.sink()
    h.files.refresh(2)
    query_ = h.start(restarted, schema)
    try:
        query_.processAllAvailable()
        h.check("after a restart and refresh batch 3")
    finally:
        query_.stop()
    assert sorted({b for _, b in h.calls}) == [0, 1, 2, 3]
    # another query (a new checkpoint location) on the same state directory is refused, naming both queries
    other = h.spark.readStream.schema(schema).parquet(str(h.files.directory)).writeStream
    stray = other.foreachBatch(restarted).option("checkpointLocation", str(h.tmp / "other_ckpt")).start()
    with pytest.raises(Exception, match="holds the state of streaming query"):
        stray.processAllAvailable()
    stray.stop()
    diff_files = sorted(p.name for p in (h.tmp / "out" / "q18_diffs").iterdir())
    assert all(name.startswith("batch-") for name in diff_files)


def test_benchmark_prints_throughput_and_speedup_as_json(spark, capsys):
    from connectors.bench import main

    assert main(["spark", "--sf", "0.01", "--batches", "1", "--queries", "q01", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["change_rows"] > 0 and result["rows_per_s"] > 0 and result["speedup_vs_recompute"] > 0
