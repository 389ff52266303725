"""EXPLAIN of views beyond TPC-H, each made as the view is created after the ones before it in one database,
compared with golden files (tests/sql/explain/NAME.txt): recursion, outer joins, top-k, semi- and anti-joins,
set operations, indexes and views over views, so that what the planner builds and shares is reviewed as a
diff whenever it changes."""

from pathlib import Path

import pytest

import ivm
from tests.golden import assert_golden, explain_as_created

GOLDEN = Path(__file__).parent / "explain"

SCHEMA = """
CREATE TABLE e (src INTEGER, dst INTEGER);
CREATE TABLE w (src INTEGER, dst INTEGER, len INTEGER);
CREATE TABLE roots (r INTEGER PRIMARY KEY);
CREATE TABLE c (ck INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT);
CREATE TABLE o (ok INTEGER PRIMARY KEY, ck INTEGER, day DATE, total DECIMAL(12,2), note VARCHAR(40));
"""

VIEWS = {
    "tc": "WITH RECURSIVE tc(a, b) AS (SELECT src, dst FROM e UNION SELECT tc.a, e.dst FROM tc JOIN e "
    "ON tc.b = e.src) SELECT a, b FROM tc",
    "sssp": "WITH MUTUALLY RECURSIVE dist(node INTEGER, len INTEGER) AS (SELECT node, MIN(len) FROM "
    "(SELECT r AS node, 0 AS len FROM roots UNION ALL SELECT w.dst, dist.len + w.len FROM dist JOIN w "
    "ON w.src = dist.node) x GROUP BY node) SELECT node, len FROM dist",
    "over_tc": "SELECT a, COUNT(*) AS n FROM tc GROUP BY a HAVING COUNT(*) > 2",
    "orders_of": "SELECT c.name, o.ok, o.total FROM c LEFT JOIN o ON o.ck = c.ck",
    "either": "SELECT c.ck, o.ok FROM c FULL JOIN o ON o.ck = c.ck",
    "last_per_region": "SELECT DISTINCT ON (region) region, name, ck FROM c ORDER BY region, ck DESC",
    "top_orders": "SELECT ok, total FROM o ORDER BY total DESC NULLS LAST, ok LIMIT 3",
    "buyers": "SELECT name FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.ck = c.ck AND o.total > 100)",
    "idle": "SELECT name FROM c WHERE NOT EXISTS (SELECT 1 FROM o WHERE o.ck = c.ck)",
    "regions": "SELECT DISTINCT region FROM c",
    "no_orders": "SELECT ck FROM c EXCEPT SELECT ck FROM o",
    "spend": "SELECT c.region, SUM(o.total) AS spent, AVG(o.total) AS mean, COUNT(*) AS n FROM c "
    "JOIN o ON o.ck = c.ck WHERE o.day >= DATE '1995-03-15' AND o.note LIKE 'rush%' GROUP BY c.region",
    "big_spenders": "SELECT s.region, c.name FROM spend s JOIN c ON c.region = s.region WHERE s.spent > 0.05",
    "totals": "SELECT COUNT(*) AS n, MAX(total) AS most, MIN(day) AS first FROM o",
    "customers_of_day": "SELECT day, COUNT(DISTINCT ck) AS buyers, SUM(DISTINCT total) AS amounts, COUNT(*) "
    "FILTER (WHERE total > 100) AS big FROM o GROUP BY day",
    "same_customers": "SELECT day, AVG(DISTINCT ck) AS mean FROM o GROUP BY day",
    "regional_rollup": "SELECT c.region, o.day, SUM(o.total) AS spent, GROUPING(c.region, o.day) AS level "
    "FROM c JOIN o ON o.ck = c.ck GROUP BY ROLLUP (c.region, o.day)",
    "names_by_region": "SELECT region, STRING_AGG(name, ', ' ORDER BY ck DESC) AS names, BOOL_OR(ck > 10) "
    "AS big FROM c GROUP BY region",
}


@pytest.fixture(scope="module")
def explained() -> dict[str, list[str]]:
    db = ivm.connect()
    db.execute(SCHEMA)
    db.execute("CREATE INDEX o_by_ck ON o (ck)")
    return explain_as_created(db, VIEWS)


@pytest.mark.parametrize("name", VIEWS)
def test_explain_matches_golden(explained, name):
    assert_golden(GOLDEN / f"{name}.txt", explained[name])
