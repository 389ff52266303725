"""Views maintained through random transactions equal DuckDB's recompute of the same SQL after each one."""

import random

import duckdb
import pytest

import ivm
from tests.oracle import same_rows

SCHEMA = [
    "CREATE TABLE t (a INTEGER PRIMARY KEY, b DECIMAL(10,2), c INTEGER, s VARCHAR)",
    "CREATE TABLE u (x INTEGER, y INTEGER NOT NULL, z DECIMAL(8,2))",
]

VIEWS = {
    "v_filter": "SELECT a, b, s FROM t WHERE c > 2 AND s LIKE 'a%'",
    "v_strings": "SELECT s || '-' || s AS ss, LENGTH(s) AS n, UPPER(s) AS up, SUBSTRING(s, 2, 1) AS mid, "
    "TRIM(' ' || s || ' ') AS tr FROM t",
    "v_project": "SELECT a + c AS ac, b * 2 AS b2, CASE WHEN c IS NULL THEN -1 ELSE c END AS cc, "
    "COALESCE(b, 0) AS b0, NULLIF(c, 3) AS n3 FROM t",
    "v_in": "SELECT a, c FROM t WHERE c IN (1, 3, 5) OR b BETWEEN 1.00 AND 3.50",
    "v_negations": "SELECT a FROM t WHERE b IS NOT NULL AND c NOT IN (2, 4) AND s NOT LIKE '%b%' "
    "AND a NOT BETWEEN 3 AND 5",
    "v_join": "SELECT t.a, t.s, u.y, u.z FROM t JOIN u ON t.a = u.x WHERE u.y >= 2",
    "v_left": "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x",
    "v_right": "SELECT t.a, u.x, u.y FROM t RIGHT JOIN u ON t.a = u.x",
    "v_full": "SELECT t.a, u.x FROM t FULL JOIN u ON t.a = u.x",
    "v_using": "SELECT * FROM t JOIN (SELECT x AS a, y FROM u) q USING (a)",
    "v_using_full": "SELECT a, s, y FROM t FULL JOIN (SELECT x AS a, y FROM u) q USING (a)",
    "v_using_chain": "SELECT a, c, y, r.s FROM (SELECT a, c FROM t) p "
    "RIGHT JOIN (SELECT x AS a, y FROM u) q USING (a) LEFT JOIN (SELECT a, s FROM t) r ON r.a = q.a",
    "v_natural": "SELECT * FROM (SELECT a, c AS y FROM t) p NATURAL JOIN (SELECT x AS a, y FROM u) q",
    "v_left_on_filter": "SELECT t.a, COUNT(u.y) AS n FROM t LEFT JOIN u ON t.a = u.x AND u.z > 0 GROUP BY t.a",
    "v_group": "SELECT c, COUNT(*) AS n, SUM(b) AS sb, MIN(b) AS mn, MAX(a) AS mx, AVG(b) AS ab, "
    "COUNT(b) AS nb, COUNT(DISTINCT s) AS ds FROM t GROUP BY c",
    "v_having": "SELECT x, SUM(y) AS sy FROM u GROUP BY x HAVING COUNT(*) > 1",
    "v_global": "SELECT COUNT(*) AS n, SUM(z) AS sz, MAX(y) AS my FROM u",
    "v_join_agg": "SELECT t.c, SUM(u.z) AS total, COUNT(*) AS n FROM t JOIN u ON t.a = u.x GROUP BY t.c",
    "v_distinct": "SELECT DISTINCT x FROM u",
    "v_union_all": "SELECT a AS k FROM t UNION ALL SELECT x AS k FROM u",
    "v_union": "SELECT a AS k FROM t UNION SELECT x AS k FROM u",
    "v_except": "SELECT c AS k FROM t EXCEPT SELECT y AS k FROM u",
    "v_except_all": "SELECT c AS k FROM t EXCEPT ALL SELECT y AS k FROM u",
    "v_intersect": "SELECT c AS k FROM t INTERSECT SELECT y AS k FROM u",
    "v_intersect_all": "SELECT c AS k FROM t INTERSECT ALL SELECT y AS k FROM u",
    "v_topk": "SELECT a, c FROM t ORDER BY c DESC, a LIMIT 3",
    "v_topk_text": "SELECT s, a FROM t ORDER BY s, a DESC LIMIT 4 OFFSET 1",
    "v_minmax_text": "SELECT c, MIN(s) AS lo, MAX(s) AS hi FROM t GROUP BY c",
    "v_view_on_view": "SELECT c, n FROM v_group WHERE n > 1",
    "v_cross": "SELECT t.a, u.y FROM t CROSS JOIN u WHERE t.c = u.y",
    "v_exists": "SELECT a FROM t WHERE EXISTS (SELECT * FROM u WHERE u.x = t.a AND u.y > 1)",
    "v_not_exists": "SELECT a FROM t WHERE NOT EXISTS (SELECT * FROM u WHERE u.x = t.a)",
    "v_in_sub": "SELECT a FROM t WHERE c IN (SELECT y FROM u)",
    "v_not_in": "SELECT a FROM t WHERE c NOT IN (SELECT y FROM u WHERE x > 3)",
    "v_scalar": "SELECT a FROM t WHERE b > (SELECT AVG(z) FROM u)",
    "v_corr_scalar": "SELECT x, y FROM u WHERE z < (SELECT AVG(z) FROM u u2 WHERE u2.x = u.x)",
    "v_uncorr_exists": "SELECT x FROM u WHERE EXISTS (SELECT * FROM t WHERE c = 5)",
    "v_exists_neq": "SELECT x, y FROM u WHERE EXISTS (SELECT * FROM u u2 WHERE u2.x = u.x AND u2.y <> u.y)",
    "v_not_exists_neq": "SELECT x, y FROM u WHERE NOT EXISTS "
    "(SELECT * FROM u u3 WHERE u3.x = u.x AND u3.y > u.y AND u3.z IS NOT NULL)",
}


