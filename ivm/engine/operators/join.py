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
from ivm.engine.trace.batch import expand_ranges

__all__ = ["JoinOp", "join_batches"]


def match_batches(a: TraceBatch, b: TraceBatch, nulls_match: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row index pairs ``(i in a, j in b)`` of updates with exactly equal keys."""
    if len(a) == 0 or len(b) == 0 or not a.may_hold(*b.bounds()):
        z = np.zeros(0, dtype=np.int64)
        return z, z
    if len(a) <= len(b):
        ha, sa, ea = a.runs()
        sb, eb = b.seek(ha)
        hit = eb > sb
    else:
        hb, sb, eb = b.runs()
        sa, ea = a.seek(hb)
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
        exact = len(acols) == 1 and acols[0].dtype.kind in "iub" and avalid[0] is None
        exact = exact and bvalid[0] is None and bcols[0].dtype.kind in "iub"
        keep = None
        if not exact:
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


def matching(delta: TraceBatch, batches: list[TraceBatch], frontier: Antichain) -> list[TraceBatch]:
    """The batches of a trace that hold keys of ``delta``. When several do, their updates with those keys are
    merged into one consolidated batch, times advanced to ``frontier`` (the reader's, which ``delta``'s times
    are in advance of: join results are unchanged), so that a row inserted and deleted in batches not merged
    yet pairs with nothing instead of yielding pairs that cancel downstream."""
    if not len(delta):
        return []
    hashes = delta.runs()[0]
    lo, hi = int(hashes[0]), int(hashes[-1])
    hits = []
    for b in batches:
        if b.may_hold(lo, hi):
            start, end = b.seek(hashes)
            if (end > start).any():
                hits.append((b, start, end))
    if len(hits) <= 1:
        return [b for b, _, _ in hits]
    rows = [expand_ranges(start, end)[1] for _, start, end in hits]
    found = Batch.concat([b.updates.take(r) for (b, _, _), r in zip(hits, rows, strict=True)])
    found = found.with_times(frontier.advance(found.times))
    hashes = np.concatenate([b.hashes[r] for (b, _, _), r in zip(hits, rows, strict=True)])
    merged = TraceBatch.consolidated(found, hashes, hits[0][0].nkey)
    return [merged] if len(merged) else []


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
        out: list[Batch] = []
        ta = self.left_handle.trace.batches() if db else []
        tb = self.right_handle.trace.batches() if da else []
        for a in da:
            for b in matching(a, tb, self.right_handle.frontier):
                out.append(join_batches(a, b, dim, self.nulls_match))
            for b in db:
                out.append(join_batches(a, b, dim, self.nulls_match, sign=-1))
        for b in db:
            for a in matching(b, ta, self.left_handle.frontier):
                out.append(join_batches(a, b, dim, self.nulls_match))
        out = [o for o in out if o is not None]
        if out:
            res = Batch.concat(out)
            if self.positions is not None:
                cols, valid = res.select(self.positions)
                res = Batch(cols, valid, res.times, res.diffs)
            self.emit(res)

    def release(self) -> None:
        self.left_handle.release()
        self.right_handle.release()
