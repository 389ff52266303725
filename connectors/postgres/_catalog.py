"""What the sidecar needs to know before it starts: the views file, the source tables it reads (columns, types,
primary key, replica identity) and each view's unique key and Postgres column types.

Everything that makes the sidecar unable to keep a view exact is found here, at start, with an error that
names the table, column or statement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
import sqlglot
from sqlglot import exp

from connectors.postgres._types import PgType, UnsupportedType, pg_type
from sql.logical import Aggregate, Canon, ColRef, Distinct, Filter, Plan, Project, Scan, TopK

__all__ = [
    "ConfigError",
    "SourceTable",
    "ViewsFile",
    "parse_views",
    "read_source_tables",
    "unique_key",
    "view_pg_types",
    "tables_read",
]

log = logging.getLogger("ivm.sidecar")


class ConfigError(Exception):
    """The views, the source tables or the options cannot work; the message says what to change."""


@dataclass
class ViewsFile:
    statements: list[str]  # in the order given, as ivm SQL
    views: dict[str, str]  # view name -> its query (Postgres dialect)
    tables: list[str]  # source tables read by the views, in first-use order


@dataclass
class SourceTable:
    name: str
    oid: int
    columns: list[tuple[str, PgType, bool]]  # name, type, NOT NULL
    primary_key: list[str]
    replica_identity: str  # d(efault), f(ull), n(othing), i(ndex)

    def engine_ddl(self) -> str:
        cols = [f"{n} {t.sql}{' NOT NULL' if nn else ''}" for n, t, nn in self.columns]
        if self.primary_key:
            cols.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE {self.name} ({', '.join(cols)})"


def parse_views(text: str, source: str = "views file") -> ViewsFile:
    """The CREATE MATERIALIZED VIEW and CREATE INDEX statements of a views file, and the tables they read."""
    try:
        parsed = [s for s in sqlglot.parse(text, dialect="postgres") if s is not None]
    except sqlglot.errors.ParseError as err:
        raise ConfigError(f"{source}: syntax error: {err}") from err
    statements, views, tables = [], {}, []
    for stmt in parsed:
        kind = (stmt.args.get("kind") or "").upper() if isinstance(stmt, exp.Create) else ""
        if kind == "VIEW":
            name = stmt.this.name if isinstance(stmt.this, exp.Table) else stmt.this.this.name
            ctes = {c.alias for c in stmt.expression.find_all(exp.CTE)}
            for t in stmt.expression.find_all(exp.Table):
                if t.db:
                    raise ConfigError(
                        f"{source}: view {name!r}: schema-qualified table {t.sql()!r} is not supported; "
                        "name source tables without a schema (they are looked up on the search path)"
                    )
                table = t.name if getattr(t.this, "quoted", False) else t.name.lower()  # as Postgres folds
                if t.name not in ctes and t.name not in views and table not in tables:
                    tables.append(table)
            views[name] = stmt.expression.sql(dialect="postgres")
        elif kind != "INDEX":
            raise ConfigError(
                f"{source}: only CREATE MATERIALIZED VIEW and CREATE INDEX statements are allowed, "
                f"not {stmt.sql(dialect='postgres')[:60]!r}"
            )
        statements.append(stmt.sql(dialect="postgres"))
    if not views:
        raise ConfigError(f"{source}: no CREATE MATERIALIZED VIEW statement")
    return ViewsFile(statements, views, tables)


def read_source_tables(conn, names: list[str]) -> dict[str, SourceTable]:
    """The source tables (on the connection's search path) with their columns, key and replica identity;
    ``ConfigError`` listing every table that cannot be followed and why."""
    out, problems = {}, []
    for name in names:
        row = conn.execute(
            "SELECT c.oid, c.relreplident, c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)",
            (name,),
        ).fetchone()
        if row is None or row[2] not in ("r", "p"):
            problems.append(f"table {name!r} does not exist in the source database")
            continue
        oid, ident, _ = row
        cols = []
        for cname, typoid, typmod, shown, notnull in conn.execute(
            "SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod), attnotnull "
            "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        ).fetchall():
            try:
                cols.append((cname, pg_type(typoid, typmod, shown), notnull))
            except UnsupportedType as err:
                problems.append(f"column {name}.{cname} has type {err}: ivm cannot represent it")
        pk = [
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, ord) "
                "JOIN pg_attribute a ON a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary "
                "AND a.attrelid = %s ORDER BY k.ord",
                (oid, oid),
            ).fetchall()
        ]
        ident = ident if isinstance(ident, str) else bytes(ident).decode()
        if ident == "n":
            problems.append(
                f"table {name!r} has REPLICA IDENTITY NOTHING: its updates and deletes cannot be followed "
                f"(ALTER TABLE {name} REPLICA IDENTITY DEFAULT or FULL)"
            )
        elif ident == "i":
            problems.append(
                f"table {name!r} has REPLICA IDENTITY USING INDEX, which ivm does not follow "
                f"(ALTER TABLE {name} REPLICA IDENTITY DEFAULT or FULL)"
            )
        elif not pk and ident != "f":
            problems.append(
                f"table {name!r} has no primary key: its updates and deletes carry no old row unless it has "
                f"REPLICA IDENTITY FULL (ALTER TABLE {name} REPLICA IDENTITY FULL)"
            )
        out[name] = SourceTable(name, oid, cols, pk, ident)
    if problems:
        raise ConfigError("; ".join(problems))
    return out


def unique_key(plan: Plan, keys: dict[str, tuple[int, ...]] | None = None) -> tuple[int, ...] | None:
    """Output positions that are a unique, non-NULL key of a view's rows, when the plan shows one: GROUP BY
    columns, DISTINCT, or the primary key of a table it only filters and projects (``keys`` maps relation
    names to their keys); else None."""
    key = _key(plan, keys or {})
    if not key or not all(_non_null(plan, i) for i in key):
        return None
    return key


def _non_null(plan: Plan, pos: int) -> bool:
    """Whether output column ``pos`` is never NULL: it comes unchanged from a NOT NULL table column (or is a
    count). The SQL layer's own flags are conservative after projections."""
    if isinstance(plan, Scan):
        return not plan.columns[pos].nullable
    if isinstance(plan, (Filter, TopK, Distinct, Canon)):
        return _non_null(plan.input, pos)
    if isinstance(plan, Project):
        e = plan.exprs[pos]
        return isinstance(e, ColRef) and _non_null(plan.input, e.index)
    if isinstance(plan, Aggregate):
        if pos < len(plan.group):
            return _non_null(plan.input, plan.group[pos])
        return plan.aggs[pos - len(plan.group)].func in ("count", "count_star")
    return False


def _key(plan: Plan, keys: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    if isinstance(plan, Scan):
        return keys.get(plan.table) or None
    if isinstance(plan, Aggregate):
        return tuple(range(len(plan.group))) if plan.group else None
    if isinstance(plan, Distinct):
        return tuple(range(len(plan.columns)))
    if isinstance(plan, (Filter, TopK, Canon)):
        return _key(plan.input, keys)
    if isinstance(plan, Project):
        inner = _key(plan.input, keys)
        if inner is None:
            return None
        pos: dict[int, int] = {}
        for i, e in enumerate(plan.exprs):
            if isinstance(e, ColRef) and e.index not in pos:
                pos[e.index] = i
        return tuple(pos[k] for k in inner) if all(k in pos for k in inner) else None
    return None


def tables_read(plan: object, views: dict[str, Plan]) -> set[str]:
    """The source tables a plan reads, through the views it reads."""
    out: set[str] = set()
    stack = [plan]
    seen = set()
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if isinstance(p, Scan):
            if p.table in views:
                stack.append(views[p.table])
            else:
                out.add(p.table)
            continue
        for v in vars(p).values():
            if isinstance(v, tuple):
                stack.extend(x for x in v if hasattr(x, "columns"))
            elif hasattr(v, "columns"):
                stack.append(v)
    return out


def view_pg_types(conn, views: ViewsFile) -> dict[str, list[str]] | None:
    """Each view's column types as Postgres itself types the view's SQL over the source tables (temporary
    views in a rolled-back transaction), or None when Postgres cannot run that SQL."""
    out = {}
    try:
        with conn.transaction(force_rollback=True):
            for name, query in views.views.items():
                conn.execute(f"CREATE TEMP VIEW {name} AS {query}")
                out[name] = [
                    r[0]
                    for r in conn.execute(
                        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attnum > 0 ORDER BY attnum",
                        (f"pg_temp.{name}",),
                    ).fetchall()
                ]
    except psycopg.Error as err:  # the view's SQL is ivm's; Postgres may not accept all of it
        log.warning("Postgres cannot type the views (%s); using ivm's column types", str(err).strip())
        return None
    return out
