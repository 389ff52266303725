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

__all__ = ["TableFeed", "Changes", "consolidate", "expand"]


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

    def changes(self, db, parts: list[tuple[int, RelationChanges]]) -> Changes:
        """The engine changes of this table's events in several consecutive transactions: ``parts`` pairs a
        transaction's index with its events, in order. A transaction that truncated the table comes alone."""
        ch = _concat(parts)
        tx = np.repeat(np.array([i for i, _ in parts], dtype=np.int64), [len(c) for _, c in parts])
        new = self.to_arrow(ch.new)
        old = self.to_arrow(ch.old)
        has_new = np.array(ch.has_new, dtype=bool)
        has_old = np.array(ch.has_old, dtype=bool)
        if ch.unchanged:
            new = self._fill_unchanged(db, ch, new, old, has_new, has_old, tx)
        current = None
        if ch.truncated:
            if len(parts) != 1:
                raise ValueError("a truncating transaction must be applied alone")
            current = db.execute(f"SELECT * FROM {self.table.name}").fetch_arrow().cast(new.schema)
        out = []
        if current is not None:
            out.append(_tagged(current, -1, np.full(current.num_rows, parts[0][0])))
        if not self.key:
            out.append(_tagged(new.filter(pa.array(has_new)), 1, tx[has_new]))
            out.append(_tagged(old.filter(pa.array(has_old)), -1, tx[has_old]))
            return consolidate(*_join(out))
        # events in order: the removal of an old key (seq 2i), then the setting of the new row (seq 2i + 1);
        # per key and transaction only the last one counts
        oi, ni = np.flatnonzero(has_old), np.flatnonzero(has_new)
        kcols = [f"k{i}" for i in range(len(self.key))]
        keys = pa.concat_tables([old.select(self.key).take(oi), new.select(self.key).take(ni)]).rename_columns(
            kcols
        )
        keys = keys.append_column("tx", pa.array(np.concatenate([tx[oi], tx[ni]])))
        keys = keys.append_column("seq", pa.array(np.concatenate([2 * oi, 2 * ni + 1])))
        last = keys.group_by([*kcols, "tx"], use_threads=False).aggregate([("seq", "max")])
        last = last.sort_by([(k, "ascending") for k in kcols] + [("tx", "ascending")])
        seq = last.column("seq_max").to_numpy()
        ltx = last.column("tx").to_numpy()
        present = seq % 2 == 1
        row = (seq - 1) // 2
        # the same key as the previous (key, transaction): its row before is that one's row after
        same = np.zeros(last.num_rows, dtype=bool)
        if last.num_rows > 1:
            eq = np.ones(last.num_rows - 1, dtype=bool)
            for k in kcols:
                col = last.column(k).combine_chunks()
                eq &= pc.equal(col.slice(1), col.slice(0, len(col) - 1)).to_numpy(zero_copy_only=False)
            same[1:] = eq
        prev = np.flatnonzero(same)
        after_prev = prev[present[prev - 1]]
        out.append(_tagged(new.take(row[present]), 1, ltx[present]))
        out.append(_tagged(new.take(row[after_prev - 1]), -1, ltx[after_prev]))
        if current is None:
            firsts = last.filter(pa.array(~same))
            before = db.lookup_arrow(self.table.name, firsts.select(kcols).rename_columns(self.key))
            if before.num_rows:
                # which transaction first touched each found key: match found rows to keys by a join
                probe = firsts.select(kcols).append_column("i", pa.array(np.arange(firsts.num_rows)))
                found = before.select(self.key).rename_columns(kcols)
                found = found.append_column("j", pa.array(np.arange(before.num_rows)))
                m = found.join(probe, kcols, use_threads=False)
                j, i = m.column("j").to_numpy(), m.column("i").to_numpy()
                out.append(_tagged(before.cast(new.schema).take(j), -1, firsts.column("tx").to_numpy()[i]))
        return _join(out)

    def _fill_unchanged(
        self, db, ch, new: pa.Table, old: pa.Table, has_new: np.ndarray, has_old: np.ndarray, tx: np.ndarray
    ) -> pa.Table:
        """Unchanged TOASTed values an update did not send: from the whole old row (REPLICA IDENTITY FULL);
        else from the row's latest earlier version in the same transaction, if the transaction wrote one; else
        from the row its key (the old key, if the update changed it) had at the engine's last commit. The
        sidecar starts a new engine step at each transaction with such updates, so that commit is the state
        just before the transaction."""
        by_col: dict[int, list[int]] = {}
        for i, j in ch.unchanged:
            by_col.setdefault(j, []).append(i)
        kcols = [f"k{i}" for i in range(len(self.key))]
        for j, idx_list in by_col.items():
            idx = np.array(sorted(set(idx_list)), dtype=np.int64)
            if self.full_identity and has_old[idx].all():
                vals = old.column(j).take(idx)
                new = _with_values(new, j, self.names[j], idx, vals)
                continue
            use_old = pa.array(has_old[idx])
            keys = [pc.if_else(use_old, old.column(k).take(idx), new.column(k).take(idx)) for k in self.key]
            prior = _earlier_version(keys, idx, new.select(self.key), has_new, tx)
            first = prior < 0  # no earlier version in the transaction: the engine's
            fidx, fkeys = idx[first], [k.filter(pa.array(first)) for k in keys]
            if len(fidx):
                probe = pa.Table.from_arrays(fkeys, names=self.key)
                found = db.lookup_arrow(self.table.name, probe).cast(new.schema)
                f = found.select(self.key).rename_columns(kcols)
                f = f.append_column("j", pa.array(np.arange(found.num_rows)))
                p = probe.rename_columns(kcols).append_column("i", pa.array(np.arange(len(fidx))))
                m = p.join(f, kcols, use_threads=False)
                if m.num_rows != len(fidx):
                    raise ValueError(
                        f"table {self.table.name!r}: an update left column {self.names[j]!r} unsent (TOASTed, "
                        "unchanged) and the row it updated is not known"
                    )
                pos = np.empty(len(fidx), dtype=np.int64)
                pos[m.column("i").to_numpy()] = m.column("j").to_numpy()
                new = _with_values(new, j, self.names[j], fidx, found.column(j).take(pos))
            # rows written earlier in the transaction: that version's value, once it has its own (in rounds,
            # for a row updated several times with the value unsent each time)
            pending = ~first
            while pending.any():
                ready = pending & ~np.isin(prior, idx[pending])
                new = _with_values(new, j, self.names[j], idx[ready], new.column(j).take(prior[ready]))
                pending &= ~ready
        return new


