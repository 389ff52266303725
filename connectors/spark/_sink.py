"""The ``foreachBatch`` sink: change rows in, maintained views' diffs out, exactly once per batch id.

Per micro-batch: the change rows come over from Spark as one Arrow table, are split into source commits, and
each commit is applied to the engine as one transaction (one logical time: its deletions, then its
insertions). The views' diffs, with each engine time mapped back to its source commit, go to the outputs (a
view the micro-batch left unchanged costs a look at its subscription and nothing more);
then the micro-batch is recorded: the engine's database in the state directory logs its commits, as one
commit group carrying the batch id. The last batch id recorded again is a replay and changes nothing; any
other but the next is refused. After a restart, or a micro-batch that failed, the engine is opened from the
state directory: its checkpoint mapped back in and the log after it replayed, nothing recomputed.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import ivm
from connectors.spark._changes import ChangeShape, dead_letter_rows, delta_cdf, plain, split_commits
from connectors.spark._outputs import Output, ViewBatch
from connectors.spark._state import (
    RECORD,
    StateDir,
    joined,
    location,
    read_bytes,
    remove,
    write_atomically,
    write_bytes_atomically,
)
from connectors.spark._views import creation_order, engine_names
from sql.errors import SqlError
from sql.spark import Spark, schema_types

__all__ = ["ViewSink", "view_sink"]

log = logging.getLogger("ivm.spark")

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
        checkpoint_bytes: int = 64 << 20,
        ignore_columns: Sequence[str] = (),
        dead_letters: str | os.PathLike | None = None,
        dialect: str = "spark",
        time_zone: str | None = None,
    ) -> None:
        if dialect not in ("spark", "postgres"):
            raise SqlError(f"dialect {dialect!r} is not one of 'spark', 'postgres'")
        self.schema = schema
        self.dead_letters = None if dead_letters is None else location(dead_letters)
        self.held: pa.Table | None = None  # the change rows of a commit held for the next micro-batch
        self.held_file: str | None = None  # the file in the state directory that keeps them
        # the engine's tables: TIMESTAMP WITH TIME ZONE (Spark's timestamp) held as a TIMESTAMP in UTC
        self.engine_schema, table_types = schema_types(schema)
        self.spark = Spark(time_zone or _session_time_zone(), table_types) if dialect == "spark" else None
        self.views = dict(views)
        self.names = engine_names(self.views)  # the user's spelling -> the name inside the engine
        self.order = creation_order(self.views)  # each view after those it reads
        self.shape = shape
        self.outputs = list(outputs)
        self.checkpoint_bytes = checkpoint_bytes
        self.ignore_columns = frozenset(ignore_columns)
        # check the definition before anything is stored: a wrong view fails here, not in the stream
        db = self._fresh_engine()
        folded = {v.lower() for v in self.views}
        for out in self.outputs:
            for v in out.views or ():
                if v.lower() not in folded:
                    raise SqlError(f"an output names view {v!r}, which is not among the sink's views")
        # each view's diffs when a micro-batch leaves it unchanged: no rows, its columns, ``time`` and ``diff``
        self.no_diffs = {}
        for v, name in self.names.items():
            schema_ = self._spark_schema(v, db.execute(f"SELECT * FROM {name}").fetch_arrow().schema)
            clash = [c for c in schema_.names if c in _RESERVED]
            if clash:
                raise SqlError(f"view {v!r} has a column named {clash[0]!r}, which the diffs use; rename it")
            extra = [pa.field("time", pa.int64()), pa.field("diff", pa.int64())]
            self.no_diffs[v] = pa.schema([*schema_, *extra]).empty_table()
        definition = {"schema": schema, "views": self.views, **self._layout()}
        if self.spark is not None:  # the views' meaning depends on the dialect and the session time zone
            definition.update(dialect="spark", time_zone=self.spark.time_zone)
        self.state = StateDir(state_dir, definition)
        self.db: ivm.Connection | None = None
        self.last_batch = -1
        self.query: str | None = None  # the streaming query the state serves, once known

    def _layout(self) -> dict:
        """What of the state's layout its definition records besides the schema and views."""
        return {}

    # -- Spark entry point ------------------------------------------------------------------------------
    def __call__(self, df, batch_id: int) -> None:
        """The ``foreachBatch`` function: apply the micro-batch ``df`` (a Spark DataFrame) once."""
        query = self._check_session(df, batch_id)
        if self._replayed(int(batch_id), query):
            return  # applied and written out before
        self.apply(df.toArrow(), int(batch_id), spark=df.sparkSession, query=query)

    def _check_session(self, df, batch_id: int) -> str | None:
        """Refuse a micro-batch from a session whose settings the views were not made for; the streaming
        query's id."""
        query = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        zone = df.sparkSession.conf.get("spark.sql.session.timeZone")
        if self.spark is not None and zone != self.spark.time_zone:
            raise SqlError(
                f"the views were made for session time zone {self.spark.time_zone!r}, and micro-batch "
                f"{batch_id} comes from a session in {zone!r}: pass view_sink(..., time_zone={zone!r}) (with a "
                "new state directory and checkpoint), or set spark.sql.session.timeZone back"
            )
        if self.spark is not None and df.sparkSession.conf.get("spark.sql.ansi.enabled") == "false":
            raise SqlError(
                "the views follow Spark SQL with spark.sql.ansi.enabled=true (Spark 4's default: an error "
                "where a division by zero or an overflow would give NULL); the micro-batch's session has it off"
            )
        return query

    # -- the work, on Arrow -----------------------------------------------------------------------------
    def apply(
        self, changes: pa.Table, batch_id: int, spark=None, query: str | None = None
    ) -> dict[str, pa.Table] | None:
        """Apply one micro-batch of change rows; returns each view's diffs, or None for a replayed batch id.

        ``spark`` (a SparkSession) is needed by outputs that hand out Spark DataFrames; ``query`` is the
        streaming query's id (kept in its checkpoint): a state directory serves the query it began with."""
        if self._replayed(batch_id, query):
            return None
        db = self._engine()
        before = db.positions.get(RECORD)
        try:
            # one commit group: the micro-batch's commits reach the state directory together, after its outputs
            with db.commit_group():
                db.positions[RECORD] = {"batch": batch_id, "query": query or self.query}
                t0, commits, held = self._apply_changes(changes, batch_id)
                if held is not None:  # written before the commit that records it
                    write_bytes_atomically(_ipc(held), joined(self.state.path, _held_file(batch_id)))
                    db.positions[RECORD] = {**db.positions[RECORD], "held": _held_file(batch_id)}
                if not len(commits) or held is not None:
                    db.execute("BEGIN")
                    db.execute("COMMIT")  # an empty commit records the batch id (and the held commit)
                diffs = {v: self._diffs(v, sub, t0, commits) for v, sub in self.subscriptions.items()}
                self._write_outputs(diffs, batch_id, spark)
        except BaseException:
            # the engine may hold part of the micro-batch: open the state directory again, as it was before it
            db.positions[RECORD] = before
            self._discard()
            raise
        self.last_batch, self.query, previous, self.held = batch_id, query or self.query, self.held_file, held
        self.held_file = db.positions[RECORD].get("held")
        if previous is not None and previous != self.held_file:
            remove(joined(self.state.path, previous))  # the state of the micro-batch before no longer needs it
        return diffs

    def view_errors(self) -> dict[str, str]:
        """The views in error now (a row they read has a value they cannot compute), with why: their diffs
        leave out that row's part, their contents outputs keep the last contents computed whole, and they
        recover when the row changes or leaves."""
        db = self._engine()
        folded = {name: v for v, name in self.names.items()}
        return {folded[v]: e for v, e in db.view_errors().items() if v in folded}

    def checkpoint(self) -> None:
        """Write a checkpoint of the engine's state now, so that a restart replays no log."""
        db = self._engine()
        with db.pool.active():
            db.store.checkpoint(db)

    def close(self) -> None:
        """Stop cleanly: a last checkpoint, then the state directory is free for another process."""
        if self.db is not None:
            self.db.close()
            self.db = None

    def contents(self, view: str) -> pa.Table:
        """The current rows of ``view`` (any case; each row as many times as the view holds it)."""
        self._engine()
        spelling = {v.lower(): v for v in self.views}
        if view.lower() not in spelling:
            raise SqlError(f"view {view!r} is not among the sink's views")
        return self._contents_of(spelling[view.lower()])()

    # -- internals --------------------------------------------------------------------------------------
    def _fresh_engine(self) -> ivm.Connection:
        db = ivm.connect()
        db.execute(self.engine_schema)
        if not db.tables:
            raise SqlError("the schema creates no tables")
        self._create_views(db)
        return db

    def _create_views(self, db: ivm.Connection) -> None:
        """Create the views, each after those it reads; an error names the view (its position: in the view's
        SELECT)."""
        for view in self.order:
            head = f"CREATE MATERIALIZED VIEW {self.names[view]} AS "
            try:
                db.execute(head + self.views[view], dialect=self.spark or "postgres")
            except SqlError as err:
                line, col = err.line, err.col
                if line == 1 and col is not None:
                    line, col = (1, col - len(head)) if col > len(head) else (None, None)
                raise type(err)(f"view {view!r}: {err.message}", line, col) from err

    def _spark_schema(self, view: str, schema: pa.Schema) -> pa.Schema:
        """The view's columns as Spark SQL types them: a TIMESTAMP that holds instants as ``timestamp[us,
        tz=UTC]`` (Spark's ``timestamp``; a wall time stays ``timestamp_ntz``), a SUM of decimals as wide as
        Spark makes it (the values are the same)."""
        if self.spark is None:
            return schema
        types = self.spark.views.get(self.names[view], {})
        fields = []
        for f in schema:
            t = types.get(f.name)
            if t is not None and t.kind == "timestamp" and pa.types.is_timestamp(f.type):
                f = f.with_type(pa.timestamp("us", tz="UTC"))
            elif t is not None and t.kind == "decimal" and pa.types.is_decimal(f.type) and t.s == f.type.scale:
                f = f.with_type(pa.decimal128(t.p, t.s))
            fields.append(f)
        return pa.schema(fields, metadata=schema.metadata)

    def _write_outputs(self, diffs: dict[str, pa.Table], batch_id: int, spark) -> None:
        """Hand each view's diffs to the outputs that want it (they skip a view whose diffs are empty)."""
        for out in self.outputs:
            out.start(batch_id)
        errors = self.view_errors()
        for v, e in errors.items():
            log.warning(
                "micro-batch %d: view %r is in error until the row at fault changes: %s", batch_id, v, e
            )
        for v, d in diffs.items():
            batch = ViewBatch(v, batch_id, d, self._contents_of(v), spark, errors.get(v))
            for out in self.outputs:
                if out.wants(v):
                    out.write(batch)
        for out in self.outputs:
            out.finish(batch_id)

    def _replayed(self, batch_id: int, query: str | None = None) -> bool:
        """Whether ``batch_id`` is the last micro-batch applied again (Spark replays the last one whose
        commit it did not record); any batch id but that one and the next is refused, and so is a streaming
        query other than the one the state directory served."""
        last = self._last_applied()
        where = f"the state directory {str(self.state.path)!r}"
        if query and self.query and query != self.query:
            raise SqlError(
                f"{where} holds the state of streaming query {self.query}, and micro-batch {batch_id} comes "
                f"from query {query}: each query (each checkpoint location) needs a state directory of its own"
            )
        if batch_id in (last, last + 1):
            return batch_id == last
        if last < 0:
            raise SqlError(
                f"micro-batch {batch_id} arrived at an empty state: a query starts at micro-batch 0, so "
                f"{where} is not the one of this query's checkpoint (was it deleted or replaced?)"
            )
        if batch_id < last:
            raise SqlError(
                f"micro-batch {batch_id} arrived after micro-batch {last} was applied, and Spark replays only "
                f"the last one: {where} does not belong to this query's checkpoint (a new checkpoint with an "
                "old state directory, or two queries sharing one)"
            )
        raise SqlError(
            f"micro-batch {batch_id} follows micro-batch {last}, and those between were never applied: {where} "
            "does not belong to this query's checkpoint"
        )

    def _last_applied(self) -> int:
        self._engine()
        return self.last_batch

    def _engine(self) -> ivm.Connection:
        """The engine: the state directory's database, opened on first use and after a failed micro-batch."""
        if self.db is not None:
            return self.db
        db = ivm.connect(self.state.database, checkpoint_bytes=self.checkpoint_bytes)
        try:
            if not db.tables:
                with db.commit_group():  # the tables and views are there whole, or not at all
                    db.execute(self.engine_schema)
                    self._create_views(db)
            self.columns = {t: [c.name for c in st.table.columns] for t, st in db.tables.items()}
            record = db.positions.get(RECORD) or {}
            self.last_batch, self.query = int(record.get("batch", -1)), record.get("query")
            self.held_file = record.get("held")
            self.held = None
            if self.held_file is not None:
                self.held = pa.ipc.open_stream(read_bytes(joined(self.state.path, self.held_file))).read_all()
            self.subscriptions = {v: db.subscribe(name, snapshot=False) for v, name in self.names.items()}
        except BaseException:
            db.close()
            raise
        self.db = db
        return db

    def _discard(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.close()

    def _apply_changes(self, changes: pa.Table, batch_id: int) -> tuple[int, pa.Array, pa.Table | None]:
        """Apply the commits of a micro-batch, one transaction each, after the commit held from the one before;
        the engine time of the first, the values of the commits applied in order (engine time ``t0 + i`` is
        commit ``i``), and the change rows of a commit held for the next micro-batch.

        The last commit is held when the shape says commits may be cut across micro-batches, and when it
        cannot be applied (its other part may come next, such as a pre-image after its post-image). Another
        commit that cannot be applied fails the micro-batch naming batch, commit, table and row, or with
        ``dead_letters`` goes there and the rest proceeds."""
        db = self._engine()
        shape = self.shape or (delta_cdf() if "_change_type" in changes.column_names else plain())
        self._refuse_extra_columns(changes.column_names, shape)
        if self.held is not None:
            changes = pa.concat_tables([self.held, changes], promote_options="permissive")
        values, commits = split_commits(changes, shape, self.columns, batch_id)
        keep = None
        if shape.commit is not None and not shape.whole and commits:
            keep = commits.pop()
        t0, applied, dead = db.time, [], []
        for i, c in enumerate(commits):
            error = self._apply_commit(c)
            if error is None:
                applied.append(i)
            elif i == len(commits) - 1 and shape.commit is not None and keep is None:
                log.warning(
                    "micro-batch %d: commit %s is held for the next micro-batch: %s", batch_id, c.value, error
                )
                keep = c
            elif self.dead_letters is not None:
                dead.append((c, error))
            else:
                raise type(error)(f"micro-batch {batch_id}, commit {c.value}, {error.message}") from error
        if dead:
            self._write_dead_letters(changes, shape, dead, batch_id)
        held = None
        if keep is not None:
            held = changes.filter(pc.equal(changes.column(shape.commit), keep.value))
        return t0, values.take(pa.array(applied, pa.int64())), held

    def _apply_commit(self, c) -> SqlError | None:
        """Apply one commit as one transaction; the error (naming its table and row) if it cannot be."""
        db = self.db
        db.execute("BEGIN")
        for kind, changes in (("deleted", c.deletes), ("inserted", c.inserts)):
            for t, rows in changes.items():
                try:
                    (db.delete_arrow if kind == "deleted" else db.insert_arrow)(t, rows)
                except SqlError as err:
                    db.rollback()
                    row = getattr(err, "row", None)
                    where = f"table {t!r}"
                    if row is not None:
                        where += f", row {_key_text(db, t, rows, row)} {kind}"
                    return type(err)(f"{where}: {err.message}")
        db.execute("COMMIT")
        return None

    def _write_dead_letters(self, changes: pa.Table, shape: ChangeShape, dead: list, batch_id: int) -> None:
        """The change rows of the commits that could not be applied, with why, as one Parquet file per
        micro-batch (named by its id, so a replay replaces it)."""
        table = dead_letter_rows(changes, shape, [(c.value, error) for c, error in dead], batch_id)
        write_atomically(table, joined(self.dead_letters, f"batch-{batch_id:012d}.parquet"))

    def _refuse_extra_columns(self, names: Sequence[str], shape: ChangeShape) -> None:
        """Refuse change rows carrying a column that is neither a table's column, nor one of the shape's
        control or ignored columns, nor in ``ignore_columns``: it would be dropped without a word."""
        if shape.table is not None and shape.table not in self.columns:
            return  # split_commits names the unknown table
        tables = [shape.table] if shape.table is not None else list(self.columns)
        known = {c for t in tables for c in self.columns[t]}
        known |= shape.control_columns() | set(shape.ignored) | self.ignore_columns
        extra = [c for c in names if c not in known]
        if extra:
            raise SqlError(
                f"change rows carry column(s) {', '.join(map(repr, extra))}, which no table of the schema has "
                "and the change shape does not use: declare them in a table, drop them from the stream "
                "(DataFrame.drop), or name them in view_sink(..., ignore_columns=[...]) to have them ignored"
            )

    def _diffs(self, view: str, sub, t0: int, commits: pa.Array) -> pa.Table:
        """The view's changes since the last call, consolidated, with ``time`` = the source commit."""
        batches = [b for b in sub if b.num_rows]
        if not batches:
            return self.no_diffs[view]  # unchanged: nothing to consolidate
        raw = pa.Table.from_batches(batches)
        columns = [c for c in raw.column_names if c not in _RESERVED]
        net = raw.group_by([*columns, "time"], use_threads=False).aggregate([("diff", "sum")])
        net = net.filter(pc.not_equal(net.column("diff_sum"), 0))
        order = pc.sort_indices(net, sort_keys=[("time", "ascending")])
        net = net.take(order)
        engine_times = net.column("time").to_numpy() - t0
        time = commits.take(pa.array(engine_times.astype(np.int64)))
        out = pa.table(
            [*(net.column(c) for c in columns), time, net.column("diff_sum")],
            names=[*columns, "time", "diff"],
        )
        return out.cast(self.no_diffs[view].schema)

    def _contents_of(self, view: str):
        name = self.names[view]

        def read() -> pa.Table:
            table = self.db.execute(f"SELECT * FROM {name}").fetch_arrow()
            return table.cast(self._spark_schema(view, table.schema))

        return read


def _held_file(batch_id: int) -> str:
    return f"held-{batch_id:012d}.arrow"


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _key_text(db: ivm.Connection, table: str, rows: pa.Table, row: int) -> str:
    """Row ``row`` of ``rows`` by its table's key (the whole row for a table without one): ``(k=1, ...)``."""
    st = db.tables[table]
    key = [st.table.columns[p].name for p in st.table.primary_key] or rows.column_names
    values = rows.slice(row, 1).select(key).to_pylist()[0]
    return "(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")"


