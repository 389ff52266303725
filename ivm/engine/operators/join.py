"""Join of two arrangements on their keys.

For new batches ``dA`` and ``dB`` of the two inputs at a point, with traces ``A`` and ``B`` that already hold
them, the new output is ``dA x B + A x dB - dA x dB``: every pair of updates is counted exactly once. A pair
``(a, ta, da)``, ``(b, tb, db)`` with equal keys yields ``((key, a, b), join(ta, tb), da * db)``. Matching seeks
the keys of the smaller side in the larger (binary search on key hashes, then an exact key check), so the work
is proportional to the smaller side and the output, never a scan of a large trace.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ivm.engine.batch import Batch, rows_equal
from ivm.engine.lattice import Antichain
from ivm.engine.operators.arrange import lift_times
from ivm.engine.scope import Operator, Point, Scope
from ivm.engine.trace import Spine, TraceBatch
from ivm.engine.trace.batch import expand_ranges, identity_hash

__all__ = ["JoinOp", "join_batches", "join_trace"]


def match_batches(a: TraceBatch, b: TraceBatch, nulls_match: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row index pairs ``(i in a, j in b)`` of updates with exactly equal keys."""
    if len(a) == 0 or len(b) == 0 or not a.may_hold(*b.bounds()):
        z = np.zeros(0, dtype=np.int64)
        return z, z
    if len(a) <= len(b):
        sought, sa, ea = a.runs()
        sb, eb = b.seek(sought)
        hit = eb > sb
    else:
        sought, sb, eb = b.runs()
        sa, ea = a.seek(sought)
        hit = ea > sa
    if not hit.any():
        z = np.zeros(0, dtype=np.int64)
        return z, z
    # (sa, ea) and (sb, eb): aligned row ranges of equal key hashes; expand to all row pairs
    p, j = expand_ranges(sb, eb)
    q, i = expand_ranges(sa[p], ea[p])
    j = j[q]
    if len(i):
        acols, avalid = a.key_columns(i)
        bcols, bvalid = b.key_columns(j)
        keep = None
        if not (identity_hash(acols, avalid, sought) and _integers(bcols)):  # (every pair's hash was sought)
            keep = rows_equal(acols, avalid, bcols, bvalid, n=len(i))
        if not nulls_match:
            for m in avalid:
                if m is not None:
                    keep = m if keep is None else keep & m
        if keep is not None and not keep.all():
            i, j = i[keep], j[keep]
    return i, j


def join_batches(a: TraceBatch, b: TraceBatch, dim: int, nulls_match: bool, sign: int = 1) -> Batch | None:
    """The updates of ``a x b``: key columns, then ``a``'s values, then ``b``'s values."""
    i, j = match_batches(a, b, nulls_match)
    if len(i) == 0:
        return None
    ua, ub = a.updates, b.updates
    cols = tuple(c[i] for c in ua.columns) + tuple(c[j] for c in ub.columns[b.nkey :])
    valid = tuple(None if m is None else m[i] for m in ua.valid) + tuple(
        None if m is None else m[j] for m in ub.valid[b.nkey :]
    )
    times = np.maximum(lift_times(ua.times[i], dim), lift_times(ub.times[j], dim))
    diffs = ua.diffs[i] * ub.diffs[j]
    if sign < 0:
        diffs = -diffs
    return Batch(cols, valid, times, diffs)


def _integers(cols: Sequence[np.ndarray]) -> bool:
    """Whether the other side's key columns are integers too (hashed as the side whose hashes are its keys)."""
    return all(c.dtype.kind in "iub" for c in cols)


MERGE_FOUND = 1024  # rows found in several batches from which they are consolidated before pairing


