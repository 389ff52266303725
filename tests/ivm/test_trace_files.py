"""Trace batches written as Arrow IPC files read back exactly, as views of the mapped file, and a damaged
file is an error naming it."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ivm.engine.batch import Batch
from ivm.engine.files import StoredFile, Written
from ivm.engine.lattice import Antichain
from ivm.engine.trace.batch import TraceBatch
from ivm.engine.trace.files import read_batch, read_trace, write_batch, write_trace
from ivm.engine.trace.spine import Spine
from ivm.errors import OperationalError


def _batch(rng: np.random.Generator, n: int, dim: int, nkey: int, nulls: bool) -> TraceBatch:
    cols = (
        rng.integers(-5, 5, n).astype(np.int64),
        rng.normal(size=n),
        rng.integers(0, 1000, n).astype(np.int32),
        rng.integers(0, 2, n).astype(bool),
    )
    valid = tuple((rng.random(n) < 0.7) if nulls and i % 2 == 0 else None for i in range(len(cols)))
    times = rng.integers(0, 100, (n, dim)).astype(np.int64)
    diffs = rng.integers(-3, 4, n).astype(np.int64)
    return TraceBatch.from_updates(Batch(cols, valid, times, diffs), nkey)


def _same(a: TraceBatch, b: TraceBatch) -> None:
    assert a.nkey == b.nkey and len(a) == len(b)
    for x, y in zip(a.updates.columns, b.updates.columns, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
    for x, y in zip(a.updates.valid, b.updates.valid, strict=True):
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y))
    assert np.array_equal(a.updates.times, b.updates.times) and a.updates.times.shape == b.updates.times.shape
    assert np.array_equal(a.updates.diffs, b.updates.diffs)
    assert np.array_equal(a.hashes, b.hashes) and a.hashes.dtype == b.hashes.dtype


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 300),
    dim=st.integers(1, 3),
    nkey=st.integers(1, 3),
    nulls=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_batch_reads_back_as_written(tmp_path_factory, n, dim, nkey, nulls, seed):
    batch = _batch(np.random.default_rng(seed), n, dim, nkey, nulls)
    path = tmp_path_factory.mktemp("files") / "b.arrow"
    f = write_batch(batch, str(path))
    assert f.size == path.stat().st_size and not path.with_name("b.arrow.tmp").exists()
    back = read_batch(f)
    _same(batch, back)
    # the keys seek as in the batch written
    if len(batch):
        assert np.array_equal(batch.seek(batch.hashes[:5])[0], back.seek(batch.hashes[:5])[0])


def test_reading_maps_the_file_instead_of_copying(tmp_path):
    batch = _batch(np.random.default_rng(1), 10_000, 1, 1, True)
    back = read_batch(write_batch(batch, str(tmp_path / "b.arrow")))
    arrays = [*back.updates.columns, *(m for m in back.updates.valid if m is not None)]
    arrays += [back.updates.times, back.updates.diffs, back.hashes]
    assert all(not a.flags.owndata and not a.flags.writeable for a in arrays)


def test_a_file_uri_is_a_local_path(tmp_path):
    batch = _batch(np.random.default_rng(2), 50, 2, 2, False)
    f = write_batch(batch, f"file://{tmp_path}/u.arrow")
    assert (tmp_path / "u.arrow").exists() and not (tmp_path / "file:").exists()
    _same(batch, read_batch(f))


def test_damaged_files_are_errors_naming_them(tmp_path):
    batch = _batch(np.random.default_rng(3), 500, 1, 1, True)
    path = tmp_path / "b.arrow"
    f = write_batch(batch, str(path))
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x10
    path.write_bytes(bytes(flipped))
    with pytest.raises(OperationalError, match=f"{path} is damaged: its checksum"):
        read_batch(f)
    path.write_bytes(good[: len(good) - 100])
    with pytest.raises(OperationalError, match=f"{path} is damaged: .* bytes where {len(good)} were written"):
        read_batch(f)
    path.unlink()
    with pytest.raises(OperationalError, match=f"cannot read {path}"):
        read_batch(f)
    other = tmp_path / "other.arrow"
    other.write_bytes(b"not arrow at all")
    with pytest.raises(OperationalError, match=f"{other} is not a trace batch"):
        read_batch(StoredFile(str(other), 16, zlib.crc32(b"not arrow at all")))


@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 7, 300, 1100, 2500]), min_size=2, max_size=16),
    cut=st.integers(0, 15),
    seed=st.integers(0, 2**16),
)
def test_a_trace_written_and_loaded_goes_on_as_the_original(tmp_path_factory, sizes, cut, seed):
    """A trace checkpointed after ``cut`` insertions (merges under way included) and loaded into a new spine
    holds the same updates, and both hold the same after the same later insertions; a second checkpoint
    writes only the batches the first did not."""
    rng = np.random.default_rng(seed)
    dtypes = (np.dtype(np.int64),) * 3
    directory = str(tmp_path_factory.mktemp("trace"))
    a = Spine(2, dtypes, 1)
    ha = a.handle(Antichain([0]))
    b = hb = None
    written = Written()
    for t, n in enumerate(sizes):
        batch = Batch.build(
            [rng.integers(0, 400, n), rng.integers(0, 3, n), rng.integers(0, 4, n)],
            None,
            np.full(n, t),
            rng.choice([-1, 1, 2], n),
        )
        for s in (a, b):
            if s is not None:
                s.insert(TraceBatch.from_updates(batch, 2))
        for h in (ha, hb):
            if h is not None:
                h.advance(Antichain([t + 1]))
        if t == min(cut, len(sizes) - 1):
            files = write_trace(list(a.batches()), directory, written)
            again = write_trace(list(a.batches()), directory, written)
            assert again == files and len(list(Path(directory).iterdir())) == len(files)
            b = Spine(2, dtypes, 1)
            hb = b.handle(Antichain([t + 1]))
            read_trace(b, files)
        if b is not None:
            assert _updates(a) == _updates(b)


def _updates(spine: Spine) -> dict:
    """The trace's contents as of its readers' frontier (every update's time is before it; merges advance
    times to it at moments that differ between the two traces)."""
    acc: dict = {}
    for bt in spine.batches():
        u = bt.updates
        for row, d in zip(zip(*(c.tolist() for c in u.columns), strict=True), u.diffs.tolist(), strict=True):
            acc[row] = acc.get(row, 0) + d
    return {k: v for k, v in acc.items() if v}
