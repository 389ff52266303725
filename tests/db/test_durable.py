"""Durable databases: what a directory holds after commits, clean stops and abandoned connections opens as it
was, every view equal to DuckDB's recompute of its SQL; damaged files are errors naming them."""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
from pathlib import Path

import duckdb
import pytest

import ivm
from ivm.db import storage, wal
from ivm.engine import files
from tests.oracle import same_rows
from tests.sql.test_views_oracle import SCHEMA, VIEWS, _random_txn


def abandon(db) -> None:
    """Let go of a durable connection as a crash would: no checkpoint, the log as it is."""
    store = db.store
    store.wait()  # a checkpoint in the background: a crash could also have come after it
    os.close(store.log._fd)  # the segment as a crash leaves it: zeros ahead of its last frame
    store.log._fd = None
    os.close(store._lock)
    db.store = None


def oracle_of(db) -> duckdb.DuckDBPyConnection:
    """A DuckDB holding the rows of ``db``'s tables."""
    oracle = duckdb.connect()
    oracle.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    for s in SCHEMA:
        oracle.execute(s)
    for table in ("t", "u"):
        rows = db.execute(f"SELECT * FROM {table}").fetchall()
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            oracle.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    return oracle


def check_views(db, names) -> None:
    oracle = oracle_of(db)
    for n in names:
        got = db.execute(f"SELECT * FROM {n}").fetchall()
        expected = oracle.execute(VIEWS[n].replace("v_group", f"({VIEWS['v_group']})")).fetchall()
        assert same_rows(got, expected), f"{n}: got {got}, expected {expected}"


def tables_of(db) -> dict:
    return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in ("t", "u")}


