"""The text ivm keeps for a view, a table (its CHECKs and DEFAULTs) and an index parses back to the same
definition, as a reopened database parses it: every expression of a list covering the functions and operators
ivm implements, over columns and over CASTs of them (the types sqlglot then infers are what it rewrites by, as
``ROUND(x, n)`` of a double it would cast to DECIMAL), gives the same rows from the kept text as from the
statement written, in PostgreSQL's dialect and in Spark's; and a database whose definitions hold them reopens
with the same contents and the same checks."""

from __future__ import annotations

import re

import pytest

import ivm
from ivm.db import parsing
from sql.recursive import query_sql

SCHEMA = (
    "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b BIGINT, c DECIMAL(10,3), d DOUBLE PRECISION, s TEXT, "
    "dt DATE, ts TIMESTAMP, bl BOOLEAN, sm SMALLINT)"
)
ROWS = (
    "INSERT INTO t VALUES "
    "(1, 7, 10000000000, 2.5, 2.5, 'abc', DATE '2024-02-29', TIMESTAMP '2024-02-29 13:45:10.25', TRUE, 3), "
    "(2, -7, -3, -2.5, -2.5, ' Ab C ', DATE '2023-12-31', TIMESTAMP '2023-12-31 23:59:59', FALSE, -3), "
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(4, 0, 0, 0.000, 0.0, '', DATE '2000-01-01', TIMESTAMP '2000-01-01 00:00:00', TRUE, 0), "
    "(5, 3, 5, 1.005, 1.005, 'héllo wörld', DATE '1999-01-03', TIMESTAMP '1999-01-03 06:07:08', NULL, 32767), "
    "(6, 2, -5, -0.5, -0.5, 'a%b_c', DATE '2021-01-04', TIMESTAMP '2021-01-04 12:00:00', FALSE, -32768)"
)

EXPRESSIONS = [
    "a / 2", "a % 3", "b / nullif(a, 0)", "c / 3", "c * c", "c + d", "a / nullif(c, 0)", "-a", "abs(a)",
    "b * 2",
    "round(c)", "round(c, 1)", "round(d)", "round(d, 1)", "round(a / 7.0, 2)", "trunc(c, 1)", "trunc(d)",
    "ceil(c)", "floor(d)", "sign(c)", "mod(a, 3)", "mod(c, 2)", "power(d, 2)", "sqrt(abs(d))", "ln(abs(d) + 1)",
    "log(abs(d) + 1)", "log(2, abs(a) + 1)", "exp(c)", "cbrt(d)", "greatest(a, c, d)", "least(a, d)",
    "coalesce(a, c)", "nullif(c, 2.5)", "CASE WHEN a > 0 THEN c ELSE d END", "CASE a WHEN 7 THEN 'x' END",
    "c::int", "d::int", "d::bigint", "c::text", "d::text", "a::text", "d::numeric(10,2)", "s::varchar(2)",
    "s::char(5)", "s || a", "s || bl", "a || s", "concat(s, a, c, d, dt, bl)", "length(s)", "upper(s)",
    "lower(s)", "substring(s, 2, 2)", "substring(s from 2)", "left(s, 2)", "right(s, -1)", "lpad(s, 6, 'xy')",
    "rpad(s, 6)", "split_part(s, ',', 2)", "strpos(s, 'b')", "position('l' in s)", "ltrim(s, 'a ')",
    "btrim(s)", "trim(both 'a' from s)", "replace(s, 'a', 'x')", "reverse(s)", "starts_with(s, 'a')",
    "concat_ws('-', s, a, bl)", "repeat(s, 2)",
    "s like 'a%'", "s like '%!%%' escape '!'", "s ilike 'H%'", "s ~ '^a'", "s ~* 'AB'", "s !~ 'b'",
    "dt + 1", "dt - DATE '2024-01-01'", "dt + interval '1 month'", "ts - interval '36 hours'",
    "ts - TIMESTAMP '2024-01-01'", "dt::timestamp", "ts::date", "ts::text", "extract(epoch from ts)",
    "extract(isodow from dt)", "date_part('doy', dt)", "date_trunc('week', ts)",
    "to_char(ts, 'YYYY-MM-DD HH24:MI:SS.MS')", "to_char(dt, 'FMDay FMMonth')",
    "to_date(to_char(dt, 'YYYY-MM-DD'), 'YYYY-MM-DD')",
    "a in (1, null)", "a not in (1, 2)", "a between 3 and -1", "a is distinct from null", "bl and null",
    "not bl", "bl is unknown", "s = '12'", "b < 9", "E'a\\tb' || s", "$$x$$ || s",
]  # fmt: skip
QUERIES = [
    "SELECT bl, count(*), sum(a), avg(c), min(s), max(d), string_agg(s, ',' ORDER BY id) FROM t GROUP BY bl",
    "SELECT sum(c) FILTER (WHERE bl), count(DISTINCT a), bool_and(bl), array_agg(a ORDER BY id) FROM t",
    "SELECT id, row_number() OVER (ORDER BY d DESC, id), lag(s, 2, 'zz') OVER (ORDER BY id) FROM t",
    "SELECT id, sum(d) OVER (ORDER BY d RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING) FROM t",
    "SELECT x.id, y.id AS yid FROM t x FULL JOIN t y ON x.a = y.sm AND y.bl",
    "SELECT id, (SELECT max(y.id) FROM t y WHERE y.a < x.a) AS m FROM t x",
    "SELECT id FROM t x WHERE NOT EXISTS (SELECT 1 FROM t y WHERE y.sm = x.a) AND a NOT IN (SELECT 1)",
    "SELECT a FROM t UNION SELECT sm FROM t EXCEPT SELECT 7",
    "SELECT s FROM t ORDER BY s DESC NULLS LAST LIMIT 3 OFFSET 1",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 5) SELECT round(n / 2.0) FROM r",
    "SELECT t.id, v.x FROM t JOIN (VALUES (1, 'one'), (2, '2024-01-01')) AS v(k, x) ON t.id = v.k",
    "VALUES (1, DATE '2024-01-31'), (2, '2024-02-01') ORDER BY 2 DESC LIMIT 1",
]
SPARK = [
    "SELECT id, round(d) AS r, round(d, 1) AS r1, round(a / 2.0e0) AS h FROM t",
    "SELECT id, concat(s, a, bl) AS c, s || a AS p, concat(s) AS q FROM t",
    "SELECT bl, a / 2 AS q, a div 2 AS i, avg(c) AS m FROM t GROUP BY bl, a",
    "SELECT col2, col1 FROM VALUES (1, 'a'), (2, 'b')",
]


