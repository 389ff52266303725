"""The sidecar on what went wrong for a new user: tables of the same name in other schemas, two sidecars on one
target, PostgreSQL's char/real/numeric semantics, values and types ivm cannot hold, reserved and quoted names,
a slot dropped behind its back, a FOR ALL TABLES publication over its own output, and permanent errors."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from connectors.postgres._catalog import parse_views
from connectors.postgres.cluster import LocalCluster
from connectors.postgres.sidecar import main
from connectors.postgres.workload import bump_marker, mismatches, wait_for_marker
from tests.connectors.postgres.test_sidecar_cases import MARKER, MARKER_VIEW, running


def _status(c) -> dict[str, str]:
    return dict(c.execute("SELECT view, state || ': ' || coalesce(error, '') FROM ivm._ivm_status"))


def _sync(dsn: str, views: str) -> None:
    wait_for_marker(dsn, bump_marker(dsn), timeout=60)
    assert mismatches(dsn, parse_views(views).views) == {}


def test_1_10_tables_by_schema_and_name_qualified_and_quoted(dsn):
    """#1: with a FOR ALL TABLES publication, rows of other.comp never enter views over public.comp; #10:
    schema-qualified and quoted mixed-case tables and columns work as in PostgreSQL."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW plain AS SELECT id, v FROM comp;
CREATE MATERIALIZED VIEW both_sides AS SELECT p.id, p.v AS pv, o.v AS ov FROM public.comp p JOIN other.comp o
  ON p.id = o.id;
CREATE MATERIALIZED VIEW other_count AS SELECT COUNT(*) AS n, MAX(other.comp.v) AS top FROM other.comp;
CREATE MATERIALIZED VIEW aliased AS SELECT c.id, c.v FROM other.comp AS c WHERE c.id > 1;
CREATE MATERIALIZED VIEW "Mixed" AS SELECT "Id", "Name", lower("Name") AS l FROM "Other"."Cased";
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER)
        c.execute(
            'CREATE SCHEMA other; CREATE SCHEMA "Other"; '
            "CREATE TABLE comp (id int PRIMARY KEY, v text);"
            "CREATE TABLE other.comp (id int PRIMARY KEY, v text);"
            'CREATE TABLE "Other"."Cased" ("Id" int PRIMARY KEY, "Name" text);'
            "INSERT INTO comp VALUES (1, 'public 1');"
            "INSERT INTO other.comp VALUES (1, 'other 1'), (2, 'other 2');"
            """INSERT INTO "Other"."Cased" VALUES (1, 'Ab')"""
        )
        c.execute("CREATE PUBLICATION ivm FOR ALL TABLES")
        with running(dsn, views):
            c.execute("INSERT INTO comp VALUES (2, 'public 2'), (3, 'public 3')")
            c.execute("INSERT INTO other.comp VALUES (3, 'other 3'), (4, 'other 4')")
            c.execute("UPDATE other.comp SET v = 'other one' WHERE id = 1")
            c.execute('INSERT INTO "Other"."Cased" VALUES (2, \'CD\')')
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            checked = parse_views(views).views
            mixed = checked.pop("Mixed")
            assert mismatches(dsn, checked) == {}
            assert sorted(c.execute('SELECT * FROM ivm."Mixed"').fetchall()) == sorted(
                c.execute(mixed).fetchall()
            )
            assert c.execute("SELECT * FROM ivm.plain ORDER BY id").fetchall() == [
                (1, "public 1"),
                (2, "public 2"),
                (3, "public 3"),
            ]
            assert set(_status(c).values()) == {"running: "}


def test_9_for_all_tables_publication_over_its_own_output(dsn):
    """#9: target = source and a FOR ALL TABLES publication: the sidecar passes over its own writes (no loop
    of empty batches) and deletes from keyless target tables work."""
    views = MARKER_VIEW + "CREATE MATERIALIZED VIEW dup AS SELECT v FROM t;\n"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            MARKER + "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'a')"
        )
        c.execute("CREATE PUBLICATION ivm FOR ALL TABLES")
        with running(dsn, views):
            c.execute("DELETE FROM t WHERE id = 1")
            c.execute("UPDATE t SET v = 'b' WHERE id = 2")
            _sync(dsn, views)
            assert set(_status(c).values()) == {"running: "}
            # caught up, the sidecar's own writes (published too) start no new batches
            last = c.execute("SELECT committed_at FROM ivm._ivm_progress").fetchone()
            time.sleep(1.5)
            assert c.execute("SELECT committed_at FROM ivm._ivm_progress").fetchone() == last


