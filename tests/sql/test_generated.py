"""Generated queries (joins of every kind, aggregates, subqueries, set operations, NULLs, duplicates) maintained
over random update streams equal DuckDB's recompute after every transaction."""

import random

import duckdb
import pytest

import ivm
from tests.oracle import same_rows

SCHEMA = [
    "CREATE TABLE t (a INTEGER PRIMARY KEY, b DECIMAL(8,2), c INTEGER, s VARCHAR)",
    "CREATE TABLE u (x INTEGER, y INTEGER NOT NULL, z DECIMAL(8,2))",
]
T_COLS = {"a": "int", "b": "dec", "c": "int", "s": "text"}
U_COLS = {"x": "int", "y": "int", "z": "dec"}


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def const(self, kind: str) -> str:
        r = self.r
        if kind == "int":
            return str(r.randint(0, 6))
        if kind == "dec":
            return f"{r.randint(-200, 400) / 100:.2f}"
        return r.choice(["'abc'", "'abd'", "'xyz'", "'a'"])

    def pred(self, cols: dict[str, str], depth: int = 0) -> str:
        r = self.r
        name = r.choice(sorted(cols))
        kind = cols[name]
        choice = r.random()
        if depth < 2 and choice < 0.2:
            op = r.choice(["AND", "OR"])
            return f"({self.pred(cols, depth + 1)} {op} {self.pred(cols, depth + 1)})"
        if depth < 2 and choice < 0.27:
            return f"NOT ({self.pred(cols, depth + 1)})"
        if choice < 0.4:
            return f"{name} IS {r.choice(['', 'NOT '])}NULL"
        if kind == "text":
            if r.random() < 0.5:
                return f"{name} {r.choice(['', 'NOT '])}LIKE '{r.choice(['a%', '%b%', '_bc', 'x%'])}'"
            return f"{name} {r.choice(['=', '<>', '<', '>='])} {self.const(kind)}"
        if choice < 0.55:
            items = ", ".join(self.const(kind) for _ in range(r.randint(1, 3)))
            return f"{name} {r.choice(['', 'NOT '])}IN ({items})"
        if choice < 0.65:
            lo, hi = sorted([self.const(kind), self.const(kind)], key=float)
            return f"{name} BETWEEN {lo} AND {hi}"
        return f"{name} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {self.const(kind)}"

    def source(self) -> tuple[str, dict[str, str]]:
        r = self.r
        pick = r.random()
        if pick < 0.3:
            return "t", dict(T_COLS)
        if pick < 0.45:
            return "u", dict(U_COLS)
        kind = r.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN"])
        on = r.choice(["t.a = u.x", "t.c = u.y", "t.a = u.x AND t.c = u.y"])
        cols = {**T_COLS, **U_COLS}
        if kind == "CROSS JOIN":
            return "t CROSS JOIN u", cols
        if kind in ("JOIN", "LEFT JOIN") and r.random() < 0.3:
            on += f" AND u.y {r.choice(['>', '<='])} {r.randint(0, 4)}"
        if kind == "RIGHT JOIN" and r.random() < 0.3:
            on += f" AND t.c {r.choice(['>', '<='])} {r.randint(0, 4)}"
        if kind != "JOIN" and r.random() < 0.3:  # comparing both sides other than by =
            both = r.choice(["t.c < u.y", "t.b <> u.z", "t.c + u.y > 3", "(t.c <= u.x OR u.z IS NULL)"])
            on = both if r.random() < 0.3 else f"{on} AND {both}"
        return f"t {kind} u ON {on}", cols

    def subquery_pred(self, cols: dict[str, str]) -> str:
        r = self.r
        outer_int = [c for c, k in cols.items() if k == "int"]
        col = r.choice(outer_int)
        form = r.randint(0, 4)
        if form == 0:
            neg = r.choice(["", "NOT "])
            return f"{neg}EXISTS (SELECT * FROM u u2 WHERE u2.x = {col} AND u2.y > {r.randint(0, 3)})"
        if form == 1:
            return f"{col} {r.choice(['', 'NOT '])}IN (SELECT u2.y FROM u u2 WHERE u2.z > {self.const('dec')})"
        if form == 2:
            return f"{col} > (SELECT AVG(u2.y) FROM u u2 WHERE u2.x = {col})"
        if form == 3:
            return f"{col} <= (SELECT COUNT(*) FROM t t2 WHERE t2.c IS NOT NULL)"
        return f"NOT EXISTS (SELECT * FROM u u2 WHERE u2.x = {col} AND u2.y <> {col})"

    def select(self) -> str:
        r = self.r
        src, cols = self.source()
        where = []
        for _ in range(r.randint(0, 2)):
            where.append(self.pred(cols))
        if r.random() < 0.3 and "u" not in src.split():
            where.append(self.subquery_pred(cols))
        wsql = f" WHERE {' AND '.join(where)}" if where else ""
        names = sorted(cols)
        shape = r.random()
        if shape < 0.35:
            group = r.sample(names, r.randint(1, 2))
            numeric = [c for c in names if cols[c] in ("int", "dec")]
            aggs = ["COUNT(*) AS n"]
            for i in range(r.randint(1, 3)):
                f = r.choice(["SUM", "MIN", "MAX", "AVG", "COUNT", "COUNT(DISTINCT"])
                arg = r.choice(numeric if f in ("SUM", "AVG") else names)
                aggs.append(
                    f"COUNT(DISTINCT {arg}) AS g{i}" if f == "COUNT(DISTINCT" else f"{f}({arg}) AS g{i}"
                )
            having = f" HAVING COUNT(*) > {r.randint(0, 2)}" if r.random() < 0.3 else ""
            return f"SELECT {', '.join(group + aggs)} FROM {src}{wsql} GROUP BY {', '.join(group)}{having}"
        if shape < 0.45:
            numeric = [c for c in names if cols[c] in ("int", "dec")]
            a = r.choice(numeric)
            return f"SELECT COUNT(*) AS n, SUM({a}) AS s, MAX({a}) AS m FROM {src}{wsql}"
        picked = r.sample(names, r.randint(1, 3))
        exprs = list(picked)
        ints = [c for c in names if cols[c] == "int"]
        if r.random() < 0.4 and ints:
            x = r.choice(ints)
            exprs.append(
                r.choice(
                    [
                        f"{x} + 1 AS e1",
                        f"COALESCE({x}, -1) AS e1",
                        f"CASE WHEN {x} > 2 THEN 'hi' ELSE 'lo' END AS e1",
                        f"NULLIF({x}, 2) AS e1",
                    ]
                )
            )
        distinct = "DISTINCT " if r.random() < 0.25 else ""
        sql = f"SELECT {distinct}{', '.join(exprs)} FROM {src}{wsql}"
        if r.random() < 0.15:
            order = ", ".join(f"{i + 1}{r.choice(['', ' DESC'])}" for i in range(len(exprs)))
            sql += f" ORDER BY {order} LIMIT {r.randint(1, 4)}"
        return sql

    def query(self) -> str:
        r = self.r
        if r.random() < 0.15:
            kind = r.choice(["int", "text"])
            a = r.choice([c for c, k in T_COLS.items() if k == kind])
            b = r.choice([c for c, k in U_COLS.items() if k == kind] or ["x"]) if kind == "int" else None
            left = f"SELECT {a} AS k FROM t WHERE {self.pred(T_COLS)}"
            right = f"SELECT {b} AS k FROM u" if b else f"SELECT s AS k FROM t WHERE {self.pred(T_COLS)}"
            op = r.choice(["UNION", "UNION ALL", "EXCEPT", "EXCEPT ALL", "INTERSECT", "INTERSECT ALL"])
            return f"{left} {op} {right}"
        return self.select()


