"""The connection's surface: Arrow in and out, subscriptions, EXPLAIN, indexes, COPY, INSERT SELECT, DROP."""

import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ivm
from ivm.errors import InterfaceError
from sql.errors import SqlError


@pytest.fixture()
def db():
    d = ivm.connect()
    d.execute("CREATE TABLE o (ok INTEGER PRIMARY KEY, ck INTEGER, total DECIMAL(10,2), day DATE)")
    d.execute("CREATE TABLE c (ck INTEGER PRIMARY KEY, name TEXT)")
    d.execute("INSERT INTO c VALUES (1, 'ann'), (2, 'bob')")
    d.execute("INSERT INTO o VALUES (1, 1, 1.50, DATE '2024-01-01'), (2, 1, -2.25, NULL), (3, 2, 3.00, NULL)")
    return d


def test_fetch_arrow_types_and_nulls(db):
    t = db.execute("SELECT ok, total, day FROM o").fetch_arrow()
    assert t.schema.field("total").type == pa.decimal128(18, 2)
    assert t.schema.field("day").type == pa.date32()
    assert sorted(t.column("total").to_pylist()) == [decimal.Decimal("-2.25"), decimal.Decimal("1.50"), 3]
    assert t.column("day").null_count == 2


def test_subscribe_yields_snapshot_then_diffs(db):
    db.execute("CREATE VIEW per_c AS SELECT ck, SUM(total) AS s FROM o GROUP BY ck")
    sub = db.subscribe("per_c")
    first = pa.Table.from_batches(list(sub)).to_pylist()
    assert sorted((r["ck"], r["s"], r["diff"]) for r in first) == [(1, decimal.Decimal("-0.75"), 1), (2, 3, 1)]
    db.execute("INSERT INTO o VALUES (4, 2, 1.00, NULL)")
    rows = pa.Table.from_batches(list(sub)).to_pylist()
    t = rows[0]["time"]
    assert sorted((r["ck"], r["s"], r["diff"]) for r in rows) == [(2, 3, -1), (2, 4, 1)]
    assert all(r["time"] == t for r in rows)
    assert list(sub) == []


def test_explain_marks_built_and_reused_arrangements(db):
    q = "SELECT c.name, SUM(o.total) AS t FROM c JOIN o ON c.ck = o.ck GROUP BY c.name"
    before = [r[0] for r in db.execute(f"EXPLAIN {q}").fetchall()]
    # a sum keeps a running state per group and arranges nothing of its input
    assert before[1] == "  Aggregate group=[g0] aggs=[sum(g1)] (running state per group)"
    assert "ArrangeBy" not in before[2]
    assert "ArrangeBy key=[ck] (reused)" in before[5]  # c by its primary key
    assert "ArrangeBy key=[ck] (built)" in before[7]  # o by ck
    db.execute(f"CREATE VIEW v AS {q}")
    after = [r[0] for r in db.execute(f"EXPLAIN {q}").fetchall()]
    assert all("(built)" not in line for line in after)  # everything now comes from view v
    # the grouped result is v's, read as it is
    assert after == [
        before[0],
        "  Aggregate group=[g0] aggs=[sum(g1)] (reused)",
        "    Canonical text [g0]",
    ]


def test_explain_says_what_reductions_arrange(db):
    """A count or DISTINCT outside loops keeps a running state and arranges nothing of its input; a join
    reading a grouped or distinct subquery by all its group columns reads the reduction's own output."""
    lines = [r[0] for r in db.execute("EXPLAIN SELECT DISTINCT ck, day FROM o").fetchall()]
    assert lines[0] == "Distinct (running count per row)" and "ArrangeBy" not in lines[1]
    q = "SELECT c.name FROM c JOIN (SELECT DISTINCT ck FROM o) d ON d.ck = c.ck"
    lines = [r[0].strip() for r in db.execute(f"EXPLAIN {q}").fetchall()]
    assert "Distinct (running count per row)" in lines
    assert not [line for line in lines if "(built)" in line]  # c's own arrangement, and the distinct keys'
    q = "SELECT c.name, g.n FROM c JOIN (SELECT ck, COUNT(*) + 1 AS n FROM o GROUP BY ck) g ON g.ck = c.ck"
    lines = [r[0].strip() for r in db.execute(f"EXPLAIN {q}").fetchall()]
    at = next(i for i, line in enumerate(lines) if line.startswith("Aggregate"))
    assert lines[at].endswith("(running state per group)")
    assert lines[at - 1].endswith("(the aggregate's)")
    assert sorted(db.execute(q).fetchall()) == [("ann", 3), ("bob", 2)]


