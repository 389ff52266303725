"""The engine's documented example runs and the reachability demo matches a recomputation."""

import doctest

import numpy as np

import ivm.dataflow
from ivm.bench import build_reachability, reachable_naive


def test_dataflow_doctest():
    result = doctest.testmod(ivm.dataflow)
    assert result.attempted > 0 and result.failed == 0


def test_reachability_matches_bfs_after_updates():
    r = build_reachability(200, 400, 5, np.random.default_rng(0))
    r.load()
    assert r.current() == reachable_naive(r.edge_list(), r.roots)
    for k in (1, 7, 50):
        r.replace_oldest(k)
        assert r.current() == reachable_naive(r.edge_list(), r.roots)
