"""ALTER TABLE, ALTER VIEW ... RENAME TO, DROP (of several relations, with CASCADE; of an index) and TRUNCATE:
the statements that change relations other relations depend on, with PostgreSQL's semantics.

A table whose columns or name change is made again: a new engine input holding its rows (with an added
column's DEFAULT, NULL, or its sequence's values), its constraints checked against them. The views that read
it are built again from their definitions, *pinned* first (``sql.dependencies``: every column qualified and
every ``*`` expanded against the table as it was, so that a view keeps reading what it read, as PostgreSQL
binds a view to its columns when it is created), renamed where the table or a column was, and each checked to
plan as before. So are the views and indexes that share an arrangement with them (a view built again cannot
keep importing an arrangement of a dataflow that goes), and dropped views kept running only for those: the
*closure* of the change. A column a view reads cannot be dropped without CASCADE, which drops that view and
the views reading it; dropping a column drops the constraints and indexes involving it, as in PostgreSQL.

Every statement is whole or nothing: its checks come first, and should building the new relations fail
(a constraint the rows break, an error of the engine) the relations as they were are built again from the
rows and definitions they had. In a durable database the change of the catalog takes a checkpoint before the
statement returns (``storage``), which holds the new definitions, the rows and the sequences.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import sqlglot
from sqlglot import exp

from ivm.db import constraints, ddl, dml, parsing, references, state, transactions
from ivm.engine.batch import Batch
from ivm.engine.strings import POOL
from ivm.errors import DataError, IntegrityError, InternalError
from planner.canon import arranged_form
from planner.compile import compile_view
from sql.allow import sql_name
from sql.catalog import Catalog, ForeignKey, Table, View
from sql.ddl import (
    add_columns,
    drop_columns,
    foreign_key_options,
    rename_column,
    rename_table,
    table_from_create,
    table_sql,
)
from sql.dependencies import (
    catalog_with,
    columns_read,
    pinned,
    relations_read,
    rename_columns,
    rename_relation,
    same_plan,
)
from sql.errors import SqlError, error_at
from sql.logical import Column, Plan, Scan, children
from sql.recursive import query_sql, with_key

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["alter_table", "drop", "truncate"]


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="postgres")


# -- what reads what ---------------------------------------------------------------------------------------


def _scans(plan: Plan) -> set[str]:
    """The relations a plan scans."""
    out, stack = set(), [plan]
    while stack:
        p = stack.pop()
        if isinstance(p, Scan):
            out.add(p.table)
        stack.extend(children(p))
    return out


def _definition(name: str, sql: str) -> exp.Expression:
    """A view's query, parsed from its stored text as opening a database parses it."""
    return parsing.parse(f"CREATE VIEW {_quoted(name)} AS {sql}")[0].expression


def _reads(st: state.ViewState, live: bool) -> set[str]:
    """The relations a view (``live``, or dropped and kept running) reads: by its definition, its plan and
    the arrangements it imported."""
    out = _scans(st.view.plan)
    for plan, _, _ in st.used:
        out |= _scans(plan)
    if live:
        out |= relations_read(_definition(st.view.name, st.view.sql))
    return out - {st.view.name}


def _dependents(db: Connection, names: Iterable[str]) -> list[str]:
    """The live views reading any of ``names`` by name, and those reading them, in the order of creation."""
    reads = {n: _reads(st, live=True) for n, st in db.views.items()}
    found: set[str] = set()
    frontier = set(names)
    while frontier:
        new = {v for v, r in reads.items() if v not in found and r & frontier}
        found |= new
        frontier = new
    return sorted(found - set(names), key=lambda v: db.views[v].created)


@dataclass
class _Closure:
    """What a change of some tables takes down: live views (built again or dropped), dropped views kept
    running for them (they go), and indexes (made again or dropped)."""

    views: list[str] = field(default_factory=list)  # in the order of creation
    retained: list[str] = field(default_factory=list)
    indexes: list[str] = field(default_factory=list)


def _closure(db: Connection, tables: set[str], dataflows: Iterable = ()) -> _Closure:
    """Everything that reads ``tables``, or an arrangement of a dataflow that does or of ``dataflows`` (see
    the module's docstring)."""
    relations = set(tables)
    hit: set[int] = {id(df) for df in dataflows}  # the dataflows taken down
    out = _Closure()
    index_dfs = {df.name: df for df in db.engine.dataflows if df.name.startswith("index:")}
    live = {name: _reads(st, live=True) for name, st in db.views.items()}
    kept = {owner: _reads(st, live=False) for owner, st in db.retained.items()}
    changed = True
    while changed:
        changed = False
        for name, st in db.views.items():
            if name not in out.views and (
                live[name] & relations or any(id(src) in hit for _, src in st.df.imports)
            ):
                out.views.append(name)
                relations.add(name)
                hit.add(id(st.df))
                changed = True
        for owner, st in db.retained.items():
            if owner not in out.retained and (
                kept[owner] & relations or any(id(src) in hit for _, src in st.df.imports)
            ):
                out.retained.append(owner)
                hit.add(id(st.df))
                changed = True
        owners = {df.name for df in db.engine.dataflows if id(df) in hit}
        for name, (rel, key) in db.catalog.indexes.items():
            df = index_dfs.get(f"index:{name}")
            reads_hit = df is not None and any(id(src) in hit for _, src in df.imports)
            if df is None and name not in out.indexes and rel not in relations:
                # an index naming an arrangement a dataflow taken down built: made again, it builds its own
                entry = db.registry.lookup(
                    arranged_form(db.catalog.relation_plan(rel), key, db.registry.uninterned), key
                )
                reads_hit = entry is not None and entry.built_by in owners
            if name not in out.indexes and (rel in relations or reads_hit):
                out.indexes.append(name)
                if df is not None:
                    hit.add(id(df))
                changed = True
    out.views.sort(key=lambda v: db.views[v].created)
    return out


# -- taking down and building again ------------------------------------------------------------------------


@dataclass
class _Made:
    """Relations to make: tables (definition, SQL, rows as columns and validity, sequences), then views and
    indexes (catalog version they came with, kind, name, SQL) in the order they came."""

    tables: list[tuple[Table, str, tuple[list, list], dict[str, int]]] = field(default_factory=list)
    items: list[tuple[int, str, str, str]] = field(default_factory=list)


