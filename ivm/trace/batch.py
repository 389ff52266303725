"""Immutable sorted batches of a trace.

A ``TraceBatch`` holds consolidated updates whose first ``nkey`` columns are the key, sorted by (key hash, key,
value, time), with the key hashes alongside so that a reader seeks a key by binary search instead of scanning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ivm import stats
from ivm.batch import NULL_HASH, Batch, argsort, consolidate, key_hash, merge_order, rows_equal
from ivm.trace.seek import DirectIndex, Fence, build_index, seek_ranges

__all__ = ["TraceBatch", "expand_ranges"]


@dataclass(frozen=True, slots=True, eq=False)
class TraceBatch:
    """Consolidated updates sorted by (key hash, key, value, time); ``hashes[i]`` is row i's key hash."""

    updates: Batch
    hashes: np.ndarray
    nkey: int
    _index: Fence | DirectIndex | None | bool = field(default=False, repr=False)

    def __len__(self) -> int:
        return len(self.updates)

    @staticmethod
    def from_updates(updates: Batch, nkey: int) -> TraceBatch:
        """Sorts and consolidates ``updates`` keyed by their first ``nkey`` columns."""
        cols, valid = updates.select(range(nkey))
        h = key_hash(cols, valid, len(updates))
        return TraceBatch.consolidated(updates, h, nkey)

    @staticmethod
    def consolidated(updates: Batch, hashes: np.ndarray, nkey: int, split: int | None = None) -> TraceBatch:
        """Sorts and consolidates ``updates`` whose key hashes are ``hashes`` (``split``: see
        ``consolidate``)."""
        cols, valid = updates.select(range(nkey))
        n = len(updates)
        if n:
            order = merge_order(hashes, split) if split is not None else argsort(hashes)
            hs = hashes[order]
            if n == 1 or not (hs[1:] == hs[:-1]).any():
                # distinct hashes mean distinct keys, so distinct rows: nothing to add up, only zeros to drop
                stats.rows_sorted += n
                keep = updates.diffs[order] != 0
                if not keep.all():
                    order, hs = order[keep], hs[keep]
                out = updates.take(order)
                if identity_hash(cols, valid):
                    hs = key_hash(*out.select(range(nkey)), len(out))
                return TraceBatch(out, hs, nkey)
        if identity_hash(cols, valid):
            out, _ = consolidate(updates, split=split)
            return TraceBatch(out, key_hash(*out.select(range(nkey)), len(out)), nkey)
        out, first = consolidate(updates, lead=(hashes,), split=split)
        return TraceBatch(out, hashes[first], nkey)

    @staticmethod
    def from_sorted(updates: Batch, hashes: np.ndarray, nkey: int) -> TraceBatch:
        return TraceBatch(updates, hashes, nkey)

    def key_columns(self, index: np.ndarray | slice | None = None):
        cols, valid = self.updates.select(range(self.nkey))
        if index is None:
            return cols, valid
        return tuple(c[index] for c in cols), tuple(None if m is None else m[index] for m in valid)

    def seek(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each query hash, the row range ``[lo, hi)`` holding it."""
        return seek_ranges(self.hashes, hashes, self.index())

    def index(self) -> Fence | DirectIndex | None:
        """An index of the hashes for large or dense batches (built on first use, then kept)."""
        if self._index is False:
            identity = self.nkey == 1 and self.hashes is self.updates.columns[0]
            object.__setattr__(self, "_index", build_index(self.hashes, identity))
        return self._index

    def match(self, hashes: np.ndarray, cols: tuple, valid: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Pairs ``(query index, row index)`` of rows whose key equals query key ``i`` exactly.

        Work is proportional to the number of queries times log of the batch, plus the matches.
        """
        lo, hi = self.seek(hashes)
        q, r = expand_ranges(lo, hi)
        if len(q) and not identity_hash(cols, valid, hashes):
            mine = self.key_columns(r)
            theirs = (tuple(c[q] for c in cols), tuple(None if m is None else m[q] for m in valid))
            ok = rows_equal(*theirs, *mine)
            if not ok.all():
                q, r = q[ok], r[ok]
        return q, r


def identity_hash(cols: tuple, valid: tuple, hashes: np.ndarray | None = None) -> bool:
    """Whether equal hashes imply equal keys: one integer key column without NULLs (whose hashes then
    cannot meet the hash of a NULL)."""
    if not (len(cols) == 1 and cols[0].dtype.kind in "iub" and valid[0] is None):
        return False
    return hashes is None or not (hashes == NULL_HASH).any()


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(i, j)`` for every ``i`` and every ``j`` in ``range(lo[i], hi[i])``, vectorized."""
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    q = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    offsets = np.cumsum(counts) - counts
    r = np.arange(total, dtype=np.int64) - np.repeat(offsets - lo, counts)
    return q, r
