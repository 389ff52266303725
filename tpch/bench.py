"""TPC-H maintenance benchmark: ``python -m tpch.bench [--sf 1] [--json] [--queries q01,q03]``.

Per query, on one core:
(a) throughput: the whole data set arrives as insertions into all eight tables, then the refresh streams (RF1
    inserts new orders with their lineitems, RF2 deletes old ones), cut into transactions of 1,000 and of 10,000
    changed rows: changed input rows per second;
(b) latency of one small source transaction (one new order with its lineitems, or one order deleted with its
    lineitems) against the fully loaded data: p50 and p99;
(c) DuckDB's full recompute of the same query on the same data, with one thread;
(d) memory held by the query's arrangements and running states; and for all 22 queries in one engine against
    22 engines.
``--all-views`` measures instead one small transaction with all 22 views in one database, and with 200 more
views it does not reach (``tpch.all_views``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import pyarrow as pa

import ivm
from ivm.engine.allocator import tune_allocator
from tpch import SCHEMA
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import QUERIES, query

__all__ = ["main"]


def _changes(stream) -> list[tuple[str, pa.Table, int]]:
    """(table, rows, sign) pieces in arrival order: the load, then the refresh batches."""
    out = [(t, stream.initial[t], 1) for t in TABLES]
    for batch in stream.batches:
        out += [("orders", batch["orders"][0], 1), ("lineitem", batch["lineitem"][0], 1)]
        out += [("lineitem", batch["lineitem"][1], -1), ("orders", batch["orders"][1], -1)]
    return out


def _transactions(changes, size: int):
    """The changes cut into transactions of ``size`` rows (a transaction may span tables)."""
    current, n = [], 0
    for table, rows, sign in changes:
        start = 0
        while start < rows.num_rows:
            take = min(size - n, rows.num_rows - start)
            current.append((table, rows.slice(start, take), sign))
            n += take
            start += take
            if n == size:
                yield current
                current, n = [], 0
    if current:
        yield current


def _apply(db, txn) -> None:
    db.execute("BEGIN")
    for table, rows, sign in txn:
        (db.insert_arrow if sign > 0 else db.delete_arrow)(table, rows)
    db.execute("COMMIT")


def memory_bytes(db) -> int:
    """Bytes held by the arrays of every live trace of the connection's engine (shared traces once), and by
    the running states of its aggregates."""
    total = db.engine.state_bytes()
    for t in db.engine.traces():
        for b in t.batches():
            u = b.updates
            arrays = [*u.columns, *(m for m in u.valid if m is not None), u.times, u.diffs]
            if b.hashes is not u.columns[0] if u.columns else True:
                arrays.append(b.hashes)
            total += sum(a.nbytes for a in arrays)
    return total


def _new_db(queries) -> ivm.db.connection.Connection:
    db = ivm.connect()
    db.execute(SCHEMA)
    for q in queries:
        db.execute(f"CREATE MATERIALIZED VIEW {q} AS {query(q)}")
    return db


def small_transactions(held: dict, n: int) -> list[list]:
    """``n`` small transactions against the loaded data: an order RF2 deleted added back with its lineitems,
    then deleted again, and so on."""
    orders, lineitem = held["orders"], held["lineitem"]
    okeys = orders.column("o_orderkey").to_numpy()
    lkeys = lineitem.column("l_orderkey").to_numpy()
    out = []
    for i in range(n):
        j = (i // 2) % len(okeys)
        o = orders.slice(j, 1)
        li = lineitem.filter(pa.array(lkeys == okeys[j]))
        add = [("orders", o, 1), ("lineitem", li, 1)]
        out.append(add if i % 2 == 0 else [("lineitem", li, -1), ("orders", o, -1)])
    return out


def timed(db, txns: list) -> list[float]:
    """Each transaction applied in turn, and the seconds each took."""
    out = []
    for t in txns:
        t0 = time.perf_counter()
        _apply(db, t)
        out.append(time.perf_counter() - t0)
    return out


def bench_query(q: str, stream, sizes, txns: int, held: dict) -> dict:
    out: dict = {}
    changes = _changes(stream)
    total = sum(r.num_rows for _, r, _ in changes)
    db = None
    for size in sizes:
        if db is not None:
            db.close()
        db = _new_db([q])
        t0 = time.perf_counter()
        for txn in _transactions(changes, size):
            _apply(db, txn)
        out[f"throughput_b{size}"] = total / (time.perf_counter() - t0)
    lat = timed(db, small_transactions(held, txns))
    out["txn_latency_ms_p50"] = float(np.percentile(lat, 50) * 1e3)
    out["txn_latency_ms_p99"] = float(np.percentile(lat, 99) * 1e3)
    out["memory_bytes"] = memory_bytes(db)
    db.close()
    return out


def _duckdb(stream_tables: dict, queries) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute(SCHEMA)
    for t, data in stream_tables.items():
        con.register("incoming", data)
        con.execute(f"INSERT INTO {t} SELECT * FROM incoming")
        con.unregister("incoming")
    out = {}
    for q in queries:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            con.execute(query(q)).fetchall()
            times.append(time.perf_counter() - t0)
        out[q] = statistics.median(times) * 1e3
    return out


def main(argv: list[str] | None = None) -> None:
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    ap = argparse.ArgumentParser(
        prog="python -m tpch.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--batch-sizes", default="1000,10000")
    ap.add_argument("--txns", type=int, default=200)
    ap.add_argument("--refresh-fraction", type=float, default=0.1)
    ap.add_argument("--durable", action="store_true", help="reopen, checkpoint and log figures (tpch.durable)")
    ap.add_argument("--all-views", action="store_true", help="the 22 views in one database (tpch.all_views)")
    ap.add_argument("--idle-views", type=int, default=200, help="with --all-views: views the transactions miss")
    args = ap.parse_args(argv)
    if args.durable:
        from tpch.durable import run

        run(args.sf, args.txns, args.json)
        return
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    tables = generate(args.sf)
    stream = refresh_stream(tables, fraction=args.refresh_fraction, batches=10, seed=1)
    # the small transactions add back an order deleted by RF2 (with its lineitems), then delete it again
    held = {t: pa.concat_tables([b[t][1] for b in stream.batches]) for t in ("orders", "lineitem")}
    if args.all_views:
        from tpch.all_views import run_all_views

        res = {
            "sf": args.sf,
            **run_all_views(stream, held, _duckdb(_final_state(stream), QUERIES), args.txns, args.idle_views),
        }
        print(json.dumps(res) if args.json else "\n".join(f"{k}: {v:,.3f}" for k, v in res.items()))
        return
    recompute = _duckdb(_final_state(stream), queries)
    res: dict = {"sf": args.sf, "queries": {}}
    for q in queries:
        r = bench_query(q, stream, sizes, args.txns, held)
        r["recompute_ms_duckdb"] = recompute[q]
        res["queries"][q] = r
        if not args.json:
            print(f"{q}: " + ", ".join(f"{k}={v:,.1f}" for k, v in r.items()), flush=True)
    big = max(sizes)
    res["median_throughput_b" + str(big)] = statistics.median(
        r[f"throughput_b{big}"] for r in res["queries"].values()
    )
    res["queries_100x_faster_than_recompute"] = sum(
        1 for r in res["queries"].values() if r["txn_latency_ms_p50"] * 100 <= r["recompute_ms_duckdb"]
    )
    slow = [r for r in res["queries"].values() if r["recompute_ms_duckdb"] >= 100]
    res["slow_queries"] = len(slow)
    res["slow_queries_100x_fraction"] = (
        sum(1 for r in slow if r["txn_latency_ms_p50"] * 100 <= r["recompute_ms_duckdb"]) / len(slow)
        if slow
        else None
    )
    one = _new_db(queries)
    for txn in _transactions(_changes(stream), big):
        _apply(one, txn)
    res["memory_bytes_one_engine"] = memory_bytes(one)
    res["memory_bytes_separate_engines"] = sum(r["memory_bytes"] for r in res["queries"].values())
    if args.json:
        print(json.dumps(res))
        return
    print(f"median throughput at batches of {big:,}: {res['median_throughput_b' + str(big)]:,.0f} changes/s")
    print(
        f"queries with p50 latency 100x below DuckDB recompute: {res['queries_100x_faster_than_recompute']}"
        f" of {len(queries)}; of the {len(slow)} whose recompute takes 100 ms or more: "
        f"{sum(1 for r in slow if r['txn_latency_ms_p50'] * 100 <= r['recompute_ms_duckdb'])}"
    )
    print(
        f"memory: one engine {res['memory_bytes_one_engine']:,} bytes; separate engines "
        f"{res['memory_bytes_separate_engines']:,} bytes"
    )


def _final_state(stream) -> dict:
    """The tables after the load and every refresh batch (what DuckDB recomputes over)."""
    import pyarrow.compute as pc

    tables = dict(stream.initial)
    for batch in stream.batches:
        for t, key in (("orders", "o_orderkey"), ("lineitem", "l_orderkey")):
            ins, dele = batch[t]
            kept = tables[t].filter(pc.invert(pc.is_in(tables[t].column(key), dele.column(key))))
            tables[t] = pa.concat_tables([kept, ins])
    return tables


if __name__ == "__main__":
    main()