def _rows(st: state.TableState) -> tuple[list, list]:
    """A table's rows, one per copy, as columns and validity in the table's order."""
    cols, valid, mult = state.contents(st.arranged, (), st.table)
    if len(mult) and (mult != 1).any():
        rep = np.repeat(np.arange(len(mult)), mult)
        cols = [c[rep] for c in cols]
        valid = [None if m is None else m[rep] for m in valid]
    return list(cols), list(valid)


def _as_made(db: Connection, tables: Iterable[str], closure: _Closure) -> _Made:
    """What makes ``tables`` and the closure's views and indexes again as they are now."""
    made = _Made()
    for name in tables:
        st = db.tables[name]
        made.tables.append((st.table, st.sql, _rows(st), dict(st.sequences)))
    for v in closure.views:
        made.items.append((db.views[v].created, "view", v, db.views[v].view.sql))
    for i in closure.indexes:
        seq, sql = db.index_sql.get(i, (0, None))
        if sql is not None:
            made.items.append((seq, "index", i, sql))
    made.items.sort()
    return made


def _take_down(db: Connection, tables: Iterable[str], closure: _Closure) -> None:
    """Remove ``tables`` and everything of the closure of their change."""
    for name in closure.indexes:
        df = next((d for d in db.engine.dataflows if d.name == f"index:{name}"), None)
        if df is not None:
            df.drop()
            db.registry.forget(f"index:{name}")
        db.catalog.indexes.pop(name, None)
        db.index_sql.pop(name, None)
    for name in reversed(closure.views):
        st = db.views.pop(name)
        del db.catalog.views[name]
        db.registry.drop_relation(name)
        st.df.drop()
        db.registry.forget(st.df.name)
    for owner in closure.retained:
        st = db.retained.pop(owner)
        st.df.drop()
        db.registry.forget(owner)
    for name in tables:
        ddl._forget_table(db, name)
    ddl._release_unshared(db)  # dropped views kept running only for the views that went
    state.changed(db)


def _make(db: Connection, made: _Made) -> None:
    """Make the tables of ``made`` holding their rows, then its views and indexes in order."""
    if made.tables:
        for table, sql, (cols, valid), sequences in made.tables:
            ddl._add_table(db, table, sql)
            st = db.tables[table.name]
            st.sequences.update(sequences)
            loose = db.registry.uninterned(table.name)
            cols = list(cols)
            for p, c in enumerate(table.columns):  # text in codes the table may hold (canonical in keys)
                if c.type.kind == "text" and p not in loose and len(cols[p]):
                    at = np.arange(len(cols[p])) if valid[p] is None else np.flatnonzero(valid[p])
                    cols[p] = cols[p].copy()
                    cols[p][at] = POOL.canonical(cols[p][at])
            n = len(cols[0]) if cols else 0
            batch = Batch.build(cols, valid, np.full(n, db.time), np.ones(n, np.int64))
            st.input.send(constraints.check_write(db, st, batch))
        transactions.advance(db)
        db.engine.step()
        transactions.stop_failed(db, db.engine.failed)
    for _, kind, name, sql in made.items:
        if kind == "view":
            _view(db, name, sql)
        else:
            ddl.create_index(db, parsing.parse(sql)[0], undoable=False)


def _view(db: Connection, name: str, sql: str) -> None:
    """Build view ``name`` of ``sql`` again (a view in error stays in error, as it was)."""
    query = _definition(name, sql)
    plan = db._plan(query)
    view = View(name, plan, query_sql(query))
    compiled = compile_view(db.engine, db.registry, name, plan)
    db.catalog.views[name] = view
    db.views[name] = state.ViewState(view, compiled, state.changed(db))
    db.engine.step()
    transactions.stop_failed(db, db.engine.failed)


def _restructure(db: Connection, tables: set[str], closure: _Closure, new: _Made) -> None:
    """Replace ``tables`` and the closure of their change by what ``new`` makes, whole or not at all: should
    making it fail, what was is made again and the error raised. Inside a transaction, its rollback makes
    again what was."""
    old = _as_made(db, tables, closure)
    followed = [(sub, sub.arranged) for sub in db.subscriptions if sub.ended is None]
    _take_down(db, tables, closure)
    try:
        _make(db, new)
        _resubscribe(db, followed, tables)
    except BaseException as err:
        try:
            _made_again(db, new, old, followed)
        except BaseException as again:
            db.broken = (
                f"{type(again).__name__} while putting back the relations a failed statement changed: {again}"
            )
            raise InternalError(f"{db.broken}; the database cannot be used any more") from err
        raise
    if db.in_transaction or db.in_steps:
        db.undo.append(lambda: _made_again(db, new, old))


def _made_again(db: Connection, new: _Made, old: _Made, followed: list | None = None) -> None:
    """Take down what ``new`` made (and what reads it) and make ``old`` again."""
    if followed is None:
        followed = [(sub, sub.arranged) for sub in db.subscriptions if sub.ended is None]
    made = {t.name for t, _, _, _ in new.tables if t.name in db.tables}
    undone = _closure(db, made)
    for _, kind, name, _ in new.items:  # what was made without reading the tables
        if kind == "view" and name in db.views and name not in undone.views:
            undone.views.append(name)
        elif kind == "index" and name in db.catalog.indexes and name not in undone.indexes:
            undone.indexes.append(name)
    undone.views.sort(key=lambda v: db.views[v].created)
    _take_down(db, made, undone)
    _make(db, old)
    _resubscribe(db, followed, ())


def _unwritten(db: Connection, stmt: exp.Expression, tables: Iterable[str]) -> None:
    """Inside a transaction, a table it has written to cannot be altered or dropped (its changes wait in the
    table's old shape)."""
    for t in tables:
        if db.pending.get(t):
            raise error_at(
                stmt,
                f"table {t!r} has changes in this transaction: altering or dropping it after them is not "
                "supported (COMMIT them first)",
                unsupported=True,
            )


def _resubscribe(db: Connection, followed: list, tables: Iterable[str]) -> None:
    """Subscriptions go on with the relations built again with the same rows and columns (views, and tables
    put back), and end, saying why, for the ``tables`` changed and the views dropped; ``followed`` holds each
    with the arrangement it read before."""
    for sub, before in followed:
        name = sub.relation
        st = db.views.get(name) or db.tables.get(name)
        if name in tables or st is None:
            sub.ended = f"relation {name!r} was dropped or altered: subscribe to it again"
        elif st.arranged is not before:
            sub.follow(st.arranged)


# -- views carried over a change of a table ----------------------------------------------------------------

