"""Crashes on cue for the crash tests' child processes: SIGKILL at the n-th occurrence of a chosen moment."""

from __future__ import annotations

import os
import signal


class KillPoint:
    """``point(what)`` is true at the ``n``-th moment of kind ``kind`` (the caller then does its half of the
    work and calls ``die``); false for every other moment."""

    def __init__(self, kind: str, n: int) -> None:
        self.kind, self.n, self.seen = kind, n, 0

    def __call__(self, what: str) -> bool:
        if what != self.kind:
            return False
        self.seen += 1
        return self.seen >= self.n

    @staticmethod
    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)
