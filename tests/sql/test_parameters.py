"""Statements with parameters (``%s``, ``?``, ``%(name)s``, ``$n``): values bound as typed constants, wrong
counts and missing names refused, and a statement text parsed once and reused (a prepared statement) giving
the same answers as parsing it anew."""

import datetime as dt
import decimal

import pytest

import ivm
from ivm.errors import ProgrammingError


@pytest.fixture
def db():
    db = ivm.connect()
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, s VARCHAR, d DECIMAL(8,2), day DATE)")
    db.execute("CREATE VIEW v AS SELECT count(*) AS n, sum(d) AS total FROM t")
    return db


def test_every_placeholder_style_binds_its_values(db):
    db.execute(
        "INSERT INTO t VALUES (%s, %s, %s, %s)", (1, "a%s", decimal.Decimal("1.50"), dt.date(2024, 1, 2))
    )
    db.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (2, "it's", 2, None))
    db.execute("INSERT INTO t VALUES (%(id)s, %(s)s, %(d)s, NULL)", {"id": 3, "s": "%(x)s", "d": 0.25})
    db.execute("INSERT INTO t VALUES ($2, $1, $2, NULL)", ("b", 4))
    assert db.execute("SELECT * FROM t ORDER BY id").fetchall() == [
        (1, "a%s", decimal.Decimal("1.50"), dt.date(2024, 1, 2)),
        (2, "it's", decimal.Decimal("2.00"), None),
        (3, "%(x)s", decimal.Decimal("0.25"), None),
        (4, "b", decimal.Decimal("4.00"), None),
    ]
    ends_with_s = [("a%s",), ("it's",), ("%(x)s",)]  # %% is one %
    assert db.execute("SELECT s FROM t WHERE s LIKE '%%s' ORDER BY id", ()).fetchall() == ends_with_s


def test_placeholders_written_without_spaces_between_them_bind(db):
    """``%s,%s`` (as clients write them) and ``$1,$2`` are not read as the start of a dollar-quoted string;
    ``$1,$2`` inside strings, dollar-quoted ones too, is text."""
    db.execute("INSERT INTO t VALUES (%s,%s,%s,NULL)", (1, "a$b", 2))
    db.execute("INSERT INTO t VALUES (?,?,?,NULL)", (2, "$c$", 3))
    db.execute("INSERT INTO t VALUES (%(id)s,%(s)s,%(id)s,NULL)", {"id": 3, "s": "$"})
    db.execute("INSERT INTO t VALUES ($1,$2,$1,NULL),(5,'$1,$2',$3,NULL)", (4, "$1,$2", 6))
    assert db.execute("SELECT id,s,d FROM t WHERE id IN (%s,%s,%s) ORDER BY id", (1, 2, 3)).fetchall() == [
        (1, "a$b", decimal.Decimal("2.00")),
        (2, "$c$", decimal.Decimal("3.00")),
        (3, "$", decimal.Decimal("3.00")),
    ]
    assert db.execute(
        "SELECT id,s FROM t WHERE id IN ($1,$2) OR s = $q$$1,$2$q$ ORDER BY id", (4, 9)
    ).fetchall() == [
        (4, "$1,$2"),
        (5, "$1,$2"),
    ]


def test_a_statement_reused_with_other_values_answers_for_those_values(db):
    for i in range(20):
        db.execute("INSERT INTO t (id, d) VALUES (%s, %s)", (i, i))
    for i in range(0, 20, 2):
        db.execute("UPDATE t SET d = %s WHERE id = %s", (i * 10, i))
    for i in range(0, 20, 5):
        db.execute("DELETE FROM t WHERE id = %s", (i,))
    rows = dict(db.execute("SELECT id, d FROM t").fetchall())
    want = {i: decimal.Decimal(i * 10 if i % 2 == 0 else i) for i in range(20) if i % 5}
    assert rows == want
    assert db.execute("SELECT * FROM v").fetchall() == [(len(want), sum(want.values()))]
    assert db.execute("SELECT count(*) FROM t WHERE id < %s", (10,)).fetchall() == [(8,)]
    assert db.execute("SELECT count(*) FROM t WHERE id < %s", (3,)).fetchall() == [(2,)]


@pytest.mark.parametrize(
    "sql, params, words",
    [
        ("SELECT %s, %s", (1,), "the statement uses parameter $2, but 1 were given"),
        ("SELECT %s", (1, 2), "the statement uses 1 parameters, but 2 were given"),
        ("SELECT %(a)s", {"b": 1}, "no value given for the parameter %(a)s"),
        ("SELECT 1", "x", "parameters must be a sequence or a mapping"),
        ("SELECT $1", None, "a parameter placeholder, but no parameters were given"),
    ],
)
def test_wrong_parameters_are_refused(db, sql, params, words):
    for _ in range(2):  # the second time from the kept statement
        with pytest.raises(ProgrammingError) as info:
            db.execute(sql, params)
        assert words in str(info.value)


def test_a_syntax_error_says_where_each_time(db):
    for _ in range(2):
        with pytest.raises(ProgrammingError) as info:
            db.execute("SELECT id FROM t WHERE", ())
        assert "syntax error" in str(info.value)
