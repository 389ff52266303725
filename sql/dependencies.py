"""What a view's definition reads of the catalog, and its definition carried over a change of a table.

PostgreSQL binds a view to the columns it reads when it is created: ``SELECT *`` means the columns there were,
renaming a column or a table leaves the view reading the same data, and a column a view reads cannot be
dropped without the view. ivm keeps a view's definition as SQL text, parsed again when a database is opened, so
a view over a table that ALTER TABLE changes gets its definition *pinned* first: every column qualified by its
source and every ``*`` expanded (sqlglot's ``qualify``, which the translator runs anyway). A pinned
definition names each column it reads, so a new column cannot change what it reads, a dropped one shows, and a
renamed one (or table) is renamed in it.

None of this is trusted blindly: ``same_plan`` compares the logical plans of two definitions (before and after,
each against its catalog), which must compute the same rows by the same columns' positions. A definition that
cannot be carried over so is refused by the caller, naming the view.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from sql.catalog import Catalog, Table
from sql.logical import Plan, Scan, substitute, unnamed
from sql.translate import qualify_query, translate_query

__all__ = [
    "relations_read",
    "pinned",
    "columns_read",
    "rename_columns",
    "rename_relation",
    "catalog_with",
    "same_plan",
]


def relations_read(query: exp.Expression) -> set[str]:
    """The names of the tables and views ``query`` reads: every relation in a FROM or JOIN that is not a
    common table expression in scope (a CTE's body may read a table of its own name)."""
    try:
        scopes = traverse_scope(query)
    except Exception:  # a shape the scope analysis cannot take: every name, which may say too much, not less
        return {t.name for t in query.find_all(exp.Table)}
    return {
        source.name for scope in scopes for source in scope.sources.values() if isinstance(source, exp.Table)
    }


def pinned(query: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``query`` with every column qualified by its source and every ``*`` expanded against ``catalog``."""
    return qualify_query(query, catalog)


def _columns_of(tree: exp.Expression, table: str) -> list[exp.Column]:
    """The column references of a pinned query that read relation ``table``."""
    out = []
    for scope in traverse_scope(tree):
        for col in scope.columns:
            source = _source(scope, col.table)
            if isinstance(source, exp.Table) and source.name == table:
                out.append(col)
    return out


def _source(scope: Scope | None, alias: str):
    while scope is not None:
        if alias in scope.sources:
            return scope.sources[alias]
        scope = scope.parent
    return None


def columns_read(tree: exp.Expression, table: str) -> set[str]:
    """The columns of relation ``table`` a pinned query reads."""
    return {c.name for c in _columns_of(tree, table)}


def rename_columns(tree: exp.Expression, table: str, renames: dict[str, str]) -> exp.Expression:
    """A pinned query reading ``table``'s columns by their new names (``renames``: old name to new)."""
    tree = tree.copy()
    for col in _columns_of(tree, table):
        if col.name in renames:
            col.set("this", exp.to_identifier(renames[col.name], quoted=True))
    return tree


def rename_relation(tree: exp.Expression, old: str, new: str) -> exp.Expression:
    """A pinned query reading relation ``old`` under its new name (each reference keeps its alias, which
    pinning gave every relation)."""
    tree = tree.copy()
    for scope in traverse_scope(tree):
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table) and source.name == old:
                if not source.alias:
                    source.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
                source.set("this", exp.to_identifier(new, quoted=True))
    return tree


def catalog_with(catalog: Catalog, tables: dict[str, Table | None]) -> Catalog:
    """A catalog like ``catalog`` with ``tables`` replaced (a table of None gone); its views and indexes are
    those of ``catalog``."""
    out = Catalog()
    out.tables = {n: t for n, t in catalog.tables.items() if n not in tables}
    out.tables.update({n: t for n, t in tables.items() if t is not None})
    out.views = catalog.views
    out.indexes = catalog.indexes
    return out


def same_plan(
    a: exp.Expression,
    a_catalog: Catalog,
    b: exp.Expression,
    b_catalog: Catalog,
    relation: Callable[[str], str] | None = None,
) -> bool:
    """Whether query ``a`` against ``a_catalog`` and ``b`` against ``b_catalog`` translate to the same plan
    (columns by position, output columns of the same names), ``a``'s relations named by ``relation``."""
    pa, pb = translate_query(a, a_catalog), translate_query(b, b_catalog)
    if [c.name for c in pa.columns] != [c.name for c in pb.columns]:
        return False
    if relation is not None:

        def renamed(p: Plan) -> Plan | None:
            if isinstance(p, Scan):
                return Scan(relation(p.table), p.columns)
            return None

        pa = substitute(pa, renamed)
    return unnamed(pa) == unnamed(pb)
