"""Outputs on Arrow micro-batches (no Spark): a view a micro-batch leaves unchanged costs no call, no
DataFrame and no file write; a ``ParquetContentsSet`` always shows all views at one micro-batch, whatever
moment the sink fails at, and keeps only the files its newest two manifests name."""

import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.spark import (
    DiffsTo,
    Output,
    ParquetContents,
    ParquetContentsSet,
    _contents,
    read_contents,
    view_sink,
)
from sql.errors import SqlError
from tests.connectors.spark.test_sink import SCHEMA, SHAPE, VIEWS, World, change_rows, rows
from tests.oracle import same_rows

UNCHANGED_VIEWS = {
    "by_cust": "SELECT cust, COUNT(*) AS n FROM orders GROUP BY cust",
    "regions": "SELECT region, COUNT(*) AS n FROM customers GROUP BY region",
    "negative": "SELECT cust FROM orders WHERE cust < 0",
}


def order(key, cust):
    return pa.table(
        {"o_key": [key], "cust": [cust], "total": pa.array([decimal.Decimal("1.00")]), "note": ["n"]}
    )


def customer(key, region):
    return change_rows("customers", "insert", key, pa.table({"c_key": [key], "region": [region]}))


class FakeSpark:
    """Counts the DataFrames made from Arrow tables."""

    def __init__(self):
        self.frames = []

    def createDataFrame(self, table, schema=None):  # noqa: N802 - Spark's name
        self.frames.append(table)
        return table


def test_a_view_left_unchanged_costs_no_call_frame_or_file_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"cust": [99]}), out / "negative.parquet")  # left by an earlier query
    calls, spark = [], FakeSpark()
    outputs = [DiffsTo(lambda view, diffs, batch_id: calls.append((view, batch_id)))]
    outputs += [ParquetContents(v, out / f"{v}.parquet") for v in UNCHANGED_VIEWS]
    sink = view_sink(SCHEMA, UNCHANGED_VIEWS, tmp_path / "state", shape=SHAPE, outputs=outputs)
    reads = []
    contents_of = sink._contents_of

    def counted(view):
        read = contents_of(view)
        return lambda: (reads.append(view), read())[1]

    sink._contents_of = counted
    batch = pa.concat_tables(
        [change_rows("orders", "insert", 1, order(1, 7)), customer(2, "x")], promote_options="permissive"
    )
    sink.apply(batch, 0, spark=spark)
    # the first micro-batch of a process writes every contents file: none left by another query passes for its
    assert calls == [("by_cust", 0), ("regions", 0)] and len(spark.frames) == 2
    assert sorted(reads) == sorted(UNCHANGED_VIEWS) and rows(pq.read_table(out / "negative.parquet")) == []
    before = {v: (out / f"{v}.parquet").stat().st_mtime_ns for v in UNCHANGED_VIEWS}
    reads.clear()
    sink.apply(customer(3, "y"), 1, spark=spark)
    assert calls[2:] == [("regions", 1)] and len(spark.frames) == 3
    assert reads == ["regions"]
    after = {v: (out / f"{v}.parquet").stat().st_mtime_ns for v in UNCHANGED_VIEWS}
    assert after["by_cust"] == before["by_cust"] and after["negative"] == before["negative"]
    assert pq.read_schema(out / "by_cust.parquet").metadata[b"ivm.batch_id"] == b"0"  # written at batch 0
    assert pq.read_schema(out / "regions.parquet").metadata[b"ivm.batch_id"] == b"1"
    diffs = sink.apply(change_rows("orders", "insert", 4, order(2, 8)), 2, spark=spark)
    assert diffs["regions"].num_rows == 0 and diffs["regions"].column_names == ["region", "n", "time", "diff"]
    assert calls[3:] == [("by_cust", 2)]
    sink.close()


class FailAt(Output):
    """Fails the micro-batch ``batch_id`` at its ``n``-th write (before the contents set's manifest) or, with
    ``n`` None, in ``finish`` (after it): as a process dying there would."""

    def __init__(self, batch_id, n=None):
        self.batch_id, self.n, self.writes = batch_id, n, 0

    def write(self, batch):
        if batch.batch_id == self.batch_id and self.n is not None:
            self.writes += 1
            if self.writes == self.n:
                self.batch_id = None
                raise RuntimeError("dies while writing the outputs")

    def finish(self, batch_id):
        if batch_id == self.batch_id and self.n is None:
            self.batch_id = None
            raise RuntimeError("dies after the outputs, before the micro-batch is recorded")


def named_files(folder):
    """The files the newest two manifests name."""
    manifest = json.loads((folder / "manifest.json").read_text())
    return set(manifest["views"].values()) | set(manifest["previous"]["views"].values())


def files_in(folder):
    return {str(p.relative_to(folder)) for p in folder.rglob("*.parquet")}


