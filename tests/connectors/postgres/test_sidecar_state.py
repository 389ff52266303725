"""The sidecar with ``--state DIR``: a restart resumes the slot from the state directory (no snapshot, no
recompute), SIGKILLs under load leave targets equal to Postgres' own recompute, a target behind or ahead of the
state is brought to it exactly, and a state the slot can no longer serve is said and built again from a
snapshot."""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import threading
import time
from pathlib import Path

import psycopg
import pytest

from connectors.postgres._catalog import parse_views, resolve_tables
from connectors.postgres.cluster import LocalCluster
from connectors.postgres.sidecar import Sidecar, main
from connectors.postgres.source import Source
from connectors.postgres.target import Target
from connectors.postgres.workload import VIEWS, Load, bump_marker, mismatches, setup, wait_for_marker
from tests.connectors.postgres.test_sidecar_load import InvariantReader

STREAMING = ("initial state written", "resumed from state")


@contextlib.contextmanager
def running(dsn: str, state: Path, views: str = VIEWS, **options):
    """The sidecar with a state directory in a thread, stopped at the end; yields it once it streams."""
    car = Sidecar(dsn, views, batch_changes=500, state=str(state), **options)
    with car.in_thread():
        wait_for_marker(dsn, 0, timeout=60)
        yield car


def _sync(dsn: str, views: str = VIEWS) -> None:
    """Wait until the target has every source transaction committed so far, then compare it with Postgres."""
    wait_for_marker(dsn, bump_marker(dsn), timeout=60)
    assert mismatches(dsn, parse_views(views).views) == {}


def _burst(dsn: str, seconds: float, seed: int) -> int:
    load = Load(dsn, threads=3, pause=0.002, seed=seed).start()
    time.sleep(seconds)
    load.stop()
    return load.commits


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _rows_by_version(dsn: str, views: list[str]) -> dict[str, set]:
    """Each target table's rows by physical version (ctid, xmin): a row written again gets another."""
    with psycopg.connect(dsn) as c:
        return {v: set(c.execute(f"SELECT ctid::text, xmin::text FROM ivm.{v}").fetchall()) for v in views}