def _typed(expr: str) -> str:
    """``expr`` with each column read through a CAST to its own type (outside quoted text)."""
    types = {"a": "INTEGER", "b": "BIGINT", "c": "DECIMAL(10,3)", "d": "DOUBLE PRECISION", "s": "TEXT"}
    types |= {"dt": "DATE", "ts": "TIMESTAMP", "bl": "BOOLEAN", "sm": "SMALLINT"}
    parts = re.split(r"('[^']*'|\$\$[^$]*\$\$)", expr)
    cast = r"\b(a|b|c|d|s|dt|ts|bl|sm)\b(?!\s*\()"
    return "".join(
        p if p[:1] in ("'", "$") else re.sub(cast, lambda m: f"CAST({m[1]} AS {types[m[1]]})", p) for p in parts
    )


@pytest.fixture(scope="module")
def db():
    conn = ivm.connect()
    conn.execute(SCHEMA)
    conn.execute(ROWS)
    return conn


def _rows(db, sql: str, dialect: str = "postgres") -> list:
    return sorted(db.execute(sql, dialect=dialect).fetchall(), key=repr)


QUERIES_WRITTEN = (
    [f"SELECT id, {e} AS v FROM t" for e in EXPRESSIONS]
    + [f"SELECT id, {_typed(e)} AS v FROM t" for e in EXPRESSIONS]
    + QUERIES
)


@pytest.mark.parametrize("sql", QUERIES_WRITTEN)
def test_kept_text_means_the_query_written(db, sql):
    (stmt,) = parsing.parse(sql)
    assert _rows(db, query_sql(stmt)) == _rows(db, sql), query_sql(stmt)


@pytest.mark.parametrize("sql", SPARK)
def test_kept_text_of_spark_sql_means_spark_s_query(db, sql):
    (stmt,) = parsing.parse(sql, dialect="spark", catalog=db.catalog)
    assert _rows(db, query_sql(stmt)) == _rows(db, sql, "spark"), query_sql(stmt)


def test_a_database_reopens_its_definitions_as_written(tmp_path):
    path = tmp_path / "db"
    db = ivm.connect(str(path))
    db.execute(
        "CREATE TABLE u (k INTEGER PRIMARY KEY, d DOUBLE PRECISION CHECK (round(d::float8, 1) < 100), "
        "s TEXT DEFAULT 'x', CHECK (concat(s, d > 0) <> 'yt'))"
    )
    db.execute("CREATE INDEX u_d ON u (d)")
    views = {
        "v": "SELECT k, round(d::float8, 1) AS r, round(d::float8) AS e, concat(s, d > 0) AS c FROM u",
        "w": "SELECT round(sum(d)::float8, 2) AS total FROM u",
    }
    for name, sql in views.items():
        db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.execute("INSERT INTO u (k, d) VALUES (1, 2.45), (2, -0.5), (3, 2.5)")
    before = {name: _rows(db, f"SELECT * FROM {name}") for name in views}
    db.close()

    db = ivm.connect(str(path))
    assert {name: _rows(db, f"SELECT * FROM {name}") for name in views} == before
    with pytest.raises(ivm.IntegrityError, match="check constraint"):
        db.execute("INSERT INTO u VALUES (4, 99.96, 'a')")
    with pytest.raises(ivm.IntegrityError, match="check constraint"):
        db.execute("INSERT INTO u VALUES (4, 1, 'y')")
    db.execute("INSERT INTO u VALUES (4, 3.5, 'a')")
    assert _rows(db, "SELECT * FROM v") == _rows(db, views["v"])
    assert _rows(db, "SELECT e FROM v WHERE k IN (2, 3, 4)") == [(-0.0,), (2.0,), (4.0,)]
    db.close()