def view_sink(
    schema: str,
    views: Mapping[str, str],
    state_dir: str | os.PathLike,
    *,
    shape: ChangeShape | None = None,
    outputs: Sequence[Output] = (),
    checkpoint_bytes: int = 64 << 20,
    ignore_columns: Sequence[str] = (),
    dead_letters: str | os.PathLike | None = None,
    dialect: str = "spark",
    time_zone: str | None = None,
    shards: int | None = None,
    tasks: int | None = None,
    checkpoint_every: int = 10,
) -> ViewSink:
    """A ``foreachBatch`` sink maintaining ``views`` (name -> SELECT) over the tables that ``schema``
    (CREATE TABLE statements) declares.

    View names are case-insensitive, as Spark's are (two equal but for case are refused), and outputs, diffs
    and ``contents()`` use the spelling given here; a view may read views given after it (a cycle is refused).

    ``shape`` says where the change rows keep operation, commit and table (``delta_cdf(...)`` or
    ``plain(...)``; by default the Delta change data feed shape if the rows have ``_change_type``, else the
    plain one). ``state_dir``, a folder beside the query's checkpoint (one per query; local, or any
    ``pyarrow.fs`` URI), holds the engine's tables and views as an ivm database: each micro-batch is logged
    there after its outputs were written, and a checkpoint of the arrangements is taken whenever the log passes
    ``checkpoint_bytes``, so that a restart maps the state back in and replays only the log after it.

    Change rows may carry only the tables' columns and the shape's own (``delta_cdf`` also knows Delta's
    ``_commit_timestamp``); any other column is refused with an error naming it, unless listed in
    ``ignore_columns``.

    A commit that cannot be applied (a row deleted that is not there, a value out of its column's range)
    fails the micro-batch with an error naming batch, commit, table and row; with ``dead_letters`` (a folder,
    local or a URI) its change rows go there instead, with the error, one Parquet file per micro-batch, and
    the rest proceeds. A view that cannot compute a value is in error (``ViewSink.view_errors``) until the row
    at fault changes or leaves; the stream goes on.

    The views are Spark SQL (``dialect="spark"``): Spark's division, NULL ordering, decimal result types and
    case-insensitive names, and ``timestamp`` columns (declared ``TIMESTAMP WITH TIME ZONE`` in ``schema``)
    read in the session time zone ``time_zone`` (by default the active Spark session's, else UTC; a
    micro-batch from a session in another time zone is refused). ``dialect="postgres"`` reads them as the
    embedded database does, as PostgreSQL in UTC.

    With ``shards``, Spark is the engine: every view is kept in that many shards by key, run by ``tasks`` tasks
    of one barrier stage per micro-batch (at most the cluster's cores; by default its default parallelism: with
    fewer, Spark may place a task on another executor from one micro-batch to the next, which then loads its
    shards afresh), and the change rows never come to the driver. Each shard checkpoints its state under
    ``state_dir`` every ``checkpoint_every`` micro-batches; a restart loads the newest and replays the
    micro-batches after it. The outputs are ``DiffsTo``, ``ParquetDiffs`` (written by the tasks, a file per
    task), ``ParquetContents`` (written whole by one task, to which the others send their parts when the view
    changed), ``DeltaContents`` (the MERGE computed by Spark from the diffs, which stay on the executors) and
    ``ParquetContentsSet`` (each view's contents in parts written by the tasks); ``dead_letters`` get a file per
    task and micro-batch with refused commits; with ``whole_commits=False`` each task keeps its rows of the last
    commit for the next micro-batch; ``checkpoint_bytes`` does not apply. See docs/design/sharding.md.
    """
    if shards is not None:
        from connectors.spark._sharded import ShardedSink

        return ShardedSink(
            schema,
            views,
            state_dir,
            shards=shards,
            tasks=tasks,
            checkpoint_every=checkpoint_every,
            shape=shape,
            outputs=outputs,
            ignore_columns=ignore_columns,
            dead_letters=dead_letters,
            dialect=dialect,
            time_zone=time_zone,
        )
    return ViewSink(
        schema,
        views,
        state_dir,
        shape=shape,
        outputs=outputs,
        checkpoint_bytes=checkpoint_bytes,
        ignore_columns=ignore_columns,
        dead_letters=dead_letters,
        dialect=dialect,
        time_zone=time_zone,
    )


def _session_time_zone() -> str:
    """The active Spark session's time zone, or UTC without one (pyspark is not imported for it)."""
    pyspark_sql = sys.modules.get("pyspark.sql")
    session = pyspark_sql.SparkSession.getActiveSession() if pyspark_sql is not None else None
    return session.conf.get("spark.sql.session.timeZone") if session is not None else "UTC"
