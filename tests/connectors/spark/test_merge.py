"""``DeltaContents``' MERGE: the rows to upsert and the keys to delete, computed from a micro-batch's diffs by
pyarrow on the driver (``merge_rows``, the embedded sink) and by Spark on the executors (``merge_frame``, the
sink with shards), agree; and the MERGE statement, run by DuckDB after sqlglot's translation (Delta's jars
are not on these machines), carries a keyed table from a view's contents before the micro-batch to its
contents after, through commits whose rows come and go within the micro-batch, NULL keys included; Spark's
own parser reads the statement as that MERGE."""

from __future__ import annotations

import collections
import random

import duckdb
import pyarrow as pa
import sqlglot

from connectors.spark._outputs import merge_frame, merge_rows, merge_statement

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("n", pa.int64()), ("note", pa.string())])
KEY = ["a", "b"]


def _state(rng: random.Random) -> dict:
    """A view's contents keyed by (a, b): a key (NULLs among its values) -> the rest of its row."""
    keys = [(a, b) for a in [None, 1, 2, 3] for b in [None, "x", "y"]]
    return {k: (rng.choice([None, 1, 2, 3]), rng.choice([None, "p", "q"])) for k in rng.sample(keys, 6)}


def _rows(state: dict) -> collections.Counter:
    return collections.Counter((*k, *v) for k, v in state.items())


def _diffs(states: list[dict]) -> pa.Table:
    """The diffs from ``states[0]`` through each later state, one commit (``time``) per step."""
    out = []
    for t, (old, new) in enumerate(zip(states, states[1:], strict=False), start=1):
        change = _rows(new)
        change.subtract(_rows(old))
        out += [(*row, t, d) for row, d in change.items() if d]
    columns = [*SCHEMA.names, "time", "diff"]
    types = [*SCHEMA.types, pa.int64(), pa.int64()]
    return pa.table([pa.array([r[i] for r in out], ty) for i, ty in enumerate(types)], names=columns)


def _bag(t: pa.Table) -> collections.Counter:
    return collections.Counter(zip(*[t.column(c).to_pylist() for c in t.column_names], strict=True))


def test_merges_computed_by_pyarrow_and_by_spark_agree_and_carry_a_keyed_table_to_the_view_s_contents(spark):
    rng = random.Random(3)
    db = duckdb.connect()
    db.execute("CREATE TABLE target (a BIGINT, b VARCHAR, n BIGINT, note VARCHAR)")
    state = {}
    statement = sqlglot.transpile(merge_statement("target", "changes", SCHEMA.names, KEY), "spark", "duckdb")[0]
    merged = 0
    for _ in range(12):
        states = [state] + [_state(rng) for _ in range(rng.randrange(1, 4))]
        if rng.random() < 0.3:  # a micro-batch whose commits end where they began
            states.append(state)
        diffs = _diffs(states)
        upserts, deletes = merge_rows(diffs, KEY)
        changes = pa.concat_tables(
            [
                upserts.append_column("_ivm_delete", pa.array([False] * upserts.num_rows, pa.bool_())),
                deletes.append_column("_ivm_delete", pa.array([True] * deletes.num_rows, pa.bool_())),
            ]
        )
        by_spark = merge_frame(spark.createDataFrame(diffs), KEY).toArrow()
        assert _bag(by_spark) == _bag(changes)
        db.register("changes", changes)
        db.execute(statement)
        db.unregister("changes")
        merged += changes.num_rows
        state = states[-1]
        assert _bag(db.sql("SELECT * FROM target").to_arrow_table()) == _rows(state)
    assert merged > 30


def test_spark_reads_the_merge_statement_as_a_keyed_merge_with_a_delete_an_update_and_an_insert(spark):
    statement = merge_statement("target", "changes", ["a", "b c", "n"], ["a", "b c"])
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(statement).toString()
    assert plan.startswith("'MergeIntoTable (('t.a <=> 's.a) AND ('t.b c <=> 's.b c))"), plan
    assert "deleteaction(Some('s._ivm_delete))" in plan
    assert "updateaction(None, assignment('a, 's.a), assignment('b c, 's.b c), assignment('n, 's.n)" in plan
    assert "insertaction(Some(NOT 's._ivm_delete), assignment('a, 's.a)" in plan
