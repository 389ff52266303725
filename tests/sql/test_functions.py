"""Functions of numbers and text, IS TRUE/FALSE and IS DISTINCT FROM: views using them equal DuckDB's
recompute after every transaction of a random update stream (NULLs, duplicates, updates, deletes), and bad
arguments give errors naming the function and its position."""

import decimal
import random

import pytest

from sql.errors import SqlError, UnsupportedError
from tests.oracle import commit_and_compare, with_views

DDL = [
    "CREATE TABLE r (k INTEGER PRIMARY KEY, i INTEGER, c INTEGER, d DECIMAL(10,3), f DOUBLE, s VARCHAR, "
    "dt DATE, b BOOLEAN)"
]

EXPRESSIONS = [
    "abs(i)",
    "abs(d)",
    "abs(f)",
    "sign(i)",
    "sign(d)",
    "sign(f)",
    "round(d, 1)",
    "round(d)",
    "round(d, -1)",
    "round(i, -1)",
    "round(f, 1)",
    "floor(d)",
    "ceil(d)",
    "ceiling(f)",
    "floor(f)",
    "greatest(i, 3)",
    "least(d, i)",
    "greatest(i, c, NULL)",
    "least(s, 'b')",
    "greatest(dt, DATE '1995-06-01')",
    "d % 2",
    "d % 0.7",
    "i % -3",
    "s ILIKE 'a%'",
    "s NOT ILIKE '%B%'",
    "trim(s)",
    "ltrim(s)",
    "rtrim(s)",
    "trim(both 'x' from s)",
    "ltrim(s, 'ab')",
    "rtrim(s, 'xb')",
    "replace(s, 'a', 'XY')",
    "replace(s, 'b', '')",
    "position('b' in s)",
    "strpos(s, 'xb')",
    "left(s, 2)",
    "right(s, 2)",
    "left(s, -1)",
    "right(s, -1)",
    "reverse(s)",
    "lpad(s, 6, '*')",
    "rpad(s, 6, 'ab')",
    "lpad(s, 2, '*')",
    "split_part(s, 'b', 2)",
    "split_part(s, ',', -1)",
    "starts_with(s, 'a')",
    "concat(s, '-', i, '/', d)",
    "concat(NULL, s)",
    "s || i",
    "i || s",
    "b IS TRUE",
    "b IS NOT TRUE",
    "b IS FALSE",
    "b IS NOT FALSE",
    "i IS DISTINCT FROM 3",
    "i IS NOT DISTINCT FROM c",
    "(i > 2) IS NOT FALSE",
    "upper(substring(s, 2))",
]

QUERIES = [f"SELECT k, {e} AS v FROM r" for e in EXPRESSIONS] + [
    "SELECT left(s, 1) AS p, count(*) AS n, sum(round(d, 1)) AS t, max(abs(i)) AS m FROM r GROUP BY left(s, 1)",
    "SELECT k FROM r WHERE greatest(i, c) > 2 AND s IS DISTINCT FROM 'abc'",
    "SELECT DISTINCT lower(trim(s)) AS t FROM r",
    "SELECT a.k, b.k AS k2 FROM r a JOIN r b ON a.i IS NOT DISTINCT FROM b.c WHERE a.k < b.k",
]

TEXTS = ["abc", "ABC", " a b ", "xaxbx", "", "bb", "\tab\n", "a,b,c", "ba", "Straat", None]


def _value(rng: random.Random) -> str:
    i = rng.choice(["NULL", *map(str, range(-4, 6))])
    c = rng.choice(["NULL", *map(str, range(-2, 4))])
    d = rng.choice(["NULL", f"{rng.randint(-40000, 40000) / 1000:.3f}", "2.500", "-0.050"])
    f = rng.choice(["NULL", str(rng.randint(-40, 40) / 4), "0.05"])
    s = rng.choice(TEXTS)
    s = "NULL" if s is None else "'" + s.replace("'", "''") + "'"
    dt = rng.choice(["NULL", f"DATE '199{rng.randint(0, 9)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}'"])
    b = rng.choice(["NULL", "TRUE", "FALSE"])
    return f"{i}, {c}, {d}, {f}, {s}, {dt}, {b}"


def _transaction(rng: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 5)):
        p = rng.random()
        if p < 0.55 or not keys:
            k = rng.randint(0, 60)
            if k in keys:
                continue
            keys.add(k)
            out.append(f"INSERT INTO r VALUES ({k}, {_value(rng)})")
        elif p < 0.8:
            k = rng.choice(sorted(keys))
            keys.discard(k)
            out.append(f"DELETE FROM r WHERE k = {k}")
        else:
            k = rng.choice(sorted(keys))
            keys.discard(k)
            out.append(f"DELETE FROM r WHERE k = {k}")
            keys.add(k)
            out.append(f"INSERT INTO r VALUES ({k}, {_value(rng)})")
    return out


