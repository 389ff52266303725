"""The allow-list (``sql.allow``): every sqlglot node type it lets through has its semantics tested here
against DuckDB (or, for what DuckDB does differently, in the test named beside it), and every other node type
is refused by name, in SQL's words."""

import inspect
import re

import duckdb
import pytest
import sqlglot
from sqlglot import exp

import ivm
from ivm.errors import NotSupportedError
from sql.allow import ALLOWED, check, sql_name
from tests.oracle import same_rows

TABLES = [
    "CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER, s TEXT, d DECIMAL(10,2), f DOUBLE, day DATE, "
    "ts TIMESTAMP, b BOOLEAN)",
    "CREATE TABLE u (k INTEGER, v TEXT NOT NULL)",
]
ROWS = [
    "INSERT INTO t VALUES (1, 1, 'apple', 1.50, 0.5, DATE '2024-01-31', TIMESTAMP '2024-01-31 10:20:30', TRUE)",
    "INSERT INTO t VALUES (2, 1, 'Banana', -2.25, NULL, DATE '2023-12-01', NULL, FALSE)",
    "INSERT INTO t VALUES (3, 2, NULL, NULL, 2.0, NULL, TIMESTAMP '2020-02-29 00:00:00', NULL)",
    "INSERT INTO t VALUES (4, NULL, 'cherry pie', 10.00, -1.0, DATE '2024-02-29', NULL, TRUE)",
    "INSERT INTO u VALUES (1, 'one'), (1, 'uno'), (2, 'two'), (NULL, 'none')",
]

