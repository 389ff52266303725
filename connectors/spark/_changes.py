"""Change rows of one micro-batch, split into source commits of per-table deletions and insertions.

Two shapes of change rows are understood:

- the Delta change data feed: the row's columns plus ``_change_type`` (``insert``, ``update_preimage``,
  ``update_postimage``, ``delete``) and ``_commit_version``;
- a plain shape: the row's columns plus an operation column (same four words) and, optionally, a commit
  column; without one, the whole micro-batch is one commit, numbered by its batch id.

Rows name their table in a table column, or the stream is of one table given up front. A commit is applied
as its net effect on each table (its changes of one row summed), so the order of the change rows within a
commit never matters. Everything here works on whole Arrow columns: per table, one group-by over (commit, row)
and one sort by (commit, sign), cut into runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sql.errors import SqlError

__all__ = [
    "ChangeShape",
    "Commit",
    "delta_cdf",
    "plain",
    "split_commits",
    "require_control_columns",
    "require_table_columns",
    "dead_letter_rows",
    "OPERATIONS",
]

# operation word -> sign of the change (-1 deletes a row, +1 inserts one)
OPERATIONS = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


@dataclass(frozen=True)
class ChangeShape:
    """Which columns of the change rows hold the operation, the source commit and the table name.

    ``commit`` None: each micro-batch is one commit, numbered by its batch id. ``whole`` False: a commit may
    be cut across micro-batches, so the last commit of each micro-batch waits for one with a later commit.
    ``table`` set: every row
    belongs to that table and ``table_column`` is not read. ``ignored``: columns the shape carries but the
    sink does not read (Delta's ``_commit_timestamp``)."""

    operation: str
    commit: str | None
    table_column: str | None = "table"
    table: str | None = None
    ignored: tuple[str, ...] = ()
    whole: bool = True

    def control_columns(self) -> set[str]:
        """The columns that describe a change rather than hold the row."""
        names = {self.operation, self.commit, None if self.table else self.table_column}
        return {n for n in names if n}


def delta_cdf(table: str | None = None, table_column: str = "table") -> ChangeShape:
    """The Delta change data feed shape (``_change_type``, ``_commit_version``, and ``_commit_timestamp``,
    which is ignored); rows of several tables name their table in ``table_column``, or all rows belong to
    ``table``."""
    return ChangeShape(
        "_change_type", "_commit_version", None if table else table_column, table, ("_commit_timestamp",)
    )


def plain(
    operation: str = "operation",
    table_column: str = "table",
    commit: str | None = None,
    table: str | None = None,
    whole_commits: bool = True,
) -> ChangeShape:
    """The plain shape: an operation column, a table column (or one ``table``) and an optional commit column.
    ``whole_commits=False`` says the stream may cut a commit across micro-batches (a Kafka topic read by
    offsets, say): then the last commit of each micro-batch is held until a micro-batch brings a later one."""
    if not whole_commits and commit is None:
        raise SqlError("whole_commits=False needs a commit column: without one a micro-batch is one commit")
    return ChangeShape(operation, commit, None if table else table_column, table, whole=whole_commits)


@dataclass
class Commit:
    """One source commit: its value in the commit column, and the rows it deletes and inserts per table."""

    value: object
    deletes: dict[str, pa.Table]
    inserts: dict[str, pa.Table]


def split_commits(
    data: pa.Table, shape: ChangeShape, tables: dict[str, list[str]], batch_id: int
) -> tuple[pa.Array, list[Commit]]:
    """The commits of a micro-batch in commit order, and their commit values as one Arrow array.

    ``tables`` maps each source table to its column names. Raises ``SqlError`` naming the column, value or
    table that does not fit."""
    require_control_columns(data.column_names, shape)
    n = data.num_rows
    if n == 0:
        return pa.array([], pa.int64()), []

    sign = _signs(data.column(shape.operation), shape.operation)
    if shape.table is not None:
        if shape.table not in tables:
            raise SqlError(f"table {shape.table!r} does not exist")
        table_names = [shape.table]
        codes = np.zeros(n, dtype=np.int32)
    else:
        table_names, codes = _table_codes(data.column(shape.table_column), shape.table_column, tables)
    require_table_columns(data.column_names, tables, table_names)

    if shape.commit is None:
        commit_col = pa.chunked_array([pa.array(np.full(n, batch_id, dtype=np.int64))])
    else:
        commit_col = data.column(shape.commit)
        if commit_col.null_count:
            raise SqlError(f"change rows have a NULL in the commit column {shape.commit!r}")
    values = pc.unique(commit_col.combine_chunks()).sort()
    commits = [Commit(values[i], {}, {}) for i in range(len(values))]
    for code, t in enumerate(table_names):
        mine = np.flatnonzero(codes == code) if len(table_names) > 1 else None
        rows = (data if mine is None else data.take(mine)).select(tables[t])
        signs = sign if mine is None else sign[mine]
        cs = commit_col if mine is None else commit_col.take(mine)
        for ci, part, s in _net_changes(rows, cs, signs, values):
            (commits[ci].inserts if s > 0 else commits[ci].deletes)[t] = part
    return values, commits


def require_control_columns(names: list[str], shape: ChangeShape) -> None:
    """Refuse change rows (of columns ``names``) that lack a column the shape reads."""
    for col in sorted(shape.control_columns()):
        if col not in names:
            raise SqlError(f"change rows lack the column {col!r} (columns: {', '.join(names)})")


def require_table_columns(names: list[str], tables: dict[str, list[str]], table_names: list[str]) -> None:
    """Refuse change rows (of columns ``names``) of the tables ``table_names`` that lack a column of one."""
    for t in table_names:
        missing = [c for c in tables[t] if c not in names]
        if missing:
            raise SqlError(f"change rows of table {t!r} lack its column(s) {', '.join(map(repr, missing))}")


def _net_changes(rows: pa.Table, commit: pa.ChunkedArray, sign: np.ndarray, values: pa.Array):
    """A table's changes as each commit's net effect: per commit, the rows it deletes and those it inserts,
    each as many times as its insertions and deletions of the very same row differ. The order of a commit's
    changes then does not matter: an insert and a later update of one key, or a post-image before its
    pre-image, come out as the net deletion and insertion that any valid order of them has."""
    names = [f"c{i}" for i in range(rows.num_columns)]
    keyed = pa.table([*rows.columns, commit, pa.array(sign.astype(np.int64))], names=[*names, "_c", "_s"])
    net = keyed.group_by(["_c", *names], use_threads=False).aggregate([("_s", "sum")])
    counts = net.column("_s_sum").to_numpy()
    keep = np.flatnonzero(counts != 0)
    commit_of = pc.index_in(net.column("_c"), value_set=values).to_numpy()
    keep = keep[np.argsort(commit_of[keep] * 2 + (counts[keep] > 0), kind="stable")]
    which, positive = commit_of[keep], counts[keep] > 0
    runs = np.flatnonzero(np.diff(np.append(which, -1) * 2 + np.append(positive, 0)) != 0) + 1
    starts = np.append(0, runs[:-1])
    renamed = net.select(names).rename_columns(rows.column_names)
    for a, b in zip(starts, runs, strict=True):
        idx = keep[a:b]
        part = renamed.take(pa.array(np.repeat(idx, np.abs(counts[idx]))))
        yield int(which[a]), part, 1 if positive[a] else -1


def _signs(op: pa.ChunkedArray, column: str) -> np.ndarray:
    """+1 / -1 per row from the operation words; unknown words or NULLs are an error naming them."""
    op = op.combine_chunks()
    if not (pa.types.is_string(op.type) or pa.types.is_large_string(op.type)):
        raise SqlError(f"the operation column {column!r} must hold strings, not {op.type}")
    sign = np.zeros(len(op), dtype=np.int8)
    for word, s in OPERATIONS.items():
        sign[pc.equal(op, word).fill_null(False).to_numpy(zero_copy_only=False)] = s
    bad = np.flatnonzero(sign == 0)
    if len(bad):
        value = op[int(bad[0])].as_py()
        raise SqlError(
            f"unknown operation {value!r} in column {column!r} (expected one of {', '.join(OPERATIONS)})"
        )
    return sign


def _table_codes(
    col: pa.ChunkedArray, column: str, tables: dict[str, list[str]]
) -> tuple[list[str], np.ndarray]:
    """The distinct table names of the rows and each row's index into them."""
    if col.null_count:
        raise SqlError(f"change rows have a NULL in the table column {column!r}")
    enc = pc.dictionary_encode(col.combine_chunks().cast(pa.string()))
    names = enc.dictionary.to_pylist()  # one entry per distinct table, not per row
    unknown = [t for t in names if t not in tables]
    if unknown:
        raise SqlError(f"change rows name table {unknown[0]!r}, which does not exist")
    return names, enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)


def dead_letter_rows(changes: pa.Table, shape: ChangeShape, dead: list, batch_id: int) -> pa.Table:
    """The change rows of the commits ``dead`` holds (commit value, error) that could not be applied, each
    with the micro-batch (``_ivm_batch_id``) and why (``_ivm_error``), as dead letters keep them."""
    parts = []
    for value, error in dead:
        rows = changes.filter(pc.equal(changes.column(shape.commit), value)) if shape.commit else changes
        n = rows.num_rows
        rows = rows.append_column("_ivm_batch_id", pa.array(np.full(n, batch_id, np.int64)))
        parts.append(rows.append_column("_ivm_error", pa.array([str(error)] * n, pa.string())))
    return pa.concat_tables(parts, promote_options="permissive")
