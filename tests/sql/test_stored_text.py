"""Text stored uninterned (columns of mostly distinct strings outside a primary key): every way of changing
such a table, and every way of comparing its text, against DuckDB after every change.

The batches are built so that storing applies and equal strings meet under different codes: the first rows of
each batch are distinct, later ones repeat them, and rows of later batches repeat earlier batches' strings.
"""

import random

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import ivm
from sql.errors import SqlError
from tests.oracle import same_rows

SCHEMA = """
CREATE TABLE t (k INT PRIMARY KEY, a TEXT, b TEXT, n INT);
CREATE TABLE u (a TEXT PRIMARY KEY, w INT);
CREATE TABLE copy (a TEXT PRIMARY KEY, k INT);
CREATE TABLE bag (a TEXT, k INT);
"""

VIEWS = {
    "by_a": "SELECT a, COUNT(*) AS c, SUM(n) AS s FROM t GROUP BY a",
    "distinct_a": "SELECT DISTINCT a FROM t",
    "rows_ab": "SELECT a, b FROM t",
    "count_distinct": "SELECT n % 3 AS g, COUNT(DISTINCT a) AS d, MIN(b) AS lo, MAX(a) AS hi FROM t GROUP BY 1",
    "joined": "SELECT t.k, u.w FROM t JOIN u ON t.a = u.a",
    "self_join": "SELECT x.k AS k1, y.k AS k2 FROM t x JOIN t y ON x.a = y.b WHERE x.k < y.k",
    "equal_literal": "SELECT k, b FROM t WHERE a = 's7' OR b IN ('s3', 's11')",
    "ordered": "SELECT k, a FROM t WHERE a < 's3' AND a <> b",
    "top_k": "SELECT a, b, k FROM t ORDER BY a DESC, b, k LIMIT 7",
    "same_row": "SELECT k FROM t WHERE a = b",
    "set_ops": "SELECT a FROM t INTERSECT SELECT b FROM t",
    "except_all": "SELECT a FROM t EXCEPT ALL SELECT b FROM t",
    "in_sub": "SELECT k FROM t WHERE a IN (SELECT b FROM t WHERE n > 50)",
    "outer_join": "SELECT u.a, COUNT(t.k) AS c FROM u LEFT JOIN t ON u.a = t.a GROUP BY u.a",
    "liked": "SELECT k, UPPER(a) AS up FROM t WHERE b LIKE '%1%'",
    "picked": "SELECT CASE WHEN n > 50 THEN a ELSE b END AS pick, COUNT(*) AS c FROM t GROUP BY 1",
    "copied": "SELECT a, k FROM copy",
    "bagged": "SELECT a, COUNT(*) AS c FROM bag GROUP BY a",
}


def _text(rng: random.Random) -> str:
    return f"s{rng.randrange(40)}"


class _Mirror:
    """The database under test and DuckDB, changed alike."""

    def __init__(self) -> None:
        self.db = ivm.connect()
        self.duck = duckdb.connect()
        self.db.execute(SCHEMA)
        for stmt in SCHEMA.strip().split(";"):
            if stmt.strip():
                self.duck.execute(stmt)
        for name, sql in VIEWS.items():
            self.db.execute(f"CREATE VIEW {name} AS {sql}")
        self.rows: dict[int, tuple] = {}
        self.next_key = 0

    def sql(self, stmt: str) -> None:
        self.db.execute(stmt)
        self.duck.execute(stmt)
        self.rows = {r[0]: r for r in self.duck.execute("SELECT k, a, b, n FROM t").fetchall()}

    def batch(self, rng: random.Random, size: int) -> list[tuple]:
        """New rows: the first 70 strings distinct, then repeats, with NULLs."""
        rows = []
        for i in range(size):
            k = self.next_key
            self.next_key += 1
            if i < 70:
                a, b = f"x{k}-{rng.random()}", f"y{k}-{rng.random()}"
            else:
                a, b = _text(rng), rng.choice([_text(rng), None])
            rows.append((k, a, b, rng.randrange(100)))
        return rows

    def insert(self, rows: list[tuple]) -> None:
        self.db.insert_arrow("t", _arrow(rows))
        self.duck.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
        self.rows.update({r[0]: r for r in rows})

    def delete(self, rows: list[tuple]) -> None:
        self.db.delete_arrow("t", _arrow(rows))
        self.duck.executemany("DELETE FROM t WHERE k = ?", [(r[0],) for r in rows])
        for r in rows:
            del self.rows[r[0]]

    def check(self, step: str) -> None:
        for name, sql in VIEWS.items():
            got = self.db.execute(f"SELECT * FROM {name}").fetchall()
            want = self.duck.execute(sql).fetchall()
            if name == "top_k":
                assert got == [] or sorted(got, key=str) == sorted(want, key=str), (step, name)
            assert same_rows(got, want), (step, name, sorted(got, key=str)[:5], sorted(want, key=str)[:5])
        got = self.db.execute("SELECT * FROM t").fetchall()
        assert same_rows(got, list(self.rows.values())), step


