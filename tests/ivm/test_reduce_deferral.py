"""A distinct in a loop working from its input alone defers each key it re-evaluates to the key's next
iteration with history only, and not at all once the step no longer changes the key: its updates at every
(epoch, iteration) are those of the general path, which reads its output trace."""

from __future__ import annotations

import numpy as np

from ivm.bench.engine import build_reachability, reachable_naive
from ivm.engine.checkpoint import operators
from ivm.engine.operators import reduce as reduce_module
from ivm.engine.operators.reduce import ReduceOp


def _reduce_of(r) -> ReduceOp:
    (op,) = [op for _, op in operators(r.df) if isinstance(op, ReduceOp)]
    return op


def _rows(op: ReduceOp) -> list:
    trace = op.output.trace
    trace.compact_fully()
    return sorted(row for b in trace.batches() for row in b.updates.to_rows())


def test_deferring_to_the_next_iteration_only_changes_no_update():
    """Reachability under single edge updates (each a deletion and an insertion, so keys' counts fall as well
    as rise within a step): the distinct's output at every time, and the result, are those of the general
    path, and it runs at fewer iterations."""
    fast = build_reachability(80, 160, 4, np.random.default_rng(11))
    slow = build_reachability(80, 160, 4, np.random.default_rng(11))
    fast.load()
    slow.load()
    general = _reduce_of(slow)
    general._evaluate_from_input = lambda keys, point: reduce_module._LATER_EPOCHS
    runs = {"fast": 0, "slow": 0}
    for name, r in (("fast", fast), ("slow", slow)):
        op = _reduce_of(r)
        run = op.run
        op.run = lambda point, run=run, name=name: runs.__setitem__(name, runs[name] + 1) or run(point)
    for _ in range(60):
        fast.replace_oldest(1)
        slow.replace_oldest(1)
        assert fast.current() == slow.current() == reachable_naive(fast.edge_list(), fast.roots)
    assert _rows(_reduce_of(fast)) == _rows(general)
    assert runs["fast"] <= runs["slow"]
