"""Views share arrangements: each (collection, key) is arranged once in the engine."""

import pytest

import ivm
from sql.errors import SqlError
from sql.logical import Scan


def _used(db, view):
    return {(p.table if isinstance(p, Scan) else type(p).__name__, k, how) for p, k, how in db.views[view].used}


def test_views_reuse_table_and_join_arrangements():
    db = ivm.connect()
    db.execute("CREATE TABLE orders (o_key INTEGER PRIMARY KEY, cust INTEGER)")
    db.execute("CREATE TABLE lineitem (l_order INTEGER, qty INTEGER)")
    db.execute("INSERT INTO orders VALUES (1, 10), (2, 20)")
    db.execute("INSERT INTO lineitem VALUES (1, 5), (1, 6), (2, 7)")
    db.execute(
        "CREATE VIEW a AS SELECT o.cust, SUM(l.qty) AS q FROM orders o JOIN lineitem l ON o.o_key = l.l_order "
        "GROUP BY o.cust"
    )
    db.execute("CREATE VIEW b AS SELECT l.qty, o.cust FROM lineitem l JOIN orders o ON l.l_order = o.o_key")
    used_a = {
        (p.table if isinstance(p, Scan) else type(p).__name__, k, how) for p, k, how in db.views["a"].used
    }
    used_b = {
        (p.table if isinstance(p, Scan) else type(p).__name__, k, how) for p, k, how in db.views["b"].used
    }
    # orders is read through its primary-key arrangement; lineitem is arranged by l_order once, by view a
    assert ("orders", (0,), "reused") in used_a and ("orders", (0,), "reused") in used_b
    assert ("lineitem", (0,), "built") in used_a and ("lineitem", (0,), "reused") in used_b
    keys = sorted(k for (p, k) in db.registry.entries if isinstance(p, Scan) and p.table == "lineitem")
    assert keys == [(0,), (0, 1)]  # its own arrangement (no primary key: all columns) and by l_order, once
    traces = db.engine.traces()
    assert len({id(t) for t in traces}) == len(traces)
    assert sorted(db.execute("SELECT * FROM a").fetchall()) == [(10, 11), (20, 7)]
    assert sorted(db.execute("SELECT * FROM b").fetchall()) == [(5, 10), (6, 10), (7, 20)]


def test_second_view_with_same_join_builds_nothing_new():
    db = ivm.connect()
    db.execute("CREATE TABLE r (k INTEGER, v INTEGER)")
    db.execute("CREATE TABLE s (k INTEGER, w INTEGER)")
    db.execute("INSERT INTO r VALUES (1, 1), (2, 2)")
    db.execute("INSERT INTO s VALUES (1, 3), (1, 4)")
    db.execute("CREATE VIEW j1 AS SELECT r.v, s.w FROM r JOIN s ON r.v = s.w")
    before = len(db.engine.traces())
    db.execute("CREATE VIEW j2 AS SELECT s.w, r.k FROM s JOIN r ON s.w = r.v")
    built = [(type(p).__name__, k) for p, k, how in db.views["j2"].used if how == "built"]
    # only j2's own result arrangement is new; r by v and s by w come from j1
    assert built == [("Scan", (0, 1))]
    assert len(db.engine.traces()) == before + 1


def test_wide_inputs_are_narrowed_unless_already_arranged():
    """A join arranges only the columns a view reads of a wide table, unless the whole table is indexed by the
    join key already: then it reads the index (see planner.prune)."""
    db = ivm.connect()
    db.execute("CREATE TABLE w (k INTEGER, a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER, f TEXT)")
    db.execute("CREATE TABLE n (k INTEGER PRIMARY KEY, x INTEGER)")
    db.execute(
        "INSERT INTO w VALUES (1, 2, 3, 4, 5, 6, 'p'), (1, 7, 0, 0, 0, 0, 'q'), (2, 8, 0, 0, 0, 0, NULL)"
    )
    db.execute("INSERT INTO n VALUES (1, 10), (3, 30)")
    db.execute("CREATE VIEW v1 AS SELECT n.x, w.a FROM n JOIN w ON n.k = w.k")
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN SELECT n.x, w.a FROM n JOIN w ON n.k = w.k").fetchall())
    assert "Project k, a" in plan.splitlines()[-1]  # w narrowed to the join key and the column the view reads
    assert ("Project", (0,), "built") in _used(db, "v1")
    db.execute("CREATE INDEX w_by_k ON w (k)")
    db.execute("CREATE VIEW v2 AS SELECT n.x, w.b FROM n JOIN w ON n.k = w.k")
    assert ("w", (0,), "reused") in _used(db, "v2")
    assert [u for u in _used(db, "v2") if u[2] == "built"] == [("v2", (0, 1), "built")]  # its result only
    assert sorted(db.execute("SELECT * FROM v1").fetchall()) == [(10, 2), (10, 7)]
    assert sorted(db.execute("SELECT * FROM v2").fetchall()) == [(10, 0), (10, 3)]
    db.execute("INSERT INTO w VALUES (3, 9, 9, 9, 9, 9, 'r')")
    assert sorted(db.execute("SELECT * FROM v2").fetchall()) == [(10, 0), (10, 3), (30, 9)]


