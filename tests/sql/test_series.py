"""generate_series in FROM: alone, reading the items before it (comma, CROSS JOIN LATERAL, LEFT JOIN LATERAL
... ON true, after an outer join, inside a correlated subquery), over integers of every width and timestamps:
views holding it follow random inserts, updates and deletes (NULLs and duplicates among them) exactly as a
throwaway PostgreSQL answers the same queries after every transaction; what ivm does not take is refused by
name and position."""

from __future__ import annotations

import datetime as dt
import random
import shutil

import pytest

import ivm
from ivm.errors import DataError, NotSupportedError, ProgrammingError
from tests.pg import change, comparable, error_at, literal, views_follow

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLES = [
    "CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER, a INTEGER, b TEXT)",
    "CREATE TABLE u (id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, y TEXT)",
    "CREATE TABLE e (id INTEGER PRIMARY KEY, s TIMESTAMP, f TIMESTAMP, z TIMESTAMPTZ, n BIGINT)",
]

VIEWS = [
    # reading the item before it: comma, CROSS JOIN LATERAL, a step, a step read from the row, downwards
    "SELECT t.id, v FROM t, generate_series(t.g, t.a) v",
    "SELECT t.id, s.v FROM t CROSS JOIN LATERAL generate_series(1, t.a, 2) AS s(v)",
    "SELECT t.id, v FROM t, generate_series(1, 9, t.g) AS v",
    "SELECT t.id, v FROM t, generate_series(t.a, t.g, -1) AS v",
    "SELECT t.id, v FROM t, LATERAL generate_series(t.a, t.a + 3) v WHERE v % 2 = 0",
    # padded: LEFT JOIN LATERAL ... ON true, WITH ORDINALITY
    "SELECT t.id, s.v, s.n FROM t LEFT JOIN LATERAL generate_series(t.g, t.a) WITH ORDINALITY s(v, n) ON true",
    "SELECT t.id, s.v FROM t LEFT JOIN LATERAL generate_series(t.a, 3) AS s(v) ON TRUE WHERE t.g IS NOT NULL",
    "SELECT t.id, o.v, o.ordinality FROM t, generate_series(t.g, 5) WITH ORDINALITY o(v)",
    # grouped, distinct, two items read, after an outer join, joined on its values
    "SELECT v, count(*) AS c, sum(t.id) AS s FROM t, generate_series(t.g, 6) v GROUP BY v",
    "SELECT DISTINCT v FROM t, generate_series(t.g, t.a) v",
    "SELECT t.id, u.id AS uid, v FROM t, u, generate_series(t.g, u.g) v WHERE u.x = t.a",
    "SELECT t.id, v FROM t LEFT JOIN u ON u.id = t.id CROSS JOIN LATERAL generate_series(1, u.g) v",
    "SELECT t.id, u.id AS uid FROM t, generate_series(t.g, t.a) v JOIN u ON u.x = v",
    # alone: a constant relation joined, anti-joined, padded
    "SELECT t.id, k FROM t JOIN generate_series(1, 5) k ON k = t.a",
    "SELECT k FROM generate_series(1, 9) k WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.a = k)",
    "SELECT d.d, count(t.id) AS c FROM generate_series(1, 9) AS d(d) LEFT JOIN t ON t.a = d.d GROUP BY d.d",
    "SELECT * FROM generate_series(2147483640, 2147483647, 5) AS x",
    "SELECT * FROM generate_series(9223372036854775800, 9223372036854775807, 3) AS x",
    "SELECT * FROM generate_series(-2147483648, -2147483647) AS x",
    "SELECT x FROM generate_series(5, 1) AS x",
    # inside subqueries, correlated and not, WITH and WITH RECURSIVE
    "SELECT t.id, (SELECT sum(x) FROM generate_series(t.g, t.a) x) AS s FROM t",
    "SELECT t.id FROM t WHERE EXISTS (SELECT 1 FROM generate_series(1, t.g) x WHERE x = t.a)",
    "SELECT t.id FROM t WHERE t.a IN (SELECT x * 2 FROM generate_series(1, 3) x)",
    "WITH s AS (SELECT t.id, v FROM t, generate_series(1, t.a) v) SELECT v, count(*) AS c FROM s GROUP BY v",
    "WITH RECURSIVE r(n) AS (SELECT t.a FROM t WHERE t.a > 0 UNION SELECT x FROM r, "
    "generate_series(r.n + 1, r.n + 2) x WHERE x < 12) SELECT n FROM r",
    # BIGINT and timestamps (days of 24 hours in the session's time zone, UTC)
    "SELECT e.id, v FROM e, generate_series(e.n, e.n + 2) v",
    "SELECT e.id, d FROM e, generate_series(e.s, e.f, interval '1 day') d",
    "SELECT e.id, d FROM e, generate_series(e.s, e.f, interval '10 hours 30 minutes') d WHERE d > e.s",
    "SELECT e.id, d FROM e, generate_series(e.f, e.s, interval '-1 day') d",
    "SELECT e.id, d FROM e, generate_series(e.z, e.z + interval '2 days', interval '1 day') d",
    "SELECT e.id, d FROM e, generate_series(e.s, e.z, interval '12 hours') d",
    "SELECT date_trunc('day', d) AS day, count(*) AS c FROM e, generate_series(e.s, e.f, interval '6 hours') d "
    "GROUP BY 1",
    "SELECT d FROM generate_series(date '2024-02-27', date '2024-03-02', interval '1 day') d",
]

