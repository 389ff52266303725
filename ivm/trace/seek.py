"""Seeking keys in sorted hash arrays: the row range of each query key, without scanning.

Three ways, chosen per batch when it is first searched:
- keys that are dense integers (the key is its own hash and the batch covers most of its value range) get a
  *direct index*, one int32 row position per value: a lookup is one array access;
- large batches get a sparse *fence* (every 16th hash), searched first because it fits in cache, so that the
  final probes of the binary search stay within one small block (for many queries at once; a few are
  binary-searched directly);
- other batches are binary-searched as they are.
Ranges are then closed by looking at the next row: most keys own one row or a few, and only the rest need a
second search.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Fence", "DirectIndex", "build_index", "seek_ranges"]

STRIDE = 16
FENCE_MIN = 1 << 22
DIRECT_MIN = 1 << 14
DIRECT_DENSITY = 2  # at most this many table slots per row
FENCE_QUERIES = 256  # fewer queries than this search the whole array: the fence's own steps cost more


class Fence:
    """Every ``STRIDE``-th value of a sorted array, for cache-friendly searches in it."""

    __slots__ = ("values",)

    def __init__(self, sorted_values: np.ndarray) -> None:
        self.values = sorted_values[::STRIDE].copy()


class DirectIndex:
    """For each value in ``[base, base + len(first))``, the first row holding it, or -1."""

    __slots__ = ("base", "first")

    def __init__(self, sorted_values: np.ndarray) -> None:
        self.base = int(sorted_values[0])
        span = int(sorted_values[-1]) - self.base + 1
        self.first = np.full(span, -1, dtype=np.int32)
        n = len(sorted_values)
        starts = np.flatnonzero(np.concatenate(([True], sorted_values[1:] != sorted_values[:-1])))
        self.first[sorted_values[starts] - self.base] = starts.astype(np.int32)
        del n


def build_index(sorted_hashes: np.ndarray, identity: bool) -> Fence | DirectIndex | None:
    """The index worth building for a batch's hashes, if any."""
    n = len(sorted_hashes)
    if identity and n >= DIRECT_MIN:
        span = int(sorted_hashes[-1]) - int(sorted_hashes[0]) + 1
        if span <= DIRECT_DENSITY * n:
            return DirectIndex(sorted_hashes)
    if n >= FENCE_MIN:
        return Fence(sorted_hashes)
    return None


def _left(arr: np.ndarray, q: np.ndarray, fence: Fence | None) -> np.ndarray:
    """``np.searchsorted(arr, q, side="left")``."""
    if fence is None or len(q) < FENCE_QUERIES:
        return np.searchsorted(arr, q, side="left")
    n = len(arr)
    b = np.searchsorted(fence.values, q, side="left")
    lo = np.where(b > 0, (b - 1) * STRIDE + 1, 0)
    hi = np.minimum(b * STRIDE, n)
    for _ in range(STRIDE.bit_length()):
        mid = (lo + hi) >> 1
        less = arr[np.minimum(mid, n - 1)] < q
        go = lo < hi
        lo = np.where(go & less, mid + 1, lo)
        hi = np.where(go & ~less, mid, hi)
    return lo


def _direct(index: DirectIndex, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off = q - index.base
    inside = (off >= 0) & (off < len(index.first))
    pos = index.first[np.where(inside, off, 0)].astype(np.int64)
    hit = inside & (pos >= 0)
    lo = np.where(hit, pos, 0)
    return lo, hit


def seek_ranges(
    arr: np.ndarray, q: np.ndarray, index: Fence | DirectIndex | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """For each query value, the range ``[lo, hi)`` of ``arr`` (sorted) holding it (empty if absent)."""
    n = len(arr)
    if n == 0:
        z = np.zeros(len(q), dtype=np.int64)
        return z, z
    if isinstance(index, DirectIndex):
        lo, hit = _direct(index, q)
    else:
        lo = _left(arr, q, index)
        hit = arr[np.minimum(lo, n - 1)] == q
        hit &= lo < n
    hi = lo + hit
    # extend runs longer than one row: one more look, then a real search for the rest
    nxt = np.minimum(hi, n - 1)
    more = hit & (hi < n) & (arr[nxt] == q)
    if more.any():
        idx = np.flatnonzero(more)
        hi[idx] = np.searchsorted(arr, q[idx], side="right")
    return lo, hi
