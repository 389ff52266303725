"""DDL: CREATE TABLE (and CREATE TABLE AS), CREATE [OR REPLACE] VIEW and CREATE INDEX, and the lifecycle of
the relations they make (``alter`` changes and drops them).

A table becomes an engine input with its arrangement, the arrangements its UNIQUE constraints check
against and its compiled CHECK constraints; a view becomes a dataflow compiled from its plan, reusing the
arrangements that exist. A dropped view's dataflow keeps running while other views read arrangements it
built, and goes when none does. Relations created inside a transaction are removed should it roll back.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import dml, queries, references, state, transactions
from ivm.engine.batch import Batch
from ivm.errors import DataError, OperationalError
from planner.canon import arranged_form
from planner.compile import compile_index, compile_view
from planner.expr import compile_predicate
from sql.catalog import Table, View
from sql.datetimes import statement_now, statement_time
from sql.ddl import table_from_create, table_sql
from sql.errors import SqlError, error_at
from sql.logical import Call, Column, Plan, Scan
from sql.recursive import query_sql, with_key
from sql.scalar import NULL_TYPE, boolean, translate_scalar
from sql.types import TEXT, domain_of

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["create_table", "create_view", "create_index"]


def create_table(db: Connection, stmt: exp.Create, replayed: bool = False) -> None:
    """CREATE TABLE [IF NOT EXISTS] name (columns and constraints), or CREATE TABLE name AS query. A table
    ``replayed`` from a durable database's catalog is made as it was, its foreign keys not checked again
    (the tables they reference may come after it)."""
    target = stmt.this
    name = target.this.name if isinstance(target, exp.Schema) else target.name
    if db.catalog.exists(name):
        if stmt.args.get("exists"):
            return
        raise error_at(stmt, f"relation {name!r} already exists")
    if stmt.expression is not None:
        return _create_table_as(db, stmt, name)
    table = table_from_create(stmt)
    if not replayed:
        table = references.resolved(db.catalog, table, stmt)
    now = statement_now()  # a DEFAULT now() is tried with the current time (a database reopened has none)
    with statement_time(now if isinstance(now, dt.datetime) else dt.datetime.now(dt.UTC)):
        for p, d in enumerate(table.defaults):
            if d is not None:
                try:
                    dml.default(table, p)
                except SqlError as err:
                    raise error_at(d, f"DEFAULT of column {table.columns[p].name!r}: {err.message}") from None
    # sqlglot writes an identity column's options only in part, and a foreign key may leave the columns it
    # references unsaid: such a table is written as ivm writes it
    sql = table_sql(table) if any(table.identities) or table.foreign_keys else query_sql(stmt)
    _add_table(db, table, sql)
    if db.in_transaction:
        db.undo.append(lambda: _forget_table(db, table.name))


def _create_table_as(db: Connection, stmt: exp.Create, name: str) -> None:
    """CREATE TABLE name [(columns)] AS query: a table of the query's columns holding its rows now."""
    plan = db._plan(stmt.expression)
    queries.check_readable(db, plan)
    names = [c.name for c in plan.columns]
    if isinstance(stmt.this, exp.Schema):
        given = [e.name for e in stmt.this.expressions]
        if len(given) > len(names):
            raise error_at(stmt.this, "CREATE TABLE AS specifies too many column names")
        names = given + names[len(given) :]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise error_at(stmt, f"column {twice!r} specified more than once")
    types = [TEXT if c.type == NULL_TYPE else c.type for c in plan.columns]  # a bare NULL is text
    for n, t in zip(names, types, strict=True):
        if t.pad and t.scale:
            raise error_at(
                stmt,
                f"column {n!r} would be of type bpchar (character without a length), whose values keep their "
                "trailing spaces, which ivm does not hold; CAST it to CHAR(n), VARCHAR or TEXT",
                unsupported=True,
            )
    domains = tuple(domain_of(exp.DataType.build(str(t))) if t.pad or t.length else None for t in types)
    table = Table(name, tuple(Column(n, t) for n, t in zip(names, types, strict=True)), domains=domains)
    data = next(
        (
            p
            for p in (stmt.args.get("properties") or exp.Properties()).expressions
            if isinstance(p, exp.WithDataProperty)
        ),
        None,
    )
    if data is not None and data.args.get("no"):  # WITH NO DATA: the table, empty
        _add_table(db, table, table_sql(table))
        if db.in_transaction:
            db.undo.append(lambda: _forget_table(db, name))
        db.rowcount = 0
        db.statusmessage = "SELECT 0"
        return
    cols, valid, mult = queries.evaluate(db, plan)
    _add_table(db, table, table_sql(table))
    if db.in_transaction:
        db.undo.append(lambda: _forget_table(db, name))
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
            db, db.tables[name], Batch.build(cols, valid, np.full(n, db.time), np.ones(n, np.int64))
        )
        db.rowcount = n
        db.statusmessage = f"SELECT {n}"
    except BaseException:
        if name in db.tables and not db.in_transaction:
            _forget_table(db, name)
        raise


