"""CREATE TABLE to a catalog table: columns with their types and domains, NOT NULL, PRIMARY KEY, UNIQUE,
CHECK and DEFAULT, each honoured as PostgreSQL honours it or refused by name.

Constraints are named as PostgreSQL names them when the statement does not (``t_pkey``, ``t_a_key``,
``t_a_check``), so that a violation says which one failed in the words PostgreSQL would use.
"""

from __future__ import annotations

from sqlglot import exp

from sql.catalog import Check, Table, Unique
from sql.errors import error_at
from sql.logical import Column
from sql.types import domain_of, from_sqlglot, unsupported_type

__all__ = ["table_from_create"]


def table_from_create(stmt: exp.Create) -> Table:
    """The table a ``CREATE TABLE name (...)`` statement defines."""
    schema = stmt.this
    name = schema.this.name
    cols: list[Column] = []
    domains = []
    defaults: list[exp.Expression | None] = []
    pk: list[str] = []
    pk_node = None
    pk_name = None
    uniques: list[tuple[str | None, list[str], exp.Expression]] = []
    checks: list[tuple[str | None, exp.Expression, list[str]]] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            kind = item.args.get("kind")
            if kind is None:
                raise error_at(item, f"column {item.name!r} needs a type")
            t = from_sqlglot(kind)
            if t is None:
                raise error_at(kind, f"column {item.name!r}: {unsupported_type(kind)}", unsupported=True)
            if any(c.name == item.name for c in cols):
                raise error_at(item, f"column {item.name!r} specified more than once")
            not_null = False
            default = None
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
                elif isinstance(k, exp.DefaultColumnConstraint):
                    default = k.this
                else:
                    raise error_at(c, f"{c.sql(dialect='postgres')} is not supported", unsupported=True)
            cols.append(Column(item.name, t, not not_null))
            domains.append(domain_of(kind))
            defaults.append(default)
        elif isinstance(item, exp.PrimaryKey):
            if pk:
                raise error_at(item, f"multiple primary keys for table {name!r} are not allowed")
            pk, pk_node = [e.name for e in item.expressions], item
        elif isinstance(item, exp.Constraint):
            label = item.name
            for k in item.expressions:
                _table_constraint(k, label, uniques, checks, name)
                if isinstance(k, exp.PrimaryKey):
                    if pk:
                        raise error_at(item, f"multiple primary keys for table {name!r} are not allowed")
                    pk, pk_node, pk_name = [e.name for e in k.expressions], k, label
        elif isinstance(item, (exp.UniqueColumnConstraint, exp.CheckColumnConstraint)):
            _table_constraint(item, None, uniques, checks, name)
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
    return Table(
        name,
        tuple(cols),
        key,
        tuple(domains),
        tuple(defaults),
        tuple(unique),
        tuple(check),
        (pk_name or f"{name}_pkey") if key else "",
    )


def _table_constraint(k, label, uniques, checks, table: str) -> None:
    if isinstance(k, exp.UniqueColumnConstraint):
        target = k.this
        columns = [e.name for e in target.expressions] if isinstance(target, exp.Schema) else []
        if not columns:
            raise error_at(k, "UNIQUE needs its columns here")
        uniques.append((label, columns, k))
    elif isinstance(k, exp.CheckColumnConstraint):
        checks.append((label, k.this, []))
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
