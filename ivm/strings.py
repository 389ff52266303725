"""The engine-wide string pool: text values are int64 codes into it, so rows stay fixed-width.

Codes are assigned in order of first appearance and never reused; equal strings always get the same code, so
equality of text is equality of codes. Functions of text (LIKE, UPPER, comparisons) run once per distinct code
present in a batch, never once per row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import numpy as np

__all__ = ["StringPool", "POOL"]


class StringPool:
    """Bidirectional map between strings and int64 codes."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._strings: list[str] = []

    def __len__(self) -> int:
        return len(self._strings)

    def code(self, s: str) -> int:
        c = self._codes.get(s)
        if c is None:
            c = len(self._strings)
            self._codes[s] = c
            self._strings.append(s)
        return c

    def encode(self, values: Iterable[str]) -> np.ndarray:
        """Codes of strings (best given once each: callers dictionary-encode first); new strings get new codes.

        Lookups and insertions run in the interpreter's C loops (``map``, ``dict.update``), not a Python
        loop per value."""
        if not isinstance(values, list):
            values = list(values)
        found = np.array(list(map(self._codes.get, values, itertools.repeat(-1))), dtype=np.int64)
        missing = np.flatnonzero(found < 0)
        if len(missing):
            new = values if len(missing) == len(values) else np.array(values, dtype=object)[missing]
            fresh = list(dict.fromkeys(new))  # each new string once, in order of appearance
            start = len(self._strings)
            self._codes.update(zip(fresh, range(start, start + len(fresh)), strict=True))
            self._strings.extend(fresh)
            found[missing] = np.fromiter(map(self._codes.__getitem__, new), dtype=np.int64, count=len(missing))
        return found

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The strings of ``codes`` as an object array (looked up once per distinct code)."""
        uniq, inv = np.unique(codes, return_inverse=True)
        table = np.array([self._strings[c] for c in uniq.tolist()], dtype=object)
        return table[inv.reshape(-1)] if len(codes) else np.zeros(0, dtype=object)

    def ranks(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each code, its rank in string order among the distinct codes given; and the code of each rank.
        Sorting by rank sorts by string (code order is arrival order, not string order)."""
        uniq, inv = np.unique(codes, return_inverse=True)
        strings = np.array([self._strings[c] for c in uniq.tolist()], dtype=object)
        order = np.argsort(strings.astype(str), kind="stable") if len(uniq) else np.zeros(0, dtype=np.int64)
        rank = np.empty(len(uniq), dtype=np.int64)
        rank[order] = np.arange(len(uniq))
        return rank[inv.reshape(-1)], uniq[order]

    def apply(self, codes: np.ndarray, fn: Callable[[str], object], dtype) -> np.ndarray:
        """``fn`` of each code's string, evaluated once per distinct code."""
        if len(codes) == 0:
            return np.zeros(0, dtype=dtype)
        uniq, inv = np.unique(codes, return_inverse=True)
        vals = np.array([fn(self._strings[c]) for c in uniq.tolist()], dtype=dtype)
        return vals[inv.reshape(-1)]

    def map_codes(self, codes: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
        """Codes of ``fn`` of each code's string, evaluated once per distinct code."""
        if len(codes) == 0:
            return codes
        uniq, inv = np.unique(codes, return_inverse=True)
        vals = np.array([self.code(fn(self._strings[c])) for c in uniq.tolist()], dtype=np.int64)
        return vals[inv.reshape(-1)]


POOL = StringPool()