# queries whose answers DuckDB gives as PostgreSQL does; each runs as a view and as a query
QUERIES = [
    "SELECT id, g + 1, g - id, g * 2, -g, id % 3, d / 2, f / 2 FROM t",
    "SELECT id FROM t WHERE g = 1 AND id <> 2 OR g > 1 AND NOT (g >= 3) OR g < 0 OR g <= -1",
    "SELECT id, (g IS NULL), (b IS TRUE), (g IS NOT DISTINCT FROM 1), (g IS DISTINCT FROM 1) FROM t",
    "SELECT id FROM t WHERE id BETWEEN 2 AND 3 OR id NOT BETWEEN 1 AND 3",
    "SELECT id FROM t WHERE g IN (1, 3) OR id NOT IN (1, 2, 3)",
    "SELECT id FROM t WHERE s LIKE 'a%' OR s NOT LIKE '%e%' OR s ILIKE 'BAN%'",
    "SELECT id, CASE WHEN g = 1 THEN 'one' WHEN g IS NULL THEN 'none' ELSE 'many' END, "
    "CASE g WHEN 2 THEN 'two' END FROM t",
    "SELECT id, COALESCE(g, 0), NULLIF(g, 1), GREATEST(g, id), LEAST(g, id) FROM t",
    "SELECT id, CAST(g AS TEXT), CAST(d AS DOUBLE), CAST(day AS TIMESTAMP), CAST('7' AS INTEGER) FROM t",
    "SELECT id, ABS(d), SIGN(f), ROUND(d, 1), FLOOR(d), CEIL(d), ROUND(f * 3) FROM t",
    "SELECT id, LENGTH(s), UPPER(s), LOWER(s), TRIM(BOTH 'a' FROM s), LTRIM(s), REVERSE(s) FROM t",
    "SELECT id, SUBSTRING(s FROM 2 FOR 3), LEFT(s, 2), RIGHT(s, 2), REPLACE(s, 'an', 'AN') FROM t",
    "SELECT id, POSITION('an' IN s), STRPOS(s, 'e'), STARTS_WITH(s, 'ch'), LPAD(s, 8, '*'), RPAD(s, 3, ' ') "
    "FROM t",
    "SELECT id, SPLIT_PART(s, ' ', 1), CONCAT(s, '-', g), s || '!' FROM t",
    "SELECT id, CONCAT_WS('-', s, g, NULL), REPEAT(s, 2) FROM t",
    "SELECT id, EXTRACT(YEAR FROM day), EXTRACT(MONTH FROM ts), DATE_TRUNC('month', ts), "
    "ts + INTERVAL '1' DAY FROM t",
    "SELECT g, COUNT(*), COUNT(s), SUM(d), AVG(f), MIN(s), MAX(day), COUNT(DISTINCT b) FROM t GROUP BY g",
    "SELECT g, SUM(id) AS n FROM t GROUP BY g HAVING SUM(id) > 2",
    "SELECT g, COUNT(*) FILTER (WHERE f > 0), SUM(DISTINCT d), BOOL_AND(b), BOOL_OR(b), "
    "STRING_AGG(s, ',' ORDER BY id DESC) FROM t GROUP BY g",
    "SELECT g, STDDEV(f), STDDEV_SAMP(id), STDDEV_POP(d), VARIANCE(f), VAR_SAMP(id), VAR_POP(d) FROM t "
    "GROUP BY g",
    "SELECT g, b, COUNT(*), GROUPING(g, b) FROM t GROUP BY ROLLUP (g, b)",
    "SELECT g, b, SUM(id) FROM t GROUP BY CUBE (g, b)",
    "SELECT g, b, MAX(id) FROM t GROUP BY GROUPING SETS ((g), (b), ())",
    "SELECT id, SQRT(ABS(f)), EXP(g), LN(id), LOG(id), LOG(2, id), POWER(id, 2), TRUNC(d, 1), TRUNC(f) FROM t",
    "SELECT DISTINCT g FROM t",
    "SELECT t.id, x.v FROM t, LATERAL (SELECT u.v FROM u WHERE u.k = t.g ORDER BY u.v LIMIT 1) x",
    "SELECT t.id, x.n FROM t LEFT JOIN LATERAL (SELECT COUNT(*) AS n FROM u WHERE u.k >= t.g) x ON TRUE",
    "SELECT t.id, x.v FROM t, generate_series(1, t.g) AS x(v)",
    "SELECT t.id, u.v FROM t JOIN u ON t.g = u.k",
    "SELECT t.id, u.v FROM t LEFT JOIN u ON t.g = u.k",
    "SELECT t.id, u.v FROM t RIGHT JOIN u ON t.g = u.k",
    "SELECT t.id, u.v FROM t FULL JOIN u ON t.g = u.k",
    "SELECT t.id, u.v FROM t CROSS JOIN u WHERE u.k = 2",
    "SELECT x.id FROM t AS x, u AS y WHERE x.id = y.k",
    "SELECT id FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.g)",
    "SELECT id, g > ALL (SELECT k FROM u WHERE u.k < t.id), g = ANY (SELECT k FROM u) FROM t",
    "SELECT id FROM t WHERE id <> ALL (SELECT k FROM u WHERE k IS NOT NULL) AND g >= SOME (SELECT k FROM u)",
    "SELECT id FROM t WHERE g IN (SELECT k FROM u WHERE v LIKE 'o%')",
    "SELECT id, (SELECT COUNT(*) FROM u) AS n FROM t",
    "SELECT g FROM t UNION SELECT k FROM u",
    "SELECT g FROM t UNION ALL SELECT k FROM u",
    "SELECT g FROM t EXCEPT SELECT k FROM u",
    "SELECT g FROM t INTERSECT SELECT k FROM u",
    "SELECT id, s FROM t ORDER BY s DESC NULLS LAST LIMIT 2 OFFSET 1",
    "WITH c AS (SELECT g, COUNT(*) AS n FROM t GROUP BY g) SELECT * FROM c WHERE n > 1",
    "SELECT a FROM (SELECT id AS a FROM t) AS sub (a) WHERE a > 1",
    "WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r",
    "SELECT t.* FROM t WHERE b",
    "SELECT 1 AS one, 'x' AS two, NULL AS three, TRUE AS four",
    "SELECT id, ROW_NUMBER() OVER (PARTITION BY g ORDER BY id), RANK() OVER (ORDER BY g), "
    "DENSE_RANK() OVER (ORDER BY g DESC NULLS FIRST), PERCENT_RANK() OVER (ORDER BY g NULLS FIRST), "
    "CUME_DIST() OVER (ORDER BY g), NTILE(3) OVER (ORDER BY id) FROM t",
    "SELECT id, LAG(g, 1, 0) OVER (ORDER BY id), LEAD(s) OVER (ORDER BY id), "
    "FIRST_VALUE(s) OVER (ORDER BY id), "
    "LAST_VALUE(d) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING), "
    "NTH_VALUE(f, 2) OVER (ORDER BY id RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM t",
    "SELECT id, SUM(d) OVER (PARTITION BY g), COUNT(*) OVER (ORDER BY id ROWS 2 PRECEDING), "
    "AVG(f) OVER (ORDER BY id), MIN(s) OVER (), MAX(id) OVER (ORDER BY id DESC) FROM t",
    "SELECT id, SUM(g) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE CURRENT ROW), "
    "COUNT(*) OVER (ORDER BY g GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW EXCLUDE TIES), "
    "MAX(d) OVER (ORDER BY g GROUPS 1 PRECEDING EXCLUDE GROUP), "
    "SUM(g) OVER (ORDER BY day RANGE BETWEEN INTERVAL '1 month' PRECEDING AND INTERVAL '2 days' FOLLOWING), "
    "COUNT(*) OVER (ORDER BY ts DESC RANGE INTERVAL '4 years 1 hour' PRECEDING EXCLUDE NO OTHERS) FROM t",
]

