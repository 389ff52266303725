"""Stateless operators: map, expand, filter, project, concat, negate, and the capture of output diffs.

Map and filter apply vectorized functions to whole column arrays; none of them looks at a row alone. Having no
state, they (and project, negate, concat) handle each batch when it is emitted, at its point, rather than
waiting to be scheduled: see ``ivm.engine.scope.Inlet``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ivm.engine.batch import Batch, Mask
from ivm.engine.scope import Operator, Point, Scope

__all__ = [
    "EvaluationError",
    "takes_rows",
    "MapOp",
    "ExpandOp",
    "ExpandFn",
    "FilterOp",
    "ConcatOp",
    "NegateOp",
    "CaptureOp",
    "MapFn",
    "PredicateFn",
]

Columns = tuple[tuple[np.ndarray, ...], tuple[Mask, ...]]
MapFn = Callable[[tuple[np.ndarray, ...], tuple[Mask, ...]], Columns]
PredicateFn = Callable[[tuple[np.ndarray, ...], tuple[Mask, ...]], np.ndarray]
ExpandFn = Callable[
    [tuple[np.ndarray, ...], tuple[Mask, ...], int], tuple[tuple[np.ndarray, ...], tuple[Mask, ...], np.ndarray]
]


class EvaluationError(RuntimeError):
    """A function could not evaluate some row (say, text that is not a number). In a map or filter the row
    becomes an error of its dataflow (see ``_Fallible``); elsewhere the engine stops the dataflow with it."""


class _Unary(Operator):
    def __init__(self, scope: Scope, name: str, source: Operator) -> None:
        super().__init__(scope, name)
        self.input = self.new_queue()
        source.subscribe(self.input)

    def run(self, point: Point) -> None:
        for batch in self.input.take(point):
            out = self.apply(batch)
            if out is not None:
                self.emit(out)

    def apply(self, batch: Batch) -> Batch | None:
        raise NotImplementedError


class _Stateless(Operator):
    """An operator applying a function to each batch alone: it handles a batch as soon as its source emits
    it, at the batch's point, without being scheduled (see ``Inlet``)."""

    def __init__(self, scope: Scope, name: str, source: Operator) -> None:
        super().__init__(scope, name)
        self.input = self.new_inlet(self.push)
        source.subscribe(self.input)

    def push(self, point: Point, batch: Batch) -> None:
        out = self.apply(batch)
        if out is not None:
            self.emit_at(point, out)

    def run(self, point: Point) -> None:
        pass  # nothing ever waits for it

    def apply(self, batch: Batch) -> Batch | None:
        raise NotImplementedError


