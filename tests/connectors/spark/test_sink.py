"""The sink on Arrow micro-batches (no Spark): views equal DuckDB's recompute after every micro-batch through
replays, failures between writing the outputs and recording the batch, restarts from the state directory
(an ivm database: checkpoints and log); and wrong definitions or batch sequences are refused with clear
messages."""

import decimal

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ivm
from connectors.spark import (
    DiffsTo,
    ParquetContents,
    ParquetContentsSet,
    ParquetDiffs,
    plain,
    read_contents,
    view_sink,
)
from connectors.spark._outputs import merge_rows
from connectors.spark._state import location
from sql.errors import SqlError
from tests.oracle import same_rows

SCHEMA = """
CREATE TABLE orders (o_key INTEGER PRIMARY KEY, cust INTEGER NOT NULL, total DECIMAL(12,2), note TEXT);
CREATE TABLE customers (c_key INTEGER PRIMARY KEY, region TEXT);
"""
VIEWS = {
    "by_cust": "SELECT cust, COUNT(*) AS n, SUM(total) AS spent FROM orders GROUP BY cust",
    "by_region": "SELECT region, COUNT(*) AS n FROM orders JOIN customers ON cust = c_key GROUP BY region",
    "notes": "SELECT note, total FROM orders WHERE total > 50",
}
SHAPE = plain(commit="lsn")
ORDERS = pa.schema(
    [("o_key", pa.int64()), ("cust", pa.int64()), ("total", pa.decimal128(12, 2)), ("note", pa.string())]
)


def change_rows(table, op, lsn, rows: pa.Table) -> pa.Table:
    n = rows.num_rows
    extra = {"operation": pa.repeat(pa.scalar(op), n), "table": pa.repeat(pa.scalar(table), n)}
    extra["lsn"] = pa.repeat(pa.scalar(lsn, pa.int64()), n)
    cols = {**{c: rows.column(c) for c in rows.column_names}, **extra}
    return pa.table(cols)


