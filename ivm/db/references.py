"""Foreign keys: what a change must find in the tables it references, and what it does to the rows
referencing it.

A FOREIGN KEY is checked as PostgreSQL checks one that is not deferrable: at the end of the statement, against
the tables as the statement leaves them (committed rows, the transaction's earlier changes and this one).
Every row the change adds whose key columns hold no NULL (MATCH SIMPLE; MATCH FULL refuses a key NULL in
part) must find its key in the referenced table, by seeking the arrangement of that table's primary key or
UNIQUE constraint. Every key the change takes out of a referenced table (one no row of the table holds any
more), or that an UPDATE changes, is sought among the referencing table's rows: the constraint's ON DELETE or
ON UPDATE action (CASCADE, SET NULL, SET DEFAULT) is a change of the referencing table of its own, checked the
same way and followed in turn; NO ACTION refuses a key taken out that is still referenced, RESTRICT also one
an UPDATE changed though another row took it. A statement is whole or nothing: the changes it made go should
a check fail.

Deleting a referenced key reads the referencing table whole, as PostgreSQL does without an index on the
referencing columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import state
from ivm.db.constraints import sorted_by_key
from ivm.engine.batch import Batch, key_hash
from ivm.engine.strings import POOL
from ivm.errors import Error, IntegrityError
from planner.values import to_python
from sql.catalog import Catalog, ForeignKey, Table
from sql.errors import error_at

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["resolved", "referencing", "write", "check_rows", "without", "after_alter", "renamed"]


# -- definitions ---------------------------------------------------------------------------------------------


def resolved(catalog: Catalog, table: Table, node: exp.Expression | None = None) -> Table:
    """``table`` with each foreign key's referenced columns named (its parent's primary key when the
    statement lists none), after checking them as PostgreSQL does: the parent is a table, the columns are its
    primary key or a UNIQUE constraint's (in any order), as many as the referencing ones and of types that
    compare as they are."""
    out = []
    statement = node
    for f in table.foreign_keys:
        node = f.node if f.node is not None else statement
        parent = table if f.parent == table.name else catalog.tables.get(f.parent)
        if parent is None:
            what = (
                "referenced relation {!r} is not a table"
                if f.parent in catalog.views
                else "relation {!r} does not exist"
            )
            raise error_at(node, what.format(f.parent))
        columns = f.parent_columns
        if not columns:
            if not parent.primary_key:
                raise error_at(node, f"there is no primary key for referenced table {parent.name!r}")
            columns = tuple(parent.columns[p].name for p in parent.primary_key)
        positions = []
        for c in columns:
            p = parent.position(c)
            if p is None:
                raise error_at(node, f"column {c!r} referenced in foreign key constraint does not exist")
            positions.append(p)
        if len(positions) != len(f.columns):
            raise error_at(node, "number of referencing and referenced columns for foreign key disagree")
        if _key_of(parent, positions) is None:
            raise error_at(
                node, f"there is no unique constraint matching given keys for referenced table {parent.name!r}"
            )
        for p, q in zip(f.columns, positions, strict=True):
            a, b = table.columns[p], parent.columns[q]
            if not _comparable(a.type, b.type):
                raise error_at(
                    node,
                    f"foreign key constraint {f.name!r} cannot be implemented: key columns {a.name!r} and "
                    f"{b.name!r} are of incompatible types: {a.type.pg_name} and {b.type.pg_name}",
                )
        out.append(dataclasses.replace(f, parent_columns=columns))
    return dataclasses.replace(table, foreign_keys=tuple(out)) if out else table


def _comparable(a, b) -> bool:
    """Whether values of types ``a`` and ``b`` are equal exactly when the engine holds them equal."""
    if a.kind != b.kind:
        return False
    if a.kind == "text":
        return bool(a.pad) == bool(b.pad)  # CHAR(n) ignores trailing spaces, TEXT and VARCHAR do not
    return a.kind not in ("decimal", "timestamp") or a.scale == b.scale


def _key_of(table: Table, positions: Sequence[int]) -> tuple[int, ...] | None:
    """The primary key or UNIQUE constraint of ``table`` made of ``positions`` (in its own order), or None."""
    if (
        table.primary_key
        and set(table.primary_key) == set(positions)
        and len(positions) == len(table.primary_key)
    ):
        return table.primary_key
    for u in table.uniques:
        if set(u.columns) == set(positions) and len(positions) == len(u.columns):
            return u.columns
    return None


def referencing(db: Connection, name: str) -> list[tuple[state.TableState, ForeignKey]]:
    """The foreign keys referencing table ``name``, each with the table that has it."""
    version, index = db.foreign_keys
    if version != db.version:
        index = {}
        for st in db.tables.values():
            for f in st.table.foreign_keys:
                index.setdefault(f.parent, []).append((st, f))
        db.foreign_keys = (db.version, index)
    return index.get(name, [])


# -- changes ---------------------------------------------------------------------------------------------------


def write(
    db: Connection,
    st: state.TableState,
    batch: Batch,
    kept: frozenset[int],
    checked,
    pairs: tuple[int, int] | None = None,
) -> None:
    """Add a checked change of a table to the transaction with what its foreign keys make of it, then check
    them; should one fail, none of the changes stays. ``checked(st, batch, kept)`` checks a change an action
    makes as the statement's own are checked. ``pairs`` (start, n) says that the change is an UPDATE's whose
    rows ``start + i`` (old) became rows ``start + n + i`` (new): where a key changes, ON UPDATE acts.

    The order is PostgreSQL's, whose triggers the first failure depends on: the change's rows are checked,
    then each foreign key referencing its table in the order they were made acts (CASCADE, SET NULL, SET
    DEFAULT) or checks that no key the change took out is still referenced (NO ACTION; RESTRICT also refuses
    a key an UPDATE changed that another row took); the changes the actions make come after, each in turn,
    in the order they were made."""
    marks = {name: len(b) for name, b in db.pending.items()}
    try:
        db.pending.setdefault(st.table.name, []).append(batch)
        queue = [(st, batch, kept, pairs)]
        for t, b, k, pr in queue:  # (growing as the actions change tables)
            check_rows(db, t.table, b, k)
            update = bool((b.diffs > 0).any())
            for child, f in referencing(db, t.table.name):
                child = db.tables[child.table.name]
                action = f.on_update if update else f.on_delete
                if update and (pr is None or k.issuperset(_parent_key(t.table, f)[0])):
                    action = "NO ACTION"  # no key changed, or none said how
                if action in ("NO ACTION", "RESTRICT"):
                    if action == "RESTRICT" and update:
                        _check_referenced(db, t, b, k, child, f, _changed(t, f, b, pr))
                    _check_referenced(db, t, b, k, child, f)
                    continue
                taken = _changed(t, f, b, pr) if update else (_removed(db, t, f, b), None)
                rows, which = _referencing_rows(db, child, f, taken[0])
                if rows is None:
                    continue
                change, k2 = _action(db, child, f, action, rows, taken[1], which)
                try:
                    change = checked(child, change, k2)
                except Error as err:
                    err.row = None  # a row of the action's change, not of the statement's
                    raise
                db.pending.setdefault(child.table.name, []).append(change)
                if action == "SET DEFAULT":  # the default may be the very key taken out
                    _check_referenced(db, t, b, k, child, f)
                queue.append(
                    (child, change, k2, None if action == "CASCADE" and not update else (0, len(rows)))
                )
    except BaseException:
        for name in list(db.pending):
            del db.pending[name][marks.get(name, 0) :]
            if not db.pending[name] and name not in marks:
                del db.pending[name]
        raise


def _changed(
    st: state.TableState, f: ForeignKey, b: Batch, pairs: tuple[int, int] | None
) -> tuple[tuple[np.ndarray, ...] | None, tuple[tuple[np.ndarray, ...], tuple] | None]:
    """The keys of ``f``'s referenced columns (in the order of the table's key made of them) that an UPDATE's
    rows (``pairs``: see ``write``) changed, none NULL, and the new key of each (columns and validity); Nones
    when there are none."""
    if pairs is None:
        return None, None
    key, _ = _parent_key(st.table, f)
    start, n = pairs
    old = np.arange(start, start + n)
    new = old + n
    differ = np.zeros(n, dtype=bool)
    held = np.ones(n, dtype=bool)
    for p in key:
        c, m = b.columns[p], b.valid[p]
        if m is not None:
            held &= m[old]
            differ |= m[old] != m[new]
            differ |= m[new] & (c[old] != c[new])
        else:
            differ |= c[old] != c[new]
    at = np.flatnonzero(held & differ)
    if not len(at):
        return None, None
    olds = tuple(_canonical(st.table, key, [b.columns[p][old[at]] for p in key]))
    news = (
        tuple(b.columns[p][new[at]] for p in key),
        tuple(None if b.valid[p] is None else b.valid[p][new[at]] for p in key),
    )
    return olds, news


def check_rows(
    db: Connection, table: Table, b: Batch, kept: frozenset[int] = frozenset(), own: Batch | None = None
) -> None:
    """Every row ``b`` adds to ``table`` finds the keys its foreign keys reference (those of its key columns
    ``kept`` says it keeps are as they were). A foreign key referencing ``table`` itself reads ``own`` as the
    table's rows, when given (a definition being checked against rows not in the database as such)."""
    added = None
    for f in table.foreign_keys:
        if kept.issuperset(f.columns):
            continue
        if added is None:
            added = np.flatnonzero(b.diffs > 0)
        if not len(added):
            return
        masks = [b.valid[p][added] for p in f.columns if b.valid[p] is not None]
        valid = np.logical_and.reduce(masks) if masks else np.ones(len(added), dtype=bool)
        if f.full and masks:
            nulls = ~np.vstack(masks)
            every = nulls.all(axis=0) if len(masks) == len(f.columns) else np.zeros(len(added), dtype=bool)
            if (nulls.any(axis=0) & ~every).any():
                raise IntegrityError(
                    f"insert or update on table {table.name!r} violates foreign key constraint {f.name!r}: "
                    "MATCH FULL does not allow mixing of null and nonnull key values"
                )
        at = added[valid]
        if not len(at):
            continue
        mine = own is not None and f.parent == table.name
        parent = table if mine else db.tables[f.parent].table
        key, order = _parent_key(parent, f)
        sought = _canonical(parent, key, [b.columns[f.columns[i]][at] for i in order])
        if mine:
            held = np.ones(len(own), dtype=bool)
            for p in key:
                if own.valid[p] is not None:
                    held &= own.valid[p]
            keys = sought
            count = _within(sought, _canonical(table, key, [own.columns[p][held] for p in key])).astype(
                np.int64
            )
        else:
            keys, count = _held(db, db.tables[f.parent], key, sought)
        missing = np.flatnonzero(count <= 0)
        if len(missing):
            names = [table.columns[p].name for p in f.columns]
            back = [order.index(i) for i in range(len(order))]  # the key's columns in the foreign key's order
            shown = _shown(parent, [key[j] for j in back], [keys[j] for j in back], missing[0])
            raise IntegrityError(
                f"insert or update on table {table.name!r} violates foreign key constraint {f.name!r}: key "
                f"({', '.join(names)})=({shown}) is not present in table {parent.name!r}"
            )