@pytest.mark.parametrize("seed", range(3))
def test_reopened_database_is_the_one_left(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    for s in SCHEMA:
        db.execute(s)
    names = list(VIEWS)
    for n in names:
        db.execute(f"CREATE VIEW {n} AS {VIEWS[n]}")
    state = {"t": set()}
    for step in range(12):
        stmts = _random_txn(rng, state)
        db.execute("BEGIN")
        for s in stmts:
            db.execute(s)
        db.execute("COMMIT")
        if step % 3 == 2:
            before = tables_of(db)
            if rng.random() < 0.5:
                db.close()
            else:
                abandon(db)  # the commits since the last checkpoint are replayed from the log
            db = ivm.connect(path)
            assert tables_of(db) == before
            check_views(db, names)
    db.close()


def test_opening_loads_state_instead_of_computing_it(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    for s in SCHEMA:
        db.execute(s)
    db.execute(f"CREATE VIEW g AS {VIEWS['v_group']}")
    db.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {i / 10}, {i % 7}, 'abc')" for i in range(1, 201)))
    db.close()
    db = ivm.connect(path)
    traces = db.engine.traces()  # every one read from its files, none computed
    assert traces and all(not b.updates.diffs.flags.owndata for t in traces for b in t.batches())
    assert len(db.execute("SELECT * FROM g").fetchall()) == 7
    db.execute("DELETE FROM t WHERE a <= 100")
    assert sorted(db.execute("SELECT c, n FROM g").fetchall()) == [
        (c, sum(1 for i in range(101, 201) if i % 7 == c)) for c in range(7)
    ]
    db.close()


def test_a_view_built_by_another_engine_is_built_again(tmp_path, monkeypatch, caplog):
    path = str(tmp_path / "db")
    names = ["v_join_agg", "v_strings", "v_minmax_text", "v_topk_text", "v_group"]
    db = ivm.connect(path)
    for s in SCHEMA:
        db.execute(s)
    for n in names:
        db.execute(f"CREATE VIEW {n} AS {VIEWS[n]}")
    db.execute("INSERT INTO t VALUES (1, 1.5, 2, 'abc'), (2, 2.5, 3, NULL), (3, 0.5, 2, 'zzz')")
    db.execute("INSERT INTO u VALUES (1, 1, 1.25), (2, 2, NULL), (1, 3, 2.00)")
    db.execute("UPDATE t SET s = 'later' WHERE a = 3")  # in the log only
    abandon(db)
    monkeypatch.setattr(storage, "ENGINE", "another version")
    with caplog.at_level(logging.WARNING, logger="ivm.storage"):
        db = ivm.connect(path)
    assert "another version of ivm" in caplog.text
    check_views(db, names)
    db.execute("INSERT INTO u VALUES (2, 4, 0.50)")
    db.execute("INSERT INTO t VALUES (4, 1.0, 2, 'abc'), (5, 1.0, 3, 'new text')")
    check_views(db, names)
    db.close()
    db = ivm.connect(path)  # written by this version now: loaded, not rebuilt
    check_views(db, names)
    db.close()


def test_catalog_history_survives(tmp_path):
    """Dropped views still read by others, stopped views, indexes, constraints and mixed-case names."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute('CREATE TABLE "Items" ("Id" INT PRIMARY KEY, name VARCHAR(5) UNIQUE, n INT CHECK (n >= 0))')
    db.execute('CREATE INDEX by_n ON "Items" (n)')
    db.execute('CREATE VIEW base AS SELECT n, count(*) AS c FROM "Items" GROUP BY n')
    db.execute('CREATE VIEW above AS SELECT n FROM "Items" GROUP BY n HAVING count(*) > 1')
    db.execute('CREATE VIEW ratio AS SELECT "Id", 10 / n AS r FROM "Items"')
    db.execute("DROP VIEW base")  # kept running: 'above' reads its arrangement
    db.execute("CREATE VIEW base AS SELECT 1 AS one")
    db.execute("CREATE TABLE e (src INT, dst INT)")
    db.execute(
        "CREATE VIEW p AS WITH RECURSIVE r(a, b) AS (SELECT src, dst FROM e UNION ALL "
        "SELECT r.a, e.dst FROM r JOIN e ON r.b = e.src) SELECT a, b FROM r"
    )
    db.execute("INSERT INTO \"Items\" VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 2)")
    db.execute("INSERT INTO \"Items\" VALUES (4, 'd', 0)")  # 'ratio' divides by zero: in error
    with pytest.warns(ivm.Warning, match="view 'p' failed"):
        db.execute("INSERT INTO e VALUES (1, 2), (2, 1)")  # a cycle under UNION ALL: 'p' stops
    db.close()
    db = ivm.connect(path)
    assert db.execute("SELECT * FROM above").fetchall() == [(1,)]
    assert db.execute("SELECT * FROM base").fetchall() == [(1,)]
    with pytest.raises(ivm.Error, match="division by zero"):
        db.execute("SELECT * FROM ratio")
    with pytest.raises(ivm.Error, match="view 'p' failed"):
        db.execute("SELECT * FROM p")
    db.execute('DELETE FROM "Items" WHERE "Id" = 4')
    assert len(db.execute("SELECT * FROM ratio").fetchall()) == 3
    with pytest.raises(ivm.IntegrityError):
        db.execute("INSERT INTO \"Items\" VALUES (5, 'a', 3)")
    with pytest.raises(ivm.IntegrityError):
        db.execute("INSERT INTO \"Items\" VALUES (5, 'e', -1)")
    db.execute("INSERT INTO \"Items\" VALUES (5, 'e', 2)")
    assert sorted(db.execute("SELECT * FROM above").fetchall()) == [(1,), (2,)]
    db.execute("DROP VIEW ratio")
    db.close()
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM above").fetchall()) == [(1,), (2,)]
    db.close()


def test_a_mutually_recursive_view_reopens_with_its_header(tmp_path):
    """sqlglot writes ``WITH MUTUALLY RECURSIVE`` back as ``WITH RECURSIVE``: the catalog keeps the header, its
    declared columns and its limit, so that the view parses again when the database opens."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE w (src INT, dst INT, len INT); CREATE TABLE roots (r INT)")
    db.execute(
        "CREATE VIEW v AS WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 50) "
        "dist(node INTEGER, len INTEGER) AS (SELECT node, MIN(len) FROM "
        "(SELECT r AS node, 0 AS len FROM roots UNION ALL "
        "SELECT w.dst, dist.len + w.len FROM dist JOIN w ON w.src = dist.node) x GROUP BY node) "
        "SELECT node, len FROM dist"
    )
    db.execute("INSERT INTO roots VALUES (1); INSERT INTO w VALUES (1, 2, 3), (2, 3, 4)")
    db.close()
    db = ivm.connect(path)
    assert "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 50)" in db.views["v"].view.sql
    db.execute("INSERT INTO w VALUES (3, 4, 5)")
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [(1, 0), (2, 3), (3, 7), (4, 12)]
    db.close()