@pytest.mark.parametrize("seed", range(3))
def test_functions_equal_duckdb(seed):
    rng = random.Random(seed)
    db, oracle = with_views(DDL, QUERIES)
    keys: set[int] = set()
    for _ in range(12):
        commit_and_compare(db, oracle, _transaction(rng, keys), QUERIES, exact_text=True)


@pytest.mark.parametrize(
    "sql, value",
    [
        (
            "SELECT round(2.5::DECIMAL(4,1)), round(-2.5::DECIMAL(4,1)), round(2.45::DECIMAL(4,2), 1)",
            (3, -3, 2.5),
        ),
        ("SELECT round(15, -1), round(-15, -1), round(14, -1), round(1.5, -20)", (20, -20, 10, 0)),
        (
            "SELECT CAST(CAST(0.00000001 AS DECIMAL(10,8)) AS TEXT), 'x' || CAST(4e-6 AS DECIMAL(10,8))",
            ("0.00000001", "x0.00000400"),
        ),
        ("SELECT floor(-2.5), ceil(-2.5), floor(7), ceil(2.001)", (-3, -2, 7, 3)),
        ("SELECT sign(-2.5), sign(0), abs(-7.25)", (-1, 0, 7.25)),
        ("SELECT 7.5 % 2, -7.5 % 2, 7.5 % -2, NULL % 0", (1.5, -1.5, 1.5, None)),
        ("SELECT greatest(1, NULL, 3), least(NULL, NULL), greatest('abc', 'abd')", (3, None, "abd")),
        ("SELECT trim(' \tx\t '), ltrim('xxaxx', 'x'), rtrim('xxaxx', 'x')", ("\tx\t", "axx", "xxa")),
        ("SELECT replace('abc', '', 'x'), position('' in 'abc'), strpos('abc', 'z')", ("abc", 1, 0)),
        (
            "SELECT left('abcdef', -2), right('abcdef', -2), left('ab', 0), right('ab', 5)",
            ("abcd", "cdef", "", "ab"),
        ),
        (
            "SELECT lpad('abc', 5, 'xy'), lpad('abcdef', 3, 'x'), rpad('abc', 6, 'xy'), lpad('abc', 5)",
            ("xyabc", "abc", "abcxyx", "  abc"),
        ),
        (
            "SELECT split_part('a,b,c', ',', 2), split_part('a,b,c', ',', 5), split_part('a,b,c', ',', -1)",
            ("b", "", "c"),
        ),
        ("SELECT concat(NULL, NULL), concat('a', NULL, 1, 2.50), 'n=' || 3", ("", "a12.50", "n=3")),
        (  # CONCAT writes a truth value as PostgreSQL's output function does, || as CAST does
            "SELECT concat('a', TRUE, NULL, FALSE), concat(1 > 2), 'a' || TRUE, concat(NULL::BOOLEAN, 'x')",
            ("atf", "f", "atrue", "x"),
        ),
        (  # ROUND of a double: half to even, as PostgreSQL's
            "SELECT round(2.5::DOUBLE PRECISION), round(-2.5::DOUBLE PRECISION), round(3.5::DOUBLE PRECISION), "
            "round(0.5::DOUBLE PRECISION + 1)",
            (2.0, -2.0, 4.0, 2.0),
        ),
        (
            "SELECT CAST(2.5::DOUBLE AS INTEGER), CAST(-2.5::DOUBLE AS INTEGER), CAST(3.5::DOUBLE AS INTEGER), "
            "CAST(2.5 AS INTEGER), CAST(-2.5 AS INTEGER)",
            (2, -2, 4, 3, -3),
        ),
        (
            "SELECT CAST(TIMESTAMP '2024-02-29 13:45:12.5' AS VARCHAR), CAST(TIMESTAMP '2024-01-01' AS TEXT)",
            ("2024-02-29 13:45:12.5", "2024-01-01 00:00:00"),
        ),
        (
            "SELECT NULL IS TRUE, NULL IS NOT FALSE, NULL IS DISTINCT FROM NULL, 1 IS DISTINCT FROM NULL",
            (False, True, False, True),
        ),
        (  # NUMERIC division, exact, rounded once (half away from zero)
            "SELECT round(10.05 / 3, 6), round(-0.05 / 3, 6), round(2.5 / 2), round(100.00 / 7, 3), "
            "round(7 / 2.0)",
            (decimal.Decimal("3.350000"), decimal.Decimal("-0.016667"), 1, decimal.Decimal("14.286"), 4),
        ),
        (
            "SELECT CAST((TIMESTAMP '2024-03-10 06:30:00' AT TIME ZONE 'UTC') AT TIME ZONE 'America/New_York' "
            "AS TEXT), "
            "CAST((TIMESTAMP '2024-07-01 12:00:00' AT TIME ZONE 'UTC') AT TIME ZONE 'Europe/Berlin' AS TEXT)",
            ("2024-03-10 01:30:00", "2024-07-01 14:00:00"),
        ),
        (
            "SELECT 'Hello' ILIKE 'h%', 'Hello' NOT ILIKE 'H_LLO', abs(NULL), upper(NULL)",
            (True, False, None, None),
        ),
    ],
)
def test_function_values(sql, value):
    import ivm

    db = ivm.connect()
    (row,) = db.execute(sql).fetchall()
    assert len(row) == len(value)
    for got, want in zip(row, value, strict=True):
        if want is None or isinstance(want, (bool, str)):
            assert got == want and type(got) is type(want), (sql, row)
        else:
            assert decimal.Decimal(str(got)) == decimal.Decimal(str(want)), (sql, row)


