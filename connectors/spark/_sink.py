"""The ``foreachBatch`` sink: change rows in, maintained views' diffs out, exactly once per batch id.

Per micro-batch: the change rows come over from Spark as one Arrow table, are split into source commits, and
each commit is applied to the embedded engine as one transaction (one logical time: its deletions, then its
insertions). The views' diffs, with each engine time mapped back to its source commit, go to the outputs;
then the micro-batch's change rows are recorded in the state directory. A batch id at or below the last
recorded one is a replay and changes nothing. On the first micro-batch after a (re)start the engine is
rebuilt from the state directory: the newest snapshot of the source tables, then the logged micro-batches
after it, in order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import ivm
from connectors.spark._changes import ChangeShape, delta_cdf, plain, split_commits
from connectors.spark._outputs import Output, ViewBatch
from connectors.spark._state import StateDir
from sql.errors import DataError, SqlError

__all__ = ["ViewSink", "view_sink"]

_RESERVED = ("time", "diff")


class ViewSink:
    """Maintains ``views`` over the tables of ``schema`` from a stream of change rows; call it as a
    ``foreachBatch`` function. See ``view_sink``."""

    def __init__(
        self,
        schema: str,
        views: Mapping[str, str],
        state_dir: str | os.PathLike,
        *,
        shape: ChangeShape | None = None,
        outputs: Sequence[Output] = (),
        snapshot_every: int = 100,
    ) -> None:
        self.schema = schema
        self.views = dict(views)
        self.shape = shape
        self.outputs = list(outputs)
        self.snapshot_every = snapshot_every
        # check the definition before anything is stored: a wrong view fails here, not in the stream
        db = self._fresh_engine()
        for out in self.outputs:
            for v in out.views or ():
                if v not in self.views:
                    raise SqlError(f"an output names view {v!r}, which is not among the sink's views")
        # the Arrow schema of each view's rows, for micro-batches that leave it unchanged
        self.view_schemas = {v: db.execute(f"SELECT * FROM {v}").fetch_arrow().schema for v in self.views}
        for v, s in self.view_schemas.items():
            clash = [c for c in s.names if c in _RESERVED]
            if clash:
                raise SqlError(f"view {v!r} has a column named {clash[0]!r}, which the diffs use; rename it")
        self.state = StateDir(state_dir, {"schema": schema, "views": self.views})
        self.db: ivm.Connection | None = None
        self.last_batch = -1
        self.since_snapshot = 0

    # -- Spark entry point ------------------------------------------------------------------------------
    def __call__(self, df, batch_id: int) -> None:
        """The ``foreachBatch`` function: apply the micro-batch ``df`` (a Spark DataFrame) once."""
        if int(batch_id) <= self._last_applied():
            return  # replayed: applied and written out before
        self.apply(df.toArrow(), int(batch_id), spark=df.sparkSession)

    # -- the work, on Arrow -----------------------------------------------------------------------------
    def apply(self, changes: pa.Table, batch_id: int, spark=None) -> dict[str, pa.Table] | None:
        """Apply one micro-batch of change rows; returns each view's diffs, or None for a replayed batch id.

        ``spark`` (a SparkSession) is needed by outputs that hand out Spark DataFrames."""
        last = self._last_applied()
        if batch_id <= last:
            return None
        if last >= 0 and batch_id != last + 1:
            raise SqlError(
                f"micro-batch {batch_id} follows micro-batch {last}: the state directory "
                f"{str(self.state.path)!r} does not belong to this query's checkpoint"
            )
        try:
            t0, commits = self._apply_changes(changes, batch_id)
            diffs = {v: self._diffs(v, sub, t0, commits) for v, sub in self.subscriptions.items()}
            for v, d in diffs.items():
                batch = ViewBatch(v, batch_id, d, self._contents_of(v), spark)
                for out in self.outputs:
                    if out.wants(v):
                        out.write(batch)
            self.state.record_batch(batch_id, changes)
            self.last_batch = batch_id
            self.since_snapshot += 1
            if self.snapshot_every and self.since_snapshot >= self.snapshot_every:
                self.snapshot()
        except BaseException:
            self.db = None  # the engine may hold a half-applied batch: rebuild it from the state directory
            raise
        return diffs

    def snapshot(self) -> None:
        """Store the source tables' current contents and drop the log before them (restarts replay less)."""
        db = self._engine()
        if self.last_batch < 0:
            return  # nothing applied yet: an empty state directory already says so
        tables = {t: db.execute(f"SELECT * FROM {t}").fetch_arrow() for t in db.tables}
        self.state.write_snapshot(self.last_batch, tables)
        self.since_snapshot = 0

    def contents(self, view: str) -> pa.Table:
        """The current rows of ``view`` (each as many times as the view holds it)."""
        self._engine()
        return self._contents_of(view)()

    # -- internals --------------------------------------------------------------------------------------
    def _fresh_engine(self) -> ivm.Connection:
        db = ivm.connect()
        db.execute(self.schema)
        if not db.tables:
            raise SqlError("the schema creates no tables")
        for name, sql in self.views.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        return db

    def _last_applied(self) -> int:
        if self.db is None:
            self._engine()
        return self.last_batch

    def _engine(self) -> ivm.Connection:
        """The engine, rebuilt from the state directory if this is the first use or a batch failed."""
        if self.db is not None:
            return self.db
        try:
            return self._rebuild()
        except BaseException:
            self.db = None
            raise

    def _rebuild(self) -> ivm.Connection:
        db = ivm.connect()
        db.execute(self.schema)
        self.columns = {t: [c.name for c in st.table.columns] for t, st in db.tables.items()}
        self.db = db
        snap = self.state.snapshot()
        done = -1
        if snap is not None:
            done, folder = snap
            db.execute("BEGIN")
            for t, data in StateDir.read_snapshot(folder).items():
                db.insert_arrow(t, data)
            db.execute("COMMIT")
        for name, sql in self.views.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        logged = self.state.logged(done)
        for i in logged:
            self._apply_changes(self.state.read_batch(i), i)
        self.last_batch = logged[-1] if logged else done
        self.since_snapshot = len(logged)
        self.subscriptions = {v: db.subscribe(v, snapshot=False) for v in self.views}
        return db

    def _apply_changes(self, changes: pa.Table, batch_id: int) -> tuple[int, pa.Array]:
        """Apply the commits of a micro-batch, one transaction each; the engine time of the first and the
        commit values in order (engine time ``t0 + i`` is commit ``i``)."""
        db = self._engine()
        shape = self.shape or (delta_cdf() if "_change_type" in changes.column_names else plain())
        values, commits = split_commits(changes, shape, self.columns, batch_id)
        t0 = db.time
        for c in commits:
            db.execute("BEGIN")
            try:
                for t, rows in c.deletes.items():
                    db.delete_arrow(t, rows)
                for t, rows in c.inserts.items():
                    db.insert_arrow(t, rows)
            except SqlError as err:
                raise SqlError(f"micro-batch {batch_id}, commit {c.value}: {err}") from err
            db.execute("COMMIT")
        wrong = {v: e for v, e in db.view_errors().items() if v in self.views}
        if wrong:
            v, e = next(iter(wrong.items()))
            raise DataError(f"micro-batch {batch_id}: view {v!r} cannot be computed: {e}")
        return t0, values

    def _diffs(self, view: str, sub, t0: int, commits: pa.Array) -> pa.Table:
        """The view's changes since the last call, consolidated, with ``time`` = the source commit."""
        batches = list(sub)
        if batches:
            raw = pa.Table.from_batches(batches)
        else:
            schema = self.view_schemas[view].append(pa.field("time", pa.int64()))
            raw = schema.append(pa.field("diff", pa.int64())).empty_table()
        columns = [c for c in raw.column_names if c not in _RESERVED]
        net = raw.group_by([*columns, "time"], use_threads=False).aggregate([("diff", "sum")])
        net = net.filter(pc.not_equal(net.column("diff_sum"), 0))
        order = pc.sort_indices(net, sort_keys=[("time", "ascending")])
        net = net.take(order)
        engine_times = net.column("time").to_numpy() - t0
        time = commits.take(pa.array(engine_times.astype(np.int64)))
        return pa.table(
            [*(net.column(c) for c in columns), time, net.column("diff_sum")],
            names=[*columns, "time", "diff"],
        )

    def _contents_of(self, view: str):
        def read() -> pa.Table:
            return self.db.execute(f"SELECT * FROM {view}").fetch_arrow()

        return read


def view_sink(
    schema: str,
    views: Mapping[str, str],
    state_dir: str | os.PathLike,
    *,
    shape: ChangeShape | None = None,
    outputs: Sequence[Output] = (),
    snapshot_every: int = 100,
) -> ViewSink:
    """A ``foreachBatch`` sink maintaining ``views`` (name -> SELECT) over the tables that ``schema``
    (CREATE TABLE statements) declares.

    ``shape`` says where the change rows keep operation, commit and table (``delta_cdf(...)`` or
    ``plain(...)``; by default the Delta change data feed shape if the rows have ``_change_type``, else the
    plain one). ``state_dir``, a local folder beside the query's checkpoint, holds what the engine has
    applied; every ``snapshot_every`` micro-batches the tables' contents are stored there so a restart
    replays at most that many micro-batches (0: never).
    """
    return ViewSink(schema, views, state_dir, shape=shape, outputs=outputs, snapshot_every=snapshot_every)
