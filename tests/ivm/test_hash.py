"""Key hashes: equal keys hash equally, and a composite key led by an integer hashes in that integer's order."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ivm.engine.batch import LOW_BITS, Batch, key_hash
from ivm.engine.operators.running import RunningStates
from ivm.engine.trace import Spine, TraceBatch
from ivm.engine.trace.batch import identity_hash

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


PAIR = st.one_of(
    st.integers(0, 2**31 - 1),
    st.integers(2**31 - 3, 2**31 + 3),
    st.integers(2**32 - 3, 2**32 + 3),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 3),
)
PAIRS = st.lists(st.tuples(PAIR, st.booleans(), PAIR, st.booleans()), min_size=1, max_size=40)


def _pairs(rows):
    av = np.array([r[1] for r in rows], dtype=bool)
    bv = np.array([r[3] for r in rows], dtype=bool)
    a = np.where(av, np.array([r[0] for r in rows], dtype=np.int64), 0)
    b = np.where(bv, np.array([r[2] for r in rows], dtype=np.int64), 0)
    keys = [(int(x) if p else None, int(y) if q else None) for x, p, y, q in zip(a, av, b, bv, strict=True)]
    return (a, b), (av, bv), keys


@settings(max_examples=120, deadline=None)
@given(PAIRS)
def test_a_pair_of_integers_that_fits_is_its_own_hash(rows):
    """Two integer columns hash to the pair itself when it fits (first in [0, 2**31), second in [0, 2**32)):
    non-negative, and equal only for equal pairs; every other pair, NULLs among them, hashes negative."""
    cols, valid, keys = _pairs(rows)
    h = key_hash(cols, valid, len(rows))
    for i, (x, y) in enumerate(keys):
        one = key_hash(tuple(c[i : i + 1] for c in cols), tuple(m[i : i + 1] for m in valid))
        assert one[0] == h[i]
        fits = x is not None and y is not None and 0 <= x < 2**31 and 0 <= y < 2**32
        assert (h[i] >= 0) == fits
        if fits:
            assert h[i] == (x << 32) | y
    for i in range(len(keys)):
        for j in range(len(keys)):
            if keys[i] == keys[j]:
                assert h[i] == h[j]
            elif h[i] >= 0:
                assert h[i] != h[j]
    fit = [x is not None and y is not None and 0 <= x < 2**31 and 0 <= y < 2**32 for x, y in keys]
    assert identity_hash(cols, valid, h) == all(fit)  # the columns are compared unless every pair fits
    narrow = key_hash((cols[0].astype(np.int32), cols[1].astype(np.uint32)), valid, len(rows))
    fits = (cols[0] >= 0) & (cols[0] < 2**31) & (cols[1] >= 0) & (cols[1] < 2**32) & valid[0] & valid[1]
    assert (narrow[fits] == h[fits]).all()  # the same pair in narrower columns hashes the same


@settings(max_examples=60, deadline=None)
@given(PAIRS, st.integers(1, 4))
def test_a_trace_of_integer_pairs_finds_exactly_each_key(rows, parts):
    """Keys held exactly and keys that are not, in one trace of several batches: each query finds the updates
    of its own key only (the comparison of columns is skipped only where hashes are the keys)."""
    cols, valid, keys = _pairs(rows)
    n = len(rows)
    spine = Spine(2, (np.dtype(np.int64), np.dtype(np.int64)), 1)
    cuts = sorted({0, n, *(np.arange(1, parts) * n // parts)})
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        if hi > lo:
            part = Batch(
                tuple(c[lo:hi] for c in cols),
                tuple(m[lo:hi] for m in valid),
                np.zeros((hi - lo, 1), np.int64),
                np.arange(lo, hi, dtype=np.int64) + 1,
            )
            spine.insert(TraceBatch.from_updates(part, 2))
    expected: dict = {}
    for i, k in enumerate(keys):
        expected[k] = expected.get(k, 0) + i + 1
    distinct = list(dict.fromkeys(keys))
    qa = np.array([0 if x is None else x for x, _ in distinct], dtype=np.int64)
    qb = np.array([0 if y is None else y for _, y in distinct], dtype=np.int64)
    qv = (np.array([x is not None for x, _ in distinct]), np.array([y is not None for _, y in distinct]))
    qh = key_hash((qa, qb), qv)
    order = np.argsort(qh, kind="stable")
    qa, qb, qh = qa[order], qb[order], qh[order]
    qv = tuple(m[order] for m in qv)
    if len(np.unique(qh)) < len(qh):
        return  # (two keys of one mixed hash: gather takes distinct hashes)
    found, q = spine.gather(qh, (qa, qb), qv)
    got: dict = {}
    if found is not None:
        for d, i in zip(found.diffs.tolist(), q.tolist(), strict=True):
            k = distinct[order[i]]
            got[k] = got.get(k, 0) + d
    assert got == {k: v for k, v in expected.items() if v}
