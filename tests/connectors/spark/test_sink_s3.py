"""The sink with its state directory and every output on an object store (moto's S3 server on loopback, named
by ``s3a://`` URIs as Spark users write them): views stay exact through a failed micro-batch applied again,
restarts and replays, and what it leaves on the store is the database, the definition and the outputs."""

from __future__ import annotations

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from connectors.spark import (
    DiffsTo,
    ParquetContents,
    ParquetContentsSet,
    ParquetDiffs,
    read_contents,
    view_sink,
)
from sql.errors import SqlError
from tests.connectors.spark.test_sink import SCHEMA, SHAPE, VIEWS, Recorder, World, net_rows, rows
from tests.oracle import same_rows


def make_sink(base: str, recorder: Recorder):
    outputs = [ParquetContents(v, f"{base}/out/{v}.parquet") for v in VIEWS]
    outputs += [ParquetDiffs(v, f"{base}/out/{v}_diffs") for v in VIEWS]
    outputs.append(ParquetContentsSet(f"{base}/out/contents"))
    outputs.append(DiffsTo(recorder, arrow=True))
    return view_sink(SCHEMA, VIEWS, f"{base}/state", shape=SHAPE, outputs=outputs, checkpoint_bytes=1_300)


def listing(s3, prefix: str) -> dict[str, bytes]:
    infos = s3.fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    out = {}
    for i in infos:
        if i.type == pafs.FileType.File:
            with s3.fs.open_input_stream(i.path) as f:
                out[i.path] = f.read()
    return out


def check(s3, base: str, prefix: str, world: World, recorder: Recorder, label: str) -> None:
    _, tables = read_contents(f"{base}/out/contents")
    for v in VIEWS:
        expected = world.expected(v)
        assert same_rows(rows(tables[v]), expected), f"{v} contents set {label}"
        contents = pq.read_table(f"{prefix}/out/{v}.parquet", filesystem=s3.fs)
        assert same_rows(rows(contents), expected), f"{v} contents {label}"
        assert same_rows(net_rows(recorder.diffs[v]), expected), f"{v} diffs {label}"
        files = [p for p in listing(s3, f"{prefix}/out/{v}_diffs")]
        diffs = [pq.read_table(p, filesystem=s3.fs) for p in sorted(files)]
        assert same_rows(net_rows(diffs), expected), f"{v} diff files {label}"


def test_state_and_outputs_on_an_object_store(s3):
    prefix = s3.uri().removeprefix("s3://")
    base = f"s3a://{prefix}"
    world, recorder = World(seed=11), Recorder()
    sink = make_sink(base, recorder)
    batches = []
    for batch_id in range(8):
        batches.append(world.micro_batch())
        if batch_id == 3:  # dies after some outputs were written: Spark applies the micro-batch again
            recorder.fail_next = True
            with pytest.raises(RuntimeError):
                sink.apply(batches[-1], batch_id)
        if batch_id == 5:  # and this time the process starts again, from the state on the store
            recorder.fail_next = True
            with pytest.raises(RuntimeError):
                sink.apply(batches[-1], batch_id)
            sink = make_sink(base, recorder)
        assert sink.apply(batches[-1], batch_id) is not None
        check(s3, base, prefix, world, recorder, f"after micro-batch {batch_id}")
        if batch_id % 3 == 1:  # a replay of the last micro-batch changes nothing; an earlier one is refused
            before = listing(s3, f"{prefix}/out")
            assert sink.apply(batches[-1], batch_id) is None
            with pytest.raises(SqlError, match="Spark replays only the last one"):
                sink.apply(batches[batch_id - 1], batch_id - 1)
            assert listing(s3, f"{prefix}/out") == before
        if batch_id == 6:
            sink.close()
            sink = make_sink(base, recorder)  # a clean restart: the checkpoint, no log to replay
            assert sink.apply(batches[-1], batch_id) is None
            for v in VIEWS:
                assert same_rows(rows(sink.contents(v)), world.expected(v))
    assert sink.db.store.number > 4  # checkpoints as the log passed checkpoint_bytes, on the store
    sink.close()
    state = {p.removeprefix(f"{prefix}/state/").split("/")[0] for p in listing(s3, f"{prefix}/state")}
    assert state == {"db", "definition.json"}
