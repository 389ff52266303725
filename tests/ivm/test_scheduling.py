"""Only activated operators run: a dataflow whose inputs did not change does no operator work, a loop's round
runs only the operators its changes reach, and results are those of running everything."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import ivm
from ivm.engine.batch import Batch
from ivm.engine.checkpoint import operators


def _send(inp, cols, t, diff=1):
    n = len(cols[0])
    inp.send(
        Batch.build([np.asarray(c, np.int64) for c in cols], None, np.full(n, t), np.full(n, diff, np.int64))
    )


def _count_runs(engine) -> Counter:
    """Wrap every operator's ``run`` to count its calls, by (dataflow, path)."""
    runs: Counter = Counter()
    for df in engine.dataflows:
        for path, op in operators(df):
            inner = op.run

            def counted(point, _inner=inner, _key=(df.name, path)):
                runs[_key] += 1
                return _inner(point)

            op.run = counted
    return runs


def _not_residue(i: int):
    return lambda c, v: c[1] % 40 != i


def test_dataflows_whose_inputs_did_not_change_run_no_operator():
    engine = ivm.Engine()
    base = engine.dataflow("base")
    a, b = base.input([np.int64, np.int64], "a"), base.input([np.int64, np.int64], "b")
    a_arr, b_arr = a.arrange([0]), b.arrange([0])
    counts = {}
    for i in range(40):
        df = engine.dataflow(f"b{i}")
        rows = df.import_arranged(b_arr).as_collection().filter(_not_residue(i))
        counts[df.name] = rows.count([0]).as_collection().capture()
    df = engine.dataflow("a0")
    joined = df.import_arranged(a_arr).join(df.import_arranged(b_arr))
    counts["a0"] = joined.capture()
    rng = np.random.default_rng(5)
    b_rows = [rng.integers(0, 10, 200), rng.integers(0, 1000, 200)]
    _send(b, b_rows, 0)
    for inp in (a, b):
        inp.advance_to(1)
    engine.step()
    runs = _count_runs(engine)
    prepared: Counter = Counter()
    for df in engine.dataflows:
        df.prepare = (lambda inner, name: lambda: (prepared.update([name]), inner()))(df.prepare, df.name)
    a_rows: list[tuple[int, int]] = []
    for t in range(1, 30):
        row = (int(rng.integers(0, 10)), t)
        a_rows.append(row)
        _send(a, [[row[0]], [row[1]]], t)
        for inp in (a, b):
            inp.advance_to(t + 1)
        engine.step()
    ran = {name for name, _ in runs}
    assert ran == {"base", "a0"}, ran  # none of the 40 dataflows reading only b ran an operator
    assert set(prepared) == {"base", "a0"}, prepared  # nor began a step: their frontiers only followed b's
    assert all(df.frontier == 30 for df in engine.dataflows)  # yet every frontier moved
    for df in engine.dataflows:  # and the handles they hold with it: b's trace may compact up to there
        for h in df.handles:
            assert h.frontier.elements.tolist() == [[30]]
    assert b_arr.trace.since.elements.tolist() == [[30]]
    expect_join = Counter()
    for k, v in a_rows:
        for bk, bv in zip(*b_rows, strict=True):
            if bk == k:
                expect_join[(k, v, int(bv))] += 1
    assert counts["a0"].rows_at(30) == dict(expect_join)
    for i in range(40):
        kept = Counter(int(k) for k, v in zip(*b_rows, strict=True) if v % 40 != i)
        assert counts[f"b{i}"].rows_at(30) == {(k, n): 1 for k, n in kept.items()}


def test_a_loop_round_runs_only_the_operators_its_changes_reach():
    engine = ivm.Engine()
    df = engine.dataflow("two closures")
    e1, e2 = df.input([np.int64, np.int64], "e1"), df.input([np.int64, np.int64], "e2")
    arranged = [e.arrange([0]) for e in (e1, e2)]
    with df.loop() as loop:
        results = []
        for e, arr in zip((e1, e2), arranged, strict=True):
            edges = loop.enter_arranged(arr)
            start = loop.enter(e)
            reach = loop.variable(initial=start)
            nxt = reach.arrange([1]).join(edges, positions=[1, 2]).concat(start).distinct()
            reach.set(nxt)
            results.append(nxt)
        out = [loop.leave(r).capture() for r in results]
    chain = [(i, i + 1) for i in range(12)]
    _send(e1, list(zip(*chain, strict=True)), 0)
    _send(e2, list(zip(*chain, strict=True)), 0)
    for e in (e1, e2):
        e.advance_to(1)
    engine.step()
    paths = {(i, j) for i in range(13) for j in range(i + 1, 13)}
    assert set(out[0].rows_at(0)) == set(out[1].rows_at(0)) == paths
    ops = dict(operators(df))
    runs = _count_runs(engine)
    _send(e1, [[12], [13]], 1)  # only the first closure changes
    for e in (e1, e2):
        e.advance_to(2)
    engine.step()
    assert set(out[0].rows_at(1)) == paths | {(i, 13) for i in range(13)}
    assert set(out[1].rows_at(1)) == paths
    # the second closure's operators are the loop's (and outer) operators created after the first's
    second = {p for p, op in ops.items() if _lineage(op, e2.op) and not _lineage(op, e1.op)}
    assert second and not any(runs[("two closures", p)] for p in second)