def check_set(folder, expected, label):
    batch_id, tables = read_contents(folder)
    assert set(tables) == set(VIEWS), label
    for v, t in tables.items():
        assert same_rows(rows(t), expected[batch_id][v]), f"{v} at {batch_id} {label}"
    assert files_in(folder) <= named_files(folder) | {
        f for f in files_in(folder) if f"{batch_id + 1:012d}" in f
    }
    return batch_id


def test_contents_set_shows_one_micro_batch_whatever_moment_the_sink_fails_at(tmp_path):
    world, folder = World(seed=5), tmp_path / "contents"
    expected, batches = [], []

    def sink_with(fail):
        outputs = [ParquetContentsSet(folder), fail]
        return view_sink(SCHEMA, VIEWS, tmp_path / "state", shape=SHAPE, outputs=outputs)

    sink = sink_with(FailAt(-1))
    for batch_id in range(10):
        batches.append(world.micro_batch())
        expected.append({v: world.expected(v) for v in VIEWS})
        if batch_id in (3, 6):  # dies half-way through the views' files, or after the manifest
            sink.close()
            sink = sink_with(FailAt(batch_id, n=2 if batch_id == 3 else None))
            with pytest.raises(RuntimeError):
                sink.apply(batches[-1], batch_id)
            shown = check_set(folder, expected, f"after failing micro-batch {batch_id}")
            assert shown == (batch_id - 1 if batch_id == 3 else batch_id)
            sink.close()
            sink = sink_with(FailAt(-1))  # a new process: its first micro-batch writes every view's file
        sink.apply(batches[-1], batch_id)
        assert check_set(folder, expected, f"after micro-batch {batch_id}") == batch_id
        assert files_in(folder) == named_files(folder), f"after micro-batch {batch_id}"
        if batch_id == 7:  # a replay of the last micro-batch changes no file
            before = {p: p.read_bytes() for p in sorted(folder.rglob("*.*"))}
            assert sink.apply(batches[-1], batch_id) is None
            assert {p: p.read_bytes() for p in sorted(folder.rglob("*.*"))} == before
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["batch_id"] == 9 and manifest["previous"]["batch_id"] == 8
    sink.close()


def test_a_failed_micro_batch_applied_again_writes_the_same_manifest(tmp_path):
    folder = tmp_path / "contents"
    fail = FailAt(2)
    views = {"by_cust": UNCHANGED_VIEWS["by_cust"], "regions": UNCHANGED_VIEWS["regions"]}
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=SHAPE, outputs=[ParquetContentsSet(folder), fail])
    sink.apply(customer(1, "x"), 0)
    sink.apply(change_rows("orders", "insert", 2, order(1, 7)), 1)
    with pytest.raises(RuntimeError):
        sink.apply(customer(3, "y"), 2)  # in the same process: regions changes, by_cust keeps its file
    written = (folder / "manifest.json").read_bytes()
    sink.apply(customer(3, "y"), 2)
    assert (folder / "manifest.json").read_bytes() == written
    manifest = json.loads(written)
    assert manifest["views"] == {
        "by_cust": "by_cust/batch-000000000001.parquet",
        "regions": "regions/batch-000000000002.parquet",
    }
    assert files_in(folder) == named_files(folder)
    sink.close()
    # the first micro-batch of a process writes every view's file; applied again, it writes them all again
    fail = FailAt(3)
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=SHAPE, outputs=[ParquetContentsSet(folder), fail])
    with pytest.raises(RuntimeError):
        sink.apply(customer(4, "y"), 3)
    written = (folder / "manifest.json").read_bytes()
    assert json.loads(written)["views"]["by_cust"] == "by_cust/batch-000000000003.parquet"
    sink.apply(customer(4, "y"), 3)
    assert (folder / "manifest.json").read_bytes() == written
    assert files_in(folder) == named_files(folder)
    sink.close()


def test_a_reader_outrun_by_the_sink_reads_the_newer_manifest(tmp_path, monkeypatch):
    folder = tmp_path / "contents"
    sink = view_sink(
        SCHEMA, UNCHANGED_VIEWS, tmp_path / "state", shape=SHAPE, outputs=[ParquetContentsSet(folder)]
    )
    for i in range(3):
        sink.apply(customer(i, "x"), i)
    read_parquet = _contents.read_parquet

    def slow_reader(path):  # the sink moves on by two micro-batches between the manifest and the files
        if not slow_reader.done:
            slow_reader.done = True
            sink.apply(customer(10, "y"), 3)
            sink.apply(customer(11, "y"), 4)
        return read_parquet(path)

    slow_reader.done = False
    monkeypatch.setattr(_contents, "read_parquet", slow_reader)
    batch_id, tables = read_contents(folder)
    assert batch_id == 4 and sorted(rows(tables["regions"])) == [("x", 3), ("y", 2)]
    sink.close()


