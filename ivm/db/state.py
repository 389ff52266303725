"""What the database keeps for each table and view, and how a table's arrangement holds its rows.

A table is an engine input arranged by its primary key (or by all its columns), with the key columns first;
a view is a compiled dataflow and the arrangement of its output. Reading a relation's rows, seeking keys in
an arrangement and knowing which text columns a table stores uninterned are needed by writes, constraints,
queries, Arrow output and subscriptions alike, so they live here, below all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ivm.engine.batch import Batch, consolidate, key_hash
from ivm.engine.dataflow import Arranged, Dataflow, Input
from ivm.engine.strings import POOL
from ivm.errors import InternalError
from planner.compile import Compiled
from sql.catalog import Table, View

__all__ = [
    "TableState",
    "ViewState",
    "changed",
    "uninterned",
    "column_layout",
    "table_order",
    "unique",
    "contents",
]


class TableState:
    """A table: its engine input and arrangement, and what its constraints need to check a change."""

    def __init__(self, table: Table, inp: Input, arranged: Arranged, sql: str, created: int) -> None:
        self.table = table
        self.sql = sql  # the CREATE TABLE that makes it again, empty
        self.created = created  # the catalog version it came with (see ``changed``)
        self.input = inp
        self.arranged = arranged
        # how the columns of Arrow data with the last schema seen are read: (schema, stored text columns,
        # per column its position in the data and its converter); small transactions repeat one schema
        self.arrow_reading: tuple | None = None
        self.checks: list[tuple] = []  # (CHECK constraint, predicate true where it is violated)
        self.uniques: list[tuple] = []  # (UNIQUE constraint, the arrangement by its columns)
        self.dataflows: list[Dataflow] = []  # what the table's constraints built, dropped with it
        self.admits = _admission(table)  # a quick test that a change fits the declared types as it is
        # per identity column (by name), the next value of its sequence (see ``dml.next_values``)
        self.sequences: dict[str, int] = {
            c.name: i.start for c, i in zip(table.columns, table.identities, strict=True) if i is not None
        }


class ViewState:
    """A view: its dataflow, the arrangement of its rows, the arrangements it reads, and why it stopped."""

    def __init__(self, view: View, compiled: Compiled, created: int) -> None:
        self.view = view
        self.created = created  # the catalog version it came with (see ``changed``)
        self.stopped: int | None = None  # the version at which it stopped
        self.dropped: tuple[int, int] | None = None  # the version and serial number of its DROP, if retained
        self.df = compiled.dataflow
        self.arranged = compiled.arranged
        self.used = compiled.used
        self.error: str | None = None


def changed(db) -> int:
    """Note a change of the catalog: its new version, which also orders the events that made it."""
    db.version = next(db.seq)
    return db.version


def uninterned(table: Table) -> frozenset[int]:
    """The columns a table stores without interning their text when it looks mostly distinct: text outside
    the primary key (a deleted row is found by its key, and so are the codes it was stored with)."""
    if not table.primary_key:
        return frozenset()
    keyed = {*table.primary_key, *(p for u in table.uniques for p in u.columns)}
    return frozenset(i for i, c in enumerate(table.columns) if c.type.kind == "text" and i not in keyed)


def column_layout(table: Table, width: int, nkey: int) -> list[int]:
    """The table's columns in the order its arrangement holds them: the key columns first."""
    key = list(table.primary_key) or list(range(width))
    return key + [i for i in range(width) if i not in key]


def table_order(table: Table, width: int, nkey: int) -> list[int]:
    """Where each of the table's columns is in its arrangement (the inverse of ``column_layout``)."""
    layout = column_layout(table, width, nkey)
    return [layout.index(i) for i in range(width)]


def one_zero(b: Batch) -> Batch:
    """``b`` with its doubles' -0.0 made 0.0: rows as keys compare, a key of -0.0 being the key of 0.0 (as
    ``key_hash`` sees it, and PostgreSQL), where the rows that hold them stay apart."""
    if not any(c.dtype.kind == "f" for c in b.columns):
        return b
    cols = tuple(c + 0.0 if c.dtype.kind == "f" else c for c in b.columns)
    return Batch(cols, b.valid, b.times, b.diffs)


