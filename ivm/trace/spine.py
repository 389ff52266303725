"""The spine: a trace as an append-only list of immutable sorted batches, merged geometrically.

Batches enter at the end. Whenever the newest batch is at least half as large as the one before it, the two
are scheduled to merge; small batches first gather at the end, a few at a time, and merge together. A merge
proceeds in key ranges, a bounded amount of work per inserted update (its "fuel"), so that no insertion pays
for a whole large merge; while it is under way readers see its two inputs. As a merge goes it advances every
time by the meet of the readers' frontiers and cancels updates that became indistinguishable, which bounds the
trace by the number of distinct live ``(row, time)`` pairs.
"""

from __future__ import annotations

import numpy as np

from ivm.batch import Batch, rows_equal
from ivm.lattice import Antichain
from ivm.trace.batch import TraceBatch, consolidation, expand_ranges, identity_hash
from ivm.trace.handle import TraceHandle

__all__ = ["Spine"]

FUEL_PER_UPDATE = 4
CHUNK = 1 << 16
MIN_CHUNK = 1 << 10
TAIL_BATCHES = 8  # small batches (under MIN_CHUNK updates) gathered at the end before they merge


class _Merge:
    """An in-progress merge of two adjacent batches, done chunk by chunk into preallocated arrays."""

    def __init__(self, older: TraceBatch, newer: TraceBatch, frontier: Antichain | None) -> None:
        self.inputs = (older, newer)
        self.frontier = frontier
        self.pos = [0, 0]
        self.result: TraceBatch | None = None
        self.size = len(older) + len(newer)
        self.out = _Buffer(older, newer)
        self.saved = 0

    def work(self, fuel: int) -> int:
        """Merge ``fuel`` input updates (or all that remain); return the fuel left. Fuel is saved up until it
        pays for a chunk of ``MIN_CHUNK`` updates, so that small insertions mostly merge nothing: the work per
        update is the same, without the cost of a chunk on every one."""
        fuel += self.saved
        self.saved = 0
        if fuel < MIN_CHUNK and self.size > MIN_CHUNK:
            self.saved = fuel
            return 0
        a, b = self.inputs
        while self.result is None and fuel > 0:
            step = max(min(fuel, CHUNK), MIN_CHUNK)
            ia, ib = self.pos
            ea = min(len(a), ia + step)
            if ea < len(a):
                bound = a.hashes[ea]
                ea = int(np.searchsorted(a.hashes, bound, side="left"))
                eb = int(np.searchsorted(b.hashes, bound, side="left"))
                if ea == ia and eb == ib:
                    ea = int(np.searchsorted(a.hashes, bound, side="right"))
                    eb = int(np.searchsorted(b.hashes, bound, side="right"))
            else:
                eb = len(b)
            self._merge_range(ia, ea, ib, eb)
            fuel -= (ea - ia) + (eb - ib)
            self.pos = [ea, eb]
            if ea == len(a) and eb == len(b):
                self._finish()
        return fuel

    def _merge_range(self, ia: int, ea: int, ib: int, eb: int) -> None:
        a, b = self.inputs
        ua = a.updates.take(slice(ia, ea))
        ub = b.updates.take(slice(ib, eb))
        both = Batch.concat([ua, ub])
        if len(both) == 0:
            return
        if self.frontier is not None and len(self.frontier):
            both = both.with_times(self.frontier.advance(both.times))
        h = np.concatenate([a.hashes[ia:ea], b.hashes[ib:eb]])
        # advancing single-coordinate times keeps each input sorted; product times may reorder
        presorted = len(ua) and len(ub) and both.dim == 1
        index, diffs = consolidation(both, h, a.nkey, split=len(ua) if presorted else None)
        self.out.append(both, h, index, diffs)

    def _finish(self) -> None:
        self.result = self.out.result(self.inputs[0].nkey)
        self.out = None
        self.inputs = ()

    def readable(self) -> list[TraceBatch]:
        return [self.result] if self.result is not None else list(self.inputs)


