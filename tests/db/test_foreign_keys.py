"""FOREIGN KEY constraints against PostgreSQL: every statement runs on ivm and on a throwaway PostgreSQL; both
fail (a violation naming the same constraint) or both succeed, and after every statement the tables are equal,
and so is each view over them, maintained by ivm from the changes cascades make, to PostgreSQL's recompute.
"""

from __future__ import annotations

import os
import random
import tempfile

import psycopg
import pytest

import ivm
from ivm.errors import Error, IntegrityError, NotSupportedError, ProgrammingError
from tests.oracle import same_rows
from tests.pg import error_at, load_both, postgres

SCHEMA = [
    "CREATE TABLE p (id INTEGER PRIMARY KEY, code TEXT UNIQUE, a INTEGER, b INTEGER, UNIQUE (a, b))",
    # a column REFERENCES the primary key; a named table constraint a UNIQUE one
    "CREATE TABLE c (id INTEGER PRIMARY KEY, pid INTEGER REFERENCES p ON DELETE CASCADE ON UPDATE CASCADE, "
    "pcode TEXT, note TEXT, CONSTRAINT c_code FOREIGN KEY (pcode) REFERENCES p (code) ON DELETE SET NULL "
    "ON UPDATE CASCADE)",
    # a chain: deleting p cascades to c, which g restricts
    "CREATE TABLE g (id INTEGER PRIMARY KEY, cid INTEGER REFERENCES c (id) ON DELETE RESTRICT "
    "ON UPDATE RESTRICT)",
    # two columns in the other order than the key's, MATCH FULL, SET DEFAULT and SET NULL
    "CREATE TABLE m (k INTEGER PRIMARY KEY, y INTEGER DEFAULT 2, x INTEGER DEFAULT 1, "
    "FOREIGN KEY (y, x) REFERENCES p (b, a) MATCH FULL ON DELETE SET DEFAULT ON UPDATE SET NULL)",
    # a table referencing itself, and a table without a key with duplicate rows
    "CREATE TABLE tree (id INTEGER PRIMARY KEY, up INTEGER REFERENCES tree ON DELETE CASCADE "
    "ON UPDATE CASCADE, label TEXT)",
    "CREATE TABLE d (pid INTEGER REFERENCES p (id), w TEXT)",
]
TABLES = ["p", "c", "g", "m", "tree", "d"]
ROWS = [
    "INSERT INTO p VALUES (1, 'one', 1, 2), (2, 'two', 2, 2), (3, 'three', 1, 3), (4, NULL, NULL, 4)",
    "INSERT INTO c VALUES (10, 1, 'one', 'x'), (11, 1, 'two', 'y'), (12, 2, NULL, NULL), "
    "(13, NULL, 'three', 'z')",
    "INSERT INTO g VALUES (100, 12), (101, NULL)",
    "INSERT INTO m VALUES (1, 2, 1), (2, 3, 1), (3, NULL, NULL)",
    "INSERT INTO tree VALUES (1, NULL, 'root'), (2, 1, 'a'), (3, 2, 'b'), (4, 3, 'c'), (5, 1, 'd'), "
    "(6, 5, 'e')",
    "INSERT INTO d VALUES (1, 'u'), (1, 'u'), (3, 'v'), (NULL, 'w')",
]
VIEWS = {
    "vc": "SELECT p.id, p.code, COUNT(c.id) AS n FROM p LEFT JOIN c ON c.pid = p.id GROUP BY p.id, p.code",
    "vt": "SELECT t.label, u.label AS parent FROM tree t LEFT JOIN tree u ON u.id = t.up",
    "vm": "SELECT x, y, COUNT(*) AS n FROM m GROUP BY x, y",
}