def test_outer_joins_and_grouped_results_share_arrangements(db):
    db.execute("CREATE INDEX o_by_ck ON o (ck)")
    db.execute(
        "CREATE VIEW per_c AS SELECT c.ck, COUNT(o.ok) AS n FROM c LEFT JOIN o ON c.ck = o.ck GROUP BY c.ck"
    )
    how = {(type(p).__name__, k, h) for p, k, h in db.views["per_c"].used}
    assert ("Scan", (1,), "reused") in how and ("Scan", (0,), "reused") in how
    db.execute("CREATE VIEW busy AS SELECT ck, n FROM per_c WHERE n > 0")
    db.execute(
        "CREATE VIEW same AS SELECT c.ck, COUNT(o.ok) AS n FROM c LEFT JOIN o ON c.ck = o.ck GROUP BY c.ck"
    )
    # the grouped result of an identical query is read from the first view, not computed again
    assert [h for p, k, h in db.views["same"].used if type(p).__name__ == "Aggregate"] == ["reused"]
    db.execute("INSERT INTO c VALUES (9, 'zed')")
    assert sorted(db.execute("SELECT * FROM same").fetchall()) == sorted(
        db.execute("SELECT * FROM per_c").fetchall()
    )
    assert (9, 0) in db.execute("SELECT * FROM same").fetchall()


def test_index_is_reused_by_views(db):
    db.execute("CREATE INDEX o_by_ck ON o (ck)")
    db.execute("CREATE VIEW j AS SELECT c.name, o.total FROM c JOIN o ON c.ck = o.ck")
    how = {(type(p).__name__, k, h) for p, k, h in db.views["j"].used}
    assert ("Scan", (1,), "reused") in how
    assert sorted(db.execute("SELECT * FROM j").fetchall()) == [
        ("ann", decimal.Decimal("-2.25")),
        ("ann", decimal.Decimal("1.50")),
        ("bob", decimal.Decimal("3.00")),
    ]


def test_copy_from_parquet_and_csv(db, tmp_path):
    pq.write_table(
        pa.table({"ok": [10], "ck": [2], "total": pa.array([7.5]).cast(pa.decimal128(10, 2))}),
        tmp_path / "o.parquet",
    )
    db.execute(f"COPY o FROM '{tmp_path / 'o.parquet'}'")
    (tmp_path / "c.csv").write_text("ck,name\n3,cy\n")
    db.execute(f"COPY c FROM '{tmp_path / 'c.csv'}' (FORMAT csv, HEADER true)")
    assert (10, 2, decimal.Decimal("7.50"), None) in db.execute("SELECT * FROM o").fetchall()
    assert (3, "cy") in db.execute("SELECT * FROM c").fetchall()
    (tmp_path / "bad.csv").write_text("ck,name\nx,cy\n")
    with pytest.raises(SqlError, match='line 2, column ck: invalid input syntax for type bigint: "x"'):
        db.execute(f"COPY c FROM '{tmp_path / 'bad.csv'}' (FORMAT csv, HEADER)")
    with pytest.raises(SqlError, match='line 1, column ck: .*"ck"'):  # as in PostgreSQL, no header by default
        db.execute(f"COPY c FROM '{tmp_path / 'c.csv'}' (FORMAT csv)")
    with pytest.raises(SqlError, match="missing.csv"):
        db.execute(f"COPY c FROM '{tmp_path / 'missing.csv'}'")
    assert sorted(db.execute("SELECT * FROM c").fetchall())[-1] == (3, "cy")  # the failed COPYs left nothing