# statements, then the tables compared with DuckDB's after the same statements
SCRIPTS = [
    [
        "CREATE TABLE w (a INTEGER NOT NULL, b TEXT DEFAULT 'x', c INTEGER NULL, PRIMARY KEY (a), "
        "CONSTRAINT big CHECK (a < 100), UNIQUE (b, c))",
        "CREATE TABLE z (p INTEGER CONSTRAINT pk PRIMARY KEY, q VARCHAR(5) UNIQUE CHECK (q <> ''))",
        "INSERT INTO w (a, c) VALUES (1, 2), (2, 3)",
        "INSERT INTO w VALUES (3, 'y', NULL), (4, 'y', NULL)",
        "INSERT INTO z VALUES (1, 'abc'), (2, NULL)",
        "UPDATE w SET c = c * 10 WHERE a <= 2",
        "DELETE FROM w WHERE a = 4",
        "INSERT INTO z SELECT a + 10, b FROM w WHERE a = 1",
        "CREATE INDEX wb ON w (b)",
        "CREATE VIEW wv AS SELECT b, COUNT(*) AS n FROM w GROUP BY b",
        "DROP VIEW wv",
        "BEGIN",
        "INSERT INTO w VALUES (5, 'z', 5)",
        "ROLLBACK",
        "BEGIN",
        "INSERT INTO w VALUES (6, 'z', 6)",
        "COMMIT",
    ],
    [  # what DML reads besides its table (tests/db/test_dml_surface.py compares each with PostgreSQL)
        "CREATE TABLE p (a INTEGER PRIMARY KEY, b TEXT, c INTEGER)",
        "CREATE TABLE q (a INTEGER, d INTEGER)",
        "INSERT INTO p VALUES (1, 'x', 1), (2, 'y', 2)",
        "INSERT INTO q VALUES (1, 10), (2, 20), (3, 30)",
        "INSERT INTO p VALUES (1, 'z', 5), (3, 'w', 3) ON CONFLICT (a) DO UPDATE SET c = excluded.c + p.c "
        "WHERE p.c < 10 RETURNING a, c",
        "INSERT INTO p VALUES (1, 'z', 5) ON CONFLICT DO NOTHING RETURNING *",
        "UPDATE p SET c = q.d FROM q WHERE p.a = q.a RETURNING p.a, p.c",
        "DELETE FROM p USING q WHERE p.a = q.a AND q.d > 25 RETURNING p.*",
        "WITH r AS (SELECT a + 100 AS a, d FROM q) INSERT INTO p SELECT a, NULL, d FROM r",
        "WITH r AS (SELECT 2 AS a) UPDATE p SET b = NULL WHERE a IN (SELECT a FROM r)",
        "WITH r AS (SELECT 101 AS a) DELETE FROM p WHERE a IN (SELECT a FROM r)",
        "UPDATE p SET c = (SELECT MAX(d) FROM q WHERE q.a = p.a)",
    ],
    [
        "CREATE TABLE al (a INTEGER, b TEXT, c INTEGER)",
        "INSERT INTO al VALUES (1, 'x', 10), (2, NULL, 20)",
        "ALTER TABLE al ADD COLUMN d INTEGER DEFAULT 7",
        "ALTER TABLE al DROP COLUMN c",
        "ALTER TABLE al RENAME COLUMN b TO bb",
        "ALTER TABLE al RENAME TO al2",
        "INSERT INTO al2 VALUES (3, 'z', 1)",
        "CREATE TABLE tr (k INTEGER)",
        "INSERT INTO tr VALUES (1), (2)",
        "TRUNCATE tr",
        "INSERT INTO tr VALUES (3)",
    ],
]
TABLES_AFTER = [["w", "z"], ["p", "q"], ["al2", "tr"]]

