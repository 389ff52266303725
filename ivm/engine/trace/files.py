"""Trace batches as files: Arrow IPC, opened memory-mapped, checked by checksum.

A ``TraceBatch`` is immutable, so it is written once, as one Arrow IPC file, and never modified: its columns
(booleans as bytes; a ``uint8`` validity column beside each column that has NULLs), its times (a fixed-size
list per row), diffs and key hashes; the schema's metadata holds the format version, the key width and the
columns' dtypes. Reading maps a local file and views every array in place, so a reopened trace neither
re-sorts nor reads what it never touches, and the OS may page it out; a file elsewhere (any ``pyarrow.fs``
URI) is read into memory. Writing returns the file's size and CRC-32, which whoever names the file (a
checkpoint's manifest) keeps; reading checks both, so a torn, cut or corrupted file raises an error naming
it and never yields rows.
"""

from __future__ import annotations

import os
import uuid
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ivm.engine.batch import Batch
from ivm.engine.trace.batch import TraceBatch
from ivm.engine.trace.spine import Spine
from ivm.errors import OperationalError

__all__ = ["FORMAT", "BatchFile", "read_batch", "read_trace", "resolve", "write_batch", "write_trace"]

FORMAT = 1  # the layout below; a file of another version is refused, never misread


@dataclass(frozen=True)
class BatchFile:
    """Where a batch was written and what checks it on reading."""

    path: str
    size: int
    crc32: int


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system and path of a local path or a URI (``file://``, ``s3://``, ...)."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return pafs.FileSystem.from_uri(uri)


def write_batch(batch: TraceBatch, uri: str) -> BatchFile:
    """Write ``batch`` to a new file at ``uri``: a local file is written under a temporary name, synced and
    renamed into place, so the name only ever holds a whole file."""
    buf = _encode(batch)
    fs, path = resolve(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(buf)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    else:
        with fs.open_output_stream(path) as out:
            out.write(buf)
    return BatchFile(uri, buf.size, zlib.crc32(buf))


def read_batch(file: BatchFile) -> TraceBatch:
    """The batch in ``file``, its arrays viewing the mapped file; an ``OperationalError`` naming the file when
    it is missing, of another size or checksum, or not a batch of this format."""
    fs, path = resolve(file.path)
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            buf = pa.memory_map(path, "r").read_buffer()
        else:
            with fs.open_input_file(path) as f:
                buf = f.read_buffer()
    except (OSError, pa.ArrowException) as err:
        raise OperationalError(f"cannot read {file.path}: {err}") from None
    if buf.size != file.size:
        raise OperationalError(f"{file.path} is damaged: {buf.size} bytes where {file.size} were written")
    if zlib.crc32(buf) != file.crc32:
        raise OperationalError(f"{file.path} is damaged: its checksum differs from the one written")
    try:
        return _decode(buf)
    except (pa.ArrowException, KeyError, ValueError) as err:
        raise OperationalError(f"{file.path} is not a trace batch of format {FORMAT}: {err}") from None


def write_trace(
    spine: Spine, directory: str, written: dict[int, tuple[TraceBatch, BatchFile]]
) -> list[BatchFile]:
    """The files of ``spine``'s readable batches, oldest first, each written under ``directory`` unless
    ``written`` (by batch identity, kept from checkpoint to checkpoint) holds it already: batches are
    immutable, so a batch is written once whatever the number of checkpoints naming it."""
    out = []
    for b in spine.batches():
        known = written.get(id(b))
        if known is None or known[0] is not b:
            known = written[id(b)] = (b, write_batch(b, f"{directory.rstrip('/')}/{uuid.uuid4().hex}.arrow"))
        out.append(known[1])
    return out


def read_trace(spine: Spine, files: list[BatchFile]) -> None:
    """Load ``spine`` (new, empty) with the batches of ``files``, as ``write_trace`` named them."""
    spine.load([read_batch(f) for f in files])


def _encode(batch: TraceBatch) -> pa.Buffer:
    u = batch.updates
    arrays, names = [], []
    for i, (col, mask) in enumerate(zip(u.columns, u.valid, strict=True)):
        arrays.append(pa.array(col.view(np.uint8) if col.dtype == np.bool_ else col))  # bytes, not bits
        names.append(f"c{i}")
        if mask is not None:
            arrays.append(pa.array(mask.view(np.uint8)))
            names.append(f"v{i}")
    times = np.ascontiguousarray(u.times)
    arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(times.reshape(-1)), u.dim))
    arrays += [pa.array(u.diffs), pa.array(batch.hashes)]
    names += ["time", "diff", "hash"]
    meta = {
        "ivm.format": str(FORMAT),
        "ivm.nkey": str(batch.nkey),
        "ivm.dtypes": ",".join(c.dtype.str for c in u.columns),
    }
    table = pa.Table.from_arrays(arrays, names=names).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(len(u), 1))
    return sink.getvalue()


def _decode(buf: pa.Buffer) -> TraceBatch:
    reader = pa.ipc.open_file(buf)
    meta = {k.decode(): v.decode() for k, v in (reader.schema.metadata or {}).items()}
    if meta.get("ivm.format") != str(FORMAT):
        raise ValueError(f"format {meta.get('ivm.format')!r}")
    nkey = int(meta["ivm.nkey"])
    dtypes = [np.dtype(d) for d in meta["ivm.dtypes"].split(",") if d]
    names = reader.schema.names
    if reader.num_record_batches:
        column = reader.get_batch(0).column
    else:  # no rows: empty arrays of the schema's types
        empty = reader.schema.empty_table()

        def column(name):
            return empty.column(name).combine_chunks()

    cols, valid = [], []
    for i, dtype in enumerate(dtypes):
        cols.append(_view(column(f"c{i}")).view(dtype))
        valid.append(_view(column(f"v{i}")).view(np.bool_) if f"v{i}" in names else None)
    times = column("time")
    t = _view(times.flatten()).reshape(-1, times.type.list_size)
    updates = Batch(tuple(cols), tuple(valid), t, _view(column("diff")))
    return TraceBatch(updates, _view(column("hash")), nkey)


def _view(arr: pa.Array) -> np.ndarray:
    """A primitive Arrow array (without NULLs) as numpy, without copying."""
    return arr.to_numpy(zero_copy_only=True)
