"""Key hashes: equal keys hash equally, and a composite key led by an integer hashes in that integer's order."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ivm.engine.batch import LOW_BITS, Batch, key_hash
from ivm.engine.operators.running import RunningStates
from ivm.engine.trace import TraceBatch

ROWS = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True)),
    min_size=1,
    max_size=40,
)


def _columns(rows):
    a_valid = np.array([r[1] for r in rows], dtype=bool)
    a = np.where(a_valid, np.array([r[0] for r in rows], dtype=np.int64), 0)  # NULL slots hold zero (see Batch)
    b = np.array([r[2] for r in rows], dtype=np.int32)
    c = np.array([r[3] for r in rows], dtype=np.float64)
    return (a, b, c), (a_valid, None, None)


@settings(max_examples=80, deadline=None)
@given(ROWS)
def test_equal_keys_hash_equally_and_follow_their_first_integer(rows):
    cols, valid = _columns(rows)
    h = key_hash(cols, valid, len(rows))
    # a key hashes the same alone as among other rows
    for i in range(len(rows)):
        one = key_hash(
            tuple(c[i : i + 1] for c in cols), tuple(None if m is None else m[i : i + 1] for m in valid)
        )
        assert one[0] == h[i]
    # equal keys (NULLs equal, NaNs equal, -0.0 == 0.0) hash equally
    a, b, c = cols
    for i in range(len(rows)):
        for j in range(len(rows)):
            same_a = (valid[0][i] == valid[0][j]) and (not valid[0][i] or a[i] == a[j])
            same_c = (np.isnan(c[i]) and np.isnan(c[j])) or c[i] == c[j]
            if same_a and b[i] == b[j] and same_c:
                assert h[i] == h[j]
    # the high bits follow the first column (within the range where its shifted value fits)
    inside = valid[0] & (np.abs(a) < 2 ** (62 - LOW_BITS))
    ai, hi = a[inside], h[inside]
    order = np.argsort(ai, kind="stable")
    assert (np.diff(hi[order] >> LOW_BITS) >= 0).all()


def test_new_leading_keys_lie_past_older_batches():
    """Line items of new orders hash above every stored one: a reader skips the stored batch at once."""
    n = 10_000
    orders = np.repeat(np.arange(1, n // 4 + 1, dtype=np.int64), 4)
    lines = np.tile(np.arange(1, 5, dtype=np.int64), n // 4)
    batch = Batch.build([orders, lines], [None, None], np.zeros(n, np.int64), np.ones(n, np.int64))
    stored = TraceBatch.from_updates(batch, 2)
    new = key_hash((orders + n, lines), (None, None))
    assert not stored.may_hold(int(new.min()), int(new.max()))
    old = key_hash((orders[:100], lines[:100]), (None, None))
    lo, hi = stored.seek(np.sort(old))
    assert (hi - lo == 1).all()


def test_running_states_spread_hashes_that_share_their_low_bits():
    h = np.arange(1000, dtype=np.int64) << 20  # identity hashes of multiples of 2**20: low bits all zero
    assert len(np.unique(h & 1023)) == 1
    states = RunningStates([np.dtype(np.int64)], [np.dtype(np.int64)], capacity=1024)
    assert len(np.unique(states._home(h))) > 500
    slots = states.add(h, [h], [None])
    assert (states.find(h, [h], [None]) == slots).all()
