"""LATERAL subqueries in FROM, derived tables and set operations inside subqueries that read the outer query,
subqueries in a RIGHT or FULL join's ON condition reading both sides: views holding them follow random
inserts, updates and deletes (NULLs and duplicates among them) exactly as a throwaway PostgreSQL answers the
same queries after every transaction; what ivm cannot do is refused by name and position, and what
PostgreSQL refuses is an error at the same place."""

from __future__ import annotations

import random
import shutil

import pytest

import ivm
from ivm.errors import NotSupportedError, ProgrammingError
from tests.pg import change, comparable, error_at, views_follow

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb and pg_ctl")

TABLES = [
    "CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER, a INTEGER, b TEXT)",
    "CREATE TABLE u (id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, y TEXT)",
]

VIEWS = [
    # select-project-join bodies, correlated by equalities, inequalities and NULL-safe equalities
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g) s",
    "SELECT t.id, s.x FROM t CROSS JOIN LATERAL (SELECT u.x FROM u WHERE u.x > t.a) AS s",
    "SELECT t.id, s.x FROM t LEFT JOIN LATERAL (SELECT u.x FROM u WHERE u.x > t.a) AS s ON true",
    "SELECT t.id, s.c FROM t, LATERAL (SELECT t.a + 1 AS c) s",
    "SELECT t.id, s.a2 FROM t, LATERAL (SELECT t.a * 2 AS a2 FROM u WHERE u.g = t.g) s WHERE t.a > 1",
    "SELECT * FROM t, LATERAL (SELECT u.x, u.y FROM u WHERE u.y = t.b) s(p, q)",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g) AS s WHERE s.x IS NULL OR s.x > t.a",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u LEFT JOIN t t2 ON t2.id = u.x AND t2.a = t.a "
    "WHERE u.g = t.g) s",
    # the join's own condition, and LEFT JOIN padding
    "SELECT t.id, s.x FROM t LEFT JOIN LATERAL (SELECT u.x FROM u WHERE u.g = t.g) s ON s.x > t.a",
    "SELECT t.id, s.k, s.c FROM t JOIN LATERAL (SELECT u.g AS k, count(*) AS c FROM u WHERE u.x >= t.a "
    "GROUP BY u.g) s ON s.k = t.g",
    "SELECT t.id, s.n FROM t LEFT JOIN LATERAL (SELECT count(*) AS n FROM u WHERE u.g = t.g) s ON s.n > 1",
    # aggregates: one row for every outer row, its value over no rows where none match
    "SELECT t.id, s.n, s.m FROM t, LATERAL (SELECT count(*) AS n, max(u.x) AS m FROM u WHERE u.g = t.g) s",
    "SELECT t.id, s.m FROM t, LATERAL (SELECT max(u.x) + t.a AS m, count(u.x) * 2 AS c2 FROM u "
    "WHERE u.g = t.g) s",
    "SELECT t.id, s.n FROM t, LATERAL (SELECT count(*) AS n FROM u WHERE u.g = t.g HAVING count(*) > 1) s",
    "SELECT t.id, s.n FROM t, LATERAL (SELECT count(*) AS n FROM u WHERE u.g = t.g HAVING count(*) = 0) s",
    "SELECT t.id, s.c FROM t, LATERAL (SELECT string_agg(u.y, ',' ORDER BY u.y, u.id) AS c FROM u "
    "WHERE u.g = t.g) s",
    "SELECT t.id, s.y, s.c FROM t LEFT JOIN LATERAL (SELECT u.y, count(*) AS c FROM u WHERE u.g = t.g "
    "GROUP BY u.y) s ON true",
    # the first rows of each outer row's, in an order
    "SELECT t.id, s.x, s.id AS uid FROM t, LATERAL (SELECT u.x, u.id FROM u WHERE u.g = t.g "
    "ORDER BY u.x DESC, u.id LIMIT 2) s",
    "SELECT t.id, s.x FROM t LEFT JOIN LATERAL (SELECT u.x FROM u WHERE u.g = t.g "
    "ORDER BY u.x NULLS FIRST, u.id LIMIT 1 OFFSET 1) s ON true",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT DISTINCT u.x FROM u WHERE u.g = t.g ORDER BY u.x DESC LIMIT 2) s",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g ORDER BY 1, u.id LIMIT 1) s",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g ORDER BY u.x, u.id "
    "FETCH FIRST 1 ROWS ONLY) s",
    "SELECT t.g, sum(s.x) AS sx FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g LIMIT 100) s GROUP BY t.g",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.y = t.b LIMIT 0) s",
    # DISTINCT, DISTINCT ON, window functions, set operations, VALUES
    "SELECT t.id, s.y FROM t, LATERAL (SELECT DISTINCT u.y FROM u WHERE u.g = t.g) s",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT DISTINCT ON (u.g) u.g, u.x FROM u WHERE u.x >= t.a "
    "ORDER BY u.g, u.x) s",
    "SELECT t.id, s.x, s.r FROM t, LATERAL (SELECT u.x, row_number() OVER (ORDER BY u.x, u.id) AS r FROM u "
    "WHERE u.g IS NOT DISTINCT FROM t.g) s",
    "SELECT t.id, s.x, s.rk FROM t, LATERAL (SELECT u.x, rank() OVER (PARTITION BY u.y ORDER BY u.x) AS rk "
    "FROM u WHERE u.x >= t.a) s",
    "SELECT t.id, s.x, s.s FROM t, LATERAL (SELECT u.x, sum(u.x) OVER (ORDER BY u.id ROWS BETWEEN 1 PRECEDING "
    "AND CURRENT ROW) AS s FROM u WHERE u.g = t.g) s",
    "SELECT t.id, s.v FROM t, LATERAL (SELECT u.x AS v FROM u WHERE u.g = t.g UNION SELECT t.a) s",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.x < t.a INTERSECT "
    "SELECT u.x FROM u WHERE u.g = t.g) s",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g EXCEPT ALL SELECT t.a) s",
    "SELECT t.id, s.x FROM t, LATERAL (VALUES (t.a), (t.id), (t.a)) AS s(x)",
    # one LATERAL reading another, subqueries inside, after joins and derived tables, in WITH and in EXISTS
    "SELECT t.id, s.x, w.x AS wx FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g) s, "
    "LATERAL (SELECT max(u.x) AS x FROM u WHERE u.x < s.x) w",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g "
    "AND EXISTS (SELECT 1 FROM u u2 WHERE u2.x > t.a)) s",
    "SELECT t.id, s.z FROM t, LATERAL (SELECT (SELECT count(*) FROM u WHERE u.x < t.a) AS z) s",
    "SELECT t.id, s.x FROM t, LATERAL (SELECT q.x FROM (SELECT u.x FROM u WHERE u.g = t.g) q WHERE q.x > 1) s",
    "SELECT t.id, s.n FROM t, LATERAL (SELECT count(*) AS n FROM (SELECT u.x FROM u WHERE u.g = t.g LIMIT 2) "
    "q) s",
    "SELECT t.id, s.x FROM (SELECT g, max(a) AS a, min(id) AS id FROM t GROUP BY g) t, "
    "LATERAL (SELECT u.x FROM u WHERE u.g = t.g AND u.x <= t.a) s",
    "SELECT t.id, s.x, v.y FROM t, LATERAL (SELECT u.x, u.id FROM u WHERE u.g = t.g) s "
    "LEFT JOIN u v ON v.id = s.id",
    "SELECT t.id, s.x FROM t JOIN u ON u.id = t.id, LATERAL (SELECT u2.x FROM u u2 "
    "WHERE u2.g = u.g AND u2.x > t.a) s",
    "SELECT t.id, s.x FROM t LEFT JOIN u ON u.g = t.g, LATERAL (SELECT coalesce(u.x, -1) + t.id AS x) s",
    "SELECT s.g, count(*) AS c FROM (SELECT DISTINCT g FROM t) d, "
    "LATERAL (SELECT u.g FROM u WHERE u.g IS NOT DISTINCT FROM d.g) s GROUP BY s.g",
    "WITH w AS (SELECT t.id, s.x FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g) s) "
    "SELECT id, count(*) AS c FROM w GROUP BY id",
    "SELECT t.id FROM t WHERE EXISTS (SELECT 1 FROM u, LATERAL (SELECT u.x + t.a AS z) z WHERE z.z > 3)",
    # a derived table inside a subquery that reads the outer query (taken as LATERAL)
    "SELECT t.id, (SELECT max(q.z) FROM (SELECT u.x + t.a AS z FROM u) q) AS m FROM t",
    "SELECT t.id FROM t WHERE t.a < (SELECT count(*) FROM (SELECT u.x FROM u WHERE u.x < t.a) q)",
    "SELECT t.id, (SELECT count(*) FROM u JOIN (SELECT u2.x FROM u u2 WHERE u2.x < t.a) q ON q.x = u.x) AS c "
    "FROM t",
    "SELECT t.id FROM t WHERE EXISTS (SELECT 1 FROM (SELECT u2.x + t.a AS z FROM u u2) z WHERE z.z > 3)",
    # correlated set operations and VALUES lists in EXISTS, IN and ANY/ALL
    "SELECT t.id FROM t WHERE t.a NOT IN (SELECT u.x FROM u WHERE u.g = t.g UNION SELECT t.id)",
    "SELECT t.id FROM t WHERE t.a IN (SELECT u.x FROM u WHERE u.g = t.g UNION ALL SELECT t.g)",
    "SELECT t.id FROM t WHERE t.a NOT IN (VALUES (t.g), (t.id + 1))",
    "SELECT t.id, t.a IN (VALUES (t.g), (NULL)) AS f FROM t",
    "SELECT t.id FROM t WHERE EXISTS (SELECT u.x FROM u WHERE u.g = t.g EXCEPT SELECT t.a)",
    "SELECT t.id FROM t WHERE NOT EXISTS (SELECT u.x FROM u WHERE u.x > t.a INTERSECT "
    "SELECT u.x FROM u WHERE u.g = t.g)",
    "SELECT t.id FROM t WHERE t.a > ALL (SELECT u.x FROM u WHERE u.g = t.g UNION SELECT t.g)",
    "SELECT t.id, t.a < ANY (SELECT u.x FROM u WHERE u.g = t.g UNION ALL SELECT NULL) AS f FROM t",
    # a correlated subquery over a RIGHT or FULL join that reads the outer query in WHERE only
    "SELECT t.id, (SELECT count(*) FROM u RIGHT JOIN t t2 ON t2.id = u.x WHERE u.g = t.g OR t2.a = t.a) AS c "
    "FROM t",
    "SELECT t.id FROM t WHERE EXISTS (SELECT 1 FROM u FULL JOIN t t2 ON t2.id = u.x "
    "WHERE t2.g = t.g AND u.id IS NULL)",
    # a subquery reading both sides in the ON condition of a RIGHT or FULL join (PostgreSQL cannot run a FULL
    # join on such a condition: its answer is asked for as the LEFT join's and the right rows no left row meets)
    "SELECT t.id, u.id AS uid FROM t RIGHT JOIN u ON EXISTS (SELECT 1 FROM u w WHERE w.g = t.g AND w.x > u.x)",
    "SELECT t.id, u.id AS uid, t2.id AS t2id FROM t JOIN t t2 ON t2.g = t.g RIGHT JOIN u "
    "ON u.x IN (SELECT w.x FROM u w WHERE w.g = t2.g AND w.y IS NOT DISTINCT FROM u.y)",
    "SELECT t.id, u.id AS uid, v.id AS vid FROM t RIGHT JOIN u ON (SELECT count(*) FROM u w WHERE w.g = t.g) "
    "= u.x LEFT JOIN u v ON v.id = t.id",
    (
        "SELECT t.id, u.id AS uid FROM t FULL JOIN u ON u.x = (SELECT max(w.x) FROM u w WHERE w.g = t.g "
        "AND w.y = u.y)",
        "SELECT t.id, u.id AS uid FROM t LEFT JOIN u ON u.x = (SELECT max(w.x) FROM u w WHERE w.g = t.g "
        "AND w.y = u.y) UNION ALL SELECT NULL, u.id FROM u WHERE NOT EXISTS (SELECT 1 FROM t WHERE u.x = "
        "(SELECT max(w.x) FROM u w WHERE w.g = t.g AND w.y = u.y))",
    ),
    (
        "SELECT t.id, u.x FROM t FULL JOIN u ON u.g = t.g AND t.a < (SELECT count(*) FROM u w "
        "WHERE w.x <= u.x)",
        "SELECT t.id, u.x FROM t LEFT JOIN u ON u.g = t.g AND t.a < (SELECT count(*) FROM u w "
        "WHERE w.x <= u.x) UNION ALL SELECT NULL, u.x FROM u WHERE NOT EXISTS (SELECT 1 FROM t WHERE u.g = t.g "
        "AND t.a < (SELECT count(*) FROM u w WHERE w.x <= u.x))",
    ),
    # a subquery in the list of a query grouped by ROLLUP, CUBE or GROUPING SETS
    "SELECT u.g, count(*) AS c, (SELECT max(t.a) FROM t WHERE t.g = u.g) AS m FROM u GROUP BY ROLLUP (u.g)",
    "SELECT u.g, sum(u.x) AS sx FROM u GROUP BY ROLLUP (u.g) "
    "HAVING sum(u.x) > (SELECT min(t.a) FROM t WHERE t.g IS NOT DISTINCT FROM u.g)",
    "SELECT u.g, u.y, count(*) AS c, (SELECT max(t.a) FROM t WHERE t.g = u.g AND t.b = u.y) AS m FROM u "
    "GROUP BY CUBE (u.g, u.y)",
    "SELECT u.g, grouping(u.g) AS gg, count(*) AS c, (SELECT count(*) FROM t WHERE t.g = u.g) AS m FROM u "
    "GROUP BY GROUPING SETS ((u.g), ())",
]


