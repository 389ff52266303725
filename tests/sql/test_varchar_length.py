"""VARCHAR(n) keeps n in its type, as PostgreSQL's typmod does: a column reference, a subquery, a view, GROUP BY
and DISTINCT, and a CASE, COALESCE, GREATEST, LEAST or set operation of VARCHAR(n) values alone are
VARCHAR(n); a string constant, a NULL (but in COALESCE) or a string of another type among them makes VARCHAR
without a length; ``||``, the text functions, NULLIF, MIN and MAX make TEXT; CAST(x AS VARCHAR(n)) cuts to n
characters. CREATE TABLE AS keeps the length, and so its check: a value too long is refused as PostgreSQL
refuses it. Every case runs on a throwaway PostgreSQL and on ivm, and must give the same type names (with the
length) and the same values."""

from __future__ import annotations

import re
import shutil

import pytest

import ivm
from connectors.postgres._types import pg_type
from connectors.postgres.sidecar import _pg_type
from ivm.errors import DataError
from sql.errors import SqlError
from sql.types import TEXT, VARCHAR, from_sqlglot, varchar_type

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE vc (k INTEGER PRIMARY KEY, v VARCHAR(5), w VARCHAR(3), c CHAR(4), t TEXT, u VARCHAR)"
ROWS = [
    (1, "ab", "xy", "cd", "tt", "uu"),
    (2, "abcde", "a ", "a", "a ", "a  "),  # a value of n characters; trailing spaces kept by VARCHAR
    (3, "é€ab ", "é", "é", "é", "é"),  # characters, not bytes
    (4, "", "", "", "", ""),
    (5, None, None, None, None, None),
]

EXPRESSIONS = [
    # the column, and what passes it on unchanged
    "v",
    "w",
    "coalesce(v, v)",
    "coalesce(v, NULL)",
    "coalesce(NULL, v)",
    "CASE WHEN k > 1 THEN v ELSE v END",
    "CASE k WHEN 1 THEN v ELSE v END",
    "greatest(v, v)",
    "least(v, v)",
    # lengths that differ, a constant, a NULL or another string type: VARCHAR without a length
    "coalesce(v, w)",
    "coalesce(w, v)",
    "coalesce(v, 'x')",
    "coalesce('x', v)",
    "coalesce(v, t)",
    "coalesce(v, u)",
    "coalesce(u, v)",
    "coalesce(v, c)",
    "CASE WHEN k > 1 THEN v ELSE w END",
    "CASE WHEN k > 1 THEN v ELSE 'x' END",
    "CASE WHEN k > 1 THEN v END",
    "CASE WHEN k > 1 THEN v ELSE NULL END",
    "CASE WHEN k > 1 THEN 'x' ELSE v END",
    "greatest(v, w)",
    "greatest(v, NULL)",
    "least(v, 'x')",
    "least(v, v, w)",
    # TEXT: concatenation, functions, NULLIF (VARCHAR's equality is TEXT's)
    "v || 'x'",
    "v || w",
    "upper(v)",
    "lower(v)",
    "substr(v, 2)",
    "trim(v)",
    "left(v, 2)",
    "replace(v, 'a', 'b')",
    "lpad(v, 7)",
    "concat(v, '|')",
    "nullif(v, 'x')",
    "nullif(v, w)",
    "nullif(v, t)",
    "nullif('ab', v)",
    "length(v)",
    # CAST: to VARCHAR(n) cuts to n characters (an explicit cast), to VARCHAR or TEXT keeps the value
    "v::varchar(3)",
    "v::varchar(8)",
    "v::varchar(5)",
    "CAST(v AS CHARACTER VARYING(2))",
    "v::varchar",
    "v::text",
    "c::varchar(2)",
    "t::varchar(1)",
    "k::varchar(2)",
    "CAST('abcdefgh' AS VARCHAR(3))",
    "'abc'::varchar(5)",
    "'abc'::varchar",
    "CAST(v AS VARCHAR(3)) || '|'",
    # comparisons of VARCHAR(n) with CHAR and constants, as VARCHAR's
    "v = c",
    "w = 'a'",
    "w = c",
    "v < w",
]