def test_a_view_over_the_target_schema_is_refused(dsn, tmp_path, capsys):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE SCHEMA ivm; CREATE TABLE ivm.out (id int PRIMARY KEY)")
    path = tmp_path / "views.sql"
    path.write_text("CREATE MATERIALIZED VIEW v AS SELECT id FROM ivm.out")
    assert main(["--source", dsn, "--views", str(path)]) == 1
    assert "a view cannot read the sidecar's own output" in capsys.readouterr().err


def test_2_one_sidecar_per_target_schema_and_per_slot(dsn, sidecar_process, tmp_path):
    """#2: a second sidecar on the same target schema (another slot), or on the same slot (another schema),
    refuses to start naming the first; once the first is gone the second takes over cleanly."""
    views = MARKER_VIEW + "CREATE MATERIALIZED VIEW total AS SELECT COUNT(*) AS n, SUM(v) AS s FROM t;\n"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 10)")
        first = sidecar_process(views, "--slot", "first").start()
        wait_for_marker(dsn, 0)
        path = tmp_path / "second.sql"
        path.write_text(views)
        for extra, said in [
            (["--slot", "second"], "target schema 'ivm' is in use by ivm sidecar (slot first)"),
            (["--slot", "first", "--schema", "elsewhere"], "replication slot 'first' is in use by ivm sidecar"),
        ]:
            second = sidecar_process(views, *extra)
            second.args[second.args.index("--views") + 1] = str(path)
            second.start()
            assert second.proc.wait(60) == 1
            assert said in second.text(), second.text()
            assert "stop that sidecar" in second.text()
        # the first one's slot is untouched and it goes on
        c.execute("INSERT INTO t VALUES (2, 5)")
        _sync(dsn, views)
        assert c.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1").fetchall() == [("first",)]
        assert first.terminate() == 0
        third = sidecar_process(views, "--slot", "second").start()
        third.wait_log("initial state written")
        c.execute("INSERT INTO t VALUES (3, 1)")
        _sync(dsn, views)
        assert c.execute("SELECT * FROM ivm.total").fetchall() == [(3, 16)]
        assert c.execute("SELECT slot FROM ivm._ivm_progress").fetchall() == [("second",)]
        assert "was written through slot 'first' until now" in third.text()
        assert third.terminate() == 0