def join_trace(
    delta: TraceBatch,
    trace: Spine,
    frontier: Antichain,
    dim: int,
    nulls_match: bool,
    delta_left: bool,
    positions: Sequence[int] | None = None,
) -> Batch | None:
    """The updates of ``delta x trace`` (``trace x delta`` unless ``delta_left``): key columns, then the left
    side's values, then the right side's (those at ``positions`` of them, when given).

    The trace's updates with the delta's key hashes are found in all its batches at once. Many of them, from
    several batches, are first merged into one consolidated batch, times advanced to ``frontier`` (the
    reader's, which the delta's times are in advance of: join results are unchanged), so that a row inserted
    and deleted in batches not merged yet pairs with nothing instead of yielding pairs that cancel downstream;
    a few are paired as they are."""
    if not len(delta):
        return None
    hashes, starts, ends = delta.runs()
    found, q, source = trace.find(hashes, many=MERGE_FOUND)
    if found is None:
        return None
    if source is not None and source.min() != source.max():  # found in several batches
        merged = TraceBatch.consolidated(found.with_times(frontier.advance(found.times)), hashes[q], trace.nkey)
        if not len(merged):
            return None
        out = (
            join_batches(delta, merged, dim, nulls_match)
            if delta_left
            else join_batches(merged, delta, dim, nulls_match)
        )
        return out if out is None or positions is None else _project(out, positions)
    f, i = expand_ranges(starts[q], ends[q])  # each found row with each delta row of its key hash
    u = delta.updates
    nkey = delta.nkey
    dcols, dvalid = u.columns[:nkey], u.valid[:nkey]
    keep = None
    if not (identity_hash(dcols, dvalid, hashes) and _integers(found.columns[:nkey])):
        keep = rows_equal(
            tuple([c[i] for c in dcols]),
            tuple([None if m is None else m[i] for m in dvalid]),
            tuple([c[f] for c in found.columns[:nkey]]),
            tuple([None if m is None else m[f] for m in found.valid[:nkey]]),
            n=len(i),
        )
    if not nulls_match:
        for m in dvalid:
            if m is not None:
                keep = m[i] if keep is None else keep & m[i]
    if keep is not None and not keep.all():
        i, f = i[keep], f[keep]
    if not len(i):
        return None
    (left, li), (right, ri) = ((u, i), (found, f)) if delta_left else ((found, f), (u, i))
    sources = [(left, li, j) for j in range(left.arity)] + [(right, ri, j) for j in range(nkey, right.arity)]
    if positions is not None:
        sources = [sources[p] for p in positions]
    cols = tuple([b.columns[j][ix] for b, ix, j in sources])
    valid = tuple([None if b.valid[j] is None else b.valid[j][ix] for b, ix, j in sources])
    return Batch(
        cols, valid, _joined_times(left.times, li, right.times, ri, dim), left.diffs[li] * right.diffs[ri]
    )


def _project(b: Batch, positions: Sequence[int]) -> Batch:
    """``b`` with the columns at ``positions``."""
    return Batch(
        tuple([b.columns[p] for p in positions]), tuple([b.valid[p] for p in positions]), b.times, b.diffs
    )


def _joined_times(a: np.ndarray, i: np.ndarray, b: np.ndarray, j: np.ndarray, dim: int) -> np.ndarray:
    """The joins of times ``a[i]`` and ``b[j]``, either of an outer scope (iteration 0 in each inner loop:
    times are never negative, so the other's iterations are the join's there)."""
    ta, tb = a.take(i, axis=0), b.take(j, axis=0)
    if ta.shape[1] < tb.shape[1]:
        ta, tb = tb, ta
    if tb.shape[1] == ta.shape[1]:
        return np.maximum(ta, tb, out=ta)
    out = ta if ta.shape[1] == dim else lift_times(ta, dim)
    np.maximum(out[:, : tb.shape[1]], tb, out=out[:, : tb.shape[1]])
    return out


class JoinOp(Operator):
    """Inner join of two arrangements with equal key arity; output columns are key, left values, right
    values (optionally projected to ``positions``)."""

    def __init__(
        self,
        scope: Scope,
        left: Operator,
        left_trace: Spine,
        right: Operator,
        right_trace: Spine,
        positions: Sequence[int] | None = None,
        nulls_match: bool = False,
    ) -> None:
        super().__init__(scope, "join")
        self.left_in = self.new_queue()
        self.right_in = self.new_queue()
        left.subscribe(self.left_in)
        right.subscribe(self.right_in)
        frontier = scope.dataflow.frontier_in(left_trace.dim)
        self.left_handle = left_trace.handle(frontier)
        self.right_handle = right_trace.handle(scope.dataflow.frontier_in(right_trace.dim))
        scope.dataflow.hold(self.left_handle)
        scope.dataflow.hold(self.right_handle)
        self.positions = None if positions is None else tuple(positions)
        self.nulls_match = nulls_match

    def run(self, point: Point) -> None:
        da = self.left_in.take(point)
        db = self.right_in.take(point)
        if not da and not db:
            return
        dim = self.scope.dim
        nm = self.nulls_match
        left, right = self.left_handle.trace, self.right_handle.trace
        pos = self.positions
        out: list[Batch | None] = []
        for a in da:
            out.append(join_trace(a, right, self.right_handle.frontier, dim, nm, True, pos))
            for b in db:
                both = join_batches(a, b, dim, nm, sign=-1)
                out.append(both if both is None or pos is None else _project(both, pos))
        for b in db:
            out.append(join_trace(b, left, self.left_handle.frontier, dim, nm, False, pos))
        out = [o for o in out if o is not None]
        if out:
            res = Batch.concat(out)
            # new updates of one side meet the other's at time 0 of every loop when it is outside all loops:
            # they stay at this point
            if (not db and right.dim == 1) or (not da and left.dim == 1):
                self.emit_at(point, res)
            else:
                self.emit(res)

    def release(self) -> None:
        self.left_handle.release()
        self.right_handle.release()
