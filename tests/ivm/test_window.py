"""The window reducer (``ivm.engine.operators.window``) under random update histories against a straightforward
recompute: per partition, rows sorted in Python, each function and frame evaluated row by row."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import ivm
from ivm.engine.operators import ordered
from ivm.engine.operators.window import Bound, Call, Frame, Window
from tests.ivm.test_properties import I64, SETTINGS, Check, Multiset, _add, _approx, _groups, drive, histories

part = st.one_of(st.none(), st.integers(0, 2))
value = st.one_of(st.none(), st.integers(-2, 4))
rows = st.tuples(part, value, value)  # (partition, o, v)

ROWS_1 = Frame("rows", Bound("preceding", 1), Bound("following", 1))
ROWS_TAIL = Frame("rows", Bound("current"), Bound("unbounded"))
ROWS_AHEAD = Frame("rows", Bound("following", 1), Bound("following", 2))
RANGE_1 = Frame("range", Bound("preceding", 1), Bound("following", 1))
RANGE_BEHIND = Frame("range", Bound("unbounded"), Bound("preceding", 1))
RANGE_TAIL = Frame("range", Bound("current"), Bound("unbounded"))
WHOLE = Frame("rows", Bound("unbounded"), Bound("unbounded"))

CALLS = (
    Call("row_number"),
    Call("rank"),
    Call("dense_rank"),
    Call("percent_rank"),
    Call("cume_dist"),
    Call("ntile", param=3),
    Call("lag", 1, param=1),
    Call("lead", 1, param=2, default=-9),
    Call("first_value", 1),
    Call("last_value", 1, ROWS_1),
    Call("nth_value", 1, WHOLE, param=2),
    Call("count_star", frame=ROWS_AHEAD),
    Call("count", 1, RANGE_1),
    Call("sum", 1),
    Call("sum", 1, RANGE_BEHIND),
    Call("avg", 1, ROWS_TAIL),
    Call("min", 1, ROWS_1),
    Call("max", 1, RANGE_TAIL),
    Call("min", 1, WHOLE),
    Call("max", 1, ROWS_TAIL),
)
ORDERS = [
    ((0, False, False, False),),  # o ascending, NULLs last
    ((0, True, True, False),),  # o descending, NULLs first
    ((0, False, True, False),),  # o ascending, NULLs first
    (),  # no ORDER BY: every row a peer
]


def _window(ms: Multiset, order, calls) -> Multiset:
    """Every row of ``ms`` (partition, o, v) with the calls' values, recomputed from scratch."""
    out: Multiset = {}
    for k, members in _groups(ms, [0]).items():
        copies = [vals for vals, m in members for _ in range(m)]

        def spec_key(r):
            key = []
            for pos, desc, first, _ in order:
                x = r[pos]
                key += [
                    (0 if first else 1) if x is None else (1 if first else 0),
                    0 if x is None else (-x if desc else x),
                ]
            return tuple(key)

        def tie(r):
            return tuple(t for x in r for t in ((0, 0) if x is None else (1, x)))

        srt = sorted(copies, key=lambda r: (spec_key(r), tie(r)))
        n = len(srt)
        keys = [spec_key(r) for r in srt]
        peer_start = [keys.index(keys[i]) for i in range(n)]
        peer_end = [n - keys[::-1].index(keys[i]) for i in range(n)]
        for i, r in enumerate(srt):
            _add(out, k + r + tuple(_value(c, i, srt, keys, peer_start, peer_end, order) for c in calls), 1)
    return out


def _frame(f: Frame, i: int, srt, peer_start, peer_end, order) -> range:
    n = len(srt)

    def bound(b: Bound, start: bool) -> int:
        if b.kind == "unbounded":
            return 0 if start else n
        if f.mode == "rows":
            step = {"preceding": -b.offset, "current": 0, "following": b.offset}[b.kind]
            return i + step + (0 if start else 1)
        if b.kind == "current" or srt[i][order[0][0]] is None:
            return peer_start[i] if start else peer_end[i]
        pos, desc = order[0][0], order[0][1]
        sign = -1 if desc else 1
        target = sign * srt[i][pos] + (-b.offset if b.kind == "preceding" else b.offset)
        nonnull = [j for j in range(n) if srt[j][pos] is not None]
        for j in nonnull:  # the first value at least the target (start) or beyond it (end)
            if (sign * srt[j][pos] >= target) if start else (sign * srt[j][pos] > target):
                return j
        return nonnull[-1] + 1

    a, b = bound(f.start, True), bound(f.end, False)
    a, b = min(max(a, 0), n), min(max(b, 0), n)
    return range(a, max(a, b))


