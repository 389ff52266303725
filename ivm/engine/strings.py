"""The string pool of an engine: text values are int64 codes into it, so rows stay fixed-width.

Codes are assigned in order of first appearance and never reused. A string interned through the pool's hash
table gets the one canonical code of its text, so equality of canonical codes is equality of text. Columns of
mostly distinct strings that nothing may compare yet (the comments of a table keyed by other columns) can be
stored instead: each string gets a new code without a lookup, and ``canonical`` maps such codes to the
canonical ones (interning their strings then, once) for whatever compares them. Functions of text (LIKE,
UPPER) run once per distinct code present in a batch, never once per row.

The strings are kept in Arrow arrays, not as Python objects. A column is interned through its distinct strings
(Arrow's dictionary encoding): their hashes are looked up in an open-addressing table held in numpy arrays, all
at once, and a string found there is compared with the pool's copy, so two strings sharing a hash never share a
code (the later one goes to a small side table). A handful of strings, as a small transaction brings, are
looked up one by one instead, which is cheaper than the dozens of numpy calls of the vectorized path.

Each connection owns a pool (its strings go when it does); ``POOL`` stands for the pool of the connection
whose call is running, which the connection activates on entry (``StringPool.active``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["StringPool", "POOL"]

FEW = 16  # at most this many strings are interned one by one
TAIL = 4096  # strings interned one by one wait in a list until this many, then become an Arrow chunk
TIER_WIDTH = 16  # chunks of one tier merge into one of the next when this many have gathered
RECENT = 1 << 16  # strings remembered for one-by-one lookups
SAMPLE = 64  # a column whose first this many strings are distinct is interned without a dictionary first
_U64 = (1 << 64) - 1
_hash = hash  # a string's key in the table (Python's own string hash, consistent within the process)


class _HashTable:
    """An open-addressing (linear probing) map from uint64 keys to int64 codes, at most half full; bulk
    operations are vectorized over many keys, single ones probe in Python."""

    def __init__(self, capacity: int = 1 << 12) -> None:
        self.keys = np.zeros(capacity, dtype=np.uint64)
        self.values = np.full(capacity, -1, dtype=np.int64)  # -1: empty slot
        self.count = 0

    def claim(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Look keys up, adding the absent ones with their (distinct) ``values``, in one probe each. For each
        key, the value its slot held already (-1 if the key was absent and is now added; a key repeated in
        ``keys`` finds the value its first occurrence added), and the slot it occupies."""
        if 2 * (self.count + len(keys)) > len(self.keys):
            self._grow(self.count + len(keys))
        mask = np.uint64(len(self.keys) - 1)
        pos = keys & mask
        found = np.full(len(keys), -1, dtype=np.int64)
        pending = np.arange(len(keys))
        while len(pending):
            p = pos[pending]
            v = self.values[p]
            free = v < 0
            # keys aiming at one free slot: the last write wins, and since values are distinct the slot's value
            # says which one that was; the others look at the slot again, now taken, in the next round
            trying, slots = pending[free], p[free]
            self.values[slots] = values[trying]
            won = self.values[slots] == values[trying]
            self.keys[slots[won]] = keys[trying[won]]
            taken = ~free
            same = taken & (self.keys[p] == keys[pending])
            found[pending[same]] = v[same]
            move = taken & ~same
            pos[pending[move]] = (p[move] + np.uint64(1)) & mask
            keep = move
            keep[np.flatnonzero(free)[~won]] = True
            pending = pending[keep]
        self.count += int(np.count_nonzero(found < 0))
        return found, pos.astype(np.int64)

    def get(self, key: int) -> int:
        """The value of one key (a Python int in ``[0, 2**64)``), or -1."""
        mask = len(self.keys) - 1
        i = key & mask
        while True:
            v = int(self.values[i])
            if v < 0 or int(self.keys[i]) == key:
                return v
            i = (i + 1) & mask

    def put(self, key: int, value: int) -> None:
        """Add one absent key."""
        if 2 * (self.count + 1) > len(self.keys):
            self._grow(self.count + 1)
        mask = len(self.keys) - 1
        i = key & mask
        while self.values[i] >= 0:
            i = (i + 1) & mask
        self.keys[i] = key
        self.values[i] = value
        self.count += 1

    def _grow(self, needed: int) -> None:
        used = self.values >= 0
        keys, values = self.keys[used], self.values[used]
        capacity = len(self.keys)
        while 2 * needed > capacity:
            capacity *= 2
        self.keys = np.zeros(capacity, dtype=np.uint64)
        self.values = np.full(capacity, -1, dtype=np.int64)
        # laid out at once in order of home slot: each key takes its home or the slot after the previous key,
        # whichever is later (the layout inserting them in that order would give); keys pushed past the end
        # wrap around through the ordinary insertion
        home = (keys & np.uint64(capacity - 1)).astype(np.int64)
        order = np.argsort(home, kind="stable")
        rank = np.arange(len(order))
        pos = rank + np.maximum.accumulate(home[order] - rank)
        inside = pos < capacity
        self.keys[pos[inside]] = keys[order[inside]]
        self.values[pos[inside]] = values[order[inside]]
        self.count = int(inside.sum())
        rest = order[~inside]
        if len(rest):
            self.claim(keys[rest], values[rest])


