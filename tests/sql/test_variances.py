"""Variances and standard deviations (``VARIANCE``, ``VAR_SAMP``, ``VAR_POP``, ``STDDEV``, ``STDDEV_SAMP``,
``STDDEV_POP``) as PostgreSQL computes them: views over integers, doubles and decimals with NULLs and
duplicates follow random transactions; NaN, infinities and overflow as PostgreSQL treats them; precision
where the values are far from zero and close together; and the refusals, with their messages and
positions."""

from __future__ import annotations

import math
import random
import shutil

import pytest

import ivm
from ivm.errors import DataError, NotSupportedError, ProgrammingError
from tests.pg import comparable, error_at, literal, postgres, views_follow

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER, a BIGINT, x DOUBLE PRECISION, n NUMERIC(12, 3))"

VIEWS = [
    "SELECT g, VARIANCE(a), VAR_SAMP(x), VAR_POP(n), STDDEV(a), STDDEV_SAMP(n), STDDEV_POP(x) FROM t "
    "GROUP BY g",
    "SELECT VAR_POP(a), STDDEV(x), VAR_SAMP(n), COUNT(*) FROM t",
    "SELECT g, VAR_SAMP(DISTINCT a), STDDEV_POP(DISTINCT x) FROM t GROUP BY g",
    "SELECT g, VAR_SAMP(a) FILTER (WHERE x > 0), STDDEV_SAMP(x) FILTER (WHERE a % 2 = 0) FROM t GROUP BY g",
    "SELECT g, STDDEV_SAMP(x * 2 + g) FROM t GROUP BY ROLLUP (g)",
    "SELECT g FROM t GROUP BY g HAVING VAR_POP(a) > 100",
    "SELECT t.id, t.a FROM t WHERE t.a > (SELECT STDDEV_POP(u.a) FROM t AS u WHERE u.g = t.g)",
    "SELECT g, VAR_SAMP(a) * 2 AS w, SUM(a) FROM t WHERE a > 0 GROUP BY g",
]


def _value(rng: random.Random, kind: str):
    if rng.random() < 0.15:
        return None
    if kind == "a":
        return rng.choice([rng.randint(-50, 50), rng.randint(-50, 50), 10**15 + rng.randint(0, 9)])
    if kind == "x":
        return rng.choice([rng.uniform(-10, 10), float(rng.randint(0, 3)), 100 + rng.random()])
    return round(rng.uniform(-1000, 1000), 3)


def _transaction(rng: random.Random) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 4)):
        key = rng.randint(1, 30)
        g = rng.choice([1, 2, 3, None])
        kind = rng.random()
        if kind < 0.5:
            values = ", ".join(
                literal(v) for v in (key, g, _value(rng, "a"), _value(rng, "x"), _value(rng, "n"))
            )
            out.append(f"INSERT INTO t VALUES ({values}) ON CONFLICT (id) DO NOTHING")
        elif kind < 0.75:
            out.append(f"DELETE FROM t WHERE id = {key}")
        else:
            a, x = literal(_value(rng, "a")), literal(_value(rng, "x"))
            out.append(f"UPDATE t SET a = {a}, x = {x} WHERE id = {key}")
    return out


def _close(rows) -> list:
    """Rows comparable across ivm's doubles and PostgreSQL's numerics: numbers to 9 significant digits (the
    variances of values near 1e15 agree to about that many), or to 1e-6 near zero."""

    def cell(v):
        if isinstance(v, int) and not isinstance(v, bool):
            v = float(v)  # (PostgreSQL's SUM of BIGINT is a NUMERIC)
        if isinstance(v, float) and math.isfinite(v):
            return 0.0 if abs(v) < 1e-6 else float(f"{v:.9g}")
        return v

    return [tuple(cell(v) for v in r) for r in comparable(rows)]


@pytest.fixture(scope="module")
def pg():
    for conn in postgres():
        conn.execute(TABLE)
        yield conn


@pytest.mark.parametrize("seed", [1, 2])
def test_variance_views_follow_their_table_as_postgresql_answers(pg, seed):
    rng = random.Random(seed)
    db = ivm.connect()
    db.execute(TABLE)
    views_follow(pg, db, VIEWS, lambda: _transaction(rng), _close, steps=25)