def test_insert_select_and_drop_table(db):
    db.execute("CREATE TABLE archive (ok INTEGER, total DECIMAL(12,2))")
    db.execute("INSERT INTO archive SELECT ok, total FROM o WHERE ck = 1")
    assert sorted(db.execute("SELECT * FROM archive").fetchall()) == [
        (1, decimal.Decimal("1.50")),
        (2, decimal.Decimal("-2.25")),
    ]
    with pytest.raises(SqlError, match="primary key"):
        db.execute("INSERT INTO c SELECT ck, name FROM c")
    db.execute("CREATE VIEW av AS SELECT COUNT(*) AS n FROM archive")
    with pytest.raises(SqlError, match="depends on it"):
        db.execute("DROP TABLE archive")
    db.execute("DROP VIEW av")
    db.execute("DROP TABLE archive")
    with pytest.raises(SqlError, match="does not exist"):
        db.execute("SELECT * FROM archive")
    db.execute("CREATE TABLE archive (x INTEGER)")
    db.execute("INSERT INTO archive VALUES (1)")
    assert db.execute("SELECT * FROM archive").fetchall() == [(1,)]


def test_arrow_deletes_in_one_transaction_and_missing_rows(db):
    rows = db.execute("SELECT * FROM o").fetch_arrow()
    db.execute("BEGIN")
    db.delete_arrow("o", rows.slice(0, 1))
    db.delete_arrow("o", rows.slice(1, 1))  # earlier deletes of this transaction are not counted against it
    db.execute("COMMIT")
    assert len(db.execute("SELECT * FROM o").fetchall()) == 1
    with pytest.raises(SqlError, match="not in table"):
        db.delete_arrow("o", rows.slice(0, 1))


def test_arrow_key_and_presence_checks(db):
    """Arrow writes check keys and deleted rows against committed rows and the transaction's own changes."""
    rows = db.execute("SELECT * FROM o ORDER BY ok").fetch_arrow()
    before = sorted(db.execute("SELECT * FROM o").fetchall())
    with pytest.raises(SqlError, match=r"primary key of 'o' \(ok=2\)"):
        db.insert_arrow("o", rows.slice(1, 1))  # a committed key
    with pytest.raises(SqlError, match="primary key"):
        db.insert_arrow(
            "o", pa.concat_tables([rows.slice(0, 1), rows.slice(0, 1)]).set_column(0, "ok", pa.array([9, 9]))
        )
    changed = rows.slice(0, 1).set_column(2, "total", pa.array([decimal.Decimal("9.99")], pa.decimal128(10, 2)))
    with pytest.raises(SqlError, match="not in table"):
        db.delete_arrow("o", changed)  # the key exists, the row does not
    with pytest.raises(SqlError, match="not in table"):
        db.delete_arrow("o", rows.slice(0, 1).set_column(0, "ok", pa.array([42])))
    assert sorted(db.execute("SELECT * FROM o").fetchall()) == before
    db.delete_arrow("o", rows.slice(1, 2))  # rows with NULLs match rows with NULLs
    db.insert_arrow("o", rows.slice(1, 1))  # a key deleted earlier is free again
    db.execute("BEGIN")
    db.delete_arrow("o", rows.slice(0, 1))
    db.insert_arrow("o", rows.slice(0, 1))  # deleted in this transaction: may come back
    with pytest.raises(SqlError, match="primary key"):
        db.insert_arrow("o", rows.slice(0, 1))
    db.execute("ROLLBACK")  # the error aborted the transaction
    db.execute("BEGIN")
    db.delete_arrow("o", rows.slice(0, 1))
    with pytest.raises(SqlError, match="not in table"):
        db.delete_arrow("o", rows.slice(0, 1))  # already deleted in this transaction
    db.execute("ROLLBACK")
    assert sorted(db.execute("SELECT * FROM o").fetchall()) == sorted(before[:2])
    db.execute("CREATE TABLE bag (x INTEGER, y TEXT)")
    db.execute("INSERT INTO bag VALUES (1, 'a'), (1, 'a'), (2, NULL)")
    both = db.execute("SELECT * FROM bag WHERE x = 1").fetch_arrow()
    db.delete_arrow("bag", both)  # two copies, both there
    with pytest.raises(SqlError, match="not in table"):
        db.delete_arrow("bag", both.slice(0, 1))
    db.delete_arrow("bag", db.execute("SELECT * FROM bag").fetch_arrow())
    assert db.execute("SELECT * FROM bag").fetchall() == []
    twice = pa.Table.from_arrays([pa.array([3]), pa.array(["b"]), pa.array(["c"])], names=["x", "y", "y"])
    with pytest.raises(SqlError, match="'y' appears more than once"):
        db.insert_arrow("bag", twice)
    db.insert_arrow("bag", pa.table({"x": [4]}))  # a nullable column left out is NULL
    assert db.execute("SELECT * FROM bag").fetchall() == [(4, None)]


