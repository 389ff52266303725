"""CHAR(n) values as PostgreSQL shows and uses them: padded to n with spaces in every result and where LIKE or
CONCAT reads them, without their trailing spaces everywhere else (comparisons, grouping, joins, keys, LENGTH,
``||``, conversion to TEXT or VARCHAR), and typed as PostgreSQL types them (``character(n)``, or ``character``
without a length). Every case runs on a throwaway PostgreSQL and on ivm and must give the same type names and
the same values; where PostgreSQL's answer is a ``character`` without a length whose values keep their own
trailing spaces, ivm refuses the construct by name instead (see ``sql.chars``)."""

from __future__ import annotations

import doctest
import re
import shutil

import pytest

import ivm
import sql.chars
from ivm.errors import DataError, IntegrityError, NotSupportedError

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE ch (k INTEGER PRIMARY KEY, c5 CHAR(5), c3 CHAR(3), v VARCHAR(10), x TEXT)"
ROWS = [
    (1, "ab", "ab", "ab", "ab"),
    (2, "ab   ", "ab ", "ab ", "ab "),  # trailing spaces: dropped by CHAR, kept by VARCHAR and TEXT
    (3, "a\tb", "é", "é  ", "\t"),  # a tab sorts before a space; a character of two bytes
    (4, "", "", "", ""),
    (5, None, None, None, None),
    (6, "xyzzy", "q", "Q", "xyzzy"),
    (7, " lead", "b c", " lead", " lead "),
]

EXPRESSIONS = [
    # columns, and LIKE on the padded value
    "c5",
    "c3",
    "c5 LIKE 'ab'",
    "c5 LIKE 'ab%'",
    "c5 LIKE 'ab   '",
    "c5 LIKE '%b'",
    "c5 ILIKE 'AB   '",
    "c5 NOT LIKE 'ab'",
    "c3 LIKE '_ _'",
    "c5 LIKE '%\t%'",
    # conversions and functions read the value without its padding; CONCAT writes it padded
    "'[' || c5 || ']'",
    "c5 || c3",
    "c5 || 1",
    "length(c5)",
    "length(c3)",
    "upper(c5)",
    "lower(c3)",
    "substr(c5, 2)",
    "position(' ' IN c5)",
    "trim(c5)",
    "replace(c5, 'b', 'c')",
    "reverse(c5)",
    "left(c5, 4)",
    "right(c5, 4)",
    "lpad(c5, 7)",
    "rpad(c5, 7, '*')",
    "split_part(c5, 'b', 2)",
    "starts_with(c5, 'ab ')",
    "concat(c5, '|')",
    "concat(c5, c3, x)",
    "c5::varchar(10) || ']'",
    "CAST(c5 AS TEXT)",
    "CAST(c5 AS VARCHAR)",
    "c5::varchar(3)",
    "c5::char(3)",
    "c5::char(8)",
    "c5::bpchar",
    "CAST(x AS CHAR(4))",
    "CAST(v AS CHAR(2))",
    "'ab'::char(5)",
    "CAST(k AS CHAR(3))",
    "'ab'::char(5)::varchar(10) || ']'",
    # comparisons: without trailing spaces, except CHAR with TEXT (as text)
    "c5 = 'ab'",
    "c5 = 'ab   '",
    "c5 = 'ab '",
    "c5 < 'ab!'",
    "c5 > c3",
    "c5 = c3",
    "c5 = v",
    "v = c5",
    "c5 = x",
    "x = c5",
    "c3 < v",
    "c5 = 'ab '::text",
    "c5 = 'ab '::varchar",
    "'ab'::char(5) = 'ab'::char(3)",
    "'ab'::char(5) = 'ab '::text",
    "'ab'::char(5) = 'ab'::varchar",
    "c5 IN ('ab', 'q ')",
    "c5 IN (v, x)",
    "c5 BETWEEN 'a' AND 'ab '",
    "CASE c5 WHEN 'ab ' THEN 1 ELSE 0 END",
    "c5 IS NOT DISTINCT FROM c3",
    # the same CHAR(n) passes through with its type; a NULL loses the length, not the padding
    "coalesce(c5, c5)",
    "coalesce(c5, NULL)",
    "coalesce(NULL, c5)",
    "greatest(c5, c5)",
    "least(c5, c5)",
    "least(c5, NULL)",
    "nullif(c5, 'x')",
    "nullif(c5, 'ab ')",
    "nullif(c5, c3)",
    "nullif(c5, v)",
    "nullif(c5, x)",
    "nullif(x, c5)",
    "CASE WHEN k > 1 THEN c5 ELSE c5 END",
    "CASE WHEN k > 1 THEN c5 END",
    "CASE WHEN k > 1 THEN c5 ELSE NULL END",
    # TEXT or VARCHAR resolved first: that type, CHAR values stripped
    "coalesce(x, c5)",
    "coalesce(v, c5, 'z')",
    "greatest(x, c5)",
    "CASE WHEN k > 1 THEN c5 ELSE x END",
    "CASE WHEN k > 1 THEN c5 ELSE v END",
]

