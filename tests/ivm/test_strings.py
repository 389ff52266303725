"""The string pool: equal strings share a code, distinct strings never do, whatever their hashes."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ivm.engine.strings as strings
from ivm.engine.strings import StringPool

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


def _check(pool: StringPool, batches: list[list[str]], how: list[str]) -> None:
    seen: dict[str, int] = {}
    for values, way in zip(batches, how, strict=True):
        if way == "arrow":
            codes = pool.encode_arrow(pa.array(values, pa.string()))
        elif way == "one":
            codes = np.array([pool.code(v) for v in values], dtype=np.int64)
        else:
            codes = pool.encode(values)
        assert len(codes) == len(values)
        for v, c in zip(values, codes.tolist(), strict=True):
            assert seen.setdefault(v, c) == c, f"{v!r} got two codes"
        if len(values):
            assert list(pool.decode(codes)) == values
            assert pool.strings(codes).to_pylist() == values
    assert len(set(seen.values())) == len(seen), "two strings share a code"
    names = list(seen)
    rank, code_of = pool.ranks(np.array([seen[v] for v in names], dtype=np.int64))
    in_order = sorted(names, key=lambda v: v.encode())
    assert [names[i] for i in np.argsort(rank)] == in_order
    assert pool.decode(code_of).tolist() == in_order


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.lists(TEXT, max_size=60), st.sampled_from(["arrow", "one", "list"])), max_size=8),
    st.booleans(),
)
def test_codes_are_exact_under_any_hash(batches, collide):
    """With a hash that makes most strings collide, codes stay exact (the side table takes the others)."""
    original = strings._hash
    if collide:
        strings._hash = lambda s: len(s) % 3
    try:
        pool = StringPool()
        _check(pool, [b for b, _ in batches], [w for _, w in batches])
        if collide and len({v for b, _ in batches for v in b} | {""}) > 3:
            assert pool._others  # some strings lost their hash to another
    finally:
        strings._hash = original


def test_many_strings_grow_the_table_and_merge_chunks(monkeypatch):
    monkeypatch.setattr(strings, "TAIL", 7)
    monkeypatch.setattr(strings, "TIER_WIDTH", 3)
    pool = StringPool()
    rng = np.random.default_rng(3)
    batches, how = [], []
    for i in range(60):
        n = int(rng.integers(1, 3000)) if i % 3 == 0 else int(rng.integers(1, 12))
        batches.append([f"s{int(x)}" for x in rng.integers(0, 20000, n)])
        how.append(["arrow", "one", "list"][i % 3])
    _check(pool, batches, how)
    assert len(pool._chunks) < 20


def test_nulls_and_empty_strings():
    pool = StringPool()
    codes = pool.encode_arrow(pa.array(["a", None, "", "a"] * 10))
    assert codes[2] == codes[1] == pool.code("") == 0
    assert codes[0] == codes[3] != 0
    assert pool.encode_arrow(pa.array([], pa.string())).tolist() == []
    assert pool.decode(np.zeros(0, dtype=np.int64)).tolist() == []
    pool.encode([f"v{i}" for i in range(100)])  # several chunks
    assert pool.strings(np.zeros(0, dtype=np.int64)).to_pylist() == []


@pytest.mark.parametrize("n", [1, 16, 17, 5000])
def test_long_and_unicode_strings(n):
    pool = StringPool()
    values = [("é" * (i % 50)) + "\x00" + ("x" * (i * 37 % 3000)) for i in range(n)]
    _check(pool, [values, values[::-1]], ["arrow", "list"])


@pytest.mark.parametrize("collide", [False, True])
def test_columns_of_mostly_distinct_strings(collide, monkeypatch):
    """Columns whose first strings are distinct are interned row by row: repeats within the column, strings
    seen before, and hash collisions among all of them still get exact codes."""
    if collide:
        monkeypatch.setattr(strings, "_hash", lambda s: len(s) % 5)
    rng = np.random.default_rng(7)
    pool = StringPool()
    batches = []
    for _ in range(6):
        head = [f"d{int(x)}" for x in rng.choice(10**6, strings.SAMPLE, replace=False)]
        tail = [f"t{int(x)}" for x in rng.integers(0, 300, 400)] + head[:10]
        batches.append(head + tail)
    _check(pool, batches, ["arrow"] * len(batches))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.sampled_from(["a", "b", "cc", "é", ""]) | TEXT, max_size=30), st.booleans()),
        max_size=6,
    ),
    st.booleans(),
)
def test_stored_codes_become_canonical(batches, collide):
    """Columns stored without interning get codes of their own; ``canonical`` gives equal strings one code,
    the code interning gives them, before or after, whatever the hashes."""
    original = strings._hash
    if collide:
        strings._hash = lambda s: len(s) % 3
    try:
        pool = StringPool()
        held: list[tuple[list[str], np.ndarray]] = []
        for values, stored in batches:
            head = [f"h{len(held)}-{i}" for i in range(4 * strings.SAMPLE)] if stored else []
            values = head + values * 4  # repeats after distinct strings: stored when asked
            codes = pool.encode_arrow(pa.array(values, pa.string()), stored=stored)
            assert pool.strings(codes).to_pylist() == values
            assert not stored or (pool._canon[codes] < 0).all()  # none interned yet
            held.append((values, codes))
        seen: dict[str, int] = {}
        for values, codes in held[::-1]:
            canon = pool.canonical(codes)
            assert pool.strings(canon).to_pylist() == values
            for v, c in zip(values, canon.tolist(), strict=True):
                assert seen.setdefault(v, c) == c, f"{v!r} got two canonical codes"
            assert (pool.canonical(canon) == canon).all()
        assert len(set(seen.values())) == len(seen), "two strings share a canonical code"
        for v, c in seen.items():
            assert pool.code(v) == c
        if seen:
            assert (pool.encode_arrow(pa.array(list(seen) * 5, pa.string())) == list(seen.values()) * 5).all()
    finally:
        strings._hash = original