def _check_referenced(
    db: Connection,
    st: state.TableState,
    b: Batch,
    kept: frozenset[int],
    child: state.TableState,
    f: ForeignKey,
    taken: tuple | None = None,
) -> None:
    """No key ``b`` took out of table ``st`` (or of the keys ``taken``, with their new values: see
    ``_changed``) is still referenced through ``f`` (of table ``child``)."""
    removed = _removed(db, st, f, b, kept) if taken is None else taken[0]
    rows, _ = _referencing_rows(db, child, f, removed)
    if rows is None:
        return
    key, order = _parent_key(st.table, f)
    at = _canonical(child.table, [f.columns[i] for i in order], [rows.columns[f.columns[i]] for i in order])
    first = np.flatnonzero(_within(removed, at))
    back = [order.index(i) for i in range(len(order))]  # the key's columns in the foreign key's order
    names = [st.table.columns[key[j]].name for j in back]
    shown = _shown(st.table, [key[j] for j in back], [removed[j] for j in back], first[0])
    raise IntegrityError(
        f"update or delete on table {st.table.name!r} violates foreign key constraint {f.name!r} on table "
        f"{child.table.name!r}: key ({', '.join(names)})=({shown}) is still referenced from table "
        f"{child.table.name!r}"
    )


def _removed(
    db: Connection, st: state.TableState, f: ForeignKey, b: Batch, kept: frozenset[int] = frozenset()
) -> tuple[np.ndarray, ...] | None:
    """The keys of ``f``'s referenced columns (in the order of the table's key made of them) that rows ``b``
    deletes from table ``st`` carried and no row of the table holds now; None when there are none."""
    key, _ = _parent_key(st.table, f)
    if kept.issuperset(key):
        return None
    gone = np.flatnonzero(b.diffs < 0)
    for p in key:
        m = b.valid[p]
        if m is not None:
            gone = gone[m[gone]]
    if not len(gone):
        return None
    keys, count = _held(db, st, key, [b.columns[p][gone] for p in key])
    out = np.flatnonzero(count <= 0)
    return tuple(c[out] for c in keys) if len(out) else None


