"""The spine: a trace as an append-only list of immutable sorted batches, merged geometrically.

Batches enter at the end and are merged in tiers: batches whose sizes are within a factor of four share a tier,
and four batches of one tier merge into one of the next, so that an update is copied once per tier (about
log4 of the trace's size in batches), while readers search at most three batches per tier. A batch older and
smaller than a newer one merges into it. Small batches first gather at the end, a few at a time, and merge
together. A merge proceeds in key ranges, a bounded amount of work per inserted update (its "fuel"), so that
no insertion pays for a whole large merge; while it is under way readers see its inputs. As a merge goes it
advances every time by the meet of the readers' frontiers and cancels updates that became indistinguishable,
which bounds the trace by the number of distinct live ``(row, time)`` pairs.
"""

from __future__ import annotations

import numpy as np

from ivm.engine.batch import Batch, rows_equal
from ivm.engine.lattice import Antichain
from ivm.engine.trace.batch import TraceBatch, consolidation, expand_ranges, identity_hash
from ivm.engine.trace.handle import TraceHandle
from ivm.engine.trace.seek import FEW_QUERIES

__all__ = ["Spine"]

FUEL_PER_UPDATE = 4
CHUNK = 1 << 16
MIN_CHUNK = 1 << 10
TAIL_BATCHES = 8  # small batches (under MIN_CHUNK updates) gathered at the end before they merge
UNREAD_MAX = 32  # small batches inserted and not read yet that go in as one (see ``Spine.insert``)
MERGE_WIDTH_BITS = 2
MERGE_WIDTH = 1 << MERGE_WIDTH_BITS  # batches of one tier merge this many at a time
_INT64_MAX = np.iinfo(np.int64).max
_NONE = np.zeros(0, dtype=np.int64)  # no rows (never written to)
_NONE.flags.writeable = False
_ONE = np.ones((), dtype=np.int64)  # (a zero-dimensional array is added to an array faster than an int)
FLAT_MAX = 1 << 16  # a trace of at most this many updates keeps them laid end to end as well (see ``_Flat``)
INDEX_READS = 3  # lookups of such a trace unchanged after which its hashes are sorted together (``_Flat``)


class _Merge:
    """An in-progress merge of adjacent batches (oldest first), done in key ranges into preallocated arrays."""

    def __init__(self, inputs: list[TraceBatch], frontier: Antichain | None) -> None:
        self.inputs = tuple(inputs)
        self.frontier = frontier
        self.pos = [0] * len(inputs)
        self.result: TraceBatch | None = None
        self.size = sum(len(b) for b in inputs)
        self.out = _Buffer(self.inputs)
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
        inputs = self.inputs
        while self.result is None and fuel > 0:
            step = max(min(fuel, CHUNK), MIN_CHUNK)
            starts = self.pos
            # the input with the most left paces the range; the others stop where its hashes do
            left = [len(b) - p for b, p in zip(inputs, starts, strict=True)]
            lead = left.index(max(left))
            if left[lead] <= step:
                ends = [len(b) for b in inputs]
            else:
                bound = inputs[lead].hashes[starts[lead] + step]
                ends = [int(np.searchsorted(b.hashes, bound, side="left")) for b in inputs]
                if ends == starts:
                    ends = [int(np.searchsorted(b.hashes, bound, side="right")) for b in inputs]
            self._merge_range(starts, ends)
            fuel -= sum(ends) - sum(starts)
            self.pos = ends
            if all(e == len(b) for e, b in zip(ends, inputs, strict=True)):
                self._finish()
        return fuel

    def _merge_range(self, starts: list[int], ends: list[int]) -> None:
        spans = [(b, s, e) for b, s, e in zip(self.inputs, starts, ends, strict=True) if e > s]
        if not spans:
            return
        both = Batch.concat([b.updates.take(slice(s, e)) for b, s, e in spans])
        if self.frontier is not None and len(self.frontier):
            both = both.with_times(self.frontier.advance(both.times))
        h = np.concatenate([b.hashes[s:e] for b, s, e in spans])
        # advancing single-coordinate times keeps each input sorted (the sort below then merges their runs);
        # product times may reorder
        split = spans[0][2] - spans[0][1] if len(spans) == 2 and both.dim == 1 else None
        index, diffs = consolidation(both, h, self.inputs[0].nkey, split=split)
        self.out.append(both, h, index, diffs)

    def _finish(self) -> None:
        self.result = self.out.result(self.inputs[0].nkey)
        self.out = None
        self.inputs = ()

    def readable(self) -> list[TraceBatch]:
        return [self.result] if self.result is not None else list(self.inputs)


