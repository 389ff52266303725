"""PostgreSQL's ``generate_series`` as a FROM item: each input row expanded to one row per value, vectorized
(the counts of all rows at once, then one repeat of the rows and one arithmetic progression over them).

The values are computed as PostgreSQL does, exactly: a NULL argument or a step that moves away from the stop
gives no row, a zero step is an error of the row, and a series whose last value lies near the end of its type
stops there without overflow (the count and the values are formed in unsigned 64-bit arithmetic, which is
exact for every pair of int64 bounds).
"""

from __future__ import annotations

import numpy as np

from ivm.engine.operators.basic import EvaluationError, ExpandFn
from planner.expr import evaluate, fold
from sql.logical import Series

__all__ = ["MAX_ROWS", "series_rows"]

MAX_ROWS = 100_000_000  # values of one row's series, beyond which it is refused rather than held in memory

_U64 = np.uint64


def series_rows(plan: Series) -> ExpandFn:
    """The function expanding a batch of ``plan.input``'s rows to ``plan``'s rows."""
    args = tuple(fold(e) for e in (plan.start, plan.stop, plan.step))
    dtype = plan.columns[len(plan.input.columns)].type.dtype
    ordinality, outer = plan.ordinality, plan.outer

    def expand(cols, valid, n):
        (start, sv), (stop, ev), (step, pv) = (evaluate(e, cols, valid, n) for e in args)
        start, stop, step = (np.asarray(a, dtype=np.int64) for a in (start, stop, step))
        known = np.ones(n, dtype=bool)
        for m in (sv, ev, pv):
            if m is not None:
                known &= m
        if np.count_nonzero(known & (step == 0)):
            raise EvaluationError("step size cannot equal zero")
        counts = _counts(start, stop, step, known)
        if np.count_nonzero(counts > MAX_ROWS):
            most = int(counts.max())
            msg = f"generate_series would give {most:,} rows for one row (at most {MAX_ROWS:,})"
            raise EvaluationError(msg)
        counts = counts.astype(np.int64)
        padded = (counts == 0) if outer else None
        if padded is not None:
            counts[padded] = 1
        rows = np.repeat(np.arange(n, dtype=np.int64), counts)
        first = np.cumsum(counts) - counts  # each row's first output position
        k = np.arange(len(rows), dtype=np.int64) - first[rows]  # the value's number in its row's series, from 0
        values = (start[rows].view(_U64) + k.view(_U64) * step[rows].view(_U64)).view(np.int64)
        out_cols = tuple([c[rows] for c in cols]) + (values.astype(dtype, copy=False),)
        out_valid = tuple([None if m is None else m[rows] for m in valid])
        mask = None if padded is None or not padded.any() else ~padded[rows]
        out_valid += (mask,)
        if ordinality:
            out_cols += (k + 1,)
            out_valid += (mask,)
        if mask is not None:  # a padded row's value slots hold zero, as NULLs do
            out_cols = out_cols[: len(cols)] + tuple(np.where(mask, c, 0) for c in out_cols[len(cols) :])
        return out_cols, out_valid, rows

    return expand


def _counts(start: np.ndarray, stop: np.ndarray, step: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The number of values of each series (uint64): ``(stop - start) // step + 1`` where the step moves
    towards the stop, else 0; differences and step sizes as unsigned numbers, exact at every int64 bound."""
    up = known & (step > 0) & (stop >= start)
    down = known & (step < 0) & (stop <= start)
    span = np.where(up, stop.view(_U64) - start.view(_U64), start.view(_U64) - stop.view(_U64))
    size = np.where(step > 0, step.view(_U64), (~step.view(_U64)) + _U64(1))  # |step|, 2**63 for the least
    size[size == 0] = 1
    counts = span // size + _U64(1)
    counts[~(up | down)] = 0
    return counts
