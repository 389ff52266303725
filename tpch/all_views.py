"""All 22 TPC-H views in one database: ``python -m tpch.bench --all-views [--sf 1] [--json]``.

What a user of a database with many views feels when one small transaction commits:
(a) one new order with its lineitems inserted, or one order deleted with its lineitems, against the fully
    loaded data with the 22 views maintained: p50 and p99, against DuckDB recomputing the 22 queries (the sum
    of each query's median, one thread);
(b) the same with ``idle`` more views that read only ``nation``, ``region`` and ``supplier``, which the
    transaction does not touch: how much the p50 grows. The two are measured in alternation, the idle views
    created and dropped between rounds, so that a drift of the machine falls on both alike.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from tpch.queries import QUERIES

__all__ = ["idle_view", "run_all_views"]


def idle_view(i: int) -> str:
    """The SQL of the ``i``-th view over the tables a lineitem transaction leaves alone."""
    return [
        f"SELECT n_regionkey, count(*) AS n FROM nation WHERE n_nationkey > {i % 20} GROUP BY n_regionkey",
        f"SELECT r_name, r_regionkey + {i} AS x FROM region",
        f"SELECT s_nationkey, sum(s_acctbal) AS b FROM supplier WHERE s_suppkey % 7 = {i % 7} "
        "GROUP BY s_nationkey",
        f"SELECT n_name, r_name FROM nation JOIN region ON n_regionkey = r_regionkey WHERE n_nationkey <> {i}",
    ][i % 4]


def _small_transactions(held: dict, n: int) -> list[list]:
    """``n`` transactions adding back an order RF2 deleted (with its lineitems), then deleting it again."""
    orders, lineitem = held["orders"], held["lineitem"]
    okeys = orders.column("o_orderkey").to_numpy()
    lkeys = lineitem.column("l_orderkey").to_numpy()
    out = []
    for i in range(n):
        j = (i // 2) % len(okeys)
        o = orders.slice(j, 1)
        li = lineitem.filter(pa.array(lkeys == okeys[j]))
        out.append(
            [("orders", o, 1), ("lineitem", li, 1)] if i % 2 == 0 else [("lineitem", li, -1), ("orders", o, -1)]
        )
    return out


def _timed(db, txns: list) -> list[float]:
    from tpch.bench import _apply

    out = []
    for t in txns:
        t0 = time.perf_counter()
        _apply(db, t)
        out.append(time.perf_counter() - t0)
    return out


def run_all_views(stream, held: dict, recompute_ms: dict, txns: int, idle: int, rounds: int = 3) -> dict:
    """The figures of (a) and (b) above, for a refresh stream already generated."""
    from tpch.bench import _apply, _changes, _new_db, _transactions

    db = _new_db(QUERIES)
    for txn in _transactions(_changes(stream), 10_000):
        _apply(db, txn)
    small = _small_transactions(held, txns)
    _timed(db, small[:20])  # warm: first merges, first strings
    plain: list[float] = []
    busy: list[float] = []
    for _ in range(rounds):
        plain += _timed(db, small)
        for i in range(idle):
            db.execute(f"CREATE MATERIALIZED VIEW idle_{i} AS {idle_view(i)}")
        busy += _timed(db, small)
        for i in range(idle):
            db.execute(f"DROP VIEW idle_{i}")
    db.close()
    total = sum(recompute_ms[q] for q in QUERIES)
    p50, p99 = (float(np.percentile(plain, q) * 1e3) for q in (50, 99))
    i50, i99 = (float(np.percentile(busy, q) * 1e3) for q in (50, 99))
    return {
        "views": len(QUERIES),
        "txn_latency_ms_p50": p50,
        "txn_latency_ms_p99": p99,
        "recompute_ms_duckdb_all": total,
        "all_views_txn_speedup": total / p50,
        "idle_views": idle,
        "idle_txn_latency_ms_p50": i50,
        "idle_txn_latency_ms_p99": i99,
        "idle_views_growth": i50 / p50 - 1,
    }
