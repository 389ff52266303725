"""Numbers of different types met in one expression (BIGINT with NUMERIC, NUMERIC with DOUBLE PRECISION, ...):
in comparisons, arithmetic, CASE, COALESCE, GREATEST, set operations, IN and joins, and ROUND and TRUNC to
tens and beyond, each as a query and as a view, against a real PostgreSQL. ivm's decimals are 64-bit integers
scaled to their column's scale, so a BIGINT near 2**63 read as NUMERIC(18, 2) does not fit: ivm must then give
PostgreSQL's answer or raise an error naming the overflow, never another value (it once wrapped around: the
greatest BIGINT plus 1.5 gave 0.50)."""

from __future__ import annotations

import decimal
import math
import shutil

import pytest

import ivm
from ivm.errors import DataError, NotSupportedError

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE m (id INTEGER PRIMARY KEY, b BIGINT, d DOUBLE PRECISION, c NUMERIC(18,2), i INTEGER)"
ROWS = [
    (1, 9007199254740993, 9007199254740992.0, decimal.Decimal("9007199254740.99"), 3),
    (2, 9223372036854775807, 9.223372036854775807e18, decimal.Decimal("0.10"), 2),
    (3, 3, 3.0, decimal.Decimal("3.00"), 3),
    (4, 1, 0.1, decimal.Decimal("0.10"), 0),
    (5, None, None, None, None),
    (6, -9223372036854775808, -9.223372036854775808e18, decimal.Decimal("-0.01"), -1),
    (7, 92233720368547758, 1e17, decimal.Decimal("9999999999999999.99"), 2147483647),
    (8, 92233720368547759, -1.5, decimal.Decimal("-9999999999999999.99"), -2147483648),
    (9, 7, 2.0, decimal.Decimal("90071992547409.93"), 7),  # as a double: scaled, past 2**53
]
SMALL = "id IN (3, 4, 5)"  # rows whose values every type holds

QUERIES = [
    "SELECT id, b = d, b < d, c = d, c < d, i = c, b = c, b < c, b > c FROM m",
    "SELECT id, b = 9007199254740992.0, d = 0.1, c = 0.1, c = 92233720368547758 FROM m",
    "SELECT id, CASE WHEN id > 3 THEN b ELSE c END AS x, COALESCE(b, c) AS y, COALESCE(c, i) AS z FROM m",
    "SELECT id, GREATEST(b, c) AS g, LEAST(c, i) AS l, GREATEST(b, d) AS gd FROM m",
    "SELECT id, b + c AS s, c - b AS t, i + c AS u, c * i AS v FROM m",
    "SELECT id, b + d AS s, c + d AS t, b::double precision AS u FROM m",
    "SELECT b FROM m UNION ALL SELECT c FROM m",
    "SELECT i FROM m UNION SELECT c FROM m",
    "SELECT b FROM m INTERSECT SELECT c FROM m",
    "SELECT id FROM m WHERE b IN (SELECT c FROM m)",
    "SELECT id FROM m WHERE c IN (1.5, 0.1, 92233720368547758)",
    "SELECT x.id, y.id AS y FROM m x JOIN m y ON x.b = y.c",
    "SELECT x.id, y.id AS y FROM m x JOIN m y ON x.i = y.c",
    "SELECT x.id, y.id AS y FROM m x LEFT JOIN m y ON x.c = y.d",
    # rounding to tens and beyond, near the bounds (a unit beyond 64 bits, half of one within them)
    "SELECT id, round(b, -1) AS r FROM m",
    "SELECT id, trunc(b, -1) AS t, trunc(b, -18) AS u, trunc(b, -19) AS v, round(b, -20) AS w FROM m",
    "SELECT id, round(b, -18) AS r FROM m",
    "SELECT id, round(b, -19) AS r FROM m",
    "SELECT id, round(c, -16) AS r, round(c, -17) AS s, trunc(c, -17) AS t, round(i, -10) AS u FROM m",
    "SELECT id, round(c) AS r, round(-c, 1) AS s, trunc(c, 1) AS t, c::bigint AS u FROM m",
    "SELECT id, c::double precision AS f, c + d AS s, c < 90071992547409.9375::float8 AS l FROM m",
    "SELECT id, d::bigint AS x FROM m WHERE id <> 2",  # -2**63 as a double is the least BIGINT exactly
]


def _cell(v):
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else ("float", v)
    if isinstance(v, decimal.Decimal):
        return ("number", v.normalize() if v else decimal.Decimal(0))  # PostgreSQL's NUMERIC has its own scale
    if isinstance(v, int) and not isinstance(v, bool):
        return ("number", decimal.Decimal(v))
    return (type(v).__name__, v)


def _rows(rows) -> list:
    return sorted((tuple(_cell(v) for v in r) for r in rows), key=repr)


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres_with

    yield from postgres_with(TABLE, "INSERT INTO m VALUES (%s, %s, %s, %s, %s)", ROWS)


@pytest.fixture(scope="module")
def db():
    conn = ivm.connect()
    conn.execute(TABLE)
    conn.cursor().executemany("INSERT INTO m VALUES (%s, %s, %s, %s, %s)", ROWS)
    return conn


def _overflow(err: Exception) -> bool:
    text = str(err)
    return "numeric field overflow" in text or "18 digits ivm holds" in text or "out of range" in text


@pytest.mark.parametrize("sql", QUERIES)
def test_postgresql_s_answer_or_an_error_naming_the_overflow(pg, db, sql):
    want = _rows(pg.execute(sql).fetchall())
    name = f"v{QUERIES.index(sql)}"
    for how, run in (
        ("query", lambda: db.execute(sql).fetchall()),
        ("view", lambda: (db.execute(f"CREATE VIEW {name} AS {sql}"), db.execute(f"SELECT * FROM {name}"))[1]),
    ):
        try:
            got = _rows(run() if how == "query" else run().fetchall())
        except (DataError, NotSupportedError, ivm.OperationalError) as err:
            assert _overflow(err), (how, err)
            continue
        assert got == want, how


@pytest.mark.parametrize("sql", QUERIES)
def test_values_every_type_holds_give_postgresql_s_answer(pg, db, sql):
    part = f"(SELECT * FROM m WHERE {SMALL}) AS"
    small = sql.replace("FROM m x", f"FROM {part} x").replace("JOIN m y", f"JOIN {part} y")
    small = small.replace("FROM m", f"FROM {part} m")
    assert _rows(db.execute(small).fetchall()) == _rows(pg.execute(small).fetchall())