_PROBE = "\x00ivm probe {}"  # a column name no statement can write: what a name that reads nothing is


def _carried(
    db: Connection, table: str, views: list[str], stmt: exp.Expression
) -> dict[str, tuple[exp.Expression, exp.Expression]]:
    """Per view reading ``table`` by name among ``views``: its definition, and that definition pinned
    against the catalog as it is (``sql.dependencies``), checked to plan as it does."""
    out = {}
    for v in views:
        st = db.views[v]
        query = _definition(v, st.view.sql)
        if table not in relations_read(query):
            continue
        try:
            fixed = pinned(query, db.catalog)
            ok = same_plan(query, db.catalog, fixed, db.catalog)
        except Exception:  # an error of the statement, or a shape the scope analysis does not take
            ok = False
        if not ok:
            raise error_at(
                stmt,
                f"cannot alter table {table!r}: the definition of view {v!r} cannot be carried over (drop it "
                "first, and create it again after)",
                unsupported=True,
            )
        out[v] = (query, fixed)
    return out


def _rewritten(
    db: Connection,
    stmt: exp.Expression,
    relation: str,
    views: list[str],
    rewrite,
    catalog: Catalog,
    renamed=None,
) -> dict[str, str]:
    """The new text of each view among ``views`` reading ``relation``: its pinned definition ``rewrite``-n,
    which must plan against ``catalog`` as it did (``renamed`` naming the relations of the old plan anew), or
    the statement is refused naming the view."""
    sql = {}
    for v, (query, fixed) in _carried(db, relation, views, stmt).items():
        new = rewrite(fixed)
        try:
            ok = same_plan(query, db.catalog, new, catalog, renamed)
        except Exception:  # a definition that does not plan (or not in this shape): not carried over
            ok = False
        if not ok:
            raise _refuse_changed(stmt, relation, v)
        sql[v] = query_sql(new)
    return sql


def _refuse_changed(stmt: exp.Expression, table: str, view: str) -> SqlError:
    return error_at(
        stmt,
        f"cannot alter table {table!r}: view {view!r} would not read what it reads now (drop it first, and "
        "create it again after)",
        unsupported=True,
    )


def _probe(table: Table, names: Iterable[str]) -> Table:
    """``table`` with columns ``names`` named so that nothing reads them by name."""
    renamed = {n: _PROBE.format(k) for k, n in enumerate(names)}
    columns = tuple(Column(renamed.get(c.name, c.name), c.type, c.nullable) for c in table.columns)
    return Table(
        table.name,
        columns,
        table.primary_key,
        table.domains,
        table.defaults,
        (),
        (),
        table.identities,
        primary_key_name=table.primary_key_name,
    )


def _index_sql(name: str, rel: str, columns: list[str]) -> str:
    return f"CREATE INDEX {_quoted(name)} ON {_quoted(rel)} ({', '.join(map(_quoted, columns))})"


# -- ALTER TABLE -------------------------------------------------------------------------------------------


def alter_table(db: Connection, stmt: exp.Alter) -> None:
    """ALTER TABLE [IF EXISTS] [ONLY] name: ADD [COLUMN] [IF NOT EXISTS] ..., DROP [COLUMN] [IF EXISTS] ...
    [CASCADE | RESTRICT] (any number of these), RENAME [COLUMN] a TO b, or RENAME TO new_name."""
    kind = (stmt.args.get("kind") or "").upper()
    if kind == "VIEW":
        return _alter_view(db, stmt)
    if kind == "INDEX":
        return _alter_index(db, stmt)
    if kind != "TABLE":
        raise error_at(stmt, f"ALTER {kind} is not supported", unsupported=True)
    name = stmt.this.name
    if name not in db.tables:
        if name in db.views:
            raise error_at(stmt.this, f"{name!r} is not a table")
        if stmt.args.get("exists"):
            return None
        raise error_at(stmt.this, f"relation {name!r} does not exist")
    actions = stmt.args.get("actions") or []
    if stmt.args.get("not_valid"):
        raise error_at(stmt, "NOT VALID is not supported", unsupported=True)
    for a in actions:
        if not isinstance(
            a, (exp.ColumnDef, exp.Drop, exp.RenameColumn, exp.AlterRename, exp.AlterColumn, exp.AddConstraint)
        ):
            raise error_at(a, f"ALTER TABLE ... {a.key.upper()} is not supported", unsupported=True)
    renames = [a for a in actions if isinstance(a, (exp.RenameColumn, exp.AlterRename))]
    if renames and len(actions) > 1:
        raise error_at(renames[0], "RENAME cannot be combined with other ALTER TABLE actions")
    changes = [a for a in actions if _changes_definition(a)]
    _unwritten(db, stmt, [name])
    if changes and len(changes) < len(actions):
        return _in_passes(db, stmt, name, actions)
    st = db.tables[name]
    if isinstance(actions[0], exp.RenameColumn):
        return _rename_column(db, stmt, st, actions[0])
    if isinstance(actions[0], exp.AlterRename):
        return _rename_table(db, stmt, st, actions[0])
    if changes:
        return _change_definition(db, stmt, st, actions)
    return _add_drop(db, stmt, st, actions)


def _in_passes(db: Connection, stmt: exp.Alter, name: str, actions: list) -> None:
    """ADD or DROP COLUMN together with ALTER COLUMN or constraints, in PostgreSQL's passes: columns and
    constraints dropped, defaults and NOT NULL dropped and types changed, columns added, then NOT NULL,
    defaults and constraints set. Each pass makes the table again; should one fail, those before it are taken
    back, so that the statement is whole or not at all."""
    before = [a for a in actions if _changes_definition(a) and _before_adding(a)]
    after = [a for a in actions if _changes_definition(a) and not _before_adding(a)]
    drops = [a for a in actions if isinstance(a, exp.Drop) and not _changes_definition(a)]
    adds = [a for a in actions if isinstance(a, exp.ColumnDef)]
    passes = [(_add_drop, drops), (_change_definition, before), (_add_drop, adds), (_change_definition, after)]
    mark, stepping = len(db.undo), db.in_steps
    db.in_steps = True
    try:
        for change, part in passes:
            if part:
                change(db, stmt, db.tables[name], part)
    except BaseException:
        undo = db.undo[mark:]
        del db.undo[mark:]
        for u in reversed(undo):
            u()
        raise
    finally:
        db.in_steps = stepping
        if not db.in_transaction and not stepping:
            del db.undo[mark:]