def test_3_4_5_char_real_and_numeric_follow_postgres(dsn):
    """#3: char(n) padding is insignificant; #4: real is a float4 value; #5: AVG and division that Postgres
    computes in numeric are kept as double precision, equal to Postgres' answer in that type; a double
    overflowing is an error of the view, not Infinity."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW chars AS SELECT id, length(c) AS len, c = 'ab' AS eq, vc || c AS cat, c FROM t;
CREATE MATERIALIZED VIEW reals AS SELECT id, r + 0.0 AS widened, r = 0.1 AS eq, r FROM t;
CREATE MATERIALIZED VIEW avgs AS SELECT AVG(total) AS a, SUM(total) / COUNT(*) AS q, AVG(i) AS ai FROM t;
CREATE MATERIALIZED VIEW doubled AS SELECT id, d * 2 AS d2 FROM t;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            MARKER
            + "CREATE TABLE t (id int PRIMARY KEY, c char(4), vc varchar(8), r real, total numeric(12,2),"
            " i int, d double precision);"
            "INSERT INTO t VALUES (1, 'ab', 'x', 0.1, 1000.37, 1, 1.5), (2, 'abc', 'y', 2.5, 5000.01, 2, 2),"
            " (3, NULL, NULL, NULL, 604.44, 4, NULL)"
        )
        with running(dsn, views):
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            types = dict(
                c.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = 'ivm.avgs'::regclass AND attnum > 0"
                ).fetchall()
            )
            assert types == {"a": "double precision", "q": "double precision", "ai": "double precision"}
            checked = parse_views(views).views
            avgs = checked.pop("avgs")
            assert mismatches(dsn, checked) == {}
            want = c.execute(f"SELECT a::float8, q::float8, ai::float8 FROM ({avgs}) x").fetchall()
            assert c.execute("SELECT * FROM ivm.avgs").fetchall() == want
            assert c.execute("SELECT widened, eq FROM ivm.reals WHERE id = 1").fetchall() == [
                (0.10000000149011612, False)
            ]
            assert c.execute("SELECT len, eq, cat FROM ivm.chars WHERE id = 1").fetchall() == [(2, True, "xab")]
            c.execute("INSERT INTO t VALUES (4, 'a  ', 'z', 0.3, 0.01, 5, 1e308)")
            c.execute("UPDATE t SET c = 'ab', r = 0.7 WHERE id = 2")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            checked.pop("doubled")
            assert mismatches(dsn, checked) == {}
            assert c.execute(f"SELECT a::float8, q::float8, ai::float8 FROM ({avgs}) x").fetchall() == (
                c.execute("SELECT * FROM ivm.avgs").fetchall()
            )
            status = _status(c)
            assert status["doubled"].startswith("error: ") and "out of range" in status["doubled"], status
            assert status["chars"] == status["reals"] == status["avgs"] == "running: "
            c.execute("UPDATE t SET d = 1 WHERE id = 4")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            assert _status(c)["doubled"] == "running: "
            assert mismatches(dsn, {"doubled": parse_views(views).views["doubled"]}) == {}


def test_6_a_value_ivm_cannot_hold_is_an_error_of_the_views_reading_it(dsn):
    """#6: numeric NaN and timestamp infinity, at the snapshot and in the stream, put the views reading the
    column in error (naming table, key and column) while the others go on; removing the rows clears it."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW amounts AS SELECT id, amount FROM t;
CREATE MATERIALIZED VIEW times AS SELECT id, at FROM t;
CREATE MATERIALIZED VIEW counted AS SELECT COUNT(*) AS n, MAX(label) AS top FROM t;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            MARKER
            + "CREATE TABLE t (id int PRIMARY KEY, amount numeric(10,2) NOT NULL, at timestamp, label text);"
            "INSERT INTO t VALUES (1, 'NaN', '2024-01-01', 'a'), (2, 3.5, 'infinity', 'b'), (3, 1, NULL, 'c')"
        )
        with running(dsn, views):
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            st = _status(c)
            assert st["amounts"] == (
                "error: table public.t, row (id)=(1): column amount holds 'NaN', which ivm cannot hold as "
                "numeric(10,2)"
            )
            assert st["times"].startswith("error: table public.t, row (id)=(2): column at holds 'infinity'")
            assert st["counted"] == st["marker_n"] == "running: "
            assert c.execute("SELECT * FROM ivm.counted").fetchall() == [(3, "c")]
            c.execute("UPDATE t SET amount = 2 WHERE id = 1")
            c.execute("INSERT INTO t VALUES (4, 1, '-infinity', 'd')")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            st = _status(c)
            assert st["amounts"] == "running: " and "(and 1 more rows)" in st["times"], st
            c.execute("DELETE FROM t WHERE id IN (2, 4)")
            c.execute("INSERT INTO t VALUES (5, 'NaN', NULL, 'e')")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            st = _status(c)
            assert st["times"] == "running: " and "row (id)=(5)" in st["amounts"], st
            c.execute("DELETE FROM t WHERE id = 5")
            _sync(dsn, views)
            assert set(_status(c).values()) == {"running: "}


