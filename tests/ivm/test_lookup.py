"""Connection.lookup_arrow: committed rows of a table by primary-key values."""

from decimal import Decimal

import pyarrow as pa
import pytest

import ivm
from sql.errors import SqlError


def test_lookup_by_composite_key_sees_committed_rows_only():
    db = ivm.connect()
    db.execute("CREATE TABLE t (a INTEGER, b TEXT, c DECIMAL(10,2), PRIMARY KEY (b, a))")
    db.execute("INSERT INTO t VALUES (1, 'x', 1.5), (2, 'y', NULL), (3, 'x', 2)")
    keys = pa.table({"a": [1, 2, 9, 1], "b": ["x", "y", "x", "x"]})
    got = db.lookup_arrow("t", keys)
    assert got.column_names == ["a", "b", "c"]
    assert sorted(got.to_pylist(), key=lambda r: r["a"]) == [
        {"a": 1, "b": "x", "c": pytest.approx(1.5)},
        {"a": 2, "b": "y", "c": None},
    ]
    db.execute("DELETE FROM t WHERE a = 2")
    db.execute("BEGIN")
    db.execute("INSERT INTO t VALUES (9, 'x', 0)")
    # the uncommitted row is not found; the deleted one is gone
    assert [r["a"] for r in db.lookup_arrow("t", keys).to_pylist()] == [1]
    db.execute("COMMIT")
    assert sorted(r["a"] for r in db.lookup_arrow("t", keys).to_pylist()) == [1, 9]


def test_lookup_empty_and_errors():
    db = ivm.connect()
    db.execute("CREATE TABLE k (id BIGINT PRIMARY KEY, v DOUBLE)")
    db.execute("CREATE TABLE nokey (v DOUBLE)")
    empty = db.lookup_arrow("k", pa.table({"id": pa.array([], pa.int64())}))
    assert empty.num_rows == 0 and empty.column_names == ["id", "v"]
    with pytest.raises(SqlError, match="no primary key"):
        db.lookup_arrow("nokey", pa.table({"v": [1.0]}))
    with pytest.raises(SqlError, match="key column 'id'"):
        db.lookup_arrow("k", pa.table({"v": [1.0]}))
    with pytest.raises(SqlError, match="does not exist"):
        db.lookup_arrow("nope", pa.table({"id": [1]}))


def test_apply_changes_arrow_gives_each_transaction_its_time():
    db = ivm.connect()
    db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, g TEXT, v DECIMAL(10,2))")
    db.execute("CREATE MATERIALIZED VIEW s AS SELECT g, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY g")
    db.execute("INSERT INTO t VALUES (1, 'a', 1.00)")
    sub = db.subscribe("s", snapshot=False)
    start = db.time
    changes = pa.table(
        {
            "id": [2, 1, 1, 3],
            "g": ["a", "a", "b", None],
            "v": pa.array([Decimal(2), Decimal(1), Decimal(1), Decimal(5)], pa.decimal128(10, 2)),
        }
    )
    db.apply_changes_arrow({"t": (changes, [1, -1, 1, 1], [0, 1, 1, 2])}, 3)
    assert db.time == start + 3
    out = pa.Table.from_batches(list(sub)).to_pylist()
    at = {(r["g"], r["n"], float(r["total"]), r["diff"]): r["time"] - start for r in out}
    assert at == {
        ("a", 1, 1.0, -1): 0,  # tx 0: id 2 joins group a
        ("a", 2, 3.0, 1): 0,
        ("a", 2, 3.0, -1): 1,  # tx 1: id 1 moves from a to b
        ("a", 1, 2.0, 1): 1,
        ("b", 1, 1.0, 1): 1,
        (None, 1, 5.0, 1): 2,  # tx 2: a NULL group
    }
    db.execute("SELECT g, n, total FROM s")
    assert sorted(db.fetchall(), key=str) == sorted(
        [("a", 1, pytest.approx(2)), ("b", 1, pytest.approx(1)), (None, 1, pytest.approx(5))], key=str
    )
    with pytest.raises(SqlError, match="not-null"):
        db.apply_changes_arrow(
            {"t": (pa.table({"id": pa.array([None], pa.int64()), "g": ["x"], "v": [1]}), [1], [0])}, 1
        )
    with pytest.raises(SqlError, match="outside"):
        db.apply_changes_arrow({"t": (changes, [1, -1, 1, 1], [0, 1, 1, 2])}, 2)


def test_apply_changes_arrow_puts_views_in_error_until_the_row_goes():
    db = ivm.connect()
    db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, s TEXT)")
    db.execute("CREATE VIEW nums AS SELECT id, CAST(s AS BIGINT) AS n FROM t")
    db.execute("CREATE VIEW total AS SELECT COUNT(*) AS n FROM t")
    ok = pa.table({"id": [1], "s": ["5"]})
    assert db.apply_changes_arrow({"t": (ok, [1], [0])}, 1) == []
    bad = pa.table({"id": [2], "s": ["five"]})
    assert db.apply_changes_arrow({"t": (bad, [1], [0])}, 1) == []  # nothing stopped
    assert "five" in db.view_errors()["nums"]
    assert db.execute("SELECT * FROM total").fetchall() == [(2,)]
    assert db.apply_changes_arrow({"t": (bad, [-1], [0])}, 1) == []
    assert db.view_errors() == {}
    assert db.execute("SELECT * FROM nums").fetchall() == [(1, 5)]
