"""TPC-H as a stream of change rows for a Spark file source, for the tests and the benchmark.

The initial load is commit 0 (or ``p`` commits ``0 .. p - 1``, one per file, when it is written in ``p``
parts); refresh batch ``i`` (``tpch.data.refresh_stream``) is two commits, RF1's insertions (``p + 2i``) then
RF2's deletions (``p + 2i + 1``). Rows are in the Delta change data feed shape with a
``table`` column: every table's columns side by side (NULL where a row is of another table), plus ``table``,
``_change_type`` and ``_commit_version``. Alongside, the tables' accumulated contents, for recomputing the
queries after each micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from connectors.spark._state import write_atomically
from tpch.data import TABLES, RefreshStream
from tpch.queries import query

__all__ = ["ChangeFiles", "change_schema", "change_rows", "spark_query", "KEYS"]

KEYS = {"orders": "o_orderkey", "lineitem": "l_orderkey"}


def change_schema(tables: dict[str, pa.Table]) -> pa.Schema:
    """One schema for the change rows of all tables: their columns (nullable) and the control columns."""
    fields = [pa.field(f.name, f.type) for t in TABLES for f in tables[t].schema]
    fields += [pa.field("table", pa.string()), pa.field("_change_type", pa.string())]
    return pa.schema([*fields, pa.field("_commit_version", pa.int64())])


def change_rows(pieces: list[tuple[str, str, int, pa.Table]], schema: pa.Schema) -> pa.Table:
    """Change rows in ``schema`` from (table, change type, commit, rows) pieces."""
    parts = []
    for table, change, commit, rows in pieces:
        n = rows.num_rows
        control = {
            "table": pa.repeat(pa.scalar(table), n),
            "_change_type": pa.repeat(pa.scalar(change), n),
            "_commit_version": pa.repeat(pa.scalar(commit, pa.int64()), n),
        }
        arrays = [
            control[f.name]
            if f.name in control
            else rows.column(f.name)
            if f.name in rows.column_names
            else pa.nulls(n, f.type)
            for f in schema
        ]
        parts.append(pa.Table.from_arrays(arrays, schema=schema))
    return pa.concat_tables(parts)


def spark_query(name: str) -> str:
    """TPC-H query ``name`` in Spark's dialect, its averages taken over DOUBLE as ivm computes them (Spark's
    AVG of a DECIMAL rounds to 6 decimal places, which a float comparison to 1e-9 would not accept)."""

    def to_double(node):
        if isinstance(node, exp.Avg):
            return exp.Avg(this=exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE")))
        return node

    return sqlglot.parse_one(query(name), read="postgres").transform(to_double).sql(dialect="spark")


@dataclass
class ChangeFiles:
    """Writes the stream's micro-batches as Parquet files into ``directory`` (one file, one micro-batch with
    ``maxFilesPerTrigger`` 1) and keeps the tables' accumulated contents."""

    stream: RefreshStream
    directory: Path

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.schema = change_schema(self.stream.initial)
        self.tables = dict(self.stream.initial)
        self.written = 0
        self.parts = 1

    def initial(self, parts: int = 1) -> pa.Table:
        """Write the initial load, in ``parts`` files (each a slice of every table, a commit of its own): a
        micro-batch of each, to bound what one holds. Returns the last part's rows."""
        self.parts = parts
        for k in range(parts):
            pieces = [(t, "insert", k, _part(self.stream.initial[t], k, parts)) for t in TABLES]
            rows = self._write(change_rows(pieces, self.schema))
        return rows

    def refresh(self, i: int) -> pa.Table:
        """Write refresh batch ``i`` and update the accumulated tables."""
        batch = self.stream.batches[i]
        first = self.parts + 2 * i
        pieces = [(t, "insert", first, batch[t][0]) for t in ("orders", "lineitem")]
        pieces += [(t, "delete", first + 1, batch[t][1]) for t in ("lineitem", "orders")]
        for t, key in KEYS.items():
            inserted, deleted = batch[t]
            grown = pa.concat_tables([self.tables[t], inserted.cast(self.tables[t].schema)])
            gone = pc.is_in(grown.column(key), value_set=deleted.column(key).combine_chunks())
            self.tables[t] = grown.filter(pc.invert(gone))
        return self._write(change_rows(pieces, self.schema))

    def _write(self, rows: pa.Table) -> pa.Table:
        write_atomically(rows, self.directory / f"changes-{self.written:06d}.parquet")
        self.written += 1
        return rows


def _part(table: pa.Table, k: int, parts: int) -> pa.Table:
    """Slice ``k`` of ``parts`` of ``table``'s rows."""
    start, stop = table.num_rows * k // parts, table.num_rows * (k + 1) // parts
    return table.slice(start, stop - start)