def _random_txn(rng: random.Random, state: dict) -> list[str]:
    stmts = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.45:
            a = rng.randint(0, 12)
            if a in state["t"]:
                continue
            b = rng.choice([None, f"{rng.randint(0, 500) / 100:.2f}"])
            c = rng.choice([None, rng.randint(0, 5)])
            s = rng.choice([None, "'abc'", "'abd'", "'xyz'", "'a'"])
            state["t"].add(a)
            stmts.append(
                f"INSERT INTO t VALUES ({a}, {b or 'NULL'}, {'NULL' if c is None else c}, {s or 'NULL'})"
            )
        elif r < 0.75:
            x = rng.choice([None, rng.randint(0, 12)])
            y = rng.randint(0, 4)
            z = rng.choice([None, f"{rng.randint(-300, 300) / 100:.2f}"])
            stmts.append(f"INSERT INTO u VALUES ({'NULL' if x is None else x}, {y}, {z or 'NULL'})")
        elif r < 0.85 and state["t"]:
            a = rng.choice(sorted(state["t"]))
            state["t"].discard(a)
            stmts.append(f"DELETE FROM t WHERE a = {a}")
        elif r < 0.93:
            stmts.append(f"DELETE FROM u WHERE y = {rng.randint(0, 4)} AND x > {rng.randint(0, 12)}")
        else:
            stmts.append(f"UPDATE t SET c = {rng.randint(0, 5)} WHERE a < {rng.randint(0, 12)}")
    return stmts


@pytest.mark.parametrize("seed", range(6))
def test_views_equal_duckdb_after_every_transaction(seed):
    rng = random.Random(seed)
    db = ivm.connect()
    oracle = duckdb.connect()
    oracle.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")  # PostgreSQL's order
    for s in SCHEMA:
        db.execute(s)
        oracle.execute(s)
    names = list(VIEWS)
    # half the views exist before any data, half are created over data already there
    early, late = names[: len(names) // 2], names[len(names) // 2 :]
    for n in early:
        db.execute(f"CREATE MATERIALIZED VIEW {n} AS {VIEWS[n]}")
    state = {"t": set()}
    for step in range(14):
        stmts = _random_txn(rng, state)
        if len(stmts) > 1 and rng.random() < 0.5:
            db.execute("BEGIN")
            for s in stmts:
                db.execute(s)
            db.execute("COMMIT")
        else:
            for s in stmts:
                db.execute(s)
        for s in stmts:
            oracle.execute(s)
        if step == 4:
            for n in late:
                db.execute(f"CREATE VIEW {n} AS {VIEWS[n]}")
        for n in names:
            if n in late and step < 4:
                continue
            got = db.execute(f"SELECT * FROM {n}").fetchall()
            sql = VIEWS[n].replace("v_group", f"({VIEWS['v_group']})")
            expected = oracle.execute(sql).fetchall()
            assert same_rows(got, expected), f"{n} after step {step}: got {got}, expected {expected}"
