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
from connectors.postgres._types import BPCHAR, text_to_arrow

__all__ = ["TableFeed", "Changes", "consolidate", "expand"]


class TableFeed:
    """How the changes of one source table reach its engine table, and the values among them that ivm cannot
    hold (``bad``)."""

    def __init__(self, table: SourceTable) -> None:
        self.table = table
        self.positions = table.kept()
        self.names = [table.columns[i][0] for i in self.positions]
        self.types = [table.engine_type(i) for i in self.positions]
        self.key = list(table.primary_key)
        self.full_identity = table.replica_identity == "f"
        self.bad = BadValues(table, self.key)

    def to_arrow(self, cols: list) -> tuple[pa.Table, list[np.ndarray | None]]:
        """Raw text values of every column of the relation (lists of bytes or Arrow arrays) as a typed Arrow
        table of the engine's columns, and per engine column the mask of values ivm cannot hold (NULL in the
        table) or None."""
        arrays, bad = [], []
        for i, t in zip(self.positions, self.types, strict=True):
            a, b = text_to_arrow(_text(cols[i]), t)
            if b is not None and self.table.columns[i][2]:
                # NOT NULL: a stand-in value, which only the views in error (those reading it) see
                zero = pa.array(["1970-01-01" if pa.types.is_temporal(a.type) else "0"]).cast(a.type)
                a = a.fill_null(zero[0])
            arrays.append(a)
            bad.append(b)
        return pa.Table.from_arrays(arrays, names=self.names), bad

    def held(self, rows: pa.Table) -> pa.Table:
        """Rows read back from the engine (which shows char(n) values padded) as ``to_arrow`` gives them:
        char(n) values without their trailing spaces, as the engine holds them."""
        for j, t in enumerate(self.types):
            if t.oid == BPCHAR:
                rows = rows.set_column(j, self.names[j], pc.utf8_rtrim(rows.column(j), characters=" "))
        return rows

    def snapshot(self, text: pa.Table) -> pa.Table:
        """The table's contents from its text form (all the relation's columns, in order); its bad values
        recorded anew."""
        cols = [text.column(i) for i in range(text.num_columns)]
        rows, bad = self.to_arrow(cols)
        self.bad.clear()
        raw = [c.combine_chunks() for c in cols]
        if self.key:
            left_out = self._bad_key(bad, rows.num_rows)
            if left_out.any():
                self.bad.left_out(raw, np.flatnonzero(left_out), np.zeros(0, dtype=np.int64))
                keep = np.flatnonzero(~left_out)
                rows, bad = rows.take(keep), [None if b is None else b[keep] for b in bad]
                raw = [r.take(keep) for r in raw]
            self.bad.set(rows, np.arange(rows.num_rows), bad, raw, self.positions)
        else:
            self.bad.count(bad, None, raw, self.positions, 1)
        return rows

    def changes(self, db, parts: list[tuple[int, RelationChanges]]) -> Changes:
        """The engine changes of this table's events in several consecutive transactions: ``parts`` pairs a
        transaction's index with its events, in order. A transaction that truncated the table comes alone."""
        ch = _concat(parts)
        tx = np.repeat(np.array([i for i, _ in parts], dtype=np.int64), [len(c) for _, c in parts])
        new, new_bad = self.to_arrow(ch.new)
        old, old_bad = self.to_arrow(ch.old)
        has_new = np.array(ch.has_new, dtype=bool)
        has_old = np.array(ch.has_old, dtype=bool)
        if ch.unchanged:
            new = self._fill_unchanged(db, ch, new, old, has_new, has_old, tx)
        current = None
        if ch.truncated:
            if len(parts) != 1:
                raise ValueError("a truncating transaction must be applied alone")
            current = db.execute(f'SELECT * FROM "{self.table.engine}"').fetch_arrow()
            current = self.held(current).cast(new.schema)
            self.bad.clear()
        out = []
        if current is not None:
            out.append(_tagged(current, -1, np.full(current.num_rows, parts[0][0])))
        if not self.key:
            if self.bad or any(b is not None for b in new_bad + old_bad):
                self.bad.count(new_bad, has_new, ch.new, self.positions, 1)
                self.bad.count(old_bad, has_old, ch.old, self.positions, -1)
            out.append(_tagged(new.filter(pa.array(has_new)), 1, tx[has_new]))
            out.append(_tagged(old.filter(pa.array(has_old)), -1, tx[has_old]))
            return consolidate(*_join(out))
        # a row whose key ivm cannot hold is left out (its views are in error while it exists)
        bad_new, bad_old = self._bad_key(new_bad, len(has_new)), self._bad_key(old_bad, len(has_old))
        if (bad_new & has_new).any() or (bad_old & has_old).any():
            self.bad.left_out(ch, np.flatnonzero(has_new & bad_new), np.flatnonzero(has_old & bad_old))
            has_new, has_old = has_new & ~bad_new, has_old & ~bad_old
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
        if self.bad or any(b is not None for b in new_bad):
            final = np.append(~same[1:], True)  # each key's last event in these transactions
            self.bad.forget(last.filter(pa.array(final)).select(kcols).rename_columns(self.key))
            self.bad.set(new, row[final & present], new_bad, ch.new, self.positions)
        prev = np.flatnonzero(same)
        after_prev = prev[present[prev - 1]]
        out.append(_tagged(new.take(row[present]), 1, ltx[present]))
        out.append(_tagged(new.take(row[after_prev - 1]), -1, ltx[after_prev]))
        if current is None:
            firsts = last.filter(pa.array(~same))
            before = db.lookup_arrow(self.table.engine, firsts.select(kcols).rename_columns(self.key))
            before = self.held(before).cast(new.schema)
            if before.num_rows:
                # which transaction first touched each found key: match found rows to keys by a join
                probe = firsts.select(kcols).append_column("i", pa.array(np.arange(firsts.num_rows)))
                found = before.select(self.key).rename_columns(kcols)
                found = found.append_column("j", pa.array(np.arange(before.num_rows)))
                m = found.join(probe, kcols, use_threads=False)
                j, i = m.column("j").to_numpy(), m.column("i").to_numpy()
                out.append(_tagged(before.take(j), -1, firsts.column("tx").to_numpy()[i]))
        return _join(out)

    def _bad_key(self, bad: list, n: int) -> np.ndarray:
        """Which rows hold a key value ivm cannot hold."""
        out = np.zeros(n, dtype=bool)
        for k in self.key:
            b = bad[self.names.index(k)]
            if b is not None:
                out |= b
        return out

    def _fill_unchanged(
        self, db, ch, new: pa.Table, old: pa.Table, has_new: np.ndarray, has_old: np.ndarray, tx: np.ndarray
    ) -> pa.Table:
        """Unchanged TOASTed values an update did not send: from the whole old row (REPLICA IDENTITY FULL);
        else from the row's latest earlier version in the same transaction, if the transaction wrote one; else
        from the row its key (the old key, if the update changed it) had at the engine's last commit. The
        sidecar starts a new engine step at each transaction with such updates, so that commit is the state
        just before the transaction."""
        by_col: dict[int, list[int]] = {}
        held = {p: j for j, p in enumerate(self.positions)}  # the relation's column -> the engine's
        for i, p in ch.unchanged:
            if p in held:
                by_col.setdefault(held[p], []).append(i)
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
                found = self.held(db.lookup_arrow(self.table.engine, probe)).cast(new.schema)
                f = found.select(self.key).rename_columns(kcols)
                f = f.append_column("j", pa.array(np.arange(found.num_rows)))
                p = probe.rename_columns(kcols).append_column("i", pa.array(np.arange(len(fidx))))
                m = p.join(f, kcols, use_threads=False)
                if m.num_rows != len(fidx):
                    raise ValueError(
                        f"table {self.table.engine}: an update left column {self.names[j]!r} unsent (TOASTed, "
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


class BadValues:
    """The values of one source table ivm cannot hold (numeric NaN, timestamps at infinity, ...), which are
    NULL in the engine: by row key for a table with a primary key (an update or delete of the key removes
    them), else counted per column (the deletes of such a table carry the whole old row). The views reading
    such a column are in error while one is present."""

    def __init__(self, table: SourceTable, key: list[str]) -> None:
        self.table = table
        self.key = key
        self.rows: pa.Table | None = None  # key columns, "column", "value"
        self.counts: dict[str, list] = {}  # column -> [count, an example value]
        self.keys: dict[tuple, None] = {}  # raw keys of rows left out: their key cannot be held

    def __bool__(self) -> bool:
        counted = any(c > 0 for c, _ in self.counts.values())
        return bool((self.rows is not None and self.rows.num_rows) or counted or self.keys)

    def clear(self) -> None:
        self.rows, self.counts, self.keys = None, {}, {}

    def left_out(self, source, written: np.ndarray, removed: np.ndarray) -> None:
        """Rows whose key cannot be held: ``written`` (events setting such a key, or snapshot rows when
        ``source`` is a list of columns) and ``removed`` (events removing one), applied in event order."""
        names = [c[0] for c in self.table.columns]
        at = [names.index(k) for k in self.key]
        if isinstance(source, list):  # the snapshot's text columns
            for i in written.tolist():
                self.keys[tuple(source[p][i].as_py() for p in at)] = None
            return
        sets = [(2 * i + 1, i, True) for i in written.tolist()]
        events = sorted(sets + [(2 * i, i, False) for i in removed.tolist()])
        for _, i, writes in events:  # only the events of such rows: they are rare
            cols = source.new if writes else source.old
            key = tuple(_as_text(cols[p][i]) for p in at)
            if writes:
                self.keys[key] = None
            else:
                self.keys.pop(key, None)

    def forget(self, keys: pa.Table) -> None:
        """Drop the entries of rows whose key was written or deleted."""
        if self.rows is not None and self.rows.num_rows and keys.num_rows:
            keys = keys.cast(self.rows.select(self.key).schema)
            self.rows = self.rows.join(keys, self.key, join_type="left anti", use_threads=False)

    def set(self, rows: pa.Table, at: np.ndarray, bad: list, raw: list, positions: list[int]) -> None:
        """Record the bad values of ``rows`` at positions ``at`` (rows as written now)."""
        names = rows.column_names
        for j, mask in enumerate(bad):
            if mask is None or not mask[at].any():
                continue
            hit = at[mask[at]]
            values = _text(raw[positions[j]])
            part = rows.select(self.key).take(hit)
            part = part.append_column("column", pa.array([names[j]] * len(hit), pa.string()))
            part = part.append_column("value", values.take(hit).cast(pa.string()))
            if self.rows is not None:
                part = pa.concat_tables([self.rows, part.cast(self.rows.schema)])
            self.rows = part

    def count(self, bad: list, rows: np.ndarray | None, raw: list, positions: list[int], sign: int) -> None:
        """Count the bad values of a table without a key: ``rows`` selects the events carrying the tuple."""
        for j, mask in enumerate(bad):
            if mask is None:
                continue
            m = mask if rows is None else mask & rows
            n = int(m.sum())
            if n:
                entry = self.counts.setdefault(self.names()[j], [0, None])
                entry[0] += sign * n
                values = _text(raw[positions[j]])
                entry[1] = values.take(np.flatnonzero(m)[:1]).cast(pa.string())[0].as_py()

    def names(self) -> list[str]:
        return [self.table.columns[i][0] for i in self.table.kept()]

    def columns(self) -> dict[str, str]:
        """Each column holding bad values now, with a message naming the table, a row and the value."""
        out = {}
        t = self.table
        types = {n: typ for n, typ, _ in t.columns}
        if self.rows is not None and self.rows.num_rows:
            cols = self.rows.column("column")
            for name in pc.unique(cols).to_pylist():
                hits = self.rows.filter(pc.equal(cols, name))
                first = hits.slice(0, 1).to_pylist()[0]
                key = ", ".join(str(first[k]) for k in self.key)
                more = f" (and {hits.num_rows - 1} more rows)" if hits.num_rows > 1 else ""
                out[name] = (
                    f"table {t.engine}, row ({', '.join(self.key)})=({key}): column {name} holds "
                    f"{first['value']!r}, which ivm cannot hold as {types[name].shown}{more}"
                )
        if self.keys:
            key = ", ".join(str(v) for v in next(iter(self.keys)))
            more = f" (and {len(self.keys) - 1} more rows)" if len(self.keys) > 1 else ""
            out["*"] = (
                f"table {t.engine}, row ({', '.join(self.key)})=({key}): its primary key cannot be held by ivm "
                f"({', '.join(types[k].shown for k in self.key)}); the row is left out{more}"
            )
        for name, (n, example) in self.counts.items():
            if n > 0:
                out[name] = (
                    f"table {t.engine}: {n} row(s) with column {name} = {example!r}, which ivm cannot hold "
                    f"as {types[name].shown}"
                )
        return out


def _as_text(value) -> str | None:
    return value.decode() if isinstance(value, (bytes, bytearray, memoryview)) else value


def _text(values) -> pa.Array:
    """A column of raw text values (a list of bytes or an Arrow array) as one Arrow array."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values if isinstance(values, pa.Array) else pa.array(values, pa.binary())


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
