"""Engine benchmarks, on one core: ``python -m ivm.bench [--json] [--quick]``; recursive views with
``python -m ivm.bench recursion`` (see ``ivm.bench.recursion``), SQL views with ``python -m ivm.bench sql``
(see ``ivm.bench.sql``).

(a) arrange + count: 10M updates over 1M keys in batches of 100k.
(b) join: 100k-row deltas against a 10M-row arrangement.
(c) reachability from 10 roots on a random graph of 1,000 nodes and 2,000 edges, each update replacing the
    oldest edge by a new random one at its own logical time: throughput with many logical times per physical
    step, and the latency of single updates after 1,000 and after 100,000 updates (the updates in between are
    applied 1,000 logical times per step; each keeps its own time, so the state reached is the same).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import ivm
from ivm.engine.allocator import tune_allocator
from ivm.engine.batch import Batch

__all__ = ["Reachability", "build_reachability", "reachable_naive", "main"]

_ONE_CORE_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class Reachability:
    """The reachability dataflow of the benchmark over a sliding window of random edges."""

    def __init__(
        self, nodes: int, edges: int, roots: int, rng: np.random.Generator, capture: bool = True
    ) -> None:
        self.nodes = nodes
        self.rng = rng
        self.src = rng.integers(0, nodes, edges)
        self.dst = rng.integers(0, nodes, edges)
        self.head = 0
        self.time = 0
        self.roots = sorted(int(x) for x in rng.choice(nodes, roots, replace=False))
        self.engine = ivm.Engine()
        df = self.engine.dataflow("reach")
        self.edges_in = df.input([np.int64, np.int64], "edges")
        self.roots_in = df.input([np.int64], "roots")
        with df.loop() as loop:
            e = loop.enter_arranged(self.edges_in.arrange([0]))
            start = self.roots_in.map(lambda c, v: ((c[0], c[0]), (None, None)))
            reach = loop.variable(initial=start)
            nxt = reach.arrange([1]).join(e, positions=[1, 2]).concat(loop.enter(start)).distinct()
            reach.set(nxt)
            self.result = loop.leave(nxt)
        self.capture = self.result.capture() if capture else None
        self.df = df

    def _send(self, inp, cols, times, diffs) -> None:
        inp.send(Batch.build(cols, None, times.reshape(-1, 1), diffs))

    def load(self) -> None:
        n = len(self.src)
        self._send(
            self.edges_in,
            [self.src.copy(), self.dst.copy()],
            np.zeros(n, np.int64),
            np.ones(n, np.int64),
        )
        r = np.asarray(self.roots, dtype=np.int64)
        self._send(self.roots_in, [r], np.zeros(len(r), np.int64), np.ones(len(r), np.int64))
        self._advance(1)

    def _advance(self, t: int) -> None:
        self.time = t
        self.edges_in.advance_to(t)
        self.roots_in.advance_to(t)
        self.engine.step()

    def replace_oldest(self, k: int) -> None:
        """``k`` updates, each at its own time: the oldest edge out, a new random edge in."""
        n = len(self.src)
        slots = (self.head + np.arange(k)) % n
        times = self.time + np.arange(k, dtype=np.int64)
        old_s, old_d = self.src[slots], self.dst[slots]
        new_s = self.rng.integers(0, self.nodes, k)
        new_d = self.rng.integers(0, self.nodes, k)
        self.src[slots], self.dst[slots] = new_s, new_d
        self.head = int((self.head + k) % n)
        self._send(
            self.edges_in,
            [np.concatenate([old_s, new_s]), np.concatenate([old_d, new_d])],
            np.concatenate([times, times]),
            np.concatenate([-np.ones(k, np.int64), np.ones(k, np.int64)]),
        )
        self._advance(self.time + k)

    def edge_list(self) -> list[tuple[int, int]]:
        return list(zip(self.src.tolist(), self.dst.tolist(), strict=True))

    def current(self) -> set[tuple[int, int]]:
        rows = self.capture.rows_at(self.time)
        assert all(m == 1 for m in rows.values())
        return set(rows)


def build_reachability(
    nodes: int, edges: int, roots: int, rng: np.random.Generator, capture: bool = True
) -> Reachability:
    return Reachability(nodes, edges, roots, rng, capture)


def reachable_naive(edges: list[tuple[int, int]], roots: list[int]) -> set[tuple[int, int]]:
    """(root, node) pairs by breadth-first search; the oracle for reachability."""
    adj: dict[int, set[int]] = {}
    for s, d in edges:
        adj.setdefault(s, set()).add(d)
    out = set()
    for r in roots:
        seen, frontier = {r}, [r]
        while frontier:
            nxt = []
            for x in frontier:
                for y in adj.get(x, ()):
                    if y not in seen:
                        seen.add(y)
                        nxt.append(y)
            frontier = nxt
        out |= {(r, x) for x in seen}
    return out


def bench_arrange_count(total: int, keys: int, batch: int) -> dict:
    rng = np.random.default_rng(1)
    engine = ivm.Engine()
    df = engine.dataflow()
    inp = df.input([np.int64])
    inp.count([0]).as_collection().probe()
    data = rng.integers(0, keys, total)
    t0 = time.perf_counter()
    for i, start in enumerate(range(0, total, batch)):
        chunk = data[start : start + batch]
        inp.send(Batch.build([chunk], None, np.full((len(chunk), 1), i), np.ones(len(chunk), np.int64)))
        inp.advance_to(i + 1)
        engine.step()
    dt = time.perf_counter() - t0
    return {
        "updates": total,
        "keys": keys,
        "batch": batch,
        "seconds": dt,
        "arrange_count_updates_per_s": total / dt,
    }


def bench_join(arranged_rows: int, delta: int, rounds: int) -> dict:
    rng = np.random.default_rng(2)
    engine = ivm.Engine()
    df = engine.dataflow()
    big = df.input([np.int64, np.int64])
    small = df.input([np.int64, np.int64])
    out = big.arrange([0]).join(small.arrange([0]))
    counted = [0]
    out.capture().on_batch(lambda b: counted.__setitem__(0, counted[0] + len(b)))
    keys = np.arange(arranged_rows, dtype=np.int64)
    big.send(
        Batch.build(
            [keys, keys * 2],
            None,
            np.zeros((arranged_rows, 1), np.int64),
            np.ones(arranged_rows, np.int64),
        )
    )
    big.advance_to(1)
    small.advance_to(1)
    t0 = time.perf_counter()
    engine.step()
    build = time.perf_counter() - t0
    counted[0] = 0
    deltas = [rng.integers(0, arranged_rows, delta) for _ in range(rounds)]
    t0 = time.perf_counter()
    for i, k in enumerate(deltas):
        small.send(Batch.build([k, k], None, np.full((delta, 1), i + 1), np.ones(delta, np.int64)))
        big.advance_to(i + 2)
        small.advance_to(i + 2)
        engine.step()
    dt = time.perf_counter() - t0
    return {
        "arranged_rows": arranged_rows,
        "delta_rows": delta,
        "rounds": rounds,
        "build_seconds": build,
        "output_rows": counted[0],
        "seconds": dt,
        "join_output_rows_per_s": counted[0] / dt,
    }


def bench_reachability(late: int, per_step: int, throughput_updates: int) -> dict:
    rng = np.random.default_rng(3)
    r = build_reachability(1000, 2000, 10, rng, capture=False)
    r.load()
    # throughput: many logical times (one update each) per physical step
    thr = {}
    for k in (1, 10, 100, 1000):
        n = min(throughput_updates, max(k * 20, 200 if k == 1 else 0))
        t0 = time.perf_counter()
        done = 0
        while done < n:
            r.replace_oldest(k)
            done += k
        thr[k] = done / (time.perf_counter() - t0)

    # sustained latency: single updates after 1,000 and after `late` updates
    def single_latencies(count: int) -> np.ndarray:
        lat = np.empty(count)
        for i in range(count):
            t0 = time.perf_counter()
            r.replace_oldest(1)
            lat[i] = time.perf_counter() - t0
        return lat

    applied = r.time - 1
    r2 = build_reachability(1000, 2000, 10, np.random.default_rng(4), capture=False)
    r2.load()
    r = r2
    r.replace_oldest(1000 - 200)
    early = single_latencies(200)
    while r.time - 1 < late - 200:
        r.replace_oldest(min(per_step, late - 200 - (r.time - 1)))
    late_lat = single_latencies(200)
    p_e = np.percentile(early, [50, 99]) * 1e3
    p_l = np.percentile(late_lat, [50, 99]) * 1e3
    return {
        "throughput_by_logical_times_per_step": {str(k): v for k, v in thr.items()},
        "reach_single_updates_per_s": max(thr.values()),
        "reach_live_updates_per_s": thr[1],  # one logical time per step: each update applied on its own
        "throughput_updates_applied": applied,
        "early_after_updates": 1000,
        "late_after_updates": late,
        "early_p50_ms": p_e[0],
        "early_p99_ms": p_e[1],
        "late_p50_ms": p_l[0],
        "late_p99_ms": p_l[1],
        "reach_p50_late_over_early": p_l[0] / p_e[0],
        "reach_p99_late_over_early": p_l[1] / p_e[1],
        "stored_updates_late": r.engine.stored_updates(),
    }


def main(argv: list[str] | None = None) -> None:
    tune_allocator()  # a long-running command: freed memory is kept for the next merge
    ap = argparse.ArgumentParser(
        prog="python -m ivm.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--only", choices=["count", "join", "reach"], action="append")
    argv = sys.argv[1:] if argv is None else list(argv)
    suite = argv[0] if argv[:1] in (["recursion"], ["sql"]) else None
    if suite is not None:
        argv = argv[1:]
    args = ap.parse_args(argv)
    for v in _ONE_CORE_VARS:
        os.environ.setdefault(v, "1")
    if suite is not None:
        if suite == "sql":
            from ivm.bench.sql import report, run
        else:
            from ivm.bench.recursion import report, run

        res = run(quick=args.quick)
        if args.json:
            print(json.dumps(res))
        else:
            report(res)
        return
    for v in _ONE_CORE_VARS:
        os.environ.setdefault(v, "1")
    q = args.quick
    only = set(args.only or ["count", "join", "reach"])
    res: dict = {}
    if "count" in only:
        res["arrange_count"] = bench_arrange_count(
            1_000_000 if q else 10_000_000, 100_000 if q else 1_000_000, 100_000
        )
        res["arrange_count_updates_per_s"] = res["arrange_count"]["arrange_count_updates_per_s"]
    if "join" in only:
        res["join"] = bench_join(1_000_000 if q else 10_000_000, 100_000, 5 if q else 20)
        res["join_output_rows_per_s"] = res["join"]["join_output_rows_per_s"]
    if "reach" in only:
        rr = bench_reachability(5_000 if q else 100_000, 1000, 2000 if q else 10_000)
        res["reach"] = rr
        for k in (
            "reach_single_updates_per_s",
            "reach_live_updates_per_s",
            "reach_p50_late_over_early",
            "reach_p99_late_over_early",
        ):
            res[k] = rr[k]
    if args.json:
        print(json.dumps(res))
        return
    if "arrange_count" in res:
        a = res["arrange_count"]
        print(
            f"(a) arrange+count: {a['updates']:,} updates over {a['keys']:,} keys, batches of "
            f"{a['batch']:,}: {a['arrange_count_updates_per_s']:,.0f} updates/s (target 5,000,000)"
        )
    if "join" in res:
        j = res["join"]
        print(
            f"(b) join: {j['delta_rows']:,}-row deltas x {j['arranged_rows']:,}-row arrangement: "
            f"{j['join_output_rows_per_s']:,.0f} output rows/s (target 5,000,000)"
        )
    if "reach" in res:
        r = res["reach"]
        print("(c) reachability, 1,000 nodes / 2,000 edges / 10 roots:")
        for k, v in r["throughput_by_logical_times_per_step"].items():
            print(f"    {k:>5} logical times per step: {v:,.0f} updates/s")
        print(f"    single-update throughput: {r['reach_single_updates_per_s']:,.0f} updates/s (target 1,250)")
        print(
            f"    single-update latency after {r['early_after_updates']:,}: p50 "
            f"{r['early_p50_ms']:.2f} ms, p99 {r['early_p99_ms']:.2f} ms"
        )
        print(
            f"    single-update latency after {r['late_after_updates']:,}: p50 "
            f"{r['late_p50_ms']:.2f} ms, p99 {r['late_p99_ms']:.2f} ms"
        )
        print(
            f"    late/early: p50 {r['reach_p50_late_over_early']:.2f}x, p99 "
            f"{r['reach_p99_late_over_early']:.2f}x (target <= 1.5x)"
        )