def test_a_contents_folder_of_a_later_micro_batch_is_refused(tmp_path):
    folder = tmp_path / "contents"
    first = view_sink(
        SCHEMA, UNCHANGED_VIEWS, tmp_path / "s1", shape=SHAPE, outputs=[ParquetContentsSet(folder)]
    )
    for i in range(3):
        first.apply(customer(i, "x"), i)
    first.close()
    second = view_sink(
        SCHEMA, UNCHANGED_VIEWS, tmp_path / "s2", shape=SHAPE, outputs=[ParquetContentsSet(folder)]
    )
    with pytest.raises(SqlError, match="holds micro-batch 2, later than micro-batch 0 being written"):
        second.apply(customer(0, "x"), 0)
    second.close()
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        read_contents(tmp_path / "nowhere")


def test_a_contents_set_on_a_pyarrow_file_system(tmp_path):
    """The same through ``pyarrow.fs`` (the path S3 takes), with a ``file://`` URI kept as a URI."""
    folder = (tmp_path / "contents").as_uri()
    out = ParquetContentsSet(folder)
    out.folder = folder  # location() would make it a local path
    sink = view_sink(SCHEMA, UNCHANGED_VIEWS, tmp_path / "state", shape=SHAPE, outputs=[out])
    for i in range(4):
        sink.apply(customer(i, "x"), i)
    sink.close()
    manifest = _contents._load(folder)
    assert manifest["batch_id"] == 3 and manifest["views"]["by_cust"] == "by_cust/batch-000000000000.parquet"
    regions = _contents.read_parquet(f"{folder}/{manifest['views']['regions']}")
    assert rows(regions) == [("x", 4)]
    assert files_in(tmp_path / "contents") == named_files(tmp_path / "contents")
    with pytest.raises(FileNotFoundError):
        _contents.read_parquet(f"{folder}/regions/batch-000000000001.parquet")  # deleted


def test_a_contents_set_in_parts_keeps_unchanged_parts_and_only_the_files_two_manifests_name(tmp_path):
    """The protocol a sink with shards follows (``_sharded``), driven by hand: each task writes its part of a
    view when it changed (every part at first), the manifest names each task's newest part, a part in error
    keeps the view's last manifest entry, and files and folders no manifest of the newest two names go."""
    folder = tmp_path / "contents"
    out = ParquetContentsSet(folder)
    parts = {0: [], 1: []}  # each task's rows of view v

    def batch(batch_id: int, changed: dict, error: bool = False) -> None:
        out.start(batch_id)
        every = out.parts_to_write("v", 2)
        written = []
        for task in (0, 1):
            parts[task] += changed.get(task, [])
            if every or task in changed:
                place = folder / _contents.part_folder("v", batch_id)
                place.mkdir(parents=True, exist_ok=True)
                table = pa.table({"x": pa.array(parts[task], pa.int64())})
                pq.write_table(table, place / _contents.contents_part(task))
                written.append(None if error and task == 1 else True)
            else:
                written.append(False)
        out.write_parts("v", written)
        out.finish(batch_id)

    def shown() -> tuple[int, list]:
        at, tables = read_contents(folder)
        return at, sorted(tables["v"].column("x").to_pylist())

    def named() -> set:
        manifest = json.loads((folder / "manifest.json").read_text())
        return {p for m in (manifest, manifest["previous"]) for entry in m["views"].values() for p in entry}

    batch(0, {0: [1], 1: [2]})
    assert shown() == (0, [1, 2])
    batch(1, {1: [3]})  # task 0's part is unchanged: the manifest keeps its file of micro-batch 0
    assert json.loads((folder / "manifest.json").read_text())["views"]["v"] == [
        "v/batch-000000000000/part-00000.parquet",
        "v/batch-000000000001/part-00001.parquet",
    ]
    assert shown() == (1, [1, 2, 3])
    batch(2, {0: [4], 1: [5]}, error=True)  # in error in task 1's shards: the last contents stay named
    assert shown() == (1, [1, 2, 3])
    parts[1].remove(5)
    batch(3, {1: []})  # (the row at fault left)
    assert shown() == (3, [1, 2, 3, 4])
    for b in range(4, 8):
        batch(b, {b % 2: [10 * b]})
        assert shown() == (b, sorted(parts[0] + parts[1]))
        assert files_in(folder) == named(), b  # a folder whose parts are all gone goes too
        assert {p.name for p in (folder / "v").iterdir()} == {n.split("/")[1] for n in named()}, b
    # a new process writes every part at its first micro-batch; applied again, a micro-batch shows the same
    out = ParquetContentsSet(folder)
    batch(8, {0: [80]})
    again = shown()
    out = ParquetContentsSet(folder)
    batch(8, {})
    assert shown() == again == (8, sorted(parts[0] + parts[1]))
    assert files_in(folder) == named()
