"""Engine state as files: Arrow IPC, written once, opened memory-mapped, checked by checksum.

Everything the engine writes (trace batches, running states, the string pool) is an immutable Arrow table in
one IPC file: a local file is written under a temporary name, synced and renamed into place, so the name only
ever holds a whole file; any other ``pyarrow.fs`` URI (an object store's, whose objects are written whole) is
written as one object. A URI may carry the file system's options as a query (``s3://b/db?region=...``): the
names joined under it keep them. Reading maps a local file and views its
arrays in place, so what is never touched is never read and the OS may page it out. Writing returns the file's
size and CRC-32, which whoever names the file (a checkpoint's manifest) keeps; reading checks both, so a torn,
cut or corrupted file raises an ``OperationalError`` naming it and never yields values.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import urllib.parse
import weakref
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ivm.errors import OperationalError

__all__ = [
    "StoredFile",
    "Written",
    "resolve",
    "join",
    "is_local",
    "listdir",
    "makedirs",
    "remove",
    "read_whole",
    "write_bytes",
    "read_ahead",
    "write_table",
    "read_table",
    "write_arrays",
    "read_arrays",
    "sync_dir",
    "columns_to_arrow",
    "to_arrow",
    "columns_from_arrow",
]


@dataclass(frozen=True)
class StoredFile:
    """Where a file was written and what checks it on reading."""

    path: str
    size: int
    crc32: int

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> StoredFile:
        return StoredFile(str(d["path"]), int(d["size"]), int(d["crc32"]))


class Written:
    """The file each object (an immutable batch or string chunk, or a mutable state at a version) was last
    written to, kept from checkpoint to checkpoint so that nothing is written twice. Objects are held weakly:
    what a merge replaced is not kept alive for the sake of its file."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple] = {}

    def get(self, obj: object, version: int | None = None) -> StoredFile | None:
        entry = self._by_id.get(id(obj))
        if entry is None or entry[0]() is not obj or entry[2] != version:
            return None
        return entry[1]

    def put(self, obj: object, file: StoredFile, version: int | None = None) -> StoredFile:
        self._by_id[id(obj)] = (weakref.ref(obj), file, version)
        return file

    def keep(self, paths: set[str]) -> None:
        """Forget every object gone, or whose file is not among ``paths``."""
        self._by_id = {k: e for k, e in self._by_id.items() if e[0]() is not None and e[1].path in paths}


_LOCAL = pafs.LocalFileSystem()
_FILE_SYSTEMS: dict[tuple[str, str, str], tuple[pafs.FileSystem, str]] = {}  # (scheme, host, query) -> fs, root


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system and path of a local path or a URI (``file://``, ``s3://``, ...). The file system of a
    URI is made once per scheme, host and options, not per file (an object store's client is costly)."""
    if "://" not in uri:
        return _LOCAL, os.path.abspath(uri)
    parts = urllib.parse.urlsplit(uri)
    key = (parts.scheme, parts.netloc, parts.query)
    inner = parts.path.lstrip("/")
    known = _FILE_SYSTEMS.get(key)
    if known is not None:
        return known[0], known[1] + inner
    fs, path = pafs.FileSystem.from_uri(uri)
    if path.endswith(inner):
        _FILE_SYSTEMS[key] = (fs, path[: len(path) - len(inner)])
    return fs, path


def is_local(uri: str) -> bool:
    """Whether ``uri`` names a local file (which can be mapped, appended to, synced and locked)."""
    return isinstance(resolve(uri)[0], pafs.LocalFileSystem)


def join(uri: str, *names: str) -> str:
    """``names`` under the directory ``uri``, keeping a URI's query (its file system's options) at the end."""
    if "://" not in uri:
        return os.path.join(uri, *names)
    base, mark, query = uri.partition("?")
    return "/".join([base.rstrip("/"), *names]) + mark + query


def listdir(uri: str) -> list[str]:
    """The names in the directory ``uri`` (none if it does not exist)."""
    fs, path = resolve(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos)


def makedirs(uri: str) -> None:
    fs, path = resolve(uri)
    fs.create_dir(path, recursive=True)


def remove(uri: str) -> None:
    """Delete the file ``uri``, if it is there."""
    fs, path = resolve(uri)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def read_whole(uri: str) -> bytes:
    """The bytes of the file ``uri``, read whole (small files: manifests, a log's parts)."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def write_bytes(buf: pa.Buffer | bytes, uri: str, sync: bool = True) -> StoredFile:
    """Write ``buf`` as the whole of a new file at ``uri`` (locally: temporary name, sync, rename)."""
    fs, path = resolve(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(buf)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    else:
        with fs.open_output_stream(path) as out:
            out.write(buf)
    size = buf.size if isinstance(buf, pa.Buffer) else len(buf)
    return StoredFile(uri, size, zlib.crc32(buf))


_AHEAD: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ahead", default=None)  # file -> Buffer


@contextlib.contextmanager
def read_ahead(files: Iterable[StoredFile], threads: int | None = None) -> Iterator[None]:
    """Read and check ``files`` now, several at once (checksums run outside the GIL, reads overlap), so that
    reading them inside the block finds them checked: what loading a whole checkpoint does first."""
    todo = list(dict.fromkeys(files))
    threads = threads or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(threads) as pool:
        buffers = dict(zip(todo, pool.map(read_bytes, todo), strict=True))
    token = _AHEAD.set({**(_AHEAD.get() or {}), **buffers})
    try:
        yield
    finally:
        _AHEAD.reset(token)


def read_bytes(file: StoredFile) -> pa.Buffer:
    """The bytes of ``file`` (mapped, when local), checked against its size and checksum."""
    ahead = (_AHEAD.get() or {}).get(file)
    if ahead is not None:
        return ahead
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
    return buf


def sync_dir(directory: str) -> None:
    """Make the names created in a local directory durable (a no-op elsewhere)."""
    fs, path = resolve(directory)
    if isinstance(fs, pafs.LocalFileSystem) and hasattr(os, "O_DIRECTORY"):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_table(table: pa.Table, uri: str) -> StoredFile:
    """Write ``table`` (one record batch) as an Arrow IPC file at ``uri``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))
    return write_bytes(sink.getvalue(), uri)


