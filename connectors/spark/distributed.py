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

A Python worker keeps the shards it hosts between micro-batches. Every ``checkpoint_every`` micro-batches each
shard also writes its state (its arrangements as files, ``ivm.db.storage.Versions``) under
``state/shards/NNNNN``, numbered by the batch id. When any task of a stage does not hold the state of the
batch before (its worker is new, a task was retried, or the driver restarted), every task loads its shards'
newest checkpoint of a recorded batch and replays the routed input of the recorded batches after it, which
stays under the state path until two later checkpoints are recorded. A checkpoint written by a batch that was
not recorded (its stage failed later, or the driver stopped first) is deleted when the state is loaded. A
batch id applied before is not applied again."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import ivm
from connectors.spark._changes import (
    ChangeShape,
    require_control_columns,
    require_table_columns,
    split_commits,
)
from ivm.db.shards import Shards, portable_error, shards_of_rows
from ivm.db.storage import Versions
from ivm.engine.collective import SocketCollective
from ivm.engine.files import join, listdir, makedirs, read_whole, remove, resolve, write_bytes
from ivm.errors import Error, NotSupportedError, ProgrammingError
from sql.errors import SqlError

__all__ = ["DistributedViews"]

_SHARD = "ivm_shard"  # (a partition directory named with a leading _ would be ignored by readers)
_DONE = "done.json"
_CHANGES, _SHAPE = "changes", "shape.json"  # a micro-batch of change rows, and their shape


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
        checkpoint_every: int = 10,
        dialect="postgres",
    ) -> None:
        if shards < 1:
            raise ProgrammingError("a distributed view set needs at least one shard")
        self.spark = spark
        self.schema = schema
        self.views = dict(views)
        self.state = os.path.abspath(state) if "://" not in state else state
        self.shards = shards
        self.tasks = min(shards, tasks or spark.sparkContext.defaultParallelism)
        if checkpoint_every < 1:
            raise ProgrammingError("checkpoint_every counts micro-batches: at least 1")
        self.checkpoint_every = checkpoint_every
        self.dialect = dialect  # "postgres", or a sql.spark.Spark: how the views are read
        self.counts: dict[str, int] = {}  # each view's diff rows in the last micro-batch applied
        # the definitions are checked here, before any task runs them
        db = ivm.connect()
        db.execute(schema)
        for name, sql in self.views.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}", dialect=dialect)
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

    def record(self) -> dict:
        """What is recorded: ``batches``, the ids of the micro-batches applied after the older of the two
        newest recorded ``checkpoints`` (all of them while there are fewer), in order, and ``last``, the last
        applied (-1 before any)."""
        try:
            return json.loads(read_whole(join(self.state, _DONE)))
        except FileNotFoundError:
            return {"batches": [], "checkpoints": [], "last": -1, "note": None}

    def applied(self, batch_id: int) -> bool:
        """Whether micro-batch ``batch_id`` was applied."""
        rec = self.record()
        return batch_id in rec["batches"] or bool(rec["checkpoints"]) and batch_id <= rec["checkpoints"][0]

    def apply(self, batch_id: int, changes: Mapping[str, tuple]) -> dict[str, object] | None:
        """Apply one micro-batch as one transaction: per table, ``(inserted, deleted)`` row DataFrames
        (either None) with the table's columns; returns each view's diffs as a DataFrame (its columns,
        ``time`` = the batch id, and ``diff``), or None for a batch id applied before."""
        rec = self._next(batch_id)
        if rec is None:
            return None
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
        return self._run(batch_id, rec, pa.int64())

    def apply_changes(
        self,
        batch_id: int,
        df,
        shape: ChangeShape,
        note: object = None,
        diff_files: Mapping[str, list] | None = None,
        emit: Callable[[dict], None] | None = None,
    ) -> dict | None:
        """Apply one micro-batch of change rows (a DataFrame in ``shape``, as ``connectors.spark``'s sink takes
        them), each source commit as one transaction; returns each view's diffs as a DataFrame (its columns,
        ``time`` = the source commit, ``diff``), or None for a batch id applied before. ``note`` (JSON) is
        kept in the record with the batch (the sink keeps its streaming query's id there). The tasks also
        write each view's diffs into the folders ``diff_files[view]`` names, one Parquet file per task that
        has some (``batch-<id>-task-<k>.parquet``); ``emit(diffs)`` runs before the batch is recorded."""
        rec = self._next(batch_id)
        if rec is None:
            return None
        if not shape.whole:
            raise NotSupportedError("a distributed sink takes whole commits only (whole_commits=False)")
        require_control_columns(df.columns, shape)
        if shape.table is not None:
            if shape.table not in self.tables:
                raise SqlError(f"table {shape.table!r} does not exist")
            columns = {t: [c.name for c in table.columns] for t, table in self.tables.items()}
            require_table_columns(df.columns, columns, [shape.table])
        directory = _batch_dir(self.state, batch_id)
        remove_tree(join(directory, "input"))
        self._route_changes(df, shape).write.mode("overwrite").partitionBy(_SHARD).parquet(
            join(directory, "input", _CHANGES)
        )
        write_bytes(json.dumps(dataclasses.asdict(shape)).encode(), join(directory, "input", _SHAPE))
        if shape.commit is None:
            time_type = pa.int64()
        else:
            from pyspark.sql.pandas.types import to_arrow_type

            time_type = to_arrow_type(df.schema[shape.commit].dataType)
        return self._run(batch_id, rec, time_type, note, diff_files or {}, emit)

    def _next(self, batch_id: int) -> dict | None:
        """The record, if ``batch_id`` is to be applied now; None if it was applied."""
        rec = self.record()
        if self.applied(batch_id):
            return None
        if batch_id < rec["last"]:
            raise ProgrammingError(f"batch {batch_id} comes after batch {rec['last']}")
        return rec

    def _run(
        self,
        batch_id: int,
        rec: dict,
        time_type: pa.DataType,
        note: object = None,
        diff_files: Mapping[str, list] | None = None,
        emit: Callable[[dict], None] | None = None,
    ) -> dict[str, object]:
        """Run micro-batch ``batch_id``'s barrier stage over its routed input, and record it."""
        directory = _batch_dir(self.state, batch_id)
        remove_tree(join(directory, "output"))  # what an attempt with another layout of tasks left
        diff_files = {v: [str(f) for f in folders] for v, folders in (diff_files or {}).items()}
        for folders in diff_files.values():  # an earlier attempt's files, maybe of more tasks (at most shards)
            for folder in folders:
                for task in range(self.shards):
                    remove(join(folder, _diff_file(batch_id, task)))
        job = _Job(self, batch_id, rec, time_type, diff_files)
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
        self.counts = {v: sum(r[v] for r in reported) for v in self.views}
        frames = _Frames(self.spark, join(directory, "output"), list(self.views))
        if emit is not None:
            emit(frames)
        self._record(rec, batch_id, job.checkpoint, note)
        return frames

    def _record(self, rec: dict, batch_id: int, checkpointed: bool, note: object) -> None:
        """Record micro-batch ``batch_id`` as applied (and its checkpoint as written in every shard); then
        delete what no longer serves: the batches' directories up to the older of the two newest
        checkpoints."""
        batches, checkpoints = [*rec["batches"], batch_id], list(rec["checkpoints"])
        if checkpointed:
            checkpoints = [*checkpoints, batch_id][-2:]
        if len(checkpoints) == 2:
            batches = [b for b in batches if b > checkpoints[0]]
        new = {"batches": batches, "checkpoints": checkpoints, "last": batch_id, "note": note}
        write_bytes(json.dumps(new).encode(), join(self.state, _DONE))
        if len(checkpoints) == 2:
            for name in listdir(join(self.state, "batches")):
                if name.isdigit() and int(name) <= checkpoints[0]:
                    remove_tree(join(self.state, "batches", name), whole=True)

    def _route_changes(self, df, shape: ChangeShape):
        """Change rows ``df`` with the shard of each row: that of its key in its table. A row naming no table
        of the schema goes to shard 0, whose task refuses it by name."""
        count, tables = self.shards, self.tables

        def route(batches):
            for b in batches:
                shard = np.zeros(b.num_rows, np.int32)
                if shape.table is not None:
                    shard[:] = shards_of_rows(tables[shape.table], b, count)
                elif b.num_rows:
                    names = pc.dictionary_encode(b.column(shape.table_column).cast(pa.string()))
                    codes = pc.fill_null(names.indices, -1).to_numpy(zero_copy_only=False)
                    for code, name in enumerate(names.dictionary.to_pylist()):  # a few tables, not rows
                        if name in tables:
                            mine = np.flatnonzero(codes == code)
                            shard[mine] = shards_of_rows(tables[name], b.take(pa.array(mine)), count)
                yield b.append_column(_SHARD, pa.array(shard))

        from pyspark.sql.types import IntegerType, StructField, StructType

        return df.mapInArrow(route, StructType([*df.schema.fields, StructField(_SHARD, IntegerType())]))

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


