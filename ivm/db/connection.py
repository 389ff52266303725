"""The embedded database: ``ivm.connect()`` gives a DB-API-style connection over one engine.

Tables are engine inputs, each arranged by its primary key (or by all its columns), and views are dataflows
compiled from SQL. Every transaction is one logical time: statements outside BEGIN ... COMMIT commit alone.
Writes are checked (types, NOT NULL, primary keys) before anything reaches the engine, so a bad row rejects its
statement (inside a transaction, the whole transaction) and leaves every table and view as it was.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlglot import exp

from ivm.db import constraints, parsing, queries, state, transactions
from ivm.db.subscribe import Subscription
from ivm.engine.batch import Batch, consolidate, key_hash
from ivm.engine.dataflow import Engine
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.strings import FEW, POOL, StringPool
from ivm.errors import (
    DataError,
    Error,
    IntegrityError,
    InternalError,
    OperationalError,
    ProgrammingError,
)
from planner.canon import arranged_form
from planner.compile import compile_view
from planner.passes import Context, optimize
from planner.registry import Registry
from planner.values import column_from_values, parse_engine, to_engine_value, to_python
from sql import allow
from sql.catalog import Catalog, Table, View
from sql.ddl import table_from_create
from sql.errors import SqlError, UnsupportedError, error_at
from sql.logical import Call, Column, Plan, Scan
from sql.scalar import and_parts
from sql.translate import translate_query
from sql.types import TEXT, SqlType

if TYPE_CHECKING:
    from ivm.db.cursor import Cursor
    from ivm.db.introspect import ArrangementInfo, RelationInfo

__all__ = ["connect", "Connection", "Subscription", "SqlError", "UnsupportedError"]

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # EXPLAIN parses as a command; that is expected


def connect() -> Connection:
    """A new in-memory database."""
    return Connection()


def _pooled(method):
    """Run a public method with the connection's string pool active (text is coded by it)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.pool.active():
            return method(self, *args, **kwargs)

    return run