def read_table(file: StoredFile, what: str = "an ivm file") -> tuple[dict[str, pa.Array], dict[str, str]]:
    """The columns (by name) and schema metadata of the table in ``file``; an ``OperationalError`` naming the
    file when it is missing, damaged or not ``what``."""
    buf = read_bytes(file)
    try:
        reader = pa.ipc.open_file(buf)
        meta = {k.decode(): v.decode() for k, v in (reader.schema.metadata or {}).items()}
        if reader.num_record_batches:
            batch = reader.get_batch(0)
            columns = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
        else:
            empty = reader.schema.empty_table()
            columns = {name: empty.column(name).combine_chunks() for name in empty.schema.names}
    except (pa.ArrowException, ValueError) as err:
        raise OperationalError(f"{file.path} is not {what}: {err}") from None
    return columns, meta


def write_arrays(arrays: dict[str, np.ndarray], uri: str, meta: dict[str, str] | None = None) -> StoredFile:
    """Write one-dimensional numpy arrays of one length (booleans as bytes) with their dtypes."""
    names = list(arrays)
    values = [arrays[n].view(np.uint8) if arrays[n].dtype == np.bool_ else arrays[n] for n in names]
    info = {"ivm.arrays": ";".join(f"{n}={arrays[n].dtype.str}" for n in names), **(meta or {})}
    table = pa.Table.from_arrays([pa.array(v) for v in values], names=names).replace_schema_metadata(info)
    return write_table(table, uri)


def read_arrays(file: StoredFile, what: str = "arrays") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The arrays ``write_arrays`` wrote (read-only views of the mapped file) and its metadata."""
    columns, meta = read_table(file, what)
    try:
        dtypes = dict(part.split("=", 1) for part in meta["ivm.arrays"].split(";") if part)
        out = {n: view(columns[n]).view(np.dtype(d)) for n, d in dtypes.items()}
    except (KeyError, ValueError, pa.ArrowException) as err:
        raise OperationalError(f"{file.path} is not {what}: {err}") from None
    return out, meta


def view(arr: pa.Array) -> np.ndarray:
    """A primitive Arrow array (without NULLs) as numpy, without copying."""
    return arr.to_numpy(zero_copy_only=True)


def columns_to_arrow(columns, valid) -> tuple[list[pa.Array], list[str]]:
    """Columns as Arrow arrays named ``c{i}``, booleans as bytes, each with NULLs followed by its ``uint8``
    validity ``v{i}``: the layout every file and log frame of the engine uses."""
    arrays, names = [], []
    for i, (col, mask) in enumerate(zip(columns, valid, strict=True)):
        arrays.append(to_arrow(col.view(np.uint8) if col.dtype == np.bool_ else col))
        names.append(f"c{i}")
        if mask is not None:
            arrays.append(to_arrow(mask.view(np.uint8)))
            names.append(f"v{i}")
    return arrays, names


_ARROW_TYPES: dict[np.dtype, pa.DataType] = {}


def to_arrow(a: np.ndarray) -> pa.Array:
    """A one-dimensional numpy array of numbers (no NULLs) as an Arrow array over the same memory: what
    ``pa.array`` gives, without its checks for pandas and masks, which cost more than the copy for the few
    rows of a small transaction's log frame."""
    a = np.ascontiguousarray(a)
    t = _ARROW_TYPES.get(a.dtype)
    if t is None:
        t = _ARROW_TYPES[a.dtype] = pa.from_numpy_dtype(a.dtype)
    return pa.Array.from_buffers(t, len(a), [None, pa.py_buffer(a)])


def columns_from_arrow(arrays: dict[str, pa.Array], dtypes) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """The columns and validity ``columns_to_arrow`` laid out, as numpy views of the arrays."""
    cols, valid = [], []
    for i, dtype in enumerate(dtypes):
        cols.append(view(arrays[f"c{i}"]).view(dtype))
        valid.append(view(arrays[f"v{i}"]).view(np.bool_) if f"v{i}" in arrays else None)
    return cols, valid
