"""Arrange: index a collection by key into a shared trace, and import a trace into another dataflow.

The arrange operator sorts each incoming batch by key once, appends it to its spine and forwards the sorted
batch to every operator that reads the arrangement; those read the same trace through handles rather than
keeping copies. An import presents an existing trace to a new dataflow: its history is replayed as the trace's
own already sorted batches, as of the time the import starts, followed by every batch appended later.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ivm.engine.batch import Batch
from ivm.engine.scope import Operator, Point, Scope
from ivm.engine.trace import Spine, TraceBatch, TraceHandle

__all__ = ["ArrangeOp", "ImportOp"]


class ArrangeOp(Operator):
    """Sorts batches by their first ``nkey`` columns into a spine and forwards the sorted batches."""

    def __init__(self, scope: Scope, source: Operator | None, nkey: int, dtypes: Sequence) -> None:
        super().__init__(scope, "arrange")
        self.nkey = nkey
        self.dtypes = tuple(dtypes)
        self.trace = Spine(nkey, self.dtypes, scope.dim)
        handle = self.trace.handle(scope.dataflow.frontier_in(scope.dim))
        self.handle: TraceHandle | None = scope.dataflow.hold(handle)
        self.input = self.new_queue()
        if source is not None:
            source.subscribe(self.input)

    def run(self, point: Point) -> None:
        batches = self.input.take(point)
        if not batches:
            return
        self.insert(Batch.concat(batches), point=point)

    def insert(
        self,
        updates: Batch,
        hashes: np.ndarray | None = None,
        point: Point | None = None,
        ordered: bool = False,
    ) -> None:
        """Arrange ``updates`` (whose key hashes are ``hashes``, when known), append them to the trace and
        forward them: at ``point`` when they are all there, and as they are when ``ordered`` (sorted and
        consolidated already, with their hashes)."""
        if ordered:
            tb = TraceBatch.ordered(updates, hashes, self.nkey)
        else:
            tb = TraceBatch.from_updates(updates, self.nkey, hashes)
        if len(tb):
            self.trace.insert(tb)
            if point is None:
                self.emit(tb)
            else:
                self.emit_at(point, tb)

    def release(self) -> None:
        if self.handle is not None:
            self.handle.release()
            self.handle = None


class ImportOp(Operator):
    """Another dataflow's arrangement as a stream of its sorted batches: history first, then new ones.

    Nothing is re-sorted or copied: the importer reads the same trace through its own handle.
    """

    def __init__(self, scope: Scope, source: ArrangeOp) -> None:
        super().__init__(scope, "import")
        self.source = source
        self.trace = source.trace
        self.nkey = source.nkey
        self.dtypes = source.dtypes
        self.handle = scope.dataflow.hold(self.trace.handle(self.trace.since))
        # the history is seen as of the last retired time: updates that cancelled out by then (in batches not
        # merged yet) arrive together and cancel, rather than replaying states the new dataflow never had
        as_of = max(source.scope.dataflow.frontier - 1, 0)
        self.history = [_as_of(b, as_of) for b in self.trace.batches()]
        self.input = self.new_queue()
        source.subscribe(self.input)
        if self.history:
            self.activate(())

    def run(self, point: Point) -> None:
        for b in self.history:
            self.emit(b)
        self.history = []
        for b in self.input.take(point):
            self.emit(b)

    def pending_points(self):
        if self.history:
            yield ()
        yield from super().pending_points()

    def release(self) -> None:
        self.handle.release()
        self.source.consumers = [c for c in self.source.consumers if c[0] is not self.input]


def _as_of(b: TraceBatch, epoch: int) -> TraceBatch:
    """``b`` with every epoch before ``epoch`` moved to it (still sorted: only ties among times appear)."""
    times = b.updates.times
    if len(times) == 0 or times[:, 0].min() >= epoch:
        return b
    moved = times.copy()
    np.maximum(moved[:, 0], epoch, out=moved[:, 0])
    return TraceBatch(b.updates.with_times(moved), b.hashes, b.nkey)


def lift_times(times: np.ndarray, dim: int) -> np.ndarray:
    """Times of an outer scope as times of a scope ``dim`` coordinates deep (iteration 0 in each loop)."""
    if times.shape[1] == dim:
        return times
    out = np.zeros((times.shape[0], dim), dtype=np.int64)
    out[:, : times.shape[1]] = times
    return out