def _diff_file(batch_id: int, task: int) -> str:
    """The name of a task's file of a view's diffs in a ``diff_files`` folder."""
    return f"batch-{batch_id:012d}-task-{task:05d}.parquet"


def _hosted(task: int, tasks: int, shards: int) -> range:
    """The shards task ``task`` of ``tasks`` hosts: a contiguous range, the ranges in task order."""
    return range(task * shards // tasks, (task + 1) * shards // tasks)


# the shards this Python worker hosts, kept between micro-batches: (state, shards, tasks, task) -> (last batch,
# the shards, their subscriptions, their checkpoints)
_HELD: dict[tuple[str, int, int, int], tuple[int, Shards, dict, list[Versions]]] = {}


class _Frames(Mapping):
    """Each view's diffs as a DataFrame, read when asked for (reading one lists its files)."""

    def __init__(self, spark, directory: str, views: list[str]) -> None:
        self.spark, self.directory, self.views = spark, directory, views
        self.read: dict[str, object] = {}

    def __getitem__(self, view: str):
        if view not in self.views:
            raise KeyError(view)
        if view not in self.read:
            self.read[view] = self.spark.read.parquet(join(self.directory, view))
        return self.read[view]

    def __iter__(self):
        return iter(self.views)

    def __len__(self) -> int:
        return len(self.views)


class _Job:
    """What a task of a micro-batch's barrier stage runs (pickled to the executors)."""

    def __init__(
        self,
        views: DistributedViews,
        batch_id: int,
        rec: dict,
        time_type: pa.DataType,
        diff_files: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.diff_files = dict(diff_files or {})
        self.state, self.schema, self.views = views.state, views.schema, views.views
        self.dialect, self.tables = views.dialect, views.tables
        self.shards, self.tasks, self.batch_id = views.shards, views.tasks, batch_id
        self.done, self.last = list(rec["batches"]), rec["last"]
        since = rec["checkpoints"][-1] if rec["checkpoints"] else None
        applied = len([b for b in self.done if since is None or b > since])  # batches since the last one
        self.checkpoint = applied + 1 >= views.checkpoint_every  # after this batch, in every shard
        self.authkey = os.urandom(16)  # the tasks' connections to one another prove they are of this job
        extra = [pa.field("time", time_type), pa.field("diff", pa.int64())]
        self.diff_schemas = {v: pa.schema([*views.columns[v], *extra]) for v in self.views}

    def run(self, _partition):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        task = ctx.partitionId()
        key = (self.state, self.shards, self.tasks, task)
        held = _HELD.pop(key, None)  # put back only once this batch is through
        last = self.last
        directory = _batch_dir(self.state, self.batch_id)
        host = ctx.getTaskInfos()[task].address.rsplit(":", 1)[0]
        have: list[int] = []  # the batch whose state each task holds

        def publish(address: str) -> list[str]:  # one allGather: each of Spark's barrier calls takes a second
            said = [json.loads(m) for m in ctx.allGather(json.dumps([address, held[0] if held else -2]))]
            have.extend(h for _, h in said)
            return [a for a, _ in said]

        collective = SocketCollective(task, self.tasks, publish, self.authkey, host)
        if any(h != last for h in have):  # some task lacks the state before this batch: all start afresh
            if held is not None:
                held[1].close()
            db = Shards(self.shards, _hosted(task, self.tasks, self.shards), collective)
            versions = self._versions(db)
            loaded = db.load(versions, last)
            if loaded is None:
                db.execute(self.schema)
                for name, sql in self.views.items():
                    db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}", dialect=self.dialect)
            for b in self.done:
                if loaded is None or b > loaded:
                    self._apply(db, b)
            # the first micro-batch's diffs start from nothing: they hold what a view has on creation too
            first = last < 0
            subs = {v: [s.subscribe(v, snapshot=first) for s in db.shards] for v in self.views}
        else:
            _, db, subs, versions = held
            db.group.collective = collective
        try:
            t0, values = self._apply(db, self.batch_id)
        except _Refused as refused:  # in every task alike (the shards agree on errors)
            collective.close()
            if refused.intact:  # rolled back: the shards still hold the state before this batch
                _HELD[key] = (last, db, subs, versions)
            else:
                db.close()
            yield pickle.dumps(portable_error(refused.error))
            return
        rows = {}
        for view, parts in subs.items():
            batches = [b for sub in parts for b in sub if b.num_rows]
            diffs = _diffs(batches, t0, values, self.diff_schemas[view])
            rows[view] = diffs.num_rows
            out = join(directory, "output", view)
            makedirs(out)
            pq.write_table(diffs, join(out, f"task-{task:05d}.parquet"))
            if diffs.num_rows:
                meta = {b"ivm.view": view.encode(), b"ivm.batch_id": str(self.batch_id).encode()}
                stamped = diffs.replace_schema_metadata(meta)
                for folder in self.diff_files.get(view, ()):
                    makedirs(folder)
                    pq.write_table(stamped, join(folder, _diff_file(self.batch_id, task)))
        if self.checkpoint:
            db.save(versions, self.batch_id)
        collective.close()
        _HELD[key] = (self.batch_id, db, subs, versions)
        yield pickle.dumps(rows)

    def _versions(self, db: Shards) -> list[Versions]:
        """Where the hosted shards' checkpoints are, each shard's own (any layout of tasks finds them)."""
        return [Versions(join(self.state, "shards", f"{i:05d}")) for i in db.hosted]

    def _apply(self, db: Shards, batch_id: int) -> tuple[int, pa.Array]:
        """Make batch ``batch_id``'s routed rows for the hosted shards, a transaction per source commit: the
        engine time of the first, and the commits' values (engine time ``t0 + i`` is commit ``i``). Raises
        ``_Refused`` if a commit is refused (in every process alike)."""
        base = join(_batch_dir(self.state, batch_id), "input")
        t0 = db.shards[0].time
        if _exists(join(base, _SHAPE)):
            saved = json.loads(read_whole(join(base, _SHAPE)))
            shape = ChangeShape(**{**saved, "ignored": tuple(saved["ignored"])})
            data = _hosted_rows(join(base, _CHANGES), db.hosted)
            columns = {t: [c.name for c in table.columns] for t, table in self.tables.items()}
            try:
                values, commits = split_commits(data, shape, columns, batch_id)
                local = (values, None)
            except SqlError as err:
                local = (None, portable_error(err))
            every = [pickle.loads(m) for m in db.group.collective.all_gather(pickle.dumps(local))]
            errors = [e for _, e in every if e is not None]
            if errors:
                raise _Refused(errors[0], intact=True)
            parts = [v for v, _ in every if v is not None and len(v)]
            values = pc.unique(pa.concat_arrays(parts)).sort() if parts else pa.array([], pa.int64())
            mine = {c.value.as_py(): c for c in commits}
            for i in range(len(values)):
                c = mine.get(values[i].as_py())
                writes = []
                if c is not None:
                    writes = [(t, "delete", r) for t, r in c.deletes.items()]
                    writes += [(t, "insert", r) for t, r in c.inserts.items()]
                try:
                    db.change(writes, whole=False)
                except Error as err:
                    message = f"commit {values[i].as_py()}, {err}"
                    raise _Refused(type(err)(message), intact=i == 0) from err
            return t0, values
        writes = []
        for table in sorted(listdir(base) if _exists(base) else []):
            for kind in ("delete", "insert"):
                path = join(base, table, kind)
                if _exists(path):
                    writes.append((table, kind, _hosted_rows(path, db.hosted)))
        try:
            db.change(writes, whole=False)
        except Error as err:
            raise _Refused(err, intact=True) from err
        return t0, pa.array([batch_id], pa.int64())


class _Refused(Exception):
    """A micro-batch refused by the shards: the error, and whether they still hold the state before it."""

    def __init__(self, error: Error, intact: bool) -> None:
        super().__init__(str(error))
        self.error, self.intact = error, intact


def _hosted_rows(path: str, hosted: range) -> pa.Table:
    """The routed rows under ``path`` (partitioned by shard) of the ``hosted`` shards."""
    fs, local = resolve(path)
    data = ds.dataset(local, filesystem=fs, format="parquet", partitioning="hive").to_table(
        filter=pc.field(_SHARD).isin(list(hosted))
    )
    return data.drop_columns([_SHARD])


def remove_tree(path: str, whole: bool = False) -> None:
    """Delete what the directory ``path`` holds (and the directory too, if ``whole``)."""
    fs, local = resolve(path)
    if whole:
        if fs.get_file_info(local).type != pafs.FileType.NotFound:
            fs.delete_dir(local)
    else:
        fs.delete_dir_contents(local, missing_dir_ok=True)


def _exists(path: str) -> bool:
    fs, local = resolve(path)
    return fs.get_file_info(local).type != pafs.FileType.NotFound


def _diffs(batches: list[pa.RecordBatch], t0: int, values: pa.Array, schema: pa.Schema) -> pa.Table:
    """A view's changes in this micro-batch, consolidated per commit, with ``time`` = the commit's value."""
    if not batches:
        return schema.empty_table()
    raw = pa.Table.from_batches(batches)
    columns = [c for c in raw.column_names if c not in ("time", "diff")]
    net = raw.group_by([*columns, "time"], use_threads=False).aggregate([("diff", "sum")])
    net = net.filter(pc.not_equal(net.column("diff_sum"), 0))
    # (rows a view holds on creation, such as a global aggregate's, are dated with the first commit)
    time = values.take(pa.array(np.maximum(net.column("time").to_numpy() - t0, 0)))
    out = pa.table([*(net.column(c) for c in columns), time, net.column("diff_sum")], names=schema.names)
    return out.cast(schema)
