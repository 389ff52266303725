"""Property tests: random update histories against naive re-evaluation at every logical time.

Each history is a list of physical steps. A step stages insertions and deletions (with multiplicities, NULLs,
and insertions cancelled by deletions at the same time) at several consecutive logical times ``t .. t+k``,
advances every input to ``t+k+1`` and calls ``engine.step()`` once. After each step, and again at the end, the
captured output at every retired time must equal a plain-Python evaluation of the same computation over the
inputs accumulated up to that time (multisets as ``dict`` row -> count). Steps vary how they stage their
updates: in one call per input (mixed times), one call per time, newest time first, or ahead of time (during
the previous step, so the inputs must hold them back); some steps are followed by an idle ``engine.step()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ivm

Row = tuple
Multiset = dict[Row, int]
Oracle = Callable[[list[Multiset]], Multiset]

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- update histories ---------------------------------------------------------------------------------


@dataclass
class Step:
    """Updates ``(input index, row, diff)`` at each of several times, retired together by one step."""

    times: list[tuple[int, list[tuple[int, Row, int]]]]
    advance: int
    staging: str  # "together" (one send per input), "per_time", or "reversed" (times staged newest first)
    ahead: bool  # staged before the previous step runs (so held back by the inputs until its own step)
    idle: bool  # followed by an extra ``engine.step()`` with no new input, which must change nothing


def _add(ms: Multiset, row: Row, d: int) -> None:
    n = ms.get(row, 0) + d
    if n:
        ms[row] = n
    else:
        ms.pop(row, None)


@st.composite
def histories(draw, row_strategies: Sequence[st.SearchStrategy], max_steps=4, max_span=4, max_ops=5):
    """Random steps of updates whose accumulated multiplicities never go negative."""
    present: list[Multiset] = [{} for _ in row_strategies]
    steps = []
    t = 0
    for _ in range(draw(st.integers(1, max_steps))):
        span = draw(st.integers(1, max_span))
        times = []
        for time in range(t, t + span):
            ops: list[tuple[int, Row, int]] = []
            for _ in range(draw(st.integers(0, max_ops))):
                i = draw(st.integers(0, len(row_strategies) - 1))
                kind = draw(st.sampled_from(("insert", "insert", "delete", "cancel")))
                if kind == "delete" and present[i]:
                    row = draw(st.sampled_from(sorted(present[i], key=repr)))
                    ops.append((i, row, -draw(st.integers(1, present[i][row]))))
                elif kind == "cancel":  # an insertion and its deletion at the same time
                    row = draw(row_strategies[i])
                    m = draw(st.integers(1, 2))
                    ops += [(i, row, m), (i, row, -m)]
                else:
                    ops.append((i, draw(row_strategies[i]), draw(st.integers(1, 3))))
                for j, row, d in ops[-2:] if kind == "cancel" else ops[-1:]:
                    _add(present[j], row, d)
            times.append((time, ops))
        t += span
        staging = draw(st.sampled_from(("together", "per_time", "reversed")))
        steps.append(Step(times, t, staging, draw(st.booleans()), draw(st.booleans())))
    return steps


@dataclass
class Check:
    name: str
    capture: ivm.Capture
    oracle: Oracle
    compare: Callable[[Multiset, Multiset, str], None] | None = None

    def at(self, time: int, states: list[Multiset]) -> None:
        got = self.capture.rows_at(time)
        expected = self.oracle(states)
        msg = f"{self.name} at time {time}"
        if self.compare is None:
            assert got == expected, f"{msg}: got {sorted(got.items(), key=repr)}, " + (
                f"expected {sorted(expected.items(), key=repr)}"
            )
        else:
            self.compare(got, expected, msg)


def _stage(inputs: Sequence[ivm.Input], step: Step) -> None:
    groups = [step.times]
    if step.staging == "per_time":
        groups = [[tt] for tt in step.times]
    elif step.staging == "reversed":
        groups = [[tt] for tt in reversed(step.times)]
    for group in groups:
        for i, inp in enumerate(inputs):
            rows, times, diffs = [], [], []
            for time, ops in group:
                for j, row, d in ops:
                    if j == i:
                        rows.append(row)
                        times.append(time)
                        diffs.append(d)
            if rows:
                inp.update(rows, time=np.array(times, dtype=np.int64), diff=np.array(diffs, dtype=np.int64))


def drive(
    engine: ivm.Engine, inputs: Sequence[ivm.Input], checks: Sequence[Check], history: list[Step]
) -> None:
    """Run the history step by step, checking every retired time after its step and again at the end."""
    states: list[Multiset] = [{} for _ in inputs]
    snapshots: list[tuple[int, list[Multiset]]] = []
    staged: set[int] = set()
    for n, step in enumerate(history):
        for m in (n, n + 1):
            if m not in staged and m < len(history) and (m == n or history[m].ahead):
                _stage(inputs, history[m])
                staged.add(m)
        for inp in inputs:
            inp.advance_to(step.advance)
        engine.step()
        if step.idle:
            engine.step()
        for time, ops in step.times:
            for i, row, d in ops:
                _add(states[i], row, d)
            snap = [dict(s) for s in states]
            snapshots.append((time, snap))
            for c in checks:
                c.at(time, snap)
    for time, snap in snapshots:
        for c in checks:
            c.at(time, snap)


# -- helpers ------------------------------------------------------------------------------------------

I64 = np.int64
small = st.integers(0, 5)
nullable = st.one_of(st.none(), small)


def _mask(m, n: int) -> np.ndarray:
    return np.ones(n, dtype=bool) if m is None else np.asarray(m, dtype=bool)


def _rows_where(ms: Multiset, pred: Callable[[Row], bool]) -> Multiset:
    return {r: m for r, m in ms.items() if pred(r)}


def _map_rows(ms: Multiset, fn: Callable[[Row], Row]) -> Multiset:
    out: Multiset = {}
    for r, m in ms.items():
        _add(out, fn(r), m)
    return out


def _sum(*parts: Multiset) -> Multiset:
    out: Multiset = {}
    for p in parts:
        for r, m in p.items():
            _add(out, r, m)
    return out


def _distinct(ms: Multiset) -> Multiset:
    return {r: 1 for r, m in ms.items() if m > 0}


def _match(a, b, nulls_match: bool = False) -> bool:
    if nulls_match:
        return a == b
    return all(x is not None and y is not None for x, y in zip(a, b, strict=True)) and a == b


def _join(
    left: Multiset, right: Multiset, key: Sequence[int], other_key: Sequence[int], nulls_match: bool = False
) -> Multiset:
    """Inner join with the engine's layout: key, left's other columns, right's other columns."""
    out: Multiset = {}
    for lr, lm in left.items():
        lk = tuple(lr[p] for p in key)
        lrest = tuple(v for p, v in enumerate(lr) if p not in key)
        for rr, rm in right.items():
            if _match(lk, tuple(rr[p] for p in other_key), nulls_match):
                rrest = tuple(v for p, v in enumerate(rr) if p not in other_key)
                _add(out, lk + lrest + rrest, lm * rm)
    return out


