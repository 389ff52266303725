"""Plan simplification keeps every view exact: outer joins become inner only under filters that reject the rows
they pad, and filters and projections merge only where nothing changes."""

import random

import pytest
import sqlglot

import ivm
from planner.simplify import simplify
from sql.logical import Aggregate, Filter, Join, Project, SemiJoin, children
from sql.translate import translate_query
from tests.oracle import commit_and_compare, with_views

DDL = [
    "CREATE TABLE t (a INTEGER, b INTEGER, c TEXT)",
    "CREATE TABLE u (x INTEGER, y INTEGER)",
    "CREATE TABLE w (k INTEGER, v INTEGER)",
]

# (query, join kinds expected after simplification, outermost first)
CASES = [
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE u.y > 1", ["inner"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE u.y + t.b > 3", ["inner"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE NOT (u.x IS NULL)", ["inner"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE t.b > 0 AND u.y < 4", ["inner"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE u.y > 1 OR u.x < 2", ["inner"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE t.c LIKE 'p%' AND u.y <> 0", ["inner"]),
    # these keep the rows the join pads
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE u.y IS NULL", ["left"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE u.y > 1 OR t.b > 1", ["left"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE COALESCE(u.y, 0) = 0", ["left"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE t.b > 1", ["left"]),
    ("SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE NOT (u.y > 2)", ["inner"]),
    (
        "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x WHERE (CASE WHEN u.y IS NULL THEN 1 ELSE u.y END) > 0",
        ["left"],
    ),
    # full joins lose the side the filter rejects
    ("SELECT t.a, u.y FROM t FULL JOIN u ON t.a = u.x WHERE u.y > 1", ["right"]),
    ("SELECT t.a, u.y FROM t FULL JOIN u ON t.a = u.x WHERE t.b > 1", ["left"]),
    ("SELECT t.a, u.y FROM t FULL JOIN u ON t.a = u.x WHERE t.b > 1 AND u.y > 1", ["inner"]),
    ("SELECT t.a, u.y FROM t RIGHT JOIN u ON t.a = u.x WHERE t.b = 2", ["inner"]),
    ("SELECT t.a, u.y FROM t RIGHT JOIN u ON t.a = u.x WHERE u.y = 2", ["right"]),
    # through a join above it and the projections between
    (
        "SELECT s.a, w.v FROM (SELECT t.a, u.y AS yy FROM t LEFT JOIN u ON t.a = u.x) s "
        "JOIN w ON s.a = w.k WHERE s.yy > 1",
        ["inner", "inner"],
    ),
    (
        "SELECT s.a, w.v FROM (SELECT t.a, u.y AS yy FROM t LEFT JOIN u ON t.a = u.x) s "
        "LEFT JOIN w ON s.a = w.k WHERE s.yy > 1",
        ["left", "inner"],
    ),
    (
        "SELECT s.a, w.v FROM (SELECT t.a, u.y AS yy FROM t LEFT JOIN u ON t.a = u.x) s "
        "LEFT JOIN w ON s.a = w.k WHERE w.v > 1",
        ["inner", "left"],
    ),
    # decorrelated subqueries
    ("SELECT a FROM t WHERE EXISTS (SELECT * FROM u WHERE u.x = t.a AND u.y > 1)", ["inner"]),
    ("SELECT a FROM t WHERE NOT EXISTS (SELECT * FROM u WHERE u.x = t.a)", ["left"]),
    ("SELECT a FROM t WHERE t.b > (SELECT AVG(y) FROM u WHERE u.x = t.a)", ["inner"]),
    ("SELECT a FROM t WHERE a IN (SELECT x FROM u WHERE y > 0)", ["inner"]),
]


def _catalog():
    db = ivm.connect()
    for s in DDL:
        db.execute(s)
    return db


def _simplified(db, sql: str):
    with db.pool.active():  # text constants take codes
        return simplify(translate_query(sqlglot.parse_one(sql, dialect="postgres"), db.catalog))


def _joins(plan) -> list[str]:
    out = [plan.kind] if isinstance(plan, Join) else []
    for c in children(plan):
        out += _joins(c)
    return out


def _nodes(plan, kind) -> int:
    return isinstance(plan, kind) + sum(_nodes(c, kind) for c in children(plan))


@pytest.mark.parametrize("sql,kinds", CASES)
def test_outer_joins_tighten_only_under_filters_that_reject_their_padding(sql, kinds):
    db = _catalog()
    assert _joins(_simplified(db, sql)) == kinds


def test_filters_and_projections_merge():
    db = _catalog()
    q = "SELECT b2 FROM (SELECT b AS b2, a FROM (SELECT a, b FROM t WHERE a > 1) s WHERE b < 5) r WHERE TRUE"
    plan = _simplified(db, q)
    assert _nodes(plan, Filter) == 1
    assert _nodes(plan, Project) == 1
    # text read as a number may fail on rows the lower filter removes: that filter stays below
    q = "SELECT a FROM (SELECT a, c FROM t WHERE c <> 'x') s WHERE CAST(c AS INTEGER) > 1"
    plan = _simplified(db, q)
    assert _nodes(plan, Filter) == 2


def test_simplified_views_match_recompute_through_changes():
    queries = [sql for sql, _ in CASES]
    db, oracle = with_views(DDL, queries)
    rng = random.Random(7)
    for _ in range(14):
        stmts = []
        for _ in range(rng.randint(1, 4)):
            a, b = rng.choice([None, 0, 1, 2, 3]), rng.choice([None, 0, 1, 2, 3, 6])
            c = rng.choice(["NULL", "'p1'", "'q'"])
            stmts.append(
                rng.choice(
                    [
                        f"INSERT INTO t VALUES ({_v(a)}, {_v(b)}, {c})",
                        f"INSERT INTO u VALUES ({_v(a)}, {_v(b)})",
                        f"INSERT INTO w VALUES ({_v(a)}, {_v(b)})",
                        f"DELETE FROM t WHERE a = {rng.randint(0, 3)}",
                        f"DELETE FROM u WHERE y = {rng.randint(0, 6)}",
                        f"UPDATE u SET y = {rng.randint(0, 6)} WHERE x = {rng.randint(0, 3)}",
                        f"UPDATE w SET v = NULL WHERE k = {rng.randint(0, 3)}",
                    ]
                )
            )
        commit_and_compare(db, oracle, stmts, queries)


def _v(x) -> str:
    return "NULL" if x is None else str(x)


KEYED = [
    "CREATE TABLE p (id INTEGER PRIMARY KEY, g INTEGER, s TEXT)",
    "CREATE TABLE q (id INTEGER PRIMARY KEY, pid INTEGER, v INTEGER)",
    "CREATE TABLE t (a INTEGER, b INTEGER)",
]
# EXISTS correlated by more than equalities: a semijoin (antijoin) of the outer rows with those that found one
CORRELATED = [
    ("SELECT p.id, p.s FROM p WHERE EXISTS (SELECT * FROM q WHERE q.pid = p.g AND q.v <> p.id)", True),
    ("SELECT p.g, p.s FROM p WHERE NOT EXISTS (SELECT * FROM q WHERE q.pid = p.g AND q.v > p.id)", True),
    (
        "SELECT p.s, q.v FROM p JOIN q ON q.pid = p.id "
        "WHERE NOT EXISTS (SELECT * FROM q q2 WHERE q2.pid = p.id AND q2.id <> q.id)",
        True,
    ),
    (
        "SELECT p.g, COUNT(*) AS n FROM p JOIN q ON q.pid = p.id "
        "WHERE EXISTS (SELECT * FROM q q2 WHERE q2.pid = p.id AND q2.v <> q.v) "
        "AND NOT EXISTS (SELECT * FROM q q3 WHERE q3.pid = p.id AND q3.v > q.v) GROUP BY p.g",
        True,
    ),
    # no key: rows may repeat, the semijoin stays as it is
    ("SELECT t.a, t.b FROM t WHERE EXISTS (SELECT * FROM q WHERE q.pid = t.a AND q.v <> t.b)", False),
    (
        "SELECT t.a FROM t JOIN p ON p.g = t.a "
        "WHERE NOT EXISTS (SELECT * FROM q WHERE q.pid = t.a AND q.v < p.id)",
        False,
    ),
]


@pytest.mark.parametrize("sql,keyed", CORRELATED)
def test_semijoins_of_keyed_rows_compare_the_key(sql, keyed):
    db = ivm.connect()
    for s in KEYED:
        db.execute(s)
    with db.pool.active():
        plan = translate_query(sqlglot.parse_one(sql, dialect="postgres"), db.catalog)
        plain = simplify(plan)
        keys = simplify(
            plan, lambda name: db.catalog.tables[name].primary_key if name in db.catalog.tables else ()
        )
    assert _nodes(plain, SemiJoin) > 0
    assert (_nodes(keys, SemiJoin) == 0) == keyed


def test_keyed_semijoins_match_recompute_through_changes():
    queries = [sql for sql, _ in CORRELATED]
    db, oracle = with_views(KEYED, queries)
    rng = random.Random(11)
    next_id = {"p": 0, "q": 0}
    for _ in range(16):
        stmts = []
        for _ in range(rng.randint(1, 5)):
            table = rng.choice(["p", "q", "t"])
            g, v = _v(rng.choice([None, 0, 1, 2, 3])), _v(rng.choice([None, 0, 1, 2, 5]))
            op = rng.random()
            if table == "t":
                stmts.append(f"INSERT INTO t VALUES ({g}, {v})" if op < 0.7 else f"DELETE FROM t WHERE a = {g}")
            elif op < 0.55:
                next_id[table] += 1
                i = next_id[table]
                s = rng.choice(["NULL", "'x'", "'y'"])
                stmts.append(
                    f"INSERT INTO p VALUES ({i}, {g}, {s})"
                    if table == "p"
                    else f"INSERT INTO q VALUES ({i}, {g}, {v})"
                )
            elif op < 0.8:
                col = "g" if table == "p" else "v"
                stmts.append(f"UPDATE {table} SET {col} = {v} WHERE id = {rng.randint(1, next_id[table] + 1)}")
            else:
                stmts.append(f"DELETE FROM {table} WHERE id = {rng.randint(1, next_id[table] + 1)}")
        commit_and_compare(db, oracle, stmts, queries)


GROUPED = [
    "CREATE TABLE r (k INTEGER, q DECIMAL(8,2), n INTEGER)",
    "CREATE TABLE s (k INTEGER, j INTEGER, q DECIMAL(8,2))",
]
# (query, whether a join reads an aggregate itself rather than a projection of it)
OVER_AGGREGATES = [
    ("SELECT r.k, r.q FROM r WHERE r.q < (SELECT 0.5 * AVG(s.q) FROM s WHERE s.k = r.k)", True),
    ("SELECT r.k, g.m FROM r JOIN (SELECT MAX(q) AS m, k FROM s GROUP BY k) g ON g.k = r.k", True),
    ("SELECT g.m, r.n, r.q FROM (SELECT MAX(q) AS m, k FROM s GROUP BY k) g JOIN r ON g.k = r.k", True),
    (
        "SELECT r.n, g.t FROM r JOIN (SELECT j, k, 2 * SUM(q) AS t FROM s GROUP BY k, j) g "
        "ON g.j = r.n AND g.k = r.k",
        True,
    ),
    ("SELECT r.k FROM r WHERE r.n > (SELECT 5 * SUM(s.j) FROM s WHERE s.k = r.k AND s.j < 3)", True),
    # the join meets part of the group only, or pads rows the projection would compute over: as it was
    ("SELECT r.k, g.c FROM r JOIN (SELECT k, j, COUNT(*) + 1 AS c FROM s GROUP BY k, j) g ON g.k = r.k", False),
    (
        "SELECT r.k, g.a FROM r "
        "LEFT JOIN (SELECT k, COALESCE(AVG(q), 0) AS a FROM s GROUP BY k) g ON g.k = r.k",
        False,
    ),
    ("SELECT k, AVG(q) AS a, AVG(j) AS b FROM s GROUP BY k", False),
]


def _reads_aggregate(plan) -> bool:
    if isinstance(plan, Join) and any(isinstance(c, Aggregate) for c in (plan.left, plan.right)):
        return True
    return any(_reads_aggregate(c) for c in children(plan))


@pytest.mark.parametrize("sql,reads", OVER_AGGREGATES)
def test_joins_read_aggregates_and_compute_above(sql, reads):
    db = ivm.connect()
    for s in GROUPED:
        db.execute(s)
    plan = _simplified(db, sql)
    assert _reads_aggregate(plan) == reads
    if reads:  # the join reads the reduction's own arrangement, built once
        lines = [r[0] for r in db.execute(f"EXPLAIN {sql}").fetchall()]
        assert any("(the aggregate's)" in line for line in lines), lines


def test_joins_over_aggregates_match_recompute_through_changes():
    queries = [sql for sql, _ in OVER_AGGREGATES]
    db, oracle = with_views(GROUPED, queries)
    rng = random.Random(5)
    for _ in range(16):
        stmts = []
        for _ in range(rng.randint(1, 5)):
            k, j = _v(rng.choice([None, 0, 1, 2])), _v(rng.choice([None, 0, 1, 2, 4]))
            q = rng.choice(["NULL", "0.25", "1.50", "3.00", "7.75"])
            stmts.append(
                rng.choice(
                    [
                        f"INSERT INTO r VALUES ({k}, {q}, {j})",
                        f"INSERT INTO s VALUES ({k}, {j}, {q})",
                        f"INSERT INTO s VALUES ({k}, {j}, {q})",
                        f"DELETE FROM r WHERE k = {rng.randint(0, 2)}",
                        f"DELETE FROM s WHERE j = {rng.randint(0, 4)}",
                        f"UPDATE s SET q = {q} WHERE k = {rng.randint(0, 2)}",
                    ]
                )
            )
        commit_and_compare(db, oracle, stmts, queries)