class _Buffer:
    """The output of a merge, written chunk by chunk into arrays sized for both inputs, so that finishing the
    merge copies nothing."""

    def __init__(self, a: TraceBatch, b: TraceBatch) -> None:
        n = len(a) + len(b)
        ua, ub = a.updates, b.updates
        self.columns = [np.empty(n, dtype=c.dtype) for c in ua.columns]
        self.valid = [
            None if ma is None and mb is None else np.empty(n, dtype=bool)
            for ma, mb in zip(ua.valid, ub.valid, strict=True)
        ]
        self.times = np.empty((n, ua.times.shape[1]), dtype=np.int64)
        self.diffs = np.empty(n, dtype=np.int64)
        # a key that is its own hash (one int64 column) shares its array with the hashes
        self.identity = a.hashes is ua.columns[0] and b.hashes is ub.columns[0]
        self.hashes = self.columns[0] if self.identity else np.empty(n, dtype=np.int64)
        self.filled = 0

    def append(self, u: Batch, hashes: np.ndarray, index: np.ndarray, diffs: np.ndarray) -> None:
        """Append the updates of ``u`` at ``index`` with new ``diffs``, gathered straight into the buffers
        (``mode="clip"``: the indices are valid, and numpy would otherwise gather into a temporary first)."""
        s, m = self.filled, len(index)
        e = s + m
        for buf, col in zip(self.columns, u.columns, strict=True):
            np.take(col, index, out=buf[s:e], mode="clip")
        for buf, mask in zip(self.valid, u.valid, strict=True):
            if buf is not None:
                if mask is None:
                    buf[s:e] = True
                else:
                    np.take(mask, index, out=buf[s:e], mode="clip")
        np.take(u.times, index, axis=0, out=self.times[s:e], mode="clip")
        self.diffs[s:e] = diffs
        if not self.identity:
            np.take(hashes, index, out=self.hashes[s:e], mode="clip")
        self.filled = e

    def result(self, nkey: int) -> TraceBatch:
        n = self.filled
        shrink = n * 2 < len(self.diffs)  # much cancelled: do not keep the large buffers alive

        def cut(x: np.ndarray) -> np.ndarray:
            return x[:n].copy() if shrink else x[:n]

        valid = tuple(None if m is None or m[:n].all() else cut(m) for m in self.valid)
        columns = tuple(cut(c) for c in self.columns)
        updates = Batch(columns, valid, cut(self.times), cut(self.diffs))
        return TraceBatch(updates, columns[0] if self.identity else cut(self.hashes), nkey)


