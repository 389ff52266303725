"""The running states of a linear aggregate's groups, updated in place.

A linear aggregate (count, sum, avg) outside loops needs only each group's current state to turn new updates
into output updates; the state is the operator's own, read by no one else, so it is kept as a table rather
than a trace: the group keys and state columns in dense arrays (a slot per group ever seen), found through an
open-addressing map from key hash to slot. A lookup compares the keys of every slot whose hash matches, so
groups whose keys share a hash keep separate slots. A group whose rows all go keeps its slot, at zero, for
when it returns.

A state may also be *wide*: a run of int64 columns numbered from an index that moves down or up as more
columns are needed, every group holding one value per column (the limbs of an exact sum of doubles: see
``exact``). A group's values are side by side, so that reading or writing them is one access to memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ivm.engine.batch import Mask, rows_equal
from ivm.engine.trace.batch import identity_hash

__all__ = ["RunningStates"]

_GOLD = np.uint64(0x9E3779B97F4A7C15)


class RunningStates:
    """Per group key, state columns of the given dtypes and ``wide`` wide states (zero for a group never
    seen)."""

    def __init__(self, key_dtypes: Sequence, state_dtypes: Sequence, capacity: int = 64, wide: int = 0) -> None:
        self.size = 0
        self.writes = 0  # how many times the states were updated: a saved copy is current while it holds
        self.keys = [np.zeros(capacity, dtype=d) for d in key_dtypes]
        self.valid = [np.ones(capacity, dtype=bool) for _ in key_dtypes]
        self.hashes = np.zeros(capacity, dtype=np.int64)
        self.states = [np.zeros(capacity, dtype=d) for d in state_dtypes]
        # wide state j: shape (capacity, width), its column k numbered wide_lo[j] + k
        self.wide = [np.zeros((capacity, 0), dtype=np.int64) for _ in range(wide)]
        self.wide_lo = [0] * wide
        self._slots = np.full(2 * capacity, -1, dtype=np.int64)  # the map: hash position -> slot, -1 empty

    @property
    def nbytes(self) -> int:
        arrays = [*self.keys, *self.valid, self.hashes, *self.states, *self.wide, self._slots]
        return sum(a.nbytes for a in arrays)

    def columns(self) -> dict[str, np.ndarray]:
        """The groups' keys, validity, hashes and states (one entry per slot): what ``load`` takes back. Wide
        state ``j`` gives one array per column, named ``w{j}.{number}``."""
        n = self.size
        out = {"hash": self.hashes[:n]}
        for i, (k, m) in enumerate(zip(self.keys, self.valid, strict=True)):
            out[f"k{i}"], out[f"kv{i}"] = k[:n], m[:n]
        for j, s in enumerate(self.states):
            out[f"s{j}"] = s[:n]
        for j, (w, lo) in enumerate(zip(self.wide, self.wide_lo, strict=True)):
            for k in range(w.shape[1]):
                out[f"w{j}.{lo + k}"] = w[:n, k]
        return out

    def load(self, columns: dict[str, np.ndarray]) -> None:
        """Take the groups of ``columns`` (as ``columns`` gave them) as the only ones, in their slots."""
        n = len(columns["hash"])
        capacity = 64
        while capacity < n:
            capacity *= 2

        def filled(a: np.ndarray, dtype) -> np.ndarray:
            b = np.zeros(capacity, dtype=dtype)
            b[:n] = a
            return b

        self.keys = [filled(columns[f"k{i}"], k.dtype) for i, k in enumerate(self.keys)]
        self.valid = [filled(columns[f"kv{i}"], bool) for i in range(len(self.valid))]
        self.hashes = filled(columns["hash"], np.int64)
        self.states = [filled(columns[f"s{j}"], s.dtype) for j, s in enumerate(self.states)]
        for j in range(len(self.wide)):
            numbers = sorted(int(name.split(".")[1]) for name in columns if name.startswith(f"w{j}."))
            lo = numbers[0] if numbers else 0
            if numbers != list(range(lo, lo + len(numbers))):
                raise ValueError(f"wide state {j} misses columns: {numbers}")
            w = np.zeros((capacity, len(numbers)), dtype=np.int64)
            for k, number in enumerate(numbers):
                w[:n, k] = columns[f"w{j}.{number}"]
            self.wide[j], self.wide_lo[j] = w, lo
        self.size = n
        self._slots = np.full(2 * capacity, -1, dtype=np.int64)
        self._place(np.arange(n))

    def find(self, hashes: np.ndarray, cols: Sequence[np.ndarray], valid: Sequence[Mask]) -> np.ndarray:
        """The slot of each key, or -1 for a key never seen."""
        mask = len(self._slots) - 1
        out = np.full(len(hashes), -1, dtype=np.int64)
        pos = self._home(hashes)
        active = np.arange(len(hashes))
        identity = identity_hash(tuple(cols), tuple(valid), hashes)  # equal hashes are equal keys
        while len(active):
            s = self._slots[pos[active]]
            taken = s >= 0
            same = taken & (self.hashes[np.maximum(s, 0)] == hashes[active])
            if same.any() and not identity:
                i, slot = active[same], s[same]
                same[same] = rows_equal(
                    [c[i] for c in cols],
                    [None if m is None else m[i] for m in valid],
                    [k[slot] for k in self.keys],
                    [m[slot] for m in self.valid],
                    n=len(i),
                )
            out[active[same]] = s[same]
            active = active[taken & ~same]
            pos[active] = (pos[active] + 1) & mask
        return out

    def add(self, hashes: np.ndarray, cols: Sequence[np.ndarray], valid: Sequence[Mask]) -> np.ndarray:
        """Slots for keys never seen, distinct from one another (their states start at zero)."""
        n = len(hashes)
        start = self.size
        if start + n > len(self.hashes):
            self._grow(start + n)
        slots = np.arange(start, start + n)
        for k, c in zip(self.keys, cols, strict=True):
            k[slots] = c
        for k, m in zip(self.valid, valid, strict=True):
            k[slots] = True if m is None else m
        self.hashes[slots] = hashes
        self.size += n
        self._place(slots)
        return slots

    def _place(self, slots: np.ndarray) -> None:
        mask = len(self._slots) - 1
        pos = self._home(self.hashes[slots])
        pending = np.arange(len(slots))
        while len(pending):
            p = pos[pending]
            free = self._slots[p] < 0
            # slots aiming at one free position: the last write wins (slots are distinct, so the position
            # says which); the others move on, like those that met a taken position
            self._slots[p[free]] = slots[pending[free]]
            won = np.zeros(len(pending), dtype=bool)
            won[free] = self._slots[p[free]] == slots[pending[free]]
            pending = pending[~won]
            pos[pending] = (pos[pending] + 1) & mask

    def _home(self, hashes: np.ndarray) -> np.ndarray:
        """The map position each hash's probe starts at: the top bits of the hash times the golden ratio
        (Fibonacci hashing: two array operations, and every bit of the hash moves the top ones)."""
        shift = np.uint64(64 - (len(self._slots).bit_length() - 1))
        return ((hashes.view(np.uint64) * _GOLD) >> shift).astype(np.int64)

    def _grow(self, needed: int) -> None:
        capacity = len(self.hashes)
        while capacity < needed:
            capacity *= 2
        n = self.size

        def grown(a: np.ndarray) -> np.ndarray:
            b = np.zeros(capacity, dtype=a.dtype)
            b[:n] = a[:n]
            return b

        self.keys = [grown(k) for k in self.keys]
        self.valid = [grown(m) for m in self.valid]
        self.hashes = grown(self.hashes)
        self.states = [grown(s) for s in self.states]
        for j, w in enumerate(self.wide):
            longer = np.zeros((capacity, w.shape[1]), dtype=np.int64)
            longer[:n] = w[:n]
            self.wide[j] = longer
        self._slots = np.full(2 * capacity, -1, dtype=np.int64)
        self._place(np.arange(n))

    def widen(self, j: int, lo: int, hi: int) -> None:
        """Make wide state ``j`` hold the columns numbered ``[lo, hi)`` (and those it holds), new ones at 0."""
        w, old = self.wide[j], self.wide_lo[j]
        width = w.shape[1]
        if width:
            if lo >= old and hi <= old + width:
                return
            lo, hi = min(lo, old), max(hi, old + width)
        wider = np.zeros((len(w), hi - lo), dtype=np.int64)
        if width:
            wider[:, old - lo : old - lo + width] = w
        self.wide[j], self.wide_lo[j] = wider, lo
