"""CREATE TABLE to a catalog table: columns with their types and domains, NOT NULL, PRIMARY KEY, UNIQUE,
CHECK, FOREIGN KEY (``REFERENCES``), DEFAULT and identity columns (``GENERATED ... AS IDENTITY``,
``SERIAL``), each honoured as PostgreSQL honours it or refused by name; and the tables ALTER TABLE makes of a
table, with the CREATE TABLE that makes each again.

Constraints are named as PostgreSQL names them when the statement does not (``t_pkey``, ``t_a_key``,
``t_a_check``, ``t_a_fkey``), so that a violation says which one failed in the words PostgreSQL would use. A
table written back as SQL (``table_sql``) names every constraint, so that renaming a column keeps its
constraints' names, as in PostgreSQL. A foreign key is written with the columns it references, so that the
table is made again the same whatever became of the referenced table's primary key.
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp

from sql.catalog import ACTIONS, Check, ForeignKey, Identity, Table, Unique
from sql.errors import error_at
from sql.logical import Column
from sql.recursive import query_sql
from sql.types import INT, INTEGER, SMALLINT, SqlType, domain_of, from_sqlglot, unsupported_type

__all__ = [
    "table_from_create",
    "table_sql",
    "add_columns",
    "drop_columns",
    "rename_column",
    "rename_table",
    "referencing_renamed",
    "foreign_key_options",
]

_SERIALS = {
    exp.DataType.Type.SMALLSERIAL: (SMALLINT, "SMALLINT"),
    exp.DataType.Type.SERIAL: (INTEGER, "INT"),
    exp.DataType.Type.BIGSERIAL: (INT, "BIGINT"),
}


def table_from_create(stmt: exp.Create) -> Table:
    """The table a ``CREATE TABLE name (...)`` statement defines."""
    schema = stmt.this
    name = schema.this.name
    cols: list[Column] = []
    domains = []
    defaults: list[exp.Expression | None] = []
    identities: list[Identity | None] = []
    pk: list[str] = []
    pk_node = None
    pk_name = None
    uniques: list[tuple[str | None, list[str], exp.Expression]] = []
    checks: list[tuple[str | None, exp.Expression, list[str]]] = []
    foreign: list[tuple[str | None, list[str], exp.Reference, exp.Expression]] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            kind = item.args.get("kind")
            if kind is None:
                raise error_at(item, f"column {item.name!r} needs a type")
            serial = _SERIALS.get(kind.this)
            if serial is not None:  # an integer column whose default is its own sequence's next value
                kind = exp.DataType.build(serial[1])
            t = from_sqlglot(kind)
            if t is None:
                raise error_at(kind, f"column {item.name!r}: {unsupported_type(kind)}", unsupported=True)
            if any(c.name == item.name for c in cols):
                raise error_at(item, f"column {item.name!r} specified more than once")
            not_null = serial is not None
            default = None
            identity = _sequence(t, None, name, item.name, False) if serial is not None else None
            for c in item.constraints:
                label = c.args.get("this")
                label = label.name if label is not None else None
                k = c.args.get("kind")
                if isinstance(k, exp.NotNullColumnConstraint):
                    not_null = not_null or not k.args.get("allow_null")
                elif isinstance(k, exp.PrimaryKeyColumnConstraint):
                    if pk:
                        raise error_at(c, f"multiple primary keys for table {name!r} are not allowed")
                    pk, pk_node, pk_name = [item.name], c, label
                elif isinstance(k, exp.UniqueColumnConstraint):
                    uniques.append((label, [item.name], c))
                elif isinstance(k, exp.CheckColumnConstraint):
                    checks.append((label, k.this, [item.name]))
                elif isinstance(k, exp.Reference):
                    foreign.append((label, [item.name], k, c))
                elif isinstance(k, exp.DefaultColumnConstraint):
                    if serial is not None or default is not None:
                        raise error_at(
                            c, f"multiple default values specified for column {item.name!r} of table {name!r}"
                        )
                    if identity is not None:
                        raise error_at(
                            c, f"both default and identity specified for column {item.name!r} of table {name!r}"
                        )
                    default = k.this
                elif isinstance(k, exp.GeneratedAsIdentityColumnConstraint):
                    if identity is not None and serial is None:
                        raise error_at(
                            c, f"multiple identity specifications for column {item.name!r} of table {name!r}"
                        )
                    if default is not None or serial is not None:
                        raise error_at(
                            c, f"both default and identity specified for column {item.name!r} of table {name!r}"
                        )
                    identity = _sequence(t, k, name, item.name, bool(k.this))
                    not_null = True
                else:
                    raise error_at(c, f"{c.sql(dialect='postgres')} is not supported", unsupported=True)
            cols.append(Column(item.name, t, not not_null))
            domains.append(domain_of(kind))
            defaults.append(default)
            identities.append(identity)
        elif isinstance(item, exp.PrimaryKey):
            if pk:
                raise error_at(item, f"multiple primary keys for table {name!r} are not allowed")
            pk, pk_node = [e.name for e in item.expressions], item
        elif isinstance(item, exp.Constraint):
            label = item.name
            for k in item.expressions:
                _table_constraint(k, label, uniques, checks, foreign)
                if isinstance(k, exp.PrimaryKey):
                    if pk:
                        raise error_at(item, f"multiple primary keys for table {name!r} are not allowed")
                    pk, pk_node, pk_name = [e.name for e in k.expressions], k, label
        elif isinstance(item, (exp.UniqueColumnConstraint, exp.CheckColumnConstraint, exp.ForeignKey)):
            _table_constraint(item, None, uniques, checks, foreign)
        else:
            raise error_at(item, f"{item.sql(dialect='postgres')} in CREATE TABLE is not supported", True)
    if not cols:
        raise error_at(stmt, f"table {name!r} needs at least one column", unsupported=True)
    names = [c.name for c in cols]

    def positions(columns: list[str], node: exp.Expression) -> tuple[int, ...]:
        out = []
        for k in columns:
            if k not in names:
                raise error_at(node, f"column {k!r} named in key does not exist")
            if names.index(k) in out:
                raise error_at(node, f"column {k!r} appears twice in a key constraint")
            out.append(names.index(k))
        return tuple(out)

    key = positions(pk, pk_node) if pk else ()
    cols = [Column(c.name, c.type, c.nullable and i not in key) for i, c in enumerate(cols)]
    unique = []
    for label, columns, node in uniques:
        at = positions(columns, node)
        if at == key or any(u.columns == at for u in unique):
            continue  # the same index as the primary key or another UNIQUE: PostgreSQL keeps one
        unique.append(Unique(label or _name(name, columns, "key", names), at))
    check = []
    for label, node, columns in checks:
        for col in node.find_all(exp.Column):
            if col.table and col.table != name:
                raise error_at(col, f"a CHECK constraint can only read its own table's columns ({col.sql()!r})")
        if any(node.find_all(exp.Subquery, exp.Exists, exp.AggFunc)):
            raise error_at(node, "a CHECK constraint cannot hold a subquery or an aggregate")
        read = columns or sorted({c.name for c in node.find_all(exp.Column)}, key=_position(names))
        check.append(Check(label or _name(name, read, "check", names), node))
    fks = []
    for label, columns, ref, node in foreign:
        for k in columns:
            if k not in names:
                raise error_at(node, f"column {k!r} referenced in foreign key constraint does not exist")
        fks.append(_foreign_key(label or _name(name, columns, "fkey", names), columns, names, ref, node))
    return Table(
        name,
        tuple(cols),
        key,
        tuple(domains),
        tuple(defaults),
        tuple(unique),
        tuple(check),
        tuple(identities),
        primary_key_name=(pk_name or f"{name}_pkey") if key else "",
        foreign_keys=tuple(fks),
    )


def _foreign_key(
    name: str, columns: list[str], names: list[str], ref: exp.Reference, node: exp.Expression
) -> ForeignKey:
    """The FOREIGN KEY ``name`` of ``columns`` that ``ref`` (REFERENCES parent [(columns)] and its options)
    declares; the parent's columns are left empty when not listed (its primary key: see
    ``ivm.db.references.resolved``)."""
    target = ref.this
    parent = target.this if isinstance(target, exp.Schema) else target
    parent_columns = tuple(e.name for e in target.expressions) if isinstance(target, exp.Schema) else ()
    on_delete, on_update, full = foreign_key_options(ref, node)
    if parent.args.get("db") or parent.args.get("catalog"):
        raise error_at(parent, "a schema-qualified table name is not supported", unsupported=True)
    return ForeignKey(
        name,
        tuple(names.index(c) for c in columns),
        parent.name,
        parent_columns,
        on_delete,
        on_update,
        full,
        node,
    )


def foreign_key_options(ref: exp.Reference, node: exp.Expression) -> tuple[str, str, bool]:
    """What a REFERENCES clause's options say: its ON DELETE and ON UPDATE actions and whether it is MATCH
    FULL; what ivm does not do (DEFERRABLE, MATCH PARTIAL, SET NULL or SET DEFAULT of some columns) refused by
    name at ``node``."""
    on_delete = on_update = "NO ACTION"
    full = False
    for option in ref.args.get("options") or []:
        words = " ".join(str(option).upper().split())
        if words.startswith("ON DELETE "):
            on_delete = words[len("ON DELETE ") :]
        elif words.startswith("ON UPDATE "):
            on_update = words[len("ON UPDATE ") :]
        elif words == "MATCH FULL":
            full = True
        elif words == "MATCH PARTIAL":
            raise error_at(node, "MATCH PARTIAL not yet implemented", unsupported=True)
        elif words not in ("MATCH SIMPLE", "INITIALLY IMMEDIATE", "NOT DEFERRABLE"):
            raise error_at(node, f"{words} (of a foreign key) is not supported", unsupported=True)
    for what, action in (("DELETE", on_delete), ("UPDATE", on_update)):
        if action not in ACTIONS:
            raise error_at(node, f"ON {what} {action} (of a foreign key) is not supported", unsupported=True)
    return on_delete, on_update, full


def _table_constraint(k, label, uniques, checks, foreign) -> None:
    if isinstance(k, exp.UniqueColumnConstraint):
        target = k.this
        columns = [e.name for e in target.expressions] if isinstance(target, exp.Schema) else []
        if not columns:
            raise error_at(k, "UNIQUE needs its columns here")
        uniques.append((label, columns, k))
    elif isinstance(k, exp.CheckColumnConstraint):
        checks.append((label, k.this, []))
    elif isinstance(k, exp.ForeignKey):
        foreign.append((label, [e.name for e in k.expressions], k.args["reference"], k))
    elif not isinstance(k, exp.PrimaryKey):
        raise error_at(k, f"{k.sql(dialect='postgres')} in CREATE TABLE is not supported", unsupported=True)


def _name(table: str, columns: list[str], suffix: str, names: list[str]) -> str:
    """PostgreSQL's name for an unnamed constraint: table, the columns it reads (for a CHECK, only when it
    reads one), and what it is."""
    if suffix == "check" and len(columns) != 1:
        return f"{table}_check"
    return "_".join([table, *columns, suffix])


def _position(names: list[str]):
    return lambda n: names.index(n) if n in names else len(names)


def _sequence(
    t: SqlType, spec: exp.GeneratedAsIdentityColumnConstraint | None, table: str, column: str, always: bool
):
    """The sequence of an identity column of type ``t``, as PostgreSQL defaults and checks its options."""
    if t.kind != "int":
        raise error_at(spec, "identity column type must be smallint, integer, or bigint")
    high = 2 ** (t.bits - 1) - 1
    low = -high - 1

    def option(arg: str) -> int | None:
        node = None if spec is None else spec.args.get(arg)
        if node is None:
            return None
        v, negative = (node.this, True) if isinstance(node, exp.Neg) else (node, False)
        if not (isinstance(v, exp.Literal) and not v.is_string and v.this.isdigit()):
            raise error_at(node, f"{arg.upper()} of an identity column must be an integer constant")
        return -int(v.this) if negative else int(v.this)

    increment = option("increment")
    increment = 1 if increment is None else increment
    if increment == 0:
        raise error_at(spec, "INCREMENT must not be zero")
    minvalue, maxvalue = option("minvalue"), option("maxvalue")
    minvalue = (1 if increment > 0 else low) if minvalue is None else minvalue
    maxvalue = (high if increment > 0 else -1) if maxvalue is None else maxvalue
    for what, v in (("MINVALUE", minvalue), ("MAXVALUE", maxvalue)):
        if not low <= v <= high:
            raise error_at(spec, f"{what} ({v}) is out of range for sequence data type {t.pg_name}")
    if minvalue >= maxvalue:
        raise error_at(spec, f"MINVALUE ({minvalue}) must be less than MAXVALUE ({maxvalue})")
    start = option("start")
    start = (minvalue if increment > 0 else maxvalue) if start is None else start
    if start < minvalue:
        raise error_at(spec, f"START value ({start}) cannot be less than MINVALUE ({minvalue})")
    if start > maxvalue:
        raise error_at(spec, f"START value ({start}) cannot be greater than MAXVALUE ({maxvalue})")
    return Identity(always, start, increment, minvalue, maxvalue)


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="postgres")


def table_sql(table: Table) -> str:
    """A CREATE TABLE making ``table`` again (empty), every constraint named."""
    parts = []
    for c, default, identity in zip(table.columns, table.defaults, table.identities, strict=True):
        text = f"{_quoted(c.name)} {c.type}"
        if identity is not None:
            how = "ALWAYS" if identity.always else "BY DEFAULT"
            text += (
                f" GENERATED {how} AS IDENTITY (START WITH {identity.start} INCREMENT BY {identity.increment} "
                f"MINVALUE {identity.minvalue} MAXVALUE {identity.maxvalue})"
            )
        elif not c.nullable:
            text += " NOT NULL"
        if default is not None:
            text += f" DEFAULT {query_sql(default)}"
        parts.append(text)
    names = [c.name for c in table.columns]
    if table.primary_key:
        label = f"CONSTRAINT {_quoted(table.primary_key_name)} " if table.primary_key_name else ""
        parts.append(f"{label}PRIMARY KEY ({', '.join(_quoted(names[p]) for p in table.primary_key)})")
    for u in table.uniques:
        parts.append(f"CONSTRAINT {_quoted(u.name)} UNIQUE ({', '.join(_quoted(names[p]) for p in u.columns)})")
    for check in table.checks:
        parts.append(f"CONSTRAINT {_quoted(check.name)} CHECK ({query_sql(_own_columns(check.condition))})")
    for f in table.foreign_keys:
        text = (
            f"CONSTRAINT {_quoted(f.name)} FOREIGN KEY ({', '.join(_quoted(names[p]) for p in f.columns)}) "
            f"REFERENCES {_quoted(f.parent)} ({', '.join(map(_quoted, f.parent_columns))})"
        )
        text += "".join(
            f" ON {what} {action}"
            for what, action in (("DELETE", f.on_delete), ("UPDATE", f.on_update))
            if action != "NO ACTION"
        )
        parts.append(text + (" MATCH FULL" if f.full else ""))
    return f"CREATE TABLE {_quoted(table.name)} ({', '.join(parts)})"


def _own_columns(condition: exp.Expression, rename: dict[str, str] | None = None) -> exp.Expression:
    """A CHECK condition with its columns unqualified (they can only be the table's own) and quoted, renamed
    by ``rename``."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            name = (rename or {}).get(node.name, node.name)
            return exp.Column(this=exp.to_identifier(name, quoted=True))
        return node

    return condition.copy().transform(fix)


def add_columns(table: Table, defs: list[exp.ColumnDef]) -> Table:
    """``table`` with the columns ``defs`` declare added at its end (their constraints with them), as ALTER
    TABLE ... ADD COLUMN makes it."""
    create = sqlglot.parse_one(table_sql(table), dialect="postgres")
    schema = create.this
    at = len([e for e in schema.expressions if isinstance(e, exp.ColumnDef)])
    for d in defs:
        if table.position(d.name) is not None:
            raise error_at(d, f"column {d.name!r} of relation {table.name!r} already exists")
        schema.expressions.insert(at, d)
        at += 1
    new = table_from_create(create)
    return dataclasses.replace(new, name=table.name)


def drop_columns(table: Table, names: list[str]) -> Table:
    """``table`` without the columns ``names``, and without the constraints involving them (a primary key,
    UNIQUE or CHECK constraint reading a dropped column goes), as PostgreSQL's DROP COLUMN leaves it."""
    keep = [p for p, c in enumerate(table.columns) if c.name not in names]
    where = {p: i for i, p in enumerate(keep)}
    dropped = {p for p, c in enumerate(table.columns) if c.name in names}
    key = () if dropped & set(table.primary_key) else tuple(where[p] for p in table.primary_key)
    uniques = tuple(
        Unique(u.name, tuple(where[p] for p in u.columns))
        for u in table.uniques
        if not dropped & set(u.columns)
    )
    checks = tuple(
        c for c in table.checks if not any(col.name in names for col in c.condition.find_all(exp.Column))
    )
    foreign = tuple(
        dataclasses.replace(f, columns=tuple(where[p] for p in f.columns))
        for f in table.foreign_keys
        if not dropped & set(f.columns)
    )
    # a column of the primary key no more is nullable again only if it was declared so: PostgreSQL keeps
    # the NOT NULL that PRIMARY KEY implied
    return Table(
        table.name,
        tuple(table.columns[p] for p in keep),
        key,
        tuple(table.domains[p] for p in keep),
        tuple(table.defaults[p] for p in keep),
        uniques,
        checks,
        tuple(table.identities[p] for p in keep),
        primary_key_name=table.primary_key_name if key else "",
        foreign_keys=foreign,
    )


def rename_column(table: Table, old: str, new: str) -> Table:
    """``table`` with column ``old`` named ``new`` (its constraints keep their names and read it by its new
    name)."""
    columns = tuple(Column(new, c.type, c.nullable) if c.name == old else c for c in table.columns)
    checks = tuple(Check(c.name, _own_columns(c.condition, {old: new})) for c in table.checks)
    table = dataclasses.replace(table, columns=columns, checks=checks)
    return referencing_renamed(table, table.name, table.name, {old: new})


def rename_table(table: Table, new: str) -> Table:
    """``table`` named ``new`` (its constraints keep their names)."""
    checks = tuple(Check(c.name, _own_columns(c.condition)) for c in table.checks)
    return referencing_renamed(dataclasses.replace(table, name=new, checks=checks), table.name, new, {})


def referencing_renamed(table: Table, parent: str, new: str, columns: dict[str, str]) -> Table:
    """``table`` with its foreign keys referencing table ``parent`` referencing it as ``new``, its columns
    renamed by ``columns``."""
    foreign = tuple(
        dataclasses.replace(f, parent=new, parent_columns=tuple(columns.get(c, c) for c in f.parent_columns))
        if f.parent == parent
        else f
        for f in table.foreign_keys
    )
    return table if foreign == table.foreign_keys else dataclasses.replace(table, foreign_keys=foreign)