def _referencing_rows(
    db: Connection, child: state.TableState, f: ForeignKey, removed: tuple[np.ndarray, ...] | None
) -> tuple[Batch | None, np.ndarray | None]:
    """The rows of table ``child`` (one update per copy, as they are now) whose ``f`` columns hold one of the
    keys ``removed`` (in the order of the referenced table's key), and which key each holds; Nones when there
    are none."""
    if removed is None:
        return None, None
    _, order = _parent_key(db.tables[f.parent].table, f)
    cols, valid, mult = state.contents(child.arranged, db.pending.get(child.table.name, ()), child.table)
    positions = [f.columns[i] for i in order]
    rows = np.arange(len(mult))
    for p in positions:
        if valid[p] is not None:
            rows = rows[valid[p][rows]]
    if not len(rows):
        return None, None
    mine = _canonical(child.table, positions, [cols[p][rows] for p in positions])
    which = _match(mine, removed)
    hit = which >= 0
    rows, which = rows[hit], which[hit]
    if not len(rows):
        return None, None
    copies = np.repeat(np.arange(len(rows)), mult[rows])
    rows, which = rows[copies], which[copies]
    n = len(rows)
    batch = Batch(
        tuple(c[rows] for c in cols),
        tuple(None if m is None else m[rows] for m in valid),
        np.full((n, 1), db.time),
        np.ones(n, np.int64),
    )
    return batch, which