QUERIES = [
    "SELECT c5, count(*) FROM ch GROUP BY c5",
    "SELECT c3, max(c5), min(c5), count(c5), count(DISTINCT c5) FROM ch GROUP BY c3",
    "SELECT DISTINCT c5 FROM ch",
    "SELECT c5 FROM ch UNION SELECT c5 FROM ch",
    "SELECT c5 FROM ch UNION ALL SELECT c5 FROM ch",
    "SELECT c5 FROM ch EXCEPT SELECT c5 FROM ch WHERE k > 3",
    "SELECT c3 FROM ch INTERSECT ALL SELECT c3 FROM ch WHERE k < 4",
    "SELECT x FROM ch UNION SELECT c5 FROM ch",
    "SELECT v FROM ch UNION ALL SELECT c5 FROM ch",
    "SELECT c5 FROM ch UNION ALL SELECT NULL",
    "SELECT s.c FROM (SELECT c5 AS c FROM ch) s",
    "WITH w AS (SELECT c5, c3 FROM ch) SELECT * FROM w",
    "SELECT a.k, a.c5, b.k, b.c3 FROM ch a LEFT JOIN ch b ON a.c5 = b.c3",
    "SELECT a.k, b.k FROM ch a JOIN ch b ON a.c5 = b.v",
    "SELECT a.k, b.k FROM ch a JOIN ch b ON a.c3 = b.x",
    "SELECT a.k FROM ch a WHERE EXISTS (SELECT 1 FROM ch b WHERE b.v = a.c5 AND b.k <> a.k)",
    "SELECT c5, c3 FROM ch ORDER BY c5, k LIMIT 4",
    "SELECT max(c5) FROM ch",
]

REFUSED = [
    ("SELECT coalesce(c5, 'x') FROM ch", "COALESCE of CHAR(5) and a string constant"),
    ("SELECT CASE WHEN k > 1 THEN c5 ELSE 'x' END FROM ch", "CASE of CHAR(5) and a string constant"),
    ("SELECT coalesce(c5, c3) FROM ch", "COALESCE of CHAR(5) and CHAR(3)"),
    ("SELECT coalesce(c5, x) FROM ch", "COALESCE of CHAR(5) and TEXT"),
    ("SELECT coalesce(c5, v) FROM ch", "COALESCE of CHAR(5) and VARCHAR"),
    ("SELECT greatest(c5, 'a') FROM ch", "GREATEST of CHAR(5) and a string constant"),
    ("SELECT CASE WHEN k > 1 THEN x ELSE c5 END FROM ch", "CASE of CHAR(5) and TEXT"),
    ("SELECT c5 FROM ch UNION SELECT c3 FROM ch", "UNION of CHAR(5) and CHAR(3)"),
    ("SELECT c5 FROM ch UNION ALL SELECT x FROM ch", "UNION of CHAR(5) and TEXT"),
    ("SELECT c5 FROM ch UNION SELECT 'x'", "UNION of CHAR(5) and a string constant"),
    ("SELECT 'x' UNION SELECT c5 FROM ch", "UNION of CHAR(5) and a string constant"),
    (
        "(SELECT 'x' FROM ch ORDER BY k LIMIT 1) UNION SELECT c5 FROM ch",
        "UNION of CHAR(5) and a string constant",
    ),
    ("SELECT nullif(v, c5) FROM ch", "NULLIF of CHAR(5) and VARCHAR"),
    ("SELECT CAST(x AS bpchar) FROM ch", "CAST of TEXT to bpchar"),
]


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres_with

    yield from postgres_with(TABLE, "INSERT INTO ch VALUES (%s, %s, %s, %s, %s)", ROWS)


