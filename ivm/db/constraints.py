"""Constraints: checking a change to a table before it joins the transaction.

A change must fit its columns' declared types (integer ranges, text lengths), NOT NULL, the table's CHECK
constraints, its primary key and its UNIQUE constraints, against the committed rows and the transaction's
pending changes; a row deleted must be in the table. Nothing reaches the engine before these checks pass,
so a bad row rejects its statement and leaves every table and view as it was. Tables storing text
uninterned also need a deleted row to carry the codes its insertion did: found here from the stored rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ivm.db import state
from ivm.engine.batch import Batch, consolidate, key_hash, rows_equal
from ivm.engine.dataflow import Arranged
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.strings import POOL
from ivm.errors import DataError, IntegrityError
from planner.values import to_python
from sql.catalog import Table

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["check_write", "check_rows", "check_present", "settle_stored", "sorted_by_key"]


def check_write(
    db: Connection, st: state.TableState, batch: Batch, kept: frozenset[int] = frozenset()
) -> Batch:
    """Check a change to a table against its types and constraints (declared types, NOT NULL, CHECK, the
    primary key, UNIQUE), in that order; returns the change as the table stores it (declared types may cut
    text).

    ``kept`` names columns the change leaves as they were in every row it rewrites (an UPDATE's columns not
    assigned: each row it adds replaces one it removes, a row of the table): a key made of them alone keeps
    every multiplicity, so it is not checked. Nor is any key when the change only removes rows."""
    batch = check_rows(db, st, batch)
    if len(batch) and bool((batch.diffs < 0).all()):
        return batch
    table = st.table
    if table.primary_key and not kept.issuperset(table.primary_key):
        _check_key(db, st, batch, table.primary_key, st.arranged)
    for u, arranged in st.uniques:
        if not kept.issuperset(u.columns):
            _check_key(db, st, batch, u.columns, arranged, u.name)
    return batch


def check_rows(db: Connection, st: state.TableState, batch: Batch) -> Batch:
    """Check the rows a change inserts, each on its own (declared types, NOT NULL, CHECK; not the keys, which
    compare rows with each other); returns the change as the table stores it."""
    table = st.table
    if st.admits is not None and not st.admits(batch):
        batch = _admit(db, table, batch)
    for i, c in enumerate(table.columns):
        m = batch.valid[i]
        if not c.nullable and m is not None:
            bad = np.flatnonzero(~m & (batch.diffs > 0))
            if len(bad):
                raise at_row(
                    IntegrityError(
                        f"null value in column {c.name!r} of table {table.name!r} violates the not-null "
                        f"constraint (row {int(bad[0]) + 1})"
                    ),
                    bad[0],
                )
    for check, violated in st.checks:
        _check(table, check, violated, batch)
    return batch


def _admit(db: Connection, table: Table, batch: Batch) -> Batch:
    """The rows a change inserts checked against their columns' declared types: SMALLINT and INTEGER
    ranges, VARCHAR(n) and CHAR(n) lengths (spaces beyond the length are cut, as PostgreSQL does; CHAR's
    trailing spaces are dropped, see ``sql.types.Domain``)."""
    cols = None
    inserted = batch.diffs > 0
    for p, (c, d) in enumerate(zip(table.columns, table.domains, strict=True)):
        if d is None:
            continue
        data, m = batch.columns[p], batch.valid[p]
        rows = inserted if m is None else inserted & m
        if d.low is not None:
            bad = np.flatnonzero(rows & ((data < d.low) | (data > d.high)))
            if len(bad):
                raise at_row(
                    DataError(
                        f"{d.name} out of range: {int(data[bad[0]])} (column {c.name!r} of table "
                        f"{table.name!r}, row {int(bad[0]) + 1})"
                    ),
                    bad[0],
                )
            continue
        at = np.flatnonzero(rows)
        if not len(at):
            continue
        text = POOL.strings(data[at])
        length = np.asarray(pc.utf8_length(text).to_numpy(zero_copy_only=False))
        core = np.asarray(pc.utf8_length(pc.utf8_rtrim(text, characters=" ")).to_numpy(zero_copy_only=False))
        bad = np.flatnonzero(core > d.length)
        if len(bad):
            raise at_row(
                DataError(
                    f"value too long for type {d.name} (column {c.name!r} of table {table.name!r}, row "
                    f"{int(at[bad[0]]) + 1})"
                ),
                at[bad[0]],
            )
        # spaces beyond the length are cut; CHAR(n) drops its trailing spaces altogether
        changed = np.flatnonzero((length > core) if d.padded else (length > d.length))
        if len(changed):
            text = text.take(pa.array(changed))
            cut = (
                pc.utf8_rtrim(text, characters=" ") if d.padded else pc.utf8_slice_codeunits(text, 0, d.length)
            )
            cols = list(batch.columns) if cols is None else cols
            cols[p] = cols[p].copy()
            loose = p in db.registry.uninterned(table.name)
            cols[p][at[changed]] = POOL.encode_arrow(cut, stored=loose)
    return batch if cols is None else Batch(tuple(cols), batch.valid, batch.times, batch.diffs)


def _check(table: Table, check, violated, batch: Batch) -> None:
    """No row the change inserts may make ``check`` FALSE."""
    rows = np.flatnonzero(batch.diffs > 0)
    if not len(rows):
        return
    part = batch.take(rows) if len(rows) < len(batch) else batch
    try:
        bad = np.flatnonzero(violated(part.columns, part.valid))
    except EvaluationError as err:
        raise DataError(f"check constraint {check.name!r} of table {table.name!r}: {err}") from None
    if len(bad):
        raise at_row(
            IntegrityError(
                f"new row for relation {table.name!r} violates check constraint {check.name!r} (row "
                f"{int(rows[bad[0]]) + 1})"
            ),
            rows[bad[0]],
        )


def _check_key(
    db: Connection,
    st: state.TableState,
    batch: Batch,
    pk: tuple[int, ...],
    arranged: Arranged,
    unique: str | None = None,
) -> None:
    """No two rows of the table (committed, pending and changed) may share a key of ``arranged``: the
    primary key, or with ``unique`` the columns of that UNIQUE constraint (rows with a NULL in them are
    exempt: NULLs are distinct)."""
    table = st.table
    before = db.pending.get(table.name)
    if unique is not None:
        batch = _without_nulls(batch, pk)
        before = [_without_nulls(b, pk) for b in before or ()]
        if not len(batch):
            return
    cols, valid = batch.select(pk)
    if not before:
        # the first change of the table in its transaction: deletions cannot duplicate a key, and
        # insertions of distinct keys only need the keys' committed multiplicities
        if (batch.diffs < 0).all():
            return
        held = _count_distinct(arranged.trace, cols, valid) if (batch.diffs == 1).all() else None
        if held is not None:
            present = np.flatnonzero(held > 0)
            if len(present):
                _duplicate_key(table, cols, present[:1], pk, unique)
            return
    h = key_hash(cols, valid, len(batch))
    keys = Batch(cols, valid, batch.times, batch.diffs)
    # the resulting multiplicity of every key touched: committed rows plus all pending changes
    found, q = arranged.trace.gather(*state.unique(h, cols, valid), keys_only=True)
    parts = [keys.with_times(np.zeros((len(keys), 1), np.int64))]
    if found is not None:
        kc, kv = found.select(range(len(pk)))
        parts.append(Batch(kc, kv, np.zeros((len(found), 1), np.int64), found.diffs))
    for b in before or []:
        c, v = b.select(pk)
        parts.append(Batch(c, v, np.zeros((len(b), 1), np.int64), b.diffs))
    total, _ = consolidate(state.one_zero(Batch.concat(parts)))
    dup = np.flatnonzero(total.diffs > 1)
    if len(dup):
        _duplicate_key(table, total.columns, dup[:1], pk, unique)


def _duplicate_key(table: Table, key_cols: tuple, first: np.ndarray, pk: tuple, unique: str | None) -> None:
    shown = ", ".join(
        f"{table.columns[p].name}={to_python(c[first], None, table.columns[p].type)[0]!r}"
        for p, c in zip(pk, key_cols, strict=True)
    )
    what = f"unique constraint {unique!r}" if unique else f"the primary key of {table.name!r}"
    raise IntegrityError(f"duplicate key value violates {what} ({shown})")


def settle_stored(db: Connection, st: state.TableState, batch: Batch, tx: np.ndarray, texts: dict) -> Batch:
    """The changes of several transactions to a table storing text uninterned, made consistent: a row
    deleted in the first transaction that changes its key takes the codes the table holds it under, and
    every other change of a key changed more than once is written in canonical codes, so that each
    deletion carries the codes its insertion did. ``texts`` holds the strings of columns whose deleted
    rows have no codes yet."""
    deleted = batch.diffs < 0
    if not deleted.any():
        return batch
    keys = [batch.columns[p] for p in st.table.primary_key]
    order, starts = sorted_by_key(keys, tx)
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    count = np.diff(np.append(first, len(order)))
    opening = tx[order] == tx[order][first][group]  # changes in the key's first transaction
    from_table = np.zeros(len(order), dtype=bool)
    from_table[order] = deleted[order] & opening
    canonical = np.zeros(len(order), dtype=bool)
    canonical[order] = (count[group] > 1) & ~from_table[order]
    batch = _stored_codes(db, st, batch, np.flatnonzero(from_table), texts=texts)[0]
    cols = list(batch.columns)
    for p in db.registry.uninterned(st.table.name):
        col = cols[p] = cols[p].copy()
        redo = np.flatnonzero(canonical & (col >= 0))
        col[redo] = POOL.canonical(col[redo])
        if p in texts:  # deleted rows not found stored: their text interned
            rows = np.flatnonzero(col < 0)
            if len(rows):
                col[rows] = POOL.encode_arrow(texts[p].take(pa.array(rows)))
    return Batch(tuple(cols), batch.valid, batch.times, batch.diffs)


def _stored_codes(
    db: Connection, st: state.TableState, batch: Batch, rows: np.ndarray, pending=(), texts: dict | None = None
) -> tuple[Batch, bool]:
    """``batch`` with the text that the table stores uninterned, in each of the deleted ``rows``, under the
    codes the table holds it with: those of the live row (committed, or among the ``pending`` changes)
    with the same key, when all its columns are the same (text compared by string; ``texts`` maps a
    column to its strings when the batch holds no codes for it). Also whether each of ``rows`` met a live
    row of its own in this way."""
    loose = sorted(db.registry.uninterned(st.table.name))
    rows = rows[batch.diffs[rows] < 0]
    if not loose or not len(rows):
        return batch, not len(rows)
    texts = texts or {}
    table = st.table
    nkey = len(table.primary_key)
    layout = state.column_layout(table, len(table.columns), nkey)
    keys = tuple(batch.columns[p][rows] for p in table.primary_key)
    nulls = (None,) * nkey
    found, _ = st.arranged.trace.gather(*state.unique(key_hash(keys, nulls, len(rows)), keys, nulls))
    parts = [] if found is None else [found.with_times(np.zeros((len(found), 1), np.int64))]
    for b in pending:
        parts.append(Batch(*b.select(layout), np.zeros((len(b), 1), np.int64), b.diffs))
    if not parts:
        return batch, False
    live, _ = consolidate(Batch.concat(parts))
    live = live.take(np.flatnonzero(live.diffs > 0))
    if not len(live):
        return batch, False
    # each deleted row meets the live row of its key: sorted by key, a live row comes first
    side = np.concatenate((np.zeros(len(live), np.int8), np.ones(len(rows), np.int8)))
    both = [np.concatenate((live.columns[j], keys[j])) for j in range(nkey)]
    order, starts = sorted_by_key(both, side)
    group = np.cumsum(starts)
    last_live = np.maximum.accumulate(np.where(side[order] == 0, np.arange(len(order)), -1))
    mine = np.flatnonzero(side[order] == 1)
    partner = last_live[mine]
    met = partner >= 0
    met[met] = group[partner[met]] == group[mine[met]]
    which = order[mine[met]] - len(live)  # positions in ``rows``
    src = order[partner[met]]  # positions in ``live``
    at = rows[which]
    others = [p for p in range(len(table.columns)) if p not in loose]
    same = rows_equal(
        [batch.columns[p][at] for p in others],
        [None if batch.valid[p] is None else batch.valid[p][at] for p in others],
        [live.columns[layout.index(p)][src] for p in others],
        [None if live.valid[layout.index(p)] is None else live.valid[layout.index(p)][src] for p in others],
        n=len(at),
    )
    for p in loose:
        k = layout.index(p)
        same &= _same_text(batch.columns[p], batch.valid[p], texts.get(p), at, live, k, src)
    at, src = at[same], src[same]
    cols = list(batch.columns)
    for p in loose:
        cols[p] = cols[p].copy()
        cols[p][at] = live.columns[layout.index(p)][src]
    whole = len(at) == len(rows) and len(np.unique(src)) == len(src)
    return Batch(tuple(cols), batch.valid, batch.times, batch.diffs), whole


def check_present(db: Connection, st: state.TableState, batch: Batch, texts: dict | None = None) -> Batch:
    """Every row deleted by ``batch`` must be in the table (with this transaction's changes). Returns the
    batch with the codes the table holds its rows' text under (see ``_stored_codes``; ``texts`` holds the
    strings of columns given as text rather than codes)."""
    pending = db.pending.get(st.table.name)
    once = not pending and bool((batch.diffs == -1).all())
    if db.registry.uninterned(st.table.name):
        if once and not texts and _committed(db, st, batch):
            return batch  # a few rows, given in the codes they are stored with (a small transaction's)
        batch, found = _stored_codes(db, st, batch, np.arange(len(batch)), pending or (), texts)
        if once and found:
            return batch
    elif once:
        # the first change of the table in its transaction, one copy of each row: when the rows' keys are
        # distinct, each must match a committed row with the same key exactly
        held = _committed(db, st, batch)
        if held:
            return batch  # else the way below finds which row is missing
    key = state.column_layout(st.table, len(st.table.columns), st.arranged.nkey)
    changes = [batch, *(pending or ())]
    parts = [Batch(*b.select(key), np.zeros((len(b), 1), np.int64), b.diffs) for b in changes]
    every = Batch.concat(parts)
    cols, valid = every.select(range(st.arranged.nkey))
    found, _ = st.arranged.trace.gather(*state.unique(key_hash(cols, valid, len(every)), cols, valid))
    if found is not None:
        parts.append(found.with_times(np.zeros((len(found), 1), np.int64)))
    total, _ = consolidate(Batch.concat(parts))
    missing = np.flatnonzero(total.diffs < 0)
    if len(missing):
        layout = state.column_layout(st.table, len(st.table.columns), st.arranged.nkey)
        shown = ", ".join(
            f"{st.table.columns[p].name}={_value(st.table, p, total.columns[j], total.valid[j], missing[0])!r}"
            for j, p in enumerate(layout[: st.arranged.nkey])
        )
        raise DataError(f"a deleted row is not in table {st.table.name!r} ({shown})")
    return batch


def at_row(err: Exception, i) -> Exception:
    """``err`` knowing the position of its row among the statement's rows (``err.row``, from 0), so that a
    caller holding those rows can name the row by its key."""
    err.row = int(i)
    return err


def _value(table: Table, p: int, col: np.ndarray, valid: np.ndarray | None, i: int) -> object:
    """The Python value of row ``i`` of column ``p`` of ``table`` (``col`` and ``valid`` its data)."""
    return to_python(col[i : i + 1], None if valid is None else valid[i : i + 1], table.columns[p].type)[0]


def _committed(db: Connection, st: state.TableState, batch: Batch) -> bool | None:
    """Whether each row of ``batch`` (keys distinct) matches a committed row exactly; None when the keys
    are not distinct."""
    key = state.column_layout(st.table, len(st.table.columns), st.arranged.nkey)
    cols, valid = batch.select(key)
    held = _count_distinct(st.arranged.trace, cols, valid, st.arranged.nkey)
    return None if held is None else bool((held >= 1).all())


def _count_distinct(trace, cols: tuple, valid: tuple, nkey: int | None = None) -> np.ndarray | None:
    """For each row (of key columns, or of whole rows whose first ``nkey`` columns are the key), its committed
    multiplicity; ``None`` when two keys share a hash."""
    nkey = len(cols) if nkey is None else nkey
    h = key_hash(cols[:nkey], valid[:nkey], len(cols[0]))
    if len(h) > 1:
        order = np.argsort(h)
        if (h[order[1:]] == h[order[:-1]]).any():
            return None
    return trace.count(h, cols, valid)


def _without_nulls(batch: Batch, positions: tuple[int, ...]) -> Batch:
    """The rows of ``batch`` with no NULL in the columns at ``positions``."""
    keep = None
    for p in positions:
        m = batch.valid[p]
        if m is not None:
            keep = m if keep is None else keep & m
    return batch if keep is None or keep.all() else batch.take(np.flatnonzero(keep))


def sorted_by_key(keys: list[np.ndarray], then: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order sorting rows by their key columns, then by ``then``; and, in that order, where each key's
    rows start."""
    order = np.lexsort((then, *reversed(keys)))
    starts = np.zeros(len(order), dtype=bool)
    starts[0] = True
    for k in keys:
        ks = k[order]
        starts[1:] |= ks[1:] != ks[:-1]
    return order, starts


def _same_text(
    codes: np.ndarray, valid, text, rows: np.ndarray, live: Batch, k: int, src: np.ndarray
) -> np.ndarray:
    """Whether the text at ``rows`` of a column (``codes`` with validity ``valid``, or the strings ``text``)
    equals that of column ``k`` of ``live`` at ``src``, NULL equal to NULL."""
    b = live.columns[k][src]
    va = np.ones(len(rows), dtype=bool) if valid is None else valid[rows]
    vb = np.ones(len(src), dtype=bool) if live.valid[k] is None else live.valid[k][src]
    if text is not None:
        same = pc.equal(text.take(pa.array(rows)), POOL.strings(b)).fill_null(True)
        return np.asarray(same.to_numpy(zero_copy_only=False)) & (va == vb)
    a = codes[rows]
    same = (a == b) | ~va
    differ = np.flatnonzero(~same)
    if len(differ):
        same[differ] = np.asarray(
            pc.equal(POOL.strings(a[differ]), POOL.strings(b[differ])).to_numpy(zero_copy_only=False)
        )
    return same & (va == vb)
