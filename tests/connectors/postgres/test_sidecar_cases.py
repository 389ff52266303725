"""The sidecar on particular cases: every column type with NULLs, TOASTed values an update leaves unsent,
TRUNCATE, REPLICA IDENTITY FULL, ALTER TABLE on a source table, errors at start, an unreachable source."""

from __future__ import annotations

import contextlib
import time

import psycopg
import pytest

from connectors.postgres._catalog import parse_views
from connectors.postgres.sidecar import Sidecar, main
from connectors.postgres.workload import bump_marker, mismatches, wait_for_marker

MARKER = "CREATE TABLE marker (id integer PRIMARY KEY, n bigint NOT NULL); INSERT INTO marker VALUES (1, 0);"
MARKER_VIEW = "CREATE MATERIALIZED VIEW marker_n AS SELECT n FROM marker;\n"


@contextlib.contextmanager
def running(dsn: str, views: str):
    """The sidecar in a thread, stopped (after its batch in flight) at the end."""
    car = Sidecar(dsn, views, batch_changes=500)
    with car.in_thread():
        wait_for_marker(dsn, 0, timeout=60)
        yield car


def _sync_and_compare(dsn: str, views: str) -> None:
    wait_for_marker(dsn, bump_marker(dsn), timeout=60)
    assert mismatches(dsn, parse_views(views).views) == {}


TYPES = """
CREATE TABLE t (id integer PRIMARY KEY, s smallint, i integer, b bigint, n numeric(12,3), r real,
                d double precision, tx text, vc varchar(10), c char(4), dt date, ts timestamp, tz timestamptz,
                bo boolean);
CREATE TABLE f (k integer, v text, big text);
ALTER TABLE f REPLICA IDENTITY FULL;
CREATE TABLE pf (id integer PRIMARY KEY, v text, big text);
ALTER TABLE pf REPLICA IDENTITY FULL;
CREATE TABLE toast (id integer PRIMARY KEY, n integer, payload text);
INSERT INTO t VALUES
  (1, 1, 2, 3, 4.5, 1.1, 2.2, 'a', 'b', 'c', '2024-01-02', '2024-01-02 03:04:05.678901',
   '2024-01-02 03:04:05+02', true),
  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (3, -32768, -2147483648, 9223372036854775807, -999999999.999, 'Infinity', '-Infinity', '', '', '',
   '1900-02-28', '1999-12-31 23:59:59.999999', '1970-01-01 00:00:00+00', false),
  (4, 7, 7, 7, 0.001, -0.5, 1e-300, 'comma, "quote"
newline', 'ünïcødé', 'x', '2100-12-31', '2000-01-01', '2030-06-30 12:00:00.5-07', NULL);
INSERT INTO f VALUES (1, 'a', NULL), (1, 'a', NULL), (2, NULL, 'z'), (NULL, NULL, NULL);
INSERT INTO toast SELECT i, i, (SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 400) g)
  FROM generate_series(1, 5) i;
INSERT INTO pf SELECT i, 'v' || i,
  (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 400) g) FROM generate_series(1, 5) i;
"""

TYPE_VIEWS = (
    MARKER_VIEW
    + """
CREATE MATERIALIZED VIEW all_t AS SELECT id, s, i, b, n, r, d, tx, vc, c, dt, ts, tz, bo FROM t;
CREATE MATERIALIZED VIEW t_groups AS
  SELECT bo, COUNT(*) AS rows, COUNT(n) AS ns, SUM(n) AS total, MIN(dt) AS first_day, MAX(ts) AS last_ts
  FROM t GROUP BY bo;
CREATE MATERIALIZED VIEW all_f AS SELECT k, v, big FROM f;
CREATE MATERIALIZED VIEW all_pf AS SELECT id, v, big FROM pf;
CREATE MATERIALIZED VIEW all_toast AS SELECT id, n, payload FROM toast;
"""
)


