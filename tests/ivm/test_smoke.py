"""The engine's documented example runs and the reachability demo matches a recomputation."""

import doctest

import numpy as np

import ivm.engine.dataflow
from ivm.bench.engine import build_reachability, reachable_naive


def test_dataflow_doctest():
    result = doctest.testmod(ivm.engine.dataflow)
    assert result.attempted > 0 and result.failed == 0


def test_reachability_matches_bfs_after_updates():
    r = build_reachability(200, 400, 5, np.random.default_rng(0))
    r.load()
    assert r.current() == reachable_naive(r.edge_list(), r.roots)
    for k in (1, 7, 50):
        r.replace_oldest(k)
        assert r.current() == reachable_naive(r.edge_list(), r.roots)


def test_recursion_benchmark_runs_small_and_reports_its_keys():
    from ivm.bench.recursion import run

    res = run(quick=True, samples=5)
    assert set(res["workloads"]) == {
        f"{w}_{g}" for w in ("tc", "same_generation") for g in ("tree", "grid", "random")
    }
    for fig in res["workloads"].values():  # each view agreed with DuckDB's row count (checked inside)
        assert fig["rows"] > 0 and fig["insert_p50_ms"] > 0 and fig["delete_p50_ms"] > 0
    assert res["delete_over_insert_latency"] > 0 and res["update_speedup_vs_recompute"] > 0
    assert res["interactive_random"]["add_p50_ms"] > 0
