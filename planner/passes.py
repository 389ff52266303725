"""The passes a translated plan goes through before it is compiled, in order, each a pure function from plan
to plan that computes the same rows with the same columns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.canon import Stored, canonicalize
from planner.prune import Exists, prune
from planner.simplify import simplify
from sql.logical import Plan

__all__ = ["Context", "PASSES", "optimize"]


@dataclass(frozen=True)
class Context:
    """What the passes read of the database: a table's primary key (``keys``), whether an arrangement of a
    plan by a key is there to be read (``exists``), and which stored columns hold text under codes that equal
    strings need not share (``stored``)."""

    keys: Callable[[str], tuple[int, ...]]
    exists: Exists
    stored: Stored


def _simplify(plan: Plan, cx: Context) -> Plan:
    return simplify(plan, cx.keys)


def _prune(plan: Plan, cx: Context) -> Plan:
    return prune(plan, cx.exists)


def _canonicalize(plan: Plan, cx: Context) -> Plan:
    return canonicalize(plan, cx.stored)


# simplify twice: pruning narrows joins' inputs, which lets simplify remove what the narrowing left idle
PASSES: tuple[Callable[[Plan, Context], Plan], ...] = (_simplify, _prune, _simplify, _canonicalize)


def optimize(plan: Plan, cx: Context) -> Plan:
    """``plan`` through every pass of ``PASSES``."""
    for step in PASSES:
        plan = step(plan, cx)
    return plan