def test_sums_in_error_and_exact_double_sums_are_loaded_as_they_were(tmp_path, caplog):
    """A view whose sum does not fit is in error after a clean stop and after a crash alike (the running
    states and the reduce's trace of its errors are checkpointed), and recovers when the rows at fault leave;
    the limbs of an exact sum of doubles come back too, so deleting a large value leaves the small ones."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE n (k INT PRIMARY KEY, g INT, a BIGINT, x DOUBLE PRECISION)")
    views = {
        "running": "SELECT g, SUM(a) AS s, COUNT(*) AS c FROM n GROUP BY g",
        "general": "SELECT g, SUM(a) AS s, MAX(a) AS m FROM n GROUP BY g",
        "doubles": "SELECT g, SUM(x) AS s, AVG(x) AS m FROM n GROUP BY g",
    }
    for name, sql in views.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    db.execute("INSERT INTO n VALUES (1, 1, 9223372036854775807, 1e20), (2, 1, 1, 1), (3, 2, 5, 1e-300)")
    db.execute("INSERT INTO n VALUES (4, 2, 7, -1e300), (5, 2, 8, 1e300)")
    assert sorted(db.view_errors()) == ["general", "running"]
    for crash in (False, True):
        db.execute("INSERT INTO n VALUES (6, 3, 1, 2)")  # since the checkpoint: in the log
        abandon(db) if crash else db.close()
        with caplog.at_level(logging.WARNING, logger="ivm.storage"):
            db = ivm.connect(path)
        assert "building every view again" not in caplog.text  # loaded, not computed again
        assert sorted(db.view_errors()) == ["general", "running"]
        with pytest.raises(ivm.Error, match="view 'running' is in error.*bigint out of range"):
            db.execute("SELECT * FROM running")
        db.execute("DELETE FROM n WHERE k = 6")
    db.execute("DELETE FROM n WHERE k IN (1, 4, 5)")
    assert db.view_errors() == {}
    assert sorted(db.execute("SELECT * FROM doubles").fetchall()) == [(1, 1.0, 1.0), (2, 1e-300, 1e-300)]
    db.close()
    db = ivm.connect(path)
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE n (k INT, g INT, a BIGINT, x DOUBLE)")
    oracle.executemany("INSERT INTO n VALUES (?, ?, ?, ?)", db.execute("SELECT * FROM n").fetchall())
    for name, sql in views.items():
        assert same_rows(db.execute(f"SELECT * FROM {name}").fetchall(), oracle.execute(sql).fetchall()), name
    db.close()


def test_text_codes_keep_their_meaning_across_the_log(tmp_path):
    """Strings first seen after the checkpoint (by commits, queries and views alike) are replayed at the
    codes the logged rows name."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE p (k INT PRIMARY KEY, s TEXT, note TEXT)")
    db.execute("CREATE VIEW up AS SELECT upper(s) AS u, count(*) AS n FROM p GROUP BY upper(s)")
    db.execute("SELECT 'only in a query'").fetchall()
    for i in range(30):
        db.execute("INSERT INTO p VALUES (%s, %s, %s)", (i, f"s{i % 4}", f"note number {i}"))
    db.execute("SELECT lower('ANOTHER') || 'x'").fetchall()
    db.execute("UPDATE p SET s = 'changed' WHERE k < 5")
    db.execute("DELETE FROM p WHERE k >= 25")
    before = sorted(db.execute("SELECT * FROM p").fetchall())
    abandon(db)
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM p").fetchall()) == before
    assert sorted(db.execute("SELECT * FROM up").fetchall()) == [
        ("CHANGED", 5),
        ("S0", 5),
        ("S1", 5),
        ("S2", 5),
        ("S3", 5),
    ]
    db.execute("DELETE FROM p WHERE s = 'changed' OR note = 'note number 9'")
    assert sorted(db.execute("SELECT * FROM up").fetchall()) == [("S0", 5), ("S1", 4), ("S2", 5), ("S3", 5)]
    db.close()


def test_a_directory_opens_once(tmp_path):
    db = ivm.connect(str(tmp_path / "db"))
    with pytest.raises(ivm.OperationalError, match="in use"):
        ivm.connect(str(tmp_path / "db"))
    db.close()
    ivm.connect(str(tmp_path / "db")).close()


def test_without_synchronous_commits_are_logged_too(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path, synchronous=False)
    db.execute("CREATE TABLE k (a INT)")
    db.execute("INSERT INTO k VALUES (1), (2)")
    abandon(db)
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM k").fetchall()) == [(1,), (2,)]
    db.close()


