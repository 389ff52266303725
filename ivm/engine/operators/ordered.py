"""Window functions outside loops, kept in order: a change recomputes the rows it reaches, not its partition.

``Window`` as a reducer recomputes every partition a change touches, whole. Outside loops (one time per
step), a reduce of a ``Window`` instead keeps its rows in the window's order with the values it emitted for
them (``OrderedWindow``): every copy of every row (a row of multiplicity m as m copies), ordered by partition
key hash, partition key, the ORDER BY, then every column (as ``Window`` breaks ties), in blocks of at most
``CAP`` rows (``_Blocks``), so that a change moves one block's rows, not all of them.

A change to a partition of at most ``BIG`` rows recomputes it whole, all such partitions of a step at once.
In a larger one, the calls' frames say how far a change reaches (``reach``): ``ROW_NUMBER`` and ``RANK``
from the change to the partition's end, ``LAG``/``LEAD`` and ``ROWS`` frames of bounded offsets a few rows
around it, ``RANGE`` frames of ``CURRENT ROW`` its peers, while ``PERCENT_RANK``, ``CUME_DIST``, ``NTILE``,
``RANGE`` and ``GROUPS`` offsets, and ``EXCLUDE GROUP`` and ``TIES``, reach the whole partition.
``DENSE_RANK`` and a frame from ``UNBOUNDED PRECEDING`` to the row reach every row after a change but read,
for DENSE_RANK, COUNT, SUM, MIN, MAX, FIRST_VALUE and LAST_VALUE, only the slice and the value emitted for the
row before it (``anchored``). Only the slice holding the rows reached, and what their values read, is taken
out, merged with the change, computed and put back; the values of the rows reached are compared with those
emitted, and only what differs goes out.
Appending to a long ordered partition (``LAG`` over a time series, a moving average over ``ROWS`` frames,
``ROW_NUMBER``, a running ``SUM``) then costs work proportional to the rows whose values change.

The values emitted are those of the reducer over the whole partition (the same order, the same functions on
a slice whose bounds are set so that they read nothing outside it), and the state is rebuilt from the
output's arrangement when the operator starts on a loaded one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ivm.engine.batch import (
    Batch,
    Mask,
    concat_masks,
    consolidate,
    group_starts,
    key_hash,
    lexsort,
    rows_equal,
    sort_keys,
)
from ivm.engine.operators.window import FRAMED, OFFSET, Bound, Call, Window

__all__ = ["CAP", "BIG", "Reach", "reach", "OrderedWindow"]

CAP = 2048  # rows per block at most
BIG = 4096  # partitions of more rows are recomputed in slices
MANY_SLICES = 64  # a partition whose changes need more slices is recomputed whole
_INF = 1 << 60


@dataclass(frozen=True)
class Reach:
    """How far a change reaches in a partition, and what the rows it reaches read. A change of the copies at
    ``[lo, hi)`` (or, with ``peer_lo``/``peer_hi``, from its first peer / to its last) reaches the rows
    from ``before`` rows before to ``after`` rows after; a row reached reads from ``read_before`` rows before
    it to ``read_after`` after, and with ``align_lo``/``align_hi`` its first / last peer (a slice then
    starts / ends on a peer group's bound). ``whole``: the whole partition. A change that leaves its
    partition's size as it was reaches ``still_after`` rows after it (to its last peer with ``still_peer_hi``)
    instead: rows further on keep their place (``ROW_NUMBER`` and ``RANK`` move them along)."""

    before: int = 0
    after: int = 0
    still_after: int = 0
    still_peer_hi: bool = False
    read_before: int = 0
    read_after: int = 0
    peer_lo: bool = False
    peer_hi: bool = False
    align_lo: bool = False
    align_hi: bool = False
    whole: bool = False


_WHOLE = Reach(whole=True)


def _offset(b: Bound, is_start: bool) -> int:
    """A ROWS bound as an offset from the row (unbounded: as far as the partition goes)."""
    if b.kind == "unbounded":
        return -_INF if is_start else _INF
    if b.kind == "current":
        return 0
    return int(b.offset) if b.kind == "following" else -int(b.offset)


# functions over frames from the partition's start that a slice computes from the value of the row before it
# (its anchor, which no change reaches), and how: the anchor's count added (of rows, values or peer groups),
# or the anchor's value put in as a row of its own at the slice's start (SUM of integers and decimals, MIN,
# MAX, FIRST_VALUE), or neither (LAST_VALUE reads the frame's end alone)
_ADDED = ("count_star", "count", "dense_rank")
_AS_ROW = ("sum", "min", "max", "first_value")
_ANCHORED = _ADDED + _AS_ROW + ("last_value",)


def anchored(c: Call, dtype: np.dtype) -> bool:
    """Whether a slice computes ``c`` (over values of ``dtype``) from its anchor's value (see ``_ANCHORED``):
    a frame from UNBOUNDED PRECEDING to the row (or its peers: the anchor's frame ends where the slice starts);
    not a SUM of doubles, whose anchor holds a rounded sum. DENSE_RANK counts the peer groups up to the row."""
    if c.func == "dense_rank":
        return True
    if c.func not in _ANCHORED or c.frame.start.kind != "unbounded" or c.frame.exclude is not None:
        return False
    if c.func == "sum" and np.dtype(dtype).kind == "f":
        return False
    end = c.frame.end
    return (
        end.kind != "unbounded"
        and (c.frame.mode == "range" or _offset(end, False) == 0)
        and (c.frame.mode == "rows" or end.kind == "current")
    )


def _call_reach(c: Call, dtype: np.dtype | None = None) -> Reach:
    f = c.func
    if dtype is not None and anchored(c, dtype):
        # a change reaches every row after it; a row reads its frame's end and the anchor
        if c.frame.mode == "rows" and f != "dense_rank":
            return Reach(before=1, after=_INF, still_after=_INF)
        return Reach(after=_INF, still_after=_INF, peer_lo=True, align_lo=True, align_hi=True)
    if f == "row_number":
        return Reach(after=_INF)
    if f == "rank":
        return Reach(after=_INF, peer_lo=True, align_lo=True, still_peer_hi=True)
    if f in OFFSET:
        k = int(c.param)
        return Reach(before=k, after=k, still_after=k, read_before=k, read_after=k)
    if f not in FRAMED:
        return _WHOLE  # PERCENT_RANK, CUME_DIST, NTILE: the partition's size
    frame = c.frame
    if frame.exclude not in (None, "current row"):
        return _WHOLE  # the row's peers taken out of its frame
    if frame.mode == "rows":
        s, e = _offset(frame.start, True), _offset(frame.end, False)
        # row r reads [r + s, r + e]: a change at p reaches the rows from p - e to p - s (one more each way,
        # for the rows a change moves along)
        after = min(_INF, max(0, -s) + 1)
        return Reach(
            before=min(_INF, max(0, e) + 1),
            after=after,
            still_after=after,
            read_before=max(0, -s),
            read_after=max(0, e),
        )
    if any(b.kind in ("preceding", "following") for b in (frame.start, frame.end)):
        return _WHOLE
    # RANGE with UNBOUNDED and CURRENT ROW bounds: a row's frame runs to its partition's bound or its peers'
    lo_open, hi_open = frame.start.kind == "unbounded", frame.end.kind == "unbounded"
    return Reach(
        before=_INF if hi_open else 0,
        after=_INF if lo_open else 0,
        still_after=_INF if lo_open else 0,
        still_peer_hi=not lo_open,
        read_before=_INF if lo_open else 0,
        read_after=_INF if hi_open else 0,
        peer_lo=not hi_open,
        peer_hi=not lo_open,
        align_lo=not lo_open,
        align_hi=not hi_open,
    )


def reach(window: Window, dtypes: tuple | None = None) -> Reach:
    """The reach of all of a window's calls together (over value columns of ``dtypes``, when known: see
    ``anchored``)."""
    parts = [
        _call_reach(c, None if dtypes is None else np.dtype(np.int64) if c.arg is None else dtypes[c.arg])
        for c in window.calls
    ]
    if any(r.whole for r in parts):
        return _WHOLE
    return Reach(
        before=max(r.before for r in parts),
        after=max(r.after for r in parts),
        still_after=max(r.still_after for r in parts),
        still_peer_hi=any(r.still_peer_hi for r in parts),
        read_before=max(r.read_before for r in parts),
        read_after=max(r.read_after for r in parts),
        peer_lo=any(r.peer_lo for r in parts),
        peer_hi=any(r.peer_hi for r in parts),
        align_lo=any(r.align_lo for r in parts),
        align_hi=any(r.align_hi for r in parts),
    )


class _Block:
    """Consecutive rows of the order: columns, their validity, and the rows' partition key hashes."""

    __slots__ = ("cols", "valid", "hashes")

    def __init__(self, cols: list[np.ndarray], valid: list[Mask], hashes: np.ndarray) -> None:
        self.cols = cols
        self.valid = valid
        self.hashes = hashes

    def __len__(self) -> int:
        return len(self.hashes)


class _Blocks:
    """Rows in one order, in blocks of at most ``CAP``, addressed by their position in the order."""

    def __init__(self, dtypes: list[np.dtype]) -> None:
        self.dtypes = dtypes
        self.blocks: list[_Block] = []
        self.sizes = np.zeros(0, dtype=np.int64)
        self.starts = np.zeros(1, dtype=np.int64)  # each block's first position, and the total at the end
        self.first_hash = np.zeros(0, dtype=np.int64)
        self.last_hash = np.zeros(0, dtype=np.int64)
        # each block's first row (its columns and their validity), where a search among blocks starts
        self.first_cols = [np.zeros(0, dtype=d) for d in dtypes]
        self.first_valid = [np.zeros(0, dtype=bool) for _ in dtypes]

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def nbytes(self) -> int:
        return sum(sum(c.nbytes for c in b.cols) + b.hashes.nbytes for b in self.blocks)

    def _index(self, ba: int, bb: int, new: list[_Block]) -> None:
        """Blocks ``ba..bb`` were replaced by ``new``: their sizes and bounding hashes too."""

        def put(old: np.ndarray, values: list) -> np.ndarray:
            return np.concatenate((old[:ba], np.array(values, dtype=np.int64), old[bb + 1 :]))

        self.sizes = put(self.sizes, [len(b) for b in new])
        self.first_hash = put(self.first_hash, [b.hashes[0] for b in new])
        self.last_hash = put(self.last_hash, [b.hashes[-1] for b in new])
        for j in range(len(self.dtypes)):
            values = np.array([b.cols[j][0] for b in new], dtype=self.dtypes[j])
            self.first_cols[j] = np.concatenate((self.first_cols[j][:ba], values, self.first_cols[j][bb + 1 :]))
            valid = np.array([True if b.valid[j] is None else b.valid[j][0] for b in new], dtype=bool)
            self.first_valid[j] = np.concatenate(
                (self.first_valid[j][:ba], valid, self.first_valid[j][bb + 1 :])
            )

    def firsts(self, lo: int, hi: int, width: int) -> tuple[list[np.ndarray], list[Mask]]:
        """The first rows of blocks ``lo..hi - 1`` (their first ``width`` columns)."""
        return [c[lo:hi] for c in self.first_cols[:width]], [m[lo:hi] for m in self.first_valid[:width]]

    def hash_ranges(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each hash (ascending, distinct), the positions ``[lo, hi)`` of the rows holding it."""
        lo = np.zeros(len(hashes), dtype=np.int64)
        hi = np.zeros(len(hashes), dtype=np.int64)
        if not self.blocks:
            return lo, hi
        total = len(self)
        for out, blocks, side in (
            (lo, self.last_hash.searchsorted(hashes, "left"), "left"),
            (hi, self.first_hash.searchsorted(hashes, "right") - 1, "right"),
        ):
            for b in np.unique(blocks).tolist() if len(blocks) > 1 else blocks.tolist():
                sel = np.flatnonzero(blocks == b) if len(blocks) > 1 else slice(None)
                if b >= len(self.blocks):
                    out[sel] = total
                elif b < 0:
                    out[sel] = 0
                else:
                    out[sel] = self.starts[b] + self.blocks[b].hashes.searchsorted(hashes[sel], side)
        return lo, hi

    def take(self, pos: np.ndarray) -> tuple[list[np.ndarray], list[Mask], np.ndarray]:
        """The rows at positions ``pos`` (ascending)."""
        if not len(pos):
            return [np.zeros(0, dtype=d) for d in self.dtypes], [None] * len(self.dtypes), pos[:0]
        which = self.starts.searchsorted(pos, "right") - 1
        cuts = np.flatnonzero(which[1:] != which[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(pos)]
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            blk = self.blocks[int(which[a])]
            local = pos[a:b] - self.starts[which[a]]
            parts.append(
                (
                    [c[local] for c in blk.cols],
                    [_at(m, local) for m in blk.valid],
                    blk.hashes[local],
                )
            )
        if len(parts) == 1:
            return parts[0]
        lengths = [len(p[2]) for p in parts]
        cols = [np.concatenate([p[0][j] for p in parts]) for j in range(len(self.dtypes))]
        valid = [concat_masks([p[1][j] for p in parts], lengths) for j in range(len(self.dtypes))]
        return cols, valid, np.concatenate([p[2] for p in parts])

    def splice(
        self,
        ranges: list[tuple[int, int]],
        cols: list[np.ndarray],
        valid: list[Mask],
        hashes: np.ndarray,
        counts,
    ) -> None:
        """Replace the rows at each range ``[a, b)`` (ascending, disjoint) by the next ``counts[i]`` of the new
        rows (``cols``, ``valid``, ``hashes``)."""
        offsets = np.concatenate(([0], np.cumsum(counts))).tolist()
        nb = len(self.blocks)
        if len(ranges) == 1 and nb and self._overwrite(*ranges[0], cols, valid):
            return
        if nb == 0:
            self._replace_run(0, -1, [(0, 0, 0, offsets[-1])], cols, valid, hashes)
            self.starts = np.concatenate(([0], np.cumsum(self.sizes))).astype(np.int64)
            return
        # the blocks each range touches, and the runs of blocks shared by ranges
        runs: list[list] = []
        for i, (a, b) in enumerate(ranges):
            ba = min(int(self.starts.searchsorted(a, "right")) - 1, nb - 1)
            bb = max(ba, min(int(self.starts.searchsorted(max(a, b - 1), "right")) - 1, nb - 1))
            if runs and ba <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], bb)
                runs[-1][2].append(i)
            else:
                runs.append([ba, bb, [i]])
        for ba, bb, members in reversed(runs):
            base = int(self.starts[ba])
            pieces = [(a - base, b - base, offsets[i], offsets[i + 1]) for i in members for a, b in [ranges[i]]]
            self._replace_run(ba, bb, pieces, cols, valid, hashes)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes))).astype(np.int64)

    def _overwrite(self, a: int, b: int, cols, valid) -> bool:
        """Write rows ``[a, b)`` in place, when they are as many as the new rows and lie in one block (the
        rows of one partition, whose hashes stay as they are)."""
        blk = int(self.starts.searchsorted(a, "right")) - 1
        if b - a != len(cols[0]) or b > self.starts[blk + 1] or a == b:
            return False
        block = self.blocks[blk]
        at = slice(a - int(self.starts[blk]), b - int(self.starts[blk]))
        for j, (c, m) in enumerate(zip(cols, valid, strict=True)):
            block.cols[j][at] = c
            if m is not None and block.valid[j] is None:
                block.valid[j] = np.ones(len(block), dtype=bool)
            if block.valid[j] is not None:
                block.valid[j][at] = True if m is None else m
            if at.start == 0:
                self.first_cols[j][blk] = c[0]
                self.first_valid[j][blk] = True if m is None else m[0]
        return True

    def _replace_run(self, ba: int, bb: int, pieces: list, cols, valid, hashes) -> None:
        """Blocks ``ba..bb`` with each piece ``(a, b, s, e)`` of their rows ``[a, b)`` replaced by new rows
        ``[s, e)``, split again into blocks (a run left small takes in the next block)."""
        old = self.blocks[ba : bb + 1]
        if bb + 1 < len(self.blocks) and sum(len(b) for b in old) < CAP // 4:
            bb += 1
            old = self.blocks[ba : bb + 1]
        ncol = len(self.dtypes)
        if old:
            lengths = [len(b) for b in old]
            ocols = [
                np.concatenate([b.cols[j] for b in old]) if len(old) > 1 else old[0].cols[j]
                for j in range(ncol)
            ]
            ovalid = [concat_masks([b.valid[j] for b in old], lengths) for j in range(ncol)]
            ohash = np.concatenate([b.hashes for b in old]) if len(old) > 1 else old[0].hashes
        else:
            ocols, ovalid, ohash = (
                [np.zeros(0, dtype=d) for d in self.dtypes],
                [None] * ncol,
                np.zeros(0, np.int64),
            )
        # the pieces of the run's content: old rows kept between the ranges, and the new rows
        segs: list[tuple[bool, int, int]] = []
        at = 0
        for a, b, s, e in pieces:
            segs.append((False, at, a))
            segs.append((True, s, e))
            at = b
        segs.append((False, at, len(ohash)))
        segs = [p for p in segs if p[2] > p[1]]
        lengths = [e - s for _, s, e in segs]
        total = sum(lengths)

        def part(new: bool, s: int, e: int, j: int | None):
            if j is None:
                return (hashes if new else ohash)[s:e]
            return (cols if new else ocols)[j][s:e]

        def vpart(new: bool, s: int, e: int, j: int) -> Mask:
            m = (valid if new else ovalid)[j]
            return None if m is None else m[s:e]

        ncols = [
            np.concatenate([part(n, s, e, j) for n, s, e in segs]) if segs else ocols[j][:0]
            for j in range(ncol)
        ]
        nvalid = [concat_masks([vpart(n, s, e, j) for n, s, e in segs], lengths) for j in range(ncol)]
        nhash = np.concatenate([part(n, s, e, None) for n, s, e in segs]) if segs else ohash[:0]
        k = 0 if total == 0 else 1 if total <= CAP else -(-total // (CAP * 3 // 4))
        cuts = [total * i // k for i in range(k + 1)] if k else [0]
        new_blocks = [
            _Block(
                [c[a:b] for c in ncols],
                [None if m is None or m[a:b].all() else m[a:b] for m in nvalid],
                nhash[a:b],
            )
            for a, b in zip(cuts[:-1], cuts[1:], strict=True)
        ]
        self.blocks[ba : bb + 1] = new_blocks
        self._index(ba, bb, new_blocks)


class OrderedWindow:
    """The rows of a reduce by ``window`` outside loops (key columns ``nkey`` then value columns of
    ``in_dtypes``), kept in order with the values emitted for them; ``apply`` turns a change into the
    output's updates."""

    def __init__(self, window: Window, nkey: int, in_dtypes: tuple) -> None:
        self.window = window
        self.nkey = nkey
        self.nin = len(in_dtypes)
        out = window.out_dtypes([np.dtype(d) for d in in_dtypes[nkey:]])
        self.out_dtypes = [np.dtype(d) for d in in_dtypes] + list(out[self.nin - nkey :])
        self.rows = _Blocks(self.out_dtypes)
        values = tuple(np.dtype(d) for d in in_dtypes[nkey:])
        self.reach = reach(window, values)
        # the calls computed from their slice's anchor
        self.anchored = [
            i
            for i, c in enumerate(window.calls)
            if anchored(c, np.dtype(np.int64) if c.arg is None else values[c.arg])
        ]
        self.alone = {i: Window(window.order, (window.calls[i],)) for i in self.anchored}
        # and the other calls, computed on the slices as they are (a SUM of a slice alone may pass 64 bits)
        self.as_row = [i for i in self.anchored if window.calls[i].func in _AS_ROW]
        self.rest = [i for i in range(len(window.calls)) if i not in self.as_row]
        self.rest_window = Window(window.order, tuple(window.calls[i] for i in self.rest))
        self.loaded = False  # whether the rows were taken from the output's arrangement (see ``load``)

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes

    def reset(self) -> None:
        """Forget the rows: they are taken again from the output's arrangement (loaded from a checkpoint)."""
        self.rows = _Blocks(self.out_dtypes)
        self.loaded = False

    # -- order -----------------------------------------------------------------------------------
    def _keys(self, cols, valid, hashes: np.ndarray | None, full: bool, order=None) -> list[np.ndarray]:
        """Sort keys of rows: with ``hashes``, the partition first (its hash, then its key), then the ORDER BY
        (``order``, when its keys are at hand), then (``full``) every value column: equal on all, rows are
        copies of one row; without ``full``, peers."""
        k = self.nkey
        keys: list[np.ndarray] = []
        if hashes is not None:
            keys.append(hashes)
            keys += sort_keys(cols[:k], valid[:k], None, False)
        vcols, vvalid = tuple(cols[k : self.nin]), tuple(valid[k : self.nin])
        keys += self.window._order_keys(vcols, vvalid) if order is None else order
        if full:
            keys += sort_keys(vcols, vvalid, None)
            if hashes is not None:
                keys += sort_keys(cols[:k], valid[:k], None)  # a key written -0.0 is another row than 0.0
        return keys

    def _bounds(self, f: int, end: int, qcols, qvalid, full: bool, upper) -> np.ndarray:
        """For rows ``q`` of the partition at positions ``[f, end)``, where they would go: before the rows equal
        to them (on every column with ``full``, else on the ORDER BY) or, where ``upper`` (one flag, or one per
        row), after. A search among the first rows of the partition's blocks, then in the block found."""
        rows = self.rows
        nq = len(qcols[0])
        upper = np.broadcast_to(np.asarray(upper, dtype=bool), (nq,))
        bf = int(rows.starts.searchsorted(f, "right")) - 1
        bl = int(rows.starts.searchsorted(end - 1, "right")) - 1
        block = np.full(nq, bf, dtype=np.int64)
        if bl > bf:
            fc, fv = rows.firsts(bf + 1, bl + 1, self.nin)
            block += self._count_before(fc, fv, qcols, qvalid, full, upper)
        out = np.zeros(nq, dtype=np.int64)
        for b in np.unique(block).tolist():
            sel = np.flatnonzero(block == b)
            a, e = max(f, int(rows.starts[b])), min(end, int(rows.starts[b + 1]))
            rc, rv, _ = rows.take(np.arange(a, e, dtype=np.int64))
            qc = [c[sel] for c in qcols]
            qv = [_at(m, sel) for m in qvalid]
            out[sel] = a + self._count_before(rc[: self.nin], rv[: self.nin], qc, qv, full, upper[sel])
        return out

    def _count_before(self, rcols, rvalid, qcols, qvalid, full: bool, upper: np.ndarray) -> np.ndarray:
        """For each query row, how many of the rows (in order, one partition) come before it (and, where
        ``upper``, equal it)."""
        nr, nq = len(rcols[0]), len(qcols[0])
        cols = [np.concatenate((r, q)) for r, q in zip(rcols, qcols, strict=True)]
        valid = [concat_masks([r, q], [nr, nq]) for r, q in zip(rvalid, qvalid, strict=True)]
        flag = np.concatenate((np.ones(nr, dtype=np.int64), np.where(upper, 2, 0)))
        order = lexsort([*self._keys(cols, valid, None, full), flag])
        is_ref = order < nr
        before = np.cumsum(is_ref) - is_ref
        out = np.empty(nq, dtype=np.int64)
        at = np.flatnonzero(~is_ref)
        out[order[at] - nr] = before[at]
        return out

    # -- maintenance ------------------------------------------------------------------------------
    def load(self, batch: Batch) -> None:
        """Take the rows and values the output holds (its accumulated updates, ``batch``) as the state."""
        self.loaded = True
        if not len(batch):
            return
        b, _ = consolidate(batch.with_times(np.zeros((len(batch), 1), dtype=np.int64)))
        if np.count_nonzero(b.diffs < 0):
            raise ValueError("a window's output holds a row a negative number of times")
        b = b.take(np.repeat(np.arange(len(b)), b.diffs))
        k = self.nkey
        h = key_hash(b.columns[:k], b.valid[:k], len(b))
        order = lexsort(self._keys(b.columns, b.valid, h, True))
        b = b.take(order)
        self.rows.splice([(0, 0)], list(b.columns), list(b.valid), h[order], [len(b)])

    def apply(self, delta: Batch, consolidated: bool = False) -> Batch | None:
        """The output updates for input updates ``delta`` (every epoch of it, in order; ``consolidated``: its
        equal rows at equal times summed already)."""
        epochs = delta.times[:, 0]
        if not len(delta):
            return None
        if np.count_nonzero(epochs != epochs[0]) == 0:
            return self._apply(delta if consolidated else consolidate(delta)[0], int(epochs[0]))
        outs = [
            self._apply(consolidate(delta.take(epochs == e))[0], int(e)) for e in np.unique(epochs).tolist()
        ]
        outs = [o for o in outs if o is not None]
        return Batch.concat(outs) if outs else None

    def _apply(self, d: Batch, epoch: int) -> Batch | None:
        if not len(d):
            return None
        k = self.nkey
        h = key_hash(d.columns[:k], d.valid[:k], len(d))
        uh, part_of = np.unique(h, return_inverse=True)
        part_of = part_of.reshape(-1)
        lo, hi = self.rows.hash_ranges(uh)
        # segments, in order: rows [sa, sb), the rows the changes reach [ra, rb), the place in its partition of
        # the segment's first row (after the changes before it) and the partition's size (-1: the segment is
        # its partitions, whole); one per partition, or the slices of a large one
        per = np.ones(len(uh), dtype=np.int64)
        sliced = {}
        big = [] if self.reach.whole else np.flatnonzero(hi - lo > BIG).tolist()
        if big:
            by_part = np.argsort(part_of, kind="stable")
            first = np.searchsorted(part_of[by_part], np.arange(len(uh) + 1))
            for i in big:
                sel = by_part[first[i] : first[i + 1]]
                found = self._slice(int(lo[i]), int(hi[i]), d, sel)
                if found is not None:
                    sliced[i] = (sel, *found)
                    per[i] = len(found[1])
        at = np.concatenate(([0], np.cumsum(per)[:-1]))
        seg_of = at[part_of]
        sa, sb = np.repeat(lo, per), np.repeat(hi, per)
        ra, rb = sa.copy(), sb.copy()
        base = np.zeros(len(sa), dtype=np.int64)
        size = np.full(len(sa), -1, dtype=np.int64)
        for i, (sel, cuts, parts) in sliced.items():
            seg_of[sel] += cuts
            f = int(lo[i])
            for c, (a, b, x, y, before) in enumerate(parts):
                sa[at[i] + c], sb[at[i] + c], ra[at[i] + c], rb[at[i] + c] = a, b, x, y
                base[at[i] + c] = a - f + before
                size[at[i] + c] = int(hi[i]) - f + int(d.diffs[sel].sum())
        anchor = np.where(sa > np.repeat(lo, per), sa - 1, -1)  # the row before a slice inside its partition
        return self._recompute(d, h, seg_of, sa, sb, ra, rb, base, size, anchor, epoch)

    def _slice(self, f: int, end: int, d: Batch, sel: np.ndarray):
        """For changes ``d[sel]`` to the partition at ``[f, end)`` (larger than ``BIG``): the slices to compute,
        each ``(sa, sb, ra, rb, moved)``: its rows ``[sa, sb)``, those its changes reach ``[ra, rb)`` and the
        rows the changes before it added (less those they took); and the slice of each change. None when the
        rows there are of more than one partition (keys whose hashes are equal), or the changes need more than
        ``MANY_SLICES`` slices: the partition is computed whole. Changes far enough apart get slices of their
        own, unless the rows between move along (an insertion before them under ``ROW_NUMBER``)."""
        k, r = self.nkey, self.reach
        ec, ev, _ = self.rows.take(np.array([f, end - 1], dtype=np.int64))
        kc = [c[sel] for c in d.columns[:k]]
        kv = [_at(m, sel) for m in d.valid[:k]]
        n = len(sel)
        for i in (0, 1):  # the partition's first and last rows: of the changes' key, else keys share the hash
            ic = [c[i : i + 1].repeat(n) for c in ec[:k]]
            iv = [None if m is None else m[i : i + 1].repeat(n) for m in ev[:k]]
            if not rows_equal(kc, kv, ic, iv, n=n).all():
                return None
        qc = [c[sel] for c in d.columns]
        qv = [_at(m, sel) for m in d.valid]
        diffs = d.diffs[sel]
        moved = int(np.abs(diffs).sum())
        # rows after a change that keeps the size of the rows up to it move nowhere
        shifts = r.after != r.still_after or r.peer_hi != r.still_peer_hi
        peer_hi = r.still_peer_hi if shifts else r.peer_hi
        if r.peer_lo == peer_hi:  # both bounds in one search
            both = self._bounds(
                f,
                end,
                [np.tile(c, 2) for c in qc],
                [None if m is None else np.tile(m, 2) for m in qv],
                not r.peer_lo,
                np.arange(2 * n) >= n,
            )
            lo, hi = both[:n], both[n:]
        else:
            lo = self._bounds(f, end, qc, qv, not r.peer_lo, False)
            hi = self._bounds(f, end, qc, qv, not peer_hi, True)
        order = np.argsort(lo, kind="stable")
        lo, hi, diffs = lo[order], hi[order], diffs[order]
        # each change's slice, as if alone; a slice starts a new one past the end of those before it, where the
        # changes before it left the row count as it was (when rows move along)
        reach_lo = np.maximum(lo - r.before - moved, f)
        reach_hi = np.minimum(hi + r.still_after + moved, end)
        seg_lo = np.maximum(reach_lo - r.read_before, f)
        seg_hi = np.minimum(reach_hi + r.read_after, end)
        net = np.cumsum(diffs)
        cut = np.zeros(n, dtype=bool)
        cut[1:] = seg_lo[1:] > np.maximum.accumulate(seg_hi)[:-1]
        if shifts:
            cut[1:] &= net[:-1] == 0
        first = np.flatnonzero(np.append(True, cut[1:]))
        if len(first) > MANY_SLICES:
            return None  # changes all over the partition: computed whole, at once
        last = np.append(first[1:], n) - 1
        parts = []
        for a, b in zip(first.tolist(), last.tolist(), strict=True):
            ra, rb = int(reach_lo[a]), int(reach_hi[a : b + 1].max())
            if shifts and net[b] != 0:
                rb = end  # the rows after move along
            sa, sb = max(f, ra - r.read_before), min(end, rb + r.read_after)
            if r.align_lo and sa > f:
                rc, rv, _ = self.rows.take(np.array([sa], dtype=np.int64))
                sa = int(self._bounds(f, end, rc[: self.nin], rv[: self.nin], False, False)[0])
            if r.align_hi and sb < end:
                rc, rv, _ = self.rows.take(np.array([sb - 1], dtype=np.int64))
                sb = int(self._bounds(f, end, rc[: self.nin], rv[: self.nin], False, True)[0])
            before = int(net[a - 1]) if a else 0
            if parts and sa < parts[-1][1]:  # peers joined it to the slice before
                psa, _, pra, _, pbefore = parts.pop()
                sa, ra, before = psa, pra, pbefore
            parts.append((sa, sb, ra, rb, before))
        # the slice of each change (in the changes' order): the last slice starting at or before its first row
        which = np.searchsorted([p[0] for p in parts], lo, "right") - 1
        cuts = np.empty(n, dtype=np.int64)
        cuts[order] = which
        return cuts, parts

    def _recompute(self, d, h, seg_of, sa, sb, ra, rb, base, size, anchor, epoch) -> Batch | None:
        """Merge each segment's rows with its changes, compute them, emit what differs and put them back."""
        nin = self.nin
        mg = self._merge(d, h, seg_of, sa, sb)
        ocols, ovalid, ucols, uvalid, src, gone = mg.ocols, mg.ovalid, mg.ucols, mg.uvalid, mg.src, mg.gone
        kept_old = src < len(ocols[0])
        sseg = mg.useg[src]
        nseg_new = np.bincount(sseg, minlength=len(sa))
        new_cols, new_valid = self._compute(mg, sseg, nseg_new, base, size, anchor)
        # the rows the changes reach, by their place in their segment
        seg_first = np.concatenate(([0], np.cumsum(nseg_new)[:-1]))
        j = np.arange(len(src)) - seg_first[sseg]
        inside = (j >= (ra - sa)[sseg]) & (j < (nseg_new - (sb - rb))[sseg])
        # the values emitted before, for the old copies kept
        nout = len(self.out_dtypes) - nin
        old_at = src[kept_old]
        ov = [ocols[nin + c][old_at] for c in range(nout)]
        om = [None if ovalid[nin + c] is None else ovalid[nin + c][old_at] for c in range(nout)]
        nv = [new_cols[c][kept_old] for c in range(nout)]
        nm = [None if new_valid[c] is None else new_valid[c][kept_old] for c in range(nout)]
        differs = np.zeros(len(old_at), dtype=bool)
        for a, am, b, bm in zip(ov, om, nv, nm, strict=True):
            differs |= _differ(a, am, b, bm)
        differs &= inside[kept_old]
        if np.count_nonzero(~inside[~kept_old]):
            raise AssertionError("a new row outside the rows a change reaches")
        # what goes out: the copies gone and the old values that change, then the new copies and new values
        changed = np.flatnonzero(kept_old)[differs]  # among the new rows
        added = np.flatnonzero(~kept_old)
        row_cols = [ucols[j] for j in range(nin)]
        row_valid = [uvalid[j] for j in range(nin)]
        minus_src = np.concatenate((gone, src[changed]))
        plus = np.concatenate((changed, added))
        out_cols, out_valid = [], []
        for j in range(nin):
            m = row_valid[j]
            out_cols.append(np.concatenate((row_cols[j][minus_src], row_cols[j][src[plus]])))
            out_valid.append(None if m is None else np.concatenate((m[minus_src], m[src[plus]])))
        for c in range(nout):
            oc, om_ = ocols[nin + c], ovalid[nin + c]
            nc, nm_ = new_cols[c], new_valid[c]
            out_cols.append(np.concatenate((oc[minus_src], nc[plus])))
            out_valid.append(
                None
                if om_ is None and nm_ is None
                else concat_masks([_at(om_, minus_src), _at(nm_, plus)], [len(minus_src), len(plus)])
            )
        nm_out = len(minus_src) + len(plus)
        # the new rows go back, with new values where the changes reach and the old ones elsewhere
        keep_cols = [c[src] for c in row_cols]
        keep_valid = [_at(m, src) for m in row_valid]
        for c in range(nout):
            value = new_cols[c].copy()
            mask = None if new_valid[c] is None else new_valid[c].copy()
            outside = np.flatnonzero(~inside)
            if len(outside):
                old_rows = src[outside]
                value[outside] = ocols[nin + c][old_rows]
                if ovalid[nin + c] is not None or mask is not None:
                    mask = np.ones(len(src), dtype=bool) if mask is None else mask
                    mask[outside] = True if ovalid[nin + c] is None else ovalid[nin + c][old_rows]
            keep_cols.append(value)
            keep_valid.append(mask)
        self.rows.splice(
            list(zip(sa.tolist(), sb.tolist(), strict=True)), keep_cols, keep_valid, mg.uhash[src], nseg_new
        )
        if nm_out == 0:
            return None
        diffs = np.concatenate((-np.ones(len(minus_src), dtype=np.int64), np.ones(len(plus), dtype=np.int64)))
        return Batch.build(out_cols, out_valid, np.full((nm_out, 1), epoch, dtype=np.int64), diffs)

    def _merge(self, d: Batch, h: np.ndarray, seg_of: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> _Merged:
        """The rows of the segments ``[sa, sb)`` with the changes ``d`` (their hashes ``h``, segments
        ``seg_of``) merged in: old copies of a row kept while the row has as many, new copies after them."""
        nin, nseg = self.nin, len(sa)
        lengths = sb - sa
        pos = np.repeat(sa - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(lengths.sum())
        ocols, ovalid, ohash = self.rows.take(pos)
        no, nd = len(pos), len(d)
        # old copies and the changes, in order: the copies of a row first, then its change
        ucols = [np.concatenate((ocols[j], d.columns[j])) for j in range(nin)]
        uvalid = [concat_masks([ovalid[j], d.valid[j]], [no, nd]) for j in range(nin)]
        uhash = np.concatenate((ohash, h))
        useg = np.concatenate((np.repeat(np.arange(nseg), lengths), seg_of))
        flag = np.concatenate((np.zeros(no, dtype=np.int64), np.ones(nd, dtype=np.int64)))
        uorder = self.window._order_keys(tuple(ucols[self.nkey :]), tuple(uvalid[self.nkey :]))
        order, starts = _sort_with_groups([useg, *self._keys(ucols, uvalid, uhash, True, uorder)], flag)
        # per run of copies of one row: the old copies, the change, and how many copies there are now
        is_old = order < no
        run = np.cumsum(starts) - 1
        run_start = np.flatnonzero(starts)
        nold = np.add.reduceat(is_old.astype(np.int64), run_start)
        change = np.zeros(len(run_start), dtype=np.int64)
        at = np.flatnonzero(~is_old)
        change[run[at]] = d.diffs[order[at] - no]
        now = nold + change
        if np.count_nonzero(now < 0):
            raise ValueError("a window's input holds a row a negative number of times")
        rank = np.arange(len(order)) - run_start[run]
        copies = (is_old & (rank < now[run])).astype(np.int64)
        copies[at] = np.maximum(now[run[at]] - nold[run[at]], 0)
        gone = order[np.flatnonzero(is_old & (copies == 0))]
        src = np.repeat(order, copies)
        return _Merged(ocols, ovalid, ucols, uvalid, uhash, useg, uorder, src, gone)

    def _compute(self, m: _Merged, sseg, counts, base, size, anchor) -> tuple[list, list]:
        """The calls' values for the merged rows (segment ``sseg`` each, ``counts`` per segment)."""
        src, nkey = m.src, self.nkey
        pk = sort_keys([c[src] for c in m.ucols[:nkey]], [_at(v, src) for v in m.uvalid[:nkey]], None, False)
        gid_start = group_starts([sseg, *pk], len(src))
        gid = np.cumsum(gid_start) - 1
        gseg = sseg[gid_start]
        natural = np.diff(np.append(np.flatnonzero(gid_start), len(src)))
        gsize = np.where(size[gseg] >= 0, size[gseg], natural)
        gbase = base[gseg]
        vcols = tuple(m.ucols[j][src] for j in range(nkey, self.nin))
        vvalid = tuple(_at(v, src) for v in m.uvalid[nkey : self.nin])
        okeys = [k[src] for k in m.uorder]
        held = bool(np.count_nonzero(anchor >= 0))
        if self.as_row and held:
            rest, rest_valid = self.rest_window.evaluate_sorted(gid, vcols, vvalid, gbase, gsize, okeys)
            new_cols, new_valid = [None] * len(self.window.calls), [None] * len(self.window.calls)
            for i, c, v in zip(self.rest, rest, rest_valid, strict=True):
                new_cols[i], new_valid[i] = c, v
        else:
            new_cols, new_valid = map(
                list, self.window.evaluate_sorted(gid, vcols, vvalid, gbase, gsize, okeys)
            )
        if self.anchored and held:
            args = (anchor, sseg, counts, gid, vcols, vvalid, okeys, gbase, gsize, new_cols, new_valid)
            new_cols, new_valid = self._from_anchors(*args)
        return list(new_cols), list(new_valid)

    def _from_anchors(self, anchor, sseg, counts, gid, vcols, vvalid, okeys, base, size, new_cols, new_valid):
        """The anchored calls' values (see ``anchored``) in the slices that start inside their partitions, from
        the values of the rows before them (``anchor``, per segment; -1 for none)."""
        held = np.flatnonzero((anchor >= 0) & (counts > 0))
        if not len(held):
            return tuple(new_cols), tuple(new_valid)
        acols, avalid, _ = self.rows.take(anchor[held])
        firsts = np.concatenate(([0], np.cumsum(counts)[:-1]))[held]  # each such slice's first new row
        per_row = np.full(len(counts), -1, dtype=np.int64)
        per_row[held] = np.arange(len(held))
        row_anchor = per_row[sseg]  # the anchor of each new row (-1: none)
        inside = np.flatnonzero(row_anchor >= 0)
        for i in self.anchored:
            c = self.window.calls[i]
            value, mask = acols[self.nin + i], avalid[self.nin + i]
            if c.func in _ADDED:
                new_cols[i] = new_cols[i].copy()
                new_cols[i][inside] += value[row_anchor[inside]]
                continue
            if c.func == "last_value":
                continue
            # the anchor's value as a row of its own before each slice's first row, then taken out again
            at = firsts
            cols = list(vcols)
            valid = list(vvalid)
            if c.func == "sum":  # the anchor's sum may need more bits than the values
                cols[c.arg] = cols[c.arg].astype(value.dtype)
            for j in range(len(cols)):
                put = value if j == c.arg else cols[j][at]
                cols[j] = np.insert(cols[j], at, put)
                m = valid[j]
                pm = (np.ones(len(at), dtype=bool) if mask is None else mask) if j == c.arg else None
                if m is not None or pm is not None:
                    m = np.ones(len(vcols[j]), dtype=bool) if m is None else m
                    pm = m[at] if pm is None else pm
                    valid[j] = np.insert(m, at, pm)
            keys = [np.insert(k, at, k[at]) for k in okeys]
            keys.append(np.insert(np.zeros(len(gid), dtype=np.int64), at, 1))  # no peer of the row after it
            g = np.insert(gid, at, gid[at])
            out, out_valid = self.alone[i].evaluate_sorted(
                g,
                tuple(cols),
                tuple(valid),
                base,
                size,
                keys,  # (per run of rows: the runs are the same)
            )
            real = np.ones(len(g), dtype=bool)
            real[at + np.arange(len(at))] = False
            new_cols[i] = out[0][real]
            new_valid[i] = None if out_valid[0] is None else out_valid[0][real]
        return tuple(new_cols), tuple(new_valid)


class _Merged(NamedTuple):
    """A step's segments merged with their changes: the old rows (with their values), the union of the old
    rows and the changes (columns, hashes, segment, ORDER BY keys), and the new rows as indices into the
    union (``src``) with the old rows gone (``gone``)."""

    ocols: list
    ovalid: list
    ucols: list
    uvalid: list
    uhash: np.ndarray
    useg: np.ndarray
    uorder: list
    src: np.ndarray
    gone: np.ndarray


def _at(m: Mask, idx: np.ndarray) -> Mask:
    return None if m is None else m[idx]


def _differ(a: np.ndarray, am: Mask, b: np.ndarray, bm: Mask) -> np.ndarray:
    """Whether two values (with their validity) differ as rows would: -0.0 is not 0.0 here."""
    if a.dtype.kind == "f":
        ne = a.astype(np.float64).view(np.int64) != b.astype(np.float64).view(np.int64)
    else:
        ne = a != b
    if am is None and bm is None:
        return ne
    av = np.ones(len(a), dtype=bool) if am is None else am
    bv = np.ones(len(b), dtype=bool) if bm is None else bm
    return (av != bv) | (av & ne)


def _sort_with_groups(keys: list[np.ndarray], last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order by ``keys`` then ``last``, and where runs equal on ``keys`` (not ``last``) start."""
    order = lexsort([*keys, last])
    return order, group_starts([k[order] for k in keys], len(order))
