"""Shards spread over processes (``ivm.db.shards`` with a ``SocketCollective``) give the embedded engine's
results: each process hosts a range of the shards and runs the same operations; exchanged updates cross
between the processes over sockets, each pair of processes connected directly, text as text (each process has
its own string pool). After every batch the union of the processes' parts of every view equals the embedded
engine's view."""

from __future__ import annotations

import multiprocessing

import pyarrow as pa
import pyarrow.ipc
import pytest

import ivm
from tests.db.shard_process import host
from tests.db.test_shards import _rows, apply, script


def _embedded(seed: int, batches: int) -> list[dict[str, list]]:
    db = ivm.connect()

    def schema(table: str) -> pa.Schema:
        return db.execute(f"SELECT * FROM {table} LIMIT 0").fetch_arrow().schema

    checks = []
    for op in script(seed, batches):
        if op[0] == "check":
            checks.append({v: _rows(db.execute(f"SELECT * FROM {v}").fetch_arrow()) for v in op[1]})
        else:
            apply(db, op, schema)
    return checks


@pytest.mark.parametrize(
    "hosted",
    [
        [range(0, 1), range(1, 2)],
        [range(0, 2), range(2, 3)],
        [range(0, 1), range(1, 4)],
        [range(0, 1), range(1, 3), range(3, 4)],
    ],
    ids=["1+1", "2+1", "1+3", "1+2+1"],
)
def test_shards_in_several_processes_equal_the_embedded_engine(tmp_path, hosted):
    seed, batches = len(hosted[-1]) * 7 + hosted[-1].stop, 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(hosted))
    procs = [
        ctx.Process(target=host, args=(i, hosted, barrier, str(tmp_path), seed, batches))
        for i in range(len(hosted))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    for k, want in enumerate(_embedded(seed, batches)):
        for view, rows in want.items():
            parts = [
                pa.ipc.open_file(str(tmp_path / f"check{k}" / view / f"{i}.arrow")).read_all()
                for i in range(len(hosted))
            ]
            assert _rows(pa.concat_tables(parts)) == rows, (k, view)
