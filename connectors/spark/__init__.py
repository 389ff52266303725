"""Spark Structured Streaming sink: views maintained over a stream of change rows.

    sink = view_sink(SCHEMA, {"by_cust": "SELECT ..."}, "/data/ckpt.ivm",
                     outputs=[DiffsTo(handle), ParquetContents("by_cust", "/data/by_cust.parquet")])
    changes.writeStream.foreachBatch(sink).option("checkpointLocation", "/data/ckpt").start()

Change rows come in the Delta change data feed shape or a plain shape (``delta_cdf``, ``plain``); each source
commit is one logical time; a replayed batch id changes nothing; ``state_dir`` keeps the engine as an ivm
database, opened again after a restart. Data moves between Spark and the engine as Arrow tables.
"""

from connectors.spark._changes import ChangeShape, delta_cdf, plain
from connectors.spark._contents import ParquetContentsSet, read_contents
from connectors.spark._outputs import DeltaContents, DiffsTo, Output, ParquetContents, ParquetDiffs, ViewBatch
from connectors.spark._schema import table_sql
from connectors.spark._sink import ViewSink, view_sink

__all__ = [
    "view_sink",
    "ViewSink",
    "table_sql",
    "ChangeShape",
    "delta_cdf",
    "plain",
    "Output",
    "ViewBatch",
    "DiffsTo",
    "ParquetDiffs",
    "ParquetContents",
    "ParquetContentsSet",
    "read_contents",
    "DeltaContents",
]
