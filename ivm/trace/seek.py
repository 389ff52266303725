"""Seeking keys in sorted hash arrays: the row range of each query key, without scanning.

Binary search over a large array misses the cache at nearly every probe. For large arrays a sparse *fence*
(every
64th hash) is searched first, which fits in cache, and the final probes stay within one small block. Ranges are
then closed by looking at the next row: most keys own one row or a few, and only the rest need a second search.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Fence", "seek_ranges"]

STRIDE = 16
FENCE_MIN = 1 << 22


class Fence:
    """Every ``STRIDE``-th value of a sorted array, for cache-friendly searches in it."""

    __slots__ = ("values",)

    def __init__(self, sorted_values: np.ndarray) -> None:
        self.values = sorted_values[::STRIDE].copy()


def _left(arr: np.ndarray, q: np.ndarray, fence: Fence | None) -> np.ndarray:
    """``np.searchsorted(arr, q, side="left")``."""
    if fence is None:
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


def seek_ranges(arr: np.ndarray, q: np.ndarray, fence: Fence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each query value, the range ``[lo, hi)`` of ``arr`` (sorted) holding it (empty if absent)."""
    n = len(arr)
    lo = _left(arr, q, fence)
    if n == 0:
        return lo, lo
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
