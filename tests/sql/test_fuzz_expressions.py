"""Generated expressions against a real PostgreSQL (C locale): random typed expressions of integers of every
width, NUMERIC, DOUBLE PRECISION, text, truth values, dates and timestamps (arithmetic, CASE, COALESCE,
GREATEST, casts, rounding, string and date functions), over rows holding the edges of each type (the least and
greatest integers, -0, NaN, 1e300, empty strings, NULLs), each held in a view; then grouped views of them
(COUNT, SUM, AVG, MIN, MAX, DISTINCT, STRING_AGG, BOOL_AND) maintained through updates and deletes. Every view
must hold PostgreSQL's rows, or fail where PostgreSQL fails.

What the README lists as ivm's differences from PostgreSQL is kept out by what the generator writes (no
CBRT, no UPPER/LOWER of non-ASCII letters, no NUMERIC written as text) or allowed by name: an error past the
18 digits or 64 bits ivm holds where PostgreSQL computes NUMERIC; an answer where PostgreSQL has no such
function (MOD and ROUND(x, n) of DOUBLE PRECISION); AVG and NUMERIC division as DOUBLE PRECISION (values
compared to 12 digits). ``IVM_FUZZ_SEED`` and ``IVM_FUZZ_EXPRESSIONS`` widen the search."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import random
import re
import shutil

import pytest

import ivm

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

FIRST_SEED = int(os.environ.get("IVM_FUZZ_SEED", "0"))
EXPRESSIONS = int(os.environ.get("IVM_FUZZ_EXPRESSIONS", "120"))

SCHEMA = (
    "CREATE TABLE t (id INTEGER PRIMARY KEY, i INTEGER, b BIGINT, s SMALLINT, n NUMERIC(12,3), "
    "d DOUBLE PRECISION, x TEXT, v VARCHAR(5), dt DATE, ts TIMESTAMP, bl BOOLEAN)"
)
ROWS = (
    "INSERT INTO t VALUES "
    "(1, 7, 10000000000, 3, 2.5, 2.5, 'abc', 'ab', DATE '2024-02-29', "
    "TIMESTAMP '2024-02-29 13:45:10.25', TRUE), "
    "(2, -7, -3, -3, -2.5, -2.5, ' Ab C ', ' a ', DATE '2023-12-31', TIMESTAMP '2023-12-31 23:59:59', FALSE), "
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(4, 0, 0, 0, 0.000, 0.0, '', '', DATE '2000-01-01', TIMESTAMP '2000-01-01 00:00:00', TRUE), "
    "(5, 2147483647, 9223372036854775807, 32767, 999999999.999, 1e300, 'hello world', 'zz', DATE '1999-01-03', "
    "TIMESTAMP '1999-01-03 06:07:08', NULL), "
    "(6, -2147483648, -9223372036854775808, -32768, -0.5, '-0', 'a%b_c', 'a_b', DATE '2021-01-04', "
    "TIMESTAMP '2021-01-04 12:00:00', FALSE), "
    "(7, 1, 5, 1, 123.456, 'NaN', 'x,y,,z', 'x,y', DATE '2024-12-30', "
    "TIMESTAMP '2024-12-30 00:00:00.5', TRUE), "
    "(8, 2, -5, 2, 0.005, 3.5, '12', '12', DATE '2020-06-15', TIMESTAMP '2020-06-15 18:30:00', TRUE)"
)
UPDATES = [
    "UPDATE t SET i = i - 1 WHERE id IN (1, 8)",
    "UPDATE t SET x = 'zz', v = NULL WHERE id = 2",
    "DELETE FROM t WHERE id = 5",
    "INSERT INTO t SELECT id + 10, i, b, s, n, d, x, v, dt, ts, NOT bl FROM t WHERE id IN (1, 2, 3)",
    "UPDATE t SET bl = NOT bl",
    "UPDATE t SET n = -n, d = -d WHERE id % 2 = 0",
    "UPDATE t SET x = NULL, i = NULL WHERE id = 4",
    "INSERT INTO t VALUES (20, 3, 3, 3, 3.3, 3.3, 'abc', 'abc', DATE '2024-02-29', TIMESTAMP '2024-02-29', "
    "NULL)",
    "DELETE FROM t WHERE bl IS NULL",
]
COLUMNS = {
    "int": ["i", "s", "b"],
    "num": ["n"],
    "dbl": ["d"],
    "text": ["x", "v"],
    "bool": ["bl"],
    "date": ["dt"],
    "ts": ["ts"],
}
CONSTANTS = {
    "int": ["0", "1", "2", "3", "-1", "10", "100", "2147483647"],
    "num": ["0.5", "1.25", "-2.5", "0.001", "10.0"],
    "dbl": ["0.5::float8", "2.5::float8", "-1.5::float8", "1e10::float8"],
    "text": ["'a'", "'b%'", "''", "' x '", "'AB'"],
    "bool": ["TRUE", "FALSE", "NULL::boolean"],
    "date": ["DATE '2024-01-31'", "DATE '2000-02-29'"],
    "ts": ["TIMESTAMP '2024-01-31 12:00:00'"],
}
AGGREGATES = {
    "int": ["sum({})", "min({})", "max({})", "count({})", "count(DISTINCT {})", "avg({})"],
    "num": ["sum({})", "min({})", "max({})", "avg({})", "sum(DISTINCT {})"],
    "dbl": ["min({})", "max({})", "count({})"],
    "text": ["min({})", "max({})", "string_agg({}, ',' ORDER BY {} NULLS FIRST)", "count(DISTINCT {})"],
    "bool": ["bool_and({})", "bool_or({})", "count({})"],
    "date": ["min({})", "max({})"],
    "ts": ["max({})"],
}

# (PostgreSQL's words, ivm's) for the differences allowed above
PAST_IVM_S_DIGITS = ("numeric field overflow", "out of range", "18 digits")
NO_SUCH_FUNCTION = "does not exist"


# the forms of an expression of each kind: ``$`` is an expression of the same kind, ``$int`` (...) of that kind
FORMS = {
    "int": [
        "($ + $)",
        "($ - $)",
        "($ * $)",
        "($ / NULLIF($, 0))",
        "($ % NULLIF($, 0))",
        "abs($)",
        "(-$)",
        "length($text)",
        "strpos($text, 'b')",
        "CAST($num AS INTEGER)",
        "CAST($dbl AS BIGINT)",
        "($date - $date)",
        "sign($)",
        "COALESCE($, $)",
        "CASE WHEN $bool THEN $ ELSE $ END",
        "GREATEST($, $)",
        "LEAST($, $, $)",
        "NULLIF($, $)",
        "mod($, 3)",
        "CAST($text AS INTEGER)",
        "round($, -1)",
        "trunc($, -1)",
    ],
    "num": [
        "($ + $)",
        "($ - $int)",
        "($ * $int)",
        "round($, 1)",
        "trunc($, 2)",
        "abs($)",
        "floor($)",
        "ceil($)",
        "sign($)",
        "($ % 0.7)",
        "CAST($int AS NUMERIC(12,3))",
        "CAST($dbl AS NUMERIC(12,3))",
        "COALESCE($, $int)",
        "CASE WHEN $bool THEN $ END",
        "GREATEST($, $int)",
        "(-$)",
        "round($)",
        "round($int / 7.0, 3)",
    ],
    "dbl": [
        "($ + $)",
        "($ * $)",
        "($ / NULLIF($, 0))",
        "($int / 2.0::float8)",
        "sqrt(abs($))",
        "round($)",
        "floor($)",
        "ceil($)",
        "trunc($)",
        "sign($)",
        "abs($)",
        "CAST($num AS DOUBLE PRECISION)",
        "power($, 2)",
        "CAST($int AS DOUBLE PRECISION)",
        "exp(LEAST($, 5))",
        "ln(abs($) + 1)",
        "GREATEST($, 0)",
        "(-$)",
    ],
    "text": [
        "($ || $)",
        "($ || $int)",
        "upper($)",
        "lower($)",
        "substring($, 2, 3)",
        "left($, -1)",
        "right($, 2)",
        "trim($)",
        "ltrim($, ' a')",
        "replace($, 'a', 'xy')",
        "reverse($)",
        "lpad($, 5, '*')",
        "rpad($, 2)",
        "split_part($, ',', 2)",
        "concat($, $int, $bool)",
        "concat_ws(', ', $, $int, $bool)",
        "repeat($, 2)",
        "CAST($int AS TEXT)",
        "CAST($dbl AS TEXT)",
        "CAST($date AS TEXT)",
        "CAST($ts AS TEXT)",
        "CAST($bool AS TEXT)",
        "COALESCE($, 'z')",
        "NULLIF($, '')",
        "CAST($ AS VARCHAR(3))",
        "to_char($ts, 'YYYY-MM-DD HH24:MI:SS.MS Dy IW')",
        "to_char($date, 'FMMonth DDD Q')",
        "CASE WHEN $bool THEN $ ELSE 'no' END",
    ],
    "bool": [
        "($int < $int)",
        "($num = $int)",
        "($dbl >= $num)",
        "($text < $text)",
        "($text LIKE 'a%')",
        "($text ILIKE '%B%')",
        "($text ~ '^[a-z]')",
        "($ AND $)",
        "($ OR $)",
        "(NOT $)",
        "($int IS NULL)",
        "($int IN (1, 2, NULL))",
        "($int NOT IN (1, 7))",
        "($int BETWEEN -1 AND 5)",
        "($text IS DISTINCT FROM 'a')",
        "($ IS NOT TRUE)",
        "($date < $date)",
        "($ts = $date)",
        "starts_with($text, 'a')",
    ],
    "date": [
        "($ + 366)",
        "($ - 400)",
        "($ + INTERVAL '1 month')::date",
        "CAST($ts AS DATE)",
        "date_trunc('month', $)::date",
        "GREATEST($, DATE '2020-01-01')",
    ],
    "ts": [
        "($ + INTERVAL '1 day 2 hours')",
        "($ - INTERVAL '1 month')",
        "date_trunc('hour', $)",
        "CAST($date AS TIMESTAMP)",
        "($date + INTERVAL '90 minutes')",
    ],
}
SLOT = re.compile(r"\$(int|num|dbl|text|bool|date|ts)?")


class Expressions:
    def __init__(self, r: random.Random) -> None:
        self.r = r

    def of(self, kind: str, depth: int = 0) -> str:
        r = self.r
        if depth > 2 or r.random() < 0.35:
            return r.choice(COLUMNS[kind]) if r.random() < 0.75 else r.choice(CONSTANTS[kind])
        return SLOT.sub(lambda m: self.of(m[1] or kind, depth + 1), r.choice(FORMS[kind]))


def _cell(v):
    if isinstance(v, float):  # (-0.0 as 0: NUMERIC division is a double in ivm, whose zero may be -0)
        return ("number", "nan") if math.isnan(v) else ("number", v + 0.0)
    if isinstance(v, decimal.Decimal) and v.is_nan():
        return ("number", "nan")
    if isinstance(v, (int, decimal.Decimal)) and not isinstance(v, bool):
        return ("number", int(v)) if v == int(v) and abs(v) >= 2**53 else ("number", float(v))
    if isinstance(v, dt.timedelta):
        return ("interval", v.total_seconds())
    return (type(v).__name__, v)


def _same(a, b) -> bool:
    if a == b:
        return True
    if a[0] == b[0] == "number" and "nan" not in (a[1], b[1]):
        return math.isclose(float(a[1]), float(b[1]), rel_tol=1e-12, abs_tol=1e-300)
    return False


def _rows_equal(want: list, got: list) -> bool:
    return len(want) == len(got) and all(
        len(w) == len(g) and all(_same(x, y) for x, y in zip(w, g, strict=True))
        for w, g in zip(want, got, strict=True)
    )


def _rows(rows) -> list:
    return sorted((tuple(_cell(v) for v in r) for r in rows), key=repr)


def _allowed(pg_error: str | None, ivm_error: str | None) -> bool:
    """Whether the one side failing is a difference the README lists."""
    if ivm_error is not None and pg_error is None:
        return any(w in ivm_error for w in PAST_IVM_S_DIGITS)
    return ivm_error is None and pg_error is not None and NO_SUCH_FUNCTION in pg_error


@pytest.fixture(scope="module")
def pg():
    from connectors.postgres.cluster import LocalCluster

    with LocalCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE c TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
        with psycopg.connect(cluster.dsn.replace("dbname=postgres", "dbname=c"), autocommit=True) as conn:
            conn.execute("SET TimeZone = 'UTC'")
            yield conn


def _fresh(pg):
    pg.execute("DROP TABLE IF EXISTS t")
    pg.execute(SCHEMA)
    pg.execute(ROWS)
    db = ivm.connect()
    db.execute(SCHEMA)
    db.execute(ROWS)
    return db


def _pg_rows(pg, sql: str):
    try:
        return _rows(pg.execute(sql).fetchall()), None
    except psycopg.Error as err:
        return None, str(err).splitlines()[0]


def _ivm_rows(db, sql: str):
    try:
        return _rows(db.execute(sql).fetchall()), None
    except ivm.Error as err:
        return None, str(err).splitlines()[0]


@pytest.mark.parametrize("seed", [FIRST_SEED, FIRST_SEED + 1])
def test_generated_expressions_as_views_equal_postgresql(pg, seed):
    r = random.Random(seed)
    gen = Expressions(r)
    db = _fresh(pg)
    for k in range(EXPRESSIONS):
        sql = f"SELECT id, {gen.of(r.choice(list(COLUMNS)))} AS v FROM t"
        want, pg_error = _pg_rows(pg, sql)
        try:
            db.execute(f"CREATE VIEW v{k} AS {sql}")
            got, ivm_error = _ivm_rows(db, f"SELECT * FROM v{k}")
        except ivm.NotSupportedError:
            continue
        except ivm.Error as err:
            got, ivm_error = None, str(err).splitlines()[0]
        if pg_error or ivm_error:
            assert (pg_error and ivm_error) or _allowed(pg_error, ivm_error), (sql, pg_error, ivm_error)
            continue
        assert _rows_equal(want, got), (sql, want, got)


@pytest.mark.parametrize("seed", [FIRST_SEED])
def test_generated_grouped_views_through_changes_equal_postgresql(pg, seed):
    r = random.Random(seed)
    gen = Expressions(r)
    for _ in range(max(EXPRESSIONS // 8, 1)):
        db = _fresh(pg)
        key = gen.of(r.choice(["int", "text", "bool", "date"]))
        items = []
        for j in range(r.randint(1, 3)):
            kind = r.choice(list(AGGREGATES))
            e = gen.of(kind)
            items.append(r.choice(AGGREGATES[kind]).format(e, e) + f" AS a{j}")
        sql = f"SELECT {key} AS k, {', '.join(items)} FROM t GROUP BY 1"
        try:
            db.execute(f"CREATE VIEW v AS {sql}")
        except ivm.NotSupportedError:
            continue
        except ivm.Error as err:
            _, pg_error = _pg_rows(pg, sql)
            assert pg_error is not None or _allowed(None, str(err)), (sql, err)
            continue
        for step in r.sample(UPDATES, 5):
            pg.execute(step)
            db.execute(step)
            want, pg_error = _pg_rows(pg, sql)
            got, ivm_error = _ivm_rows(db, "SELECT * FROM v")
            if pg_error or ivm_error:
                why = (sql, step, pg_error, ivm_error)
                assert (pg_error and ivm_error) or _allowed(pg_error, ivm_error), why
                continue
            assert _rows_equal(want, got), (sql, step, want, got)
