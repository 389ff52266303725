"""Aggregates as PostgreSQL computes them: DISTINCT, FILTER, STRING_AGG, BOOL_AND/BOOL_OR/EVERY and grouping
sets against a real PostgreSQL; sums of doubles that never drift (the exact accumulator, against
``math.fsum`` of the live values); sums of BIGINT beyond 64 bits an error; how DISTINCT aggregates are
planned and shared; and the refusals, with their messages and positions."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ivm
from tests.oracle import same_rows
from tests.pg import postgres_with

TABLE = "CREATE TABLE t (k INTEGER PRIMARY KEY, g INTEGER, h TEXT, x DOUBLE PRECISION, b BOOLEAN, s TEXT)"
ROWS = [
    (1, 1, "p", 1.5, True, "b"),
    (2, 1, "q", 1.5, False, "a"),
    (3, 1, "p", None, None, None),
    (4, 2, None, -2.0, True, "c"),
    (5, None, "p", 3.0, True, "a"),
    (6, None, None, None, False, "a"),
    (7, 2, "q", 0.25, None, ""),
]
QUERIES = [
    "SELECT g, COUNT(*), COUNT(DISTINCT x), SUM(DISTINCT x), AVG(DISTINCT x), MIN(DISTINCT s) FROM t "
    "GROUP BY g",
    "SELECT g, COUNT(*) FILTER (WHERE b), SUM(x) FILTER (WHERE x > 0), MAX(s) FILTER (WHERE NOT b) FROM t "
    "GROUP BY g",
    "SELECT COUNT(DISTINCT s) FILTER (WHERE b), COUNT(*) FILTER (WHERE x IS NULL), COUNT(DISTINCT g) FROM t",
    "SELECT g, STRING_AGG(s, ',' ORDER BY s), STRING_AGG(s, '-' ORDER BY k DESC), STRING_AGG(DISTINCT s, ';' "
    "ORDER BY s DESC) FROM t GROUP BY g",
    "SELECT g, BOOL_AND(b), BOOL_OR(b), EVERY(x > 0), BOOL_AND(b) FILTER (WHERE x > 0) FROM t GROUP BY g",
    "SELECT g, h, COUNT(*), SUM(x), GROUPING(g, h), GROUPING(h) FROM t GROUP BY ROLLUP (g, h)",
    "SELECT g, h, COUNT(*), GROUPING(g) FROM t GROUP BY CUBE (g, h)",
    "SELECT g, h, COUNT(DISTINCT s) FROM t GROUP BY GROUPING SETS ((g), (h), (), (g, h), ())",
    "SELECT g, b, h, COUNT(*) FROM t GROUP BY g, ROLLUP (b, h) HAVING COUNT(*) > 1",
    "SELECT COUNT(*), SUM(x), BOOL_AND(b), STRING_AGG(s, ',' ORDER BY s) FROM t WHERE k > 100 "
    "GROUP BY GROUPING SETS ((), (g))",
    "SELECT g, COUNT(*) FROM t WHERE k > 100 GROUP BY ROLLUP (g)",
]


@pytest.fixture(scope="module")
def pg():
    gen = postgres_with(TABLE, "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s)", ROWS)
    conn = next(gen)
    conn.execute("CREATE TABLE e (k INTEGER PRIMARY KEY, g INTEGER)")
    yield conn
    gen.close()


@pytest.mark.parametrize("sql", QUERIES)
def test_aggregates_answer_as_postgresql(pg, sql):
    db = ivm.connect()
    db.execute(TABLE)
    db.execute("CREATE VIEW v AS " + sql)
    db.cursor().executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s)", ROWS)
    want = pg.execute(sql).fetchall()
    assert same_rows(db.execute("SELECT * FROM v").fetchall(), want)
    assert same_rows(db.execute(sql).fetchall(), want)


# -- sums of doubles ------------------------------------------------------------------------------------------


def test_a_large_value_deleted_leaves_no_trace_in_sums_and_averages():
    db = ivm.connect()
    db.execute("CREATE TABLE d (k INTEGER PRIMARY KEY, g INTEGER, x DOUBLE PRECISION)")
    views = {
        "plain": "SELECT SUM(x), AVG(x) FROM d",
        "grouped": "SELECT g, SUM(x), AVG(x) FROM d GROUP BY g",
        "dist": "SELECT SUM(DISTINCT x), AVG(DISTINCT x), COUNT(*) FROM d",
        "filtered": "SELECT SUM(x) FILTER (WHERE x > 0), AVG(x) FILTER (WHERE g = 1) FROM d",
        "rollup": "SELECT g, SUM(x) FROM d GROUP BY ROLLUP (g)",
    }
    for name, sql in views.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    db.execute("INSERT INTO d VALUES (1, 1, 1e16)")
    db.execute("INSERT INTO d VALUES (2, 1, 0.3)")
    db.execute("DELETE FROM d WHERE k = 1")
    assert db.execute("SELECT * FROM plain").fetchall() == [(0.3, 0.3)]
    assert db.execute("SELECT * FROM grouped").fetchall() == [(1, 0.3, 0.3)]
    assert db.execute("SELECT * FROM dist").fetchall() == [(0.3, 0.3, 1)]
    assert db.execute("SELECT * FROM filtered").fetchall() == [(0.3, 0.3)]
    assert sorted(db.execute("SELECT * FROM rollup").fetchall(), key=repr) == [(1, 0.3), (None, 0.3)]


FINITE = st.one_of(
    st.builds(lambda m, e: m * 10.0**e, st.floats(-10, 10, allow_nan=False), st.integers(-300, 290)),
    st.sampled_from([0.0, -0.0, 0.1, 0.3, 1e16, -1e16, 5e-324, 2.0**-1022]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), FINITE, st.integers(0, 40)), min_size=1, max_size=30))
def test_double_sums_equal_fsum_of_the_live_values(steps):
    """Each step inserts a value (True) or deletes the live row ``n`` modulo their number; after each, SUM,
    SUM(DISTINCT) and SUM ... FILTER are the correctly rounded sums of what is present."""
    db = ivm.connect()
    db.execute("CREATE TABLE d (k INTEGER PRIMARY KEY, x DOUBLE PRECISION)")
    db.execute("CREATE VIEW s AS SELECT SUM(x), SUM(DISTINCT x), SUM(x) FILTER (WHERE x > 0), COUNT(*) FROM d")
    live: dict[int, float] = {}
    for k, (insert, x, n) in enumerate(steps):
        if insert or not live:
            db.execute("INSERT INTO d VALUES (%s, %s)", (k, x))
            live[k] = x
        else:
            gone = sorted(live)[n % len(live)]
            db.execute("DELETE FROM d WHERE k = %s", (gone,))
            del live[gone]
        values = list(live.values())
        positive = [v for v in values if v > 0]
        want = (
            _sum(values),
            _sum(list({v + 0.0: v for v in values}.values())),  # -0.0 and 0.0 are one value
            _sum(positive),
            len(values),
        )
        got = db.execute("SELECT * FROM s").fetchall()[0]
        assert all(_same(a, b) for a, b in zip(got, want, strict=True)), (got, want, values)


def _sum(values: list[float]) -> float | None:
    return math.fsum(values) if values else None


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a == b  # -0.0 and 0.0 alike: which zero a sum of zeros shows is tested in test_sums.py


def test_a_sum_of_bigint_beyond_64_bits_is_an_error_until_its_rows_leave():
    db = ivm.connect()
    db.execute("CREATE TABLE n (k INTEGER PRIMARY KEY, a BIGINT)")
    db.execute("CREATE VIEW s AS SELECT SUM(a), SUM(DISTINCT a), COUNT(*) FROM n")
    db.execute("INSERT INTO n VALUES (1, 9223372036854775807), (2, 1)")
    with pytest.raises(ivm.DataError, match="bigint out of range"):
        db.execute("SELECT * FROM s")
    with pytest.raises(ivm.DataError, match="bigint out of range"):
        db.execute("SELECT SUM(a) FROM n")
    db.execute("DELETE FROM n WHERE k = 2")
    assert db.execute("SELECT * FROM s").fetchall() == [(9223372036854775807, 9223372036854775807, 1)]


# -- planning and sharing ------------------------------------------------------------------------------------


def test_distinct_aggregates_of_one_argument_share_one_distinct_and_views_share_it():
    db = ivm.connect()
    db.execute(TABLE)
    db.execute(
        "CREATE VIEW a AS SELECT g, COUNT(DISTINCT x) AS n, SUM(DISTINCT x) AS s, COUNT(*) AS c FROM t "
        "GROUP BY g"
    )
    plan = [r[0] for r in db.execute("EXPLAIN SELECT g, AVG(DISTINCT x) FROM t GROUP BY g").fetchall()]
    assert sum("Distinct" in line for line in plan) == 1
    assert any(line.strip() == "Distinct (reused)" for line in plan), plan  # view a's distinct rows
    own = [
        r[0]
        for r in db.execute("EXPLAIN SELECT g, COUNT(DISTINCT x), SUM(DISTINCT x) FROM t GROUP BY g").fetchall()
    ]
    assert sum(line.strip().startswith("Distinct") for line in own) <= 1
    assert not any("ArrangeBy" in line and "built" in line for line in plan), plan


# -- refusals ------------------------------------------------------------------------------------------------

REFUSED = [  # (query, words of the message, the text the position points into)
    ("SELECT STRING_AGG(s, h) FROM t", "STRING_AGG with a separator that is not a constant text", "h"),
    ("SELECT STRING_AGG(x, ',') FROM t", "STRING_AGG needs text, got DOUBLE", "STRING_AGG(x, ',')"),
    (
        "SELECT STRING_AGG(DISTINCT s, ',' ORDER BY k) FROM t",
        "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list",
        "k",
    ),
    ("SELECT COUNT(DISTINCT g, h) FROM t", "COUNT(DISTINCT ...) of several columns", "COUNT(DISTINCT g, h)"),
    (
        "SELECT SUM(x) FILTER (WHERE COUNT(*) > 1) FROM t",
        "aggregate functions are not allowed in FILTER",
        "COUNT",
    ),
    ("SELECT g, GROUPING(h) FROM t GROUP BY g", "arguments to GROUPING must be grouping expressions", "h"),
    ("SELECT BOOL_AND(x) FROM t", "must be boolean, not DOUBLE", "BOOL_AND(x)"),
    ("SELECT SUM(SUM(x)) FROM t", "aggregate calls cannot be nested", "SUM(SUM(x))"),
    ("SELECT g, RANDOM() FROM t", "function random() is not supported", "RANDOM()"),
    ("SELECT g FROM t GROUP BY g WITH ROLLUP", "GROUP BY ROLLUP is not supported", None),
]


@pytest.mark.parametrize(("sql", "words", "at"), REFUSED, ids=[r[1][:30] for r in REFUSED])
def test_refusals_say_what_and_where(sql, words, at):
    db = ivm.connect()
    db.execute(TABLE)
    for statement in (sql, f"CREATE VIEW v AS {sql}"):
        with pytest.raises(ivm.Error) as err:
            db.execute(statement)
        assert words in err.value.message, err.value.message
        if at is not None:
            start = statement.index(at) + 1
            assert err.value.line == 1 and start <= err.value.col < start + len(at), (statement, err.value)
