"""Corners of SQL's semantics: subqueries whose columns share names with the outer query, ORDER BY ... LIMIT on
what is not selected and with NULLS FIRST/LAST, MIN/MAX over groups without values, and reads inside a
transaction of its own changes. Views equal DuckDB's recompute after every change; shapes whose SQL answer
cannot be kept are refused by name."""

import duckdb
import pytest

import ivm
from sql.errors import SqlError, UnsupportedError
from tests.oracle import commit_and_compare, same_rows, with_views

DDL = [
    "CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER, c INTEGER, s VARCHAR, dt DATE, ts TIMESTAMP)",
    "CREATE TABLE u (c INTEGER, x INTEGER)",
]

QUERIES = [
    # the subquery's column has the outer column's name
    "SELECT a FROM t WHERE c NOT IN (SELECT c FROM u)",
    "SELECT a FROM t WHERE c IN (SELECT c FROM u WHERE x > 1)",
    # ORDER BY ... LIMIT on columns and expressions not selected, output names, NULLS FIRST/LAST
    "SELECT c AS a FROM t ORDER BY t.a LIMIT 2",
    "SELECT a FROM t ORDER BY c, a LIMIT 3",
    "SELECT a, b FROM t ORDER BY c DESC NULLS LAST, a LIMIT 3",
    "SELECT a FROM t ORDER BY b NULLS FIRST, a DESC LIMIT 2 OFFSET 1",
    "SELECT s, count(*) AS n FROM t GROUP BY s ORDER BY max(a) DESC LIMIT 2",
    "SELECT b FROM t ORDER BY b + c, a LIMIT 3",
    "SELECT a FROM t ORDER BY s DESC NULLS LAST, a LIMIT 4",
    # inside an ORDER BY expression a name is the input column, even when an output column has that name
    "SELECT c AS a FROM t ORDER BY a + 0 LIMIT 2",
    "SELECT c AS a FROM t ORDER BY -a LIMIT 2",
    # EXISTS over an aggregate without GROUP BY always finds its one row
    "SELECT a FROM t WHERE NOT EXISTS (SELECT count(*) FROM u WHERE u.c = t.b + 10)",
    "SELECT a FROM t WHERE EXISTS (SELECT max(x) FROM u WHERE u.c = t.b)",
    # CASE and COALESCE compute a value that can fail only for the rows that need it
    "SELECT a, CASE WHEN s IN ('1', '2') THEN CAST(s AS INTEGER) ELSE -1 END AS v FROM t",
    "SELECT a, coalesce(CAST(a AS DECIMAL(3,1)), CAST(b * 1000 AS DECIMAL(3,1))) AS v FROM t",
    # groups whose values are all NULL
    "SELECT b, min(dt) AS lo, max(ts) AS hi, max(s) AS ms FROM t GROUP BY b",
    # a correlated IN is an EXISTS with one more equality
    "SELECT a FROM t WHERE c IN (SELECT x FROM u WHERE u.c = t.a)",
    "SELECT a FROM t WHERE b IN (SELECT x + 1 FROM u WHERE u.c = t.c AND u.x > 0) OR a = 3",
    # an IN whose subquery nests a subquery correlated with it (as TPC-H q20's): the IN itself is not correlated
    "SELECT a FROM t WHERE c IN (SELECT x FROM u WHERE u.x >= (SELECT count(*) FROM t w WHERE w.b = u.c))",
    # correlation through expressions, and NOT IN of an expression
    "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.x = t.a + 1)",
    "SELECT a FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.x * 2 = t.b AND u.c > t.c)",
    "SELECT a FROM t WHERE c + 1 NOT IN (SELECT x FROM u)",
    # a correlated NOT IN: its NULL rules over the rows the outer row selects
    "SELECT a FROM t WHERE c NOT IN (SELECT x FROM u WHERE u.c = t.b)",
    "SELECT a FROM t WHERE b NOT IN (SELECT x + 1 FROM u WHERE u.c = t.c AND u.x IS NOT NULL)",
    # NOT around a parenthesized IN is NOT IN
    "SELECT a FROM t WHERE NOT (c IN (SELECT c FROM u WHERE c IS NOT NULL))",
    # set operations over columns of different numeric types, and NULL columns
    "SELECT c FROM t UNION SELECT x FROM u",
    "SELECT b, NULL AS n FROM t UNION ALL SELECT sum(x), c FROM u GROUP BY c",
    "SELECT CAST(c AS DECIMAL(6,2)) AS v FROM t EXCEPT SELECT x FROM u",
    "SELECT a, NULL AS s FROM t INTERSECT ALL SELECT c, s FROM t",
]