# allowed node types whose semantics DuckDB does not share, tested elsewhere
ELSEWHERE = {
    exp.Copy: "tests/sql/test_copy.py against PostgreSQL's COPY",
    exp.CopyParameter: "tests/sql/test_copy.py",
    exp.Credentials: "tests/sql/test_copy.py (always present, empty, in a COPY)",
    exp.Command: "EXPLAIN: tests/sql/test_surface.py",
    exp.Fetch: "tests/sql/test_trust.py::test_2_fetch_first_limits_and_with_ties_is_refused",
    exp.LimitOptions: "tests/sql/test_trust.py::test_2_fetch_first_limits_and_with_ties_is_refused",
    exp.MaterializedProperty: "CREATE MATERIALIZED VIEW: tests/tpch and tests/cli scripts",
    exp.Properties: "CREATE MATERIALIZED VIEW: tests/tpch and tests/cli scripts",
    exp.Drop: "DROP TABLE: tests/sql/test_surface.py::test_insert_select_and_drop_table",
    exp.AtTimeZone: "tests/sql/test_functions.py::test_function_values (time zones)",
    exp.Cbrt: "tests/sql/test_numeric_functions.py against PostgreSQL (DuckDB's cbrt rounds otherwise)",
    exp.GeneratedAsIdentityColumnConstraint: "tests/db/test_ddl_surface.py against PostgreSQL",
    exp.WithDataProperty: "CREATE TABLE AS ... WITH NO DATA: tests/db/test_ddl_surface.py against PostgreSQL",
    exp.CurrentTimestamp: "now(): tests/sql/test_surface_time.py (one value per statement, refused in views)",
    exp.CurrentDate: "tests/sql/test_surface_time.py",
    exp.Localtimestamp: "tests/sql/test_surface_time.py",
    exp.Escape: "LIKE ... ESCAPE: tests/sql/test_surface_text.py against PostgreSQL",
    exp.RegexpLike: "~: tests/sql/test_surface_text.py against PostgreSQL (DuckDB's ~ is a whole-text match)",
    exp.RegexpILike: "~*: tests/sql/test_surface_text.py against PostgreSQL",
    exp.RegexpReplace: "REGEXP_REPLACE: tests/sql/test_regexp_replace.py against PostgreSQL",
    exp.Overlay: "OVERLAY: tests/sql/test_surface_text.py against PostgreSQL",
    exp.Translate: "TRANSLATE: tests/sql/test_surface_text.py against PostgreSQL",
    exp.AlterColumn: "tests/db/test_ddl_surface.py against PostgreSQL",
    exp.AddConstraint: "tests/db/test_ddl_surface.py against PostgreSQL",
    exp.ArrayAgg: "tests/sql/test_array_agg.py against PostgreSQL (DuckDB gives lists, not the array's text)",
    exp.ForeignKey: "tests/db/test_foreign_keys.py against PostgreSQL (DuckDB has no ON DELETE actions)",
    exp.Reference: "tests/db/test_foreign_keys.py against PostgreSQL",
}


