"""Spark as the engine, measured: ``python -m connectors.bench spark-distributed [--sf 1] [--shards N]``.

One cluster (``local-cluster``: two executors of one core each, separate processes) runs, in turn, these
streaming queries over the same TPC-H change files (the Delta change data feed shape, one file per
micro-batch; the first is the initial load, then each refresh micro-batch holds one RF1 commit of new orders
with their lineitems and one RF2 commit deleting as many, 0.1% of the orders each by default):

- the sink with shards (``view_sink(..., shards=N, tasks=2)``), the views kept by both executors;
- the embedded sink (``view_sink(...)``), the whole engine in the driver;
- and Spark's own floor, no views kept: a sink that does nothing (the streaming trigger alone), and one that
  runs the stage a sink with shards runs, rows repartitioned into two barrier tasks that read and count them
  (``spark_floor_s_p50``). No sink on this cluster can beat the recompute by more than the recompute over
  that floor (``speedup_ceiling_vs_spark_sql``, the median over the queries).

Then, for ``scaling_1_to_2_cores``, a cluster of one executor of one core runs the sink with shards in one
task. (On the two-executor cluster Spark would place a single task on either executor from one micro-batch to
the next, and each move loads the shards afresh there.)

Per refresh micro-batch: latency from the file's arrival to the end of ``processAllAvailable`` and change
rows per second; and Spark SQL recomputing the same queries on the same cluster over the accumulated tables
(cached beforehand, not timed), three times after the stream. ``speedup_vs_spark_sql`` is the median over
the queries of each query's recompute time over the sharded sink's micro-batch latency (all queries
maintained together);
``speedup_vs_embedded_sink`` and ``scaling_1_to_2_cores`` are ratios of median micro-batch latencies.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from connectors.spark._sink import view_sink
from connectors.spark.bench import DEFAULT_QUERIES
from connectors.spark.bench import recompute as recompute_queries
from connectors.spark.local import cluster_session
from connectors.spark.tpch_stream import ChangeFiles
from tpch import SCHEMA
from tpch.data import generate, refresh_stream
from tpch.queries import query

__all__ = ["main"]


def _stream(spark, sink, stream, directory: Path, parts: int, recompute: list[str] | None = None) -> dict:
    """Run one streaming query of the change files into ``sink``: initial load time (``parts`` micro-batches),
    then per refresh micro-batch its latency and change rows (and, with ``recompute``, Spark SQL's time per
    query)."""
    files = ChangeFiles(stream, directory / "source")
    files.initial(parts)
    schema = spark.read.parquet(str(files.directory)).schema
    changes = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(files.directory))
    started = time.perf_counter()
    writing = changes.writeStream.foreachBatch(sink).option("checkpointLocation", str(directory / "ckpt"))
    handle = writing.start()
    out: dict = {"latency_s": [], "rows": [], "recompute_s": {q: [] for q in recompute or []}}
    try:
        handle.processAllAvailable()
        out["initial_s"] = time.perf_counter() - started
        for i in range(len(stream.batches)):
            rows = files.refresh(i).num_rows
            start = time.perf_counter()
            handle.processAllAvailable()
            out["latency_s"].append(time.perf_counter() - start)
            out["rows"].append(rows)
    finally:
        handle.stop()
    # Spark SQL's recompute is timed after the stream, over the final tables (they differ from those after
    # any one refresh batch by a fraction of a percent)
    for _ in range(3 if recompute else 0):
        for q, seconds in recompute_queries(spark, files, recompute).items():
            out["recompute_s"][q].append(seconds)
    return out


def _nothing(df, batch_id: int) -> None:
    """The floor sink: Spark's streaming trigger alone."""


def _one_stage(df, batch_id: int) -> None:
    """The floor sink of Spark's work per micro-batch with shards: one barrier stage of two tasks reading the
    rows, and their counts collected."""
    df.repartition(2).mapInArrow(_count, "rows long", barrier=True).collect()


def _count(batches):
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in batches)]})