SCALARS = [
    # IN, NOT IN and EXISTS as values, with SQL's NULLs
    "SELECT a, c IN (SELECT c FROM u) AS f FROM t",
    "SELECT a, c NOT IN (SELECT x FROM u WHERE x IS NOT NULL) AS f, "
    "b + 1 IN (SELECT c FROM u WHERE x > 1) AS g FROM t",
    "SELECT a, c IN (SELECT x FROM u WHERE x > 100) AS f FROM t",
    "SELECT a, EXISTS (SELECT 1 FROM u WHERE u.c = t.a) AS e FROM t",
    "SELECT a, CASE WHEN NOT EXISTS (SELECT 1 FROM u WHERE u.x = t.c AND u.c > 1) THEN 'none' ELSE 'some' END "
    "AS e FROM t",
    "SELECT a, EXISTS (SELECT 1 FROM u WHERE x > 2) AS e FROM t",
    # aggregates
    "SELECT a, (SELECT max(x) FROM u) AS m FROM t",
    "SELECT a, (SELECT sum(x) FROM u WHERE u.c = t.a) AS m FROM t",
    "SELECT a, coalesce((SELECT sum(x) FROM u WHERE u.c = t.a), -1) AS m FROM t",
    "SELECT a, (SELECT count(*) FROM u WHERE u.c = t.a) + (SELECT count(*) FROM u WHERE u.x = t.a) AS m FROM t",
    "SELECT a, (SELECT count(x) + 1 FROM u WHERE u.c = t.a AND u.x > 0) AS m FROM t WHERE b IS NOT NULL",
    "SELECT a, (SELECT avg(x) FROM u WHERE u.c = t.b AND u.x = t.c) AS m FROM t",
    "SELECT a, (SELECT max(w.c) FROM t w WHERE w.b = t.a) AS m FROM t",
    "SELECT a, b * (SELECT count(*) FROM u) AS m FROM t ORDER BY a LIMIT 3",
    "SELECT a, (SELECT min(x) FROM u WHERE u.c + 1 = t.c) AS m FROM t",
    # where IN's NULL differs from FALSE, in a group, correlated through OR, in HAVING
    "SELECT a FROM t WHERE NOT (c NOT IN (SELECT c FROM u))",
    "SELECT a, c IN (SELECT x FROM u WHERE u.c = t.b) AS f FROM t",
    "SELECT a FROM t WHERE (c IN (SELECT c FROM u)) IS NULL",
    "SELECT c, (SELECT max(x) FROM u WHERE u.c = t.c) AS m FROM t GROUP BY c",
    "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.c = t.a AND (u.x = 3 OR u.x IS NULL))",
    "SELECT c, count(*) AS n FROM t GROUP BY c HAVING EXISTS (SELECT 1 FROM u WHERE u.c = t.c)",
    "SELECT c, count(*) AS n FROM t GROUP BY c HAVING c IN (SELECT x FROM u)",
]

STEPS = [
    "INSERT INTO t VALUES (1, 5, NULL, 'x', NULL, NULL), (2, 5, 3, 'y', DATE '1995-01-02', NULL),"
    " (3, NULL, 1, 'x', NULL, TIMESTAMP '1995-01-02 03:04:05'), (4, 2, 2, NULL, NULL, NULL)",
    "INSERT INTO u VALUES (1, 2), (NULL, 3), (3, 0)",
    "DELETE FROM u WHERE c IS NULL",
    "INSERT INTO t VALUES (6, 1, NULL, '2', NULL, NULL), (7, 5, 9, 'w', DATE '1999-12-31', NULL)",
    "UPDATE t SET c = 4 WHERE a = 3",
    "DELETE FROM t WHERE a = 2",
    "UPDATE u SET x = 5 WHERE c = 3",
]


@pytest.mark.parametrize("queries", [QUERIES, SCALARS], ids=["corners", "select-list subqueries"])
def test_views_equal_duckdb_through_changes(queries):
    db, oracle = with_views(DDL, queries)
    for step in STEPS:
        commit_and_compare(db, oracle, [step], queries)


