"""Views share arrangements: each (collection, key) is arranged once in the engine."""

import ivm
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
