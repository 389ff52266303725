"""-0.0 as PostgreSQL keeps it: SUM of DOUBLE PRECISION values that are all -0.0 is -0.0 (its SUM starts
from the first value, and -0.0 + -0.0 is -0.0; any other value makes a zero sum 0), AVG of them is 0 (it adds
to 0), a row holding -0.0 shows -0 and text writes it ``-0``. Views keep this through insertions, deletions
and updates that move a group between only -0.0 and a mix, since ivm holds -0.0 and 0.0 as two values that
are equal. Every answer is compared with a throwaway PostgreSQL's, with the sign of each zero and the type.
"""

from __future__ import annotations

import doctest
import math
import shutil

import pytest

import ivm
import sql.types
from ivm.errors import NotSupportedError

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLE = "CREATE TABLE z (id INTEGER PRIMARY KEY, g INTEGER, x DOUBLE PRECISION)"

VIEWS = [
    # a running state per group (SUM, AVG, COUNT are linear), and the general reduce (MIN re-reads its group)
    "SELECT g, sum(x) AS s, avg(x) AS a, count(x) AS n FROM z GROUP BY g",
    "SELECT g, sum(x) AS s, min(id) AS m FROM z GROUP BY g",
    "SELECT sum(x) AS s, avg(x) AS a FROM z",
    "SELECT g, sum(x)::text AS t, sum(-x) AS neg FROM z GROUP BY g",
    "SELECT g, sum(x) AS s FROM z WHERE x = 0 GROUP BY g HAVING count(*) > 0",
    "SELECT g, sum(x) AS s FROM z GROUP BY g ORDER BY g LIMIT 3",
    # the rows themselves, and their text
    "SELECT id, x, x::text AS t, x || '|' AS joined FROM z",
    "SELECT x, x::text AS t FROM z WHERE g = 2",
]

STEPS = [
    "INSERT INTO z VALUES (1, 1, '-0'), (2, 1, '-0'), (3, 2, '0'), (4, 2, '-0'), (5, 3, '-0'), (6, 3, NULL), "
    "(7, 4, NULL)",
    "DELETE FROM z WHERE id = 3",  # group 2: only -0.0
    "INSERT INTO z VALUES (8, 2, '0')",  # a mix again
    "UPDATE z SET x = '-0' WHERE id = 8",  # only -0.0: a change of sign alone
    "UPDATE z SET x = 0 WHERE id = 4",
    "DELETE FROM z WHERE id IN (4, 8)",
    "INSERT INTO z VALUES (9, 2, 1), (10, 2, -1), (11, 2, '-0')",  # a zero sum of other values: 0
    "DELETE FROM z WHERE id IN (9, 10)",
    # in and out within one transaction: group 1 stays -0.0
    "BEGIN; INSERT INTO z VALUES (12, 1, 0); UPDATE z SET x = 0 WHERE id = 1; "
    "UPDATE z SET x = '-0' WHERE id = 1; DELETE FROM z WHERE id = 12; COMMIT",
    "UPDATE z SET x = 0 WHERE id = 11",
    "UPDATE z SET x = '-0' WHERE id = 11",
    "UPDATE z SET g = 1",
    "INSERT INTO z VALUES (13, 1, 5e-324), (14, 1, -5e-324)",
    "DELETE FROM z WHERE id = 13",  # -5e-324: a negative sum, and AVG of -5e-324 and zeros is -0
    "DELETE FROM z WHERE id = 14",
]

_NAMES = {"float8": "double", "int4": "integer", "int8": "bigint"}


def _signed(rows: list[tuple]) -> list[tuple]:
    """Rows with each double written with its sign (``-0.0`` apart from ``0.0``), in a stable order."""

    def cell(v):
        return ("-0.0" if math.copysign(1, v) < 0 else "0.0") if isinstance(v, float) and v == 0 else v

    return sorted((tuple(cell(v) for v in r) for r in rows), key=repr)


def _pg(pg, sql: str):
    cur = pg.execute(sql)
    return [_NAMES.get(d.type_display, d.type_display) for d in cur.description], _signed(cur.fetchall())