def _outer_join(
    left: Multiset, right: Multiset, key: Sequence[int], other_key: Sequence[int], kind: str, widths
) -> Multiset:
    """SQL outer join: left's columns then right's, unmatched rows padded with NULLs."""
    nl, nr = widths
    out: Multiset = {}
    for lr, lm in left.items():
        hit = False
        for rr, rm in right.items():
            if _match(tuple(lr[p] for p in key), tuple(rr[p] for p in other_key)):
                _add(out, lr + rr, lm * rm)
                hit = True
        if not hit and kind in ("left", "full"):
            _add(out, lr + (None,) * nr, lm)
    if kind in ("right", "full"):
        for rr, rm in right.items():
            if not any(_match(tuple(lr[p] for p in key), tuple(rr[p] for p in other_key)) for lr in left):
                _add(out, (None,) * nl + rr, rm)
    return out


def _groups(ms: Multiset, key: Sequence[int]) -> dict[Row, list[tuple[Row, int]]]:
    out: dict[Row, list[tuple[Row, int]]] = {}
    for r, m in ms.items():
        k = tuple(r[p] for p in key)
        rest = tuple(v for p, v in enumerate(r) if p not in key)
        out.setdefault(k, []).append((rest, m))
    return out


def _aggregate(ms: Multiset, key: Sequence[int], specs: Sequence[tuple[str, int | None]]) -> Multiset:
    out: Multiset = {}
    for k, rows in _groups(ms, key).items():
        total = sum(m for _, m in rows)
        if total <= 0:
            continue
        vals = []
        for kind, pos in specs:
            if kind == "count":
                vals.append(total)
                continue
            present = [(r[pos], m) for r, m in rows if r[pos] is not None and m > 0]
            n = sum(m for _, m in present)
            s = sum(v * m for v, m in present)
            if kind == "count_col":
                vals.append(n)
            elif kind == "sum":
                vals.append(s if present else None)
            elif kind == "avg":
                vals.append(s / n if present else None)
            elif kind == "min":
                vals.append(min(v for v, _ in present) if present else None)
            elif kind == "max":
                vals.append(max(v for v, _ in present) if present else None)
            else:
                assert kind == "count_distinct"
                vals.append(len({v for v, _ in present}))
        out[k + tuple(vals)] = 1
    return out