@pytest.mark.parametrize(
    "sql, words",
    [
        (
            "SELECT a FROM t WHERE b > (SELECT x FROM u WHERE u.c = t.a AND u.x = 1)",
            "may return more than one row",
        ),
        ("SELECT a FROM t UNION SELECT s FROM t", "UNION of INTEGER and VARCHAR is not possible"),
    ],
)
def test_unsupported_subqueries_say_so(sql, words):
    db, _ = with_views(DDL, [])
    with pytest.raises(UnsupportedError if "possible" not in words else SqlError) as info:
        db.execute(sql)
    assert words in str(info.value) and info.value.line == 1 and info.value.col is not None


def test_reads_inside_a_transaction_see_its_changes():
    db, oracle = with_views(DDL, ["SELECT count(*) AS n FROM t"])
    for c in (db, oracle):
        c.execute(STEPS[0])
        c.execute("CREATE TABLE copy (a INTEGER, s VARCHAR)")
    reads = [
        "SELECT * FROM t",
        "SELECT t.a, u.x FROM t JOIN u ON t.c = u.c",
        "SELECT s, count(*) FROM t GROUP BY s",
        "SELECT a FROM t WHERE c NOT IN (SELECT c FROM u WHERE c IS NOT NULL)",
    ]
    changes = [
        "DELETE FROM t WHERE a = 1",
        "INSERT INTO u VALUES (2, 7), (2, 8)",
        "UPDATE t SET s = 'new' WHERE a = 3",
        "INSERT INTO t VALUES (9, NULL, 2, NULL, NULL, NULL)",
        "INSERT INTO copy SELECT a, s FROM t WHERE a > 2",
    ]
    for c in (db, oracle):
        c.execute("BEGIN")
    for change in changes:
        db.execute(change)
        oracle.execute(change)
        for q in reads + ["SELECT * FROM copy"]:
            got, expected = db.execute(q).fetchall(), oracle.execute(q).fetchall()
            assert same_rows(got, expected), f"{q}\nafter {change}: got {got}, expected {expected}"
    assert db.execute("SELECT * FROM v0").fetchall() == [(4,)]  # views change when the transaction commits
    for c in (db, oracle):
        c.execute("COMMIT")
    assert db.execute("SELECT * FROM v0").fetchall() == oracle.execute("SELECT count(*) FROM t").fetchall()
    copied = db.execute("SELECT * FROM copy").fetchall()
    assert same_rows(copied, oracle.execute("SELECT * FROM copy").fetchall())


def test_a_rolled_back_read_leaves_nothing_behind():
    db = ivm.connect()
    duck = duckdb.connect()
    for c in (db, duck):
        c.execute("CREATE TABLE k (a INTEGER PRIMARY KEY, b INTEGER)")
        c.execute("INSERT INTO k VALUES (1, 1)")
    db.execute("BEGIN")
    db.execute("INSERT INTO k VALUES (2, 2)")
    assert sorted(db.execute("SELECT a FROM k WHERE b > 0").fetchall()) == [(1,), (2,)]
    db.execute("ROLLBACK")
    assert db.execute("SELECT a FROM k WHERE b > 0").fetchall() == [(1,)]


