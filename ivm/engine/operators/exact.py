"""Exact sums of doubles: a SUM or AVG of DOUBLE PRECISION as a function of the values present alone.

Every finite double is an integer multiple of 2**-1074 below 2**1024 in magnitude, so a sum of finite
doubles is an integer ``N`` times 2**-1074. ``N`` is kept exactly, in *limbs* of 32 bits held in int64 (limb
``k`` weighs 2**(32k)), and rounded once, correctly (to nearest, ties to even), when the sum is read. A row
inserted adds its value's limbs and a row deleted subtracts the same limbs, so the sum depends on the values
present, not on the order they came and went in: a running sum in doubles drifts (1e20 + 1 - 1e20 is 0 in
doubles; it is 1 here). NaN and the infinities are counted apart, since which of them are present decides
such a sum: NaN if a NaN is, or both infinities are; else the infinity present. Negative zeros are counted
apart too: a SUM whose values are all -0.0 is -0.0, as in IEEE arithmetic and PostgreSQL (its SUM starts from
the first value and -0.0 + -0.0 is -0.0), where any other value present makes a zero sum +0.0.

A value's 53-bit significand, shifted by its exponent's place in a limb, spans at most three limbs: a row
contributes three numbers below 2**33 (times its multiplicity). A sum's limbs are *normalized* by carrying:
each in [0, 2**32) but the top one, which holds the sign (the sum is the limbs' weighted sum, the top limb
negative for a negative sum). Between normalizations a limb has room for sums of 2**30 contributions.

A column keeps only the limbs its values reach: a window of limb indices ``[lo, lo + width)`` that widens as
values of new magnitudes arrive, plus one limb above for the sign and the carries. Doubles in [0, 1) need 4
limbs, amounts in cents up to 1e6 need 5, values from 1e-20 to 1e20 need 8, and the whole range of doubles
needs ``LIMBS`` (67).
"""

from __future__ import annotations

import numpy as np

from ivm.engine.batch import Mask

__all__ = [
    "LIMBS",
    "OVERFLOW",
    "split",
    "window",
    "scatter",
    "normalize",
    "round_sums",
    "special",
    "finite",
    "negative_zeros",
    "signed",
    "sums",
    "segment_sums",
]

LIMBS = 67  # limb indices a sum can reach: 0 .. 65 for the values (2**2098 > every N), 66 for sign and carries
OVERFLOW = "value out of range: overflow"  # an exact sum of finite doubles beyond the largest double

_MASK = np.int64(0xFFFFFFFF)
_U32 = np.uint64(0xFFFFFFFF)
_FRACTION = np.uint64((1 << 52) - 1)
_HIDDEN = np.uint64(1 << 52)