QUERIES = [
    "SELECT v FROM vc UNION SELECT v FROM vc",
    "SELECT v FROM vc UNION ALL SELECT v FROM vc",
    "SELECT v FROM vc UNION SELECT w FROM vc",
    "SELECT v FROM vc UNION ALL SELECT 'x'",
    "SELECT 'x' UNION SELECT v FROM vc",
    "SELECT v FROM vc UNION ALL SELECT NULL",
    "SELECT v FROM vc UNION SELECT u FROM vc",
    "SELECT v FROM vc UNION SELECT c FROM vc",
    "SELECT v FROM vc UNION SELECT t FROM vc",
    "SELECT v FROM vc INTERSECT SELECT v FROM vc",
    "SELECT v FROM vc EXCEPT SELECT w FROM vc",
    "SELECT DISTINCT v FROM vc",
    "SELECT v, count(*) FROM vc GROUP BY v",
    "SELECT w, max(v), min(v), max(u) FROM vc GROUP BY w",
    "WITH q AS (SELECT v FROM vc) SELECT v FROM q",
    "SELECT s.v FROM (SELECT v FROM vc WHERE k < 4) s",
    "SELECT v FROM vc WHERE v IN (SELECT w FROM vc)",
    "SELECT v, w FROM vc ORDER BY k LIMIT 3",
    "SELECT a.v, b.w FROM vc a JOIN vc b ON a.v = b.w",
    "SELECT a.v, b.w FROM vc a LEFT JOIN vc b ON a.k = b.k + 1",
    "WITH RECURSIVE r(x, n) AS (SELECT v, 1 FROM vc UNION ALL SELECT x, n + 1 FROM r WHERE n < 3) "
    "SELECT * FROM r",
]

# a recursive query whose recursive part's strings would take the definition's VARCHAR(n) without its length:
# PostgreSQL refuses it (the non-recursive part's type must be the whole query's), and so does ivm
RECURSIVE_REFUSED = [
    "WITH RECURSIVE r(x, n) AS (SELECT v, 1 FROM vc UNION ALL SELECT x || '', n + 1 FROM r WHERE n < 3) "
    "SELECT count(*) FROM r",
    "WITH RECURSIVE r(x, n) AS (SELECT v, 1 FROM vc UNION ALL SELECT w, n + 1 FROM r, vc WHERE n < 2) "
    "SELECT count(*) FROM r",
]


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres_with

    yield from postgres_with(TABLE, "INSERT INTO vc VALUES (%s, %s, %s, %s, %s, %s)", ROWS)


@pytest.fixture(scope="module")
def db():
    db = ivm.connect()
    db.execute(TABLE)
    db.cursor().executemany("INSERT INTO vc VALUES (?, ?, ?, ?, ?, ?)", ROWS)
    return db


_PG_NAMES = {"int4": "integer", "int8": "bigint", "bool": "boolean"}


def _pg_name(display: str) -> str:
    """PostgreSQL's type name as ivm's: character(n) as char(n), varchar(n) as it is."""
    m = re.fullmatch(r"bpchar\((\d+)\)", display)
    return f"char({m.group(1)})" if m else _PG_NAMES.get(display, display)


def _pg(pg, sql: str):
    cur = pg.execute(sql)
    return [_pg_name(d.type_display) for d in cur.description], cur.fetchall()


def _ivm(db, sql: str):
    cur = db.execute(sql)
    return [d[1].lower() for d in cur.description], cur.fetchall()


def _sorted(answer):
    types, rows = answer
    return types, sorted(rows, key=repr)


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_expressions_as_postgresql(pg, db, expr):
    sql = f"SELECT k, {expr} FROM vc ORDER BY 1"
    assert _ivm(db, sql) == _pg(pg, sql), sql


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_as_postgresql(pg, db, sql):
    assert _sorted(_ivm(db, sql)) == _sorted(_pg(pg, sql)), sql


@pytest.mark.parametrize("sql", RECURSIVE_REFUSED)
def test_a_recursive_part_losing_the_length_is_refused(pg, db, sql):
    with pytest.raises(psycopg.errors.DatatypeMismatch, match=r"character varying\(5\) in non-recursive term"):
        pg.execute(sql)
    with pytest.raises(SqlError, match=r"type VARCHAR\(5\) in its definition"):
        db.execute(sql)


def test_views_keep_the_length(pg, db):
    """A view's columns (as a query of it describes them) and a view read through another."""
    for conn in (db, pg):
        conn.execute("CREATE VIEW lv AS SELECT v, w, v || '' AS t, coalesce(v, w) AS m FROM vc")
    db.execute("CREATE MATERIALIZED VIEW lm AS SELECT v, count(*) AS n FROM vc GROUP BY v")
    pg.execute("CREATE VIEW lm AS SELECT v, count(*) AS n FROM vc GROUP BY v")
    try:
        for q in ["SELECT * FROM lv", "SELECT * FROM lm", "SELECT lv.v, lm.n FROM lv JOIN lm ON lv.v = lm.v"]:
            assert _sorted(_ivm(db, q)) == _sorted(_pg(pg, q)), q
    finally:
        pg.execute("DROP VIEW lv")
        pg.execute("DROP VIEW lm")
        db.execute("DROP VIEW lv")
        db.execute("DROP VIEW lm")