def test_positions_are_those_of_the_last_commit(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path, synchronous=False)
    db.execute("CREATE TABLE k (a INT)")
    db.positions["old"] = 1
    db.store.checkpoint(db)
    del db.positions["old"]
    db.positions["new"] = 2
    db.execute("INSERT INTO k VALUES (1)")
    db.store.sync()
    abandon(db)
    db = ivm.connect(path)
    assert db.positions == {"new": 2}
    db.close()


def test_the_log_checkpoints_when_it_grows(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path, checkpoint_bytes=2_000)
    db.execute("CREATE TABLE k (a INT)")
    for i in range(100):
        db.execute("INSERT INTO k VALUES (%s)", (i,))
    db.store.wait()
    assert db.store.stalls, "no checkpoint was taken as the log grew"  # how many: as the thread keeps up
    assert db.store.log.segment > 2
    abandon(db)
    db = ivm.connect(path)
    assert db.execute("SELECT count(*) FROM k").fetchall() == [(100,)]
    db.close()


# -- damage --------------------------------------------------------------------------------------------


def _durable(tmp_path) -> str:
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE k (a INT PRIMARY KEY, s TEXT)")
    db.execute("CREATE VIEW n AS SELECT count(*) AS c FROM k")
    db.execute("INSERT INTO k VALUES " + ", ".join(f"({i}, 'x{i}')" for i in range(1, 51)))
    db.close()
    return path


def _data_files(path: str) -> list[Path]:
    return sorted(Path(path, "data").iterdir(), key=lambda p: p.stat().st_size, reverse=True)


def test_a_flipped_byte_is_an_error_naming_the_file(tmp_path):
    path = _durable(tmp_path)
    victim = _data_files(path)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    with pytest.raises(ivm.OperationalError, match=victim.name):
        ivm.connect(path)


def test_a_cut_or_missing_file_is_an_error_naming_it(tmp_path):
    path = _durable(tmp_path)
    victim = _data_files(path)[0]
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(ivm.OperationalError, match=victim.name):
        ivm.connect(path)
    victim.unlink()
    with pytest.raises(ivm.OperationalError, match=victim.name):
        ivm.connect(path)


def test_a_damaged_manifest_falls_back_to_the_one_before(tmp_path, caplog):
    path = _durable(tmp_path)
    newest = sorted(Path(path).glob("manifest-*.json"))[-1]
    newest.write_bytes(newest.read_bytes()[:-20])
    with caplog.at_level(logging.WARNING, logger="ivm.storage"):
        db = ivm.connect(path)
    assert newest.name in caplog.text
    assert db.execute("SELECT * FROM n").fetchall() == [(50,)]
    db.close()


