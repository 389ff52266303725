"""The executor's keeper of the shards (``connectors.spark._keeper``), without Spark: workers that come and go
(children of one executor daemon, as Spark's Python workers are) run their tasks in one keeper process, which
keeps its memory between them; a task that fails there fails in its worker with the keeper's traceback; the
keeper ends, removing its folder, once the daemon is gone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from connectors.spark._keeper import _alive

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# an executor's daemon: for each line read, a worker (its child) runs one task and ends; it prints the output
_DAEMON = """
import subprocess, sys
for line in sys.stdin:
    state, task, fail = line.split()
    run = subprocess.run([sys.executable, "-m", "tests.connectors.spark.keeper_job", state, task, fail],
                         capture_output=True, text=True)
    print(run.stdout.strip() or run.stderr.strip().splitlines()[-1], flush=True)
"""


def _gone(pid: int) -> bool:
    return not _alive(pid)


def test_tasks_of_workers_that_come_and_go_run_in_one_keeper_that_ends_with_the_daemon():
    tmp = tempfile.mkdtemp(prefix="ivmk")  # (a Unix socket's path must stay short)
    keepers: list[int] = []
    try:
        _run_and_end(tmp, keepers)
    finally:
        for pid in keepers:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def _run_and_end(tmp: str, keepers: list[int]) -> None:
    env = {**os.environ, "TMPDIR": tmp, "PYTHONPATH": ROOT}
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:

        def task(state: str, number: int, fail: bool = False) -> str:
            daemon.stdin.write(f"{state} {number} {'fail' if fail else 'run'}\n")
            daemon.stdin.flush()
            return daemon.stdout.readline().strip()

        first = task("/state/a", 0).split(" ", 1)
        keepers.append(int(first[0]))
        second = task("/state/a", 1).split(" ", 1)
        assert first[0] == second[0] != str(daemon.pid)  # one keeper, neither worker nor daemon
        assert first[1] == "[0] 127.0.0.1:7 [0]"
        assert second[1] == "[0, 1] 127.0.0.1:7 [1]"  # the keeper's memory outlived the first worker
        other = task("/state/b", 2).split(" ", 1)  # another state: a keeper of its own
        keepers.append(int(other[0]))
        assert other[0] != first[0] and other[1] == "[2] 127.0.0.1:7 [2]"
        failed = task("/state/a", 3, fail=True)
        assert failed.startswith("failed: the task failed in the shards' keeper:"), failed
        assert "ValueError: task 3 cannot run" in failed
        assert task("/state/a", 4).split(" ", 1) == [first[0], "[0, 1, 4] 127.0.0.1:7 [4]"]
        folder = os.path.join(tmp, f"ivm-keepers-{os.getuid()}")
        assert len(os.listdir(folder)) == 2
    finally:
        daemon.kill()
        daemon.wait()
    deadline = time.monotonic() + 60  # each keeper looks for its daemon once a second
    while not all(map(_gone, keepers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(map(_gone, keepers))
    assert os.listdir(folder) == []


class _Shards:
    """Stands for a range of shards held: records that it was let go."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_keeper_lets_go_of_shards_a_later_record_left_behind_or_a_closed_sink_or_a_quiet_stream(
    tmp_path, monkeypatch
):
    from connectors.spark import distributed

    held, seen = {}, {}
    monkeypatch.setattr(distributed, "_HELD", held)
    monkeypatch.setattr(distributed, "_TASKS_SEEN", seen)
    now = time.monotonic()

    def state(name: str, last: int, held_batches: list[int], quiet: bool = False) -> list[_Shards]:
        path = tmp_path / name
        path.mkdir()
        views = object.__new__(distributed.DistributedViews)  # (its record alone, without a Spark session)
        views.state = str(path)
        views._record(views.record(), last, False, None)
        shards = [_Shards() for _ in held_batches]
        held[(str(path), 2, 1)] = [(0, b, s, {}, []) for b, s in zip(held_batches, shards, strict=True)]
        seen[str(path)] = (now - 61 if quiet else now, 0.0)
        return shards

    current = state("current", 4, [4])
    behind = state("behind", 4, [3, 4])
    closed = state("closed", 4, [4])
    resumed = state("resumed", 4, [5])  # a sink started after the close: its task left batch 5
    quiet = state("quiet", 4, [4], quiet=True)
    for name in ("closed", "resumed"):
        views = object.__new__(distributed.DistributedViews)
        views.state = str(tmp_path / name)
        views.close()
        assert views.record()["closed"] and views.record()["last"] == 4
    assert distributed.release_idle()
    assert [s.closed for s in current] == [False]
    assert [s.closed for s in behind] == [True, False]  # its tasks ran elsewhere since batch 3
    assert [s.closed for s in closed] == [True]
    assert [s.closed for s in resumed] == [False]
    assert [s.closed for s in quiet] == [True]
    assert sorted(key[0].rsplit("/", 1)[1] for key in held) == ["behind", "current", "resumed"]
    views._record(views.record(), 5, False, None)  # the next micro-batch recorded clears the mark
    assert "closed" not in views.record()
