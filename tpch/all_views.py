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

import numpy as np

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


def run_all_views(stream, held: dict, recompute_ms: dict, txns: int, idle: int, rounds: int = 3) -> dict:
    """The figures of (a) and (b) above, for a refresh stream already generated."""
    from tpch.bench import _apply, _changes, _new_db, _transactions, small_transactions, timed

    db = _new_db(QUERIES)
    for txn in _transactions(_changes(stream), 10_000):
        _apply(db, txn)
    small = small_transactions(held, txns)
    timed(db, small[:20])  # warm: first merges, first strings
    plain: list[float] = []
    busy: list[float] = []
    for _ in range(rounds):
        plain += timed(db, small)
        for i in range(idle):
            db.execute(f"CREATE MATERIALIZED VIEW idle_{i} AS {idle_view(i)}")
        busy += timed(db, small)
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
