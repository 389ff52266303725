"""Spark as the distributed engine: views kept in N shards by the tasks of one barrier stage per micro-batch.

    views = DistributedViews(spark, SCHEMA, {"reach": "WITH RECURSIVE ..."}, "/shared/state", shards=4)
    diffs = views.apply(batch_id, {"edge": (inserted_rows_df, deleted_rows_df)})   # view -> DataFrame

A micro-batch is one Spark job: its change rows, spread evenly over ``tasks`` partitions by Spark
(``repartition``), feed one barrier stage of ``tasks`` tasks, each hosting a contiguous range of the
``shards``. The tasks meet at a rendezvous in the driver (``ivm.engine.collective.Rendezvous``: one round trip,
where each of Spark's own barrier calls takes a second) and then talk over sockets
(``ivm.engine.collective.SocketCollective``): each sends every row to the task hosting the shard of its table
key (``ivm.db.shards.shards_of_rows``, the same function of the key's values in every process), keeps the rows
of its own shards under the batch's directory on the shared path (they are the log the state is rebuilt from),
and the tasks run the whole micro-batch together as ``ivm.db.shards.Shards`` in several processes. Each task
then writes its shards' part of every view's diffs as Parquet, and the driver reads them back as DataFrames;
it collects nothing but the tasks' counts. A stage that fails (a worker lost) is run again by the driver as a
new job under a new rendezvous token, once the failed one's tasks are gone, so no task of it meets the new
ones.

Each executor keeps the shards its tasks host between micro-batches in a process of its own, which outlives
Spark's Python workers (``connectors.spark._keeper``): the tasks hand it their rows and it runs them. Every
``checkpoint_every`` micro-batches each shard also writes its state (its arrangements as files,
``ivm.db.storage.Versions``) under ``state/shards/NNNNN``, numbered by the batch id. When any task of a stage
does not hold the state of the batch before (its keeper is new, a task was retried, or the driver restarted),
every task loads its shards' newest checkpoint of a recorded batch and replays the routed input of the recorded
batches after it, which stays under the state path until two later checkpoints are recorded. A checkpoint
written by a batch that was not recorded (its stage failed later, or the driver stopped first) is deleted when
the state is loaded. A batch id applied before is not applied again."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Listener
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import ivm
from connectors.spark._changes import (
    ChangeShape,
    dead_letter_rows,
    require_control_columns,
    require_table_columns,
    split_commits,
)
from connectors.spark._contents import contents_part
from connectors.spark._keeper import run_kept
from connectors.spark._state import location, remove_tree, write_atomically
from ivm.db.shards import Shards, portable_error, shards_of_rows
from ivm.db.storage import Versions
from ivm.engine.collective import Meeting, Rendezvous, SocketCollective
from ivm.engine.files import join, listdir, makedirs, read_whole, remove, resolve, write_bytes
from ivm.errors import Error, ProgrammingError
from sql.errors import SqlError

__all__ = ["DistributedViews"]

_SHARD = "ivm_shard"  # (a partition directory named with a leading _ would be ignored by readers)
_DONE = "done.json"
_SCHEMA = "schema.arrow"  # the change rows' Arrow schema
_CHANGES, _SHAPE = "changes", "shape.json"  # a micro-batch of change rows, and their shape
_HELD_ROWS = "held"  # under a batch's directory: the rows of its last commit, when commits may be cut


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
        self.afresh = 0  # how many of its tasks built their shards afresh (not held by their workers)
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

    def close(self) -> None:
        """Mark the state closed: the executors' keepers let its shards go at their next look (within
        seconds) rather than a minute after the last task. The next micro-batch recorded clears the mark."""
        rec = self.record()
        if rec["last"] >= 0 and not rec.get("closed"):
            write_bytes(json.dumps({**rec, "closed": True}).encode(), join(self.state, _DONE))

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
        remove_tree(join(_batch_dir(self.state, batch_id), "input"))  # what a failed attempt left
        packed = [
            _packed(df, table, kind)
            for table, pair in changes.items()
            for kind, df in zip(("insert", "delete"), pair, strict=True)
            if df is not None
        ]
        source = functools.reduce(lambda x, y: x.union(y), packed) if packed else None
        return self._run(batch_id, rec, pa.int64(), source, None)

    def apply_changes(
        self,
        batch_id: int,
        df,
        shape: ChangeShape,
        note: object = None,
        diff_files: Mapping[str, list] | None = None,
        emit: Callable[[dict], None] | None = None,
        contents_files: Mapping[str, tuple[str, bool]] | None = None,
        dead_letters: str | None = None,
        whole_files: Mapping[str, tuple[str, bool, str]] | None = None,
    ) -> dict | None:
        """Apply one micro-batch of change rows (a DataFrame in ``shape``, as ``connectors.spark``'s sink takes
        them), each source commit as one transaction; returns each view's diffs as a DataFrame (its columns,
        ``time`` = the source commit, ``diff``), or None for a batch id applied before. ``note`` (JSON) is
        kept in the record with the batch (the sink keeps its streaming query's id there). The tasks also
        write each view's diffs into the folders ``diff_files[view]`` names, one Parquet file per task that
        has some (``batch-<id>-task-<k>.parquet``); ``emit(diffs)`` runs before the batch is recorded.

        For each folder of ``contents_files`` (folder -> (view, every)), each task writes its shards' part of
        the view's contents there (``part-<k>.parquet``) when the view changed in this micro-batch, when
        ``every`` is true, or when the tasks loaded their state afresh; ``contents_written`` then says, per
        folder, which parts were written (``True``), which are in error (``None``: a view in error has no
        contents) and which were left as they were (``False``), by part number.

        A commit the shards refuse fails the micro-batch, naming it; with ``dead_letters`` (a folder) each task
        writes its change rows of such commits there instead, with the error (``_ivm_batch_id``,
        ``_ivm_error``; ``batch-<id>-task-<k>.parquet``), and the other commits proceed.

        For each file of ``whole_files`` (file -> (view, every, the view's name in the file's metadata)), the
        view's whole contents are written there in one piece when the view changed in this micro-batch or
        ``every`` is true: each task sends its shards' part to the task of the first range of shards, which
        writes the file (unless the view is in error in some shard: the file keeps the contents it had).
        ``whole_written`` then names the files written."""
        rec = self._next(batch_id)
        if rec is None:
            return None
        require_control_columns(df.columns, shape)
        if shape.table is not None:
            if shape.table not in self.tables:
                raise SqlError(f"table {shape.table!r} does not exist")
            columns = {t: [c.name for c in table.columns] for t, table in self.tables.items()}
            require_table_columns(df.columns, columns, [shape.table])
        from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type

        directory = _batch_dir(self.state, batch_id)
        remove_tree(join(directory, "input"))
        schema = to_arrow_schema(df.schema)
        makedirs(join(directory, "input"))
        write_bytes(json.dumps(dataclasses.asdict(shape)).encode(), join(directory, "input", _SHAPE))
        write_bytes(schema.serialize(), join(directory, "input", _SCHEMA))
        time_type = pa.int64() if shape.commit is None else to_arrow_type(df.schema[shape.commit].dataType)
        outputs = _Outputs(
            {v: [str(f) for f in folders] for v, folders in (diff_files or {}).items()},
            {str(folder): spec for folder, spec in (contents_files or {}).items()},
            None if dead_letters is None else str(dead_letters),
            {str(path): spec for path, spec in (whole_files or {}).items()},
        )
        return self._run(batch_id, rec, time_type, df, (shape, schema), note, outputs, emit)

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
        source,
        changes: tuple[ChangeShape, pa.Schema] | None,
        note: object = None,
        outputs: _Outputs | None = None,
        emit: Callable[[dict], None] | None = None,
    ) -> dict[str, object]:
        """Run micro-batch ``batch_id`` as one barrier stage over ``source`` (change rows in the shape and
        schema ``changes``, or packed tables' rows), and record it; the tasks write ``outputs``."""
        outputs = outputs or _Outputs()
        directory = _batch_dir(self.state, batch_id)
        remove_tree(join(directory, "output"))  # what an attempt with another layout of tasks left
        remove_tree(join(directory, _HELD_ROWS))
        # an earlier attempt's files, maybe of more tasks (at most shards)
        folders = [f for fs in outputs.diffs.values() for f in fs]
        for folder in folders + ([outputs.dead_letters] if outputs.dead_letters else []):
            for task in range(self.shards):
                remove(join(folder, _diff_file(batch_id, task)))
        if source is None:
            source = self.spark.createDataFrame([], _PACKED)
        stage = source.repartition(self.tasks)  # the rows spread evenly: each task routes its part
        meet = _rendezvous(self.spark)
        for attempt in range(1, _ATTEMPTS + 1):
            token = meet.open(self.tasks)
            job = _Job(self, batch_id, rec, time_type, changes, meet, token, outputs)
            try:
                # a barrier stage whose results go to the driver is not run again by Spark: a failed one is
                # run again here, under a new token, once every task of the failed one is gone
                done = stage.mapInArrow(job.run, _REPORT, barrier=True).collect()
            except Exception:
                if attempt == _ATTEMPTS or not meet.retire(token, wait=_GONE_S):
                    raise
                continue
            meet.retire(token)
            break
        reported = [pickle.loads(r.report) for r in done]
        if len(reported) != self.tasks:
            raise RuntimeError(f"{len(reported)} of the {self.tasks} tasks reported")
        for r in reported:
            if isinstance(r, Error):
                raise type(r)(f"micro-batch {batch_id} was not applied: {r}")
        self.counts = {v: sum(r[1][v] for r in reported) for v in self.views}
        self.afresh = sum(r[0] for r in reported)
        self.contents_written = {folder: [False] * self.tasks for folder in outputs.contents}
        self.whole_written: set[str] = set()
        for _, _, role, written, whole in reported:
            for folder, status in written.items():
                self.contents_written[folder][role] = status
            self.whole_written.update(whole)
        frames = _Frames(self.spark, join(directory, "output"), list(self.views))
        if emit is not None:
            emit(frames)
        self._record(rec, batch_id, job.checkpoint, note)
        return frames

    def _record(self, rec: dict, batch_id: int, checkpointed: bool, note: object) -> None:
        """Record micro-batch ``batch_id`` as applied (and its checkpoint as written in every shard); then
        delete what no longer serves: the batches' directories up to the older of the two newest checkpoints,
        but for the rows that one held for the next batch (when commits may be cut), which a replay reads."""
        batches, checkpoints = [*rec["batches"], batch_id], list(rec["checkpoints"])
        if checkpointed:
            checkpoints = [*checkpoints, batch_id][-2:]
        if len(checkpoints) == 2:
            batches = [b for b in batches if b > checkpoints[0]]
        new = {"batches": batches, "checkpoints": checkpoints, "last": batch_id, "note": note}
        write_bytes(json.dumps(new).encode(), join(self.state, _DONE))
        if len(checkpoints) == 2:
            for name in listdir(join(self.state, "batches")):
                if not name.isdigit() or int(name) > checkpoints[0]:
                    continue
                directory = join(self.state, "batches", name)
                if int(name) == checkpoints[0] and _exists(join(directory, _HELD_ROWS)):
                    for part in ("input", "output"):  # only the rows it held for the next batch still serve
                        remove_tree(join(directory, part), whole=True)
                else:
                    remove_tree(directory, whole=True)


def _packed(df, table: str, kind: str):
    """``df``'s rows, an Arrow IPC stream per Arrow batch, as rows of ``_PACKED`` naming ``table`` and
    ``kind``: the rows of tables of any columns in one DataFrame."""

    def pack(batches):
        for b in batches:
            if b.num_rows:
                blob = _ipc(pa.Table.from_batches([b]))
                yield pa.record_batch(
                    [pa.array([table]), pa.array([kind]), pa.array([blob], pa.binary())], schema=_PACKED_ARROW
                )

    return df.mapInArrow(pack, _PACKED)


def _ipc(data: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as out:
        out.write_table(data)
    return sink.getvalue().to_pybytes()


def _from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def _shard_of_changes(data: pa.Table, shape: ChangeShape, tables: dict, count: int) -> np.ndarray:
    """The shard of each change row: that of its key in the table it names. A row naming no table of the
    schema goes to shard 0, whose task refuses it by name."""
    shard = np.zeros(data.num_rows, np.int32)
    if shape.table is not None:
        shard[:] = shards_of_rows(tables[shape.table], data, count)
    elif data.num_rows:
        names = pc.dictionary_encode(data.column(shape.table_column).combine_chunks().cast(pa.string()))
        codes = pc.fill_null(names.indices, -1).to_numpy(zero_copy_only=False)
        for code, name in enumerate(names.dictionary.to_pylist()):  # a few tables, not rows
            if name in tables:
                mine = np.flatnonzero(codes == code)
                shard[mine] = shards_of_rows(tables[name], data.take(pa.array(mine)), count)
    return shard


_PACKED = "ivm_table string, ivm_kind string, ivm_rows binary"
_PACKED_ARROW = pa.schema([("ivm_table", pa.string()), ("ivm_kind", pa.string()), ("ivm_rows", pa.binary())])
_REPORT = "task int, report binary"
_REPORT_ARROW = pa.schema([("task", pa.int32()), ("report", pa.binary())])
_ATTEMPTS = 4  # runs of a micro-batch's stage (Spark's spark.stage.maxConsecutiveAttempts)
_GONE_S = 120.0  # how long a failed stage's tasks may take to end before the micro-batch fails instead

_RENDEZVOUS: dict[str, Rendezvous] = {}


def _rendezvous(spark) -> Rendezvous:
    """This driver's rendezvous, on the address the executors reach it at."""
    host = spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")
    if host not in _RENDEZVOUS:
        _RENDEZVOUS[host] = Rendezvous(host)
    return _RENDEZVOUS[host]


def _batch_dir(state: str, batch_id: int) -> str:
    return join(state, "batches", f"{batch_id:012d}")


def _diff_file(batch_id: int, task: int) -> str:
    """The name of a task's file of a view's diffs in a ``diff_files`` folder."""
    return f"batch-{batch_id:012d}-task-{task:05d}.parquet"


def _hosted(task: int, tasks: int, shards: int) -> range:
    """The shards task ``task`` of ``tasks`` hosts: a contiguous range, the ranges in task order."""
    return range(task * shards // tasks, (task + 1) * shards // tasks)


# the shards this process hosts, kept between micro-batches: (state, shards, tasks) -> for each range of shards
# held, (its role: which range, the last batch, the shards, their subscriptions, their checkpoints)
_HELD: dict[tuple[str, int, int], list[tuple[int, int, Shards, dict, list[Versions]]]] = {}
_HELD_LOCK = threading.Lock()


# state -> (when a task of it last came or ended, the longest gap seen between tasks)
_TASKS_SEEN: dict[str, tuple[float, float]] = {}
_KEEP_S = 60.0  # shards are kept this long after a task at least, and 3 times the longest gap seen


def _take_held(key: tuple[str, int, int]):
    """One range of shards held for ``key``, taken out (a task of the stage holds it while it runs), or None."""
    with _HELD_LOCK:
        now = time.monotonic()
        last, gap = _TASKS_SEEN.get(key[0], (now, 0.0))
        _TASKS_SEEN[key[0]] = (now, max(gap, now - last))
        held = _HELD.get(key)
        return held.pop() if held else None


def release_idle() -> bool:
    """Close the shards of every state no task has come for in ``_KEEP_S`` seconds and three times the longest
    gap between its tasks (the stream stopped), of a state whose sink was closed, and those of a batch older
    than the state's record (the stream's tasks ran elsewhere since): their memory is the executor's. Whether
    any shards are still held."""
    now = time.monotonic()
    with _HELD_LOCK:
        states = {key[0] for key in _HELD}
    recorded = {}
    for state in states:  # (read outside the lock: a task may take its shards meanwhile)
        try:
            rec = json.loads(read_whole(join(state, _DONE)))
            recorded[state] = (rec["last"], bool(rec.get("closed")))
        except (OSError, ValueError, KeyError):
            recorded[state] = (None, False)
    with _HELD_LOCK:
        for key in list(_HELD):
            last, gap = _TASKS_SEEN.get(key[0], (now, 0.0))
            done, closed = recorded.get(key[0], (None, False))
            quiet = now - last > max(_KEEP_S, 3 * gap)
            # a closed sink's shards are of its last batch (a sink started since leaves a later one)
            newest = None if done is None else done + 1 if closed else done
            for entry in [e for e in _HELD[key] if quiet or newest is not None and e[1] < newest]:
                _HELD[key].remove(entry)
                entry[2].close()
            if not _HELD[key]:
                del _HELD[key]
        return bool(_HELD)


def _put_held(key: tuple[str, int, int], entry: tuple) -> None:
    """Keep ``entry`` for ``key``'s next micro-batch; the ranges held for the same state in another layout of
    shards over tasks no longer serve."""
    with _HELD_LOCK:
        _TASKS_SEEN[key[0]] = (time.monotonic(), _TASKS_SEEN.get(key[0], (0.0, 0.0))[1])
        for other in [k for k in _HELD if k[0] == key[0] and k != key]:
            for stale in _HELD.pop(other):
                stale[2].close()
        _HELD.setdefault(key, []).append(entry)


def _roles(held: list[tuple[int, int]], last: int, tasks: int) -> list[int] | None:
    """Each task's role (the range of shards it hosts), given the (role, batch) whose state each holds: the
    roles they hold, when together they hold every role at batch ``last``; else None, and all start afresh.
    (Spark gives the stage's partitions to the executors in any order, so a task keeps what its worker holds
    rather than the range its partition number would name.)"""
    roles = [r for r, _ in held]
    if all(b == last for _, b in held) and sorted(roles) == list(range(tasks)):
        return roles
    return None


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


class _Outputs(NamedTuple):
    """What the tasks of a micro-batch write besides their shards: each view's diffs into folders, the parts
    of views' contents (folder -> (view, whether every task writes its part)), the commits refused, and views'
    whole contents (file -> (view, whether it is written unchanged, its name in the file's metadata))."""

    diffs: dict[str, list[str]] = {}
    contents: dict[str, tuple[str, bool]] = {}
    dead_letters: str | None = None
    whole: dict[str, tuple[str, bool, str]] = {}


class _Job:
    """What a task of a micro-batch's barrier stage runs (pickled to the executors)."""

    def __init__(
        self,
        views: DistributedViews,
        batch_id: int,
        rec: dict,
        time_type: pa.DataType,
        changes: tuple[ChangeShape, pa.Schema] | None,
        meet: Rendezvous,
        token: str,
        outputs: _Outputs,
    ) -> None:
        self.outputs = outputs
        self.state, self.schema, self.views = views.state, views.schema, views.views
        self.dialect, self.tables = views.dialect, views.tables
        self.shards, self.tasks, self.batch_id = views.shards, views.tasks, batch_id
        self.changes = changes
        self.done, self.last = list(rec["batches"]), rec["last"]
        # the batch applied before each recorded one (the first kept follows the older checkpoint, if the
        # batches up to it were dropped from the record)
        first = rec["checkpoints"][0] if len(rec["checkpoints"]) == 2 else -1
        self.before = dict(zip(self.done, [first, *self.done], strict=False))
        since = rec["checkpoints"][-1] if rec["checkpoints"] else None
        applied = len([b for b in self.done if since is None or b > since])  # batches since the last one
        self.checkpoint = applied + 1 >= views.checkpoint_every  # after this batch, in every shard
        self.rendezvous, self.rendezvous_key, self.token = meet.address, meet.authkey, token
        self.authkey = os.urandom(16)  # the tasks' connections to one another prove they are of this job
        extra = [pa.field("time", time_type), pa.field("diff", pa.int64())]
        self.diff_schemas = {v: pa.schema([*views.columns[v], *extra]) for v in self.views}
        wanted = [v for v, *_ in [*outputs.contents.values(), *outputs.whole.values()]]
        self.contents_schemas = {v: pa.schema(list(views.columns[v])) for v in wanted}

    def run(self, batches):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        task = ctx.partitionId()
        infos = ctx.getTaskInfos()
        if len(infos) != self.tasks:
            raise RuntimeError(f"the stage has {len(infos)} tasks, not {self.tasks}")
        rows = list(batches)  # this task's part of the micro-batch's rows, to be routed to their shards
        report = run_kept(self, task, infos[task].address, rows)  # in the executor's keeper, which outlives us
        yield pa.record_batch([pa.array([task], pa.int32()), pa.array([report], pa.binary())], _REPORT_ARROW)

    def run_here(self, task: int, address: str, rows: list[pa.RecordBatch]) -> bytes:
        """Run task ``task`` over its ``rows`` in this process, on the executor at ``address``: its report."""
        meeting = Meeting(self.rendezvous, self.rendezvous_key, self.token, task)
        try:
            return self._run(task, address.rsplit(":", 1)[0], rows, meeting)
        finally:
            meeting.close()

    def _run(self, task: int, host: str, rows: list[pa.RecordBatch], meeting: Meeting) -> bytes:
        key = (self.state, self.shards, self.tasks)
        held = _take_held(key)  # put back only once this batch is through
        last = self.last
        directory = _batch_dir(self.state, self.batch_id)
        # every task listens: the tasks connect to one another, each pair once
        listener = Listener((host, 0), authkey=self.authkey) if self.tasks > 1 else None
        address = "" if listener is None else f"{host} {listener.address[1]}"
        holding = held[:2] if held else (-1, -2)  # (role, batch) of the state this worker holds
        said = [json.loads(m) for m in meeting.publish(json.dumps([address, *holding]))]
        roles = _roles([(r, b) for _, r, b in said], last, self.tasks)
        afresh = roles is None  # some task lacks the state before this batch: all start afresh
        roles = list(range(self.tasks)) if afresh else roles
        role = roles[task]  # the range of shards this task hosts, and its place in the collective
        addresses = [""] * self.tasks
        for t, r in enumerate(roles):
            addresses[r] = said[t][0]
        collective = SocketCollective(role, self.tasks, lambda _: addresses, self.authkey, host, listener)
        received = self._exchange(collective, role, rows)
        del rows
        if afresh:
            if held is not None:
                held[2].close()
            db = Shards(self.shards, _hosted(role, self.tasks, self.shards), collective)
            versions = self._versions(db)
            loaded = db.load(versions, last)
            if loaded is None:
                db.execute(self.schema)
                for name, sql in self.views.items():
                    db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}", dialect=self.dialect)
            for b in self.done:
                if loaded is None or b > loaded:
                    self._apply(db, b, before=self.before[b])
            # the first micro-batch's diffs start from nothing: they hold what a view has on creation too
            first = last < 0
            subs = {v: [s.subscribe(v, snapshot=first) for s in db.shards] for v in self.views}
        else:
            _, _, db, subs, versions = held
            db.group.collective = collective
        try:
            t0, values = self._apply(db, self.batch_id, received, before=last)
        except _Refused as refused:  # in every task alike (the shards agree on errors)
            collective.close()
            if refused.intact:  # rolled back: the shards still hold the state before this batch
                _put_held(key, (role, last, db, subs, versions))
            else:
                db.close()
            return pickle.dumps(portable_error(refused.error))
        counts = {}
        for view, parts in subs.items():
            batches = [b for sub in parts for b in sub if b.num_rows]
            diffs = _diffs(batches, t0, values, self.diff_schemas[view])
            counts[view] = diffs.num_rows
            out = join(directory, "output", view)
            makedirs(out)
            pq.write_table(diffs, join(out, f"task-{role:05d}.parquet"))
            if diffs.num_rows:
                meta = {b"ivm.view": view.encode(), b"ivm.batch_id": str(self.batch_id).encode()}
                stamped = diffs.replace_schema_metadata(meta)
                for folder in self.outputs.diffs.get(view, ()):
                    makedirs(folder)
                    pq.write_table(stamped, join(folder, _diff_file(self.batch_id, role)))
        written, whole = {}, []
        if self.outputs.contents or self.outputs.whole:
            # reading a view's contents is a query of every shard, whose rows may come to a task from the
            # shards of others: the tasks agree on the views that changed, and each writes its part of them
            changed = {view for view, n in counts.items() if n}
            agreed = set().union(*(pickle.loads(m) for m in collective.all_gather(pickle.dumps(changed))))
            for folder, (view, every) in self.outputs.contents.items():
                if every or afresh or view in agreed:
                    written[folder] = self._write_part(self._part(db, view), role, folder)
            whole = self._write_whole(db, collective, role, agreed)
        if self.checkpoint:
            db.save(versions, self.batch_id)
        collective.close()
        _put_held(key, (role, self.batch_id, db, subs, versions))
        return pickle.dumps((afresh, counts, role, written, whole))

    def _part(self, db: Shards, view: str) -> pa.Table | None:
        """The hosted shards' part of ``view``'s contents, stamped with the view and the micro-batch; None if
        the view is in error in one of them (it has no contents)."""
        try:
            rows = db.contents(view)
        except Error:
            return None
        schema = self.contents_schemas[view]
        meta = {b"ivm.view": view.encode(), b"ivm.batch_id": str(self.batch_id).encode()}
        return pa.table(rows.columns, names=schema.names).cast(schema).replace_schema_metadata(meta)

    def _write_part(self, part: pa.Table | None, role: int, folder: str) -> bool | None:
        """Write this task's ``part`` of a view's contents into ``folder``: True, or None if the view is in
        error (it has no contents to write)."""
        if part is None:
            return None
        makedirs(folder)
        pq.write_table(part, join(folder, contents_part(role)))
        return True

    def _write_whole(self, db: Shards, collective: SocketCollective, role: int, changed: set[str]) -> list[str]:
        """Write the whole contents of the views of ``outputs.whole`` that ``changed`` in this micro-batch (in
        any shard) or are to be written unchanged, each into its one file, from the task of role 0 (the others
        send it their parts); the files written."""
        due = {path: spec for path, spec in self.outputs.whole.items() if spec[1] or spec[0] in changed}
        if not due:  # (alike in every task)
            return []
        parts = {view: self._part(db, view) for view, _, _ in due.values()}
        mine = pickle.dumps({v: None if p is None else _ipc(p) for v, p in parts.items()})
        came = collective.all_to_all([mine] + [b""] * (self.tasks - 1))
        if role != 0:
            return []
        every = [pickle.loads(m) for m in came]
        written = []
        for path, (view, _, label) in due.items():
            blobs = [m[view] for m in every]
            if any(b is None for b in blobs):
                continue  # in error in some shard: the file keeps the contents last computed whole
            data = pa.concat_tables([_from_ipc(b) for b in blobs])
            meta = {**data.schema.metadata, b"ivm.view": label.encode()}
            write_atomically(data.replace_schema_metadata(meta), location(path))
            written.append(path)
        return written

    def _exchange(self, collective: SocketCollective, role: int, rows: list[pa.RecordBatch]) -> dict:
        """Send each of this task's ``rows`` to the task hosting its shard, and keep those that come here
        under the batch's input, a file per shard: the rows of the hosted shards, by (table, kind), or
        (``_CHANGES``, None) for change rows."""
        routed: dict[tuple[str, str | None], tuple[pa.Table, np.ndarray]] = {}
        if self.changes is None:  # packed tables' rows
            parts: dict[tuple[str, str | None], list[pa.Table]] = {}
            for b in rows:  # a row per Arrow batch of the source, not per change
                for table, kind, blob in zip(*(b.column(i).to_pylist() for i in range(3)), strict=True):
                    parts.setdefault((table, kind), []).append(_from_ipc(blob))
            for (table, kind), tables in parts.items():
                data = pa.concat_tables(tables)
                routed[(table, kind)] = (data, shards_of_rows(self.tables[table], data, self.shards))
        elif rows:
            shape = self.changes[0]
            data = pa.Table.from_batches(rows)
            routed[(_CHANGES, None)] = (data, _shard_of_changes(data, shape, self.tables, self.shards))
        outgoing = []
        for q in range(self.tasks):
            r = _hosted(q, self.tasks, self.shards)
            message = {}
            for name, (data, shard) in routed.items():
                there = np.flatnonzero((shard >= r.start) & (shard < r.stop))
                if len(there):
                    part = data.take(pa.array(there)).append_column(_SHARD, pa.array(shard[there], pa.int32()))
                    message[name] = _ipc(part)
            outgoing.append(pickle.dumps(message))
        routed.clear()
        came: dict[tuple[str, str | None], list[pa.Table]] = {}
        for message in collective.all_to_all(outgoing):
            for name, blob in pickle.loads(message).items():
                came.setdefault(name, []).append(_from_ipc(blob))
        received = {}
        base = join(_batch_dir(self.state, self.batch_id), "input")
        for name, tables in came.items():
            data = pa.concat_tables(tables)
            shard = data.column(_SHARD).to_numpy()
            data = data.drop_columns([_SHARD])
            folder = join(base, *(p for p in name if p is not None))
            _keep_by_shard(folder, data, shard, _hosted(role, self.tasks, self.shards), sync=False)
            received[name] = data
        return received

    def _versions(self, db: Shards) -> list[Versions]:
        """Where the hosted shards' checkpoints are, each shard's own (any layout of tasks finds them)."""
        return [Versions(join(self.state, "shards", f"{i:05d}")) for i in db.hosted]

    def _apply(
        self, db: Shards, batch_id: int, received: dict | None = None, before: int = -1
    ) -> tuple[int, pa.Array]:
        """Make batch ``batch_id``'s rows for the hosted shards (``received`` now, or else those kept under its
        input), a transaction per source commit: the engine time of the first, and the commits' values
        (engine time ``t0 + i`` is commit ``i``). Raises ``_Refused`` if a commit is refused (in every
        process alike). Where commits may be cut across micro-batches, the rows of the last commit wait for
        the next micro-batch, kept under this batch's directory: the batch applied ``before`` this one
        left its own there."""
        base = join(_batch_dir(self.state, batch_id), "input")
        t0 = db.shards[0].time
        if _exists(join(base, _SHAPE)):
            saved = json.loads(read_whole(join(base, _SHAPE)))
            shape = ChangeShape(**{**saved, "ignored": tuple(saved["ignored"])})
            schema = pa.ipc.read_schema(pa.py_buffer(read_whole(join(base, _SCHEMA))))
            if received is None:
                data = _hosted_rows(join(base, _CHANGES), db.hosted, schema)
            else:
                data = received.get((_CHANGES, None), schema.empty_table())
            columns = {t: [c.name for c in table.columns] for t, table in self.tables.items()}
            if not shape.whole:
                waiting = _hosted_rows(join(_batch_dir(self.state, before), _HELD_ROWS), db.hosted, schema)
                if waiting.num_rows:
                    data = pa.concat_tables([waiting, data], promote_options="permissive")
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
            if not shape.whole and len(values):  # the last commit may go on in the next micro-batch
                if received is not None:  # (a replay of a recorded batch kept them then)
                    self._hold(data, shape, values[len(values) - 1], batch_id, db.hosted)
                values = values.slice(0, len(values) - 1)
            mine = {c.value.as_py(): c for c in commits}
            applied, dead = [], []
            for i in range(len(values)):
                c = mine.get(values[i].as_py())
                writes = []
                if c is not None:
                    writes = [(t, "delete", r) for t, r in c.deletes.items()]
                    writes += [(t, "insert", r) for t, r in c.inserts.items()]
                try:
                    db.change(writes, whole=False)
                    applied.append(i)
                except Error as err:  # rolled back in every shard, and raised in every process alike
                    if self.outputs.dead_letters is None:
                        message = f"commit {values[i].as_py()}, {err}"
                        raise _Refused(type(err)(message), intact=not applied) from err
                    dead.append((values[i], err))
            if dead and received is not None:  # (a replay of a recorded batch wrote them then)
                # a file per task, named by its first shard, so that a micro-batch applied again replaces it
                makedirs(self.outputs.dead_letters)
                pq.write_table(
                    dead_letter_rows(data, shape, dead, batch_id),
                    join(self.outputs.dead_letters, _diff_file(batch_id, db.hosted.start)),
                )
            return t0, values.take(pa.array(applied, pa.int64()))
        writes = []
        if received is None:
            for table in sorted(listdir(base) if _exists(base) else []):
                for kind in ("delete", "insert"):
                    path = join(base, table, kind)
                    if _exists(path):
                        writes.append((table, kind, _hosted_rows(path, db.hosted)))
        else:
            order = sorted(received, key=lambda name: (name[0], name[1] == "insert"))  # deletes first
            writes = [(table, kind, received[(table, kind)]) for table, kind in order]
        try:
            db.change(writes, whole=False)
        except Error as err:
            raise _Refused(err, intact=True) from err
        return t0, pa.array([batch_id], pa.int64())

    def _hold(self, data: pa.Table, shape: ChangeShape, value, batch_id: int, hosted: range) -> None:
        """Keep this task's change rows of commit ``value`` for the next micro-batch, a file per shard under
        the batch's directory (a replay finds them there)."""
        rows = data.filter(pc.equal(data.column(shape.commit), value))
        shard = _shard_of_changes(rows, shape, self.tables, self.shards)
        _keep_by_shard(join(_batch_dir(self.state, batch_id), _HELD_ROWS), rows, shard, hosted)


class _Refused(Exception):
    """A micro-batch refused by the shards: the error, and whether they still hold the state before it."""

    def __init__(self, error: Error, intact: bool) -> None:
        super().__init__(str(error))
        self.error, self.intact = error, intact


def _hosted_rows(path: str, hosted: range, schema: pa.Schema | None = None) -> pa.Table:
    """The rows kept under ``path`` (a folder per shard) of the ``hosted`` shards (with ``schema``, when there
    may be none)."""
    fs, local = resolve(path)
    if schema is not None and fs.get_file_info(local).type == pafs.FileType.NotFound:
        return schema.empty_table()
    data = ds.dataset(local, filesystem=fs, format="parquet", partitioning="hive").to_table(
        filter=pc.field(_SHARD).isin(list(hosted))
    )
    data = data.drop_columns([_SHARD])
    return data if schema is None or data.num_rows else schema.empty_table()


def _keep_by_shard(path: str, data: pa.Table, shard: np.ndarray, hosted: range, sync: bool = True) -> None:
    """Write the rows of ``data`` under ``path``, a folder per shard of ``hosted`` that has some (``shard``:
    each row's), as ``_hosted_rows`` reads them."""
    for k in hosted:
        mine = np.flatnonzero(shard == k)
        if len(mine):
            folder = join(path, f"{_SHARD}={k}")
            makedirs(folder)
            buf = pa.BufferOutputStream()
            pq.write_table(data.take(pa.array(mine)), buf)
            write_bytes(buf.getvalue(), join(folder, "rows.parquet"), sync=sync)


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