@pytest.fixture(scope="module")
def db():
    db = ivm.connect()
    db.execute(TABLE)
    db.cursor().executemany("INSERT INTO ch VALUES (?, ?, ?, ?, ?)", ROWS)
    return db


_PG_NAMES = {"int4": "integer", "int8": "bigint", "bool": "boolean", "text": "text", "bpchar": "bpchar"}


def _pg_type(display: str) -> str:
    """PostgreSQL's type name as ivm's: character(n) as char(n)."""
    m = re.fullmatch(r"bpchar\((\d+)\)", display)
    return f"char({m.group(1)})" if m else _PG_NAMES.get(display, display)


def _pg(pg, sql: str):
    cur = pg.execute(sql)
    return [_pg_type(d.type_display) for d in cur.description], cur.fetchall()


def _ivm(db, sql: str):
    cur = db.execute(sql)
    return [d[1].lower() for d in cur.description], cur.fetchall()


def _sorted(answer):
    types, rows = answer
    return types, sorted(rows, key=repr)


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_expressions_as_postgresql(pg, db, expr):
    sql = f"SELECT k, {expr} FROM ch ORDER BY 1"
    assert _ivm(db, sql) == _pg(pg, sql), sql


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_as_postgresql(pg, db, sql):
    got, want = _ivm(db, sql), _pg(pg, sql)
    if "ORDER BY" not in sql:
        got, want = _sorted(got), _sorted(want)
    assert got == want, sql


@pytest.mark.parametrize(("sql", "words"), REFUSED)
def test_a_character_without_a_length_keeping_its_own_spaces_is_refused_by_name(pg, db, sql, words):
    cur = pg.execute(sql)
    assert cur.description[0].type_display == "bpchar"  # PostgreSQL's answer: values keep their own spaces
    with pytest.raises(NotSupportedError, match=re.escape(words)) as info:
        db.execute(sql)
    assert "CAST" in str(info.value) and info.value.line == 1


def test_output_is_padded_everywhere_results_leave(db):
    """fetchall, fetch_arrow (cursor and connection), a view read, a subscription and lookup_arrow."""
    want = [(1, "ab   "), (3, "a\tb  "), (4, "     "), (5, None)]
    sql = "SELECT k, c5 FROM ch WHERE k IN (1, 3, 4, 5) ORDER BY k"
    assert db.cursor().execute(sql).fetchall() == want
    assert db.execute(sql).fetchall() == want
    assert db.cursor().execute(sql).fetch_arrow().column("c5").to_pylist() == [w[1] for w in want]
    assert db.execute(sql).fetch_arrow().column("c5").to_pylist() == [w[1] for w in want]
    import pyarrow as pa

    found = db.lookup_arrow("ch", pa.table({"k": pa.array([1, 4], pa.int32())}))
    assert sorted(found.column("c3").to_pylist()) == ["   ", "ab "]
    db.execute("CREATE VIEW padded AS SELECT k, c3 FROM ch WHERE k < 3")
    assert sorted(db.execute("SELECT * FROM padded").fetchall()) == [(1, "ab "), (2, "ab ")]
    sub = db.subscribe("padded")
    batch = next(iter(sub))
    assert sorted(batch.column(1).to_pylist()) == ["ab ", "ab "]
    db.execute("DROP VIEW padded")


def test_many_rows_are_padded_whether_their_values_repeat_or_not(pg):
    """Padding per distinct value (values that repeat) and per row (values that do not) agree with
    PostgreSQL, through fetchall and fetch_arrow, NULLs kept."""
    ddl = "CREATE TABLE many (k INTEGER PRIMARY KEY, few CHAR(6), each CHAR(9))"
    rows = [(i, None if i % 7 == 0 else ["a", "bb ", "", "é", "ccc"][i % 5], f"v{i}") for i in range(500)]
    db = ivm.connect()
    pg.execute("DROP TABLE IF EXISTS many")
    for conn in (db, pg):
        conn.execute(ddl)
    db.cursor().executemany("INSERT INTO many VALUES (?, ?, ?)", rows)
    with pg.cursor() as cur:
        cur.executemany("INSERT INTO many VALUES (%s, %s, %s)", rows)
    sql = "SELECT * FROM many ORDER BY k"
    want = pg.execute(sql).fetchall()
    assert db.execute(sql).fetchall() == want
    assert [tuple(r.values()) for r in db.execute(sql).fetch_arrow().to_pylist()] == want