def _types(sql: str) -> set[type]:
    return {type(n) for s in sqlglot.parse(sql, dialect="postgres") for n in s.walk()}


def test_every_allowed_node_type_has_its_semantics_tested():
    seen = set(ELSEWHERE)
    for sql in QUERIES + [s for script in SCRIPTS for s in script]:
        seen |= _types(sql)
    missing = sorted(t.__name__ for t in ALLOWED if t not in seen)
    assert missing == [], f"allowed but never tested: {missing}"


@pytest.fixture(scope="module")
def both():
    db, con = ivm.connect(), duckdb.connect()
    for s in TABLES + ROWS:
        db.execute(s)
        con.execute(s)
    return db, con


@pytest.mark.parametrize("sql", QUERIES)
def test_allowed_queries_answer_as_duckdb(both, sql):
    db, con = both
    want = con.execute(sql).fetchall()
    assert same_rows(db.execute(sql).fetchall(), want)
    if "RECURSIVE" not in sql:
        name = f"v{QUERIES.index(sql)}"
        db.execute(f"CREATE VIEW {name} AS {sql}")
        assert same_rows(db.execute(f"SELECT * FROM {name}").fetchall(), want)


@pytest.mark.parametrize("i", range(len(SCRIPTS)))
def test_allowed_statements_leave_the_tables_duckdb_leaves(i):
    db, con = ivm.connect(), duckdb.connect()
    for s in SCRIPTS[i]:
        db.execute(s)
        con.execute(s)
    for name in TABLES_AFTER[i]:
        got, want = (
            db.execute(f"SELECT * FROM {name}").fetchall(),
            con.execute(f"SELECT * FROM {name}").fetchall(),
        )
        assert same_rows(got, want), name


def _node_types() -> list[type]:
    out, stack = [], [exp.Expression]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in out:
                out.append(sub)
                stack.append(sub)
    return [c for c in out if not inspect.isabstract(c) and c.__module__.startswith("sqlglot.expressions")]


def test_every_other_node_type_is_refused():
    refused = [c for c in _node_types() if c not in ALLOWED]
    assert len(refused) > 500  # sqlglot's tree has many more node types than ivm implements
    for cls in refused:
        with pytest.raises(NotSupportedError, match="is not supported"):
            check(exp.Select(expressions=[cls()]))