def _before_adding(action: exp.Expression) -> bool:
    """Whether PostgreSQL takes an ALTER TABLE action before it adds columns: constraints dropped, types
    changed, defaults and NOT NULL dropped."""
    if isinstance(action, exp.AlterColumn):
        return (
            action.args.get("dtype") is not None
            or action.args.get("allow_null") is True
            or bool(action.args.get("drop"))
        )
    return isinstance(action, exp.Drop)


def _changes_definition(action: exp.Expression) -> bool:
    """Whether an ALTER TABLE action is one ``_change_definition`` takes."""
    if isinstance(action, exp.Drop):
        return (action.args.get("kind") or "").upper() == "CONSTRAINT"
    return isinstance(action, (exp.AlterColumn, exp.AddConstraint))


def _change_definition(db: Connection, stmt: exp.Alter, st: state.TableState, actions: list) -> None:
    """ALTER [COLUMN] c TYPE t [USING e] | SET DEFAULT e | DROP DEFAULT | SET NOT NULL | DROP NOT NULL, ADD
    [CONSTRAINT name] PRIMARY KEY | UNIQUE | CHECK and DROP CONSTRAINT [IF EXISTS] name, in PostgreSQL's order:
    the table's definition is written again with each change and read back (so that what CREATE TABLE checks,
    this checks), its rows converted to a column's new type as PostgreSQL assigns them (or by USING), then
    the table is made again, its constraints checked against every row, and the views reading it built again.
    A view reading a column whose type changes refuses the change, as in PostgreSQL."""
    table = st.table
    create = sqlglot.parse_one(table_sql(table), dialect="postgres")
    schema = create.this
    retyped: dict[str, exp.Expression] = {}  # column -> its value in the new type (USING, or the column)
    not_null: list[tuple[str, exp.Expression]] = []
    # in PostgreSQL's passes: constraints dropped, types changed, defaults and NOT NULL, constraints added
    for a in actions:
        if isinstance(a, exp.Drop):
            _drop_constraint(table, schema, a)
    for a in sorted(
        (a for a in actions if isinstance(a, exp.AlterColumn)), key=lambda a: not a.args.get("dtype")
    ):
        _alter_column(table, schema, a, retyped, not_null)
    for a in actions:
        if isinstance(a, exp.AddConstraint):
            _add_constraint(table, schema, a)
    try:
        new = table_from_create(create)
    except SqlError as err:  # what CREATE TABLE refuses of the definition, pointed at the statement
        raise error_at(stmt, err.message, cls=type(err)) from None
    for p, c in enumerate(new.columns):
        if new.defaults[p] is not None and (table.defaults[p] is not new.defaults[p] or c.name in retyped):
            try:
                dml.default(new, p)
            except SqlError as err:
                raise error_at(stmt, f"DEFAULT of column {c.name!r}: {err.message}") from None
    if retyped:
        for v, (_, fixed) in _carried(db, table.name, list(db.views), stmt).items():
            read = columns_read(fixed, table.name) & set(retyped)
            if read:
                c = sorted(read)[0]
                raise error_at(
                    retyped[c],
                    f"cannot alter type of a column used by a view or rule: view {v!r} depends on column {c!r}",
                    unsupported=True,
                )
    cols, valid = _rows(st)
    if retyped:
        names = {(table.name, c.name): p for p, c in enumerate(table.columns)}
        resolve = dml.column_resolver(names, table)
        converted, converted_valid = list(cols), list(valid)
        for c, value in retyped.items():
            p = new.position(c)
            t = new.columns[p].type
            if not value.meta["using"] and t.kind == "text":  # anything is assigned to text as written
                value = exp.cast(value, "text")
            try:
                out, out_valid = dml.assign_values(
                    db, new, [(p, value, value)], resolve, cols, valid, len(cols[0])
                )
            except SqlError as err:
                if "but the value is of type" not in err.message:
                    raise
                raise error_at(
                    value,
                    f"column {c!r} cannot be cast automatically to type {t} (USING {c}::type converts it)",
                ) from None
            converted[p], converted_valid[p] = out[p], out_valid[p]
        cols, valid = converted, converted_valid
    for c, node in not_null:
        m = valid[new.position(c)]
        if m is not None and not m.all():
            raise error_at(
                node, f"column {c!r} of relation {table.name!r} contains null values", cls=IntegrityError
            )
    new = references.after_alter(db, stmt, table, new, {}, (cols, valid))
    names = [c.name for c in new.columns]
    _replace(
        db,
        table.name,
        new,
        dict(st.sequences),
        {},
        lambda i, rel, key: _index_sql(i, rel, [names[p] for p in key]),
        (cols, valid),
    )


def _column_def(table: Table, schema: exp.Schema, node: exp.Expression) -> exp.ColumnDef:
    for e in schema.expressions:
        if isinstance(e, exp.ColumnDef) and e.name == node.name:
            return e
    raise error_at(node, f"column {node.name!r} of relation {table.name!r} does not exist")


def _alter_column(table: Table, schema: exp.Schema, a: exp.AlterColumn, retyped: dict, not_null: list) -> None:
    col = _column_def(table, schema, a.this)
    name = col.name
    p = table.position(name)
    constraints = list(col.constraints)

    def kinds(*types: type) -> list[exp.ColumnConstraint]:
        return [c for c in constraints if isinstance(c.args.get("kind"), types)]

    identity = kinds(exp.GeneratedAsIdentityColumnConstraint)
    if a.args.get("dtype") is not None:
        col.set("kind", a.args["dtype"].copy())
        using = a.args.get("using") or None  # the parser sets False without USING
        value = using.copy() if using is not None else exp.column(name)
        value.meta.update((using if using is not None else a).meta)
        value.meta["using"] = using is not None
        retyped[name] = value
        return
    allow_null = a.args.get("allow_null")
    if allow_null is False:  # SET NOT NULL
        if not kinds(exp.NotNullColumnConstraint):
            constraints.append(exp.ColumnConstraint(kind=exp.NotNullColumnConstraint()))
        not_null.append((name, a))
    elif allow_null is True:  # DROP NOT NULL
        if p is not None and p in table.primary_key:
            raise error_at(a, f"column {name!r} is in a primary key")
        if identity:
            raise error_at(a, f"column {name!r} of relation {table.name!r} is an identity column")
        constraints = [c for c in constraints if c not in kinds(exp.NotNullColumnConstraint)]
    elif a.args.get("drop"):  # DROP DEFAULT
        if identity:
            raise error_at(a, f"column {name!r} of relation {table.name!r} is an identity column")
        constraints = [c for c in constraints if c not in kinds(exp.DefaultColumnConstraint)]
    elif a.args.get("default") is not None:  # SET DEFAULT
        if identity:
            raise error_at(a, f"column {name!r} of relation {table.name!r} is an identity column")
        constraints = [c for c in constraints if c not in kinds(exp.DefaultColumnConstraint)]
        constraints.append(
            exp.ColumnConstraint(kind=exp.DefaultColumnConstraint(this=a.args["default"].copy()))
        )
    else:
        raise error_at(a, f"{a.sql(dialect='postgres')} is not supported", unsupported=True)
    col.set("constraints", constraints)