def test_a_char_primary_key_and_a_join_on_it(pg):
    ddl = [
        "CREATE TABLE p (code CHAR(4) PRIMARY KEY, name TEXT)",
        "CREATE TABLE o (id INTEGER PRIMARY KEY, code CHAR(4), note VARCHAR(8))",
    ]
    steps = [
        "INSERT INTO p VALUES ('ab', 'first'), ('cd  ', 'second'), ('e', 'third')",
        "INSERT INTO o VALUES (1, 'ab  ', 'ab '), (2, 'cd', 'x'), (3, 'zz', 'cd'), (4, NULL, NULL)",
        "UPDATE o SET code = 'e ' WHERE id = 3",
        "DELETE FROM p WHERE code = 'ab  '",
        "INSERT INTO p VALUES ('ab   ', 'again')",
    ]
    queries = [
        "SELECT o.id, p.code, p.name FROM o JOIN p ON o.code = p.code",
        "SELECT o.id, p.code FROM o LEFT JOIN p ON p.code = o.note",
        "SELECT code, name FROM p",
    ]
    db = ivm.connect()
    for s in ["DROP TABLE IF EXISTS o", "DROP TABLE IF EXISTS p"]:
        pg.execute(s)
    for s in ddl:
        db.execute(s)
        pg.execute(s)
    for i, q in enumerate(queries):
        db.execute(f"CREATE VIEW j{i} AS {q}")
    for s in steps:
        db.execute(s)
        pg.execute(s)
        for i, q in enumerate(queries):
            assert _sorted(_ivm(db, f"SELECT * FROM j{i}")) == _sorted(_pg(pg, q)), (s, q)
    # the key is the value without its padding, in both
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg.execute("INSERT INTO p VALUES ('cd', 'dup')")
    with pytest.raises(IntegrityError, match="primary key"):
        db.execute("INSERT INTO p VALUES ('cd', 'dup')")


def test_a_view_over_a_char_column_through_inserts_deletes_and_updates(pg):
    ddl = "CREATE TABLE g (id INTEGER PRIMARY KEY, tag CHAR(6), qty INTEGER)"
    queries = [
        "SELECT tag, count(*) AS n, sum(qty) AS total, max(tag) AS top FROM g GROUP BY tag",
        "SELECT id, tag FROM g WHERE tag LIKE '% ' AND tag <> 'zz'",
        "SELECT DISTINCT tag, length(tag) AS len, tag || '|' AS joined, concat(tag, '|') AS written FROM g",
    ]
    steps = [
        "INSERT INTO g VALUES (1, 'red', 1), (2, 'red  ', 2), (3, 'blue', 3), (4, 'zz', 4), (5, NULL, 5)",
        "INSERT INTO g VALUES (6, 'orange', 6), (7, 'blue ', 7)",
        "DELETE FROM g WHERE tag = 'red '",
        "UPDATE g SET tag = 'red' WHERE id = 3",
        "UPDATE g SET tag = 'violet', qty = qty + 1 WHERE tag = 'blue'",
        "DELETE FROM g WHERE id IN (4, 6)",
    ]
    db = ivm.connect()
    pg.execute("DROP TABLE IF EXISTS g")
    db.execute(ddl)
    pg.execute(ddl)
    for i, q in enumerate(queries):
        db.execute(f"CREATE MATERIALIZED VIEW gv{i} AS {q}")
    for s in steps:
        db.execute(s)
        pg.execute(s)
        for i, q in enumerate(queries):
            assert _sorted(_ivm(db, f"SELECT * FROM gv{i}")) == _sorted(_pg(pg, q)), (s, q)