def test_nan_infinities_and_overflow_as_in_postgresql(pg):
    db = ivm.connect()
    cases = [
        ("VALUES ('NaN'::float8), (1)", "VAR_POP", [(math.nan,)]),
        ("VALUES ('Infinity'::float8)", "VAR_POP", [(math.nan,)]),
        ("VALUES ('Infinity'::float8)", "VAR_SAMP", [(None,)]),
        ("VALUES ('-Infinity'::float8), (2), (3)", "STDDEV", [(math.nan,)]),
        ("VALUES ('1e-200'::float8), ('-1e-200')", "VAR_SAMP", [(0.0,)]),
        ("VALUES (5::bigint)", "STDDEV_POP", None),
        ("VALUES (5::bigint)", "STDDEV_SAMP", [(None,)]),
    ]
    for rows, func, want in cases:
        sql = f"SELECT {func}(c) FROM ({rows}) AS s(c)"
        got = db.execute(sql).fetchall()
        theirs = [tuple(float(v) if v is not None else None for v in r) for r in pg.execute(sql).fetchall()]
        assert repr(got) == repr(theirs), (sql, got, theirs)
        if want is not None:
            assert repr(got) == repr(want)
    for rows in ("VALUES ('1e308'::float8), ('1e308')", "VALUES ('1e200'::float8), ('-1e200')"):
        sql = f"SELECT VAR_SAMP(c) FROM ({rows}) AS s(c)"
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            pg.execute(sql)
        with pytest.raises(DataError, match="value out of range: overflow"):
            db.execute(sql)


def test_a_group_in_overflow_is_in_error_until_its_rows_leave():
    db = ivm.connect()
    db.execute("CREATE TABLE d (k INTEGER PRIMARY KEY, g INTEGER, x DOUBLE PRECISION)")
    db.execute("CREATE VIEW v AS SELECT g, VAR_POP(x) FROM d GROUP BY g")
    db.execute("INSERT INTO d VALUES (1, 1, 1e200), (2, 1, -1e200), (3, 2, 4), (4, 2, 6)")
    with pytest.raises(DataError, match="value out of range: overflow"):
        db.execute("SELECT * FROM v")
    db.execute("DELETE FROM d WHERE k = 2")
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [(1, 0.0), (2, 1.0)]


def test_values_far_from_zero_and_close_together_keep_their_spread():
    """Two passes (the mean, then the deviations from it) keep what a running sum of squares would lose to
    cancellation: values near 1e9 that differ by 1."""
    db = ivm.connect()
    db.execute("CREATE TABLE d (k INTEGER PRIMARY KEY, x DOUBLE PRECISION, a BIGINT)")
    db.execute("CREATE VIEW v AS SELECT VAR_SAMP(x), VAR_POP(a), STDDEV_SAMP(x) FROM d")
    base = 1e9
    db.execute(
        "INSERT INTO d VALUES (1, %s, %s), (2, %s, %s), (3, %s, %s)",
        (base, 10**17, base + 1, 10**17 + 1, base + 2, 10**17 + 2),
    )
    assert db.execute("SELECT * FROM v").fetchall() == [(1.0, 2 / 3, 1.0)]
    db.execute("DELETE FROM d WHERE k = 3")
    assert db.execute("SELECT * FROM v").fetchall() == [(0.5, 0.25, math.sqrt(0.5))]


@pytest.mark.parametrize(
    ("sql", "error", "words", "at"),
    [
        (
            "SELECT STDDEV(a) OVER (PARTITION BY g) FROM t",
            NotSupportedError,
            "STDDEV() as a window function is not supported",
            "STDDEV(a)",
        ),
        (
            "SELECT VAR_POP(x) OVER () FROM t",
            NotSupportedError,
            "VAR_POP() as a window function is not supported",
            "VAR_POP(x)",
        ),
        ("SELECT VARIANCE(b) FROM w", ProgrammingError, "VAR_SAMP needs numbers, got TEXT", "VARIANCE(b)"),
        (
            "SELECT STDDEV_POP(INTERVAL '1 day') FROM w",
            NotSupportedError,
            "STDDEV_POP of intervals is not supported",
            "STDDEV_POP",
        ),
    ],
)
def test_refusals_say_what_and_where(sql, error, words, at):
    db = ivm.connect()
    db.execute(TABLE)
    db.execute("CREATE TABLE w (b TEXT)")
    error_at(db, sql, error, words, at)