def test_types_nulls_toast_truncate_and_full_identity(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + TYPES)
        with running(dsn, TYPE_VIEWS):
            _sync_and_compare(dsn, TYPE_VIEWS)
            # a view with a unique non-NULL key gets it as primary key; the others keep duplicate rows
            pk = dict(
                c.execute(
                    "SELECT c.relname, string_agg(a.attname, ',') FROM pg_index i JOIN pg_class c ON c.oid = "
                    "i.indrelid JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
                    "WHERE i.indisprimary AND c.relnamespace = 'ivm'::regnamespace GROUP BY c.relname"
                ).fetchall()
            )
            assert pk == {
                "all_t": "id",
                "all_pf": "id",
                "all_toast": "id",
                "_ivm_progress": "slot",
                "_ivm_status": "view",
            }
            with c.transaction():
                c.execute(
                    "INSERT INTO t VALUES (5, 5, 5, -5, -0.5, 'NaN', 'NaN', 'nan', 'v', 'abcd', '2024-02-29', "
                    "'2024-02-29 00:00:00', '2024-02-29 23:59:59.999999+00', true)"
                )
                c.execute("UPDATE t SET n = NULL, tx = NULL, tz = NULL WHERE id = 1")
                c.execute("UPDATE t SET s = 9, n = 1.25, tx = 'filled', bo = true WHERE id = 2")
                c.execute("UPDATE t SET id = 10 WHERE id = 3")  # the key changes
                c.execute("DELETE FROM t WHERE id = 4")
                c.execute("UPDATE t SET i = i + 1 WHERE id = 5")  # twice in one transaction
            # TOASTed payloads are not sent when an update leaves them unchanged
            c.execute("UPDATE toast SET n = n + 100 WHERE id <= 3")
            c.execute("UPDATE toast SET id = 40 WHERE id = 4")  # key changed, payload unsent
            big = "SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g"
            c.execute(f"UPDATE toast SET payload = ({big}) WHERE id = 5")  # a new TOASTed value...
            c.execute(
                "UPDATE toast SET n = -1 WHERE id = 5"
            )  # ...then left unchanged, likely in the same batch
            with c.transaction():  # a new TOASTed value, then the row updated again leaving it unsent
                c.execute(f"UPDATE toast SET payload = ({big}) || 'x' WHERE id = 6")
                c.execute("UPDATE toast SET n = -6 WHERE id = 6")
                c.execute("UPDATE toast SET n = -7 WHERE id = 6")
            c.execute("UPDATE pf SET v = 'changed' WHERE id <= 2")
            with c.transaction():
                c.execute("UPDATE f SET v = 'b' WHERE k = 1")
                c.execute("DELETE FROM f WHERE k IS NULL")
                c.execute("INSERT INTO f VALUES (3, 'c', 'cc'), (3, 'c', 'cc')")
            _sync_and_compare(dsn, TYPE_VIEWS)
            with c.transaction():  # TRUNCATE between other changes of the same tables
                c.execute("INSERT INTO f VALUES (9, 'gone', NULL)")
                c.execute("INSERT INTO toast VALUES (99, 1, 'gone')")
                c.execute("TRUNCATE f, toast")
                c.execute("INSERT INTO f VALUES (4, 'after', NULL)")
                c.execute("INSERT INTO toast VALUES (1, 1, 'after')")
                c.execute("UPDATE t SET b = 0 WHERE id = 1")
            c.execute("INSERT INTO toast VALUES (2, 2, 'later')")
            _sync_and_compare(dsn, TYPE_VIEWS)
            assert c.execute("SELECT count(*) FROM ivm.all_toast").fetchone()[0] == 2