def _add_table(db: Connection, table: Table, sql: str) -> None:
    """Make ``table`` an engine input arranged by its primary key (or all its columns), with the
    arrangements its UNIQUE constraints check against and its CHECK constraints compiled."""
    name = table.name
    cols = table.columns
    key = table.primary_key or tuple(range(len(cols)))
    texts = [i for i, c in enumerate(cols) if c.type.kind == "text"]
    inp = db.base.input([c.type.dtype for c in cols], name, texts=texts)
    inp.advance_to(db.time)
    arranged = inp.arrange(key)
    st = state.TableState(table, inp, arranged, sql, state.changed(db))
    scope = {(name, c.name): i for i, c in enumerate(cols)}
    for check in table.checks:
        with statement_time("a CHECK constraint"):
            cond = translate_scalar(check.condition, dml.column_resolver(scope, table))
        cond = boolean(check.condition, cond)
        st.checks.append((check, compile_predicate(Call("not", (cond,), cond.type))))
    db.catalog.tables[name] = table
    db.tables[name] = st
    db.registry.add_table(Scan(name, table.columns), key, arranged, state.uninterned(table))
    for u in table.uniques:
        plan = arranged_form(Scan(name, cols), u.columns, db.registry.uninterned)
        if db.registry.lookup(plan, u.columns) is None:
            st.dataflows.append(compile_index(db.engine, db.registry, f"{name}.{u.name}", plan, u.columns))
        st.uniques.append((u, db.registry.lookup(plan, u.columns).arranged))
    db.base.step()  # the empty table's arrangement is complete up to now (a global COUNT reads 0)


def _forget_table(db: Connection, name: str) -> None:
    """Remove a table and what it owns (its input, its constraints' arrangements) from the database."""
    st = db.tables.pop(name)
    for df in st.dataflows:
        df.drop()
        db.registry.forget(df.name)
    st.arranged.op.release()
    db.base.inputs.remove(st.input)
    db.registry.drop_relation(name)
    for idx, (rel, _) in list(db.catalog.indexes.items()):
        if rel == name:
            del db.catalog.indexes[idx]
            db.index_sql.pop(idx, None)
    state.changed(db)
    del db.catalog.tables[name]
    db.pending.pop(name, None)