# a statement, or (statement, the constraint both must name, or words ivm's error must hold)
SCRIPT = [
    "CREATE TABLE nn (pid INTEGER NOT NULL REFERENCES p (id) ON DELETE SET NULL)",
    "INSERT INTO nn VALUES (4)",
    ("DELETE FROM p WHERE id = 4", "null value in column 'pid' of table 'nn' violates the not-null constraint"),
    "DELETE FROM nn",
    ("INSERT INTO c VALUES (20, 9, NULL, NULL)", "c_pid_fkey"),
    ("INSERT INTO c VALUES (20, NULL, 'nine', NULL)", "c_code"),
    "INSERT INTO c VALUES (20, NULL, NULL, NULL), (21, 3, 'three', 'q')",
    ("UPDATE c SET pid = 7 WHERE id = 21", "c_pid_fkey"),
    "UPDATE c SET note = 'kept' WHERE pid = 1",
    ("INSERT INTO m VALUES (4, 2, NULL)", "m_y_x_fkey"),  # MATCH FULL: NULL in part
    ("INSERT INTO m VALUES (4, 9, 9)", "m_y_x_fkey"),
    "INSERT INTO m VALUES (4, 3, 1)",
    ("INSERT INTO d VALUES (5, 'no')", "d_pid_fkey"),
    ("DELETE FROM p WHERE id = 2", "g_cid_fkey"),  # cascades to c 12, which g 100 restricts
    "DELETE FROM g WHERE id = 100",
    "DELETE FROM p WHERE id = 2",  # c 12 goes; c 11 (code 'two') keeps its row with NULL
    ("UPDATE p SET id = 30 WHERE id = 1", "d_pid_fkey"),  # c follows (CASCADE), d refuses (NO ACTION)
    "UPDATE p SET code = 'uno' WHERE id = 1",  # c follows
    "UPDATE p SET a = 7 WHERE id = 3",  # m (3, 1) loses its reference: SET NULL
    "UPDATE c SET id = 99 WHERE id = 99",
    "INSERT INTO g VALUES (102, 10)",
    ("UPDATE c SET id = 98 WHERE id = 10", "g_cid_fkey"),  # RESTRICT
    ("UPDATE c SET id = 30 - id WHERE id IN (10, 20)", "g_cid_fkey"),  # RESTRICT, though 10 stays
    "DELETE FROM g WHERE id = 102",
    "UPDATE tree SET id = 50 WHERE id = 5",  # 6 follows
    "UPDATE p SET a = 5 WHERE id = 4",
    "UPDATE p SET code = 'THREE' WHERE id = 4",
    ("DELETE FROM p WHERE id = 3", "d_pid_fkey"),  # d without a key, NO ACTION
    "DELETE FROM d WHERE pid = 3",
    "DELETE FROM p WHERE id = 3",  # m (3, 1) set to its default (2, 1); c 13 and 21 lose their code
    ("DELETE FROM p WHERE id = 1", "m_y_x_fkey"),  # m's default (2, 1) is p 1's key: SET DEFAULT fails
    "BEGIN",
    "DELETE FROM d WHERE pid = 1",
    ("DELETE FROM p WHERE id = 1", "m_y_x_fkey"),
    "ROLLBACK",
    "BEGIN",
    "INSERT INTO p VALUES (7, 'seven', 7, 7)",
    "INSERT INTO c VALUES (70, 7, 'seven', NULL)",
    "DELETE FROM c WHERE id = 70",
    "DELETE FROM p WHERE id = 7",
    "INSERT INTO tree VALUES (7, 8, 'f'), (8, 6, 'g')",  # checked at the statement's end
    "COMMIT",
    "DELETE FROM tree WHERE id = 2",  # 3 and 4 go with it
    ("UPDATE tree SET up = 3 WHERE id = 50", "tree_up_fkey"),
    "DELETE FROM tree WHERE id IN (50, 6, 7, 8)",
    ("TRUNCATE p", "cannot truncate a table referenced in a foreign key constraint"),
    ("TRUNCATE c", "cannot truncate a table referenced in a foreign key constraint"),
    "TRUNCATE g",
    ("DROP TABLE c", "cannot drop table"),
    "TRUNCATE c, g",
    "INSERT INTO c VALUES (40, 1, 'one', NULL)",
    "TRUNCATE p CASCADE",
    "INSERT INTO p VALUES (1, 'one', 1, 1)",
    ("INSERT INTO g VALUES (1, 40)", "g_cid_fkey"),
    "INSERT INTO c VALUES (40, 1, 'one', NULL)",
    "INSERT INTO g VALUES (1, 40)",
    "ALTER TABLE p RENAME TO parent",
    "ALTER TABLE parent RENAME COLUMN id TO pk",
    ("INSERT INTO c VALUES (41, 2, NULL, NULL)", "c_pid_fkey"),
    "INSERT INTO parent VALUES (2, 'two', 2, 2)",
    "INSERT INTO c VALUES (41, 2, NULL, NULL)",
    ("ALTER TABLE tree ADD CONSTRAINT tree_label FOREIGN KEY (label) REFERENCES parent (code)", "tree_label"),
    "UPDATE tree SET label = 'one'",
    "ALTER TABLE tree ADD CONSTRAINT tree_label FOREIGN KEY (label) REFERENCES parent (code)",
    ("DELETE FROM parent WHERE pk = 1", "tree_label"),
    "ALTER TABLE tree DROP CONSTRAINT tree_label",
    "ALTER TABLE c DROP COLUMN pid CASCADE",  # its foreign key goes with it (and the view reading it)
    "DELETE FROM parent WHERE pk = 1",
    "DROP TABLE g",
    "DROP TABLE parent CASCADE",
    "INSERT INTO c VALUES (50, 'anything', NULL)",
    "INSERT INTO m VALUES (5, 99, 99)",
]