def test_a_torn_log_tail_is_dropped_and_damage_before_it_is_an_error(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE k (a INT)")
    for i in range(3):
        db.execute("INSERT INTO k VALUES (%s)", (i,))
    segment = Path(db.store.log.directory) / f"{db.store.log.segment:012d}.log"
    end = db.store.log.bytes
    abandon(db)
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    whole = segment.read_bytes()[:end]  # its frames, without the zeros ahead
    segment.write_bytes(whole[:-7])  # the last commit never finished writing: it never returned
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM k").fetchall()) == [(0,), (1,)]
    db.close()
    damaged = bytearray(whole)
    damaged[40] ^= 0xFF  # inside the first commit, with whole commits after it
    segment = copy / "wal" / segment.name
    segment.write_bytes(bytes(damaged))
    with pytest.raises(ivm.OperationalError, match=segment.name):
        ivm.connect(str(copy))


# -- commit groups -------------------------------------------------------------------------------------


def _grouped(tmp_path) -> tuple[str, Path, int, int]:
    """A database with one commit before a group of three: its path, its log segment, and the bytes the
    group starts and ends at."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE k (a INT PRIMARY KEY, s TEXT)")
    db.execute("CREATE VIEW n AS SELECT count(*) AS c, max(s) AS m FROM k")
    db.execute("INSERT INTO k VALUES (0, 'zero')")
    segment = Path(db.store.log.directory) / f"{db.store.log.segment:012d}.log"
    before = db.store.log.bytes
    with db.commit_group():
        for i in range(1, 4):
            db.execute("INSERT INTO k VALUES (%s, %s)", (i, f"new text {i}"))
            assert db.execute("SELECT c FROM n").fetchall() == [(i + 1,)]  # visible at once
        assert db.store.log.bytes == before  # nothing written before the group ends
    assert db.store.log.bytes > before
    end = db.store.log.bytes
    abandon(db)
    return path, segment, before, end


def test_a_commit_group_is_written_whole_at_its_end(tmp_path):
    path, _, _, _ = _grouped(tmp_path)
    db = ivm.connect(path)
    assert db.execute("SELECT * FROM n").fetchall() == [(4, "zero")]
    assert sorted(db.execute("SELECT a FROM k").fetchall()) == [(0,), (1,), (2,), (3,)]
    db.close()


@pytest.mark.parametrize("cut", ["torn", "damaged"])
def test_a_commit_group_cut_short_is_not_there_at_all(tmp_path, cut):
    path, segment, before, end = _grouped(tmp_path)
    whole = segment.read_bytes()[:end]
    if cut == "torn":  # two of its three commits were written before the crash
        data = whole[: before + (len(whole) - before) * 3 // 4]
    else:  # its first commit was never written whole, its others were
        data = bytearray(whole)
        opening = wal.HEADER.size + wal.HEADER.unpack_from(whole, before)[2]  # the group frame
        data[before + opening + 50] ^= 0xFF
    segment.write_bytes(bytes(data))
    db = ivm.connect(path)
    assert db.execute("SELECT a, s FROM k").fetchall() == [(0, "zero")]
    assert db.execute("SELECT * FROM n").fetchall() == [(1, "zero")]
    db.execute("INSERT INTO k VALUES (9, 'after')")  # the log goes on after the commit before the group
    abandon(db)
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM k").fetchall()) == [(0, "zero"), (9, "after")]
    db.close()


def test_a_commit_group_that_raises_writes_nothing_and_breaks_the_connection(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE k (a INT PRIMARY KEY)")
    db.execute("INSERT INTO k VALUES (0)")
    with pytest.raises(RuntimeError, match="outputs"), db.commit_group():
        db.execute("INSERT INTO k VALUES (1)")
        raise RuntimeError("writing the outputs failed")
    with pytest.raises(ivm.InternalError, match="commit group"):
        db.execute("SELECT * FROM k")
    db.close()
    db = ivm.connect(path)
    assert db.execute("SELECT * FROM k").fetchall() == [(0,)]
    with pytest.raises(ValueError), db.commit_group():  # nothing committed: nothing to lose
        raise ValueError
    assert db.execute("SELECT * FROM k").fetchall() == [(0,)]
    db.close()


def test_a_commit_group_holds_whole_transactions_and_defers_checkpoints(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path, checkpoint_bytes=2_000)
    db.execute("CREATE TABLE k (a INT PRIMARY KEY)")
    db.execute("BEGIN")
    with pytest.raises(ivm.ProgrammingError, match="inside a transaction"), db.commit_group():
        pass
    db.execute("ROLLBACK")
    checkpoints = len(db.store.checkpoint_seconds)
    with db.commit_group():
        for i in range(50):  # far past checkpoint_bytes
            db.execute("INSERT INTO k VALUES (%s)", (i,))
        db.execute("CREATE TABLE j (b INT)")
        db.execute("INSERT INTO j VALUES (7)")
        with db.commit_group():  # part of the outer group
            db.execute("INSERT INTO j VALUES (8)")
        assert len(db.store.checkpoint_seconds) == checkpoints
    assert len(db.store.checkpoint_seconds) == checkpoints + 1  # DDL in the group: one checkpoint at its end
    with pytest.raises(ivm.ProgrammingError, match="end outside a transaction"), db.commit_group():
        db.execute("BEGIN")
        db.execute("INSERT INTO j VALUES (9)")
    db.close()
    db = ivm.connect(path)
    assert db.execute("SELECT count(*) FROM k").fetchall() == [(50,)]
    assert sorted(db.execute("SELECT * FROM j").fetchall()) == [(7,), (8,)]
    db.close()


def test_a_commit_group_in_memory_changes_nothing():
    db = ivm.connect()
    db.execute("CREATE TABLE k (a INT)")
    with db.commit_group():
        db.execute("INSERT INTO k VALUES (1)")
    assert db.execute("SELECT * FROM k").fetchall() == [(1,)]


# -- checkpoints in the background ---------------------------------------------------------------------


def hold_background_writes(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make files written by another thread than the main one (a checkpoint in the background) wait for
    ``release``; ``started`` is set when the first one would be written."""
    started, release = threading.Event(), threading.Event()
    write_bytes = files.write_bytes

    def held(buf, uri, sync=True):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            assert release.wait(60)
        return write_bytes(buf, uri, sync)

    monkeypatch.setattr(files, "write_bytes", held)
    return started, release


def _text_rows(lo: int, hi: int) -> str:
    return ", ".join(f"({i}, 'text number {i}')" for i in range(lo, hi))


def test_commits_go_on_while_a_checkpoint_is_written(tmp_path, monkeypatch):
    path = str(tmp_path / "db")
    db = ivm.connect(path, checkpoint_bytes=4_000)
    db.execute("CREATE TABLE k (a INT PRIMARY KEY, s TEXT)")
    db.execute("CREATE VIEW n AS SELECT count(*) AS c, max(s) AS m FROM k")
    started, release = hold_background_writes(monkeypatch)
    i = 0
    while not started.is_set():  # until the log passes checkpoint_bytes
        db.execute(f"INSERT INTO k VALUES {_text_rows(i, i + 10)}")
        i += 10
    number = db.store.number
    for _ in range(5):  # the checkpoint's files are not written yet, and these commits return all the same
        db.execute(f"INSERT INTO k VALUES {_text_rows(i, i + 10)}")
        i += 10
    assert db.store.number == number and db.store.stalls
    release.set()
    db.store.wait()
    assert db.store.number == number + 1
    db.execute(f"INSERT INTO k VALUES {_text_rows(i, i + 10)}")
    abandon(db)
    db = ivm.connect(path)
    assert db.execute("SELECT c FROM n").fetchall() == [(i + 10,)]
    assert db.execute("SELECT s FROM k WHERE a = %s", (i + 9,)).fetchall() == [(f"text number {i + 9}",)]
    db.close()


def test_a_checkpoint_that_fails_in_the_background_loses_nothing(tmp_path, monkeypatch, caplog):
    path = str(tmp_path / "db")
    db = ivm.connect(path, checkpoint_bytes=1_300)
    db.execute("CREATE TABLE k (a INT PRIMARY KEY, s TEXT)")
    write_bytes = files.write_bytes

    def failing(buf, uri, sync=True):
        if threading.current_thread() is not threading.main_thread():
            raise OSError(28, "No space left on device")
        return write_bytes(buf, uri, sync)

    monkeypatch.setattr(files, "write_bytes", failing)
    with caplog.at_level(logging.ERROR, logger="ivm.storage"):
        for i in range(0, 300, 10):  # strings failed checkpoints would have held are logged again after them
            db.execute(f"INSERT INTO k VALUES {_text_rows(i, i + 10)}")
        db.store.wait()
    assert "No space left on device" in caplog.text
    abandon(db)
    monkeypatch.setattr(files, "write_bytes", write_bytes)
    db = ivm.connect(path)
    assert db.execute("SELECT count(*), count(DISTINCT s) FROM k").fetchall() == [(300, 300)]
    assert db.execute("SELECT s FROM k WHERE a = 299").fetchall() == [("text number 299",)]
    db.close()


def test_a_log_holding_old_commits_checkpoints(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path, checkpoint_interval=3600)
    db.execute("CREATE TABLE k (a INT)")
    number = db.store.number
    db.execute("INSERT INTO k VALUES (1)")
    assert db.store.number == number  # a young log, far below checkpoint_bytes
    db.store.checkpoint_interval = 0.0
    db.execute("INSERT INTO k VALUES (2)")
    db.store.wait()
    assert db.store.number == number + 1
    abandon(db)
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM k").fetchall()) == [(1,), (2,)]
    db.close()


def test_durable_positions_are_those_a_crash_of_the_machine_keeps(tmp_path, monkeypatch):
    path = str(tmp_path / "db")
    db = ivm.connect(path, synchronous=False, checkpoint_bytes=1 << 30)
    db.execute("CREATE TABLE k (a INT)")
    db.positions["source"] = 1
    db.execute("INSERT INTO k VALUES (1)")
    assert db.store.durable[1] == {}  # logged, not synced: only the checkpoint of the CREATE is durable
    db.store.sync()
    assert db.store.durable[1] == {"source": 1}
    started, release = hold_background_writes(monkeypatch)
    db.positions["source"] = 2
    db.store.checkpoint_interval = 0.0
    db.execute("INSERT INTO k VALUES (2)")  # takes a checkpoint in the background
    assert started.wait(60)
    db.positions["source"] = 3
    db.execute("INSERT INTO k VALUES (3)")
    db.store.sync()
    assert db.store.durable[1] == {"source": 3}
    release.set()
    db.store.wait()  # the checkpoint written now holds position 2: older than what is durable already
    assert db.store.durable[1] == {"source": 3}
    db.close()
