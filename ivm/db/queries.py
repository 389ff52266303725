"""Queries: reading the current rows of a plan, for SELECT and EXPLAIN and for the statements that write
what a query returns (INSERT ... SELECT, CREATE TABLE AS).

A plan that is a relation reads its arrangement; any other runs as a dataflow built for it and dropped
after. Tables read with the transaction's pending changes, views as of the last commit. Neither may read a
view that failed.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import parsing, state
from ivm.db.arrow import to_arrow_column
from ivm.db.ordering import display_order, sort_indices
from ivm.engine.batch import Batch
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.operators.iterate import IterationLimitError
from ivm.engine.strings import POOL
from ivm.errors import DataError, OperationalError
from planner.compile import compile_view
from planner.values import to_python
from sql.datetimes import statement_time
from sql.errors import error_at
from sql.logical import Canon, Column, Negate, Plan, Scan, UnionAll, Values, children, substitute
from sql.types import TEXT

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["query", "evaluate", "check_readable", "explain"]


def query(db: Connection, stmt: exp.Expression) -> None:
    """A query's rows, in its ORDER BY order (see ``ivm.db.ordering``)."""
    order = display_order(stmt)
    plan = db._plan(stmt if order is None else order.query)
    check_readable(db, plan)
    if isinstance(plan, Canon) and isinstance(plan.input, Scan):
        plan = plan.input  # a table's rows read the same through the codes they are stored with
    cols, valid, mult = evaluate(db, plan)
    columns = plan.columns
    keys = None if order is None else order.positions([c.name for c in columns])
    if keys and int(mult.sum()) > 1:
        rep = np.repeat(np.arange(len(mult)), mult)
        keyed = {k for k, _, _ in keys}
        arrays = [  # CHAR values order without their padding
            to_arrow_column(c[rep], None if m is None else m[rep], col.type, False) if i in keyed else None
            for i, (c, m, col) in enumerate(zip(cols, valid, columns, strict=True))
        ]
        rep = rep[sort_indices(arrays, keys).to_numpy()]
        cols = [c[rep] for c in cols]
        valid = [None if m is None else m[rep] for m in valid]
        mult = np.ones(len(rep), dtype=np.int64)
    if order is not None and order.hidden:
        shown = len(columns) - order.hidden
        cols, valid, columns = cols[:shown], valid[:shown], columns[:shown]
    db._result = (cols, valid, mult, columns)
    db.description = [(c.name, str(c.type), None, None, None, None, c.nullable) for c in columns]
    db.rowcount = int(mult.sum())
    db.statusmessage = f"SELECT {db.rowcount}"


def evaluate(db: Connection, plan: Plan) -> tuple[list, list, np.ndarray]:
    """The current rows of a plan: read straight from a relation's arrangement when the plan is a relation,
    else from a dataflow built for the query and dropped after. Tables read with this transaction's
    changes; views as of the last commit, as they are maintained then."""
    if isinstance(plan, Scan):
        if plan.table in db.views:
            return state.contents(db.views[plan.table].arranged)
        st = db.tables[plan.table]
        return state.contents(st.arranged, db.pending.get(plan.table, ()), st.table)
    if any(db.pending.values()):
        plan = substitute(plan, lambda p: _with_pending(db, p))
    name = f"__query{next(db.serial)}"
    compiled = compile_view(db.engine, db.registry, name, plan)
    df, arranged = compiled.dataflow, compiled.arranged
    try:
        df.step()
        message = df.live_error()
        if message is not None:
            raise DataError(message)
        return state.contents(arranged)
    except (IterationLimitError, EvaluationError) as err:
        raise DataError(f"the query failed: {err}") from err
    except MemoryError as err:
        raise OperationalError(f"the query ran out of memory: {err}") from err
    finally:
        df.drop()
        db.registry.forget(name)


def _with_pending(db: Connection, plan) -> Plan | None:
    """A scan of a table changed in this transaction as its committed rows plus the changes (the rows
    inserted, less the rows deleted); None for any other plan."""
    if not (isinstance(plan, Scan) and db.pending.get(plan.table)):
        return None
    changes = Batch.concat(db.pending[plan.table])
    parts = [plan]
    for sign in (1, -1):
        mine = changes.take(np.flatnonzero(changes.diffs * sign > 0))
        rep = np.repeat(np.arange(len(mine)), np.abs(mine.diffs))
        if not len(rep):
            continue
        cols = [
            to_python(c[rep], None if m is None else m[rep], col.type)
            for c, m, col in zip(mine.columns, mine.valid, plan.columns, strict=True)
        ]
        rows = Values(tuple(zip(*cols, strict=True)), plan.columns)
        parts.append(rows if sign > 0 else Negate(rows))
    return UnionAll(tuple(parts), plan.columns)


def check_readable(db: Connection, plan: Plan) -> None:
    """Queries and views may not read a view that failed."""
    stack = [plan]
    while stack:
        p = stack.pop()
        if isinstance(p, Scan) and p.table in db.views:
            st = db.views[p.table]
            if st.error:
                raise DataError(f"view {p.table!r} failed and must be dropped: {st.error}")
            message = st.df.live_error()
            if message is not None:
                raise DataError(f"view {p.table!r} is in error (until the rows at fault change): {message}")
        stack.extend(children(p))


def explain(db: Connection, stmt: exp.Command) -> None:
    """EXPLAIN query (or EXPLAIN CREATE VIEW ...): the dataflow it would build, nothing is created."""
    text = stmt.expression.this if isinstance(stmt.expression, exp.Literal) else stmt.expression.sql()
    parsed = parsing.parse(text)
    if len(parsed) != 1:
        raise error_at(stmt, "EXPLAIN takes one statement")
    inner = parsed[0]
    view = isinstance(inner, exp.Create) and (inner.args.get("kind") or "").upper() == "VIEW"
    if view:
        inner = inner.expression
    with statement_time("a view") if view else contextlib.nullcontext():
        plan = db._plan(inner)
    name = f"__explain{db.time}"
    compiled = compile_view(db.engine, db.registry, name, plan)
    compiled.dataflow.drop()
    db.registry.forget(name)
    lines = compiled.explain()
    codes = np.array([POOL.code(line) for line in lines], dtype=np.int64)
    db._result = ([codes], [None], np.ones(len(lines), np.int64), (Column("plan", TEXT, False),))
    db.description = [("plan", "TEXT", None, None, None, None, False)]
