"""A dataflow saved at rest and loaded into the same dataflow built in a new engine goes on exactly as the
original: random updates to both afterwards leave every arrangement with the same contents."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ivm
from ivm.engine import checkpoint
from ivm.engine.batch import Batch, consolidate
from ivm.engine.files import Written
from ivm.engine.operators.arrange import ArrangeOp
from ivm.engine.operators.reducers import Aggregate, TopK


def build(engine: ivm.Engine):
    """Inputs (edges, values) and a dataflow with a linear and a non-linear aggregate, a join, a top-k and
    a reachability loop."""
    df = engine.dataflow("views")
    edges = df.input([np.int64, np.int64])
    values = df.input([np.int64, np.int64])
    values.aggregate([0], [("count", None), ("sum", 0)])
    values.reduce([0], Aggregate([("min", 0), ("max", 0)]))
    values.reduce([0], TopK([(0, True)], 2))
    edges.join(values, [0], [0])
    with df.loop(limit=50) as loop:
        e = loop.enter_arranged(edges.arrange([0]))
        start = loop.enter(values.project([0]).distinct())
        reach = loop.variable(initial=start)
        nxt = reach.arrange([0]).join(e, positions=[1]).concat(start).distinct()
        reach.set(nxt)
        loop.leave(nxt).arrange([0])
    return df, edges, values


def contents(df) -> list[dict]:
    """Each arrangement's rows as of now (time ignored), in operator order."""
    out = []
    for _, op in checkpoint.operators(df):
        if isinstance(op, ArrangeOp):
            batches = [b.updates for b in op.trace.batches()]
            if not batches:
                out.append({})
                continue
            u = Batch.concat(batches)
            total, _ = consolidate(u.with_times(np.zeros((len(u), u.dim), np.int64)))
            out.append({r[:-2]: r[-1] for r in total.to_rows()})
    return out


def feed(inputs, live: list[list], rng, t: int) -> None:
    """Insert a few rows into each input and delete a few it holds (``live``: each input's rows)."""
    for inp, rows in zip(inputs, live, strict=True):
        n = int(rng.integers(1, 6))
        new = [(int(a), int(b)) for a, b in zip(rng.integers(0, 8, n), rng.integers(0, 5, n), strict=True)]
        gone = [
            rows.pop(int(rng.integers(0, len(rows)))) for _ in range(min(len(rows), int(rng.integers(0, 3))))
        ]
        rows.extend(new)
        if new:
            inp.insert(new, time=t)
        if gone:
            inp.delete(gone, time=t)
    for inp in inputs:
        inp.advance_to(t + 1)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), before=st.integers(1, 12), after=st.integers(1, 8))
def test_loaded_dataflow_goes_on_as_the_original(tmp_path_factory, seed, before, after):
    directory = str(tmp_path_factory.mktemp("ckpt"))
    rng = np.random.default_rng(seed)
    a = ivm.Engine()
    df_a, *inputs_a = build(a)
    live_a: list[list] = [[], []]
    for t in range(before):
        feed(inputs_a, live_a, rng, t)
        a.step()
    written = Written()
    saved = checkpoint.save(df_a, directory, written)
    assert checkpoint.save(df_a, directory, written) == saved  # nothing changed: the same files

    b = ivm.Engine()
    df_b, *inputs_b = build(b)
    b.step()
    checkpoint.load(df_b, saved, Written())
    checkpoint.resume(df_b, df_a.frontier)
    assert contents(df_b) == contents(df_a)
    live_b = [list(rows) for rows in live_a]
    for t in range(before, before + after):
        state = rng.bit_generator.state
        feed(inputs_a, live_a, rng, t)
        rng.bit_generator.state = state
        feed(inputs_b, live_b, rng, t)
        a.step()
        b.step()
        assert contents(df_b) == contents(df_a)


def test_a_dataflow_built_otherwise_refuses_the_state(tmp_path):
    a = ivm.Engine()
    df_a, edges, values = build(a)
    a.step()
    saved = checkpoint.save(df_a, str(tmp_path), Written())
    other = ivm.Engine().dataflow("views")
    other.input([np.int64, np.int64]).arrange([1])
    with pytest.raises(checkpoint.Mismatch):
        checkpoint.load(other, saved, Written())


def test_only_a_dataflow_at_rest_is_saved(tmp_path):
    a = ivm.Engine()
    df_a, edges, values = build(a)
    edges.insert([(1, 2)], time=0)
    edges.advance_to(1)
    values.advance_to(1)
    df_a.inputs[0]._release(1)  # queued, not yet run
    with pytest.raises(RuntimeError, match="not at rest"):
        checkpoint.save(df_a, str(tmp_path), Written())
