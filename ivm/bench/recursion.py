"""Recursive view benchmark, on one core: ``python -m ivm.bench recursion [--json] [--quick]``.

Transitive closure and same generation, as ``WITH RECURSIVE`` views, on a binary tree, a grid and a random
graph. For each: the full evaluation (creating the view over loaded data) beside DuckDB's WITH RECURSIVE on the
same data with one thread; the latency of deleting one existing edge and of inserting it back, each its own
transaction; and, on the random graph, the latency of adding and removing one row of an interactive query
(reachability from the asked nodes only).
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

import ivm

__all__ = ["run", "report", "graphs", "TC", "SAME_GENERATION", "INTERACTIVE"]

TC = (
    "WITH RECURSIVE tc(a, b) AS (SELECT src, dst FROM e UNION SELECT tc.a, e.dst FROM tc JOIN e "
    "ON tc.b = e.src) SELECT a, b FROM tc"
)
# e holds (child, parent) edges here: two nodes are of the same generation when their parents are
SAME_GENERATION = (
    "WITH RECURSIVE sg(x, y) AS (SELECT p1.src, p2.src FROM e p1 JOIN e p2 ON p1.dst = p2.dst "
    "WHERE p1.src <> p2.src UNION SELECT p1.src, p2.src FROM sg JOIN e p1 ON p1.dst = sg.x "
    "JOIN e p2 ON p2.dst = sg.y) SELECT x, y FROM sg"
)
INTERACTIVE = (
    "WITH RECURSIVE reach(root, n) AS (SELECT r, r FROM q UNION SELECT reach.root, e.dst FROM reach "
    "JOIN e ON e.src = reach.n) SELECT root, n FROM reach"
)


def graphs(quick: bool, rng: np.random.Generator) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
    """Edge lists (src -> dst) by workload graph, with a description of their size."""
    depth = 8 if quick else 11
    n = 2 ** (depth + 1) - 1
    child = np.arange(1, n)
    tree = (f"binary tree, {n:,} nodes", (child - 1) // 2, child)  # parent -> child
    k = 12 if quick else 30
    cell = np.arange(k * k).reshape(k, k)
    right = (cell[:, :-1].ravel(), cell[:, 1:].ravel())
    down = (cell[:-1, :].ravel(), cell[1:, :].ravel())
    grid = (f"{k}x{k} grid", np.concatenate([right[0], down[0]]), np.concatenate([right[1], down[1]]))
    nodes = 1_000 if quick else 500_000
    pairs = np.unique(rng.integers(0, nodes, (int(nodes * 0.95), 2)), axis=0)
    rand = (f"random graph, {nodes:,} nodes, {len(pairs):,} edges", pairs[:, 0], pairs[:, 1])
    return {"tree": tree, "grid": grid, "random": rand}


def _load(src: np.ndarray, dst: np.ndarray):
    db = ivm.connect()
    db.execute("CREATE TABLE e (src BIGINT, dst BIGINT)")
    db.execute("CREATE TABLE q (r BIGINT)")
    db.insert_arrow("e", pa.table({"src": src, "dst": dst}))
    return db


def _duckdb_seconds(src: np.ndarray, dst: np.ndarray, sql: str, repeat: int = 3) -> tuple[float, int]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    edges = pa.table({"src": src, "dst": dst})  # noqa: F841 (read by DuckDB by name)
    con.execute("CREATE TABLE e AS SELECT * FROM edges")
    best, rows = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        rows = con.execute(f"SELECT COUNT(*) FROM ({sql})").fetchone()[0]
        best = min(best, time.perf_counter() - t)
    return best, rows


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.array(xs) * 1000.0, p))


def _timed(db, sql: str) -> float:
    """Seconds one statement (one transaction) takes."""
    t = time.perf_counter()
    db.execute(sql)
    return time.perf_counter() - t


def _latency(name: str, seconds: list[float]) -> dict:
    return {f"{name}_p50_ms": _pct(seconds, 50), f"{name}_p99_ms": _pct(seconds, 99)}


def _edge_updates(db, src, dst, samples: int, rng: np.random.Generator) -> dict:
    """Delete one existing edge, then insert it back; each its own transaction, each timed."""
    ins, dels = [], []
    for i in rng.choice(len(src), samples, replace=False):
        a, b = int(src[i]), int(dst[i])
        dels.append(_timed(db, f"DELETE FROM e WHERE src = {a} AND dst = {b}"))
        ins.append(_timed(db, f"INSERT INTO e VALUES ({a}, {b})"))
    return {**_latency("insert", ins), **_latency("delete", dels)}


def _workload(name: str, sql: str, src, dst, samples: int, rng) -> dict:
    db = _load(src, dst)
    full = _timed(db, f"CREATE VIEW v AS {sql}")
    rows = db.execute("SELECT COUNT(*) FROM v").fetchall()[0][0]
    duck, duck_rows = _duckdb_seconds(src, dst, sql)
    if rows != duck_rows:
        raise AssertionError(f"{name}: {rows} rows, DuckDB {duck_rows}")
    out = {"rows": int(rows), "full_s": full, "duckdb_s": duck}
    out.update(_edge_updates(db, src, dst, samples, rng))
    if rows != db.execute("SELECT COUNT(*) FROM v").fetchall()[0][0]:
        raise AssertionError(f"{name}: the view changed after deleting and restoring edges")
    db.close()
    return out


def _interactive(src, dst, samples: int, rng) -> dict:
    db = _load(src, dst)
    db.execute(f"CREATE VIEW v AS {INTERACTIVE}")
    add, remove, sizes = [], [], []
    for node in rng.choice(int(max(src.max(), dst.max())) + 1, samples, replace=False):
        add.append(_timed(db, f"INSERT INTO q VALUES ({int(node)})"))
        sizes.append(db.execute("SELECT COUNT(*) FROM v").fetchall()[0][0])
        remove.append(_timed(db, f"DELETE FROM q WHERE r = {int(node)}"))
    db.close()
    return {**_latency("add", add), **_latency("remove", remove), "reached_median": float(np.median(sizes))}


def run(quick: bool = False, samples: int | None = None, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    samples = samples or (20 if quick else 100)
    res: dict = {"workloads": {}}
    gs = graphs(quick, rng)
    for gname, (desc, src, dst) in gs.items():
        for wname, sql, (a, b) in (("tc", TC, (src, dst)), ("same_generation", SAME_GENERATION, (dst, src))):
            key = f"{wname}_{gname}"
            fig = _workload(key, sql, a, b, samples, rng)
            fig["graph"] = desc
            res["workloads"][key] = fig
    _, src, dst = gs["random"]
    res["interactive_random"] = _interactive(src, dst, samples, rng)
    ratios = [w["delete_p50_ms"] / w["insert_p50_ms"] for w in res["workloads"].values()]
    res["delete_over_insert_latency"] = max(ratios)
    big = max(res["workloads"].values(), key=lambda w: w["duckdb_s"] if "random" in w["graph"] else -1)
    worst = max(big["insert_p50_ms"], big["delete_p50_ms"]) / 1000.0
    res["update_speedup_vs_recompute"] = big["duckdb_s"] / worst
    return res


def report(res: dict) -> None:
    print("Recursive views (one core); latencies are per single-edge transaction, p50 / p99 in ms")
    for key, w in res["workloads"].items():
        print(
            f"  {key:<26} {w['graph']}: {w['rows']:,} rows; full evaluation {w['full_s']:.2f} s "
            f"(DuckDB {w['duckdb_s']:.3f} s); insert {w['insert_p50_ms']:.2f} / {w['insert_p99_ms']:.2f}; "
            f"delete {w['delete_p50_ms']:.2f} / {w['delete_p99_ms']:.2f}"
        )
    i = res["interactive_random"]
    print(
        f"  interactive reachability on the random graph: add a query {i['add_p50_ms']:.2f} / "
        f"{i['add_p99_ms']:.2f}; remove it {i['remove_p50_ms']:.2f} / {i['remove_p99_ms']:.2f} "
        f"(median {i['reached_median']:.0f} nodes reached)"
    )
    print(f"  worst delete/insert p50 ratio: {res['delete_over_insert_latency']:.2f} (target <= 2)")
    print(
        f"  single-edge update vs DuckDB recompute on the random graph: "
        f"{res['update_speedup_vs_recompute']:,.0f}x (target >= 100x)"
    )