def create_view(db: Connection, stmt: exp.Create) -> None:
    """CREATE [OR REPLACE] [MATERIALIZED] VIEW name [(column, ...)] AS query: a dataflow maintaining the
    query's rows (under the names listed, the first columns of the query renamed in order)."""
    names = None
    if isinstance(stmt.this, exp.Schema):
        names = [c.name for c in stmt.this.expressions]
        twice = next((c for c in stmt.this.expressions if names.count(c.name) > 1), None)
        if twice is not None:
            raise error_at(twice, f"column {twice.name!r} specified more than once")
        stmt = stmt.copy()
        stmt.set("this", stmt.this.this)
    name = stmt.this.name
    replace = bool(stmt.args.get("replace"))
    if db.catalog.exists(name) and not replace:
        if stmt.args.get("exists"):
            return
        raise error_at(stmt, f"relation {name!r} already exists")
    if replace and name in db.catalog.tables:
        raise error_at(stmt, f"{name!r} is not a view")
    replacing = replace and name in db.views
    query = stmt.expression
    with statement_time("a view"):  # a view is not maintained as time passes
        plan = db._plan(query)
        if names is not None:
            if len(names) > len(plan.columns):
                raise error_at(stmt, "CREATE VIEW specifies more column names than columns")
            query = renamed_columns(query, name, names)
            plan = db._plan(query)
    queries.check_readable(db, plan)
    if replacing:
        _replaceable(db, stmt, name, plan)
        old = db.views[name].view
        _drop_view(db, name)
        try:
            _new_view(db, stmt, name, query, plan)
        except BaseException:
            if name not in db.views:
                _new_view(db, stmt, name, None, old.plan, old.sql)
            raise
        if db.in_transaction:  # a rollback puts the view replaced back

            def put_back() -> None:
                _drop_view(db, name)
                _new_view(db, stmt, name, None, old.plan, old.sql)

            db.undo.append(put_back)
        return
    _new_view(db, stmt, name, query, plan)
    if db.in_transaction:
        db.undo.append(lambda: _drop_view(db, name) if name in db.views else None)


def _replaceable(db: Connection, stmt: exp.Create, name: str, plan: Plan) -> None:
    """CREATE OR REPLACE VIEW keeps the view's columns (names and types, in order; new ones may follow),
    as in PostgreSQL, and here also needs no other view to read it."""
    for v in [*db.views.values(), *db.retained.values()]:
        if v.view.name != name and any(isinstance(p, Scan) and p.table == name for p, _, _ in v.used):
            raise error_at(
                stmt, f"cannot replace view {name!r}: other views depend on it (drop them first)", True
            )
    old = db.views[name].view.columns
    new = plan.columns
    if len(new) < len(old):
        raise error_at(stmt, "cannot drop columns from view")
    for a, b in zip(old, new, strict=False):
        if a.name != b.name:
            raise error_at(stmt, f"cannot change name of view column {a.name!r} to {b.name!r}")
        if a.type != b.type:
            raise error_at(stmt, f"cannot change data type of view column {a.name!r} from {a.type} to {b.type}")


def _new_view(
    db: Connection, stmt: exp.Create, name: str, query: exp.Expression | None, plan: Plan, sql=None
) -> None:
    """Compile view ``name`` of ``plan`` (its text ``sql`` when there is no ``query`` to write it from) and
    bring it up to date; a view that fails doing so is not created."""
    names = [c.name for c in plan.columns]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        repeated = [e for e in getattr(query, "selects", []) if e.alias_or_name == twice][1:]
        query = query or stmt
        raise error_at(
            repeated[0] if repeated else query,
            f"column {twice!r} specified more than once in view {name!r} (rename one with AS)",
        )
    view = View(name, plan, sql if query is None else query_sql(query))
    compiled = compile_view(db.engine, db.registry, name, plan)
    df = compiled.dataflow
    db.catalog.views[name] = view
    db.views[name] = state.ViewState(view, compiled, state.changed(db))
    try:
        db.engine.step()
    except BaseException as err:
        del db.views[name], db.catalog.views[name]
        df.drop()
        db.registry.forget(name)
        if not isinstance(err, Exception) or db.engine.crashed is not df:
            raise
        raise OperationalError(f"view {name!r} was not created: {type(err).__name__}: {err}") from err
    failed = db.engine.failed
    message = None if df in failed else df.live_error()
    if df in failed or message is not None:
        del db.views[name], db.catalog.views[name]
        df.drop()
        db.registry.forget(name)
        raise DataError(f"view {name!r} was not created: {message or df.error}")
    transactions.stop_failed(db, failed)