def test_7_11_reserved_words_and_columns_of_any_type_no_view_reads(dsn):
    """#7: reserved-word column names; #11: columns of types ivm cannot represent (even in the primary key)
    block only the views that read them."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW words AS SELECT "select", "from", "order" FROM w;
CREATE MATERIALIZED VIEW docs AS SELECT id, n FROM d WHERE n > 1;
CREATE MATERIALIZED VIEW by_uuid AS SELECT COUNT(*) AS n, SUM(n) AS s FROM u;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            MARKER + 'CREATE TABLE w ("select" int PRIMARY KEY, "from" text, "order" int);'
            "INSERT INTO w VALUES (1, 'x', 2);"
            "CREATE TABLE d (id int PRIMARY KEY, n int, doc jsonb, tags text[], blob bytea, span interval);"
            """INSERT INTO d VALUES (1, 1, '{"a": 1}', '{x}', '\\x00', '1 day'),"""
            "(2, 2, NULL, NULL, NULL, NULL);"
            "CREATE TABLE u (id uuid PRIMARY KEY, n int);"
            "INSERT INTO u VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 1)"
        )
        with running(dsn, views):
            c.execute("INSERT INTO w VALUES (2, 'y', 3)")
            c.execute("""INSERT INTO d VALUES (3, 5, '[1, 2]', '{a,b}', '\\xff', '2 hours')""")
            c.execute("UPDATE d SET doc = '{}' WHERE id = 2")
            c.execute("INSERT INTO u VALUES ('b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 4)")
            c.execute("UPDATE u SET n = 7 WHERE id = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'")
            c.execute("DELETE FROM u WHERE id = 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'")
            _sync(dsn, views)
            assert c.execute("SELECT * FROM ivm.by_uuid").fetchall() == [(1, 7)]


def test_8_a_slot_dropped_behind_its_back_is_taken_up_from_a_new_snapshot(dsn, caplog):
    views = MARKER_VIEW + "CREATE MATERIALIZED VIEW s AS SELECT SUM(v) AS v FROM t;\n"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
        with running(dsn, views):
            deadline = time.monotonic() + 60
            while True:  # the sidecar holds the slot only while it reads it
                try:
                    c.execute("SELECT pg_drop_replication_slot('ivm')")
                    break
                except psycopg.errors.ObjectInUse:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            c.execute("INSERT INTO t VALUES (2, 41)")
            _sync(dsn, views)
            assert c.execute("SELECT v FROM ivm.s").fetchall() == [(42,)]
    assert any(
        "replication slot" in r.getMessage() and "taking a new snapshot" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda dsn: dsn.replace("dbname=", "dbname=nowhere_"), "does not exist"),
        (lambda dsn: dsn.replace("user=postgres", "user=nobody"), 'role "nobody" does not exist'),
        (lambda dsn: dsn + " port=notaport", "invalid"),
    ],
)
def test_12_permanent_errors_fail_fast(dsn, tmp_path, capsys, change, said):
    path = tmp_path / "views.sql"
    path.write_text("CREATE MATERIALIZED VIEW v AS SELECT 1 AS x FROM t")
    start = time.monotonic()
    assert main(["--source", change(dsn), "--target", dsn, "--views", str(path)]) == 1
    err = capsys.readouterr().err
    assert said in err and "source:" in err, err
    assert time.monotonic() - start < 30  # no retries: a failure, not a backoff


def test_12_a_wrong_password_fails_fast(dsn, tmp_path, capsys):
    """A role that must give a password (scram-sha-256 in pg_hba.conf, for it alone) and gives a wrong one."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE t (id int PRIMARY KEY)")
        c.execute("DROP ROLE IF EXISTS pw_user")
        c.execute("CREATE ROLE pw_user LOGIN REPLICATION PASSWORD 'right'")
        hba = Path(c.execute("SHOW hba_file").fetchone()[0])
        before = hba.read_text()
        hba.write_text("host all pw_user 127.0.0.1/32 scram-sha-256\n" + before)
        try:
            c.execute("SELECT pg_reload_conf()")
            wrong = dsn.replace("user=postgres", "user=pw_user password=wrong")
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                psycopg.connect(wrong).close()
            path = tmp_path / "views.sql"
            path.write_text("CREATE MATERIALIZED VIEW v AS SELECT id FROM t")
            start = time.monotonic()
            assert main(["--source", wrong, "--target", dsn, "--views", str(path)]) == 1
            assert time.monotonic() - start < 30  # no retries: a failure, not a backoff
        finally:
            hba.write_text(before)
            c.execute("SELECT pg_reload_conf()")
            c.execute("DROP ROLE pw_user")
    err = capsys.readouterr().err
    assert "source: connection failed" in err and 'password authentication failed for user "pw_user"' in err, (
        err
    )


