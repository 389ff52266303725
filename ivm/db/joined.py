"""UPDATE and DELETE that read more than the rows of their table: UPDATE ... FROM, DELETE ... USING,
subqueries in SET or WHERE, WITH, and RETURNING of the columns of FROM.

The statement becomes one query over its table and everything it reads, run as any other query (so
joins, subqueries and WITH mean what they mean in a SELECT), which gives, per target row it touches, the
row's key and the values the write needs from elsewhere: SET values that read FROM or subqueries (a scalar
subquery that might give several rows is read as its first row beside the count of its rows, and more than
one is PostgreSQL's error), and the columns of FROM that RETURNING shows. The rows are then found in the
table by key (a sort of the rows involved, ``ivm.db.rows``), and SET and RETURNING evaluated over them
vectorized.

A target row met by several rows of FROM is updated with one of them in PostgreSQL, any one; when they
would give it different values (or RETURNING different columns), the statement is refused with the row
named rather than given an arbitrary answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ivm.db import queries, rows
from ivm.db.returning import MARK, Returning, Scope, marker, resolver
from ivm.db.returning import items as returning_items
from ivm.engine.batch import Batch
from ivm.errors import DataError, InternalError, ProgrammingError
from sql.errors import error_at
from sql.rewrite import single_row
from sql.translate import qualify_query

if TYPE_CHECKING:
    from ivm.db import state
    from ivm.db.connection import Connection
    from ivm.db.dml import Written

__all__ = ["needs_query", "update", "delete"]

_QUERIES = (exp.Subquery, exp.Exists)
_CONDITIONAL = (exp.Case, exp.If, exp.Coalesce, exp.And, exp.Or)


def needs_query(stmt: exp.Expression, values: list[exp.Expression]) -> bool:
    """Whether an UPDATE or DELETE reads more than its table's rows (FROM, USING, WITH, or a subquery in
    ``values`` or its WHERE)."""
    if stmt.args.get("from_") or stmt.args.get("using") or stmt.args.get("with_"):
        return True
    where = stmt.args.get("where")
    parts = [*values, *([where] if where is not None else [])]
    return any(next(p.find_all(*_QUERIES), None) is not None for p in parts)


def _select(stmt: exp.Expression, target: exp.Table, alias: str, items: list[exp.Expression]) -> exp.Select:
    """The SELECT reading what the statement reads: its table (under its alias), FROM or USING, WHERE and
    WITH, with ``items`` as its list."""
    sel = exp.Select(expressions=items)
    sel.set("from_", exp.From(this=target.copy()))
    firsts = []
    if isinstance(stmt, exp.Update) and stmt.args.get("from_") is not None:
        firsts = [stmt.args["from_"].this]
    elif isinstance(stmt, exp.Delete):
        firsts = list(stmt.args.get("using") or [])
    joins = []
    for item in firsts:
        item = item.copy()
        more = item.args.get("joins") or []
        item.set("joins", None)
        joins.append(exp.Join(this=item))
        joins.extend(j.copy() for j in more)
    padding = False  # a RIGHT or FULL join of FROM's, which pads FROM's rows with NULLs
    for j in joins:
        src = j.this
        if src.alias_or_name == alias:
            raise error_at(src, f"table name {alias!r} specified more than once")
        padding = padding or j.args.get("side") in ("RIGHT", "FULL") or (j.args.get("kind") or "") == "FULL"
    if padding:  # FROM's items first, as PostgreSQL joins them, then the table written, as another item
        sel.set("from_", exp.From(this=joins[0].this))
        joins = [*joins[1:], exp.Join(this=target.copy())]
    if joins:
        sel.set("joins", joins)
    if stmt.args.get("where") is not None:
        sel.set("where", stmt.args["where"].copy())
    if stmt.args.get("with_") is not None:
        sel.set("with_", stmt.args["with_"].copy())
    return sel


def _check_joins(q: exp.Select, alias: str) -> None:
    """The conditions of FROM's joins cannot read the table being written (PostgreSQL's FROM is joined to
    it after them)."""
    for j in q.args.get("joins") or []:
        on = j.args.get("on")
        for col in [] if on is None else on.find_all(exp.Column):
            if col.table == alias:
                raise error_at(col, f"invalid reference to FROM-clause entry for table {alias!r}")


def _scalar_checked(value: exp.Expression, counts: list) -> exp.Expression:
    """``value`` with each scalar subquery that may give several rows (and that is evaluated for every row,
    outside CASE, COALESCE, AND and OR) read as its first row; ``counts`` receives the subquery counting its
    rows, with the subquery (for the error should one count more than one)."""
    for sub in list(value.find_all(exp.Subquery)):
        parent = sub.parent
        if isinstance(parent, (exp.In, exp.Exists, exp.Any, exp.All, exp.From, exp.Join)):
            continue
        up, inside = sub.parent, False
        while up is not None and up is not value.parent:
            if isinstance(up, _CONDITIONAL + _QUERIES[:1]) and up is not sub:
                inside = True
                break
            up = up.parent
        sel = sub.this
        if inside or not isinstance(sel, exp.Select) or single_row(sel):
            continue
        if any(sel.args.get(a) for a in ("group", "having", "distinct", "limit", "offset", "with_")):
            continue
        if any(sel.find_all(exp.Window, exp.AggFunc)):
            continue
        count = sel.copy()
        count.set("expressions", [exp.alias_(exp.Count(this=exp.Star()), "n")])
        count.set("order", None)
        counts.append((exp.Subquery(this=count), sub))
        limited = sel.copy()
        limited.set("limit", exp.Limit(expression=exp.Literal.number(1)))
        sub.set("this", limited)
    return value


def _reads_more(value: exp.Expression, alias: str) -> bool:
    """Whether a (qualified) expression reads anything but the target row's columns."""
    if next(value.find_all(*_QUERIES), None) is not None:
        return True
    return any(c.table != alias for c in value.find_all(exp.Column))