def test_views_naming_the_same_rows_differently_share_them():
    """Column names only label rows: a view computing the same collection under other names (aliases) reads the
    arrangement another view built, and a join computing over an aggregate reads the aggregate's own."""
    db = ivm.connect()
    db.execute("CREATE TABLE r (k INTEGER PRIMARY KEY, n INTEGER)")
    db.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, k INTEGER, j INTEGER, q DECIMAL(8,2))")
    db.execute("INSERT INTO r VALUES (1, 5), (2, 6)")
    db.execute("INSERT INTO s VALUES (1, 1, 3, 1.50), (2, 1, 4, 2.25), (3, 2, 9, NULL)")
    db.execute("CREATE VIEW a AS SELECT r.n, x.j FROM r JOIN (SELECT k, j FROM s) x ON x.k = r.k")
    db.execute("CREATE VIEW b AS SELECT r.k, y.jj FROM r JOIN (SELECT k AS kk, j AS jj FROM s) y ON y.kk = r.k")
    assert ("Project", (0,), "built") in _used(db, "a")
    assert ("Project", (0,), "reused") in _used(db, "b")
    assert not [u for u in _used(db, "b") if u[2] == "built" and u[0] != "b"]
    # the average per k, arranged by k as the reduction: read by both joins, under any names
    db.execute(
        "CREATE VIEW c AS SELECT r.k, r.n FROM r WHERE r.n > (SELECT 2 * AVG(s.q) FROM s WHERE s.k = r.k)"
    )
    db.execute(
        "CREATE VIEW d AS SELECT r.n, g.half FROM r "
        "JOIN (SELECT k AS kk, AVG(q) / 2 AS half FROM s GROUP BY k) g ON g.kk = r.k"
    )
    assert ("Aggregate", (0,), "built") in _used(db, "c")
    assert ("Aggregate", (0,), "reused") in _used(db, "d")
    assert sorted(db.execute("SELECT * FROM c").fetchall()) == [(1, 5)]
    assert sorted(db.execute("SELECT * FROM d").fetchall()) == [(5, 0.9375), (6, None)]
    db.execute("UPDATE s SET q = 4.00 WHERE id = 3")
    assert sorted(db.execute("SELECT * FROM c").fetchall()) == [(1, 5)]
    assert sorted(db.execute("SELECT * FROM d").fetchall()) == [(5, 0.9375), (6, 2.0)]


def test_dropping_a_view_keeps_what_other_views_read_of_it():
    """A view reading an arrangement another view built stays exact when that view is dropped: the dropped
    view's dataflow keeps maintaining it until nothing reads it."""
    db = ivm.connect()
    db.execute("CREATE TABLE o (ok INTEGER PRIMARY KEY, ck INTEGER, total INTEGER)")
    db.execute("INSERT INTO o VALUES (1, 1, 5), (2, 1, 7), (3, 2, 1)")
    db.execute("CREATE VIEW a AS SELECT ck, MAX(total) AS m FROM o GROUP BY ck")
    db.execute("CREATE VIEW b AS SELECT ck, MAX(total) AS mm FROM o GROUP BY ck HAVING MAX(total) > 1")
    assert ("Aggregate", (0,), "reused") in _used(db, "b")  # a's maxima
    db.execute("DROP VIEW a")
    db.execute("INSERT INTO o VALUES (4, 2, 9), (5, 3, 4)")
    db.execute("DELETE FROM o WHERE ok = 2")
    assert sorted(db.execute("SELECT * FROM b").fetchall()) == [(1, 5), (2, 9), (3, 4)]
    with pytest.raises(SqlError, match="cannot drop table 'o': view 'b' depends on it"):
        db.execute("DROP TABLE o")
    with pytest.raises(SqlError, match="relation 'a' does not exist|'a'"):
        db.execute("SELECT * FROM a")
    # the name is free again, and the new view computes its own rows
    db.execute("CREATE VIEW a AS SELECT ck FROM o WHERE total > 4")
    assert sorted(db.execute("SELECT * FROM a").fetchall()) == [(1,), (2,)]
    db.execute("DROP VIEW b")
    assert sorted(db.execute("SELECT * FROM a").fetchall()) == [(1,), (2,)]
    assert [df.name for df in db.engine.dataflows] == ["tables", "a"]  # the dropped view's dataflow went
    db.execute("DROP VIEW a")
    db.execute("DROP TABLE o")
    assert len(db.engine.dataflows) == 1 and not db.registry.entries


def test_a_table_only_a_dropped_view_reads_goes_and_the_view_reading_that_view_is_built_again():
    """A table that a dropped view still reads, kept running for another view's sake, can be dropped as in
    PostgreSQL (the other view does not read it): that view is built again without the dropped view's
    arrangements, which go, and stays exact."""
    db = ivm.connect()
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, a INTEGER)")
    db.execute("CREATE TABLE u (k INTEGER PRIMARY KEY, b INTEGER)")
    db.execute("INSERT INTO t VALUES (1, 20); INSERT INTO u VALUES (1, 20), (2, 30)")
    db.execute("CREATE VIEW a AS SELECT t.k, a, b FROM t JOIN u ON t.a = u.b")
    db.execute("CREATE VIEW b AS SELECT u.b, COUNT(*) AS n FROM u JOIN u AS w ON u.b = w.b GROUP BY u.b")
    db.execute("DROP VIEW a")
    assert len(db.retained) == 1
    db.execute("DROP TABLE t")
    assert not db.retained and "t" not in db.tables
    db.execute("INSERT INTO u VALUES (3, 20)")
    assert sorted(db.execute("SELECT * FROM b").fetchall()) == [(20, 4), (30, 1)]
    db.execute("DROP VIEW b")
    assert [df.name for df in db.engine.dataflows] == ["tables"]
