"""Trace handles: a reader's claim on a trace, with the frontier of times it may still read at.

A trace compacts its history only up to the meet of its handles' frontiers, and is freed when its last handle
is released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ivm.engine.lattice import Antichain

if TYPE_CHECKING:
    from ivm.engine.dataflow import Dataflow
    from ivm.engine.trace.spine import Spine

__all__ = ["TraceHandle"]


class TraceHandle:
    """A reader of a ``Spine``; ``frontier`` bounds the times it will ask about (from below). A handle held by
    a dataflow follows the dataflow's frontier (``follows``), so that a step moves every handle of the
    dataflow at once, without visiting them."""

    def __init__(self, trace: Spine, frontier: Antichain) -> None:
        self.trace = trace
        self._frontier = frontier
        self.follows: Dataflow | None = None
        self.lag = 0  # epochs the frontier it follows is taken back by
        self.released = False
        trace._attach(self)

    @property
    def frontier(self) -> Antichain:
        df = self.follows
        return self._frontier if df is None else df.frontier_in(self.trace.dim, self.lag)

    def advance(self, frontier: Antichain) -> None:
        """Promise to read only at times in advance of ``frontier`` from now on."""
        self._frontier = frontier
        self.follows = None
        self.trace._frontier_changed()

    def follow(self, df: Dataflow, lag: int = 0) -> None:
        """Read from now on at times in advance of ``df``'s frontier (taken back by ``lag`` epochs), as it
        moves."""
        self.follows = df
        self.lag = lag
        self.trace._frontier_changed()

    def release(self) -> None:
        """Give up the claim; the trace is freed with its last handle."""
        if not self.released:
            self.released = True
            self.trace._detach(self)