def _ivm(db, sql: str):
    cur = db.execute(sql)
    return [d[1].lower() for d in cur.description], _signed(cur.fetchall())


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres_with

    yield from postgres_with(TABLE, "SELECT %s", [])


def test_sums_of_negative_zeros_through_changes_as_postgresql(pg):
    """Each view, read after each step, and the same query run afresh, against PostgreSQL's answer."""
    db = ivm.connect()
    db.execute(TABLE)
    for i, q in enumerate(VIEWS):
        db.execute(f"CREATE MATERIALIZED VIEW v{i} AS {q}")
    pg.execute("TRUNCATE z")
    for step in STEPS:
        db.execute(step)
        pg.execute(step)
        for i, q in enumerate(VIEWS):
            want = _pg(pg, q)
            assert _ivm(db, f"SELECT * FROM v{i}")[1] == want[1], (step, q)
            assert _ivm(db, q) == want, (step, q)


def test_a_sum_of_negative_zeros_alone_is_minus_zero_and_written_so(pg):
    pg.execute("TRUNCATE z")
    db = ivm.connect()
    db.execute(TABLE)
    rows = "(1, 1, '-0'), (2, 1, '-0'), (3, 2, '-0'), (4, 2, 0), (5, 3, NULL), (6, 4, '-0'), (7, 4, NULL)"
    for conn in (db, pg):
        conn.execute(f"INSERT INTO z VALUES {rows}")
    for q in [
        "SELECT g, sum(x), avg(x) FROM z GROUP BY g",
        "SELECT g, sum(x)::text, avg(x)::text, sum(x) || '' FROM z GROUP BY g",
        "SELECT sum(x), avg(x) FROM z WHERE g <> 2",
        "SELECT sum(x) FROM z WHERE g = 2",
        "SELECT sum(x) FROM z WHERE x IS NULL",
        "SELECT x::text, -x, (-x)::text, x * 1, x + 0 FROM z WHERE id IN (1, 4)",
    ]:
        assert _ivm(db, q) == _pg(pg, q), q
    assert db.execute("SELECT g, sum(x)::text FROM z WHERE g = 1 GROUP BY g").fetchall() == [(1, "-0")]


def test_constants_are_negated_in_their_own_type_before_they_are_assigned(pg):
    """``-0`` and ``-0.0`` are an INTEGER and a NUMERIC zero, which have no sign: a DOUBLE PRECISION column
    gets 0 from them, and -0 from ``-0.0::float8`` (a double negated) and from a float parameter -0.0; a double
    assigned to an INTEGER column rounds half to even, a NUMERIC half away from zero."""
    table = "CREATE TABLE c (id INTEGER PRIMARY KEY, x DOUBLE PRECISION, n DECIMAL(5,2), i INTEGER)"
    values = (
        "(1, -0.0, -0.0, -2.5), (2, -0.0::float8, -0.0::float8, -2.5::float8), (3, -0, -0, -0), "
        "(4, -1.5, -1.505, 2.5::float8), (5, 3.5::float8, 1, 3.5), (6, -0::float8, 0, -3.5::double precision)"
    )
    db = ivm.connect()
    pg.execute("DROP TABLE IF EXISTS c")
    for conn in (db, pg):
        conn.execute(table)
        conn.execute(f"INSERT INTO c VALUES {values}")
    params = [(7, -0.0, -0.0, 2.5), (8, 0.0, 0.0, -2.5), (9, -1.5, -1.505, -3.5)]  # as psycopg passes them
    for conn in (db, pg):
        for row in params:
            conn.execute("INSERT INTO c VALUES (%s, %s, %s, %s)", row)
        conn.execute("UPDATE c SET x = %s WHERE id = 8", (-0.0,))
    q = "SELECT id, x, x::text, n::text, i FROM c"
    assert _ivm(db, q)[1] == _pg(pg, q)[1]


