"""Spark as the distributed engine: views kept in N shards by the tasks of one barrier stage per micro-batch.

    views = DistributedViews(spark, SCHEMA, {"reach": "WITH RECURSIVE ..."}, "/shared/state", shards=4)
    diffs = views.apply(batch_id, {"edge": (inserted_rows_df, deleted_rows_df)})   # view -> DataFrame

A micro-batch's change rows are routed by Spark: each row gets the shard of its table key
(``ivm.db.shards.shards_of_rows``, the same function of the key's values in every process) and is written as
Parquet under the batch's directory on the shared path, partitioned by shard. Then one barrier stage runs a
task per group of shards (``tasks`` of them, each hosting a contiguous range of the ``shards``); the tasks
run the whole micro-batch together, as ``ivm.db.shards.Shards`` in several processes: the stages of every
dataflow meet and exchange their updates over sockets between the tasks (``ivm.engine.collective``), whose
addresses Spark's ``allGather`` hands out once per stage (each of Spark's own barrier calls takes a second).
Each task then writes its shards' part of every view's diffs as Parquet, and the driver reads them back as
DataFrames; it collects nothing but the tasks' counts.

A Python worker keeps the shards it hosts between micro-batches. When any task of a stage does not hold the
state of the batch before (its worker is new, or a task was retried), every task starts its shards afresh
and replays the input of the batches done so far, which stays under the state path: the state is the log of
routed inputs. (Checkpointed arrangements per shard, so that a restart reads no history, are the next step;
see docs/design/sharding.md.) A batch id applied before is not applied again."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import ivm
from ivm.db.shards import Shards, portable_error, shards_of_rows
from ivm.engine.collective import SocketCollective
from ivm.engine.files import join, listdir, makedirs, read_whole, resolve, write_bytes
from ivm.errors import Error, ProgrammingError

__all__ = ["DistributedViews"]

_SHARD = "ivm_shard"  # (a partition directory named with a leading _ would be ignored by readers)
_DONE = "done.json"


class DistributedViews:
    """``views`` over the tables of ``schema`` (ivm's SQL), maintained by Spark in ``shards`` shards whose
    inputs and messages live under ``state`` (a path every executor reads and writes: a local directory on
    one machine, a shared file system or object store URI on a cluster); ``tasks`` tasks (at most the
    cluster's cores: a barrier stage runs them all at once) host the shards."""

    def __init__(
        self,
        spark,
        schema: str,
        views: Mapping[str, str],
        state: str,
        shards: int,
        tasks: int | None = None,
    ) -> None:
        if shards < 1:
            raise ProgrammingError("a distributed view set needs at least one shard")
        self.spark = spark
        self.schema = schema
        self.views = dict(views)
        self.state = os.path.abspath(state) if "://" not in state else state
        self.shards = shards
        self.tasks = min(shards, tasks or spark.sparkContext.defaultParallelism)
        # the definitions are checked here, before any task runs them
        db = ivm.connect()
        db.execute(schema)
        for name, sql in self.views.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        self.tables = dict(db.catalog.tables)
        self.columns = {v: db.execute(f"SELECT * FROM {v} LIMIT 0").fetch_arrow().schema for v in self.views}
        db.close()
        makedirs(self.state)
        definition = json.dumps({"schema": schema, "views": self.views, "shards": shards}, sort_keys=True)
        path = join(self.state, "definition.json")
        try:
            held = read_whole(path).decode()
        except FileNotFoundError:
            write_bytes(definition.encode(), path)
        else:
            if held != definition:
                raise ProgrammingError(f"{self.state} holds the state of other views or another shard count")

    def done(self) -> list[int]:
        """The batch ids applied so far, in order."""
        try:
            return json.loads(read_whole(join(self.state, _DONE)))
        except FileNotFoundError:
            return []

    def apply(self, batch_id: int, changes: Mapping[str, tuple]) -> dict[str, object] | None:
        """Apply one micro-batch: per table, ``(inserted, deleted)`` row DataFrames (either None) with the
        table's columns; returns each view's diffs as a DataFrame (its columns, ``time`` = the batch id, and
        ``diff``), or None for a batch id applied before."""
        done = self.done()
        if batch_id in done:
            return None
        if done and batch_id < done[-1]:
            raise ProgrammingError(f"batch {batch_id} comes after batch {done[-1]}")
        for table in changes:
            if table not in self.tables:
                raise ProgrammingError(f"table {table!r} does not exist")
        directory = _batch_dir(self.state, batch_id)
        remove_tree(join(directory, "input"))  # what an attempt of this batch id that failed left
        for table, pair in changes.items():
            for kind, df in zip(("insert", "delete"), pair, strict=True):
                if df is not None:
                    self._route(df, self.tables[table]).write.mode("overwrite").partitionBy(_SHARD).parquet(
                        join(directory, "input", table, kind)
                    )
        remove_tree(join(directory, "output"))  # what an attempt with another layout of tasks left
        job = _Job(self, batch_id, done)
        sc = self.spark.sparkContext
        # the barrier stage feeds a shuffle, so that Spark retries it whole when a task fails (a barrier stage
        # that returns its results to the driver is never retried)
        stage = sc.parallelize(range(self.tasks), self.tasks).barrier().mapPartitions(job.run)
        reported = [pickle.loads(r) for r in stage.map(_keyed).groupByKey(1).flatMap(_values).collect()]
        if len(reported) != self.tasks:
            raise RuntimeError(f"{len(reported)} of the {self.tasks} tasks reported")
        for r in reported:
            if isinstance(r, Error):
                raise type(r)(f"micro-batch {batch_id} was not applied: {r}")
        write_bytes(json.dumps([*done, batch_id]).encode(), join(self.state, _DONE))
        return {v: self.spark.read.parquet(join(directory, "output", v)) for v in self.views}

    def _route(self, df, table):
        """``df`` with the shard of each row."""
        count = self.shards

        def route(batches):
            for b in batches:
                yield b.append_column(_SHARD, pa.array(shards_of_rows(table, b, count), pa.int32()))

        from pyspark.sql.types import IntegerType, StructField, StructType

        return df.mapInArrow(route, StructType([*df.schema.fields, StructField(_SHARD, IntegerType())]))


def _keyed(report: bytes) -> tuple[int, bytes]:
    return 0, report


def _values(pair: tuple[int, object]) -> list[bytes]:
    return list(pair[1])


def _batch_dir(state: str, batch_id: int) -> str:
    return join(state, "batches", f"{batch_id:012d}")


def _hosted(task: int, tasks: int, shards: int) -> range:
    """The shards task ``task`` of ``tasks`` hosts: a contiguous range, the ranges in task order."""
    return range(task * shards // tasks, (task + 1) * shards // tasks)


# the shards this Python worker hosts, kept between micro-batches: (state, shards, tasks, task) -> (last batch,
# the shards, their subscriptions)
_HELD: dict[tuple[str, int, int, int], tuple[int, Shards, dict]] = {}


class _Job:
    """What a task of a micro-batch's barrier stage runs (pickled to the executors)."""

    def __init__(self, views: DistributedViews, batch_id: int, done: list[int]) -> None:
        self.state, self.schema, self.views = views.state, views.schema, views.views
        self.shards, self.tasks, self.batch_id, self.done = views.shards, views.tasks, batch_id, list(done)
        self.authkey = os.urandom(16)  # the tasks' connections to one another prove they are of this job
        extra = [pa.field("time", pa.int64()), pa.field("diff", pa.int64())]
        self.diff_schemas = {v: pa.schema([*views.columns[v], *extra]) for v in self.views}

    def run(self, _partition):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        task = ctx.partitionId()
        key = (self.state, self.shards, self.tasks, task)
        held = _HELD.pop(key, None)  # put back only once this batch is through
        last = self.done[-1] if self.done else -1
        have = [int(h) for h in ctx.allGather(str(held[0] if held else -2))]  # what each task holds
        directory = _batch_dir(self.state, self.batch_id)
        host = ctx.getTaskInfos()[task].address.rsplit(":", 1)[0]
        collective = SocketCollective(task, self.tasks, ctx.allGather, self.authkey, host)
        if any(h != last for h in have):  # some task lacks the state before this batch: all start afresh
            if held is not None:
                held[1].close()
            db = Shards(self.shards, _hosted(task, self.tasks, self.shards), collective)
            db.execute(self.schema)
            for name, sql in self.views.items():
                db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            for b in self.done:
                self._apply(db, b)
            # the first micro-batch's diffs start from nothing: they hold what a view has on creation too
            first = not self.done
            subs = {v: [s.subscribe(v, snapshot=first) for s in db.shards] for v in self.views}
        else:
            _, db, subs = held
            db.group.collective = collective
        try:
            self._apply(db, self.batch_id)
        except Error as err:  # refused in every task alike (the shards agree on errors), and rolled back
            collective.close()
            _HELD[key] = (last, db, subs)
            yield pickle.dumps(portable_error(err))
            return
        rows = 0
        for view, parts in subs.items():
            diffs = _diffs(
                [b for sub in parts for b in sub if b.num_rows], self.batch_id, self.diff_schemas[view]
            )
            rows += diffs.num_rows
            out = join(directory, "output", view)
            makedirs(out)
            pq.write_table(diffs, join(out, f"task-{task:05d}.parquet"))
        collective.close()
        _HELD[key] = (self.batch_id, db, subs)
        yield pickle.dumps(rows)

    def _apply(self, db: Shards, batch_id: int) -> None:
        """Make batch ``batch_id``'s routed rows for the hosted shards, in one transaction."""
        base = join(_batch_dir(self.state, batch_id), "input")
        writes = []
        tables = listdir(base) if _exists(base) else []
        for table in sorted(tables):
            for kind in ("delete", "insert"):
                path = join(base, table, kind)
                if not _exists(path):
                    continue
                fs, local = resolve(path)
                data = ds.dataset(local, filesystem=fs, format="parquet", partitioning="hive").to_table(
                    filter=pc.field(_SHARD).isin(list(db.hosted))
                )
                writes.append((table, kind, data.drop_columns([_SHARD])))
        db.change(writes, whole=False)


def remove_tree(path: str) -> None:
    fs, local = resolve(path)
    fs.delete_dir_contents(local, missing_dir_ok=True)


def _exists(path: str) -> bool:
    fs, local = resolve(path)
    return fs.get_file_info(local).type != pafs.FileType.NotFound


def _diffs(batches: list[pa.RecordBatch], batch_id: int, schema: pa.Schema) -> pa.Table:
    """A view's changes in this micro-batch, consolidated, with ``time`` = the batch id."""
    if not batches:
        return schema.empty_table()
    raw = pa.Table.from_batches(batches)
    columns = [c for c in raw.column_names if c not in ("time", "diff")]
    net = raw.group_by(columns, use_threads=False).aggregate([("diff", "sum")])
    net = net.filter(pc.not_equal(net.column("diff_sum"), 0))
    time = pa.array(np.full(net.num_rows, batch_id, dtype=np.int64))
    out = pa.table([*(net.column(c) for c in columns), time, net.column("diff_sum")], names=schema.names)
    return out.cast(schema)
