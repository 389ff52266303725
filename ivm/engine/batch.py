"""Batches of updates: columnar rows with a time and a signed multiplicity change (diff) each.

A ``Batch`` holds equal-length column arrays (numpy), one optional validity mask per column (``None`` when the
column has no NULL; ``False`` marks a NULL), a ``times`` array of shape ``(n, d)`` and a ``diffs`` array. Values
under a NULL are kept at zero, so equality, hashing and sorting of rows never look at garbage.

Consolidation sorts updates by (row, time) and sums the diffs of equal runs, dropping the ones that sum to zero.
Keys of arrangements are reduced to an int64 ``key hash`` for sorting and seeking; exact equality of the key
columns is always checked where hashes match, so correctness never depends on the absence of collisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ivm.engine import stats

__all__ = [
    "Batch",
    "consolidate",
    "key_hash",
    "rows_equal",
    "group_starts",
    "concat_masks",
    "lexsort",
]

Mask = np.ndarray | None
NULL_HASH = np.int64(np.iinfo(np.int64).min)


def _as_times(times: np.ndarray) -> np.ndarray:
    times = np.asarray(times, dtype=np.int64)
    return times.reshape(-1, 1) if times.ndim == 1 else times


@dataclass(slots=True, eq=False)
class Batch:
    """Columnar updates ``(row, time, diff)``; ``columns[i]`` with validity ``valid[i]``. Never changed once
    made (not frozen only because a frozen dataclass costs twice as much to make, and every operator call
    makes some)."""

    columns: tuple[np.ndarray, ...]
    valid: tuple[Mask, ...]
    times: np.ndarray
    diffs: np.ndarray

    def __len__(self) -> int:
        return self.diffs.shape[0]

    @property
    def arity(self) -> int:
        return len(self.columns)

    @property
    def dim(self) -> int:
        return self.times.shape[1]

    @staticmethod
    def empty(dtypes: Sequence[np.dtype], dim: int = 1) -> Batch:
        return Batch(
            tuple(np.zeros(0, dtype=t) for t in dtypes),
            tuple(None for _ in dtypes),
            np.zeros((0, dim), dtype=np.int64),
            np.zeros(0, dtype=np.int64),
        )

    @staticmethod
    def build(
        columns: Sequence[np.ndarray],
        valid: Sequence[Mask] | None,
        times: np.ndarray,
        diffs: np.ndarray,
    ) -> Batch:
        """A batch with NULL slots zeroed and all-valid masks dropped."""
        if valid is not None and len(valid) != len(columns):
            raise ValueError(f"{len(columns)} columns but {len(valid)} validity masks")
        if valid is None or all(m is None for m in valid):
            cols = tuple(c if type(c) is np.ndarray else np.asarray(c) for c in columns)
            return Batch(cols, (None,) * len(cols), _as_times(times), np.asarray(diffs, dtype=np.int64))
        cols = []
        masks: list[Mask] = []
        for col, mask in zip(columns, valid, strict=True):
            col = np.asarray(col)
            if mask is not None:
                mask = np.asarray(mask, dtype=bool)
                if mask.all():
                    mask = None
                else:
                    col = np.where(mask, col, np.zeros(1, dtype=col.dtype))
            cols.append(col)
            masks.append(mask)
        return Batch(tuple(cols), tuple(masks), _as_times(times), np.asarray(diffs, dtype=np.int64))

    @property
    def dtypes(self) -> tuple[np.dtype, ...]:
        return tuple(c.dtype for c in self.columns)

    def take(self, index: np.ndarray | slice) -> Batch:
        """Rows at ``index`` (an integer array, a boolean mask or a slice).

        A mask becomes row numbers first (each column is then one gather), and the two-dimensional times are
        gathered with ``take``: numpy's general fancy indexing costs several times more on small batches."""
        if type(index) is np.ndarray:
            if index.dtype == np.bool_:
                index = index.nonzero()[0]
            times = self.times.take(index, axis=0)
        else:
            times = self.times[index]
        return Batch(
            tuple([c[index] for c in self.columns]),
            tuple([None if m is None else m[index] for m in self.valid]),
            times,
            self.diffs[index],
        )

    def select(self, positions: Sequence[int]) -> tuple[tuple[np.ndarray, ...], tuple[Mask, ...]]:
        """The columns at ``positions`` with their masks."""
        return tuple(self.columns[p] for p in positions), tuple(self.valid[p] for p in positions)

    def with_times(self, times: np.ndarray) -> Batch:
        return Batch(self.columns, self.valid, times, self.diffs)

    def with_diffs(self, diffs: np.ndarray) -> Batch:
        return Batch(self.columns, self.valid, self.times, diffs)

    def negate(self) -> Batch:
        return Batch(self.columns, self.valid, self.times, -self.diffs)

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """All updates of ``batches`` (same arity and time dimension) in one batch."""
        if len(batches) == 1:
            return batches[0]
        batches = [b for b in batches if b.diffs.shape[0]] or list(batches[:1])
        if len(batches) == 1:
            return batches[0]
        cols = tuple([np.concatenate(c) for c in zip(*[b.columns for b in batches], strict=True)])
        masks: list[Mask] = [None] * len(cols)
        if any(m is not None for b in batches for m in b.valid):
            for i in range(len(cols)):
                if any(b.valid[i] is not None for b in batches):
                    masks[i] = np.concatenate(
                        [np.ones(len(b), dtype=bool) if b.valid[i] is None else b.valid[i] for b in batches]
                    )
        return Batch(
            cols,
            tuple(masks),
            np.concatenate([b.times for b in batches]),
            np.concatenate([b.diffs for b in batches]),
        )

    def to_rows(self) -> list[tuple]:
        """Rows as Python tuples ``(*values, time, diff)`` with ``None`` for NULL; for tests and display."""
        n = len(self)
        cols = [
            [None if (m is not None and not m[i]) else c[i].item() for i in range(n)]
            for c, m in zip(self.columns, self.valid, strict=True)
        ]
        times = [tuple(int(x) for x in t) for t in self.times]
        times = [t[0] if len(t) == 1 else t for t in times]
        return [(*(c[i] for c in cols), times[i], int(self.diffs[i])) for i in range(n)]  # display only


