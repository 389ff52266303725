"""Exact sums of doubles (``ivm.engine.operators.exact``): the correctly rounded sum of the values present,
as ``math.fsum`` computes it, whatever their magnitudes and however they came and went; the limbs of such
sums as wide running states."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ivm.engine.operators import exact
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
