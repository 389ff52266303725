"""The write-ahead log: committed changes, appended before COMMIT returns, replayed after a checkpoint.

The log is a directory of segments; a checkpoint starts a new segment, and its manifest names the first
segment to replay. A segment is a sequence of frames, each a header (magic, kind, length, CRC-32) and an
Arrow IPC stream: the strings the connection's pool added since the last frame (so that the text codes of
the rows that follow mean what they meant), the rows of one table (columns, validity, times, diffs, exactly as
they entered the engine), and a commit frame closing every commit (the connection's time after it, and the
positions of its sources). A group frame says that the frames of the next so many bytes are one commit group
(``Connection.commit_group``): written in one append, they count only if all of them can be read. Frames
after the last commit frame (or whole group) belong to commits that never returned and are ignored; so is a
frame cut short at the end of the last segment. A damaged frame anywhere else is an error naming the segment
and offset: the commits after it were acknowledged and cannot be skipped.

On an object store, where nothing is appended to, a segment is a sequence of parts (``SEGMENT-PART.log``),
one object per append, written whole; read in order, its parts are the segment's bytes.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ivm.engine.batch import Batch
from ivm.engine.files import (
    columns_from_arrow,
    columns_to_arrow,
    is_local,
    join,
    listdir,
    makedirs,
    read_whole,
    remove,
    sync_dir,
    to_arrow,
    view,
    write_bytes,
)
from ivm.errors import OperationalError

__all__ = [
    "Log",
    "ObjectLog",
    "open_log",
    "Commit",
    "read_log",
    "segments",
    "strings_frame",
    "rows_frame",
    "commit_frame",
    "group_frame",
]

MAGIC = b"IVMW"
HEADER = struct.Struct("<4sBxxxQI")  # magic, kind, length, crc32
STRINGS, ROWS, COMMIT, GROUP = 1, 2, 3, 4


@dataclass
class Commit:
    """One logged commit (or several transactions committed at once): what to replay."""

    start: int  # the connection's time it began at
    time: int  # the connection's time after it
    positions: dict
    strings: list[tuple[int, pa.Array, np.ndarray]] = field(default_factory=list)  # (first code, text, canon)
    rows: list[tuple[str, Batch]] = field(default_factory=list)


_NAME = re.compile(r"(\d{12})(?:-(\d{6}))?\.log$")


def _files(directory: str) -> dict[int, list[tuple[int, str]]]:
    """The log's files by segment: (part, name) in order (a local segment is one file, part -1)."""
    out: dict[int, list[tuple[int, str]]] = {}
    for name in listdir(directory):
        m = _NAME.match(name)
        if m:
            out.setdefault(int(m.group(1)), []).append((int(m.group(2) or -1), name))
    return {k: sorted(v) for k, v in out.items()}


def segments(directory: str) -> list[int]:
    """The numbers of the log's segments, in order."""
    return sorted(_files(directory))


def remove_segment(directory: str, number: int) -> None:
    for _, name in _files(directory).get(number, []):
        remove(join(directory, name))


def segment_path(directory: str, number: int) -> str:
    return join(directory, f"{number:012d}.log")


def open_log(directory: str, segment: int, synchronous: bool = True) -> Log | ObjectLog:
    """The log in ``directory``, appending to ``segment``: a file appended to locally, parts elsewhere."""
    if is_local(directory):
        return Log(directory, segment, synchronous)
    return ObjectLog(directory, segment, synchronous)


