"""The sidecar under a concurrent load: targets equal Postgres' own recompute of every view once quiet, after
SIGKILLs at random moments too, and a reader never sees half of a source transaction."""

from __future__ import annotations

import random
import threading

import psycopg

from connectors.postgres._catalog import parse_views
from connectors.postgres.workload import TOTAL, VIEWS, Load, bump_marker, mismatches, setup, wait_for_marker


class InvariantReader(threading.Thread):
    """Polls the target's ``total`` view and the sum over ``by_owner``: both must always be TOTAL."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.done = threading.Event()
        self.reads = 0
        self.bad: list[tuple] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as c:
            while not self.done.is_set():
                try:
                    row = c.execute(
                        "SELECT (SELECT total FROM ivm.total), (SELECT SUM(balance) FROM ivm.by_owner)"
                    ).fetchone()
                except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                    continue
                if row[0] is None and row[1] is None:
                    continue
                self.reads += 1
                if row[0] != TOTAL or row[1] != TOTAL:
                    self.bad.append(row)

    def finish(self) -> None:
        self.done.set()
        self.join()


def _quiet_and_compare(dsn: str) -> None:
    wait_for_marker(dsn, bump_marker(dsn))
    assert mismatches(dsn, parse_views(VIEWS).views) == {}


def test_concurrent_load_during_snapshot_and_stream(dsn, sidecar_process):
    setup(dsn)
    load = Load(dsn, threads=3, pause=0.002).start()
    reader = InvariantReader(dsn)
    reader.start()
    car = sidecar_process(VIEWS).start()
    car.wait_log("initial state written")
    streamed_from = load.commits
    while load.commits < streamed_from + 3000:  # a few thousand transactions while streaming
        car.wait_log("batch lsn=", count=car.text().count("batch lsn=") + 1)
    # connections lost mid-stream: the sidecar says so, reconnects and rebuilds
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'ivm sidecar%'"
        )
    car.wait_log("initial state written", count=2)
    assert "unreachable or connection lost" in car.text()
    car.wait_log("batch lsn=", count=car.text().count("batch lsn=") + 3)
    load.stop()
    _quiet_and_compare(dsn)
    reader.finish()
    assert reader.reads > 0 and reader.bad == []
    assert car.terminate() == 0
    assert "stopped at" in car.text()


def test_sigkill_at_random_moments_and_restart(dsn, sidecar_process):
    setup(dsn)
    rng = random.Random(5)
    load = Load(dsn, threads=3, pause=0.002, seed=100).start()
    reader = InvariantReader(dsn)
    reader.start()
    car = sidecar_process(VIEWS)
    written = 0
    kills = 0
    for i in range(22):
        car.start()
        if i % 2:  # while streaming
            written += 1
            car.wait_log("initial state written", count=written)
            rng_wait = rng.uniform(0.0, 0.8)
        else:  # anywhere: starting, snapshotting, writing the initial state, streaming
            rng_wait = rng.uniform(0.05, 2.0)
        threading.Event().wait(rng_wait)
        car.kill()
        kills += 1
        written = car.text().count("initial state written")
    car.start()
    car.wait_log("initial state written", count=written + 1)
    load.stop()
    _quiet_and_compare(dsn)
    reader.finish()
    assert kills >= 20
    assert reader.reads > 0 and reader.bad == []
    assert car.terminate() == 0
