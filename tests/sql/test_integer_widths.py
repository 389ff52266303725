"""SMALLINT, INTEGER and BIGINT are computed in their own widths, as PostgreSQL computes them: the result type
of each operator and function, and where a result leaves its width, an error instead of a wider value. Every
case is run on a throwaway PostgreSQL and on ivm, row by row, and must give the same type and the same value
or the same error."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

import ivm
from ivm.errors import DataError

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE w (k INTEGER PRIMARY KEY, s SMALLINT, i INTEGER, b BIGINT)"
ROWS = [
    (1, 32767, 2147483647, 9223372036854775807),
    (2, -32768, -2147483648, -9223372036854775808),
    (3, 1, 1, 1),
    (4, -1, -1, -1),
    (5, 0, 0, 0),
    (6, None, None, None),
    (7, 200, 50000, 3037000500),
    (8, 182, 46341, 4294967296),
]

EXPRESSIONS = [
    "s + s",
    "s + 1",
    "s - s",
    "s * s",
    "s * 200",
    "-s",
    "abs(s)",
    "s / -1",
    "s % -1",
    "s + i",
    "i + i",
    "i + 1",
    "i - 1",
    "1 - i",
    "i * 2",
    "i * i",
    "-i",
    "abs(i)",
    "i / -1",
    "i % -1",
    "i / 2",
    "i + b",
    "b + 1",
    "b * 2",
    "10 - b",
    "0 - b",
    "-1 - b",
    "-2 - b",
    "b - -1",
    "i - b",
    "b * 1",
    "b * -1",
    "-1 * b",
    "b * b",
    "b / -1",
    "b % -1",
    "mod(b, -1)",
    "(b / 2) * 2",
    "(b / 2) * -2",
    "(b / 4 + 1) * -4",
    "i * b",
    "-b",
    "CAST(b AS INTEGER)",
    "CAST(b AS SMALLINT)",
    "CAST(i AS SMALLINT) + s",
    "CAST(s AS BIGINT) * s",
    "CAST(i AS BIGINT) + 1",
    "i::bigint * i",
    "CASE WHEN k > 3 THEN s ELSE i END + 1",
    "COALESCE(s, i) + 1",
    "GREATEST(s, i) * 2",
    "LEAST(s, b) - 1",
    "NULLIF(i, 0) + 1",
    "length('abc') + i",
    "s + 2147483647",
    "2147483647 + 1",
    "100000 * 100000",
    "2147483648 + i",
    "3000000000 * 4",
    "32767::smallint + 1::smallint",
    "DATE '2024-01-01' - DATE '2023-01-01' + i",
]

AGGREGATES = [
    "sum(s)",
    "sum(i)",
    "sum(s) * 2",
    "min(i) - 1",
    "max(s) + max(s)",
    "max(i) + 1",
    "count(*) + i",
]


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres_with

    yield from postgres_with(TABLE, "INSERT INTO w VALUES (%s, %s, %s, %s)", ROWS)


@pytest.fixture(scope="module")
def db():
    db = ivm.connect()
    db.execute(TABLE)
    db.cursor().executemany("INSERT INTO w VALUES (?, ?, ?, ?)", ROWS)
    return db


_NAMES = {"int2": "smallint", "int4": "integer", "int8": "bigint"}


def _pg(pg, sql: str):
    """PostgreSQL's answer: (type, rows) or the error's message."""
    try:
        cur = pg.execute(sql)
        return _NAMES.get(cur.description[0].type_display), cur.fetchall()
    except psycopg.errors.NumericValueOutOfRange as err:
        return str(err).strip()


def _ivm(db, sql: str):
    try:
        cur = db.execute(sql)
        return cur.description[0][1].lower(), cur.fetchall()
    except DataError as err:
        return str(err).split(" (line")[0]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_arithmetic_in_each_width_as_postgresql(pg, db, expr):
    for k, *_ in ROWS:
        sql = f"SELECT {expr} FROM w WHERE k = {k}"
        got, want = _ivm(db, sql), _pg(pg, sql)
        if isinstance(want, str) and isinstance(got, str):  # ivm may name the value after the message
            got = got[: len(want)]
        assert got == want, (sql, ROWS[k - 1])


@pytest.mark.parametrize("expr", AGGREGATES)
def test_aggregates_in_each_width_as_postgresql(pg, db, expr):
    for where in ("k IN (3, 4, 5, 6)", "k IN (1, 7, 8)", "k = 2", "TRUE"):
        group = " GROUP BY i" if "+ i" in expr else ""
        sql = f"SELECT {expr} FROM w WHERE {where}{group}"
        got, want = _ivm(db, sql), _pg(pg, sql)
        if isinstance(want, tuple):  # no ORDER BY: the rows in any order
            got, want = (got[0], sorted(got[1], key=repr)), (want[0], sorted(want[1], key=repr))
        assert got == want, sql


def test_a_view_whose_integer_result_leaves_its_width_is_in_error_until_the_row_leaves():
    db = ivm.connect()
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, i INTEGER)")
    db.execute("CREATE VIEW v AS SELECT k, i + 1 AS j FROM t")
    db.execute("CREATE VIEW total AS SELECT sum(i) AS s FROM t")
    db.execute("INSERT INTO t VALUES (1, 1), (2, 2147483647)")
    with pytest.raises(ivm.Error, match="view 'v' is in error.*integer out of range"):
        db.execute("SELECT * FROM v")
    assert db.execute("SELECT * FROM total").fetchall() == [(2147483648,)]  # SUM of INTEGER is BIGINT
    db.execute("UPDATE t SET i = 2147483646 WHERE k = 2")
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [(1, 2), (2, 2147483647)]
    db.execute("INSERT INTO t VALUES (3, 2147483647)")
    with pytest.raises(ivm.Error, match="integer out of range"):
        db.execute("SELECT * FROM v")
    db.execute("DELETE FROM t WHERE k = 3")
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [(1, 2), (2, 2147483647)]


def test_a_recursive_view_counts_in_integer_width():
    db = ivm.connect()
    db.execute("CREATE TABLE lim (n INTEGER)")
    db.execute(
        "CREATE VIEW r AS WITH RECURSIVE c(x) AS (SELECT 2147483640 UNION ALL "
        "SELECT x + 1 FROM c, lim WHERE x <= lim.n) SELECT max(x) AS top FROM c"
    )
    db.execute("INSERT INTO lim VALUES (2147483645)")
    assert db.execute("SELECT * FROM r").fetchall() == [(2147483646,)]
    db.execute("UPDATE lim SET n = 2147483647")  # the step after the greatest INTEGER fails
    with pytest.raises(ivm.Error, match="view 'r' is in error.*integer out of range"):
        db.execute("SELECT * FROM r")
    db.execute("UPDATE lim SET n = 2147483646")
    assert db.execute("SELECT * FROM r").fetchall() == [(2147483647,)]


def test_results_in_arrow_keep_each_width(db):
    got = db.execute("SELECT s, i, b, i + 1, sum(i) FROM w WHERE k = 3 GROUP BY s, i, b").fetch_arrow()
    assert got.schema.types == [pa.int16(), pa.int32(), pa.int64(), pa.int32(), pa.int64()]
    assert got.to_pylist() == [{"s": 1, "i": 1, "b": 1, "_col_3": 2, "_col_4": 1}]
