"""Views kept by Spark in shards on a multi-process cluster (``connectors.spark.distributed``), checked against
the embedded engine after every micro-batch, while the Python workers are stopped between two micro-batches
and an executor's keeper of the shards dies midway through a batch;
run by test_distributed.py in a process of its own (a Spark driver serves one master). Prints one line of
JSON: what was checked."""

from __future__ import annotations

import collections
import json
import os
import signal
import sys

import pyarrow as pa

import ivm
from connectors.spark.distributed import DistributedViews
from connectors.spark.local import cluster_session
from ivm.db.arrow import arrow_type
from tests.db.test_shards import script


def add_diffs(contents: collections.Counter, diffs, batch: int) -> None:
    """Add a view's diffs of micro-batch ``batch`` (a DataFrame) to its rows ``contents``."""
    d = diffs.toArrow()
    assert set(d.column("time").to_pylist()) <= {batch}
    rows = d.drop_columns(["time", "diff"])
    listed = zip(*[rows.column(i).to_pylist() for i in range(rows.num_columns)], strict=True)
    for row, diff in zip(listed, d.column("diff").to_pylist(), strict=True):
        contents[row] += diff
    for row in [r for r, n in contents.items() if n == 0]:
        del contents[row]
    assert all(n > 0 for n in contents.values()), "a diff took away a row the view did not have"


def kill_python_workers() -> int:
    """SIGKILL this cluster's Python workers (the children of its executors' ``pyspark.daemon`` processes), as
    Spark stops the idle ones after a minute; the keepers holding the shards, sessions of their own, stay. The
    number killed."""
    procs: dict[int, tuple[int, bool]] = {}  # pid -> (parent, whether it runs pyspark.daemon)
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                procs[int(name)] = (parent, b"pyspark.daemon" in f.read())
        except (OSError, ValueError):
            continue

    def ours(pid: int) -> bool:  # started by this driver (its JVM, the executors' JVMs, their daemons)
        while pid > 1 and pid in procs:
            pid = procs[pid][0]
            if pid == os.getpid():
                return True
        return False

    forked = [p for p, (parent, daemon) in procs.items() if daemon and procs.get(parent, (0, False))[1]]
    workers = [p for p in forked if ours(p)]
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    return len(workers)


def bag(t: pa.Table) -> collections.Counter:
    return collections.Counter(zip(*[t.column(i).to_pylist() for i in range(t.num_columns)], strict=True))


def main(state: str, shards: int, seed: int, batches: int, fault: int) -> None:
    # an executor's keeper kills itself while applying micro-batch ``fault`` (faults/sitecustomize.py)
    marker = os.path.join(os.path.dirname(state), "killed")
    os.environ.update(IVM_FAULT_MARKER=marker, IVM_FAULT_BATCH=str(fault))
    faults = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faults")
    os.environ["PYTHONPATH"] = os.pathsep.join([*os.environ.get("PYTHONPATH", "").split(os.pathsep), faults])
    spark = cluster_session("ivm-distributed-test", executors=2, cores=1)
    ops = list(script(seed, batches))
    ddl = [op[1] for op in ops if op[0] == "execute" and op[1].startswith("CREATE TABLE")]
    views = {}
    for op in ops:
        if op[0] == "execute" and op[1].startswith("CREATE MATERIALIZED VIEW"):
            name, _, sql = op[1][len("CREATE MATERIALIZED VIEW ") :].partition(" AS ")
            views[name] = sql
    schema = "; ".join(ddl)
    one = ivm.connect()
    one.execute(schema)
    for name, sql in views.items():
        one.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    kept = DistributedViews(spark, schema, views, state, shards=shards, tasks=2, checkpoint_every=2)
    arrow = {
        t: pa.schema([pa.field(c.name, arrow_type(c.type)) for c in table.columns])
        for t, table in kept.tables.items()
    }
    contents = {v: collections.Counter() for v in views}
    batch, pending, checked = 0, collections.defaultdict(lambda: ([], [])), []
    for op in ops:
        if op[0] == "change":
            _, table, cols, inserts, deletes = op
            pending[table][0].extend(inserts)
            pending[table][1].extend(deletes)
            continue
        if op[0] != "check":
            continue  # the script's DDL is made above; statements over all shards are not micro-batches
        frames, tables = {}, {}
        for table, (inserts, deletes) in pending.items():
            cols = arrow[table].names
            pair = []
            for rows in (inserts, deletes):
                t = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}, schema=arrow[table])
                pair.append(spark.createDataFrame(t) if rows else None)
                tables.setdefault(table, []).append(t)
            frames[table] = tuple(pair)
        for table, (ins, dels) in tables.items():
            if dels.num_rows:
                one.delete_arrow(table, dels)
            if ins.num_rows:
                one.insert_arrow(table, ins)
        if batch == 1:
            # the Python workers are stopped between micro-batches (as Spark stops idle ones): the shards stay
            assert kill_python_workers() >= 2
            # a micro-batch with a row breaking a primary key is refused whole, and changes nothing
            dup = pa.table({"id": [1], "grp": ["dup"], "price": [1.0], "qty": [1]}, schema=arrow["item"])
            try:
                kept.apply(batch, {**frames, "item": (spark.createDataFrame(dup), None)})
            except ivm.IntegrityError as err:
                assert "micro-batch 1 was not applied" in str(err) and "duplicate key" in str(err), err
            else:
                raise AssertionError("a duplicate key was accepted")
        if batch in (3, 4):  # a new driver with another layout of the shards over tasks: every shard loads
            # its checkpoint of batch 1 (and replays batch 2), then of batch 3, whose inputs alone are kept
            kept = DistributedViews(
                spark, schema, views, state, shards=shards, tasks=batch - 2, checkpoint_every=2
            )
        diffs = kept.apply(batch, frames)
        # the keepers keep their shards between micro-batches, whichever partition Spark gives each, also
        # when the workers are gone (1); all start afresh at the first, after a keeper is killed mid-way (2),
        # and with each new layout of shards over tasks
        assert kept.afresh == {0: 2, 1: 0, 2: 2, 3: 1, 4: 2}[batch], (batch, kept.afresh)
        assert kept.apply(batch, frames) is None  # a replayed batch id changes nothing
        for v, df in diffs.items():
            add_diffs(contents[v], df, batch)
            want = bag(one.execute(f"SELECT * FROM {v}").fetch_arrow())
            assert contents[v] == want, (batch, v, contents[v], want)
        checked.append(batch)
        batch += 1
        pending.clear()
    spark.stop()
    record = kept.record()
    assert record["checkpoints"] == [1, 3] and record["batches"] == [2, 3, 4], record
    assert sorted(os.listdir(os.path.join(state, "batches"))) == [f"{b:012d}" for b in (2, 3, 4)]
    for shard in range(shards):
        names = os.listdir(os.path.join(state, "shards", f"{shard:05d}"))
        assert sorted(n for n in names if n.startswith("manifest-")) == [
            f"manifest-{b:012d}.json" for b in (1, 3)
        ], names
    print(json.dumps({"batches": checked, "views": sorted(views), "killed": os.path.exists(marker)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
