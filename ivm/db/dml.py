"""DML: the changes INSERT, DELETE and UPDATE make to a table, and COPY ... FROM a file.

Each statement becomes its table and a batch of changes (rows added with multiplicity +1, rows removed with
-1), computed against the table's rows as of now (the transaction's pending changes included), with what its
RETURNING shows (``Written``); the connection then checks it and adds it to the transaction
(``transactions.write``). Constants assigned to columns are converted as PostgreSQL assigns them, DEFAULT
included. UPDATE and DELETE that read other relations (FROM, USING, subqueries, WITH) go through a query
(``ivm.db.joined``); INSERT ... ON CONFLICT is ``ivm.db.upsert``.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import joined, queries, rows, state, upsert
from ivm.db.copying import read_copy
from ivm.db.returning import Returning, Scope, resolver
from ivm.db.returning import items as returning_items
from ivm.engine.batch import Batch
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.strings import POOL
from ivm.errors import DataError, Error
from planner.expr import compile_predicate, evaluate
from planner.values import column_from_values, encode, parse_engine, to_engine_value
from sql.catalog import Table
from sql.datetimes import TIME_FUNCTIONS, current_time
from sql.errors import SqlError, UnsupportedError, error_at
from sql.logical import ColRef
from sql.scalar import and_parts, assigned, boolean, cast_to, translate_scalar
from sql.translate import qualify_query
from sql.types import SqlType

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = [
    "Written",
    "truncate",
    "next_values",
    "run",
    "insert",
    "delete",
    "update",
    "copy",
    "default",
    "column_resolver",
    "assign_values",
    "assignments",
    "target_of",
    "returning_of",
]


@dataclass
class Written:
    """What a statement writes: its table, the change (not checked yet), the rows it counts, and its RETURNING
    (over the rows the change adds, ``sign`` 1, or removes, -1, followed by ``extras``: columns of values
    computed for those rows, in their order)."""

    st: state.TableState
    batch: Batch
    count: int
    returning: Returning | None = None
    extras: tuple[list, list] | None = None
    sign: int = 1
    kept: frozenset[int] = frozenset()  # columns each row the change adds has from the row it replaces
    # an UPDATE's (start, n): its rows start + i (old) became rows start + n + i (new)
    pairs: tuple[int, int] | None = None

    def named(self, err: Error) -> Error:
        """``err``, about a row of the change (``err.row``), saying which row by its key (or whole, in a
        table without one): the change's positions mean nothing to the statement's author."""
        table = self.st.table
        i = err.row
        if i is None or not 0 <= i < len(self.batch):
            return err
        key = list(table.primary_key) or list(range(len(table.columns)))
        cols = [self.batch.columns[p] for p in key]
        valid = [self.batch.valid[p] for p in key]
        which = "deleted" if self.batch.diffs[i] < 0 else "new"
        shown = rows.describe(table, key, cols, valid, i)
        out = type(err)(f"{err.message}: the {which} row with {shown}", err.line, err.col)
        out.row = i
        return out

    def result(self, checked: Batch) -> tuple | None:
        """RETURNING's rows over the change as the table's checks left it (a query's result), or None."""
        if self.returning is None:
            return None
        rows = checked.take(np.flatnonzero(checked.diffs * self.sign > 0))
        cols, valid = list(rows.columns), list(rows.valid)
        if self.extras is not None:
            cols += self.extras[0]
            valid += self.extras[1]
        return self.returning.result(cols, valid, len(rows))


def run(db: Connection, stmt: exp.Expression) -> Written:
    """INSERT, UPDATE or DELETE: what it writes."""
    if isinstance(stmt, exp.Insert):
        st, batch = insert(db, stmt)
        target, alias = target_of(stmt)
        if stmt.args.get("conflict") is not None:
            return upsert.on_conflict(db, stmt, st, alias, batch)
        return Written(st, batch, len(batch), returning_of(db, stmt, st, target, alias))
    target, alias = target_of(stmt)
    st = _table(db, target)
    if isinstance(stmt, exp.Delete):
        if joined.needs_query(stmt, []):
            return joined.delete(db, stmt, st, target, alias)
        st, batch = delete(db, stmt)
        return Written(st, batch, len(batch), returning_of(db, stmt, st, target, alias), sign=-1)
    assigns = assignments(st.table, stmt.expressions)
    if joined.needs_query(stmt, [v for _, v, _ in assigns]):
        return joined.update(db, stmt, st, target, alias, assigns)
    st, batch = update(db, stmt, assigns)
    kept = frozenset(range(len(st.table.columns))) - {p for p, _, _ in assigns}
    n = len(batch) // 2
    return Written(st, batch, n, returning_of(db, stmt, st, target, alias), kept=kept, pairs=(0, n))


def target_of(stmt: exp.Expression) -> tuple[exp.Table, str]:
    """The table a statement writes (its node) and the name its columns are qualified by: its alias, or its
    name."""
    t = stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this
    return t, t.alias or t.name


def returning_of(
    db: Connection, stmt: exp.Expression, st: state.TableState, target: exp.Table, alias: str
) -> Returning | None:
    """RETURNING's items over the table's rows (those written), or None without RETURNING."""
    node = stmt.args.get("returning")
    if node is None:
        return None
    table = st.table
    listed, names = returning_items(node)
    if isinstance(stmt, exp.Insert) and alias != "excluded":
        for col in node.find_all(exp.Column):
            if col.table == "excluded":
                raise error_at(col, "invalid reference to FROM-clause entry for table 'excluded'")
    probe = exp.Select(expressions=listed)
    probe.set("from_", exp.From(this=exp.Table(this=target.this.copy(), alias=target.args.get("alias"))))
    qualified = qualify_query(probe, db.catalog).expressions
    scopes = {alias: Scope([c.name for c in table.columns], [c.type for c in table.columns])}
    return Returning.of(qualified, names, resolver(scopes, table, alias))


def assignments(table: Table, nodes: list[exp.Expression]) -> list[tuple[int, exp.Expression, exp.Expression]]:
    """SET's assignments as (column position, value, the node naming the column), one per column: DEFAULT is
    the column's default, and ``(a, b) = (x, y)`` or ``= (SELECT x, y ...)`` one per column."""
    out: list[tuple[int, exp.Expression, exp.Expression]] = []
    for assign in nodes:
        left, value = assign.this, assign.expression
        if isinstance(left, exp.Paren) and isinstance(value, exp.Subquery):
            left = exp.Tuple(expressions=[left.this])  # SET (a) = (SELECT ...)
        if isinstance(left, exp.Tuple):
            targets = list(left.expressions)
            if isinstance(value, exp.Subquery) and isinstance(value.this, exp.Select):
                sel = value.this
                for item in sel.expressions:
                    if (
                        isinstance(item, exp.Star)
                        or isinstance(item, exp.Column)
                        and isinstance(item.this, exp.Star)
                    ):
                        raise error_at(item, "SET (...) = (SELECT * ...) is not supported", unsupported=True)
                if len(sel.expressions) != len(targets):
                    raise error_at(value, "number of columns does not match number of values")
                values = []
                for item in sel.expressions:
                    one = value.copy()
                    one.this.set("expressions", [item.copy()])
                    values.append(one)
            elif isinstance(value, exp.Tuple):
                values = list(value.expressions)
                if len(values) != len(targets):
                    raise error_at(value, "number of columns does not match number of values")
            else:
                raise error_at(
                    value,
                    "source for a multiple-column UPDATE item must be a sub-SELECT or ROW() expression",
                    unsupported=True,
                )
            pairs = list(zip(targets, values, strict=True))
        else:
            pairs = [(left, value)]
        for col, v in pairs:
            if not isinstance(col, exp.Column) or col.table:
                raise error_at(col, f"{col.sql()} is not a column of table {table.name!r}")
            p = table.position(col.name)
            if p is None:
                raise error_at(col, f"column {col.name!r} of relation {table.name!r} does not exist")
            if any(p == q for q, _, _ in out):
                raise error_at(col, f"multiple assignments to same column {col.name!r}")
            if table.identities[p] is not None:
                if _is_default(v):
                    out.append((p, v, col))  # the sequence's next value for each row: see assign_values
                    continue
                if table.identities[p].always:
                    raise error_at(
                        v,
                        f"column {col.name!r} can only be updated to DEFAULT: it is an identity column defined "
                        "as GENERATED ALWAYS",
                    )
            if _is_default(v):
                v = table.defaults[p].copy() if table.defaults[p] is not None else exp.Null()
            out.append((p, v, col))
    return out


def assign_values(
    db: Connection,
    table: Table,
    assigns: list[tuple[int, exp.Expression, exp.Expression]],
    resolve,
    cols: list,
    valid: list,
    n: int,
) -> tuple[list, list]:
    """The table's columns after SET: ``cols`` and ``valid`` (the rows' columns first, then whatever else
    ``resolve`` reads) with each assigned column replaced by its value, converted as PostgreSQL assigns."""
    width = len(table.columns)
    out_cols, out_valid = list(cols[:width]), list(valid[:width])
    for p, value, node in assigns:
        column = table.columns[p]
        if table.identities[p] is not None and _is_default(value):
            out_cols[p], out_valid[p] = next_values(db, db.tables[table.name], p, n), None
            continue
        e = translate_scalar(value, resolve)
        e = assigned(node, e, column.type, column.name)
        data, mask = _assigned_values(e, cols, valid, n, column.name)
        if e.type.kind == "text" and p not in db.registry.uninterned(table.name):
            data = POOL.canonical(data)  # keys and tables without one hold canonical text only
        out_cols[p] = (
            np.broadcast_to(data, (n,)).astype(column.type.dtype)
            if len(data) != n
            else data.astype(column.type.dtype)
        )
        out_valid[p] = mask
    return out_cols, out_valid


def insert(db: Connection, stmt: exp.Insert) -> tuple[state.TableState, Batch]:
    """INSERT ... VALUES, DEFAULT VALUES or SELECT: the table and the rows it adds (not checked yet)."""
    st = _table(db, stmt.this)
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
    with_ = stmt.args.get("with_")
    if with_ is not None:
        source = _with(db, with_, source)
    defaults = [default(table, p) for p in range(len(table.columns))]
    identities = [p for p, i in enumerate(table.identities) if i is not None]
    if stmt.args.get("default"):  # INSERT ... DEFAULT VALUES
        return st, _generated(db, st, _rows_to_batch(db, table, [defaults]), {p: None for p in identities})
    if not isinstance(source, exp.Values):
        return st, _insert_select(db, st, positions, source, defaults, listed)
    rows = []
    widths = {len(t.expressions) if isinstance(t, exp.Tuple) else 1 for t in source.expressions}
    if len(widths) > 1:
        raise error_at(source, "VALUES lists must all be the same length")
    given: dict[int, list[int]] = {p: [] for p in identities}  # per identity column, the rows giving a value
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
            if p in given:
                _explicit_identity(table, p, v)
                given[p].append(r - 1)
            row[p] = _literal_value(v, table.columns[p].type, table.columns[p].name, r)
        rows.append(row)
    batch = _rows_to_batch(db, table, rows)
    return st, _generated(
        db, st, batch, {p: np.array(rows_given, dtype=np.int64) for p, rows_given in given.items()}
    )


def _explicit_identity(table: Table, p: int, node: exp.Expression) -> None:
    """A value given for identity column ``p`` on INSERT: refused when the column is GENERATED ALWAYS."""
    if table.identities[p].always:
        raise error_at(
            node,
            f"cannot insert a non-DEFAULT value into column {table.columns[p].name!r}: it is an identity "
            "column defined as GENERATED ALWAYS (OVERRIDING SYSTEM VALUE is not supported)",
        )


def _generated(
    db: Connection, st: state.TableState, batch: Batch, given: dict[int, np.ndarray | None]
) -> Batch:
    """``batch`` with the next values of each identity column's sequence in the rows not at ``given[p]``
    (None: no row gives a value), one per row in order."""
    if not given or not len(batch):
        return batch
    cols, valid = list(batch.columns), list(batch.valid)
    n = len(batch)
    for p, given_rows in given.items():
        need = np.ones(n, dtype=bool)
        if given_rows is not None and len(given_rows):
            need[given_rows] = False
        at = np.flatnonzero(need)
        if not len(at):
            continue
        cols[p] = cols[p].copy()
        cols[p][at] = next_values(db, st, p, len(at))
        if valid[p] is not None:
            valid[p] = valid[p].copy()
            valid[p][at] = True
            if valid[p].all():
                valid[p] = None
    return Batch(tuple(cols), tuple(valid), batch.times, batch.diffs)


def next_values(db: Connection, st: state.TableState, p: int, n: int) -> np.ndarray:
    """The next ``n`` values of the sequence of identity column ``p`` of table ``st``, handed out for good
    (a transaction that rolls back does not give them back, as in PostgreSQL)."""
    table = st.table
    ident = table.identities[p]
    name = table.columns[p].name
    nxt = st.sequences[name]
    last = nxt + ident.increment * (n - 1)
    bad = last > ident.maxvalue if ident.increment > 0 else last < ident.minvalue
    if bad or (n and not ident.minvalue <= nxt <= ident.maxvalue):
        bound = ident.maxvalue if ident.increment > 0 else ident.minvalue
        room = max((bound - nxt) // ident.increment + 1, 0)  # the values still there before the bound
        st.sequences[name] = nxt + ident.increment * room
        db.sequence_changes.add(table.name)
        what = "maximum" if ident.increment > 0 else "minimum"
        raise DataError(
            f"nextval: reached {what} value of sequence {table.name + '_' + name + '_seq'!r} ({bound})"
        )
    st.sequences[name] = nxt + ident.increment * n
    db.sequence_changes.add(table.name)
    return np.arange(n, dtype=np.int64) * ident.increment + nxt


def _with(db: Connection, with_: exp.With, source: exp.Expression | None) -> exp.Expression | None:
    """INSERT's source with the statement's WITH: a query reads it (after its own WITH queries' turn comes
    theirs); VALUES reads nothing of it, but its queries must still be valid."""
    if source is None or isinstance(source, exp.Values):
        probe = exp.Select(expressions=[exp.Literal.number(1)])
        probe.set("with_", with_.copy())
        db._plan(probe)
        return source
    source = source.copy()
    inner = source.args.get("with_")
    if inner is None:
        source.set("with_", with_.copy())
    else:
        both = exp.With(
            expressions=[c.copy() for c in with_.expressions] + list(inner.expressions),
            recursive=bool(with_.args.get("recursive") or inner.args.get("recursive")),
        )
        source.set("with_", both)
    return source


def _insert_select(
    db: Connection,
    st: state.TableState,
    positions: list[int],
    query: exp.Expression,
    defaults: list[object],
    listed: bool,
) -> Batch:
    table = st.table
    plan = db._plan(query)
    if len(plan.columns) > len(positions):
        raise error_at(query, "INSERT has more expressions than target columns")
    if len(plan.columns) < len(positions):
        if listed:
            raise error_at(query, "INSERT has more target columns than expressions")
        positions = positions[: len(plan.columns)]
    for p in positions[: len(plan.columns)]:
        if table.identities[p] is not None:
            _explicit_identity(table, p, query)
    cols, valid, mult = queries.evaluate(db, plan)
    rep = np.repeat(np.arange(len(mult)), mult)
    n = len(rep)
    out_cols = [
        np.full(n, 0 if d is None else d, dtype=c.type.dtype)
        for c, d in zip(table.columns, defaults, strict=True)
    ]
    out_valid: list = [np.full(n, d is not None) for d in defaults]
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
    batch = Batch.build(out_cols, out_valid, np.full(n, db.time), np.ones(n, np.int64))
    everyone = np.arange(n, dtype=np.int64)
    return _generated(
        db, st, batch, {p: everyone if p in positions else None for p, i in enumerate(table.identities) if i}
    )


def _rows_to_batch(db: Connection, table: Table, rows: list[list[object]]) -> Batch:
    cols, masks = [], []
    for i, c in enumerate(table.columns):
        data, mask = column_from_values([r[i] for r in rows], c.type)
        cols.append(data)
        masks.append(mask)
    n = len(rows)
    return Batch.build(cols, masks, np.full(n, db.time), np.ones(n, np.int64))


def delete(db: Connection, stmt: exp.Delete) -> tuple[state.TableState, Batch]:
    """DELETE FROM table [WHERE ...]: the table and the retraction of the rows it deletes."""
    st = _table(db, stmt.this)
    alias = target_of(stmt)[1]
    return st, _matching(db, st, stmt.args.get("where"), alias).negate()


def update(db: Connection, stmt: exp.Update, assigns: list | None = None) -> tuple[state.TableState, Batch]:
    """UPDATE table SET ... [WHERE ...]: the table and its change, the old rows retracted and the new added."""
    st = _table(db, stmt.this)
    table = st.table
    alias = target_of(stmt)[1]
    if assigns is None:
        assigns = assignments(table, stmt.expressions)
    sel = _matching(db, st, stmt.args.get("where"), alias)
    scopes = {alias: Scope([c.name for c in table.columns], [c.type for c in table.columns])}
    cols, valid = assign_values(
        db, table, assigns, resolver(scopes, table, alias), list(sel.columns), list(sel.valid), len(sel)
    )
    new = Batch.build(cols, valid, sel.times, sel.diffs)
    return st, Batch.concat([sel.negate(), new])


def truncate(db: Connection, st: state.TableState) -> Batch:
    """The retraction of every row of a table (TRUNCATE), with this transaction's changes."""
    return _current(db, st).negate()


def _table(db: Connection, node: exp.Expression) -> state.TableState:
    t = node.this if isinstance(node, exp.Schema) else node
    name = t.name
    if name not in db.tables:
        raise error_at(t, f"table {name!r} does not exist")
    return db.tables[name]


def _matching(db: Connection, st: state.TableState, where: exp.Where | None, alias: str) -> Batch:
    """The table's rows as of now (one update per copy) that ``where`` holds for."""
    keys = _fixed_keys(st.table, where.this, alias) if where is not None else None
    current = _current(db, st, keys)
    if keys is not None and not db.pending.get(st.table.name) and _keys_alone(st.table, where.this, alias):
        return current  # read by the very keys the condition asks for, and nothing else
    return current.take(_where(st, where, current, alias))


def _keys_alone(table: Table, cond: exp.Expression, alias: str) -> bool:
    """Whether ``cond`` only equates integer key columns with integer constants: then the rows read by the
    keys it fixes (``_fixed_keys``) are exactly those it holds for."""
    for c in and_parts(cond):
        if not isinstance(c, exp.EQ):
            return False
        col, value = (c.expression, c.this) if isinstance(c.expression, exp.Column) else (c.this, c.expression)
        if not isinstance(col, exp.Column) or col.table not in ("", alias):
            return False
        p = table.position(col.name)
        if p is None or p not in table.primary_key or table.columns[p].type.kind != "int":
            return False
        value = value.this if isinstance(value, exp.Neg) else value
        if not (isinstance(value, exp.Literal) and value.is_int):
            return False
    return True


def _where(st: state.TableState, where: exp.Where | None, current: Batch, alias: str) -> np.ndarray:
    if where is None:
        return np.ones(len(current), dtype=bool)
    table = st.table
    scopes = {alias: Scope([c.name for c in table.columns], [c.type for c in table.columns])}
    pred = boolean(where, translate_scalar(where.this, resolver(scopes, table, alias)))
    return compile_predicate(pred)(current.columns, current.valid)


def _current(db: Connection, st: state.TableState, keys: tuple[np.ndarray, ...] | None = None) -> Batch:
    """The table's rows as of now, including this transaction's changes, one update per copy; with ``keys``
    (arrays of key values, see ``_fixed_keys``), those of the table's arrangement with these keys, read by
    seeking them, and all of the transaction's changes."""
    extra = db.pending.get(st.table.name, [])
    if keys is None:
        cols, valid, mult = state.contents(st.arranged, extra, st.table)
    else:
        cols, valid, mult = state.contents(st.arranged, extra, st.table, keys)
    n = len(mult)
    b = Batch(tuple(cols), tuple(valid), np.full((n, 1), db.time), np.ones(n, np.int64))
    return b.take(np.repeat(np.arange(n), mult))


def _fixed_keys(table: Table, cond: exp.Expression, alias: str) -> tuple[np.ndarray, ...] | None:
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
            if not isinstance(col, exp.Column) or col.table not in ("", alias):
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


def copy(db: Connection, stmt: exp.Copy) -> None:
    """COPY table [(columns)] FROM 'file' [WITH] (options): load a file as PostgreSQL's COPY reads it
    (text or CSV), or a Parquet file (see ``ivm.db.copying``)."""
    target = stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this
    if target.name not in db.tables:
        raise error_at(target, f"table {target.name!r} does not exist")
    data = read_copy(stmt, db.tables[target.name].table)
    db.insert_arrow(target.name, data)
    db.rowcount = data.num_rows
    db.statusmessage = f"COPY {data.num_rows}"


def default(table: Table, p: int) -> object:
    """Column ``p``'s DEFAULT as the engine holds it (NULL without one)."""
    node = table.defaults[p]
    if node is None:
        return None
    c = table.columns[p]
    return _literal_value(node, c.type, c.name, 1)


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
    v = node
    neg = False
    if isinstance(v, exp.Neg):
        neg, v = True, v.this
    if isinstance(v, exp.Null):
        return None
    if not neg and (
        type(v) in TIME_FUNCTIONS
        or (isinstance(v, exp.Anonymous) and str(v.this).lower() == "transaction_timestamp")
    ):  # now() and its relatives: the start of the statement's transaction, as a DEFAULT too
        value = assigned(node, current_time(v), t, column)
        return encode(value.value, t)
    as_float = False  # a number cast to DOUBLE PRECISION first: negated as a double (-0.0::float8 is -0)
    if isinstance(v, exp.Cast) and isinstance(v.this, exp.Literal):
        as_float = v.args["to"].this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT)
        v = v.this
    where = f"row {row}, column {column!r}"
    if isinstance(v, exp.Literal) and v.is_string and t.kind != "text" and not neg:
        try:
            return parse_engine(v.this, t)
        except UnsupportedError as err:
            raise error_at(node, f"{where}: {err.message}", unsupported=True) from None
        except ValueError:
            raise error_at(
                node, f'{where}: invalid input syntax for type {t.pg_name}: "{v.this}"', cls=DataError
            ) from None
    try:
        if isinstance(v, exp.Boolean):
            value: object = bool(v.this)
        elif isinstance(v, exp.Literal):
            if v.is_string:
                value = v.this
            else:
                value = int(v.this) if v.this.isdigit() else decimal.Decimal(v.this)
                if as_float:
                    value = float(value)
                if neg:  # in the constant's own type: an exact zero has no sign, as NUMERIC's has none
                    value = -value if value or as_float else abs(value)
                if t.kind == "float":
                    value = float(value)
                elif t.kind == "int" and isinstance(value, decimal.Decimal):
                    value = int(value.to_integral_value(rounding=decimal.ROUND_HALF_UP))
                elif t.kind == "int" and isinstance(value, float):  # half to even, as PostgreSQL's rint
                    value = round(value)
        else:
            raise error_at(node, f"row {row}: only constants are supported in VALUES", unsupported=True)
        if neg and isinstance(value, (str, bool)):
            raise error_at(node, f"{where}: cannot negate {value!r}")
        return to_engine_value(value, t)
    except TypeError as err:
        raise error_at(node, f"{where}: invalid value for {t}: {err}") from err
    except (ValueError, ArithmeticError) as err:
        raise error_at(node, f"{where}: invalid value for {t}: {err}", cls=DataError) from err


def _assigned_values(e, cols, valid, n: int, column: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of ``e`` written to ``column``; one it cannot take rejects the statement."""
    try:
        return evaluate(e, cols, valid, n)
    except EvaluationError as err:
        raise DataError(f"column {column!r}: {err}") from None


def column_resolver(scope: dict, table: Table) -> Callable[[exp.Expression], ColRef | None]:
    """What resolves the column references of a scalar expression over ``table`` alone (``scope`` maps
    (table name, column name) to the column's position), for ``sql.scalar.translate_scalar``."""

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