@pytest.fixture(scope="module")
def pg():
    yield from postgres()


def _fresh(pg, db=None):
    pg.execute("DROP SCHEMA IF EXISTS fk CASCADE")
    pg.execute("CREATE SCHEMA fk")
    pg.execute("SET search_path = fk")
    db = db or ivm.connect()
    load_both(db, pg, SCHEMA + ROWS, VIEWS)
    return db


def _compare(db, pg, after: str) -> None:
    if pg.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
        return
    tables = [r[0] for r in pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'fk'").fetchall()]
    assert sorted(tables) == sorted(db.tables), after
    for name in tables:
        got = db.execute(f"SELECT * FROM {name}").fetchall()
        want = pg.execute(f"SELECT * FROM {name}").fetchall()
        assert same_rows(got, want), (
            f"{name} after {after!r}: {sorted(got, key=repr)} != {sorted(want, key=repr)}"
        )
    if db.in_transaction:
        return
    for name in VIEWS:
        if name in db.views:  # (renamed with the tables it reads)
            want = pg.execute(db.views[name].view.sql).fetchall()
            assert same_rows(db.execute(f"SELECT * FROM {name}").fetchall(), want), (name, after)


def _step(
    db, pg, sql: str, expect: str | None = None, exact: bool = True
) -> tuple[Error | None, Exception | None]:
    """Run ``sql`` on both; both fail or both succeed, a violation naming the same constraint (with
    ``exact``; else a foreign key's: where a statement breaks several, PostgreSQL names the first its triggers
    meet, row by row in the order it stores them)."""
    try:
        db.execute(sql)
        mine = None
    except Error as err:
        mine = err
    try:
        pg.execute(sql)
        theirs = None
    except psycopg.Error as err:
        theirs = err
    assert (mine is None) == (theirs is None), (sql, mine, theirs)
    if isinstance(theirs, psycopg.errors.ForeignKeyViolation):
        assert isinstance(mine, IntegrityError), (sql, mine)
        name = repr(theirs.diag.constraint_name) if exact else ""
        assert f"violates foreign key constraint {name}" in mine.message, (sql, mine)
    if expect is not None:
        assert mine is not None and expect in mine.message, (sql, mine, theirs)
    return mine, theirs


def test_statements_keep_foreign_keys_as_postgresql_does(pg):
    db = _fresh(pg)
    try:
        _compare(db, pg, "the start")
        for item in SCRIPT:
            sql, expect = (item, None) if isinstance(item, str) else item
            _step(db, pg, sql, expect)
            _compare(db, pg, sql)
    finally:
        pg.execute("ROLLBACK")
        db.close()


def test_foreign_keys_survive_reopening(pg):
    path = tempfile.mkdtemp()
    db = _fresh(pg, ivm.connect(path))
    try:
        for item in SCRIPT[:48]:  # up to the RENAMEs: the parent made again after its children
            _step(db, pg, item if isinstance(item, str) else item[0])
        db.execute("ALTER TABLE p ADD COLUMN z INTEGER")  # p comes after c in the catalog now
        pg.execute("ALTER TABLE p ADD COLUMN z INTEGER")
        db.close()
        db = ivm.connect(path)
        _compare(db, pg, "reopening")
        for sql in [
            "INSERT INTO c VALUES (60, 9, NULL, NULL)",
            "DELETE FROM p WHERE id = 1",
            "INSERT INTO tree VALUES (9, 9, 'self')",
            "DELETE FROM tree WHERE id = 1",
        ]:
            _step(db, pg, sql)
            _compare(db, pg, sql)
    finally:
        pg.execute("ROLLBACK")
        db.close()


def _random_statement(rng: random.Random) -> str:
    k = rng.randint(1, 8)
    code = rng.choice(["'one'", "'two'", "'three'", "'four'", "NULL"])
    shapes = [
        lambda: f"INSERT INTO p VALUES ({k}, {code}, {rng.randint(1, 3)}, {rng.randint(1, 4)})",
        lambda: f"INSERT INTO c VALUES ({rng.randint(10, 30)}, {rng.choice([k, 'NULL'])}, {code}, 'n')",
        lambda: f"INSERT INTO g VALUES ({rng.randint(100, 110)}, {rng.randint(10, 30)})",
        lambda: f"INSERT INTO m VALUES ({rng.randint(1, 9)}, {rng.randint(1, 4)}, {rng.randint(1, 3)})",
        lambda: (
            f"INSERT INTO tree VALUES ({rng.randint(1, 12)}, {rng.choice([rng.randint(1, 12), 'NULL'])}, 't')"
        ),
        lambda: f"INSERT INTO d VALUES ({rng.choice([k, 'NULL'])}, 'r')",
        lambda: f"DELETE FROM p WHERE id = {k}",
        lambda: f"DELETE FROM p WHERE a = {rng.randint(1, 3)}",
        lambda: f"DELETE FROM c WHERE pid = {k}",
        lambda: f"DELETE FROM tree WHERE id = {rng.randint(1, 12)}",
        lambda: f"DELETE FROM g WHERE cid > {rng.randint(10, 30)}",
        lambda: f"DELETE FROM d WHERE pid = {k}",
        lambda: f"UPDATE p SET code = {code} WHERE id = {k}",
        lambda: f"UPDATE p SET id = {rng.randint(1, 8)} WHERE id = {k}",
        lambda: f"UPDATE c SET pid = {rng.choice([k, 'NULL'])} WHERE id = {rng.randint(10, 30)}",
        lambda: f"UPDATE tree SET up = {rng.randint(1, 12)} WHERE id = {rng.randint(1, 12)}",
        lambda: f"UPDATE m SET x = {rng.randint(1, 3)} WHERE k = {rng.randint(1, 9)}",
        lambda: f"UPDATE c SET id = {rng.randint(10, 30)} WHERE id = {rng.randint(10, 30)}",
        lambda: f"UPDATE tree SET id = {rng.randint(1, 12)} WHERE id = {rng.randint(1, 12)}",
        lambda: f"UPDATE p SET a = {rng.randint(1, 3)}, b = {rng.randint(1, 4)} WHERE id = {k}",
        lambda: (
            f"INSERT INTO p VALUES ({k}, {code}, 1, {rng.randint(1, 4)}) ON CONFLICT (id) DO UPDATE SET "
            f"code = {code}"
        ),
        lambda: rng.choice(["BEGIN", "COMMIT", "ROLLBACK"]),
    ]
    return rng.choice(shapes)()


@pytest.mark.parametrize("seed", range(int(os.environ.get("IVM_FK_SEEDS", "3"))))
def test_random_statements_keep_foreign_keys_as_postgresql_does(pg, seed):
    rng = random.Random(seed)
    db = _fresh(pg)
    try:
        for _ in range(120):
            sql = _random_statement(rng)
            _step(db, pg, sql, exact=False)
            _compare(db, pg, sql)
    finally:
        pg.execute("ROLLBACK")
        db.close()


REFUSED = [  # (statement, error, words, the text the error points into)
    (
        "CREATE TABLE r (a INTEGER REFERENCES nowhere)",
        ProgrammingError,
        "relation 'nowhere' does not exist",
        None,
    ),
    (
        "CREATE TABLE r (a TEXT REFERENCES k)",
        ProgrammingError,
        "key columns 'a' and 'id' are of incompatible types: text and integer",
        "REFERENCES k",
    ),
    (
        "CREATE TABLE r (a INTEGER, FOREIGN KEY (a) REFERENCES k (v))",
        ProgrammingError,
        "there is no unique constraint matching given keys for referenced table 'k'",
        "FOREIGN KEY (a) REFERENCES k (v)",
    ),
    (
        "CREATE TABLE r (a INTEGER REFERENCES nokey)",
        ProgrammingError,
        "there is no primary key for referenced table 'nokey'",
        "REFERENCES nokey",
    ),
    (
        "CREATE TABLE r (a INTEGER, b INTEGER, FOREIGN KEY (a, b) REFERENCES k)",
        ProgrammingError,
        "number of referencing and referenced columns for foreign key disagree",
        "FOREIGN KEY (a, b) REFERENCES k",
    ),
    (
        "CREATE TABLE r (a INTEGER REFERENCES k (nope))",
        ProgrammingError,
        "column 'nope' referenced in foreign key constraint does not exist",
        "REFERENCES k",
    ),
    (
        "CREATE TABLE r (a INTEGER REFERENCES v)",
        ProgrammingError,
        "referenced relation 'v' is not a table",
        None,
    ),
    (
        "CREATE TABLE r (a INTEGER REFERENCES k DEFERRABLE INITIALLY DEFERRED)",
        NotSupportedError,
        "DEFERRABLE (of a foreign key) is not supported",
        "REFERENCES k",
    ),
    (
        "CREATE TABLE r (a INTEGER REFERENCES k MATCH PARTIAL)",
        NotSupportedError,
        "MATCH PARTIAL not yet implemented",
        "REFERENCES k",
    ),
    (
        "ALTER TABLE k ALTER COLUMN id TYPE BIGINT",
        ProgrammingError,
        "cannot alter type of column 'id' of table 'k': foreign key constraint 'c_kid_fkey' on table 'c'",
        None,
    ),
    (
        "ALTER TABLE k DROP COLUMN id",
        ProgrammingError,
        "cannot drop column 'id' of table 'k': foreign key constraint 'c_kid_fkey' on table 'c' depends on it",
        None,
    ),
    ("ALTER TABLE k ADD FOREIGN KEY (v) REFERENCES k NOT VALID", NotSupportedError, "NOT VALID", None),
]


@pytest.mark.parametrize(("sql", "cls", "words", "at"), REFUSED, ids=[r[0][:60] for r in REFUSED])
def test_definitions_ivm_cannot_keep_are_refused_at_their_place(sql, cls, words, at):
    db = ivm.connect()
    db.execute("CREATE TABLE k (id INTEGER PRIMARY KEY, v INTEGER)")
    db.execute("CREATE TABLE nokey (id INTEGER)")
    db.execute("CREATE TABLE c (kid INTEGER REFERENCES k)")
    db.execute("CREATE VIEW v AS SELECT v FROM k")
    if at is None:
        with pytest.raises(cls, match=words.replace("(", r"\(").replace(")", r"\)")):
            db.execute(sql)
    else:
        error_at(db, sql, cls, words, at)
    assert sorted(db.tables) == ["c", "k", "nokey"]


def test_a_sharded_database_refuses_foreign_keys():
    from ivm.db.shards import Shards

    shards = Shards(2)
    try:
        shards.execute("CREATE TABLE k (id INTEGER PRIMARY KEY)")
        with pytest.raises(NotSupportedError, match="foreign keys"):
            shards.execute("CREATE TABLE c (kid INTEGER REFERENCES k)")
    finally:
        shards.close()