def _action(
    db: Connection,
    child: state.TableState,
    f: ForeignKey,
    action: str,
    rows: Batch,
    news: tuple | None,
    which: np.ndarray,
) -> tuple[Batch, frozenset[int]]:
    """The change ``action`` (CASCADE, SET NULL or SET DEFAULT, of ``f``'s) makes of the referencing ``rows``,
    and the columns it keeps: an UPDATE's CASCADE sets them to the new keys ``news`` (see ``_changed``), row
    ``i`` holding key ``which[i]``."""
    if action == "CASCADE" and news is None:
        return rows.negate(), frozenset()
    from ivm.db.dml import default  # (dml builds on the modules below it)

    table = child.table
    cols, valid = list(rows.columns), list(rows.valid)
    n = len(rows)
    _, order = _parent_key(db.tables[f.parent].table, f)
    for j, i in enumerate(order):
        p = f.columns[i]
        if action == "CASCADE":
            data, m = news[0][j][which], None if news[1][j] is None else news[1][j][which]
            cols[p], valid[p] = data.astype(table.columns[p].type.dtype), m
            continue
        value = default(table, p) if action == "SET DEFAULT" else None
        cols[p] = np.full(n, 0 if value is None else value, dtype=table.columns[p].type.dtype)
        valid[p] = None if value is not None else np.zeros(n, dtype=bool)
    new = Batch(tuple(cols), tuple(valid), rows.times, rows.diffs)
    return Batch.concat([rows.negate(), new]), frozenset(range(len(table.columns))) - set(f.columns)


