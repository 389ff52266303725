"""The sink's view definitions: their names as the engine knows them, and the order they are created in.

A view is named by the user's spelling (``"ByCust"``) in outputs, diffs and ``contents()``; inside the engine
it is the name folded to lower case, as an unquoted SQL name is, so a view may read another by any case.
Views may be given in any order: each one's SELECT is parsed (sqlglot, PostgreSQL dialect) for the tables and
views it reads, and the views are created after those they read.

    >>> creation_order({"top": "SELECT * FROM ByCust WHERE n > 1", "ByCust": "SELECT 1 AS n FROM t"})
    ['ByCust', 'top']
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import traverse_scope

from sql.errors import SqlError
from sql.recursive import rewrite_mutually_recursive

__all__ = ["engine_names", "creation_order", "reads"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def engine_names(views: Mapping[str, str]) -> dict[str, str]:
    """Each view's name inside the engine (its lower case), by the user's spelling. Raises ``SqlError`` for
    a name that is not a plain SQL identifier, or two names equal but for case, naming them."""
    folded: dict[str, str] = {}
    for name in views:
        if not isinstance(name, str) or not _is_identifier(name):
            raise SqlError(
                f"view name {name!r} is not a SQL identifier: use letters, digits and underscores, not "
                "starting with a digit, and not a reserved word such as SELECT"
            )
        other = folded.get(name.lower())
        if other is not None:
            raise SqlError(
                f"views {other!r} and {name!r} differ only in case, and view names are case-insensitive "
                "(as Spark's are): rename one"
            )
        folded[name.lower()] = name
    return {name: low for low, name in folded.items()}


def _is_identifier(name: str) -> bool:
    """Whether ``name`` can stand unquoted after FROM (so other views can read it) as itself."""
    if not _IDENTIFIER.match(name):
        return False
    try:
        tree = sqlglot.parse_one(f"SELECT 1 FROM {name}", dialect="postgres")
    except SqlglotError:
        return False
    tables = list(tree.find_all(exp.Table))
    return len(tables) == 1 and tables[0].name == name


def reads(sql: str) -> set[str]:
    """The names (lower case) of the tables and views that the SELECT ``sql`` reads; names of its CTEs are
    not among them. Empty if sqlglot cannot parse it: the engine then reports the error."""
    text, _ = rewrite_mutually_recursive(sql)
    try:
        tree = sqlglot.parse_one(text, dialect="postgres")
    except SqlglotError:
        return set()
    try:
        # each scope's sources: a CTE it can see is a scope there, a table read is an exp.Table
        return {
            source.name.lower()
            for scope in traverse_scope(tree)
            for source in scope.sources.values()
            if isinstance(source, exp.Table)
        }
    except (SqlglotError, RecursionError):
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        return {t.name.lower() for t in tree.find_all(exp.Table)} - ctes


def creation_order(views: Mapping[str, str]) -> list[str]:
    """The views' names (as given) ordered so that each comes after the views it reads; otherwise in the order
    given. Raises ``SqlError`` naming the views of a cycle."""
    names = engine_names(views)
    by_engine = {low: name for name, low in names.items()}
    needs = {name: {by_engine[r] for r in reads(sql) if r in by_engine} for name, sql in views.items()}
    order: list[str] = []
    state: dict[str, int] = {}  # 1 while its dependencies are being placed, 2 once placed

    def place(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name) :] + [name]
            raise SqlError(f"views read each other in a cycle: {' -> '.join(cycle)}")
        state[name] = 1
        for dep in sorted(needs[name], key=list(views).index):
            place(dep, [*path, name])
        state[name] = 2
        order.append(name)

    for name in views:
        place(name, [])
    return order
