"""``ivm demo``: the 22 TPC-H queries kept exact under the TPC-H refresh functions, beside DuckDB's recompute.

Generates TPC-H data (scale factor 0.1 by default, with tpchgen-cli), loads it into one in-memory database,
creates all 22 queries as materialized views there (sharing arrangements between them), then streams refresh
batches: each batch is one transaction of TPC-H's RF1 (new orders with their lineitems, 0.1% of the orders)
and RF2 (as many old orders deleted with their lineitems), followed by transactions of a single order (one
order with its lineitems inserted, or deleted). A table, redrawn after every transaction when the output is a
terminal, shows per query the time its view took to absorb a change (the step time of its own dataflow; the
median over the batches, and over the single orders) beside the time DuckDB takes to recompute the query from
scratch on one thread. It ends with the speed-ups, the memory held, and a check that every view equals
DuckDB's result on the final data.

``--reach`` runs the engine's reachability demonstration instead (no SQL).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import ivm
from ivm.cli import render
from ivm.db.introspect import row_count
from ivm.engine.allocator import tune_allocator
from tpch import SCHEMA
from tpch.bench import _apply as apply_transaction
from tpch.bench import _duckdb as duckdb_recompute_ms
from tpch.bench import _final_state as final_state
from tpch.bench import memory_bytes
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import QUERIES, query

__all__ = ["main", "run_tpch", "run_reachability"]

BASE = "tables"  # the dataflow holding the tables' arrangements, which every view reads


def main(argv: list[str] | None = None) -> int:
    """Run the demonstration; returns the exit status (1 if a view differs from DuckDB's result)."""
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    ap = argparse.ArgumentParser(
        prog="ivm demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    ap.add_argument("--batches", type=int, default=20, help="refresh batches to stream (default 20)")
    ap.add_argument("--orders", type=int, default=40, help="single-order transactions after the batches")
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated subset of q01..q22")
    ap.add_argument("--reach", action="store_true", help="the engine's reachability demonstration instead")
    args = ap.parse_args(argv)
    if args.reach:
        return run_reachability()
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in queries if q not in QUERIES]
    if unknown:
        ap.error(f"unknown queries {', '.join(unknown)}; the queries are q01 .. q22")
    if args.batches < 1:
        ap.error("--batches must be at least 1")
    return run_tpch(args.sf, args.batches, queries, sys.stdout, args.orders)


class _Screen:
    """Progress and the live table: redrawn in place on a terminal, printed as plain lines otherwise."""

    def __init__(self, out, live: bool) -> None:
        self.out = out
        self.live = live
        self.drawn = 0

    def line(self, text: str) -> None:
        self.drawn = 0
        print(text, file=self.out, flush=True)

    def block(self, text: str) -> None:
        """Replace the last block drawn with ``text`` (on a terminal), else print nothing."""
        if not self.live:
            return
        up = f"\x1b[{self.drawn}F\x1b[J" if self.drawn else ""
        self.out.write(up + text + "\n")
        self.out.flush()
        self.drawn = text.count("\n") + 1


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


@dataclass
class _Timings:
    """Seconds per transaction: in all (``txn``), in the tables' arrangements (``base``), and per view in its
    own dataflow (``views``), for the refresh batches and for the single-order transactions."""

    queries: list[str]
    txn: dict[str, list[float]] = field(default_factory=lambda: {"batch": [], "order": []})
    base: dict[str, list[float]] = field(default_factory=lambda: {"batch": [], "order": []})
    views: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def record(self, kind: str, db, pieces) -> float:
        """Apply one transaction and note its times."""
        before = dict(db.engine.step_seconds)
        t0 = time.perf_counter()
        apply_transaction(db, pieces)
        took = time.perf_counter() - t0
        after = db.engine.step_seconds
        self.txn[kind].append(took)
        self.base[kind].append(after.get(BASE, 0.0) - before.get(BASE, 0.0))
        for q in self.queries:
            self.views.setdefault((q, kind), []).append(after.get(q, 0.0) - before.get(q, 0.0))
        return took

    def median_ms(self, q: str, kind: str) -> float | None:
        xs = self.views.get((q, kind))
        return statistics.median(xs) * 1e3 if xs else None


def _live_table(t: _Timings, rows: dict, duck: dict) -> str:
    """Per query: view rows, median update time for a refresh batch and for one order, DuckDB's recompute,
    and the speed-ups."""
    qs = t.queries

    def col(kind: str) -> pa.Array:
        return pa.array([_round(t.median_ms(q, kind)) for q in qs], pa.float64())

    def speedup(kind: str) -> pa.Array:
        ms = [t.median_ms(q, kind) for q in qs]
        return pa.array([_times(duck[q] / m) if m else None for q, m in zip(qs, ms, strict=True)])

    data = pa.table(
        {
            "query": pa.array(qs, pa.string()),
            "view rows": pa.array([rows[q] for q in qs], pa.int64()),
            "refresh batch ms": col("batch"),
            "one order ms": col("order"),
            "DuckDB recompute ms": pa.array([round(duck[q], 2) for q in qs], pa.float64()),
            "speed-up (batch)": speedup("batch"),
            "speed-up (one order)": speedup("order"),
        }
    )
    return render.table(data, footer=False)


def _times(x: float) -> str:
    return f"{x:,.1f}x" if x < 10 else f"{x:,.0f}x"


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _rss_bytes() -> int:
    """Resident memory of this process now (Linux), or its peak where /proc is not available."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _gb(n: float) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.1f} MB"


def _refresh_pieces(b: dict) -> list[tuple[str, pa.Table, int]]:
    """RF1 then RF2 of one refresh batch, as (table, rows, sign) in the order they are applied."""
    return [
        ("orders", b["orders"][0], 1),
        ("lineitem", b["lineitem"][0], 1),
        ("lineitem", b["lineitem"][1], -1),
        ("orders", b["orders"][1], -1),
    ]


def _single_orders(stream, count: int) -> list[list[tuple[str, pa.Table, int]]]:
    """``count`` one-order transactions: an order deleted by RF2 inserted again with its lineitems, then deleted
    again, and so on (so the data ends as it started)."""
    orders = pa.concat_tables([b["orders"][1] for b in stream.batches])
    lineitem = pa.concat_tables([b["lineitem"][1] for b in stream.batches])
    okeys = orders.column("o_orderkey")
    out = []
    for i in range(count - count % 2):
        j = (i // 2) % orders.num_rows
        o = orders.slice(j, 1)
        li = lineitem.filter(pc.equal(lineitem.column("l_orderkey"), okeys[j]))
        out.append(
            [("orders", o, 1), ("lineitem", li, 1)] if i % 2 == 0 else [("lineitem", li, -1), ("orders", o, -1)]
        )
    return out


def run_tpch(sf: float, batches: int, queries: list[str], out=sys.stdout, orders: int = 40) -> int:
    """The TPC-H demonstration at scale factor ``sf``: ``batches`` refresh batches, then ``orders`` single-order
    transactions; returns the exit status."""
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")
    screen = _Screen(out, out.isatty())
    say = screen.line
    started = time.perf_counter()
    say(f"ivm demo: TPC-H at scale factor {sf:g}, {len(queries)} queries as views in one database")
    t0 = time.perf_counter()
    tables = generate(sf)
    stream = refresh_stream(tables, fraction=0.001 * batches, batches=batches, seed=1)
    sizes = ", ".join(f"{t} {stream.initial[t].num_rows:,}" for t in ("lineitem", "orders", "customer"))
    say(f"  data generated in {time.perf_counter() - t0:.1f}s: {sizes} rows, ...")
    final = final_state(stream)
    duck = duckdb_recompute_ms(final, queries)
    say(f"  DuckDB (1 thread) recomputes the {len(queries)} queries in {sum(duck.values()):,.0f} ms in all")

    db = ivm.connect()
    db.execute(SCHEMA)
    t0 = time.perf_counter()
    db.execute("BEGIN")
    for t in TABLES:
        db.insert_arrow(t, stream.initial[t])
    db.execute("COMMIT")
    say(f"  loaded {sum(stream.initial[t].num_rows for t in TABLES):,} rows in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    for i, q in enumerate(queries):
        screen.block(f"  creating views {_bar(i, len(queries))} {q}")
        db.execute(f"CREATE MATERIALIZED VIEW {q} AS {query(q)}")
    screen.block(f"  creating views {_bar(len(queries), len(queries))}")
    say(f"  created {len(queries)} views (their initial results) in {time.perf_counter() - t0:.1f}s")

    timings = _Timings(queries)
    rows = {q: _view_rows(db, q) for q in queries}
    phases = [("batch", _refresh_pieces(b)) for b in stream.batches]
    phases += [("order", txn) for txn in _single_orders(stream, orders)]
    say(
        f"streaming {batches} refresh batches (TPC-H RF1 + RF2, 0.1% of the orders each, one transaction per"
        f" batch), then {len(phases) - batches} single-order transactions:"
    )
    changes = {"batch": 0, "order": 0}
    for i, (kind, pieces) in enumerate(phases):
        n = sum(p[1].num_rows for p in pieces)
        changes[kind] += n
        took = timings.record(kind, db, pieces)
        rows = {q: _view_rows(db, q) for q in queries}
        what = "refresh batch" if kind == "batch" else "one order"
        progress = f"  {_bar(i + 1, len(phases))} {what}: {n:,} changed rows in {took * 1e3:,.1f} ms"
        if screen.live:
            screen.block(progress + "\n" + _live_table(timings, rows, duck))
        elif kind == "batch" or i + 1 == len(phases):
            say(progress)
    if not screen.live:
        say(_live_table(timings, rows, duck))
    screen.drawn = 0
    bad = _summary(db, say, timings, duck, changes, final)
    say(f"done in {time.perf_counter() - started:.1f}s")
    return 1 if bad else 0


def _summary(db, say, t: _Timings, duck: dict, changes: dict, final: dict) -> list[str]:
    """Print the speed-ups, memory and the check against DuckDB; returns the views that differ."""
    all_duck = sum(duck.values())
    say("")
    say("summary:")
    for kind, what in (("batch", "one refresh batch"), ("order", "one single-order transaction")):
        if not t.txn[kind]:
            continue
        med = statistics.median(t.txn[kind]) * 1e3
        size = changes[kind] // len(t.txn[kind])
        views = statistics.median(
            [sum(t.views[(q, kind)][i] for q in t.queries) for i in range(len(t.txn[kind]))]
        )
        say(
            f"  {what} (~{size:,} changed rows) updates all {len(t.queries)} views in {med:,.1f} ms (median),"
            f" recomputing them in DuckDB takes {all_duck:,.0f} ms: {all_duck / med:,.1f}x faster"
        )
        say(
            f"    of which the views' own dataflows take {views * 1e3:,.1f} ms, the tables' arrangements"
            f" {statistics.median(t.base[kind]) * 1e3:,.1f} ms, and the rest checking the writes (keys, deleted"
            f" rows present) and the transaction"
        )
        ups = sorted(duck[q] / m for q in t.queries if (m := t.median_ms(q, kind)))
        if ups:
            say(
                f"    per query: median {statistics.median(ups):,.1f}x, from {ups[0]:,.1f}x to {ups[-1]:,.0f}x;"
                f" {sum(u >= 10 for u in ups)} of {len(t.queries)} queries at least 10x faster"
            )
    data_bytes = sum(x.nbytes for x in final.values())
    say(
        f"  memory: {db.engine.stored_updates():,} stored updates in {_gb(memory_bytes(db))} of arrangements"
        " and aggregate states"
        f" (the data is {_gb(data_bytes)} in Arrow); process RSS {_gb(_rss_bytes())}"
    )
    bad = _check(db, final, t.queries)
    if bad:
        say(f"  CHECK FAILED: {', '.join(bad)} differ from DuckDB's result on the final data")
    else:
        say(f"  check: all {len(t.queries)} views equal DuckDB's result on the final data")
    return bad


def _view_rows(db, view: str) -> int:
    return row_count(db.views[view].arranged.trace)


def _comparable(t: pa.Table, padded: frozenset[int] = frozenset()) -> pa.Table:
    """Columns in forms both engines agree on: numbers as float64, and the CHAR(n) columns at ``padded``
    without their padding (DuckDB holds CHAR(n) as VARCHAR)."""
    cols = {}
    for i, f in enumerate(t.schema):
        c = t.column(i)
        if pa.types.is_dictionary(f.type):
            c = c.cast(f.type.value_type)
        if pa.types.is_integer(c.type) or pa.types.is_decimal(c.type) or pa.types.is_floating(c.type):
            c = pc.cast(c, pa.float64())
        elif i in padded:
            c = pc.utf8_rtrim(c, characters=" ")
        cols[f"c{i}"] = c
    return pa.table(cols)


def _same(got: pa.Table, expected: pa.Table, padded: frozenset[int] = frozenset()) -> bool:
    """Whether two results hold the same rows as multisets (floats to 1e-9 relative; the CHAR(n) columns at
    ``padded`` of ``got`` without their padding)."""
    if got.num_rows != expected.num_rows or got.num_columns != expected.num_columns:
        return False
    a, b = _comparable(got, padded), _comparable(expected)
    keys = [(n, "ascending") for n in a.column_names]
    a, b = a.take(pc.sort_indices(a, sort_keys=keys)), b.take(pc.sort_indices(b, sort_keys=keys))
    for n in a.column_names:
        x, y = a.column(n), b.column(n)
        if not pc.all(pc.equal(pc.is_null(x), pc.is_null(y))).as_py():
            return False
        if pa.types.is_floating(x.type):
            tol = pc.add(pc.multiply(pc.max_element_wise(pc.abs(x), pc.abs(y)), 1e-9), 1e-9)
            ok = pc.less_equal(pc.abs(pc.subtract(x, y)), tol)
        else:
            ok = pc.equal(x, y)
        if not pc.all(pc.fill_null(ok, True)).as_py():
            return False
    return True


def _check(db, final: dict[str, pa.Table], queries: list[str]) -> list[str]:
    """The views that differ from DuckDB's result of their query on the final tables."""
    import duckdb

    con = duckdb.connect()
    con.execute(SCHEMA)
    for t, data in final.items():
        con.register("incoming", data)
        con.execute(f"INSERT INTO {t} SELECT * FROM incoming")
        con.unregister("incoming")
    bad = []
    for q in queries:
        rel = con.sql(query(q))
        expected = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
        got = db.execute(f"SELECT * FROM {q}").fetch_arrow()
        padded = frozenset(i for i, c in enumerate(db.views[q].view.columns) if c.type.pad)
        if not _same(got, expected, padded):
            bad.append(q)
    return bad


def run_reachability(nodes: int = 1000, edges: int = 2000, updates: int = 2000) -> int:
    """Reachability from 10 roots over a random graph whose oldest edge is replaced at every logical time,
    checked against a recomputation from scratch."""
    from ivm.bench.engine import build_reachability, reachable_naive

    rng = np.random.default_rng(7)
    print(f"reachability from 10 roots over {nodes} nodes, {edges} edges")
    r = build_reachability(nodes, edges, roots=10, rng=rng)
    t0 = time.perf_counter()
    r.load()
    print(f"  initial fixed point: {len(r.current())} (root, node) pairs in {time.perf_counter() - t0:.3f}s")
    lat = []
    for _ in range(updates // 10):
        t1 = time.perf_counter()
        r.replace_oldest(1)
        lat.append(time.perf_counter() - t1)
    single = np.percentile(lat, [50, 99]) * 1e3
    print(f"  {len(lat)} single updates: p50 {single[0]:.2f} ms, p99 {single[1]:.2f} ms")
    t1 = time.perf_counter()
    done = 0
    while done < updates:
        r.replace_oldest(100)
        done += 100
    dt = time.perf_counter() - t1
    print(f"  {done} updates at distinct times, 100 per step: {done / dt:,.0f} updates/s")
    ok = r.current() == reachable_naive(r.edge_list(), r.roots)
    print(f"  result equals a recomputation from scratch: {ok}")
    return 0 if ok else 1
