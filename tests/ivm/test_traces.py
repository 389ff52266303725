"""Times and frontiers, spines (merging, compaction, freeing) and bounded memory under a sliding window."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ivm
from ivm.engine.batch import Batch
from ivm.engine.lattice import Antichain, advance, join, less_equal, meet
from ivm.engine.trace import Spine, TraceBatch

times2 = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(t=st.tuples(st.integers(0, 6), st.integers(0, 6)), f=times2, probe=times2)
def test_advance_preserves_comparisons_with_times_beyond_the_frontier(t, f, probe):
    """advance(t, F) <= s exactly when t <= s, for every s in advance of F (Appendix A)."""
    frontier = Antichain(np.array(f))
    tt = np.array([t])
    adv = advance(tt, frontier.elements)[0]
    assert less_equal(tt[0], adv)
    for s in probe:
        s = np.array(s)
        if frontier.less_equal(s):
            assert bool(less_equal(adv, s)) == bool(less_equal(tt[0], s))


def test_lattice_and_antichain_basics():
    a, b = np.array([1, 5]), np.array([3, 2])
    assert join(a, b).tolist() == [3, 5] and meet(a, b).tolist() == [1, 2]
    ac = Antichain(np.array([[1, 5], [3, 2], [4, 6]]))
    assert sorted(ac) == [(1, 5), (3, 2)]
    assert ac.less_equal(np.array([3, 5])) and not ac.less_equal(np.array([0, 9]))
    assert ac.meet(Antichain(np.array([[0, 9]]))) == Antichain(np.array([[1, 5], [3, 2], [0, 9]]))
    assert len(Antichain(dim=2)) == 0


def _batch(keys, vals, times, diffs):
    return TraceBatch.from_updates(
        Batch.build([np.asarray(keys, np.int64), np.asarray(vals, np.int64)], None, np.asarray(times), diffs),
        1,
    )


def _contents(spine: Spine) -> dict:
    acc: dict = {}
    for b in spine.batches():
        for row in b.updates.to_rows():
            acc[row[:2]] = acc.get(row[:2], 0) + row[-1]
    return {k: v for k, v in acc.items() if v}


def test_spine_merges_compact_to_the_readers_frontier():
    spine = Spine(1, (np.dtype(np.int64), np.dtype(np.int64)), 1)
    h = spine.handle(Antichain([0]))
    rng = np.random.default_rng(0)
    live: dict = {}
    for t in range(200):
        k = rng.integers(0, 50, 20)
        v = rng.integers(0, 3, 20)
        d = rng.choice([-1, 1], 20)
        spine.insert(_batch(k, v, np.full(20, t), d))
        for kk, vv, dd in zip(k.tolist(), v.tolist(), d.tolist(), strict=True):
            live[(kk, vv)] = live.get((kk, vv), 0) + dd
        h.advance(Antichain([t + 1]))
    assert _contents(spine) == {k: v for k, v in live.items() if v}
    spine.compact_fully()
    assert len(spine) == len({k for k, v in live.items() if v})
    for b in spine.batches():
        assert (b.updates.times[:, 0] == 200).all()
    h.release()
    assert spine.freed and len(spine) == 0


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 7, 300, 1100, 2500, 5000, 5000]), min_size=6, max_size=30),
    nkey=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**16),
)
def test_tiered_merges_keep_every_update_and_readers_see_the_contents(sizes, nkey, seed):
    """Batches of mixed sizes (tiny ones gathered, large ones merged four at a time, fuelled chunk by chunk):
    after every insertion the readable batches are sorted by key hash and hold exactly the updates inserted
    (composite keys included, whose hashes follow their first column), and seeks find every key."""
    rng = np.random.default_rng(seed)
    dtypes = (np.dtype(np.int64),) * 3
    spine = Spine(nkey, dtypes, 1)
    h = spine.handle(Antichain([0]))
    live: dict = {}
    for t, n in enumerate(sizes):
        cols = [rng.integers(0, 400, n), rng.integers(0, 3, n), rng.integers(0, 4, n)]
        diffs = rng.choice([-1, 1, 2], n)
        batch = Batch.build(cols, None, np.full(n, t), diffs)
        spine.insert(TraceBatch.from_updates(batch, nkey))
        for row, d in zip(zip(*(c.tolist() for c in cols), strict=True), diffs.tolist(), strict=True):
            live[row] = live.get(row, 0) + d
        h.advance(Antichain([t + 1]))
        acc: dict = {}
        for b in spine.batches():
            assert (np.diff(b.hashes) >= 0).all()
            for row in b.updates.to_rows():
                acc[row[:3]] = acc.get(row[:3], 0) + row[-1]
        assert {k: v for k, v in acc.items() if v} == {k: v for k, v in live.items() if v}
    keys = sorted({k[:nkey] for k, v in live.items() if v})
    if keys:
        kc = tuple(np.array([k[i] for k in keys], dtype=np.int64) for i in range(nkey))
        from ivm.engine.batch import key_hash

        kh = key_hash(kc, (None,) * nkey)
        order = np.argsort(kh)
        found, q = spine.gather(kh[order], tuple(c[order] for c in kc), (None,) * nkey)
        assert found is not None and set(q.tolist()) == set(range(len(keys)))


def _insert_sizes(sizes, seed=3):
    """A spine fed batches of the given sizes (random keys, one time each): the spine, the updates merged
    (beyond their first insertion) and the most small batches it held at once."""
    from ivm.engine.trace.spine import MIN_CHUNK

    spine = Spine(1, (np.dtype(np.int64),) * 2, 1)
    h = spine.handle(Antichain([0]))
    rng = np.random.default_rng(seed)
    merged, most = 0, 0
    for t, n in enumerate(sizes):
        before = {id(b) for b in spine.batches()}
        k = rng.integers(0, 10**6, n)
        spine.insert(TraceBatch.from_updates(Batch.build([k, k], None, np.full(n, t), np.ones(n, np.int64)), 1))
        h.advance(Antichain([t + 1]))
        merged += sum(len(b) for b in spine.batches() if id(b) not in before) - n
        most = max(most, sum(1 for b in spine.batches() if len(b) < MIN_CHUNK))
    assert sum(int(b.updates.diffs.sum()) for b in spine.batches()) == sum(sizes)
    return spine, merged, most


def test_small_batches_merge_in_doubling_runs_and_stay_few():
    """Small insertions (small transactions) merge at the tail: a larger batch there is merged again only once
    the batches after it hold as many updates (not at every merge of the tail), and however their sizes run
    the tail stays short."""
    from ivm.engine.trace.spine import TAIL_BATCHES

    _, merged, most = _insert_sizes([600] + [5] * 200)
    assert merged < 6000  # merging the whole tail every TAIL_BATCHES insertions re-merges the 600 rows 25 times
    assert most <= 2 * TAIL_BATCHES
    _, _, most = _insert_sizes(list(range(1000, 700, -1)))  # each smaller than the one before
    assert most <= 2 * TAIL_BATCHES


def test_count_sums_the_updates_of_matching_rows():
    """``Spine.count``: per query row, the summed diffs of stored updates whose leading columns equal it
    (NULL equal to NULL), across batches, and nothing for rows that differ beyond the key."""
    from ivm.engine.batch import key_hash

    dtypes = (np.dtype(np.int64),) * 3
    spine = Spine(2, dtypes, 1)
    spine.handle(Antichain([0]))
    rows = [
        ((1, 10, 5), 1),
        ((1, 10, 5), 1),
        ((1, 10, 6), 1),
        ((2, 20, 7), 1),
        ((1, 10, 5), -1),
        ((3, 0, 0), 1),
    ]
    for t, (row, d) in enumerate(rows):
        cols = [np.array([v]) for v in row]
        valid = [None, np.array([row[1] != 0]), None]
        spine.insert(TraceBatch.from_updates(Batch.build(cols, valid, np.array([t]), np.array([d])), 2))
    q_cols = (np.array([1, 1, 2, 3, 4]), np.array([10, 10, 20, 0, 1]), np.array([5, 6, 8, 0, 0]))
    q_valid = (None, np.array([True, True, True, False, True]), None)
    h = key_hash(q_cols[:2], q_valid[:2], 5)
    assert spine.count(h, q_cols, q_valid).tolist() == [1, 1, 0, 1, 0]
    assert spine.count(h, q_cols[:2], q_valid[:2]).tolist() == [2, 2, 1, 1, 0]


def test_sliding_window_keeps_traces_bounded():
    """10,000 live records over 1,000,000 updates: stored updates stay within a small factor of live.

    Updates come 1,000 logical times per step (one record in, the oldest out, at each time). Updates at times
    the frontier has not yet passed cannot be compacted, so the bound is over the live count plus one step.
    Batches merge four at a time per tier, so up to three batches of the largest tier (each holding inserts
    that later batches retract) wait beside it: stored updates reach about five times the live ones here.
    """
    engine = ivm.Engine()
    df = engine.dataflow()
    inp = df.input([np.int64, np.int64])
    arranged = inp.arrange([0])
    counts = arranged.reduce(ivm.Aggregate([("count", None)]))
    window, per_step, total = 10_000, 1_000, 1_000_000
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 5_000, total)
    vals = np.arange(total, dtype=np.int64)
    t = 0
    sent = 0
    worst = 0.0
    ins = 0
    while sent < total:
        n = per_step // 2 if ins >= window else per_step
        lo, hi = ins, ins + n
        cols = [keys[lo:hi], vals[lo:hi]]
        times = t + np.arange(n)
        batches = [Batch.build(cols, None, times, np.ones(n, np.int64))]
        if ins >= window:
            old = [keys[lo - window : hi - window], vals[lo - window : hi - window]]
            batches.append(Batch.build(old, None, times, -np.ones(n, np.int64)))
        for b in batches:
            inp.send(b)
        sent += n * len(batches)
        ins = hi
        t += n
        inp.advance_to(t)
        engine.step()
        live_in = min(ins, window)
        live_out = len(np.unique(keys[max(0, ins - window) : ins]))
        worst = max(worst, len(arranged.trace) / live_in, len(counts.trace) / live_out)
    assert sent >= total
    assert worst <= 6.0, worst


def test_a_join_delta_meets_the_trace_consolidated_across_batches(monkeypatch):
    """``join_trace``: a delta's pairs with the trace's updates of its keys, found in all batches at once. Many
    found in several batches are first consolidated as of the reader's frontier, so that a row inserted and
    deleted in batches not merged yet pairs with nothing; a few are paired as they are (their pairs cancel)."""
    from ivm.engine.batch import consolidate
    from ivm.engine.operators import join

    spine = Spine(1, (np.dtype(np.int64), np.dtype(np.int64)), 1)
    spine.handle(Antichain([0]))
    for b in (
        _batch([1, 2, 9], [10, 20, 90], [0, 0, 0], [1, 1, 1]),
        _batch([1, 2], [10, 21], [1, 1], [-1, 1]),
        _batch([3], [30], [2], [1]),
    ):
        spine.insert(b)
        spine.batches()  # read after each insertion: each goes in as a batch of its own
    assert len(spine.batches()) == 3  # small batches wait at the tail unmerged
    frontier = Antichain([3])

    delta = _batch([1, 2, 3], [0, 0, 0], [3, 3, 3], [1, 1, 1])
    expect = [(2, 0, 20, 3, 1), (2, 0, 21, 3, 1), (3, 0, 30, 3, 1)]
    few = join.join_trace(delta, spine, frontier, 1, False, delta_left=True)
    assert sorted(consolidate(few)[0].to_rows()) == expect
    assert len(few) == len(expect) + 2  # key 1's insertion and its deletion, each paired
    left = join.join_trace(delta, spine, frontier, 1, False, delta_left=False)
    assert sorted(consolidate(left)[0].to_rows()) == [(k, v, 0, t, d) for k, _, v, t, d in expect]
    assert join.join_trace(_batch([5], [0], [3], [1]), spine, frontier, 1, False, delta_left=True) is None

    monkeypatch.setattr(join, "MERGE_FOUND", 1)
    many = join.join_trace(delta, spine, frontier, 1, False, delta_left=True)
    assert sorted(many.to_rows()) == expect  # consolidated first: key 1 pairs with nothing
    assert join.join_trace(_batch([1], [0], [3], [1]), spine, frontier, 1, False, delta_left=True) is None


def test_small_batches_not_read_yet_go_in_together():
    """Small batches wait unread until the trace is read, then go in as one batch, consolidated as of the
    readers' frontier; at most ``UNREAD_MAX`` of them wait."""
    from ivm.engine.trace import spine as spines

    spine = Spine(1, (np.dtype(np.int64), np.dtype(np.int64)), 1)
    spine.handle(Antichain([2]))
    spine.insert(_batch([1, 2], [10, 20], [0, 0], [1, 1]))
    spine.insert(_batch([1], [10], [1], [-1]))  # cancels the first insertion of key 1, both advanced to 2
    spine.insert(_batch([3], [30], [2], [1]))
    batches = spine.batches()
    assert len(batches) == 1
    assert sorted(batches[0].updates.to_rows()) == [(2, 20, 2, 1), (3, 30, 2, 1)]
    for i in range(spines.UNREAD_MAX):
        spine.insert(_batch([i], [0], [3], [1]))
    assert not spine._unread and len(spine.entries) >= 2  # the waiting batches went in without a read


