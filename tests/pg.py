"""A throwaway PostgreSQL (empty, or holding one table), for tests that compare ivm's answers with
PostgreSQL's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import psycopg


def postgres() -> Iterator[psycopg.Connection]:
    """A connection (autocommit) to a new, empty local cluster; the cluster stops when the generator is
    closed."""
    from connectors.postgres.cluster import LocalCluster

    with (
        LocalCluster() as cluster,
        psycopg.connect(cluster.dsn, autocommit=True, prepare_threshold=None) as conn,
    ):
        yield conn


def postgres_with(table_sql: str, insert_sql: str, rows: Sequence[tuple]) -> Iterator[psycopg.Connection]:
    """A connection (autocommit) to a new local cluster where ``table_sql`` ran and ``insert_sql`` inserted
    ``rows``; the cluster stops when the generator is closed."""
    for conn in postgres():
        conn.execute(table_sql)
        with conn.cursor() as cur:
            cur.executemany(insert_sql, rows)
        yield conn