def _add_constraint(table: Table, schema: exp.Schema, a: exp.AddConstraint) -> None:
    for k in a.expressions:
        inner = k.expressions if isinstance(k, exp.Constraint) else [k]
        for c in inner:
            if not isinstance(
                c, (exp.PrimaryKey, exp.UniqueColumnConstraint, exp.CheckColumnConstraint, exp.ForeignKey)
            ):
                raise error_at(c, f"ALTER TABLE ... ADD {c.sql(dialect='postgres')} is not supported", True)
            if isinstance(c, exp.ForeignKey):
                foreign_key_options(c.args["reference"], c)  # refused where it stands
        if isinstance(k, exp.Constraint):
            names = {e.name for e in schema.expressions if isinstance(e, exp.Constraint)}
            if k.name in names:
                raise error_at(k, f"constraint {k.name!r} for relation {table.name!r} already exists")
        schema.append("expressions", k.copy())


def _drop_constraint(table: Table, schema: exp.Schema, a: exp.Drop) -> None:
    for t in a.args.get("tables") or []:
        found = [e for e in schema.expressions if isinstance(e, exp.Constraint) and e.name == t.name]
        if not found:
            if a.args.get("exists"):
                continue  # PostgreSQL notes it and goes on
            raise error_at(t, f"constraint {t.name!r} of relation {table.name!r} does not exist")
        schema.set("expressions", [e for e in schema.expressions if e not in found])


def _add_drop(db: Connection, stmt: exp.Alter, st: state.TableState, actions: list) -> None:
    table = st.table
    adds: list[exp.ColumnDef] = []
    drops: dict[str, tuple[exp.Expression, bool]] = {}  # column -> (its node, CASCADE)
    for a in actions:
        if isinstance(a, exp.ColumnDef):
            there = table.position(a.name) is not None and a.name not in drops
            if a.args.get("exists") and (there or any(d.name == a.name for d in adds)):
                continue  # ADD COLUMN IF NOT EXISTS of a column there: PostgreSQL notes it and goes on
            adds.append(a)
            continue
        what = (a.args.get("kind") or "").upper()
        if what != "COLUMN":
            raise error_at(a, f"ALTER TABLE ... DROP {what} is not supported", unsupported=True)
        for col in a.args.get("tables") or []:
            if table.position(col.name) is None or col.name in drops:
                if a.args.get("exists"):
                    continue
                raise error_at(col, f"column {col.name!r} of relation {table.name!r} does not exist")
            drops[col.name] = (col, bool(a.args.get("cascade")))
    if not adds and not drops:
        return
    mid = drop_columns(table, list(drops))
    if not mid.columns:
        raise error_at(
            stmt, f"dropping every column of table {table.name!r} is not supported", unsupported=True
        )
    new = add_columns(mid, adds) if adds else mid
    for p, d in enumerate(new.defaults):
        if d is not None and mid.position(new.columns[p].name) is None:
            try:
                dml.default(new, p)
            except SqlError as err:
                raise error_at(d, f"DEFAULT of column {new.columns[p].name!r}: {err.message}") from None

    # the views: those reading a dropped column go with CASCADE, or refuse it; the others are pinned
    carried = _carried(db, table.name, list(db.views), stmt)
    reading = {v: columns_read(fixed, table.name) & set(drops) for v, (_, fixed) in carried.items()}
    reading = {v: cols for v, cols in reading.items() if cols}
    for v, cols in reading.items():
        c = next(c for c in drops if c in cols)
        if not drops[c][1]:
            raise error_at(
                drops[c][0],
                f"cannot drop column {c!r} of table {table.name!r}: view {v!r} depends on it (DROP ... CASCADE "
                "drops it too)",
            )
    gone = set(reading)
    gone |= set(_dependents(db, gone))
    probe_drop = catalog_with(db.catalog, {table.name: _probe(table, drops)})
    added = [c.name for c in new.columns if mid.position(c.name) is None]
    new_catalog = catalog_with(db.catalog, {table.name: new})
    probe_add = catalog_with(db.catalog, {table.name: _probe(new, added)})
    sql: dict[str, str] = {}
    for v, (_, fixed) in carried.items():
        if v in gone:
            continue
        try:
            ok = (not drops or same_plan(fixed, db.catalog, fixed, probe_drop)) and (
                not added or same_plan(fixed, new_catalog, fixed, probe_add)
            )
        except Exception:  # a definition that does not plan (or not in this shape): not carried over
            ok = False
        if not ok:
            raise _refuse_changed(stmt, table.name, v)
        sql[v] = query_sql(fixed)

    # the rows: kept columns as they are, added ones their DEFAULT, NULL or their sequences' next values
    cols, valid = _rows(st)
    n = len(cols[0])
    sequences = {c: v for c, v in st.sequences.items() if c not in drops}
    out_cols, out_valid = [], []
    for p, c in enumerate(new.columns):
        old = table.position(c.name) if c.name not in drops else None
        if old is not None:
            out_cols.append(cols[old])
            out_valid.append(valid[old])
            continue
        ident = new.identities[p]
        if ident is not None:
            last = ident.start + ident.increment * (n - 1)
            if n and not ident.minvalue <= last <= ident.maxvalue:
                what = "maximum" if ident.increment > 0 else "minimum"
                bound = ident.maxvalue if ident.increment > 0 else ident.minvalue
                sequence = f"{table.name}_{c.name}_seq"
                raise error_at(
                    stmt, f"nextval: reached {what} value of sequence {sequence!r} ({bound})", cls=DataError
                )
            out_cols.append(np.arange(n, dtype=np.int64) * ident.increment + ident.start)
            out_valid.append(None)
            sequences[c.name] = ident.start + ident.increment * n
            continue
        d = dml.default(new, p)
        if d is None and not c.nullable and n:
            node = next(a for a in adds if a.name == c.name)
            raise error_at(
                node, f"column {c.name!r} of relation {table.name!r} contains null values", cls=IntegrityError
            )
        out_cols.append(np.full(n, 0 if d is None else d, dtype=c.type.dtype))
        out_valid.append(None if d is not None else np.zeros(n, dtype=bool))
    new = references.after_alter(db, stmt, table, new, {}, (out_cols, out_valid))

    closure = _closure(db, {table.name})
    made = _Made([(new, table_sql(new), (out_cols, out_valid), sequences)])
    for v in closure.views:
        if v not in gone:
            made.items.append((db.views[v].created, "view", v, sql.get(v, db.views[v].view.sql)))
    names = [c.name for c in table.columns]
    for i in closure.indexes:
        rel, key = db.catalog.indexes[i]
        seq, text = db.index_sql.get(i, (0, None))
        if rel == table.name:
            columns = [names[p] for p in key]
            if any(c in drops for c in columns):
                continue  # PostgreSQL drops an index on a dropped column
            text = _index_sql(i, rel, columns)
        elif rel in gone:
            continue
        if text is not None:
            made.items.append((seq, "index", i, text))
    made.items.sort()
    _restructure(db, {table.name}, closure, made)


