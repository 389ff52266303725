"""DDL as users write it: ALTER TABLE (ADD, DROP and RENAME COLUMN, RENAME TO), TRUNCATE, SERIAL and identity
columns, CREATE TABLE AS, DROP of several relations with CASCADE. Every script runs statement by statement on
ivm and on a throwaway PostgreSQL: the same statements succeed and fail, and after every step ivm has the
tables and views PostgreSQL has, each holding PostgreSQL's rows (PostgreSQL's views are computed on every read:
the recompute each maintained view must equal), with deletes, updates and NULLs between the DDL. Durable
databases run the same scripts reopened after every step, cleanly or as a crash leaves them; a child process
is SIGKILLed in the middle of DDL and the directory reopens as of a whole number of statements. Whatever is not
implemented is refused by name and position."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import ivm
from ivm.db import alter
from ivm.errors import IntegrityError, NotSupportedError, OperationalError, ProgrammingError
from tests.db.ddl_crash_child import STEPS
from tests.oracle import same_rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    from connectors.postgres.cluster import LocalCluster

    with LocalCluster() as c:
        yield c


@pytest.fixture()
def pg(cluster):
    with psycopg.connect(cluster.dsn, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS public CASCADE")
        c.execute("CREATE SCHEMA public")
        yield c


def abandon(db) -> None:
    """Let go of a durable connection as a crash would: no checkpoint, the log as it is."""
    store = db.store
    store.wait()
    os.close(store.log._fd)
    store.log._fd = None
    os.close(store._lock)
    db.store = None


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Both:
    """ivm and PostgreSQL side by side; ``mode`` "memory", or "reopen" (a durable database closed and opened
    again after every statement, every other time as a crash leaves it)."""

    def __init__(self, pg, mode: str = "memory", path: str | None = None) -> None:
        self.pg, self.mode, self.path = pg, mode, path
        self.db = ivm.connect(path) if mode == "reopen" else ivm.connect()
        self.steps = 0

    def run(self, sql: str, fails: str | None = None) -> None:
        """Run ``sql`` on both; both fail (ivm's error saying ``fails``, when given) or neither does."""
        pg_err = ivm_err = None
        try:
            self.pg.execute(sql)
        except psycopg.Error as err:
            pg_err = err
        try:
            self.db.execute(sql)
        except ivm.Error as err:
            ivm_err = err
        assert (pg_err is None) == (ivm_err is None), f"{sql}: PostgreSQL {pg_err!r}, ivm {ivm_err!r}"
        if fails is not None:
            assert ivm_err is not None and fails in str(ivm_err), f"{sql}: {ivm_err!r}"
        if self.mode == "reopen" and not self.db.in_transaction:
            self.steps += 1
            if self.steps % 3 == 1:
                self.db.close()
            elif self.steps % 3 == 2 or fails is not None:
                abandon(self.db)
            if self.steps % 3 or fails is not None:
                self.db = ivm.connect(self.path)
        self.check()

    def script(self, steps: list) -> None:
        for step in steps:
            sql, fails = (step, None) if isinstance(step, str) else step
            self.run(sql, fails)

    def relations(self, kind: str) -> set[str]:
        rows = self.pg.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = %s",
            (kind,),
        ).fetchall()
        return {r[0] for r in rows}

    def check(self) -> None:
        """ivm has PostgreSQL's tables and views, each with the same columns and rows."""
        db = self.db
        if self.pg.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            assert db.aborted  # both wait for the end of the block
            return
        assert set(db.tables) == self.relations("BASE TABLE")
        assert set(db.views) == self.relations("VIEW")
        if db.in_transaction:
            return
        for name in [*db.tables, *db.views]:
            cur = self.pg.execute(f"SELECT * FROM {_q(name)}")
            want = cur.fetchall()
            got = db.execute(f"SELECT * FROM {_q(name)}").fetchall()
            assert [d[0] for d in db.description] == [d.name for d in cur.description], name
            assert same_rows(got, want), (
                f"{name}: ivm {sorted(got, key=repr)} PostgreSQL {sorted(want, key=repr)}"
            )

    def close(self) -> None:
        self.db.close()