def _topk(ms: Multiset, key: Sequence[int], order: Sequence[tuple[int, bool]], limit, offset: int) -> Multiset:
    """Per key, rows ranked [offset, offset+limit) by ``order`` (NULLS LAST ascending, FIRST descending),
    ties broken by the whole row (NULL before values, then ascending), as TopK does."""

    def rank(vals: Row) -> tuple:
        k: list = []
        for pos, desc in order:
            x = vals[pos]
            if desc:
                k += [x is not None, -(x or 0)]
            else:
                k += [x is None, x or 0]
        for x in vals:
            k += [x is not None, x or 0]
        return tuple(k)

    out: Multiset = {}
    top = math.inf if limit is None else offset + limit
    for k, rows in _groups(ms, key).items():
        cum = 0
        for vals, m in sorted(rows, key=lambda rm: rank(rm[0])):
            lo, hi = cum, cum + m
            cum = hi
            mult = int(max(0, min(hi, top) - max(lo, offset)))
            if mult:
                _add(out, k + vals, mult)
    return out


def _approx(float_cols: Sequence[int]) -> Callable[[Multiset, Multiset, str], None]:
    """Equality of multisets whose rows are unique up to ``float_cols``, compared with relative 1e-9."""

    def strip(ms: Multiset) -> dict[Row, tuple[Row, int]]:
        out = {}
        for r, m in ms.items():
            k = tuple(v for p, v in enumerate(r) if p not in float_cols)
            assert k not in out, f"rows not unique up to float columns: {r}"
            out[k] = (r, m)
        return out

    def compare(got: Multiset, expected: Multiset, msg: str) -> None:
        g, e = strip(got), strip(expected)
        assert g.keys() == e.keys(), (
            f"{msg}: got {sorted(got, key=repr)}, expected {sorted(expected, key=repr)}"
        )
        for k, (er, em) in e.items():
            gr, gm = g[k]
            assert gm == em, f"{msg}: {gr} multiplicity {gm}, expected {em}"
            for p in float_cols:
                if er[p] is None or gr[p] is None:
                    assert er[p] is None and gr[p] is None, f"{msg}: {gr} vs {er}"
                else:
                    assert math.isclose(gr[p], er[p], rel_tol=1e-9, abs_tol=1e-12), f"{msg}: {gr} vs {er}"

    return compare


# -- 1. stateless operators ---------------------------------------------------------------------------

pairs = st.tuples(nullable, nullable)


