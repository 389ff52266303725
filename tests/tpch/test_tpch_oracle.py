"""The TPC-H queries maintained at scale factor 0.01 through refresh batches (RF1 inserts, RF2 deletes) equal
DuckDB's recompute of the same queries after every batch."""

import duckdb
import pytest

import ivm
from tests.oracle import same_rows, unpadded
from tpch import SCHEMA
from tpch.data import TABLES, generate, refresh_stream
from tpch.queries import QUERIES, query

MAINTAINED = list(QUERIES)


@pytest.fixture(scope="module")
def stream():
    return refresh_stream(generate(0.01), fraction=0.05, batches=10, seed=1)


def test_queries_match_duckdb_through_refresh_batches(stream):
    db = ivm.connect()
    duck = duckdb.connect()
    duck.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    db.execute(SCHEMA)
    duck.execute(SCHEMA)
    for t in TABLES:
        data = stream.initial[t]
        db.insert_arrow(t, data)
        duck.register("incoming", data)
        duck.execute(f"INSERT INTO {t} SELECT * FROM incoming")
        duck.unregister("incoming")
    for q in MAINTAINED:
        db.execute(f"CREATE MATERIALIZED VIEW {q} AS {query(q)}")

    def check(label):
        for q in MAINTAINED:
            got = unpadded(db.execute(f"SELECT * FROM {q}"))  # DuckDB does not pad CHAR(n)
            expected = duck.execute(query(q)).fetchall()
            assert same_rows(got, expected), f"{q} {label}: got {got[:5]}..., expected {expected[:5]}..."

    check("after the initial load")
    for i, batch in enumerate(stream.batches):
        db.execute("BEGIN")
        for t in ("orders", "lineitem"):
            db.insert_arrow(t, batch[t][0])
        for t in ("lineitem", "orders"):
            db.delete_arrow(t, batch[t][1])
        db.execute("COMMIT")
        for t in ("orders", "lineitem"):
            duck.register("incoming", batch[t][0])
            duck.execute(f"INSERT INTO {t} SELECT * FROM incoming")
            duck.unregister("incoming")
        key = {"orders": "o_orderkey", "lineitem": "l_orderkey"}
        for t in ("lineitem", "orders"):
            duck.register("gone", batch[t][1])
            duck.execute(f"DELETE FROM {t} WHERE {key[t]} IN (SELECT {key[t]} FROM gone)")
            duck.unregister("gone")
        check(f"after refresh batch {i + 1}")
