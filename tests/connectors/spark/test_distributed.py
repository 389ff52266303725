"""Spark as the distributed engine, on a real multi-process cluster (``local-cluster``: a master, two workers
and their executors, each a JVM of its own, with Python workers of their own): the recursive views (closure,
shortest paths with MIN, components, points-to, ...) and the grouped, joined, DISTINCT, top-k and text views
of tests/db/test_shards.py, in 3 shards over 2 tasks, equal the embedded engine after every micro-batch; the
executors' Python workers stopped between micro-batches (as Spark stops idle ones) leave the shards with their
keepers; a keeper killed midway through a micro-batch makes Spark run the barrier stage again, and the shards
are rebuilt from the logged input; a replayed batch id changes nothing; a new driver with another layout of
shards over tasks rebuilds the shards too and goes on exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(child: str, *args, killed: bool = False) -> dict:
    """Run a child module (a Spark driver of its own) and return what it printed last, as JSON (nothing, for
    a child that is to kill itself)."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": ROOT}
    run = subprocess.run(
        [sys.executable, "-m", f"tests.connectors.spark.{child}", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if killed:
        assert run.returncode == -9, run.stderr[-5000:]
        return {}
    assert run.returncode == 0, run.stderr[-5000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_views_kept_by_spark_in_shards_equal_the_embedded_engine(tmp_path):
    shards, seed, batches, killed_in = 3, 5, 5, 2
    said = _run("distributed_child", tmp_path / "s", shards, seed, batches, killed_in)
    assert said["batches"] == [0, 1, 2, 3, 4]
    assert said["killed"]  # a worker died in micro-batch 2, and Spark ran its barrier stage again
    assert {"tc", "reach_from_zero", "by_grp", "labels", "top3"} <= set(said["views"])


def test_tpch_and_recursive_views_kept_by_spark_in_shards_equal_the_embedded_engine_and_duckdb(tmp_path):
    """The 22 TPC-H queries at SF0.01 and transitive closure, shortest paths with MIN and connected components,
    in 3 shards over 2 tasks, through the initial load and 5 refresh micro-batches (RF1 inserts, RF2 deletes,
    edge changes): after each, every view equals the embedded engine's and each TPC-H view DuckDB's."""
    said = _run("distributed_tpch_child", tmp_path / "s", 3, 5)
    assert said["batches"] == [0, 1, 2, 3, 4, 5]
    assert {f"q{i:02d}" for i in range(1, 23)} | {"tc", "sssp", "components"} == set(said["views"])


@pytest.mark.parametrize("cut", [False, True], ids=["whole_commits", "cut_commits"])
def test_a_sink_with_shards_whose_driver_dies_mid_batch_resumes_from_its_checkpoint(tmp_path, cut):
    """``view_sink(..., shards=3)`` under a streaming query of change rows (two tables, several commits per
    micro-batch, updates as pre- and post-images; Spark SQL views: grouped, joined, recursive, NOT IN, a
    mixed-case name): the driver is SIGKILLed in micro-batch 3 after the tasks applied it and checkpointed,
    before it was recorded. The query started again from its checkpoint loads the shards' checkpoint of
    micro-batch 1, replays 2 (whose refused commit goes to the dead letters, as the embedded sink's does) and
    applies 3 again; every micro-batch's diff files equal the embedded sink's
    diffs of the same change rows, written once, and the views' contents in parts (``ParquetContentsSet``)
    and in one file per view (``ParquetContents``), and two views MERGEd into keyed tables (``DeltaContents``,
    its statement run by DuckDB), equal the embedded sink's after each micro-batch. With
    ``cut``, the files cut commits in two and both sinks read them with ``whole_commits=False``: each
    micro-batch's last commit waits for the next (in the shards, each task keeps its rows of it under the
    batch's directory, where a replay finds them)."""
    _run("sharded_sink_child", tmp_path, "prepare", int(cut))
    _run("sharded_sink_child", tmp_path, "die", 3, killed=True)
    said = _run("sharded_sink_child", tmp_path, "resume")
    assert said == {
        "compared": 24,
        # cut: the first two files hold only parts of the first commit (a long one): nothing changes before 2
        "batches_called": [2, 3, 4, 5] if cut else [0, 1, 2, 3, 4, 5],
        "contents_checked": True,
        "dead_letters": 1,
    }


def test_tasks_keep_the_shards_their_workers_hold_whichever_partitions_spark_gives_them():
    from connectors.spark.distributed import _roles

    assert _roles([(1, 5), (0, 5)], 5, 2) == [1, 0]  # partition 0 ran where the shards of range 1 are
    assert _roles([(2, 5), (0, 5), (1, 5)], 5, 3) == [2, 0, 1]
    assert _roles([(0, 5), (0, 5)], 5, 2) is None  # two hold the same range: nobody holds range 1
    assert _roles([(1, 5), (-1, -2)], 5, 2) is None  # a new worker holds nothing
    assert _roles([(1, 4), (0, 5)], 5, 2) is None  # one holds the state of an earlier micro-batch
    assert _roles([(0, 5)], 5, 1) == [0]


def test_a_sink_with_shards_refuses_what_it_cannot_do(tmp_path):
    from connectors.spark import Output, ParquetDiffs, view_sink
    from sql.errors import SqlError

    schema, views = "CREATE TABLE t (k INT PRIMARY KEY, v INT)", {"s": "SELECT sum(v) AS s FROM t"}
    with pytest.raises(SqlError, match="Output is not available with shards"):
        view_sink(schema, views, tmp_path / "a", shards=2, outputs=[Output()])
    with pytest.raises(SqlError, match="at least 1"):
        view_sink(schema, views, tmp_path / "d", shards=0)
    sink = view_sink(schema, views, tmp_path / "e", shards=2, outputs=[ParquetDiffs("S", tmp_path / "f")])
    with pytest.raises(SqlError, match="spread over the executors"):
        sink.contents("s")
    view_sink(schema, views, tmp_path / "e", shards=2)
    with pytest.raises(SqlError, match="belongs to other tables or views"):
        view_sink(schema, views, tmp_path / "e", shards=3)  # the shard count is part of the state's definition
    with pytest.raises(SqlError, match="belongs to other tables or views"):
        view_sink(schema, views, tmp_path / "e")