def _arrow(rows: list[tuple]) -> pa.Table:
    k, a, b, n = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {
            "k": pa.array(k, pa.int64()),
            "a": pa.array(a, pa.string()),
            "b": pa.array(b, pa.string()),
            "n": pa.array(n, pa.int64()),
        }
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stored_text_equals_duckdb_after_every_change(seed):
    rng = random.Random(seed)
    m = _Mirror()
    m.sql("INSERT INTO u VALUES " + ", ".join(f"('s{i}', {i})" for i in range(0, 40, 3)))
    m.insert(m.batch(rng, 400))
    assert (m.db.pool._canon[: len(m.db.pool)] < 0).any()  # some text really is stored uninterned
    m.check("load")
    for step in range(12):
        kind = step % 6
        live = list(m.rows.values())
        if kind == 0:
            m.insert(m.batch(rng, 300))
        elif kind == 1:
            m.delete(rng.sample(live, min(len(live), 150)))
        elif kind == 2:  # inside one transaction: delete rows, insert others, delete some of those
            gone = rng.sample(live, 40)
            fresh = m.batch(rng, 300)
            m.db.execute("BEGIN")
            m.db.delete_arrow("t", _arrow(gone))
            m.db.insert_arrow("t", _arrow(fresh))
            m.db.delete_arrow("t", _arrow(fresh[100:130]))
            m.db.execute("COMMIT")
            m.duck.executemany("DELETE FROM t WHERE k = ?", [(r[0],) for r in gone + fresh[100:130]])
            m.duck.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", fresh[:100] + fresh[130:])
            m.rows = {r[0]: r for r in m.duck.execute("SELECT k, a, b, n FROM t").fetchall()}
        elif kind == 3:
            m.sql(f"UPDATE t SET b = a, n = n + 1 WHERE n % 7 = {step % 7}")
            m.sql(f"DELETE FROM t WHERE a = 's{step}' OR b = 's{step + 1}'")
        elif kind == 4:  # a change log: insert, delete and re-insert keys across transactions of one call
            _apply_log(m, rng, live)
        else:
            m.sql("DELETE FROM copy")
            m.sql("INSERT INTO copy SELECT a, MIN(k) FROM t GROUP BY a")
            m.sql("INSERT INTO bag SELECT b, k FROM t WHERE n < 20")
            m.sql("UPDATE u SET w = w + 1 WHERE a < 's2' OR a = 's9'")
        m.check(f"step {step} kind {kind}")