def test_a_restart_with_state_reads_no_snapshot_and_stays_exact(dsn, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ivm.sidecar")
    setup(dsn)
    state = tmp_path / "state"
    with running(dsn, state) as first:
        assert _burst(dsn, 1.0, seed=1) > 0
        _sync(dsn)
    assert first.snapshot_rows == 901 and first.resumed == 0  # workload.SCHEMA: 200 + 300 + 400 + 1 rows
    for round in range(2):
        caplog.clear()
        with running(dsn, state) as again:
            assert _burst(dsn, 1.0, seed=10 + round) > 0
            _sync(dsn)
        assert again.snapshot_rows == 0 and again.resumed == 1
        with psycopg.connect(dsn) as c:  # the tables as the state has them are those of the source
            assert again.tables == resolve_tables(c, parse_views(VIEWS), "ivm", True)[0]
        said = [r.getMessage() for r in caplog.records]
        assert any("resumed from state" in m and "no snapshot read" in m for m in said), said
        assert not any(m.startswith("snapshot:") for m in said)
    # what the engine holds is what Postgres computes: the views' row counts, read from the state itself
    import ivm

    db = ivm.connect(str(state))
    try:
        with psycopg.connect(dsn) as c:
            for name, query in parse_views(VIEWS).views.items():
                want = c.execute(f"SELECT count(*) FROM ({query}) q").fetchone()[0]
                assert db.execute(f'SELECT count(*) FROM "{name}"').fetchall() == [(want,)], name
    finally:
        db.close()


def _runs(text: str) -> list[str]:
    """The sidecar's log, one part per start (``SidecarProcess`` writes ``--- run N`` before each)."""
    return text.split("--- run ")[1:]


def test_sigkill_under_load_with_state_resumes_without_snapshots(dsn, sidecar_process, tmp_path):
    """The sidecar is killed 22 times while three clients write, at random moments (while starting, opening
    the state, catching the target up, streaming), and restarted on its state directory each time. Whatever
    the moments: once a run has logged that it streams, the state is whole and no later run reads a snapshot;
    readers of the target never see half a source transaction; at the end the targets equal Postgres' own
    recompute of the views."""
    setup(dsn)
    rng = random.Random(11)
    load = Load(dsn, threads=3, pause=0.002, seed=300).start()
    reader = InvariantReader(dsn)
    reader.start()
    car = sidecar_process(VIEWS, "--state", str(tmp_path / "state"), "--batch-changes", "2000")
    kills = 0
    for i in range(22):
        car.start()
        if i % 2:  # once this run streams, then a while later
            deadline = time.monotonic() + 60
            while not any(s in _runs(car.text())[-1] for s in STREAMING):
                assert car.proc.poll() is None, car.text()[-3000:]
                assert time.monotonic() < deadline, car.text()[-3000:]
                time.sleep(0.02)
            threading.Event().wait(rng.uniform(0.0, 0.6))
        else:  # anywhere: starting, opening the state, bringing the target to it, streaming
            threading.Event().wait(rng.uniform(0.05, 2.5))
        car.kill()
        kills += 1
    car.start()
    car.wait_log("resumed from state", count=car.text().count("resumed from state") + 1)
    load.stop()
    wait_for_marker(dsn, bump_marker(dsn))
    assert mismatches(dsn, parse_views(VIEWS).views) == {}
    reader.finish()
    assert car.terminate() == 0
    runs = _runs(car.text())
    assert kills >= 20 and len(runs) == kills + 1
    # the state is whole from the run that logs so, or, if that run died between writing the state and
    # logging it, from the first run that resumes from it
    whole = next(i for i, r in enumerate(runs) if "initial state written" in r or "resumed from state" in r)
    snapshots = [i for i, r in enumerate(runs) if "snapshot: slot" in r]
    assert [i for i in snapshots if i > whole] == [], snapshots
    resumed = [i for i, r in enumerate(runs) if "resumed from state" in r]
    assert len(resumed) >= kills // 2 and resumed[-1] == kills
    assert "(0 rows read from snapshots since start)" in runs[-1]
    assert reader.reads > 0 and reader.bad == []


class _TargetLost(Exception):
    pass


def test_a_target_behind_the_state_gets_the_views_changed_since(dsn, tmp_path, caplog, monkeypatch):
    """The state commits a batch and the target write fails (as if the process died between the two): the
    next start replaces, in one transaction at the state's LSN, only the views that batch may have changed."""
    caplog.set_level(logging.INFO, logger="ivm.sidecar")
    setup(dsn)
    state = tmp_path / "state"
    with running(dsn, state):
        _burst(dsn, 0.5, seed=2)
        _sync(dsn)
    untouched = ["total", "by_owner", "item_groups", "item_rows", "marker_n"]
    before = _rows_by_version(dsn, untouched)
    apply = Target.apply

    def lost(self, *args, **kwargs):
        raise _TargetLost()

    monkeypatch.setattr(Target, "apply", lost)
    with pytest.raises(_TargetLost), running(dsn, state, views=VIEWS) as car:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO notes VALUES (7, 'behind'), (8, NULL); DELETE FROM notes WHERE k = 9")
        deadline = time.monotonic() + 60
        while not car.state.dirty:  # the state has the batch; the target write that follows fails
            assert time.monotonic() < deadline
            time.sleep(0.02)
    monkeypatch.setattr(Target, "apply", apply)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM ivm.all_notes WHERE note = 'behind'").fetchone()[0] == 0
    caplog.clear()
    with running(dsn, state) as car:
        _wait(lambda: car.resumed == 1)
        assert car.snapshot_rows == 0
        assert _rows_by_version(dsn, untouched) == before
        _sync(dsn)
    said = [r.getMessage() for r in caplog.records if "target brought from" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(": all_notes, item_notes replaced"), said


def test_a_target_ahead_of_the_state_is_not_written_again(dsn, tmp_path, caplog):
    """Without sync, a crash of the machine may lose the state's last commits while the target has them; the
    slot was held back to the state's checkpoint, so the transactions come again and, up to the target's LSN,
    change nothing in the target. Built here exactly: the state and a copy of the slot kept at one LSN, the
    target taken further, then the state and the slot put back."""
    caplog.set_level(logging.INFO, logger="ivm.sidecar")
    setup(dsn)
    state, kept = tmp_path / "state", tmp_path / "kept"
    with running(dsn, state, synchronous=False):
        _sync(dsn)
    shutil.copytree(state, kept)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_copy_logical_replication_slot('ivm', 'ivm_kept')")
    with running(dsn, state, synchronous=False):
        assert _burst(dsn, 1.0, seed=3) > 0
        _sync(dsn)
    shutil.rmtree(state)
    shutil.copytree(kept, state)
    with psycopg.connect(dsn, autocommit=True) as c:
        _drop_slot(c)
        c.execute("SELECT pg_copy_logical_replication_slot('ivm_kept', 'ivm')")
        c.execute("SELECT pg_drop_replication_slot('ivm_kept')")
    views = [v for v in parse_views(VIEWS).views if v != "marker_n"]
    before = _rows_by_version(dsn, views)
    caplog.clear()
    with running(dsn, state, synchronous=False) as again:
        _sync(dsn)  # one more source transaction: the marker's
        assert _rows_by_version(dsn, views) == before
    assert again.snapshot_rows == 0 and again.resumed == 1
    said = [r.getMessage() for r in caplog.records]
    assert any("ahead of the state" in m for m in said), said


def _drop_slot(c) -> None:
    deadline = time.monotonic() + 60
    while True:  # the session of the sidecar just stopped may still hold it a moment
        try:
            c.execute("SELECT pg_drop_replication_slot('ivm')")
            return
        except psycopg.errors.ObjectInUse:
            assert time.monotonic() < deadline
            time.sleep(0.02)


def _recreate_slot(c) -> None:
    _drop_slot(c)
    c.execute("SELECT pg_create_logical_replication_slot('ivm', 'pgoutput')")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_drop_slot, "replication slot 'ivm' does not exist (dropped)"),
        (_recreate_slot, "(it was dropped and created again, or the state is older than the slot)"),
        (None, "it was built for another views file"),
    ],
)
def test_a_state_the_slot_cannot_serve_is_built_again_from_a_snapshot(dsn, tmp_path, caplog, change, said):
    setup(dsn)
    state = tmp_path / "state"
    with running(dsn, state):
        _sync(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        if change is not None:
            change(c)
        c.execute("UPDATE accounts SET owner = 'moved' WHERE id = 1")
    views = (
        VIEWS if change is not None else VIEWS + "CREATE MATERIALIZED VIEW few AS SELECT id FROM accounts;\n"
    )
    caplog.clear()
    with running(dsn, state, views=views) as car:
        _sync(dsn, views)
        assert car.snapshot_rows > 0 and car.resumed == 0
    messages = [r.getMessage() for r in caplog.records if "cannot be resumed" in r.getMessage()]
    assert len(messages) == 1 and said in messages[0] and "taking a new snapshot" in messages[0], messages
    with running(dsn, state, views=views) as car:  # and the state built again is resumed
        _sync(dsn, views)
        assert car.snapshot_rows == 0 and car.resumed == 1


def test_a_slot_that_lost_its_wal_while_stopped_falls_back_to_a_snapshot(tmp_path, caplog):
    views = "CREATE MATERIALIZED VIEW marker_n AS SELECT n FROM marker;\n"
    views += "CREATE MATERIALIZED VIEW s AS SELECT SUM(v) AS v FROM t;\n"
    settings = {"max_slot_wal_keep_size": "1MB", "wal_keep_size": "0", "min_wal_size": "32MB"}
    state = tmp_path / "state"
    with (
        LocalCluster(settings=settings) as cluster,
        cluster.database("lost") as dsn,
        psycopg.connect(dsn, autocommit=True) as c,
    ):
        c.execute(
            "CREATE TABLE marker (id integer PRIMARY KEY, n bigint NOT NULL); INSERT INTO marker VALUES (1, 0);"
            "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)"
        )
        with running(dsn, state, views=views):
            _sync(dsn, views)
        c.execute("INSERT INTO t VALUES (2, 41)")  # the slot must keep this one's WAL, and cannot
        for _ in range(4):
            c.execute("CREATE TABLE filler AS SELECT g FROM generate_series(1, 100000) g; DROP TABLE filler")
            c.execute("SELECT pg_switch_wal()")
        c.execute("CHECKPOINT")
        assert c.execute("SELECT wal_status FROM pg_replication_slots").fetchone()[0] == "lost"
        caplog.clear()
        with running(dsn, state, views=views) as car:
            _sync(dsn, views)
            assert c.execute("SELECT v FROM ivm.s").fetchall() == [(42,)]
            assert car.snapshot_rows == 3
    said = [r.getMessage() for r in caplog.records if "cannot be resumed" in r.getMessage()]
    assert len(said) == 1 and "lost the WAL it needs" in said[0] and "taking a new snapshot" in said[0], said


def test_source_ddl_rebuilds_with_state_while_running_and_while_stopped(dsn, tmp_path, caplog):
    """A table altered while the sidecar runs is read again alone (its views rebuilt); the state then resumes.
    Altered while the sidecar is stopped: the resumed stream sees it and rebuilds those views alone too."""
    setup(dsn)
    state = tmp_path / "state"
    with psycopg.connect(dsn, autocommit=True) as c:
        with running(dsn, state):
            c.execute("ALTER TABLE notes ADD COLUMN extra int")
            c.execute("INSERT INTO notes VALUES (1, 'after', 5)")
            _sync(dsn)
        with running(dsn, state) as car:
            c.execute("INSERT INTO notes VALUES (2, 'resumed', 6)")
            _sync(dsn)
            assert car.snapshot_rows == 0
        c.execute("ALTER TABLE notes DROP COLUMN extra")
        c.execute("INSERT INTO notes VALUES (3, 'down')")
        caplog.clear()
        with running(dsn, state) as car:
            _sync(dsn)
            notes = c.execute("SELECT count(*) FROM notes").fetchone()[0]
            assert car.resumed == 1 and car.snapshot_rows == notes  # that table alone
        with running(dsn, state) as car:
            c.execute("DELETE FROM notes WHERE note = 'down'")
            _sync(dsn)
            assert car.snapshot_rows == 0
    said = [r.getMessage() for r in caplog.records if "rebuilding views" in r.getMessage()]
    assert said and "public.notes changed (column extra dropped)" in said[0], said


ERRORS_VIEWS = """
CREATE MATERIALIZED VIEW marker_n AS SELECT n FROM marker;
CREATE MATERIALIZED VIEW amounts AS SELECT id, amount FROM t;
CREATE MATERIALIZED VIEW products AS SELECT id, a * b AS p FROM t;
CREATE MATERIALIZED VIEW nums AS SELECT id, CAST(s AS INTEGER) AS n FROM t;
CREATE MATERIALIZED VIEW counted AS SELECT COUNT(*) AS n FROM t;
"""


def test_views_in_error_stay_in_error_across_restarts_until_their_rows_change(dsn, tmp_path):
    """What puts a view in error lives in the state too: a value ivm cannot hold (the sidecar's record), a
    value the engine cannot compute (the engine's), a value the target column cannot hold (counted again from
    the view at start); after a restart each view is in error exactly as before, and recovers when the row
    changes."""
    state = tmp_path / "state"

    def status(c) -> dict[str, str]:
        return dict(c.execute("SELECT view, state || ': ' || coalesce(error, '') FROM ivm._ivm_status"))

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE TABLE marker (id integer PRIMARY KEY, n bigint NOT NULL); INSERT INTO marker VALUES (1, 0);"
            "CREATE TABLE t (id int PRIMARY KEY, amount numeric(10,2), a int, b int, s text);"
            "INSERT INTO t VALUES (1, 1, 2, 3, '4')"
        )
        with running(dsn, state, views=ERRORS_VIEWS):
            c.execute("INSERT INTO t VALUES (2, 'NaN', 65536, 65536, 'five')")
            _sync(dsn, "CREATE MATERIALIZED VIEW counted AS SELECT COUNT(*) AS n FROM t;")
            before = status(c)
        assert before["amounts"].startswith("error: table public.t, row (id)=(2): column amount holds 'NaN'")
        assert before["products"].startswith("error: integer out of range in column 'p': 4294967296")
        assert before["nums"].startswith("error: ") and '"five"' in before["nums"]
        assert before["counted"] == before["marker_n"] == "running: "
        with running(dsn, state, views=ERRORS_VIEWS) as car:
            _wait(lambda: car.resumed == 1)
            bump = bump_marker(dsn)
            wait_for_marker(dsn, bump)
            assert status(c) == before and car.snapshot_rows == 0
            c.execute("UPDATE t SET amount = 2, b = 1, s = '5' WHERE id = 2")
            _sync(dsn, ERRORS_VIEWS)
            assert set(status(c).values()) == {"running: "}


