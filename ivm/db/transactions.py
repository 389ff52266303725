"""Transactions: a connection's pending changes, and how they commit or roll back.

Every transaction is one logical time. Its checked changes wait in ``Connection.pending`` until COMMIT sends
them to the tables' inputs and steps the engine; a rollback (or a failed statement) drops them and removes
the relations the transaction created. A commit that fails half-way is taken back, so that every table and
view is as before it, or the connection is marked broken when that cannot be done exactly.
"""

from __future__ import annotations

import datetime as dt
import warnings
from typing import TYPE_CHECKING

import numpy as np

from ivm.db import constraints, references, state
from ivm.engine.batch import Batch
from ivm.engine.dataflow import Dataflow
from ivm.errors import InterfaceError, InternalError, OperationalError, Warning
from planner.compile import compile_view

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["begin", "write", "commit", "advance", "stop_failed", "rollback", "failure", "usable"]


def begin(db: Connection, implicit: bool) -> None:
    """Open a transaction: ``implicit``, that of a string of statements rather than a BEGIN ... block."""
    db.in_transaction = True
    db.implicit = implicit
    db.aborted = False
    db.undo = []
    db.started_at = dt.datetime.now(dt.UTC)  # now() and current_timestamp for every statement of it


def write(
    db: Connection,
    st: state.TableState,
    batch: Batch,
    then=None,
    kept: frozenset[int] = frozenset(),
    foreign_keys: bool = True,
    pairs: tuple[int, int] | None = None,
):
    """Check a change to a table against its types and constraints, then add it to the transaction (or
    commit it, outside one), with the changes its foreign keys' actions make (see ``references``; not with
    ``foreign_keys`` False: a TRUNCATE of every table involved). ``then``, given, is called with the change
    as checked before it is added (what it raises rejects the change), and what it returns is returned;
    ``kept``: see ``constraints.check_write``; ``pairs``, an UPDATE's old and new rows: see
    ``references.write``."""
    batch = constraints.check_write(db, st, batch, kept)
    out = then(batch) if then is not None else None
    if foreign_keys and (st.table.foreign_keys or references.referencing(db, st.table.name)):
        references.write(db, st, batch, kept, lambda t, b, k: constraints.check_write(db, t, b, k), pairs)
    else:
        db.pending.setdefault(st.table.name, []).append(batch)
    if not db.in_transaction:
        commit(db)
    return out


def commit(db: Connection) -> None:
    """Commit the transaction as the next logical time: its changes go to the tables' inputs and the engine
    brings every view up to date (see ``_take_back`` should that fail half-way)."""
    sent = []
    start = db.time
    for name, batches in db.pending.items():
        if batches:
            b = Batch.concat(batches)
            st = db.tables[name]
            b = b.with_times(np.full((len(b), 1), db.time))
            st.input.send(b)
            sent.append((st, b))
    undo = db.undo
    db.pending = {}
    db.in_transaction = db.implicit = db.aborted = False
    db.undo = []
    advance(db)
    try:
        db.engine.step()
    except BaseException as err:
        _take_back(db, sent, undo, err)
    stop_failed(db, db.engine.failed)
    if db.store is not None:  # the changes as sent, at time ``start``
        db.store.committed(db, [(st.table.name, b) for st, b in sent], start)


def advance(db: Connection) -> None:
    """Move the tables' inputs to the next logical time."""
    db.time += 1
    for st in db.tables.values():
        st.input.advance_to(db.time)


def _take_back(db: Connection, sent: list, undo: list, err: BaseException) -> None:
    """A commit stopped half-way (out of memory, interrupted) in some view's dataflow: the tables take
    the transaction back at the next time, the views whose state it left inexact (that dataflow's and
    those reading it) are built anew from the tables, and the relations the transaction created go.
    Every table and view is then as before the transaction. Raises the error saying so."""
    crashed = db.engine.crashed
    owners = {st.df: name for name, st in db.views.items()}
    if crashed not in owners:  # the tables or an index themselves: nothing exact to rebuild from
        db.broken = f"{type(err).__name__} while committing left the tables inexact: {err}"
        raise InternalError(f"{db.broken}; the database cannot be used any more") from err
    for st, b in sent:
        st.input.send(b.negate().with_times(np.full((len(b), 1), db.time)))
    advance(db)
    stale = {crashed}
    for name, st in db.views.items():
        if st.df in stale or any(src in stale for _, src in st.df.imports):
            stale.add(st.df)
            st.df.drop()
            db.registry.forget(st.df.name)
            c = compile_view(db.engine, db.registry, name, st.view.plan)
            st.df, st.arranged, st.used = c.dataflow, c.arranged, c.used
    try:
        db.engine.step()
    except BaseException as again:
        db.broken = f"{type(again).__name__} while taking a transaction back: {again}"
        raise InternalError(f"{db.broken}; the database cannot be used any more") from again
    for u in reversed(undo):
        u()
    if not isinstance(err, Exception):
        raise err  # an interruption goes on as itself, with the database as before the transaction
    raise OperationalError(
        f"the transaction was rolled back: {type(err).__name__} while maintaining view "
        f"{owners[crashed]!r}{': ' + str(err) if str(err) else ''}"
    ) from err


def stop_failed(db: Connection, failed: list[Dataflow], report: bool = True) -> list[str]:
    """Views whose dataflows failed in the last step stop, keeping the cause; the commit itself stands, so
    this is no error of the statement: a warning (``ivm.Warning``) names them (without ``report``, only the
    returned names do)."""
    names = []
    if not failed:
        return names
    for st in db.views.values():
        if st.df in failed:
            st.error = str(st.df.error)
            st.stopped = state.changed(db)
            db.registry.forget(st.view.name)
            names.append(st.view.name)
    if names and report:
        first = db.views[names[0]].error
        warnings.warn(
            f"view {', '.join(map(repr, names))} failed and stopped: {first}; reading it raises this error "
            "until it is dropped",
            Warning,
            stacklevel=4,
        )
    return names


def rollback(db: Connection) -> None:
    """End the transaction leaving every table and view as before it: its changes are dropped and the
    relations it created are removed."""
    _drop_changes(db)
    db.in_transaction = db.implicit = db.aborted = False


def _drop_changes(db: Connection) -> None:
    """Forget the transaction's pending changes and remove the relations it created."""
    db.pending = {}
    for undo in reversed(db.undo):
        undo()
    db.undo = []


def failure(db: Connection) -> None:
    """A statement failed: an implicit transaction is rolled back; a transaction block is aborted (its
    changes are dropped at once; it ends at COMMIT or ROLLBACK)."""
    if not db.in_transaction:
        return
    if db.implicit:
        return rollback(db)
    _drop_changes(db)
    db.aborted = True


def usable(db: Connection) -> None:
    """Raise if the connection is closed, or broken by a commit it could not take back."""
    if db.closed:
        raise InterfaceError("the connection is closed")
    if db.broken:
        raise InternalError(f"{db.broken}; the database cannot be used any more")