# -- reading keys ----------------------------------------------------------------------------------------------


def _parent_key(parent: Table, f: ForeignKey) -> tuple[tuple[int, ...], list[int]]:
    """The referenced table's key that ``f`` references (positions, in the key's order) and, per key column,
    which of ``f``'s columns it is."""
    positions = [parent.position(c) for c in f.parent_columns]
    key = _key_of(parent, positions)
    return key, [positions.index(p) for p in key]


def _arranged(st: state.TableState, key: tuple[int, ...]):
    """The arrangement of table ``st`` by ``key``: its own, or its UNIQUE constraint's."""
    if key == st.table.primary_key:
        return st.arranged
    return next(a for u, a in st.uniques if u.columns == key)


def _held(
    db: Connection, st: state.TableState, key: tuple[int, ...], cols: list[np.ndarray]
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The distinct keys among ``cols`` (values of table ``st``'s columns ``key``, no NULL), and how many of
    the table's rows hold each now (committed, and the transaction's changes)."""
    nulls = (None,) * len(cols)
    hashes, keys, _ = state.unique(key_hash(cols, nulls, len(cols[0])), cols, nulls)
    count = np.zeros(len(hashes), dtype=np.int64)
    found, q = _arranged(st, key).trace.gather(hashes, keys, nulls, keys_only=True)
    if found is not None:
        np.add.at(count, q, found.diffs)
    for b in db.pending.get(st.table.name, ()):
        theirs = np.arange(len(b))
        for p in key:
            m = b.valid[p]
            if m is not None:
                theirs = theirs[m]
        if len(theirs):
            count += _sums(keys, [b.columns[p][theirs] for p in key], b.diffs[theirs])
    return keys, count


def _canonical(table: Table, positions: Sequence[int], cols: list[np.ndarray]) -> list[np.ndarray]:
    """Key values of ``table``'s columns at ``positions`` (no NULL) with their text in canonical codes, as
    keys compare."""
    return [
        POOL.canonical(c) if table.columns[p].type.kind == "text" else c
        for p, c in zip(positions, cols, strict=True)
    ]


def _groups(left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows of ``left`` then ``right`` (columns of equal types, no NULL; ``right`` not empty) numbered by their
    value: the numbers of ``left``'s rows, of ``right``'s, and how many values there are."""
    n = len(left[0])
    # -0.0 made 0.0, as keys compare (``state.one_zero``)
    both = [
        np.concatenate((a, b)) + (0.0 if a.dtype.kind == "f" else 0) for a, b in zip(left, right, strict=True)
    ]
    order, starts = sorted_by_key(both, np.zeros(len(both[0]), dtype=np.int8))
    number = np.empty(len(order), dtype=np.int64)
    number[order] = np.cumsum(starts) - 1
    return number[:n], number[n:], int(starts.sum())


def _within(left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> np.ndarray:
    """For each row of ``left``, whether ``right`` holds an equal row."""
    return _match(left, right) >= 0


def _match(left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> np.ndarray:
    """For each row of ``left``, the first row of ``right`` equal to it, or -1."""
    if not len(right[0]):
        return np.full(len(left[0]), -1, dtype=np.int64)
    mine, theirs, count = _groups(left, right)
    first = np.full(count, -1, dtype=np.int64)
    first[theirs[::-1]] = np.arange(len(theirs) - 1, -1, -1)
    return first[mine]


def _sums(left: Sequence[np.ndarray], right: Sequence[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """For each row of ``left``, the sum of ``weights`` of the rows of ``right`` equal to it."""
    mine, theirs, count = _groups(left, right)
    return np.bincount(theirs, weights=weights, minlength=count).astype(np.int64)[mine]


def _shown(table: Table, key: Sequence[int], cols: Sequence[np.ndarray], i: int) -> str:
    """Row ``i`` of key values ``cols`` (of ``table``'s columns ``key``) as PostgreSQL shows a key."""
    return ", ".join(
        str(to_python(c[i : i + 1], None, table.columns[p].type)[0]) for p, c in zip(key, cols, strict=True)
    )


# -- DDL -------------------------------------------------------------------------------------------------------


def without(db: Connection, child: str, names: set[str]) -> None:
    """Drop the foreign keys ``names`` of table ``child`` (DROP ... CASCADE of what they reference); a
    rollback puts them back."""
    from sql.ddl import table_sql

    st = db.tables[child]
    old, old_sql = st.table, st.sql
    new = dataclasses.replace(old, foreign_keys=tuple(f for f in old.foreign_keys if f.name not in names))
    _define(db, st, new, table_sql(new))
    if db.in_transaction or db.in_steps:
        db.undo.append(
            lambda: _define(db, db.tables[new.name], old, old_sql) if new.name in db.tables else None
        )


def renamed(db: Connection, parent: str, new: str, columns: dict[str, str]) -> None:
    """The foreign keys of other tables referencing table ``parent`` follow its renaming to ``new`` (and its
    columns' by ``columns``); a rollback names them back."""
    from sql.ddl import referencing_renamed, table_sql

    for st in list(db.tables.values()):
        if st.table.name in (parent, new):
            continue
        old, old_sql = st.table, st.sql
        table = referencing_renamed(old, parent, new, columns)
        if table is not old:
            _define(db, st, table, table_sql(table))
            if db.in_transaction or db.in_steps:
                db.undo.append(
                    lambda st=st, old=old, old_sql=old_sql: (
                        _define(db, st, old, old_sql) if db.tables.get(old.name) is st else None
                    )
                )


def _define(db: Connection, st: state.TableState, table: Table, sql: str) -> None:
    st.table = table
    st.sql = sql
    db.catalog.tables[table.name] = table
    state.changed(db)


def after_alter(
    db: Connection, node: exp.Expression, old: Table, new: Table, columns: dict[str, str], rows=None
) -> Table:
    """``new``, what ALTER TABLE makes of table ``old`` (its columns renamed by ``columns``), with its foreign
    keys resolved; refused where it breaks a foreign key: the columns another table references dropped or of
    another type, or their key dropped; a foreign key it adds that its ``rows`` (columns and validity, in
    ``new``'s order) break."""
    new = resolved(db.catalog, new, node)
    for st, f in referencing(db, old.name):
        if st.table.name == old.name:
            continue
        for c in f.parent_columns:
            c2 = columns.get(c, c)
            p = new.position(c2)
            if p is None or new.columns[p].type != old.columns[old.position(c)].type:
                what = "drop" if p is None else "alter type of"
                raise error_at(
                    node,
                    f"cannot {what} column {c!r} of table {old.name!r}: foreign key constraint {f.name!r} on "
                    f"table {st.table.name!r} depends on it",
                )
        if _key_of(new, [new.position(columns.get(c, c)) for c in f.parent_columns]) is None:
            raise error_at(
                node,
                f"cannot drop the key of table {old.name!r} that foreign key constraint {f.name!r} on table "
                f"{st.table.name!r} references",
            )
    before = {f.name for f in old.foreign_keys}
    added = [f for f in new.foreign_keys if f.name not in before]
    if added and rows is not None:
        cols, valid = rows
        n = len(cols[0]) if cols else 0
        probe = dataclasses.replace(new, foreign_keys=tuple(added))
        b = Batch(tuple(cols), tuple(valid), np.zeros((n, 1), np.int64), np.ones(n, np.int64))
        check_rows(db, probe, b, own=b)
    return new
