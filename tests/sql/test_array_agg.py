"""ARRAY_AGG as the text PostgreSQL writes for the array (ivm has no array type): elements quoted and escaped
as array_out does, NULLs kept, DISTINCT in the values' order, FILTER and ORDER BY, against a real PostgreSQL,
as one-shot queries and as views maintained through inserts, updates and deletes."""

import decimal

import pytest
from psycopg.types.string import TextLoader

import ivm
from tests.oracle import same_rows
from tests.pg import postgres_with

TABLE = (
    "CREATE TABLE a (k INTEGER PRIMARY KEY, g INTEGER, s TEXT, c CHAR(3), n INTEGER, x DOUBLE PRECISION, "
    "d DECIMAL(6,2), b BOOLEAN, day DATE, ts TIMESTAMP)"
)
INSERT = "INSERT INTO a VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
TEXTS = ["plain", "a b", "null", "NULL", "", "{x}", 'q"z', "back\\slash", "tab\there", "é,è", "x\ny", None]
ROWS = [
    (
        i,
        i % 3 if i % 5 else None,
        t,
        (t or "")[:3] if t is not None else None,
        (i * 7) % 12 - 3 if i % 4 else None,
        [1.5, -0.25, None, 10.0, 2.0][i % 5],
        decimal.Decimal(i) / 4,
        [True, False, None][i % 3],
        f"2024-0{1 + i % 9}-1{i % 10}",
        f"2024-01-0{1 + i % 9} 0{i % 10}:30:00" if i % 2 else None,
    )
    for i, t in enumerate(TEXTS)
]
CHANGES = [
    (INSERT,
     (50, 1, "new one", "ab", 9, 0.5, decimal.Decimal("1.25"), True, "2023-12-31", "2023-12-31 23:59:59")),
    ("UPDATE a SET s = %s WHERE k IN (0, 7)", ('"quoted"',)),
    ("UPDATE a SET s = NULL, n = NULL WHERE k = 6", ()),
    ("DELETE FROM a WHERE k IN (2, 3, 10)", ()),
    (INSERT, (51, 7, None, None, None, None, None, None, None, None)),
    ("DELETE FROM a WHERE g = 7", ()),
]  # fmt: skip
QUERIES = [
    "SELECT g, array_agg(s ORDER BY k), array_agg(c ORDER BY k DESC) FROM a GROUP BY g",
    "SELECT g, array_agg(n ORDER BY k), array_agg(DISTINCT n), array_agg(DISTINCT n ORDER BY n DESC) FROM a "
    "GROUP BY g",
    "SELECT g, array_agg(x ORDER BY k), array_agg(DISTINCT x), array_agg(d ORDER BY d NULLS FIRST, k) FROM a "
    "GROUP BY g",
    "SELECT g, array_agg(b ORDER BY k), array_agg(DISTINCT b), array_agg(day ORDER BY k), "
    "array_agg(ts ORDER BY k) FROM a GROUP BY g",
    "SELECT array_agg(s ORDER BY s) FILTER (WHERE n > 0), array_agg(DISTINCT s) FILTER (WHERE b), "
    "array_agg(DISTINCT s), count(*) FROM a",
    "SELECT g, array_agg(k ORDER BY k) FROM a WHERE k > 100 GROUP BY g",  # no rows: no groups
    "SELECT array_agg(k ORDER BY k), array_agg(k ORDER BY k) FILTER (WHERE k < 0) FROM a",  # NULL over no rows
    "SELECT g, array_agg(upper(s) || '!' ORDER BY k) AS e, max(k) FROM a GROUP BY g HAVING count(*) > 1",
]


@pytest.fixture(scope="module")
def pg():
    gen = postgres_with(TABLE, INSERT, ROWS)
    conn = next(gen)
    conn.execute("SET TIME ZONE 'UTC'")
    for name in ("text", "bpchar", "int4", "float8", "numeric", "bool", "date", "timestamp"):
        conn.adapters.register_loader(
            conn.adapters.types[name].array_oid, TextLoader
        )  # arrays as PostgreSQL writes them
    yield conn
    gen.close()


def test_array_agg_answers_as_postgresql_through_changes(pg):
    db = ivm.connect()
    db.execute(TABLE)
    for i, sql in enumerate(QUERIES):
        db.execute(f"CREATE VIEW v{i} AS {sql}")
    db.cursor().executemany(INSERT, ROWS)
    pg.execute("BEGIN")
    try:
        for step, (change, params) in enumerate([(None, ()), *CHANGES]):
            if change is not None:
                db.execute(change, params)
                pg.execute(change, params)
            for i, sql in enumerate(QUERIES):
                want = pg.execute(sql).fetchall()
                got = db.execute(f"SELECT * FROM v{i}").fetchall()
                assert same_rows(got, want), f"{sql}\nafter step {step}: got {got}, want {want}"
                assert same_rows(db.execute(sql).fetchall(), want), sql
    finally:
        pg.execute("ROLLBACK")


def test_distinct_doubles_minus_zero_and_zero_are_one_element():
    db = ivm.connect()
    db.execute("CREATE TABLE z (x DOUBLE PRECISION)")
    db.execute("CREATE VIEW v AS SELECT array_agg(DISTINCT x) AS xs, array_agg(x) AS all_xs FROM z")
    db.execute("INSERT INTO z VALUES ('-0'), (0.0), (1.0)")
    assert db.execute("SELECT xs, all_xs FROM v").fetchall() == [("{0,1}", "{-0,0,1}")]


@pytest.mark.parametrize(
    "sql, words, col",
    [
        ("SELECT array_agg(NULL) FROM a", "ARRAY_AGG of NULL needs a type", 8),
        (
            "SELECT array_agg(DISTINCT s ORDER BY k) FROM a",
            "ORDER BY expressions must appear in argument list",
            38,
        ),
    ],
)
def test_array_agg_refusals_say_what_and_where(sql, words, col):
    db = ivm.connect()
    db.execute(TABLE)
    with pytest.raises(ivm.Error, match=words) as info:
        db.execute(sql)
    assert (info.value.line, info.value.col) == (1, col)
