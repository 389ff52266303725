"""Turning one transaction's decoded changes of one source table into whole-row deletes and inserts for the
engine, column-wise.

A table with a primary key is followed key by key: every change sets a key's row (insert, update) or removes
it (delete; the old key of an update that changed its key). Within a transaction only the last event of each
key matters; the row the key had before comes from the engine's primary-key arrangement
(``Connection.lookup_arrow``), which is how REPLICA IDENTITY DEFAULT works, where deletes carry the key only.
A table without a primary key needs REPLICA IDENTITY FULL: every old tuple is whole, so the change is the
multiset sum of +new and -old rows, in any order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.postgres._catalog import SourceTable
from connectors.postgres._pgoutput import RelationChanges
from connectors.postgres._types import text_to_arrow

__all__ = ["TableFeed", "consolidate_rows", "expand"]


class TableFeed:
    """How the changes of one source table reach its engine table."""

    def __init__(self, table: SourceTable) -> None:
        self.table = table
        self.names = [c[0] for c in table.columns]
        self.types = [c[1] for c in table.columns]
        self.key = list(table.primary_key)
        self.full_identity = table.replica_identity == "f"

    def to_arrow(self, cols: list[list]) -> pa.Table:
        """Raw text values, column by column, as a typed Arrow table."""
        arrays = [
            text_to_arrow(pa.array(col, pa.binary()), t, f"{self.table.name}.{n}")
            for col, t, n in zip(cols, self.types, self.names, strict=True)
        ]
        return pa.Table.from_arrays(arrays, names=self.names)

    def changes(self, db, parts: list[tuple[int, RelationChanges]]) -> pa.Table:
        """The engine changes (the table's columns plus ``diff`` and ``tx``) of this table's events in
        several consecutive transactions: ``parts`` pairs a transaction's index with its events, in order.
        A transaction that truncated the table must come alone."""
        ch = _concat(parts)
        tx = np.repeat(np.array([i for i, _ in parts], dtype=np.int64), [len(c) for _, c in parts])
        new = self.to_arrow(ch.new)
        old = self.to_arrow(ch.old)
        has_new = np.array(ch.has_new, dtype=bool)
        has_old = np.array(ch.has_old, dtype=bool)
        if ch.unchanged:
            new = self._fill_unchanged(db, ch, new, old, has_old)
        current = None
        if ch.truncated:
            if len(parts) != 1:
                raise ValueError("a truncating transaction must be applied alone")
            current = db.execute(f"SELECT * FROM {self.table.name}").fetch_arrow().cast(new.schema)
        if not self.key:
            out = [_tagged(new.filter(pa.array(has_new)), 1, tx[has_new])]
            out.append(_tagged(old.filter(pa.array(has_old)), -1, tx[has_old]))
            if current is not None:
                out.append(_tagged(current, -1, np.full(current.num_rows, parts[0][0])))
            return consolidate_rows(pa.concat_tables(out), [*self.names, "tx"])
        # events in order: the removal of an old key (seq 2i), then the setting of the new row (seq 2i + 1);
        # per key and transaction only the last one counts
        oi, ni = np.flatnonzero(has_old), np.flatnonzero(has_new)
        keys = pa.concat_tables([old.select(self.key).take(oi), new.select(self.key).take(ni)])
        keys = keys.append_column("_tx", pa.array(np.concatenate([tx[oi], tx[ni]])))
        keys = keys.append_column("_seq", pa.array(np.concatenate([2 * oi, 2 * ni + 1])))
        last = keys.group_by([*self.key, "_tx"], use_threads=False).aggregate([("_seq", "max")])
        last = last.sort_by([(k, "ascending") for k in self.key] + [("_tx", "ascending")])
        seq = last.column("_seq_max").to_numpy()
        ltx = last.column("_tx").to_numpy()
        present = seq % 2 == 1
        row = (seq - 1) // 2
        # the same key as the previous (key, transaction): its row before is that one's row after
        same = np.zeros(last.num_rows, dtype=bool)
        if last.num_rows > 1:
            eq = np.ones(last.num_rows - 1, dtype=bool)
            for k in self.key:
                col = last.column(k).combine_chunks()
                eq &= pc.equal(col.slice(1), col.slice(0, len(col) - 1)).to_numpy(zero_copy_only=False)
            same[1:] = eq
        prev = np.flatnonzero(same)
        after_prev = prev[present[prev - 1]]
        out = [
            _tagged(new.take(row[present]), 1, ltx[present]),
            _tagged(new.take(row[after_prev - 1]), -1, ltx[after_prev]),
        ]
        firsts = last.filter(pa.array(~same))
        if current is not None:
            out.append(_tagged(current, -1, np.full(current.num_rows, parts[0][0])))
        else:
            before = db.lookup_arrow(self.table.name, firsts.select(self.key)).cast(new.schema)
            if before.num_rows:
                at = before.join(firsts.select([*self.key, "_tx"]), self.key)
                out.append(_tagged(at.select(self.names), -1, at.column("_tx").to_numpy()))
        return pa.concat_tables(out)

    def _fill_unchanged(self, db, ch, new: pa.Table, old: pa.Table, has_old: np.ndarray) -> pa.Table:
        """Unchanged TOASTed values an update did not send: from the full old tuple (REPLICA IDENTITY FULL)
        or from the row the key had at the last commit."""
        by_col: dict[int, list[int]] = {}
        for i, j in ch.unchanged:
            by_col.setdefault(j, []).append(i)
        for j, idx_list in by_col.items():
            idx = np.array(sorted(idx_list), dtype=np.int64)
            if self.full_identity and has_old[idx].all():
                vals = old.column(j).take(idx)
            else:
                probe = new.select(self.key).take(idx).append_column("_i", pa.array(idx))
                found = db.lookup_arrow(self.table.name, probe.select(self.key))
                joined = probe.join(found.select([*self.key, self.names[j]]), self.key).sort_by("_i")
                if joined.num_rows != len(idx):
                    raise ValueError(
                        f"table {self.table.name!r}: an update left column {self.names[j]!r} unchanged "
                        "but its row is not known"
                    )
                vals = joined.column(self.names[j])
            mask = np.zeros(new.num_rows, dtype=bool)
            mask[idx] = True
            col = pc.replace_with_mask(new.column(j).combine_chunks(), pa.array(mask), vals.combine_chunks())
            new = new.set_column(j, self.names[j], col)
        return new


def _tagged(t: pa.Table, d: int, tx: np.ndarray) -> pa.Table:
    t = t.append_column("diff", pa.array(np.full(t.num_rows, d, dtype=np.int64)))
    return t.append_column("tx", pa.array(np.asarray(tx, dtype=np.int64)))


def _concat(parts: list[tuple[int, RelationChanges]]) -> RelationChanges:
    """One transaction's events, or several transactions' events one after the other."""
    if len(parts) == 1:
        return parts[0][1]
    first = parts[0][1]
    out = RelationChanges(first.ncols)
    out.truncated = any(c.truncated for _, c in parts)
    offset = 0
    for _, c in parts:
        out.ops += c.ops
        out.has_new += c.has_new
        out.has_old += c.has_old
        for j in range(first.ncols):
            out.new[j] += c.new[j]
            out.old[j] += c.old[j]
        out.unchanged += [(i + offset, j) for i, j in c.unchanged]
        offset += len(c)
    return out


def consolidate_rows(t: pa.Table, names: list[str]) -> pa.Table:
    """Rows of ``t`` (columns ``names`` plus ``diff``) with equal rows summed, zero sums dropped."""
    if t.num_rows == 0:
        return t.select([*names, "diff"])
    g = t.group_by(names, use_threads=False).aggregate([("diff", "sum")]).rename_columns([*names, "diff"])
    return g.filter(pc.not_equal(g.column("diff"), 0))


def expand(t: pa.Table, counts: np.ndarray) -> pa.Table:
    """Each row of ``t`` repeated ``max(count, 0)`` times."""
    return t.take(np.repeat(np.arange(t.num_rows), np.maximum(counts, 0)))