OUTER = [
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x AND t.c > 1",  # a condition on the side kept whole
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.z",  # keys of different numeric types
    "SELECT t.a, u.y FROM t FULL JOIN u ON t.a = u.x AND u.y > 1",
    "SELECT t.a, u.y FROM t FULL JOIN u ON t.a = u.x AND u.y > 1 AND t.b IS NOT NULL",
    "SELECT t.a, u.x FROM t RIGHT JOIN u ON t.a = u.x AND t.c > 1 AND u.y < 3",
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.c > 1",  # no equality at all
    "SELECT t.a, u.y FROM t LEFT JOIN u ON u.y > 1",
    "SELECT t.a, u.y FROM t FULL JOIN u ON t.c > 1 AND u.y = 2",
    "SELECT t.a, count(u.y) AS n FROM t LEFT JOIN u ON t.a = u.x AND t.b = 1 GROUP BY t.a",
    "SELECT t.a, u.y, w.a AS wa FROM t LEFT JOIN u ON t.a = u.x AND t.c > 0 "
    "LEFT JOIN t w ON w.b = u.y AND w.c IS NULL",
    "SELECT t.a, u.y FROM t FULL JOIN u ON t.b = u.z AND t.a = u.x",
    "SELECT t.a, u.y FROM t JOIN u ON t.a = u.z",  # an inner join too compares keys in their common type
    # an inner join between outer joins: its conditions hold before the FULL join; WHERE only after it
    "SELECT r0.c, r3.y FROM t r0 LEFT JOIN t r1 ON r1.b > 1 JOIN u r2 ON r0.b = r2.y AND r2.x > 1 "
    "FULL JOIN u r3 ON r0.c = r3.y",
    "SELECT r0.c, r3.y FROM t r0 LEFT JOIN t r1 ON r1.b > 1 JOIN u r2 ON r0.b = r2.z "
    "FULL JOIN u r3 ON r0.c = r3.y",
    "SELECT r0.c, r3.y FROM t r0 LEFT JOIN t r1 ON r1.b > 1 JOIN u r2 ON r0.b = r2.y "
    "FULL JOIN u r3 ON r0.c = r3.y WHERE r0.a = r2.x",
    # conditions comparing both sides other than by =: the pairs, and each kept side's rows in none of them
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.c < u.x",
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x AND t.c < u.y",
    "SELECT t.a, u.y FROM t RIGHT JOIN u ON t.a = u.x AND t.c + u.y > 2",
    "SELECT t.a, t.b, u.x, u.y FROM t FULL JOIN u ON t.a = u.x AND t.c <> u.y AND t.b > 0",
    "SELECT t.a, u.y FROM t FULL JOIN u ON t.c < u.x OR u.x IS NULL",
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.b = u.z AND t.a <= u.x",
    "SELECT t.a, count(u.y) AS n FROM t LEFT JOIN u ON t.c <= u.y OR t.a = u.x GROUP BY t.a",
    "SELECT t.a, u.y, w.a AS wa FROM t LEFT JOIN u ON t.a < u.x LEFT JOIN t w ON w.b = u.y AND w.c > t.c",
    "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x AND u.y > (SELECT count(*) FROM u v WHERE v.x = t.c)",
    # a comma binds looser than JOIN: an item holding a RIGHT or FULL join pads only its own rows
    "SELECT t.a, u.x, w.y AS wy FROM t, u RIGHT JOIN u AS w ON w.x = u.y",
    "SELECT t.a, u.x, w.a AS wa FROM t, u FULL JOIN t AS w ON w.c = u.x WHERE t.b = 1",
    "SELECT t.a, w.y AS wy, z.a AS za FROM t, u RIGHT JOIN u AS w ON w.x = u.y, t AS z LEFT JOIN u AS q ON "
    "q.x = z.c WHERE z.b = t.c",
    # several items holding RIGHT or FULL joins: each pads its own rows, and the items are crossed
    "SELECT t.a, u.x, w.a AS wa, v.y AS vy FROM t RIGHT JOIN u ON u.x = t.c, "
    "t AS w FULL JOIN u AS v ON v.y = w.b",
    "SELECT count(*) AS n FROM t FULL JOIN u ON u.x = t.a, t AS w RIGHT JOIN u AS v ON v.x = w.c",
    "SELECT t.a, w.a AS wa FROM t FULL JOIN u ON u.x = t.a, t AS w FULL JOIN u AS v ON v.y = w.b, "
    "u AS q RIGHT JOIN t AS r ON r.c = q.y WHERE t.b = w.b AND r.a = t.c",
]


@pytest.mark.parametrize("seed", range(2))
def test_outer_joins_with_conditions_on_one_side_equal_duckdb(seed):
    import random

    rng = random.Random(seed)
    db, oracle = with_views(
        [
            "CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)",
            "CREATE TABLE u (x INTEGER, y INTEGER, z DECIMAL(8,2))",
        ],
        OUTER,
    )

    def value() -> str:
        return rng.choice(["NULL", "0", "1", "2", "3"])

    for _ in range(20):
        stmts = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.4:
                stmts.append(f"INSERT INTO t VALUES ({value()}, {value()}, {value()})")
            elif r < 0.8:
                z = rng.choice(["NULL", "1.00", "2.00", "2.50", "3.00"])
                stmts.append(f"INSERT INTO u VALUES ({value()}, {value()}, {z})")
            elif r < 0.9:
                stmts.append(f"DELETE FROM t WHERE a = {value()}")
            else:
                stmts.append(f"DELETE FROM u WHERE y = {value()}")
        commit_and_compare(db, oracle, stmts, OUTER)