def test_create_table_as_keeps_the_length_and_its_check(pg):
    db = ivm.connect()
    for s in [
        "CREATE TABLE src (k INTEGER, v VARCHAR(5), w VARCHAR(3), u VARCHAR)",
        "INSERT INTO src VALUES (1, 'ab', 'x', 'long text'), (2, NULL, 'yz', NULL)",
        "CREATE TABLE copied AS SELECT k, v, w, u, coalesce(v, w) AS m, v || '' AS t, v::varchar(2) AS c2 "
        "FROM src",
        "CREATE TABLE unioned AS SELECT v FROM src UNION SELECT v FROM src",
        "INSERT INTO copied (k, v, w, c2) VALUES (3, 'abcde', 'abc', 'ab')",
        "INSERT INTO copied (k, v, c2) VALUES (4, 'abc  ', 'a   ')",  # spaces beyond n are cut, as PostgreSQL
    ]:
        db.execute(s)
        pg.execute(s)
    try:
        for t in ("copied", "unioned"):
            q = f"SELECT * FROM {t} ORDER BY 1"
            assert _ivm(db, q) == _pg(pg, q), t
        described = [r[0] for r in db.execute("SELECT * FROM copied").description]
        assert described == ["k", "v", "w", "u", "m", "t", "c2"]
        for s, words in [
            ("INSERT INTO copied (k, v) VALUES (5, 'abcdef')", "value too long for type character varying(5)"),
            ("INSERT INTO copied (k, c2) VALUES (5, 'abc')", "value too long for type character varying(2)"),
            ("INSERT INTO unioned VALUES ('abcdef')", "value too long for type character varying(5)"),
            ("UPDATE copied SET w = w || 'long' WHERE k = 1", "value too long for type character varying(3)"),
        ]:
            with pytest.raises(psycopg.errors.StringDataRightTruncation, match=re.escape(words)):
                pg.execute(s)
            with pytest.raises(DataError, match=re.escape(words)):
                db.execute(s)
        # a column without a length takes any
        for conn in (db, pg):
            conn.execute("INSERT INTO copied (k, m, t, u) VALUES (6, 'abcdefgh', 'abcdefgh', 'abcdefgh')")
        q = "SELECT * FROM copied ORDER BY k"
        assert _ivm(db, q) == _pg(pg, q)
    finally:
        for t in ("src", "copied", "unioned"):
            pg.execute(f"DROP TABLE {t}")


def test_types_in_sql_and_at_the_postgres_boundary():
    """The type itself: parsed, written, and mapped to and from Postgres (a source column varchar(n), a target
    column holding a VARCHAR(n) view column)."""
    import sqlglot.expressions as exp

    v5 = varchar_type(5)
    assert str(v5) == "VARCHAR(5)" and v5.varchar and not v5.pad and v5 != VARCHAR
    assert from_sqlglot(exp.DataType.build("varchar(5)", dialect="postgres")) == v5
    assert from_sqlglot(exp.DataType.build("character varying", dialect="postgres")) == VARCHAR
    assert from_sqlglot(exp.DataType.build(str(v5))) == v5
    assert _pg_type(v5) == "character varying(5)" and _pg_type(VARCHAR) == "character varying"
    assert _pg_type(TEXT) == "text"
    assert pg_type(1043, 5 + 4, "character varying(5)").sql == "VARCHAR(5)"
    assert pg_type(1043, -1, "character varying").sql == "VARCHAR"
    assert pg_type(25, -1, "text").sql == "TEXT"


def test_the_shell_describes_the_length():
    """``\\d`` of a table made by CREATE TABLE AS and of a view over it."""
    import io

    from ivm.cli.session import Session

    db = ivm.connect()
    db.execute("CREATE TABLE s (k INTEGER, v VARCHAR(5))")
    db.execute("CREATE TABLE c AS SELECT k, v, v || '' AS t, coalesce(v, 'x') AS m FROM s")
    db.execute("CREATE VIEW cv AS SELECT v, max(v) AS top FROM c GROUP BY v")
    session = Session(db, out=io.StringIO(), err=io.StringIO())
    table, view = session.describe("c"), session.describe("cv")
    assert re.search(r"\bv\s+\| VARCHAR\(5\)", table) and re.search(r"\bt\s+\| TEXT", table), table
    assert re.search(r"\bm\s+\| VARCHAR\s", table), table
    assert re.search(r"\bv\s+\| VARCHAR\(5\)", view) and re.search(r"\btop\s+\| TEXT", view), view
