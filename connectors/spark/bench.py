"""Spark sink benchmark: ``python -m connectors.bench spark [--sf 0.1] [--batches 5] [--json]``.

A Structured Streaming query (``local[2]``, a Parquet file source with one file per micro-batch) feeds TPC-H
changes in the Delta change data feed shape to the sink, which maintains the chosen queries and writes each
one's contents to Parquet. The first micro-batch is the initial load; then each refresh micro-batch holds one
RF1 commit (new orders with their lineitems) and one RF2 commit (deleted orders with theirs).

Reported per refresh micro-batch: the latency from the file's arrival to the end of ``processAllAvailable``
(Spark reading the file, the Arrow transfer, the engine, the outputs), the time spent inside the sink, and
Spark SQL's recompute of the same queries over the accumulated tables (cached in Spark's memory beforehand,
not timed), collected to Arrow. ``rows_per_s`` is change rows over micro-batch latency;
``speedup_vs_recompute`` is recompute time over micro-batch latency, both summed over the refresh batches.

Then the sink's own cost per micro-batch, without Spark (``ViewSink.apply`` on Arrow micro-batches of 10
inserted rows, each table loaded with 1,000 rows first): 20 tables with a GROUP BY view each, of which one
changes per micro-batch (in turn), with a ``DiffsTo(arrow=True)`` and a ``ParquetContents`` on every view
(``views20_one_changes_ms_per_batch``); the same with 1 table and view (``views1_ms_per_batch``); and the 20
views into one ``ParquetContentsSet`` instead (``views20_one_changes_set_ms_per_batch``). Medians in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from connectors.spark._changes import plain
from connectors.spark._contents import ParquetContentsSet
from connectors.spark._outputs import DiffsTo, ParquetContents
from connectors.spark._sink import ViewSink, view_sink
from connectors.spark.local import local_session
from connectors.spark.tpch_stream import ChangeFiles, spark_query
from ivm.engine.allocator import tune_allocator
from tpch import SCHEMA
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import query

__all__ = ["main"]

DEFAULT_QUERIES = "q01,q03,q05,q10,q18"


class _Timed:
    """The sink, with the time spent inside each call recorded."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.seconds: list[float] = []

    def __call__(self, df, batch_id: int) -> None:
        start = time.perf_counter()
        self.sink(df, batch_id)
        self.seconds.append(time.perf_counter() - start)


def run(sf: float, batches: int, fraction: float, queries: list[str], directory: Path) -> dict:
    spark = local_session("ivm-bench", memory="6g")
    stream = refresh_stream(generate(sf), fraction=fraction, batches=batches, seed=7)
    files = ChangeFiles(stream, directory / "source")
    views = {q: query(q) for q in queries}
    outputs = [ParquetContents(q, directory / "out" / f"{q}.parquet") for q in queries]
    # the TPC-H queries are written for ivm's PostgreSQL dialect
    sink = _Timed(view_sink(SCHEMA, views, directory / "ckpt.ivm", outputs=outputs, dialect="postgres"))

    files.initial()
    schema = spark.read.parquet(str(files.directory)).schema
    changes = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(files.directory))
    started = time.perf_counter()
    streaming = changes.writeStream.foreachBatch(sink).option("checkpointLocation", str(directory / "ckpt"))
    handle = streaming.start()
    try:
        handle.processAllAvailable()
        initial_s = time.perf_counter() - started
        latencies, recomputes, rows = [], [], 0
        for i in range(batches):
            rows += files.refresh(i).num_rows
            start = time.perf_counter()
            handle.processAllAvailable()
            latencies.append(time.perf_counter() - start)
            recomputes.append(sum(recompute(spark, files, queries).values()))
    finally:
        handle.stop()
    inside = sink.seconds[1:]
    return {
        "sf": sf,
        "queries": queries,
        "micro_batches": batches,
        "change_rows": rows,
        "initial_load_s": round(initial_s, 3),
        "latency_s_p50": round(statistics.median(latencies), 4),
        "latency_s_max": round(max(latencies), 4),
        "sink_s_p50": round(statistics.median(inside), 4),
        "recompute_s_p50": round(statistics.median(recomputes), 4),
        "rows_per_s": round(rows / sum(latencies), 1),
        "speedup_vs_recompute": round(sum(recomputes) / sum(latencies), 2),
    }


