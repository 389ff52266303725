"""Seeking keys in sorted hash arrays: the row range of each query key, without scanning.

Three ways, chosen per batch when it is first searched:
- keys that are dense integers (the key is its own hash and the batch covers most of its value range) get a
  *direct index*, one int32 row position per value: a lookup is one array access;
- large batches get a sparse *fence* (every 16th hash), searched first because it fits in cache, so that the
  final probes of the binary search stay within one small block (for many queries at once; a few are
  binary-searched directly);
- other batches are binary-searched as they are.
Ranges are then closed by looking at the next row: most keys own one row or a few, and only the rest need a
second search (fewer than 256 queries search both ends at once: two binary searches cost less than the
numpy calls that spare the second, whatever the batch's size).
Large batches searched for many queries at once also get a *filter*: one bit per slice of their hash range,
set where a hash falls, 8 to 16 bits per row. A query whose bit is clear is absent without a search; most
queries are absent from most batches of a trace (a new key from all, a stored key from all but one), and a
binary search in a large batch costs a cache miss per step.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Fence", "DirectIndex", "Filter", "build_index", "seek_ranges"]

STRIDE = 16
FENCE_MIN = 1 << 22
DIRECT_MIN = 1 << 14
DIRECT_DENSITY = 2  # at most this many table slots per row
FENCE_QUERIES = 256  # fewer queries than this search the whole array: the fence's own steps cost more
FILTER_MIN = 1 << 14
FEW_QUERIES = 256  # fewer queries than this are searched for both ends at once: fewer numpy calls
FILTER_QUERIES = 1024  # fewer queries than this are searched directly: the filter's own steps cost more
FILTER_BITS = 16  # per row, at most (a query absent from the batch passes with chance about 1/8 to 1/16)
FILTER_BLOCK = 1 << 23  # bits of a filter set at once (a multiple of 8)


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


class Filter:
    """Which slices of a sorted array's value range hold a value: bit ``(v - least) >> shift``. The bit
    positions of sorted values are sorted, so the bitmap is set a block of its bits at a time, each block
    packed from one byte per bit."""

    __slots__ = ("least", "most", "shift", "bits")

    def __init__(self, sorted_values: np.ndarray) -> None:
        self.least, self.most = int(sorted_values[0]), int(sorted_values[-1])
        span = self.most - self.least + 1
        self.shift = max(0, (span - 1).bit_length() - (FILTER_BITS * len(sorted_values)).bit_length() + 1)
        pos = self._positions(sorted_values).astype(np.int64)
        nbits = int(pos[-1]) + 1
        self.bits = np.empty((nbits + 7) // 8, dtype=np.uint8)
        flags = np.empty(min(nbits, FILTER_BLOCK), dtype=bool)
        cuts = np.searchsorted(pos, np.arange(0, nbits, FILTER_BLOCK)).tolist() + [len(pos)]
        for block, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):  # a few blocks
            start = block * FILTER_BLOCK
            width = min(FILTER_BLOCK, nbits - start)
            flags[:width] = False
            flags[pos[lo:hi] - start] = True
            self.bits[start // 8 : (start + width + 7) // 8] = np.packbits(flags[:width], bitorder="little")

    def _positions(self, values: np.ndarray) -> np.ndarray:
        # the unsigned difference is exact for values at or above the least (no int64 overflow)
        return (values.view(np.uint64) - np.uint64(self.least & (2**64 - 1))) >> np.uint64(self.shift)

    def candidates(self, q: np.ndarray) -> np.ndarray:
        """Whether each query may be present (no false negatives)."""
        inside = (q >= self.least) & (q <= self.most)
        pos = self._positions(np.where(inside, q, self.least))
        return inside & (self.bits[pos >> np.uint64(3)] & _bit(pos)).astype(bool)


def _bit(pos: np.ndarray) -> np.ndarray:
    return np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))


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


def wants_filter(n: int, queries: int, index: Fence | DirectIndex | None) -> bool:
    """Whether a search of ``queries`` values in a batch of ``n`` rows should go through a filter."""
    return n >= FILTER_MIN and queries >= FILTER_QUERIES and not isinstance(index, DirectIndex)


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
    arr: np.ndarray, q: np.ndarray, index: Fence | DirectIndex | None = None, sieve: Filter | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """For each query value, the range ``[lo, hi)`` of ``arr`` (sorted) holding it (empty if absent); only
    the queries that pass ``sieve`` (when given) are searched."""
    n = len(arr)
    if n == 0:
        z = np.zeros(len(q), dtype=np.int64)
        return z, z
    if sieve is not None:
        maybe = np.flatnonzero(sieve.candidates(q))
        if len(maybe) == len(q):
            return seek_ranges(arr, q, index)
        lo = np.zeros(len(q), dtype=np.int64)
        hi = np.zeros(len(q), dtype=np.int64)
        if len(maybe):
            lo[maybe], hi[maybe] = seek_ranges(arr, q[maybe], index)
        return lo, hi
    if len(q) < FEW_QUERIES and not isinstance(index, DirectIndex):
        return arr.searchsorted(q, "left"), arr.searchsorted(q, "right")
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