def test_keys_of_different_numeric_types_are_join_keys():
    db, _ = with_views(["CREATE TABLE t (a INTEGER)", "CREATE TABLE u (z DECIMAL(8,2))"], [])
    db.execute("EXPLAIN SELECT t.a FROM t JOIN u ON t.a = u.z")
    plan = "\n".join(r[0] for r in db.fetchall())
    assert "Join inner on _key0 = _key0" in plan and "CAST(a AS DECIMAL(18,2)) AS _key0" in plan, plan


def test_outer_join_comparing_both_sides_keeps_each_unmatched_row_and_its_duplicates():
    """Rows alike in the columns shown but not in those compared are matched or not each on its own."""
    ddl = ["CREATE TABLE l (a INTEGER, c INTEGER)", "CREATE TABLE r (x INTEGER)"]
    queries = [f"SELECT l.a, r.x FROM l {kind} JOIN r ON l.c < r.x" for kind in ("LEFT", "FULL")]
    db, oracle = with_views(ddl, queries)
    changes = [
        "INSERT INTO l VALUES (1, 0), (1, 5), (1, 5), (NULL, NULL)",
        "INSERT INTO r VALUES (3), (3), (NULL)",
        "INSERT INTO r VALUES (9)",
        "DELETE FROM r WHERE x = 3",
        "UPDATE l SET c = 10 WHERE c = 0",
        "DELETE FROM r WHERE x = 9",
    ]
    for change in changes:
        commit_and_compare(db, oracle, [change], queries)


def test_assignments_round_to_the_column_and_refuse_what_does_not_fit():
    ddl = ["CREATE TABLE cp (k INTEGER PRIMARY KEY, d DECIMAL(8,2), e DECIMAL(18,4), i INTEGER, f DOUBLE)"]
    db, oracle = with_views(ddl, ["SELECT * FROM cp"])
    changes = [
        "INSERT INTO cp VALUES (1, 1.00, 2.0005, 1, 2.5), (2, 1.50, -2.0050, 2, -3.5)",
        "UPDATE cp SET d = e",
        "UPDATE cp SET d = d * d WHERE k = 2",
        "INSERT INTO cp (k, d, i) SELECT k + 10, e * 10, f FROM cp",
        "UPDATE cp SET i = d WHERE k = 12",
    ]
    for change in changes:
        commit_and_compare(db, oracle, [change], ["SELECT * FROM cp"])
    before = db.execute("SELECT * FROM cp").fetchall()
    for bad in [
        "UPDATE cp SET d = 123456789 WHERE k = 1",
        "INSERT INTO cp (k, d) SELECT 20, e * 1000000 FROM cp",
    ]:
        with pytest.raises(SqlError, match="column 'd': numeric field overflow"):
            db.execute(bad)
    db.execute("CREATE TABLE w (dt DATE)")
    with pytest.raises(SqlError, match="column 'dt' is of type DATE but the value is of type TEXT"):
        db.execute("INSERT INTO w SELECT CAST(k AS TEXT) FROM cp")
    assert db.execute("SELECT * FROM cp").fetchall() == before


def test_arithmetic_beyond_64_bits_puts_the_view_in_error():
    db, _ = with_views(
        ["CREATE TABLE n (k INTEGER PRIMARY KEY, i BIGINT, d DECIMAL(18,2), f DOUBLE)"],
        [
            "SELECT k, i * i AS m FROM n",
            "SELECT k, d * d AS m FROM n",
            "SELECT k, CAST(f AS BIGINT) AS m FROM n",
            "SELECT k, i + i AS m FROM n",
            "SELECT k FROM n",
        ],
    )
    db.execute("INSERT INTO n VALUES (1, 3, 1.50, 2.5)")
    assert db.execute("SELECT * FROM v0").fetchall() == [(1, 9)]
    db.execute("INSERT INTO n VALUES (2, 5000000000000000000, 123456789.00, 1e20)")
    assert sorted(db.execute("SELECT * FROM v4").fetchall()) == [(1,), (2,)]
    assert sorted(db.view_errors()) == ["v0", "v1", "v2", "v3"]
    for v in ("v0", "v1", "v2", "v3"):
        with pytest.raises(SqlError, match=f"view '{v}' is in error"):
            db.execute(f"SELECT * FROM {v}")
    db.execute("DELETE FROM n WHERE k = 2")  # the row at fault goes: every view is exact again
    assert db.view_errors() == {}
    assert db.execute("SELECT * FROM v0").fetchall() == [(1, 9)]
