"""Running states of linear aggregates: slots found by key, separate for keys sharing a hash."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ivm
from ivm.engine import stats
from ivm.engine.operators.running import RunningStates

KEYS = st.lists(
    st.tuples(st.integers(-3, 3), st.one_of(st.none(), st.floats(allow_nan=True, width=32))), max_size=30
)


@settings(max_examples=80, deadline=None)
@given(st.lists(KEYS, min_size=1, max_size=8), st.integers(0, 3))
def test_slots_follow_keys_even_when_hashes_collide(batches, bits):
    states = RunningStates([np.int64, np.float64], [np.int64], capacity=2)
    known: dict = {}
    for batch in batches:
        distinct = list(dict.fromkeys((a, b, _canon(b)) for a, b in batch))
        unique = list({(a, c): (a, b) for a, b, c in distinct}.values())
        if not unique:
            continue
        ints = np.array([a for a, _ in unique], dtype=np.int64)
        floats = np.array([0.0 if b is None else b for _, b in unique], dtype=np.float64)
        valid = np.array([b is not None for _, b in unique])
        hashes = ints & ((1 << bits) - 1)  # at most 2**bits distinct hashes: most keys collide
        found = states.find(hashes, [ints, floats], [None, valid])
        for (a, b), slot in zip(unique, found.tolist(), strict=True):
            assert slot == known.get((a, _canon(b)), -1)
        fresh = np.flatnonzero(found < 0)
        slots = states.add(hashes[fresh], [ints[fresh], floats[fresh]], [None, valid[fresh]])
        for i, slot in zip(fresh.tolist(), slots.tolist(), strict=True):
            a, b = unique[i]
            known[(a, _canon(b))] = slot
        assert len(set(known.values())) == len(known) == states.size


def _canon(b):
    """The key a float column holds: NULL, NaN, or the value (0.0 and -0.0 alike)."""
    if b is None:
        return "null"
    return "nan" if b != b else b + 0.0


def test_sums_survive_groups_that_empty_and_return():
    db = ivm.connect()
    db.execute("CREATE TABLE t (g INTEGER, v INTEGER)")
    db.execute("CREATE VIEW s AS SELECT g, SUM(v) AS total, COUNT(*) AS n FROM t GROUP BY g")
    db.execute("INSERT INTO t VALUES (1, 5), (1, 7), (2, 1), (NULL, 3)")
    db.execute("DELETE FROM t WHERE g = 1")
    db.execute("SELECT * FROM s")
    assert sorted(db.fetchall(), key=str) == [(2, 1, 1), (None, 3, 1)]
    db.execute("INSERT INTO t VALUES (1, 2)")
    db.execute("SELECT * FROM s")
    assert sorted(db.fetchall(), key=str) == [(1, 2, 1), (2, 1, 1), (None, 3, 1)]
    assert db.engine.state_bytes() > 0


def test_groups_whose_output_stays_the_same_emit_nothing():
    """A row counted once more by DISTINCT, or a sum changed by zero, is not retracted and added again: the
    operators downstream receive only the groups whose output changed."""
    df = ivm.Engine().dataflow("d")
    rows = df.input([np.int64, np.int64])
    distinct_out: list = []
    rows.distinct().op.subscribe(_Collect(distinct_out))
    sum_out: list = []
    rows.aggregate([0], [("sum", 0)]).as_collection().op.subscribe(_Collect(sum_out))

    def step(insert=(), delete=()):
        distinct_out.clear(), sum_out.clear()
        if insert:
            rows.insert(list(insert))
        if delete:
            rows.delete(list(delete))
        rows.advance_to(rows.frontier + 1)
        df.step()
        return [sorted((*r[:2], r[-1]) for b in out for r in b.to_rows()) for out in (distinct_out, sum_out)]

    assert step(insert=[(1, 5)]) == [[(1, 5, 1)], [(1, 5, 1)]]
    assert step(insert=[(1, 5)]) == [[], [(1, 5, -1), (1, 10, 1)]]  # counted twice: still one distinct row
    assert step(insert=[(1, 0)]) == [[(1, 0, 1)], []]  # the sum stays 10
    assert step(delete=[(1, 5)]) == [[], [(1, 5, 1), (1, 10, -1)]]
    assert step(delete=[(1, 5), (1, 0)]) == [[(1, 0, -1), (1, 5, -1)], [(1, 5, -1)]]
    # and the output's arrangement is not even asked to sort and cancel the pair
    df = ivm.Engine().dataflow("e")
    rows = df.input([np.int64])
    rows.distinct()
    rows.insert([(7,)])
    rows.advance_to(2)
    df.step()
    before = stats.rows_sorted
    rows.insert([(7,)])
    rows.advance_to(3)
    df.step()
    assert stats.rows_sorted == before


class _Collect:
    def __init__(self, out: list) -> None:
        self.out = out

    def put(self, point, item) -> None:
        self.out.append(item.updates if hasattr(item, "updates") else item)
