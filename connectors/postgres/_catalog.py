"""What the sidecar needs to know before it starts: the views file, the source tables it reads (columns, types,
primary key, replica identity) and each view's unique key and Postgres column types.

Everything that makes the sidecar unable to keep a view exact is found here, at start, with an error that
names the table, column or statement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
import pyarrow as pa
import sqlglot
from sqlglot import exp

from connectors.postgres._types import TIMESTAMPTZ, PgType, UnsupportedType, pg_type
from connectors.postgres.target import quote

__all__ = [
    "ConfigError",
    "SourceTable",
    "ViewsFile",
    "parse_views",
    "resolve_tables",
    "columns_read",
    "view_pg_types",
]

log = logging.getLogger("ivm.sidecar")


class ConfigError(Exception):
    """The views, the source tables or the options cannot work; the message says what to change."""


Ref = tuple[str | None, str]  # a table as a view names it: (schema or None, name), folded as Postgres folds


@dataclass
class ViewsFile:
    statements: list[exp.Expression]  # in the order given
    owners: list[str]  # the view each statement creates or indexes
    views: dict[str, str]  # view name -> its query (Postgres dialect)
    refs: list[Ref]  # source tables named by the views, in first-use order
    reads: dict[str, set[Ref]]  # view -> the source tables it names itself
    uses: dict[str, set[str]]  # view -> the views it reads
    columns: dict[str, tuple[set[str], bool]]  # view -> column names it mentions, and whether it has a *


@dataclass
class SourceTable:
    """A followed source table. ``columns`` are all its columns in order: (name, type, NOT NULL);
    ``unsupported`` names those ivm cannot represent, with why. The engine holds the others and those of the
    primary key (as their text form, to follow rows by key); a view may read only the others."""

    schema: str
    name: str
    oid: int
    columns: list[tuple[str, PgType, bool]]
    primary_key: list[str]
    replica_identity: str  # d(efault), f(ull), n(othing), i(ndex)
    unsupported: dict[str, str] = field(default_factory=dict)  # column -> its type and why

    @property
    def engine(self) -> str:
        """The table's name in the engine (and in messages): schema.name."""
        return f"{self.schema}.{self.name}"

    @property
    def sql(self) -> str:
        """The table's name in Postgres SQL."""
        return f"{quote(self.schema)}.{quote(self.name)}"

    def kept(self) -> list[int]:
        """Positions of the columns the engine holds."""
        keep = set(self.primary_key)
        return [i for i, (n, _, _) in enumerate(self.columns) if n not in self.unsupported or n in keep]

    def engine_type(self, i: int) -> PgType:
        name, t, _ = self.columns[i]
        return t if name not in self.unsupported else PgType(t.oid, t.typmod, "TEXT", pa.string(), t.shown)

    def engine_ddl(self) -> str:
        cols = []
        for i in self.kept():
            n, _, nn = self.columns[i]
            cols.append(f"{quote(n)} {self.engine_type(i).sql}{' NOT NULL' if nn else ''}")
        if self.primary_key:
            cols.append(f"PRIMARY KEY ({', '.join(quote(k) for k in self.primary_key)})")
        return f"CREATE TABLE {quote(self.engine)} ({', '.join(cols)})"


def _fold(node: exp.Expression | None) -> str:
    """An identifier as Postgres reads it: unquoted names are folded to lower case."""
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        return node.this if node.quoted else node.this.lower()
    return node.name.lower()


