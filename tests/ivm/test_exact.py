"""Exact sums of doubles (``ivm.engine.operators.exact``): the correctly rounded sum of the values present,
as ``math.fsum`` computes it, whatever their magnitudes and however they came and went; and the errors of
sums that cannot be computed, as data of the dataflow, in running states, in the general reduce and in loops.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ivm
from ivm.engine import checkpoint
from ivm.engine.files import Written
from ivm.engine.operators import exact
from ivm.engine.operators.reducers import Aggregate
from ivm.engine.operators.running import RunningStates

I64 = np.int64
BIG = 2**63 - 1

finite = st.floats(allow_nan=False, allow_infinity=False)
doubles = st.one_of(
    finite,
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, 1.7976931348623157e308, -1.7976931348623157e308]),
    st.builds(lambda m, e: m * 10.0**e, st.floats(-10, 10), st.integers(-300, 300)),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


def expected_sum(values: list[float]) -> float | str:
    """SUM of doubles as ivm defines it: NaN if a NaN or both infinities are present, else the infinity
    present, else the correctly rounded sum of the values; ``"overflow"`` where that is beyond every double."""
    if any(math.isnan(v) for v in values) or (math.inf in values and -math.inf in values):
        return math.nan
    if math.inf in values or -math.inf in values:
        return math.inf if math.inf in values else -math.inf
    try:
        return math.fsum(values)
    except OverflowError:  # fsum gives up when a partial sum overflows: the exact sum in rationals decides
        try:
            return float(sum(map(Fraction, values)))  # an integer ratio to float: correctly rounded
        except OverflowError:
            return "overflow"


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(doubles, min_size=1, max_size=12), min_size=1, max_size=5))
def test_segment_sums_are_fsum(groups):
    x = np.array([v for g in groups for v in g], dtype=np.float64)
    starts = np.cumsum([0] + [len(g) for g in groups[:-1]])
    out, over = exact.segment_sums(x, None, np.ones(len(x), dtype=I64), starts)
    for g, got, bad in zip(groups, out.tolist(), over.tolist(), strict=True):
        want = expected_sum(g)
        assert bad == (want == "overflow"), (g, got)
        assert bad or same(got, want), (g, got, want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(finite, st.integers(-3, 3)), min_size=1, max_size=20))
def test_multiplicities_and_cancellations(rows):
    """A value taken ``w`` times (``w`` negative for deletions) counts ``w`` times: what cancels is gone."""
    x = np.array([v for v, _ in rows])
    w = np.array([m for _, m in rows], dtype=I64)
    out, over = exact.segment_sums(x, None, w, np.array([0]))
    want = expected_sum([v if m > 0 else -v for v, m in rows for _ in range(abs(m))])
    assert over[0] == (want == "overflow")
    assert over[0] or out[0] == want


def test_rounding_is_to_nearest_with_ties_to_even():
    cases = [
        [1.0, 2.0**-53],  # a tie: 1.0 is even
        [1.0, 2.0**-53, 5e-324],  # above the tie: up
        [1.0 + 2.0**-52, 2.0**-53],  # a tie: up to the even neighbour
        [1.0, -(2.0**-54)],  # below 1.0: the next double down is nearer
        [2.0**1023, 2.0**1023 * (1 - 2.0**-53)],  # the largest double rounds up past it: overflow
        [1.7976931348623157e308, 2.0**970 - 2.0**917],  # below the halfway point to 2**1024: the largest
        [5e-324, 5e-324, 5e-324],  # subnormals are exact
        [1e20, 1.0, -1e20],
    ]
    for values in cases:
        x = np.array(values)
        out, over = exact.segment_sums(x, None, np.ones(len(x), dtype=I64), np.array([0]))
        want = expected_sum(values)
        assert over[0] == (want == "overflow"), values
        assert over[0] or out[0] == want, (values, out[0], want)


def test_a_wide_state_survives_growth_and_reloading():
    states = RunningStates([I64], [I64], capacity=2, wide=1)
    slots = states.add(np.arange(3, dtype=I64), [np.arange(3, dtype=I64)], [None])
    states.widen(0, 30, 33)
    states.wide[0][slots] = np.arange(9).reshape(3, 3)
    states.widen(0, 28, 31)  # down: columns 28 and 29 are new
    states.widen(0, 32, 36)  # up: 33 to 35
    assert states.wide_lo[0] == 28 and states.wide[0].shape[1] == 8
    states.add(np.arange(3, 9, dtype=I64), [np.arange(3, 9, dtype=I64)], [None])  # grows the capacity
    saved = {k: v.copy() for k, v in states.columns().items()}
    assert sorted(k for k in saved if k.startswith("w0.")) == [f"w0.{i}" for i in range(28, 36)]
    other = RunningStates([I64], [I64], wide=1)
    other.load(saved)
    assert other.wide_lo[0] == 28
    np.testing.assert_array_equal(other.wide[0][: other.size], states.wide[0][: states.size])
    np.testing.assert_array_equal(other.wide[0][:3, 2:5], np.arange(9).reshape(3, 3))


def _sums(engine: ivm.Engine, nonlinear: bool):
    df = engine.dataflow()
    x = df.input([I64, np.float64])
    specs = [("sum", 0), ("avg", 0), ("count", None)] + ([("max", 0)] if nonlinear else [])
    out = x.aggregate([0], specs).as_collection().capture()
    return df, x, out


def _rows(capture, t: int) -> dict:
    return {r[:3]: m for r, m in capture.rows_at(t).items()}


def test_a_running_sum_depends_on_the_values_present_not_on_history():
    for nonlinear in (False, True):
        engine = ivm.Engine()
        df, x, out = _sums(engine, nonlinear)
        x.insert([(1, 1e20), (1, 1.0), (2, 0.1)], time=0)
        x.insert([(2, 0.2)], time=1)  # two times in one step
        x.advance_to(2)
        engine.step()
        x.delete([(1, 1e20)], time=2)
        x.insert([(2, -0.1)], time=2)
        x.delete([(2, 0.2)], time=3)
        x.advance_to(4)
        engine.step()
        assert _rows(out, 1) == {(1, 1e20, 5e19): 1, (2, 0.1 + 0.2, (0.1 + 0.2) / 2): 1}
        assert _rows(out, 2) == {(1, 1.0, 1.0): 1, (2, 0.2, 0.2 / 3): 1}
        assert _rows(out, 3) == {(1, 1.0, 1.0): 1, (2, 0.0, 0.0): 1}
        assert not df.errors


def test_sums_beyond_their_type_are_errors_that_leave_with_their_rows():
    """Per group, in running states and in the general reduce alike: the group in error has no row but an
    error, the others go on, and the group comes back when the rows at fault go."""
    for nonlinear in (False, True):
        engine = ivm.Engine()
        df = engine.dataflow()
        x = df.input([I64, I64, np.float64])
        extra = [("max", 0)] if nonlinear else []
        ints = x.aggregate([0], [("sum", 0), *extra]).as_collection().capture()
        floats = x.aggregate([0], [("sum", 1), ("avg", 1), *extra]).as_collection().capture()
        x.insert([(1, BIG, 1e308), (1, 1, 1e308), (2, 5, 1.0)], time=0)
        x.advance_to(1)
        engine.step()
        assert df.errors == {"bigint out of range": 1, exact.OVERFLOW: 1}  # a group is in error once
        assert {r[:2] for r in ints.rows_at(0)} == {(2, 5)}
        assert {r[:2] for r in floats.rows_at(0)} == {(2, 1.0)}
        x.insert([(1, 0, math.inf)], time=1)  # an infinity decides the sum of doubles: no error
        x.insert([(2, BIG, 0.0)], time=1)  # group 2 goes into error
        x.advance_to(2)
        engine.step()
        assert df.errors == {"bigint out of range": 2}
        assert {r[:2] for r in floats.rows_at(1)} == {(1, math.inf), (2, 1.0)}
        x.delete([(1, 1, 1e308), (2, BIG, 0.0)], time=2)
        x.advance_to(3)
        engine.step()
        assert df.errors == {}
        assert {r[:2] for r in ints.rows_at(2)} == {(1, BIG), (2, 5)}
        assert engine.failed == [] and not df.dropped


def test_an_error_in_a_loop_is_data_too():
    engine = ivm.Engine()
    df = engine.dataflow()
    x = df.input([I64, I64])
    with df.loop() as loop:
        inner = loop.enter(x)
        var = loop.variable([I64, I64])
        total = inner.concat(var.negate()).concat(var).aggregate([0], [("sum", 0)]).as_collection()
        var.set(total)
        out = loop.leave(total).capture()
    x.insert([(1, BIG), (1, 1), (2, 3)], time=0)
    x.advance_to(1)
    engine.step()
    assert df.errors == {"bigint out of range": 1} and _rows(out, 0) == {(2, 3): 1}
    x.delete([(1, 1)], time=1)
    x.advance_to(2)
    engine.step()
    assert df.errors == {} and _rows(out, 1) == {(1, BIG): 1, (2, 3): 1}


def test_errors_and_limbs_are_saved_and_loaded(tmp_path):
    def build(engine):
        df = engine.dataflow("d")
        x = df.input([I64, I64, np.float64])
        running = x.aggregate([0], [("sum", 0), ("sum", 1), ("count", None)])
        general = x.arrange([0]).reduce(Aggregate([("sum", 0), ("max", 1)]))
        return df, x, (running, general)

    a = ivm.Engine()
    df_a, x_a, _ = build(a)
    x_a.insert([(1, BIG, 1e20), (1, 1, 1.0), (2, 2, 1e-300)], time=0)
    x_a.advance_to(1)
    a.step()
    assert df_a.errors == {"bigint out of range": 2}
    saved = checkpoint.save(df_a, str(tmp_path), Written())
    b = ivm.Engine()
    df_b, x_b, (running, general) = build(b)
    checkpoint.load(df_b, saved, Written())
    checkpoint.resume(df_b, df_a.frontier)
    assert df_b.errors == df_a.errors
    x_b.delete([(1, BIG, 1e20)], time=1)
    x_b.insert([(2, 0, -1e-300)], time=1)
    x_b.advance_to(2)
    b.step()
    assert df_b.errors == {}
    assert _contents(running) == {(1, 1, 1.0, 1): 1, (2, 2, 0.0, 2): 1}
    assert _contents(general) == {(1, 1, 1.0): 1, (2, 2, 1e-300): 1}


def _contents(arranged) -> dict:
    """The rows of an arrangement now, with their multiplicities."""
    out: dict = {}
    for b in arranged.trace.batches():
        for *row, _, diff in b.updates.to_rows():
            out[tuple(row)] = out.get(tuple(row), 0) + diff
    return {r: m for r, m in out.items() if m}


def _signed_rows(capture, t: int) -> dict[tuple, int]:
    """The collection at ``t``, each double written with its sign, so that -0.0 and 0.0 stay apart."""
    u = capture.updates()
    acc: dict[tuple, int] = {}
    for row in u.take(u.times[:, 0] <= t).to_rows():
        r = tuple(repr(v) if isinstance(v, float) else v for v in row[:-2])
        acc[r] = acc.get(r, 0) + row[-1]
    return {r: m for r, m in acc.items() if m != 0}


def test_negative_zeros_are_values_of_their_own():
    """-0.0 and 0.0 are one key and two values: a group's SUM is -0.0 while its values are all -0.0, and its
    rows go out and are taken back under one key written either way (never a negative multiplicity), in
    running states and in the general reduce alike, the times in one step or a step each."""
    for nonlinear, stepwise in itertools.product((False, True), (False, True)):
        engine = ivm.Engine()
        df = engine.dataflow()
        x = df.input([np.float64, np.float64])
        extra = [("max", 0)] if nonlinear else []
        out = x.aggregate([0], [("sum", 0), ("count", None), *extra]).as_collection().capture()
        changes = [
            ([(-0.0, -0.0), (0.0, -0.0), (1.0, 0.0), (1.0, -0.0)], []),
            ([], [(1.0, 0.0), (0.0, -0.0)]),
            ([(0.0, 0.0)], []),
            ([], [(0.0, 0.0)]),
        ]
        for t, (new, gone) in enumerate(changes):
            x.insert(new, time=t)
            x.delete(gone, time=t)
            if stepwise:
                x.advance_to(t + 1)
                engine.step()
        x.advance_to(len(changes))
        engine.step()
        want = [
            {"0.0": ("-0.0", 2), "1.0": ("0.0", 2)},
            {"0.0": ("-0.0", 1), "1.0": ("-0.0", 1)},
            {"0.0": ("0.0", 2), "1.0": ("-0.0", 1)},
            {"0.0": ("-0.0", 1), "1.0": ("-0.0", 1)},
        ]
        for t, groups in enumerate(want):
            got = _signed_rows(out, t)
            assert all(m == 1 for m in got.values()), (nonlinear, t, got)
            assert {("0.0" if k == "-0.0" else k): (s, c) for k, s, c, *_ in got} == groups, (nonlinear, t, got)
            if not nonlinear:  # a running state shows the key -0.0 while every row writes it so
                assert {r[0] for r in got} == ({"-0.0", "1.0"} if t in (1, 3) else {"0.0", "1.0"}), (t, got)
