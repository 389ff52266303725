"""A throwaway PostgreSQL (empty, or holding one table), for tests that compare ivm's answers with
PostgreSQL's, and the statements of the random transactions they send to both."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator, Sequence

import psycopg


def postgres(c_locale: bool = False) -> Iterator[psycopg.Connection]:
    """A connection (autocommit) to a new, empty local cluster; the cluster stops when the generator is
    closed. With ``c_locale``, to a new database of the C locale, whose text order and character classes
    (ASCII's) are ivm's."""
    from connectors.postgres.cluster import LocalCluster

    with LocalCluster() as cluster:
        dsn = cluster.dsn
        if c_locale:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute("CREATE DATABASE c_locale TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
            dsn = dsn.replace("dbname=postgres", "dbname=c_locale")
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
            yield conn


def postgres_with(table_sql: str, insert_sql: str, rows: Sequence[tuple]) -> Iterator[psycopg.Connection]:
    """A connection (autocommit) to a new local cluster where ``table_sql`` ran and ``insert_sql`` inserted
    ``rows``; the cluster stops when the generator is closed."""
    for conn in postgres():
        conn.execute(table_sql)
        with conn.cursor() as cur:
            cur.executemany(insert_sql, rows)
        yield conn


def load_both(db, pg: psycopg.Connection, statements: Sequence[str], views: dict[str, str]) -> None:
    """Run ``statements`` in ivm's ``db`` and in PostgreSQL, then create ``views`` (name: query) in ivm, each
    maintained from then on while PostgreSQL recomputes the query."""
    for s in statements:
        db.execute(s)
        pg.execute(s)
    for name, q in views.items():
        db.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")


def views_follow(
    pg: psycopg.Connection,
    db,
    views: Sequence,
    transaction: Callable[[], list[str]],
    rows: Callable[[list], list],
    steps: int = 20,
) -> None:
    """Create ``views`` in ivm's ``db`` (each a query, or a pair of ivm's query and PostgreSQL's for the same
    rows), then run ``steps`` transactions of ``transaction()`` in both and after each compare every view with
    PostgreSQL's answer (``rows`` makes both comparable). PostgreSQL's changes are rolled back at the end."""
    for i, q in enumerate(views):
        db.execute(f"CREATE MATERIALIZED VIEW v{i} AS {q[0] if isinstance(q, tuple) else q}")
    pg.execute("BEGIN")
    try:
        for step in range(steps):
            statements = transaction()
            db.execute("; ".join(["BEGIN", *statements, "COMMIT"]))
            for s in statements:
                pg.execute(s)
            for i, q in enumerate(views):
                got = rows(db.execute(f"SELECT * FROM v{i}").fetchall())
                assert got == rows(pg.execute(q[1] if isinstance(q, tuple) else q).fetchall()), (step, q)
    finally:
        pg.execute("ROLLBACK")


def error_at(db, sql: str, error: type, words: str, at: str) -> None:
    """``sql`` in ``db`` raises ``error`` saying ``words``, at line 1 within the text ``at``."""
    import pytest

    with pytest.raises(error) as err:
        db.execute(sql)
    assert words in err.value.message
    start = sql.index(at) + 1
    assert err.value.line == 1 and start <= err.value.col < start + len(at), (err.value.col, start)


def literal(v) -> str:
    """A Python value as an SQL constant of the random transactions (text and timestamps quoted, None NULL)."""
    if isinstance(v, dt.datetime):
        return f"'{v.isoformat(sep=' ')}'"
    return "NULL" if v is None else repr(v) if isinstance(v, str) else str(v)


def change(table: str, key: int, kind: float, g, a, b) -> str:
    """One statement of a random transaction over a table ``(id, g, a or x, b)`` keyed by ``id``: by ``kind``
    (in [0, 1)), the row ``(key, g, a, b)`` inserted unless present, the row ``key`` deleted, or its value
    column set to ``a`` and ``g`` to ``g``."""
    if kind < 0.5:
        values = ", ".join(literal(v) for v in (key, g, a, b))
        return f"INSERT INTO {table} VALUES ({values}) ON CONFLICT (id) DO NOTHING"
    if kind < 0.75:
        return f"DELETE FROM {table} WHERE id = {key}"
    col = "a" if table == "t" else "x"
    return f"UPDATE {table} SET {col} = {literal(a)}, g = {literal(g)} WHERE id = {key}"


def comparable(rows) -> list:
    """Rows of ivm or PostgreSQL, sorted, with NUMERIC values as doubles and instants in UTC."""

    def cell(v):
        if isinstance(v, decimal.Decimal):
            return float(v)
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return v.astimezone(dt.UTC)
        return v

    return sorted((tuple(cell(v) for v in r) for r in rows), key=repr)
