"""The ``foreachBatch`` sink with Spark as the engine: ``view_sink(..., shards=N)``.

The same change shapes, dialect, replay rules and diffs as the embedded sink (``connectors.spark._sink``), but
the views are kept in N shards by the tasks of a barrier stage per micro-batch
(``connectors.spark.distributed.DistributedViews``): the change rows never come to the driver, each source
commit is one transaction in every shard, and the diffs leave as Spark DataFrames read from the Parquet the
tasks wrote. ``ParquetDiffs`` are written by the tasks themselves, one file per task and micro-batch that has
some; ``DiffsTo`` gets each changed view's diffs as a DataFrame, and ``DeltaContents`` MERGEs them into its
table, the rows to keep and delete computed by Spark from that DataFrame; a ``ParquetContents`` file is
written whole by one task, which the others send their parts of the view (only when the view changed).
``ParquetContentsSet`` keeps the views' contents in parts, one per task: every task writes its part of a view
that changed, and the driver then names the parts of the micro-batch in the folder's manifest (see
``connectors.spark._contents``). With
``dead_letters``, each task writes its change rows of the commits the shards refused there, a file per task and
micro-batch (``batch-<id>-task-<k>.parquet``), and the other commits proceed. All happens
before the micro-batch is recorded, so a micro-batch Spark replays after a failure writes the same files and
calls the function again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pyarrow as pa

from connectors.spark._changes import ChangeShape, delta_cdf, plain
from connectors.spark._contents import ParquetContentsSet, part_folder
from connectors.spark._outputs import DeltaContents, DiffsTo, Output, ParquetContents, ParquetDiffs, merge_frame
from connectors.spark._sink import ViewSink
from connectors.spark._state import joined
from connectors.spark.distributed import DistributedViews
from sql.errors import SqlError

__all__ = ["ShardedSink"]


class ShardedSink(ViewSink):
    """Maintains ``views`` in ``shards`` shards run by Spark's executors; see ``view_sink``."""

    def __init__(
        self,
        schema: str,
        views: Mapping[str, str],
        state_dir: str | os.PathLike,
        *,
        shards: int,
        tasks: int | None = None,
        checkpoint_every: int = 10,
        shape: ChangeShape | None = None,
        outputs: Sequence[Output] = (),
        ignore_columns: Sequence[str] = (),
        dialect: str = "spark",
        time_zone: str | None = None,
        dead_letters: str | os.PathLike | None = None,
    ) -> None:
        if shards < 1:
            raise SqlError("shards counts the parts each view is kept in: at least 1")
        for out in outputs:
            if not isinstance(out, (DiffsTo, ParquetDiffs, ParquetContentsSet, ParquetContents, DeltaContents)):
                raise SqlError(
                    f"{type(out).__name__} is not available with shards (use DiffsTo, ParquetDiffs, "
                    "ParquetContents, ParquetContentsSet or DeltaContents, or the sink without shards)"
                )
        self.shard_count, self.tasks, self.checkpoint_every = shards, tasks, checkpoint_every
        super().__init__(
            schema,
            views,
            state_dir,
            shape=shape,
            outputs=outputs,
            ignore_columns=ignore_columns,
            dialect=dialect,
            time_zone=time_zone,
            dead_letters=dead_letters,
        )
        self.kept: DistributedViews | None = None

    def _layout(self) -> dict:
        return {"shards": self.shard_count}

    def __call__(self, df, batch_id: int) -> None:
        """The ``foreachBatch`` function: apply the micro-batch ``df`` (a Spark DataFrame) once."""
        query = self._check_session(df, batch_id)
        kept = self._views(df.sparkSession)
        if self._replayed(int(batch_id), query):
            return
        shape = self.shape or (delta_cdf() if "_change_type" in df.columns else plain())
        self._refuse_extra_columns(df.columns, shape)
        unread = [c for c in df.columns if c in self.ignore_columns or c in shape.ignored]
        files = {}
        for out in self.outputs:
            if isinstance(out, ParquetDiffs):
                files.setdefault(self.names[self._spelling(out.views[0])], []).append(out.path)
        spelled = {name: v for v, name in self.names.items()}
        called = [out for out in self.outputs if isinstance(out, (DiffsTo, DeltaContents))]
        contents = self._contents_files(int(batch_id), kept.tasks)
        wholes = [out for out in self.outputs if isinstance(out, ParquetContents)]
        whole = {}
        for out in wholes:
            view = self._spelling(out.views[0])
            whole[str(out.path)] = (self.names[view], not out.written, view)

        def emit(frames: dict) -> None:
            for folder, (out, view, _) in contents.items():
                out.write_parts(view, kept.contents_written[folder])
            for out in {id(out): out for out, _, _ in contents.values()}.values():
                out.finish(int(batch_id))
            for name in frames:
                view = spelled[name]
                if not kept.counts[name] or not any(out.wants(view) for out in called):
                    continue
                diffs = frames[name].select(*self.no_diffs[view].schema.names)
                for out in called:
                    if not out.wants(view):
                        continue
                    if isinstance(out, DeltaContents):  # merged by Spark: the diffs stay on the executors
                        out.merge(df.sparkSession, merge_frame(diffs, out.key), view)
                    else:
                        out.fn(view, diffs.toArrow() if out.arrow else diffs, int(batch_id))

        to_write = {folder: (self.names[view], every) for folder, (_, view, every) in contents.items()}
        dead = None if self.dead_letters is None else str(self.dead_letters)
        kept.apply_changes(
            int(batch_id), df.drop(*unread), shape, {"query": query}, files, emit, to_write, dead, whole
        )
        for out in wholes:
            out.written = out.written or str(out.path) in kept.whole_written
        self.last_batch, self.query = int(batch_id), query or self.query

    def _contents_files(self, batch_id: int, tasks: int) -> dict[str, tuple[ParquetContentsSet, str, bool]]:
        """For every view a ``ParquetContentsSet`` keeps: the folder its parts of micro-batch ``batch_id`` go
        to, with the output, the view, and whether every task writes its part (else only those that
        changed)."""
        out: dict[str, tuple[ParquetContentsSet, str, bool]] = {}
        for o in self.outputs:
            if isinstance(o, ParquetContentsSet):
                o.start(batch_id)
                for view in o.views if o.views is not None else self.views:
                    view = self._spelling(view)
                    folder = str(joined(o.folder, part_folder(view, batch_id)))
                    out[folder] = (o, view, o.parts_to_write(view, tasks))
        return out

    def apply(self, changes, batch_id: int, spark=None, query: str | None = None):
        raise SqlError("a sink with shards takes micro-batches as Spark DataFrames, as foreachBatch gives them")

    def contents(self, view: str):
        raise SqlError("a sink with shards keeps each view's contents spread over the executors")

    def view_errors(self) -> dict[str, str]:
        raise SqlError("a sink with shards does not gather the views' errors on the driver")

    def checkpoint(self) -> None:
        raise SqlError("a sink with shards checkpoints every checkpoint_every micro-batches, in its tasks")

    def close(self) -> None:
        """Stop: the executors let the shards go (the state stays, for a sink to resume from)."""
        if self.kept is not None:
            self.kept.close()
        self.kept = None

    def _spelling(self, view: str) -> str:
        return next(v for v in self.views if v.lower() == view.lower())

    def _views(self, spark) -> DistributedViews:
        if self.kept is None:
            ordered = {self.names[v]: self.views[v] for v in self.order}
            kept = DistributedViews(
                spark,
                self.engine_schema,
                ordered,
                str(joined(self.state.path, "shards")),
                self.shard_count,
                self.tasks,
                self.checkpoint_every,
                self.spark or "postgres",
            )
            for v, name in self.names.items():  # the diffs' columns as Spark types them
                fields = self.no_diffs[v].schema
                kept.columns[name] = pa.schema([f for f in fields if f.name not in ("time", "diff")])
            self.columns = {t: [c.name for c in table.columns] for t, table in kept.tables.items()}
            record = kept.record()
            self.last_batch = record["last"]
            self.query = (record.get("note") or {}).get("query")
            self.kept = kept
        return self.kept

    def _last_applied(self) -> int:
        return self.last_batch
