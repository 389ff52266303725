"""Read-only descriptions of a connection's relations and arrangements, for ``\\d`` and the demo's figures.

Sizes are what the engine holds: the updates stored in traces and the bytes of their arrays. A trace is
counted for the dataflow that created it (the first live dataflow holding it), so an arrangement shared by
several views is counted once, for its builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ivm.db.connection import Connection
    from ivm.engine.trace.spine import Spine

__all__ = ["RelationInfo", "ArrangementInfo", "relations", "arrangements", "trace_bytes", "row_count"]


@dataclass(frozen=True)
class RelationInfo:
    """A table, view or index: its row count (``None`` for an index), the arrangements it built and their
    stored updates and bytes."""

    name: str
    kind: str
    rows: int | None
    arrangements: int
    updates: int
    bytes: int


@dataclass(frozen=True)
class ArrangementInfo:
    """One arrangement a view reads: the collection (a relation's name, or the top of its sub-plan), key
    columns, whether this view built or reused it, who built it (a table, view or index), and which other
    views read it too."""

    collection: str
    key: tuple[str, ...]
    how: str
    built_by: str
    shared_with: tuple[str, ...]


def trace_bytes(trace: Spine) -> int:
    """Bytes held by a trace's arrays: columns, validity masks, times, diffs and key hashes."""
    total = 0
    for b in trace.batches():
        u = b.updates
        arrays = [*u.columns, *(m for m in u.valid if m is not None), u.times, u.diffs]
        if not any(b.hashes is c for c in u.columns):
            arrays.append(b.hashes)
        total += sum(a.nbytes for a in arrays)
    return total


def _owned(conn: Connection) -> dict[str, list[Spine]]:
    """Live traces by the name of the dataflow that created them."""
    owner: dict[int, str] = {}
    traces: dict[str, list[Spine]] = {}
    for df in conn.engine.dataflows:
        if df.dropped:
            continue
        for h in df.handles:
            if h.released or id(h.trace) in owner:
                continue
            owner[id(h.trace)] = df.name
            traces.setdefault(df.name, []).append(h.trace)
    return traces


def row_count(trace: Spine) -> int:
    """Rows of a collection: the sum of all its stored diffs."""
    return int(sum(int(np.sum(b.updates.diffs)) for b in trace.batches()))


def relations(conn: Connection) -> list[RelationInfo]:
    """Tables, then views, then indexes, each sorted by name."""
    owned = _owned(conn)
    out = []
    for name in sorted(conn.tables):
        tr = conn.tables[name].arranged.trace
        out.append(RelationInfo(name, "table", row_count(tr), 1, len(tr), trace_bytes(tr)))
    for name in sorted(conn.views):
        st = conn.views[name]
        mine = owned.get(st.df.name, [])
        out.append(
            RelationInfo(
                name,
                "view",
                row_count(st.arranged.trace),
                len(mine),
                sum(len(t) for t in mine),
                sum(trace_bytes(t) for t in mine),
            )
        )
    for name in sorted(conn.catalog.indexes):
        mine = owned.get(f"index:{name}", [])
        out.append(
            RelationInfo(
                name, "index", None, len(mine), sum(len(t) for t in mine), sum(trace_bytes(t) for t in mine)
            )
        )
    return out


def arrangements(conn: Connection, view: str) -> list[ArrangementInfo]:
    """The arrangements view ``view`` reads, in the order its plan was compiled; its own result last."""
    from planner.explain import describe
    from sql.errors import SqlError
    from sql.logical import Canon, Scan

    if view not in conn.views:
        raise SqlError(f"view {view!r} does not exist")

    def collection(plan) -> str:
        while isinstance(plan, Canon):  # text in canonical codes: the same rows, named by what they are
            plan = plan.input
        if isinstance(plan, Scan):
            return plan.table
        top = describe(plan)
        return top if len(top) <= 60 else top[:57] + "..."

    def builder(plan, key, how: str) -> str:
        if how == "built":
            return view
        entry = conn.registry.lookup(plan, key)
        if entry is None:
            return "?"
        if entry.built_by == "tables" and isinstance(plan, Scan):
            return plan.table
        return entry.built_by.removeprefix("index:")

    readers: dict[tuple, list[str]] = {}
    for other, st in conn.views.items():
        for plan, key, how in st.used:
            if how == "reused":
                readers.setdefault((plan, key), []).append(other)
    out = []
    for plan, key, how in conn.views[view].used:
        if how == "running":  # an aggregate keeping running states arranges nothing
            continue
        by = builder(plan, key, how)
        shared = [v for v in readers.get((plan, key), []) if v not in (view, by)]
        out.append(
            ArrangementInfo(
                collection(plan),
                tuple(plan.columns[i].name for i in key),
                how,
                by,
                tuple(dict.fromkeys(shared)),
            )
        )
    return out
