"""The running states of a linear aggregate's groups, updated in place.

A linear aggregate (count, sum, avg) outside loops needs only each group's current state to turn new updates
into output updates; the state is the operator's own, read by no one else, so it is kept as a table rather
than a trace: the group keys and state columns in dense arrays (a slot per group ever seen), found through an
open-addressing map from key hash to slot. A lookup compares the keys of every slot whose hash matches, so
groups whose keys share a hash keep separate slots. A group whose rows all go keeps its slot, at zero, for
when it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ivm.engine.batch import Mask, rows_equal
from ivm.engine.trace.batch import identity_hash

__all__ = ["RunningStates"]

_GOLD = np.uint64(0x9E3779B97F4A7C15)


class RunningStates:
    """Per group key, state columns of the given dtypes (zero for a group never seen)."""

    def __init__(self, key_dtypes: Sequence, state_dtypes: Sequence, capacity: int = 64) -> None:
        self.size = 0
        self.writes = 0  # how many times the states were updated: a saved copy is current while it holds
        self.keys = [np.zeros(capacity, dtype=d) for d in key_dtypes]
        self.valid = [np.ones(capacity, dtype=bool) for _ in key_dtypes]
        self.hashes = np.zeros(capacity, dtype=np.int64)
        self.states = [np.zeros(capacity, dtype=d) for d in state_dtypes]
        self._slots = np.full(2 * capacity, -1, dtype=np.int64)  # the map: hash position -> slot, -1 empty

    @property
    def nbytes(self) -> int:
        arrays = [*self.keys, *self.valid, self.hashes, *self.states, self._slots]
        return sum(a.nbytes for a in arrays)

    def columns(self) -> dict[str, np.ndarray]:
        """The groups' keys, validity, hashes and states (one entry per slot): what ``load`` takes back."""
        n = self.size
        out = {"hash": self.hashes[:n]}
        for i, (k, m) in enumerate(zip(self.keys, self.valid, strict=True)):
            out[f"k{i}"], out[f"kv{i}"] = k[:n], m[:n]
        for j, s in enumerate(self.states):
            out[f"s{j}"] = s[:n]
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
        self._slots = np.full(2 * capacity, -1, dtype=np.int64)
        self._place(np.arange(n))