def test_a_crash_while_views_are_rebuilt(dsn, tmp_path, caplog, monkeypatch):
    """A crash after a changed table was read again, before the target took the rebuilt views: the next start
    goes on with the rebuild from the state (no snapshot). A crash while the table is being read: the state is
    not whole, the next start says so and takes a new snapshot."""
    caplog.set_level(logging.INFO, logger="ivm.sidecar")
    setup(dsn)
    state = tmp_path / "state"
    apply = Target.apply
    hit = threading.Event()

    def lost_when_rebuilt(self, diffs, lsn, txns, failed, errors=None, replaced=None):
        if replaced:
            hit.set()
            raise _TargetLost()
        return apply(self, diffs, lsn, txns, failed, errors, replaced)

    with psycopg.connect(dsn, autocommit=True) as c:
        with running(dsn, state):
            _sync(dsn)
        monkeypatch.setattr(Target, "apply", lost_when_rebuilt)
        with pytest.raises(_TargetLost), running(dsn, state):
            c.execute("ALTER TABLE notes ADD COLUMN extra int")
            c.execute("INSERT INTO notes VALUES (1, 'after', 5)")
            c.execute("UPDATE accounts SET owner = 'x' WHERE id = 3")
            assert hit.wait(60)  # the sidecar fails writing the rebuilt views
        monkeypatch.setattr(Target, "apply", apply)
        caplog.clear()
        with running(dsn, state) as car:
            _sync(dsn)
            assert car.resumed == 1 and car.snapshot_rows == 0
        said = [r.getMessage() for r in caplog.records if "rebuilt and written" in r.getMessage()]
        assert len(said) == 1 and "all_notes" in said[0] and "item_notes" in said[0], said

        snapshot = Source.snapshot

        hit.clear()

        def lost_while_reading(self, tables, stopping, again=False):
            if again:
                hit.set()
                raise _TargetLost()
            return snapshot(self, tables, stopping, again)

        monkeypatch.setattr(Source, "snapshot", lost_while_reading)
        with pytest.raises(_TargetLost), running(dsn, state):
            c.execute("ALTER TABLE notes DROP COLUMN extra")
            c.execute("INSERT INTO notes VALUES (2, 'dropped')")
            assert hit.wait(60)
        monkeypatch.setattr(Source, "snapshot", snapshot)
        caplog.clear()
        with running(dsn, state) as car:
            _sync(dsn)
            assert car.resumed == 0 and car.snapshot_rows > 0
        said = [r.getMessage() for r in caplog.records if "cannot be resumed" in r.getMessage()]
        assert len(said) == 1 and "it was left while views were being built" in said[0], said


def test_one_sidecar_per_state_directory_and_the_options_are_documented(dsn, tmp_path, capsys):
    setup(dsn)
    state = tmp_path / "state"
    views = tmp_path / "views.sql"
    views.write_text(VIEWS)
    with running(dsn, state):
        other = ["--source", dsn, "--views", str(views), "--slot", "other", "--schema", "other"]
        assert main([*other, "--state", str(state)]) == 1
    err = capsys.readouterr().err
    assert "is in use by another connection; give each sidecar its own --state" in err, err
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--state DIR" in out and "--no-sync" in out and "resumes the slot from the LSN" in out


def test_lost_connections_resume_from_the_state(dsn, tmp_path, caplog):
    """Connections lost mid-stream: the sidecar says so, reconnects and goes on from its state, reading no
    snapshot."""
    setup(dsn)
    with running(dsn, tmp_path / "state") as car:
        load = Load(dsn, threads=3, pause=0.002, seed=21).start()
        time.sleep(0.5)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'ivm sidecar%'"
            )
        _wait(lambda: car.resumed == 1)
        time.sleep(0.5)
        load.stop()
        _sync(dsn)
        assert car.snapshot_rows == 901
    assert any("unreachable or connection lost" in r.getMessage() for r in caplog.records)