REFUSED = [  # (statement, the words of the message, the construct the error points into, if it can)
    ("SELECT g, RANDOM() FROM t", "function random()", "RANDOM()"),
    ("SELECT s FROM t WHERE s ~ '(a)\\1'", "back references", "'(a)\\1'"),
    ("SELECT MD5(s) FROM t", "function md5()", "MD5(s)"),
    ("SELECT foo(s) FROM t", "function foo()", "foo(s)"),
    ("SELECT ARRAY[1, 2]", "ARRAY", "ARRAY[1, 2]"),
    ("SELECT s FROM t WHERE s SIMILAR TO 'a%'", "SIMILAR TO", "s SIMILAR TO 'a%'"),
    ("SELECT g FROM t GROUP BY g WITH ROLLUP", "GROUP BY ROLLUP", None),
    ("SELECT * FROM t, LATERAL unnest(ARRAY[t.g]) x", "UNNEST", None),
    ("SELECT * FROM public.t", "a schema-qualified table name", "public.t"),
    ("SELECT * FROM t FOR UPDATE", "SELECT ... FOR UPDATE/SHARE", None),
    ("SELECT g FROM t ORDER BY g FETCH FIRST 1 ROW WITH TIES", "WITH TIES", None),
    ("INSERT INTO t VALUES (9) ON CONFLICT (id) WHERE id > 0 DO NOTHING", "ON CONFLICT (...) WHERE", None),
    ("WITH x AS (DELETE FROM t RETURNING id) SELECT * FROM x", "DELETE in WITH", "DELETE FROM t"),
    ("UPDATE t SET g = 1 WHERE id = 1 RETURNING (SELECT 1)", "a subquery in RETURNING", "(SELECT 1)"),
    ("CREATE TEMPORARY TABLE q (a INTEGER)", "TEMPORARY", None),
    ("CREATE UNIQUE INDEX i ON t (g)", "CREATE UNIQUE INDEX", None),
    ("CREATE VIEW nv AS SELECT NOW() AS n", "time-dependent views are not maintained", "NOW()"),
    ("SELECT CURRENT_TIME", "current_time", None),
    ('ALTER TABLE t ALTER COLUMN g TYPE TEXT COLLATE "C"', "COLLATE", None),
    ("ALTER TABLE t ALTER COLUMN g RESTART", "ALTER TABLE t ALTER COLUMN g RESTART", None),
    (
        "CREATE VIEW vr AS SELECT 1 AS a; ALTER VIEW vr ALTER COLUMN a SET DEFAULT 1",
        "ALTER VIEW ... ALTER COLUMN a SET DEFAULT 1",
        None,
    ),
    ("INSERT INTO u OVERRIDING SYSTEM VALUE VALUES (1, 'a')", "OVERRIDING SYSTEM VALUE", "OVERRIDING"),
    ("CREATE TABLE q (a INTEGER GENERATED ALWAYS AS IDENTITY (MINVALUE 1 CYCLE))", "CYCLE", None),
    ("CREATE TABLE q (a INTEGER, b INTEGER GENERATED ALWAYS AS (a + 1) STORED)", "a generated column", None),
    ('SELECT s COLLATE "C" FROM t', "COLLATE", 's COLLATE "C"'),
    ("SELECT ts AT TIME ZONE 'Europe/Paris' FROM t", "AT TIME ZONE", "ts AT TIME ZONE 'Europe/Paris'"),
    ("BEGIN ISOLATION LEVEL SERIALIZABLE", "transaction modes", None),
]


@pytest.mark.parametrize(("sql", "words", "construct"), REFUSED, ids=[r[0][:40] for r in REFUSED])
def test_refusals_name_the_construct_in_sql_words(both, sql, words, construct):
    db, _ = both
    with pytest.raises(NotSupportedError) as err:
        db.execute(sql)
    message = err.value.message
    assert words in message, message
    assert "<class" not in message and "sqlglot" not in message
    words_said = set(re.findall(r"\w+", message.upper())) - set(re.findall(r"\w+", sql.upper()))
    for cls in _node_types():  # no parser class name shows through (SQL words of the same spelling aside)
        name = cls.__name__.upper()  # GROUPCONCAT, LOGICALAND: compound names; ANONYMOUS and STAR alone
        compound = sum(ch.isupper() for ch in cls.__name__) > 1 or name in ("ANONYMOUS", "STAR")
        if compound and name in words_said and name not in _SQL_WORDS:
            pytest.fail(f"{message!r} names {cls.__name__}")
    if construct is not None:  # the caret lands inside the construct refused
        start = sql.index(construct) + 1
        assert err.value.line == 1 and start <= err.value.col < start + len(construct), err.value.col


_SQL_WORDS = {
    "CURRENT_TIMESTAMP",
    "CURRENT_DATE",
    "ARRAY",
    "ALL",
    "ANY",
    "UNNEST",
    "SET",
    "TRUNCATE",
    "ALTER",
    "TEMPORARY",
}
_SQL_WORDS |= {
    "COLLATE",
    "ROLLUP",
    "LATERAL",
    "FILTER",
    "ESCAPE",
    "CASCADE",
    "DELETE",
    "INSERT",
    "UPDATE",
    "ORDER",
}


def test_a_refused_node_is_named_by_its_sql():
    node = sqlglot.parse_one("SELECT x ~* 'a'", dialect="postgres").expressions[0]
    assert sql_name(node) == "x ~* 'a'"
