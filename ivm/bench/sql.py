"""SQL view benchmarks, on one core: ``python -m ivm.bench sql [--json] [--quick]``.

Each workload loads its tables, creates its view, and times single-row transactions against the view's
maintenance, beside DuckDB (one thread) recomputing the same query on the same data. A workload is one entry
of ``WORKLOADS``: a function of (quick, rng) returning its figures, among them ``<name>_speedup_vs_recompute``,
DuckDB's recompute time over ivm's p50 latency per transaction; ``run`` gathers them and lifts those headline
figures to the top level.

- ``topk``: the top-3 rows per group (``ROW_NUMBER() OVER (PARTITION BY g ORDER BY x DESC, id)`` under
  ``rn <= 3``) over 1M rows in 10k groups; each transaction updates one row's ``x``.
- ``correlated``: the rows above their group's average (``x > (SELECT avg(x) FROM t AS t2 WHERE t2.g = t.g)``)
  over the same data and updates.
- ``series``: one ordered partition of 1M rows (``LAG`` and a moving average over ``ROWS`` frames, ordered by
  ``id``) under the same updates: each reaches a few rows of the partition, and only those are computed.

Updates are sent as a client sends them, one parameterized statement (``UPDATE t SET x = %s WHERE id = %s``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

import ivm

__all__ = ["WORKLOADS", "TOPK", "CORRELATED", "SERIES", "run", "report"]

TOPK = (
    "SELECT * FROM (SELECT id, g, x, ROW_NUMBER() OVER (PARTITION BY g ORDER BY x DESC, id) AS rn FROM t) s "
    "WHERE rn <= 3"
)
CORRELATED = "SELECT id, g, x FROM t WHERE x > (SELECT avg(x) FROM t AS t2 WHERE t2.g = t.g)"
SERIES = (
    "SELECT id, x, x - LAG(x) OVER (ORDER BY id) AS dx, "
    "AVG(x) OVER (ORDER BY id ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS ma FROM t"
)


def _pct(seconds: list[float], p: float) -> float:
    return float(np.percentile(np.array(seconds) * 1000.0, p))


def _timed(db, sql: str, params: tuple | None = None) -> float:
    t = time.perf_counter()
    db.execute(sql, params)
    return time.perf_counter() - t


def _duckdb(tables: dict[str, pa.Table], sql: str, repeat: int) -> tuple[float, pa.Table]:
    """DuckDB's median time to compute ``sql`` in full (its rows fetched as Arrow), on one thread, and the
    rows."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    for name, table in tables.items():
        con.register("_src", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _src")
        con.unregister("_src")
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = con.sql(sql).to_arrow_table()
        times.append(time.perf_counter() - t)
    con.close()
    return float(np.median(times)), out


def _same(db, view: str, expected: pa.Table, what: str) -> None:
    """The view holds exactly DuckDB's rows."""
    got = sorted(db.execute(f"SELECT * FROM {view}").fetchall())
    want = sorted(zip(*(c.to_pylist() for c in expected.columns), strict=True))
    if got != want:
        raise AssertionError(f"{what}: the view differs from DuckDB's recompute")


def _updates(name: str, sql: str, quick: bool, rng: np.random.Generator) -> dict:
    """``sql`` as a view over 1M rows in 10k groups (100k in 1k with ``quick``) under single-row updates of
    ``x``: half raise a row above every other of its group, half set it anywhere."""
    n, groups = (100_000, 1_000) if quick else (1_000_000, 10_000)
    samples = 50 if quick else 200
    ids = np.arange(n, dtype=np.int64)
    g, x = rng.integers(0, groups, n), rng.integers(0, 1_000_000, n)
    table = pa.table({"id": ids, "g": g, "x": x})
    db = ivm.connect()
    db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, g BIGINT, x BIGINT)")
    db.insert_arrow("t", table)
    full = _timed(db, f"CREATE VIEW v AS {sql}")
    duck, expected = _duckdb({"t": table}, sql, 5)
    _same(db, "v", expected, name)
    rows = expected.num_rows
    latencies = []
    x = x.copy()
    for k, i in enumerate(rng.choice(n, samples, replace=False)):
        new = int(rng.integers(1_000_000, 2_000_000)) if k % 2 else int(rng.integers(0, 1_000_000))
        latencies.append(_timed(db, "UPDATE t SET x = %s WHERE id = %s", (new, int(i))))
        x[i] = new
    _same(db, "v", _duckdb({"t": pa.table({"id": ids, "g": g, "x": x})}, sql, 1)[1], f"{name} after updates")
    db.close()
    p50 = _pct(latencies, 50)
    return {
        "rows": n,
        "groups": groups,
        "view_rows": int(rows),
        "create_s": full,
        "duckdb_recompute_s": duck,
        "update_p50_ms": p50,
        "update_p99_ms": _pct(latencies, 99),
        f"{name}_speedup_vs_recompute": duck / (p50 / 1000.0),
    }


def topk(quick: bool, rng: np.random.Generator) -> dict:
    """Top-3 per group under single-row updates."""
    return _updates("topk", TOPK, quick, rng)


def correlated(quick: bool, rng: np.random.Generator) -> dict:
    """The rows above their group's average, a correlated scalar subquery, under single-row updates."""
    return _updates("correlated", CORRELATED, quick, rng)


def series(quick: bool, rng: np.random.Generator) -> dict:
    """Window functions over one long ordered partition under single-row updates."""
    return _updates("series", SERIES, quick, rng)


WORKLOADS: dict[str, Callable[[bool, np.random.Generator], dict]] = {
    "topk": topk,
    "correlated": correlated,
    "series": series,
}


def run(quick: bool = False, seed: int = 11, only: list[str] | None = None) -> dict:
    """Every workload's figures under its name, and each ``*_speedup_vs_recompute`` at the top level."""
    rng = np.random.default_rng(seed)
    res: dict = {"workloads": {}}
    for name, fn in WORKLOADS.items():
        if only and name not in only:
            continue
        fig = fn(quick, rng)
        res["workloads"][name] = fig
        res.update({k: v for k, v in fig.items() if k.endswith("_speedup_vs_recompute")})
    return res


def report(res: dict) -> None:
    print("SQL views (one core); latencies are per single-row transaction, p50 / p99 in ms")
    titles = {
        "topk": "top-3 per group",
        "correlated": "above the group's average (correlated subquery)",
        "series": "LAG and a moving average over one ordered partition",
    }
    for name, title in titles.items():
        w = res["workloads"].get(name)
        if w is None:
            continue
        where = "one partition" if name == "series" else f"{w['groups']:,} groups"
        target = "" if name == "series" else " (target >= 100x)"
        print(
            f"  {title}, {w['rows']:,} rows in {where} ({w['view_rows']:,} view rows): "
            f"create {w['create_s']:.2f} s; update {w['update_p50_ms']:.2f} / {w['update_p99_ms']:.2f}; "
            f"DuckDB recompute {w['duckdb_recompute_s'] * 1000:.1f} ms; "
            f"{w[name + '_speedup_vs_recompute']:,.0f}x{target}"
        )