def unique(h: np.ndarray, cols: Sequence[np.ndarray], valid: Sequence) -> tuple:
    """The distinct rows of key columns ``cols`` (validity ``valid``, hashes ``h``), sorted by hash, as
    (hashes, columns, validity): what a trace's ``gather`` seeks (keys, so -0.0 is 0.0)."""
    b = one_zero(Batch(tuple(cols), tuple(valid), np.zeros((len(h), 1), np.int64), np.ones(len(h), np.int64)))
    if len(h) == 1:  # one key (a statement's WHERE k = ...): distinct and sorted as it is
        return h, b.columns, b.valid
    b, _ = consolidate(b)
    hh = key_hash(b.columns, b.valid, len(b))
    order = np.argsort(hh, kind="stable")
    return (
        hh[order],
        tuple(c[order] for c in b.columns),
        tuple(None if m is None else m[order] for m in b.valid),
    )


def contents(
    arranged: Arranged,
    extra: Sequence[Batch] = (),
    table: Table | None = None,
    keys: tuple[np.ndarray, ...] | None = None,
) -> tuple[list, list, np.ndarray]:
    """The current rows of an arrangement (plus extra updates): columns in the relation's order, validity,
    and multiplicities. With ``keys`` (key columns as arrays), only rows with those keys are read from the
    arrangement (the extra updates are all kept)."""
    if keys is None:
        batches = [b.updates for b in arranged.trace.batches()]
    else:
        valid = (None,) * len(keys)
        found, _ = arranged.trace.gather(*unique(key_hash(keys, valid, len(keys[0])), keys, valid))
        batches = [] if found is None else [found]
    width = len(arranged.dtypes)
    if not batches and not extra:
        empty = Batch.empty(arranged.dtypes)
        cols, valid = list(empty.columns), list(empty.valid)
        mult = np.zeros(0, dtype=np.int64)
    else:
        if not extra and len(batches) == 1 and len(batches[0]) == 1 and batches[0].diffs[0] > 0:
            total = batches[0]  # one update of one key: consolidated as it is
            return _in_table_order(table, arranged, list(total.columns), list(total.valid), total.diffs)
        allb = [b.with_times(np.zeros((len(b), 1), np.int64)) for b in batches]
        if extra:
            key = column_layout(table, width, arranged.nkey)
            for e in extra:
                cols, valid = e.select(key)
                allb.append(Batch(cols, valid, np.zeros((len(e), 1), np.int64), e.diffs))
        total, _ = consolidate(Batch.concat(allb))
        if keys is not None:  # extra updates of other keys have no rows to meet: keep what is there
            total = total.take(total.diffs > 0)
        if (total.diffs < 0).any():
            raise InternalError("negative multiplicity in a relation")
        cols, valid, mult = list(total.columns), list(total.valid), total.diffs
    return _in_table_order(table, arranged, cols, valid, mult)


def _in_table_order(
    table: Table | None, arranged: Arranged, cols: list, valid: list, mult: np.ndarray
) -> tuple:
    """Columns of an arrangement's layout put in the table's order (as they are, without a table)."""
    if table is not None:
        inv = table_order(table, len(arranged.dtypes), arranged.nkey)
        cols = [cols[i] for i in inv]
        valid = [valid[i] for i in inv]
    return cols, valid, mult


def _admission(table: Table):
    """A test, in a few numpy calls for all the columns together, that every value a change holds already fits
    the table's declared types (integer ranges, text lengths without anything to cut); None when no column
    declares more than its engine type. A change failing it is checked (and fixed, or refused) row by row."""
    ints = [(p, d.low, d.high) for p, d in enumerate(table.domains) if d is not None and d.low is not None]
    texts = [(p, d) for p, d in enumerate(table.domains) if d is not None and d.length is not None]
    if not ints and not texts:
        return None
    positions = [p for p, _ in texts]
    limit = np.array([d.length for _, d in texts], dtype=np.int64)[:, None]
    padded = np.array([d.padded for _, d in texts])[:, None]
    numbers = [p for p, _, _ in ints]
    low = np.array([lo for _, lo, _ in ints], dtype=np.int64)[:, None]
    high = np.array([hi for _, _, hi in ints], dtype=np.int64)[:, None]

    def admits(batch: Batch) -> bool:
        if not len(batch):
            return True
        if ints:
            values = np.array([batch.columns[p] for p in numbers])
            if ((values < low) | (values > high)).any():
                return False
        if texts:
            size, trailing = POOL.sizes(np.array([batch.columns[p] for p in positions]))
            if ((size > limit) | (padded & trailing.astype(bool))).any():
                return False
        return True

    return admits
