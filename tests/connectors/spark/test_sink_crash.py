"""The sink killed at random moments (an output half written, a micro-batch's log write torn, a checkpoint's
file half written, after the sink returned but before Spark recorded the batch), again and again on one
state directory, with Spark's recovery played by the test: the next process re-runs the first micro-batch
not recorded as done. After every kill the state opens at a whole micro-batch (the last returned, or the one
under way if its commit group was written) with every view equal to DuckDB's recompute there, and the
contents set shows every view at one micro-batch (the state's or the one under way); at the end every output
(contents files and summed diff files) equals DuckDB's recompute."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from connectors.spark import read_contents
from tests.connectors.spark.test_sink import VIEWS, Recorder, World, make_sink, net_rows, rows
from tests.oracle import same_rows

ROOT = Path(__file__).resolve().parents[3]
KINDS = ["output", "group", "returned", "checkpoint"]
BATCHES = 30


def _returned(out: Path) -> list[int]:
    path = out / "returned"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_killed_at_random_moments_the_sink_resumes_exactly(tmp_path):
    rng = random.Random(7)
    world = World(seed=11)
    batches = tmp_path / "batches"
    batches.mkdir()
    expected = []  # per batch id: each view's rows after it
    for i in range(BATCHES):
        pq.write_table(world.micro_batch(), batches / f"{i}.parquet")
        expected.append({v: world.expected(v) for v in VIEWS})
    state, out = tmp_path / "state", tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills = 0
    for run in range(40):
        done = _returned(out)
        first = (done[-1] + 1) if done else 0
        if first >= BATCHES:
            break
        kind = KINDS[run % len(KINDS)]
        n = rng.randint(1, {"output": 12, "group": 3, "returned": 3, "checkpoint": 20}[kind])
        cmd = [sys.executable, "-m", "tests.connectors.spark.sink_crash_child", str(state), str(out)]
        child = subprocess.run(
            [*cmd, str(batches), str(first), kind, str(n)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if child.returncode == 0:
            continue  # ran out of micro-batches before the kill point
        assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
        kills += 1
        # the state is a whole micro-batch: the last one returned, or the one under way if it was recorded
        done = _returned(out)
        sink = make_sink(tmp_path, Recorder())
        last = sink.last_batch if sink._engine() else None
        assert last in {done[-1] if done else -1, (done[-1] + 1) if done else 0}, f"run {run}: state at {last}"
        if last >= 0:
            for v in VIEWS:
                got = rows(sink.contents(v))
                assert same_rows(got, expected[last][v]), f"run {run} ({kind} {n}): {v} after batch {last}"
        if (out / "contents" / "manifest.json").exists():
            shown, tables = read_contents(out / "contents")
            assert shown in {last, last + 1}, f"run {run}: the contents set at {shown}, the state at {last}"
            for v in VIEWS:
                assert same_rows(rows(tables[v]), expected[shown][v]), f"run {run}: {v} in the set at {shown}"
        sink.close()
    assert kills >= 20, kills
    # the last process runs to the end without a kill; Spark replays what it had not recorded
    done = _returned(out)
    child = subprocess.run(
        [*cmd, str(batches), str((done[-1] + 1) if done else 0), "none", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert _returned(out)[-1] == BATCHES - 1
    shown, tables = read_contents(out / "contents")
    assert shown == BATCHES - 1
    for v in VIEWS:
        contents = rows(pq.read_table(out / f"{v}.parquet"))
        assert same_rows(contents, expected[-1][v]), f"{v} contents"
        assert same_rows(rows(tables[v]), expected[-1][v]), f"{v} contents set"
        files = sorted((out / f"{v}_diffs").glob("*.parquet"))
        assert same_rows(net_rows([pq.read_table(f) for f in files]), expected[-1][v]), f"{v} diff files"