TIME_VIEWS = {
    "ts_shift": "SELECT id, ts + INTERVAL '1 day' AS a, ts - INTERVAL '2 hours' AS b, "
    "ts + INTERVAL '1 month' AS c, d + INTERVAL '3 hours' AS e FROM tt",
    "ts_parts": "SELECT id, EXTRACT(HOUR FROM ts) AS h, EXTRACT(MINUTE FROM ts) AS mi, "
    "EXTRACT(DOW FROM ts) AS w, EXTRACT(DOY FROM d) AS y, EXTRACT(QUARTER FROM d) AS q FROM tt",
    "ts_filter": "SELECT id FROM tt WHERE ts > '2024-01-01 00:00:00' OR d >= '2023-06-01' OR ts >= d",
    "ts_cast": "SELECT id, CAST(ts AS DATE) AS day, CAST(d AS TIMESTAMP) AS midnight FROM tt",
    "ts_trunc": "SELECT DATE_TRUNC('month', ts) AS m, DATE_TRUNC('week', ts) AS w, "
    "DATE_TRUNC('hour', ts) AS h, COUNT(*) AS n FROM tt GROUP BY 1, 2, 3",
}


def test_timestamp_arithmetic_extract_and_trunc_match_duckdb():
    import duckdb

    from tests.oracle import same_rows

    db, con = ivm.connect(), duckdb.connect()
    rows = [
        (1, "'2024-01-31 03:04:05.25'", "'2024-02-29'"),
        (2, "'1969-12-31 23:59:59'", "'1969-12-31'"),
        (3, "NULL", "NULL"),
        (4, "'2023-03-05 00:00:00'", "'2023-01-01'"),
        (5, "'2000-02-29 12:30:00'", "'2000-03-01'"),
    ]
    for s in ["CREATE TABLE tt (id INTEGER PRIMARY KEY, ts TIMESTAMP, d DATE)"]:
        db.execute(s)
        con.execute(s)
    for name, sql in TIME_VIEWS.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    steps = [
        f"INSERT INTO tt VALUES {', '.join(f'({i}, {t}, {d})' for i, t, d in rows)}",
        "DELETE FROM tt WHERE id = 2",
        "UPDATE tt SET ts = ts + INTERVAL '45 minutes' WHERE id >= 4",
    ]
    for s in steps:
        db.execute(s)
        con.execute(s)
        for name, sql in TIME_VIEWS.items():
            assert same_rows(db.execute(f"SELECT * FROM {name}").fetchall(), con.execute(sql).fetchall()), name
    # PostgreSQL's EXTRACT(SECOND) keeps the fraction
    assert db.execute("SELECT EXTRACT(SECOND FROM ts) FROM tt WHERE id = 1").fetchall() == [
        (decimal.Decimal("5.25"),)
    ]


def test_global_aggregate_over_a_never_written_table_has_its_row():
    db = ivm.connect()
    db.execute("CREATE TABLE e (a INTEGER)")
    db.execute("CREATE VIEW n AS SELECT COUNT(*) AS c, SUM(a) AS s FROM e")
    assert db.execute("SELECT * FROM n").fetchall() == [(0, None)]
    assert db.execute("SELECT COUNT(*), MAX(a) FROM e").fetchall() == [(0, None)]
    db.execute("INSERT INTO e VALUES (4)")
    assert db.execute("SELECT * FROM n").fetchall() == [(1, 4)]