def per_batch_ms(directory: Path, n_views: int, contents_set: bool = False, batches: int = 60) -> float:
    """The median time of ``ViewSink.apply`` per micro-batch (after 10 to warm up) for ``n_views`` GROUP BY
    views over as many tables, one of which changes per micro-batch, every view with a ``DiffsTo(arrow=True)``
    and its contents in Parquet (a ``ParquetContents`` each, or one ``ParquetContentsSet``)."""
    schema = " ".join(f"CREATE TABLE t{i} (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT);" for i in range(n_views))
    views = {f"v{i}": f"SELECT g, COUNT(*) AS n, SUM(v) AS total FROM t{i} GROUP BY g" for i in range(n_views)}
    outputs = [DiffsTo(lambda view, diffs, batch_id: None, arrow=True)]
    if contents_set:
        outputs.append(ParquetContentsSet(directory / "contents"))
    else:
        outputs += [ParquetContents(v, directory / "out" / f"{v}.parquet") for v in views]
    sink = ViewSink(schema, views, directory / "state", shape=plain(), outputs=outputs)
    load = pa.concat_tables([_inserts(f"t{i}", 0, 1_000) for i in range(n_views)])
    sink.apply(load, 0)
    seconds = []
    for b in range(1, batches + 1):
        changes = _inserts(f"t{b % n_views}", 1_000 + 10 * b, 10)
        start = time.perf_counter()
        sink.apply(changes, b)
        seconds.append(time.perf_counter() - start)
    sink.close()
    return round(statistics.median(seconds[10:]) * 1000, 2)


def _inserts(table: str, first: int, n: int) -> pa.Table:
    """``n`` inserted rows of ``table`` in the plain shape, keys from ``first``."""
    k = np.arange(first, first + n, dtype=np.int64)
    return pa.table(
        {"k": k, "g": k % 100, "v": k * 3, "operation": pa.repeat("insert", n), "table": pa.repeat(table, n)}
    )


def overhead(directory: Path) -> dict:
    """The sink's own cost per micro-batch, without Spark (see the module's docstring)."""
    return {
        "views20_one_changes_ms_per_batch": per_batch_ms(directory / "v20", 20),
        "views1_ms_per_batch": per_batch_ms(directory / "v1", 1),
        "views20_one_changes_set_ms_per_batch": per_batch_ms(directory / "v20set", 20, contents_set=True),
    }


def recompute(spark, files: ChangeFiles, queries: list[str]) -> dict[str, float]:
    """Seconds for Spark SQL to compute each query over the accumulated tables (loaded and cached first: read
    from Parquet files beside the change files, not sent from the driver)."""
    cached = []
    for t in TABLES:
        path = files.directory.parent / "tables" / f"{t}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(files.tables[t], path)
        df = spark.read.parquet(str(path)).cache()
        df.count()
        df.createOrReplaceTempView(t)
        cached.append(df)
    seconds = {}
    for q in queries:
        start = time.perf_counter()
        spark.sql(spark_query(q)).toArrow()
        seconds[q] = time.perf_counter() - start
    for df in cached:
        df.unpersist()
    return seconds


def main(argv: list[str] | None = None) -> int:
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    parser = argparse.ArgumentParser(
        prog="python -m connectors.bench spark", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    parser.add_argument("--batches", type=int, default=5, help="refresh micro-batches (default 5)")
    parser.add_argument(
        "--fraction",
        type=float,
        default=0.005,
        help="share of the orders inserted and deleted, over all batches",
    )
    parser.add_argument(
        "--queries", default=DEFAULT_QUERIES, help=f"comma-separated (default {DEFAULT_QUERIES})"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    with tempfile.TemporaryDirectory(prefix="ivm-spark-bench-") as tmp:
        result = run(args.sf, args.batches, args.fraction, queries, Path(tmp))
        result.update(overhead(Path(tmp) / "overhead"))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"TPC-H SF {result['sf']:g}, queries {', '.join(queries)}, Spark local[2]")
        print(f"initial load micro-batch: {result['initial_load_s']:.2f} s")
        print(
            f"{result['micro_batches']} refresh micro-batches, {result['change_rows']} change rows: "
            f"{result['rows_per_s']:.0f} rows/s"
        )
        ms = {k: result[k] * 1000 for k in ("latency_s_p50", "latency_s_max", "sink_s_p50", "recompute_s_p50")}
        print(
            f"micro-batch latency p50 {ms['latency_s_p50']:.0f} ms, max {ms['latency_s_max']:.0f} ms "
            f"(inside the sink p50 {ms['sink_s_p50']:.0f} ms)"
        )
        print(
            f"Spark SQL recompute of the same queries per micro-batch: p50 {ms['recompute_s_p50']:.0f} ms "
            f"-> speedup {result['speedup_vs_recompute']:.2f}x"
        )
        print(
            "the sink alone per micro-batch (Arrow, no Spark): 20 views, one changing "
            f"{result['views20_one_changes_ms_per_batch']:.1f} ms; "
            f"1 view {result['views1_ms_per_batch']:.1f} ms; "
            f"20 views into a contents set {result['views20_one_changes_set_ms_per_batch']:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