def test_keys_of_negative_zeros(pg):
    """-0.0 and 0.0 are one key (GROUP BY, DISTINCT, joins, primary keys) yet two values: a group whose rows
    are all -0.0 shows -0, as in PostgreSQL; one mixing both shows 0 (PostgreSQL shows the zero of whichever
    row it met first, so either may be its answer)."""
    pg.execute("TRUNCATE z")
    db = ivm.connect()
    db.execute(TABLE)
    keys = ["SELECT x, count(*) AS n, sum(x) AS s FROM z GROUP BY x", "SELECT DISTINCT x FROM z"]
    for i, q in enumerate(keys):
        db.execute(f"CREATE MATERIALIZED VIEW k{i} AS {q}")
    for step, mixed in [
        ("INSERT INTO z VALUES (1, 1, '-0'), (2, 1, '-0'), (3, 1, 1)", False),
        ("INSERT INTO z VALUES (4, 1, 0)", True),
        ("DELETE FROM z WHERE id = 4", False),
        ("UPDATE z SET x = 0 WHERE id IN (1, 2)", False),
        ("UPDATE z SET x = '-0' WHERE id = 1", True),
        ("UPDATE z SET x = '-0' WHERE id = 2", False),
    ]:
        db.execute(step)
        pg.execute(step)
        for i, q in enumerate(keys):
            got, want = _ivm(db, f"SELECT * FROM k{i}")[1], _pg(pg, q)[1]
            if mixed:  # PostgreSQL's zero is either; ivm's is 0
                want = sorted((({"-0.0": "0.0"}.get(r[0], r[0]), *r[1:]) for r in want), key=repr)
            assert got == want, (step, q)
    # a join matches -0.0 with 0.0, each row keeping its own zero
    q = "SELECT a.id, b.id, a.x, b.x FROM z a JOIN z b ON a.x = b.x AND a.id < b.id"
    assert _ivm(db, q) == _pg(pg, q)
    # and a primary key of doubles holds one of them
    for conn in (db, pg):
        conn.execute("CREATE TABLE pk (x DOUBLE PRECISION PRIMARY KEY)")
        conn.execute("INSERT INTO pk VALUES ('-0')")
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg.execute("INSERT INTO pk VALUES (0)")
    with pytest.raises(ivm.IntegrityError, match="duplicate key"):
        db.execute("INSERT INTO pk VALUES (0)")
    pg.execute("DROP TABLE pk")


def test_real_is_refused_where_postgresql_sums_float4(pg):
    """SUM of REAL values that are all -0.0 is a REAL -0 in PostgreSQL; ivm holds no 4-byte floats."""
    cur = pg.execute("SELECT sum(x::real), pg_typeof(sum(x::real))::text FROM (VALUES ('-0'::float8)) v(x)")
    assert _signed(cur.fetchall()) == [("-0.0", "real")]
    db = ivm.connect()
    db.execute(TABLE)
    with pytest.raises(NotSupportedError, match="4-byte float"):
        db.execute("SELECT sum(x::real) FROM z")
    with pytest.raises(NotSupportedError, match="4-byte float"):
        db.execute("CREATE TABLE r (x REAL)")


def test_doubles_are_written_as_postgresql_writes_them(pg):
    """Text of doubles (CAST, ``||``) as float8out: shortest digits, no trailing ``.0``, exponents from 1e15 and
    below 1e-4 with two digits at least, -0 with its sign."""
    values = ["-0", "0", "1", "100", "1e15", "999999999999999", "123456789012345678", "0.0001", "1e-5"]
    values += ["-0.00012", "0.1", "1.5", "5e-324", "1.7976931348623157e308", "NaN", "-Infinity", "2.5e-308"]
    pg.execute("TRUNCATE z")
    db = ivm.connect()
    db.execute(TABLE)
    rows = ", ".join(f"({i}, 1, '{v}')" for i, v in enumerate(values))
    for conn in (db, pg):
        conn.execute(f"INSERT INTO z VALUES {rows}")
    q = "SELECT id, x::text, CAST(x AS VARCHAR), x || '' FROM z"
    assert _ivm(db, q)[1] == _pg(pg, q)[1]
    assert doctest.testmod(sql.types).failed == 0