def test_alter_table_rebuilds_from_a_new_snapshot_and_a_view_that_no_longer_works_stops_alone(dsn, caplog):
    """#13: ADD, RENAME and DROP COLUMN need no manual restart: the views of the table are rebuilt from a new
    snapshot of it and stay exact (a ``*`` view gains the new column), a view reading a dropped column stops
    alone, and the view over the other table is not rewritten."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW a_sum AS SELECT g, SUM(v) AS v FROM a GROUP BY g;
CREATE MATERIALIZED VIEW a_big AS SELECT g FROM a_sum WHERE v > 10;
CREATE MATERIALIZED VIEW a_all AS SELECT * FROM a;
CREATE MATERIALIZED VIEW a_w AS SELECT id, w FROM a;
CREATE MATERIALIZED VIEW b_all AS SELECT id, w FROM b;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER)
        c.execute(
            "CREATE TABLE a (id int PRIMARY KEY, g int, v int, w text); "
            "INSERT INTO a VALUES (1, 1, 5, 'p'), (2, 1, 7, 'q')"
        )
        c.execute("CREATE TABLE b (id int PRIMARY KEY, w text); INSERT INTO b VALUES (1, 'x')")
        with running(dsn, views):
            b_row = c.execute("SELECT xmin::text FROM ivm.b_all WHERE id = 1").fetchone()

            def exact(*gone: str) -> None:
                wait_for_marker(dsn, bump_marker(dsn), timeout=60)
                rest = {v: q for v, q in parse_views(views).views.items() if v not in ("a_big", *gone)}
                assert mismatches(dsn, rest) == {}
                big = c.execute("SELECT g FROM a GROUP BY g HAVING SUM(v) > 10").fetchall()
                assert sorted(c.execute("SELECT * FROM ivm.a_big").fetchall()) == sorted(big)

            def status():
                return dict(c.execute("SELECT view, state || ': ' || coalesce(error, '') FROM ivm._ivm_status"))

            c.execute("ALTER TABLE a ADD COLUMN extra text")
            c.execute("INSERT INTO a VALUES (3, 2, 100, 'r', 'e')")
            c.execute("INSERT INTO b VALUES (2, 'y')")
            exact()
            assert set(status().values()) == {"running: "}
            assert c.execute("SELECT * FROM ivm.a_all WHERE id = 3").fetchall() == [(3, 2, 100, "r", "e")]
            c.execute("ALTER TABLE a RENAME COLUMN extra TO more")
            c.execute("UPDATE a SET v = 1 WHERE id = 1")
            exact()
            assert set(status().values()) == {"running: "}
            c.execute("ALTER TABLE a DROP COLUMN w")
            c.execute("INSERT INTO a VALUES (4, 2, 1, 'm')")
            c.execute("INSERT INTO b VALUES (3, 'z')")
            exact("a_w")
            st = status()
            assert st["a_w"].startswith("failed: ") and "column 'w'" in st["a_w"], st
            assert {v: e for v, e in st.items() if v != "a_w"} == dict.fromkeys(
                ["marker_n", "a_sum", "a_big", "a_all", "b_all"], "running: "
            )
            assert sorted(c.execute("SELECT * FROM ivm.a_w").fetchall()) == [(1, "p"), (2, "q"), (3, "r")]
            assert c.execute("SELECT xmin::text FROM ivm.b_all WHERE id = 1").fetchone() == b_row
    messages = [r.getMessage() for r in caplog.records]
    said = "source table public.a changed (column extra added); rebuilding views "
    assert any(said in m for m in messages)


def test_a_value_a_view_cannot_compute_puts_it_in_error_until_the_row_changes(dsn):
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW nums AS SELECT id, CAST(s AS INTEGER) AS n FROM p;
CREATE MATERIALIZED VIEW rows_p AS SELECT COUNT(*) AS n FROM p;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER)
        c.execute("CREATE TABLE p (id int PRIMARY KEY, s text); INSERT INTO p VALUES (1, '5')")
        with running(dsn, views):

            def status():
                return dict(c.execute("SELECT view, state || ': ' || coalesce(error, '') FROM ivm._ivm_status"))

            c.execute("INSERT INTO p VALUES (2, 'five')")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            assert status()["nums"].startswith("error: ") and '"five"' in status()["nums"]
            assert status()["rows_p"] == "running: "
            assert c.execute("SELECT * FROM ivm.rows_p").fetchall() == [(2,)]
            c.execute("UPDATE p SET s = '6' WHERE id = 2")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            assert status()["nums"] == "running: "
            assert sorted(c.execute("SELECT * FROM ivm.nums").fetchall()) == [(1, 5), (2, 6)]


@pytest.mark.parametrize(
    ("ddl", "views", "message"),
    [
        (
            "CREATE TABLE j (id int PRIMARY KEY, doc jsonb)",
            "CREATE MATERIALIZED VIEW v AS SELECT id, doc FROM j",
            "view 'v' reads column public.j.doc of type jsonb",
        ),
        (
            "CREATE TABLE u (id int PRIMARY KEY, amount numeric)",
            "CREATE MATERIALIZED VIEW v AS SELECT id, amount FROM u",
            "view 'v' reads column public.u.amount of type numeric without a precision",
        ),
        (
            "CREATE TABLE nk (a int, b text)",
            "CREATE MATERIALIZED VIEW v AS SELECT a FROM nk",
            "table public.nk has no primary key",
        ),
        ("", "CREATE MATERIALIZED VIEW v AS SELECT x FROM missing", "table 'missing' does not exist"),
        ("CREATE TABLE ok (id int PRIMARY KEY)", "DROP TABLE ok", "only CREATE MATERIALIZED VIEW"),
        (
            "CREATE TABLE ok (id int PRIMARY KEY)",
            "CREATE MATERIALIZED VIEW v AS SELECT nope FROM ok",
            "views file: column 'nope'",
        ),
    ],
)
def test_errors_at_start_name_the_problem(dsn, tmp_path, capsys, ddl, views, message):
    if ddl:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(ddl)
    path = tmp_path / "views.sql"
    path.write_text(views)
    assert main(["--source", dsn, "--views", str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err, err


@pytest.mark.parametrize("side", ["source", "target"])
def test_unreachable_side_is_retried_with_backoff_and_sigterm_stops(dsn, sidecar_process, side):
    from connectors.postgres.cluster import _free_port

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE t (id int PRIMARY KEY)")
    nowhere = f"host=127.0.0.1 port={_free_port()} user=postgres connect_timeout=2"
    car = sidecar_process("CREATE MATERIALIZED VIEW v AS SELECT id FROM t")
    if side == "source":
        car.args[car.args.index("--source") + 1] = nowhere
        car.args += ["--target", dsn]  # the target is taken first, and is there
    else:
        car.args += ["--target", nowhere]
        car.args[1:3] = ["-m", "ivm.cli", "sidecar"]  # through the ivm command
    car.start()
    car.wait_log(f"{side} unreachable", count=2)
    assert "retrying in 0.5s" in car.text() and "retrying in 1.0s" in car.text()
    assert car.terminate() == 0


def test_separate_target_database_and_schema(dsn, cluster, sidecar_process):
    views = (
        MARKER_VIEW
        + "CREATE MATERIALIZED VIEW per_g AS SELECT g, COUNT(*) AS n, MAX(v) AS top FROM S GROUP BY g;\n"
    )
    with psycopg.connect(cluster.dsn, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS elsewhere")
        c.execute("CREATE DATABASE elsewhere")
    target = cluster.dsn.replace("dbname=postgres", "dbname=elsewhere")
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(MARKER + "CREATE TABLE s (id int PRIMARY KEY, g text, v real)")
            c.execute("INSERT INTO s SELECT i, 'g' || (i % 3), i / 2.0 FROM generate_series(1, 50) i")
            car = sidecar_process(
                views, "--target", target, "--schema", "out", "--slot", "s1", "--publication", "p1"
            )
            car.start()
            wait_for_marker(target, 0, "out")
            c.execute("UPDATE s SET g = NULL WHERE id % 5 = 0")
            c.execute("DELETE FROM s WHERE id > 45")
            wait_for_marker(target, bump_marker(dsn), "out")
            assert mismatches(dsn, parse_views(views).views, "out", target) == {}
            assert c.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 's1'").fetchone() == (
                1,
            )
            assert car.terminate() == 0
            with psycopg.connect(target) as t:
                assert t.execute("SELECT slot, source_txns > 0 FROM out._ivm_progress").fetchall() == [
                    ("s1", True)
                ]
    finally:
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            c.execute("DROP DATABASE elsewhere WITH (FORCE)")


def test_slot_releases_wal_while_only_other_tables_change(dsn):
    """Transactions on tables no view reads never reach the sidecar; the slot still moves past them."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + "CREATE TABLE other (id integer PRIMARY KEY, v text);")
    with running(dsn, MARKER_VIEW), psycopg.connect(dsn, autocommit=True) as c:
        for i in range(50):
            c.execute("INSERT INTO other VALUES (%s, repeat('x', 1000))", (i,))
        target = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + 60
        while True:
            (flushed,) = c.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE database = current_database()"
            ).fetchone()
            if flushed >= target or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert flushed >= target