class _Query:
    """The query of a statement: the target rows' keys, then the values computed for them (``ext``), then
    the counts of the scalar subqueries' rows."""

    def __init__(self, db: Connection, st: state.TableState, alias: str) -> None:
        self.db, self.st, self.alias = db, st, alias
        table = st.table
        self.key = list(table.primary_key) or list(range(len(table.columns)))
        self.ext: list[exp.Expression] = []
        self.named: dict[tuple[str, str], int] = {}
        self.counts: list = []
        self.assigned: set[int] = set()  # the computed values SET assigns

    def external(self, node: exp.Expression) -> exp.Column:
        """The marker column standing for ``node``'s value, computed by the query."""
        if isinstance(node, exp.Column):
            k = (node.table, node.name)
            if k not in self.named:
                self.named[k] = len(self.ext)
                self.ext.append(node.copy())
            return marker(self.named[k])
        self.ext.append(node)
        return marker(len(self.ext) - 1)

    def run(self, q: exp.Select) -> tuple[list, list, list, list, list]:
        """The query's rows (distinct): key columns and validity, computed values and validity, counts."""
        table = self.st.table
        q = q.copy()
        outs = [
            exp.alias_(exp.column(table.columns[p].name, self.alias), f"__k{i}") for i, p in enumerate(self.key)
        ]
        outs += [exp.alias_(e, f"__x{j}") for j, e in enumerate(self.ext)]
        outs += [exp.alias_(c, f"__c{j}") for j, (c, _) in enumerate(self.counts)]
        q.set("expressions", outs)
        plan = self.db._plan(q)
        queries.check_readable(self.db, plan)
        self.types = [c.type for c in plan.columns[len(self.key) : len(self.key) + len(self.ext)]]
        cols, valid, mult = queries.evaluate(self.db, plan)
        m, e = len(self.key), len(self.ext)
        return cols[:m], valid[:m], cols[m : m + e], valid[m : m + e], cols[m + e :]

    def targets(self, stmt, k_cols, k_valid, e_cols, e_valid, counts) -> tuple[Batch, np.ndarray]:
        """The target rows the query met, each copy once (the table's columns as it stores them), and for each
        the query's row it came from; the errors of a scalar subquery giving several rows, and of a row met
        with different values."""
        st, table = self.st, self.st.table
        n = len(k_cols[0]) if k_cols else 0
        for (_, sub), c in zip(self.counts, counts, strict=True):
            bad = np.flatnonzero(c > 1)
            if len(bad):
                shown = rows.describe(table, self.key, k_cols, k_valid, int(bad[0]))
                raise error_at(
                    sub,
                    "more than one row returned by a subquery used as an expression (for the row of "
                    f"{table.name!r} with {shown})",
                    cls=ProgrammingError,
                )
        order, gid = rows.groups(k_cols, k_valid, n)
        if n and gid.max() + 1 < n:
            first = order[np.flatnonzero(np.diff(gid[order]) == 0)[0]]
            shown = rows.describe(table, self.key, k_cols, k_valid, int(first))
            source = stmt.args.get("from_") or (stmt.args.get("using") or [None])[0]
            what = "FROM" if isinstance(stmt, exp.Update) else "USING"
            keyed = list(k_cols) + [e_cols[j] for j in sorted(self.assigned)]
            keyed_valid = list(k_valid) + [e_valid[j] for j in sorted(self.assigned)]
            differ = "new values" if rows.groups(keyed, keyed_valid, n)[1].max() + 1 > gid.max() + 1 else None
            raise error_at(
                source,
                f"the row of {table.name!r} with {shown} is met by several rows of {what} that give it "
                f"different {differ or 'RETURNING values'} (PostgreSQL would take any one of them)",
                cls=DataError,
            )
        live_cols, live_valid, mult = rows.live(self.db, st, tuple(self.key), st.arranged, k_cols, k_valid)
        at = rows.match(k_cols, k_valid, [live_cols[p] for p in self.key], [live_valid[p] for p in self.key])
        if (at < 0).any():
            raise InternalError(f"a row the statement reads is not in table {table.name!r}")
        copies = mult[at]
        rep = np.repeat(np.arange(n), copies)
        src = at[rep]
        old = Batch.build(
            [c[src] for c in live_cols],
            [None if m is None else m[src] for m in live_valid],
            np.full(len(src), self.db.time),
            np.ones(len(src), np.int64),
        )
        return old, rep

    def scopes(self, width: int) -> dict[str, Scope]:
        """The target table's columns under its alias, then the computed values."""
        table = self.st.table
        return {
            self.alias: Scope([c.name for c in table.columns], [c.type for c in table.columns]),
            MARK: Scope([f"__x{j}" for j in range(len(self.ext))], self.types, width),
        }


