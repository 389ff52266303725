"""Rows of a statement met with rows of a table, whole arrays at a time: grouping equal rows, finding each
row's equal among other rows, and reading the live rows of a table that hold given keys.

Writes that read the table they change (UPDATE ... FROM, DELETE ... USING, INSERT ... ON CONFLICT) find the
rows they touch by key here: a sort of the rows involved, never a lookup per row. Rows are equal as keys
compare them: NULL equal to NULL, NaN to NaN and -0.0 to 0.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ivm.db import state
from ivm.engine.batch import Batch, consolidate, group_starts, key_hash, sort_groups, sort_keys
from ivm.engine.dataflow import Arranged
from planner.values import to_python

if TYPE_CHECKING:
    from ivm.db.connection import Connection

__all__ = ["groups", "match", "live", "describe"]


def _keys(cols: Sequence[np.ndarray], valid: Sequence) -> list[np.ndarray]:
    """Sort keys grouping equal rows (values under NULLs are ignored)."""
    clean = []
    for c, m in zip(cols, valid, strict=True):
        if m is not None and not m.all():
            c = np.where(m, c, np.zeros(1, c.dtype))
        clean.append(c)
    return sort_keys(clean, list(valid), None, signed_zeros=False)


def groups(cols: Sequence[np.ndarray], valid: Sequence, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows (``n`` of them) sorted so that equal ones are together, stably (an earlier row first): the
    order, and per row its group's number (from 0, in that order)."""
    if not cols or n == 0:
        return np.arange(n), np.zeros(n, np.int64)
    keys = _keys(cols, valid)
    order = sort_groups([*keys, np.arange(n)])[0]
    starts = group_starts([k[order] for k in keys], n)
    gid = np.empty(n, np.int64)
    gid[order] = np.cumsum(starts) - 1
    return order, gid


def match(
    a_cols: Sequence[np.ndarray], a_valid: Sequence, b_cols: Sequence[np.ndarray], b_valid: Sequence
) -> np.ndarray:
    """For each row of ``a``, the position of the row of ``b`` equal to it (``b``'s rows are distinct), or
    -1."""
    na, nb = len(a_cols[0]), len(b_cols[0])
    if na == 0 or nb == 0:
        return np.full(na, -1, np.int64)
    cols = [np.concatenate((x, y.astype(x.dtype, copy=False))) for x, y in zip(a_cols, b_cols, strict=True)]
    valid = [
        None
        if ma is None and mb is None
        else np.concatenate((np.ones(na, bool) if ma is None else ma, np.ones(nb, bool) if mb is None else mb))
        for ma, mb in zip(a_valid, b_valid, strict=True)
    ]
    side = np.concatenate((np.ones(na, np.int8), np.zeros(nb, np.int8)))  # in a group, b's row first
    keys = _keys(cols, valid)
    order = sort_groups([*keys, side])[0]
    n = len(order)
    group = np.cumsum(group_starts([k[order] for k in keys], n))
    at_b = np.where(side[order] == 0, np.arange(n), -1)
    last_b = np.maximum.accumulate(at_b)
    mine = np.flatnonzero(side[order] == 1)
    cand = last_b[mine]
    ok = cand >= 0
    ok[ok] = group[cand[ok]] == group[mine[ok]]
    out = np.full(na, -1, np.int64)
    out[order[mine[ok]]] = order[cand[ok]] - na
    return out


def live(
    db: Connection,
    st: state.TableState,
    key: tuple[int, ...],
    arranged: Arranged,
    cols: Sequence[np.ndarray],
    valid: Sequence,
) -> tuple[list, list, np.ndarray]:
    """The rows of the table now (committed, and this transaction's changes) among which are those whose
    columns ``key`` (the key ``arranged`` is indexed by) equal a row of ``cols``: found by seeking those keys,
    with every row the transaction changed besides. Columns in the table's order, as the table stores them,
    and each row's multiplicity."""
    table = st.table
    width = len(table.columns)
    parts = []
    n = len(cols[0]) if cols else 0
    if n:
        keys = [np.asarray(c) for c in cols]
        found, _ = arranged.trace.gather(*state.unique(key_hash(keys, list(valid), n), keys, list(valid)))
        if found is not None and len(found):
            layout = list(key) + [i for i in range(width) if i not in key]
            inverse = [layout.index(i) for i in range(width)]
            c2, v2 = found.select(inverse)
            parts.append(Batch(c2, v2, np.zeros((len(found), 1), np.int64), found.diffs))
    for b in db.pending.get(table.name, ()):
        parts.append(b.with_times(np.zeros((len(b), 1), np.int64)))
    if not parts:
        empty = Batch.empty([c.type.dtype for c in table.columns])
        return list(empty.columns), list(empty.valid), np.zeros(0, np.int64)
    total, _ = consolidate(Batch.concat(parts))
    total = total.take(np.flatnonzero(total.diffs > 0))
    return list(total.columns), list(total.valid), total.diffs


def describe(table, positions: Sequence[int], cols: Sequence[np.ndarray], valid: Sequence, i: int) -> str:
    """Row ``i`` of ``cols`` (the table's columns at ``positions``) as ``name=value, ...``."""
    out = []
    for p, c, m in zip(positions, cols, valid, strict=True):
        v = to_python(c[i : i + 1], None if m is None else m[i : i + 1], table.columns[p].type)[0]
        out.append(f"{table.columns[p].name}={v!r}")
    return ", ".join(out)