def test_a_small_trace_read_again_and_again_unchanged_is_searched_as_one():
    """After ``INDEX_READS`` lookups of an unchanged small trace, lookups search its hashes sorted together:
    they find the same updates, each key's in the same order."""
    from ivm.engine.trace import spine as spines

    spine = Spine(1, (np.dtype(np.int64), np.dtype(np.int64)), 1)
    spine.handle(Antichain([0]))
    rng = np.random.default_rng(7)
    for t in range(6):
        keys = rng.integers(0, 40, 12)
        spine.insert(_batch(keys, rng.integers(0, 5, 12), [t] * 12, [1] * 12))
        spine.batches()
    assert len(spine.batches()) > 1
    queries = np.unique(rng.integers(0, 45, 9))

    def found() -> dict:
        out, q, _ = spine.find(queries)
        by_key: dict = {}
        for j, row in zip(q.tolist(), out.to_rows(), strict=True):
            by_key.setdefault(j, []).append(row)
        return by_key

    first = [found() for _ in range(spines.INDEX_READS)]
    assert spine._flat.index is None
    again = [found() for _ in range(3)]
    assert spine._flat.index is not None
    assert all(f == first[0] for f in first + again)


def test_batches_appended_to_a_trace_searched_as_one_join_its_index():
    """A trace read again and again between changes keeps its index as batches are appended: lookups find
    what one search per batch finds, each key's updates in the same order (older batches first)."""
    from ivm.engine.trace import spine as spines

    spine = Spine(1, (np.dtype(np.int64), np.dtype(np.int64)), 1)
    spine.handle(Antichain([0]))
    rng = np.random.default_rng(8)
    queries = np.arange(0, 30, 2, dtype=np.int64)

    def found(s: Spine) -> dict:
        out, q, _ = s.find(queries)
        by_key: dict = {}
        for j, row in zip(q.tolist(), [] if out is None else out.to_rows(), strict=True):
            by_key.setdefault(j, []).append(row)
        return by_key

    for t in range(12):
        n = int(rng.integers(1, 4))
        spine.insert(_batch(rng.integers(0, 30, n), rng.integers(0, 3, n), [t] * n, [1] * n))
        looks = [found(spine) for _ in range(spines.INDEX_READS + 2)]
        plain = Spine(1, spine.dtypes, 1)  # the same batches, searched one by one
        plain.handle(Antichain([0]))
        plain.load(spine.batches())
        assert all(look == found(plain) for look in looks)
        if t >= 1 and len(spine.batches()) > 1:
            assert spine._flat.index is not None
