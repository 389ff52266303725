"""The catalog: tables (columns, NOT NULL, primary key), views (their plans) and named indexes."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from sql.errors import error_at
from sql.logical import Column, Plan, Scan
from sql.types import Domain

__all__ = ["Catalog", "Table", "View", "Unique", "Check", "Identity", "ForeignKey", "ACTIONS"]

# what a FOREIGN KEY's ON DELETE and ON UPDATE do to the rows referencing a key deleted or changed
ACTIONS = ("NO ACTION", "RESTRICT", "CASCADE", "SET NULL", "SET DEFAULT")


@dataclass(frozen=True)
class Unique:
    """A UNIQUE constraint: no two rows equal in ``columns`` unless one of them is NULL (NULLs are distinct)."""

    name: str
    columns: tuple[int, ...]


@dataclass(frozen=True)
class Check:
    """A CHECK constraint: ``condition`` (over the table's columns) is not FALSE for any row."""

    name: str
    condition: exp.Expression


@dataclass(frozen=True)
class ForeignKey:
    """A FOREIGN KEY constraint: a row whose ``columns`` hold no NULL (with ``full``, MATCH FULL: any but
    all NULL is refused) has a row of table ``parent`` equal in ``parent_columns``, which are its primary key
    or one of its UNIQUE constraints. ``on_delete`` says what deleting a referenced row does to the rows
    referencing it, ``on_update`` what changing its key does (each one of ``ACTIONS``)."""

    name: str
    columns: tuple[int, ...]
    parent: str
    parent_columns: tuple[str, ...]
    on_delete: str = "NO ACTION"
    on_update: str = "NO ACTION"
    full: bool = False
    node: exp.Expression | None = field(default=None, compare=False, repr=False)  # where the statement says it


@dataclass(frozen=True)
class Identity:
    """An identity column's sequence (``GENERATED {ALWAYS|BY DEFAULT} AS IDENTITY``, or ``SERIAL``): the values
    from ``start`` by ``increment`` within ``[minvalue, maxvalue]``; ``always`` refuses values given
    explicitly, as PostgreSQL's GENERATED ALWAYS does."""

    always: bool
    start: int
    increment: int
    minvalue: int
    maxvalue: int


@dataclass
class Table:
    """A table: its columns, primary key, and what its declared types and constraints add (per column its
    domain, DEFAULT and identity; UNIQUE, CHECK and FOREIGN KEY constraints)."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[int, ...] = ()
    domains: tuple[Domain | None, ...] = ()
    defaults: tuple[exp.Expression | None, ...] = ()
    uniques: tuple[Unique, ...] = ()
    checks: tuple[Check, ...] = ()
    identities: tuple[Identity | None, ...] = ()
    primary_key_name: str = ""  # the primary key's constraint name (``t_pkey`` unless the statement names it)
    foreign_keys: tuple[ForeignKey, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.columns)
        self.domains = self.domains or (None,) * n
        self.defaults = self.defaults or (None,) * n
        self.identities = self.identities or (None,) * n

    def position(self, name: str) -> int | None:
        for i, c in enumerate(self.columns):
            if c.name == name:
                return i
        return None


@dataclass
class View:
    name: str
    plan: Plan
    sql: str
    columns: tuple[Column, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.columns = self.plan.columns


class Catalog:
    """Names of tables and views (one namespace, case-insensitive as in PostgreSQL for unquoted names)."""

    def __init__(self) -> None:
        self.tables: dict[str, Table] = {}
        self.views: dict[str, View] = {}
        self.indexes: dict[str, tuple[str, tuple[int, ...]]] = {}

    def exists(self, name: str) -> bool:
        return name in self.tables or name in self.views

    def relation_plan(self, name: str, node: exp.Expression | None = None) -> Plan:
        if name in self.tables:
            return Scan(name, self.tables[name].columns)
        if name in self.views:
            return Scan(name, self.views[name].columns)
        raise error_at(node, f"relation {name!r} does not exist")

    def sqlglot_schema(self) -> dict:
        out = {}
        for name, rel in list(self.tables.items()) + list(self.views.items()):
            out[name] = {c.name: str(c.type) for c in rel.columns}
        return out
