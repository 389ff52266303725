"""Seeking query values in sorted hash arrays: every index gives exactly what a binary search gives."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ivm.engine.trace import seek
from ivm.engine.trace.seek import DirectIndex, Fence, Filter, build_index, seek_ranges

INT64 = st.integers(-(2**63), 2**63 - 1)


def _expected(arr: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.searchsorted(arr, q, side="left"), np.searchsorted(arr, q, side="right")


def _check(arr: np.ndarray, q: np.ndarray, index, sieve=None) -> None:
    lo, hi = seek_ranges(arr, q, index, sieve)
    elo, ehi = _expected(arr, q)
    assert ((hi - lo) == (ehi - elo)).all()
    found = ehi > elo
    assert (lo[found] == elo[found]).all()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(INT64, min_size=1, max_size=40),
    st.lists(st.integers(1, 50), min_size=1, max_size=40),
    st.lists(INT64, max_size=30),
    st.integers(0, 3),
)
def test_filter_never_hides_a_present_value(values, repeats, extra, spread):
    # few distinct values repeated (runs longer than one row), spread over a narrow or the whole range
    values = np.array(values, dtype=np.int64) >> np.int64(spread * 20)
    arr = np.sort(np.repeat(values, np.resize(np.array(repeats), len(values))))
    sieve = Filter(arr)
    q = np.sort(np.concatenate([arr, np.array(extra, dtype=np.int64), [-(2**63), 2**63 - 1, 0]]))
    assert sieve.candidates(arr).all()
    _check(arr, q, None, sieve)


def test_each_index_agrees_with_binary_search(monkeypatch):
    monkeypatch.setattr(seek, "FENCE_MIN", 1 << 12)
    monkeypatch.setattr(seek, "DIRECT_MIN", 1 << 10)
    rng = np.random.default_rng(7)
    cases = {
        "hashes": np.sort(rng.integers(-(2**63), 2**63 - 1, 20_000, dtype=np.int64)),
        "hashes with runs": np.sort(np.repeat(rng.integers(-(2**63), 2**63 - 1, 3_000, dtype=np.int64), 5)),
        "sparse integers": np.sort(rng.integers(0, 10**9, 5_000)),
        "dense integers": np.arange(5_000, 12_000),
    }
    kinds = set()
    for arr in cases.values():
        for identity in (False, True):
            index = build_index(arr, identity)
            kinds.add(type(index))
            present = arr[rng.integers(0, len(arr), 3_000)]
            absent = rng.integers(-(2**63), 2**63 - 1, 3_000)
            q = np.sort(np.concatenate([present, absent, np.arange(4_990, 12_010)]))
            for sieve in (None, Filter(arr)):
                _check(arr, q, index, sieve)
                _check(arr, q[:100], index, sieve)  # few queries: searched without the fence
    assert {Fence, DirectIndex} <= kinds
