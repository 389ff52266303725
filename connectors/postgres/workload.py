"""A concurrent write load for the sidecar's tests and benchmark: tables with and without primary keys and
with NULLs, views over them, and client threads running multi-statement transactions.

``accounts`` only ever sees transfers (and opening and closing of empty accounts), so ``SUM(balance)`` is the
same at every transaction boundary: a reader of the ``total`` view must never see another value.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import psycopg

__all__ = ["SCHEMA", "VIEWS", "TOTAL", "setup", "Load", "bump_marker", "wait_for_marker", "mismatches"]

ACCOUNTS = 200
TOTAL = 1000 * ACCOUNTS

SCHEMA = f"""
CREATE TABLE accounts (id integer PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL);
CREATE TABLE items (id bigserial PRIMARY KEY, grp integer, label varchar(20), price double precision,
                    day date, at timestamp, seen timestamptz, flag boolean, qty bigint, code char(3), r real);
CREATE TABLE notes (k integer, note text);
ALTER TABLE notes REPLICA IDENTITY FULL;
CREATE TABLE marker (id integer PRIMARY KEY, n bigint NOT NULL);
INSERT INTO accounts SELECT i, 'owner' || (i % 7), 1000 FROM generate_series(1, {ACCOUNTS}) i;
INSERT INTO items (grp, label, price, day, at, seen, flag, qty, code, r)
  SELECT CASE WHEN i % 5 = 0 THEN NULL ELSE i % 9 END, CASE WHEN i % 4 = 0 THEN NULL ELSE 'l' || i END,
         CASE WHEN i % 6 = 0 THEN NULL ELSE i / 7.0 END, DATE '2024-01-01' + i % 40,
         TIMESTAMP '2024-01-01 10:00:00.123456' + i * INTERVAL '1 minute',
         TIMESTAMPTZ '2024-01-01 10:00:00+02' + i * INTERVAL '1 second',
         CASE WHEN i % 3 = 0 THEN NULL ELSE i % 2 = 0 END, i,
         CASE WHEN i % 8 = 0 THEN NULL ELSE 'c' || (i % 10) END, i / 4.0
  FROM generate_series(1, 300) i;
INSERT INTO notes SELECT i % 300, CASE WHEN i % 3 = 0 THEN NULL ELSE 'n' || (i % 5) END
  FROM generate_series(1, 400) i;
INSERT INTO marker VALUES (1, 0);
"""

VIEWS = """
CREATE MATERIALIZED VIEW total AS SELECT SUM(balance) AS total, COUNT(*) AS n FROM accounts;
CREATE MATERIALIZED VIEW by_owner AS
  SELECT owner, COUNT(*) AS n, SUM(balance) AS balance FROM accounts GROUP BY owner;
CREATE MATERIALIZED VIEW item_groups AS
  SELECT grp, COUNT(*) AS n, COUNT(label) AS labels, SUM(qty) AS qty, MIN(price) AS lo, MAX(day) AS last_day
  FROM items GROUP BY grp;
CREATE MATERIALIZED VIEW item_rows AS
  SELECT id, grp, label, price, day, at, seen, flag, qty, code, r FROM items WHERE qty % 3 <> 1;
CREATE MATERIALIZED VIEW item_notes AS SELECT i.id, i.label, n.note FROM items i JOIN notes n ON i.id = n.k;
CREATE MATERIALIZED VIEW all_notes AS SELECT k, note FROM notes;
CREATE MATERIALIZED VIEW marker_n AS SELECT n FROM marker;
"""


def setup(dsn: str) -> None:
    """Create and fill the workload's tables (dropping earlier ones)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS accounts, items, notes, marker")
        c.execute(SCHEMA)


