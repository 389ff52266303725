"""Running states of linear aggregates: slots found by key, separate for keys sharing a hash."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ivm
from ivm.operators.running import RunningStates

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