def run(
    sf: float, batches: int, fraction: float, queries: list[str], shards: int, directory: Path, parts: int = 1
) -> dict:
    stream = refresh_stream(generate(sf), fraction=fraction, batches=batches, seed=7)
    views = {q: query(q) for q in queries}  # written for ivm's PostgreSQL dialect
    runs = {}

    def sink(label: str, tasks: int | None):
        state = directory / label / "state"
        if tasks is None:
            return view_sink(SCHEMA, views, state, dialect="postgres")
        return view_sink(SCHEMA, views, state, dialect="postgres", shards=shards, tasks=tasks)

    spark = cluster_session("ivm-bench-distributed", executors=2, cores=1, memory_mb=4096, driver_memory="4g")
    for label, tasks in (("sharded_2", 2), ("embedded", None)):
        kept = sink(label, tasks)
        runs[label] = _stream(spark, kept, stream, directory / label, parts, queries if tasks == 2 else None)
        kept.close()
    for label, floor in (("trigger", _nothing), ("one_stage", _one_stage)):
        runs[label] = _stream(spark, floor, stream, directory / label, parts)
    spark.stop()
    spark = cluster_session("ivm-bench-distributed-1", executors=1, cores=1, memory_mb=4096)
    kept = sink("sharded_1", 1)
    runs["sharded_1"] = _stream(spark, kept, stream, directory / "sharded_1", parts)
    kept.close()
    spark.stop()
    p50 = {label: statistics.median(r["latency_s"]) for label, r in runs.items()}
    main = runs["sharded_2"]
    per_query = {
        q: statistics.median(main["recompute_s"][q]) / p50["sharded_2"] for q in queries
    }  # each query's recompute over the micro-batch that maintains all of them
    ceiling = [statistics.median(main["recompute_s"][q]) / p50["one_stage"] for q in queries]
    floors = {label: round(p50.pop(label), 4) for label in ("trigger", "one_stage")}
    for label in floors:
        del runs[label]
    rows = sum(main["rows"])
    return {
        "sf": sf,
        "queries": queries,
        "shards": shards,
        "micro_batches": batches,
        "initial_parts": parts,
        "change_rows": rows,
        "initial_load_s": {label: round(r["initial_s"], 2) for label, r in runs.items()},
        "latency_s_p50": {label: round(v, 4) for label, v in p50.items()},
        "changes_per_s": {label: round(sum(r["rows"]) / sum(r["latency_s"]), 1) for label, r in runs.items()},
        "spark_sql_recompute_s_p50": {q: round(statistics.median(main["recompute_s"][q]), 4) for q in queries},
        "speedup_vs_spark_sql_by_query": {q: round(v, 2) for q, v in per_query.items()},
        "speedup_vs_spark_sql": round(statistics.median(per_query.values()), 2),
        "spark_floor_s_p50": floors,
        "speedup_ceiling_vs_spark_sql": round(statistics.median(ceiling), 2),
        "speedup_vs_embedded_sink": round(p50["embedded"] / p50["sharded_2"], 2),
        "scaling_1_to_2_cores": round(p50["sharded_1"] / p50["sharded_2"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m connectors.bench spark-distributed", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    parser.add_argument("--shards", type=int, default=4, help="shards per view (default 4)")
    parser.add_argument("--batches", type=int, default=5, help="refresh micro-batches (default 5)")
    parser.add_argument(
        "--fraction", type=float, default=0.005, help="orders inserted and deleted over all batches"
    )
    parser.add_argument(
        "--initial-parts", type=int, default=None, help="micro-batches of the initial load (default: 10 per SF)"
    )
    parser.add_argument("--queries", default=DEFAULT_QUERIES, help=f"comma-separated ({DEFAULT_QUERIES})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    with tempfile.TemporaryDirectory(prefix="ivm-spark-distributed-bench-") as tmp:
        parts = args.initial_parts or max(1, round(10 * args.sf))
        result = run(args.sf, args.batches, args.fraction, queries, args.shards, Path(tmp), parts)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"TPC-H SF {result['sf']:g}, {', '.join(queries)}, {result['shards']} shards, "
        f"local-cluster of 2 executors x 1 core; initial load in {result['initial_parts']} micro-batches, "
        f"{result['micro_batches']} refresh micro-batches, "
        f"{result['change_rows']} change rows"
    )
    print(f"{'':22s}{'initial load s':>16s}{'latency p50 ms':>16s}{'changes/s':>12s}")
    names = {"sharded_2": "shards, 2 tasks", "embedded": "embedded", "sharded_1": "shards, 1 executor"}
    for label, name in names.items():
        print(
            f"{name:22s}{result['initial_load_s'][label]:16.2f}{result['latency_s_p50'][label] * 1000:16.0f}"
            f"{result['changes_per_s'][label]:12.0f}"
        )
    for q in queries:
        print(
            f"Spark SQL recompute {q}: {result['spark_sql_recompute_s_p50'][q] * 1000:.0f} ms "
            f"-> {result['speedup_vs_spark_sql_by_query'][q]:.2f}x"
        )
    floor = result["spark_floor_s_p50"]
    print(
        f"Spark's floor per micro-batch: trigger {floor['trigger'] * 1000:.0f} ms, with one barrier stage "
        f"{floor['one_stage'] * 1000:.0f} ms -> speedup_ceiling_vs_spark_sql "
        f"{result['speedup_ceiling_vs_spark_sql']}"
    )
    print(
        f"speedup_vs_spark_sql {result['speedup_vs_spark_sql']}, speedup_vs_embedded_sink "
        f"{result['speedup_vs_embedded_sink']}, scaling_1_to_2_cores {result['scaling_1_to_2_cores']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
