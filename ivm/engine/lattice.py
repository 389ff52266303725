"""Logical times, the lattice they form, and frontiers.

A time is a vector of int64 coordinates. Outside loops it has one coordinate (the epoch: one per source
transaction). Each enclosing loop adds one coordinate (its iteration counter), so a time inside a loop is
``(epoch, i_1, ..., i_k)``. Times are partially ordered coordinate-wise (the product order): ``s <= t``
iff every coordinate of ``s`` is ``<=`` the one of ``t``. ``join`` is the coordinate-wise max and
``meet`` the min.

Batches of times are int64 arrays of shape ``(n, d)``. A frontier is an ``Antichain``: a set of mutually
incomparable times saying which times may still appear (those greater or equal to some element).
``advance(t, F) = meet over f in F of join(t, f)`` maps a time to the least time that is indistinguishable
from it for every reader whose frontier is ``F``; compaction of traces applies it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Antichain", "join", "meet", "less_equal", "advance"]


def join(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least upper bound of times, coordinate-wise max (broadcasting)."""
    return np.maximum(a, b)


def meet(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Greatest lower bound of times, coordinate-wise min (broadcasting)."""
    return np.minimum(a, b)


def less_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Product order ``a <= b`` for times of shape ``(..., d)``, broadcasting over the leading axes."""
    return np.all(a <= b, axis=-1)


def advance(times: np.ndarray, frontier: np.ndarray) -> np.ndarray:
    """``meet over f in frontier of join(t, f)`` for every row ``t`` of ``times`` (shape ``(n, d)``).

    ``frontier`` has shape ``(m, d)`` with ``m >= 1``. The result is ``>= t`` and agrees with ``t`` on every
    comparison with times ``>=`` some element of the frontier (Appendix A of the shared-arrangements paper).
    """
    if frontier.shape[0] == 1:
        return np.maximum(times, frontier[0])
    return np.maximum(times[:, None, :], frontier[None, :, :]).min(axis=1)


class Antichain:
    """A frontier: mutually incomparable times, kept minimal. Empty means no time can appear any more."""

    __slots__ = ("elements",)

    def __init__(self, elements: np.ndarray | list | tuple = (), dim: int | None = None) -> None:
        arr = np.asarray(elements, dtype=np.int64)
        if arr.ndim == 2 and arr.shape[0] == 1:
            self.elements = arr
            return
        if arr.ndim == 1:
            arr = arr.reshape(0 if arr.size == 0 else 1, -1 if arr.size else (dim or 1))
        if arr.size == 0:
            arr = np.zeros((0, dim or (arr.shape[1] if arr.ndim == 2 else 1)), dtype=np.int64)
        self.elements = _minimal(arr)

    @property
    def dim(self) -> int:
        return self.elements.shape[1]

    def __len__(self) -> int:
        return self.elements.shape[0]

    def __iter__(self):
        return iter(tuple(int(x) for x in row) for row in self.elements)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Antichain):
            return NotImplemented
        return set(self) == set(other)

    def __repr__(self) -> str:
        return f"Antichain({sorted(self)})"

    def less_equal(self, time: np.ndarray) -> np.ndarray:
        """Whether each time (shape ``(n, d)`` or ``(d,)``) is ``>=`` some element: it may still appear."""
        t = np.asarray(time, dtype=np.int64)
        if len(self) == 0:
            return np.zeros(t.shape[:-1], dtype=bool)
        return less_equal(self.elements, t[..., None, :]).any(axis=-1)

    def meet(self, other: Antichain) -> Antichain:
        """The frontier allowing the union of the times allowed by both."""
        return Antichain(np.concatenate([self.elements, other.elements]), dim=self.dim)

    def advance(self, times: np.ndarray) -> np.ndarray:
        """Advance each time by this frontier; with an empty frontier times are returned unchanged."""
        return advance(times, self.elements) if len(self) else times


def _minimal(arr: np.ndarray) -> np.ndarray:
    """The minimal elements of a set of times, deduplicated and sorted."""
    if arr.shape[0] <= 1:
        return arr
    arr = np.unique(arr, axis=0)
    le = less_equal(arr[:, None, :], arr[None, :, :])
    np.fill_diagonal(le, False)
    dominated = le.any(axis=0)
    return arr[~dominated]
