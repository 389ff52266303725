"""Recursive views under random batches of insertions and deletions equal a recompute after every batch:
DuckDB's own WITH RECURSIVE where it can express the query, a naive fixed-point evaluation (in DuckDB) of the
WITH MUTUALLY RECURSIVE bodies otherwise."""

import random

import duckdb
import pytest

import ivm
from sql.errors import SqlError
from tests.oracle import same_rows
from tests.sql.fixpoint_oracle import mutual_fixpoint

SCHEMA = [
    "CREATE TABLE e (src INTEGER, dst INTEGER)",  # a directed graph, cycles, duplicates and NULLs allowed
    "CREATE TABLE w (src INTEGER, dst INTEGER, len INTEGER)",  # weighted edges
    "CREATE TABLE d (src INTEGER, dst INTEGER)",  # a DAG: src < dst
    "CREATE TABLE roots (r INTEGER)",  # interactive queries: the nodes asked about
    "CREATE TABLE parent (child INTEGER, par INTEGER)",
    "CREATE TABLE contains (assembly INTEGER, sub INTEGER, qty INTEGER)",  # parts: assembly < sub
    "CREATE TABLE addr (p INTEGER, o INTEGER)",  # p = &o
    "CREATE TABLE assign (a INTEGER, b INTEGER)",  # a = b
    "CREATE TABLE loadp (a INTEGER, b INTEGER)",  # a = *b
    "CREATE TABLE store (a INTEGER, b INTEGER)",  # *a = b
]

# WITH RECURSIVE views, checked against DuckDB running the same SQL
STANDARD = {
    "tc": "WITH RECURSIVE tc(a, b) AS (SELECT src, dst FROM e UNION SELECT tc.a, e.dst FROM tc JOIN e "
    "ON tc.b = e.src) SELECT a, b FROM tc",
    "reach_from_zero": "WITH RECURSIVE r(n) AS (SELECT 0 UNION SELECT e.dst FROM r JOIN e ON e.src = r.n) "
    "SELECT n FROM r",
    "reach_multi": "WITH RECURSIVE reach(root, n) AS (SELECT r, r FROM roots UNION SELECT reach.root, e.dst "
    "FROM reach JOIN e ON e.src = reach.n) SELECT root, COUNT(*) AS nodes FROM reach GROUP BY root",
    "same_gen": "WITH RECURSIVE sg(x, y) AS (SELECT p1.child, p2.child FROM parent p1 JOIN parent p2 "
    "ON p1.par = p2.par WHERE p1.child <> p2.child UNION SELECT p1.child, p2.child FROM sg "
    "JOIN parent p1 ON p1.par = sg.x JOIN parent p2 ON p2.par = sg.y) SELECT x, y FROM sg",
    "paths_dag": "WITH RECURSIVE p(a, b, hops) AS (SELECT src, dst, 1 FROM d UNION ALL SELECT p.a, d.dst, "
    "p.hops + 1 FROM p JOIN d ON p.b = d.src) SELECT a, b, COUNT(*) AS n, MAX(hops) AS longest FROM p "
    "GROUP BY a, b",
    "bom": "WITH RECURSIVE bom(part, qty) AS (SELECT sub, qty FROM contains WHERE assembly = 0 UNION ALL "
    "SELECT c.sub, bom.qty * c.qty FROM bom JOIN contains c ON c.assembly = bom.part) "
    "SELECT part, SUM(qty) AS total FROM bom GROUP BY part",
    "tc_not_blocked": "WITH RECURSIVE r(a, b) AS (SELECT src, dst FROM e WHERE dst IS NOT NULL UNION "
    "SELECT r.a, e.dst FROM r JOIN e ON r.b = e.src WHERE NOT EXISTS "
    "(SELECT 1 FROM roots WHERE roots.r = e.dst)) "
    "SELECT a, COUNT(*) AS n FROM r GROUP BY a",
    "over_tc": "SELECT a, COUNT(*) AS n FROM tc GROUP BY a HAVING COUNT(*) > 2",
}