def _lineage(op, source) -> bool:
    """Whether ``op`` reads, through its queues' producers, the operator ``source``."""
    seen, stack = set(), [op]
    producers = {}
    for _, o in operators(source.scope.dataflow):
        for q, _ in o.consumers:
            producers.setdefault(id(q), []).append(o)
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if o is source:
            return True
        for q in o.queues:
            stack += producers.get(id(q), [])
    return False


@pytest.mark.parametrize("seed", [1, 2])
def test_most_views_idle_one_changing_equals_duckdb(seed):
    duckdb = pytest.importorskip("duckdb")
    db = ivm.connect()
    con = duckdb.connect()
    ddl = "CREATE TABLE a (k INTEGER PRIMARY KEY, g INTEGER, v INTEGER); CREATE TABLE b (k INTEGER, w INTEGER)"
    db.execute(ddl)
    con.execute(ddl)
    views = {f"idle{i}": f"SELECT k, sum(w) AS s FROM b WHERE w > {i} GROUP BY k" for i in range(30)}
    views["busy"] = "SELECT a.g, count(*) AS n, sum(b.w) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.g"
    views["loop"] = (
        "WITH RECURSIVE r(x) AS (SELECT k FROM a WHERE g = 0 UNION SELECT a.k FROM r JOIN a ON a.g = r.x) "
        "SELECT x FROM r"
    )
    rng = np.random.default_rng(seed)
    rows = ", ".join(
        f"({int(k)}, {int(w)})" for k, w in zip(rng.integers(0, 20, 100), rng.integers(0, 50, 100), strict=True)
    )
    for c in (db, con):
        c.execute(f"INSERT INTO b VALUES {rows}")
    for name, sql in views.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    runs = _count_runs(db.engine)
    live: set[int] = set()
    for step in range(40):
        k = int(rng.integers(0, 30))
        if k in live:
            stmt = f"DELETE FROM a WHERE k = {k}"
            live.discard(k)
        else:
            stmt = f"INSERT INTO a VALUES ({k}, {int(rng.integers(0, 8))}, {step})"
            live.add(k)
        db.execute(stmt)
        con.execute(stmt)
        for name in ("busy", "loop", "idle3"):
            got = sorted(db.execute(f"SELECT * FROM {name}").fetchall())
            assert got == sorted(con.execute(views[name]).fetchall()), (step, name)
    idle_names = {db.views[f"idle{i}"].df.name for i in range(30)}
    assert not any(runs[(name, path)] for name, path in runs if name in idle_names)


def test_idle_dataflows_fall_asleep_cost_a_step_no_visit_and_wake_when_reached():
    engine = ivm.Engine()
    base = engine.dataflow("base")
    a, b = base.input([np.int64, np.int64], "a"), base.input([np.int64, np.int64], "b")
    b_arr = b.arrange([0])
    a.arrange([0])
    counted, captures = {}, {}
    for i in range(40):
        df = engine.dataflow(f"b{i}")
        counted[i] = df.import_arranged(b_arr).as_collection().filter(_not_residue(i)).count([0])
        captures[f"b{i}"] = counted[i].as_collection().capture()
    chained = engine.dataflow("chained")  # reads what a follower of b makes: asleep, it follows one asleep
    captures["chained"] = chained.import_arranged(counted[0]).as_collection().capture()
    follows: Counter = Counter()
    for df in engine.dataflows:
        df.follow = (lambda inner, name: lambda: (follows.update([name]), inner()))(df.follow, df.name)
    rows: list[tuple[int, int]] = []
    t = 0

    def step(send_b: bool) -> None:
        nonlocal t
        if send_b:
            row = (t % 7, t)
            rows.append(row)
            _send(b, [[row[0]], [row[1]]], t)
        else:
            _send(a, [[t], [t]], t)
        t += 1
        for inp in (a, b):
            inp.advance_to(t)
        engine.step()

    step(True)
    step(False)  # nothing reaches the followers: each follows once and falls asleep
    assert all(engine.dataflows[i].asleep for i in range(1, 42))
    follows.clear()
    for _ in range(10):
        step(False)
    assert not follows  # asleep, they were passed by
    assert all(df.frontier == t for df in engine.dataflows)  # yet their frontiers are their sources'
    assert b_arr.trace.since.elements.tolist() == [[t]]  # and b's trace may compact up to there
    step(True)  # reached again: they wake, step, and fall asleep at the next step nothing reaches them
    assert not any(df.asleep for df in engine.dataflows)
    step(False)
    assert all(engine.dataflows[i].asleep for i in range(1, 42))
    for i in range(40):
        kept = Counter(k for k, v in rows if v % 40 != i)
        assert captures[f"b{i}"].rows_at(t) == {(k, n): 1 for k, n in kept.items()}
    assert captures["chained"].rows_at(t) == captures["b0"].rows_at(t)


def test_a_dataflow_asleep_fails_with_the_dataflow_it_reads():
    engine = ivm.Engine()
    base = engine.dataflow("base")
    b = base.input([np.int64, np.int64], "b")
    source = engine.dataflow("source")
    made = source.import_arranged(b.arrange([0])).as_collection().count([0])
    reader = engine.dataflow("reader")
    reader.import_arranged(made).as_collection().capture()
    for t in range(3):
        _send(b, [[t], [t]], t)
        b.advance_to(t + 1)
        engine.step()
    b.advance_to(4)
    engine.step()
    assert reader.asleep
    source.fail(RuntimeError("broken"))
    b.advance_to(5)
    engine.step()
    assert engine.failed == [reader] and reader.dropped
    assert "it reads 'source', which failed: broken" in str(reader.error)
