"""Several dataflows in one engine sharing arrangements; dropping; loops with limits; probes."""

import numpy as np

import ivm
from ivm.engine import stats
from ivm.engine.batch import Batch


def _send(inp, cols, t):
    n = len(cols[0])
    inp.send(Batch.build([np.asarray(c, np.int64) for c in cols], None, np.full(n, t), np.ones(n, np.int64)))


def test_two_dataflows_joining_one_arrangement_hold_one_copy():
    engine = ivm.Engine()
    base = engine.dataflow("base")
    orders = base.input([np.int64, np.int64])  # (customer, amount)
    by_customer = orders.arrange([0])
    _send(orders, [np.arange(1000) % 100, np.arange(1000)], 0)
    orders.advance_to(1)
    engine.step()

    results = []
    inputs = []
    for name in ("v1", "v2"):
        df = engine.dataflow(name)
        shared = df.import_arranged(by_customer)
        assert shared.trace is by_customer.trace
        probe_keys = df.input([np.int64, np.int64])
        inputs.append(probe_keys)
        results.append(shared.join(probe_keys.arrange([0])).capture())
    assert len({id(t) for t in engine.traces()}) == len(engine.traces())
    base_traces = [t for t in engine.traces() if t is by_customer.trace]
    assert len(base_traces) == 1
    assert engine.stored_updates() == sum(len(t) for t in engine.traces())

    for i, inp in enumerate(inputs):
        _send(inp, [[3, 7 + i], [0, 0]], 1)
    for t in (orders, *inputs):
        t.advance_to(2)
    _send(orders, [[3], [5000]], 2)
    for t in (orders, *inputs):
        t.advance_to(3)
    engine.step()
    engine.step()
    for i, cap in enumerate(results):
        got = cap.rows_at(2)
        expect = {}
        for c in (3, 7 + i):
            for a in range(c, 1000, 100):
                expect[(c, a, 0)] = 1
        expect[(3, 5000, 0)] = 1
        assert got == expect


def test_new_dataflow_over_large_arrangement_does_not_resort_it():
    engine = ivm.Engine()
    base = engine.dataflow()
    big = base.input([np.int64, np.int64])
    arranged = big.arrange([0])
    n = 1_000_000
    keys = np.arange(n, dtype=np.int64)
    _send(big, [keys, keys * 3], 0)
    big.advance_to(1)
    engine.step()
    stats.reset()
    df = engine.dataflow()
    shared = df.import_arranged(arranged)
    small = df.input([np.int64, np.int64])
    out = shared.join(small.arrange([0])).capture()
    _send(small, [[5, 999_999, n + 1], [1, 2, 3]], 1)
    small.advance_to(2)
    big.advance_to(2)
    engine.step()
    assert stats.rows_sorted < 100
    assert out.rows_at(1) == {(5, 15, 1): 1, (999_999, 2_999_997, 2): 1}


def test_dropping_dataflows_releases_traces():
    engine = ivm.Engine()
    base = engine.dataflow()
    inp = base.input([np.int64])
    arr = inp.arrange([0])
    other = engine.dataflow()
    imported = other.import_arranged(arr)
    imported.reduce(ivm.distinct())
    _send(inp, [[1, 2, 3]], 0)
    inp.advance_to(1)
    engine.step()
    trace = arr.trace
    base.drop()
    assert not trace.freed  # still read by the other dataflow
    other.drop()
    assert trace.freed and len(trace) == 0
    assert engine.traces() == []


def test_several_logical_times_in_one_step_stay_distinct_and_probe_reports_final():
    engine = ivm.Engine()
    df = engine.dataflow()
    inp = df.input([np.int64])
    total = inp.map(lambda c, v: ((c[0] * 0,), (None,))).count([0]).as_collection().capture()
    probe = inp.probe()
    for t in range(5):
        inp.insert([(t,)] * (t + 1), time=t)
    assert not probe.done(0)
    inp.advance_to(5)
    engine.step()
    assert probe.done(4) and not probe.done(5)
    for t in range(5):
        assert total.rows_at(t) == {(0, sum(range(1, t + 2))): 1}


def test_iteration_limit_error_and_return():
    for mode in ("error", "return"):
        engine = ivm.Engine()
        df = engine.dataflow()
        seed = df.input([np.int64])
        with df.loop(limit=10, on_limit=mode) as loop:
            x = loop.variable(initial=seed)
            grown = x.map(lambda c, v: ((c[0] + 1,), v)).concat(loop.enter(seed)).distinct()
            x.set(grown)
            out = loop.leave(grown).capture()
        seed.insert([(0,)], time=0)
        seed.advance_to(1)
        if mode == "error":
            # the failing dataflow is dropped with its error; other dataflows would go on
            engine.step()
            assert engine.failed == [df]
            assert isinstance(df.error, ivm.IterationLimitError) and df.dropped
        else:
            engine.step()
            # the body ran ten times, at iterations 0..9; its value at iteration 9 is the result
            assert out.rows_at(0) == {(i,): 1 for i in range(11)}


def test_nested_loops_compute_transitive_closure_per_round():
    """An outer loop re-running an inner closure loop; checks nesting of product times."""
    engine = ivm.Engine()
    df = engine.dataflow()
    edges = df.input([np.int64, np.int64])
    with df.loop() as outer:
        e = outer.enter(edges)
        with outer.loop() as inner:
            ie = inner.enter(e)
            tc = inner.variable(initial=e)
            step = tc.arrange([1]).join(ie.arrange([0]), positions=[1, 2])
            nxt = step.concat(ie).distinct()
            tc.set(nxt)
            closure = inner.leave(nxt)
        v = outer.variable(initial=e)
        v.set(closure.concat(v).distinct())
        out = outer.leave(closure).capture()
    chain = [(i, i + 1) for i in range(6)]
    edges.insert(chain, time=0)
    edges.advance_to(1)
    engine.step()
    expect = {(a, b): 1 for a in range(7) for b in range(a + 1, 7)}
    assert out.rows_at(0) == expect
    edges.delete([(2, 3)], time=1)
    edges.advance_to(2)
    engine.step()
    expect = {(a, b): 1 for a in range(7) for b in range(a + 1, 7) if not (a <= 2 < b)}
    assert out.rows_at(1) == expect


def test_a_distinct_in_a_loop_reads_its_output_only_in_steps_of_several_epochs():
    """Reachability one edge update per step: the distinct in the loop works from its input trace alone (its
    output trace is never read), and stays exact, also across a step of several epochs (which reads it) and
    an idle step."""
    from ivm.bench.engine import build_reachability, reachable_naive
    from ivm.engine.checkpoint import operators
    from ivm.engine.operators.reduce import ReduceOp

    r = build_reachability(60, 120, 3, np.random.default_rng(5))
    r.load()
    (reduce,) = [op for _, op in operators(r.df) if isinstance(op, ReduceOp)]
    out = reduce.output.trace
    lookups = []
    find = out.find
    out.find = lambda *a, **k: lookups.append(1) or find(*a, **k)
    for _ in range(40):
        r.replace_oldest(1)
        assert r.current() == reachable_naive(r.edge_list(), r.roots)
    assert not lookups
    r.replace_oldest(5)  # five epochs in one step
    r.engine.step()  # and a step retiring none
    assert lookups and r.current() == reachable_naive(r.edge_list(), r.roots)
    for _ in range(10):
        r.replace_oldest(1)
        assert r.current() == reachable_naive(r.edge_list(), r.roots)
