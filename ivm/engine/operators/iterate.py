"""Iteration: entering a loop, variables fed back one iteration later, and leaving the loop.

A loop scope adds a coordinate to times: an update at ``(epoch, ..., i)`` belongs to iteration ``i``. Entering
puts outer updates at iteration 0; a variable's value at iteration ``i + 1`` is what was set to it at
iteration ``i`` (plus its initial value at iteration 0); leaving drops the coordinate, so the outer collection
accumulates every iteration's changes: the fixed point. Insertions and deletions travel the same way, and an
input change at one epoch revisits only the iterations where something changes.
"""

from __future__ import annotations

import numpy as np

from ivm.engine.batch import Batch
from ivm.engine.scope import Operator, Point, Scope

__all__ = ["EnterOp", "LeaveOp", "VariableOp", "LoopOp", "IterationLimitError"]


class IterationLimitError(RuntimeError):
    """A loop did not reach a fixed point within its iteration limit."""


class EnterOp(Operator):
    """An outer collection inside a loop, at iteration 0."""

    def __init__(self, scope: Scope, source: Operator, name: str = "enter") -> None:
        super().__init__(scope, name)
        self.outer = self.new_queue()
        source.subscribe(self.outer)

    def activate(self, point: Point) -> None:
        """Outer updates at ``point`` enter at its iteration 0."""
        self.scope.activate(self, (*point, 0))

    def pending_points(self):
        for p in self.outer.points():
            yield (*p, 0)

    def run(self, point: Point) -> None:
        if point[-1] != 0:
            return
        for b in self.outer.take(point[:-1]):
            self.emit(self.enter(b))

    def enter(self, b: Batch) -> Batch:
        """``b`` at iteration 0 of this loop."""
        t = np.zeros((len(b), b.dim + 1), dtype=np.int64)
        t[:, :-1] = b.times
        return b.with_times(t)


class LeaveOp(Operator):
    """A loop collection outside the loop: every iteration's updates at the outer time, passed on as they
    come (into the enclosing scope's queues, whose operators run once the loop is done at that point)."""

    def __init__(self, scope: Scope, source: Operator, outer: Scope) -> None:
        super().__init__(outer, "leave")
        self.inner = self.new_inlet(self.push)
        self.loop_scope = scope
        source.subscribe(self.inner)

    def push(self, point: Point, b: Batch) -> None:
        if self.consumers:
            self.emit_at(point[:-1], b.with_times(np.ascontiguousarray(b.times[:, :-1])))

    def run(self, point: Point) -> None:
        pass  # nothing ever waits for it


class VariableOp(Operator):
    """A loop variable: its initial value at iteration 0 plus what is set to it, one iteration later. What is
    set to it at a point waits for the next point in its queue (which also ends the chain of operators that
    handle batches as they come, as a loop of them would never end otherwise)."""

    def __init__(self, scope: Scope, limit: int | None, on_limit: str) -> None:
        super().__init__(scope, "variable")
        self.input = self.new_queue()
        self.limit = limit
        self.on_limit = on_limit
        self.bound = False
        self.step = np.zeros(scope.dim, dtype=np.int64)  # added to a time: the next iteration
        self.step[-1] = 1

    def feed(self, source: Operator, negate: bool = False) -> None:
        """Deliver ``source``'s updates at iteration ``i`` as this variable's at ``i + 1``."""

        def delay(point: Point, b: Batch) -> None:
            nxt = (*point[:-1], point[-1] + 1)
            if self.limit is not None and nxt[-1] >= self.limit:
                # the body has run ``limit`` times: rounds 0 .. limit - 1
                if self.on_limit != "return":
                    raise IterationLimitError(
                        f"recursion did not reach a fixed point within {self.limit} rounds"
                    )
                return
            t = b.times + self.step
            self.input.put(nxt, Batch(b.columns, b.valid, t, -b.diffs if negate else b.diffs))

        source.subscribe(self.new_inlet(delay), feedback=True)

    def run(self, point: Point) -> None:
        batches = self.input.take(point)
        if batches:
            self.emit_at(point, Batch.concat(batches))


class LoopOp(Operator):
    """Runs a loop scope to its fixed point at each outer point, iteration by iteration."""

    def __init__(self, outer: Scope, inner: Scope) -> None:
        super().__init__(outer, "loop")
        self.inner = inner
        inner.loop = self
        self.leaves: list[LeaveOp] = []

    def pending_points(self):
        for p in self.inner.pending_points():
            yield p[:-1]

    def run(self, point: Point) -> None:
        n = len(point)
        inner = self.inner
        inner.running = point
        try:
            while True:
                pts = [p for p in inner.pending_points() if p[:n] == point]
                if not pts:
                    break
                inner.run_point(min(pts))
        finally:
            inner.running = None
