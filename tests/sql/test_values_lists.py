"""VALUES lists as relations: a statement of their own (with ORDER BY, LIMIT and OFFSET), in FROM (with the
alias naming their columns, or PostgreSQL's column1, column2, ...), in WITH, in IN, joined with tables and held
in views that follow their tables' changes; their column types resolved as PostgreSQL resolves them (as
UNION's). Each answer is compared with a throwaway PostgreSQL's; what ivm cannot do is refused by name and
position."""

from __future__ import annotations

import decimal
import shutil

import pytest

import ivm
from ivm.errors import DataError, ProgrammingError

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, s TEXT)"
ROWS = "INSERT INTO t VALUES (1, 10, 'x'), (2, 20, NULL), (3, NULL, 'z')"

QUERIES = [
    "VALUES (1, 2), (3, 4)",
    "VALUES (1, 'b'), (2, 'a'), (3, NULL) ORDER BY 2 DESC",
    "VALUES (1), (2), (3) ORDER BY column1 DESC LIMIT 2",
    "VALUES (3), (1), (2) ORDER BY 1 OFFSET 1",
    "VALUES (NULL), (NULL)",
    "VALUES (1 + 1, 'a' || 'b', 2 > 1, DATE '2024-01-31' + 1)",
    "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(id, x)",
    "SELECT * FROM (VALUES (1), (2.5), (NULL)) AS v",
    "SELECT column2, column1 FROM (VALUES (1, 'one'), (2, 'two')) AS v WHERE column1 > 1",
    "SELECT * FROM (VALUES (1, 2.5), (NULL, 3)) AS v(k)",
    "SELECT v.x, t.a FROM t JOIN (VALUES (1, 'one'), (2, 'two'), (9, 'nine')) AS v(k, x) ON t.id = v.k",
    "SELECT t.id, v.x FROM t LEFT JOIN (VALUES (1, 'one'), (3, NULL)) AS v(k, x) ON t.id = v.k",
    "WITH w(a, b) AS (VALUES (1, NULL), (2, 'x')) SELECT * FROM w",
    "WITH w AS (VALUES (1), (1), (2)) SELECT column1, count(*) FROM w GROUP BY column1",
    "SELECT * FROM t WHERE id IN (VALUES (1), (3))",
    "SELECT * FROM t WHERE a NOT IN (VALUES (10), (NULL))",
    "SELECT id FROM t UNION SELECT * FROM (VALUES (7), (1)) AS v",
    "SELECT count(*), sum(x) FROM (VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11)) AS v(x)",
    # a string constant (or NULL) beside another type is read as that type, as PostgreSQL reads it
    "VALUES (1), ('2'), (NULL)",
    "VALUES ('1'), ('2'), (3)",
    "VALUES ('2024-01-31'), (DATE '2024-02-01')",
    "VALUES (NULL, 'a'), ('x', 'b')",
    "SELECT 1 UNION ALL SELECT '2'",
    "SELECT id FROM t UNION SELECT '7'",
    "SELECT s FROM t UNION ALL SELECT 'q'",
    "SELECT t.id, v.x FROM t, LATERAL (VALUES (t.a), (t.id)) AS v(x)",
]


def _rows(rows) -> list:
    def cell(v):
        return v.normalize() if isinstance(v, decimal.Decimal) else v  # PostgreSQL's NUMERIC keeps its scale

    return sorted((tuple(cell(v) for v in r) for r in rows), key=repr)


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres

    for conn in postgres():
        conn.execute(TABLE)
        conn.execute(ROWS)
        yield conn


@pytest.mark.parametrize("sql", QUERIES)
def test_values_lists_answer_as_postgresql(pg, sql):
    db = ivm.connect()
    db.execute(TABLE)
    db.execute(ROWS)
    got, want = db.execute(sql).fetchall(), pg.execute(sql).fetchall()
    if "ORDER BY" in sql:
        assert [tuple(r) for r in got] == [tuple(r) for r in want]
    assert _rows(got) == _rows(want)


def test_views_over_values_lists_follow_their_tables(pg):
    db = ivm.connect()
    db.execute(TABLE)
    views = [q for q in QUERIES if " t " in f"{q} " or "FROM t" in q or "JOIN t" in q]
    for i, q in enumerate(views):
        db.execute(f"CREATE VIEW v{i} AS {q}")
    pg.execute("BEGIN")
    try:
        pg.execute("DELETE FROM t")
        for step in [
            ROWS,
            "DELETE FROM t WHERE id = 1",
            "UPDATE t SET a = NULL WHERE id = 2",
            "INSERT INTO t VALUES (7, 10, 'seven'), (9, 90, NULL)",
            "UPDATE t SET id = 1 WHERE id = 9",
        ]:
            db.execute(step)
            pg.execute(step)
            for i, q in enumerate(views):
                assert _rows(db.execute(f"SELECT * FROM v{i}").fetchall()) == _rows(pg.execute(q).fetchall()), (
                    step,
                    q,
                )
    finally:
        pg.execute("ROLLBACK")


@pytest.mark.parametrize(
    ("sql", "error", "words", "column"),
    [
        ("VALUES (1, 2), (3)", ProgrammingError, "VALUES lists must all be the same length", 17),
        ("VALUES (1), ('a')", DataError, 'invalid input syntax for type integer: "a"', 14),
        ("VALUES ('x'), (NULL), (2)", DataError, 'invalid input syntax for type integer: "x"', 9),
    ],
)
def test_values_postgresql_cannot_take_are_an_error_at_them(pg, sql, error, words, column):
    db = ivm.connect()
    with pytest.raises(psycopg.Error):
        pg.execute(sql)
    with pytest.raises(error) as err:
        db.execute(sql)
    assert words in err.value.message
    assert err.value.col == column
