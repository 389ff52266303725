"""A dataflow's state at rest: written as files between steps, and loaded into the same dataflow built again.

Between steps every queue is empty, so a dataflow's state is what its operators keep: each arrangement's
trace (its readable batches), each linear aggregate's running states, each reduce's trace of the groups it
could not compute, the rows in error, and the frontier (a window's rows in order are not saved: they are taken
again from its output's arrangement; see ``ivm.engine.operators.ordered``).
``save`` writes that under a directory and returns a JSON-able description naming the files; it is
``capture`` (at rest, quick: the batches, which are immutable, by reference; copies of the running states
changed since they were last written) then ``write`` (the files, which may run in another thread while the
dataflow goes on). ``load`` gives a dataflow built the same way (same operators, in the same order) that
state instead of what it has, and refuses one built differently (its ``shape`` differs). Traces read through
imports belong to the dataflow that built them and are saved there. Files already written for an immutable
batch are not written again.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from ivm.engine.dataflow import Dataflow
from ivm.engine.files import StoredFile, Written, join, read_arrays, write_arrays
from ivm.engine.operators.arrange import ArrangeOp, ImportOp
from ivm.engine.operators.iterate import LoopOp
from ivm.engine.operators.reduce import ReduceOp
from ivm.engine.scope import Operator, Scope
from ivm.engine.trace import Spine
from ivm.engine.trace.files import read_trace, write_trace

__all__ = [
    "operators",
    "shape",
    "at_rest",
    "Captured",
    "capture",
    "write",
    "save",
    "load",
    "save_trace",
    "load_trace",
    "resume",
    "Mismatch",
]


class Mismatch(Exception):
    """The dataflow is not built as the saved one was (another plan, or another engine)."""


def operators(df: Dataflow) -> Iterator[tuple[str, Operator]]:
    """Every operator with its path: its index in its scope, after its loops' indices (``3/1``)."""

    def walk(scope: Scope, prefix: str) -> Iterator[tuple[str, Operator]]:
        for i, op in enumerate(scope.operators):
            path = f"{prefix}{i}"
            yield path, op
            if isinstance(op, LoopOp):
                yield from walk(op.inner, f"{path}/")

    return walk(df.scope, "")


def shape(df: Dataflow) -> str:
    """A digest of the dataflow's operators: kinds, paths, and the key and columns of what they arrange."""
    h = hashlib.sha256()
    for path, op in operators(df):
        h.update(f"{path}:{op.name}".encode())
        if isinstance(op, ArrangeOp):
            h.update(f":{op.nkey}:{','.join(d.str for d in op.dtypes)}:{op.trace.dim}".encode())
        if isinstance(op, ReduceOp):
            h.update(f":{type(op.reducer).__name__}:{op.state is not None}".encode())
        h.update(b"\n")
    return h.hexdigest()


def at_rest(df: Dataflow) -> bool:
    """Whether nothing waits in the dataflow: every queue is empty (between steps)."""
    for _, op in operators(df):
        if any(True for _ in op.pending_points()):
            return False
        if isinstance(op, ImportOp) and op.history:
            return False
    return not any(inp.staged for inp in df.inputs)


def save_trace(op: ArrangeOp, directory: str, written: Written) -> list[dict]:
    """The files of an arrangement's trace (written unless ``written`` holds them), described."""
    return write_batches(list(op.trace.batches()), directory, written)


def write_batches(batches: list, directory: str, written: Written) -> list[dict]:
    """The files of a trace's ``batches`` (as ``capture`` took them), described."""
    return [f.to_json() for f in write_trace(batches, directory, written)]


def load_trace(op: ArrangeOp, saved: list[dict], written: Written) -> None:
    """Replace an arrangement's trace contents with the saved batches (noted in ``written``, so that no
    later checkpoint writes them again)."""
    _load_spine(op.trace, saved, written)


def _load_spine(spine: Spine, saved: list[dict], written: Written) -> None:
    files = [StoredFile.from_json(f) for f in saved]
    for b, f in zip(read_trace(spine, files), files, strict=True):
        written.put(b, f)


