"""What PostgreSQL lets a query write in several ways (``sql.shorthands``), and the casts between INTEGER and
BOOLEAN: named windows, LIMIT ALL and NULL, FROM ONLY, BETWEEN SYMMETRIC, rows compared member by member (with
=, <>, <, IN lists and IN subqueries); each query's answer, and a view of it through changes, compared with a
throwaway PostgreSQL's; what PostgreSQL refuses is an error here too."""

from __future__ import annotations

import shutil

import pytest

import ivm
from ivm.errors import Error, ProgrammingError

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER, a INTEGER, b TEXT)"
ROWS = (
    "INSERT INTO t VALUES (1, 1, 1, 'a'), (2, 2, NULL, 'b'), (3, NULL, 3, NULL), (4, 1, 0, 'd'), (5, 1, 7, 'e')"
)
CHANGES = [
    "INSERT INTO t VALUES (6, 2, -2, 'f'), (7, NULL, NULL, 'g')",
    "UPDATE t SET a = 5 WHERE id = 2",
    "DELETE FROM t WHERE id IN (1, 5)",
    "UPDATE t SET g = 1 WHERE g IS NULL",
]

QUERIES = [
    "SELECT id, (a > 1)::int AS p, a::bool AS q, CAST(a AS boolean) AS r, CAST(a > 0 AS integer) + 1 AS s "
    "FROM t",
    "SELECT g, sum((a > 0)::int) AS n, count(*) FILTER (WHERE a::boolean) AS m FROM t GROUP BY g",
    "SELECT id FROM ONLY t WHERE a BETWEEN SYMMETRIC 5 AND 0",
    "SELECT id FROM t WHERE a NOT BETWEEN SYMMETRIC 5 AND 0",
    "SELECT id FROM t WHERE a BETWEEN SYMMETRIC NULL AND 3 OR a BETWEEN SYMMETRIC 3 AND NULL",
    "SELECT id, lag(a) OVER w AS l, sum(a) OVER (w ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s, "
    "rank() OVER w2 AS r FROM t WINDOW w AS (PARTITION BY g ORDER BY id), w2 AS (w)",
    "SELECT id, count(*) OVER w AS c FROM t WINDOW w AS (PARTITION BY g)",
    "SELECT id, row_number() OVER (w ORDER BY a DESC NULLS LAST, id) AS rn FROM t WINDOW w AS (PARTITION BY g)",
    "SELECT id, sum(a) OVER w AS s FROM t WINDOW w AS (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)",
    "SELECT id, (SELECT max(x.r) FROM (SELECT rank() OVER v AS r FROM t AS u WINDOW v AS (ORDER BY u.a)) x) "
    "AS m FROM t",
]
QUERIES += [  # rows compared member by member
    "SELECT id FROM t WHERE (g, a) IN (SELECT t2.a, t2.g FROM t AS t2)",
    "SELECT id, (g, a) NOT IN (SELECT t2.g, t2.a FROM t AS t2 WHERE t2.id > t.id) AS n, "
    "(g, b) IN (SELECT t2.g, t2.b FROM t AS t2 WHERE t2.id <> t.id) AS i FROM t",
    "SELECT id FROM t WHERE (a, g) NOT IN (SELECT t2.g, t2.a FROM t AS t2)",
    "SELECT id, (g, a) < (1, 5) AS lt, ROW(g, a) >= ROW(1, 5) AS ge, (g, a, id) <= (1, 5, 3) AS le, "
    "(a, g) <> (g, a) AS ne, (a, g) = (g, a) AS eq FROM t",
    "SELECT id FROM t WHERE (g, a) NOT IN ((1, 1), (2, NULL)) OR (g, a) IN ((NULL, 3))",
]
ORDERED = [
    "SELECT id FROM t ORDER BY id LIMIT ALL",
    "SELECT id FROM t ORDER BY id DESC LIMIT NULL OFFSET NULL",
    "SELECT id FROM t ORDER BY id LIMIT ALL OFFSET 2",
]


def _rows(rows) -> list:
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres

    for conn in postgres():
        conn.execute(TABLE)
        yield conn


def test_shorthands_answer_and_follow_changes_as_postgresql(pg):
    db = ivm.connect()
    db.execute(TABLE)
    db.execute(ROWS)
    for i, q in enumerate(QUERIES):
        db.execute(f"CREATE VIEW v{i} AS {q}")
    pg.execute("BEGIN")
    try:
        pg.execute(ROWS)
        for q in ORDERED:
            assert [tuple(r) for r in db.execute(q).fetchall()] == [
                tuple(r) for r in pg.execute(q).fetchall()
            ], q
        db.execute("TRUNCATE ONLY t")
        pg.execute("TRUNCATE ONLY t")
        db.execute(ROWS)
        pg.execute(ROWS)
        for step in ["", *CHANGES]:
            if step:
                db.execute(step)
                pg.execute(step)
            for i, q in enumerate(QUERIES):
                want = _rows(pg.execute(q).fetchall())
                assert _rows(db.execute(q).fetchall()) == want, (step, q)
                assert _rows(db.execute(f"SELECT * FROM v{i}").fetchall()) == want, (step, q)
    finally:
        pg.execute("ROLLBACK")


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        (
            "SELECT sum(a) OVER (w ORDER BY id) FROM t WINDOW w AS (ORDER BY a)",
            "cannot override ORDER BY clause",
        ),
        (
            "SELECT sum(a) OVER (w ROWS 1 PRECEDING) FROM t WINDOW w AS (ORDER BY a ROWS 2 PRECEDING)",
            'cannot copy window "w" because it has a frame clause',
        ),
        (
            "SELECT sum(a) OVER (w) FROM t WINDOW w AS (ORDER BY a ROWS 2 PRECEDING)",
            'cannot copy window "w" because it has a frame clause',
        ),
        (
            "SELECT sum(a) OVER v FROM t WINDOW w AS (ORDER BY a ROWS 2 PRECEDING), v AS (w)",
            'cannot copy window "w" because it has a frame clause',
        ),
        (
            "SELECT sum(a) OVER (w PARTITION BY g) FROM t WINDOW w AS (ORDER BY a)",
            "cannot override PARTITION BY",
        ),
        ("SELECT sum(a) OVER x FROM t WINDOW w AS (ORDER BY a)", 'window "x" does not exist'),
        ("SELECT CAST(CAST(3 AS BIGINT) AS BOOLEAN)", "BOOLEAN"),
        ("SELECT CAST(TRUE AS SMALLINT)", "SMALLINT"),
        ("SELECT id FROM t WHERE (g, a) = (1, 2, 3)", "unequal number of entries in row expressions"),
        ("SELECT id FROM t WHERE (g, a) IN (SELECT 1, 2, 3)", "subquery has too many columns"),
    ],
)
def test_what_postgresql_refuses_is_an_error(pg, sql, words):
    with pytest.raises(psycopg.Error):
        pg.execute(sql)
    db = ivm.connect()
    db.execute(TABLE)
    with pytest.raises(Error) as err:
        db.execute(sql)
    assert words in err.value.message
    if isinstance(err.value, ProgrammingError):
        assert err.value.line == 1 and err.value.col is not None
