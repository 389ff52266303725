"""Reducers: vectorized functions from the accumulated groups of a reduce to its output rows.

A reducer receives ``Groups``: rows sorted by group, each with its accumulated (nonzero) multiplicity, and
returns output rows tagged with their group and a multiplicity. Groups are processed all at once with numpy
segment operations; a reducer never loops over groups in Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.engine.batch import Mask, lexsort, sort_keys
from ivm.engine.operators import exact
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.strings import POOL
from ivm.engine.trace.batch import expand_ranges

__all__ = ["Groups", "Shared", "Reducer", "Aggregate", "Threshold", "TopK", "distinct"]


@dataclass(frozen=True, eq=False)
class Groups:
    """Rows of many groups: ``group`` (ascending), value columns, validity and nonzero ``weights``."""

    group: np.ndarray
    columns: tuple[np.ndarray, ...]
    valid: tuple[Mask, ...]
    weights: np.ndarray
    starts: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        g = self.group
        n = len(g)
        if n:
            first = np.empty(n, dtype=bool)
            first[0] = True
            np.not_equal(g[1:], g[:-1], out=first[1:])
            s = first.nonzero()[0]
        else:
            s = g[:0]
        object.__setattr__(self, "starts", s)

    @property
    def ids(self) -> np.ndarray:
        """The group id of each segment."""
        return self.group[self.starts]

    def segment_sum(self, x: np.ndarray) -> np.ndarray:
        return np.add.reduceat(x, self.starts) if len(self.starts) else x[:0]


@dataclass(frozen=True, eq=False)
class Shared:
    """Rows that belong to every group of a key: many groups (a key's interesting times) hold the same rows
    but for a few, and an aggregate that can be computed from two parts of a group reads the common part once
    (``Aggregate.shares``). ``rows`` are grouped by key; group ``c`` is of key ``key[c]``, and key ``k``'s
    groups are ``start[k] .. end[k] - 1``."""

    rows: Groups
    key: np.ndarray
    start: np.ndarray
    end: np.ndarray


Output = tuple[np.ndarray, tuple[np.ndarray, ...], tuple[Mask, ...], np.ndarray]


class Reducer(Protocol):
    """Maps groups to output rows ``(group ids, columns, validity, multiplicities)``."""

    def out_dtypes(self, in_dtypes: Sequence[np.dtype]) -> tuple[np.dtype, ...]: ...

    def __call__(self, groups: Groups) -> Output: ...


_LOW = np.int64(0xFFFFFFFF)
_HALF = np.int64(1 << 31)


def _exact_sum(high: np.ndarray, low: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The sums whose upper and lower 32-bit halves were summed apart (each half's sum is exact in 64 bits
    below 2**31 rows): their 64-bit values, and where a sum does not fit in 64 bits (None when all do). The sum
    is ``(high + carry) * 2**32 + rest`` with ``rest`` the lower 32 bits of ``low``: it fits when
    ``high + carry`` fits in 32 bits, which is checked so that a sum beyond BIGINT (or a DECIMAL's 18 digits)
    is an error rather than a value wrapped around."""
    total = (high << np.int64(32)) + low  # modular: right whenever the true sum fits
    if _small(high, low):
        return total, None
    upper = high + (low >> np.int64(32))
    return total, (upper < -_HALF) | (upper >= _HALF)


def _average_sum(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The sums of halves for an average: exact integers when they fit, else doubles."""
    return (high << np.int64(32)) + low if _small(high, low) else _approximate(high, low)


def _small(high: np.ndarray, low: np.ndarray) -> bool:
    """Whether every sum is below 2**62 in magnitude (|high| < 2**30 and |low| < 2**62), so it fits."""
    return not len(high) or (np.abs(high).max() < 2**30 and np.abs(low).max() < 2**62)


def _approximate(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    return high.astype(np.float64) * 2.0**32 + low.astype(np.float64)


class Threshold:
    """The group's key (no value columns) with multiplicity ``fn(total weight)``; ``distinct`` is one."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        self.fn = fn

    def out_dtypes(self, in_dtypes):
        return ()

    def multiplicities(self, total: np.ndarray) -> np.ndarray:
        """Per group, the multiplicity of its key given its total weight (none without rows)."""
        out = np.zeros(len(total), dtype=np.int64)
        some = total.nonzero()[0]
        if len(some):
            out[some] = np.asarray(self.fn(total[some]), dtype=np.int64)
        return out

    def __call__(self, g: Groups) -> Output:
        if len(g.group) == 0:
            return g.group, (), (), g.weights
        total = g.segment_sum(g.weights)
        mult = np.asarray(self.fn(total), dtype=np.int64)
        keep = mult != 0
        return g.ids[keep], (), (), mult[keep]


def distinct() -> Aggregate:
    """Multiplicity 1 for every row present with a positive count: an aggregate computing nothing, so that
    outside loops it keeps a running count per row instead of re-reading the row's history."""
    return Aggregate([])


AGGREGATES = (
    "count",
    "count_col",
    "sum",
    "avg",
    "min",
    "max",
    "min_text",
    "max_text",
    "count_distinct",
    "string_agg",
    "var_samp",
    "var_pop",
    "stddev_samp",
    "stddev_pop",
)
VARIANCES = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")


INTEGER_OVERFLOW = "bigint out of range"  # a sum of integers beyond 64 bits, as PostgreSQL says of BIGINT


class Aggregate:
    """SQL aggregates over value columns; one output row per group with a positive row count.

    ``specs`` are ``(kind, column position)`` with kind in ``count`` (rows; position ignored), ``count_col``
    (non-NULL values), ``sum``, ``avg``, ``min``, ``max``, ``min_text`` and ``max_text`` (string-pool codes
    compared as strings), ``count_distinct``, ``string_agg`` (string-pool codes joined, given as ``(kind,
    position, (separator, order))`` with ``order`` as ``TopK``'s entries, ties and all without keys by string,
    each value as many times as its multiplicity), ``var_samp``, ``var_pop``, ``stddev_samp`` and ``stddev_pop``
    (float64, NULL over fewer than two values, or none for the population's; see ``_spread``). Sums of
    integers are exact int64; a group whose sum does not
    fit is in error, under ``overflow[j]`` for spec ``j`` (``bigint out of range`` unless given). Sums of
    doubles are the exact sums of the values present, rounded once (see ``exact``), -0.0 where every value is
    -0.0; one beyond the largest double is an error, as in PostgreSQL. ``avg`` is float64, divided further by
    ``divisors[j]`` when given for spec ``j`` (the mean of decimals held as scaled integers, in units; a
    variance's and a standard deviation's too); an aggregate over no non-NULL value
    is NULL (``count`` variants are 0).
    """

    def __init__(
        self,
        specs: Sequence[tuple],
        divisors: dict[int, float] | None = None,
        overflow: dict[int, str] | None = None,
    ) -> None:
        for kind, *_ in specs:
            if kind not in AGGREGATES:
                raise ValueError(f"unknown aggregate {kind!r}")
        self.specs = tuple((s[0], s[1]) for s in specs)
        self.params = {j: s[2] for j, s in enumerate(specs) if len(s) > 2}
        self.divisors = dict(divisors or {})
        self.overflow = dict(overflow or {})
        if any(self.specs[j][0] not in ("avg", *VARIANCES) for j in self.divisors):
            raise ValueError("only averages, variances and standard deviations take a divisor")
        if any(self.specs[j][0] != "sum" for j in self.overflow):
            raise ValueError("only sums take an overflow message")

    @property
    def linear(self) -> bool:
        """Whether every aggregate is a sum of per-row contributions (count, count_col, sum, avg), so that a
        group's result follows from a running state without re-reading the group."""
        return all(kind in ("count", "count_col", "sum", "avg") for kind, _ in self.specs)

    def shares(self, in_dtypes) -> bool:
        """Whether every aggregate of a group follows from those of two parts of it (row counts, counts, sums
        and averages of integers, MIN and MAX of numbers), so that ``evaluate`` can take rows shared by many
        groups apart (``Shared``)."""
        for kind, pos in self.specs:
            if kind in ("sum", "avg") and np.dtype(in_dtypes[pos]).kind == "f":
                return False
            if kind not in ("count", "count_col", "sum", "avg", "min", "max"):
                return False
        return True

    def failures(self, in_dtypes) -> dict[int, str]:
        """The aggregates that may fail to compute a group, by position in ``specs``, with their error: sums of
        integers beyond 64 bits, sums and averages of doubles beyond the largest double. A group in error is
        under the message of the first that fails, which depends on no value, so that the rows putting the
        group in error and those taking it out name the same error."""
        out = {}
        for j, (kind, pos) in enumerate(self.specs):
            if kind in ("sum", "avg", *VARIANCES) and np.dtype(in_dtypes[pos]).kind == "f":
                out[j] = exact.OVERFLOW
            elif kind == "sum":
                out[j] = self.overflow.get(j, INTEGER_OVERFLOW)
        return out

    def state_columns(self, in_dtypes) -> list[tuple[str, int | None, np.dtype]]:
        """The running state of a linear aggregate: the row count, then per value column used its non-NULL count
        and, for sums and averages of integers, its sum in two halves (see ``_exact_sum``). Sums of doubles
        are kept apart, as ``wide_columns`` says."""
        i64 = np.dtype(np.int64)
        cols: list[tuple[str, int | None, np.dtype]] = [("rows", None, i64)]
        for kind, pos in self.specs:
            if kind == "count":
                continue
            wanted = [("nvalid", pos, i64)]
            if kind in ("sum", "avg") and np.dtype(in_dtypes[pos]).kind != "f":
                wanted += [("sum", pos, i64), ("sum_hi", pos, i64)]
            cols += [c for c in wanted if c not in cols]
        return cols

    def wide_columns(self, in_dtypes) -> list[int]:
        """The value columns of doubles whose exact sums a running state keeps (see ``exact``): each in two
        wide states, the limbs of its finite values and its counts of NaN, +inf, -inf and -0.0, both changed
        only by the rows that move them."""
        summed = [pos for kind, pos in self.specs if kind in ("sum", "avg")]
        return list(dict.fromkeys(pos for pos in summed if np.dtype(in_dtypes[pos]).kind == "f"))

    @staticmethod
    def contributions(state, columns, valid, diffs) -> list[np.ndarray]:
        """Each row's contribution (times its diff) to every state column."""
        out = []
        for what, pos, dtype in state:
            if what == "rows":
                out.append(diffs.astype(np.int64))
                continue
            m = valid[pos]
            if what == "nvalid":
                out.append(diffs if m is None else diffs * m)
            else:
                x = columns[pos].astype(dtype)
                x = (x >> 32) if what == "sum_hi" else (x & _LOW)
                x = x * diffs.astype(dtype)
                out.append(x if m is None else np.where(m, x, 0).astype(dtype))
        return out

    def finish(
        self, state, values: list[np.ndarray], wide: dict[int, tuple[np.ndarray, int, np.ndarray]] | None = None
    ) -> tuple[list[np.ndarray], list, np.ndarray | None]:
        """The output columns (and validity) of groups in the given states, and the groups in error: per
        group, the position in ``specs`` of the first aggregate failing (-1 for none), or None if none fails.
        ``wide`` holds, per column of ``wide_columns``, its limbs (shape ``(width, groups)``), the number of
        the first, and its counts of NaN, +inf and -inf (shape ``(3, groups)``)."""
        index = {(what, pos): i for i, (what, pos, _) in enumerate(state)}
        cols, masks = [], []
        failed = None
        rounded: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # a column's sum, for its SUM and its AVG
        for j, (kind, pos) in enumerate(self.specs):
            if kind == "count":
                cols.append(values[0])
                masks.append(None)
                continue
            nvalid = values[index[("nvalid", pos)]]
            if kind == "count_col":
                cols.append(nvalid)
                masks.append(None)
                continue
            bad = None
            if ("sum_hi", pos) in index:
                high, low = values[index[("sum_hi", pos)]], values[index[("sum", pos)]]
                if kind == "avg":
                    total = _average_sum(high, low)
                else:
                    total, bad = _exact_sum(high, low)
            else:
                if pos not in rounded:
                    rounded[pos] = exact.sums(*wide[pos])
                total, bad = rounded[pos]
                counts = wide[pos][2]
                if kind == "sum" and len(counts) > 3:
                    total = exact.signed(total, counts[3], nvalid)
            if kind == "avg":
                total = self._mean(j, total, nvalid)
            failed = _failing(failed, bad, j)
            cols.append(total)
            masks.append(nvalid > 0)
        return cols, masks, failed

    def _mean(self, j: int, total: np.ndarray, nvalid: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / np.where(nvalid == 0, 1, nvalid)
        return mean / self.divisors[j] if j in self.divisors else mean

    def out_dtypes(self, in_dtypes):
        out = []
        for kind, pos in self.specs:
            if kind in ("count", "count_col", "count_distinct", "min_text", "max_text", "string_agg"):
                out.append(np.dtype(np.int64))
            elif kind in ("avg", *VARIANCES):
                out.append(np.dtype(np.float64))
            elif kind == "sum":
                t = np.dtype(in_dtypes[pos])
                out.append(np.dtype(np.float64) if t.kind == "f" else np.dtype(np.int64))
            else:
                out.append(np.dtype(in_dtypes[pos]))
        return tuple(out)

    def multiplicities(self, total: np.ndarray) -> np.ndarray | None:
        """Per group, the multiplicity of its key given its total weight, when that is all the aggregate needs
        (no aggregates: one row per group with rows, as distinct wants); else None."""
        return None if self.specs else (total > 0).astype(np.int64)

    def __call__(self, g: Groups, shared: Shared | None = None) -> Output:
        """The groups' output rows; ``EvaluationError`` if a group cannot be computed (``evaluate`` keeps the
        groups in error apart instead)."""
        out, (_, codes) = self.evaluate(g, shared)
        if len(codes):
            raise EvaluationError(self.failures([c.dtype for c in g.columns])[int(codes[0])])
        return out

    def evaluate(self, g: Groups, shared: Shared | None = None) -> tuple[Output, tuple[np.ndarray, np.ndarray]]:
        """The output rows of the groups that can be computed, and the groups in error: their ids and the
        position in ``specs`` of the first aggregate failing for each (see ``failures``). With ``shared``, a
        group also holds the shared rows of its key (only where ``shares``)."""
        if shared is not None:
            return self._evaluate_shared(g, shared)
        w = g.weights
        count = g.segment_sum(w)
        if not self.specs:  # the groups present, as distinct wants
            ids = g.ids
            present = (count > 0).nonzero()[0]
            return (ids[present], (), (), np.ones(len(present), dtype=np.int64)), (
                ids[:0],
                ids[:0].astype(np.int64),
            )
        keep = count > 0
        cols: list[np.ndarray] = []
        masks: list[Mask] = []
        failed = None
        exact_sums: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # a column's sum, for its SUM and its AVG
        for j, (kind, pos) in enumerate(self.specs):
            if kind == "count":
                cols.append(count)
                masks.append(None)
                continue
            x, m = g.columns[pos], g.valid[pos]
            present = w if m is None else w * m
            nvalid = g.segment_sum(present)
            if kind == "count_col":
                cols.append(nvalid)
                masks.append(None)
            elif kind in ("sum", "avg"):
                bad = None
                if x.dtype.kind == "f":
                    if pos not in exact_sums:
                        exact_sums[pos] = exact.segment_sums(x, m, w, g.starts)
                    s, bad = exact_sums[pos]
                    if kind == "sum":
                        s = exact.signed(s, g.segment_sum(present * exact.negative_zeros(x)), nvalid)
                else:
                    xs = x.astype(np.int64)
                    high, low = g.segment_sum((xs >> 32) * present), g.segment_sum((xs & _LOW) * present)
                    if kind == "avg":
                        s = _average_sum(high, low)
                    else:
                        s, bad = _exact_sum(high, low)
                if kind == "avg":
                    s = self._mean(j, s, nvalid)
                failed = _failing(failed, bad, j)
                cols.append(s)
                masks.append(nvalid > 0)
            elif kind in ("min", "max"):
                use = (w > 0) if m is None else (w > 0) & m
                found = g.segment_sum(use.astype(np.int64)) > 0
                # a group without values holds 0, not the fill, which a date could not even be read as
                cols.append(np.where(found, _extreme(x, use, g.starts, kind), np.zeros(1, dtype=x.dtype)))
                masks.append(found)
            elif kind in ("min_text", "max_text"):
                # string-pool codes: compare by string, through ranks among the codes present
                use = (w > 0) if m is None else (w > 0) & m
                rank, code_of = POOL.ranks(x)
                best = _extreme(rank, use, g.starts, kind[:3])
                found = g.segment_sum(use.astype(np.int64)) > 0
                cols.append(np.where(found, code_of[np.where(found, best, 0)] if len(code_of) else 0, 0))
                masks.append(found)
            elif kind == "string_agg":
                use = (w > 0) if m is None else (w > 0) & m
                codes, found = _string_agg(g, pos, use, *self.params[j])
                cols.append(codes)
                masks.append(found)
            elif kind in VARIANCES:
                s, found, bad = _spread(kind, x, present, nvalid, g, self.divisors.get(j))
                failed = _failing(failed, bad, j)
                cols.append(s)
                masks.append(found)
            else:  # count_distinct
                use = (w > 0) if m is None else (w > 0) & m
                cols.append(_count_distinct(g.group, x, use, g.starts))
                masks.append(None)
        errors = (g.ids[:0], g.ids[:0].astype(np.int64))
        if failed is not None:
            wrong = keep & (failed >= 0)
            errors = (g.ids[wrong], failed[wrong])
            keep &= ~wrong
        out = (
            g.ids[keep],
            tuple(c[keep] for c in cols),
            tuple(None if m is None else m[keep] for m in masks),
            np.ones(int(keep.sum()), dtype=np.int64),
        )
        return out, errors

    def _evaluate_shared(self, g: Groups, shared: Shared) -> tuple[Output, tuple[np.ndarray, np.ndarray]]:
        """``evaluate`` of groups made of their own rows ``g`` and their key's rows in ``shared``: each
        aggregate of each part, then the two combined."""
        sg = shared.rows
        keys = sg.ids
        seg_of_key = np.full(len(shared.start), -1, dtype=np.int64)
        seg_of_key[keys] = np.arange(len(keys))
        _, with_shared = expand_ranges(shared.start[keys], shared.end[keys])
        ids = np.union1d(g.ids, with_shared)
        own = np.searchsorted(ids, g.ids)  # the output group of each segment of g
        common = seg_of_key[shared.key[ids]]  # the shared segment of each output group, -1 for none
        has = common >= 0
        at = common[has]
        n = len(ids)

        def added(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
            out = np.zeros(n, dtype=np.result_type(mine, theirs))
            out[own] = mine
            out[has] += theirs[at]
            return out

        count = added(g.segment_sum(g.weights), sg.segment_sum(sg.weights))
        keep = count > 0
        cols: list[np.ndarray] = []
        masks: list[Mask] = []
        failed = None
        for j, (kind, pos) in enumerate(self.specs):
            if kind == "count":
                cols.append(count)
                masks.append(None)
                continue
            parts = []
            for part in (g, sg):
                x, m, w = part.columns[pos], part.valid[pos], part.weights
                parts.append((x, m, w if m is None else w * m))
            nvalid = added(*(part.segment_sum(p) for part, (_, _, p) in zip((g, sg), parts, strict=True)))
            if kind == "count_col":
                cols.append(nvalid)
                masks.append(None)
            elif kind in ("sum", "avg"):
                halves = []
                for part, (x, _, present) in zip((g, sg), parts, strict=True):
                    xs = x.astype(np.int64)
                    high, low = (xs >> 32) * present, (xs & _LOW) * present
                    halves.append((part.segment_sum(high), part.segment_sum(low)))
                high, low = added(halves[0][0], halves[1][0]), added(halves[0][1], halves[1][1])
                bad = None
                if kind == "avg":
                    s = self._mean(j, _average_sum(high, low), nvalid)
                else:
                    s, bad = _exact_sum(high, low)
                failed = _failing(failed, bad, j)
                cols.append(s)
                masks.append(nvalid > 0)
            else:  # min, max
                best, found = None, np.zeros(n, dtype=bool)
                for part, (x, m, _), mine in ((g, parts[0], True), (sg, parts[1], False)):
                    use = (part.weights > 0) if m is None else (part.weights > 0) & m
                    seg_found = part.segment_sum(use.astype(np.int64)) > 0
                    seg_best = _extreme(x, use, part.starts, kind)
                    here, value = np.zeros(n, dtype=bool), np.zeros(n, dtype=x.dtype)
                    if mine:
                        here[own], value[own] = seg_found, seg_best
                    else:
                        here[has], value[has] = seg_found[at], seg_best[at]
                    if best is None:
                        best = value
                    else:
                        pick = np.fmin if kind == "min" and x.dtype.kind == "f" else _PICK[kind]
                        best = np.where(found & here, pick(best, value), np.where(here, value, best))
                    found |= here
                cols.append(np.where(found, best, np.zeros(1, dtype=best.dtype)))
                masks.append(found)
        errors = (ids[:0], ids[:0].astype(np.int64))
        if failed is not None:
            wrong = keep & (failed >= 0)
            errors = (ids[wrong], failed[wrong])
            keep &= ~wrong
        out = (
            ids[keep],
            tuple(c[keep] for c in cols),
            tuple(None if m is None else m[keep] for m in masks),
            np.ones(int(keep.sum()), dtype=np.int64),
        )
        return out, errors


def _spread(
    kind: str, x: np.ndarray, present: np.ndarray, n: np.ndarray, g: Groups, divisor: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per group, the variance or standard deviation (``kind``) of the values ``x`` taken ``present`` times
    each (0 for NULL), ``n`` of them; whether it is not NULL; and where it is in error (None for nowhere).
    Decimals come as scaled integers, ``divisor`` their unit.

    Computed from the group's values in two passes (the mean, then the squared deviations from it, corrected
    by the deviations' own sum for the mean's rounding), as accurate as PostgreSQL's running sums and
    independent of the order rows came in. Integers are first taken from one value of their group, exactly
    (as PostgreSQL sums them in NUMERIC), so that values beyond 2**53 that differ by little keep their spread.
    A NaN or infinity among the values gives NaN, as PostgreSQL's; a result past the largest double from
    finite values is an error, as PostgreSQL's overflow is."""
    starts = g.starts
    found = n > 1 if kind.endswith("samp") else n > 0
    if not len(starts):
        z = np.zeros(0, dtype=np.float64)
        return z, found, None
    used = present != 0
    seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(x))))
    if x.dtype.kind == "f":
        xf = np.where(used, x, 0.0)
    else:  # deviations from the group's first value, exact in 64 bits unless they pass it
        first = np.maximum.accumulate(np.where(used, np.arange(len(x)), -1))  # the last used row so far
        ref = x[np.maximum(first[np.append(starts[1:], len(x)) - 1], 0)][seg]  # one used value per group
        xi = x.astype(np.int64)
        ri = ref.astype(np.int64)
        with np.errstate(over="ignore"):
            wide = np.abs(xi.astype(np.float64) - ri.astype(np.float64)) >= 2.0**62
            xf = np.where(wide, xi.astype(np.float64) - ri.astype(np.float64), (xi - ri).astype(np.float64))
        xf = np.where(used, xf, 0.0)
    weight = present.astype(np.float64)
    count = np.where(n > 0, n, 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean = np.add.reduceat(xf * weight, starts) / count
        d = np.where(used, xf - mean[seg], 0.0)
        drift = np.add.reduceat(d * weight, starts)
        squares = np.add.reduceat(d * d * weight, starts) - drift * drift / count
        squares[squares < 0] = 0.0  # (NaN stays)
        out = squares / np.where(found, n - (1 if kind.endswith("samp") else 0), 1).astype(np.float64)
        if divisor is not None:
            out = out / (divisor * divisor)
        if kind.startswith("stddev"):
            out = np.sqrt(out)
    bad = None
    if x.dtype.kind == "f":
        special = np.add.reduceat((~np.isfinite(xf) & used).astype(np.int64), starts)
        bad = found & (special == 0) & ~np.isfinite(out)
        out[found & (special > 0)] = np.nan
    return np.where(found, out, 0.0), found, bad


_PICK = {"min": np.minimum, "max": np.maximum}  # np.maximum's NaN wins, as in PostgreSQL


def _failing(failed: np.ndarray | None, bad: np.ndarray | None, j: int) -> np.ndarray | None:
    """``failed`` (per group, the first aggregate failing, -1 for none) after aggregate ``j`` failing where
    ``bad``."""
    if bad is None or not bad.any():
        return failed
    if failed is None:
        failed = np.full(len(bad), -1, dtype=np.int64)
    failed[(failed < 0) & bad] = j
    return failed


def _extreme(x: np.ndarray, use: np.ndarray, starts: np.ndarray, kind: str) -> np.ndarray:
    if len(starts) == 0:
        return x[:0]
    if x.dtype.kind == "f":
        fill = np.inf if kind == "min" else -np.inf
    elif x.dtype.kind == "b":
        fill = kind == "min"
    else:
        info = np.iinfo(x.dtype)
        fill = info.max if kind == "min" else info.min
    xv = np.where(use, x, np.array(fill, dtype=x.dtype))
    if x.dtype.kind == "f" and kind == "min":
        # NaN is above every other double (as in PostgreSQL): the least is NaN only where all values are
        nan = np.isnan(xv)
        out = np.fmin.reduceat(xv, starts)
        if nan.any():
            only_nan = np.add.reduceat((use & ~nan).astype(np.int64), starts) == 0
            out[only_nan & (np.add.reduceat(nan.astype(np.int64), starts) > 0)] = np.nan
        return out
    fn = np.minimum if kind == "min" else np.maximum  # np.maximum's NaN wins, as in PostgreSQL
    return fn.reduceat(xv, starts)


def _count_distinct(group: np.ndarray, x: np.ndarray, use: np.ndarray, starts: np.ndarray):
    n_groups = len(starts)
    gi = np.repeat(np.arange(n_groups), np.diff(np.append(starts, len(group))))
    sel = np.flatnonzero(use)
    if len(sel) == 0:
        return np.zeros(n_groups, dtype=np.int64)
    keys = [gi[sel]] + sort_keys((x[sel],), (None,), None, False)  # -0.0 is 0.0: one value
    order = lexsort(keys)
    sk = [k[order] for k in keys]
    new = np.ones(len(sel), dtype=bool)
    new[1:] = (sk[0][1:] != sk[0][:-1]) | (sk[1][1:] != sk[1][:-1])
    return np.bincount(sk[0][new], minlength=n_groups).astype(np.int64)


def _string_agg(g: Groups, pos: int, use: np.ndarray, sep: str, order) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the strings of column ``pos`` at the rows ``use`` selects (each repeated by its multiplicity)
    joined by ``sep`` in ``order`` then by string; and which groups had any. One sort and one Arrow join for
    all groups."""
    n_groups = len(g.starts)
    sel = np.flatnonzero(use)
    if len(sel) == 0:
        return np.zeros(n_groups, dtype=np.int64), np.zeros(n_groups, dtype=bool)
    group_of = np.repeat(np.arange(n_groups), np.diff(np.append(g.starts, len(g.group))))
    gi = group_of[sel]
    columns = tuple(c[sel] for c in g.columns)
    valid = tuple(None if m is None else m[sel] for m in g.valid)
    keys = [gi, *order_keys(columns, valid, order), POOL.ranks(columns[pos])[0]]
    ranked = sel[lexsort(keys)]
    rows = np.repeat(ranked, g.weights[ranked])
    counts = np.bincount(group_of[rows], minlength=n_groups)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), POOL.strings(g.columns[pos][rows]))
    joined = POOL.encode_arrow(pc.binary_join(lists, pa.scalar(sep, pa.large_string())))
    found = counts > 0
    return np.where(found, joined, 0), found


def order_keys(columns: tuple[np.ndarray, ...], valid: tuple[Mask, ...], order) -> list[np.ndarray]:
    """Sort keys (for ``lexsort``, most significant first) of rows ordered by ``order``: entries
    ``(position, descending, *flags)`` as ``TopK`` takes them."""
    keys: list[np.ndarray] = []
    for pos, desc, *flags in order:
        x, m = columns[pos], valid[pos]
        if "text" in flags:
            x = POOL.ranks(x)[0]
        first = "nulls_first" in flags if {"nulls_first", "nulls_last"} & set(flags) else desc
        if m is not None:
            keys.append(m if first else ~m)  # a NULL's False sorts before every value's True
        # descending: negated doubles, complemented integers (~x reverses the order and, unlike -x, does
        # not wrap at the least 64-bit integer)
        if x.dtype.kind == "f":
            nan = np.isnan(x)
            if nan.any():
                keys.append(~nan if desc else nan)  # NaN above every other double, as in PostgreSQL
        xk = (-x.astype(np.float64) if x.dtype.kind == "f" else ~x.astype(np.int64)) if desc else x
        keys.append(xk)
    return keys


class TopK:
    """Per group, the rows ranked ``[offset, offset + limit)`` by ``order``, counting multiplicities. Each
    entry is ``(position, descending, *flags)``: ``"text"`` for string-pool codes ordered as strings,
    ``"nulls_first"`` or ``"nulls_last"``; without either, NULLs sort last ascending and first descending, as
    in PostgreSQL."""

    def __init__(self, order: Sequence[tuple[int, bool]], limit: int | None, offset: int = 0) -> None:
        self.order = tuple(order)
        self.limit = limit
        self.offset = offset

    def out_dtypes(self, in_dtypes):
        return tuple(in_dtypes)

    def __call__(self, g: Groups) -> Output:
        if len(g.group) == 0:
            return g.group, g.columns, g.valid, g.weights
        keys: list[np.ndarray] = [g.group, *order_keys(g.columns, g.valid, self.order)]
        keys += sort_keys(g.columns, g.valid, None)
        order = lexsort(keys)
        group = g.group[order]
        w = np.maximum(g.weights[order], 0)
        cum = np.cumsum(w)
        starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
        base = np.repeat(cum[starts] - w[starts], np.diff(np.append(starts, len(group))))
        hi = cum - base
        lo = hi - w
        top = np.inf if self.limit is None else self.offset + self.limit
        mult = np.clip(np.minimum(hi, top) - np.maximum(lo, self.offset), 0, None).astype(np.int64)
        keep = mult > 0
        sel = order[keep]
        return (
            group[keep],
            tuple(c[sel] for c in g.columns),
            tuple(None if m is None else m[sel] for m in g.valid),
            mult[keep],
        )