@dataclass
class Captured:
    """A dataflow's state at one moment, ready to be written: each arrangement's batches, each running state
    (the object, its version, and a copy of its columns unless a file holds that version already)."""

    frontier: int
    errors: dict
    shape: str
    traces: dict[str, list]
    running: dict[str, tuple[object, int, dict | None]]


def capture(df: Dataflow, written: Written) -> Captured:
    """The dataflow's state now (it must be at rest), so that ``write`` can write it while the dataflow goes
    on: batches are immutable and taken by reference; running states change in place and are copied."""
    if not at_rest(df):
        raise RuntimeError(f"dataflow {df.name!r} is not at rest")
    traces, running = {}, {}
    for path, op in operators(df):
        if isinstance(op, ArrangeOp) and op.handle is not None:
            traces[path] = list(op.trace.batches())
        if isinstance(op, ReduceOp) and op.error_trace is not None:
            traces[f"{path}:errors"] = list(op.error_trace.batches())
        if isinstance(op, ReduceOp) and op.state is not None:
            version = op.state.writes
            fresh = written.get(op.state, version) is None
            columns = {k: a.copy() for k, a in op.state.columns().items()} if fresh else None
            running[path] = (op.state, version, columns)
    return Captured(df.frontier, dict(df.errors), shape(df), traces, running)


def write(c: Captured, directory: str, written: Written) -> dict:
    """Write what ``capture`` took under ``directory`` (what ``written`` holds is not written again); its
    description (JSON-able), as ``load`` takes it."""
    ops: dict[str, dict] = {p: {"trace": write_batches(bs, directory, written)} for p, bs in c.traces.items()}
    for path, (state, version, columns) in c.running.items():
        file = written.get(state, version)
        if file is None:
            uri = join(directory, f"{uuid.uuid4().hex}.arrow")
            file = written.put(state, write_arrays(columns, uri), version)
        ops[path] = {"running": file.to_json()}
    return {"frontier": c.frontier, "errors": c.errors, "shape": c.shape, "operators": ops}


def save(df: Dataflow, directory: str, written: Written) -> dict:
    """Write the dataflow's state under ``directory``; its description (JSON-able)."""
    return write(capture(df, written), directory, written)


def load(df: Dataflow, saved: dict, written: Written) -> None:
    """Give ``df`` (built as the saved dataflow was, and at rest) the saved state; ``Mismatch`` if it is
    built otherwise. Call ``resume`` once every dataflow is loaded."""
    if saved["shape"] != shape(df):
        raise Mismatch(f"dataflow {df.name!r} is built differently")
    ops = saved["operators"]
    for path, op in operators(df):
        entry = ops.get(path)
        if isinstance(op, ArrangeOp) and op.handle is not None:
            load_trace(op, entry["trace"] if entry else [], written)
        if isinstance(op, ReduceOp) and op.ordered is not None:
            op.ordered.reset()  # its rows in order are taken again from its output's arrangement, as loaded
        if isinstance(op, ReduceOp) and f"{path}:errors" in ops:
            _load_spine(op.make_error_trace(), ops[f"{path}:errors"]["trace"], written)
        if isinstance(op, ReduceOp) and op.state is not None:
            if entry is None:
                raise Mismatch(f"dataflow {df.name!r} has no running state saved at {path}")
            file = StoredFile.from_json(entry["running"])
            columns, _ = read_arrays(file, "running states")
            op.state.load(columns)
            written.put(op.state, file, op.state.writes)
    df.errors = {str(k): int(v) for k, v in saved["errors"].items()}


def resume(df: Dataflow, frontier: int) -> None:
    """Put a loaded dataflow at ``frontier``: every time before it retired, its readers' frontiers there."""
    df.frontier = frontier  # and with it every handle the dataflow holds
    for _, op in operators(df):
        if isinstance(op, ReduceOp):
            # its input, as saved, may hold updates compacted up to ``frontier``: its next step is not one that
            # the input at that epoch is all new in (see ``ReduceOp.fresh``)
            op.seen = frontier
    for inp in df.inputs:
        inp.frontier = max(inp.frontier, frontier)
