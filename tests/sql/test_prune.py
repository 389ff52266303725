"""Column pruning keeps every view exact, down to inputs narrowed to no column at all."""

import pytest
import sqlglot

import ivm
from planner.prune import prune
from sql.logical import Join, Project, Scan
from sql.translate import translate_query
from tests.oracle import with_views

DDL = ["CREATE TABLE t (a INTEGER, b INTEGER, c TEXT)", "CREATE TABLE u (x INTEGER, y INTEGER)"]
QUERIES = [
    "SELECT COUNT(*) AS n FROM (SELECT a FROM t) s",
    "SELECT COUNT(*) AS n FROM t JOIN u ON t.a = u.x",
    "SELECT COUNT(*) AS n FROM (SELECT a FROM t UNION ALL SELECT x FROM u) s",
    "SELECT a, COUNT(*) AS n FROM t LEFT JOIN u ON t.a = u.x GROUP BY a",
    "SELECT u.y FROM t RIGHT JOIN u ON t.a = u.x WHERE t.b IS NULL",
    "SELECT DISTINCT t.a FROM t JOIN u ON t.a = u.x",
    "SELECT SUM(y) AS s FROM t FULL JOIN u ON t.a = u.x",
    "SELECT COUNT(*) AS n FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.x = t.a)",
    "SELECT c FROM t EXCEPT SELECT c FROM t WHERE b > 2",
    "SELECT t.c, u.y FROM t JOIN u ON t.a = u.x ORDER BY u.y DESC, t.c LIMIT 2",
]


def test_pruned_views_match_recompute_through_changes():
    db, oracle = with_views(DDL, QUERIES)
    steps = [
        ["INSERT INTO t VALUES (1, 2, 'p'), (1, 3, NULL), (2, NULL, 'q')"],
        ["INSERT INTO t VALUES (NULL, 5, 'r'), (1, 2, 'p')", "INSERT INTO u VALUES (1, 10), (1, 11), (2, 12)"],
        ["INSERT INTO u VALUES (NULL, 13)"],
        ["DELETE FROM t WHERE a = 1", "DELETE FROM u WHERE y = 12"],
        ["UPDATE t SET a = 2 WHERE c = 'r'", "INSERT INTO u VALUES (2, 14)"],
    ]
    for step in [[], *steps]:
        for s in step:
            db.execute(s)
            oracle.execute(s)
        for i, q in enumerate(QUERIES):
            got = sorted(db.execute(f"SELECT * FROM v{i}").fetchall(), key=repr)
            assert got == sorted(oracle.execute(q).fetchall(), key=repr), q


@pytest.mark.parametrize("q", QUERIES)
def test_pruning_keeps_the_output_columns(q):
    db = ivm.connect()
    for s in DDL:
        db.execute(s)

    plan = translate_query(sqlglot.parse_one(q, dialect="postgres"), db.catalog)
    assert prune(plan).columns == plan.columns


def test_join_inputs_hold_only_what_is_read():
    db = ivm.connect()
    db.execute("CREATE TABLE w (k INTEGER, a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER)")
    db.execute("CREATE TABLE n (k INTEGER, x INTEGER)")
    db.execute("CREATE VIEW j AS SELECT n.x FROM n JOIN w ON n.k = w.k")
    used = [p for p, _, how in db.views["j"].used if how == "built"]
    widths = {len(p.columns) for p in used if isinstance(p, Project) and isinstance(p.input, Scan)}
    assert widths == {1}  # w narrowed to its join key alone
    assert not any(isinstance(p, Join) for p in used)
