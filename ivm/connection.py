"""The embedded database: ``ivm.connect()`` gives a DB-API-style connection over one engine.

Tables are engine inputs, each arranged by its primary key (or by all its columns), and views are dataflows
compiled from SQL. Every transaction is one logical time: statements outside BEGIN ... COMMIT commit alone.
Writes are checked (types, NOT NULL, primary keys) before anything reaches the engine, so a bad row rejects its
statement (inside a transaction, the whole transaction) and leaves every table and view as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from ivm.batch import Batch, consolidate, key_hash
from ivm.dataflow import Arranged, Dataflow, Engine, Input
from planner.compile import Registry, compile_view
from sql.catalog import Catalog, Table, View
from sql.errors import SqlError, UnsupportedError, error_at
from sql.logical import Column, Scan
from sql.translate import translate_query
from sql.types import SqlType, column_from_values, from_sqlglot, to_engine_value, to_python

__all__ = ["connect", "Connection"]


def connect() -> Connection:
    """A new in-memory database."""
    return Connection()


class _TableState:
    def __init__(self, table: Table, inp: Input, arranged: Arranged) -> None:
        self.table = table
        self.input = inp
        self.arranged = arranged


class _ViewState:
    def __init__(self, view: View, df: Dataflow, arranged: Arranged, used) -> None:
        self.view = view
        self.df = df
        self.arranged = arranged
        self.used = used


class Connection:
    """Executes SQL; ``fetchall`` and ``description`` describe the last query's result."""

    def __init__(self) -> None:
        self.engine = Engine()
        self.base = self.engine.dataflow("tables")
        self.catalog = Catalog()
        self.registry = Registry()
        self.tables: dict[str, _TableState] = {}
        self.views: dict[str, _ViewState] = {}
        self.time = 0
        self.in_transaction = False
        self.pending: dict[str, list[Batch]] = {}
        self._rows: list[tuple] = []
        self.description: list[tuple] | None = None

    # -- DB-API surface ---------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence | None = None) -> Connection:
        """Run one or more statements; a query's rows are then available from ``fetchall``."""
        if params:
            sql = _bind(sql, params)
        try:
            statements = [s for s in sqlglot.parse(sql, dialect="postgres") if s is not None]
        except ParseError as err:
            e = err.errors[0] if err.errors else {}
            raise SqlError(
                f"syntax error: {e.get('description', str(err))}", e.get("line"), e.get("col")
            ) from err
        for stmt in statements:
            try:
                self._statement(stmt)
            except SqlError:
                if self.in_transaction:
                    self._rollback()
                raise
        return self

    def fetchall(self) -> list[tuple]:
        rows, self._rows = self._rows, []
        return rows

    def insert_arrow(self, table: str, data) -> None:
        """Insert the rows of a ``pyarrow.Table`` (columns matched by name)."""
        self._arrow_write(table, data, 1)

    def delete_arrow(self, table: str, data) -> None:
        """Delete the rows of a ``pyarrow.Table`` (whole rows, columns matched by name); each must exist."""
        self._arrow_write(table, data, -1)

    def _arrow_write(self, table: str, data, sign: int) -> None:
        from sql.arrow import to_engine_column

        if table not in self.tables:
            raise SqlError(f"table {table!r} does not exist")
        st = self.tables[table]
        names = set(data.column_names)
        cols, masks = [], []
        for c in st.table.columns:
            if c.name not in names:
                if not c.nullable:
                    raise SqlError(f"column {c.name!r} of table {table!r} is missing and may not be NULL")
                cols.append(np.zeros(data.num_rows, dtype=c.type.dtype))
                masks.append(np.zeros(data.num_rows, dtype=bool))
                continue
            col, mask = to_engine_column(data.column(c.name), c.type, c.name)
            cols.append(col)
            masks.append(mask)
        n = data.num_rows
        batch = Batch.build(cols, masks, np.full(n, self.time), np.full(n, sign, np.int64))
        try:
            if sign < 0:
                self._check_present(st, batch)
            self._write((st, batch))
        except SqlError:
            if self.in_transaction:
                self._rollback()
            raise

    def cursor(self) -> Connection:
        return self

    def commit(self) -> None:
        if self.in_transaction:
            self._commit()

    def close(self) -> None:
        pass

    # -- statements -------------------------------------------------------------------------------------
    def _statement(self, stmt: exp.Expression) -> None:
        self.description = None
        if isinstance(stmt, exp.Create):
            kind = (stmt.args.get("kind") or "").upper()
            if kind == "TABLE":
                return self._create_table(stmt)
            if kind == "VIEW":
                return self._create_view(stmt)
            raise error_at(stmt, f"CREATE {kind} is not supported yet", unsupported=True)
        if isinstance(stmt, exp.Insert):
            return self._write(self._insert(stmt))
        if isinstance(stmt, exp.Delete):
            return self._write(self._delete(stmt))
        if isinstance(stmt, exp.Update):
            return self._write(self._update(stmt))
        if isinstance(stmt, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
            return self._query(stmt)
        if isinstance(stmt, exp.Drop):
            return self._drop(stmt)
        if isinstance(stmt, exp.Transaction):
            if self.in_transaction:
                raise error_at(stmt, "a transaction is already in progress")
            self.in_transaction = True
            return None
        if isinstance(stmt, exp.Commit):
            return self._commit()
        if isinstance(stmt, exp.Rollback):
            return self._rollback()
        raise error_at(stmt, f"{stmt.key.upper()} statements are not supported", unsupported=True)

    def _create_table(self, stmt: exp.Create) -> None:
        schema = stmt.this
        name = schema.this.name
        if self.catalog.exists(name):
            if stmt.args.get("exists"):
                return
            raise error_at(stmt, f"relation {name!r} already exists")
        cols: list[Column] = []
        pk: list[str] = []
        for item in schema.expressions:
            if isinstance(item, exp.ColumnDef):
                t = from_sqlglot(item.args["kind"]) if item.args.get("kind") else None
                if t is None:
                    raise error_at(
                        item, f"type {item.args.get('kind')} of column {item.name!r} is not supported", True
                    )
                not_null = False
                for c in item.constraints:
                    if isinstance(c.kind, exp.NotNullColumnConstraint) and not c.kind.args.get("allow_null"):
                        not_null = True
                    elif isinstance(c.kind, exp.PrimaryKeyColumnConstraint):
                        pk.append(item.name)
                        not_null = True
                if any(c.name == item.name for c in cols):
                    raise error_at(item, f"column {item.name!r} specified more than once")
                cols.append(Column(item.name, t, not not_null))
            elif isinstance(item, exp.PrimaryKey):
                pk.extend(e.name for e in item.expressions)
            else:
                raise error_at(
                    item, f"{item.key.upper()} in CREATE TABLE is not supported yet", unsupported=True
                )
        names = [c.name for c in cols]
        for k in pk:
            if k not in names:
                raise error_at(stmt, f"primary key column {k!r} does not exist")
        cols = [Column(c.name, c.type, c.nullable and c.name not in pk) for c in cols]
        key = tuple(names.index(k) for k in pk) or tuple(range(len(cols)))
        table = Table(name, tuple(cols), tuple(names.index(k) for k in pk))
        inp = self.base.input([c.type.dtype for c in cols], name)
        inp.advance_to(self.time)
        arranged = inp.arrange(key)
        self.catalog.tables[name] = table
        self.tables[name] = _TableState(table, inp, arranged)
        self.registry.add(Scan(name, table.columns), key, arranged, "tables")

    def _create_view(self, stmt: exp.Create) -> None:
        name = stmt.this.name if isinstance(stmt.this, exp.Table) else stmt.this.this.name
        if self.catalog.exists(name):
            raise error_at(stmt, f"relation {name!r} already exists")
        query = stmt.expression
        plan = translate_query(query, self.catalog)
        view = View(name, plan, query.sql(dialect="postgres"))
        df, arranged, used = compile_view(self.engine, self.registry, name, plan)
        self.catalog.views[name] = view
        self.views[name] = _ViewState(view, df, arranged, used)
        self.engine.step()

    def _query(self, stmt: exp.Expression) -> None:
        plan = translate_query(stmt, self.catalog)
        name = f"__query{self.time}_{id(stmt)}"
        df, arranged, _ = compile_view(self.engine, self.registry, name, plan)
        try:
            df.step()
            cols, valid, mult = _contents(arranged)
        finally:
            df.drop()
            self.registry.forget(name)
        values = [to_python(c, m, col.type) for c, m, col in zip(cols, valid, plan.columns, strict=True)]
        rows = list(zip(*values, strict=True)) if values else []
        self._rows = [r for r, k in zip(rows, mult.tolist(), strict=True) for _ in range(k)]
        self.description = [(c.name, str(c.type), None, None, None, None, c.nullable) for c in plan.columns]

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
        for v in self.views.values():
            if v.view.name == name:
                continue
            if any(isinstance(p, Scan) and p.table == name for p, _, _ in v.used):
                raise error_at(stmt, f"cannot drop {name!r}: view {v.view.name!r} depends on it")
        if is_view:
            st = self.views.pop(name)
            st.df.drop()
            self.registry.forget(name)
            del self.catalog.views[name]
        else:
            raise error_at(stmt, "DROP TABLE is not supported yet", unsupported=True)

    # -- writes -----------------------------------------------------------------------------------------
    def _table(self, node: exp.Expression) -> _TableState:
        t = node.this if isinstance(node, exp.Schema) else node
        name = t.name
        if name not in self.tables:
            raise error_at(t, f"table {name!r} does not exist")
        return self.tables[name]

    def _insert(self, stmt: exp.Insert) -> tuple[_TableState, Batch]:
        st = self._table(stmt.this)
        table = st.table
        target = stmt.this
        if isinstance(target, exp.Schema) and target.expressions:
            positions = []
            for ident in target.expressions:
                p = table.position(ident.name)
                if p is None:
                    raise error_at(ident, f"column {ident.name!r} of table {table.name!r} does not exist")
                positions.append(p)
        else:
            positions = list(range(len(table.columns)))
        source = stmt.expression
        if not isinstance(source, exp.Values):
            raise error_at(source, "INSERT ... SELECT is not supported yet", unsupported=True)
        rows = []
        for r, tup in enumerate(source.expressions, start=1):
            vals = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
            if len(vals) != len(positions):
                raise error_at(tup, f"row {r} has {len(vals)} values, expected {len(positions)}")
            row: list[object] = [None] * len(table.columns)
            for p, v in zip(positions, vals, strict=True):
                row[p] = _literal_value(v, table.columns[p].type, table.columns[p].name, r)
            rows.append(row)
        batch = self._rows_to_batch(table, rows)
        return st, batch

    def _rows_to_batch(self, table: Table, rows: list[list[object]]) -> Batch:
        cols, masks = [], []
        for i, c in enumerate(table.columns):
            data, mask = column_from_values([r[i] for r in rows], c.type)
            cols.append(data)
            masks.append(mask)
        n = len(rows)
        return Batch.build(cols, masks, np.full(n, self.time), np.ones(n, np.int64))

    def _delete(self, stmt: exp.Delete) -> tuple[_TableState, Batch]:
        st = self._table(stmt.this)
        current = self._current(st)
        keep = self._where(st, stmt.args.get("where"), current)
        return st, current.take(keep).negate()

    def _update(self, stmt: exp.Update) -> tuple[_TableState, Batch]:
        st = self._table(stmt.this)
        table = st.table
        current = self._current(st)
        sel = current.take(self._where(st, stmt.args.get("where"), current))
        from planner.expr import evaluate
        from sql.scalar import coerce, translate_scalar

        scope = {(table.name, c.name): i for i, c in enumerate(table.columns)}
        cols, valid = list(sel.columns), list(sel.valid)
        for assign in stmt.expressions:
            p = table.position(assign.this.name)
            if p is None:
                raise error_at(
                    assign.this, f"column {assign.this.name!r} of table {table.name!r} does not exist"
                )
            e = translate_scalar(assign.expression, _column_resolver(scope, table))
            e = coerce(assign, e, table.columns[p].type) if e.type != table.columns[p].type else e
            data, mask = evaluate(e, sel.columns, sel.valid, len(sel))
            cols[p] = data.astype(table.columns[p].type.dtype)
            valid[p] = mask
        new = Batch.build(cols, valid, sel.times, sel.diffs)
        return st, Batch.concat([sel.negate(), new])

    def _where(self, st: _TableState, where: exp.Where | None, current: Batch) -> np.ndarray:
        if where is None:
            return np.ones(len(current), dtype=bool)
        from planner.expr import compile_predicate
        from sql.scalar import boolean, translate_scalar

        table = st.table
        scope = {(table.name, c.name): i for i, c in enumerate(table.columns)}
        pred = boolean(where, translate_scalar(where.this, _column_resolver(scope, table)))
        return compile_predicate(pred)(current.columns, current.valid)

    def _current(self, st: _TableState) -> Batch:
        """The table's rows as of now, including this transaction's changes, one update per copy."""
        cols, valid, mult = _contents(st.arranged, self.pending.get(st.table.name, []), st.table)
        n = len(mult)
        b = Batch(tuple(cols), tuple(valid), np.full((n, 1), self.time), np.ones(n, np.int64))
        return b.take(np.repeat(np.arange(n), mult))

    def _write(self, change: tuple[_TableState, Batch]) -> None:
        st, batch = change
        table = st.table
        for i, c in enumerate(table.columns):
            m = batch.valid[i]
            if not c.nullable and m is not None:
                bad = np.flatnonzero(~m & (batch.diffs > 0))
                if len(bad):
                    raise SqlError(
                        f"null value in column {c.name!r} of table {table.name!r} violates the not-null "
                        f"constraint (row {int(bad[0]) + 1})"
                    )
        if table.primary_key:
            self._check_key(st, batch)
        self.pending.setdefault(table.name, []).append(batch)
        if not self.in_transaction:
            self._commit()

    def _check_key(self, st: _TableState, batch: Batch) -> None:
        table = st.table
        pk = table.primary_key
        after = self.pending.get(table.name, []) + [batch]
        cols, valid = batch.select(pk)
        keys = Batch(cols, valid, batch.times, batch.diffs)
        # the resulting multiplicity of every key touched: committed rows plus all pending changes
        h = key_hash(cols, valid, len(batch))
        found, q = st.arranged.trace.gather(*_unique(h, cols, valid))
        parts = [keys.with_times(np.zeros((len(keys), 1), np.int64))]
        if found is not None:
            kc, kv = found.select(range(len(pk)))
            parts.append(Batch(kc, kv, np.zeros((len(found), 1), np.int64), found.diffs))
        for b in after[:-1]:
            c, v = b.select(pk)
            parts.append(Batch(c, v, np.zeros((len(b), 1), np.int64), b.diffs))
        total, _ = consolidate(Batch.concat(parts))
        dup = np.flatnonzero(total.diffs > 1)
        if len(dup):
            first = dup[:1]
            shown = ", ".join(
                f"{table.columns[p].name}={to_python(c[first], None, table.columns[p].type)[0]!r}"
                for p, c in zip(pk, total.columns, strict=True)
            )
            raise SqlError(f"duplicate key value violates the primary key of {table.name!r} ({shown})")

    def _check_present(self, st: _TableState, batch: Batch) -> None:
        """Every row deleted by ``batch`` must be in the table (with this transaction's changes)."""
        key = _layout(st.table, len(st.table.columns), st.arranged.nkey)
        cols, valid = batch.select(key[: st.arranged.nkey])
        found, _ = st.arranged.trace.gather(*_unique(key_hash(cols, valid, len(batch)), cols, valid))
        zero = np.zeros((len(batch), 1), np.int64)
        parts = [Batch(*batch.select(key), zero, batch.diffs)]
        if found is not None:
            parts.append(found.with_times(np.zeros((len(found), 1), np.int64)))
        for b in self.pending.get(st.table.name, []):
            parts.append(Batch(*b.select(key), np.zeros((len(b), 1), np.int64), b.diffs))
        total, _ = consolidate(Batch.concat(parts))
        if (total.diffs < 0).any():
            raise SqlError(f"a deleted row is not in table {st.table.name!r}")

    def _commit(self) -> None:
        for name, batches in self.pending.items():
            if batches:
                b = Batch.concat(batches)
                self.tables[name].input.send(b.with_times(np.full((len(b), 1), self.time)))
        self.pending = {}
        self.in_transaction = False
        self.time += 1
        for st in self.tables.values():
            st.input.advance_to(self.time)
        self.engine.step()

    def _rollback(self) -> None:
        self.pending = {}
        self.in_transaction = False


def _unique(h, cols, valid):
    b, _ = consolidate(
        Batch(tuple(cols), tuple(valid), np.zeros((len(h), 1), np.int64), np.ones(len(h), np.int64))
    )
    hh = key_hash(b.columns, b.valid, len(b))
    order = np.argsort(hh, kind="stable")
    return (
        hh[order],
        tuple(c[order] for c in b.columns),
        tuple(None if m is None else m[order] for m in b.valid),
    )


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


def _contents(arranged: Arranged, extra: Sequence[Batch] = (), table: Table | None = None):
    """The current rows of an arrangement (plus extra updates): columns in the relation's order, validity,
    and multiplicities."""
    batches = [b.updates for b in arranged.trace.batches()]
    width = len(arranged.dtypes)
    if not batches and not extra:
        empty = Batch.empty(arranged.dtypes)
        cols, valid = list(empty.columns), list(empty.valid)
        mult = np.zeros(0, dtype=np.int64)
    else:
        allb = [b.with_times(np.zeros((len(b), 1), np.int64)) for b in batches]
        if extra:
            key = _layout(table, width, arranged.nkey)
            for e in extra:
                cols, valid = e.select(key)
                allb.append(Batch(cols, valid, np.zeros((len(e), 1), np.int64), e.diffs))
        total, _ = consolidate(Batch.concat(allb))
        if (total.diffs < 0).any():
            raise SqlError("internal error: negative multiplicity in a relation")
        cols, valid, mult = list(total.columns), list(total.valid), total.diffs
    if table is not None:
        layout = _layout(table, width, arranged.nkey)
        inv = [layout.index(i) for i in range(width)]
        cols = [cols[i] for i in inv]
        valid = [valid[i] for i in inv]
    return cols, valid, mult


def _layout(table: Table, width: int, nkey: int) -> list[int]:
    key = list(table.primary_key) or list(range(width))
    return key + [i for i in range(width) if i not in key]


def _literal_value(node: exp.Expression, t: SqlType, column: str, row: int) -> object:
    """A VALUES entry as the engine holds it, or an error naming the row and column."""
    v = node
    neg = False
    if isinstance(v, exp.Neg):
        neg, v = True, v.this
    if isinstance(v, exp.Null):
        return None
    if isinstance(v, exp.Cast) and isinstance(v.this, exp.Literal):
        v = v.this
    try:
        if isinstance(v, exp.Boolean):
            value: object = bool(v.this)
        elif isinstance(v, exp.Literal):
            if v.is_string:
                value = v.this
            else:
                import decimal

                value = int(v.this) if v.this.lstrip("-").isdigit() else decimal.Decimal(v.this)
                if t.kind == "float":
                    value = float(value)
                if neg:
                    value = -value
        else:
            raise error_at(node, f"row {row}: only constants are supported in VALUES", unsupported=True)
        if neg and isinstance(value, (str, bool)):
            raise TypeError(f"cannot negate {value!r}")
        return to_engine_value(value, t)
    except (TypeError, ValueError, ArithmeticError) as err:
        raise error_at(node, f"row {row}, column {column!r}: invalid value for {t}: {err}") from err


def _bind(sql: str, params: Sequence) -> str:
    """Substitute ``%s`` or ``?`` placeholders with SQL literals."""
    out = []
    it = iter(params)
    i = 0
    while i < len(sql):
        ch = sql[i]
        if sql.startswith("%s", i) or ch == "?":
            try:
                out.append(_sql_literal(next(it)))
            except StopIteration as err:
                raise SqlError("not enough parameters for the placeholders") from err
            i += 2 if ch == "%" else 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _sql_literal(v: object) -> str:
    import datetime as dt

    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, dt.date):
        return f"'{v.isoformat()}'"
    s = str(v).replace("'", "''")
    return f"'{s}'"


__all__ += ["UnsupportedError"]
