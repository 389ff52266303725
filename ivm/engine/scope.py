"""Scopes, queues and operators: the scheduling skeleton of a dataflow.

A scope holds operators in creation order, which is a topological order of its (acyclic) body: feedback
edges of loops are the only way back. A scope of dimension ``d`` carries times with ``d`` coordinates; a
*point* is the tuple of its iteration coordinates (``times[:, 1:]``), so the root scope has the single point
``()``. Running a point lets every operator consume, in order, the updates queued for it at that point, for
every epoch at once: many logical times are retired in one physical step. A loop runs its points (one per
iteration) in increasing order until nothing is pending; that order is a linear extension of the product order,
so each operator sees all of its input at a point before it must produce output there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ivm.engine.dataflow import Dataflow

__all__ = ["Scope", "Queue", "Operator", "points_of", "split_by_point"]

Point = tuple[int, ...]


def points_of(times: np.ndarray) -> Point | None:
    """The single point of ``times`` if they all share one, else ``None``."""
    if times.shape[1] == 1 or times.shape[0] == 0:
        return ()
    it = times[:, 1:]
    if (it == it[0]).all():
        return tuple(int(x) for x in it[0])
    return None


def split_by_point(times: np.ndarray) -> list[tuple[Point, np.ndarray | None]]:
    """``(point, row selection)`` pairs partitioning ``times`` by iteration coordinates."""
    p = points_of(times)
    if p is not None:
        return [(p, None)]
    if times.shape[1] == 2:
        it = times[:, 1]
        order = np.argsort(it, kind="stable")
        sorted_it = it[order]
        cuts = np.flatnonzero(sorted_it[1:] != sorted_it[:-1]) + 1
        return [((int(it[g[0]]),), g) for g in np.split(order, cuts)]
    uniq, inv = np.unique(times[:, 1:], axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return [(tuple(int(x) for x in u), np.flatnonzero(inv == i)) for i, u in enumerate(uniq)]


class Queue:
    """Items (batches of updates, or sorted trace batches) waiting for an operator, by point."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: dict[Point, list[Any]] = {}

    def put(self, point: Point, item: Any) -> None:
        self.pending.setdefault(point, []).append(item)

    def take(self, point: Point) -> list[Any]:
        return self.pending.pop(point, [])

    def points(self) -> Iterable[Point]:
        return self.pending.keys()


class Operator:
    """A node of a scope. Subclasses implement ``run(point)`` and push results with ``emit``."""

    def __init__(self, scope: Scope, name: str) -> None:
        self.scope = scope
        self.name = name
        self.queues: list[Queue] = []
        self.consumers: list[tuple[Queue, Any]] = []
        self.index = scope.add(self)

    def new_queue(self) -> Queue:
        q = Queue()
        self.queues.append(q)
        return q

    def subscribe(self, queue: Queue, transform: Any = None) -> None:
        """Deliver this operator's output batches to ``queue``, optionally transformed first."""
        self.consumers.append((queue, transform))

    def emit(self, item: Any) -> None:
        """Send an item to every consumer, split by point."""
        if len(item) == 0:
            return
        root = self.scope.dim == 1  # one point only: nothing to split
        for queue, transform in self.consumers:
            out = transform(item) if transform is not None else item
            if out is None or len(out) == 0:
                continue
            if root:
                queue.put((), out)
                continue
            for point, sel in split_by_point(_times(out)):
                queue.put(point, out if sel is None else out.take(sel))

    def run(self, point: Point) -> None:
        raise NotImplementedError

    def pending_points(self) -> Iterable[Point]:
        for q in self.queues:
            yield from q.points()

    def release(self) -> None:
        """Drop any resources (trace handles) this operator holds."""


def _times(item: Any) -> np.ndarray:
    return item.updates.times if hasattr(item, "updates") else item.times


class Scope:
    """A list of operators run in creation order; ``dim`` is the number of time coordinates."""

    def __init__(self, dataflow: Dataflow, dim: int, parent: Scope | None = None) -> None:
        self.dataflow = dataflow
        self.dim = dim
        self.parent = parent
        self.operators: list[Operator] = []

    def add(self, op: Operator) -> int:
        self.operators.append(op)
        return len(self.operators) - 1

    def move_to_end(self, op: Operator) -> None:
        """Run ``op`` after every operator created so far (a loop that reads them)."""
        self.operators.remove(op)
        self.operators.append(op)
        for i, o in enumerate(self.operators):
            o.index = i

    def run_point(self, point: Point) -> None:
        for op in self.operators:
            op.run(point)

    def pending_points(self) -> set[Point]:
        pts: set[Point] = set()
        for op in self.operators:
            pts.update(op.pending_points())
        return pts