class World:
    """Random changes to the two tables, the true contents (DuckDB) and the micro-batches that carry them."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.duck = duckdb.connect()
        self.duck.execute(SCHEMA)
        self.next_key = 0
        self.lsn = 0

    def orders(self, keys):
        n = len(keys)
        cents = self.rng.integers(0, 10_000, n)
        totals = pa.array([decimal.Decimal(int(c)) / 100 for c in cents], pa.decimal128(12, 2))
        notes = pa.array(self.rng.choice(["a", "b", "c", None], n).tolist())
        cust = self.rng.integers(0, 6, n)
        return pa.table({"o_key": keys, "cust": cust, "total": totals, "note": notes}).cast(ORDERS)

    def micro_batch(self) -> pa.Table:
        """Two or three commits: new orders, deleted and updated ones, sometimes a new customer."""
        parts = []
        for _ in range(int(self.rng.integers(2, 4))):
            self.lsn += 1
            current = self.duck.sql("SELECT * FROM orders ORDER BY o_key").to_arrow_table().cast(ORDERS)
            gone = current.take(self.rng.permutation(current.num_rows)[: int(self.rng.integers(0, 4))])
            changed = current.take(self.rng.permutation(current.num_rows)[:2])
            changed = changed.filter(pa.compute.invert(pa.compute.is_in(changed["o_key"], gone["o_key"])))
            updated = self.orders(changed["o_key"].to_numpy())
            new = self.orders(np.arange(self.next_key, self.next_key + int(self.rng.integers(1, 6))))
            self.next_key += new.num_rows
            parts += [
                change_rows("orders", "insert", self.lsn, new),
                change_rows("orders", "delete", self.lsn, gone),
                change_rows("orders", "update_preimage", self.lsn, changed),
                change_rows("orders", "update_postimage", self.lsn, updated),
            ]
            for t, keys in ((gone, gone["o_key"]), (changed, changed["o_key"])):
                if t.num_rows:
                    self.duck.register("k", pa.table({"k": keys}))
                    self.duck.execute("DELETE FROM orders WHERE o_key IN (SELECT k FROM k)")
                    self.duck.unregister("k")
            for t in (new, updated):
                self.duck.register("t", t)
                self.duck.execute("INSERT INTO orders SELECT * FROM t")
                self.duck.unregister("t")
            if self.lsn < 7:
                c = pa.table({"c_key": [self.lsn - 1], "region": [f"r{self.lsn % 3}"]})
                parts.append(change_rows("customers", "insert", self.lsn, c))
                self.duck.execute(f"INSERT INTO customers VALUES ({self.lsn - 1}, 'r{self.lsn % 3}')")
        return pa.concat_tables(parts, promote_options="permissive")

    def expected(self, view):
        return self.duck.execute(VIEWS[view]).fetchall()


def rows(table):
    return [tuple(r.values()) for r in table.to_pylist()]


def net_rows(diffs):
    every = pa.concat_tables(diffs)
    columns = [c for c in every.column_names if c not in ("time", "diff")]
    net = every.group_by(columns).aggregate([("diff", "sum")])
    counts = net.column("diff_sum").to_numpy()
    return rows(net.select(columns).take(pa.array(np.repeat(np.arange(len(counts)), counts))))


class Recorder:
    def __init__(self):
        self.diffs = {v: [] for v in VIEWS}
        self.calls = []
        self.fail_next = False

    def __call__(self, view, diffs, batch_id):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the process dies after writing some outputs")
        self.calls.append((view, batch_id))
        self.diffs[view].append(diffs)


def make_sink(tmp_path, recorder):
    outputs = [ParquetContents(v, tmp_path / "out" / f"{v}.parquet") for v in VIEWS]
    outputs += [ParquetDiffs(v, tmp_path / "out" / f"{v}_diffs") for v in VIEWS]
    outputs.append(ParquetContentsSet(tmp_path / "out" / "contents"))
    outputs.append(DiffsTo(recorder, arrow=True))  # last: a failure here follows the other outputs' writes
    return view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=SHAPE, outputs=outputs, checkpoint_bytes=1_300)


def check(tmp_path, world, recorder, label):
    _, tables = read_contents(tmp_path / "out" / "contents")
    for v in VIEWS:
        assert same_rows(rows(tables[v]), world.expected(v)), f"{v} contents set {label}"
        expected = world.expected(v)
        contents = rows(pq.read_table(tmp_path / "out" / f"{v}.parquet"))
        assert same_rows(contents, expected), f"{v} contents {label}"
        assert same_rows(net_rows(recorder.diffs[v]), expected), f"{v} diffs {label}"
        files = sorted((tmp_path / "out" / f"{v}_diffs").glob("*.parquet"))
        assert same_rows(net_rows([pq.read_table(f) for f in files]), expected), f"{v} diff files {label}"


def test_views_stay_exact_through_replays_failures_and_restarts(tmp_path):
    world, recorder = World(seed=3), Recorder()
    sink = make_sink(tmp_path, recorder)
    batches = []
    for batch_id in range(12):
        batches.append(world.micro_batch())
        if batch_id == 4:
            # dies after the Parquet outputs were written, before the batch is recorded: the replay by Spark
            # (same batch id, same rows) applies it once
            recorder.fail_next = True
            with pytest.raises(RuntimeError):
                sink.apply(batches[-1], batch_id)
        if batch_id == 8:
            recorder.fail_next = True
            with pytest.raises(RuntimeError):
                sink.apply(batches[-1], batch_id)
            sink = make_sink(tmp_path, recorder)  # and this time the process restarts
        diffs = sink.apply(batches[-1], batch_id)
        assert diffs is not None
        # the time of each change is its source commit
        lsns = set(batches[-1].column("lsn").to_pylist())
        assert all(set(d.column("time").to_pylist()) <= lsns for d in diffs.values())
        check(tmp_path, world, recorder, f"after micro-batch {batch_id}")
        meta = pq.read_schema(tmp_path / "out" / "by_cust.parquet").metadata
        assert meta[b"ivm.batch_id"] == str(batch_id).encode() and meta[b"ivm.view"] == b"by_cust"
        if batch_id % 3 == 1:
            # a replay of the last micro-batch changes nothing; an earlier one is not Spark's doing
            before = {p: p.read_bytes() for p in sorted((tmp_path / "out").rglob("*.parquet"))}
            calls = len(recorder.calls)
            assert sink.apply(batches[-1], batch_id) is None
            with pytest.raises(SqlError, match="Spark replays only the last one"):
                sink.apply(batches[batch_id - 1], batch_id - 1)
            assert {p: p.read_bytes() for p in sorted((tmp_path / "out").rglob("*.parquet"))} == before
            assert len(recorder.calls) == calls
        if batch_id == 6:
            sink.close()
            sink = make_sink(tmp_path, recorder)  # restart: the checkpoint and the log after it
            assert sink.apply(batches[-1], batch_id) is None
            for v in VIEWS:
                assert same_rows(rows(sink.contents(v)), world.expected(v))
    state = tmp_path / "state"
    assert sorted(p.name for p in state.iterdir()) == ["db", "definition.json"]
    assert sink.db.store.number > 8  # checkpoints as the log passed checkpoint_bytes, not only at restarts


def test_a_commit_that_fails_leaves_no_trace_and_names_the_micro_batch(tmp_path):
    recorder = Recorder()
    sink = make_sink(tmp_path, recorder)
    good = change_rows("customers", "insert", 1, pa.table({"c_key": [1], "region": ["x"]}))
    sink.apply(good, 0)
    bad = pa.concat_tables(
        [
            change_rows("customers", "insert", 2, pa.table({"c_key": [2], "region": ["y"]})),
            change_rows("customers", "delete", 3, pa.table({"c_key": [9], "region": ["z"]})),
            change_rows("customers", "insert", 4, pa.table({"c_key": [4], "region": ["w"]})),
        ]
    )
    match = r"micro-batch 1, commit 3, table 'customers': a deleted row is not in table 'customers' \(c_key=9\)"
    with pytest.raises(SqlError, match=match):
        sink.apply(bad, 1)
    # commit 2 of the failed micro-batch was applied to the engine, which is rebuilt without it
    order = pa.table({"o_key": [1], "cust": [2], "total": pa.array([decimal.Decimal("1.00")]), "note": ["n"]})
    sink.apply(change_rows("orders", "insert", 4, order), 1)
    assert rows(sink.contents("by_region")) == []


def test_wrong_definitions_and_batch_sequences_are_refused(tmp_path):
    with pytest.raises(SqlError, match="view 'v' has a column named 'time'"):
        view_sink(SCHEMA, {"v": "SELECT o_key AS time FROM orders"}, tmp_path / "s1")
    with pytest.raises(SqlError, match="an output names view 'nope'"):
        view_sink(SCHEMA, VIEWS, tmp_path / "s1", outputs=[ParquetContents("nope", tmp_path / "x")])
    with pytest.raises(SqlError, match="column 'missing' does not exist"):
        view_sink(SCHEMA, {"v": "SELECT missing FROM orders"}, tmp_path / "s1")
    view_sink(SCHEMA, VIEWS, tmp_path / "s2")
    with pytest.raises(SqlError, match="belongs to other tables or views"):
        view_sink(SCHEMA, {"custs": "SELECT cust FROM orders"}, tmp_path / "s2")
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "s3", shape=SHAPE)
    rows_ = change_rows("customers", "insert", 1, pa.table({"c_key": [1], "region": ["x"]}))
    with pytest.raises(SqlError, match="micro-batch 3 arrived at an empty state"):
        sink.apply(rows_, 3)  # the state directory was deleted, the checkpoint kept
    sink.apply(rows_, 0)
    with pytest.raises(SqlError, match="micro-batch 5 follows micro-batch 0"):
        sink.apply(rows_, 5)
    with pytest.raises(ivm.OperationalError, match="in use"):  # two queries on one state directory
        view_sink(SCHEMA, VIEWS, tmp_path / "s3", shape=SHAPE).apply(rows_, 1)
    sink.apply(change_rows("customers", "insert", 2, pa.table({"c_key": [2], "region": ["y"]})), 1)
    sink.apply(change_rows("customers", "insert", 3, pa.table({"c_key": [3], "region": ["z"]})), 2)
    sink.close()
    again = view_sink(SCHEMA, VIEWS, tmp_path / "s3", shape=SHAPE)  # a new checkpoint, the old state
    with pytest.raises(SqlError, match="micro-batch 0 arrived after micro-batch 2 was applied"):
        again.apply(rows_, 0)
    again.close()
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "s5", shape=SHAPE)
    sink.apply(rows_, 0, query="query-a")
    with pytest.raises(SqlError, match="holds the state of streaming query query-a, and micro-batch 1 comes"):
        sink.apply(rows_, 1, query="query-b")
    sink.close()
    sink = view_sink(SCHEMA, VIEWS, tmp_path / "s5", shape=SHAPE)  # the query is remembered across restarts
    with pytest.raises(SqlError, match="streaming query query-a"):
        sink.apply(rows_, 0, query="query-b")
    assert sink.apply(rows_, 0, query="query-a") is None
    sink.close()
    old = tmp_path / "s4"
    (old / "log").mkdir(parents=True)
    with pytest.raises(SqlError, match="state of an earlier ivm"):
        view_sink(SCHEMA, VIEWS, old)


def test_merge_rows_keep_the_final_row_per_key_and_delete_keys_that_left():
    diffs = pa.table(
        {
            "k": [1, 1, 2, 3, 3],
            "n": [5, 6, 7, 1, 1],
            "time": [1, 1, 1, 1, 2],
            "diff": [-1, 1, -1, 1, -1],
        }
    )
    upserts, deletes = merge_rows(diffs, ["k"])
    assert upserts.to_pydict() == {"k": [1], "n": [6]}
    assert deletes.to_pydict() == {"k": [2], "n": [7]}


def test_paths_may_be_file_uris(tmp_path):
    state, out = (tmp_path / "state").as_uri(), (tmp_path / "out").as_uri()
    outputs = [ParquetContents("by_region", f"{out}/by_region.parquet")]
    outputs.append(ParquetDiffs("by_cust", f"{out}/diffs"))
    outputs.append(ParquetContentsSet(f"{out}/contents", views=["by_region"]))
    sink = view_sink(SCHEMA, VIEWS, state, shape=SHAPE, outputs=outputs)
    sink.apply(change_rows("customers", "insert", 1, pa.table({"c_key": [1], "region": ["x"]})), 0)
    order = pa.table({"o_key": [1], "cust": [1], "total": pa.array([decimal.Decimal("9.00")]), "note": ["n"]})
    sink.apply(change_rows("orders", "insert", 2, order), 1)
    sink.close()
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["db", "definition.json"]
    assert rows(pq.read_table(tmp_path / "out" / "by_region.parquet")) == [("x", 1)]
    assert [p.name for p in (tmp_path / "out" / "diffs").iterdir()] == ["batch-000000000001.parquet"]
    batch_id, tables = read_contents(f"{out}/contents")
    assert batch_id == 1 and list(tables) == ["by_region"] and rows(tables["by_region"]) == [("x", 1)]
    assert not any(p.name.startswith("file:") for p in tmp_path.iterdir())
    assert location("s3a://bucket/out/v.parquet") == "s3://bucket/out/v.parquet"
