"""SQRT, CBRT, EXP, LN, LOG, POWER/POW, TRUNC, MOD, SIGN, FLOOR, CEIL and ROUND (of a double half to even, of
NUMERIC half away from zero) against a real PostgreSQL: the
same values and types (of Python's reading: int, float or Decimal), row by row, as queries and as views; and
the values PostgreSQL has no answer for fail with its message, as a query, as a view being created, and as
rows entering a view (which is in error until they leave)."""

import decimal
import math

import pytest

import ivm
from tests.pg import postgres_with

TABLE = "CREATE TABLE r (k INTEGER PRIMARY KEY, i INTEGER, d DECIMAL(10,3), f DOUBLE PRECISION)"
ROWS = [
    (1, 4, decimal.Decimal("2.555"), 2.0),
    (2, -3, decimal.Decimal("-1.250"), -8.0),
    (3, 0, decimal.Decimal("0"), 0.0),
    (4, None, None, None),
    (5, 17, decimal.Decimal("123.456"), 0.1),
    (6, 1, decimal.Decimal("-0.004"), -0.0),
    (7, 2, decimal.Decimal("9.999"), 1e300),
    (8, 5, decimal.Decimal("2.500"), 2.5),  # halves: ROUND of a double rounds them to even, of NUMERIC away
    (9, -5, decimal.Decimal("-0.500"), -0.5),
    (10, 3, decimal.Decimal("3.450"), -3.5),
    (11, 1, decimal.Decimal("1"), math.nan),  # NaN: greater than every number, SIGN 0
]

# value and type as PostgreSQL's
SAME = [
    "sqrt(abs(f))",
    "sqrt(i * i)",
    "cbrt(i)",
    "exp(i)",
    "exp(least(f, 5))",
    "ln(abs(i) + 1)",
    "ln(abs(f) + 1)",
    "log(abs(f) + 1)",
    "log(abs(i) + 1)",
    "power(least(f, 10), 2)",
    "pow(i, 3)",
    "power(2, i)",
    "power(least(abs(f), 100), 0.5 + i)",
    "power(-2, i)",
    "trunc(f)",
    "trunc(i)",
    "trunc(d)",
    "trunc(d, 1)",
    "trunc(d, 2)",
    "trunc(d, 5)",
    "trunc(d, -1)",
    "trunc(i, 2)",
    "trunc(i, -1)",
    "mod(i, 3)",
    "mod(i, -3)",
    "mod(d, 0.7)",
    "mod(i, d + 10)",
    "i % 2",
    "sign(i)",
    "sign(f)",
    "sign(d)",
    "floor(i)",
    "ceil(i)",
    "floor(f / 3)",
    "round(i)",
    "round(i, 1)",
    "round(i, -1)",
    "round(f)",
    "round(-f)",
    "round(f * 3)",
    "round(i / 2.0)",
    "round(d)",
    "round(d, 1)",
    "round(CAST(d AS DOUBLE PRECISION))",
    "CASE WHEN f > 0 THEN ln(f) END",
    "CASE WHEN i >= 0 THEN sqrt(i) ELSE -1 END",
]
# PostgreSQL computes these in NUMERIC; ivm in DOUBLE PRECISION (README's known differences): values only
AS_DOUBLE = ["log(2, abs(i) + 1)", "log(10, abs(d) + 1)", "sqrt(abs(d))", "exp(d / 100)", "ln(abs(d) + 1)"]

ERRORS = [  # (expression, the row (i, d, f), PostgreSQL's message)
    ("sqrt(f)", (1, 1, -1.0), "cannot take square root of a negative number"),
    ("sqrt(i)", (-4, 1, 1.0), "cannot take square root of a negative number"),
    ("ln(f)", (1, 1, 0.0), "cannot take logarithm of zero"),
    ("ln(f)", (1, 1, -2.0), "cannot take logarithm of a negative number"),
    ("log(f)", (1, 1, 0.0), "cannot take logarithm of zero"),
    ("log(i)", (-1, 1, 1.0), "cannot take logarithm of a negative number"),
    ("log(i, 8)", (0, 1, 1.0), "cannot take logarithm of zero"),
    ("log(i, 8)", (1, 1, 1.0), "division by zero"),
    ("log(2, i)", (-1, 1, 1.0), "cannot take logarithm of a negative number"),
    ("log(d, 2)", (1, -1, 1.0), "cannot take logarithm of a negative number"),
    ("exp(f)", (1, 1, 1000.0), "value out of range: overflow"),
    ("exp(f)", (1, 1, -1000.0), "value out of range: underflow"),
    ("power(f, -1)", (1, 1, 0.0), "zero raised to a negative power is undefined"),
    ("power(f, 0.5)", (1, 1, -8.0), "a negative number raised to a non-integer power yields a complex result"),
    ("power(f, 400)", (1, 1, 10.0), "value out of range: overflow"),
    ("power(f, -400)", (1, 1, 10.0), "value out of range: underflow"),
    ("mod(i, 0)", (5, 1, 1.0), "division by zero"),
    ("mod(d, i)", (0, 1, 1.0), "division by zero"),
]