def create_index(db: Connection, stmt: exp.Create, undoable: bool = True) -> None:
    """CREATE INDEX name ON relation (columns): an arrangement of the relation by those columns, which
    views created later reuse. Inside a transaction its rollback drops it (unless not ``undoable``: made again
    by a statement whose own rollback takes care of it)."""
    index = stmt.this
    name = index.name
    rel = index.args["table"].name
    if name in db.catalog.indexes:
        if stmt.args.get("exists"):
            return
        raise error_at(stmt, f"index {name!r} already exists")
    plan = db.catalog.relation_plan(rel, index.args["table"])
    names = [c.name for c in plan.columns]
    key = []
    for o in index.args["params"].args.get("columns") or []:
        col = o.this if isinstance(o, exp.Ordered) else o
        if not isinstance(col, exp.Column) or col.name not in names:
            raise error_at(col, f"column {col.sql()!r} of {rel!r} does not exist")
        key.append(names.index(col.name))
    plan = arranged_form(plan, tuple(key), db.registry.uninterned)
    if db.registry.lookup(plan, tuple(key)) is None:
        compile_index(db.engine, db.registry, name, plan, tuple(key))
        db.engine.step()
        transactions.stop_failed(db, db.engine.failed)
    db.catalog.indexes[name] = (rel, tuple(key))
    db.index_sql[name] = (state.changed(db), query_sql(stmt))
    if db.in_transaction and undoable:
        from ivm.db.alter import drop_indexes  # (alter builds on this module)

        db.undo.append(lambda: drop_indexes(db, [name]) if name in db.catalog.indexes else None)


def _drop_view(db: Connection, name: str) -> None:
    """Remove view ``name``; its dataflow goes once no other view reads an arrangement it built."""
    st = db.views.pop(name)
    del db.catalog.views[name]
    # the relation goes; what it computed stays as long as other views read arrangements it built
    db.registry.drop_relation(name)
    number = next(db.serial)
    owner = f"{name} (dropped, #{number})"  # a new view may take the name
    st.dropped = (state.changed(db), number)
    db.registry.retire(name, owner)
    db.engine.step_seconds[owner] = db.engine.step_seconds.pop(st.df.name, 0.0)
    st.df.name = owner
    db.retained[owner] = st
    _release_unshared(db)


def _readers(db: Connection, owner: str) -> list[state.ViewState]:
    """The views (live, or dropped and retained) whose dataflows import an arrangement of the dataflow of
    ``owner`` (its output or any arrangement it built)."""
    everyone = [*db.views.values(), *db.retained.values()]
    source = next((st.df for st in everyone if st.df.name == owner), None)
    return [st for st in everyone if st.df is not source and any(src is source for _, src in st.df.imports)]


def _release_unshared(db: Connection) -> None:
    """Drop the dataflows of dropped views that no view (live or retained) reads an arrangement of."""
    while unread := [owner for owner in db.retained if not _readers(db, owner)]:
        for owner in unread:
            db.retained.pop(owner).df.drop()
            db.registry.forget(owner)


def renamed_columns(query: exp.Expression, alias: str, names: list[str]) -> exp.Expression:
    """``query`` with its first output columns named ``names`` in order: ``SELECT * FROM (query) AS
    alias(names)``, its WITH clause kept in front (a recursive one must come first)."""
    body = query.copy()
    key = with_key(body)
    with_ = body.args.get(key)
    body.set(key, None)
    columns = [exp.to_identifier(n, quoted=True) for n in names]
    source = exp.Subquery(
        this=body, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True), columns=columns)
    )
    wrapped = exp.select(exp.Star()).from_(source)
    if with_ is not None:
        wrapped.set(key, with_)
    return wrapped
