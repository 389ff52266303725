"""Crashes: a child process running random transactions against a database directory is SIGKILLed at chosen
moments (half-way through a log append or a commit group's, a checkpoint's file or manifest, a merge, or
right after a commit), again and again on the same directory. After each kill the reopened database holds
every transaction whose COMMIT returned (at the end of its commit group, for those in one) and nothing that did
not commit, each commit group whole or not at all, and every view equals DuckDB's recompute of its SQL.
``IVM_CRASH_SEEDS`` (default 2) widens the search."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import ivm
from tests.db.crash_child import TABLES, VIEWS
from tests.oracle import same_rows

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["log", "file", "manifest", "merge", "commit", "group"]
SEEDS = int(os.environ.get("IVM_CRASH_SEEDS", "2"))  # each kills the child at every kind of moment twice


def _journal(path: Path) -> tuple[dict[int, list[str]], set[int], dict[int, str], dict[int, set[int]]]:
    """The child's journal: each transaction's statements, those acknowledged, those that failed (with why),
    and per commit group the transactions whose COMMIT returned inside it."""
    attempts, done, failed, groups = {}, set(), {}, {}
    group_of = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "attempt" in entry:
            attempts[entry["attempt"]] = entry["sql"]
            if entry.get("group") is not None:
                group_of[entry["attempt"]] = entry["group"]
                groups.setdefault(entry["group"], set())
        elif "committed" in entry:
            groups[group_of[entry["committed"]]].add(entry["committed"])
        elif "done" in entry:
            done.add(entry["done"])
        else:
            failed[entry["failed"]] = entry["error"]
    return attempts, done, failed, groups


def _oracle_statement(sql: str) -> str | None:
    """What DuckDB runs for a logged statement (views are not its concern)."""
    return None if sql.startswith(("CREATE VIEW", "DROP VIEW")) else sql


@pytest.mark.parametrize("seed", range(SEEDS))
def test_killed_at_random_moments_the_database_reopens_exact(tmp_path, seed):
    kill_and_reopen(str(tmp_path / "db"), tmp_path / "journal", seed, KINDS * 2)


def test_killed_at_random_moments_a_database_on_an_object_store_reopens_exact(tmp_path, s3):
    # what is particular to an object store: the log's parts, the checkpoint's objects and its manifest
    kinds = ["commit", "log", "file", "manifest", "group"]
    kill_and_reopen(s3.uri(), tmp_path / "journal", 7, kinds, most=3)


def kill_and_reopen(path: str, journal: Path, seed: int, kinds: list[str], most: int = 40) -> None:
    """Run the child on ``path`` once per kind of moment in ``kinds``, killed at one of them (at most the
    ``most``-th), and check the database each kill leaves."""
    rng = random.Random(seed)
    journal.touch()
    oracle = duckdb.connect()
    oracle.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    for s in TABLES:
        oracle.execute(s)
    applied = -1  # transactions up to this id are in the oracle
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills = 0
    in_flight: set[int] = set()
    for run, kind in enumerate(kinds):
        kind = kind if run else "commit"
        n = rng.randint(
            1, min(most, {"log": 25, "file": 40, "manifest": 4, "merge": 6, "commit": 25, "group": 5}[kind])
        )
        child = subprocess.run(
            [sys.executable, "-m", "tests.db.crash_child", path, str(journal), str(seed), kind, str(n)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
        kills += 1
        attempts, done, failed, groups = _journal(journal)
        db = ivm.connect(path)
        present = {r[0] for r in db.execute("SELECT id FROM txn").fetchall()}
        in_flight.update(i for i in attempts if i > max(done, default=-1))
        # every acknowledged commit is there; an unacknowledged one only if it was in flight at a kill
        assert done <= present, f"run {run} ({kind} {n}): lost {sorted(done - present)}"
        assert present - done <= in_flight, f"run {run}: {sorted(present - done)} never committed: {failed}"
        assert not present & failed.keys()
        for g, committed in groups.items():  # a commit group is there whole or not at all
            assert present & committed in (set(), committed), f"run {run}: group {g} is there in part"
        for i in sorted(present):
            if i > applied:
                for sql in attempts[i]:
                    if (s := _oracle_statement(sql)) is not None:
                        oracle.execute(s)
                applied = i
        for table in ("t", "u", "e", "txn"):
            got = db.execute(f"SELECT * FROM {table}").fetchall()
            want = oracle.execute(f"SELECT * FROM {table}").fetchall()
            assert same_rows(got, want), f"run {run} ({kind} {n}): table {table} differs"
        assert set(db.views) >= set(VIEWS) - {"v_topk_text", "v_strings", "v_distinct"}
        for name in db.views:
            got = db.execute(f"SELECT * FROM {name}").fetchall()
            want = oracle.execute(VIEWS[name]).fetchall()
            assert same_rows(got, want), f"run {run} ({kind} {n}): view {name}: {got} != {want}"
        if run % 2:
            db.close()
        else:  # left as a crash leaves it: the next child replays the log too
            db.store.wait()
            db.store.log.close()
            if db.store._lock is not None:
                os.close(db.store._lock)
            db.store = None
    assert kills == len(kinds)
