"""PEP 249 cursors over a connection: each holds the result of its own last statement.

A connection runs statements one at a time; a cursor keeps what its last ``execute`` produced (rows,
``description``, ``rowcount``, ``statusmessage``) apart from every other cursor of the connection, so that
several can be read in turn. Rows come back in the query's ORDER BY order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ivm.errors import InterfaceError, ProgrammingError

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["Cursor"]


class Cursor:
    """A PEP 249 cursor: ``execute``/``executemany``, then ``fetchone``/``fetchmany``/``fetchall`` (or
    ``fetch_arrow``), iteration, ``description``, ``rowcount``, ``statusmessage``; a context manager."""

    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.description: list[tuple] | None = None
        self.rowcount = -1
        self.statusmessage: str | None = None
        self.closed = False
        self._rows: list[tuple] | None = None
        self._result: tuple | None = None
        self._at = 0

    def execute(self, sql: str, params: Sequence | dict | None = None) -> Cursor:
        """Run ``sql`` (one or more statements; parameters bound to its placeholders)."""
        self._usable()
        conn = self.connection
        self._result, self._rows, self._at = None, None, 0
        self.description, self.rowcount, self.statusmessage = None, -1, None
        conn.execute(sql, params)
        self._result, conn._result = conn._result, None
        self.description, self.rowcount, self.statusmessage = (
            conn.description,
            conn.rowcount,
            conn.statusmessage,
        )
        return self

    def executemany(self, sql: str, seq_of_params) -> Cursor:
        """Run ``sql`` once per set of parameters; ``rowcount`` adds up the rows each changed."""
        total = 0
        for params in seq_of_params:
            self.execute(sql, params)
            total += max(self.rowcount, 0)
        self.rowcount = total
        return self

    def fetchone(self) -> tuple | None:
        rows = self._all()
        if self._at >= len(rows):
            return None
        self._at += 1
        return rows[self._at - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        rows = self._all()
        n = self.arraysize if size is None else size
        out = rows[self._at : self._at + n]
        self._at += len(out)
        return out

    def fetchall(self) -> list[tuple]:
        rows = self._all()
        out = rows[self._at :]
        self._at = len(rows)
        return out

    def fetch_arrow(self) -> pa.Table:
        """The rows not fetched yet, as a ``pyarrow.Table``."""
        from ivm.db.arrow import to_arrow_column

        self._need_result()
        cols, valid, mult, columns = self._result
        rep = np.repeat(np.arange(len(mult)), mult)[self._at :]
        self._at += len(rep)
        with self.connection.pool.active():
            arrays = [
                to_arrow_column(c[rep], None if m is None else m[rep], col.type)
                for c, m, col in zip(cols, valid, columns, strict=True)
            ]
        return pa.Table.from_arrays(arrays, names=[c.name for c in columns])

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        self.closed = True
        self._result = self._rows = None

    def setinputsizes(self, sizes) -> None:
        """Nothing to prepare: parameters are typed from their values."""

    def setoutputsize(self, size, column=None) -> None:
        """Nothing to prepare: every column is returned whole."""

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _usable(self) -> None:
        if self.closed:
            raise InterfaceError("the cursor is closed")
        if self.connection.closed:
            raise InterfaceError("the connection is closed")

    def _need_result(self) -> None:
        self._usable()
        if self._result is None:
            raise ProgrammingError("the last statement returned no rows to fetch")

    def _all(self) -> list[tuple]:
        if self._rows is None:
            from planner.values import to_python

            self._need_result()
            cols, valid, mult, columns = self._result
            with self.connection.pool.active():
                values = [
                    to_python(c, m, col.type, padded=True)
                    for c, m, col in zip(cols, valid, columns, strict=True)
                ]
            rows = list(zip(*values, strict=True)) if values else [()] * len(mult)
            self._rows = [r for r, k in zip(rows, mult.tolist(), strict=True) for _ in range(k)]
        return self._rows