class Spine:
    """A trace: sorted batches of updates keyed by their first ``nkey`` columns, shared by handles."""

    def __init__(self, nkey: int, dtypes: tuple, dim: int) -> None:
        self.nkey = nkey
        self.dtypes = dtypes
        self.dim = dim
        self.entries: list[TraceBatch | _Merge] = []
        self.handles: list[TraceHandle] = []
        self.freed = False
        self.inserted = 0
        self._since = Antichain(np.zeros((1, dim), dtype=np.int64))
        self._since_stale = False

    # -- handles ---------------------------------------------------------------------------------
    def handle(self, frontier: Antichain | None = None) -> TraceHandle:
        """A new reader with the given frontier (default: the trace's current compaction frontier)."""
        if self.freed:
            raise RuntimeError("trace has been freed")
        return TraceHandle(self, frontier if frontier is not None else self.since)

    def _attach(self, handle: TraceHandle) -> None:
        self.handles.append(handle)

    def _detach(self, handle: TraceHandle) -> None:
        self.handles.remove(handle)
        if not self.handles:
            self.entries = []
            self.freed = True
        else:
            self._since_stale = True

    def _frontier_changed(self) -> None:
        """A handle moved its frontier: the meet is recomputed when next needed (handles advance on every
        step, merges and new handles read it far less often)."""
        self._since_stale = True

    @property
    def since(self) -> Antichain:
        """The compaction frontier: the meet of the handles' frontiers."""
        if self._since_stale and self.handles:
            self._since_stale = False
            fronts = [h.frontier for h in self.handles]
            if all(len(f) == 1 for f in fronts):
                rows = np.concatenate([f.elements for f in fronts])
                least = rows.min(axis=0)
                if (rows == least).all(axis=1).any():  # one frontier is below all others: it is the meet
                    self._since = Antichain(least.reshape(1, -1))
                    return self._since
            frontier = fronts[0]
            for f in fronts[1:]:
                frontier = frontier.meet(f)
            self._since = frontier
        return self._since

    # -- writing ---------------------------------------------------------------------------------
    def insert(self, batch: TraceBatch) -> None:
        """Append a sorted batch and spend merge effort proportional to its size."""
        if self.freed:
            return
        n = len(batch)
        if n:
            self.entries.append(batch)
            self.inserted += n
            self._schedule_merges()
        self.exert(max(n, 1) * FUEL_PER_UPDATE)

    def exert(self, fuel: int) -> None:
        """Spend ``fuel`` on each merge under way, oldest (largest) first."""
        for i, e in enumerate(self.entries):
            if isinstance(e, _Merge):
                e.work(fuel)
                if e.result is not None:
                    self.entries[i] = e.result
        self.entries = [e for e in self.entries if isinstance(e, _Merge) or len(e)]

    def _schedule_merges(self) -> None:
        # small batches (as small transactions bring) wait at the end until there are TAIL_BATCHES of them,
        # then merge all at once: one merge per several insertions instead of about one per insertion
        small = 0
        for e in reversed(self.entries):
            if isinstance(e, _Merge) or len(e) >= MIN_CHUNK:
                break
            small += 1
        if 0 < small < TAIL_BATCHES:
            return
        if small > 1:
            self.entries[-small:] = [_merged(self.entries[-small:], self.since)]
            if len(self.entries[-1]) < MIN_CHUNK:
                return
        while len(self.entries) >= 2:
            older, newer = self.entries[-2], self.entries[-1]
            if _weight(newer) * 2 < _weight(older):
                break
            older_b, newer_b = self._complete(older), self._complete(newer)
            if len(older_b) + len(newer_b) <= MIN_CHUNK:
                self.entries[-2:] = [_merged([older_b, newer_b], self.since)]
            else:
                self.entries[-2:] = [_Merge(older_b, newer_b, self.since)]
            if len(self.entries) >= 2 and _weight(self.entries[-1]) * 2 >= _weight(self.entries[-2]):
                continue
            break

    @staticmethod
    def _complete(e: TraceBatch | _Merge) -> TraceBatch:
        if isinstance(e, _Merge):
            e.work(1 << 62)
            return e.result
        return e

    def compact_fully(self) -> None:
        """Merge everything into one batch now (for tests and explicit maintenance, not the hot path)."""
        batches = self.batches()
        self.entries = []
        if batches:
            m = batches[0]
            for b in batches[1:]:
                m = self._complete(_Merge(m, b, self.since))
            if len(self.since):
                m = self._complete(_Merge(m, _empty_like(m), self.since))
            self.entries = [m] if len(m) else []

    # -- reading ---------------------------------------------------------------------------------
    def batches(self) -> list[TraceBatch]:
        """The readable batches, oldest first; their union is the whole trace."""
        out: list[TraceBatch] = []
        for e in self.entries:
            if isinstance(e, _Merge):
                out.extend(b for b in e.readable() if len(b))
            elif len(e):
                out.append(e)
        return out

    def __len__(self) -> int:
        """Updates currently stored (in all readable batches)."""
        return sum(len(b) for b in self.batches())

    def gather(self, hashes: np.ndarray, cols: tuple, valid: tuple) -> tuple[Batch | None, np.ndarray]:
        """All updates whose key equals one of the query keys, with the index of that query key each.

        The query keys must be distinct. Work is proportional to the queries' log-seeks and the matches.
        """
        parts = []
        qidx = []
        if len(hashes) == 0:
            return None, np.zeros(0, dtype=np.int64)
        least, most = int(hashes.min()), int(hashes.max())
        for b in self.batches():
            if not b.may_hold(least, most):
                continue
            lo, hi = b.seek(hashes)
            if not (hi > lo).any():
                continue
            q, r = expand_ranges(lo, hi)
            parts.append(b.updates.take(r))
            qidx.append(q)
        if not parts:
            return None, np.zeros(0, dtype=np.int64)
        out, q = Batch.concat(parts), np.concatenate(qidx)
        if not identity_hash(cols, valid, hashes):
            mine = out.select(range(self.nkey))
            theirs = (tuple(c[q] for c in cols), tuple(None if m is None else m[q] for m in valid))
            ok = rows_equal(*theirs, *mine)
            if not ok.all():
                out, q = out.take(ok), q[ok]
        return out, q


def _merged(batches: list[TraceBatch], frontier: Antichain) -> TraceBatch:
    """Small batches merged at once (what a ``_Merge`` does chunk by chunk, without its buffers)."""
    both = Batch.concat([b.updates for b in batches])
    if len(frontier):
        both = both.with_times(frontier.advance(both.times))
    h = np.concatenate([b.hashes for b in batches])
    # advancing single-coordinate times keeps each input sorted: two runs merge rather than sort
    two = len(batches) == 2 and len(batches[0]) and len(batches[1]) and both.dim == 1
    return TraceBatch.consolidated(both, h, batches[0].nkey, split=len(batches[0]) if two else None)


def _weight(e: TraceBatch | _Merge) -> int:
    return e.size if isinstance(e, _Merge) else len(e)


def _empty_like(b: TraceBatch) -> TraceBatch:
    return TraceBatch(b.updates.take(slice(0, 0)), b.hashes[:0], b.nkey)
