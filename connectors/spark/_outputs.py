"""Where a view's changes go after each micro-batch.

Every output is written before the micro-batch is recorded as applied, and writing it again for the same
batch id leaves the same result, so a micro-batch that Spark replays after a failure between the two changes
nothing: diff files are named by batch id and replaced, contents are rewritten whole, Delta MERGEs are keyed.
A user function is called again in that case, with the same batch id and the same diffs (Spark's own
``foreachBatch`` contract), so it can recognise the repetition.

A view whose diffs are empty in a micro-batch costs nothing: no function is called, no DataFrame is built, no
file is written or rewritten for it (but the first micro-batch a process applies writes every contents file,
so that files left by an earlier query never pass for this one's).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.spark._state import joined, location, write_atomically

__all__ = [
    "Output",
    "ViewBatch",
    "DiffsTo",
    "ParquetDiffs",
    "ParquetContents",
    "DeltaContents",
    "stamped",
    "merge_statement",
]


@dataclass
class ViewBatch:
    """What one micro-batch did to one view: its diffs (view columns plus ``time`` = source commit and
    ``diff``), a way to read its whole current contents, and the Spark session if there is one."""

    view: str
    batch_id: int
    diffs: pa.Table
    contents: Callable[[], pa.Table]
    spark: object | None = None
    error: str | None = None  # why the view is in error now: its contents cannot be read whole

    def diffs_frame(self):
        """The diffs as a Spark DataFrame, converted through Arrow."""
        if self.spark is None:
            raise RuntimeError("a Spark DataFrame was asked for, but the micro-batch did not come from Spark")
        return spark_frame(self.spark, self.diffs)


def spark_frame(spark, table: pa.Table):
    """``table`` as a Spark DataFrame of the same types: a timestamp with a time zone is Spark's ``timestamp``
    (an instant), one without is ``timestamp_ntz`` (a wall time, not read in the session time zone)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table, schema=from_arrow_schema(table.schema, prefer_timestamp_ntz=True))


class Output:
    """A destination for the changes of some views. After each micro-batch (and again for a micro-batch
    that failed and is applied anew): ``start``, then ``write`` for each view it wants (also when the view's
    diffs are empty), then ``finish``; all before the micro-batch is recorded as applied."""

    views: Sequence[str] | None = None  # None: every view; names are case-insensitive, as Spark's are

    def wants(self, view: str) -> bool:
        return self.views is None or view.lower() in {v.lower() for v in self.views}

    def write(self, batch: ViewBatch) -> None:
        raise NotImplementedError

    def start(self, batch_id: int) -> None:
        """Called before the writes of micro-batch ``batch_id``."""

    def finish(self, batch_id: int) -> None:
        """Called after every ``write`` of micro-batch ``batch_id``: for what is done once per micro-batch
        (``ParquetContentsSet`` writes its manifest here)."""


class DiffsTo(Output):
    """Call ``fn(view, diffs, batch_id)`` for each view the micro-batch changed, ``diffs`` a Spark DataFrame
    of the view's columns plus ``time`` and ``diff`` (a ``pyarrow.Table`` with ``arrow=True``). A view whose
    diffs are empty (nothing changed, or changes that cancel out within the micro-batch) gets no call, so
    neither a DataFrame nor a Spark job is made for it."""

    def __init__(self, fn: Callable, views: Sequence[str] | None = None, arrow: bool = False) -> None:
        self.fn = fn
        self.views = None if views is None else list(views)
        self.arrow = arrow

    def write(self, batch: ViewBatch) -> None:
        if not batch.diffs.num_rows:
            return
        self.fn(batch.view, batch.diffs if self.arrow else batch.diffs_frame(), batch.batch_id)


class ParquetDiffs(Output):
    """Append the view's diffs to a Parquet table (a folder): one file per micro-batch that changed it,
    named by batch id, so a replayed micro-batch replaces its own file instead of adding another."""

    def __init__(self, view: str, path: str | os.PathLike) -> None:
        self.views = [view]
        self.path = location(path)

    def write(self, batch: ViewBatch) -> None:
        if batch.diffs.num_rows:
            name = f"batch-{batch.batch_id:012d}.parquet"
            write_atomically(stamped(batch.diffs, batch), joined(self.path, name))


class ParquetContents(Output):
    """Keep the view's current contents in a Parquet file, replaced whole (in one rename locally, as one
    object elsewhere) after each micro-batch that changed the view; a row appears as many times as the view
    holds it. The file's metadata names the view and the micro-batch it was written at (``ivm.batch_id``); it
    holds the view's rows from that micro-batch on until it is replaced. A process writes the file at the
    first micro-batch it applies, changed or not.

    Each file is always a whole micro-batch's contents of its view, but files of several views are replaced
    one after the other: while a micro-batch is being written, and after a crash in that moment until Spark
    replays it, some files show it and others the one before. For contents of several views that always
    belong to one micro-batch, use ``ParquetContentsSet``."""

    def __init__(self, view: str, path: str | os.PathLike) -> None:
        self.views = [view]
        self.path = location(path)
        self.written = False  # by this process: the first micro-batch writes the file even if unchanged

    def write(self, batch: ViewBatch) -> None:
        if (self.written and not batch.diffs.num_rows) or batch.error is not None:
            return  # unchanged, or in error: the file keeps the last contents computed whole
        write_atomically(stamped(batch.contents(), batch), self.path)
        self.written = True