# WITH MUTUALLY RECURSIVE views: (definitions as (name, columns, body), final query)
MUTUAL = {
    "sssp": (
        [
            (
                "dist",
                "node INTEGER, len INTEGER",
                "SELECT node, MIN(len) FROM (SELECT r AS node, 0 AS len FROM roots UNION ALL "
                "SELECT w.dst, dist.len + w.len FROM dist JOIN w ON w.src = dist.node) x GROUP BY node",
            )
        ],
        "SELECT node, len FROM dist",
    ),
    "components": (
        [
            (
                "label",
                "node INTEGER, comp INTEGER",
                "SELECT node, MIN(comp) FROM (SELECT src AS node, src AS comp FROM e WHERE dst IS NOT NULL "
                "UNION ALL SELECT dst, dst FROM e WHERE src IS NOT NULL "
                "UNION ALL SELECT e.dst, label.comp FROM e JOIN label ON e.src = label.node "
                "UNION ALL SELECT e.src, label.comp FROM e JOIN label ON e.dst = label.node) x GROUP BY node",
            )
        ],
        "SELECT node, comp FROM label",
    ),
    "bom_sum": (
        [
            (
                "need",
                "part INTEGER, qty BIGINT",
                "SELECT part, SUM(q) FROM (SELECT 0 AS part, 1 AS q UNION ALL SELECT c.sub, need.qty * c.qty "
                "FROM need JOIN contains c ON c.assembly = need.part) x GROUP BY part",
            )
        ],
        "SELECT part, qty FROM need",
    ),
    "points_to": (
        [
            (
                "pts",
                "p INTEGER, o INTEGER",
                "SELECT p, o FROM addr UNION SELECT assign.a, pts.o FROM assign JOIN pts ON pts.p = assign.b "
                "UNION SELECT loadp.a, hpts.o FROM loadp JOIN pts ON pts.p = loadp.b "
                "JOIN hpts ON hpts.q = pts.o",
            ),
            (
                "hpts",
                "q INTEGER, o INTEGER",
                "SELECT p1.o, p2.o FROM store JOIN pts p1 ON p1.p = store.a JOIN pts p2 ON p2.p = store.b",
            ),
        ],
        "SELECT 'pts' AS rel, p, o FROM pts UNION ALL SELECT 'hpts', q, o FROM hpts",
    ),
    "unreached": (
        [
            (
                "seen",
                "n INTEGER",
                "SELECT r FROM roots UNION SELECT e.dst FROM seen JOIN e ON e.src = seen.n",
            ),
            (
                "missed",
                "n INTEGER",
                "SELECT src FROM e WHERE src IS NOT NULL EXCEPT SELECT n FROM seen",
            ),
        ],
        "SELECT n FROM missed",
    ),
}


def mutual_sql(defs, final) -> str:
    parts = ", ".join(f"{name}({cols}) AS ({body})" for name, cols, body in defs)
    return f"WITH MUTUALLY RECURSIVE {parts} {final}"


N = 14  # nodes; small enough for the naive oracle, big enough for long paths and cycles


