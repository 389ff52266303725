"""INSERT ... ON CONFLICT: DO NOTHING and DO UPDATE, as PostgreSQL decides them, whole arrays at a time.

The arbiters are the unique constraints the conflict target names (its columns must be those of the primary
key or of a UNIQUE constraint, in any order; or ``ON CONSTRAINT name``), or with DO NOTHING and no target,
every one. PostgreSQL proposes the rows one after another, each seeing what the ones before it did; so:

- DO NOTHING skips a row whose key (on any arbiter, NULLs never conflicting) is in the table or is that of
  a row inserted before it in the statement. Rows are decided in rounds: a row conflicting with the table or
  with a row already inserted is skipped, and a row is inserted once no undecided row before it shares one
  of its keys; every round decides at least the first undecided row, and one or two rounds decide all rows
  but chains of rows linked through different arbiters.
- DO UPDATE updates the row of the table with the proposed row's key (``excluded``) when its WHERE holds,
  and inserts a row whose key is new. A row whose key a row before it in the statement inserted or updated
  is PostgreSQL's error ("cannot affect row a second time"); rows before the first one whose WHERE holds
  leave the row alone.

Rows are checked (types, NOT NULL, CHECK) as proposed, before any is skipped, as PostgreSQL checks them; the
change made is then checked as any other (the other unique constraints included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import constraints, rows
from ivm.db.returning import Scope, resolver
from ivm.engine.batch import Batch
from ivm.engine.operators.basic import EvaluationError
from ivm.errors import DataError, ProgrammingError
from planner.expr import compile_predicate
from sql.errors import error_at
from sql.scalar import boolean, translate_scalar

if TYPE_CHECKING:
    from ivm.db import state
    from ivm.db.connection import Connection
    from ivm.db.dml import Written

__all__ = ["on_conflict"]


def on_conflict(db: Connection, stmt: exp.Insert, st: state.TableState, alias: str, proposed: Batch) -> Written:
    """INSERT ... ON CONFLICT with the rows ``proposed`` (see the module's doc)."""
    from ivm.db.dml import Written, assign_values, assignments, returning_of, target_of

    conflict = stmt.args["conflict"]
    table = st.table
    update = conflict.args["action"].name.upper() == "DO UPDATE"
    arbiters = _arbiters(st, conflict, update)
    for node in conflict.find_all(exp.Subquery, exp.Exists):
        raise error_at(node, "a subquery in ON CONFLICT DO UPDATE is not supported", unsupported=True)
    proposed = constraints.check_rows(db, st, proposed)
    ret = returning_of(db, stmt, st, target_of(stmt)[0], alias)
    n = len(proposed)
    if not update:
        keep = _do_nothing(db, st, arbiters, proposed)
        inserted = proposed.take(keep)
        return Written(st, inserted, len(keep), ret)
    key, arranged = arbiters[0]
    k_cols = [proposed.columns[p] for p in key]
    k_valid = [proposed.valid[p] for p in key]
    whole = _not_null(k_valid, n)
    live_cols, live_valid, _ = rows.live(db, st, key, arranged, _take(k_cols, whole), _take(k_valid, whole))
    at = np.full(n, -1, np.int64)
    if whole.any():
        at[whole] = rows.match(
            _take(k_cols, whole),
            _take(k_valid, whole),
            [live_cols[p] for p in key],
            [live_valid[p] for p in key],
        )
    order, gid = rows.groups(k_cols, k_valid, n)
    gid = np.where(whole, gid, -1 - np.arange(n))  # a key with a NULL conflicts with nothing
    gid = np.unique(gid, return_inverse=True)[1].ravel()
    width = len(table.columns)
    # the rows meeting a row of the table: the table's row, then the proposed one (``excluded``)
    hit = np.flatnonzero(at >= 0)
    both_cols = [c[at[hit]] for c in live_cols] + [c[hit] for c in proposed.columns]
    both_valid = [None if m is None else m[at[hit]] for m in live_valid]
    both_valid += [None if m is None else m[hit] for m in proposed.valid]
    names = [c.name for c in table.columns]
    types = [c.type for c in table.columns]
    scopes = {alias: Scope(names, types), "excluded": Scope(names, types, width)}
    resolve = resolver(scopes, table, alias)
    where = conflict.args.get("where")
    takes = np.ones(len(hit), dtype=bool)
    if where is not None and len(hit):
        pred = compile_predicate(boolean(where, translate_scalar(where.this, resolve)))
        try:
            takes = np.asarray(pred(both_cols, both_valid), dtype=bool)
        except EvaluationError as err:
            raise DataError(f"ON CONFLICT DO UPDATE ... WHERE: {err}") from None
    # per key, the first row that acts on it (inserts it, or updates it when WHERE holds): none may follow
    acts = np.where(at < 0, True, False)
    acts[hit] = takes
    groups = gid.max() + 1 if n else 0
    first = np.full(groups, n, np.int64)
    np.minimum.at(first, gid[acts], np.flatnonzero(acts))
    last = np.full(groups, -1, np.int64)
    np.maximum.at(last, gid, np.arange(n))
    again = np.flatnonzero(last > first)
    if len(again):
        g = again[0]
        i, j = int(first[g]), int(np.flatnonzero((gid == g) & (np.arange(n) > first[g]))[0])
        shown = rows.describe(table, key, k_cols, k_valid, i)
        raise error_at(
            conflict,
            f"ON CONFLICT DO UPDATE command cannot affect row a second time (rows {i + 1} and {j + 1} proposed "
            f"for insertion both have {shown}); ensure that no rows proposed for insertion within the same "
            "command have duplicate constrained values",
            cls=ProgrammingError,
        )
    insert = np.flatnonzero(at < 0)
    chosen = np.flatnonzero(takes)
    upd = hit[chosen]
    old = Batch.build(
        [c[at[upd]] for c in live_cols],
        [None if m is None else m[at[upd]] for m in live_valid],
        np.full(len(upd), db.time),
        np.ones(len(upd), np.int64),
    )
    sub_cols = [c[chosen] for c in both_cols]
    sub_valid = [None if m is None else m[chosen] for m in both_valid]
    assigns = assignments(table, conflict.expressions)
    new_cols, new_valid = assign_values(db, table, assigns, resolve, sub_cols, sub_valid, len(upd))
    new = Batch.build(new_cols, new_valid, old.times, old.diffs)
    change = Batch.concat([proposed.take(insert), old.negate(), new])
    return Written(st, change, len(insert) + len(upd), ret, pairs=(len(insert), len(upd)))


def _arbiters(
    st: state.TableState, conflict: exp.OnConflict, update: bool
) -> list[tuple[tuple[int, ...], object]]:
    """The unique constraints deciding conflicts: (columns, the arrangement by them)."""
    table = st.table
    every = []
    if table.primary_key:
        every.append((table.primary_key_name, table.primary_key, st.arranged))
    every += [(u.name, u.columns, arranged) for u, arranged in st.uniques]
    named = conflict.args.get("constraint")
    keys = conflict.args.get("conflict_keys")
    if named is not None:
        found = [(cols, arr) for name, cols, arr in every if name == named.name]
        if not found:
            raise error_at(named, f"constraint {named.name!r} for table {table.name!r} does not exist")
        return found[:1]
    if not keys:
        if update:
            raise error_at(
                conflict,
                "ON CONFLICT DO UPDATE requires inference specification or constraint name (for example, ON "
                "CONFLICT (column_name))",
            )
        return [(cols, arr) for _, cols, arr in every]
    wanted = set()
    for k in keys:
        col = k.this if isinstance(k, exp.Ordered) else k
        if isinstance(k, exp.Ordered) and k.args.get("desc"):
            raise error_at(k, "an ordering in an ON CONFLICT target is not supported", unsupported=True)
        if not isinstance(col, exp.Column) or col.table:
            raise error_at(col, "ON CONFLICT on an expression is not supported", unsupported=True)
        p = table.position(col.name)
        if p is None:
            raise error_at(col, f"column {col.name!r} does not exist")
        wanted.add(p)
    found = [(cols, arr) for _, cols, arr in every if set(cols) == wanted]
    if not found:
        raise error_at(
            conflict, "there is no unique or exclusion constraint matching the ON CONFLICT specification"
        )
    return found


def _do_nothing(db: Connection, st: state.TableState, arbiters: list, proposed: Batch) -> np.ndarray:
    """The rows DO NOTHING inserts (positions, in order)."""
    n = len(proposed)
    skip = np.zeros(n, dtype=bool)
    gids = []
    for key, arranged in arbiters:
        k_cols = [proposed.columns[p] for p in key]
        k_valid = [proposed.valid[p] for p in key]
        whole = _not_null(k_valid, n)
        live_cols, live_valid, _ = rows.live(db, st, key, arranged, _take(k_cols, whole), _take(k_valid, whole))
        if whole.any():
            at = rows.match(
                _take(k_cols, whole),
                _take(k_valid, whole),
                [live_cols[p] for p in key],
                [live_valid[p] for p in key],
            )
            skip[np.flatnonzero(whole)[at >= 0]] = True
        gid = rows.groups(k_cols, k_valid, n)[1]
        gids.append(np.where(whole, gid, -1))
    undecided = ~skip
    inserted = np.zeros(n, dtype=bool)
    index = np.arange(n)
    while undecided.any():
        taken = [np.zeros(n + 1, dtype=bool) for _ in gids]  # per arbiter, the keys inserted (by group)
        for t, gid in zip(taken, gids, strict=True):
            t[gid[inserted]] = True
            t[-1] = False  # group -1: a NULL key
        clash = np.zeros(n, dtype=bool)
        for t, gid in zip(taken, gids, strict=True):
            clash |= t[gid]
        undecided &= ~clash
        ready = undecided.copy()
        for gid in gids:
            first = np.full(n + 1, n, np.int64)
            mine = undecided & (gid >= 0)
            np.minimum.at(first, gid[mine], index[mine])
            ready &= (gid < 0) | (first[gid] == index)
        inserted |= ready
        undecided &= ~ready
    return np.flatnonzero(inserted)


def _not_null(valid: list, n: int) -> np.ndarray:
    out = np.ones(n, dtype=bool)
    for m in valid:
        if m is not None:
            out &= m
    return out


def _take(cols: list, at: np.ndarray) -> list:
    return [None if c is None else c[at] for c in cols]