ALTER_SCRIPT = [
    "CREATE TABLE t (id INTEGER PRIMARY KEY, b TEXT, c INTEGER, d NUMERIC(8,2), UNIQUE (c, d), "
    "CHECK (c > -100))",
    "CREATE TABLE u (k INTEGER, t_id INTEGER)",
    "INSERT INTO t VALUES (1, 'x', 1, 1.50), (2, 'y', NULL, 2.25), (3, NULL, 3, NULL), (4, 'x', 4, -1.00)",
    "INSERT INTO u VALUES (10, 1), (11, 1), (12, 3), (NULL, 4), (13, NULL)",
    "CREATE VIEW v_all AS SELECT * FROM t",
    "CREATE VIEW v_agg AS SELECT b, COUNT(*) AS n, SUM(d) AS sd FROM t GROUP BY b",
    "CREATE VIEW v_join AS SELECT t.id, t.c, u.k FROM t JOIN u ON u.t_id = t.id",
    "CREATE VIEW v_on_view AS SELECT b, n FROM v_agg WHERE n > 1",
    "CREATE VIEW v_ids AS SELECT id FROM t WHERE c IS NOT NULL",
    "CREATE VIEW v_count AS SELECT COUNT(*) AS n FROM t",
    "CREATE INDEX t_b ON t (b)",
    "ALTER TABLE t ADD COLUMN e INTEGER DEFAULT 5",
    "INSERT INTO t VALUES (5, 'z', 5, 5.00, NULL), (6, NULL, NULL, NULL, 6)",
    "UPDATE t SET e = e + 1, b = 'x' WHERE id IN (2, 5)",
    "DELETE FROM t WHERE id = 3",
    "ALTER TABLE t ADD COLUMN f TEXT, ADD COLUMN g DATE DEFAULT DATE '2024-02-29'",
    ("ALTER TABLE t ADD COLUMN h INTEGER NOT NULL", "contains null values"),
    ("ALTER TABLE t ADD COLUMN h INTEGER UNIQUE DEFAULT 1", "unique"),
    ("ALTER TABLE t ADD COLUMN h INTEGER DEFAULT 0 CHECK (h > 0)", "check"),
    ("ALTER TABLE t ADD COLUMN h INTEGER PRIMARY KEY", "multiple primary keys"),
    ("ALTER TABLE t ADD COLUMN e TEXT", "already exists"),
    "ALTER TABLE t ADD COLUMN IF NOT EXISTS e TEXT",
    "UPDATE t SET f = b || '!' WHERE b IS NOT NULL",
    "ALTER TABLE t RENAME COLUMN b TO bee",
    ("ALTER TABLE t RENAME COLUMN nope TO x", "does not exist"),
    ("ALTER TABLE t RENAME COLUMN c TO d", "already exists"),
    "INSERT INTO t (id, bee, c, d) VALUES (7, 'y', 7, 7.00)",
    "UPDATE t SET bee = NULL WHERE id = 1",
    ("ALTER TABLE t DROP COLUMN c", "view 'v_all' depends on it"),
    ("ALTER TABLE t DROP COLUMN nope", "does not exist"),
    "ALTER TABLE t DROP COLUMN IF EXISTS nope",
    "ALTER TABLE t DROP COLUMN f",  # v_all was created before f: it does not read it
    "ALTER TABLE t DROP COLUMN d CASCADE",  # v_all and v_agg read d, v_on_view reads v_agg; UNIQUE (c, d) goes
    "INSERT INTO t (id, bee, c) VALUES (8, 'w', 7), (9, 'w', 7)",  # (c) alone was never unique
    ("INSERT INTO t (id, c) VALUES (10, -200)", "check"),
    "ALTER TABLE t DROP COLUMN id CASCADE",  # the primary key goes; v_join and v_ids read id
    "INSERT INTO t (bee, c) VALUES ('dup', 1), ('dup', 1)",
    "DELETE FROM t WHERE c = 4",
    "ALTER TABLE t RENAME TO t2",
    ("INSERT INTO t (bee) VALUES ('gone')", "does not exist"),
    "UPDATE t2 SET c = c * 10 WHERE bee = 'dup'",
    "CREATE VIEW v_new AS SELECT bee, SUM(c) AS s, MAX(g) AS g FROM t2 GROUP BY bee",
    "ALTER TABLE t2 ADD COLUMN c2 INTEGER DEFAULT 2",
    "ALTER TABLE t2 RENAME c2 TO c3",
    "UPDATE t2 SET c3 = NULL WHERE bee IS NULL",
    "ALTER TABLE u ADD COLUMN lo INTEGER DEFAULT 0, ADD COLUMN hi INTEGER DEFAULT 10",
    "ALTER TABLE u ADD COLUMN mid INTEGER DEFAULT 5 CHECK (mid BETWEEN lo AND hi)",
    ("INSERT INTO u (k, mid) VALUES (1, 20)", "u_mid_check"),
    "ALTER TABLE u DROP COLUMN hi",  # the CHECK reading it goes with it
    "INSERT INTO u (k, mid) VALUES (1, 20)",
    ("ALTER TABLE u RENAME TO t2", "already exists"),
    "ALTER TABLE u RENAME COLUMN k TO kk",
    "ALTER TABLE u DROP COLUMN t_id",
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_alter_table_keeps_every_view_equal_to_postgresql(pg, tmp_path, mode):
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(ALTER_SCRIPT)
    # constraints and indexes as PostgreSQL left them: named as it named them, on the renamed table
    db = both.db
    assert [c.name for c in db.catalog.tables["t2"].checks] == ["t_c_check"]
    assert db.catalog.tables["t2"].primary_key == () and db.catalog.tables["t2"].uniques == ()
    assert db.catalog.indexes["t_b"][0] == "t2"
    assert set(db.views) == {"v_count", "v_new"}
    both.close()


CHANGE_SCRIPT = [
    "CREATE TABLE c (id INTEGER PRIMARY KEY, n INTEGER, s TEXT, d NUMERIC(8,2), x DOUBLE PRECISION, day DATE)",
    "INSERT INTO c VALUES (1, 10, '5', 1.25, 0.5, DATE '2024-01-01'), (2, NULL, 'x', 2.50, NULL, NULL), "
    "(3, 30, '7', NULL, -1.5, DATE '2024-02-29'), (4, 30, NULL, -3.75, 2.0, DATE '2023-12-31')",
    "CREATE VIEW c_n AS SELECT id, n FROM c WHERE n > 0",
    "CREATE VIEW c_sum AS SELECT n, COUNT(*) AS k FROM c GROUP BY n",
    "CREATE VIEW c_all AS SELECT * FROM c",
    "CREATE INDEX c_by_n ON c (n)",
    # types: as PostgreSQL assigns, or by USING; a column a view reads keeps its type
    ("ALTER TABLE c ALTER COLUMN d TYPE INTEGER", "depends on column 'd'"),
    "DROP VIEW c_all",
    "ALTER TABLE c ALTER COLUMN d TYPE INTEGER",
    "ALTER TABLE c ALTER COLUMN d SET DATA TYPE NUMERIC(10,3)",
    ("ALTER TABLE c ALTER COLUMN s TYPE INTEGER", "cannot be cast automatically"),
    ("ALTER TABLE c ALTER COLUMN s TYPE INTEGER USING s::integer", "invalid"),
    "ALTER TABLE c ALTER COLUMN s TYPE INTEGER USING length(s) * 2",
    "ALTER TABLE c ALTER COLUMN x TYPE TEXT",
    "ALTER TABLE c ALTER COLUMN day TYPE TIMESTAMP",
    "ALTER TABLE c ALTER COLUMN x TYPE VARCHAR(3) USING upper(x)",
    ("ALTER TABLE c ALTER COLUMN n TYPE BIGINT", "depends on column 'n'"),
    ("ALTER TABLE c ALTER COLUMN nope TYPE BIGINT", "does not exist"),
    "INSERT INTO c VALUES (5, 50, 12, 1.234, 'abc', TIMESTAMP '2024-03-01 10:00:00')",
    # defaults and NOT NULL
    "ALTER TABLE c ALTER COLUMN s SET DEFAULT 42, ALTER COLUMN x SET DEFAULT 'dft'",
    "INSERT INTO c (id, n) VALUES (6, 60)",
    ("ALTER TABLE c ALTER COLUMN n SET NOT NULL", "contains null values"),
    "UPDATE c SET n = 0 WHERE n IS NULL",
    "ALTER TABLE c ALTER COLUMN n SET NOT NULL",
    ("INSERT INTO c (id) VALUES (7)", "not-null"),
    "ALTER TABLE c ALTER COLUMN n DROP NOT NULL, ALTER COLUMN s DROP DEFAULT",
    "INSERT INTO c (id) VALUES (7)",
    ("ALTER TABLE c ALTER COLUMN id DROP NOT NULL", "in a primary key"),
    ("ALTER TABLE c ALTER COLUMN d SET DEFAULT 'not a number'", "invalid"),
    # constraints added and dropped, checked against the rows there
    ("ALTER TABLE c ADD CONSTRAINT n_small CHECK (n < 50)", "check"),
    "ALTER TABLE c ADD CONSTRAINT n_small CHECK (n <= 60)",
    ("INSERT INTO c (id, n) VALUES (8, 70)", "n_small"),
    "ALTER TABLE c ADD CHECK (id > 0)",
    ("INSERT INTO c (id) VALUES (-1)", "c_id_check"),
    "ALTER TABLE c DROP CONSTRAINT n_small",
    ("ALTER TABLE c ADD UNIQUE (n)", "unique"),
    "UPDATE c SET n = id * 100 + n WHERE n IS NOT NULL",
    "ALTER TABLE c ADD UNIQUE (n)",
    ("INSERT INTO c (id, n) VALUES (9, 110)", "c_n_key"),
    ("ALTER TABLE c ADD CONSTRAINT c_n_key UNIQUE (s)", "already exists"),
    ("ALTER TABLE c ADD PRIMARY KEY (n)", "multiple primary keys"),
    "ALTER TABLE c DROP CONSTRAINT c_pkey",
    "INSERT INTO c (id, n) VALUES (1, NULL)",
    ("ALTER TABLE c ADD PRIMARY KEY (id)", "duplicate"),
    "DELETE FROM c WHERE id = 1 AND n IS NULL",
    "ALTER TABLE c ADD CONSTRAINT c_key PRIMARY KEY (id)",
    ("INSERT INTO c (id) VALUES (2)", "primary key"),
    ("ALTER TABLE c DROP CONSTRAINT nope", "does not exist"),
    "ALTER TABLE c DROP CONSTRAINT IF EXISTS nope",
    ("ALTER TABLE c ADD CONSTRAINT n_big CHECK (n > 0), DROP CONSTRAINT n_big", "does not exist"),
    "ALTER TABLE c ADD CONSTRAINT n_big CHECK (n > 0), DROP CONSTRAINT c_n_key",
    "ALTER TABLE c DROP CONSTRAINT n_big, ADD CONSTRAINT n_big CHECK (n > 100), ALTER n SET DEFAULT 101",
    ("INSERT INTO c (id, n) VALUES (11, 50)", "n_big"),
    "INSERT INTO c (id) VALUES (11)",
    "ALTER TABLE c DROP CONSTRAINT n_big",
    "INSERT INTO c (id, n) VALUES (10, 110)",
    "UPDATE c SET n = n + 1 WHERE n > 100",
    "DELETE FROM c WHERE id = 4",
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_alter_column_and_constraints_as_in_postgresql(pg, tmp_path, mode):
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(CHANGE_SCRIPT)
    table = both.db.catalog.tables["c"]
    assert table.primary_key_name == "c_key" and [k.name for k in table.checks] == ["c_id_check"]
    assert table.uniques == () and both.db.catalog.indexes["c_by_n"] == ("c", (1,))
    both.close()


RENAME_SCRIPT = [
    "CREATE TABLE r (a INTEGER PRIMARY KEY, b INTEGER)",
    "INSERT INTO r VALUES (1, 10), (2, 20), (3, 10), (4, NULL)",
    "CREATE INDEX r_b ON r (b)",
    "CREATE VIEW rv AS SELECT b, COUNT(*) AS n FROM r GROUP BY b",
    "CREATE VIEW rw AS SELECT r.a, rv.n FROM r JOIN rv ON r.b = rv.b",
    ("ivm", "CREATE INDEX rv_b ON rv (b)"),  # ivm alone: PostgreSQL indexes no view
    "CREATE VIEW rx AS SELECT * FROM rw WHERE n > 1",
    "ALTER INDEX r_b RENAME TO r_b2",
    ("ALTER INDEX r_b RENAME TO x", "does not exist"),
    ("ALTER INDEX r_b2 RENAME TO rw", "already exists"),
    "ALTER INDEX IF EXISTS nope RENAME TO z",
    ("ivm", "ALTER INDEX rv_b RENAME TO rv_b2"),  # the views reading it go on reading it
    "INSERT INTO r VALUES (8, 10)",
    "ALTER INDEX r_b2 RENAME TO r_b",
    "DROP INDEX r_b",
    ("DROP INDEX r_b", "does not exist"),
    "DROP INDEX IF EXISTS r_b",
    ("DROP INDEX r", "is not an index"),
    "INSERT INTO r VALUES (5, 20), (6, 30)",
    "ALTER VIEW rv RENAME TO rv2",
    ("SELECT * FROM rv", "does not exist"),
    "ALTER VIEW rw RENAME TO rw2",
    ("ALTER VIEW r RENAME TO r2", "is not a view"),
    ("ALTER VIEW rx RENAME TO r", "already exists"),
    "ALTER VIEW IF EXISTS nope RENAME TO z",
    "UPDATE r SET b = 30 WHERE a = 1",
    "CREATE VIEW ry AS SELECT rv2.b, rw2.a FROM rv2 JOIN rw2 ON rv2.n = rw2.n",
    ("ivm", "DROP INDEX rv_b2 CASCADE"),
    "DELETE FROM r WHERE a = 2",
    "ALTER VIEW rx RENAME TO rx2",
    "INSERT INTO r VALUES (7, 10)",
    ("DROP VIEW rv2", "depends on it"),
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_drop_index_and_rename_view_as_in_postgresql(pg, tmp_path, mode):
    both = Both(pg, mode, str(tmp_path / "db"))
    for step in RENAME_SCRIPT:
        if step[0] == "ivm":
            both.db.execute(step[1])
        else:
            both.script([step])
    db = both.db
    assert db.catalog.indexes == {} and not [d for d in db.engine.dataflows if d.name.startswith("index:")]
    assert '"rw2"' in db.views["rx2"].view.sql
    db.execute("ALTER MATERIALIZED VIEW rx2 RENAME TO rx3")  # PostgreSQL's views are not materialized
    assert same_rows(
        db.execute("SELECT * FROM rx3").fetchall(), both.pg.execute("SELECT * FROM rx2").fetchall()
    )
    both.close()


PASSES_SCRIPT = [
    "CREATE TABLE m (k INTEGER PRIMARY KEY, a INTEGER, b TEXT, c INTEGER)",
    "INSERT INTO m VALUES (1, 10, 'x', 5), (2, 20, NULL, 6)",
    "CREATE VIEW mv AS SELECT k, a FROM m",
    "ALTER TABLE m ADD COLUMN d INTEGER DEFAULT 7, ADD CONSTRAINT m_d UNIQUE (k, d)",
    "ALTER TABLE m DROP COLUMN c, ALTER COLUMN a SET NOT NULL",
    ("INSERT INTO m (k) VALUES (9)", "null"),
    # added with NULLs, then SET NOT NULL: refused, and nothing of the statement stays
    (
        "ALTER TABLE m ADD COLUMN e BIGINT, ALTER COLUMN b SET DEFAULT 'z', ALTER COLUMN e SET NOT NULL",
        "contains null values",
    ),
    "INSERT INTO m (k, a) VALUES (3, 30)",
    "ALTER TABLE m ADD COLUMN f INTEGER DEFAULT 0, ALTER COLUMN f SET NOT NULL",
    ("ALTER TABLE m DROP COLUMN d, ALTER COLUMN a TYPE BIGINT", "depends on column"),
    "ALTER TABLE m DROP COLUMN d, ALTER COLUMN b TYPE VARCHAR(5), ALTER COLUMN b DROP DEFAULT",
    "ALTER TABLE m ADD COLUMN g INTEGER, ADD CHECK (g > 0), ALTER COLUMN f DROP NOT NULL",
    "INSERT INTO m (k, a, g) VALUES (4, 40, 1)",
    ("ALTER TABLE m ADD COLUMN h INTEGER, ADD CONSTRAINT m_a CHECK (a < 25)", "check constraint"),
    ("INSERT INTO m (k, a, g) VALUES (5, 50, 0)", "violates"),
    "BEGIN",
    "ALTER TABLE m ADD COLUMN i TEXT DEFAULT 'i', ALTER COLUMN g SET DEFAULT 2",
    "INSERT INTO m (k, a) VALUES (6, 60)",
    "ROLLBACK",
    "INSERT INTO m (k, a) VALUES (7, 70)",
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_columns_added_and_dropped_with_other_alterations_as_in_postgresql(pg, tmp_path, mode):
    """ADD/DROP COLUMN in one ALTER TABLE with ALTER COLUMN and constraints, in PostgreSQL's passes (a
    constraint may read a column the statement adds), whole or not at all: after each statement every
    relation's columns and rows are PostgreSQL's."""
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(PASSES_SCRIPT)
    assert [c.name for c in both.db.catalog.tables["m"].columns] == ["k", "a", "b", "f", "g"]
    both.close()


COLUMN_NAMES_SCRIPT = [
    "CREATE TABLE c (a INTEGER PRIMARY KEY, b INTEGER, s TEXT)",
    "INSERT INTO c VALUES (1, 10, 'x'), (2, 20, NULL), (3, 10, 'z')",
    "CREATE VIEW cv (k, total) AS SELECT b, SUM(a) FROM c GROUP BY b",
    "CREATE VIEW cv1 (x) AS SELECT a, b, s FROM c WHERE b > 5",  # fewer names: the others keep theirs
    "CREATE VIEW cj (l, r) AS SELECT c1.a, c2.a FROM c c1 JOIN c c2 ON c1.b = c2.b",  # (named a twice)
    ("CREATE VIEW bad (x, y, z) AS SELECT a, b FROM c", "more column names than columns"),
    ("CREATE VIEW bad (x, x) AS SELECT a, b FROM c", "specified more than once"),
    "CREATE VIEW cr (n) AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 3) "
    "SELECT i FROM r",
    "CREATE VIEW cu (m) AS WITH q AS (SELECT a FROM c) SELECT a FROM q UNION SELECT b FROM c",
    "CREATE VIEW cw AS SELECT k, total FROM cv WHERE total > 1",
    "CREATE VIEW cstar AS SELECT * FROM cv",
    "INSERT INTO c VALUES (4, 20, 'w')",
    "ALTER VIEW cv RENAME COLUMN total TO sum_a",
    "ALTER VIEW cv RENAME k TO key_b",
    ("ALTER VIEW cv RENAME COLUMN nope TO z", "does not exist"),
    ("ALTER VIEW cv RENAME COLUMN sum_a TO key_b", "already exists"),
    "UPDATE c SET b = 30 WHERE a = 1",
    "ALTER VIEW cv1 RENAME COLUMN x TO y",
    "ALTER VIEW cr RENAME COLUMN n TO i",
    ("CREATE OR REPLACE VIEW cv1 (y, b2) AS SELECT a, b, s FROM c WHERE b > 5", "cannot change name"),
    "CREATE OR REPLACE VIEW cv1 (y, b) AS SELECT a, b, s, a * 2 AS d FROM c WHERE b > 5",
    "DELETE FROM c WHERE a = 3",
    ("SELECT * FROM (SELECT a, b FROM c) AS s(x, y, z)", "has 2 columns available but 3 columns specified"),
    ("WITH w(x, y, z) AS (SELECT a, b FROM c) SELECT * FROM w", "has 2 columns available"),
    "INSERT INTO c VALUES (5, 10, 'v')",
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_view_column_names_and_their_renaming_as_in_postgresql(pg, tmp_path, mode):
    """CREATE VIEW v (names) AS ... and ALTER VIEW v RENAME [COLUMN] a TO b: each view's column names and rows
    as PostgreSQL's after every statement (views reading the renamed column keep their own names)."""
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(COLUMN_NAMES_SCRIPT)
    text = both.db.views["cv"].view.sql  # renamed twice, named once
    assert text == 'SELECT * FROM (SELECT b, SUM(a) FROM c GROUP BY b) AS "cv"("key_b", "sum_a")', text
    both.close()


TRANSACTION_SCRIPT = [
    "CREATE TABLE a (k INTEGER PRIMARY KEY, v INTEGER, s TEXT)",
    "CREATE TABLE b (k INTEGER, w INTEGER)",
    "INSERT INTO a VALUES (1, 10, 'x'), (2, 20, NULL), (3, NULL, 'z')",
    "INSERT INTO b VALUES (1, 5), (3, 7), (3, 8)",
    "CREATE VIEW av AS SELECT v, COUNT(*) AS n FROM a GROUP BY v",
    "CREATE VIEW abv AS SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "CREATE INDEX a_v ON a (v)",
    # DDL in a block that rolls back leaves everything as before it
    "BEGIN",
    "ALTER TABLE a ADD COLUMN t INTEGER DEFAULT 1",
    "ALTER TABLE a RENAME COLUMN s TO s2",
    "INSERT INTO a VALUES (4, 40, 'w', 2)",
    "CREATE VIEW at AS SELECT t, COUNT(*) AS n FROM a GROUP BY t",
    "ALTER VIEW av RENAME TO av2",
    "DROP INDEX a_v",
    "CREATE INDEX b_k ON b (k)",
    "DROP TABLE b CASCADE",
    "CREATE OR REPLACE VIEW at AS SELECT t, COUNT(*) AS n, MAX(k) AS m FROM a GROUP BY t",
    "ROLLBACK",
    "INSERT INTO b VALUES (2, 9)",
    # and one that commits keeps it all, with writes before and after each statement
    "BEGIN",
    "INSERT INTO b VALUES (1, 6)",
    "ALTER TABLE a ADD COLUMN t INTEGER DEFAULT 1",
    "UPDATE a SET t = k * 10 WHERE k > 1",
    "ROLLBACK",
    "BEGIN",
    "ALTER TABLE a ADD COLUMN t INTEGER DEFAULT 1, ADD COLUMN u TEXT",
    "CREATE VIEW at AS SELECT t, COUNT(*) AS n FROM a GROUP BY t",
    "ALTER VIEW av RENAME TO av2",
    "DROP VIEW abv",
    "INSERT INTO a VALUES (4, 40, 'w', 2, 'u')",
    "UPDATE b SET w = w + 1",
    "COMMIT",
    # a string of statements is one transaction: a failure takes its DDL back too
    "ALTER TABLE a DROP COLUMN u; INSERT INTO a (k, v) VALUES (5, 50); CREATE INDEX a_t ON a (t)",
    ("ALTER TABLE b ADD COLUMN x INTEGER; ALTER TABLE a ALTER COLUMN t TYPE BIGINT", "depends on column"),
    ("ALTER TABLE b ADD COLUMN x INTEGER; DROP VIEW at; INSERT INTO a (k) VALUES (1)", "primary key"),
    "INSERT INTO b VALUES (5, 1)",
    # a block that fails part-way is aborted, its DDL taken back at once
    "BEGIN",
    "ALTER TABLE b RENAME TO bb",
    ("INSERT INTO a (k) VALUES (1)", "primary key"),
    ("SELECT * FROM bb", "aborted"),
    "ROLLBACK",
    "INSERT INTO b VALUES (6, 1)",
]  # fmt: skip


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_ddl_inside_transactions_commits_and_rolls_back_as_in_postgresql(pg, tmp_path, mode):
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(TRANSACTION_SCRIPT)
    assert both.db.catalog.indexes == {"a_v": ("a", (1,)), "a_t": ("a", (3,))}
    both.close()


IDENTITY_SCRIPT = [
    "CREATE TABLE s (id SERIAL PRIMARY KEY, v TEXT)",
    "CREATE TABLE g (id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5), "
    "k SMALLINT GENERATED BY DEFAULT AS IDENTITY (MAXVALUE 3), v TEXT)",
    "CREATE TABLE n (a SMALLSERIAL, b BIGSERIAL, c INTEGER GENERATED BY DEFAULT AS IDENTITY "
    "(START WITH -1 INCREMENT BY -2))",
    "CREATE VIEW sv AS SELECT COUNT(*) AS n, MAX(id) AS m, MIN(v) AS v FROM s",
    "CREATE VIEW gv AS SELECT k, COUNT(*) AS n, SUM(id) AS s FROM g GROUP BY k",
    "INSERT INTO s (v) VALUES ('a'), ('b')",
    "INSERT INTO s VALUES (DEFAULT, 'c')",
    "INSERT INTO s VALUES (10, 'explicit')",
    "INSERT INTO s (v) SELECT 'selected'",
    "INSERT INTO s DEFAULT VALUES",
    ("INSERT INTO s VALUES (10, 'again')", "primary key"),
    ("INSERT INTO s (id, v) VALUES (NULL, 'null')", "not-null"),
    "INSERT INTO g (v) VALUES ('x'), ('y')",
    ("INSERT INTO g (id, v) VALUES (1, 'z')", "GENERATED ALWAYS"),
    ("INSERT INTO g (id, v) SELECT 1, 'z'", "GENERATED ALWAYS"),
    "INSERT INTO g VALUES (DEFAULT, 7, 'w')",
    "INSERT INTO g (v) VALUES ('x2')",
    ("INSERT INTO g (v) VALUES ('x3')", "reached maximum value"),
    ("UPDATE g SET id = 3", "can only be updated to DEFAULT"),
    "UPDATE g SET id = DEFAULT WHERE v = 'x'",
    "UPDATE s SET id = DEFAULT WHERE v = 'explicit'",
    "INSERT INTO n DEFAULT VALUES",
    "INSERT INTO n (b) VALUES (100)",
    "INSERT INTO n VALUES (DEFAULT, DEFAULT, DEFAULT)",
    "DELETE FROM s WHERE id = 1",
    "TRUNCATE s, g RESTART IDENTITY",
    "INSERT INTO s (v) VALUES ('after')",
    "INSERT INTO g (v) VALUES ('after')",
    "BEGIN",
    "INSERT INTO s (v) VALUES ('before')",
    "TRUNCATE s RESTART IDENTITY",
    "INSERT INTO s (v) VALUES ('rolled back')",
    "ROLLBACK",
    "INSERT INTO s (v) VALUES ('next')",  # the sequence as before the TRUNCATE, less what it handed out
    "TRUNCATE TABLE n CONTINUE IDENTITY CASCADE",
    "INSERT INTO n DEFAULT VALUES",
    "BEGIN",
    "TRUNCATE g",
    "INSERT INTO g (v) VALUES ('in a transaction')",
    "COMMIT",
    "ALTER TABLE s ADD COLUMN w INTEGER GENERATED ALWAYS AS IDENTITY (START WITH 7 INCREMENT BY -3)",
    "INSERT INTO s (v) VALUES ('w')",
    "ALTER TABLE s ADD COLUMN ser BIGSERIAL",
    "ALTER TABLE s RENAME COLUMN w TO ww",
    "INSERT INTO s (v) VALUES ('ww')",
    "ALTER TABLE s DROP COLUMN ser",
    "ALTER TABLE s RENAME TO s2",
    "INSERT INTO s2 (v) VALUES ('renamed')",
    ("TRUNCATE sv", "is not a table"),
    ("TRUNCATE nope", "does not exist"),
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_identity_and_serial_columns_hand_out_what_postgresql_does(pg, tmp_path, mode):
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(IDENTITY_SCRIPT)
    both.close()


CREATE_DROP_SCRIPT = [
    "CREATE TABLE a (x INTEGER, y TEXT, z NUMERIC(6,2))",
    "INSERT INTO a VALUES (1, 'p', 1.25), (2, NULL, NULL), (3, 'q', -3.50), (3, 'q', -3.50)",
    "CREATE TABLE b AS SELECT x, y, z * 2 AS z2, x + 1 AS x1, y || '!' AS yy FROM a WHERE x > 1",
    "CREATE TABLE IF NOT EXISTS b AS SELECT 1 AS one",
    ("CREATE TABLE b AS SELECT 1 AS one", "already exists"),
    "CREATE TABLE c AS SELECT * FROM a WITH NO DATA",
    "CREATE TABLE d (k, label) AS SELECT x, y FROM a WITH DATA",
    "CREATE TABLE IF NOT EXISTS c (q INTEGER)",
    "INSERT INTO c SELECT * FROM a WHERE y IS NOT NULL",
    "CREATE VIEW va AS SELECT x, COUNT(*) AS n FROM a GROUP BY x",
    "CREATE VIEW vb AS SELECT b.x, b.z2, va.n FROM b JOIN va ON va.x = b.x",
    "CREATE VIEW vvb AS SELECT * FROM vb WHERE n > 1",
    "CREATE VIEW vc AS SELECT COUNT(*) AS n FROM c",
    "INSERT INTO a VALUES (4, 'r', 0.00)",
    "INSERT INTO b VALUES (4, 'r', 1.00, 5, NULL)",
    "UPDATE a SET x = 2 WHERE y = 'r'",
    ("DROP TABLE a", "depends on it"),
    ("DROP TABLE a, b", "depends on it"),
    ("DROP VIEW va RESTRICT", "view 'vb' depends on it"),
    ("DROP TABLE va", "is not a table"),
    ("DROP VIEW a", "is not a view"),
    ("DROP TABLE IF EXISTS vc", "is not a table"),
    ("DROP TABLE nope", "does not exist"),
    "DROP TABLE IF EXISTS nope, d",
    ("DROP VIEW vb, va", "view 'vvb' depends on it"),
    "DROP VIEW vvb, vb",
    "CREATE VIEW vb AS SELECT x, SUM(z2) AS s FROM b GROUP BY x",
    "DROP MATERIALIZED VIEW IF EXISTS nope",
    "DROP TABLE a, b CASCADE",
    ("DROP TABLE a", "does not exist"),
    "DROP TABLE IF EXISTS a",
    "DROP VIEW IF EXISTS va, vb",
    "DROP TABLE c CASCADE",
]


@pytest.mark.parametrize("mode", ["memory", "reopen"])
def test_create_table_as_and_drop_cascade_as_in_postgresql(pg, tmp_path, mode):
    both = Both(pg, mode, str(tmp_path / "db"))
    both.script(CREATE_DROP_SCRIPT[:5])
    types = {c.name: str(c.type) for c in both.db.catalog.tables["b"].columns}
    assert types == {"x": "INTEGER", "y": "TEXT", "z2": "DECIMAL(18,2)", "x1": "INTEGER", "yy": "TEXT"}
    both.script(CREATE_DROP_SCRIPT[5:])
    assert not both.db.tables and not both.db.views and not both.db.retained
    assert [df.name for df in both.db.engine.dataflows] == ["tables"]
    both.close()


def test_ddl_of_a_transaction_reaches_the_directory_only_when_it_commits(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER); INSERT INTO t VALUES (1, 2)")
    db.execute("CREATE VIEW v AS SELECT b, COUNT(*) AS n FROM t GROUP BY b")
    db.execute("BEGIN")
    db.execute("ALTER TABLE t ADD COLUMN c INTEGER DEFAULT 3")
    db.execute("INSERT INTO t VALUES (2, 2, 4)")
    db.execute("ALTER VIEW v RENAME TO w")
    abandon(db)  # a crash before COMMIT
    db = ivm.connect(path)
    assert [c.name for c in db.catalog.tables["t"].columns] == ["a", "b"] and set(db.views) == {"v"}
    assert db.execute("SELECT * FROM t").fetchall() == [(1, 2)]
    db.execute("BEGIN; ALTER TABLE t ADD COLUMN c INTEGER DEFAULT 3; INSERT INTO t VALUES (2, 2, 4); COMMIT")
    abandon(db)  # a crash after it
    db = ivm.connect(path)
    assert sorted(db.execute("SELECT * FROM t").fetchall()) == [(1, 2, 3), (2, 2, 4)]
    assert db.execute("SELECT * FROM v").fetchall() == [(2, 2)]
    db.close()


def test_a_failed_statement_leaves_everything_as_it_was(tmp_path, monkeypatch):
    """Should building a view again fail half-way through an ALTER TABLE, the table, its rows, its views (and
    those sharing their arrangements), its indexes and its subscriptions are put back; so after a reopen."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, a TEXT, n INTEGER)")
    db.execute("CREATE TABLE u (k INTEGER, m INTEGER)")
    db.execute("INSERT INTO t VALUES (1, 'x', 1), (2, 'y', NULL), (3, 'x', 3)")
    db.execute("INSERT INTO u VALUES (1, 10), (3, 30), (3, 31)")
    db.execute("CREATE INDEX t_a ON t (a)")
    db.execute("CREATE VIEW j AS SELECT t.a, SUM(u.m) AS s FROM t JOIN u ON u.k = t.k GROUP BY t.a")
    db.execute("CREATE VIEW ta AS SELECT a, COUNT(*) AS n, SUM(n) AS s FROM t GROUP BY a")
    db.execute("CREATE VIEW j2 AS SELECT a, s FROM j WHERE s > 10")
    db.execute("CREATE VIEW uu AS SELECT u.k, COUNT(*) AS c FROM u JOIN u AS w ON u.m = w.m GROUP BY u.k")
    db.execute("DROP VIEW j2")
    sub = db.subscribe("j")
    list(sub)
    before = {
        r: sorted(db.execute(f"SELECT * FROM {r}").fetchall(), key=repr) for r in ("t", "u", "j", "ta", "uu")
    }
    made = alter._view
    calls = []

    def failing(db, name, sql):
        calls.append(name)
        if len(calls) == 2:
            raise MemoryError("no room")
        return made(db, name, sql)

    monkeypatch.setattr(alter, "_view", failing)
    with pytest.raises(MemoryError):
        db.execute("ALTER TABLE t ADD COLUMN z INTEGER DEFAULT 1")
    monkeypatch.setattr(alter, "_view", made)
    assert [c.name for c in db.catalog.tables["t"].columns] == ["k", "a", "n"]
    assert {r: sorted(db.execute(f"SELECT * FROM {r}").fetchall(), key=repr) for r in before} == before
    assert db.catalog.indexes["t_a"] == ("t", (1,))
    with pytest.raises(IntegrityError, match="t_z_key|unique"):
        db.execute("ALTER TABLE t ADD COLUMN z INTEGER UNIQUE DEFAULT 1")
    db.execute("INSERT INTO t VALUES (4, 'x', 4); INSERT INTO u VALUES (4, 1)")
    rows = [r for b in sub for r in b.to_pylist()]  # the view put back goes on where it was
    assert sorted((r["a"], r["s"], r["diff"]) for r in rows) == [("x", 71, -1), ("x", 72, 1)]
    want = sorted(db.execute("SELECT * FROM j").fetchall())
    assert want == [("x", 72)]
    db.close()
    db = ivm.connect(path)
    assert [c.name for c in db.catalog.tables["t"].columns] == ["k", "a", "n"]
    assert sorted(db.execute("SELECT * FROM j").fetchall()) == want
    db.close()


def test_subscriptions_go_on_across_alter_table_and_end_saying_why(tmp_path):
    db = ivm.connect()
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, g INTEGER)")
    db.execute("INSERT INTO t VALUES (1, 1), (2, 1)")
    db.execute("CREATE VIEW v AS SELECT g, COUNT(*) AS n FROM t GROUP BY g")
    view, table = db.subscribe("v"), db.subscribe("t")
    assert [b.to_pylist() for b in view] == [[{"g": 1, "n": 2, "time": 1, "diff": 1}]]
    db.execute("ALTER TABLE t RENAME COLUMN g TO grp")
    db.execute("INSERT INTO t VALUES (3, 1)")
    rows = [r for b in view for r in b.to_pylist()]
    assert sorted((r["n"], r["diff"]) for r in rows) == [(2, -1), (3, 1)]  # no second snapshot
    assert [r for b in table._batches() for r in b.to_pylist()]  # its snapshot, then the end
    with pytest.raises(OperationalError, match="relation 't' was dropped or altered"):
        list(table)
    db.execute("DROP TABLE t CASCADE")
    with pytest.raises(OperationalError, match="relation 'v' was dropped or altered"):
        list(view)


REFUSED = [  # (statement, words of the message, the text the error points into)
    ('ALTER TABLE t ALTER COLUMN a TYPE TEXT COLLATE "C"', "COLLATE", None),
    ("ALTER TABLE t ADD FOREIGN KEY (a) REFERENCES u (k) NOT VALID", "NOT VALID", None),
    (
        "ALTER TABLE t ADD FOREIGN KEY (a) REFERENCES u (k) ON DELETE CASCADE DEFERRABLE",
        "DEFERRABLE (of a foreign key)",
        "FOREIGN KEY (a) REFERENCES u (k) ON DELETE CASCADE DEFERRABLE",
    ),
    ("ALTER TABLE t ALTER COLUMN a SET STATISTICS 100", "ALTER COLUMN a SET STATISTICS 100", None),
    ("ALTER TABLE t SET UNLOGGED", "ALTER TABLE ... SET", "t"),
    ("ALTER TABLE t RENAME CONSTRAINT a TO b", "ALTER TABLE t RENAME CONSTRAINT a TO b", "ALTER"),
    ("ALTER TABLE t OWNER TO someone", "ALTER TABLE t OWNER TO someone", "ALTER"),
    ("ALTER VIEW v ALTER COLUMN a SET DEFAULT 1", "ALTER VIEW ... ALTER COLUMN a SET DEFAULT 1", "a"),
    ("CREATE INDEX ti ON t (b); ALTER INDEX ti ALTER COLUMN 1 SET STATISTICS 10", "ALTER INDEX ti ALTER", None),
    (
        "ALTER TABLE t ADD COLUMN r INTEGER REFERENCES u (k) MATCH PARTIAL",
        "MATCH PARTIAL not yet implemented",
        "REFERENCES u (k) MATCH PARTIAL",
    ),
    (
        "ALTER TABLE t ADD COLUMN r INTEGER REFERENCES u INITIALLY DEFERRED",
        "INITIALLY DEFERRED",
        "REFERENCES u",
    ),
    ("ALTER TABLE t DROP COLUMN a, DROP COLUMN b", "dropping every column", "t"),
    ("ALTER TABLE t RENAME TO public.w", "schema-qualified", "public.w"),
    ("BEGIN; INSERT INTO t VALUES (5, 6); ALTER TABLE t ADD COLUMN q INTEGER", "COMMIT them first", "t ADD"),
    ("INSERT INTO t OVERRIDING SYSTEM VALUE VALUES (1, 2)", "OVERRIDING SYSTEM VALUE", "OVERRIDING"),
    ("INSERT INTO t OVERRIDING USER VALUE VALUES (1, 2)", "OVERRIDING USER VALUE", "OVERRIDING"),
    ("CREATE TABLE q (a INTEGER GENERATED ALWAYS AS IDENTITY (MINVALUE 1 CYCLE))", "CYCLE", None),
    (
        "CREATE TABLE q (a INTEGER, b INTEGER GENERATED ALWAYS AS (a + 1) STORED)",
        "a generated column",
        "(a + 1)",
    ),
    ("CREATE TABLE q (a TEXT GENERATED ALWAYS AS IDENTITY)", "identity column type must be", None),
    ("CREATE TABLE q (a SERIAL DEFAULT 3)", "multiple default values", "DEFAULT 3"),
    ("CREATE TABLE q (a INTEGER DEFAULT 3 GENERATED ALWAYS AS IDENTITY)", "both default and identity", None),
    (
        "CREATE TABLE q (a INTEGER GENERATED ALWAYS AS IDENTITY (INCREMENT BY 0))",
        "INCREMENT must not be zero",
        None,
    ),
    ("BEGIN; INSERT INTO u VALUES (5); DROP TABLE u", "COMMIT them first", "u"),
]


@pytest.mark.parametrize(("sql", "words", "construct"), REFUSED, ids=[r[0][:50] for r in REFUSED])
def test_what_is_not_implemented_is_refused_by_name_and_position(sql, words, construct):
    db = ivm.connect()
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER)")
    db.execute("CREATE TABLE u (k INTEGER PRIMARY KEY)")
    db.execute("CREATE VIEW v AS SELECT a FROM t")
    db.execute("INSERT INTO t VALUES (1, 2)")
    with pytest.raises((NotSupportedError, ProgrammingError)) as err:
        db.execute(sql)
    assert words in err.value.message, err.value.message
    if construct is not None:
        last = sql.split("; ")[-1]
        start = sql.index(last) + last.index(construct) + 1
        assert err.value.line == 1 and start <= err.value.col < start + len(construct), (err.value.col, start)
    db.rollback()
    assert db.execute("SELECT * FROM t").fetchall() == [(1, 2)]
    assert [c.name for c in db.catalog.tables["t"].columns] == ["a", "b"]


# -- SIGKILL in the middle of DDL ---------------------------------------------------------------------------


def _state(db) -> dict:
    out = {}
    for name in sorted(db.tables):
        out[name] = (
            sorted(db.execute(f"SELECT * FROM {_q(name)}").fetchall(), key=repr),
            dict(db.tables[name].sequences),
        )
    for name in sorted(db.views):
        out[name] = sorted(db.execute(f"SELECT * FROM {_q(name)}").fetchall(), key=repr)
    return out


def _expected() -> list[dict]:
    """The state after each number of steps, run in memory."""
    db = ivm.connect()
    out = [_state(db)]
    for sql in STEPS:
        db.execute(sql)
        out.append(_state(db))
    return out


# (moment, its occurrence, the steps that returned before it): in the checkpoints of ALTER TABLE ADD COLUMN,
# RENAME TO and ADD COLUMN of an identity column; a checkpoint's data file; the log append of TRUNCATE ...
# RESTART IDENTITY; after the ADD COLUMN of an identity column returned
KILLS = [
    ("manifest", 5, 4),
    ("manifest", 8, 10),
    ("manifest", 10, 18),
    ("file", 7, None),
    ("log", 6, 12),
    ("step", 19, 19),
]


def test_killed_in_the_middle_of_ddl_the_database_reopens_whole(tmp_path):
    """Each run starts a child on a new directory and SIGKILLs it at one moment (half-way through a
    checkpoint's manifest or data file, a log append, or right after a statement returned): the directory
    opens as of every statement that returned, and perhaps the one under way, never part of one; a sequence
    never goes back to a value a statement that returned handed out; and the rest of the steps run on."""
    expected = _expected()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for run, (kind, n, returned) in enumerate(KILLS):
        path, journal = tmp_path / f"db{run}", tmp_path / f"journal{run}"
        journal.touch()
        child = subprocess.run(
            [sys.executable, "-m", "tests.db.ddl_crash_child", str(path), str(journal), kind, str(n)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
        done = [json.loads(line)["done"] for line in journal.read_text().splitlines()]
        k = len(done)
        assert returned is None or k == returned, f"{kind} {n}: killed after {k} steps"
        db = ivm.connect(str(path))
        state = _state(db)
        assert state in (expected[k], expected[min(k + 1, len(STEPS))]), f"{kind} {n}: after {k} steps"
        k = expected.index(state)
        for sql in STEPS[k:]:
            db.execute(sql)
        assert _state(db) == expected[-1]
        db.close()


def test_after_ddl_a_reopened_database_loads_its_state_and_indexes_follow_their_relations(tmp_path, caplog):
    """The catalog a restructuring leaves replays to the same dataflows (so opening loads every view's state
    rather than computing it again); indexes follow a renamed table and its renamed columns, go with a dropped
    column or relation, and an index naming a shared arrangement is made again with the views."""
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, a INTEGER, b TEXT)")
    db.execute("CREATE TABLE u (k INTEGER, m INTEGER)")
    db.execute("INSERT INTO t VALUES (1, 2, 'x'), (2, 2, NULL); INSERT INTO u VALUES (1, 3), (1, 4), (2, 5)")
    db.execute("CREATE VIEW v AS SELECT t.a, SUM(u.m) AS s FROM t JOIN u ON u.k = t.k GROUP BY t.a")
    db.execute("CREATE INDEX on_u ON u (k)")  # names v's arrangement of u
    db.execute("CREATE INDEX on_a ON t (a)")
    db.execute("CREATE INDEX on_b ON t (b)")
    db.execute("CREATE VIEW w AS SELECT b, COUNT(*) AS n FROM t GROUP BY b")
    db.execute("CREATE INDEX on_w ON w (n)")
    db.execute("ALTER TABLE t RENAME COLUMN a TO aa")
    db.execute("ALTER TABLE t DROP COLUMN b CASCADE")  # w reads b: it goes, and on_w with it; on_b too
    db.execute("ALTER TABLE t RENAME TO tt")
    assert set(db.catalog.indexes) == {"on_u", "on_a"} and db.catalog.indexes["on_a"] == ("tt", (1,))
    assert db.index_sql["on_a"][1] == 'CREATE INDEX "on_a" ON "tt"("aa")'
    shapes = sorted(df.name for df in db.engine.dataflows)
    db.execute("INSERT INTO u VALUES (2, 1)")
    db.close()
    with caplog.at_level("WARNING", logger="ivm.storage"):
        db = ivm.connect(path)
    assert not caplog.text  # every dataflow took its saved state
    assert sorted(df.name for df in db.engine.dataflows) == shapes
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [(2, 13)]
    db.execute("DROP TABLE tt CASCADE")
    assert set(db.catalog.indexes) == {"on_u"} and set(db.views) == set()
    db.close()


def test_a_renamed_index_keeps_its_arrangement_and_its_readers():
    db = ivm.connect()
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, g INTEGER)")
    db.execute("INSERT INTO t VALUES (1, 1), (2, 1), (3, 2)")
    db.execute("CREATE INDEX t_g ON t (g)")
    df = next(d for d in db.engine.dataflows if d.name == "index:t_g")
    db.execute("CREATE VIEW v AS SELECT t.k, u.k AS j FROM t JOIN t AS u ON t.g = u.g")
    db.execute("ALTER INDEX t_g RENAME TO by_g")
    assert next(d for d in db.engine.dataflows if d.name == "index:by_g") is df
    assert db.index_sql["by_g"][1] == 'CREATE INDEX "by_g" ON "t" ("g")' and "t_g" not in db.catalog.indexes
    db.execute("BEGIN")
    db.execute("ALTER INDEX by_g RENAME TO g_index")
    db.execute("ROLLBACK")
    assert set(db.catalog.indexes) == {"by_g"} and df.name == "index:by_g"
    db.execute("INSERT INTO t VALUES (4, 2)")
    assert sorted(db.execute("SELECT * FROM v").fetchall()) == [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
        (3, 3),
        (3, 4),
        (4, 3),
        (4, 4),
    ]