@pytest.fixture(scope="module")
def pg():
    gen = postgres_with(TABLE, "INSERT INTO r VALUES (%s, %s, %s, %s)", ROWS)
    yield next(gen)
    gen.close()


@pytest.fixture(scope="module")
def db():
    conn = ivm.connect()
    conn.execute(TABLE)
    conn.cursor().executemany("INSERT INTO r VALUES (%s, %s, %s, %s)", ROWS)
    return conn


def _same(a, b, exact_type: bool) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if exact_type and type(a) is not type(b):
        return False
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=1e-14)  # cbrt and pow: libm's last digit may differ
    return a == b


@pytest.mark.parametrize("expr", SAME + AS_DOUBLE)
def test_values_and_types_are_postgresql_s(pg, db, expr):
    sql = f"SELECT k, {expr} FROM r ORDER BY k"
    want = pg.execute(sql).fetchall()
    for got in (db.execute(sql).fetchall(), _through_view(db, expr)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert _same(g[1], w[1], expr not in AS_DOUBLE), (
                f"{expr} at k={g[0]}: {g[1]!r}, PostgreSQL {w[1]!r}"
            )


def _through_view(db, expr: str) -> list[tuple]:
    name = f"v{abs(hash(expr))}"
    db.execute(f"CREATE VIEW {name} AS SELECT k, {expr} AS v FROM r")
    return sorted(db.execute(f"SELECT * FROM {name}").fetchall(), key=lambda r: r[0])


@pytest.mark.parametrize(("expr", "row", "message"), ERRORS, ids=[f"{e}-{m[:20]}" for e, _, m in ERRORS])
def test_values_without_an_answer_fail_with_postgresql_s_message(pg, expr, row, message):
    import psycopg

    with pytest.raises(psycopg.Error) as err:
        pg.execute(f"SELECT {expr} FROM (SELECT %s::integer AS i, %s::numeric AS d, %s::float8 AS f) x", row)
    assert str(err.value).splitlines()[0] == message  # the message checked here is PostgreSQL's own
    conn = ivm.connect()
    conn.execute(TABLE)
    conn.execute("CREATE VIEW fine AS SELECT k, " + expr + " AS v FROM r")
    conn.execute("INSERT INTO r VALUES (1, %s, %s, %s)", row)
    with pytest.raises(ivm.DataError, match=message):  # a one-shot query
        conn.execute(f"SELECT {expr} FROM r")
    with pytest.raises(ivm.DataError, match=message):  # the view holding the row is in error
        conn.execute("SELECT * FROM fine")
    with pytest.raises(ivm.DataError, match=message):  # a view over the row is not created
        conn.execute(f"CREATE VIEW bad AS SELECT {expr} AS v FROM r")
    conn.execute("DELETE FROM r WHERE k = 1")
    assert conn.execute("SELECT * FROM fine").fetchall() == []  # and recovers when the row leaves


def test_postgresql_s_refusals_are_refused_by_name():
    conn = ivm.connect()
    conn.execute(TABLE)
    for sql, words, at in [
        ("SELECT log(f, 2) FROM r", "function log(double precision, integer) does not exist", 8),
        ("SELECT trunc(f, 1) FROM r", "function trunc(double precision, integer) does not exist", 8),
        ("SELECT k,  random() FROM r", "function random() is not supported", 12),
        ("SELECT sqrt('a') FROM r", "SQRT needs a number, got TEXT", 8),
    ]:
        with pytest.raises(ivm.Error) as err:
            conn.execute(sql)
        assert words in err.value.message and (err.value.line, err.value.col) == (1, at), (sql, err.value)
