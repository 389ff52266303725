"""The embedded database: ``ivm.connect()`` gives a DB-API-style connection over one engine.

Tables are engine inputs, each arranged by its primary key (or by all its columns), and views are dataflows
compiled from SQL. Every transaction is one logical time: statements outside BEGIN ... COMMIT commit alone.
Writes are checked (types, NOT NULL, primary keys) before anything reaches the engine, so a bad row rejects its
statement (inside a transaction, the whole transaction) and leaves every table and view as it was.

This module is the front: the connection's state and its public surface, and the dispatch of each statement
to the module of its concern: ``parsing`` (SQL text into statements), ``ddl``, ``dml``, ``queries``,
``constraints``, ``transactions``, ``arrow_io``, ``subscribe``; ``state`` holds what is kept per relation.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import itertools
import logging
import weakref
from collections.abc import Iterator, Sequence

import pyarrow as pa
from sqlglot import exp

from ivm.db import alter, arrow_io, ddl, dml, introspect, parsing, queries, storage, transactions
from ivm.db.cursor import Cursor
from ivm.db.state import TableState, ViewState
from ivm.db.subscribe import Subscription
from ivm.engine.batch import Batch
from ivm.engine.dataflow import Engine
from ivm.engine.strings import StringPool
from ivm.errors import Error, InternalError, ProgrammingError
from planner.passes import Context, optimize
from planner.registry import Registry
from planner.values import to_python
from sql import allow
from sql.catalog import Catalog
from sql.datetimes import statement_time
from sql.errors import SqlError, UnsupportedError, error_at
from sql.logical import Plan, Scan
from sql.translate import translate_query

__all__ = ["connect", "Connection", "Subscription", "SqlError", "UnsupportedError"]

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # EXPLAIN parses as a command; that is expected


def connect(
    path: str | None = None,
    *,
    synchronous: bool = True,
    checkpoint_bytes: int = 64 << 20,
    checkpoint_interval: float = 300.0,
) -> Connection:
    """A new in-memory database, or with ``path`` the database in that directory (created if it holds
    none), kept durable there (see ``ivm.db.storage``): every COMMIT is in the write-ahead log when it
    returns, and synced to disk unless ``synchronous`` is off (for bulk loads: a crash of the machine, not of
    the process, may then lose the last commits). A checkpoint is taken after DDL and at ``close``, and in the
    background when the log passes ``checkpoint_bytes`` or holds commits older than ``checkpoint_interval``
    seconds. ``path`` may be a local directory or the URI of one on an object store (``s3://...``)."""
    db = Connection()
    if path is not None:
        with db.pool.active():
            storage.open_database(db, path, synchronous, checkpoint_bytes, checkpoint_interval)
    return db


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
        self.store: storage.Store | None = None  # the database's directory, if it is durable
        self._reset()

    def _reset(self) -> None:
        """Empty state: no table, view or string."""
        self.pool = StringPool()
        self.engine = Engine()
        self.base = self.engine.dataflow("tables")
        self.catalog = Catalog()
        self.registry = Registry()
        self.tables: dict[str, TableState] = {}
        self.views: dict[str, ViewState] = {}
        # dropped views whose dataflows keep running because live views read arrangements they built, by
        # owner name in the registry; each goes once nothing reads them any more
        self.retained: dict[str, ViewState] = {}
        self.serial = itertools.count(1)  # tells apart queries' dataflows and dropped views of one name
        self.seq = itertools.count(1)  # versions of the catalog (see ``state.changed``)
        self.version = 0
        self.foreign_keys: tuple[int, dict] = (
            -1,
            {},
        )  # per table, the foreign keys referencing it, at a version
        self.index_sql: dict[str, tuple[int, str]] = {}  # per index, the version it came with and its SQL
        self.positions: dict = {}  # where each source of changes is (a replication LSN): kept with the state
        self.time = 1  # time 0 holds what exists before any transaction (a global aggregate's row)
        self.in_transaction = False
        self.implicit = False  # the transaction is that of a string of statements, not a BEGIN ... block
        self.started_at: dt.datetime | None = None  # when the open transaction began (``now()``)
        self.aborted = False  # a statement of the transaction block failed: it can only end
        self.undo: list = []  # what removes the relations the transaction created, should it roll back
        self.in_steps = False  # a statement made of several changes is under way: each leaves its undo too
        self.statusmessage: str | None = None  # the last statement's command tag, as PostgreSQL's
        self.rowcount = -1  # the rows the last statement returned or changed (-1: not applicable)
        self.pending: dict[str, list[Batch]] = {}
        self.sequence_changes: set[str] = set()  # tables whose sequences moved since the log last said
        self.subscriptions: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self._result: tuple | None = None
        self.description: list[tuple] | None = None
        self.closed = False
        self.broken: str | None = None  # why the database's state can no longer be trusted

    # -- DB-API surface ---------------------------------------------------------------------------------
    @_pooled
    def execute(self, sql: str, params: Sequence | None = None, dialect="postgres") -> Connection:
        """Run one or more statements; a query's rows are then available from ``fetchall``.

        Transactions behave as PostgreSQL's: several statements in one string are one transaction (all or
        nothing) unless they hold transaction control of their own; an error inside BEGIN ... COMMIT aborts the
        transaction, so that every later statement fails until ROLLBACK (or COMMIT, which then rolls back).
        ``dialect="spark"`` (or a ``sql.spark.Spark``) reads a query or CREATE VIEW as Spark SQL."""
        transactions.usable(self)
        self._result = None
        word = sql.strip().rstrip(";").strip().upper()
        if word in parsing.CONTROL and not params:
            # transaction control is the most frequent statement of all: no need to parse it
            self._statement(parsing.CONTROL[word]())
            if self.store is not None:
                self.store.sequences_moved(self)  # those a transaction rolled back handed out
            return self
        try:
            statements = parsing.parse(sql, params, dialect, self.catalog)
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
            if self.store is not None and not self.in_transaction:
                self.store.changed(self)  # DDL that stood before the failure is kept
                self.store.sequences_moved(self)
            raise
        if self.in_transaction and self.implicit:
            transactions.commit(self)
        if self.store is not None:
            self.store.changed(self)
            self.store.sequences_moved(self)
        return self

    @_pooled
    def fetchall(self) -> list[tuple]:
        """The rows of the last query (each repeated by its multiplicity), as Python values."""
        if self._result is None:
            return []
        cols, valid, mult, columns = self._result
        self._result = None
        values = [
            to_python(c, m, col.type, padded=True) for c, m, col in zip(cols, valid, columns, strict=True)
        ]
        rows = list(zip(*values, strict=True)) if values else [()] * len(mult)
        return [r for r, k in zip(rows, mult.tolist(), strict=True) for _ in range(k)]

    @_pooled
    def fetch_arrow(self) -> pa.Table:
        """The rows of the last query as a ``pyarrow.Table``."""
        return arrow_io.fetch(self)

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
        sub = Subscription(self, st.arranged, columns, snapshot, view in self.tables and st.table or None, view)
        self.subscriptions.add(sub)
        return sub

    @_pooled
    def insert_arrow(self, table: str, data) -> None:
        """Insert the rows of a ``pyarrow.Table`` (columns matched by name)."""
        arrow_io.write(self, table, data, 1)

    @_pooled
    def delete_arrow(self, table: str, data) -> None:
        """Delete the rows of a ``pyarrow.Table`` (whole rows, columns matched by name); each must exist."""
        arrow_io.write(self, table, data, -1)

    @_pooled
    def apply_changes_arrow(self, changes: dict, transactions: int) -> list[str]:
        """Commit ``transactions`` consecutive transactions at once. ``changes`` maps a table to ``(rows, diff,
        tx)``: a ``pyarrow.Table`` of the table's columns (by name), the signed multiplicity change of each
        row and the transaction (from 0) it belongs to. Transaction ``i`` becomes logical time ``now + i`` and
        the engine processes them all in one step, with the same results as committing them one by one but
        without the cost per transaction. Meant for the change log of a database that enforced its keys: types
        and NOT NULL are checked, primary keys and the presence of deleted rows are not. Returns the views
        that stopped (see ``transactions.stop_failed``): the transactions stand, those views must be
        dropped."""
        return arrow_io.apply_changes(self, changes, transactions)

    @_pooled
    def lookup_arrow(self, table: str, keys) -> pa.Table:
        """The committed rows of ``table`` whose primary key equals a row of ``keys`` (a ``pyarrow.Table`` with
        the key columns, matched by name), as a ``pyarrow.Table`` of all the table's columns. A change log that
        names deleted rows by key alone (as Postgres replication does) finds the whole rows here: one seek
        per distinct key, no scan."""
        return arrow_io.lookup(self, table, keys)

    def _plan(self, query: exp.Expression) -> Plan:
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
    def relations(self) -> list[introspect.RelationInfo]:
        """Tables, views and indexes with row counts and stored sizes (``ivm.db.introspect.RelationInfo``)."""
        return introspect.relations(self)

    @_pooled
    def arrangements(self, view: str) -> list[introspect.ArrangementInfo]:
        """The arrangements view ``view`` reads, each built or reused, with who else reads it
        (``ivm.db.introspect.ArrangementInfo``)."""
        return introspect.arrangements(self, view)

    def cursor(self) -> Cursor:
        """A new cursor: it keeps the result of its own statements apart from other cursors'."""
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
            if self.store is not None:
                self.store.sequences_moved(self)

    @contextlib.contextmanager
    def commit_group(self) -> Iterator[Connection]:
        """Group commit: the transactions committed inside the block go to a durable database's log together
        when it ends, in one write and one sync, and a crash keeps all of them or none (checkpoints wait for
        the end too). Each is visible as soon as it commits. The block must end outside a transaction. If it
        raises, its commits are not written: the connection breaks, and opening the directory again finds it
        as it was before the block. A group inside a group belongs to the outer one; in memory a group
        changes nothing."""
        transactions.usable(self)
        if self.in_transaction:
            raise ProgrammingError("a commit group cannot begin inside a transaction")
        store = self.store
        if store is None or store.group is not None:
            yield self
            return
        store.group = []
        whole = False
        try:
            yield self
            if self.in_transaction:
                raise ProgrammingError("a commit group must end outside a transaction: it holds whole ones")
            whole = True
        finally:
            with self.pool.active():
                store.end_group(self, whole)

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
        (subscriptions already taken keep what they decode). A durable database takes a checkpoint first,
        so that opening it again replays nothing."""
        if self.closed:
            return
        if self.store is not None:
            if self.in_transaction:
                transactions.rollback(self)
            store, self.store = self.store, None
            store.close(self)
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

    def _usable(self) -> None:
        """Raise if the connection cannot be used (see ``transactions.usable``)."""
        transactions.usable(self)

    # -- statements -------------------------------------------------------------------------------------
    def _statement(self, stmt: exp.Expression) -> None:
        """Run one parsed statement: each kind goes to the module of its concern, with ``now()`` the start of
        its transaction (the statement's own start outside one)."""
        now = self.started_at if self.in_transaction and self.started_at else dt.datetime.now(dt.UTC)
        with statement_time(now):
            return self._run(stmt)

    def _run(self, stmt: exp.Expression) -> None:
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
                return ddl.create_table(self, stmt)
            if kind == "VIEW":
                return ddl.create_view(self, stmt)
            if kind == "INDEX":
                return ddl.create_index(self, stmt)
            raise error_at(stmt, f"CREATE {kind} is not supported yet", unsupported=True)
        if isinstance(stmt, (exp.Insert, exp.Delete, exp.Update)):
            what = {exp.Insert: "INSERT 0", exp.Delete: "DELETE", exp.Update: "UPDATE"}[type(stmt)]
            written = dml.run(self, stmt)
            try:
                result = transactions.write(
                    self, written.st, written.batch, written.result, written.kept, pairs=written.pairs
                )
            except Error as err:
                if isinstance(stmt, exp.Insert) and stmt.args.get("conflict") is None:
                    raise  # the row's number in VALUES or the query says which
                raise written.named(err) from None
            self.rowcount = written.count
            self.statusmessage = f"{what} {self.rowcount}"
            if result is not None:  # RETURNING: the rows, as a query's
                self._result = result
                self.description = [(c.name, str(c.type), None, None, None, None, True) for c in result[3]]
            return None
        if isinstance(stmt, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
            return queries.query(self, stmt)
        if isinstance(stmt, exp.Drop):
            materialized = "MATERIALIZED " if stmt.args.get("materialized") else ""
            self.statusmessage = f"DROP {materialized}{(stmt.args.get('kind') or '').upper()}"
            return alter.drop(self, stmt)
        if isinstance(stmt, exp.Alter):
            self.statusmessage = f"ALTER {(stmt.args.get('kind') or '').upper()}"
            return alter.alter_table(self, stmt)
        if isinstance(stmt, exp.TruncateTable):
            self.statusmessage = "TRUNCATE TABLE"
            return alter.truncate(self, stmt)
        if isinstance(stmt, exp.Command) and stmt.name.upper() == "EXPLAIN":
            self.statusmessage = "EXPLAIN"
            return queries.explain(self, stmt)
        if isinstance(stmt, exp.Copy):
            return dml.copy(self, stmt)
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
        if isinstance(stmt, exp.Command) and stmt.name.upper() == "SET":  # SET TIME ZONE 'UTC' (``parsing``)
            self.statusmessage = "SET"
            return None
        if isinstance(stmt, exp.Command):  # a statement sqlglot does not parse: named by its words
            rest = stmt.expression
            rest = rest.sql(dialect="postgres") if isinstance(rest, exp.Expression) else str(rest or "")
            words = " ".join(f"{stmt.name.upper()} {rest}".split())
            raise error_at(stmt, f"{words if len(words) <= 60 else words[:57] + '...'} is not supported", True)
        raise error_at(stmt, f"{allow.sql_name(stmt)} statements are not supported", unsupported=True)
