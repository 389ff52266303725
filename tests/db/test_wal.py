"""The log's frames: a commit written by ``commit_frame`` reads back as it was (every column type, NULLs, text
with its codes, times and positions), a torn last frame is the tail of a commit that never returned, and any
other damage is an error naming the segment and the byte its frame starts at."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest

from ivm.db import wal
from ivm.engine.batch import Batch
from ivm.errors import OperationalError


def _batch(n: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.3
    columns = (
        rng.integers(-(2**62), 2**62, n),
        rng.integers(-(2**31), 2**31, n).astype(np.int32),
        np.where(nulls, 0.0, rng.random(n)),
        rng.random(n) < 0.5,
    )
    valid = (None, None, ~nulls, None)
    times = rng.integers(1, 5, (n, 1))
    return Batch(columns, valid, times, rng.choice([-1, 1, 2], n))


def _same(a: Batch, b: Batch) -> None:
    assert len(a.columns) == len(b.columns)
    for x, y in zip(a.columns, b.columns, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    for x, y in zip(a.valid, b.valid, strict=True):
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y))
    assert np.array_equal(a.times, b.times) and np.array_equal(a.diffs, b.diffs)


def _commits() -> list[tuple[int, int, dict, tuple | None, list]]:
    text = pa.array(["", "plain", "déjà vu", "日本語", "x" * 300, "tail"], pa.large_string())
    return [
        (1, 2, {}, None, [("t", _batch(5, 0))]),
        (2, 3, {"lsn": 77, "source": "a"}, (10, text.slice(1, 4), np.array([1, 0, 1, 1], bool)), []),
        (3, 5, {}, (14, pa.array(["é"]), np.array([True])), [("t", _batch(1, 1)), ("other", _batch(40, 2))]),
        (5, 6, {}, (15, text.slice(0, 1), np.array([True])), [("t", _batch(3, 3))]),
    ]


def _write(tmp_path, commits, group: slice | None = None):
    log = wal.Log(str(tmp_path), 1)
    frames = [wal.commit_frame(*c) for c in commits]
    ends = []
    for k, frame in enumerate(frames):
        if group is not None and k == group.start:
            grouped = frames[group]
            log.append([wal.group_frame(grouped), *grouped])
        elif group is None or not group.start <= k < group.stop:
            log.append([frame])
        ends.append(log.bytes)
    log.close()
    return tmp_path / f"{1:012d}.log", ends


def _check(read: list[wal.Commit], commits) -> None:
    assert len(read) == len(commits)
    for got, (start, time, positions, strings, rows) in zip(read, commits, strict=True):
        assert (got.start, got.time, got.positions) == (start, time, positions)
        if strings is None:
            assert got.strings == []
        else:
            [(first, text, canonical)] = got.strings
            assert first == strings[0] and text.to_pylist() == strings[1].to_pylist()
            assert np.array_equal(canonical, strings[2])
        assert [name for name, _ in got.rows] == [name for name, _ in rows]
        for (_, a), (_, b) in zip(got.rows, rows, strict=True):
            _same(a, b)


def test_commits_read_back_as_they_were_written(tmp_path):
    commits = _commits()
    _write(tmp_path, commits)
    _check(wal.read_log(str(tmp_path), 1), commits)


def test_a_commit_group_reads_back_whole(tmp_path):
    commits = _commits()
    _write(tmp_path, commits, group=slice(1, 3))
    _check(wal.read_log(str(tmp_path), 1), commits)


def test_a_torn_last_frame_is_cut_off_wherever_it_ends(tmp_path):
    commits = _commits()
    segment, ends = _write(tmp_path, commits)
    whole = segment.read_bytes()
    for cut in range(ends[-2], ends[-1]):
        segment.write_bytes(whole[:cut])
        _check(wal.read_log(str(tmp_path), 1), commits[:-1])
        assert segment.stat().st_size == ends[-2]  # appends follow the last whole commit


def test_a_torn_commit_group_is_not_there_at_all(tmp_path):
    commits = _commits()
    segment, ends = _write(tmp_path, commits, group=slice(1, 4))
    whole = segment.read_bytes()
    for cut in range(ends[0] + 1, len(whole), 7):
        segment.write_bytes(whole[:cut])
        _check(wal.read_log(str(tmp_path), 1), commits[:1])


@pytest.mark.parametrize("where", ["kind", "version", "length", "crc", "payload", "last byte"])
def test_a_flipped_byte_before_whole_commits_is_an_error_naming_the_segment_and_byte(tmp_path, where):
    commits = _commits()
    segment, ends = _write(tmp_path, commits)
    whole = segment.read_bytes()
    starts = [0, *ends[:-1]]
    for start, end in zip(starts[:-1], ends[:-1], strict=True):  # every frame but the last
        offset = {"kind": 4, "version": 5, "length": 12, "crc": 17, "payload": wal.HEADER.size + 3}.get(where)
        damaged = bytearray(whole)
        damaged[end - 1 if offset is None else start + offset] ^= 0x10
        segment.write_bytes(bytes(damaged))
        with pytest.raises(OperationalError, match=f"{segment.name} is damaged at byte {start}:"):
            wal.read_log(str(tmp_path), 1)


def test_a_flipped_byte_in_the_last_frame_is_a_torn_tail(tmp_path):
    commits = _commits()
    segment, ends = _write(tmp_path, commits)
    damaged = bytearray(segment.read_bytes())
    damaged[ends[-2] + wal.HEADER.size + 10] ^= 0x01
    segment.write_bytes(bytes(damaged))
    _check(wal.read_log(str(tmp_path), 1), commits[:-1])


def test_a_log_of_an_older_format_is_refused_with_its_format(tmp_path):
    payload = b"an Arrow IPC stream, as format 0 wrote its frames"
    frame = struct.pack("<4sBxxxQI", wal.MAGIC, wal.COMMIT, len(payload), zlib.crc32(payload)) + payload
    (tmp_path / f"{1:012d}.log").write_bytes(frame)
    with pytest.raises(OperationalError, match="log frames of format 0 .* this ivm reads format 3"):
        wal.read_log(str(tmp_path), 1)


def _format_2(frame: bytes) -> bytes:
    """A commit frame as format 2 wrote it: without the length of the sequences, which it did not have."""
    payload = frame[wal.HEADER.size :]
    head = wal._COMMIT.unpack_from(payload)
    assert head[-1] == 0  # no sequences
    payload = wal._COMMIT_2.pack(*head[:-1]) + payload[wal._COMMIT.size :]
    crc = zlib.crc32(payload, zlib.crc32(wal._CHECKED.pack(wal.COMMIT, 2, len(payload))))
    return wal.HEADER.pack(wal.MAGIC, wal.COMMIT, 2, len(payload), crc) + payload


def test_frames_of_format_2_read_as_they_were_and_sequences_read_back(tmp_path):
    """Format 2 had no sequences: a log of its frames (left by an ivm before them) reads as it was written."""
    commits = _commits()
    frames = [_format_2(wal.commit_frame(*c)) for c in commits]
    (tmp_path / f"{1:012d}.log").write_bytes(b"".join(frames))
    _check(wal.read_log(str(tmp_path), 1), commits)
    moved = {"t": {"id": 7}, "Other": {"a": -3, "b": 1}}
    (tmp_path / f"{2:012d}.log").write_bytes(wal.commit_frame(7, 8, {"lsn": 1}, None, [], moved))
    [got] = wal.read_log(str(tmp_path), 2)
    assert got.sequences == moved and got.positions == {"lsn": 1} and got.rows == []