@SETTINGS
@given(histories([pairs, pairs]))
def test_stateless_operators(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    x = df.input([I64, I64])
    y = df.input([I64, I64])

    def sum_double(c, v):
        n = len(c[0])
        va, vb = _mask(v[0], n), _mask(v[1], n)
        return (c[0] + c[1], c[0] * 2), (va & vb, va)

    def big_a(c, v):
        return _mask(v[0], len(c[0])) & (c[0] > 2)

    def even_b(c, v):
        return _mask(v[1], len(c[0])) & (c[1] % 2 == 0)

    def p_big(r):
        return r[0] is not None and r[0] > 2

    def p_even(r):
        return r[1] is not None and r[1] % 2 == 0

    def n_sum_double(r):
        a, b = r
        return (None if a is None or b is None else a + b, None if a is None else 2 * a)

    swapped = x.project([1, 0])
    outs = {
        "map": (x.map(sum_double, [I64, I64]), lambda s: _map_rows(s[0], n_sum_double)),
        "map_inferred": (x.map(sum_double), lambda s: _map_rows(s[0], n_sum_double)),
        "filter": (x.filter(big_a), lambda s: _rows_where(s[0], p_big)),
        "project": (swapped, lambda s: _map_rows(s[0], lambda r: (r[1], r[0]))),
        "project_one": (x.project([1]), lambda s: _map_rows(s[0], lambda r: (r[1],))),
        "project_repeat": (y.project([0, 0, 1]), lambda s: _map_rows(s[1], lambda r: (r[0], r[0], r[1]))),
        "concat": (
            x.concat(y, swapped),
            lambda s: _sum(s[0], s[1], _map_rows(s[0], lambda r: (r[1], r[0]))),
        ),
        "negate_filter": (
            x.concat(x.filter(big_a).negate()),
            lambda s: _rows_where(s[0], lambda r: not p_big(r)),
        ),
        "negate_twice": (x.negate().negate().concat(y), lambda s: _sum(s[0], s[1])),
        "difference": (
            x.concat(y).concat(y.filter(even_b).negate()),
            lambda s: _sum(s[0], _rows_where(s[1], lambda r: not p_even(r))),
        ),
        "chain": (
            x.concat(y).map(sum_double).filter(even_b).project([1]),
            lambda s: _map_rows(
                _rows_where(_map_rows(_sum(s[0], s[1]), n_sum_double), p_even),
                lambda r: (r[1],),
            ),
        ),
    }
    checks = [Check(name, c.capture(), oracle) for name, (c, oracle) in outs.items()]
    drive(engine, [x, y], checks, history)


# -- 2. joins -----------------------------------------------------------------------------------------


@SETTINGS
@given(histories([pairs, pairs]))
def test_joins(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    left = df.input([I64, I64])  # (k, a)
    right = df.input([I64, I64])  # (b, k)
    rkeys = right.project([1]).distinct()
    lr = left.arrange([0])
    rr = right.arrange([1])  # (k, b)

    def semi(s, keep: bool) -> Multiset:
        keys = {r[1] for r in s[1] if r[1] is not None}
        return _rows_where(s[0], lambda r: (r[0] in keys) == keep)

    outs = {
        "join": (left.join(right, [0], [1]), lambda s: _join(s[0], s[1], [0], [1])),
        "join_positions": (
            lr.join(rr, positions=[2, 0]),
            lambda s: _map_rows(_join(s[0], s[1], [0], [1]), lambda r: (r[2], r[0])),
        ),
        "join_two_column_key": (left.join(right, [0, 1], [1, 0]), lambda s: _join(s[0], s[1], [0, 1], [1, 0])),
        "join_nulls_match": (lr.join(rr, nulls_match=True), lambda s: _join(s[0], s[1], [0], [1], True)),
        "join_self": (left.join(left, [1], [0]), lambda s: _join(s[0], s[0], [1], [0])),
        "semijoin": (left.semijoin(rkeys, [0]), lambda s: semi(s, True)),
        "antijoin": (left.antijoin(rkeys, [0]), lambda s: semi(s, False)),
    }
    for kind in ("left", "right", "full"):
        outs[f"outer_{kind}"] = (
            left.outer_join(right, [0], [1], kind),
            lambda s, kind=kind: _outer_join(s[0], s[1], [0], [1], kind, (2, 2)),
        )
    checks = [Check(name, c.capture(), oracle) for name, (c, oracle) in outs.items()]
    drive(engine, [left, right], checks, history)


# -- 3. reductions ------------------------------------------------------------------------------------

halves = st.one_of(st.none(), st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.5, 3.0]))
triples = st.tuples(nullable, nullable, halves)  # (g, v, w) with w float


