"""The 22 TPC-H queries at scale factor 0.01 and three recursive views (transitive closure, shortest paths with
MIN, connected components) kept by Spark in shards on a multi-process cluster (``connectors.spark.distributed``)
through refresh micro-batches: after each, every view (its diffs added up) equals the embedded engine's, and
each TPC-H view equals DuckDB's recompute. Run by test_distributed.py in a process of its own; prints one line
of JSON: what was checked."""

from __future__ import annotations

import collections
import json
import random
import sys

import duckdb
import pyarrow as pa

import ivm
from connectors.spark.distributed import DistributedViews
from connectors.spark.local import cluster_session
from ivm.db.arrow import arrow_type
from tests.connectors.spark.distributed_child import add_diffs, bag
from tests.oracle import same_rows, unpadded
from tests.sql.test_recursive import MUTUAL, SCHEMA, STANDARD, _row, mutual_sql
from tpch import SCHEMA as TPCH_SCHEMA
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import QUERIES, query

GRAPH = ["e", "w", "roots"]


def main(state: str, shards: int, batches: int) -> None:
    spark = cluster_session("ivm-distributed-tpch", executors=2, cores=1)
    schema = "; ".join([TPCH_SCHEMA.strip().rstrip(";"), *[s for s in SCHEMA if s.split()[2] in GRAPH]])
    views = {q: query(q) for q in QUERIES}
    views["tc"] = STANDARD["tc"]
    for name in ("sssp", "components"):
        views[name] = mutual_sql(*MUTUAL[name])
    stream = refresh_stream(generate(0.01), fraction=0.05, batches=batches, seed=2)
    rng = random.Random(7)
    one = ivm.connect()
    one.execute(schema)
    for name, sql in views.items():
        one.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    duck = duckdb.connect()
    duck.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    duck.execute(TPCH_SCHEMA)
    kept = DistributedViews(spark, schema, views, state, shards=shards, tasks=2)
    arrow = {
        t: pa.schema([pa.field(c.name, arrow_type(c.type)) for c in table.columns])
        for t, table in kept.tables.items()
    }
    graph = {t: [] for t in GRAPH}
    contents = {v: collections.Counter() for v in views}
    checked = []
    for batch in range(batches + 1):
        if batch == 0:
            changes = {t: (stream.initial[t], None) for t in TABLES}
        else:
            changes = dict(stream.batches[batch - 1])
        for t in GRAPH:
            new = [_row(rng, t) for _ in range(20 if batch == 0 else 3)]
            gone = rng.sample(graph[t], min(len(graph[t]), 0 if batch == 0 else 2))
            for r in gone:
                graph[t].remove(r)
            graph[t] += new
            rows = [
                pa.table({c: [r[i] for r in part] for i, c in enumerate(arrow[t].names)}, schema=arrow[t])
                for part in (new, gone)
            ]
            changes[t] = (rows[0], rows[1] if gone else None)
        frames = {}
        one.execute("BEGIN")
        for t, (ins, dels) in changes.items():
            ins = ins.cast(arrow[t]) if ins is not None else None
            dels = dels.cast(arrow[t]) if dels is not None and dels.num_rows else None
            if dels is not None:
                one.delete_arrow(t, dels)
            if ins is not None and ins.num_rows:
                one.insert_arrow(t, ins)
            frames[t] = tuple(
                None if x is None or not x.num_rows else spark.createDataFrame(x) for x in (ins, dels)
            )
            if t in TABLES:
                if ins is not None and ins.num_rows:
                    duck.register("incoming", ins)
                    duck.execute(f"INSERT INTO {t} SELECT * FROM incoming")
                    duck.unregister("incoming")
                if dels is not None:
                    key = {"orders": "o_orderkey", "lineitem": "l_orderkey"}[t]
                    duck.register("gone", dels)
                    duck.execute(f"DELETE FROM {t} WHERE {key} IN (SELECT {key} FROM gone)")
                    duck.unregister("gone")
        one.execute("COMMIT")
        diffs = kept.apply(batch, frames)
        assert kept.afresh == (2 if batch == 0 else 0), (batch, kept.afresh)  # the workers keep their shards
        for v, df in diffs.items():
            add_diffs(contents[v], df, batch)
            want = bag(one.execute(f"SELECT * FROM {v}").fetch_arrow())
            assert contents[v] == want, (batch, v)
            if v in QUERIES:
                got = unpadded(one.execute(f"SELECT * FROM {v}"))
                assert same_rows(got, duck.execute(query(v)).fetchall()), (batch, v)
        checked.append(batch)
    spark.stop()
    print(json.dumps({"batches": checked, "views": sorted(views)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