def test_insert_select_from_char5_into_char3_varchar_and_text(pg):
    ddl = [
        "CREATE TABLE s5 (k INTEGER PRIMARY KEY, c CHAR(5))",
        "CREATE TABLE d3 (k INTEGER, c CHAR(3))",
        "CREATE TABLE dv (k INTEGER, v VARCHAR(3))",
        "CREATE TABLE dt (k INTEGER, t TEXT)",
    ]
    db = ivm.connect()
    for s in ["DROP TABLE IF EXISTS s5", "DROP TABLE IF EXISTS d3", "DROP TABLE IF EXISTS dv"]:
        pg.execute(s)
    pg.execute("DROP TABLE IF EXISTS dt")
    for s in [*ddl, "INSERT INTO s5 VALUES (1, 'ab'), (2, 'abc  '), (3, 'abcd'), (4, NULL), (5, '')"]:
        db.execute(s)
        pg.execute(s)
    for s in [
        "INSERT INTO d3 SELECT k, c FROM s5 WHERE k <> 3",
        "INSERT INTO dv SELECT k, c FROM s5 WHERE k <> 3",
        "INSERT INTO dt SELECT k, c FROM s5",
        "UPDATE d3 SET c = 'xyz  ' WHERE k = 1",
    ]:
        db.execute(s)
        pg.execute(s)
    for t in ("d3", "dv", "dt"):
        sql = f"SELECT * FROM {t} ORDER BY k"
        assert _ivm(db, sql) == _pg(pg, sql), t
    # a value with more than the target's length beyond its trailing spaces is refused, as PostgreSQL does
    for s, words in [
        ("INSERT INTO d3 SELECT k, c FROM s5 WHERE k = 3", "value too long for type character(3)"),
        ("INSERT INTO dv SELECT k, c FROM s5 WHERE k = 3", "value too long for type character varying(3)"),
    ]:
        with pytest.raises(psycopg.errors.StringDataRightTruncation, match=re.escape(words)):
            pg.execute(s)
        with pytest.raises(DataError, match=re.escape(words)):
            db.execute(s)


def test_create_table_as_keeps_char_n_with_its_length(pg):
    db = ivm.connect()
    pg.execute("DROP TABLE IF EXISTS src")
    pg.execute("DROP TABLE IF EXISTS copied")
    for s in [
        "CREATE TABLE src (k INTEGER, c CHAR(4))",
        "INSERT INTO src VALUES (1, 'ab'), (2, NULL)",
        "CREATE TABLE copied AS SELECT k, c FROM src",
        "INSERT INTO copied VALUES (3, 'xy  ')",
    ]:
        db.execute(s)
        pg.execute(s)
    assert _ivm(db, "SELECT * FROM copied ORDER BY k") == _pg(pg, "SELECT * FROM copied ORDER BY k")
    with pytest.raises(DataError, match=re.escape("value too long for type character(4)")):
        db.execute("INSERT INTO copied VALUES (4, 'abcde')")
    # MAX of CHAR(n) is a character without a length in PostgreSQL: such a column is refused
    with pytest.raises(NotSupportedError, match="bpchar"):
        db.execute("CREATE TABLE top AS SELECT max(c) AS m FROM src")


def test_copy_from_into_a_char_column_reads_back_padded(pg, tmp_path):
    ddl = "CREATE TABLE cp (k INTEGER, c CHAR(4), v VARCHAR(4))"
    data = b'1,ab,ab \n2,"ab  ","ab  "\n3,,\n4,"",""\n'
    db = ivm.connect()
    pg.execute("DROP TABLE IF EXISTS cp")
    db.execute(ddl)
    pg.execute(ddl)
    path = tmp_path / "cp.csv"
    path.write_bytes(data)
    db.execute(f"COPY cp FROM '{path}' WITH (FORMAT csv)")
    with pg.cursor().copy("COPY cp FROM STDIN WITH (FORMAT csv)") as cp:
        cp.write(data)
    sql = "SELECT k, c, v, c = v, c LIKE '__  ' FROM cp ORDER BY k"
    assert _ivm(db, sql) == _pg(pg, sql)
    # COPY TO is not supported: no result leaves through it unpadded
    with pytest.raises(NotSupportedError, match="COPY ... TO"):
        db.execute(f"COPY cp TO '{tmp_path / 'out.csv'}'")


def test_the_rules_module_examples_run():
    result = doctest.testmod(sql.chars)
    assert result.attempted > 0 and result.failed == 0