def _apply_log(m: _Mirror, rng: random.Random, live: list[tuple]) -> None:
    """Three transactions in one call: committed rows deleted (some re-inserted with other text, some
    re-inserted the same and deleted again) and new rows inserted (some deleted in a later transaction)."""
    gone = rng.sample(live, 60)
    fresh = m.batch(rng, 300)
    back = [(r[0], _text(rng), r[2], r[3]) for r in gone[:20]]
    same = gone[20:30]
    txns = [
        [(r, -1) for r in gone] + [(r, 1) for r in fresh],
        [(r, 1) for r in back + same] + [(r, -1) for r in fresh[:50]],
        [(r, -1) for r in same] + [(r, -1) for r in back[:5]],
    ]
    rows, diffs, tx = [], [], []
    for i, changes in enumerate(txns):
        for r, d in changes:
            rows.append(r)
            diffs.append(d)
            tx.append(i)
    assert m.db.apply_changes_arrow({"t": (_arrow(rows), np.array(diffs), np.array(tx))}, len(txns)) == []
    for changes in txns:
        for r, d in changes:
            if d < 0:
                m.duck.execute("DELETE FROM t WHERE k = ?", [r[0]])
            else:
                m.duck.execute("INSERT INTO t VALUES (?, ?, ?, ?)", list(r))
    m.rows = {r[0]: r for r in m.duck.execute("SELECT k, a, b, n FROM t").fetchall()}


def test_deleting_a_row_by_other_text_is_refused():
    m = _Mirror()
    rows = m.batch(random.Random(5), 300)
    m.insert(rows)
    wrong = [(rows[0][0], rows[0][1] + "!", rows[0][2], rows[0][3])]
    with pytest.raises(SqlError, match="not in table"):
        m.db.delete_arrow("t", _arrow(wrong))
    m.check("refused")
    m.delete(rows[:3])
    m.check("deleted")


def test_text_key_gets_canonical_codes_from_stored_text():
    """Stored text copied into a primary key (UPDATE, INSERT ... SELECT) is compared there like any key."""
    m = _Mirror()
    m.insert(m.batch(random.Random(6), 300))
    m.sql("INSERT INTO copy SELECT a, MIN(k) FROM t GROUP BY a")
    with pytest.raises(SqlError, match="duplicate key"):
        m.db.execute("INSERT INTO copy SELECT a, k FROM t WHERE k = 200")
    m.check("copied")


def test_index_on_stored_text_is_read_by_joins_and_recursion():
    """An index on a stored text column keeps canonical codes, so a join by that column reads it; recursion
    through stored text reaches the same rows as DuckDB."""
    m = _Mirror()
    rng = random.Random(8)
    rows = [(i, f"n{i}", f"n{(i * 7 + 3) % 320}", rng.randrange(100)) for i in range(320)]
    rows += [(320 + i, f"n{i % 50}", f"n{(i * 3) % 320}", 1) for i in range(100)]  # repeated text
    m.insert(rows)
    m.sql("INSERT INTO u VALUES " + ", ".join(f"('n{i}', {i})" for i in range(0, 320, 5)))
    m.db.execute("CREATE INDEX t_by_a ON t (a)")
    m.db.execute("CREATE VIEW by_index AS SELECT t.k, u.w FROM u JOIN t ON u.a = t.a")
    how = {(type(p).__name__, k, h) for p, k, h in m.db.views["by_index"].used}
    assert ("Canon", (1,), "reused") in how
    reach = """WITH RECURSIVE r(a, d) AS (SELECT a, 0 FROM t WHERE k = 0
        UNION SELECT t.b, r.d + 1 FROM r JOIN t ON t.a = r.a WHERE r.d < 6) SELECT DISTINCT a FROM r"""
    m.db.execute(f"CREATE VIEW reach AS {reach}")
    for step in range(3):
        assert same_rows(m.db.execute("SELECT * FROM reach").fetchall(), m.duck.execute(reach).fetchall())
        want = m.duck.execute("SELECT t.k, u.w FROM u JOIN t ON u.a = t.a").fetchall()
        assert same_rows(m.db.execute("SELECT * FROM by_index").fetchall(), want)
        m.check(f"step {step}")
        m.delete(rng.sample(list(m.rows.values()), 40))
        m.insert([(1000 + 300 * step + i, f"n{i}", f"n{i + 1}", 5) for i in range(300)])
