"""A Spark driver running a streaming query into ``view_sink(..., shards=3)`` on a multi-process cluster; run by
test_distributed.py in a process of its own.

``python -m tests.connectors.spark.sharded_sink_child ROOT prepare`` writes the source: one Parquet file of
change rows per micro-batch (the plain shape, two tables, a commit column). ``... ROOT die N`` runs the query
and SIGKILLs its own driver inside micro-batch N, after the tasks applied it and before it is recorded (from
the sink's ``DiffsTo`` function; the shards had written their checkpoint of it, which is not recorded yet).
``... ROOT resume`` starts the query again from its checkpoint, runs it to
the end and checks it: the commit the shards refuse went to the dead letters as it does with the embedded sink;
each micro-batch's diff files (``ParquetDiffs``, written by the tasks) equal the
embedded sink's diffs of the same micro-batch, and there is one set of them per micro-batch; the views'
contents (``ParquetContentsSet``, in parts written by the tasks, and two views' ``ParquetContents`` files,
each written whole by one task, and two views MERGEd by key into tables, ``DeltaContents`` with DuckDB in
Delta's place), as read in each micro-batch's ``DiffsTo`` call and at the end, equal the embedded sink's
contents after that micro-batch. Prints one line of JSON: what
was checked."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot

from connectors.spark import (
    DeltaContents,
    DiffsTo,
    ParquetContents,
    ParquetContentsSet,
    ParquetDiffs,
    plain,
    read_contents,
    view_sink,
)
from connectors.spark._outputs import merge_statement
from connectors.spark.local import cluster_session

SCHEMA = (
    "CREATE TABLE node (id INTEGER PRIMARY KEY, grp TEXT); "
    "CREATE TABLE edge (src INTEGER, dst INTEGER, w INTEGER, PRIMARY KEY (src, dst))"
)
VIEWS = {
    "by_grp": "SELECT grp, COUNT(*) AS n FROM node GROUP BY grp",
    "Heavy": "SELECT n.grp, SUM(e.w) AS w, MAX(e.w) AS top FROM edge e JOIN node n ON e.src = n.id "
    "GROUP BY n.grp",
    "reach": "WITH RECURSIVE r(a, b) AS (SELECT src, dst FROM edge UNION "
    "SELECT r.a, edge.dst FROM r JOIN edge ON r.b = edge.src) SELECT a, b FROM r",
    "lonely": "SELECT id, upper(grp) AS g FROM node WHERE id NOT IN (SELECT src FROM edge)",
}
WHOLE = ["Heavy", "reach"]  # views also kept as one file each (ParquetContents)
MERGED = {"by_grp": "grp VARCHAR, n BIGINT", "Heavy": "grp VARCHAR, w BIGINT, top INTEGER"}  # DeltaContents


class DuckDBContents(DeltaContents):
    """``DeltaContents`` whose MERGE statement runs in a DuckDB database file (translated by sqlglot), Delta's
    jars not being on this machine: the changes are the DataFrame the sink computed with Spark."""

    def __init__(self, view: str, path: Path) -> None:
        super().__init__(view, f"merged_{view}", ["grp"])
        self.path = path
        with duckdb.connect(str(path)) as db:
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({MERGED[view]})")

    def merge(self, spark, changes, view: str) -> None:
        rows = changes.toArrow()
        columns = [c for c in rows.column_names if c != "_ivm_delete"]
        statement = merge_statement(self.table, "changes", columns, self.key)
        with duckdb.connect(str(self.path)) as db:
            db.register("changes", rows)
            db.execute(sqlglot.transpile(statement, "spark", "duckdb")[0])


def merged(root: Path) -> dict[str, pa.Table]:
    with duckdb.connect(str(root / "merged.duckdb")) as db:
        return {v: db.sql(f"SELECT * FROM merged_{v}").to_arrow_table() for v in MERGED}


SHAPE = plain(operation="op", commit="lsn", table_column="tbl")
CUT = plain(operation="op", commit="lsn", table_column="tbl", whole_commits=False)
BATCHES = 6
COLUMNS = {"op": pa.string(), "lsn": pa.int64(), "tbl": pa.string(), "id": pa.int32(), "grp": pa.string()}
COLUMNS.update({"src": pa.int32(), "dst": pa.int32(), "w": pa.int32()})


def prepare(root: Path, cut: bool = False) -> None:
    """Random change rows: inserts, deletes and updates (as pre- and post-images) of both tables, a few
    commits per micro-batch, and one commit that cannot be applied. With ``cut``, the files cut the rows
    inside commits, and the sinks read them with ``whole_commits=False``."""
    rng = random.Random(7)
    nodes: dict[int, str] = {}
    edges: dict[tuple[int, int], int] = {}
    lsn = 0
    (root / "source").mkdir(parents=True)
    tables = []
    for batch in range(BATCHES):
        rows = []
        if batch == 2:  # a commit the sinks refuse (a key inserted twice): to the dead letters
            lsn += 1
            rows.append(("insert", lsn, "node", min(nodes), "dup", None, None, None))
        for _ in range(3 if batch else 1):
            lsn += 1
            for _ in range(40 if batch == 0 else rng.randrange(2, 8)):
                if rng.random() < 0.4:
                    k = rng.randrange(30)
                    if k in nodes and rng.random() < 0.5:
                        rows.append(("delete", lsn, "node", k, nodes.pop(k), None, None, None))
                    elif k in nodes:
                        new = rng.choice(["a", "b", "c", None])
                        rows.append(("update_preimage", lsn, "node", k, nodes[k], None, None, None))
                        rows.append(("update_postimage", lsn, "node", k, new, None, None, None))
                        nodes[k] = new
                    else:
                        nodes[k] = rng.choice(["a", "b", "c", None])
                        rows.append(("insert", lsn, "node", k, nodes[k], None, None, None))
                else:
                    e = (rng.randrange(30), rng.randrange(30))
                    if e in edges and rng.random() < 0.5:
                        rows.append(("delete", lsn, "edge", None, None, *e, edges.pop(e)))
                    elif e not in edges:
                        edges[e] = rng.randrange(1, 9)
                        rows.append(("insert", lsn, "edge", None, None, *e, edges[e]))
        table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(COLUMNS)}, schema=pa.schema(COLUMNS))
        tables.append(table)
    if cut:  # the same rows in files cut inside commits: a commit's rows may come in two micro-batches
        whole = pa.concat_tables(tables)
        ends = [round(whole.num_rows * (b + 1) / BATCHES) - (b % 2) * 2 for b in range(BATCHES - 1)]
        ends.append(whole.num_rows)
        tables = [whole.slice(lo, hi - lo) for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]
    for batch, table in enumerate(tables):
        path = root / "source" / f"{batch:03d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))  # the stream takes files by age
    if cut:
        (root / "cut").touch()


def _shape(root: Path):
    return CUT if (root / "cut").exists() else SHAPE


def sink(root: Path, die_in: int | None = None):
    def called(view, diffs, batch_id):
        with open(root / "calls", "a") as f:
            f.write(f"{batch_id} {view} {diffs.num_rows}\n")
        if batch_id == die_in:
            os.kill(os.getpid(), signal.SIGKILL)
        # the contents the folder shows while the micro-batch's functions run: those of this micro-batch
        at, tables = read_contents(root / "contents")
        if view in MERGED:  # (its table is merged before this call; another view's may be after it)
            tables[f"merged {view}"] = merged(root)[view]
        for v in WHOLE:  # each view's one file: that of the last micro-batch that changed it
            t = pq.read_table(root / "whole" / f"{v}.parquet")
            tables[f"whole {v}"] = t
            at = max(at, int(t.schema.metadata[b"ivm.batch_id"]))
        with open(root / "contents_seen", "a") as f:
            f.write(json.dumps([batch_id, at, {v: _rows(t) for v, t in tables.items()}]) + "\n")

    outputs = [
        *(DuckDBContents(v, root / "merged.duckdb") for v in MERGED),  # (merged before ``called`` reads them)
        DiffsTo(called, arrow=True),
        *(ParquetDiffs(v, root / "diffs" / v) for v in VIEWS),
        ParquetContentsSet(root / "contents"),
        *(ParquetContents(v, root / "whole" / f"{v}.parquet") for v in WHOLE),
    ]
    return view_sink(
        SCHEMA,
        VIEWS,
        root / "state",
        shape=_shape(root),
        outputs=outputs,
        shards=3,
        tasks=2,
        checkpoint_every=2,
        dead_letters=root / "dead",
    )


def run(root: Path, die_in: int | None) -> None:
    spark = cluster_session("ivm-sharded-sink-test", executors=2, cores=1)
    source = str(root / "source")
    stream = spark.readStream.schema(spark.read.parquet(source).schema).option("maxFilesPerTrigger", 1)
    query = (
        stream.parquet(source)
        .writeStream.foreachBatch(sink(root, die_in))
        .option("checkpointLocation", str(root / "ckpt"))
        .start()
    )
    query.processAllAvailable()
    query.stop()
    spark.stop()


def _rows(t: pa.Table) -> list:
    """A table's rows in a canonical order (None first), as JSON keeps them."""
    rows = zip(*[t.column(i).to_pylist() for i in range(t.num_columns)], strict=True)
    return sorted([[x is not None, x] for x in row] for row in rows)


