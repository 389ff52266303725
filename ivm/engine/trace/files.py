"""Trace batches as files (see ``ivm.engine.files``): a trace is written as the files of its batches.

A ``TraceBatch`` is immutable, so it is written once, as one Arrow IPC file, and never modified: its columns
(booleans as bytes; a ``uint8`` validity column beside each column that has NULLs), its times (a fixed-size
list per row), diffs and key hashes; the schema's metadata holds the format version, the key width and the
columns' dtypes. Reading views every array of the mapped file in place, so a reopened trace neither re-sorts
nor reads what it never touches.
"""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa

from ivm.engine.batch import Batch
from ivm.engine.files import (
    StoredFile,
    Written,
    columns_from_arrow,
    columns_to_arrow,
    join,
    read_table,
    view,
    write_table,
)
from ivm.engine.trace.batch import TraceBatch
from ivm.engine.trace.spine import Spine
from ivm.errors import OperationalError

__all__ = ["FORMAT", "read_batch", "read_trace", "write_batch", "write_trace"]

FORMAT = 1  # the layout below; a file of another version is refused, never misread


def write_batch(batch: TraceBatch, uri: str) -> StoredFile:
    """Write ``batch`` to a new file at ``uri``."""
    return write_table(_encode(batch), uri)


def read_batch(file: StoredFile) -> TraceBatch:
    """The batch in ``file``, its arrays viewing the mapped file; an ``OperationalError`` naming the file when
    it is missing, of another size or checksum, or not a batch of this format."""
    columns, meta = read_table(file, f"a trace batch of format {FORMAT}")
    try:
        return _decode(columns, meta)
    except (pa.ArrowException, KeyError, ValueError) as err:
        raise OperationalError(f"{file.path} is not a trace batch of format {FORMAT}: {err}") from None


def write_trace(batches: list[TraceBatch], directory: str, written: Written) -> list[StoredFile]:
    """The files of a spine's readable ``batches`` (``Spine.batches()``, oldest first), each written under
    ``directory`` unless ``written`` (by batch identity, kept from checkpoint to checkpoint) holds it already:
    batches are immutable, so a batch is written once whatever the number of checkpoints naming it."""
    out = []
    for b in batches:
        file = written.get(b)
        if file is None:
            file = written.put(b, write_batch(b, join(directory, f"{uuid.uuid4().hex}.arrow")))
        out.append(file)
    return out


def read_trace(spine: Spine, files: list[StoredFile]) -> list[TraceBatch]:
    """Load ``spine`` with the batches of ``files``, as ``write_trace`` named them (its contents are replaced);
    the batches read."""
    batches = [read_batch(f) for f in files]
    spine.load(batches)
    return batches


def _encode(batch: TraceBatch) -> pa.Table:
    u = batch.updates
    arrays, names = columns_to_arrow(u.columns, u.valid)
    times = np.ascontiguousarray(u.times)
    arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(times.reshape(-1)), u.dim))
    arrays += [pa.array(u.diffs), pa.array(batch.hashes)]
    names += ["time", "diff", "hash"]
    meta = {
        "ivm.format": str(FORMAT),
        "ivm.nkey": str(batch.nkey),
        "ivm.dtypes": ",".join(c.dtype.str for c in u.columns),
    }
    return pa.Table.from_arrays(arrays, names=names).replace_schema_metadata(meta)


def _decode(columns: dict[str, pa.Array], meta: dict[str, str]) -> TraceBatch:
    if meta.get("ivm.format") != str(FORMAT):
        raise ValueError(f"format {meta.get('ivm.format')!r}")
    nkey = int(meta["ivm.nkey"])
    dtypes = [np.dtype(d) for d in meta["ivm.dtypes"].split(",") if d]
    cols, valid = columns_from_arrow(columns, dtypes)
    times = columns["time"]
    t = view(times.flatten()).reshape(-1, times.type.list_size)
    updates = Batch(tuple(cols), tuple(valid), t, view(columns["diff"]))
    return TraceBatch(updates, view(columns["hash"]), nkey)