def _row(rng: random.Random, table: str) -> tuple:
    a, b = rng.randrange(N), rng.randrange(N)
    if table == "e":
        return (a if rng.random() > 0.05 else None, b if rng.random() > 0.05 else None)
    if table == "w":
        return (a, b, rng.randrange(1, 9))
    if table in ("d", "contains"):
        lo, hi = min(a, b), max(a, b)
        hi = hi if hi > lo else lo + 1
        return (lo, hi) if table == "d" else (lo, hi, rng.randrange(1, 4))
    if table == "roots":
        return (a,)
    if table == "parent":
        return (a, rng.randrange(N // 2))
    return (a, b)


TABLES = ["e", "w", "d", "roots", "parent", "contains", "addr", "assign", "loadp", "store"]
SIZES = {
    "e": 24,
    "w": 30,
    "d": 22,
    "roots": 2,
    "parent": 16,
    "contains": 18,
    "addr": 6,
    "assign": 6,
    "loadp": 4,
    "store": 4,
}


def _literal(row: tuple) -> str:
    return "(" + ", ".join("NULL" if v is None else str(v) for v in row) + ")"


def _apply(db, con, state, table, inserts, deletes) -> list[str]:
    stmts = []
    if inserts:
        stmts.append(f"INSERT INTO {table} VALUES {', '.join(_literal(r) for r in inserts)}")
        state[table].extend(inserts)
    for r in deletes:
        state[table].remove(r)
    if deletes:
        # delete every copy of the chosen rows, then put back the copies that stay
        conds = " OR ".join(
            "("
            + " AND ".join(
                f"{c} IS NULL" if v is None else f"{c} = {v}" for c, v in zip(_cols(table), r, strict=True)
            )
            + ")"
            for r in set(deletes)
        )
        stmts.append(f"DELETE FROM {table} WHERE {conds}")
        back = [r for r in state[table] if r in set(deletes)]
        if back:
            stmts.append(f"INSERT INTO {table} VALUES {', '.join(_literal(r) for r in back)}")
    return stmts


def _cols(table: str) -> list[str]:
    schema = next(s for s in SCHEMA if s.startswith(f"CREATE TABLE {table} "))
    inner = schema[schema.index("(") + 1 : schema.rindex(")")]
    return [part.split()[0] for part in inner.split(",")]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_recursive_views_match_recompute_after_every_batch(seed):
    rng = random.Random(seed)
    db = ivm.connect()
    con = duckdb.connect()
    for s in SCHEMA:
        db.execute(s)
        con.execute(s)
    state = {t: [] for t in TABLES}
    for t in TABLES:
        rows = [_row(rng, t) for _ in range(SIZES[t])]
        for s in _apply(db, con, state, t, rows, []):
            db.execute(s)
            con.execute(s)
    for name, sql in STANDARD.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    con.execute(f"CREATE VIEW tc AS {STANDARD['tc']}")
    for name, (defs, final) in MUTUAL.items():
        db.execute(f"CREATE VIEW {name} AS {mutual_sql(defs, final)}")
    for batch in range(10):
        stmts = ["BEGIN"]
        for t in rng.sample(TABLES, 4):
            k = rng.randrange(1, 4)
            inserts = [_row(rng, t) for _ in range(k)]
            deletes = rng.sample(state[t], min(len(state[t]), rng.randrange(0, 4)))
            stmts += _apply(db, con, state, t, inserts, deletes)
        stmts.append("COMMIT")
        for s in stmts:
            db.execute(s)
            if s not in ("BEGIN", "COMMIT"):
                con.execute(s)
        for name, sql in STANDARD.items():
            got = db.execute(f"SELECT * FROM {name}").fetchall()
            want = con.execute(sql).fetchall()
            assert same_rows(got, want), (seed, batch, name, sorted(got), sorted(want))
        for name, (defs, final) in MUTUAL.items():
            got = db.execute(f"SELECT * FROM {name}").fetchall()
            want = mutual_fixpoint(con, defs, final)
            assert same_rows(got, want), (seed, batch, name, sorted(got), sorted(want))


def test_counting_and_constants():
    db = ivm.connect()
    got = db.execute(
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 100) SELECT n FROM t"
    )
    assert sorted(got.fetchall()) == [(i,) for i in range(1, 101)]
    fib = (
        "WITH RECURSIVE f(i, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT i + 1, b, a + b FROM f WHERE i < 20) "
        "SELECT i, a FROM f"
    )
    assert sorted(db.execute(fib).fetchall()) == sorted(duckdb.sql(fib).fetchall())


def test_recursion_limit_error_return_and_divergence():
    db = ivm.connect()
    db.execute("CREATE TABLE s (x INTEGER)")
    db.execute("INSERT INTO s VALUES (1)")
    grow = "SELECT x FROM s UNION SELECT n + 1 FROM c"
    # RETURN AT RECURSION LIMIT: the values after that many rounds
    got = db.execute(
        f"WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5) c(n INTEGER) AS ({grow}) SELECT n FROM c"
    )
    con = duckdb.connect()
    con.execute("CREATE TABLE s (x INTEGER)")
    con.execute("INSERT INTO s VALUES (1)")
    want = mutual_fixpoint(con, [("c", "n INTEGER", grow)], "SELECT n FROM c", limit=5, return_at_limit=True)
    assert sorted(got.fetchall()) == sorted(want)
    # ERROR AT / RECURSION LIMIT: a clear error, and the view is not created
    for header in ("RECURSION LIMIT 5", "ERROR AT RECURSION LIMIT 5", "(RECURSION LIMIT 5)"):
        with pytest.raises(SqlError, match="fixed point within 5 rounds"):
            db.execute(
                f"CREATE VIEW v AS WITH MUTUALLY RECURSIVE {header} c(n INTEGER) AS ({grow}) SELECT n FROM c"
            )
        assert "v" not in db.views
    # UNION ALL around a cycle never converges: stopped, not hung; the view stops, the others go on
    db.execute("CREATE TABLE e (src INTEGER, dst INTEGER)")
    db.execute("INSERT INTO e VALUES (1, 2), (2, 3)")
    db.execute(
        "CREATE VIEW p AS WITH RECURSIVE r(a, b) AS (SELECT src, dst FROM e UNION ALL "
        "SELECT r.a, e.dst FROM r JOIN e ON r.b = e.src) SELECT a, b FROM r"
    )
    db.execute("CREATE VIEW n AS SELECT COUNT(*) AS edges FROM e")
    with pytest.warns(ivm.Warning, match="view 'p' failed.*fixed point"):
        db.execute("INSERT INTO e VALUES (3, 1)")  # the transaction stands: a warning, not an error
    assert db.execute("SELECT * FROM n").fetchall() == [(3,)]
    db.execute("INSERT INTO e VALUES (5, 6)")
    assert db.execute("SELECT * FROM n").fetchall() == [(4,)]
    with pytest.raises(SqlError, match="view 'p' failed"):
        db.execute("SELECT * FROM p")
    with pytest.raises(SqlError, match="view 'p' failed"):
        db.execute("CREATE VIEW q AS SELECT * FROM p")
    db.execute("DROP VIEW p")
    db.execute("DELETE FROM e WHERE src = 3")
    db.execute(
        "CREATE VIEW p AS WITH RECURSIVE r(a, b) AS (SELECT src, dst FROM e UNION ALL "
        "SELECT r.a, e.dst FROM r JOIN e ON r.b = e.src) SELECT a, b FROM r"
    )
    assert sorted(db.execute("SELECT * FROM p").fetchall()) == [(1, 2), (1, 3), (2, 3), (5, 6)]


BAD = [
    ("WITH RECURSIVE r(a) AS (SELECT a FROM r) SELECT * FROM r", "does not have the form"),
    (
        "WITH RECURSIVE r(a) AS (SELECT src FROM e UNION SELECT r.a FROM r JOIN r r2 ON r.a = r2.a) "
        "SELECT * FROM r",
        "must not appear more than once",
    ),
    (
        "WITH RECURSIVE r(a) AS (SELECT src FROM e UNION SELECT MAX(a) FROM r) SELECT * FROM r",
        "aggregate functions are not allowed",
    ),
    (
        "WITH RECURSIVE r(a) AS (SELECT src FROM e UNION SELECT src FROM e WHERE src IN (SELECT a FROM r)) "
        "SELECT * FROM r",
        "within a subquery",
    ),
    (
        "WITH RECURSIVE r(a) AS (SELECT src FROM e UNION SELECT e.dst FROM e LEFT JOIN r ON r.a = e.src) "
        "SELECT * FROM r",
        "outer join",
    ),
    (
        "WITH RECURSIVE a(x) AS (SELECT src FROM e UNION SELECT x FROM b), b(x) AS (SELECT x FROM a) "
        "SELECT * FROM a",
        "WITH MUTUALLY RECURSIVE",
    ),
    ("WITH RECURSIVE r(a) AS (SELECT src FROM e UNION SELECT 'x' FROM r) SELECT * FROM r", "type"),
    ("WITH RECURSIVE r(a, b) AS (SELECT src FROM e UNION SELECT a FROM r) SELECT * FROM r", "names are given"),
    ("WITH MUTUALLY RECURSIVE r(a INTEGER) AS (SELECT src, dst FROM e) SELECT * FROM r", "has 1 columns"),
    ("WITH MUTUALLY RECURSIVE r(a BLOB) AS (SELECT src FROM e) SELECT * FROM r", "not supported"),
    ("WITH MUTUALLY RECURSIVE r(a) AS (SELECT src FROM e) SELECT * FROM r", "needs a type"),
    (
        "WITH MUTUALLY RECURSIVE RECURSION LIMIT 0 r(a INTEGER) AS (SELECT src FROM e) SELECT * FROM r",
        "positive integer",
    ),
    ("WITH MUTUALLY RECURSIVE r(a INTEGER) AS (SELECT nope FROM e) SELECT * FROM r", "nope"),
    (
        "SELECT * FROM (WITH RECURSIVE r(a) AS (SELECT src FROM e UNION SELECT a FROM r) SELECT a FROM r) x",
        "inside a subquery",
    ),
]


@pytest.mark.parametrize(("sql", "message"), BAD)
def test_bad_recursive_queries_are_rejected_with_their_position(sql, message):
    db = ivm.connect()
    db.execute("CREATE TABLE e (src INTEGER, dst INTEGER)")
    with pytest.raises(SqlError, match=message) as err:
        db.execute(f"CREATE VIEW v AS {sql}")
    assert err.value.line is not None or "MUTUALLY" in sql
    assert "v" not in db.views


def test_edges_are_arranged_once_inside_and_outside_recursion():
    db = ivm.connect()
    db.execute("CREATE TABLE e (src INTEGER, dst INTEGER)")
    db.execute("CREATE INDEX e_src ON e (src)")
    db.execute(
        "CREATE VIEW fanout AS SELECT e1.src, COUNT(*) AS n FROM e e1 JOIN e e2 ON e1.dst = e2.src "
        "GROUP BY e1.src"
    )
    db.execute(f"CREATE VIEW tc AS {STANDARD['tc']}")
    db.execute(f"CREATE VIEW sssp AS {mutual_sql(*MUTUAL['components'])}")
    plan = [r[0] for r in db.execute(f"EXPLAIN {STANDARD['tc']}").fetchall()]
    assert any("ArrangeBy key=[src] (reused)" in line for line in plan), plan
    by_src = [(p, k) for (p, k) in db.registry.entries if getattr(p, "table", None) == "e" and k == (0,)]
    assert len(by_src) == 1
    engine_traces = db.engine.traces()
    assert len(engine_traces) == len({id(t) for t in engine_traces})
    db.execute("INSERT INTO e VALUES (1, 2), (2, 3)")
    assert sorted(db.execute("SELECT * FROM tc").fetchall()) == [(1, 2), (1, 3), (2, 3)]


def test_interactive_queries_derive_only_what_they_reach():
    """Adding a query row derives only the facts reachable from it; removing it retracts exactly those."""
    db = ivm.connect()
    db.execute("CREATE TABLE e (src INTEGER, dst INTEGER)")
    db.execute("CREATE TABLE q (r INTEGER)")
    # two disjoint chains: 0..99 and 1000..1009
    chain = ", ".join(f"({i}, {i + 1})" for i in range(99))
    small = ", ".join(f"({i}, {i + 1})" for i in range(1000, 1009))
    db.execute(f"INSERT INTO e VALUES {chain}, {small}")
    db.execute(
        "CREATE VIEW reach AS WITH RECURSIVE reach(root, n) AS (SELECT r, r FROM q UNION "
        "SELECT reach.root, e.dst FROM reach JOIN e ON e.src = reach.n) SELECT root, n FROM reach"
    )
    sub = db.subscribe("reach", snapshot=False)
    before = db.engine.stored_updates()
    db.execute("INSERT INTO q VALUES (1000)")
    added = [b for b in sub]
    assert sum(b.num_rows for b in added) == 10
    # the state it adds is a few copies of what it reached, nothing of the 100-node chain it cannot reach
    assert db.engine.stored_updates() - before <= 6 * 10
    db.execute("INSERT INTO q VALUES (0)")
    assert sum(b.num_rows for b in sub) == 100
    db.execute("DELETE FROM q WHERE r = 1000")
    gone = [b for b in sub]
    assert sum(b.num_rows for b in gone) == 10
    assert all(d == -1 for b in gone for d in b.column("diff").to_pylist())
    assert db.execute("SELECT COUNT(*) FROM reach").fetchall() == [(100,)]
