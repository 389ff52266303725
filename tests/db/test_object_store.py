"""A database on an object store (S3's API, served on loopback): commits, commit groups, checkpoints in the
background, clean stops and abandoned connections open as they were, every view equal to DuckDB's recompute;
damaged objects are errors naming them; a second connection makes the first one's commits fail."""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.db import wal
from ivm.engine import files
from tests.db.test_durable import check_views, tables_of
from tests.sql.test_views_oracle import SCHEMA, VIEWS, _random_txn


def names_under(s3, uri: str) -> list[str]:
    """Every object under ``uri``, relative to it."""
    base = uri.removeprefix("s3://")
    infos = s3.fs.get_file_info(files.pafs.FileSelector(base, recursive=True))
    return sorted(i.path[len(base) + 1 :] for i in infos if i.type == files.pafs.FileType.File)


def abandon(db) -> None:
    """Let go of the connection as a crash would: no checkpoint, the log's parts as they are."""
    db.store.wait()
    db.store = None


def run(db, rng, state, steps: int, group_every: int = 0) -> None:
    for step in range(steps):
        if group_every and step % group_every == 0:
            with db.commit_group():
                for _ in range(3):
                    _commit(db, rng, state)
        else:
            _commit(db, rng, state)


def _commit(db, rng, state) -> None:
    db.execute("BEGIN")
    for s in _random_txn(rng, state):
        db.execute(s)
    db.execute("COMMIT")


def test_a_database_on_an_object_store_reopens_as_it_was_left(s3):
    rng = random.Random(5)
    uri = s3.uri()
    db = ivm.connect(uri, checkpoint_bytes=500)
    for s in SCHEMA:
        db.execute(s)
    for n in VIEWS:
        db.execute(f"CREATE VIEW {n} AS {VIEWS[n]}")
    state = {"t": set()}
    background = 0
    for round in range(3):
        run(db, rng, state, 6, group_every=3)
        background += len(db.store.stalls)
        before = tables_of(db)
        check_views(db, VIEWS)
        if round % 2:
            db.close()
        else:
            abandon(db)
        db = ivm.connect(uri, checkpoint_bytes=500)
        assert tables_of(db) == before
        check_views(db, VIEWS)
    assert background, "the log never asked for a checkpoint"
    db.close()
    kept = names_under(s3, uri)
    manifests = [n for n in kept if n.startswith("manifest-")]
    assert len(manifests) == 2 and "owner" in kept
    assert not [n for n in kept if n.startswith("wal/")] or all(n.endswith(".log") for n in kept if "wal/" in n)


def test_the_log_on_an_object_store_is_one_object_per_commit(s3):
    uri = s3.uri()
    db = ivm.connect(uri)
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    db.execute("CREATE VIEW v AS SELECT b, COUNT(*) AS n FROM t GROUP BY b")
    parts = lambda: [n for n in names_under(s3, uri) if n.startswith("wal/")]  # noqa: E731
    assert parts() == []
    db.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    with db.commit_group():
        db.execute("INSERT INTO t VALUES (3, 'x')")
        db.execute("DELETE FROM t WHERE a = 2")
    assert len(parts()) == 2  # one object per commit, one per commit group
    abandon(db)
    db = ivm.connect(uri)
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [("x", 2)]
    db.execute("INSERT INTO t VALUES (4, 'z')")  # appends after the replayed parts, in a new segment
    abandon(db)
    db = ivm.connect(uri)
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [("x", 2), ("z", 1)]
    assert len(wal.segments(db.store.wal)) == 1  # the checkpoint after replay let go of the older segments
    db.close()


def test_a_damaged_object_is_an_error_naming_it(s3):
    uri = s3.uri()
    db = ivm.connect(uri)
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    db.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(100)))
    db.close()
    data = [n for n in names_under(s3, uri) if n.startswith("data/")]
    sizes = {n: s3.fs.get_file_info(f"{uri.removeprefix('s3://')}/{n}").size for n in data}
    biggest = max(data, key=sizes.get)  # the table's rows, which the newest checkpoint names
    victim = f"{uri.removeprefix('s3://')}/{biggest}"
    with s3.fs.open_input_stream(victim) as f:
        body = bytearray(f.read())
    body[len(body) // 2] ^= 0xFF
    with s3.fs.open_output_stream(victim) as f:
        f.write(bytes(body))
    with pytest.raises(ivm.OperationalError, match=biggest.split("/")[-1]):
        ivm.connect(uri)


def test_a_second_connection_makes_the_first_ones_commits_fail(s3):
    uri = s3.uri()
    first = ivm.connect(uri)
    first.execute("CREATE TABLE t (a INTEGER)")
    second = ivm.connect(uri)  # an object store cannot lock: the newer connection owns the database
    assert second.tables.keys() == {"t"}
    with pytest.raises(ivm.OperationalError, match="opened by another connection"):
        first.execute("INSERT INTO t VALUES (7)")  # not acknowledged: the log is the newer connection's now
    with pytest.raises(ivm.Error, match="cannot be used any more"):
        first.execute("SELECT * FROM t")
    second.execute("INSERT INTO t VALUES (1)")
    second.close()
    assert ivm.connect(uri).execute("SELECT * FROM t").fetchall() == [(1,)]
