"""Collectives among processes through files on a shared path: how shards in several processes step together.

A ``ShardGroup`` whose shards are spread over processes makes two kinds of collective call, in the same order
in every process: ``all_gather`` (a small message from every process: what each shard would run next, the
rounds of a loop) and ``all_to_all`` (the updates exchanged at the end of a stage, one message per
destination process). ``FileCollective`` carries both through files under one directory of a ``pyarrow.fs``
path (local, or an object store's URI) that every process can read, with a barrier between writing and
reading: a message is a file named by the call's sequence number, its sender and its receiver, and an
empty message is no file at all. The barrier is the host's: Spark's ``BarrierTaskContext.barrier`` in a
barrier stage, a ``multiprocessing`` barrier in tests. Where the host has a collective of its own for small
messages (Spark's ``allGather``), ``all_gather`` uses it instead of files.

A process deletes the files it wrote for a call once it passes the barrier of the next call: by then every
process has read them.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from ivm.engine.files import join, makedirs, read_whole, remove, write_bytes

__all__ = ["FileCollective"]


class FileCollective:
    """Process ``index`` of ``count``, exchanging files under ``directory`` and meeting the others at
    ``barrier()``; ``all_gather`` (``str -> list[str]``), when given, carries small messages instead."""

    def __init__(
        self,
        directory: str,
        index: int,
        count: int,
        barrier: Callable[[], None],
        all_gather: Callable[[str], list[str]] | None = None,
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"process {index} is not one of 0 .. {count - 1}")
        self.directory = directory
        self.index = index
        self.count = count
        self._barrier = barrier
        self._all_gather = all_gather
        self._call = 0
        self._written: list[str] = []  # the files of the previous call
        makedirs(directory)

    def _path(self, call: int, sender: int, receiver: int | str) -> str:
        return join(self.directory, f"{call:09d}-{sender:05d}-{receiver}.msg")

    def _meet(self, written: list[str]) -> None:
        """The barrier; then the previous call's files go: every process has read them (as it has once it
        makes any later call)."""
        self._barrier()
        self._forget(written)

    def _forget(self, written: list[str]) -> None:
        for path in self._written:
            remove(path)
        self._written = written

    def all_gather(self, message: bytes) -> list[bytes]:
        self._call += 1
        if self._all_gather is not None:
            every = self._all_gather(base64.b64encode(message).decode("ascii"))
            self._forget([])
            return [base64.b64decode(m) for m in every]
        path = self._path(self._call, self.index, "all")
        write_bytes(message, path, sync=False)
        self._meet([path])
        return [read_whole(self._path(self._call, q, "all")) for q in range(self.count)]

    def all_to_all(self, outgoing: list[bytes]) -> list[bytes]:
        self._call += 1
        written = []
        for q, message in enumerate(outgoing):
            if message and q != self.index:
                path = self._path(self._call, self.index, q)
                write_bytes(message, path, sync=False)
                written.append(path)
        self._meet(written)
        out = []
        for q in range(self.count):
            if q == self.index:
                out.append(outgoing[q])
                continue
            try:
                out.append(read_whole(self._path(self._call, q, self.index)))
            except FileNotFoundError:
                out.append(b"")  # nothing sent
        return out