def split(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For finite doubles ``x`` taken ``w`` times each (int64): the index of the lowest limb each reaches,
    and its contributions (shape ``(3, n)``) to that limb and the two above."""
    bits = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    exponent = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    normal = exponent > 0
    significand = np.where(normal, (bits & _FRACTION) | _HIDDEN, bits & _FRACTION)
    low_bit = np.where(normal, exponent - 1, 0)  # x = significand * 2**(low_bit - 1074)
    shift = (low_bit & 31).astype(np.uint64)
    a = (significand & _U32) << shift  # below 2**64
    b = (significand >> np.uint64(32)) << shift  # below 2**53
    parts = np.empty((3, len(x)), dtype=np.int64)
    parts[0] = (a & _U32).astype(np.int64)
    parts[1] = (a >> np.uint64(32)).astype(np.int64) + (b & _U32).astype(np.int64)
    parts[2] = (b >> np.uint64(32)).astype(np.int64)
    parts *= np.where((bits >> np.uint64(63)) != 0, -w, w)
    return low_bit >> 5, parts


def window(lowest: np.ndarray) -> tuple[int, int]:
    """The limbs ``[lo, hi)`` that values whose lowest limbs are ``lowest`` reach, with the sign limb."""
    return int(lowest.min()), int(lowest.max()) + 4


def scatter(target: np.ndarray, lowest: np.ndarray, parts: np.ndarray, lo: int, column: np.ndarray) -> None:
    """Add contributions to the rows of ``target`` (shape ``(width, m)``, its first row numbered ``lo``): part
    ``j`` of each (``parts`` has shape ``(p, n)``, as ``split`` gives them) to row ``lowest + j``, in column
    ``column``."""
    m = target.shape[1]
    flat = target.reshape(-1)
    base = (lowest - lo) * m + column
    for j in range(len(parts)):
        np.add.at(flat, base + j * m, parts[j])


def normalize(limbs: np.ndarray) -> np.ndarray:
    """Carry limbs (shape ``(width, m)``) in place: every limb but the top into [0, 2**32); ``limbs``."""
    for k in range(len(limbs) - 1):
        carry = limbs[k] >> 32
        limbs[k] &= _MASK
        limbs[k + 1] += carry
    return limbs


def round_sums(limbs: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """The doubles nearest the sums held in ``limbs`` (shape ``(width, m)``, limb ``lo`` first, normalized
    or not; left as they are), and where a sum is beyond the largest double (its double is infinite)."""
    width, m = limbs.shape
    if width == 0 or m == 0:
        return np.zeros(m), np.zeros(m, dtype=bool)
    mag = normalize(limbs.copy())
    negative = mag[-1] < 0
    if negative.any():
        mag[:, negative] = normalize(-mag[:, negative])
    nonzero = mag != 0
    present = nonzero.any(axis=0)
    cols = np.arange(m)
    top = width - 1 - np.argmax(nonzero[::-1], axis=0)  # the highest nonzero limb
    u2 = mag[top, cols].astype(np.uint64)
    u1 = np.where(top >= 1, mag[np.maximum(top - 1, 0), cols], 0).astype(np.uint64)
    u0 = np.where(top >= 2, mag[np.maximum(top - 2, 0), cols], 0).astype(np.uint64)
    sticky = np.argmax(nonzero, axis=0) < top - 2  # a nonzero limb below the three read
    # the top 64 bits of the three limbs, with the bits below them as one sticky bit
    nb = np.frexp(np.maximum(u2, 1).astype(np.float64))[1].astype(np.uint64)  # bits of the top limb, 1..32
    top64 = (u2 << (np.uint64(64) - nb)) | (u1 << (np.uint64(32) - nb)) | (u0 >> nb)
    sticky |= (u0 & ((np.uint64(1) << nb) - np.uint64(1))) != 0
    keep, rest = top64 >> np.uint64(11), top64 & np.uint64(0x7FF)
    half = np.uint64(0x400)
    up = (rest > half) | ((rest == half) & (sticky | ((keep & np.uint64(1)) == 1)))
    significand = (keep + up).astype(np.float64)  # at most 2**53: exact
    exponent = nb.astype(np.int64) + 11 + 32 * (lo + top - 2) - 1074
    with np.errstate(over="ignore"):
        out = np.ldexp(significand, exponent)
    out[~present] = 0.0
    out[negative] *= -1.0
    return out, np.isinf(out)


def special(x: np.ndarray, valid: Mask, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows holding a NaN, an infinity or -0.0 (not NULL) with a nonzero ``w``, and which each holds: 0
    for NaN, 1 for +inf, 2 for -inf, 3 for -0.0 (the rows of a sum's ``counts``)."""
    odd = (~np.isfinite(x) | negative_zeros(x)) & (w != 0)
    rows = np.flatnonzero(odd if valid is None else odd & valid)
    v = x[rows]
    return rows, np.where(np.isnan(v), 0, np.where(v > 0, 1, np.where(v < 0, 2, 3)))


def negative_zeros(x: np.ndarray) -> np.ndarray:
    """Where doubles ``x`` are -0.0."""
    return (x == 0) & np.signbit(x)


def signed(out: np.ndarray, negative: np.ndarray, nvalid: np.ndarray) -> np.ndarray:
    """Sums ``out`` (as ``sums`` gives them, a zero sum +0.0) with -0.0 for the groups whose ``nvalid`` values
    (not NULL) are all -0.0, of which they hold ``negative``: what SUM gives (AVG divides a sum started from
    +0.0, as PostgreSQL's does, so the mean of -0.0 values is +0.0)."""
    return np.where((negative == nvalid) & (nvalid > 0), -0.0, out)


def finite(x: np.ndarray, valid: Mask, w: np.ndarray) -> np.ndarray:
    """The rows holding a finite nonzero value (not NULL) with a nonzero ``w``: those that move a sum."""
    keep = np.isfinite(x) & (x != 0) & (w != 0)
    return np.flatnonzero(keep if valid is None else keep & valid)


def sums(limbs: np.ndarray, lo: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The SUMs of groups, from the limbs of their finite values and ``counts`` (shape ``(4, groups)``: how
    many NaN, +inf, -inf and -0.0 each holds; or fewer rows, missing ones 0), and where the finite values' sum
    is beyond the largest double (an error, as in PostgreSQL, unless an infinity or a NaN decides the sum). A
    zero sum is +0.0 here (see ``signed``)."""
    out, over = round_sums(limbs, lo)
    if not counts[:3].any():
        return out, over
    nan, pinf, ninf = counts[:3] != 0
    nan_sum = nan | (pinf & ninf)
    out = np.where(nan_sum, np.nan, np.where(pinf, np.inf, np.where(ninf, -np.inf, out)))
    return out, over & ~nan & ~pinf & ~ninf


def segment_sums(
    x: np.ndarray, valid: Mask, w: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``sums`` of the segments of ``x`` beginning at ``starts``, row ``i`` taken ``w[i]`` times."""
    n, groups = len(x), len(starts)
    gid = np.repeat(np.arange(groups), np.diff(np.append(starts, n)))
    counts = np.zeros((4, groups), dtype=np.int64)
    rows, which = special(x, valid, w)
    if len(rows):
        np.add.at(counts, (which, gid[rows]), w[rows])
    rows = finite(x, valid, w)
    if not len(rows):
        return sums(np.zeros((0, groups), dtype=np.int64), 0, counts)
    lowest, parts = split(x[rows], w[rows])
    lo, hi = window(lowest)
    limbs = np.zeros((hi - lo, groups), dtype=np.int64)
    scatter(limbs, lowest, parts, lo, gid[rows])
    return sums(limbs, lo, counts)