def bag(t: pa.Table) -> collections.Counter:
    return collections.Counter(zip(*[t.column(i).to_pylist() for i in range(t.num_columns)], strict=True))


def check(root: Path) -> dict:
    """Each micro-batch's diff files against the embedded sink's diffs of the same change rows."""
    shape = _shape(root)
    embedded = view_sink(SCHEMA, VIEWS, root / "embedded", shape=shape, dead_letters=root / "embedded_dead")
    files = collections.defaultdict(list)
    for v in VIEWS:
        for f in sorted((root / "diffs" / v).glob("batch-*.parquet")):
            files[v, int(f.name.split("-")[1])].append(f)
    compared = 0
    seen = collections.defaultdict(list)
    for line in (root / "contents_seen").read_text().splitlines():
        batch, at, tables = json.loads(line)
        seen[batch].append((at, tables))
    contents_compared = 0
    for batch in range(BATCHES):
        want = embedded.apply(pq.read_table(root / "source" / f"{batch:03d}.parquet"), batch)
        whole = {v: json.loads(json.dumps(_rows(embedded.contents(v)))) for v in VIEWS}
        for at, tables in seen.get(batch, []):
            want_seen = {**whole, **{f"whole {v}": whole[v] for v in WHOLE}}
            want_seen.update({f"merged {v}": whole[v] for v in MERGED if f"merged {v}" in tables})
            assert at == batch and tables == want_seen, (batch, at, tables, want_seen)
            contents_compared += 1
        for v in VIEWS:
            parts = files.get((v, batch), [])
            assert len(parts) <= 2, parts  # a file per task at most: a micro-batch's files are written once
            got = collections.Counter()
            for f in parts:
                t = pq.read_table(f)
                assert t.schema.metadata[b"ivm.batch_id"] == str(batch).encode()
                got += bag(t)
            assert got == bag(want[v]), (batch, v, got, bag(want[v]))
            compared += 1
    for shard in range(3):  # checkpoints of micro-batches 3 and 5 (that of 3 written again after the kill)
        names = os.listdir(root / "state" / "shards" / "shards" / f"{shard:05d}")
        assert sorted(n for n in names if n.startswith("manifest-")) == [
            f"manifest-{b:012d}.json" for b in (3, 5)
        ], names
    dead = collections.Counter()  # the refused commit's rows, from the files of the tasks that hold them
    for f in sorted((root / "dead").glob("*.parquet")):
        t = pq.read_table(f)
        assert all("already" in e or "duplicate" in e for e in t.column("_ivm_error").to_pylist()), f
        dead += bag(t.drop_columns(["_ivm_error"]))
    want_dead = collections.Counter()
    for f in sorted((root / "embedded_dead").glob("*.parquet")):
        want_dead += bag(pq.read_table(f).drop_columns(["_ivm_error"]))
    assert dead == want_dead and sum(dead.values()) == 1, (dead, want_dead)
    for v, t in merged(root).items():
        assert json.loads(json.dumps(_rows(t))) == whole[v], v
    for v in WHOLE:
        t = pq.read_table(root / "whole" / f"{v}.parquet")
        assert t.schema.metadata[b"ivm.view"] == v.encode(), t.schema.metadata
        assert json.loads(json.dumps(_rows(t))) == whole[v], v
    at, tables = read_contents(root / "contents")
    assert at == BATCHES - 1 and {v: json.loads(json.dumps(_rows(t))) for v, t in tables.items()} == whole
    for v in VIEWS:  # the parts of the newest two manifests are kept, no more
        folders = sorted(p.name for p in (root / "contents" / v).iterdir())
        assert 1 <= len(folders) <= 4, (v, folders)
    if shape is CUT:  # some commit did come in two micro-batches
        lsns = [
            pq.read_table(root / "source" / f"{b:03d}.parquet").column("lsn").to_pylist()
            for b in range(BATCHES)
        ]
        assert any(a[-1] == b[0] for a, b in zip(lsns, lsns[1:], strict=False))
    calls = [line.split() for line in (root / "calls").read_text().splitlines()]
    return {
        "compared": compared,
        "batches_called": sorted({int(c[0]) for c in calls}),
        "contents_checked": sorted(seen) == sorted({int(c[0]) for c in calls}) and contents_compared > 0,
        "dead_letters": sum(dead.values()),
    }


def main(root: str, mode: str, arg: int | None = None) -> None:
    path = Path(root)
    if mode == "prepare":
        prepare(path, cut=bool(arg))
        said = {}
    elif mode == "die":
        run(path, arg)
        said = {"died": False}
    else:
        run(path, None)
        said = check(path)
    print(json.dumps(said))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