def test_12_wal_level_replica_fails_fast_saying_what_to_set(tmp_path, capsys):
    with LocalCluster(settings={"wal_level": "replica"}) as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            c.execute("CREATE TABLE t (id int PRIMARY KEY)")
        path = tmp_path / "views.sql"
        path.write_text("CREATE MATERIALIZED VIEW v AS SELECT id FROM t")
        assert main(["--source", cluster.dsn, "--views", str(path)]) == 1
    assert "set wal_level = logical" in capsys.readouterr().err


def test_13_a_table_dropped_stops_its_views_alone_and_created_again_brings_them_back(dsn, caplog):
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW on_a AS SELECT COUNT(*) AS n FROM a;
CREATE MATERIALIZED VIEW on_b AS SELECT id, v FROM b;
CREATE MATERIALIZED VIEW on_on_b AS SELECT COUNT(*) AS n FROM on_b;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY, v text);")
        c.execute("INSERT INTO a VALUES (1); INSERT INTO b VALUES (1, 'x')")
        with running(dsn, views):
            c.execute("DROP TABLE b")
            deadline = time.monotonic() + 60
            while not _status(c).get("on_b", "").startswith("failed: "):
                assert time.monotonic() < deadline, _status(c)
                time.sleep(0.05)
            st = _status(c)
            assert "table 'b' does not exist" in st["on_b"] and st["on_on_b"].startswith("failed: "), st
            c.execute("INSERT INTO a VALUES (2)")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            assert c.execute("SELECT n FROM ivm.on_a").fetchall() == [(2,)]
            assert c.execute("SELECT * FROM ivm.on_b").fetchall() == [(1, "x")]  # its last contents
            c.execute("CREATE TABLE b (id int PRIMARY KEY, v text); INSERT INTO b VALUES (7, 'new')")
            deadline = time.monotonic() + 60
            while set(_status(c).values()) != {"running: "}:
                assert time.monotonic() < deadline, _status(c)
                time.sleep(0.05)
            c.execute("INSERT INTO b VALUES (8, 'newer')")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            assert sorted(c.execute("SELECT * FROM ivm.on_b").fetchall()) == [(7, "new"), (8, "newer")]
            assert c.execute("SELECT n FROM ivm.on_on_b").fetchall() == [(2,)]
    messages = [r.getMessage() for r in caplog.records]
    assert any("source table public.b was dropped, renamed or replaced" in m for m in messages)
    assert any("source table b was created" in m for m in messages)


def test_6_a_row_whose_key_ivm_cannot_hold_is_left_out_and_its_views_in_error(dsn):
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW counted AS SELECT COUNT(*) AS n FROM k;
CREATE MATERIALIZED VIEW labels AS SELECT id, label FROM k;
CREATE MATERIALIZED VIEW other AS SELECT n FROM marker;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            MARKER + "CREATE TABLE k (id numeric(6,2) PRIMARY KEY, label text);"
            "INSERT INTO k VALUES ('NaN', 'snapshot'), (1, 'one')"
        )
        with running(dsn, views):
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            st = _status(c)
            said = "table public.k, row (id)=(NaN): its primary key cannot be held by ivm (numeric(6,2))"
            assert st["counted"] == st["labels"] == f"error: {said}; the row is left out", st
            assert st["other"] == "running: "
            c.execute("DELETE FROM k WHERE id = 'NaN'")
            c.execute("INSERT INTO k VALUES (2, 'two')")
            _sync(dsn, views)
            assert set(_status(c).values()) == {"running: "}
            with c.transaction():  # in and out within a batch, then in again
                c.execute("INSERT INTO k VALUES ('NaN', 'a')")
                c.execute("UPDATE k SET id = 3 WHERE id = 'NaN'")
                c.execute("UPDATE k SET id = 'NaN' WHERE id = 2")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            assert _status(c)["counted"].startswith("error: "), _status(c)
            c.execute("UPDATE k SET id = 4 WHERE id = 'NaN'")
            _sync(dsn, views)
            assert set(_status(c).values()) == {"running: "}


