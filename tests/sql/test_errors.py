"""Bad input and unsupported SQL give clear errors and leave every table and view unchanged."""

import pytest

import ivm
from ivm.errors import IntegrityError, InternalError
from sql.errors import SqlError, UnsupportedError


@pytest.fixture()
def db():
    d = ivm.connect()
    d.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b DECIMAL(10,2), c INTEGER, s TEXT, d DATE)")
    d.execute("CREATE TABLE u (x INTEGER, y INTEGER NOT NULL, z DECIMAL(8,2))")
    d.execute("INSERT INTO t VALUES (1, 1.50, 2, 'abc', DATE '2024-01-02'), (2, NULL, 3, 'xyz', NULL)")
    d.execute("INSERT INTO u VALUES (1, 10, 0.50), (2, 20, NULL), (2, 21, 1.25)")
    d.execute("CREATE VIEW v AS SELECT t.a, SUM(u.y) AS sy FROM t JOIN u ON t.a = u.x GROUP BY t.a")
    return d


def _snapshot(d):
    return {name: sorted(d.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in ("t", "u", "v")}


CASES = [
    ("SELEC * FROM t", SqlError, "syntax error", (1, None)),
    ("SELECT * FROM nope", SqlError, "nope", None),
    ("SELECT nope FROM t", SqlError, "column 'nope' does not exist", (1, 8)),
    ("SELECT a + s FROM t", SqlError, "needs numbers", (1, 8)),
    ("INSERT INTO u VALUES (1, NULL, 1.00)", SqlError, "not-null", None),
    ("INSERT INTO t VALUES (1, 2.00, 3, 'dup', NULL)", SqlError, "primary key", None),
    ("INSERT INTO t VALUES (7, 1, 1, 'a', NULL), (7, 2, 2, 'b', NULL)", SqlError, "primary key", None),
    ("INSERT INTO t VALUES (8, 1.00, 1, 'x', DATE '2020-01-01', 5)", SqlError, "more expressions than", None),
    ("INSERT INTO t (a, b) VALUES (8)", SqlError, "more target columns than", None),
    ("INSERT INTO u VALUES (1)", SqlError, "violates the not-null constraint", None),
    ("INSERT INTO t VALUES ('x', 1.00, 1, 'a', NULL)", SqlError, "row 1, column 'a'", (1, 23)),
    ("INSERT INTO t VALUES (9, 123456789012.00, 1, 'a', NULL)", SqlError, "does not fit", None),
    ("INSERT INTO t VALUES (9, 1.00, 1, 'a', DATE '2024-13-45')", SqlError, "date", None),
    ("SELECT ROW_NUMBER() OVER x FROM t WINDOW w AS ()", SqlError, 'window "x" does not exist', (1, 26)),
    ("SELECT a FROM t EXCEPT SELECT s FROM t", SqlError, "EXCEPT of INTEGER and TEXT is not possible", None),
    ("CREATE VIEW w AS SELECT nope FROM t", SqlError, "nope", None),
    ("CREATE VIEW v AS SELECT a FROM t", SqlError, "already exists", None),
    ("CREATE TABLE j (a JSON)", UnsupportedError, "not supported", None),
    ("DELETE FROM nope WHERE a = 1", SqlError, "does not exist", None),
    ("UPDATE t SET nope = 1", SqlError, "nope", None),
    ("UPDATE t SET a = 1 WHERE a = 2", SqlError, "primary key", None),
    ("UPDATE u SET y = NULL WHERE x = 2", SqlError, "not-null", None),
    ("SELECT a FROM t WHERE a > ALL ('{1,2}')", UnsupportedError, "all() is not supported", None),
    ("SELECT a FROM t WHERE c LIKE 'a%'", SqlError, "LIKE needs text", None),
    ("SELECT a FROM t WHERE d > 3", SqlError, "cannot compare", None),
    ("DROP TABLE t", SqlError, "depends on it", None),
    ("SELECT a, COUNT(*) FROM t GROUP BY c", SqlError, "GROUP BY", None),
    ("SELECT SUM(s) FROM t", SqlError, "needs numbers", None),
    ("CREATE VIEW w AS SELECT a, c AS a FROM t", SqlError, "column 'a' specified more than once", (1, 28)),
    (
        "CREATE VIEW w AS SELECT * FROM t FULL JOIN (SELECT x AS a FROM u) q USING (a)\n"
        "  JOIN (SELECT y AS a FROM u) r USING (a)",
        UnsupportedError,
        "merged by an earlier FULL or RIGHT join",
        (2, None),
    ),
    (
        "SELECT * FROM t JOIN (SELECT x AS a FROM u) q USING (a) JOIN (SELECT y AS a FROM u) r ON r.a = t.a",
        UnsupportedError,
        "SELECT * over a join USING (a) with another column a",
        (1, None),
    ),
    ("SELECT abs(s) FROM t", SqlError, "ABS needs a number", (1, 8)),
    ("SELECT left(s, c) FROM t", UnsupportedError, "LEFT needs a constant integer", (1, 16)),
]


@pytest.mark.parametrize(("sql", "cls", "words", "pos"), CASES, ids=[c[0][:40] for c in CASES])
def test_bad_statement_is_rejected_and_changes_nothing(db, sql, cls, words, pos):
    before = _snapshot(db)
    with pytest.raises(cls) as info:
        db.execute(sql)
    assert words.lower() in str(info.value).lower()
    if pos is not None:
        line, col = pos
        assert info.value.line == line
        if col is not None:
            assert info.value.col == col
    assert _snapshot(db) == before


def test_bad_statement_aborts_its_whole_transaction(db):
    """As in PostgreSQL: the transaction is aborted, later statements fail until it ends, and COMMIT then
    rolls it back."""
    before = _snapshot(db)
    db.execute("BEGIN")
    db.execute("INSERT INTO t VALUES (5, 5.00, 5, 'e', NULL)")
    db.execute("DELETE FROM u WHERE x = 1")
    with pytest.raises(IntegrityError, match="primary key"):
        db.execute("INSERT INTO t VALUES (5, 6.00, 6, 'f', NULL)")
    assert db.in_transaction
    with pytest.raises(InternalError, match="current transaction is aborted"):
        db.execute("INSERT INTO t VALUES (6, 6.00, 6, 'f', NULL)")
    with pytest.raises(InternalError, match="current transaction is aborted"):
        db.execute("SELECT * FROM t")
    db.execute("COMMIT")
    assert db.statusmessage == "ROLLBACK" and not db.in_transaction
    assert _snapshot(db) == before
    db.execute("INSERT INTO t VALUES (5, 5.00, 5, 'e', NULL)")
    assert (5, 5, "e") in [(r[0], r[2], r[3]) for r in db.execute("SELECT * FROM t").fetchall()]