def _value(c: Call, i, srt, keys, peer_start, peer_end, order):
    n = len(srt)
    if c.func == "row_number":
        return i + 1
    if c.func == "rank":
        return peer_start[i] + 1
    if c.func == "dense_rank":
        return len(set(keys[: i + 1]))
    if c.func == "percent_rank":
        return peer_start[i] / (n - 1) if n > 1 else 0.0
    if c.func == "cume_dist":
        return peer_end[i] / n
    if c.func == "ntile":
        q, r = divmod(n, c.param)
        bucket, start = 0, 0
        while True:
            size = q + (1 if bucket < r else 0)
            if i < start + size:
                return bucket + 1
            start += size
            bucket += 1
    if c.func in ("lag", "lead"):
        j = i - c.param if c.func == "lag" else i + c.param
        return srt[j][c.arg] if 0 <= j < n else c.default
    frame = _frame(c.frame, i, srt, peer_start, peer_end, order)
    if c.func == "count_star":
        return len(frame)
    if c.func == "first_value":
        return srt[frame[0]][c.arg] if frame else None
    if c.func == "last_value":
        return srt[frame[-1]][c.arg] if frame else None
    if c.func == "nth_value":
        return srt[frame[c.param - 1]][c.arg] if len(frame) >= c.param else None
    present = [srt[j][c.arg] for j in frame if srt[j][c.arg] is not None]
    if c.func == "count":
        return len(present)
    if not present:
        return None
    return {"sum": sum, "avg": lambda v: sum(v) / len(v), "min": min, "max": max}[c.func](present)


@SETTINGS
@given(histories([rows], max_steps=4, max_ops=6))
def test_window_functions_equal_a_recompute(history):
    engine = ivm.Engine()
    df = engine.dataflow()
    x = df.input([I64, I64, I64])
    checks = []
    for order in ORDERS:
        calls = CALLS if order else tuple(c for c in CALLS if c.frame not in (RANGE_1, RANGE_BEHIND))
        out = x.arrange([0]).reduce(Window(order, calls)).as_collection().capture()
        floats = [3 + j for j, c in enumerate(calls) if c.func in ("percent_rank", "cume_dist", "avg")]
        checks.append(
            Check(
                f"window order={order}",
                out,
                lambda s, order=order, calls=calls: _window(s[0], order, calls),
                _approx(floats),
            )
        )
    drive(engine, [x], checks, history)


def test_window_functions_in_slices_equal_a_recompute():
    """The same with blocks of two rows and every partition past two rows recomputed in slices (see
    ``ivm.engine.operators.ordered``): each change reaches only the rows its functions' frames say, the rest
    keep the values emitted before."""
    saved = ordered.CAP, ordered.BIG
    ordered.CAP, ordered.BIG = 2, 2
    try:
        test_window_functions_equal_a_recompute()
    finally:
        ordered.CAP, ordered.BIG = saved


def test_ntile_splits_as_postgresql():
    from ivm.engine.operators.window import _ntile

    pos = np.arange(7)
    assert _ntile(pos, np.full(7, 7), 3).tolist() == [1, 1, 1, 2, 2, 3, 3]
    assert _ntile(np.arange(2), np.full(2, 2), 5).tolist() == [1, 2]


def test_range_offsets_treat_nan_as_above_every_value():
    """NaN is above every other double and within any offset of itself alone (PostgreSQL's in_range)."""
    from ivm.engine.operators.reducers import Groups

    f = np.array([1.0, np.nan, 2.0, 0.0, np.nan, 1.5])
    valid = np.array([True, True, True, False, True, True])
    near = Frame("range", Bound("preceding", 0.5), Bound("following", 0.5))
    ahead = Frame("range", Bound("current"), Bound("following", 100.0))
    for desc in (False, True):
        w = Window(((0, desc, desc, False),), (Call("count_star", frame=near), Call("count_star", frame=ahead)))
        _, cols, _, _ = w(Groups(np.zeros(6, dtype=np.int64), (f,), (valid,), np.ones(6, dtype=np.int64)))
        shown = np.where(np.isnan(cols[0]), 9.0, cols[0]).tolist()  # NaN as 9, NULL as its fill, 0
        got = sorted(zip(shown, cols[1].tolist(), cols[2].tolist(), strict=True))
        n = {1.0: 1, 1.5: 2, 2.0: 3} if desc else {1.0: 3, 1.5: 2, 2.0: 1}
        expected = [(1.0, 2, n[1.0]), (1.5, 3, n[1.5]), (2.0, 2, n[2.0])]
        expected = sorted(expected + [(9.0, 2, 2), (9.0, 2, 2), (0.0, 1, 1)])
        assert got == expected, (desc, got)


def test_module_example():
    import doctest

    from ivm.engine.operators import window

    test = doctest.DocTestParser().get_doctest(window.__doc__, dict(vars(window)), "window", None, 0)
    assert test.examples
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0
