"""Immutable sorted batches of a trace.

A ``TraceBatch`` holds consolidated updates whose first ``nkey`` columns are the key, sorted by (key hash, key,
value, time), with the key hashes alongside so that a reader seeks a key by binary search instead of scanning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ivm.engine import stats
from ivm.engine.batch import (
    NULL_HASH,
    SMALL_SORT,
    Batch,
    argsort,
    key_hash,
    merge_order,
    pack_keys,
    refine_ties,
    rows_equal,
    sort_groups,
    sort_keys,
    sorted_runs,
)
from ivm.engine.trace.seek import DirectIndex, Fence, Filter, build_index, seek_ranges, wants_filter

__all__ = ["TraceBatch", "expand_ranges"]

KEEP_RUNS = 1 << 16


@dataclass(slots=True, eq=False, weakref_slot=True)
class TraceBatch:
    """Consolidated updates sorted by (key hash, key, value, time); ``hashes[i]`` is row i's key hash. Never
    changed once made but for what it keeps to be read faster (``seek``, ``bounds``, ``runs``, ``index``);
    not frozen, as a frozen dataclass costs twice as much to make."""

    updates: Batch
    hashes: np.ndarray
    nkey: int
    _index: Fence | DirectIndex | None | bool = field(default=False, repr=False)
    _filter: Filter | None = field(default=None, repr=False)
    _runs: tuple | None = field(default=None, repr=False)
    _bounds: tuple[int, int] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return self.hashes.shape[0]

    @staticmethod
    def from_updates(updates: Batch, nkey: int, hashes: np.ndarray | None = None) -> TraceBatch:
        """Sorts and consolidates ``updates`` keyed by their first ``nkey`` columns (whose key hashes are
        ``hashes`` when the caller knows them already)."""
        if hashes is None:
            hashes = key_hash(updates.columns[:nkey], updates.valid[:nkey], len(updates))
        return TraceBatch.consolidated(updates, hashes, nkey)

    @staticmethod
    def consolidated(updates: Batch, hashes: np.ndarray, nkey: int, split: int | None = None) -> TraceBatch:
        """Sorts and consolidates ``updates`` whose key hashes are ``hashes`` (``split``: see
        ``consolidate``)."""
        index, diffs = consolidation(updates, hashes, nkey, split)
        n = len(updates)
        if len(index) == n and (n == 1 or not np.count_nonzero(index[1:] < index[:-1])):  # kept in order
            out = updates.with_diffs(diffs)
            index = slice(None)
        else:
            out = updates.take(index).with_diffs(diffs)
        return TraceBatch.ordered(out, hashes[index], nkey)

    @staticmethod
    def ordered(updates: Batch, hashes: np.ndarray, nkey: int) -> TraceBatch:
        """``updates``, sorted and consolidated already, with their key hashes ``hashes``."""
        if nkey == 1 and updates.valid[0] is None:
            first = updates.columns[0]
            if first.dtype == np.int64:  # a key that is its own hash: one array for both
                return TraceBatch(updates, first, nkey)
            if first.dtype.kind in "iub":
                return TraceBatch(updates, key_hash((first,), (None,), len(updates)), nkey)
        return TraceBatch(updates, hashes, nkey)

    def key_columns(self, index: np.ndarray | slice | None = None):
        cols, valid = self.updates.select(range(self.nkey))
        if index is None:
            return cols, valid
        return tuple(c[index] for c in cols), tuple(None if m is None else m[index] for m in valid)

    def seek(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each query hash, the row range ``[lo, hi)`` holding it."""
        index = self.index()
        if wants_filter(len(self.hashes), len(hashes), index):
            if self._filter is None:
                self._filter = Filter(self.hashes)
            return seek_ranges(self.hashes, hashes, index, self._filter)
        return seek_ranges(self.hashes, hashes, index)

    def bounds(self) -> tuple[int, int]:
        """The least and greatest key hash of a nonempty batch."""
        if self._bounds is None:
            self._bounds = (int(self.hashes[0]), int(self.hashes[-1]))
        return self._bounds

    def may_hold(self, lo: int, hi: int) -> bool:
        """Whether some key hash of the batch lies in ``[lo, hi]`` (its hashes are sorted: a look at both
        ends spares a search of a batch that holds none of the keys sought)."""
        if len(self.hashes) == 0:
            return False
        first, last = self.bounds()
        return lo <= last and hi >= first

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct key hashes with their row ranges ``[start, end)`` (kept for small batches, which are
        matched against every batch of the other side)."""
        if self._runs is not None:
            return self._runs
        h = self.hashes
        n = len(h)
        new = np.empty(n + 1, dtype=bool)  # where a run starts, and the end of the last
        new[0] = new[n] = True
        np.not_equal(h[1:], h[:-1], out=new[1:n])
        bounds = new.nonzero()[0]
        starts = bounds[:-1]
        runs = (h[starts], starts, bounds[1:])
        if n <= KEEP_RUNS:
            self._runs = runs
        return runs

    def index(self) -> Fence | DirectIndex | None:
        """An index of the hashes for large or dense batches (built on first use, then kept)."""
        if self._index is False:
            identity = self.nkey == 1 and self.hashes is self.updates.columns[0]
            self._index = build_index(self.hashes, identity)
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
            ok = rows_equal(*theirs, *mine, n=len(q))
            if not ok.all():
                q, r = q[ok], r[ok]
        return q, r


def consolidation(
    updates: Batch, hashes: np.ndarray, nkey: int, split: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """What consolidating ``updates`` (keyed by their first ``nkey`` columns, with key hashes ``hashes``)
    keeps: the index of one update of each distinct (row, time) with a nonzero sum, in trace order (key hash,
    key, value, time), and those sums. With ``split``, ``[:split]`` and ``[split:]`` are each in trace order.

    Rows are ordered by hash first; only rows that share a hash are compared on their columns and times (a key
    that is its own hash skips its column), so a batch of distinct keys costs one sort of its hashes."""
    n = len(updates)
    stats.rows_sorted += n
    if n <= 1:
        keep = updates.diffs.nonzero()[0]
        return keep, updates.diffs[keep]
    columns, valid = updates.columns, updates.valid
    skip = 1 if nkey == 1 and valid[0] is None and columns[0].dtype.kind in "iub" else 0
    if nkey == 2 and identity_hash(columns[:2], valid[:2], hashes):
        skip = 2
    packed = None
    if skip and n >= SMALL_SORT:  # a key that is its own hash, and small values: all keys in one integer
        rest = sort_keys(columns[1:], valid[1:], updates.times)
        packed = pack_keys([hashes, *rest])
    if packed is not None:
        order, starts = sorted_runs(packed, split)
    else:
        order = merge_order(hashes, split) if split is not None else argsort(hashes)
        hs = hashes[order]
        eq = hs[1:] == hs[:-1]
        if not np.count_nonzero(eq):
            starts = None  # every row is a group of its own
        else:
            rest = sort_keys(columns[skip:], valid[skip:], updates.times)
            if n < SMALL_SORT:
                order, starts = sort_groups([hashes, *rest], split)
            else:
                order, starts = refine_ties(order, eq, rest)
    if starts is None or np.count_nonzero(starts) == n:
        diffs = updates.diffs[order]
        keep = diffs.nonzero()[0]
        return (order, diffs) if len(keep) == n else (order[keep], diffs[keep])
    idx = starts.nonzero()[0]
    sums = np.add.reduceat(updates.diffs[order], idx)
    keep = sums.nonzero()[0]
    return order[idx[keep]], sums[keep]


def identity_hash(cols: tuple, valid: tuple, hashes: np.ndarray | None = None) -> bool:
    """Whether equal hashes imply equal keys ``cols`` (with hashes ``hashes``): one integer key column without
    NULLs (whose hashes then cannot meet the hash of a NULL), or two integer columns whose pairs are all
    their own hashes (non-negative: see ``pair_hash``)."""
    if len(cols) == 2:
        if hashes is None or not (cols[0].dtype.kind in "iub" and cols[1].dtype.kind in "iub"):
            return False
        return not len(hashes) or np.minimum.reduce(hashes) >= 0
    if not (len(cols) == 1 and cols[0].dtype.kind in "iub" and valid[0] is None):
        return False
    return hashes is None or not len(hashes) or np.minimum.reduce(hashes) > NULL_HASH  # (the least int64)


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(i, j)`` for every ``i`` and every ``j`` in ``range(lo[i], hi[i])``, vectorized."""
    counts = hi - lo
    some = counts.nonzero()[0]  # the ranges holding rows
    if not len(some):
        return some, some
    counts = counts[some]
    starts = lo[some]
    ends = np.add.accumulate(counts)
    total = int(ends[-1])
    if total == len(some):  # one row per range, as keys with one update each have
        return some, starts
    r = np.arange(total, dtype=np.int64) - (ends - counts - starts).repeat(counts)
    return some.repeat(counts), r