def test_8_a_slot_that_lost_its_wal_is_taken_up_from_a_new_snapshot(tmp_path, caplog):
    """With ``max_slot_wal_keep_size`` a slot held back too long is invalidated at a checkpoint: the sidecar
    says so and takes a new snapshot."""
    views = MARKER_VIEW + "CREATE MATERIALIZED VIEW s AS SELECT SUM(v) AS v FROM t;\n"
    settings = {"max_slot_wal_keep_size": "1MB", "wal_keep_size": "0", "min_wal_size": "32MB"}
    with (
        LocalCluster(settings=settings) as cluster,
        cluster.database("lost") as dsn,
        psycopg.connect(dsn, autocommit=True) as c,
    ):
        c.execute(MARKER + "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
        with running(dsn, views), psycopg.connect(dsn) as blocker:
            blocker.execute("LOCK TABLE ivm.s IN ACCESS EXCLUSIVE MODE")  # the next batch waits
            c.execute("INSERT INTO t VALUES (2, 41)")
            deadline = time.monotonic() + 60
            while not c.execute(  # the sidecar waits on the target, the slot is idle
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name LIKE 'ivm sidecar%'"
            ).fetchone()[0]:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            for _ in range(4):  # WAL beyond what the slot may keep, then a checkpoint
                c.execute(
                    "CREATE TABLE filler AS SELECT g FROM generate_series(1, 100000) g; DROP TABLE filler"
                )
                c.execute("SELECT pg_switch_wal()")
            c.execute("CHECKPOINT")
            assert c.execute("SELECT wal_status FROM pg_replication_slots").fetchone()[0] == "lost"
            blocker.rollback()
            c.execute("INSERT INTO t VALUES (3, 100)")
            _sync(dsn, views)
            assert c.execute("SELECT v FROM ivm.s").fetchall() == [(142,)]
    said = [r.getMessage() for r in caplog.records if "taking a new snapshot" in r.getMessage()]
    assert said and "replication slot" in said[0], said


def test_5_an_integer_result_beyond_its_postgres_width_is_an_error_of_the_view(dsn):
    """Postgres computes ``a * b`` of integers as integer and fails past 2^31; the view is in error while such
    a row is in it (the target column is integer), and the sidecar goes on."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW products AS SELECT id, a * b AS p FROM t;
CREATE MATERIALIZED VIEW sums AS SELECT SUM(a) AS s FROM t;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + "CREATE TABLE t (id int PRIMARY KEY, a int, b int); INSERT INTO t VALUES (1, 2, 3)")
        with running(dsn, views):
            c.execute("INSERT INTO t VALUES (2, 65536, 65536), (3, 4, 5)")
            wait_for_marker(dsn, bump_marker(dsn), timeout=60)
            st = _status(c)
            assert st["products"].startswith("error: integer out of range in column 'p': 4294967296"), st
            assert st["sums"] == "running: "
            assert sorted(c.execute("SELECT * FROM ivm.products").fetchall()) == [(1, 6), (3, 20)]
            c.execute("UPDATE t SET b = 2 WHERE id = 2")
            _sync(dsn, views)
            assert set(_status(c).values()) == {"running: "}


def test_a_view_computing_with_timestamptz_in_a_source_zone_other_than_utc_is_refused(dsn, tmp_path, capsys):
    """ivm holds timestamptz in UTC; where the source's sessions compute in another zone, a view whose answer
    depends on the zone (a cast to date, EXTRACT, a comparison with a literal) is refused naming the column;
    one that only carries, groups or compares instants runs and equals Postgres."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"ALTER DATABASE {c.info.dbname} SET TimeZone = 'America/New_York'")
        c.execute(MARKER + "CREATE TABLE e (id int PRIMARY KEY, at timestamptz, until timestamptz)")
        c.execute("INSERT INTO e VALUES (1, '2024-03-10 03:30+00', '2024-03-11 00:00+00'), (2, NULL, NULL)")
    path = tmp_path / "views.sql"
    for query in [
        "SELECT id, at::date AS d FROM e",
        "SELECT id FROM e WHERE at > '2024-03-10'",
        "SELECT EXTRACT(hour FROM at) AS h FROM e",
    ]:
        path.write_text(f"CREATE MATERIALIZED VIEW v AS {query}")
        assert main(["--source", dsn, "--views", str(path)]) == 1
        err = capsys.readouterr().err
        assert "column public.e.at (timestamp with time zone)" in err and "'America/New_York'" in err, err
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW carried AS SELECT id, at, at < until AS before FROM e;
CREATE MATERIALIZED VIEW extremes AS SELECT MIN(at) AS lo, MAX(until) AS hi, COUNT(at) AS n FROM e;
"""
    )
    with running(dsn, views), psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO e VALUES (3, '2024-11-03 05:30+00', '2024-11-03 06:30+00')")
        _sync(dsn, views)


def test_13_only_the_views_of_an_altered_table_are_rebuilt_while_writes_go_on(dsn, caplog):
    """#13: ALTER TABLE while other transactions write: the views reading the altered table are rebuilt from
    a new snapshot of it and equal PostgreSQL's answer after it; a view over another table is not rewritten
    (its target rows keep their xmin); an ADD COLUMN ... DEFAULT that no later write shows is seen too."""
    views = (
        MARKER_VIEW
        + """
CREATE MATERIALIZED VIEW a_all AS SELECT * FROM a;
CREATE MATERIALIZED VIEW a_sum AS SELECT g, SUM(v) AS s, COUNT(*) AS n FROM a GROUP BY g;
CREATE MATERIALIZED VIEW ab AS SELECT a.id, a.v, b.x FROM a JOIN b ON a.id = b.id;
CREATE MATERIALIZED VIEW b_all AS SELECT * FROM b;
CREATE MATERIALIZED VIEW c_all AS SELECT * FROM c;
"""
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            MARKER
            + "CREATE TABLE a (id int PRIMARY KEY, g int, v int); CREATE TABLE b (id int PRIMARY KEY, x int);"
            "CREATE TABLE c (id int PRIMARY KEY, t text);"
            "INSERT INTO a SELECT i, i % 5, i FROM generate_series(1, 200) i;"
            "INSERT INTO b SELECT i, -i FROM generate_series(1, 200, 2) i;"
            "INSERT INTO c VALUES (1, 'kept'), (2, 'as is')"
        )
        stop = threading.Event()

        def write() -> None:
            with psycopg.connect(dsn, autocommit=True) as w:
                i = 0
                while not stop.is_set():
                    i += 1
                    with w.transaction():
                        w.execute("UPDATE a SET v = v + 1 WHERE id = %s", (i % 200 + 1,))
                        w.execute("UPDATE b SET x = x - 1 WHERE id = %s", (i % 200 + 1,))
                    w.execute("INSERT INTO a (id, g, v) VALUES (%s, 9, 1)", (1000 + i,))

        with running(dsn, views):
            xmin = c.execute("SELECT id, xmin::text FROM ivm.c_all ORDER BY id").fetchall()
            writer = threading.Thread(target=write)
            writer.start()
            try:
                time.sleep(0.3)
                c.execute("ALTER TABLE a ADD COLUMN d int DEFAULT 7")
                time.sleep(0.3)
                c.execute("ALTER TABLE a ALTER COLUMN v TYPE bigint")
                time.sleep(0.3)
            finally:
                stop.set()
                writer.join()
            _sync(dsn, views)
            c.execute("ALTER TABLE b ADD COLUMN y text DEFAULT 'dflt'")  # no write to b after it
            deadline = time.monotonic() + 60
            while mismatches(dsn, parse_views(views).views):
                assert time.monotonic() < deadline, mismatches(dsn, parse_views(views).views)
                time.sleep(0.1)
            assert c.execute("SELECT DISTINCT y FROM ivm.b_all").fetchall() == [("dflt",)]
            assert set(_status(c).values()) == {"running: "}, _status(c)
            assert c.execute("SELECT id, xmin::text FROM ivm.c_all ORDER BY id").fetchall() == xmin
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "source table public.a changed (column d added); rebuilding views a_all, a_sum, ab" in m
        for m in messages
    )
    assert any(
        "source table public.b changed (column y added); rebuilding views ab, b_all" in m for m in messages
    )
    assert not any("taking a new snapshot" in m for m in messages)