class Connection:
    """Executes SQL; ``fetchall`` and ``description`` describe the last query's result."""

    def __init__(self) -> None:
        self.pool = StringPool()
        self.engine = Engine()
        self.base = self.engine.dataflow("tables")
        self.catalog = Catalog()
        self.registry = Registry()
        self.tables: dict[str, state.TableState] = {}
        self.views: dict[str, state.ViewState] = {}
        # dropped views whose dataflows keep running because live views read arrangements they built, by
        # owner name in the registry; each goes once nothing reads them any more
        self.retained: dict[str, state.ViewState] = {}
        self.serial = itertools.count(1)  # tells apart queries' dataflows and dropped views of one name
        self.time = 1  # time 0 holds what exists before any transaction (a global aggregate's row)
        self.in_transaction = False
        self.implicit = False  # the transaction is that of a string of statements, not a BEGIN ... block
        self.aborted = False  # a statement of the transaction block failed: it can only end
        self.undo: list = []  # what removes the relations the transaction created, should it roll back
        self.statusmessage: str | None = None  # the last statement's command tag, as PostgreSQL's
        self.rowcount = -1  # the rows the last statement returned or changed (-1: not applicable)
        self.pending: dict[str, list[Batch]] = {}
        self._result: tuple | None = None
        self.description: list[tuple] | None = None
        self.closed = False
        self.broken: str | None = None  # why the database's state can no longer be trusted

    # -- DB-API surface ---------------------------------------------------------------------------------
    @_pooled
    def execute(self, sql: str, params: Sequence | None = None) -> Connection:
        """Run one or more statements; a query's rows are then available from ``fetchall``.

        Transactions behave as PostgreSQL's: several statements in one string are one transaction (all or
        nothing) unless they hold transaction control of their own; an error inside BEGIN ... COMMIT aborts the
        transaction, so that every later statement fails until ROLLBACK (or COMMIT, which then rolls back)."""
        transactions.usable(self)
        self._result = None
        word = sql.strip().rstrip(";").strip().upper()
        if word in parsing.CONTROL and not params:
            # transaction control is the most frequent statement of all: no need to parse it
            self._statement(parsing.CONTROL[word]())
            return self
        try:
            statements = parsing.parse(sql, params)
        except Error:
            transactions.failure(self)
            raise
        implicit = not self.in_transaction and len(statements) > 1
        if implicit:
            transactions.begin(self, implicit=True)
        try:
            for i, stmt in enumerate(statements):
                self._statement(stmt)
                if implicit and not self.in_transaction and i + 1 < len(statements):
                    # after COMMIT or ROLLBACK, the rest is a transaction of its own
                    transactions.begin(self, implicit=True)
        except BaseException:
            transactions.failure(self)
            raise
        if self.in_transaction and self.implicit:
            transactions.commit(self)
        return self

    @_pooled
    def fetchall(self) -> list[tuple]:
        """The rows of the last query (each repeated by its multiplicity), as Python values."""
        if self._result is None:
            return []
        cols, valid, mult, columns = self._result
        self._result = None
        values = [to_python(c, m, col.type) for c, m, col in zip(cols, valid, columns, strict=True)]
        rows = list(zip(*values, strict=True)) if values else [()] * len(mult)
        return [r for r, k in zip(rows, mult.tolist(), strict=True) for _ in range(k)]

    @_pooled
    def fetch_arrow(self):
        """The rows of the last query as a ``pyarrow.Table``."""

        from ivm.db.arrow import to_arrow_column

        if self._result is None:
            return pa.table({})
        cols, valid, mult, columns = self._result
        self._result = None
        rep = np.repeat(np.arange(len(mult)), mult)
        arrays = [
            to_arrow_column(c[rep], None if m is None else m[rep], col.type)
            for c, m, col in zip(cols, valid, columns, strict=True)
        ]
        return pa.Table.from_arrays(arrays, names=[c.name for c in columns])

    @_pooled
    def subscribe(self, view: str, snapshot: bool = True) -> Subscription:
        """The changes of a view from now on: iterating yields ``pyarrow.RecordBatch``es of its columns plus
        ``time`` and ``diff`` for every change committed since the last iteration (first its current contents
        at the current time, with ``snapshot``)."""
        if view not in self.views and view not in self.tables:
            raise ProgrammingError(f"relation {view!r} does not exist")
        st = self.views.get(view) or self.tables[view]
        if view in self.views:
            queries.check_readable(self, Scan(view, st.view.columns))
        columns = st.view.columns if view in self.views else st.table.columns
        return Subscription(self, st.arranged, columns, snapshot, view in self.tables and st.table or None)

    @_pooled
    def insert_arrow(self, table: str, data) -> None:
        """Insert the rows of a ``pyarrow.Table`` (columns matched by name)."""
        self._arrow_write(table, data, 1)

    @_pooled
    def delete_arrow(self, table: str, data) -> None:
        """Delete the rows of a ``pyarrow.Table`` (whole rows, columns matched by name); each must exist."""
        self._arrow_write(table, data, -1)

    @_pooled
    def apply_changes_arrow(self, changes: dict, transactions: int) -> list[str]:
        """Commit ``transactions`` consecutive transactions at once. ``changes`` maps a table to ``(rows, diff,
        tx)``: a ``pyarrow.Table`` of the table's columns (by name), the signed multiplicity change of each
        row and the transaction (from 0) it belongs to. Transaction ``i`` becomes logical time ``now + i`` and
        the engine processes them all in one step, with the same results as committing them one by one but
        without the cost per transaction. Meant for the change log of a database that enforced its keys: types
        and NOT NULL are checked, primary keys and the presence of deleted rows are not. Returns the views
        that stopped (see ``_failed``): the transactions stand, those views must be dropped."""

        if self.in_transaction:
            raise ProgrammingError("apply_changes_arrow cannot run inside a transaction")
        if transactions < 1:
            return
        batches = []
        for table, (data, diff, tx) in changes.items():
            if table not in self.tables:
                raise ProgrammingError(f"table {table!r} does not exist")
            st = self.tables[table]
            tx = np.asarray(tx, dtype=np.int64)
            diff = np.asarray(diff, dtype=np.int64)
            if not (len(tx) == len(diff) == data.num_rows):
                raise ProgrammingError(f"changes of {table!r}: rows, diffs and transactions differ in length")
            if len(tx) and (tx.min() < 0 or tx.max() >= transactions):
                raise ProgrammingError(f"changes of {table!r} name a transaction outside 0..{transactions - 1}")
            cols, masks = [], []
            names = data.schema.names
            stored = self.registry.uninterned(table)
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
            batch = Batch.build(cols, masks, self.time + tx, diff)
            batches.append((st, constraints.settle_stored(self, st, batch, tx, texts) if stored else batch))
        for st, b in batches:
            st.input.send(b)
        self.time += transactions
        for st in self.tables.values():
            st.input.advance_to(self.time)
        self.engine.step()
        return self._failed(self.engine.failed, report=False)

    @_pooled
    def lookup_arrow(self, table: str, keys):
        """The committed rows of ``table`` whose primary key equals a row of ``keys`` (a ``pyarrow.Table`` with
        the key columns, matched by name), as a ``pyarrow.Table`` of all the table's columns. A change log that
        names deleted rows by key alone (as Postgres replication does) finds the whole rows here: one seek
        per distinct key, no scan."""

        from ivm.db.arrow import to_arrow_column, to_engine_column

        if table not in self.tables:
            raise ProgrammingError(f"table {table!r} does not exist")
        st = self.tables[table]
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
            found, _ = st.arranged.trace.gather(
                *state.unique(key_hash(cols, masks, keys.num_rows), cols, masks)
            )
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

    def _arrow_write(self, table: str, data, sign: int) -> None:
        transactions.usable(self)
        if self.aborted:
            raise InternalError(
                "current transaction is aborted, commands ignored until end of transaction block"
            )
        if table not in self.tables:
            raise ProgrammingError(f"table {table!r} does not exist")
        st = self.tables[table]
        schema = data.schema
        loose = self.registry.uninterned(table)
        reading = st.arrow_reading
        if reading is None or reading[1] is not loose or not schema.equals(reading[0]):
            reading = st.arrow_reading = (schema, loose, _arrow_reading(st.table, schema, loose))
        texts: dict[int, pa.Array] = {}
        cols, masks = [], []
        n = data.num_rows
        for p, c, i, convert in reading[2]:
            if i < 0:
                d = self._default(st.table, p)
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
        batch = Batch.build(cols, masks, np.full(n, self.time), np.full(n, sign, np.int64))
        try:
            if sign < 0:
                batch = constraints.check_present(self, st, batch, texts)
            transactions.write(self, st, batch)
        except BaseException:
            transactions.failure(self)
            raise

    def _plan(self, query: exp.Expression):
        """The plan of a query: translated, then through the planner's passes."""
        cx = Context(self._primary_key, self._arranged, self.registry.uninterned)
        return optimize(translate_query(query, self.catalog), cx)

    def _primary_key(self, name: str) -> tuple[int, ...]:
        table = self.catalog.tables.get(name)
        return () if table is None else table.primary_key

    def _arranged(self, plan, key: tuple[int, ...]) -> bool:
        """Whether an arrangement of ``plan`` by ``key`` exists for a new view to read."""
        return self.registry.find(plan, key) is not None

    def view_errors(self) -> dict[str, str]:
        """The views that cannot be read now, with why: those in error (a row they read has a value they
        cannot compute; they recover when it changes) and those that stopped (they must be dropped)."""
        out = {}
        for name, st in self.views.items():
            message = st.error or st.df.live_error()
            if message is not None:
                out[name] = message
        return out

    @_pooled
    def relations(self) -> list[RelationInfo]:
        """Tables, views and indexes with row counts and stored sizes (``ivm.db.introspect.RelationInfo``)."""
        from ivm.db.introspect import relations

        return relations(self)

    @_pooled
    def arrangements(self, view: str) -> list[ArrangementInfo]:
        """The arrangements view ``view`` reads, each built or reused, with who else reads it
        (``ivm.db.introspect.ArrangementInfo``)."""
        from ivm.db.introspect import arrangements

        return arrangements(self, view)

    def cursor(self) -> Cursor:
        """A new cursor: it keeps the result of its own statements apart from other cursors'."""
        from ivm.db.cursor import Cursor

        transactions.usable(self)
        return Cursor(self)

    @_pooled
    def commit(self) -> None:
        """End the transaction: commit it, or roll it back if it was aborted (as COMMIT does)."""
        transactions.usable(self)
        if self.in_transaction:
            self.statusmessage = "ROLLBACK" if self.aborted else "COMMIT"
            transactions.rollback(self) if self.aborted else transactions.commit(self)

    @_pooled
    def rollback(self) -> None:
        """End the transaction leaving every table and view as before it."""
        transactions.usable(self)
        if self.in_transaction:
            transactions.rollback(self)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind, value, tb) -> None:
        """Leaving a ``with`` block commits the open transaction, or rolls it back after an exception."""
        if self.closed:
            return
        if kind is None:
            self.commit()
        else:
            self.rollback()

    @_pooled
    def close(self) -> None:
        """Drop every view and table now, releasing their arrangements (whose arrays go at once, rather than
        whenever the garbage collector reaches the operators' reference cycles) and the connection's strings
        (subscriptions already taken keep what they decode)."""
        for df in list(self.engine.dataflows):
            df.drop()
        self.views.clear()
        self.retained.clear()
        self.tables.clear()
        self.pending.clear()
        self.registry = Registry()
        self.catalog = Catalog()
        self._result = None
        self.closed = True
        self.pool = StringPool()

    # -- statements -------------------------------------------------------------------------------------
    def _statement(self, stmt: exp.Expression) -> None:
        self.description = None
        self.statusmessage = None
        if self.aborted and not isinstance(stmt, (exp.Commit, exp.Rollback)):
            raise InternalError(
                "current transaction is aborted, commands ignored until end of transaction block"
            )
        self.rowcount = -1
        if isinstance(stmt, exp.Create):
            kind = (stmt.args.get("kind") or "").upper()
            materialized = any(
                isinstance(p, exp.MaterializedProperty)
                for p in (stmt.args.get("properties") or exp.Properties()).expressions
            )
            self.statusmessage = f"CREATE {'MATERIALIZED ' if materialized else ''}{kind}"
            if kind == "TABLE":
                return self._create_table(stmt)
            if kind == "VIEW":
                return self._create_view(stmt)
            if kind == "INDEX":
                return self._create_index(stmt)
            raise error_at(stmt, f"CREATE {kind} is not supported yet", unsupported=True)
        if isinstance(stmt, (exp.Insert, exp.Delete, exp.Update)):
            what = {exp.Insert: "INSERT 0", exp.Delete: "DELETE", exp.Update: "UPDATE"}[type(stmt)]
            st, batch = {exp.Insert: self._insert, exp.Delete: self._delete, exp.Update: self._update}[
                type(stmt)
            ](stmt)
            transactions.write(self, st, batch)
            self.rowcount = len(batch) // 2 if isinstance(stmt, exp.Update) else len(batch)
            self.statusmessage = f"{what} {self.rowcount}"
            return None
        if isinstance(stmt, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
            return queries.query(self, stmt)
        if isinstance(stmt, exp.Drop):
            self.statusmessage = f"DROP {(stmt.args.get('kind') or '').upper()}"
            return self._drop(stmt)
        if isinstance(stmt, exp.Command) and stmt.name.upper() == "EXPLAIN":
            self.statusmessage = "EXPLAIN"
            return queries.explain(self, stmt)
        if isinstance(stmt, exp.Copy):
            return self._copy(stmt)
        if isinstance(stmt, (exp.Commit, exp.Rollback)):
            if self.aborted or isinstance(stmt, exp.Rollback):
                self.statusmessage = "ROLLBACK"
                return transactions.rollback(self)
            self.statusmessage = "COMMIT"
            # PostgreSQL only warns of a COMMIT without a transaction
            return transactions.commit(self) if self.in_transaction else None
        if isinstance(stmt, exp.Transaction):
            self.statusmessage = "BEGIN"
            if not self.in_transaction:
                transactions.begin(self, implicit=False)
            self.implicit = False  # BEGIN in a string of statements makes its transaction a block of its own
            return None
        what = stmt.name.upper() if isinstance(stmt, exp.Command) else allow.sql_name(stmt)
        raise error_at(stmt, f"{what} statements are not supported", unsupported=True)

    def _create_table(self, stmt: exp.Create) -> None:
        target = stmt.this
        name = target.this.name if isinstance(target, exp.Schema) else target.name
        if self.catalog.exists(name):
            if stmt.args.get("exists"):
                return
            raise error_at(stmt, f"relation {name!r} already exists")
        if stmt.expression is not None:
            return self._create_table_as(stmt, name)
        table = table_from_create(stmt)
        for p, d in enumerate(table.defaults):
            if d is not None:
                try:
                    self._default(table, p)
                except SqlError as err:
                    raise error_at(d, f"DEFAULT of column {table.columns[p].name!r}: {err.message}") from None
        self._add_table(table)
        if self.in_transaction:
            self.undo.append(lambda: self._forget_table(table.name))

    def _create_table_as(self, stmt: exp.Create, name: str) -> None:
        """CREATE TABLE name [(columns)] AS query: a table of the query's columns holding its rows now."""
        plan = self._plan(stmt.expression)
        queries.check_readable(self, plan)
        names = [c.name for c in plan.columns]
        if isinstance(stmt.this, exp.Schema):
            given = [e.name for e in stmt.this.expressions]
            if len(given) > len(names):
                raise error_at(stmt.this, "CREATE TABLE AS specifies too many column names")
            names = given + names[len(given) :]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise error_at(stmt, f"column {twice!r} specified more than once")
        types = [TEXT if c.type.precision == -1 else c.type for c in plan.columns]  # a bare NULL is text
        table = Table(name, tuple(Column(n, t) for n, t in zip(names, types, strict=True)))
        cols, valid, mult = queries.evaluate(self, plan)
        self._add_table(table)
        if self.in_transaction:
            self.undo.append(lambda: self._forget_table(name))
        try:
            rep = np.repeat(np.arange(len(mult)), mult)
            cols = [
                c[rep] if t == c2.type else np.zeros(len(rep), t.dtype)
                for c, t, c2 in zip(cols, types, plan.columns, strict=True)
            ]
            valid = [
                (None if m is None else m[rep]) if t == c2.type else np.zeros(len(rep), bool)
                for m, t, c2 in zip(valid, types, plan.columns, strict=True)
            ]
            n = len(rep)
            transactions.write(
                self, self.tables[name], Batch.build(cols, valid, np.full(n, self.time), np.ones(n, np.int64))
            )
            self.rowcount = n
            self.statusmessage = f"SELECT {n}"
        except BaseException:
            if name in self.tables and not self.in_transaction:
                self._forget_table(name)
            raise

    def _add_table(self, table: Table) -> None:
        """Make ``table`` an engine input arranged by its primary key (or all its columns), with the
        arrangements its UNIQUE constraints check against and its CHECK constraints compiled."""
        from planner.compile import compile_index
        from planner.expr import compile_predicate
        from sql.scalar import boolean, translate_scalar

        name = table.name
        cols = table.columns
        key = table.primary_key or tuple(range(len(cols)))
        inp = self.base.input([c.type.dtype for c in cols], name)
        inp.advance_to(self.time)
        arranged = inp.arrange(key)
        st = state.TableState(table, inp, arranged)
        scope = {(name, c.name): i for i, c in enumerate(cols)}
        for check in table.checks:
            cond = boolean(check.condition, translate_scalar(check.condition, _column_resolver(scope, table)))
            st.checks.append((check, compile_predicate(Call("not", (cond,), cond.type))))
        self.catalog.tables[name] = table
        self.tables[name] = st
        self.registry.add_table(Scan(name, table.columns), key, arranged, state.uninterned(table))
        for u in table.uniques:
            plan = arranged_form(Scan(name, cols), u.columns, self.registry.uninterned)
            if self.registry.lookup(plan, u.columns) is None:
                st.dataflows.append(
                    compile_index(self.engine, self.registry, f"{name}.{u.name}", plan, u.columns)
                )
            st.uniques.append((u, self.registry.lookup(plan, u.columns).arranged))
        self.base.step()  # the empty table's arrangement is complete up to now (a global COUNT reads 0)

    def _forget_table(self, name: str) -> None:
        """Remove a table and what it owns (its input, its constraints' arrangements) from the database."""
        st = self.tables.pop(name)
        for df in st.dataflows:
            df.drop()
            self.registry.forget(df.name)
        st.arranged.op.release()
        self.base.inputs.remove(st.input)
        self.registry.drop_relation(name)
        for idx, (rel, _) in list(self.catalog.indexes.items()):
            if rel == name:
                del self.catalog.indexes[idx]
        del self.catalog.tables[name]
        self.pending.pop(name, None)

    def _default(self, table: Table, p: int) -> object:
        """Column ``p``'s DEFAULT as the engine holds it (NULL without one)."""
        node = table.defaults[p]
        if node is None:
            return None
        c = table.columns[p]
        return _literal_value(node, c.type, c.name, 1)

    def _create_view(self, stmt: exp.Create) -> None:
        if isinstance(stmt.this, exp.Schema):
            raise error_at(stmt.this, "CREATE VIEW with a column list is not supported", unsupported=True)
        name = stmt.this.name
        replace = bool(stmt.args.get("replace"))
        if self.catalog.exists(name) and not replace:
            if stmt.args.get("exists"):
                return
            raise error_at(stmt, f"relation {name!r} already exists")
        if replace and name in self.catalog.tables:
            raise error_at(stmt, f"{name!r} is not a view")
        replacing = replace and name in self.views
        if replacing and self.in_transaction:
            raise error_at(
                stmt, "CREATE OR REPLACE VIEW inside a transaction is not supported", unsupported=True
            )
        query = stmt.expression
        plan = self._plan(query)
        queries.check_readable(self, plan)
        if replacing:
            self._replaceable(stmt, name, plan)
            old = self.views[name].view
            self._drop_view(name)
            try:
                self._new_view(stmt, name, query, plan)
            except BaseException:
                if name not in self.views:
                    self._new_view(stmt, name, None, old.plan, old.sql)
                raise
            return
        self._new_view(stmt, name, query, plan)
        if self.in_transaction:
            self.undo.append(lambda: self._drop_view(name) if name in self.views else None)

    def _replaceable(self, stmt: exp.Create, name: str, plan: Plan) -> None:
        """CREATE OR REPLACE VIEW keeps the view's columns (names and types, in order; new ones may follow),
        as in PostgreSQL, and here also needs no other view to read it."""
        for v in [*self.views.values(), *self.retained.values()]:
            if v.view.name != name and any(isinstance(p, Scan) and p.table == name for p, _, _ in v.used):
                raise error_at(
                    stmt, f"cannot replace view {name!r}: other views depend on it (drop them first)", True
                )
        old = self.views[name].view.columns
        new = plan.columns
        if len(new) < len(old):
            raise error_at(stmt, "cannot drop columns from view")
        for a, b in zip(old, new, strict=False):
            if a.name != b.name:
                raise error_at(stmt, f"cannot change name of view column {a.name!r} to {b.name!r}")
            if a.type != b.type:
                raise error_at(
                    stmt, f"cannot change data type of view column {a.name!r} from {a.type} to {b.type}"
                )

    def _new_view(
        self, stmt: exp.Create, name: str, query: exp.Expression | None, plan: Plan, sql=None
    ) -> None:
        names = [c.name for c in plan.columns]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            repeated = [e for e in getattr(query, "selects", []) if e.alias_or_name == twice][1:]
            query = query or stmt
            raise error_at(
                repeated[0] if repeated else query,
                f"column {twice!r} specified more than once in view {name!r} (rename one with AS)",
            )
        view = View(name, plan, sql if query is None else query.sql(dialect="postgres"))
        compiled = compile_view(self.engine, self.registry, name, plan)
        df = compiled.dataflow
        self.catalog.views[name] = view
        self.views[name] = state.ViewState(view, compiled)
        try:
            self.engine.step()
        except BaseException as err:
            del self.views[name], self.catalog.views[name]
            df.drop()
            self.registry.forget(name)
            if not isinstance(err, Exception) or self.engine.crashed is not df:
                raise
            raise OperationalError(f"view {name!r} was not created: {type(err).__name__}: {err}") from err
        failed = self.engine.failed
        message = None if df in failed else df.live_error()
        if df in failed or message is not None:
            del self.views[name], self.catalog.views[name]
            df.drop()
            self.registry.forget(name)
            raise DataError(f"view {name!r} was not created: {message or df.error}")
        transactions.stop_failed(self, failed)

    def _readers(self, owner: str) -> list[state.ViewState]:
        """The views (live, or dropped and retained) whose dataflows import an arrangement of the dataflow of
        ``owner`` (its output or any arrangement it built)."""
        everyone = [*self.views.values(), *self.retained.values()]
        source = next((st.df for st in everyone if st.df.name == owner), None)
        return [st for st in everyone if st.df is not source and any(src is source for _, src in st.df.imports)]

    def _release_unshared(self) -> None:
        """Drop the dataflows of dropped views that no view (live or retained) reads an arrangement of."""
        while unread := [owner for owner in self.retained if not self._readers(owner)]:
            for owner in unread:
                self.retained.pop(owner).df.drop()
                self.registry.forget(owner)

    def _create_index(self, stmt: exp.Create) -> None:
        """CREATE INDEX name ON relation (columns): an arrangement of the relation by those columns, which
        views created later reuse."""
        if self.in_transaction:
            raise error_at(stmt, "CREATE INDEX inside a transaction is not supported: run it alone", True)
        index = stmt.this
        name = index.name
        rel = index.args["table"].name
        if name in self.catalog.indexes:
            if stmt.args.get("exists"):
                return
            raise error_at(stmt, f"index {name!r} already exists")
        plan = self.catalog.relation_plan(rel, index.args["table"])
        names = [c.name for c in plan.columns]
        key = []
        for o in index.args["params"].args.get("columns") or []:
            col = o.this if isinstance(o, exp.Ordered) else o
            if not isinstance(col, exp.Column) or col.name not in names:
                raise error_at(col, f"column {col.sql()!r} of {rel!r} does not exist")
            key.append(names.index(col.name))
        plan = arranged_form(plan, tuple(key), self.registry.uninterned)
        if self.registry.lookup(plan, tuple(key)) is None:
            from planner.compile import compile_index

            compile_index(self.engine, self.registry, name, plan, tuple(key))
            self.engine.step()
            transactions.stop_failed(self, self.engine.failed)
        self.catalog.indexes[name] = (rel, tuple(key))

    def _copy(self, stmt: exp.Copy) -> None:
        """COPY table [(columns)] FROM 'file' [WITH] (options): load a file as PostgreSQL's COPY reads it
        (text or CSV), or a Parquet file (see ``ivm.db.copying``)."""
        from ivm.db.copying import read_copy

        target = stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this
        if target.name not in self.tables:
            raise error_at(target, f"table {target.name!r} does not exist")
        data = read_copy(stmt, self.tables[target.name].table)
        self.insert_arrow(target.name, data)
        self.rowcount = data.num_rows
        self.statusmessage = f"COPY {data.num_rows}"

    def _drop(self, stmt: exp.Drop) -> None:
        kind = (stmt.args.get("kind") or "").upper()
        targets = stmt.args.get("tables") or ([stmt.this] if stmt.this is not None else [])
        if len(targets) != 1:
            raise error_at(stmt, "DROP of several relations at once is not supported", unsupported=True)
        name = targets[0].name
        if kind not in ("TABLE", "VIEW", "MATERIALIZED VIEW"):
            raise error_at(stmt, f"DROP {kind} is not supported", unsupported=True)
        is_view = kind != "TABLE"
        if (name not in self.views) if is_view else (name not in self.tables):
            if stmt.args.get("exists"):
                return
            raise error_at(stmt, f"{'view' if is_view else 'table'} {name!r} does not exist")
        # a view may go while only dropped views (kept running for the arrangements others read) read it: it
        # is kept running too; a table may not, for its input is not kept
        readers = [*self.views.values(), *([] if is_view else self.retained.values())]
        for v in readers:
            if v.view.name == name:
                continue
            if any(isinstance(p, Scan) and p.table == name for p, _, _ in v.used):
                reader = v
                while reader not in self.views.values():  # a dropped view kept for those reading it
                    reader = next(r for r in self._readers(reader.df.name))
                raise error_at(stmt, f"cannot drop {name!r}: view {reader.view.name!r} depends on it")
        if self.in_transaction:
            raise error_at(stmt, f"DROP {kind} inside a transaction is not supported: run it alone", True)
        if is_view:
            self._drop_view(name)
        else:
            if self.pending.get(name):
                raise error_at(stmt, f"table {name!r} has uncommitted changes")
            self._forget_table(name)

    def _drop_view(self, name: str) -> None:
        """Remove view ``name``; its dataflow goes once no other view reads an arrangement it built."""
        st = self.views.pop(name)
        del self.catalog.views[name]
        # the relation goes; what it computed stays as long as other views read arrangements it built
        self.registry.drop_relation(name)
        owner = f"{name} (dropped, #{next(self.serial)})"  # a new view may take the name
        self.registry.retire(name, owner)
        self.engine.step_seconds[owner] = self.engine.step_seconds.pop(st.df.name, 0.0)
        st.df.name = owner
        self.retained[owner] = st
        self._release_unshared()

    # -- writes -----------------------------------------------------------------------------------------
    def _table(self, node: exp.Expression) -> state.TableState:
        t = node.this if isinstance(node, exp.Schema) else node
        name = t.name
        if name not in self.tables:
            raise error_at(t, f"table {name!r} does not exist")
        return self.tables[name]

    def _insert(self, stmt: exp.Insert) -> tuple[state.TableState, Batch]:
        st = self._table(stmt.this)
        table = st.table
        target = stmt.this
        listed = isinstance(target, exp.Schema) and bool(target.expressions)
        if listed:
            positions = []
            for ident in target.expressions:
                p = table.position(ident.name)
                if p is None:
                    raise error_at(ident, f"column {ident.name!r} of table {table.name!r} does not exist")
                if p in positions:
                    raise error_at(ident, f"column {ident.name!r} specified more than once")
                positions.append(p)
        else:
            positions = list(range(len(table.columns)))
        source = stmt.expression
        defaults = [self._default(table, p) for p in range(len(table.columns))]
        if stmt.args.get("default"):  # INSERT ... DEFAULT VALUES
            return st, self._rows_to_batch(table, [defaults])
        if not isinstance(source, exp.Values):
            return st, self._insert_select(st, positions, source, defaults, listed)
        rows = []
        widths = {len(t.expressions) if isinstance(t, exp.Tuple) else 1 for t in source.expressions}
        if len(widths) > 1:
            raise error_at(source, "VALUES lists must all be the same length")
        for r, tup in enumerate(source.expressions, start=1):
            vals = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
            if len(vals) > len(positions):
                raise error_at(tup, f"INSERT has more expressions than target columns (row {r})")
            if len(vals) < len(positions) and listed:
                raise error_at(tup, f"INSERT has more target columns than expressions (row {r})")
            row = list(defaults)
            for p, v in zip(positions, vals, strict=False):  # without a column list, the first columns
                if _is_default(v):
                    continue
                row[p] = _literal_value(v, table.columns[p].type, table.columns[p].name, r)
            rows.append(row)
        batch = self._rows_to_batch(table, rows)
        return st, batch

    def _insert_select(
        self,
        st: state.TableState,
        positions: list[int],
        query: exp.Expression,
        defaults: list[object],
        listed: bool,
    ) -> Batch:
        table = st.table
        plan = self._plan(query)
        if len(plan.columns) > len(positions):
            raise error_at(query, "INSERT has more expressions than target columns")
        if len(plan.columns) < len(positions):
            if listed:
                raise error_at(query, "INSERT has more target columns than expressions")
            positions = positions[: len(plan.columns)]
        cols, valid, mult = queries.evaluate(self, plan)
        rep = np.repeat(np.arange(len(mult)), mult)
        n = len(rep)
        out_cols = [
            np.full(n, 0 if d is None else d, dtype=c.type.dtype)
            for c, d in zip(table.columns, defaults, strict=True)
        ]
        out_valid: list = [np.full(n, d is not None) for d in defaults]
        from sql.logical import ColRef
        from sql.scalar import assigned, cast_to

        # PostgreSQL types a string constant of a plain SELECT by the column it goes to; DISTINCT or GROUP BY
        # make it text first
        plain = isinstance(query, exp.Select) and not query.args.get("distinct") and not query.args.get("group")
        selects = query.selects if plain else []
        strings = {
            j
            for j, item in enumerate(selects)
            if isinstance(item.unalias(), exp.Literal) and item.unalias().is_string
        }
        rows = tuple(c[rep] for c in cols)
        rows_valid = tuple(None if m is None else m[rep] for m in valid)
        for j, p in enumerate(positions):
            column = table.columns[p]
            e = ColRef(j, plan.columns[j].type)
            if j in strings and column.type.kind != "text":  # a string constant: read as the column's type
                e = cast_to(query, e, column.type)
            e = assigned(query, e, column.type, column.name)
            data, mask = _assigned_values(e, rows, rows_valid, n, column.name)
            out_cols[p] = data.astype(column.type.dtype)
            out_valid[p] = mask
        return Batch.build(out_cols, out_valid, np.full(n, self.time), np.ones(n, np.int64))

    def _rows_to_batch(self, table: Table, rows: list[list[object]]) -> Batch:
        cols, masks = [], []
        for i, c in enumerate(table.columns):
            data, mask = column_from_values([r[i] for r in rows], c.type)
            cols.append(data)
            masks.append(mask)
        n = len(rows)
        return Batch.build(cols, masks, np.full(n, self.time), np.ones(n, np.int64))

    def _delete(self, stmt: exp.Delete) -> tuple[state.TableState, Batch]:
        st = self._table(stmt.this)
        current = self._current(st, stmt.args.get("where"))
        keep = self._where(st, stmt.args.get("where"), current)
        return st, current.take(keep).negate()

    def _update(self, stmt: exp.Update) -> tuple[state.TableState, Batch]:
        st = self._table(stmt.this)
        table = st.table
        current = self._current(st, stmt.args.get("where"))
        sel = current.take(self._where(st, stmt.args.get("where"), current))
        from sql.scalar import assigned, translate_scalar

        scope = {(table.name, c.name): i for i, c in enumerate(table.columns)}
        cols, valid = list(sel.columns), list(sel.valid)
        assigned_to: set[int] = set()
        for assign in stmt.expressions:
            p = table.position(assign.this.name)
            if p is None:
                raise error_at(
                    assign.this, f"column {assign.this.name!r} of table {table.name!r} does not exist"
                )
            if p in assigned_to:
                raise error_at(assign.this, f"multiple assignments to same column {assign.this.name!r}")
            assigned_to.add(p)
            column = table.columns[p]
            value = assign.expression
            if _is_default(value):
                value = table.defaults[p] or exp.Null()
            e = translate_scalar(value, _column_resolver(scope, table))
            e = assigned(assign, e, column.type, column.name)
            data, mask = _assigned_values(e, sel.columns, sel.valid, len(sel), column.name)
            if e.type.kind == "text" and p not in self.registry.uninterned(table.name):
                data = POOL.canonical(data)  # keys and tables without one hold canonical text only
            cols[p] = data.astype(table.columns[p].type.dtype)
            valid[p] = mask
        new = Batch.build(cols, valid, sel.times, sel.diffs)
        return st, Batch.concat([sel.negate(), new])

    def _where(self, st: state.TableState, where: exp.Where | None, current: Batch) -> np.ndarray:
        if where is None:
            return np.ones(len(current), dtype=bool)
        from planner.expr import compile_predicate
        from sql.scalar import boolean, translate_scalar

        table = st.table
        scope = {(table.name, c.name): i for i, c in enumerate(table.columns)}
        pred = boolean(where, translate_scalar(where.this, _column_resolver(scope, table)))
        return compile_predicate(pred)(current.columns, current.valid)

    def _current(self, st: state.TableState, where: exp.Where | None = None) -> Batch:
        """The table's rows as of now, including this transaction's changes, one update per copy; only those
        with the keys ``where`` asks for when it fixes every key column (then read by seeking the keys)."""
        keys = _fixed_keys(st.table, where.this) if where is not None else None
        extra = self.pending.get(st.table.name, [])
        if keys is None:
            cols, valid, mult = state.contents(st.arranged, extra, st.table)
        else:
            cols, valid, mult = state.contents(st.arranged, extra, st.table, keys)
        n = len(mult)
        b = Batch(tuple(cols), tuple(valid), np.full((n, 1), self.time), np.ones(n, np.int64))
        return b.take(np.repeat(np.arange(n), mult))

    def _failed(self, failed: list, report: bool = True) -> list[str]:
        # the parameter ``transactions`` of apply_changes_arrow hides the module there
        return transactions.stop_failed(self, failed, report)

    def _usable(self) -> None:
        """Raise if the connection cannot be used (see ``transactions.usable``)."""
        transactions.usable(self)


def _assigned_values(e, cols, valid, n: int, column: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of ``e`` written to ``column``; one it cannot take rejects the statement."""
    from planner.expr import evaluate

    try:
        return evaluate(e, cols, valid, n)
    except EvaluationError as err:
        raise DataError(f"column {column!r}: {err}") from None


def _column_resolver(scope: dict, table: Table):
    from sql.logical import ColRef

    def resolve(node):
        if isinstance(node, exp.Column):
            if node.table and node.table != table.name:
                raise error_at(node, f"missing FROM-clause entry for table {node.table!r}")
            key = (table.name, node.name)
            if key not in scope:
                raise error_at(node, f"column {node.name!r} of table {table.name!r} does not exist")
            i = scope[key]
            return ColRef(i, table.columns[i].type)
        return None

    return resolve


def _fixed_keys(table: Table, cond: exp.Expression) -> tuple[np.ndarray, ...] | None:
    """The key values (arrays, in key order; every combination) a condition allows when its conjuncts fix each
    key column of ``table``'s arrangement to constants with ``=`` or ``IN``; None when it does not."""
    width = len(table.columns)
    key = list(table.primary_key) or list(range(width))
    allowed: dict[int, list] = {}
    for c in and_parts(cond):
        if isinstance(c, exp.EQ):
            pairs = [(c.this, [c.expression]), (c.expression, [c.this])]
        elif isinstance(c, exp.In) and c.expressions and not c.args.get("query"):
            pairs = [(c.this, list(c.expressions))]
        else:
            continue
        for col, values in pairs:
            if not isinstance(col, exp.Column) or col.table not in ("", table.name):
                continue
            p = table.position(col.name)
            if p is None or p not in key or table.columns[p].type.kind == "float":
                continue
            if not all(isinstance(v, (exp.Literal, exp.Neg, exp.Null)) for v in values):
                continue
            try:
                vals = [_literal_value(v, table.columns[p].type, col.name, 0) for v in values]
            except SqlError:
                return None
            got = [v for v in vals if v is not None]
            allowed[p] = got if p not in allowed else [v for v in allowed[p] if v in got]
    if any(p not in allowed for p in key):
        return None
    combos = 1
    for p in key:
        combos *= len(allowed[p])
    if combos > 100_000:
        return None
    grids = np.meshgrid(*[np.array(allowed[p], dtype=table.columns[p].type.dtype) for p in key], indexing="ij")
    return tuple(g.ravel() for g in grids)


def _column_of_changes(arr, c: Column, stored: bool, inserted: np.ndarray):
    """An engine column of changes, its validity, and (for text the table stores uninterned, when some rows
    are deleted) the strings: those rows get code -1 until they take the stored row's codes."""
    from ivm.db.arrow import to_engine_column

    if not stored or inserted.all() or not _is_text(arr.type):
        return (*to_engine_column(arr, c.type, c.name, stored), None)
    text = arr.combine_chunks().cast(pa.large_string())
    data = np.full(len(arr), -1, dtype=np.int64)
    valid = np.asarray(text.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    rows = np.flatnonzero(inserted)
    if len(rows):
        data[rows] = to_engine_column(text.take(pa.array(rows)), c.type, c.name, True)[0]
    return data, (None if valid.all() else valid), text


def _arrow_reading(table: Table, schema: pa.Schema, loose: frozenset[int]) -> list[tuple]:
    """Per column of ``table``: its position, the column, its position in Arrow data of ``schema`` (-1 when
    absent, allowed for a nullable column) and the converter of that data."""
    from ivm.db.arrow import converter

    out = []
    for p, c in enumerate(table.columns):
        i = schema.get_field_index(c.name)
        if i < 0:
            if c.name in schema.names:
                raise ProgrammingError(
                    f"column {c.name!r} appears more than once in the data for table {table.name!r}"
                )
            if not c.nullable and table.defaults[p] is None:
                raise IntegrityError(
                    f"column {c.name!r} of table {table.name!r} is missing and may not be NULL"
                )
            out.append((p, c, -1, None))
        else:
            out.append((p, c, i, converter(schema.field(i).type, c.type, c.name, p in loose)))
    return out


def _is_text(t) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_default(node: exp.Expression) -> bool:
    """Whether a value is the keyword DEFAULT (as VALUES and UPDATE ... SET write it)."""
    if isinstance(node, exp.Var):
        return node.name.upper() == "DEFAULT"
    return (
        isinstance(node, exp.Column)
        and not node.table
        and node.name.upper() == "DEFAULT"
        and not (node.this.args.get("quoted"))
    )


def _literal_value(node: exp.Expression, t: SqlType, column: str, row: int) -> object:
    """A VALUES entry as the engine holds it, converted as PostgreSQL assigns a constant to a column: a string
    is read as the column's type, a number rounded to the column's scale (half away from zero); or an error
    naming the row and column."""
    import decimal

    v = node
    neg = False
    if isinstance(v, exp.Neg):
        neg, v = True, v.this
    if isinstance(v, exp.Null):
        return None
    if isinstance(v, exp.Cast) and isinstance(v.this, exp.Literal):
        v = v.this
    where = f"row {row}, column {column!r}"
    if isinstance(v, exp.Literal) and v.is_string and t.kind != "text" and not neg:
        try:
            return parse_engine(v.this, t)
        except ValueError:
            raise error_at(
                node, f"{where}: invalid input syntax for type {t}: {v.this!r}", cls=DataError
            ) from None
    try:
        if isinstance(v, exp.Boolean):
            value: object = bool(v.this)
        elif isinstance(v, exp.Literal):
            if v.is_string:
                value = v.this
            else:
                value = int(v.this) if v.this.isdigit() else decimal.Decimal(v.this)
                if t.kind == "float":
                    value = float(value)
                elif t.kind == "int" and isinstance(value, decimal.Decimal):
                    value = int(value.to_integral_value(rounding=decimal.ROUND_HALF_UP))
                if neg:
                    value = -value
        else:
            raise error_at(node, f"row {row}: only constants are supported in VALUES", unsupported=True)
        if neg and isinstance(value, (str, bool)):
            raise error_at(node, f"{where}: cannot negate {value!r}")
        return to_engine_value(value, t)
    except TypeError as err:
        raise error_at(node, f"{where}: invalid value for {t}: {err}") from err
    except (ValueError, ArithmeticError) as err:
        raise error_at(node, f"{where}: invalid value for {t}: {err}", cls=DataError) from err
