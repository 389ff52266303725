"""Arrow in and out: writing ``pyarrow.Table``s to tables, committing a change log of many transactions at
once, looking rows up by key, and the last query's rows as a ``pyarrow.Table``.

These are the bodies of the connection's Arrow methods (``insert_arrow``, ``delete_arrow``,
``apply_changes_arrow``, ``lookup_arrow``, ``fetch_arrow``). Whole columns are converted at a time by
``ivm.db.arrow``; the changes are checked as SQL's are (``constraints``) before they join the transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ivm.db import constraints, dml, state, transactions
from ivm.db.arrow import converter, to_arrow_column, to_engine_column
from ivm.engine.batch import Batch, consolidate, key_hash
from ivm.engine.strings import FEW
from ivm.errors import IntegrityError, InternalError, ProgrammingError
from sql.catalog import Table
from sql.logical import Column

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["write", "apply_changes", "lookup", "fetch"]


def write(db: Connection, table: str, data: pa.Table, sign: int) -> None:
    """Insert (``sign`` 1) or delete (-1) the rows of ``data`` in ``table`` (columns matched by name; a column
    left out takes its DEFAULT, an identity column its sequence's next values), checked as any change is before
    it joins the transaction."""
    transactions.usable(db)
    if db.aborted:
        raise InternalError("current transaction is aborted, commands ignored until end of transaction block")
    if table not in db.tables:
        raise ProgrammingError(f"table {table!r} does not exist")
    st = db.tables[table]
    schema = data.schema
    loose = db.registry.uninterned(table)
    reading = st.arrow_reading
    if reading is None or reading[1] is not loose or not schema.equals(reading[0]):
        reading = st.arrow_reading = (schema, loose, _arrow_reading(st.table, schema, loose))
    texts: dict[int, pa.Array] = {}
    cols, masks = [], []
    n = data.num_rows
    for p, c, i, convert in reading[2]:
        if i < 0 and st.table.identities[p] is not None and sign > 0:  # the sequence's next values
            cols.append(dml.next_values(db, st, p, n))
            masks.append(None)
            continue
        if i < 0:
            d = dml.default(st.table, p)
            cols.append(np.full(n, 0 if d is None else d, dtype=c.type.dtype))
            masks.append(np.full(n, d is not None))
            continue
        if sign < 0 and n > FEW and p in loose and _is_text(schema.field(i).type):
            # text the table may store uninterned is compared as it comes and takes the stored codes
            texts[p] = data.column(i).combine_chunks().cast(pa.large_string())
            col, mask = np.full(n, -1, np.int64), None
            if texts[p].null_count:
                mask = np.asarray(texts[p].is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        else:
            col, mask = convert(data.column(i))
        cols.append(col)
        masks.append(mask)
    batch = Batch.build(cols, masks, np.full(n, db.time), np.full(n, sign, np.int64))
    try:
        if sign < 0:
            batch = constraints.check_present(db, st, batch, texts)
        transactions.write(db, st, batch)
    except BaseException:
        transactions.failure(db)
        raise


def _arrow_reading(table: Table, schema: pa.Schema, loose: frozenset[int]) -> list[tuple]:
    """Per column of ``table``: its position, the column, its position in Arrow data of ``schema`` (-1 when
    absent, allowed for a nullable column) and the converter of that data."""
    out = []
    for p, c in enumerate(table.columns):
        i = schema.get_field_index(c.name)
        if i < 0:
            if c.name in schema.names:
                raise ProgrammingError(
                    f"column {c.name!r} appears more than once in the data for table {table.name!r}"
                )
            if not c.nullable and table.defaults[p] is None and table.identities[p] is None:
                raise IntegrityError(
                    f"column {c.name!r} of table {table.name!r} is missing and may not be NULL"
                )
            out.append((p, c, -1, None))
        else:
            out.append((p, c, i, converter(schema.field(i).type, c.type, c.name, p in loose)))
    return out


def _is_text(t) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def apply_changes(db: Connection, changes: dict, count: int) -> list[str]:
    """Commit ``count`` consecutive transactions of changes at once (see ``Connection.apply_changes_arrow``);
    returns the views that stopped."""
    if db.in_transaction:
        raise ProgrammingError("apply_changes_arrow cannot run inside a transaction")
    if count < 1:
        return []
    batches = []
    for table, (data, diff, tx) in changes.items():
        if table not in db.tables:
            raise ProgrammingError(f"table {table!r} does not exist")
        st = db.tables[table]
        tx = np.asarray(tx, dtype=np.int64)
        diff = np.asarray(diff, dtype=np.int64)
        if not (len(tx) == len(diff) == data.num_rows):
            raise ProgrammingError(f"changes of {table!r}: rows, diffs and transactions differ in length")
        if len(tx) and (tx.min() < 0 or tx.max() >= count):
            raise ProgrammingError(f"changes of {table!r} name a transaction outside 0..{count - 1}")
        cols, masks = [], []
        names = data.schema.names
        stored = db.registry.uninterned(table)
        texts = {}
        for p, c in enumerate(st.table.columns):
            if c.name not in names:
                raise ProgrammingError(f"column {c.name!r} of table {table!r} is missing")
            col, mask, text = _column_of_changes(data.column(c.name), c, p in stored, diff > 0)
            if text is not None:
                texts[p] = text
            if mask is not None and not c.nullable and not mask.all():
                raise IntegrityError(
                    f"null value in column {c.name!r} of table {table!r} violates the not-null constraint"
                )
            cols.append(col)
            masks.append(mask)
        batch = Batch.build(cols, masks, db.time + tx, diff)
        batches.append((st, constraints.settle_stored(db, st, batch, tx, texts) if stored else batch))
    for st, b in batches:
        st.input.send(b)
    start = db.time
    db.time += count
    for st in db.tables.values():
        st.input.advance_to(db.time)
    db.engine.step()
    stopped = transactions.stop_failed(db, db.engine.failed, report=False)
    if db.store is not None:
        db.store.committed(db, [(st.table.name, b) for st, b in batches], start)
    return stopped


def _column_of_changes(arr, c: Column, stored: bool, inserted: np.ndarray):
    """An engine column of changes, its validity, and (for text the table stores uninterned, when some rows
    are deleted) the strings: those rows get code -1 until they take the stored row's codes."""
    if not stored or inserted.all() or not _is_text(arr.type):
        return (*to_engine_column(arr, c.type, c.name, stored), None)
    text = arr.combine_chunks().cast(pa.large_string())
    data = np.full(len(arr), -1, dtype=np.int64)
    valid = np.asarray(text.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    rows = np.flatnonzero(inserted)
    if len(rows):
        data[rows] = to_engine_column(text.take(pa.array(rows)), c.type, c.name, True)[0]
    return data, (None if valid.all() else valid), text


def lookup(db: Connection, table: str, keys: pa.Table) -> pa.Table:
    """The committed rows of ``table`` with the primary keys of ``keys`` (see ``Connection.lookup_arrow``)."""
    if table not in db.tables:
        raise ProgrammingError(f"table {table!r} does not exist")
    st = db.tables[table]
    t = st.table
    if not t.primary_key:
        raise ProgrammingError(f"table {table!r} has no primary key to look rows up by")
    cols, masks = [], []
    for p in t.primary_key:
        c = t.columns[p]
        if c.name not in keys.schema.names:
            raise ProgrammingError(f"key column {c.name!r} of table {table!r} is missing from the lookup")
        col, mask = to_engine_column(keys.column(c.name), c.type, c.name)
        cols.append(col)
        masks.append(mask)
    found = None
    if keys.num_rows:
        found, _ = st.arranged.trace.gather(*state.unique(key_hash(cols, masks, keys.num_rows), cols, masks))
    if found is None:
        return pa.Table.from_arrays(
            [to_arrow_column(np.zeros(0, c.type.dtype), None, c.type) for c in t.columns],
            names=[c.name for c in t.columns],
        )
    total, _ = consolidate(found.with_times(np.zeros((len(found), 1), np.int64)))
    rep = np.repeat(np.arange(len(total)), np.maximum(total.diffs, 0))
    layout = state.column_layout(t, len(t.columns), st.arranged.nkey)
    arrays = []
    for i, c in enumerate(t.columns):
        k = layout.index(i)
        m = total.valid[k]
        arrays.append(to_arrow_column(total.columns[k][rep], None if m is None else m[rep], c.type))
    return pa.Table.from_arrays(arrays, names=[c.name for c in t.columns])


def fetch(db: Connection) -> pa.Table:
    """The rows of the last query as a ``pyarrow.Table`` (see ``Connection.fetch_arrow``)."""
    if db._result is None:
        return pa.table({})
    cols, valid, mult, columns = db._result
    db._result = None
    rep = np.repeat(np.arange(len(mult)), mult)
    arrays = [
        to_arrow_column(c[rep], None if m is None else m[rep], col.type)
        for c, m, col in zip(cols, valid, columns, strict=True)
    ]
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns])