def _rename_column(db: Connection, stmt: exp.Alter, st: state.TableState, action: exp.RenameColumn) -> None:
    table = st.table
    old, new_name = action.this.name, action.args["to"].name
    if table.position(old) is None:
        if action.args.get("exists"):
            return
        raise error_at(action.this, f"column {old!r} does not exist")
    if table.position(new_name) is not None:
        raise error_at(action.args["to"], f"column {new_name!r} of relation {table.name!r} already exists")
    new = references.after_alter(db, stmt, table, rename_column(table, old, new_name), {old: new_name})
    new_catalog = catalog_with(db.catalog, {table.name: new})

    def rewrite(q: exp.Expression) -> exp.Expression:
        return rename_columns(q, table.name, {old: new_name})

    sql = _rewritten(db, stmt, table.name, list(db.views), rewrite, new_catalog)
    sequences = {new_name if c == old else c: v for c, v in st.sequences.items()}
    names = [c.name for c in new.columns]
    _replace(
        db, table.name, new, sequences, sql, lambda i, rel, key: _index_sql(i, rel, [names[p] for p in key])
    )
    references.renamed(db, table.name, table.name, {old: new_name})


def _rename_table(db: Connection, stmt: exp.Alter, st: state.TableState, action: exp.AlterRename) -> None:
    table = st.table
    target = action.this
    if target.args.get("db") or target.args.get("catalog"):
        raise error_at(target, "a schema-qualified new name is not supported", unsupported=True)
    new_name = target.name
    if db.catalog.exists(new_name):
        raise error_at(target, f"relation {new_name!r} already exists")
    new = rename_table(table, new_name)
    new_catalog = catalog_with(db.catalog, {table.name: None, new_name: new})
    references.after_alter(db, stmt, table, new, {})
    sql = {}
    for v, (query, fixed) in _carried(db, table.name, list(db.views), stmt).items():
        renamed = rename_relation(fixed, table.name, new_name)
        try:
            ok = same_plan(
                query, db.catalog, renamed, new_catalog, lambda n: new_name if n == table.name else n
            )
        except Exception:  # a definition that does not plan (or not in this shape): not carried over
            ok = False
        if not ok:
            raise _refuse_changed(stmt, table.name, v)
        sql[v] = query_sql(renamed)
    names = [c.name for c in table.columns]
    _replace(
        db,
        table.name,
        new,
        dict(st.sequences),
        sql,
        lambda i, rel, key: _index_sql(i, new_name, [names[p] for p in key]),
    )
    references.renamed(db, table.name, new_name, {})


def _replace(
    db: Connection, name: str, new: Table, sequences: dict, sql: dict[str, str], index, rows=None
) -> None:
    """Make table ``name`` again as ``new`` with its rows (or ``rows``), the views of the closure with the
    definitions ``sql`` gives (their own otherwise), and its indexes as ``index(name, relation, key)`` writes
    them."""
    st = db.tables[name]
    closure = _closure(db, {name})
    made = _Made([(new, table_sql(new), _rows(st) if rows is None else rows, sequences)])
    for v in closure.views:
        made.items.append((db.views[v].created, "view", v, sql.get(v, db.views[v].view.sql)))
    for i in closure.indexes:
        rel, key = db.catalog.indexes[i]
        seq, text = db.index_sql.get(i, (0, None))
        if rel == name:
            text = index(i, rel, key)
        if text is not None:
            made.items.append((seq, "index", i, text))
    made.items.sort()
    _restructure(db, {name}, closure, made)


# -- DROP --------------------------------------------------------------------------------------------------


def _alter_view(db: Connection, stmt: exp.Alter) -> None:
    """ALTER [MATERIALIZED] VIEW [IF EXISTS] name RENAME TO new_name, or RENAME [COLUMN] a TO b: the view, the
    views reading it (their definitions reading it by its new name, or its column by the new one) and the
    indexes on them made again."""
    name = stmt.this.name
    if name not in db.views:
        if name in db.tables:
            raise error_at(stmt.this, f"{name!r} is not a view")
        if stmt.args.get("exists"):
            return
        raise error_at(stmt.this, f"relation {name!r} does not exist")
    actions = stmt.args.get("actions") or []
    if len(actions) == 1 and isinstance(actions[0], exp.RenameColumn):
        return _rename_view_column(db, stmt, name, actions[0])
    new_name = _new_name(db, actions, "VIEW")
    renamed_catalog = Catalog()
    renamed_catalog.tables = db.catalog.tables
    renamed_catalog.views = {new_name if n == name else n: v for n, v in db.catalog.views.items()}
    sql = _rewritten(
        db,
        stmt,
        name,
        list(db.views),
        lambda q: rename_relation(q, name, new_name),
        renamed_catalog,
        lambda n: new_name if n == name else n,
    )
    _views_made_again(db, name, new_name, sql, [c.name for c in db.views[name].view.columns])


