"""DML: the changes INSERT, DELETE and UPDATE make to a table, and COPY ... FROM a file.

Each statement becomes its table and a batch of changes (rows added with multiplicity +1, rows removed with
-1), computed against the table's rows as of now (the transaction's pending changes included); the
connection then checks it and adds it to the transaction (``transactions.write``). Constants assigned to
columns are converted as PostgreSQL assigns them, DEFAULT included.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import queries, state
from ivm.db.copying import read_copy
from ivm.engine.batch import Batch
from ivm.engine.operators.basic import EvaluationError
from ivm.engine.strings import POOL
from ivm.errors import DataError
from planner.expr import compile_predicate, evaluate
from planner.values import column_from_values, encode, parse_engine, to_engine_value
from sql.catalog import Table
from sql.datetimes import TIME_FUNCTIONS, current_time
from sql.errors import SqlError, UnsupportedError, error_at
from sql.logical import ColRef
from sql.scalar import and_parts, assigned, boolean, cast_to, translate_scalar
from sql.types import SqlType

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["insert", "delete", "update", "copy", "default", "column_resolver"]


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
    defaults = [default(table, p) for p in range(len(table.columns))]
    if stmt.args.get("default"):  # INSERT ... DEFAULT VALUES
        return st, _rows_to_batch(db, table, [defaults])
    if not isinstance(source, exp.Values):
        return st, _insert_select(db, st, positions, source, defaults, listed)
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
    batch = _rows_to_batch(db, table, rows)
    return st, batch


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
    return Batch.build(out_cols, out_valid, np.full(n, db.time), np.ones(n, np.int64))


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
    current = _current(db, st, stmt.args.get("where"))
    keep = _where(st, stmt.args.get("where"), current)
    return st, current.take(keep).negate()


def update(db: Connection, stmt: exp.Update) -> tuple[state.TableState, Batch]:
    """UPDATE table SET ... [WHERE ...]: the table and its change, the old rows retracted and the new added."""
    st = _table(db, stmt.this)
    table = st.table
    current = _current(db, st, stmt.args.get("where"))
    sel = current.take(_where(st, stmt.args.get("where"), current))
    scope = {(table.name, c.name): i for i, c in enumerate(table.columns)}
    cols, valid = list(sel.columns), list(sel.valid)
    assigned_to: set[int] = set()
    for assign in stmt.expressions:
        p = table.position(assign.this.name)
        if p is None:
            raise error_at(assign.this, f"column {assign.this.name!r} of table {table.name!r} does not exist")
        if p in assigned_to:
            raise error_at(assign.this, f"multiple assignments to same column {assign.this.name!r}")
        assigned_to.add(p)
        column = table.columns[p]
        value = assign.expression
        if _is_default(value):
            value = table.defaults[p] or exp.Null()
        e = translate_scalar(value, column_resolver(scope, table))
        e = assigned(assign, e, column.type, column.name)
        data, mask = _assigned_values(e, sel.columns, sel.valid, len(sel), column.name)
        if e.type.kind == "text" and p not in db.registry.uninterned(table.name):
            data = POOL.canonical(data)  # keys and tables without one hold canonical text only
        cols[p] = data.astype(table.columns[p].type.dtype)
        valid[p] = mask
    new = Batch.build(cols, valid, sel.times, sel.diffs)
    return st, Batch.concat([sel.negate(), new])


def _table(db: Connection, node: exp.Expression) -> state.TableState:
    t = node.this if isinstance(node, exp.Schema) else node
    name = t.name
    if name not in db.tables:
        raise error_at(t, f"table {name!r} does not exist")
    return db.tables[name]


def _where(st: state.TableState, where: exp.Where | None, current: Batch) -> np.ndarray:
    if where is None:
        return np.ones(len(current), dtype=bool)
    table = st.table
    scope = {(table.name, c.name): i for i, c in enumerate(table.columns)}
    pred = boolean(where, translate_scalar(where.this, column_resolver(scope, table)))
    return compile_predicate(pred)(current.columns, current.valid)


def _current(db: Connection, st: state.TableState, where: exp.Where | None = None) -> Batch:
    """The table's rows as of now, including this transaction's changes, one update per copy; only those
    with the keys ``where`` asks for when it fixes every key column (then read by seeking the keys)."""
    keys = _fixed_keys(st.table, where.this) if where is not None else None
    extra = db.pending.get(st.table.name, [])
    if keys is None:
        cols, valid, mult = state.contents(st.arranged, extra, st.table)
    else:
        cols, valid, mult = state.contents(st.arranged, extra, st.table, keys)
    n = len(mult)
    b = Batch(tuple(cols), tuple(valid), np.full((n, 1), db.time), np.ones(n, np.int64))
    return b.take(np.repeat(np.arange(n), mult))


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
    if isinstance(v, exp.Cast) and isinstance(v.this, exp.Literal):
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