def _probe(
    db: Connection, stmt, target: exp.Table, alias: str, values: list[exp.Expression]
) -> tuple[exp.Select, list, list, dict]:
    """The statement's query qualified, with ``values`` (SET's) and RETURNING's items: each column named by
    the source it reads, each ``*`` expanded."""
    ret = stmt.args.get("returning")
    ret_items, names = returning_items(ret) if ret is not None else ([], {})
    items = [exp.alias_(v.copy(), f"__set{i}") for i, v in enumerate(values)] + ret_items
    q = qualify_query(_select(stmt, target, alias, items), db.catalog)
    _check_joins(q, alias)
    listed = q.expressions
    return q, [v.unalias() for v in listed[: len(values)]], listed[len(values) :], names


def _returning(query: _Query, qret: list) -> list | None:
    """RETURNING's (qualified, aliased) items with the columns of other relations than the target read from
    the query."""
    if not qret:
        return None
    out = []
    for item in qret:
        item = item.copy()
        for col in list(item.find_all(exp.Column)):
            if col.table != query.alias:
                col.replace(query.external(col))
        out.append(item)
    return out


def update(db: Connection, stmt: exp.Update, st, target: exp.Table, alias: str, assigns: list) -> Written:
    """UPDATE through its query (see the module's doc); ``assigns`` are (position, value, node) per column."""
    from ivm.db.dml import Written, assign_values

    table = st.table
    width = len(table.columns)
    q, values, qret, names = _probe(db, stmt, target, alias, [v for _, v, _ in assigns])
    query = _Query(db, st, alias)
    local = []
    for v in values:
        if _reads_more(v, alias):
            mark = query.external(_scalar_checked(v.copy(), query.counts))
            query.assigned.add(int(mark.name[len("__x") :]))
            local.append(mark)
        else:
            local.append(v)
    ret_items = _returning(query, qret)
    k_cols, k_valid, e_cols, e_valid, counts = query.run(q)
    old, rep = query.targets(stmt, k_cols, k_valid, e_cols, e_valid, counts)
    n = len(old)
    cols = list(old.columns) + [c[rep] for c in e_cols]
    valid = list(old.valid) + [None if m is None else m[rep] for m in e_valid]
    scopes = query.scopes(width)
    resolve = resolver(scopes, table, alias)
    new_cols, new_valid = assign_values(
        db,
        table,
        [(p, v, node) for (p, _, node), v in zip(assigns, local, strict=True)],
        resolve,
        cols,
        valid,
        n,
    )
    new = Batch.build(new_cols, new_valid, old.times, old.diffs)
    ret = None
    if ret_items is not None:
        ret = Returning.of(ret_items, names, resolve)
    extras = ([c[rep] for c in e_cols], [None if m is None else m[rep] for m in e_valid])
    return Written(st, Batch.concat([old.negate(), new]), n, ret, extras, 1, pairs=(0, len(old)))


def delete(db: Connection, stmt: exp.Delete, st, target: exp.Table, alias: str) -> Written:
    """DELETE through its query (see the module's doc)."""
    from ivm.db.dml import Written

    table = st.table
    width = len(table.columns)
    q, _, qret, names = _probe(db, stmt, target, alias, [])
    query = _Query(db, st, alias)
    ret_items = _returning(query, qret)
    k_cols, k_valid, e_cols, e_valid, counts = query.run(q)
    old, rep = query.targets(stmt, k_cols, k_valid, e_cols, e_valid, counts)
    ret = None
    if ret_items is not None:
        ret = Returning.of(ret_items, names, resolver(query.scopes(width), table, alias))
    extras = ([c[rep] for c in e_cols], [None if m is None else m[rep] for m in e_valid])
    return Written(st, old.negate(), len(old), ret, extras, -1)
