"""A process playing Spark's driver for the sink: applies the micro-batches stored in a folder, from a given
batch id on, and is SIGKILLed at a chosen point.

``python -m tests.connectors.spark.sink_crash_child STATE OUT BATCHES FIRST KIND N`` makes the sink of
``test_sink`` (state directory STATE, outputs under OUT) and applies ``BATCHES/<id>.parquet`` from id FIRST on,
as Spark does after a restart (it re-runs the last micro-batch it did not record as done). It dies at the
``N``-th occurrence of ``KIND``: ``output`` (an output file written but not renamed into place), ``group``
(half-way through writing a micro-batch's commit group to the log), ``checkpoint`` (half-way through a
checkpoint's data file),
``returned`` (the sink returned, before Spark would record the batch as done). Each batch whose ``apply``
returned is appended to ``OUT/returned`` (synced): Spark's commit log.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow.parquet as pq

from connectors.spark import _contents, _outputs
from ivm.db import wal
from ivm.engine import files as engine_files
from tests.connectors.spark.test_sink import Recorder, make_sink
from tests.kill_points import KillPoint


def main(state: str, out: str, batches: str, first: int, kind: str, n: int) -> None:
    point = KillPoint(kind, n)
    die = point.die

    write_atomically, append, write_bytes = _outputs.write_atomically, wal.Log.append, engine_files.write_bytes

    def torn_output(table, path):
        if point("output"):
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path.with_name(f".{path.name}.tmp"))
            die()
        return write_atomically(table, path)

    def torn_append(self, frames):
        if frames[0][4] == wal.GROUP and point("group"):
            data = b"".join(frames)
            os.write(self._fd, data[: len(data) // 2])
            die()
        return append(self, frames)

    def torn_file(buf, uri, sync=True):  # a checkpoint's data file
        if point("checkpoint"):
            with open(f"{uri}.tmp", "wb") as f:
                f.write(bytes(buf)[: len(buf) // 2])
            die()
        return write_bytes(buf, uri, sync)

    _outputs.write_atomically = _contents.write_atomically = torn_output
    wal.Log.append = torn_append
    engine_files.write_bytes = torn_file

    root = Path(state).parent
    sink = make_sink(root, Recorder())
    assert str(sink.state.path) == state and Path(out) == root / "out"
    files = sorted(Path(batches).glob("*.parquet"), key=lambda p: int(p.stem))
    with open(Path(out) / "returned", "a") as journal:
        for f in files:
            batch_id = int(f.stem)
            if batch_id < first:
                continue
            sink.apply(pq.read_table(f), batch_id)
            if point("returned"):
                die()
            journal.write(f"{batch_id}\n")
            journal.flush()
            os.fsync(journal.fileno())
    sink.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