def parse_views(text: str, source: str = "views file") -> ViewsFile:
    """The CREATE MATERIALIZED VIEW and CREATE INDEX statements of a views file, and what they read."""
    try:
        parsed = [s for s in sqlglot.parse(text, dialect="postgres") if s is not None]
    except sqlglot.errors.ParseError as err:
        raise ConfigError(f"{source}: syntax error: {err}") from err
    vf = ViewsFile([], [], {}, [], {}, {}, {})
    for stmt in parsed:
        kind = (stmt.args.get("kind") or "").upper() if isinstance(stmt, exp.Create) else ""
        if kind == "VIEW":
            target = stmt.this if isinstance(stmt.this, exp.Table) else stmt.this.this
            if target.args.get("db"):
                raise ConfigError(
                    f"{source}: view {target.sql(dialect='postgres')!r}: a view is named without a schema "
                    "(its table goes into the target schema, --schema)"
                )
            name = _fold(target.this)
            query = stmt.expression
            ctes = {_fold(c.args["alias"].this) for c in query.find_all(exp.CTE)}
            reads, uses = set(), set()
            for t in query.find_all(exp.Table):
                if t.args.get("catalog"):
                    raise ConfigError(
                        f"{source}: view {name!r}: {t.sql(dialect='postgres')!r} names another database"
                    )
                schema = _fold(t.args["db"]) if t.args.get("db") else None
                table = _fold(t.this)
                if schema is None and table in ctes:
                    continue
                if schema is None and table in vf.views:
                    uses.add(table)
                    continue
                reads.add((schema, table))
                if (schema, table) not in vf.refs:
                    vf.refs.append((schema, table))
            stars = any(not isinstance(s.parent, exp.Count) for s in query.find_all(exp.Star))
            vf.columns[name] = ({_fold(c.this) for c in query.find_all(exp.Column)}, stars)
            vf.views[name] = query.sql(dialect="postgres")
            vf.reads[name], vf.uses[name] = reads, uses
        elif kind == "INDEX" and isinstance(stmt.this, exp.Index) and stmt.this.args.get("table"):
            name = _fold(stmt.this.args["table"].this)
        else:
            raise ConfigError(
                f"{source}: only CREATE MATERIALIZED VIEW and CREATE INDEX statements are allowed, "
                f"not {stmt.sql(dialect='postgres')[:60]!r}"
            )
        vf.statements.append(stmt)
        vf.owners.append(name)
    if not vf.views:
        raise ConfigError(f"{source}: no CREATE MATERIALIZED VIEW statement")
    return vf


def _shown(ref: Ref) -> str:
    return ref[1] if ref[0] is None else f"{ref[0]}.{ref[1]}"


def resolve_tables(
    conn, views: ViewsFile, target_schema: str | None = None, tolerant: bool = False, zone: str | None = None
) -> tuple[dict[Ref, SourceTable], list[str], dict[str, str]]:
    """Each table the views name, as the source resolves the name (on the connection's search path when it
    has no schema): its columns, key and replica identity. ``ConfigError`` listing every table that cannot be
    followed and why, or that lies in ``target_schema`` (the sidecar's own output, when it writes into the
    source database) -- unless ``tolerant``, when the views reading such a table are reported instead. Also
    returns the engine statements: the views with each table named as the engine names it, and the views
    that cannot run (they read a column ivm cannot represent, or with ``tolerant`` such a table, or compute
    with a timestamptz column where Postgres' answer depends on the source's time ``zone`` when it is not
    UTC), with why."""
    by_ref: dict[Ref, SourceTable] = {}
    by_oid: dict[int, SourceTable] = {}
    problems: dict[Ref, str] = {}
    unusable: dict[int, str] = {}
    for ref in views.refs:
        qualified = quote(ref[1]) if ref[0] is None else f"{quote(ref[0])}.{quote(ref[1])}"
        row = conn.execute(
            "SELECT c.oid, n.nspname, c.relname, c.relreplident, c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (qualified,),
        ).fetchone()
        if row is None or row[4] not in ("r", "p"):
            where = "" if ref[0] else " on the search path"
            problems[ref] = f"table {_shown(ref)!r} does not exist in the source database{where}"
            continue
        oid, schema, name, ident, _ = row
        if schema == target_schema:
            problems[ref] = (
                f"table {schema}.{name} is in {schema!r}, the schema the sidecar writes its views into: "
                "a view cannot read the sidecar's own output (choose another --schema)"
            )
            continue
        if oid not in by_oid:
            found: list[str] = []
            by_oid[oid] = _read_table(conn, oid, schema, name, ident, found)
            if found:
                unusable[oid] = "; ".join(found)
        if oid in unusable:
            problems[ref] = unusable[oid]
            continue
        by_ref[ref] = by_oid[oid]
    if problems and not tolerant:
        raise ConfigError("; ".join(dict.fromkeys(problems.values())))
    failed: dict[str, str] = {}
    for v in views.views:  # in file order: a view reads only views defined before it
        why = [problems[r] for r in views.reads[v] if r in problems]
        why += [failed[u] for u in views.uses[v] if u in failed]
        if why:
            failed[v] = f"view {v!r}: {why[0]}"
    statements = [_engine_statement(s, views, by_ref) for s in views.statements]
    zoned = _zone_dependent(views, by_ref, zone) if zone else {}
    return by_ref, statements, {**zoned, **_unrepresentable(views, by_ref), **failed}


