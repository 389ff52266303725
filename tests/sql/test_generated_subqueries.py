"""Generated views using subqueries of every kind (scalar aggregates, first rows, EXISTS, IN, ANY/ALL) in every
position (SELECT list, inside CASE and functions, WHERE under AND/OR/NOT, HAVING), correlated by equalities,
inequalities, expressions and disjunctions, nested two deep, and LATERAL subqueries in FROM (aggregates, first
rows, DISTINCT, groups, set operations), over NULL-heavy data with duplicates: after every random transaction
each view equals DuckDB's answer to the same query."""

import random

import pytest

from tests.oracle import commit_and_compare, with_views

SCHEMA = [
    "CREATE TABLE t (k INTEGER PRIMARY KEY, a INTEGER, b INTEGER, s VARCHAR)",
    "CREATE TABLE u (x INTEGER, y INTEGER, z INTEGER)",
]


class Gen:
    """Random queries over ``t`` (the outer query) and ``u`` (read by the subqueries)."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def correlation(self, outer: str, inner: str) -> str:
        """A condition tying rows of ``inner`` (an alias of u) to the outer alias ``outer`` (of t)."""
        r = self.r
        return r.choice(
            [
                f"{inner}.x = {outer}.a",
                f"{inner}.y < {outer}.b",
                f"{inner}.z >= {outer}.a",
                f"{inner}.x + {inner}.y = {outer}.a * 2",
                f"({inner}.z <> {outer}.b OR {inner}.x = {outer}.a)",
                f"{inner}.x = {outer}.a AND {inner}.y <= {outer}.b",
                f"{inner}.y IS NOT DISTINCT FROM {outer}.b",
            ]
        )

    def inner_where(self, outer: str, inner: str, depth: int) -> str:
        r = self.r
        parts = []
        if r.random() < 0.85:
            parts.append(self.correlation(outer, inner))
        if r.random() < 0.3:
            parts.append(f"{inner}.y {r.choice(['>', '<=', '<>'])} {r.randint(0, 4)}")
        if depth == 0 and r.random() < 0.2:  # a subquery inside the subquery, reading both levels
            w = "w"
            read = r.choice(
                [f"{w}.b = {inner}.z AND {w}.a < {outer}.b", f"{w}.a = {inner}.x", f"{w}.b > {outer}.a"]
            )
            parts.append(f"{r.choice(['', 'NOT '])}EXISTS (SELECT 1 FROM t AS {w} WHERE {read})")
        return f" WHERE {' AND '.join(parts)}" if parts else ""

    def scalar(self, outer: str, depth: int = 0) -> str:
        r = self.r
        inner = f"u{depth}"
        where = self.inner_where(outer, inner, depth)
        if r.random() < 0.2:
            direction = r.choice(["ASC NULLS FIRST", "DESC NULLS LAST", "ASC NULLS LAST"])
            return f"(SELECT {inner}.y FROM u AS {inner}{where} ORDER BY {inner}.y {direction} LIMIT 1)"
        agg = r.choice(
            [
                "COUNT(*)",
                f"SUM({inner}.z)",
                f"MIN({inner}.y)",
                f"MAX({inner}.z)",
                f"COUNT(DISTINCT {inner}.y)",
                f"COUNT({inner}.x) + 1",
                f"COALESCE(SUM({inner}.y), 0)",
            ]
        )
        return f"(SELECT {agg} FROM u AS {inner}{where})"

    def predicate(self, outer: str) -> str:
        """A condition with a subquery."""
        r = self.r
        inner = "u0"
        where = self.inner_where(outer, inner, 0)
        col = r.choice([f"{outer}.a", f"{outer}.b"])
        kind = r.randint(0, 5)
        if kind == 0:
            return f"{r.choice(['', 'NOT '])}EXISTS (SELECT 1 FROM u AS {inner}{where})"
        if kind == 1:
            return (
                f"{col} {r.choice(['', 'NOT '])}IN (SELECT {inner}.{r.choice('xyz')} FROM u AS {inner}{where})"
            )
        if kind == 2:
            op = r.choice(["=", "<>", "<", ">="])
            quant = r.choice(["ANY", "ALL", "SOME"])
            return f"{col} {op} {quant} (SELECT {inner}.{r.choice('xyz')} FROM u AS {inner}{where})"
        if kind == 3:
            return f"{col} {r.choice(['<', '>=', '=', '<>'])} {self.scalar(outer)}"
        if kind == 4:
            return f"{self.scalar(outer)} {r.choice(['>', '<='])} {r.randint(0, 3)}"
        return f"{col} IN (SELECT {inner}.x FROM u AS {inner} GROUP BY {inner}.x HAVING COUNT(*) > 1)"

    def value(self, outer: str) -> str:
        """An expression of the SELECT list with a subquery."""
        r = self.r
        form = r.randint(0, 5)
        if form == 0:
            return self.scalar(outer)
        if form == 1:
            return f"COALESCE({self.scalar(outer)}, -1)"
        if form == 2:
            return f"CASE WHEN {self.predicate(outer)} THEN 'yes' ELSE 'no' END"
        if form == 3:
            return f"{outer}.a + {self.scalar(outer)}"
        if form == 4:
            return f"({self.predicate(outer)})"
        return f"CASE WHEN {outer}.a > 2 THEN {self.scalar(outer)} END"

    def query(self) -> str:
        r = self.r
        shape = r.random()
        if shape < 0.4:
            cols = ", ".join(f"{self.value('t')} AS v{i}" for i in range(r.randint(1, 2)))
            where = f" WHERE {self.predicate('t')}" if r.random() < 0.3 else ""
            return f"SELECT t.k, {cols} FROM t{where}"
        if shape < 0.75:
            cond = self.predicate("t")
            if r.random() < 0.3:
                cond = f"({cond} {r.choice(['OR', 'AND'])} t.s {r.choice(['=', '<>'])} 'p')"
            elif r.random() < 0.2:
                cond = f"NOT ({cond})"
            return f"SELECT t.k, t.a, t.s FROM t WHERE {cond}"
        if shape < 0.9:
            sub = self.scalar("t").replace("t.a", "t.b")  # grouped by b: the subquery reads the group's b
            having = f"COUNT(*) {r.choice(['>=', '<'])} {sub}"
            extra = f", {sub} AS v" if r.random() < 0.5 else ""
            return f"SELECT t.b, COUNT(*) AS n{extra} FROM t GROUP BY t.b HAVING {having}"
        if r.random() < 0.5:
            return f"SELECT t.k, u.y FROM t JOIN u ON u.x = t.a AND {self.predicate('t')}"
        return f"SELECT t.k, u.y FROM t JOIN u ON u.x = t.a WHERE {self.predicate('t')}"

    def lateral(self) -> str:
        """A query joining ``t`` with a LATERAL subquery over ``u`` that reads it."""
        r = self.r
        where = self.inner_where("t", "u0", 0)
        direction = r.choice(["ASC NULLS FIRST", "DESC NULLS LAST", "DESC NULLS FIRST"])
        order = f"u0.y {direction}, u0.z {direction}, u0.x {direction}"  # rows tied on it are equal
        body = r.choice(
            [
                f"SELECT {r.choice(['COUNT(*)', 'SUM(u0.z)', 'MIN(u0.y) + t.a', 'MAX(u0.x)'])} AS v "
                f"FROM u AS u0{where}",
                f"SELECT u0.y AS v FROM u AS u0{where} ORDER BY {order} LIMIT {r.randint(1, 3)}",
                f"SELECT u0.z AS v FROM u AS u0{where} ORDER BY {order} LIMIT 2 OFFSET 1",
                f"SELECT DISTINCT u0.y AS v FROM u AS u0{where}",
                f"SELECT u0.x AS v, COUNT(*) AS n FROM u AS u0{where} GROUP BY u0.x",
                f"SELECT u0.y + t.b AS v FROM u AS u0{where}",
                f"SELECT u0.x AS v FROM u AS u0{where} UNION SELECT t.b",
            ]
        )
        n = ", l.n" if "AS n" in body else ""
        join = r.choice(
            [
                f", LATERAL ({body}) AS l",
                f" CROSS JOIN LATERAL ({body}) AS l",
                f" LEFT JOIN LATERAL ({body}) AS l ON TRUE",
                f" LEFT JOIN LATERAL ({body}) AS l ON l.v > t.b",
                f" JOIN LATERAL ({body}) AS l ON l.v <> t.a",
            ]
        )
        where = f" WHERE t.s {r.choice(['=', '<>'])} 'p'" if r.random() < 0.2 else ""
        return f"SELECT t.k, l.v{n} FROM t{join}{where}"


def _txn(rng: random.Random, keys: set[int]) -> list[str]:
    def val(hi: int) -> str:
        return "NULL" if rng.random() < 0.25 else str(rng.randint(0, hi))

    out = []
    for _ in range(rng.randint(1, 5)):
        p = rng.random()
        if p < 0.35:
            k = rng.randint(0, 11)
            if k in keys:
                continue
            keys.add(k)
            s = rng.choice(["NULL", "'p'", "'q'"])
            out.append(f"INSERT INTO t VALUES ({k}, {val(5)}, {val(5)}, {s})")
        elif p < 0.7:
            out.append(f"INSERT INTO u VALUES ({val(5)}, {val(5)}, {val(5)})")
        elif p < 0.8 and keys:
            k = rng.choice(sorted(keys))
            keys.discard(k)
            out.append(f"DELETE FROM t WHERE k = {k}")
        elif p < 0.9:
            out.append(f"DELETE FROM u WHERE y = {rng.randint(0, 5)} OR x IS NULL AND z = {rng.randint(0, 5)}")
        else:
            out.append(f"UPDATE t SET b = {val(5)} WHERE k < {rng.randint(0, 11)}")
    return out


def _views_follow_duckdb(seed: int, query, count: int) -> None:
    """``count`` views of ``query(gen)``'s queries, created over some data, equal DuckDB's answers after each of
    six random transactions."""
    rng = random.Random(seed)
    gen = Gen(rng)
    db, duck = with_views(SCHEMA, [])
    keys: set[int] = set()
    for s in _txn(rng, keys) + _txn(rng, keys) + _txn(rng, keys):  # some data before the views exist
        db.execute(s)
        duck.execute(s)
    queries = [query(gen) for _ in range(count)]
    for i, q in enumerate(queries):
        db.execute(f"CREATE VIEW v{i} AS {q}")
    commit_and_compare(db, duck, [], queries)
    for _ in range(6):
        commit_and_compare(db, duck, _txn(rng, keys), queries)


@pytest.mark.parametrize("seed", range(10))
def test_generated_subqueries_equal_duckdb(seed):
    _views_follow_duckdb(7000 + seed, Gen.query, 24)


@pytest.mark.parametrize("seed", range(12))
def test_generated_laterals_equal_duckdb(seed):
    _views_follow_duckdb(9000 + seed, Gen.lateral, 16)