def _txn(rng: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 5)):
        p = rng.random()
        if p < 0.4:
            a = rng.randint(0, 9)
            if a in keys:
                continue
            keys.add(a)
            b = rng.choice(["NULL", f"{rng.randint(-200, 400) / 100:.2f}"])
            c = rng.choice(["NULL", str(rng.randint(0, 6))])
            s = rng.choice(["NULL", "'abc'", "'abd'", "'xyz'", "'a'"])
            out.append(f"INSERT INTO t VALUES ({a}, {b}, {c}, {s})")
        elif p < 0.75:
            x = rng.choice(["NULL", str(rng.randint(0, 9))])
            z = rng.choice(["NULL", f"{rng.randint(-200, 400) / 100:.2f}"])
            out.append(f"INSERT INTO u VALUES ({x}, {rng.randint(0, 6)}, {z})")
        elif p < 0.85 and keys:
            a = rng.choice(sorted(keys))
            keys.discard(a)
            out.append(f"DELETE FROM t WHERE a = {a}")
        elif p < 0.93:
            out.append(f"DELETE FROM u WHERE y = {rng.randint(0, 6)}")
        else:
            out.append(f"UPDATE t SET c = {rng.randint(0, 6)} WHERE a < {rng.randint(0, 9)}")
    return out


@pytest.mark.parametrize("seed", range(10))
def test_generated_queries_equal_duckdb(seed):
    rng = random.Random(1000 + seed)
    gen = Gen(rng)
    db, duck = ivm.connect(), duckdb.connect()
    duck.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    for s in SCHEMA:
        db.execute(s)
        duck.execute(s)
    keys: set[int] = set()
    for s in _txn(rng, keys) + _txn(rng, keys):  # some data before the views exist
        db.execute(s)
        duck.execute(s)
    queries = {}
    while len(queries) < 21:
        q = gen.query()
        try:
            duck.execute(q).fetchall()
        except duckdb.Error:
            continue  # not valid SQL for this schema; draw another
        name = f"g{len(queries)}"
        db.execute(f"CREATE VIEW {name} AS {q}")
        queries[name] = q
    for step in range(5):
        stmts = _txn(rng, keys)
        db.execute("BEGIN")
        for s in stmts:
            db.execute(s)
        db.execute("COMMIT")
        for s in stmts:
            duck.execute(s)
        for name, q in queries.items():
            got = db.execute(f"SELECT * FROM {name}").fetchall()
            expected = duck.execute(q).fetchall()
            assert same_rows(got, expected), f"{q}\nafter step {step}: got {got}, expected {expected}"