class _Fallible(_Stateless):
    """A map or filter whose function may fail on some rows. Errors are data: a row the function cannot
    evaluate leaves the output and enters the dataflow's error collection instead, under the error's message
    with the row's time and diff, so that retracting the row retracts its error (the dataflow is in error
    while some error's count is not zero). The rows at fault are found by bisecting the batch, which costs
    O(k log n) evaluations of parts of it for k bad rows of n, nothing when no row fails."""

    def push(self, point: Point, batch: Batch) -> None:
        try:
            out = self.apply(batch)
        except EvaluationError:
            out = self._apart(batch)
        if out is not None:
            self.emit_at(point, out)

    def _apart(self, batch: Batch) -> Batch | None:
        bad: list[int] = []
        messages: list[str] = []
        n = len(batch)
        stack = [np.arange(n // 2, n), np.arange(n // 2)] if n > 1 else []
        if n == 1:
            bad, messages = [0], [self._error(batch)]
        while stack:
            rows = stack.pop()
            if not len(rows):
                continue
            part = batch.take(rows)
            try:
                self.apply(part)
            except EvaluationError as err:
                if len(rows) == 1:
                    bad.append(int(rows[0]))
                    messages.append(str(err))
                else:
                    half = len(rows) // 2
                    stack += [rows[half:], rows[:half]]
        self.scope.dataflow.add_errors(messages, batch.diffs[bad])
        good = np.setdiff1d(np.arange(n), bad)
        return self.apply(batch.take(good)) if len(good) else None

    def _error(self, batch: Batch) -> str:
        try:
            self.apply(batch)
        except EvaluationError as err:
            return str(err)
        raise AssertionError("the row did not fail again")


class MapOp(_Fallible):
    """Rows to new rows by a vectorized function of the columns (and their validity masks). A function taking a
    third argument also gets the number of rows, which a batch without columns cannot tell otherwise."""

    def __init__(self, scope: Scope, source: Operator, fn: MapFn, name: str = "map") -> None:
        super().__init__(scope, name, source)
        self.fn = fn
        self.with_rows = takes_rows(fn)

    def apply(self, batch: Batch) -> Batch:
        if self.with_rows:
            cols, valid = self.fn(batch.columns, batch.valid, len(batch))
        else:
            cols, valid = self.fn(batch.columns, batch.valid)
        return Batch.build(cols, valid, batch.times, batch.diffs)


class ExpandOp(_Fallible):
    """Each row to as many rows as a vectorized function gives it (none, one or many): ``fn(columns,
    validity, n) -> (columns, validity, rows)`` where ``rows`` names the input row of each output row, in
    ascending order, and the output rows take its time and diff. Linear, as a map is: a row's retraction
    retracts the rows it gave."""

    def __init__(self, scope: Scope, source: Operator, fn: ExpandFn) -> None:
        super().__init__(scope, "expand", source)
        self.fn = fn

    def apply(self, batch: Batch) -> Batch | None:
        cols, valid, rows = self.fn(batch.columns, batch.valid, len(batch))
        if not len(rows):
            return None
        return Batch.build(cols, valid, batch.times.take(rows, axis=0), batch.diffs[rows])


def takes_rows(fn) -> bool:
    """Whether a map function takes a third parameter, the number of rows."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


class FilterOp(_Fallible):
    """The rows for which a vectorized predicate is True. The predicate receives the validity masks and
    decides what a NULL means (SQL's WHERE keeps only rows whose condition is TRUE)."""

    def __init__(self, scope: Scope, source: Operator, pred: PredicateFn) -> None:
        super().__init__(scope, "filter", source)
        self.pred = pred

    def apply(self, batch: Batch) -> Batch | None:
        keep = np.asarray(self.pred(batch.columns, batch.valid), dtype=bool)
        if keep.all():
            return batch
        return batch.take(keep) if keep.any() else None


class ProjectOp(_Stateless):
    """The columns at the given positions, in that order."""

    def __init__(self, scope: Scope, source: Operator, positions: Sequence[int]) -> None:
        super().__init__(scope, "project", source)
        self.positions = tuple(positions)

    def apply(self, batch: Batch) -> Batch:
        cols, valid = batch.select(self.positions)
        return Batch(cols, valid, batch.times, batch.diffs)


class NegateOp(_Stateless):
    """Every update with its diff negated."""

    def __init__(self, scope: Scope, source: Operator) -> None:
        super().__init__(scope, "negate", source)

    def apply(self, batch: Batch) -> Batch:
        return batch.negate()


class ConcatOp(Operator):
    """The sum of several collections of the same columns: each source's batches passed on as they come."""

    def __init__(self, scope: Scope, sources: Sequence[Operator]) -> None:
        super().__init__(scope, "concat")
        self.input = self.new_inlet(self.emit_at)
        for s in sources:
            s.subscribe(self.input)

    def run(self, point: Point) -> None:
        pass  # nothing ever waits for it


class CaptureOp(_Unary):
    """Records every output batch, for inspection of a collection's diffs."""

    def __init__(self, scope: Scope, source: Operator) -> None:
        super().__init__(scope, "capture", source)
        self.batches: list[Batch] = []
        self.callbacks: list[Callable[[Batch], None]] = []

    def apply(self, batch: Batch) -> None:
        self.batches.append(batch)
        for cb in self.callbacks:
            cb(batch)
        return None
