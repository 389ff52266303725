"""The write-ahead log: committed changes, appended before COMMIT returns, replayed after a checkpoint.

The log is a directory of segments; a checkpoint starts a new segment, and its manifest names the first
segment to replay. A segment is a sequence of frames, each a header of 20 bytes (magic ``IVMW``, kind, format
version, length, and a CRC-32 of the kind, version and length followed by the payload) and a payload. A commit
is one frame, written whole in one append (one ``write`` and one ``fdatasync``), whose payload is plain
little-endian bytes, since an Arrow IPC stream per table (a schema, a batch and its end, per frame) cost more
to write than the sync itself for the few rows of a small transaction:

- the connection's times before and after the commit, the first code of the strings its pool gained since the
  last commit logged (-1: none) and how many, the length of its sources' positions and that of the sequences of
  identity columns that moved since the last commit logged (each JSON, then, in that order);
- those strings, so that the text codes of the rows that follow mean what they meant: whether each was
  canonical (a byte each), their offsets (``int64``, one more than strings) and their UTF-8 bytes;
- per table changed: its row count, name and layout (each column's numpy type, ``?`` after one with NULLs),
  then each column's values, each NULL-able column's validity (a byte per row), the times and the diffs
  (``int64``): the changes exactly as they entered the engine.

A group frame says that the frames of the next so many bytes are one commit group
(``Connection.commit_group``): written in one append, they count only if all of them can be read. A frame cut
short or damaged at the end of the last segment, with no whole commit after it, is the tail of a commit that
never returned: it is cut off at open. A damaged frame anywhere else is an error naming the segment and the
byte the frame starts at: the commits after it were acknowledged and cannot be skipped. Frames of format 2
(which had no sequences) are read as before; frames of another format version (format 0 held Arrow IPC
streams, and a later ivm may write others) are refused, saying so.

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
    is_local,
    join,
    listdir,
    makedirs,
    read_whole,
    remove,
    sync_dir,
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
    "commit_frame",
    "group_frame",
]

MAGIC = b"IVMW"
VERSION = 3  # of the frames' layout; format 2 had no sequences, and frames of format 0 held Arrow IPC streams
READABLE = (2, 3)
HEADER = struct.Struct("<4sBBxxQI")  # magic, kind, format version, length, CRC-32
_CHECKED = struct.Struct("<BBxxQ")  # the header's part its CRC-32 covers, before the payload
COMMIT, GROUP = 3, 4
_COMMIT_2 = struct.Struct("<qqqqI")  # start, time, first string code (-1: none), strings, positions' bytes
_COMMIT = struct.Struct("<qqqqII")  # the same, then the sequences' bytes
_TABLE = struct.Struct("<qHH")  # rows, name's bytes, layout's bytes
_GROUP = struct.Struct("<Q")  # bytes of the group's frames
_INT64 = np.dtype(np.int64)


@dataclass
class Commit:
    """One logged commit (or several transactions committed at once): what to replay."""

    start: int  # the connection's time it began at
    time: int  # the connection's time after it
    positions: dict
    sequences: dict = field(default_factory=dict)  # per table, per identity column, its sequence's next value
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


def _frame(kind: int, payload: bytes) -> bytes:
    """A frame: its header (magic, kind, format version, length, and the CRC-32 of the header's kind, version
    and length followed by the payload) and the payload."""
    head = _CHECKED.pack(kind, VERSION, len(payload))
    return HEADER.pack(MAGIC, kind, VERSION, len(payload), zlib.crc32(payload, zlib.crc32(head))) + payload


def commit_frame(
    start: int,
    time: int,
    positions: dict,
    strings: tuple[int, pa.Array, np.ndarray] | None = None,
    rows: list[tuple[str, Batch]] | tuple = (),
    sequences: dict | None = None,
) -> bytes:
    """The frame of one commit: the connection's times before and after it, its sources' positions and the
    sequences that moved, the strings its pool gained (their first code, the strings, whether each was
    canonical) and each table's changes as they entered the engine (one time coordinate). See the module's
    docstring for the layout."""
    info = json.dumps(positions, separators=(",", ":")).encode() if positions else b""
    moved = json.dumps(sequences, separators=(",", ":")).encode() if sequences else b""
    parts: list = [None, info, moved]
    first, count = -1, 0
    if strings is not None:
        first, text, canonical = strings
        count = len(text)
        if text.type != pa.large_string():
            text = text.cast(pa.large_string())
        if text.null_count:
            raise ValueError("the log's strings cannot be NULL")
        _, offsets, data = text.buffers()
        offsets = np.frombuffer(offsets, np.int64, count + 1, text.offset * 8)
        begin, end = int(offsets[0]), int(offsets[-1])
        parts += [canonical.astype(np.bool_, copy=False), offsets - begin if begin else offsets]
        parts.append(memoryview(data)[begin:end] if data is not None else b"")
    for table, batch in rows:
        columns, valid = batch.columns, batch.valid
        layout = [_TYPES.get(c.dtype) or _type_name(c.dtype) for c in columns]
        if any(v is not None for v in valid):  # columns with NULLs: each followed by its validity
            columns = []
            for k, (c, v) in enumerate(zip(batch.columns, valid, strict=True)):
                columns.append(c)
                if v is not None:
                    columns.append(v.view(np.uint8))
                    layout[k] += "?"
        name, spec = table.encode(), ",".join(layout).encode()
        times, diffs = batch.times[:, 0], batch.diffs
        if times.dtype != _INT64 or diffs.dtype != _INT64:
            times, diffs = times.astype(_INT64), diffs.astype(_INT64)
        parts += [_TABLE.pack(len(batch), len(name), len(spec)), name, spec, *columns, times, diffs]
    parts[0] = _COMMIT.pack(start, time, first, count, len(info), len(moved))
    try:
        payload = b"".join(parts)
    except TypeError:  # an array that is not contiguous (times broadcast from one): copied
        payload = b"".join([np.ascontiguousarray(p) if isinstance(p, np.ndarray) else p for p in parts])
    return _frame(COMMIT, payload)


_TYPES: dict[np.dtype, str] = {}


def _type_name(dtype: np.dtype) -> str:
    """A column type as the log names it (numpy's, with its byte order: ``<i8``), remembered."""
    if dtype.kind not in "biuf" or dtype.itemsize not in (1, 2, 4, 8):
        raise ValueError(f"the log cannot hold a column of type {dtype}")
    _TYPES[dtype] = dtype.str
    return dtype.str


def group_frame(frames: list[bytes]) -> bytes:
    """The frame opening a commit group: how many bytes of frames that follow belong to it."""
    return _frame(GROUP, _GROUP.pack(sum(len(f) for f in frames)))


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
    group: tuple[int, int, int] | None = None  # an open group's offset, end, and first commit
    while True:
        if group is not None and pos == group[1]:
            group, end_of_commits = None, pos
        if pos >= len(data):
            break
        end = pos + HEADER.size
        bad = end > len(data)
        if not bad:
            magic, kind, version, length, crc = HEADER.unpack_from(data, pos)
            bad = magic != MAGIC or end + length > len(data) or _crc(data, pos, length) != crc
            if bad and version != VERSION and _whole_in_format_0(data, pos):
                raise OperationalError(
                    f"{path} holds log frames of format {version} (at byte {pos}), this ivm reads format "
                    f"{VERSION}: open the database with the ivm that wrote it, whose clean stop leaves no log"
                )
            if not bad and version not in READABLE:
                raise OperationalError(
                    f"{path} holds log frames of format {version} (at byte {pos}), this ivm reads formats "
                    f"{' and '.join(map(str, READABLE))}: open the database with the ivm that wrote it"
                )
            bad = bad or (group is not None and end + length > group[1])
        if bad:
            if last and not _more_commits(data, pos + 1 if group is None else group[1]):
                break  # the tail of commits that never returned
            raise OperationalError(f"{path} is damaged at byte {pos}: a logged commit cannot be read")
        start, pos = pos, end + length
        if kind == GROUP:
            if group is not None or length != _GROUP.size:
                raise OperationalError(f"{path} is damaged at byte {start}: a group opens inside another")
            group = (start, pos + _GROUP.unpack_from(data, end)[0], len(commits))
            continue
        if kind != COMMIT:
            raise OperationalError(f"{path} is damaged at byte {start}: a frame of unknown kind {kind}")
        try:
            commits.append(_commit(data, end, pos, version))
        except (ValueError, TypeError, UnicodeDecodeError, struct.error, pa.ArrowException) as err:
            raise OperationalError(f"{path} is damaged at byte {start}: {err}") from None
        if group is None:
            end_of_commits = pos
    if group is not None:  # a group cut short: none of its commits returned
        if not last:
            raise OperationalError(f"{path} is damaged at byte {group[0]}: a commit group is cut short")
        del commits[group[2] :]
    return commits, end_of_commits


def _crc(data: bytes, pos: int, length: int) -> int:
    """The CRC-32 of the frame at ``pos`` as its header should hold it."""
    end = pos + HEADER.size
    with memoryview(data) as whole:
        return zlib.crc32(whole[end : end + length], zlib.crc32(whole[pos + 4 : pos + 4 + _CHECKED.size]))


def _whole_in_format_0(data: bytes, pos: int) -> bool:
    """Whether the frame at ``pos`` is whole as format 0 wrote frames (its CRC-32 of the payload alone)."""
    magic, _, version, length, crc = HEADER.unpack_from(data, pos)
    end = pos + HEADER.size
    whole = magic == MAGIC and version == 0 and end + length <= len(data)
    return whole and zlib.crc32(data[end : end + length]) == crc


def _more_commits(data: bytes, start: int) -> bool:
    """Whether a valid commit frame starts at or after ``start`` (then the damage is not a torn tail)."""
    i = data.find(MAGIC, start)
    while i >= 0:
        if i + HEADER.size <= len(data):
            _, kind, _, length, crc = HEADER.unpack_from(data, i)
            if kind == COMMIT and i + HEADER.size + length <= len(data) and _crc(data, i, length) == crc:
                return True
        i = data.find(MAGIC, i + 1)
    return False


def _commit(data: bytes, pos: int, end: int, version: int = VERSION) -> Commit:
    """The commit a frame's payload (bytes ``pos`` to ``end`` of ``data``) holds, in format ``version``."""
    if version == 2:
        start, time, first, count, info = _COMMIT_2.unpack_from(data, pos)
        moved = 0
        pos += _COMMIT_2.size
    else:
        start, time, first, count, info, moved = _COMMIT.unpack_from(data, pos)
        pos += _COMMIT.size
    positions = json.loads(bytes(data[pos : pos + info])) if info else {}
    pos += info
    sequences = json.loads(bytes(data[pos : pos + moved])) if moved else {}
    commit = Commit(start, time, positions, sequences)
    pos += moved
    if first >= 0:
        canonical = _array(data, pos, np.dtype(np.bool_), count, end)
        offsets = _array(data, pos + count, _INT64, count + 1, end)
        pos += count + 8 * (count + 1)
        size = int(offsets[-1])
        if offsets[0] != 0 or pos + size > end or np.any(offsets[1:] < offsets[:-1]):
            raise ValueError("its strings are out of bounds")
        text = pa.Array.from_buffers(
            pa.large_string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(bytes(data[pos : pos + size]))]
        )
        text.validate(full=True)  # the strings are UTF-8
        commit.strings.append((first, text, canonical))
        pos += size
    while pos < end:
        rows, name, layout = _TABLE.unpack_from(data, pos)
        pos += _TABLE.size
        table = bytes(data[pos : pos + name]).decode()
        spec = bytes(data[pos + name : pos + name + layout]).decode()
        pos += name + layout
        columns, valid = [], []
        for column in spec.split(","):
            dtype = _dtype(column.rstrip("?"))
            columns.append(_array(data, pos, dtype, rows, end))
            pos += rows * dtype.itemsize
            if column.endswith("?"):
                valid.append(_array(data, pos, np.dtype(np.bool_), rows, end))
                pos += rows
            else:
                valid.append(None)
        times = _array(data, pos, _INT64, rows, end).reshape(-1, 1)
        diffs = _array(data, pos + 8 * rows, _INT64, rows, end)
        pos += 16 * rows
        commit.rows.append((table, Batch(tuple(columns), tuple(valid), times, diffs)))
    if pos != end:
        raise ValueError("its tables run past its end")
    return commit


_DTYPES: dict[str, np.dtype] = {}


def _dtype(name: str) -> np.dtype:
    dtype = _DTYPES.get(name)
    if dtype is None:
        dtype = np.dtype(name)
        if dtype.kind not in "biuf" or dtype.itemsize not in (1, 2, 4, 8):
            raise ValueError(f"a column of type {name!r}")
        _DTYPES[name] = dtype
    return dtype


def _array(data: bytes, pos: int, dtype: np.dtype, count: int, end: int) -> np.ndarray:
    """``count`` values of ``dtype`` at byte ``pos`` of ``data``, which they may not run past ``end``: a view,
    or an aligned copy should the view not be aligned."""
    if count < 0 or pos + count * dtype.itemsize > end:
        raise ValueError("an array runs past the frame's end")
    a = np.frombuffer(data, dtype, count, pos)
    return a if a.flags.aligned else a.copy()