@SETTINGS
@given(histories([triples]))
def test_aggregates(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    x = df.input([I64, I64, np.float64])
    int_specs = [
        ("sum", 0),
        ("min", 0),
        ("max", 0),
        ("avg", 0),
        ("count_col", 0),
        ("count_distinct", 0),
        ("count", None),
    ]
    float_specs = [("sum", 1), ("min", 1), ("max", 1), ("avg", 1), ("count_col", 1), ("count_distinct", 1)]
    two_key_specs = [("sum", 0), ("max", 0), ("count", None)]
    # aggregates of two parts of a group (``Aggregate.shares``): rows common to a key's times are read once
    shared_int = [("sum", 0), ("min", 0), ("max", 0), ("avg", 0), ("count_col", 0), ("count", None)]
    shared_float = [("min", 1), ("max", 1), ("count_col", 1), ("min", 0), ("max", 0)]
    checks = [
        Check(
            "aggregate_int_shared",
            x.aggregate([0], shared_int).as_collection().capture(),
            lambda s: _aggregate(s[0], [0], shared_int),
            _approx([4]),
        ),
        Check(
            "aggregate_float_shared",
            x.aggregate([0], shared_float).as_collection().capture(),
            lambda s: _aggregate(s[0], [0], shared_float),
        ),
        Check(
            "aggregate_global_shared",
            x.aggregate([], [("min", 2), ("max", 2), ("sum", 1), ("count", None)]).as_collection().capture(),
            lambda s: _aggregate(s[0], [], [("min", 2), ("max", 2), ("sum", 1), ("count", None)]),
        ),
        Check(
            "count",
            x.count([0]).as_collection().capture(),
            lambda s: _aggregate(s[0], [0], [("count", None)]),
        ),
        Check(
            "aggregate_int",
            x.aggregate([0], int_specs).as_collection().capture(),
            lambda s: _aggregate(s[0], [0], int_specs),
            _approx([4]),
        ),
        Check(
            "aggregate_float",
            x.aggregate([0], float_specs).as_collection().capture(),
            lambda s: _aggregate(s[0], [0], float_specs),
            _approx([1, 2, 3, 4]),
        ),
        Check(
            "aggregate_two_keys",
            x.aggregate([2, 0], two_key_specs).as_collection().capture(),
            lambda s: _aggregate(s[0], [2, 0], two_key_specs),
        ),
        Check(
            "aggregate_global",
            x.aggregate([], [("count", None), ("sum", 1), ("min", 2)]).as_collection().capture(),
            lambda s: _aggregate(s[0], [], [("count", None), ("sum", 1), ("min", 2)]),
        ),
    ]
    drive(engine, [x], checks, history)


@SETTINGS
@given(histories([pairs]))
def test_distinct_and_threshold(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    x = df.input([I64, I64])

    def cap_two(w):
        return np.minimum(w, 2)

    def at_least_two(w):
        return np.where(w >= 2, w - 1, 0)

    def n_threshold(ms: Multiset, fn) -> Multiset:
        out = {}
        for r, m in ms.items():
            v = int(fn(np.array([m], dtype=np.int64))[0])
            if v:
                out[r] = v
        return out

    checks = [
        Check("distinct", x.distinct().capture(), lambda s: _distinct(s[0])),
        Check(
            "distinct_projected",
            x.project([1]).distinct().capture(),
            lambda s: _distinct(_map_rows(s[0], lambda r: (r[1],))),
        ),
        Check("threshold_cap", x.threshold(cap_two).capture(), lambda s: n_threshold(s[0], cap_two)),
        Check(
            "threshold_at_least_two",
            x.project([0]).threshold(at_least_two).capture(),
            lambda s: n_threshold(_map_rows(s[0], lambda r: (r[0],)), at_least_two),
        ),
    ]
    drive(engine, [x], checks, history)


int_triples = st.tuples(st.one_of(st.none(), st.integers(0, 2)), nullable, nullable)  # (g, a, b)

TOPK_CASES = [
    ([0], [(0, False)], 2, 0),
    ([0], [(0, True)], 2, 1),
    ([0], [(1, False), (0, True)], 1, 1),
    ([0], [(1, True)], None, 2),
    ([], [(0, False), (2, True)], 3, 1),
    ([1], [(1, False)], 2, 0),
]


@SETTINGS
@given(histories([int_triples]))
def test_top_k(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    x = df.input([I64, I64, I64])
    checks = [
        Check(
            f"top_k key={key} order={order} limit={limit} offset={offset}",
            x.top_k(key, order, limit, offset).as_collection().capture(),
            lambda s, key=key, order=order, limit=limit, offset=offset: _topk(s[0], key, order, limit, offset),
        )
        for key, order, limit, offset in TOPK_CASES
    ]
    drive(engine, [x], checks, history)


# -- 4. composed dataflows ----------------------------------------------------------------------------


@SETTINGS
@given(histories([pairs, pairs]))
def test_join_then_reduce(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    left = df.input([I64, I64])  # (k, a)
    right = df.input([I64, I64])  # (k, b)
    joined = left.join(right, [0], [0])  # (k, a, b)
    counts = left.count([0])  # (k, n), arranged by k
    checks = [
        Check(
            "join_count",
            joined.count([0]).as_collection().capture(),
            lambda s: _aggregate(_join(s[0], s[1], [0], [0]), [0], [("count", None)]),
        ),
        Check(
            "join_aggregate_by_a",
            joined.aggregate([1], [("sum", 1), ("count", None), ("max", 0)]).as_collection().capture(),
            lambda s: _aggregate(_join(s[0], s[1], [0], [0]), [1], [("sum", 1), ("count", None), ("max", 0)]),
        ),
        Check(
            "join_distinct_count",
            joined.project([1, 2]).distinct().count([1]).as_collection().capture(),
            lambda s: _aggregate(
                _distinct(_map_rows(_join(s[0], s[1], [0], [0]), lambda r: (r[1], r[2]))),
                [1],
                [("count", None)],
            ),
        ),
        Check(
            "count_then_join",
            counts.join(right.arrange([0])).capture(),
            lambda s: _join(_aggregate(s[0], [0], [("count", None)]), s[1], [0], [0]),
        ),
    ]
    drive(engine, [left, right], checks, history)


edge_rows = st.tuples(small, small)
root_rows = st.tuples(small)


def _closure(edges: Multiset, starts: set) -> set:
    adj: dict[int, set[int]] = {}
    for (s, d), m in edges.items():
        if m > 0:
            adj.setdefault(s, set()).add(d)
    seen = set(starts)
    todo = list(starts)
    while todo:
        for y in adj.get(todo.pop(), ()):
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return seen


def _reachable(edges: Multiset, roots: Multiset) -> Multiset:
    out: Multiset = {}
    for (r,), m in roots.items():
        if m > 0:
            for x in _closure(edges, {r}):
                out[(r, x)] = 1
    return out


@SETTINGS
@given(histories([edge_rows, root_rows], max_ops=6))
def test_reachability(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    edges = df.input([I64, I64])  # (src, dst)
    roots = df.input([I64])
    with df.loop() as loop:
        e = loop.enter_arranged(edges.arrange([0]))
        start = roots.map(lambda c, v: ((c[0], c[0]), (None, None)))
        reach = loop.variable(initial=start)  # (root, node)
        nxt = reach.arrange([1]).join(e, positions=[1, 2]).concat(loop.enter(start)).distinct()
        reach.set(nxt)
        result = loop.leave(nxt)
    checks = [
        Check("reachability", result.capture(), lambda s: _reachable(s[0], s[1])),
        Check(
            "reachable_count_per_root",
            result.count([0]).as_collection().capture(),
            lambda s: _aggregate(_reachable(s[0], s[1]), [0], [("count", None)]),
        ),
    ]
    drive(engine, [edges, roots], checks, history)


def _even_odd(edges: Multiset, roots: Multiset) -> tuple[Multiset, Multiset]:
    """Naive fixed point of even = roots | succ(odd), odd = succ(even)."""
    succ: dict[int, set[int]] = {}
    for (s, d), m in edges.items():
        if m > 0:
            succ.setdefault(s, set()).add(d)
    even = {r for (r,), m in roots.items() if m > 0}
    odd: set[int] = set()
    while True:
        new_even = even | {y for x in odd for y in succ.get(x, ())}
        new_odd = odd | {y for x in even for y in succ.get(x, ())}
        if new_even == even and new_odd == odd:
            break
        even, odd = new_even, new_odd
    return {(x,): 1 for x in even}, {(x,): 1 for x in odd}


@SETTINGS
@given(histories([edge_rows, root_rows], max_ops=6))
def test_mutual_recursion_even_odd(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    edges = df.input([I64, I64])
    roots = df.input([I64])
    with df.loop() as loop:
        e = loop.enter_arranged(edges.arrange([0]))
        even = loop.variable([I64])
        odd = loop.variable([I64])
        even_next = loop.enter(roots).concat(odd.arrange([0]).join(e, positions=[1])).distinct()
        odd_next = even.arrange([0]).join(e, positions=[1]).distinct()
        even.set(even_next)
        odd.set(odd_next)
        even_out = loop.leave(even_next)
        odd_out = loop.leave(odd_next)
        odd_var_out = loop.leave(odd)

    def both(even: Multiset, odd: Multiset) -> Multiset:
        return {r: 1 for r in even if r in odd}

    checks = [
        Check("even", even_out.capture(), lambda s: _even_odd(s[0], s[1])[0]),
        Check("odd", odd_out.capture(), lambda s: _even_odd(s[0], s[1])[1]),
        Check("odd_variable", odd_var_out.capture(), lambda s: _even_odd(s[0], s[1])[1]),
        Check(
            "even_and_odd",
            even_out.semijoin(odd_out, [0]).capture(),
            lambda s: both(*_even_odd(s[0], s[1])),
        ),
    ]
    drive(engine, [edges, roots], checks, history)


weighted_edges = st.tuples(small, small, st.integers(0, 3))


def _shortest(edges: Multiset, roots: Multiset) -> Multiset:
    """(node, distance from the nearest root) by Bellman-Ford over edges (src, dst, weight)."""
    dist = {r: 0 for (r,), m in roots.items() if m > 0}
    changed = True
    while changed:
        changed = False
        for (s, d, w), m in edges.items():
            if m > 0 and s in dist and dist[s] + w < dist.get(d, math.inf):
                dist[d] = dist[s] + w
                changed = True
    return {(x, dx): 1 for x, dx in dist.items()}


@SETTINGS
@given(histories([weighted_edges, root_rows], max_ops=6))
def test_shortest_paths(history):
    """A min aggregate inside a loop: distances relaxed over edges until they no longer change."""
    engine = ivm.Engine()
    df = engine.dataflow()
    edges = df.input([I64, I64, I64])  # (src, dst, weight)
    roots = df.input([I64])
    with df.loop() as loop:
        e = loop.enter_arranged(edges.arrange([0]))
        start = roots.map(lambda c, v: ((c[0], np.zeros_like(c[0])), (None, None)))  # (node, 0)
        dist = loop.variable(initial=start)
        relaxed = dist.arrange([0]).join(e).map(lambda c, v: ((c[2], c[1] + c[3]), (None, None)))
        nxt = relaxed.concat(loop.enter(start)).aggregate([0], [("min", 0)]).as_collection()
        dist.set(nxt)
        result = loop.leave(nxt)
    checks = [Check("shortest_paths", result.capture(), lambda s: _shortest(s[0], s[1]))]
    drive(engine, [edges, roots], checks, history)


# -- 5. nested loops ----------------------------------------------------------------------------------


def _two_relation_fixpoint(e1: Multiset, e2: Multiset, roots: Multiset) -> tuple[Multiset, Multiset]:
    """T = roots | succ2(closure1(T)) as a least fixed point; returns (T, closure1(T))."""
    t = {r for (r,), m in roots.items() if m > 0}
    while True:
        c = _closure(e1, t)
        nt = t | {d for (s, d), m in e2.items() if m > 0 and s in c}
        if nt == t:
            return {(x,): 1 for x in t}, {(x,): 1 for x in c}
        t = nt


@SETTINGS
@given(histories([edge_rows, edge_rows, root_rows], max_ops=6))
@example(  # a count over rows that are their whole key, at one epoch per key: read once per key
    [
        Step(
            times=[(0, [(0, (0, 1), 1), (2, (0,), 1)]), (1, [(1, (0, 2), 1)]), (2, [(0, (1, 2), 1)])],
            advance=3,
            staging="together",
            ahead=False,
            idle=False,
        )
    ]
)
def test_nested_loops(history):
    """Outer loop: T = roots | succ2(C); inner loop: C = closure of T under the first edge relation."""
    engine = ivm.Engine()
    df = engine.dataflow()
    e1 = df.input([I64, I64])
    e2 = df.input([I64, I64])
    roots = df.input([I64])
    with df.loop() as outer:
        e1o = outer.enter_arranged(e1.arrange([0]))
        e2o = outer.enter_arranged(e2.arrange([0]))
        t = outer.variable([I64])
        with outer.loop() as inner:
            e1i = inner.enter_arranged(e1o)
            c = inner.variable(initial=t)
            c_next = c.arrange([0]).join(e1i, positions=[1]).concat(inner.enter(t)).distinct()
            c.set(c_next)
            closure = inner.leave(c_next)
        t_next = outer.enter(roots).concat(closure.arrange([0]).join(e2o, positions=[1])).distinct()
        t.set(t_next)
        t_out = outer.leave(t_next)
        c_out = outer.leave(closure)
    checks = [
        Check("outer_T", t_out.capture(), lambda s: _two_relation_fixpoint(s[0], s[1], s[2])[0]),
        Check("inner_closure", c_out.capture(), lambda s: _two_relation_fixpoint(s[0], s[1], s[2])[1]),
    ]
    drive(engine, [e1, e2, roots], checks, history)