class _Buffer:
    """The output of a merge, written chunk by chunk into arrays sized for all its inputs, so that finishing
    the merge copies nothing."""

    def __init__(self, inputs: tuple[TraceBatch, ...]) -> None:
        n = sum(len(b) for b in inputs)
        first = inputs[0].updates
        self.columns = [np.empty(n, dtype=c.dtype) for c in first.columns]
        self.valid = [
            None if all(b.updates.valid[i] is None for b in inputs) else np.empty(n, dtype=bool)
            for i in range(len(first.valid))
        ]
        self.times = np.empty((n, first.times.shape[1]), dtype=np.int64)
        self.diffs = np.empty(n, dtype=np.int64)
        # a key that is its own hash (one int64 column) shares its array with the hashes
        self.identity = all(b.hashes is b.updates.columns[0] for b in inputs)
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


class _Flat:
    """The readable batches of a small trace laid end to end in one set of arrays, so that a lookup gathers
    what it finds in all the batches with one take per column, instead of one per batch and column: a lookup
    of a few keys in a trace of many small batches (a loop's, one per round) costs little more than in one.

    Kept in step with the batches when read: the batches appended since are copied after the others, and
    from the first batch that changed (merges replace a run of batches by one) the rows are written again, so
    that keeping it costs about what the merges copy anyway. Only for traces of at most ``FLAT_MAX``
    updates (it doubles what they hold).

    A trace read again and again unchanged (as an arrangement of a collection that changes once a step, read at
    every round of a loop) is also searched as one: its hashes sorted together (an *index*, and the row of
    each), so that a lookup is one search rather than one per batch. Batches appended to such a trace join
    its index as they come (``_index_appended``), while it is read as often between changes."""

    __slots__ = (
        "batches",
        "starts",
        "hashes",
        "first",
        "columns",
        "valid",
        "times",
        "diffs",
        "size",
        "shape",
        "reads",
        "index",
        "row_of",
    )

    def __init__(self) -> None:
        self.batches: list[TraceBatch] = []
        self.starts: list[int] = [0]  # the first row of each batch, and the end of the last
        self.hashes: list[np.ndarray] = []  # each batch's key hashes (its own array)
        self.first = np.zeros((0, 1), dtype=np.int64)  # the first row of each batch (a column)
        self.columns: list[np.ndarray] = []
        self.valid: list[np.ndarray | None] = []
        self.times = np.zeros((0, 0), dtype=np.int64)
        self.diffs = np.zeros(0, dtype=np.int64)
        self.size = 0
        self.shape = -1
        self.reads = 0  # lookups since the batches last changed
        self.index: np.ndarray | None = None  # every row's hash, sorted (when read again unchanged)
        self.row_of = _NONE  # the row of each hash of the index

    def sync(self, batches: list[TraceBatch], shape: int) -> None:
        """Lay out ``batches`` (the trace's readable batches now, at least one; ``shape`` counts the changes
        of the trace other than appending a batch)."""
        old = self.batches
        if shape == self.shape:  # batches were only appended since
            keep = len(old)
            if keep == len(batches):
                return
        else:
            keep = 0
            while keep < len(old) and keep < len(batches) and old[keep] is batches[keep]:
                keep += 1
            self.shape = shape
        first = batches[0].updates
        if len(self.columns) != first.arity or self.times.shape[1] != first.dim:
            keep = 0  # laid out for nothing yet
        at = self.starts[keep]
        starts = self.starts[: keep + 1]
        for b in batches[keep:]:
            starts.append(starts[-1] + len(b))
        total = starts[-1]
        if keep == 0 or total > len(self.diffs):
            self._grow(first, at, max(total, 2 * len(self.diffs)))
        pos = at
        for b in batches[keep:]:
            u, end = b.updates, pos + len(b)
            for buf, col in zip(self.columns, u.columns, strict=True):
                buf[pos:end] = col
            for j, mask in enumerate(u.valid):
                if mask is not None and self.valid[j] is None:
                    self.valid[j] = np.ones(len(self.diffs), dtype=bool)
                if self.valid[j] is not None:
                    self.valid[j][pos:end] = True if mask is None else mask
            self.times[pos:end] = u.times
            self.diffs[pos:end] = u.diffs
            pos = end
        self.batches = batches  # (a spine never changes a list of readable batches it gave out)
        added = [b.hashes for b in batches[keep:]]
        if self.index is not None and keep == len(old) and self.reads >= INDEX_READS:
            self._index_appended(added, at)
        else:
            self.index = None
        self.reads = 0
        self.starts = starts
        self.hashes = [*self.hashes[:keep], *added]
        self.first = np.array(starts[:-1], dtype=np.int64).reshape(-1, 1)
        self.size = total

    def _index_appended(self, added: list[np.ndarray], at: int) -> None:
        """Take the hashes of batches appended at row ``at`` (``added``) into the index: the index of a trace
        read again and again between changes (as an arrangement outside a loop, changed once a step and read
        at every round) stays searchable as one without sorting all its hashes again, only copied once with
        the new ones in their places (after the equal ones before them: a hash's rows stay in order)."""
        h = added[0] if len(added) == 1 else np.concatenate(added)
        rows = np.arange(at, at + len(h), dtype=np.int64)
        if len(added) > 1:
            order = h.argsort(kind="stable")
            h, rows = h[order], rows[order]
        pos = self.index.searchsorted(h, "right")
        self.index = np.insert(self.index, pos, h)
        self.row_of = np.insert(self.row_of, pos, rows)

    def find(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows whose key hash is one of ``hashes`` (fewer than ``FEW_QUERIES``, ascending, the greatest
        below the greatest int64), with the index of that hash each: one search in every batch, or in the
        index (for each hash, where it starts and where the next one would). A hash's rows come in order."""
        k = len(hashes)
        both = np.concatenate((hashes, hashes + _ONE))
        self.reads += 1
        if self.index is not None or self.reads > INDEX_READS:
            if self.index is None:
                h = np.concatenate(self.hashes)
                self.row_of = h.argsort(kind="stable")
                self.index = h[self.row_of]
            bounds = self.index.searchsorted(both)
            lo = bounds[:k]
            counts = bounds[k:] - lo
            ends = np.add.accumulate(counts)
            total = int(ends[-1])
            if total == 0:
                return _NONE, _NONE
            q = np.arange(k).repeat(counts)
            at = np.arange(total, dtype=np.int64) - (ends - counts - lo).repeat(counts)
            return self.row_of[at], q
        bounds = np.array([h.searchsorted(both) for h in self.hashes])
        lo = bounds[:, :k]
        counts = (bounds[:, k:] - lo).ravel()
        some = counts.nonzero()[0]  # (batch, hash) pairs with rows, in batch order
        if not len(some):
            return some, some
        starts = (lo + self.first).ravel()[some]
        q = some % k
        counts = counts[some]
        ends = np.add.accumulate(counts)
        total = int(ends[-1])
        if total == len(some):  # one row per hash and batch
            return starts, q
        rows = np.arange(total, dtype=np.int64) - (ends - counts - starts).repeat(counts)
        return rows, q.repeat(counts)

    def _grow(self, like: Batch, keep: int, capacity: int) -> None:
        """Arrays for ``capacity`` rows of batches like ``like``, the first ``keep`` rows copied over."""
        if keep == 0:
            self.columns = [c[:0] for c in like.columns]
            self.valid = [None] * like.arity

        def bigger(old: np.ndarray, shape: tuple = ()) -> np.ndarray:
            new = np.empty((capacity, *shape), dtype=old.dtype)
            if keep:
                new[:keep] = old[:keep]
            return new

        self.columns = [bigger(c) for c in self.columns]
        self.valid = [None if m is None else bigger(m) for m in self.valid]
        self.times = bigger(self.times, (like.dim,))
        self.diffs = bigger(self.diffs)

    def source(self, rows: np.ndarray) -> np.ndarray:
        """The batch of each row."""
        return self.first.ravel().searchsorted(rows, "right") - 1

    def take(self, rows: np.ndarray, width: int | None = None) -> Batch:
        """The updates at ``rows`` (with their first ``width`` columns only, when given)."""
        cols = self.columns if width is None else self.columns[:width]
        valid = self.valid if width is None else self.valid[:width]
        return Batch(
            tuple([c[rows] for c in cols]),
            tuple([None if m is None else m[rows] for m in valid]),
            self.times.take(rows, axis=0),
            self.diffs[rows],
        )


class Spine:
    """A trace: sorted batches of updates keyed by their first ``nkey`` columns, shared by handles."""

    def __init__(self, nkey: int, dtypes: tuple, dim: int) -> None:
        self.nkey = nkey
        self.dtypes = dtypes
        self.dim = dim
        self.entries: list[TraceBatch | _Merge] = []
        self._readable: list[TraceBatch] | None = None  # what ``batches`` returns, until the entries change
        self._unread: list[TraceBatch] = []  # small batches inserted since the trace was last read
        self._shape = 0  # counts the changes of the entries other than appending a batch
        self._small: int | None = 0  # small batches at the end of the entries (None: to be counted again)
        self._flat: _Flat | None = None  # the readable batches laid end to end, while the trace is small
        self.handles: list[TraceHandle] = []
        self.freed = False
        self.inserted = 0
        self._merging = False  # whether some entry is a merge under way
        self._emptied = False  # whether entries may be empty batches (left by merges) to drop
        self._since = Antichain(np.zeros((1, dim), dtype=np.int64))
        self._since_stale = False
        self._fronts: list[Antichain] = []  # the handles' frontiers the meet ``_since`` was computed from

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
        self._readable = None
        if not self.handles:
            self._reshaped()
            self._emptied = False
            self.entries = []
            self._unread = []
            self._flat = None
            self.freed = True
        else:
            self._since_stale = True

    def _frontier_changed(self) -> None:
        """A handle moved its frontier: the meet is recomputed when next needed (merges and new handles read
        it far less often than frontiers move)."""
        self._since_stale = True

    @property
    def since(self) -> Antichain:
        """The compaction frontier: the meet of the handles' frontiers (those following a dataflow move with
        it: the meet is computed again when one of them is not the frontier it was)."""
        if not self.handles:
            return self._since
        fronts = [h.frontier for h in self.handles]
        last = self._fronts
        moved = len(last) != len(fronts) or any(a is not b for a, b in zip(fronts, last, strict=True))
        if self._since_stale or moved:
            self._since_stale = False
            self._fronts = fronts
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
        """Append a sorted batch and spend merge effort proportional to its size.

        A small batch waits, unread, until the trace is next read (``batches``) or ``UNREAD_MAX`` wait, and
        the batches that waited go in then as one, consolidated together: a trace written at every round of a
        loop and read seldom (as an arrangement only a join with a collection that seldom changes reads) takes
        one batch for many rounds, rather than a batch per round and a merge every few rounds."""
        if self.freed:
            return
        if 0 < len(batch) < MIN_CHUNK:
            self._unread.append(batch)
            if len(self._unread) >= UNREAD_MAX:
                self._take_unread()
            return
        if self._unread:
            self._take_unread()
        self._append(batch)

    def _take_unread(self) -> None:
        """Append the batches waiting unread, as one."""
        unread, self._unread = self._unread, []
        self._append(unread[0] if len(unread) == 1 else _merged(unread, self.since))

    def _append(self, batch: TraceBatch) -> None:
        n = len(batch)
        shape = self._shape
        if n:
            self.entries.append(batch)
            self.inserted += n
            if self._small is not None:
                self._small = self._small + 1 if n < MIN_CHUNK else 0
            self._schedule_merges()
        self.exert(max(n, 1) * FUEL_PER_UPDATE)
        if self._shape != shape or self._readable is None:
            self._readable = None
        elif n:  # only appended: the readable batches are those of before and this one
            self._readable = [*self._readable, batch]

    def _reshaped(self) -> None:
        """The entries changed other than by appending a batch (a merge replaced some)."""
        self._readable = None
        self._shape += 1
        self._small = None
        self._emptied = True

    def exert(self, fuel: int) -> None:
        """Spend ``fuel`` on each merge under way, oldest (largest) first."""
        if self._merging:
            for i, e in enumerate(self.entries):
                if isinstance(e, _Merge):
                    e.work(fuel)
                    if e.result is not None:
                        self.entries[i] = e.result
                        self._reshaped()
        if self._emptied:  # a merge finished, or merged small batches: what cancelled out goes
            self.entries = [e for e in self.entries if isinstance(e, _Merge) or len(e)]
            self._merging = any(isinstance(e, _Merge) for e in self.entries)
            self._emptied = False

    def _schedule_merges(self) -> None:
        # small batches (as small transactions bring) wait at the end until there are TAIL_BATCHES of them,
        # then the newest of them merge: one merge per several insertions instead of about one per insertion
        small = self._small
        if small is None:
            small = 0
            for e in reversed(self.entries):
                if isinstance(e, _Merge) or len(e) >= MIN_CHUNK:
                    break
                small += 1
            self._small = small
        if 0 < small < TAIL_BATCHES:
            return
        if small > 1:
            # an older small batch joins the newest once they hold as many updates as it does, so that a
            # batch is merged again only after the updates behind it have doubled
            # (sizes falling from each batch to the next would never merge: twice TAIL_BATCHES merge all)
            take, held = 1, len(self.entries[-1])
            while take < small and len(self.entries[-take - 1]) <= held:
                held += len(self.entries[-take - 1])
                take += 1
            if small >= 2 * TAIL_BATCHES:
                take = small
            if take > 1:
                self.entries[-take:] = [_merged(self.entries[-take:], self.since)]
                self._reshaped()
            if len(self.entries[-1]) < MIN_CHUNK:
                return
        entries = self.entries
        while len(entries) >= 2:
            newest = _level(entries[-1])
            if _level(entries[-2]) < newest:  # an older batch smaller than a newer one joins it
                group = 2
            else:
                group = MERGE_WIDTH
                if len(entries) < group or any(_level(e) != newest for e in entries[-group:]):
                    break
            parts = [self._complete(e) for e in entries[-group:]]
            if sum(len(b) for b in parts) <= MIN_CHUNK:
                entries[-group:] = [_merged(parts, self.since)]
            else:
                entries[-group:] = [_Merge(parts, self.since)]
                self._merging = True
            self._reshaped()

    def load(self, batches: list[TraceBatch]) -> None:
        """Take ``batches`` (as ``batches()`` gave them, oldest first) as the whole trace: a trace opened from
        a checkpoint. Later insertions merge with them as with any batches."""
        self.entries = [b for b in batches if len(b)]
        self._unread = []
        self._readable = None
        self._reshaped()
        self._merging = False
        self._emptied = False
        self.inserted = sum(len(b) for b in self.entries)

    @staticmethod
    def _complete(e: TraceBatch | _Merge) -> TraceBatch:
        if isinstance(e, _Merge):
            e.work(1 << 62)
            return e.result
        return e

    def compact_fully(self) -> None:
        """Merge everything into one batch now (for tests and explicit maintenance, not the hot path)."""
        batches = list(self.batches())
        self._readable = None
        self._reshaped()
        self._emptied = False
        self.entries = []
        if len(batches) == 1 and len(self.since):
            batches.append(_empty_like(batches[0]))  # a merge advances the times to the frontier
        if len(batches) > 1:
            m = self._complete(_Merge(batches, self.since))
            self.entries = [m] if len(m) else []
        elif batches:
            self.entries = batches

    # -- reading ---------------------------------------------------------------------------------
    def batches(self) -> list[TraceBatch]:
        """The readable batches, oldest first; their union is the whole trace."""
        if self._unread:
            self._take_unread()
        if self._readable is None:
            out: list[TraceBatch] = []
            for e in self.entries:
                if isinstance(e, _Merge):
                    out.extend(b for b in e.readable() if len(b))
                elif len(e):
                    out.append(e)
            self._readable = out
        return self._readable

    def __len__(self) -> int:
        """Updates currently stored (in all readable batches)."""
        return sum(len(b) for b in self.batches())

    def find(
        self, hashes: np.ndarray, keys_only: bool = False, many: int | None = None
    ) -> tuple[Batch | None, np.ndarray, np.ndarray | None]:
        """The updates whose key hash is one of ``hashes`` (ascending; not checked for exact key equality), with
        the index of that hash each (with ``keys_only``, the updates' key columns alone), and when ``many`` or
        more were found in several batches, the batch each comes from (else None). The ranges found
        in every batch are expanded together, and each batch holding some is read once (all at once in a small
        trace: see ``_Flat``)."""
        none = None, _NONE, None
        if len(hashes) == 0:
            return none
        batches = self.batches()
        nkey = self.nkey
        width = nkey if keys_only else None
        k = len(hashes)
        flat = self._flat_view(batches)
        if flat is not None and k < FEW_QUERIES and int(hashes[-1]) < _INT64_MAX:
            rows, q = flat.find(hashes)  # and one gather of what it found
            if not len(rows):
                return none
            source = flat.source(rows) if many is not None and len(rows) >= many else None
            return flat.take(rows, width), q, source
        found, lo, hi = seek_batches(batches, hashes)
        if not found:
            return none
        p, r = expand_ranges(lo, hi)
        if not len(p):
            return none
        if len(found) == 1:
            u = found[0].updates
            if keys_only:
                u = Batch(u.columns[:nkey], u.valid[:nkey], u.times, u.diffs)
            return u.take(r), p, None
        which = p // k  # the batch of each match, ascending: each batch's matches are one slice
        cuts = which.searchsorted(np.arange(1, len(found))).tolist()
        taken = []
        for b, s, e in zip(found, [0, *cuts], [*cuts, len(r)], strict=True):
            if e > s:
                u = b.updates
                if keys_only:
                    u = Batch(u.columns[:nkey], u.valid[:nkey], u.times, u.diffs)
                taken.append(u.take(r[s:e]))
        return Batch.concat(taken), p - which * k, which if many is not None and len(r) >= many else None

    def _flat_view(self, batches: list[TraceBatch]) -> _Flat | None:
        """The batches laid end to end, while the trace is small (from at most ``FLAT_MAX`` updates until it
        holds twice as many, so that a trace about that size does not lay itself out again and again)."""
        flat = self._flat
        if len(batches) < 2:  # one batch is read as it is
            self._flat = None
            return None
        if flat is None:
            if sum(len(b) for b in batches) > FLAT_MAX:
                return None
            flat = self._flat = _Flat()
        flat.sync(batches, self._shape)
        if flat.size > 2 * FLAT_MAX:
            self._flat = None
            return None
        return flat

    def gather(
        self, hashes: np.ndarray, cols: tuple, valid: tuple, keys_only: bool = False
    ) -> tuple[Batch | None, np.ndarray]:
        """All updates whose key equals one of the query keys, with the index of that query key each (with
        ``keys_only``, the updates hold their key columns alone).

        The query keys must be distinct, their hashes ascending. Work is proportional to the queries' log-seeks
        and the matches.
        """
        out, q, _ = self.find(hashes, keys_only)
        if out is None or identity_hash(cols, valid, hashes):
            return out, q
        nkey = self.nkey
        theirs = tuple([c[q] for c in cols]), tuple([None if m is None else m[q] for m in valid])
        ok = rows_equal(*theirs, out.columns[:nkey], out.valid[:nkey], n=len(q))
        if np.count_nonzero(ok) < len(ok):
            out, q = out.take(ok), q[ok]
        return out, q

    def count(self, hashes: np.ndarray, cols: tuple, valid: tuple) -> np.ndarray:
        """For each query row, the summed diffs of the updates whose leading ``len(cols)`` columns equal it
        (NULL equal to NULL): the key's multiplicity when ``cols`` is a key, the row's when it is a whole row.

        ``hashes`` are the queries' key hashes, which must be distinct. What ``gather`` finds, comparing the
        updates where they lie (each column gathered from every batch at once) rather than copying them out.
        """
        total = np.zeros(len(hashes), dtype=np.int64)
        if len(hashes) == 0:
            return total
        least, most = int(hashes.min()), int(hashes.max())
        hits = []
        for b in self.batches():
            if b.may_hold(least, most):
                q, r = expand_ranges(*b.seek(hashes))
                if len(q):
                    hits.append((b.updates, q, r))
        if not hits:
            return total
        q = np.concatenate([q for _, q, _ in hits]) if len(hits) > 1 else hits[0][1]
        width = len(cols)
        masked = any(m is not None for u, _, _ in hits for m in u.valid[:width])

        def gathered(j: int) -> tuple[np.ndarray, np.ndarray | None]:
            if len(hits) == 1:
                u, _, r = hits[0]
                return u.columns[j][r], None if u.valid[j] is None else u.valid[j][r]
            data = np.concatenate([u.columns[j][r] for u, _, r in hits])
            if not masked or all(u.valid[j] is None for u, _, _ in hits):
                return data, None
            return data, np.concatenate(
                [np.ones(len(r), bool) if u.valid[j] is None else u.valid[j][r] for u, _, r in hits]
            )

        theirs = [gathered(j) for j in range(width)]
        same = rows_equal(
            tuple(c[q] for c in cols),
            tuple(None if m is None else m[q] for m in valid),
            tuple(c for c, _ in theirs),
            tuple(m for _, m in theirs),
            n=len(q),
        )
        diffs = (
            np.concatenate([u.diffs[r] for u, _, r in hits]) if len(hits) > 1 else hits[0][0].diffs[hits[0][2]]
        )
        np.add.at(total, q[same], diffs[same])
        return total


def seek_batches(
    batches: list[TraceBatch], hashes: np.ndarray
) -> tuple[list[TraceBatch], np.ndarray, np.ndarray]:
    """The batches whose hash range meets the query hashes' (ascending), with the row range ``[lo, hi)`` of
    each query in each of them, concatenated batch after batch (``len(hashes)`` ranges per batch).

    Few queries (as a single update's keys inside a loop are) are searched with two binary searches per batch
    and nothing else, which is what a trace of many small batches needs to be cheap to read."""
    few = len(hashes) < FEW_QUERIES
    least, most = int(hashes[0]), int(hashes[-1])  # (ascending)
    found: list[TraceBatch] = []
    los: list[np.ndarray] = []
    his: list[np.ndarray] = []
    for b in batches:
        first, last = b.bounds()
        if least <= last and most >= first:
            found.append(b)
            if few:
                los.append(b.hashes.searchsorted(hashes, "left"))
                his.append(b.hashes.searchsorted(hashes, "right"))
            else:
                lo, hi = b.seek(hashes)
                los.append(lo)
                his.append(hi)
    if len(found) <= 1:
        return found, (los[0] if found else None), (his[0] if found else None)
    return found, np.concatenate(los), np.concatenate(his)


def _merged(batches: list[TraceBatch], frontier: Antichain) -> TraceBatch:
    """Small batches merged at once (what a ``_Merge`` does chunk by chunk, without its buffers)."""
    both = Batch.concat([b.updates for b in batches])
    if len(frontier):
        both = both.with_times(frontier.advance(both.times))
    h = np.concatenate([b.hashes for b in batches])
    # advancing single-coordinate times keeps each input sorted: two runs merge rather than sort
    two = len(batches) == 2 and len(batches[0]) and len(batches[1]) and both.dim == 1
    return TraceBatch.consolidated(both, h, batches[0].nkey, split=len(batches[0]) if two else None)


def _level(e: TraceBatch | _Merge) -> int:
    """The tier of a batch or merge by its size: sizes within a factor MERGE_WIDTH share a tier."""
    size = e.size if isinstance(e, _Merge) else len(e)
    return (max(size, 1).bit_length() - 1) // MERGE_WIDTH_BITS


def _empty_like(b: TraceBatch) -> TraceBatch:
    return TraceBatch(b.updates.take(slice(0, 0)), b.hashes[:0], b.nkey)