class Log:
    """Appends frames to the newest segment; ``synchronous`` syncs each append to disk before it returns
    (off, a crash of the machine, not of the process, may lose the last commits)."""

    def __init__(self, directory: str, segment: int, synchronous: bool = True) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.synchronous = synchronous
        self.segment = segment
        self.bytes = 0  # written since the segment began
        self._fd = os.open(segment_path(directory, segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.bytes = os.fstat(self._fd).st_size

    def append(self, frames: list[bytes]) -> None:
        """Write frames at the end of the segment, durable on return (with ``synchronous``)."""
        data = b"".join(frames)
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.synchronous:
            os.fdatasync(self._fd)
        self.bytes += len(data)

    def sync(self) -> None:
        """Make everything appended so far durable (what ``synchronous`` does at each append)."""
        os.fdatasync(self._fd)

    def roll(self) -> int:
        """Start the next segment (a checkpoint's): its number."""
        self.close()
        self.segment += 1
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        self._fd = os.open(segment_path(self.directory, self.segment), flags, 0o644)
        self.bytes = 0
        sync_dir(self.directory)
        return self.segment

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ObjectLog:
    """The log on an object store: each append is one object (a part of the segment), durable once written,
    whatever ``synchronous`` says."""

    def __init__(self, directory: str, segment: int, synchronous: bool = True) -> None:
        makedirs(directory)
        self.directory = directory
        self.synchronous = synchronous
        self.segment = segment
        parts = _files(directory).get(segment, [])
        self.part = parts[-1][0] + 1 if parts else 0
        self.bytes = 0
        for _, name in parts:
            self.bytes += len(read_whole(join(directory, name)))

    def append(self, frames: list[bytes]) -> None:
        data = b"".join(frames)
        write_bytes(data, join(self.directory, f"{self.segment:012d}-{self.part:06d}.log"))
        self.part += 1
        self.bytes += len(data)

    def sync(self) -> None:
        """Nothing to do: every part is durable once written."""

    def roll(self) -> int:
        self.segment += 1
        self.part = self.bytes = 0
        return self.segment

    def close(self) -> None:
        pass


_OPTIONS = pa.ipc.IpcWriteOptions()  # made once: making them reads the environment


def _frame(kind: int, table: pa.Table | pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_OPTIONS) as writer:
        writer.write(table)
    payload = sink.getvalue().to_pybytes()
    return HEADER.pack(MAGIC, kind, len(payload), zlib.crc32(payload)) + payload


def strings_frame(start: int, strings: pa.Array, canonical: np.ndarray) -> bytes:
    """A frame of the strings that took codes ``start`` onwards, and whether each was canonical."""
    table = pa.table({"s": strings.cast(pa.large_string()), "canonical": pa.array(canonical.view(np.uint8))})
    return _frame(STRINGS, table.replace_schema_metadata({"ivm.start": str(start)}))


def rows_frame(table: str, batch: Batch) -> bytes:
    """A frame of a table's changes as they entered the engine (one time coordinate)."""
    arrays, names = columns_to_arrow(batch.columns, batch.valid)
    arrays += [to_arrow(batch.times[:, 0]), to_arrow(batch.diffs)]
    names += ["time", "diff"]
    meta = {"ivm.table": table, "ivm.dtypes": ",".join(c.dtype.str for c in batch.columns)}
    return _frame(ROWS, pa.RecordBatch.from_arrays(arrays, names=names).replace_schema_metadata(meta))


def commit_frame(start: int, time: int, positions: dict) -> bytes:
    """The frame closing a commit: the connection's times before and after it, its sources' positions."""
    meta = {"ivm.commit": json.dumps({"start": start, "time": time, "positions": positions})}
    return _frame(COMMIT, pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(meta))


def group_frame(frames: list[bytes]) -> bytes:
    """The frame opening a commit group: how many bytes of frames that follow belong to it."""
    meta = {"ivm.group": str(sum(len(f) for f in frames))}
    return _frame(GROUP, pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(meta))


def read_log(directory: str, first: int) -> list[Commit]:
    """The complete commits logged in segments ``first`` onwards, in order. The tail of a commit that never
    returned, at the end of the last segment, is cut off, so that appends follow whole commits."""
    files = _files(directory)
    numbers = [n for n in sorted(files) if n >= first]
    out: list[Commit] = []
    for k, number in enumerate(numbers):
        parts = [(name, read_whole(join(directory, name))) for _, name in files[number]]
        data = b"".join(p for _, p in parts)
        path = join(directory, parts[0][0]) if len(parts) == 1 else segment_path(directory, number)
        commits, end = _read_segment(data, path, last=k == len(numbers) - 1)
        out += commits
        if end < len(data):
            _cut(directory, parts, end)
    return out


def _cut(directory: str, parts: list[tuple[str, bytes]], end: int) -> None:
    """Cut a segment's files at byte ``end`` of the whole."""
    for name, part in parts:
        uri = join(directory, name)
        if end <= 0:
            remove(uri)
        elif end < len(part):
            if is_local(uri):
                os.truncate(uri, end)
            else:
                write_bytes(part[:end], uri)
        end -= len(part)


def _read_segment(data: bytes, path: str, last: bool) -> tuple[list[Commit], int]:
    """The commits of a segment's bytes and where its last whole commit (or whole group) ends."""
    pos = end_of_commits = 0
    commits: list[Commit] = []
    pending: list[tuple[int, pa.Table]] = []
    group: tuple[int, int, int] | None = None  # an open group's offset, end, and first commit
    while True:
        if group is not None and pos == group[1]:
            group, end_of_commits = None, pos
        if pos >= len(data):
            break
        end = pos + HEADER.size
        bad = end > len(data)
        if not bad:
            magic, kind, length, crc = HEADER.unpack_from(data, pos)
            bad = magic != MAGIC or end + length > len(data) or zlib.crc32(data[end : end + length]) != crc
            bad = bad or (group is not None and end + length > group[1])
        if bad:
            if last and not _more_commits(data, pos + 1 if group is None else group[1]):
                break  # the tail of commits that never returned
            raise OperationalError(f"{path} is damaged at byte {pos}: a logged commit cannot be read")
        try:
            table = pa.ipc.open_stream(pa.py_buffer(data[end : end + length])).read_all()
        except pa.ArrowException as err:
            raise OperationalError(f"{path} is damaged at byte {pos}: {err}") from None
        start, pos = pos, end + length
        if kind == GROUP:
            if group is not None or pending:
                raise OperationalError(f"{path} is damaged at byte {start}: a group opens inside another")
            group = (start, pos + int(table.schema.metadata[b"ivm.group"]), len(commits))
            continue
        if kind != COMMIT:
            pending.append((kind, table))
            continue
        info = json.loads(table.schema.metadata[b"ivm.commit"])
        commit = Commit(int(info["start"]), int(info["time"]), dict(info.get("positions") or {}))
        for k, t in pending:
            meta = {a.decode(): b.decode() for a, b in (t.schema.metadata or {}).items()}
            if k == STRINGS:
                canon = t.column("canonical").to_numpy().astype(bool)
                commit.strings.append((int(meta["ivm.start"]), t.column("s").combine_chunks(), canon))
            elif k == ROWS:
                commit.rows.append((meta["ivm.table"], _batch(t, meta)))
        pending = []
        commits.append(commit)
        if group is None:
            end_of_commits = pos
    if group is not None:  # a group cut short: none of its commits returned
        if not last:
            raise OperationalError(f"{path} is damaged at byte {group[0]}: a commit group is cut short")
        del commits[group[2] :]
    return commits, end_of_commits


def _more_commits(data: bytes, start: int) -> bool:
    """Whether a valid commit frame starts at or after ``start`` (then the damage is not a torn tail)."""
    i = data.find(MAGIC, start)
    while i >= 0:
        if i + HEADER.size <= len(data):
            _, kind, length, crc = HEADER.unpack_from(data, i)
            stop = i + HEADER.size + length
            if kind == COMMIT and stop <= len(data) and zlib.crc32(data[i + HEADER.size : stop]) == crc:
                return True
        i = data.find(MAGIC, i + 1)
    return False


def _batch(t: pa.Table, meta: dict[str, str]) -> Batch:
    arrays = {name: t.column(name).combine_chunks() for name in t.schema.names}
    cols, valid = columns_from_arrow(arrays, [np.dtype(d) for d in meta["ivm.dtypes"].split(",") if d])
    times = view(arrays["time"]).reshape(-1, 1)
    return Batch(tuple(cols), tuple(valid), times, view(arrays["diff"]))