def _read_table(conn, oid: int, schema: str, name: str, ident, problems: list[str]) -> SourceTable:
    cols, unsupported = [], {}
    for cname, typoid, typmod, shown, notnull in conn.execute(
        "SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod), attnotnull "
        "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    ).fetchall():
        try:
            cols.append((cname, pg_type(typoid, typmod, shown), notnull))
        except UnsupportedType as err:
            cols.append((cname, PgType(typoid, typmod, "", pa.string(), shown), notnull))
            unsupported[cname] = str(err)
    pk = [
        r[0]
        for r in conn.execute(
            "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, ord) "
            "JOIN pg_attribute a ON a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary "
            "AND a.attrelid = %s ORDER BY k.ord",
            (oid, oid),
        ).fetchall()
    ]
    t = SourceTable(schema, name, oid, cols, pk, "", unsupported)
    ident = ident if isinstance(ident, str) else bytes(ident).decode()
    t.replica_identity = ident
    if ident == "n":
        problems.append(
            f"table {t.engine} has REPLICA IDENTITY NOTHING: its updates and deletes cannot be followed "
            f"(ALTER TABLE {t.sql} REPLICA IDENTITY DEFAULT or FULL)"
        )
    elif ident == "i":
        problems.append(
            f"table {t.engine} has REPLICA IDENTITY USING INDEX, which ivm does not follow "
            f"(ALTER TABLE {t.sql} REPLICA IDENTITY DEFAULT or FULL)"
        )
    elif not pk and ident != "f":
        problems.append(
            f"table {t.engine} has no primary key: its updates and deletes carry no old row unless it has "
            f"REPLICA IDENTITY FULL (ALTER TABLE {t.sql} REPLICA IDENTITY FULL)"
        )
    elif not pk and unsupported:
        problems.append(
            f"table {t.engine} has no primary key and a column ivm cannot represent "
            f"({', '.join(f'{c} has type {why}' for c, why in unsupported.items())}): its rows cannot be "
            "told apart; give it a primary key"
        )
    return t


def columns_read(views: ViewsFile, tables: dict[Ref, SourceTable]) -> dict[str, dict[str, set[str]]]:
    """Per view, the columns of each source table (by engine name) it may read, through the views it reads:
    every column of a table read with ``*``, else those whose names it mentions (an overestimate where names
    repeat across tables, never an underestimate)."""
    direct: dict[str, dict[str, set[str]]] = {}
    for v in views.views:
        names, star = views.columns[v]
        direct[v] = {}
        for ref in views.reads[v] & tables.keys():
            t = tables[ref]
            cols = {c for c, _, _ in t.columns if star or c in names}
            direct[v].setdefault(t.engine, set()).update(cols)
    out: dict[str, dict[str, set[str]]] = {}
    for v in views.views:  # in file order: a view reads only views defined before it
        out[v] = {t: set(c) for t, c in direct[v].items()}
        for u in views.uses[v]:
            for t, c in out[u].items():
                out[v].setdefault(t, set()).update(c)
    return out


_INSTANT_SAFE = (
    exp.Select,
    exp.Alias,
    exp.Count,
    exp.Min,
    exp.Max,
    exp.Group,
    exp.Ordered,
    exp.Is,
    exp.Distinct,
)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _zone_dependent(views: ViewsFile, tables: dict[Ref, SourceTable], zone: str) -> dict[str, str]:
    """Views that compute with a timestamptz column in a way whose answer depends on the session's time zone
    (a cast to date or text, EXTRACT, date_trunc, a comparison with a literal, arithmetic): ivm holds such
    values in UTC, Postgres evaluates them in ``zone``. Projecting, grouping, ordering, MIN/MAX/COUNT and
    comparing two such columns depend on the instant alone."""
    out = {}
    for stmt, v in zip(views.statements, views.owners, strict=True):
        if v not in views.views or not isinstance(stmt, exp.Create):
            continue
        zoned = {
            c: t.engine
            for ref in views.reads[v] & tables.keys()
            for t in [tables[ref]]
            for c, typ, _ in t.columns
            if typ.oid == TIMESTAMPTZ and c not in t.unsupported
        }
        for col in stmt.expression.find_all(exp.Column):
            name = _fold(col.this)
            if name not in zoned:
                continue
            parent = col.parent
            if isinstance(parent, _INSTANT_SAFE):
                continue
            if isinstance(parent, _COMPARISONS) and all(
                isinstance(side, exp.Column) and _fold(side.this) in zoned
                for side in (parent.this, parent.expression)
            ):
                continue
            out[v] = (
                f"view {v!r} computes with column {zoned[name]}.{name} (timestamp with time zone) in "
                f"{parent.sql(dialect='postgres')[:60]!r}, which Postgres evaluates in the source's time zone "
                f"{zone!r} and ivm in UTC; set the source database's TimeZone to UTC (ALTER DATABASE ... SET "
                "TimeZone = 'UTC') or leave the column as it is in the view"
            )
            break
    return out


def _unrepresentable(views: ViewsFile, tables: dict[Ref, SourceTable]) -> dict[str, str]:
    out = {}
    for v, by_table in columns_read(views, tables).items():
        for t in {id(t): t for t in tables.values()}.values():
            for c in sorted(by_table.get(t.engine, set()) & set(t.unsupported)):
                out[v] = (
                    f"view {v!r} reads column {t.engine}.{c} of type {t.unsupported[c]}: ivm cannot represent "
                    "it; leave the column out of the view"
                )
    return out


def _engine_statement(stmt: exp.Expression, views: ViewsFile, tables: dict[Ref, SourceTable]) -> str:
    """A views-file statement as the engine runs it: each source table named ``"schema.name"``, under the name
    the view gave it (its alias, else its own name, as in Postgres), and columns qualified by that name."""
    stmt = stmt.copy()
    if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "VIEW":
        query = stmt.expression
        ctes = {_fold(c.args["alias"].this) for c in query.find_all(exp.CTE)}
        for t in list(query.find_all(exp.Table)):
            schema = _fold(t.args["db"]) if t.args.get("db") else None
            name = _fold(t.this)
            if (schema is None and (name in ctes or name in views.views)) or (schema, name) not in tables:
                continue
            alias = t.args.get("alias") or exp.TableAlias(this=t.this.copy())
            engine = exp.to_identifier(tables[(schema, name)].engine, quoted=True)
            t.replace(exp.Table(this=engine, alias=alias))
        for c in query.find_all(exp.Column):
            if c.args.get("db"):
                c.set("db", None)
                c.set("catalog", None)
    return stmt.sql(dialect="postgres")


def view_pg_types(conn, views: ViewsFile, skip=()) -> dict[str, list[str]] | None:
    """Each view's column types (but those of ``skip``) as Postgres itself types the view's SQL over the
    source tables (temporary views in a rolled-back transaction), or None when Postgres cannot run that SQL."""
    out = {}
    try:
        with conn.transaction(force_rollback=True):
            for name, query in views.views.items():
                if name in skip:
                    continue
                conn.execute(f"CREATE TEMP VIEW {quote(name)} AS {query}")
                out[name] = [
                    r[0]
                    for r in conn.execute(
                        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attnum > 0 ORDER BY attnum",
                        (f"pg_temp.{quote(name)}",),
                    ).fetchall()
                ]
    except psycopg.Error as err:  # the view's SQL is ivm's; Postgres may not accept all of it
        log.warning("Postgres cannot type the views (%s); using ivm's column types", str(err).strip())
        return None
    return out