def stamped(table: pa.Table, batch: ViewBatch) -> pa.Table:
    """``table`` with the view and the micro-batch it reflects in its schema metadata (``ivm.view``,
    ``ivm.batch_id``), so a reader of the file knows which position of the stream it shows."""
    meta = dict(table.schema.metadata or {})
    meta.update({b"ivm.view": batch.view.encode(), b"ivm.batch_id": str(batch.batch_id).encode()})
    return table.replace_schema_metadata(meta)


class DeltaContents(Output):
    """Apply the view's changes to a Delta table with MERGE on ``key`` (columns unique in the view, such as
    its GROUP BY columns): rows whose key left the view are deleted, the others inserted or updated.

    Needs the Delta Lake jars on the Spark classpath, which these machines cannot fetch: the MERGE statement
    is checked on DuckDB's MERGE (after sqlglot's translation), not on Delta, by the tests here. A keyed MERGE
    is idempotent, so a replayed micro-batch leaves the table as is.
    """

    def __init__(self, view: str, table: str, key: Sequence[str]) -> None:
        self.views = [view]
        self.table = table
        self.key = list(key)

    def write(self, batch: ViewBatch) -> None:
        d = batch.diffs
        if not d.num_rows:
            return
        columns = [c for c in d.column_names if c not in ("time", "diff")]
        upserts, deletes = merge_rows(d, self.key)
        changes = pa.concat_tables(
            [
                upserts.select(columns).append_column(
                    "_ivm_delete", pa.array(np.zeros(upserts.num_rows, bool))
                ),
                deletes.select(columns).append_column("_ivm_delete", pa.array(np.ones(deletes.num_rows, bool))),
            ]
        )
        spark = batch.spark
        if spark is None:
            raise RuntimeError("a Delta output needs the micro-batch's Spark session")
        self.merge(spark, spark_frame(spark, changes), batch.view)

    def merge(self, spark, changes, view: str) -> None:
        """MERGE ``changes`` (a DataFrame of the view's columns and ``_ivm_delete``: at most one row per key)
        into the table."""
        name = f"_ivm_changes_{view}"
        changes.createOrReplaceTempView(name)
        columns = [c for c in changes.columns if c != "_ivm_delete"]
        spark.sql(merge_statement(self.table, name, columns, self.key))
        spark.catalog.dropTempView(name)


def merge_statement(table: str, source: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """The Spark SQL MERGE of ``source`` (the view's ``columns`` and ``_ivm_delete``) into ``table`` on ``key``:
    a key marked deleted goes, any other row is inserted or replaces the row of its key (NULL keys match)."""
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in key)
    return (
        f"MERGE INTO {table} t USING {source} s ON {on} "
        "WHEN MATCHED AND s._ivm_delete THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {', '.join(f'`{c}` = s.`{c}`' for c in columns)} "
        f"WHEN NOT MATCHED AND NOT s._ivm_delete THEN INSERT ({', '.join(f'`{c}`' for c in columns)}) "
        f"VALUES ({', '.join(f's.`{c}`' for c in columns)})"
    )


def merge_frame(diffs, key: Sequence[str]):
    """``merge_rows`` computed by Spark over a DataFrame of diffs (the view's columns, ``time``, ``diff``), for
    diffs that stay on the executors: the rows present afterwards, then the keys gone, one DataFrame of the
    view's columns and ``_ivm_delete``."""
    from pyspark.sql import functions as F

    columns = [c for c in diffs.columns if c not in ("time", "diff")]
    net = diffs.groupBy(*(F.col(f"`{c}`") for c in columns)).agg(F.sum("diff").alias("_ivm_net"))
    present = net.where(F.col("_ivm_net") > 0).select(*(F.col(f"`{c}`") for c in columns)).alias("p")
    gone = net.where(F.col("_ivm_net") < 0).select(*(F.col(f"`{c}`") for c in columns)).alias("g")
    same = [F.col(f"g.`{k}`").eqNullSafe(F.col(f"p.`{k}`")) for k in key]
    gone = gone.join(present, on=functools.reduce(lambda a, b: a & b, same), how="left_anti")
    return present.withColumn("_ivm_delete", F.lit(False)).unionByName(
        gone.withColumn("_ivm_delete", F.lit(True))
    )


def merge_rows(diffs: pa.Table, key: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """From a micro-batch's diffs of a view keyed by ``key``: the rows present afterwards (net diff > 0 over
    all its commits) to upsert, and the rows of keys that are gone to delete."""
    columns = [c for c in diffs.column_names if c not in ("time", "diff")]
    net = diffs.group_by(columns, use_threads=False).aggregate([("diff", "sum")])
    present = net.filter(pc.greater(net.column("diff_sum"), 0)).select(columns)
    gone = net.filter(pc.less(net.column("diff_sum"), 0)).select(columns)
    kept = pc.is_in(_key_strings(gone, key), value_set=_key_strings(present, key))
    return present, gone.filter(pc.invert(kept))


def _key_strings(table: pa.Table, key: Sequence[str]) -> pa.Array:
    """One comparable string per row for the key columns (vectorized, NULL-safe)."""
    parts = [pc.fill_null(pc.cast(table.column(k), pa.string()), "\x00") for k in key]
    if not parts:
        return pa.nulls(table.num_rows, pa.string()).fill_null("")
    return pc.binary_join_element_wise(*parts, "\x01")
