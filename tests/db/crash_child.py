"""A process that runs random transactions against a durable database and is killed at a chosen point.

``python -m tests.db.crash_child DIR JOURNAL SEED KIND N`` opens the database in DIR (creating its tables and
views if new), then runs transactions until it kills itself with SIGKILL at the ``N``-th occurrence of
``KIND``: ``log`` (half-way through writing a commit to the log), ``group`` (half-way through writing a
commit group), ``file`` (half-way through a checkpoint's
data file), ``manifest`` (a manifest written but not yet renamed into place), ``merge`` (inside a trace merge
during a commit), ``commit`` (right after a commit returned). Every transaction inserts its id into ``txn``.
JOURNAL receives, synced, ``{"attempt": id, "sql": [...]}`` before a transaction and ``{"done": id}`` once its
COMMIT returned and is durable (or ``{"failed": id}``), which is what the test holds the reopened database to.
Some runs of four transactions are one commit group: their attempts name the group, ``{"committed": id}``
notes each COMMIT that returned, and ``done`` follows only once the group ended.
"""

from __future__ import annotations

import json
import os
import random
import sys

import ivm
from ivm.db import storage, wal
from ivm.engine import files
from ivm.engine.trace import spine
from tests.kill_points import KillPoint

TABLES = [
    "CREATE TABLE t (a INTEGER PRIMARY KEY, b DECIMAL(10,2), c INTEGER, s VARCHAR)",
    "CREATE TABLE u (x INTEGER, y INTEGER NOT NULL, z DECIMAL(8,2))",
    "CREATE TABLE e (src INTEGER, dst INTEGER)",
    "CREATE TABLE txn (id INTEGER PRIMARY KEY)",
]

VIEWS = {
    "v_join": "SELECT t.a, t.s, u.y, u.z FROM t JOIN u ON t.a = u.x WHERE u.y >= 2",
    "v_left": "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x",
    "v_group": "SELECT c, COUNT(*) AS n, SUM(b) AS sb, MIN(b) AS mn, MAX(a) AS mx, AVG(b) AS ab, "
    "COUNT(DISTINCT s) AS ds FROM t GROUP BY c",
    "v_global": "SELECT COUNT(*) AS n, SUM(z) AS sz, MAX(y) AS my FROM u",
    "v_join_agg": "SELECT t.c, SUM(u.z) AS total, COUNT(*) AS n FROM t JOIN u ON t.a = u.x GROUP BY t.c",
    "v_distinct": "SELECT DISTINCT x FROM u",
    "v_topk": "SELECT a, c FROM t ORDER BY c DESC, a LIMIT 3",
    "v_topk_text": "SELECT s, a FROM t ORDER BY s, a DESC LIMIT 4",
    "v_minmax_text": "SELECT c, MIN(s) AS lo, MAX(s) AS hi FROM t GROUP BY c",
    "v_not_exists": "SELECT a FROM t WHERE NOT EXISTS (SELECT * FROM u WHERE u.x = t.a)",
    "v_corr_scalar": "SELECT x, y FROM u WHERE z < (SELECT AVG(z) FROM u u2 WHERE u2.x = u.x)",
    "v_strings": "SELECT UPPER(s) || '-' || c AS k, COUNT(*) AS n FROM t GROUP BY UPPER(s) || '-' || c",
    "v_reach": "WITH RECURSIVE reach(n) AS (SELECT 1 UNION SELECT e.dst FROM reach JOIN e ON e.src = reach.n) "
    "SELECT n FROM reach",
}
TOGGLED = ["v_topk_text", "v_strings", "v_distinct"]  # created and dropped as the run goes