def _views_made_again(db: Connection, name: str, new_name: str, sql: dict[str, str], names: list[str]) -> None:
    """View ``name`` made again as ``new_name`` (with columns ``names``), with the views reading it and the
    indexes on them; ``sql`` holds the new texts of the views whose definitions change."""
    closure = _closure(db, {name})
    closure.views = sorted({name, *closure.views}, key=lambda v: db.views[v].created)
    made = _Made()
    for v in closure.views:
        made.items.append(
            (db.views[v].created, "view", new_name if v == name else v, sql.get(v, db.views[v].view.sql))
        )
    for i in closure.indexes:
        rel, key = db.catalog.indexes[i]
        seq, text = db.index_sql.get(i, (0, None))
        if rel == name:
            text = _index_sql(i, new_name, [names[p] for p in key])
        if text is not None:
            made.items.append((seq, "index", i, text))
    made.items.sort()
    _restructure(db, set(), closure, made)


def _rename_view_column(db: Connection, stmt: exp.Alter, name: str, action: exp.RenameColumn) -> None:
    """ALTER VIEW name RENAME [COLUMN] old TO new: the view's definition names its columns
    (``ddl.renamed_columns``), and the views reading the column read it by its new name."""
    old, new_name = action.this.name, action.args["to"].name
    names = [c.name for c in db.views[name].view.columns]
    if old not in names:
        if action.args.get("exists"):
            return
        raise error_at(action.this, f"column {old!r} does not exist")
    if new_name in names:
        raise error_at(action.args["to"], f"column {new_name!r} of relation {name!r} already exists")
    query = _unnamed(_definition(name, db.views[name].view.sql), name)
    own = ddl.renamed_columns(query, name, [new_name if n == old else n for n in names])
    renamed_view = View(name, db._plan(own), query_sql(own))
    new_catalog = Catalog()
    new_catalog.tables = db.catalog.tables
    new_catalog.views = {**db.catalog.views, name: renamed_view}
    readers = [v for v in db.views if v != name]
    sql = _rewritten(db, stmt, name, readers, lambda q: rename_columns(q, name, {old: new_name}), new_catalog)
    sql[name] = renamed_view.sql
    _views_made_again(db, name, name, sql, [c.name for c in renamed_view.columns])


def _unnamed(query: exp.Expression, name: str) -> exp.Expression:
    """A view's query without the renaming of its columns that ``ddl.renamed_columns`` put around it, if it
    has one (so that renaming again does not nest)."""
    key = with_key(query)
    source = query.args.get("from_") or query.args.get("from")
    inner = source.this if source is not None else None
    own = (
        isinstance(query, exp.Select)
        and len(query.expressions) == 1
        and isinstance(query.expressions[0], exp.Star)
        and isinstance(inner, exp.Subquery)
        and inner.alias == name
        and bool(inner.args["alias"].columns)
        and not any(v for k, v in query.args.items() if k not in ("expressions", "from", "from_", key))
    )
    if not own:
        return query
    body = inner.this.copy()
    if query.args.get(key) is not None:
        body.set(key, query.args[key].copy())
    return body


def _alter_index(db: Connection, stmt: exp.Alter) -> None:
    """ALTER INDEX [IF EXISTS] name RENAME TO new_name: the index and the arrangement it built take the new
    name (nothing is built again; the views reading it keep reading it)."""
    name = stmt.this.name
    if name not in db.catalog.indexes:
        if db.catalog.exists(name):
            raise error_at(stmt.this, f"{name!r} is not an index")
        if stmt.args.get("exists"):
            return
        raise error_at(stmt.this, f"relation {name!r} does not exist")
    new_name = _new_name(db, stmt.args.get("actions") or [], "INDEX")
    _rename_index(db, name, new_name)
    if db.in_transaction:
        db.undo.append(lambda: _rename_index(db, new_name, name))


def _new_name(db: Connection, actions: list, kind: str) -> str:
    """The name of ALTER ``kind`` ... RENAME TO new_name, refused if the actions are other, or the name is
    taken (tables, views and indexes share names, as in PostgreSQL)."""
    if len(actions) != 1 or not isinstance(actions[0], exp.AlterRename):
        what = sql_name(actions[0])
        raise error_at(actions[0], f"ALTER {kind} ... {what} is not supported", unsupported=True)
    target = actions[0].this
    if target.args.get("db") or target.args.get("catalog"):
        raise error_at(target, "a schema-qualified new name is not supported", unsupported=True)
    if db.catalog.exists(target.name) or target.name in db.catalog.indexes:
        raise error_at(target, f"relation {target.name!r} already exists")
    return target.name


def _rename_index(db: Connection, name: str, new_name: str) -> None:
    rel, key = db.catalog.indexes.pop(name)
    db.catalog.indexes[new_name] = (rel, key)
    seq, _ = db.index_sql.pop(name)
    names = [c.name for c in db.catalog.relation_plan(rel, None).columns]
    db.index_sql[new_name] = (seq, _index_sql(new_name, rel, [names[p] for p in key]))
    old, new = f"index:{name}", f"index:{new_name}"
    for df in db.engine.dataflows:
        if df.name == old:
            df.name = new
            db.engine.step_seconds[new] = db.engine.step_seconds.pop(old, 0.0)
    db.registry.retire(old, new)
    state.changed(db)


def _drop_index(db: Connection, stmt: exp.Drop) -> None:
    """DROP INDEX [IF EXISTS] name [CASCADE | RESTRICT]: the name goes; so does the arrangement it built,
    the views that read it made again with arrangements of their own."""
    names = [t.name for t in stmt.args.get("tables") or ([stmt.this] if stmt.this is not None else [])]
    node = (stmt.args.get("tables") or [stmt.this])[0]
    gone = [n for n in names if n in db.catalog.indexes]
    for n in names:
        if n not in db.catalog.indexes:
            if db.catalog.exists(n):
                raise error_at(node, f"{n!r} is not an index")
            if not stmt.args.get("exists"):
                raise error_at(node, f"index {n!r} does not exist")
    if not gone:
        return
    drop_indexes(db, gone)


def drop_indexes(db: Connection, gone: list[str]) -> None:
    """Drop indexes ``gone``: the arrangements they built go, and the views reading them are made again."""
    own = [df for df in db.engine.dataflows if df.name in {f"index:{n}" for n in gone}]
    closure = _closure(db, set(), own)
    made = _Made()
    for v in closure.views:
        made.items.append((db.views[v].created, "view", v, db.views[v].view.sql))
    for i in closure.indexes:
        seq, text = db.index_sql.get(i, (0, None))
        if i not in gone and text is not None:
            made.items.append((seq, "index", i, text))
    made.items.sort()
    closure.indexes = sorted({*closure.indexes, *gone})
    _restructure(db, set(), closure, made)


