"""Subscriptions: a view's (or a table's) changes as Arrow record batches, from now on.

A subscription listens to the relation's arrangement and queues every batch of changes the engine commits to
it; iterating turns the queued batches into ``pyarrow.RecordBatch``es with the relation's columns plus
``time`` and ``diff``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ivm.db import state
from ivm.db.arrow import to_arrow_column
from ivm.engine.batch import Batch
from ivm.engine.dataflow import Arranged
from ivm.errors import OperationalError
from sql.catalog import Table

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["Subscription"]


class Subscription:
    """A view's diffs as Arrow record batches (see ``Connection.subscribe``)."""

    def __init__(
        self, conn: Connection, arranged: Arranged, columns, snapshot: bool, table: Table | None, name: str = ""
    ) -> None:
        self.columns = columns
        self.table = table
        self.relation = name
        self.arranged = arranged
        self.pool = conn.pool
        self.pending: list[Batch] = []
        # why the subscription ended (its relation dropped, or its table altered): raised once it is read out
        self.ended: str | None = None
        # a table's arrangement holds its key columns first: the order that restores the table's columns
        self.order = None if table is None else state.table_order(table, len(columns), arranged.nkey)
        if snapshot:
            cols, valid, mult = state.contents(arranged)
            n = len(mult)
            at = np.full((n, 1), max(conn.time - 1, 0))
            self.pending.append(Batch(tuple(cols), tuple(valid), at, mult))
        self.sink = _Sink(self.pending)
        arranged.op.subscribe(self.sink)

    def follow(self, arranged: Arranged) -> None:
        """Go on with the changes of ``arranged``: the relation's arrangement built again with the same rows
        (its view built again by ALTER TABLE or DROP)."""
        self.arranged = arranged
        arranged.op.subscribe(self.sink)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        yield from self._batches()
        if self.ended is not None:
            raise OperationalError(self.ended)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        while self.pending:
            b = self.pending.pop(0)
            if self.order is not None:
                o = self.order
                b = Batch(tuple(b.columns[i] for i in o), tuple(b.valid[i] for i in o), b.times, b.diffs)
            with self.pool.active():
                arrays = [
                    to_arrow_column(c, m, col.type)
                    for c, m, col in zip(b.columns, b.valid, self.columns, strict=True)
                ]
            arrays += [pa.array(b.times[:, 0]), pa.array(b.diffs)]
            yield pa.RecordBatch.from_arrays(arrays, names=[c.name for c in self.columns] + ["time", "diff"])


class _Sink:
    """A queue-like consumer of an arrangement's output batches, for subscriptions."""

    def __init__(self, out: list[Batch]) -> None:
        self.out = out

    def put(self, point, item) -> None:
        self.out.append(item.updates if hasattr(item, "updates") else item)