def transaction(rng: random.Random, keys: set[int], i: int) -> list[str]:
    """Statements of one random transaction (``keys``: the primary keys of ``t``, kept up to date)."""
    stmts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.35:
            a = rng.randint(0, 400)
            if a in keys:
                continue
            keys.add(a)
            b = rng.choice(["NULL", f"{rng.randint(0, 900) / 100:.2f}"])
            c = rng.choice(["NULL", str(rng.randint(0, 6))])
            s = rng.choice(["NULL", "'abc'", "'abd'", "'xyz'", f"'w{rng.randint(0, 60)}'"])
            stmts.append(f"INSERT INTO t VALUES ({a}, {b}, {c}, {s})")
        elif r < 0.55:
            rows = ", ".join(
                f"({rng.choice(['NULL', str(rng.randint(0, 400))])}, {rng.randint(0, 4)}, "
                f"{rng.choice(['NULL', f'{rng.randint(-300, 300) / 100:.2f}'])})"
                for _ in range(rng.randint(1, 8))
            )
            stmts.append(f"INSERT INTO u VALUES {rows}")
        elif r < 0.65:
            stmts.append(f"INSERT INTO e VALUES ({rng.randint(0, 30)}, {rng.randint(0, 30)})")
        elif r < 0.75 and keys:
            a = rng.choice(sorted(keys))
            keys.discard(a)
            stmts.append(f"DELETE FROM t WHERE a = {a}")
        elif r < 0.82:
            stmts.append(f"DELETE FROM u WHERE y = {rng.randint(0, 4)} AND x > {rng.randint(0, 400)}")
        elif r < 0.87:
            stmts.append(f"DELETE FROM e WHERE src = {rng.randint(0, 30)}")
        else:
            c, below = rng.randint(0, 6), rng.randint(0, 400)
            stmts.append(f"UPDATE t SET c = {c}, s = 'up{i % 9}' WHERE a < {below}")
    return stmts + [f"INSERT INTO txn VALUES ({i})"]


def main(path: str, journal: str, seed: int, kind: str, n: int) -> None:
    point = KillPoint(kind, n)
    die = point.die

    append, append_object, write_bytes, write_manifest, work = (
        wal.Log.append,
        wal.ObjectLog.append,
        files.write_bytes,
        storage._write_manifest,
        spine._Merge.work,
    )

    def lost_append(self, frames):  # an object is written whole or not at all
        if point("log") or (frames[0][4] == wal.GROUP and point("group")):
            die()
        return append_object(self, frames)

    def torn_append(self, frames):
        if point("log") or (frames[0][4] == wal.GROUP and point("group")):
            data = b"".join(frames)
            os.write(self._fd, data[: len(data) // 2])
            die()
        return append(self, frames)

    def torn_file(buf, uri, sync=True):
        if point("file"):
            if not files.is_local(uri):
                die()
            with open(f"{uri}.tmp", "wb") as f:
                f.write(bytes(buf)[: len(buf) // 2])
            die()
        return write_bytes(buf, uri, sync)

    def unrenamed(directory, number, manifest):
        if point("manifest"):
            if not files.is_local(directory):
                die()
            with open(os.path.join(directory, f"manifest-{number:012d}.json.tmp"), "w") as f:
                json.dump({"half": True}, f)
            die()
        return write_manifest(directory, number, manifest)

    def merging(self, fuel):
        if point("merge"):
            die()
        return work(self, fuel)

    wal.Log.append = torn_append
    wal.ObjectLog.append = lost_append
    files.write_bytes = torn_file
    storage._write_manifest = unrenamed
    spine._Merge.work = merging

    db = ivm.connect(path, checkpoint_bytes=20_000)
    if "t" not in db.tables:
        db.execute("; ".join(TABLES))
        for name, sql in VIEWS.items():
            if name not in TOGGLED:
                db.execute(f"CREATE VIEW {name} AS {sql}")
    keys = {r[0] for r in db.execute("SELECT a FROM t").fetchall()}
    start = max([r[0] for r in db.execute("SELECT id FROM txn").fetchall()], default=-1) + 1
    with open(journal, "a") as out:

        def note(entry: dict) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()
            os.fsync(out.fileno())

        def run(i: int, group: int | None) -> bool:
            """Run transaction ``i``; whether its COMMIT returned."""
            nonlocal keys
            rng = random.Random(seed * 100_003 + i)
            stmts = transaction(rng, keys, i)
            if i % 7 == 3:  # DDL now and then, in the transaction that notes it
                name = TOGGLED[i % len(TOGGLED)]
                if name in db.views:
                    db.execute(f"DROP VIEW {name}")
                else:
                    stmts = [f"CREATE VIEW {name} AS {VIEWS[name]}", *stmts]
            note({"attempt": i, "sql": stmts, "group": group})
            try:
                db.execute("BEGIN")
                for s in stmts:
                    db.execute(s)
                db.execute("COMMIT")
            except ivm.Error as err:
                db.rollback()
                keys = {r[0] for r in db.execute("SELECT a FROM t").fetchall()}
                note({"failed": i, "error": str(err)})
                return False
            if group is not None:
                note({"committed": i})
            if point("commit"):
                die()
            return True

        i = start
        while i < start + 400:
            if i % 10 == 5:  # four transactions in one commit group: durable together when it ends
                with db.commit_group():
                    ok = [j for j in range(i, i + 4) if run(j, i)]
                i += 4
            else:
                ok = [i] if run(i, None) else []
                i += 1
            for j in ok:
                note({"done": j})
    die()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
