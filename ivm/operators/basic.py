"""Stateless operators: map, filter, project, concat, negate, and the capture of output diffs.

Map and filter apply vectorized functions to whole column arrays; none of them looks at a row alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ivm.batch import Batch, Mask
from ivm.scope import Operator, Point, Scope

__all__ = [
    "EvaluationError",
    "takes_rows",
    "MapOp",
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


class EvaluationError(RuntimeError):
    """A map or filter function could not evaluate some row (say, text that is not a number): the dataflow
    cannot go on exactly, so the engine stops it with this error."""


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


class MapOp(_Unary):
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


def takes_rows(fn) -> bool:
    """Whether a map function takes a third parameter, the number of rows."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


class FilterOp(_Unary):
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


class ProjectOp(_Unary):
    """The columns at the given positions, in that order."""

    def __init__(self, scope: Scope, source: Operator, positions: Sequence[int]) -> None:
        super().__init__(scope, "project", source)
        self.positions = tuple(positions)

    def apply(self, batch: Batch) -> Batch:
        cols, valid = batch.select(self.positions)
        return Batch(cols, valid, batch.times, batch.diffs)


class NegateOp(_Unary):
    """Every update with its diff negated."""

    def __init__(self, scope: Scope, source: Operator) -> None:
        super().__init__(scope, "negate", source)

    def apply(self, batch: Batch) -> Batch:
        return batch.negate()


class ConcatOp(Operator):
    """The sum of several collections of the same columns."""

    def __init__(self, scope: Scope, sources: Sequence[Operator]) -> None:
        super().__init__(scope, "concat")
        self.input = self.new_queue()
        for s in sources:
            s.subscribe(self.input)

    def run(self, point: Point) -> None:
        batches = self.input.take(point)
        if batches:
            self.emit(Batch.concat(batches))


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