def test_casts_to_and_from_text_match_duckdb_and_bad_text_stops_the_view():
    import duckdb

    from sql.errors import SqlError
    from tests.oracle import same_rows

    db, con = ivm.connect(), duckdb.connect()
    ddl = "CREATE TABLE tx (id INTEGER PRIMARY KEY, s TEXT, n INTEGER, c DECIMAL(6,2), d DATE, b BOOLEAN)"
    rows = (
        "(1, ' 42 ', 7, 1.50, '2024-01-02', true), (2, '-3', NULL, NULL, NULL, false), "
        "(3, NULL, 0, -2.25, NULL, NULL)"
    )
    queries = {
        "as_numbers": "SELECT id, CAST(s AS INTEGER) AS i, CAST(s AS DECIMAL(10,2)) AS dec FROM tx",
        "as_text": "SELECT id, CAST(n AS TEXT) AS n, CAST(c AS TEXT) AS c, CAST(d AS TEXT) AS d, "
        "CAST(b AS TEXT) AS b, CAST(id AS VARCHAR) || '-' || CAST(n AS TEXT) AS joined FROM tx",
    }
    for s in (ddl, f"INSERT INTO tx VALUES {rows}"):
        db.execute(s)
        con.execute(s)
    for name, sql in queries.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
        assert same_rows(db.execute(f"SELECT * FROM {name}").fetchall(), con.execute(sql).fetchall()), name
    assert db.execute("SELECT CAST(' 12 ' AS INTEGER), CAST('yes' AS BOOLEAN)").fetchall() == [(12, True)]
    with pytest.raises(SqlError, match='invalid input syntax for type integer: "x1"') as err:
        db.execute("SELECT CAST('x1' AS INTEGER)")
    assert err.value.col is not None
    # text that is not a number puts the view that casts it in error; the write itself and other views stand
    db.execute("INSERT INTO tx VALUES (9, 'abc', 1, 1, NULL, NULL)")
    with pytest.raises(SqlError, match="view 'as_numbers' is in error.*input syntax for type integer: \"abc\""):
        db.execute("SELECT * FROM as_numbers")
    assert db.execute("SELECT COUNT(*) FROM as_text").fetchall() == [(4,)]
    with pytest.raises(SqlError, match='invalid input syntax for type integer: "abc"'):
        db.execute("SELECT CAST(s AS INTEGER) FROM tx")


def test_top_k_views_over_the_same_rows_share_their_arrangement(db):
    db.execute("CREATE VIEW top3 AS SELECT ok, total FROM o ORDER BY total DESC LIMIT 3")
    db.execute("CREATE VIEW top1 AS SELECT ok, total FROM o ORDER BY total DESC LIMIT 1")
    ranked = [(p, k, h) for p, k, h in db.views["top1"].used if k == (0,) and p.columns[0].name == "?group"]
    assert [h for _, _, h in ranked] == ["reused"]
    db.execute("INSERT INTO o VALUES (20, 1, 99.00, NULL)")
    assert db.execute("SELECT * FROM top1").fetchall() == [(20, decimal.Decimal("99.00"))]
    assert len(db.execute("SELECT * FROM top3").fetchall()) == 3


def test_close_releases_every_arrangement(db):

    db.execute("CREATE VIEW per_c AS SELECT ck, SUM(total) AS s FROM o GROUP BY ck")
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO notes VALUES (1, 'kept until the connection closes')")
    engine = db.engine
    assert engine.stored_updates() > 0 and len(db.pool) > 1
    db.close()
    assert engine.traces() == [] and engine.dataflows == []
    assert len(db.pool) == 1  # only the empty string: the connection's text is gone with it
    with pytest.raises(InterfaceError, match="closed"):
        db.execute("SELECT * FROM per_c")
