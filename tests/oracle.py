"""Comparison of query results as multisets: decimals exactly, floats to 1e-9 relative; a connection with views
beside a DuckDB oracle holding the same tables."""

import decimal
import math

import duckdb

import ivm


def _norm(v):
    if isinstance(v, float):
        return ("n", round(v, 6))
    if isinstance(v, decimal.Decimal):
        return ("n", round(float(v), 6))
    return ("v", repr(v))


def _equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
        return decimal.Decimal(a) == decimal.Decimal(b)
    return a == b


def unpadded(cursor) -> list[tuple]:
    """The rows of an ivm query (a cursor or connection just executed) with its CHAR(n) values without their
    padding, as DuckDB, which holds CHAR(n) as VARCHAR, gives them; other values as they are."""
    rows = cursor.fetchall()
    chars = [i for i, d in enumerate(cursor.description) if d[1].startswith(("CHAR(", "BPCHAR"))]
    if not chars:
        return rows
    out = []
    for r in rows:
        r = list(r)
        for i in chars:
            if r[i] is not None:
                r[i] = r[i].rstrip(" ")
        out.append(tuple(r))
    return out


def same_rows(got, expected) -> bool:
    """Whether two results hold the same rows with the same multiplicities."""
    if len(got) != len(expected):
        return False

    def key(r):
        return tuple(_norm(x) for x in r)

    g, e = sorted(got, key=key), sorted(expected, key=key)
    return all(
        len(rg) == len(re_) and all(_equal(a, b) for a, b in zip(rg, re_, strict=True))
        for rg, re_ in zip(g, e, strict=True)
    )


def with_views(ddl: list[str], queries: list[str]):
    """A connection and a DuckDB oracle with the tables of ``ddl``; the connection has views ``v{i}`` of
    ``queries``."""
    db, oracle = ivm.connect(), duckdb.connect()
    for s in ddl:
        db.execute(s)
        oracle.execute(s)
    for i, q in enumerate(queries):
        db.execute(f"CREATE VIEW v{i} AS {q}")
    return db, oracle


def commit_and_compare(db, oracle, stmts: list[str], queries: list[str], exact_text: bool = False) -> None:
    """Run ``stmts`` as one transaction on both; every view ``v{i}`` must equal DuckDB's ``queries[i]`` (CHAR(n)
    values without their padding, see ``unpadded``; with ``exact_text``, the texts also compared as a sorted
    list of their own)."""
    db.execute("BEGIN")
    for s in stmts:
        db.execute(s)
        oracle.execute(s)
    db.execute("COMMIT")
    for i, q in enumerate(queries):
        got, want = unpadded(db.execute(f"SELECT * FROM v{i}")), oracle.execute(q).fetchall()
        same = same_rows(got, want) and (not exact_text or _texts(got) == _texts(want))
        assert same, f"{q}\nafter {stmts}: got {sorted(got, key=repr)}, expected {sorted(want, key=repr)}"


def _texts(rows) -> list[str]:
    return sorted(repr(v) for row in rows for v in row if isinstance(v, str))