_TIMES = [dt.datetime(2024, 2, 27, 0, 0), dt.datetime(2024, 2, 28, 6, 30), dt.datetime(2024, 3, 1, 23, 0), None]


def _transaction(rng: random.Random) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 6)):
        table = rng.choice("tue")
        key = rng.randint(1, 10)
        kind = rng.random()
        if table == "e":
            s, f, z = rng.choice(_TIMES), rng.choice(_TIMES), rng.choice(_TIMES)
            n = rng.choice([1, -5, 9223372036854775805, None])
            if kind < 0.5:
                values = ", ".join(literal(v) for v in (key, s, f, z, n))
                out.append(f"INSERT INTO e VALUES ({values}) ON CONFLICT (id) DO NOTHING")
            elif kind < 0.75:
                out.append(f"DELETE FROM e WHERE id = {key}")
            else:
                out.append(f"UPDATE e SET s = {literal(s)}, n = {literal(n)} WHERE id = {key}")
            continue
        g, a, b = rng.choice([1, 2, 3, None]), rng.choice([1, 2, 5, 9, -1, None]), rng.choice(["p", "q", None])
        out.append(change(table, key, kind, g, a, b))
    return out


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres

    for conn in postgres():
        conn.execute("SET TIME ZONE 'UTC'")
        for s in TABLES:
            conn.execute(s)
        yield conn


@pytest.mark.parametrize("seed", [1, 2])
def test_series_views_follow_their_tables_as_postgresql_answers(pg, seed):
    rng = random.Random(seed)
    db = ivm.connect()
    for s in TABLES:
        db.execute(s)
    views_follow(pg, db, VIEWS, lambda: _transaction(rng), comparable)


def test_a_zero_step_puts_its_view_in_error_until_the_row_changes():
    db = ivm.connect()
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER)")
    db.execute("CREATE MATERIALIZED VIEW v AS SELECT t.id, x FROM t, generate_series(1, 3, t.k) x")
    db.execute("INSERT INTO t VALUES (1, 2), (2, 0)")
    with pytest.raises(DataError, match="step size cannot equal zero"):
        db.execute("SELECT * FROM v")
    db.execute("UPDATE t SET k = -1 WHERE id = 2")
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [(1, 1), (1, 3)]
    with pytest.raises(DataError, match="step size cannot equal zero"):
        db.execute("SELECT * FROM generate_series(1, 3, 0)")
    with pytest.raises(DataError, match="would give 200,000,000 rows"):
        db.execute("SELECT count(*) FROM generate_series(1, 200000000)")


@pytest.mark.parametrize(
    ("sql", "error", "words", "at"),
    [
        ("SELECT generate_series(1, 3)", NotSupportedError, "outside FROM", "generate_series"),
        ("SELECT * FROM t WITH ORDINALITY", NotSupportedError, "WITH ORDINALITY is not supported", "t WITH"),
        (
            "SELECT * FROM generate_series(1.5, 3) g",
            NotSupportedError,
            "generate_series(numeric, integer) is not supported",
            "generate_series(1.5",
        ),
        (
            "SELECT * FROM e, generate_series(e.s, e.f, interval '1 month') d",
            NotSupportedError,
            "a step of months or years",
            "interval '1 month'",
        ),
        (
            "SELECT * FROM e, generate_series(e.s, e.f) d",
            ProgrammingError,
            "generate_series of timestamps needs a step",
            "generate_series(e.s",
        ),
        (
            "SELECT * FROM t LEFT JOIN LATERAL generate_series(1, t.a) s ON s > 1",
            NotSupportedError,
            "supported with ON true only",
            "s > 1",
        ),
        (
            "SELECT * FROM t RIGHT JOIN LATERAL generate_series(1, t.a) g ON true",
            NotSupportedError,
            "holding a RIGHT or FULL join",
            "generate_series(1, t.a)",
        ),
        (
            "SELECT t.id, g FROM t, generate_series(t.g, t.a) g",
            ProgrammingError,
            'column reference "g" is ambiguous',
            "g FROM",
        ),
        (
            "SELECT * FROM generate_series(1, t.a) s, t",
            ProgrammingError,
            'invalid reference to FROM-clause entry for table "t"',
            "t.a",
        ),
        (
            "SELECT * FROM generate_series(1, 3) g(x, y)",
            ProgrammingError,
            "too many column aliases specified for function generate_series",
            "g(x, y)",
        ),
    ],
)
def test_what_series_cannot_take_is_an_error_at_it(pg, sql, error, words, at):
    if error is ProgrammingError:  # PostgreSQL refuses it too
        pg.execute("BEGIN")
        try:
            with pytest.raises(psycopg.Error):
                pg.execute(sql)
        finally:
            pg.execute("ROLLBACK")
    db = ivm.connect()
    for s in TABLES:
        db.execute(s)
    error_at(db, sql, error, words, at)
