"""Window functions: per partition, every row with the values of window functions over its partition appended.

``Window`` is a reducer (see ``reducers``): the reduce operator keys its input by the PARTITION BY columns and,
when a partition changes, recomputes that partition's rows from its accumulated input and emits the difference
from what it emitted before, so a change costs work proportional to the partitions it touches. Every changed
partition is computed at once: the rows (a row of multiplicity m as m copies) are sorted once by (partition,
ORDER BY keys, every column), and row numbers, ranks, frames and frame aggregates come from segment boundaries,
cumulative sums, binary searches and sparse tables; nothing loops over partitions or rows in Python.

Ties in the ORDER BY are broken by every column, so ROW_NUMBER (and what else depends on the order of peers,
such as a ROWS frame) is deterministic where PostgreSQL leaves it to the plan.

    >>> import numpy as np
    >>> from ivm.engine.operators.reducers import Groups
    >>> w = Window(((0, False, False, False),), (Call("rank"), Call("sum", 0)))
    >>> g = Groups(np.array([0, 0, 0]), (np.array([5, 3, 5]),), (None,), np.array([1, 1, 1]))
    >>> ids, cols, valid, mult = w(g)
    >>> [c.tolist() for c in cols]
    [[3, 5, 5], [1, 2, 2], [3, 13, 13]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ivm.engine.batch import Mask, lexsort, sort_keys
from ivm.engine.calendar import DAY_MICROS, add_months
from ivm.engine.operators import exact
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.operators.reducers import Groups, Output
from ivm.engine.strings import POOL

__all__ = ["Bound", "Frame", "Call", "Window", "DEFAULT_FRAME", "FUNCTIONS"]

_LOW = np.int64(0xFFFFFFFF)
_HALF = np.int64(1 << 31)

RANKING = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile")
OFFSET = ("lag", "lead")
FRAMED = ("first_value", "last_value", "nth_value", "count_star", "count", "sum", "avg", "min", "max")
FUNCTIONS = RANKING + OFFSET + FRAMED


@dataclass(frozen=True)
class Bound:
    """One end of a frame: ``kind`` in unbounded, preceding, current, following; ``offset`` for preceding and
    following (rows for ROWS, peer groups for GROUPS, for RANGE a distance in the ORDER BY column's stored
    units). With ``months``, a RANGE offset is a calendar interval of that many months and ``offset``
    microseconds, added to a timestamp as PostgreSQL adds one (months first, then the time); ``dates``: the
    ORDER BY values are dates (days), added to as the timestamps of their midnights."""

    kind: str
    offset: int | float = 0
    months: int = 0
    dates: bool = False


@dataclass(frozen=True)
class Frame:
    """The rows a framed function reads: ``mode`` rows, range or groups, from ``start`` to ``end`` (both
    included), less what ``exclude`` takes out: None, ``current row``, ``group`` (the row's peers) or ``ties``
    (its peers but itself)."""

    mode: str
    start: Bound
    end: Bound
    exclude: str | None = None


# PostgreSQL's default: RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW (the whole partition without ORDER BY,
# where every row is a peer of every other)
DEFAULT_FRAME = Frame("range", Bound("unbounded"), Bound("current"))


@dataclass(frozen=True)
class Call:
    """One window function of ``FUNCTIONS`` over value column ``arg``. ``param``: NTILE's buckets, LAG's and
    LEAD's offset, NTH_VALUE's n. ``default``: LAG's and LEAD's value (as the engine holds it) where the row
    they look for is outside the partition, None for NULL. ``text``: ``arg`` holds string-pool codes, so MIN and
    MAX compare strings. ``divisor``: AVG of decimals held as scaled integers divides by the scale's unit."""

    func: str
    arg: int | None = None
    frame: Frame = DEFAULT_FRAME
    param: int | None = None
    default: object = None
    text: bool = False
    divisor: float | None = None
    overflow: str = "bigint out of range"

    def __post_init__(self) -> None:
        if self.func not in FUNCTIONS:
            raise ValueError(f"unknown window function {self.func!r}")


OrderKey = tuple[int, bool, bool, bool]  # value column, descending, NULLs first, text (string-pool codes)


class Window:
    """The reducer: each row of a partition (value columns) followed by one column per ``Call``, the rows
    ordered by ``order`` within their partition."""

    def __init__(self, order: Sequence[OrderKey], calls: Sequence[Call]) -> None:
        self.order = tuple(order)
        self.calls = tuple(calls)

    def out_dtypes(self, in_dtypes: Sequence[np.dtype]) -> tuple[np.dtype, ...]:
        out = [np.dtype(d) for d in in_dtypes]
        for c in self.calls:
            if c.func in ("percent_rank", "cume_dist", "avg"):
                out.append(np.dtype(np.float64))
            elif c.func in RANKING or c.func in ("count", "count_star"):
                out.append(np.dtype(np.int64))
            elif c.func == "sum":
                out.append(np.dtype(np.float64 if np.dtype(in_dtypes[c.arg]).kind == "f" else np.int64))
            else:
                out.append(np.dtype(in_dtypes[c.arg]))
        return tuple(out)

    def __call__(self, g: Groups) -> Output:
        w = np.maximum(g.weights, 0)
        order_keys = self._order_keys(g.columns, g.valid)
        # sorted once; a row of multiplicity m becomes m adjacent copies
        perm = lexsort([g.group, *order_keys, *sort_keys(g.columns, g.valid, None)])
        rows = np.repeat(perm, w[perm])
        n = len(rows)
        if n == 0:
            empty = tuple(c[:0] for c in g.columns) + self._empty(g)
            return g.group[:0], empty, (None,) * len(empty), g.weights[:0]
        s = _Sorted(g.group[rows], [k[rows] for k in order_keys])
        cols = tuple(c[rows] for c in g.columns)
        valid = tuple(None if m is None else m[rows] for m in g.valid)
        out_cols, out_valid = self._evaluate(s, cols, valid)
        return s.gid, cols + out_cols, valid + out_valid, np.ones(n, dtype=np.int64)

    def evaluate_sorted(
        self,
        gid: np.ndarray,
        cols: tuple,
        valid: tuple,
        base: np.ndarray,
        size: np.ndarray,
        keys: list | None = None,
    ) -> tuple[tuple[np.ndarray, ...], tuple[Mask, ...]]:
        """The calls' values for rows already in order (value columns ``cols``), each run of equal ``gid`` a
        slice of one partition: run ``i`` starts at the partition's row ``base[i]``, which holds ``size[i]``
        rows. A slice gives right values for the rows whose frames, peers and offsets lie within it (or
        beyond the partition's end where it ends the partition); see ``ivm.engine.operators.ordered``. ``keys``:
        the rows' ``_order_keys``, when at hand."""
        if not len(gid):
            dtypes = self.out_dtypes([c.dtype for c in cols])[len(cols) :]
            return tuple(np.zeros(0, dtype=d) for d in dtypes), (None,) * len(dtypes)
        s = _Sorted(gid, self._order_keys(cols, valid) if keys is None else keys, base, size)
        return self._evaluate(s, cols, valid)

    def _evaluate(
        self, s: _Sorted, cols: tuple, valid: tuple
    ) -> tuple[tuple[np.ndarray, ...], tuple[Mask, ...]]:
        out_cols: list[np.ndarray] = []
        out_valid: list[Mask] = []
        for c in self.calls:
            value, mask = self._call(c, s, cols, valid)
            out_cols.append(value)
            out_valid.append(mask)
        return tuple(out_cols), tuple(out_valid)

    def _empty(self, g: Groups) -> tuple[np.ndarray, ...]:
        dtypes = self.out_dtypes([c.dtype for c in g.columns])[len(g.columns) :]
        return tuple(np.zeros(0, dtype=d) for d in dtypes)

    def _order_keys(self, columns, valid) -> list[np.ndarray]:
        """Integer sort keys of the ORDER BY (each column's NULL flag, then its rank, complemented when
        descending): rows equal on them are peers."""
        keys: list[np.ndarray] = []
        for pos, desc, nulls_first, text in self.order:
            x, m = columns[pos], valid[pos]
            if m is not None:
                keys.append(m if nulls_first else ~m)  # a NULL's False sorts before every value's True
            rank = POOL.ranks(x)[0] if text else _ranks(x)
            if m is not None:
                rank = np.where(m, rank, 0)  # a NULL's value is no part of its order
            keys.append(~rank if desc else rank)
        return keys

    def _call(self, c: Call, s: _Sorted, cols, valid) -> tuple[np.ndarray, Mask]:
        f = c.func
        if f == "row_number":
            return s.pos + 1, None
        if f == "rank":
            return s.peer_start - s.first + s.base + 1, None
        if f == "dense_rank":
            return s.peer_id - s.peer_id[s.first] + 1, None
        if f == "percent_rank":
            rank = s.peer_start - s.first + s.base
            return np.where(s.size > 1, rank / np.maximum(s.size - 1, 1), 0.0), None
        if f == "cume_dist":
            return (s.peer_end - s.first + s.base) / s.size, None
        if f == "ntile":
            return _ntile(s.pos, s.size, int(c.param)), None
        if f in OFFSET:
            return _offset(c, s, cols[c.arg], valid[c.arg])
        span = self._frame(c.frame, s, cols, valid)
        if f == "count_star":
            return span.count(), None
        if f in ("first_value", "last_value", "nth_value"):
            at, present = span.at(0 if f == "first_value" else -1 if f == "last_value" else int(c.param) - 1)
            return _pick(cols[c.arg], valid[c.arg], at, present)
        x, m = cols[c.arg], valid[c.arg]
        nvalid = span.count(m)
        if f == "count":
            return nvalid, None
        if f in ("sum", "avg"):
            return _frame_sum(c, x, m, span, nvalid)
        return _frame_extreme(c, x, m, span, s)

    def _frame(self, frame: Frame, s: _Sorted, cols, valid) -> _Span:
        """Per row, its frame as sorted positions."""
        start = self._bound(frame, frame.start, True, s, cols, valid)
        end = self._bound(frame, frame.end, False, s, cols, valid)
        start = np.clip(start, s.first, s.last)
        end = np.maximum(np.clip(end, s.first, s.last), start)
        if frame.exclude is None:
            return _Span(start, end)
        if frame.exclude == "current row":
            xs, xe = s.index, s.index + 1
        else:
            xs, xe = s.peer_start, s.peer_end
        xs = np.clip(xs, start, end)
        xe = np.clip(xe, xs, end)
        kept = None
        if frame.exclude == "ties":
            kept = (s.index >= start) & (s.index < end)
        return _Span(start, end, xs, xe, kept, s.index)

    def _bound(self, frame: Frame, b: Bound, is_start: bool, s: _Sorted, cols, valid) -> np.ndarray:
        if b.kind == "unbounded":
            return s.first if is_start else s.last
        n = len(s.index)
        if frame.mode == "rows":
            k = min(int(b.offset), n + 1)
            step = 0 if b.kind == "current" else k if b.kind == "following" else -k
            return s.index + step + (0 if is_start else 1)
        if b.kind == "current":
            return s.peer_start if is_start else s.peer_end
        if frame.mode == "groups":
            return _group_bound(s, b, is_start)
        pos, desc, _, _ = self.order[0]
        return _range_bound(s, cols[pos], valid[pos], desc, b, is_start)


class _Span:
    """Per row, its frame as sorted positions: ``[start, end)`` (empty where end <= start), less ``[xs, xe)``
    (within it) that EXCLUDE takes out, though with ``kept`` the row ``index`` itself where it is true (EXCLUDE
    TIES; the row is then within ``[xs, xe)``)."""

    def __init__(self, start, end, xs=None, xe=None, kept=None, index=None) -> None:
        self.start, self.end = start, end
        self.xs, self.xe, self.kept, self.index = xs, xe, kept, index

    def total(self, prefix: np.ndarray) -> np.ndarray:
        """The sums over the frames of values whose cumulative sums (with a 0 in front: see ``_prefix``) are
        ``prefix``, along its last axis."""
        out = prefix[..., self.end] - prefix[..., self.start]
        if self.xs is not None:
            out -= prefix[..., self.xe] - prefix[..., self.xs]
        if self.kept is not None:
            out += (prefix[..., self.index + 1] - prefix[..., self.index]) * self.kept
        return out

    def count(self, m: Mask = None) -> np.ndarray:
        """The rows of each frame (those where ``m`` is true, with ``m``)."""
        if m is None and self.xs is None:
            return self.end - self.start
        if m is None:
            out = (self.end - self.start) - (self.xe - self.xs)
            return out if self.kept is None else out + self.kept
        return self.total(_prefix(m.astype(np.int64)))

    def at(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The sorted position of each frame's ``k``-th row (from 0; -1: the last), and whether there is one."""
        start, end = self.start, self.end
        if self.xs is None:
            at = end - 1 if k < 0 else start + k
            return at, (at >= start) & (at < end)
        one = np.zeros(len(start), dtype=np.int64) if self.kept is None else self.kept.astype(np.int64)
        # the frame's pieces, in order: [start, xs), the row itself where kept, [xe, end)
        first, third = self.xs - start, end - self.xe
        if k < 0:
            k = first + one + third - 1
            k = np.where(k < 0, first + one + third, k)  # an empty frame: none
        at = np.where(k < first, start + k, np.where(k < first + one, self.index, self.xe + (k - first - one)))
        return at, (k >= 0) & (k < first + one + third)


class _Sorted:
    """The sorted rows of the partitions being computed: per row, its partition's bounds and its peers'. With
    ``base`` and ``size`` (per run of equal ``gid``), a run is a slice of a partition: ``first`` and ``last``
    are the slice's bounds, ``pos`` and ``size`` the partition's."""

    def __init__(
        self,
        gid: np.ndarray,
        keys: list[np.ndarray],
        base: np.ndarray | None = None,
        size: np.ndarray | None = None,
    ) -> None:
        n = len(gid)
        self.gid = gid
        self.index = np.arange(n)
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(gid[1:], gid[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        self.pid = np.cumsum(new) - 1
        ends = np.append(starts[1:], n)
        self.first = starts[self.pid]
        self.last = ends[self.pid]
        self.size = self.last - self.first if size is None else size[self.pid]
        self.base = 0 if base is None else base[self.pid]  # the partition's rows before the slice
        self.pos = self.index - self.first + self.base
        peer = new.copy()
        for k in keys:
            peer[1:] |= k[1:] != k[:-1]
        self.peer_starts = np.flatnonzero(peer)
        self.peer_ends = np.append(self.peer_starts[1:], n)
        self.peer_id = np.cumsum(peer) - 1
        self.peer_start = self.peer_starts[self.peer_id]
        self.peer_end = self.peer_ends[self.peer_id]


def _ranks(x: np.ndarray) -> np.ndarray:
    """Dense ranks of values (NaN above every other double and equal to itself, -0.0 equal to 0.0)."""
    if x.dtype.kind in "biu" and x.dtype.itemsize <= 8:
        return x.astype(np.int64)
    return np.unique(x, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _ntile(pos: np.ndarray, size: np.ndarray, buckets: int) -> np.ndarray:
    """PostgreSQL's NTILE: ``size`` rows into ``buckets`` as equal as can be, the larger ones first."""
    q, r = size // buckets, size % buckets
    big = r * (q + 1)
    return np.where(pos < big, pos // (q + 1), r + (pos - big) // np.maximum(q, 1)) + 1


def _pick(x: np.ndarray, m: Mask, at: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, Mask]:
    """The values at sorted positions ``at`` where ``present``, NULL elsewhere."""
    idx = np.where(present, at, 0)
    value = x[idx]
    mask = present if m is None else present & m[idx]
    return np.where(mask, value, np.zeros(1, dtype=x.dtype)), mask


def _offset(c: Call, s: _Sorted, x: np.ndarray, m: Mask) -> tuple[np.ndarray, Mask]:
    """LAG and LEAD: the value ``param`` rows before (after) in the partition, else the default."""
    step = int(c.param) if c.func == "lead" else -int(c.param)
    at = s.index + step
    inside = (at >= s.first) & (at < s.last)
    value, mask = _pick(x, m, at, inside)
    if c.default is None:
        return value, mask
    default = np.asarray(c.default, dtype=x.dtype)
    return np.where(inside, value, default), mask | ~inside


def _group_bound(s: _Sorted, b: Bound, is_start: bool) -> np.ndarray:
    """A GROUPS frame's bound at an offset: the first row (for a start) of the peer group ``offset`` groups
    before the row's (after it, for FOLLOWING), or the first row beyond that group (for an end); beyond the
    partition's groups, its bound."""
    k = min(int(b.offset), len(s.index) + 1)
    g = s.peer_id - k if b.kind == "preceding" else s.peer_id + k
    lowest, highest = s.peer_id[s.first], s.peer_id[s.last - 1]
    at = np.clip(g, 0, len(s.peer_starts) - 1)
    found = (s.peer_starts if is_start else s.peer_ends)[at]
    return np.where(g < lowest, s.first, np.where(g > highest, s.last, found))


def _range_bound(s: _Sorted, x: np.ndarray, m: Mask, desc: bool, b: Bound, is_start: bool) -> np.ndarray:
    """A RANGE frame's bound at an offset: the first row (for a start) whose ORDER BY value is at least the
    row's less the offset for PRECEDING (plus it for FOLLOWING), in the order's direction, or the first row
    beyond the last one at most that (for an end). A row whose value is NULL has its peers (the NULLs) for
    such a bound, and the NULLs are never within an offset of a value, as in PostgreSQL; so is NaN (above every
    other double, and equal to itself whatever the offset)."""
    out = (s.peer_start if is_start else s.peer_end).copy()
    present = np.ones(len(x), dtype=bool) if m is None else m
    if x.dtype.kind == "f":
        present = present & ~np.isnan(x)
    sel = np.flatnonzero(present)
    if not len(sel):
        return out
    v = x[sel]
    if b.months:
        t = ~v.astype(np.int64) if desc else v.astype(np.int64)
        target = _calendar_target(v, b, desc, is_start)
        below = above = None
    elif v.dtype.kind == "f":
        t = -v.astype(np.float64) if desc else v.astype(np.float64)
        target = t - b.offset if b.kind == "preceding" else t + b.offset
        below = above = None
    else:
        t = ~v.astype(np.int64) if desc else v.astype(np.int64)  # ~ reverses the order, and ~(v + n) = ~v - n
        off = np.int64(b.offset)
        with np.errstate(over="ignore"):
            target = t - off if b.kind == "preceding" else t + off
        below = target > t if b.kind == "preceding" else None  # wrapped around: beyond every value
        above = target < t if b.kind == "following" else None
    # the rows with values of each partition are contiguous and sorted by ``t``: one search of (partition, t)
    uniq = np.unique(t)
    width = len(uniq) + 1
    pid = s.pid[sel]
    comb = pid * width + np.searchsorted(uniq, t)
    rank = np.searchsorted(uniq, target, "left" if is_start else "right")
    if below is not None:
        rank = np.where(below, 0, rank)
    if above is not None:
        rank = np.where(above, len(uniq), rank)
    found = np.searchsorted(comb, pid * width + rank, "left")
    out[sel] = sel + (found - np.arange(len(sel)))
    return out


# the days of PostgreSQL's timestamps, 4714-11-24 BC to 294276-12-31 (from 1970-01-01)
_FIRST_DAY, _LAST_DAY = -2_440_588, 106_741_034


def _calendar_target(v: np.ndarray, b: Bound, desc: bool, is_start: bool) -> np.ndarray:
    """Where a RANGE bound of a calendar interval (``b.months`` months and ``b.offset`` microseconds) puts each
    row's frame, in ``_range_bound``'s order (the value, complemented when descending): the row's value less
    the interval for PRECEDING (plus it for FOLLOWING), backwards when descending, as PostgreSQL's timestamp
    arithmetic has it; for dates, as a date, the first within it for a start and the last for an end."""
    sign = -1 if (b.kind == "preceding") != desc else 1
    if b.dates:
        day, tod = v.astype(np.int64), np.zeros(len(v), dtype=np.int64)
        if ((day < _FIRST_DAY) | (day > _LAST_DAY)).any():
            raise EvaluationError("date out of range for timestamp")
    else:
        day, tod = np.divmod(v.astype(np.int64), DAY_MICROS)
    day = add_months(day, sign * b.months)
    carry, tod = np.divmod(tod + sign * int(b.offset), DAY_MICROS)  # the day's time, whole days carried
    day += carry
    if ((day < _FIRST_DAY) | (day > _LAST_DAY)).any():
        raise EvaluationError("timestamp out of range")
    # a date within a bound after its midnight: the next date for an ascending start (a descending end)
    at = day + ((tod > 0) & (is_start != desc)) if b.dates else day * DAY_MICROS + tod
    return ~at if desc else at


def _prefix(x: np.ndarray) -> np.ndarray:
    """Cumulative sums with a 0 in front: the sum of ``x[a:b]`` is ``p[b] - p[a]``."""
    out = np.empty(len(x) + 1, dtype=x.dtype)
    out[0] = 0
    np.cumsum(x, out=out[1:])
    return out


def _frame_sum(c: Call, x: np.ndarray, m: Mask, span: _Span, nvalid: np.ndarray) -> tuple[np.ndarray, Mask]:
    """SUM or AVG over each frame: exact, from prefix sums of integers' 32-bit halves, or of doubles' exact
    limbs (``exact``), so that a frame's sum is that of its values whatever else the partition holds."""
    present = nvalid > 0
    if x.dtype.kind == "f":
        total = _double_sums(x, m, span, nvalid, c.func == "sum")
    else:
        xs = x.astype(np.int64)
        hi, lo = xs >> np.int64(32), xs & _LOW
        if m is not None:
            hi, lo = np.where(m, hi, 0), np.where(m, lo, 0)
        high, low = span.total(_prefix(hi)), span.total(_prefix(lo))
        total = (high << np.int64(32)) + low
        upper = high + (low >> np.int64(32))
        bad = ((upper < -_HALF) | (upper >= _HALF)) & present
        if c.func == "sum" and bad.any():
            raise EvaluationError(c.overflow)
        if c.func == "avg":
            total = np.where(bad, high.astype(np.float64) * 2.0**32 + low.astype(np.float64), total)
    if c.func == "avg":
        with np.errstate(invalid="ignore", divide="ignore"):
            total = total / np.maximum(nvalid, 1)
        if c.divisor is not None:
            total = total / c.divisor
    return np.where(present, total, np.zeros(1, dtype=total.dtype)), present


def _double_sums(x: np.ndarray, m: Mask, span: _Span, nvalid, signed: bool) -> np.ndarray:
    """Exact sums of doubles over frames, rounded once (see ``exact``)."""
    n = len(x)
    ones = np.ones(n, dtype=np.int64)
    counts = np.zeros((4, n + 1), dtype=np.int64)
    rows, which = exact.special(x, m, ones)
    counts[which, rows + 1] = 1
    counts = np.cumsum(counts, axis=1)
    frame_counts = span.total(counts)
    rows = exact.finite(x, m, ones)
    if len(rows):
        lowest, parts = exact.split(x[rows], ones[rows])
        lo, hi = exact.window(lowest)
        limbs = np.zeros((hi - lo, n + 1), dtype=np.int64)
        exact.scatter(limbs, lowest, parts, lo, rows + 1)
        np.cumsum(limbs, axis=1, out=limbs)
        total, over = exact.sums(span.total(limbs), lo, frame_counts)
    else:
        total, over = exact.sums(np.zeros((0, n), dtype=np.int64), 0, frame_counts)
    if (over & (nvalid > 0)).any():
        raise EvaluationError(exact.OVERFLOW)
    return exact.signed(total, frame_counts[3], nvalid) if signed else total


def _frame_extreme(c: Call, x: np.ndarray, m: Mask, span: _Span, s: _Sorted) -> tuple[np.ndarray, Mask]:
    """MIN or MAX over each frame, as the greatest of the values' ranks (reversed for MIN): over whole
    partitions by segments, over frames from the partition's start (or to its end) by cumulative maxima within
    partitions, else from a sparse table of maxima over spans of 2**k rows."""
    if c.text:
        rank, value_of = POOL.ranks(x)
    else:
        value_of, rank = np.unique(x, return_inverse=True)
        rank = rank.reshape(-1).astype(np.int64)
    if c.func == "min":
        rank = len(value_of) - 1 - rank
    key = rank if m is None else np.where(m, rank, -1)  # -1: no value
    fs, fe = span.start, span.end
    if span.xs is not None:
        best = np.maximum(_sparse_max(key, fs, span.xs), _sparse_max(key, span.xe, fe))
        if span.kept is not None:
            best = np.where(span.kept, np.maximum(best, key[span.index]), best)
    elif (fs == s.first).all() and (fe == s.last).all():
        best = np.maximum.reduceat(key, np.flatnonzero(s.index == s.first))[s.pid]
    elif (fs == s.first).all():
        best = _running_max(key, s.pid)[np.maximum(fe - 1, 0)] - _lift(key, s.pid)
    elif (fe == s.last).all():
        back = s.pid[-1] - s.pid
        best = _running_max(key[::-1], back[::-1])[::-1][np.minimum(fs, len(x) - 1)] - _lift(key, back)
    else:
        best = _sparse_max(key, fs, fe)
    found = (best >= 0) & (fe > fs)
    if c.func == "min":
        best = len(value_of) - 1 - best
    value = value_of[np.where(found, best, 0)] if len(value_of) else np.zeros(len(x), dtype=x.dtype)
    return np.where(found, value, np.zeros(1, dtype=x.dtype)), found


def _lift(key: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """What ``_running_max`` adds to a key of partition ``pid``: keys (>= -1) of later partitions are then
    above every key of earlier ones."""
    return 1 + pid * (int(key.max(initial=0)) + 2)


def _running_max(key: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Per row, the greatest key from its partition's first row to it (rows sorted by non-decreasing
    ``pid``), lifted by ``_lift``: one cumulative maximum for all partitions."""
    return np.maximum.accumulate(key + _lift(key, pid))


def _sparse_max(key: np.ndarray, fs: np.ndarray, fe: np.ndarray) -> np.ndarray:
    """Per frame ``[fs, fe)``, the greatest key (-1 for an empty frame), from maxima over spans of 2**k rows."""
    n = len(key)
    length = np.maximum(fe - fs, 1)
    level = np.floor(np.log2(length)).astype(np.int64)
    tables = [key]
    span = 1
    while span * 2 <= int(length.max(initial=1)):
        prev = tables[-1]
        nxt = prev.copy()
        np.maximum(prev[: n - span], prev[span:], out=nxt[: n - span])
        tables.append(nxt)
        span *= 2
    table = np.stack(tables)
    a = table[level, np.minimum(fs, n - 1)]
    b = table[level, np.clip(fe - (1 << level), 0, n - 1)]
    return np.where(fe > fs, np.maximum(a, b), -1)