@pytest.mark.parametrize(
    "sql, error, message",
    [
        ("SELECT replace(s, s, 'x') FROM r", UnsupportedError, "REPLACE needs a constant text here"),
        ("SELECT left(s, i) FROM r", UnsupportedError, "LEFT needs a constant integer here"),
        ("SELECT round(d, i) FROM r", UnsupportedError, "ROUND needs a constant integer here"),
        ("SELECT lpad(s, 3, s) FROM r", UnsupportedError, "LPAD/RPAD needs a constant text here"),
        ("SELECT concat_ws(s, i) FROM r", UnsupportedError, "CONCAT_WS needs a constant text here"),
        ("SELECT concat_ws('-') FROM r", SqlError, "CONCAT_WS needs a separator and a value to join"),
        ("SELECT repeat(s, i) FROM r", UnsupportedError, "REPEAT needs a constant integer here"),
        ("SELECT abs(s) FROM r", SqlError, "ABS needs a number, got VARCHAR"),
        ("SELECT length(i) FROM r", SqlError, "LENGTH needs text, got"),
        ("SELECT greatest(i, s) FROM r", SqlError, "incompatible types"),
        ("SELECT split_part(s, ',', 0) FROM r", SqlError, "field position must not be zero"),
        ("SELECT substring(s, 1, -1) FROM r", SqlError, "negative substring length"),
        ("SELECT i || c FROM r", UnsupportedError, "|| needs text"),
        ("SELECT s ~ s FROM r", UnsupportedError, "~ needs a constant pattern"),
        ("SELECT s ILIKE s FROM r", UnsupportedError, "ILIKE needs a constant pattern"),
        ("SELECT i IS TRUE FROM r", SqlError, "must be boolean"),
        (
            "SELECT (dt AT TIME ZONE 'UTC') AT TIME ZONE 'Europe/Paris' FROM r",
            UnsupportedError,
            "TIMESTAMP AT TIME ZONE 'Europe/Paris' is not supported",
        ),
    ],
)
def test_function_errors(sql, error, message):
    db, _ = with_views(DDL, [])
    db.execute("INSERT INTO r VALUES (1, 2, 3, 4.5, 0.5, 'abc', DATE '1995-01-01', TRUE)")
    with pytest.raises(error, match=message.replace("|", r"\|")) as info:
        db.execute(f"CREATE VIEW bad AS\n  {sql}")
    assert info.value.line == 2 and info.value.col is not None
    assert "bad" not in db.catalog.views
    assert db.execute("SELECT count(*) FROM r").fetchall() == [(1,)]


def test_cast_too_wide_for_its_decimal_puts_the_view_in_error_until_the_row_goes():
    db, _ = with_views(DDL, ["SELECT k, CAST(f AS DECIMAL(5,2)) AS v FROM r", "SELECT k FROM r"])
    db.execute("INSERT INTO r VALUES (1, 2, 3, 4.5, 999.994, 'abc', NULL, NULL)")
    assert db.execute("SELECT * FROM v0").fetchall() == [(1, decimal.Decimal("999.99"))]
    db.execute("INSERT INTO r VALUES (2, 2, 3, 4.5, 999.995, 'abc', NULL, NULL)")
    assert sorted(db.execute("SELECT * FROM v1").fetchall()) == [(1,), (2,)]  # the others go on
    with pytest.raises(SqlError, match=r"view 'v0' is in error.*does not fit in DECIMAL\(5,2\)"):
        db.execute("SELECT * FROM v0")
    db.execute("DELETE FROM r WHERE k = 2")
    assert db.execute("SELECT * FROM v0").fetchall() == [(1, decimal.Decimal("999.99"))]
    with pytest.raises(SqlError, match="does not fit"):
        db.execute("SELECT CAST(1000 AS DECIMAL(3,1))")
