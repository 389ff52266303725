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

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ivm.engine.dataflow import Dataflow

__all__ = ["Scope", "Queue", "Inlet", "Operator", "points_of", "split_by_point"]

Point = tuple[int, ...]


def points_of(times: np.ndarray) -> Point | None:
    """The single point of ``times`` if they all share one, else ``None``."""
    dim = times.shape[1]
    if dim == 1 or times.shape[0] == 0:
        return ()
    if dim == 2:  # one loop: one comparison of a column
        it = times[:, 1]
        first = it[0]
        return (int(first),) if not np.count_nonzero(it != first) else None
    it = times[:, 1:]
    if not np.count_nonzero(it != it[0]):
        return tuple(it[0].tolist())
    return None


def split_by_point(times: np.ndarray) -> list[tuple[Point, np.ndarray | None]]:
    """``(point, row selection)`` pairs partitioning ``times`` by iteration coordinates."""
    p = points_of(times)
    if p is not None:
        return [(p, None)]
    if times.shape[1] == 2:
        it = times[:, 1]
        order = it.argsort(kind="stable")
        sorted_it = it[order]
        cuts = (sorted_it[1:] != sorted_it[:-1]).nonzero()[0] + 1
        return [((int(it[g[0]]),), g) for g in np.split(order, cuts)]
    uniq, inv = np.unique(times[:, 1:], axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return [(tuple(u.tolist()), (inv == i).nonzero()[0]) for i, u in enumerate(uniq)]


class Queue:
    """Items (batches of updates, or sorted trace batches) waiting for an operator, by point; an item put
    activates the operator at its point (``owner``; none for a queue its owner drains itself)."""

    __slots__ = ("pending", "owner", "consumer")

    def __init__(self, owner: Operator | None = None, consumer: Operator | None = None) -> None:
        self.pending: dict[Point, list[Any]] = {}
        self.owner = owner
        self.consumer = consumer or owner  # the operator reading the queue

    def put(self, point: Point, item: Any) -> None:
        self.pending.setdefault(point, []).append(item)
        if self.owner is not None:
            self.owner.activate(point)

    def take(self, point: Point) -> list[Any]:
        return self.pending.pop(point, [])

    def points(self) -> Iterable[Point]:
        return self.pending.keys()


class Inlet(Queue):
    """The input of a stateless operator, which handles an item as soon as it is put (``push(point, item)``)
    instead of queueing it and being scheduled: nothing waits in it, and a chain of stateless operators costs
    one call per item and operator. Only operators without state may do this: one that reads a trace must see
    all of its input at a point at once."""

    __slots__ = ("push",)

    def __init__(self, push: Any, consumer: Operator) -> None:
        super().__init__(None, consumer)
        self.push = push

    def put(self, point: Point, item: Any) -> None:
        self.push(point, item)


class Operator:
    """A node of a scope. Subclasses implement ``run(point)`` and push results with ``emit``."""

    def __init__(self, scope: Scope, name: str) -> None:
        self.scope = scope
        self.name = name
        self.queues: list[Queue] = []
        self.consumers: list[tuple[Queue, Any]] = []
        self.sources: list[Operator] = []  # the operators feeding this one, feedback of loops aside
        self.stage = 0  # exchanges on the longest path from the inputs (assigned in sharded dataflows)
        self.index = scope.add(self)
        self.order = self.index  # the scope runs activated operators in this order

    def new_queue(self, activates: bool = True) -> Queue:
        q = Queue(self if activates else None, self)
        self.queues.append(q)
        return q

    def new_inlet(self, push: Any) -> Inlet:
        """An input handled by ``push(point, item)`` as each item arrives (see ``Inlet``)."""
        q = Inlet(push, self)
        self.queues.append(q)
        return q

    def activate(self, point: Point) -> None:
        """Schedule this operator to run at ``point`` (input arrived, or a time it holds became due)."""
        self.scope.activate(self, point)

    def subscribe(self, queue: Queue, transform: Any = None, feedback: bool = False) -> None:
        """Deliver this operator's output batches to ``queue``, optionally transformed first; ``feedback``
        marks an edge back to an earlier operator of a loop (read at the next iteration)."""
        self.consumers.append((queue, transform))
        consumer = getattr(queue, "consumer", None)  # none for a sink outside the dataflow
        if not feedback and consumer is not None:
            consumer.sources.append(self)

    def emit(self, item: Any) -> None:
        """Send an item to every consumer, split by point (the split is found once for the consumers that
        take the item as it is)."""
        if len(item) == 0:
            return
        if self.scope.dim == 1:  # one point only: nothing to split
            for queue, transform in self.consumers:
                out = transform(item) if transform is not None else item
                if out is not None and len(out):
                    queue.put((), out)
            return
        split = None
        for queue, transform in self.consumers:
            if transform is None:
                out = item
                if split is None:
                    split = split_by_point(_times(item))
                parts = split
            else:
                out = transform(item)
                if out is None or len(out) == 0:
                    continue
                parts = split_by_point(_times(out))
            for point, sel in parts:
                queue.put(point, out if sel is None else out.take(sel))

    def emit_at(self, point: Point, item: Any) -> None:
        """Send an item whose updates are all at ``point`` to every consumer, without looking for its points."""
        if len(item) == 0:
            return
        for queue, transform in self.consumers:
            if transform is None:
                queue.put(point, item)
                continue
            out = transform(item)
            if out is None or len(out) == 0:
                continue
            for p, sel in split_by_point(_times(out)):
                queue.put(p, out if sel is None else out.take(sel))

    def run(self, point: Point) -> None:
        raise NotImplementedError

    def pending_points(self) -> Iterable[Point]:
        for q in self.queues:
            yield from q.points()

    def release(self) -> None:
        """Drop any resources (trace handles) this operator holds."""


def _times(item: Any) -> np.ndarray:
    """The times of a batch of updates or of a trace batch."""
    times = getattr(item, "times", None)
    return item.updates.times if times is None else times


class Scope:
    """Operators in creation order; ``dim`` is the number of time coordinates.

    Only activated operators run: per point, the operators that were given work there (an item queued, or a
    time they hold that became due), in creation order, each once however often it was activated. A point
    where nothing was activated costs nothing, so a dataflow whose inputs did not change does no work, and a
    loop's round runs only the operators its changes reach. An activation inside a loop activates the loop's
    operator in the enclosing scope at the outer part of the point."""

    def __init__(self, dataflow: Dataflow, dim: int, parent: Scope | None = None) -> None:
        self.dataflow = dataflow
        self.dim = dim
        self.parent = parent
        self.loop: Operator | None = None  # the operator running this scope, in ``parent``
        # the outer point at which ``loop`` runs this scope to its end now, if it does: an activation there
        # need not activate the loop again
        self.running: Point | None = None
        self.operators: list[Operator] = []
        self.active: dict[Point, dict[int, Operator]] = {}  # per point: the activated operators by index
        self._due: dict[Point, list[int]] = {}  # per point: a heap of the activated operators' indices
        self._later: list[tuple[Operator, Point]] = []  # activations for the next run of the running point

    def add(self, op: Operator) -> int:
        self.operators.append(op)
        return len(self.operators) - 1

    def move_to_end(self, op: Operator) -> None:
        """Run ``op`` after every operator created so far (a loop that reads them)."""
        self.operators.remove(op)
        self.operators.append(op)
        for i, o in enumerate(self.operators):
            o.index = o.order = i
        self.reorder()

    def reorder(self) -> None:
        """Re-key the activated operators after their ``order`` changed."""
        for point, ops in self.active.items():
            self.active[point] = {o.order: o for o in ops.values()}
            self._due[point] = sorted(self.active[point])

    def activate(self, op: Operator, point: Point) -> None:
        ops = self.active.get(point)
        if ops is None:
            if self.parent is None and self.dataflow.asleep:
                self.dataflow.wake()
            self.active[point] = {op.order: op}
            self._due[point] = [op.order]
        elif op.order not in ops:
            ops[op.order] = op
            heapq.heappush(self._due[point], op.order)
        else:
            return
        if self.loop is not None and point[:-1] != self.running:
            self.loop.activate(point[:-1])

    def run_point(self, point: Point) -> None:
        """Run the operators activated at ``point``, in creation order, including those activated meanwhile."""
        try:
            self.run_until(point, None)
        finally:
            self.end_point()

    def run_until(self, point: Point, bound: int | None) -> None:
        """Run the operators activated at ``point`` whose order is below ``bound`` (all with None), including
        those activated meanwhile; the others stay activated."""
        ops = self.active.get(point)
        if ops is None:
            return
        due = self._due[point]
        try:
            while due and (bound is None or due[0] < bound):
                ops.pop(heapq.heappop(due)).run(point)
        finally:
            if not ops:
                del self.active[point], self._due[point]

    def next_order(self, point: Point) -> int | None:
        """The order of the first operator activated at ``point``, if any."""
        due = self._due.get(point)
        return due[0] if due else None

    def take(self, op: Operator, point: Point) -> None:
        """Withdraw ``op``'s activation at ``point`` (it is run by other means: a loop run across shards)."""
        ops = self.active.get(point)
        if ops is not None and ops.pop(op.order, None) is not None:
            self._due[point].remove(op.order)
            heapq.heapify(self._due[point])
            if not ops:
                del self.active[point], self._due[point]

    def end_point(self) -> None:
        """The running point is done: what was activated for its next run is activated now."""
        later, self._later = self._later, []
        for op, p in later:
            self.activate(op, p)

    def activate_next_run(self, op: Operator, point: Point) -> None:
        """Schedule ``op`` for the next run of ``point``, which is running now (a time it holds there is due
        only once what is running now has been done: at the next step, or the loop's next pass)."""
        self._later.append((op, point))

    def pending_points(self) -> Iterable[Point]:
        """The points where some operator is activated."""
        return self.active.keys()