class StringPool:
    """Bidirectional map between strings and int64 codes (code 0 is the empty string)."""

    def __init__(self) -> None:
        self._table = _HashTable()
        self._chunks: list[pa.Array] = []  # the strings by code, in a few large_string arrays
        self._starts: list[int] = []  # the code of each chunk's first string
        self._tiers: list[int] = []  # how many merges each chunk has been through
        self._tail: list[str] = []  # the newest strings, not in a chunk yet
        self._size = 0
        self._others: dict[str, int] = {}  # strings whose hash belongs to another string's code
        self._recent: dict[str, int] = {}
        self._canon = np.zeros(1 << 12, dtype=np.int64)  # each code's canonical code, -1 until interned
        # each code's length in bytes, and whether it ends with a space (for VARCHAR(n) and CHAR(n))
        self._lengths = np.full((1 << 12, 2), np.iinfo(np.int64).max, dtype=np.int64)
        self.code("")

    def __len__(self) -> int:
        return self._size

    @contextmanager
    def active(self) -> Iterator[StringPool]:
        """Make this the pool ``POOL`` stands for, within the block."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    # -- at rest -----------------------------------------------------------------------------------
    def at_rest(self) -> tuple[list[pa.Array], list[int], list[int], np.ndarray]:
        """The pool as a checkpoint keeps it: its string chunks (immutable: a chunk written once serves every
        later checkpoint), each chunk's first code and tier, and each code's canonical code (-1: none yet).
        The hash table is not kept: it hashes with the process's string hash."""
        self._flush()
        return list(self._chunks), list(self._starts), list(self._tiers), self._canon[: self._size].copy()

    def load(self, chunks: list[pa.Array], starts: list[int], tiers: list[int], canon: np.ndarray) -> None:
        """Replace the contents of this (new) pool with those ``at_rest`` gave: every code means the same
        string, and the same strings are canonical."""
        n = len(canon)
        capacity = 1 << 12
        while capacity < n:
            capacity *= 2
        self._chunks, self._starts, self._tiers = list(chunks), list(starts), list(tiers)
        self._tail, self._size, self._others, self._recent = [], n, {}, {}
        self._canon = np.empty(capacity, dtype=np.int64)
        self._canon[:n] = canon
        self._lengths = np.full((capacity, 2), np.iinfo(np.int64).max, dtype=np.int64)
        for chunk, start in zip(self._chunks, self._starts, strict=True):
            self._measure(chunk, start)
        self._table = _HashTable()
        self._index(np.flatnonzero(self._canon[:n] == np.arange(n)))

    def added_since(self, start: int) -> tuple[pa.Array, np.ndarray]:
        """The strings of codes ``start`` onwards, and whether each was added canonical: what ``extend``
        needs to give another pool, at the same size, the same codes."""
        codes = np.arange(start, self._size, dtype=np.int64)
        tail_start = self._size - len(self._tail)
        if start >= tail_start:  # a small transaction's new strings, not yet in a chunk: leave them there
            strings = pa.array(self._tail[start - tail_start :], type=pa.large_string())
        else:  # the codes are a run: slices of the chunks that hold it
            self._flush()
            k = bisect.bisect_right(self._starts, start) - 1
            parts = [self._chunks[k].slice(start - self._starts[k]), *self._chunks[k + 1 :]]
            strings = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        return strings, self._canon[start : self._size] == codes

    def extend(self, strings: pa.Array, canonical: np.ndarray) -> None:
        """Add ``strings`` under the next codes, canonical where ``canonical`` says (see ``added_since``)."""
        if not len(strings):
            return
        codes = self._append(strings, canonical=True)
        self._canon[codes[~canonical]] = -1
        self._index(codes[canonical])
        self._recent = {}

    def _index(self, codes: np.ndarray) -> None:
        """Put canonical ``codes`` in the hash table; a string whose hash another string holds goes to the
        side table, as when it was first added."""
        if not len(codes):
            return
        values = self.strings(codes).to_pylist()
        keys = np.fromiter(map(_hash, values), dtype=np.int64, count=len(values)).view(np.uint64)
        found, _ = self._table.claim(keys, codes)
        for i in np.flatnonzero(found >= 0).tolist():  # 64-bit hash collisions: vanishingly rare
            self._others[values[i]] = int(codes[i])

    def code(self, s: str) -> int:
        return int(self._encode_few([s])[0])

    def encode(self, values: Iterable[str]) -> np.ndarray:
        """Codes of strings; new strings get new codes."""
        if not isinstance(values, list):
            values = list(values)
        if len(values) <= FEW:
            return self._encode_few(values)
        return self.encode_arrow(pa.array(values, type=pa.large_string()))

    def encode_arrow(self, arr: pa.Array | pa.ChunkedArray, stored: bool = False) -> np.ndarray:
        """Codes of the strings of an Arrow string array (a NULL gets the code of the empty string). With
        ``stored``, a column that looks mostly distinct gets new codes, not canonical yet (``canonical``)."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if arr.null_count:
            arr = arr.fill_null("")
        if len(arr) <= FEW:
            return self._encode_few(arr.to_pylist())
        if len(arr) >= 4 * SAMPLE and len(pc.unique(arr.slice(0, SAMPLE))) == SAMPLE:
            if stored:
                return self._append(arr, canonical=False)
            return self._intern(arr)  # likely all distinct (names, comments): a dictionary would not shrink it
        enc = pc.dictionary_encode(arr)
        distinct = enc.dictionary
        codes = self._encode_few(distinct.to_pylist()) if len(distinct) <= FEW else self._intern(distinct)
        return codes[enc.indices.to_numpy(zero_copy_only=False)]

    def _encode_few(self, values: list[str]) -> np.ndarray:
        out = np.empty(len(values), dtype=np.int64)
        recent = self._recent
        for i, s in enumerate(values):  # a handful (see FEW)
            c = recent.get(s)
            if c is None:
                c = self._one(s)
                if len(recent) >= RECENT:
                    recent.clear()
                recent[s] = c
            out[i] = c
        return out

    def _one(self, s: str) -> int:
        key = _hash(s) & _U64
        c = self._table.get(key)
        if c >= 0:
            return c if self._string(c) == s else self._other(s)
        c = self._add(s)
        self._table.put(key, c)
        return c

    def _intern(self, strings: pa.Array) -> np.ndarray:
        """Codes of strings (mostly distinct), all at once."""
        values = strings.to_pylist()
        keys = np.fromiter(map(_hash, values), dtype=np.int64, count=len(values)).view(np.uint64)
        self._flush()
        start = self._size
        # each string claims the code it would get if all were new; those found keep the code they had, and a
        # string repeated here finds its first occurrence's
        found, slots = self._table.claim(keys, np.arange(start, start + len(keys), dtype=np.int64))
        codes = found.copy()
        old = np.flatnonzero((found >= 0) & (found < start))
        if len(old):
            same = pc.equal(strings.take(pa.array(old)).cast(pa.large_string()), self.strings(found[old]))
            codes[old[~same.to_numpy(zero_copy_only=False)]] = -2  # another string owns the hash
        new = np.flatnonzero(found == -1)
        if len(new):
            fresh = strings if len(new) == len(strings) else strings.take(pa.array(new))
            codes[new] = self._append(fresh)
            self._table.values[slots[new]] = codes[new]
        again = np.flatnonzero(found >= start)
        if len(again):
            first = found[again] - start
            same = pc.equal(strings.take(pa.array(again)), strings.take(pa.array(first)))
            codes[again] = np.where(same.to_numpy(zero_copy_only=False), codes[first], -2)
        for i in np.flatnonzero(codes == -2).tolist():  # 64-bit hash collisions: vanishingly rare
            codes[i] = self._other(values[i])
        return codes

    def canonical(self, codes: np.ndarray) -> np.ndarray:
        """The canonical code of each code's string: codes of equal strings become equal."""
        out = self._canon[codes]
        missing = out < 0
        if missing.any():
            self._make_canonical(np.unique(codes[missing]))
            out = self._canon[codes]
        return out

    def _make_canonical(self, codes: np.ndarray) -> None:
        """Intern the strings of stored (not canonical) ``codes``: a string already interned maps to its code,
        the others become canonical under their own (the first of equal ones)."""
        strings = self.strings(codes)
        values = strings.to_pylist()
        keys = np.fromiter(map(_hash, values), dtype=np.int64, count=len(values)).view(np.uint64)
        found, _ = self._table.claim(keys, codes)
        out = np.where(found < 0, codes, found)
        old = np.flatnonzero(found >= 0)
        if len(old):
            same = pc.equal(strings.take(pa.array(old)), self.strings(found[old])).to_numpy(
                zero_copy_only=False
            )
            for i in old[~same].tolist():  # 64-bit hash collisions: vanishingly rare
                out[i] = self._others.setdefault(values[i], int(codes[i]))
        self._canon[codes] = out

    def _other(self, s: str) -> int:
        c = self._others.get(s)
        if c is None:
            c = self._others[s] = self._add(s)
        return c

    def _add(self, s: str) -> int:
        self._tail.append(s)
        self._mark(1, True)
        self._lengths[self._size] = (len(s.encode()), s.endswith(" "))
        self._size += 1
        if len(self._tail) >= TAIL:
            self._flush()
        return self._size - 1

    def _flush(self) -> None:
        if self._tail:
            tail, self._tail = self._tail, []
            self._chunk(pa.array(tail, type=pa.large_string()), self._size - len(tail))

    def _append(self, strings: pa.Array, canonical: bool = True) -> np.ndarray:
        """Store new strings; their codes."""
        self._flush()
        start = self._size
        self._mark(len(strings), canonical)
        large = strings.cast(pa.large_string())
        self._measure(large, start)
        self._size += len(strings)
        self._chunk(large, start)
        return np.arange(start, self._size, dtype=np.int64)

    def _measure(self, large: pa.Array, start: int) -> None:
        """Record the byte length and trailing space of strings that take the codes from ``start``."""
        offsets = np.frombuffer(large.buffers()[1], dtype=np.int64)[
            large.offset : large.offset + len(large) + 1
        ]
        size = np.diff(offsets)
        rows = self._lengths[start : start + len(large)]
        rows[:, 0] = size
        data = large.buffers()[2]
        if data is None or not len(size) or not data.size:
            rows[:, 1] = 0
        else:  # whether the last byte is a space (in UTF-8 a space is never part of another character)
            rows[:, 1] = (size > 0) & (
                np.frombuffer(data, dtype=np.uint8)[np.maximum(offsets[1:] - 1, 0)] == 32
            )

    def _mark(self, n: int, canonical: bool) -> None:
        """Record whether the next ``n`` codes are canonical."""
        end = self._size + n
        if end > len(self._canon):
            grown = np.empty(max(end, 2 * len(self._canon)), dtype=np.int64)
            grown[: self._size] = self._canon[: self._size]
            self._canon = grown
            lengths = np.full((len(grown), 2), np.iinfo(np.int64).max, dtype=np.int64)
            lengths[: self._size] = self._lengths[: self._size]
            self._lengths = lengths
        self._canon[self._size : end] = np.arange(self._size, end) if canonical else -1

    def _chunk(self, strings: pa.Array, start: int) -> None:
        self._chunks.append(strings)
        self._starts.append(start)
        self._tiers.append(0)
        # chunks merge like the digits of a counter in base TIER_WIDTH: few chunks, and each string is copied
        # once per tier it rises through
        while len(self._tiers) >= TIER_WIDTH and len(set(self._tiers[-TIER_WIDTH:])) == 1:
            merged = pa.concat_arrays(self._chunks[-TIER_WIDTH:])
            tier, first = self._tiers[-1] + 1, self._starts[-TIER_WIDTH]
            del self._chunks[-TIER_WIDTH:], self._starts[-TIER_WIDTH:], self._tiers[-TIER_WIDTH:]
            self._chunks.append(merged)
            self._starts.append(first)
            self._tiers.append(tier)

    def _string(self, c: int) -> str:
        tail_start = self._size - len(self._tail)
        if c >= tail_start:
            return self._tail[c - tail_start]
        k = bisect.bisect_right(self._starts, c) - 1
        return self._chunks[k][c - self._starts[k]].as_py()

    def sizes(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each code's string length in bytes (at least its length in characters), and whether it ends with
        a space (arrays of ``codes``' shape; a code not in the pool, as a deleted row's placeholder -1, reads
        as too long): enough to tell at once that text fits a VARCHAR(n) or CHAR(n) as it is."""
        codes = np.asarray(codes, dtype=np.int64)
        both = self._lengths[np.where((codes >= 0) & (codes < self._size), codes, len(self._lengths) - 1)]
        return both[..., 0], both[..., 1]

    def strings(self, codes: np.ndarray) -> pa.Array:
        """The strings of ``codes`` as an Arrow large_string array (taken chunk by chunk; a handful one by one,
        so that reading the strings a small transaction just added does not cut its own chunk of them)."""
        codes = np.asarray(codes, dtype=np.int64)
        if len(codes) <= FEW:
            return pa.array([self._string(c) for c in codes.tolist()], pa.large_string())
        self._flush()
        if len(self._chunks) == 1:
            return self._chunks[0].take(pa.array(codes))
        chunk = np.searchsorted(np.asarray(self._starts), codes, side="right") - 1
        order = np.argsort(chunk, kind="stable")
        ordered = chunk[order]
        bounds = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1], [True])))
        parts = []
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            c = int(ordered[lo])
            parts.append(self._chunks[c].take(pa.array(codes[order[lo:hi]] - self._starts[c])))
        back = np.empty(len(codes), dtype=np.int64)
        back[order] = np.arange(len(codes))
        return pa.concat_arrays(parts).take(pa.array(back))

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The strings of ``codes`` as an object array (converted once per distinct code)."""
        if len(codes) == 0:
            return np.zeros(0, dtype=object)
        uniq, inv = np.unique(codes, return_inverse=True)
        if len(uniq) <= FEW:
            table = np.array([self._string(c) for c in uniq.tolist()], dtype=object)
        else:
            table = np.array(self.strings(uniq).to_pylist(), dtype=object)
        return table[inv.reshape(-1)]

    def ranks(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each code, its rank in string order among the distinct codes given; and the code of each rank.
        Sorting by rank sorts by string (code order is arrival order, not string order)."""
        uniq, inv = np.unique(codes, return_inverse=True)
        order = pc.sort_indices(self.strings(uniq)).to_numpy() if len(uniq) else np.zeros(0, dtype=np.int64)
        rank = np.empty(len(uniq), dtype=np.int64)
        rank[order] = np.arange(len(uniq))
        return rank[inv.reshape(-1)], uniq[order]

    def apply(self, codes: np.ndarray, fn: Callable[[str], object], dtype) -> np.ndarray:
        """``fn`` of each code's string, evaluated once per distinct code."""
        if len(codes) == 0:
            return np.zeros(0, dtype=dtype)
        uniq, inv = np.unique(codes, return_inverse=True)
        vals = np.array([fn(s) for s in self.decode(uniq)], dtype=dtype)
        return vals[inv.reshape(-1)]

    def compute(self, codes: np.ndarray, fn: Callable[[pa.Array], pa.Array], dtype=None) -> np.ndarray:
        """``fn`` (Arrow compute) over the distinct strings of ``codes``: the codes of the strings it returns,
        or with ``dtype`` its values."""
        if len(codes) == 0:
            return codes if dtype is None else np.zeros(0, dtype=dtype)
        uniq, inv = np.unique(codes, return_inverse=True)
        out = fn(self.strings(uniq))
        if dtype is not None:
            return np.asarray(out.to_numpy(zero_copy_only=False), dtype)[inv.reshape(-1)]
        vals = self.encode_arrow(out)
        return vals[inv.reshape(-1)]


_active: ContextVar[StringPool] = ContextVar("string_pool")


class _ActivePool:
    """The pool of the running connection (see ``StringPool.active``)."""

    def __getattr__(self, name: str):
        try:
            pool = _active.get()
        except LookupError:
            raise RuntimeError("text is coded by a connection's string pool, and none is active") from None
        return getattr(pool, name)


POOL = _ActivePool()