def _bits(col: np.ndarray) -> np.ndarray:
    """Column values as int64 bit patterns that are equal iff the values are equal."""
    if col.dtype.kind == "f":
        c = col.astype(np.float64) + 0.0  # -0.0 -> 0.0
        c = np.where(np.isnan(c), np.nan, c)
        return c.view(np.int64)
    if col.dtype == np.int64:
        return col
    return col.astype(np.int64)


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
LOW_BITS = 24  # of a composite key's hash, from the mix of its columns (the rest: its first column)
_LOW_MASK = np.int64((1 << LOW_BITS) - 1)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on uint64 arrays (a new array; ``x`` is left alone)."""
    x = x ^ (x >> _S30)
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def key_hash(columns: Sequence[np.ndarray], valid: Sequence[Mask], n: int | None = None) -> np.ndarray:
    """An int64 per row summarizing the key columns; equal keys give equal hashes.

    A single integer column is its own hash (order-preserving, and cheap; NULL hashes to ``NULL_HASH``). So is
    a pair of integers, when it fits (``pair_hash``). Other keys are combined column by column (multiply and
    add) and mixed with the splitmix64 finalizer; when the first column is an integer, it keeps the high bits
    (the mix of the whole key fills the low ``LOW_BITS``), so hashes follow the first column as keys arriving
    in its order (new orders' line items) lie past every older batch, which readers then skip without a
    search. An empty key hashes every row to 0. The hash of a key never depends on the other rows of its
    batch. Hashes are not spread evenly: a table addressed by them takes the top bits of their product with
    the golden ratio (``ivm.engine.operators.running``).
    """
    if not columns:
        return np.zeros(n or 0, dtype=np.int64)
    if len(columns) == 1 and columns[0].dtype.kind in "iub":
        c = columns[0]
        h = c if c.dtype == np.int64 else c.astype(np.int64)
        if valid[0] is not None:
            h = np.where(valid[0], h, NULL_HASH)
        return h
    if len(columns) == 2 and columns[0].dtype.kind in "iub" and columns[1].dtype.kind in "iub":
        return pair_hash(columns, valid)
    return _mixed_hash(columns, valid)


PAIR_LOW = 32  # bits of a pair's hash holding its second integer


def pair_hash(columns: Sequence[np.ndarray], valid: Sequence[Mask]) -> np.ndarray:
    """The hash of a key of two integer columns: the pair itself, ``first << PAIR_LOW | second``, when the
    first lies in ``[0, 2**31)`` and the second in ``[0, 2**32)`` (a non-negative hash, which only that pair
    has, so that equal hashes need no comparison of the columns: see ``identity_hash``); for any other pair,
    NULLs among them, the mixed hash of ``_mixed_hash`` with the sign bit set (negative, so it meets no
    pair held exactly). Hashes still follow the first column."""
    a, b = columns
    a = a if a.dtype == np.int64 else a.astype(np.int64)
    b = b if b.dtype == np.int64 else b.astype(np.int64)
    h = a << PAIR_LOW
    h |= b
    apart = (a >> 31) | (b >> PAIR_LOW)  # nonzero where a pair does not fit
    for m in valid:
        if m is not None:
            apart[~m] = 1
    rows = apart.nonzero()[0]
    if len(rows):
        cols = (a[rows], b[rows])
        h[rows] = _mixed_hash(cols, tuple(None if m is None else m[rows] for m in valid)) | NULL_HASH
    return h


def _mixed_hash(columns: Sequence[np.ndarray], valid: Sequence[Mask]) -> np.ndarray:
    # a multiply-and-add chain over the columns, then one finalizer: few array operations, as small
    # transactions hash a few rows at a time
    h = None
    for col, mask in zip(columns, valid, strict=True):
        v = _bits(col).view(np.uint64)
        if mask is not None:
            v = v ^ (~mask).astype(np.uint64) * _M2
        if h is None:
            h = v + _GOLD  # a new array: the column is left alone
        else:
            h *= _M1  # array arithmetic wraps around silently
            h += v
    h = _mix(h)
    h = h.view(np.int64)
    first = columns[0]
    if first.dtype.kind in "iub":
        high = first.astype(np.int64)  # a copy, shifted in place below
        if valid[0] is not None:
            high[~valid[0]] = 0
        high <<= LOW_BITS  # wraps for values beyond 2**(63 - LOW_BITS): still a function of the key
        h &= _LOW_MASK
        h |= high
    return h


def rows_equal(
    a_cols: Sequence[np.ndarray],
    a_valid: Sequence[Mask],
    b_cols: Sequence[np.ndarray],
    b_valid: Sequence[Mask],
    n: int | None = None,
) -> np.ndarray:
    """Element-wise exact equality of two row sets of ``n`` rows each; NULL equals NULL here. Rows without
    columns (``n`` must then be given) are all equal."""
    if n is None:
        n = len(a_cols[0])
    eq = None
    for ca, ma, cb, mb in zip(a_cols, a_valid, b_cols, b_valid, strict=True):
        if ca.dtype.kind == "f" or cb.dtype.kind == "f":
            e = (ca == cb) | (np.isnan(ca) & np.isnan(cb))
        else:
            e = ca == cb
        if ma is not None or mb is not None:
            va = np.ones(n, dtype=bool) if ma is None else ma
            vb = np.ones(n, dtype=bool) if mb is None else mb
            e = (e & va & vb) | (~va & ~vb)
        if eq is None:
            eq = e
        else:
            eq &= e
    return np.ones(n, dtype=bool) if eq is None else eq


def pack_keys(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """One int64 per row ordering rows like ``keys`` lexicographically, when the keys' value ranges allow
    (mixed radix over each key's ``[min, max]``); ``None`` when they do not fit in 63 bits."""
    spans = []
    total = 1
    for k in keys:
        if k.dtype.kind == "b":
            lo, span = 0, 2
        elif k.dtype.kind in "iu":
            lo = int(k.min())
            span = int(k.max()) - lo + 1
        else:
            return None
        total *= span
        if total >= 1 << 63:
            return None
        spans.append((lo, span))
    packed = np.zeros(len(keys[0]), dtype=np.int64)
    mult = 1
    for k, (lo, span) in zip(reversed(keys), reversed(spans), strict=True):
        part = k.astype(np.int64) - np.int64(lo) if lo else k.astype(np.int64, copy=False)
        packed += part * np.int64(mult) if mult != 1 else part
        mult *= span
    return packed


def _fits(keys: Sequence[np.ndarray], total: int = 1) -> bool:
    """Whether the keys' value ranges, times ``total``, fit in 63 bits (``pack_keys`` would succeed)."""
    for k in keys:
        if k.dtype.kind == "b":
            total *= 2
        elif k.dtype.kind in "iu" and len(k):
            total *= int(k.max()) - int(k.min()) + 1
        else:
            return False
        if total >= 1 << 63:
            return False
    return True


def merge_order(values: np.ndarray, split: int) -> np.ndarray:
    """Permutation sorting ``values`` whose parts ``[:split]`` and ``[split:]`` are each sorted already.

    numpy's stable sort is a run-detecting merge sort for these, so this is a linear merge of the two runs.
    """
    return values.argsort(kind="stable")


def sorted_runs(values: np.ndarray, split: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The permutation sorting ``values`` (merging ``[:split]`` and ``[split:]``, each sorted, with ``split``)
    and a boolean per sorted row: True where it differs from its predecessor."""
    order = merge_order(values, split) if split is not None else argsort(values)
    ordered = values[order]
    starts = np.empty(len(values), dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return order, starts


RUNS_FOR_MERGING = 16
SMALL_SORT = 256  # below this many rows one multi-key sort beats packing the keys first


def argsort(values: np.ndarray) -> np.ndarray:
    """Sorting permutation that takes advantage of input made of a few sorted runs (as concatenated sorted
    batches are): those are merged by the run-detecting stable sort; anything else gets a quicksort."""
    if len(values) > 64:
        descents = np.count_nonzero(values[1:] < values[:-1])
        if descents == 0:
            return np.arange(len(values))
        if descents < RUNS_FOR_MERGING:
            return values.argsort(kind="stable")
    return values.argsort()


def lexsort(keys: Sequence[np.ndarray], split: int | None = None) -> np.ndarray:
    """Permutation sorting by ``keys[0]``, then ``keys[1]``, ... (most significant first).

    Keys whose value ranges fit together in 63 bits are packed into one integer and sorted once. Otherwise the
    rows are sorted by the first key alone and only the runs that tie on it are ordered by the remaining keys,
    which is cheap when the first key is nearly unique (as key hashes are). With ``split``, rows ``[:split]``
    and ``[split:]`` are each sorted already and are merged rather than sorted. Rows equal on every key come
    out in an unspecified order.
    """
    return sort_groups(keys, split)[0]


def sort_groups(keys: Sequence[np.ndarray], split: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``lexsort``'s permutation, and a boolean per sorted row: True where it differs from its predecessor
    on some key (found while sorting, without gathering every key in sorted order again)."""
    keys = [k for k in keys if k is not None]
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    n = len(keys[0])
    if n < 2:
        return np.arange(n, dtype=np.int64), np.ones(n, dtype=bool)
    if n < SMALL_SORT:
        if len(keys) == 1:
            k = keys[0]
            order = k.argsort(kind="stable")
            ordered = k[order]
            starts = np.empty(n, dtype=bool)
            starts[0] = True
            np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
            return order, starts
        # one array of all keys (booleans and integers share int64 exactly), sorted and compared at once
        # (``np.array`` of equal-length arrays is the cheapest way to stack a few small ones)
        table = np.array(keys)
        if table.dtype.kind not in "biu":
            order = np.lexsort(tuple(reversed(keys)))
            return order, group_starts([k[order] for k in keys], n)
        order = np.lexsort(table[::-1])
        ordered = table.take(order, axis=1)
        starts = np.empty(n, dtype=bool)
        starts[0] = True
        np.logical_or.reduce(ordered[:, 1:] != ordered[:, :-1], axis=0, out=starts[1:])
        return order, starts
    if len(keys) > 1:
        packed = pack_keys(keys)
        if packed is not None:
            return sorted_runs(packed, split)
    first = keys[0]
    order = merge_order(first, split) if split is not None else argsort(first)
    fs = first[order]
    return refine_ties(order, fs[1:] == fs[:-1], keys[1:])


def refine_ties(order: np.ndarray, eq: np.ndarray, keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``sort_groups`` from rows already ordered by a first key (``order``; ``eq[i]``: sorted rows ``i`` and
    ``i + 1`` tie on it): the runs that tie are ordered by ``keys``. Returns the order (``order`` itself,
    rearranged in place) and the group starts."""
    n = len(order)
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.logical_not(eq, out=starts[1:])
    if not keys or not eq.any():
        return order, starts
    # order the runs that tie on the first key by the others: all at once when they pack into one integer,
    # else one key at a time, each pass sorting only the rows still tied (few after a discriminating key)
    tie = np.zeros(n, dtype=bool)
    tie[1:] |= eq
    tie[:-1] |= eq
    idx = np.flatnonzero(tie)
    sub = order[idx]
    run = np.cumsum(np.concatenate(([True], ~eq))[idx])  # dense run ids, ordered like the first key
    if len(idx) < SMALL_SORT:
        # few tied rows (equal rows cancelling in a small merge): one sort of all their keys at once
        cols = [run] + [k[sub] for k in keys]
        if all(c.dtype.kind in "bi" for c in cols):
            table = np.stack(cols)
            so = np.lexsort(table[::-1])
            order[idx] = sub[so]
            ordered = table[:, so]
            starts[idx[1:]] |= np.logical_or.reduce(ordered[:, 1:] != ordered[:, :-1], axis=0)
            return order, starts
    # whole columns' ranges bound the tied rows' ones: gather every key only when they surely pack
    packed = pack_keys([run] + [k[sub] for k in keys]) if _fits(keys, int(run[-1]) + 1) else None
    if packed is not None:
        so = np.argsort(packed)
        order[idx] = sub[so]
        ps = packed[so]
        starts[idx[1:]] |= ps[1:] != ps[:-1]
        return order, starts
    for k in keys:
        kv = k[sub]
        pair = pack_keys([run, kv])
        sub = sub[np.argsort(pair, kind="stable") if pair is not None else np.lexsort((kv, run))]
        order[idx] = sub
        kv = k[sub]
        same = (run[1:] == run[:-1]) & (kv[1:] == kv[:-1])
        starts[idx[1:]] |= ~same
        if not same.any():
            break
        # keep the rows still tied, with new dense run ids
        tie = np.zeros(len(sub), dtype=bool)
        tie[1:] |= same
        tie[:-1] |= same
        keep = np.flatnonzero(tie)
        run = np.cumsum(np.concatenate(([True], ~same))[keep])
        idx, sub = idx[keep], sub[keep]
    return order, starts


def sort_keys(
    columns: Sequence[np.ndarray], valid: Sequence[Mask], times: np.ndarray | None, signed_zeros: bool = True
) -> list[np.ndarray]:
    """Sort keys that group exactly equal rows (and then times) together.

    -0.0 and 0.0 are equal values (as in SQL), but not the same value: PostgreSQL keeps and shows each (SUM
    of -0.0 values is -0.0), so a row holding one is not a row holding the other and updates of the two never
    cancel. With ``signed_zeros`` they are told apart, after all the columns (rows whose values are equal stay
    together, and so do those of a key made of leading columns); without, they are one (which rows share a
    key, as ``key_hash`` and ``rows_equal`` see keys)."""
    keys: list[np.ndarray] = []
    signs: list[np.ndarray] = []
    for col, mask in zip(columns, valid, strict=True):
        if mask is not None:
            keys.append(mask)
        if col.dtype.kind != "f":
            keys.append(col)
            continue
        keys.append(_bits(col))
        if signed_zeros:
            negative = (col == 0) & np.signbit(col)
            if mask is not None:
                negative &= mask
            if negative.any():  # else all False: it would order nothing
                signs.append(negative)
    keys += signs
    if times is not None and times.shape[0] and np.count_nonzero(times != times[0]):
        keys.extend(times[:, i] for i in range(times.shape[1]))
    return keys


def concat_masks(masks: Sequence[Mask], lengths: Sequence[int]) -> Mask:
    """The validity of columns laid end to end (``lengths`` rows each): None when none has a NULL."""
    if all(m is None for m in masks):
        return None
    return np.concatenate(
        [np.ones(n, dtype=bool) if m is None else m for m, n in zip(masks, lengths, strict=True)]
    )


def group_starts(keys: Sequence[np.ndarray], n: int) -> np.ndarray:
    """Boolean array: True where a row of sorted ``keys`` differs from its predecessor (True at 0)."""
    starts = np.zeros(n, dtype=bool)
    if n:
        starts[0] = True
        for k in keys:
            if k.ndim == 2:
                starts[1:] |= np.logical_or.reduce(k[1:] != k[:-1], axis=1)
            else:
                starts[1:] |= k[1:] != k[:-1]
    return starts


def consolidate(
    batch: Batch, lead: Sequence[np.ndarray] = (), split: int | None = None
) -> tuple[Batch, np.ndarray]:
    """Sort by (``lead`` arrays, row, time), sum diffs of equal (row, time) runs and drop zero sums.

    Returns the consolidated batch and, for each surviving run, the index in the input of one of its updates, so
    callers can carry per-row data such as key hashes. With ``split``, the updates ``[:split]`` and ``[split:]``
    are each sorted in that order already (as the two inputs of a merge are) and are merged, not sorted.
    """
    n = len(batch)
    stats.rows_sorted += n
    if n == 0:
        return batch, np.zeros(0, dtype=np.int64)
    keys = list(lead) + sort_keys(batch.columns, batch.valid, batch.times)
    packed = pack_keys(keys) if len(keys) > 1 and n >= SMALL_SORT else None
    if packed is not None:
        order, starts = sorted_runs(packed, split)
    else:
        order, starts = sort_groups(keys, split)
    idx = np.flatnonzero(starts)
    sums = np.add.reduceat(batch.diffs[order], idx)
    keep = sums != 0
    first = order[idx[keep]]
    out = batch.take(first).with_diffs(sums[keep])
    return out, first