def drop(db: Connection, stmt: exp.Drop) -> None:
    """DROP TABLE | VIEW | MATERIALIZED VIEW [IF EXISTS] name [, ...] [CASCADE | RESTRICT]: without CASCADE,
    refused while another view reads one of them; with it, those views go too (and the views reading them)."""
    kind = (stmt.args.get("kind") or "").upper()
    if kind == "INDEX":
        return _drop_index(db, stmt)
    if kind not in ("TABLE", "VIEW", "MATERIALIZED VIEW"):
        raise error_at(stmt, f"DROP {kind} is not supported", unsupported=True)
    is_view = kind != "TABLE"
    what = "view" if is_view else "table"
    targets = stmt.args.get("tables") or ([stmt.this] if stmt.this is not None else [])
    names: list[str] = []
    for t in targets:
        name = t.name
        if (name not in db.views) if is_view else (name not in db.tables):
            if name in (db.tables if is_view else db.views):
                raise error_at(t, f"{name!r} is not a {what}")
            if stmt.args.get("exists"):
                continue  # PostgreSQL notes it and goes on
            raise error_at(t, f"{what} {name!r} does not exist")
        if name not in names:
            names.append(name)
    if not names:
        return
    dependents = _dependents(db, names)
    if dependents and not stmt.args.get("cascade"):
        v = dependents[0]
        reads = _reads(db.views[v], live=True)
        on = next((n for n in names if n in reads), None)
        if on is None:  # it reads a view that reads one of them
            on = next(n for n in names if v in _dependents(db, [n]))
        raise error_at(
            stmt, f"cannot drop {what} {on!r}: view {v!r} depends on it (DROP ... CASCADE drops it too)"
        )
    outside = [] if is_view else _referenced_from_outside(db, names)
    if outside and not stmt.args.get("cascade"):
        child, f = outside[0]
        raise error_at(
            stmt,
            f"cannot drop table {f.parent!r}: foreign key constraint {f.name!r} on table {child!r} depends on "
            "it (DROP ... CASCADE drops the constraint)",
        )
    if not is_view:
        _unwritten(db, stmt, names)
    views = dependents + ([n for n in names if n not in dependents] if is_view else [])
    if is_view:
        views = sorted(views, key=lambda v: db.views[v].created)
        again = _Made()
        for v in views:
            again.items.append((db.views[v].created, "view", v, db.views[v].view.sql))
            for i, (rel, _) in db.catalog.indexes.items():
                seq, text = db.index_sql.get(i, (0, None))
                if rel == v and text is not None:
                    again.items.append((seq, "index", i, text))
        again.items.sort()
        for v in reversed(views):
            _drop_indexes(db, v)
            ddl._drop_view(db, v)
        if db.in_transaction:  # a rollback makes them again
            db.undo.append(lambda: _make(db, again))
        return
    closure = _closure(db, set(names))
    made = _Made()
    for v in closure.views:
        if v not in views:
            made.items.append((db.views[v].created, "view", v, db.views[v].view.sql))
    for i in closure.indexes:
        rel, _ = db.catalog.indexes[i]
        seq, text = db.index_sql.get(i, (0, None))
        if rel not in names and rel not in views and text is not None:
            made.items.append((seq, "index", i, text))
    made.items.sort()
    _restructure(db, set(names), closure, made)
    for child in dict.fromkeys(child for child, _ in outside):
        references.without(db, child, {f.name for c, f in outside if c == child})


def _referenced_from_outside(db: Connection, names: Iterable[str]) -> list[tuple[str, ForeignKey]]:
    """The foreign keys of tables other than ``names`` that reference one of them, with their tables."""
    names = set(names)
    return [
        (st.table.name, f)
        for n in names
        for st, f in references.referencing(db, n)
        if st.table.name not in names
    ]


def _drop_indexes(db: Connection, relation: str) -> None:
    """Drop the indexes on ``relation`` (PostgreSQL drops them with it)."""
    names = [i for i, (rel, _) in db.catalog.indexes.items() if rel == relation]
    if names:
        _take_down(db, (), _Closure(indexes=names))


# -- TRUNCATE ----------------------------------------------------------------------------------------------


def truncate(db: Connection, stmt: exp.TruncateTable) -> None:
    """TRUNCATE [TABLE] name [, ...] [RESTART IDENTITY | CONTINUE IDENTITY] [CASCADE | RESTRICT]: every row
    of the tables deleted, as one change (views see the deletions); RESTART IDENTITY sets their sequences back
    to their start, and a rollback puts them back. A table another table's foreign key references is
    truncated only with that table (CASCADE adds it, and the tables referencing it in turn)."""
    states: list[state.TableState] = []
    for t in stmt.expressions:
        if t.name not in db.tables:
            if t.name in db.views:
                raise error_at(t, f"{t.name!r} is not a table")
            raise error_at(t, f"relation {t.name!r} does not exist")
        if db.tables[t.name] not in states:
            states.append(db.tables[t.name])
    while outside := _referenced_from_outside(db, [st.table.name for st in states]):
        child, f = outside[0]
        if (stmt.args.get("option") or "").upper() != "CASCADE":
            raise error_at(
                stmt,
                f"cannot truncate a table referenced in a foreign key constraint: table {child!r} references "
                f"{f.parent!r} (truncate table {child!r} at the same time, or use TRUNCATE ... CASCADE)",
            )
        states += [db.tables[c] for c in dict.fromkeys(c for c, _ in outside)]
    own = not db.in_transaction
    if own:
        transactions.begin(db, implicit=True)
    try:
        for st in states:
            transactions.write(db, st, dml.truncate(db, st), foreign_keys=False)
        if (stmt.args.get("identity") or "").upper() == "RESTART":
            before = {st.table.name: dict(st.sequences) for st in states if st.sequences}
            for st in states:
                for p, ident in enumerate(st.table.identities):
                    if ident is not None:
                        st.sequences[st.table.columns[p].name] = ident.start
                        db.sequence_changes.add(st.table.name)
            db.undo.append(lambda: _put_back(db, before))
        if own:
            transactions.commit(db)
    except BaseException:
        if own and db.in_transaction:
            transactions.rollback(db)
        raise


def _put_back(db: Connection, sequences: dict[str, dict[str, int]]) -> None:
    for name, values in sequences.items():
        if name in db.tables:
            db.tables[name].sequences.update(values)
            db.sequence_changes.add(name)