Changes = tuple[pa.Table, np.ndarray, np.ndarray]  # rows, diff per row, transaction index per row


def _tagged(t: pa.Table, d: int, tx: np.ndarray) -> Changes:
    return t, np.full(t.num_rows, d, dtype=np.int64), np.asarray(tx, dtype=np.int64)


def _join(parts: list[Changes]) -> Changes:
    return (
        pa.concat_tables([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


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


def consolidate(rows: pa.Table, diff: np.ndarray, tx: np.ndarray | None = None) -> Changes:
    """Equal rows (at equal ``tx``) with their diffs summed, zero sums dropped: (rows, diff, tx)."""
    names = rows.column_names
    cols = [f"c{i}" for i in range(len(names))]
    t = rows.rename_columns(cols).append_column("d", pa.array(np.asarray(diff, dtype=np.int64)))
    keys = cols
    if tx is not None:
        t = t.append_column("t", pa.array(np.asarray(tx, dtype=np.int64)))
        keys = [*cols, "t"]
    if t.num_rows:
        t = t.group_by(keys, use_threads=False).aggregate([("d", "sum")]).rename_columns([*keys, "d"])
        t = t.filter(pc.not_equal(t.column("d"), 0))
    out_tx = t.column("t").to_numpy() if tx is not None else np.zeros(t.num_rows, dtype=np.int64)
    return t.select(cols).rename_columns(names), t.column("d").to_numpy(), out_tx


def expand(t: pa.Table, counts: np.ndarray) -> pa.Table:
    """Each row of ``t`` repeated ``max(count, 0)`` times."""
    return t.take(np.repeat(np.arange(t.num_rows), np.maximum(counts, 0)))


def _with_values(new: pa.Table, j: int, name: str, idx: np.ndarray, vals) -> pa.Table:
    """``new`` with column ``j`` at rows ``idx`` set to ``vals``."""
    if len(idx) == 0:
        return new
    mask = np.zeros(new.num_rows, dtype=bool)
    mask[idx] = True
    vals = vals.combine_chunks() if isinstance(vals, pa.ChunkedArray) else vals
    return new.set_column(j, name, pc.replace_with_mask(new.column(j).combine_chunks(), pa.array(mask), vals))


def _earlier_version(keys: list, idx: np.ndarray, new_keys: pa.Table, has_new: np.ndarray, tx: np.ndarray):
    """For each event ``idx[i]`` (updating the row with key ``keys[.][i]``), the latest earlier event of the
    same transaction that wrote a row with that key, or -1."""
    kcols = [f"k{i}" for i in range(len(keys))]
    writes = np.flatnonzero(has_new)
    w = new_keys.take(writes).rename_columns(kcols)
    w = w.append_column("e", pa.array(writes)).append_column("etx", pa.array(tx[writes]))
    q = pa.Table.from_arrays(keys, names=kcols).append_column("i", pa.array(np.arange(len(idx))))
    q = q.append_column("at", pa.array(idx)).append_column("qtx", pa.array(tx[idx]))
    m = q.join(w, kcols, use_threads=False)
    at, e = m.column("at").to_numpy(), m.column("e").to_numpy()
    ok = (e < at) & (m.column("etx").to_numpy() == m.column("qtx").to_numpy())
    out = np.full(len(idx), -1, dtype=np.int64)
    np.maximum.at(out, m.column("i").to_numpy()[ok], e[ok])
    return out