def _transaction(rng: random.Random) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 6)):
        table = rng.choice("tu")
        key = rng.randint(1, 12)
        g, a, b = rng.choice([1, 2, 3, None]), rng.choice([1, 2, 5, 9, None]), rng.choice(["p", "q", None])
        out.append(change(table, key, rng.random(), g, a, b))
    return out


@pytest.fixture(scope="module")
def pg():
    from tests.pg import postgres

    for conn in postgres():
        for s in TABLES:
            conn.execute(s)
        yield conn


@pytest.mark.parametrize("seed", [1, 2])
def test_lateral_views_follow_their_tables_as_postgresql_answers(pg, seed):
    rng = random.Random(seed)
    db = ivm.connect()
    for s in TABLES:
        db.execute(s)
    views_follow(pg, db, VIEWS, lambda: _transaction(rng), comparable)


@pytest.mark.parametrize(
    ("sql", "error", "words", "at"),
    [
        (
            "SELECT * FROM t RIGHT JOIN LATERAL (SELECT t.g) x ON true",
            ProgrammingError,
            'invalid reference to FROM-clause entry for table "t"',
            "t.g",
        ),
        (
            "SELECT * FROM t, LATERAL (SELECT w.g) x, t w",
            ProgrammingError,
            'invalid reference to FROM-clause entry for table "w"',
            "w.g",
        ),
        (
            "SELECT * FROM t, LATERAL (SELECT t.g) x RIGHT JOIN u ON true",
            NotSupportedError,
            "a LATERAL subquery followed by a RIGHT or FULL join",
            "u ON",
        ),
        (
            "SELECT * FROM t, LATERAL (SELECT u.g FROM u WHERE u.x > t.a GROUP BY ROLLUP (u.g)) s",
            NotSupportedError,
            "GROUPING SETS, ROLLUP or CUBE in a LATERAL subquery",
            "ROLLUP (u.g)",
        ),
        (
            "SELECT * FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g UNION SELECT 1 LIMIT 2) s",
            NotSupportedError,
            "a LATERAL set operation with LIMIT or OFFSET",
            "SELECT u.x",
        ),
        (
            "SELECT * FROM t, LATERAL (WITH w AS (SELECT 1 AS o) SELECT w.o + t.a AS z FROM w) s",
            NotSupportedError,
            "WITH inside a LATERAL subquery",
            "WITH w",
        ),
        (
            "SELECT * FROM t, LATERAL (SELECT u.x FROM u WHERE u.g = t.g LIMIT t.a) s",
            NotSupportedError,
            "a LIMIT in a LATERAL subquery must be a number",
            "t.a) s",
        ),
        (
            "SELECT t.id, (SELECT count(*) FROM u FULL JOIN t t2 ON t2.id = u.x AND t2.a = t.a) FROM t",
            NotSupportedError,
            "a subquery with a RIGHT or FULL join that reads the outer query in its FROM clause",
            "t t2",
        ),
    ],
)
def test_what_lateral_cannot_take_is_an_error_at_it(pg, sql, error, words, at):
    if error is ProgrammingError:  # PostgreSQL refuses it too
        with pytest.raises(psycopg.Error):
            pg.execute(sql)
    db = ivm.connect()
    for s in TABLES:
        db.execute(s)
    error_at(db, sql, error, words, at)
