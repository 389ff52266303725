"""A process hosting some shards of a sharded database (``ivm.db.shards``), for test_shard_processes.py: it
runs the test's operations and writes its part of every checked view after each check."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.ipc

from ivm.db.shards import Shards
from ivm.engine.collective import SocketCollective
from tests.db.test_shards import apply, script


def host(index: int, hosted: list[range], barrier, directory: str, seed: int, batches: int) -> None:
    """Process ``index`` of ``len(hosted)``, holding shards ``hosted[index]`` of ``hosted[-1].stop``."""
    try:

        def publish(text: str) -> list[str]:  # every process's text, through files
            with open(os.path.join(directory, f"said{index}"), "w") as f:
                f.write(text)
            barrier.wait()
            said = []
            for q in range(len(hosted)):
                with open(os.path.join(directory, f"said{q}")) as f:
                    said.append(f.read())
            return said

        collective = SocketCollective(index, len(hosted), publish, authkey=b"test")
        db = Shards(hosted[-1].stop, hosted[index], collective)
        checks = 0
        for op in script(seed, batches):
            if op[0] != "check":
                apply(db, op, db.schema)
                continue
            for view in op[1]:
                out = os.path.join(directory, f"check{checks}", view)
                os.makedirs(out, exist_ok=True)
                part = db.contents(view)
                with pa.ipc.new_file(os.path.join(out, f"{index}.arrow"), part.schema) as w:
                    w.write_table(part)
            checks += 1
        db.close()
        collective.close()
    except BaseException:
        barrier.abort()  # the other processes must not wait for this one
        raise
