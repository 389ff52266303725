"""Naive fixed-point evaluation of ``WITH MUTUALLY RECURSIVE`` in DuckDB: the oracle for recursive bodies with
aggregates, negation or several definitions, which DuckDB's own WITH RECURSIVE cannot express."""

from __future__ import annotations

import duckdb

from tests.oracle import same_rows


def mutual_fixpoint(
    con: duckdb.DuckDBPyConnection,
    defs: list[tuple[str, str, str]],
    final: str,
    limit: int = 1000,
    return_at_limit: bool = False,
) -> list[tuple]:
    """``defs`` are (name, "col type, ...", body SQL). All start empty and are recomputed together from each
    other's previous values until none changes (or ``limit`` rounds); then ``final`` is run over them."""
    for name, cols, _ in defs:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} ({cols})")
    current = {name: [] for name, _, _ in defs}
    for _ in range(limit):
        nxt = {name: con.execute(body).fetchall() for name, _, body in defs}
        if all(same_rows(nxt[n], current[n]) for n in current):
            break
        for name, _, _ in defs:
            con.execute(f"DELETE FROM {name}")
            if nxt[name]:
                marks = ", ".join("?" * len(nxt[name][0]))
                con.executemany(f"INSERT INTO {name} VALUES ({marks})", nxt[name])
        current = nxt
    else:
        if not return_at_limit:
            raise AssertionError("no fixed point within the limit")
    return con.execute(final).fetchall()