class Load:
    """``threads`` clients running random multi-statement transactions until ``stop()``; ``pause`` seconds
    between a client's transactions, or ``rate`` changed rows per second over all clients, paces the load
    (neither: as fast as the server allows)."""

    def __init__(
        self, dsn: str, threads: int = 3, pause: float = 0.0, seed: int = 0, rate: float | None = None
    ) -> None:
        self.dsn = dsn
        self.pause = pause
        self.rate = rate
        self.done = threading.Event()
        self.commits = 0
        self.changes = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._client, args=(seed + i,), daemon=True) for i in range(threads)
        ]

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join()
        if self.errors:
            raise self.errors[0]

    def _client(self, seed: int) -> None:
        rng = random.Random(seed)
        start, mine = time.monotonic(), 0
        try:
            with psycopg.connect(self.dsn) as c:
                while not self.done.is_set():
                    try:
                        n = self._transaction(c, rng)
                        c.commit()
                    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
                        c.rollback()
                        continue
                    with self._lock:
                        self.commits += 1
                        self.changes += n
                    if self.pause:
                        time.sleep(self.pause)
                    if self.rate:  # this client's share of the rate: wait until its changes are due
                        mine += n
                        ahead = start + mine * len(self.threads) / self.rate - time.monotonic()
                        if ahead > 0:
                            self.done.wait(ahead)
        except BaseException as err:  # surfaced by stop()
            self.errors.append(err)

    @staticmethod
    def _transaction(c: psycopg.Connection, rng: random.Random) -> int:
        """One random transaction; returns the number of statements that changed rows."""
        kind = rng.random()
        if kind < 0.35:  # transfer between two accounts, locked in id order
            a, b = sorted(rng.sample(range(1, ACCOUNTS + 1), 2))
            amount = round(rng.uniform(-50, 50), 2)
            r1 = c.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a)).rowcount
            r2 = c.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b)).rowcount
            if r1 != r2:
                c.rollback()
                return 0
            return r1 + r2
        if kind < 0.40:  # close an account into another, or open an empty one
            a, b = sorted(rng.sample(range(1, ACCOUNTS + 1), 2))
            c.execute("SELECT id FROM accounts WHERE id IN (%s, %s) ORDER BY id FOR UPDATE", (a, b))
            got = c.execute("SELECT balance FROM accounts WHERE id = %s", (b,)).fetchone()
            if got is None:
                return c.execute(
                    "INSERT INTO accounts VALUES (%s, %s, 0) ON CONFLICT DO NOTHING", (b, f"owner{b % 5}")
                ).rowcount
            n = c.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (got[0], a)).rowcount
            if n == 0:
                c.rollback()
                return 0
            return n + c.execute("DELETE FROM accounts WHERE id = %s", (b,)).rowcount
        if kind < 0.65:  # items: insert some, update one (to NULLs or values), maybe delete one
            n = 0
            for _ in range(rng.randint(1, 3)):
                null = rng.random() < 0.3
                n += c.execute(
                    "INSERT INTO items (grp, label, price, day, at, seen, flag, qty, code, r) VALUES "
                    "(%s, %s, %s, %s::date, %s::timestamp, %s::timestamptz, %s, %s, %s, %s)",
                    (
                        None if null else rng.randint(0, 9),
                        None if rng.random() < 0.3 else f"l{rng.randint(0, 99)}",
                        None if null else rng.randint(0, 10000) / 8,
                        None if rng.random() < 0.2 else f"2024-02-{rng.randint(1, 28):02d}",
                        None if null else f"2024-03-01 12:{rng.randint(0, 59):02d}:00.5",
                        None if null else f"2024-03-01 12:00:{rng.randint(0, 59):02d}+05",
                        None if null else rng.random() < 0.5,
                        rng.randint(-5, 100),
                        None if null else f"x{rng.randint(0, 9)}",
                        None if null else rng.randint(0, 100) / 4,
                    ),
                ).rowcount
            hi = c.execute("SELECT max(id) FROM items").fetchone()[0] or 1
            n += c.execute(
                "UPDATE items SET grp = CASE WHEN grp IS NULL THEN %s ELSE NULL END, label = %s, "
                "qty = qty + 1, flag = NOT flag WHERE id = %s",
                (rng.randint(0, 9), None if rng.random() < 0.5 else "u", rng.randint(1, hi)),
            ).rowcount
            for _ in range(rng.randint(1, 3)):
                n += c.execute("DELETE FROM items WHERE id = %s", (rng.randint(1, hi),)).rowcount
            return n
        if kind < 0.95:  # notes (no primary key): duplicates, NULLs, delete one copy, update one copy
            k1, k2 = rng.randint(0, 299), rng.randint(0, 299)
            n = c.execute(
                "INSERT INTO notes VALUES (%s, %s), (%s, %s)", (k1, None, k2, f"n{rng.randint(0, 4)}")
            ).rowcount
            for _ in range(2):
                n += c.execute(
                    "DELETE FROM notes WHERE ctid = (SELECT ctid FROM notes WHERE k = %s LIMIT 1)",
                    (rng.randint(0, 299),),
                ).rowcount
            n += c.execute(
                "UPDATE notes SET note = CASE WHEN note IS NULL THEN 'x' ELSE NULL END "
                "WHERE ctid = (SELECT ctid FROM notes WHERE k = %s LIMIT 1)",
                (rng.randint(0, 299),),
            ).rowcount
            return n
        # items key change and a transaction touching several tables
        hi = c.execute("SELECT max(id) FROM items").fetchone()[0] or 1
        n = c.execute(
            "UPDATE items SET id = nextval('items_id_seq') WHERE id = %s", (rng.randint(1, hi),)
        ).rowcount
        n += c.execute(
            "UPDATE notes SET k = k + 1 WHERE ctid = (SELECT ctid FROM notes WHERE k = %s LIMIT 1)",
            (rng.randint(0, 298),),
        ).rowcount
        return n


def bump_marker(dsn: str) -> int:
    """Commit a new marker value (after everything committed before it) and return it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("UPDATE marker SET n = n + 1 WHERE id = 1 RETURNING n").fetchone()[0]


def wait_for_marker(dsn: str, value: int, schema: str = "ivm", timeout: float = 120.0) -> None:
    """Poll the target until its ``marker_n`` view shows ``value``: then every earlier source transaction
    has been applied."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            try:
                row = c.execute(f"SELECT n FROM {schema}.marker_n").fetchone()
            except psycopg.errors.UndefinedTable:
                row = None
            if row is not None and row[0] >= value:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the target did not reach marker {value} (at {row})")
            time.sleep(0.05)


def mismatches(
    dsn: str, views: dict[str, str], schema: str = "ivm", target: str | None = None
) -> dict[str, tuple[Counter, Counter]]:
    """Views whose target table (in ``target``, default the source) differs, as a multiset, from Postgres
    running the view's SQL on the source: name -> (rows only in the target, rows only in the recompute).
    Call it when the source is quiet and the target has caught up."""
    out = {}
    with psycopg.connect(dsn) as c, psycopg.connect(target or dsn) as t:
        c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        t.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        for name, query in views.items():
            got = Counter(map(_comparable, t.execute(f"SELECT * FROM {schema}.{name}").fetchall()))
            want = Counter(map(_comparable, c.execute(f"SELECT * FROM ({query}) q").fetchall()))
            if got != want:
                out[name] = (got - want, want - got)
        c.rollback()
        t.rollback()
    return out


def _comparable(row: tuple) -> tuple:
    """A row whose NaNs compare equal (as they do in Postgres)."""
    return tuple("NaN" if isinstance(v, float) and v != v else v for v in row)
