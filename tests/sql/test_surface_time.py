"""Dates, timestamps and intervals as users write them, against a real PostgreSQL (session time zone UTC):
``timestamp - timestamp``, interval constants of several units and arithmetic with them, TIMESTAMP WITH TIME
ZONE, EXTRACT and ``date_part``, ``to_char``, ``to_date`` and ``to_timestamp``, and ``now()`` and its
relatives. Each expression is compared as a one-shot query and as a view maintained through inserts, updates
and deletes with NULLs; what ivm cannot do is refused by name and position."""

from __future__ import annotations

import datetime as dt
import decimal

import psycopg
import pytest

import ivm
from ivm.errors import DataError, NotSupportedError, ProgrammingError

TABLE = (
    "CREATE TABLE ev (id INTEGER PRIMARY KEY, d DATE, ts TIMESTAMP, t2 TIMESTAMP, tz TIMESTAMPTZ, s TEXT, "
    "n INTEGER)"
)
ROWS = [
    "(1, '2024-01-31', '2024-01-31 10:20:30.25', '2024-01-01 00:00:00', '2024-01-01 10:00:00+02', "
    "'2024-03-05 15:04:05', 3)",
    "(2, NULL, NULL, '2023-06-30 12:00:00', NULL, NULL, NULL)",
    "(3, '2021-01-01', '2021-01-03 00:30:00', '2021-01-04 00:30:00.000001', '2020-12-31 23:59:59.999999-05', "
    "'2021-1-3 0:30:00', -2)",
    "(4, '2000-02-29', '2000-02-29 12:00:00', '1999-12-31 23:59:59', '2000-02-29 12:00:00Z', "
    "'2000-02-29 12:00:00', 0)",
    "(5, '1969-12-31', '1969-12-31 23:59:59.5', '1970-01-01 00:00:00', '1969-12-31 23:59:59.5+00', "
    "' 1969-12-31 23:59:59', 7)",
    "(6, '2024-12-30', '2024-12-30 23:00:00', '2024-12-29 23:00:00', '2024-12-30 23:00:00-01:30', "
    "'2024-12-30 23:00:00', 1)",
]
# statements run on both sides after the views are made; each is followed by a comparison of every view
CHANGES = [
    "INSERT INTO ev VALUES (7, '2024-02-29', '2024-02-29 00:00:00', '2024-03-31 05:06:07.891', "
    "'2024-02-29 00:00:00+14', '2024-02-29 00:00:00', 5)",
    "UPDATE ev SET ts = ts + INTERVAL '1 day 2 hours', tz = tz - INTERVAL '90 minutes' WHERE id IN (1, 3, 7)",
    "UPDATE ev SET t2 = NULL, s = NULL WHERE id = 4",
    "DELETE FROM ev WHERE id = 5",
    "INSERT INTO ev VALUES (8, NULL, '2030-06-15 06:07:08', NULL, '2030-06-15 06:07:08.5+03', NULL, NULL)",
    "UPDATE ev SET d = d + 40, ts = t2 WHERE id = 6",
]

# expressions whose values (and types, as Python reads them) are PostgreSQL's
SAME = [
    # timestamp - timestamp is an interval; with a date, a timestamp (with or without a zone)
    "ts - t2",
    "t2 - ts",
    "tz - ts",
    "ts - d",
    "CAST(ts - t2 AS TEXT)",
    "(ts - t2) > INTERVAL '1 month'",
    "(ts - t2) <= INTERVAL '25 hours'",
    "(ts - t2) = INTERVAL '1 day 2 hours'",
    "ts - t2 < t2 - ts",
    "ts + (ts - t2)",
    "d + (ts - t2)",
    "tz - (ts - t2)",
    "EXTRACT(EPOCH FROM ts - t2)",
    "EXTRACT(DAY FROM t2 - ts)",
    "EXTRACT(HOUR FROM t2 - ts)",
    "EXTRACT(MINUTE FROM ts - t2)",
    "EXTRACT(SECOND FROM ts - t2)",
    "date_part('epoch', ts - t2)",
    "-(ts - t2)",
    # interval constants of several units, added to dates and timestamps
    "ts + INTERVAL '1 day 2 hours'",
    "ts - INTERVAL '1 year 2 mons 3 days 04:05:06'",
    "ts + INTERVAL '90 minutes'",
    "ts + INTERVAL '1.5 days'",
    "ts + INTERVAL '1.5 months'",
    "ts - INTERVAL '2 weeks ago'",
    "ts + INTERVAL '-1 day +02:00'",
    "ts + INTERVAL '1' MONTH",
    "ts + INTERVAL '25 hours'",
    "ts + INTERVAL '0.25 seconds'",
    "ts + '1 day'",
    "ts + CAST('3 hours' AS INTERVAL)",
    "d + INTERVAL '1 day'",
    "d - INTERVAL '1 month'",
    "d + INTERVAL '3 hours'",
    "INTERVAL '1 year' + d",
    "d + n",
    "d - n",
    "d - DATE '2000-01-01'",
    "d - '2000-01-01'",
    "tz + INTERVAL '1 month 1 day'",
    "CAST(INTERVAL '1 day 2 hours' AS TEXT)",
    # TIMESTAMP WITH TIME ZONE (UTC is the session's zone)
    "tz",
    "CAST(tz AS TEXT)",
    "CAST(tz AS DATE)",
    "CAST(tz AS TIMESTAMP)",
    "CAST(ts AS TIMESTAMPTZ)",
    "CAST(d AS TIMESTAMP WITH TIME ZONE)",
    "tz = ts",
    "tz < TIMESTAMPTZ '2020-12-31 23:59:59-05'",
    "tz > '2024-01-01 09:00:00+01'",
    "tz AT TIME ZONE 'Europe/Paris'",
    "tz AT TIME ZONE 'America/New_York'",
    "ts AT TIME ZONE 'UTC'",
    "CASE WHEN n > 0 THEN tz ELSE ts END",
    "COALESCE(tz, ts, d)",
    "date_trunc('month', tz)",
    "date_trunc('week', d)",
    "date_trunc('hour', ts)",
    # EXTRACT and date_part
    "EXTRACT(EPOCH FROM ts)",
    "EXTRACT(EPOCH FROM tz)",
    "EXTRACT(EPOCH FROM d)",
    "EXTRACT(WEEK FROM d)",
    "EXTRACT(WEEK FROM ts)",
    "EXTRACT(ISOYEAR FROM d)",
    "EXTRACT(ISODOW FROM d)",
    "EXTRACT(DOW FROM ts)",
    "EXTRACT(DOY FROM tz)",
    "EXTRACT(QUARTER FROM d)",
    "EXTRACT(YEAR FROM tz)",
    "EXTRACT(DECADE FROM d)",
    "EXTRACT(CENTURY FROM ts)",
    "EXTRACT(MILLENNIUM FROM d)",
    "EXTRACT(MILLISECOND FROM ts)",
    "EXTRACT(MICROSECONDS FROM ts)",
    "EXTRACT(SECOND FROM tz)",
    "date_part('epoch', ts)",
    "date_part('week', d)",
    "date_part('isodow', ts)",
    "date_part('dow', d)",
    "date_part('doy', ts)",
    "date_part('quarter', tz)",
    "date_part('hour', d)",
    "date_part('second', ts)",
    # to_char
    "to_char(ts, 'YYYY-MM-DD HH24:MI:SS.MS')",
    "to_char(ts, 'YY YYY Y MM DD DDD D ID IW Q')",
    "to_char(ts, 'HH12 HH am AM a.m. P.M. pm')",
    "to_char(ts, 'Mon MON mon Month MONTH month|')",
    "to_char(ts, 'Dy DY dy Day DAY day|')",
    "to_char(ts, 'FMMonth FMDay FMDD FMHH12 FMMM FMDDD')",
    "to_char(tz, 'YYYY-MM-DD\"T\"HH24:MI:SS.US')",
    'to_char(d, \'"Quarter" Q "of" YYYY, "week" IW\')',
    "to_char(ts, 'J SSSS WW W IYYY IY RM rm CC Y,YYY FF1 FF3 FF6 AD bc')",
    "to_char(ts, 'Hello \\\"x\\\" YYYY')",
    "to_char(d, 'yyyy/mm/dd hh24:mi:ss')",
    "to_char(ts, 'DDth MMTH Qth IWth CCth HH12th FF3th, TMMonth TMDAY TMmon FMDDth')",
    # to_date and to_timestamp (to_timestamp is a TIMESTAMP WITH TIME ZONE)
    "to_date(s, 'YYYY-MM-DD')",
    "to_timestamp(s, 'YYYY-MM-DD HH24:MI:SS')",
    "to_date(CAST(d AS TEXT), 'YYYY-MM-DD')",
    "to_timestamp(to_char(ts, 'DD Mon YYYY HH12:MI:SS.US AM'), 'DD Mon YYYY HH12:MI:SS.US AM')",
    "to_date(to_char(d, 'FMMonth DD, YYYY'), 'Month DD, YYYY')",
    "to_date(to_char(d, 'YYYYMMDD'), 'YYYYMMDD')",
    "to_date(to_char(d, 'YY-DDD'), 'YY-DDD')",
    "to_timestamp(n * 86400.5)",
    "to_timestamp(EXTRACT(EPOCH FROM ts))",
]

# one-shot queries only (PostgreSQL's answer to compare with, without a table)
CONSTANTS = [
    "SELECT INTERVAL '1 day 2 hours', INTERVAL '90 minutes', INTERVAL '1' DAY, INTERVAL '2' HOUR",
    "SELECT CAST(INTERVAL '1 year 2 mons 3 days 04:05:06' AS TEXT), CAST(INTERVAL '25 hours' AS TEXT)",
    "SELECT CAST(INTERVAL '-1 day 2 hours' AS TEXT), CAST(INTERVAL '1.5 months' AS TEXT), "
    "CAST(INTERVAL '1 day 2 hours' DAY AS TEXT), CAST(INTERVAL '1.5' HOUR AS TEXT)",
    "SELECT TIMESTAMP '2024-01-02 01:00' - TIMESTAMP '2024-01-01', DATE '2024-03-01' - DATE '2024-02-01'",
    "SELECT CAST(TIMESTAMP '2024-01-01' - TIMESTAMP '2024-01-02 01:00:00.5' AS TEXT)",
    "SELECT TIMESTAMP '2024-01-31 10:00' + INTERVAL '1 month', DATE '2024-01-31' + INTERVAL '1 month'",
    "SELECT TIMESTAMPTZ '2024-01-01 10:00:00+02', TIMESTAMP WITH TIME ZONE '2024-01-01 10:00:00-03:30', "
    "TIMESTAMP '2024-01-01 10:00:00+02', CAST('2024-06-01 10:00 UTC' AS TIMESTAMPTZ)",
    "SELECT INTERVAL '1 day' = '24 hours', INTERVAL '1 mon' = INTERVAL '30 days', "
    "INTERVAL '1 day' < '25 hours'",
    "SELECT to_date('2024-1-5', 'YYYY-MM-DD'), to_date('20240105', 'YYYYMMDD'), "
    "to_date('5 Mar 24', 'DD Mon YY')",
    "SELECT to_timestamp('05 March 2024 3:04 PM', 'DD Month YYYY HH:MI AM'), to_timestamp(1704103200.5)",
    "SELECT to_timestamp('2024-03-05 12:34:56.789', 'YYYY-MM-DD HH24:MI:SS.MS'), "
    "to_date('2024 060', 'YYYY DDD'), to_date('  2024-03/05', 'YYYY-MM-DD')",
    "SELECT to_date('Tuesday, 2024-03-05', 'Day, YYYY-MM-DD'), to_date('2024-03-05 trailing', 'YYYY-MM-DD'), "
    "to_date('2024', 'YYYY-MM-DD'), to_timestamp('12:30 am 2024', 'HH12:MI am YYYY')",
    "SELECT to_char(TIMESTAMP '2024-03-05 00:00:00', 'HH12 AM'), to_char(TIMESTAMP '2024-03-05 12:00:00', "
    "'HH12 PM'), to_char(DATE '0001-01-01', 'YYYY-MM-DD AD J')",
    "SELECT EXTRACT(QUARTER FROM INTERVAL '1 day'), EXTRACT(EPOCH FROM INTERVAL '1 day 2 hours'), "
    "date_part('epoch', INTERVAL '1 day')",
    "SELECT EXTRACT(MONTH FROM INTERVAL '1 year 14 mons'), EXTRACT(YEAR FROM INTERVAL '-27 months'), "
    "EXTRACT(EPOCH FROM INTERVAL '1 year 2 mons 3 days 04:05:06.5'), EXTRACT(SECOND FROM INTERVAL '-90.25 s'), "
    "EXTRACT(QUARTER FROM INTERVAL '8 mons'), EXTRACT(CENTURY FROM INTERVAL '250 years'), "
    "date_part('millisecond', INTERVAL '1.5 seconds'), EXTRACT(MINUTE FROM INTERVAL '-75 minutes')",
    "SELECT 1 WHERE 5 IN ('5', '6')",
    "SELECT DATE '2024-01-02' - '2024-01-01', TIMESTAMP '2024-01-02' - '2024-01-01 12:00'",
]

# errors PostgreSQL gives too: (expression over ev, PostgreSQL's message)
SAME_ERRORS = [
    ("EXTRACT(HOUR FROM d)", 'unit "hour" not supported for type date'),
    ("EXTRACT(DOW FROM ts - t2)", 'unit "dow" not supported for type interval'),
    ("to_date('2024-13-01', 'YYYY-MM-DD')", 'date/time field value out of range: "2024-13-01"'),
    ("to_date('2024-02-30', 'YYYY-MM-DD')", 'date/time field value out of range: "2024-02-30"'),
    ("to_date('20x4-01-01', 'YYYY-MM-DD')", 'invalid value "x4" for "MM"'),
    ("to_timestamp('13:00 PM 2024', 'HH12:MI AM YYYY')", 'hour "13" is invalid for the 12-hour clock'),
    ("to_date('2024 Foo 01', 'YYYY Mon DD')", 'invalid value "Foo" for "Mon"'),
    ("to_date('20240', 'YYYYMMDD')", 'source string too short for "MM" formatting field'),
    ("to_date('2024-01-01 02', 'YYYY-MM-DD MM')", 'conflicting values for "MM" field in formatting string'),
    ("to_date('2024---03/05', 'YYYY-MM-DD')", 'invalid value "--" for "MM"'),
    ("DATE '2024-01-01' + '1'", "operator is not unique: date + unknown"),
    ("n = 'x'", 'invalid input syntax for type integer: "x"'),
    ("INTERVAL 'x'", 'invalid input syntax for type interval: "x"'),
    ("INTERVAL '1 day 1 day'", 'invalid input syntax for type interval: "1 day 1 day"'),
]


@pytest.fixture(scope="module")
def pg():
    from connectors.postgres.cluster import LocalCluster

    with LocalCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE surface TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
        dsn = cluster.dsn.replace("dbname=postgres", "dbname=surface")
        with psycopg.connect(dsn, autocommit=True, options="-c TimeZone=UTC") as conn:
            conn.execute(TABLE)
            conn.execute(f"INSERT INTO ev VALUES {', '.join(ROWS)}")
            yield conn


@pytest.fixture(scope="module")
def db():
    conn = ivm.connect()
    conn.execute(TABLE)
    conn.execute(f"INSERT INTO ev VALUES {', '.join(ROWS)}")
    return conn


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (int, decimal.Decimal)) and isinstance(b, (int, decimal.Decimal)):
        return a == b and (isinstance(a, bool) == isinstance(b, bool))
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and a == b
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a == b and (a.tzinfo is None) == (b.tzinfo is None)
    return type(a) is type(b) and a == b


def _rows_match(got: list[tuple], want: list[tuple]) -> bool:
    return len(got) == len(want) and all(
        len(g) == len(w) and all(_same(x, y) for x, y in zip(g, w, strict=True))
        for g, w in zip(got, want, strict=True)
    )


def test_one_shot_queries_answer_as_postgresql(pg, db):
    wrong = []
    for sql in [f"SELECT id, {expr} FROM ev ORDER BY id" for expr in SAME] + CONSTANTS:
        want = pg.execute(sql).fetchall()
        try:
            got = db.execute(sql).fetchall()
        except ivm.Error as err:
            got = [f"{type(err).__name__}: {err}"]
        if not _rows_match(got, want):
            wrong.append(f"{sql}:\n ivm {got}\n  pg {want}")
    assert not wrong, "\n".join(wrong)


def test_views_stay_postgresql_s_answer_through_changes(pg):
    db = ivm.connect()
    db.execute(TABLE)
    db.execute(f"INSERT INTO ev VALUES {', '.join(ROWS)}")
    views = {f"v{i}": f"SELECT id, {expr} AS x FROM ev" for i, expr in enumerate(SAME)}
    views["grouped"] = "SELECT ts - t2 AS span, COUNT(*) AS n, MIN(tz) AS first FROM ev GROUP BY ts - t2"
    views["extremes"] = "SELECT MIN(ts - t2) AS lo, MAX(ts - t2) AS hi, COUNT(DISTINCT ts - t2) AS k FROM ev"
    views["recent"] = "SELECT id FROM ev WHERE tz > TIMESTAMPTZ '2021-01-01 03:00+02' AND ts - t2 < '30 days'"
    for name, sql in views.items():
        db.execute(f"CREATE VIEW {name} AS {sql}")
    pg.execute("BEGIN")
    try:
        for change in [None, *CHANGES]:
            if change is not None:
                db.execute(change)
                pg.execute(change)
            for name, sql in views.items():
                want = sorted(pg.execute(sql).fetchall(), key=repr)
                got = sorted(db.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
                assert _rows_match(got, want), f"after {change!r}, {sql}:\n ivm {got}\n  pg {want}"
    finally:
        pg.execute("ROLLBACK")


@pytest.mark.parametrize(("expr", "message"), SAME_ERRORS, ids=[m[:40] for _, m in SAME_ERRORS])
def test_errors_are_postgresql_s(pg, db, expr, message):
    sql = f"SELECT id, {expr} FROM ev"
    with pytest.raises(psycopg.Error) as theirs:
        pg.execute(sql)
    assert message in str(theirs.value), str(theirs.value)  # the message checked here is PostgreSQL's own
    with pytest.raises(ivm.Error) as ours:
        db.execute(sql)
    assert message in ours.value.message


def test_a_quoted_number_is_read_as_the_column_s_type(pg, db):
    for sql in [
        "SELECT id FROM ev WHERE n = '3'",
        "SELECT id FROM ev WHERE n IN ('3', ' -2 ') ORDER BY id",
        "SELECT id, n + '10', COALESCE(n, '0') FROM ev ORDER BY id",
        "SELECT id FROM ev WHERE n BETWEEN '0' AND '5' ORDER BY id",
    ]:
        assert db.execute(sql).fetchall() == pg.execute(sql).fetchall(), sql
    with pytest.raises(DataError) as err:
        db.execute("SELECT id FROM ev WHERE n = 'x'")
    assert err.value.message.startswith('invalid input syntax for type integer: "x"')
    assert (err.value.line, err.value.col) == (1, 29)
    with pytest.raises(DataError, match='value "3000000000" is out of range for type integer'):
        db.execute("SELECT id FROM ev WHERE n = '3000000000'")
    with pytest.raises(DataError, match='invalid input syntax for type integer: "1.5"'):
        db.execute("SELECT id FROM ev WHERE n = '1.5'")
    conn = ivm.connect()
    conn.execute("CREATE TABLE q (k INTEGER, v DECIMAL(6,2))")
    conn.execute("INSERT INTO q (k, v) VALUES ('12', '1.25')")
    conn.execute("UPDATE q SET k = '13' WHERE k = '12'")
    assert conn.execute("SELECT k, v FROM q WHERE v = '1.250'").fetchall() == [(13, decimal.Decimal("1.25"))]
    assert conn.execute("SELECT k FROM q WHERE v = '1.251'").fetchall() == []  # not rounded to the column's
    with pytest.raises(DataError) as err:
        conn.execute("INSERT INTO q (k) VALUES ('x')")
    assert 'invalid input syntax for type integer: "x"' in err.value.message
    assert (err.value.line, err.value.col) == (1, 27)


def test_now_is_the_transaction_s_start_for_every_row_and_call():
    db = ivm.connect()
    db.execute(TABLE)
    db.execute(f"INSERT INTO ev VALUES {', '.join(ROWS)}")
    rows = db.execute(
        "SELECT now(), current_timestamp, transaction_timestamp(), current_date, localtimestamp FROM ev"
    ).fetchall()
    assert len(rows) == len(ROWS) and len(set(rows)) == 1  # one value for every row and call
    now, current, transaction, today, local = rows[0]
    assert now == current == transaction and now.tzinfo is not None
    assert today == now.astimezone(dt.UTC).date() and local == now.astimezone(dt.UTC).replace(tzinfo=None)
    assert abs(now - dt.datetime.now(dt.UTC)) < dt.timedelta(hours=1)  # plausible, not timed
    db.execute("BEGIN")
    first = db.execute("SELECT now()").fetchall()[0][0]
    second = db.execute("SELECT now(), localtimestamp").fetchall()[0]
    db.execute("COMMIT")
    assert first == second[0] and second[1] == first.replace(tzinfo=None)  # the transaction's start, both times
    later = db.execute("SELECT now()").fetchall()[0][0]
    assert later >= first
    db.execute("UPDATE ev SET tz = now(), ts = localtimestamp - INTERVAL '1 day' WHERE id = 1")
    tz, ts = db.execute("SELECT tz, ts FROM ev WHERE id = 1").fetchall()[0]
    assert tz.replace(tzinfo=None) - ts == dt.timedelta(days=1)
    assert db.execute("SELECT id FROM ev WHERE id = 1 AND tz <= now() AND ts < current_date").fetchall() == [
        (1,)
    ]


REFUSED = [  # (statement, words of the message, the text the error points at)
    ("CREATE VIEW w AS SELECT id, now() AS t FROM ev", "now() is not allowed in a view", "now()"),
    (
        "CREATE MATERIALIZED VIEW w AS SELECT id FROM ev WHERE ts > current_timestamp - INTERVAL '1 day'",
        "time-dependent views are not maintained",
        "current_timestamp",
    ),
    (
        "CREATE VIEW w AS SELECT id FROM ev WHERE d = current_date",
        "current_date is not allowed in a view",
        None,
    ),
    (
        "CREATE VIEW w AS SELECT localtimestamp AS t",
        "localtimestamp is not allowed in a view",
        "localtimestamp",
    ),
    (
        "CREATE VIEW w AS SELECT transaction_timestamp() AS t",
        "not allowed in a view",
        "transaction_timestamp()",
    ),
    ("EXPLAIN CREATE VIEW w AS SELECT now() AS t", "now() is not allowed in a view", None),
    ("CREATE VIEW w AS SELECT id, random() AS r FROM ev", "function random() is not supported", "random()"),
    (
        "CREATE TABLE c (t TIMESTAMPTZ CHECK (t < now()))",
        "now() is not supported in a CHECK constraint",
        "now()",
    ),
    ("SELECT current_time", "current_time", "current_time"),
    ("SELECT clock_timestamp()", "function clock_timestamp() is not supported", "clock_timestamp()"),
    ("SELECT id, INTERVAL '1 month' FROM ev", "INTERVAL '1 month' as a value is not supported", "'1 month'"),
    ("SELECT id, INTERVAL '25 hours' AS x FROM ev", "as a value is not supported", "'25 hours'"),
    ("SELECT COALESCE(ts - t2, INTERVAL '1 mon') FROM ev", "as a value is not supported", "'1 mon'"),
    ("SELECT (ts - t2) + (ts - t2) FROM ev", "operator + of two intervals is not supported", "(ts - t2) +"),
    ("SELECT (ts - t2) * 2 FROM ev", "operator * of INTERVAL and INTEGER is not supported", "(ts - t2) *"),
    ("SELECT SUM(ts - t2) FROM ev", "SUM of intervals is not supported", "SUM(ts - t2)"),
    ("SELECT AVG(ts - t2) FROM ev", "AVG of intervals is not supported", "AVG(ts - t2)"),
    ("SELECT ts + INTERVAL '1-2' FROM ev", "ISO 8601 and SQL standard forms are not supported", "'1-2'"),
    ("SELECT ts + INTERVAL 'P1D' FROM ev", "ISO 8601 and SQL standard forms are not supported", "'P1D'"),
    ("SELECT ts + INTERVAL '1' DAY TO HOUR FROM ev", "DAY TO HOUR", None),
    ("SELECT ts AT TIME ZONE 'Europe/Paris' FROM ev", "TIMESTAMP AT TIME ZONE 'Europe/Paris'", "ts AT"),
    (
        "SELECT EXTRACT(JULIAN FROM ts) FROM ev",
        "EXTRACT(JULIAN FROM TIMESTAMP) is not supported",
        "EXTRACT(JULIAN FROM ts)",
    ),
    ("SELECT EXTRACT(TIMEZONE FROM tz) FROM ev", "is not supported", "EXTRACT(TIMEZONE FROM tz)"),
    ("SELECT to_char(ts, 'HH24 TZ') FROM ev", "the template pattern 'TZ' is not supported", "'HH24 TZ'"),
    ("SELECT to_char(ts, 'DDSP') FROM ev", "the template suffix 'SP' is not supported", "'DDSP'"),
    (
        "SELECT to_date(s, 'YYYY-MM-DDth') FROM ev",
        "the template suffix 'th' is not supported",
        "'YYYY-MM-DDth'",
    ),
    ("SELECT to_date(s, 'TMMonth YYYY') FROM ev", "the template prefix TM", "'TMMonth YYYY'"),
    ("SELECT to_char(n, '999') FROM ev", "to_char() of numbers is not supported", "to_char(n"),
    ("SELECT to_char(ts, s) FROM ev", "to_char() needs a constant template", "s)"),
    ("SELECT to_date(s, 'IYYY-IW') FROM ev", "the template pattern 'IYYY' is not supported", "'IYYY-IW'"),
    ("SELECT to_date(s, 'MM-DD') FROM ev", "without a year in its template", "'MM-DD'"),
    ("SELECT to_timestamp(s, 'YYYY-MM-DD TZH') FROM ev", "the template pattern 'TZH'", "'YYYY-MM-DD TZH'"),
    ("CREATE TABLE iv (x INTERVAL)", "type INTERVAL is not supported for a column", "INTERVAL"),
    ("CREATE TABLE tt (x TIME)", "type TIME is not supported", "TIME"),
    (
        "SELECT CAST(s AS INTERVAL) FROM ev",
        "CAST of text to INTERVAL is supported for constants only",
        "CAST(s AS INTERVAL)",
    ),
    ("SET TIME ZONE 'Europe/Paris'", "the session time zone is UTC, always", "SET"),
    ("SET timezone = 'America/New_York'", "the session time zone is UTC, always", "timezone"),
    ("INSERT INTO ev (id, tz) VALUES (99, '2024-01-01 10:00 Europe/Paris')", "time zone names", "'2024"),
]


@pytest.mark.parametrize(("sql", "words", "at"), REFUSED, ids=[r[0][:50] for r in REFUSED])
def test_refusals_name_the_construct_and_its_place(db, sql, words, at):
    with pytest.raises((NotSupportedError, ProgrammingError)) as err:
        db.execute(sql)
    assert words in err.value.message, err.value.message
    assert err.value.line == 1 and err.value.col is not None, err.value
    if at is not None:
        start = sql.index(at) + 1
        assert start <= err.value.col < start + len(at), (err.value.col, start)
    assert "w" not in db.views and "c" not in db.tables and "iv" not in db.tables


def test_timestamptz_columns_hold_instants_in_utc(db):
    conn = ivm.connect()
    conn.execute("CREATE TABLE z (k INTEGER PRIMARY KEY, t TIMESTAMP WITH TIME ZONE)")
    conn.execute("INSERT INTO z VALUES (1, '2024-01-01 10:00:00+02'), (2, '2024-01-01 08:00:00'), (3, NULL)")
    conn.execute("CREATE VIEW same_instant AS SELECT t, COUNT(*) AS n FROM z GROUP BY t")
    utc = dt.datetime(2024, 1, 1, 8, tzinfo=dt.UTC)
    assert conn.execute("SELECT * FROM same_instant ORDER BY n").fetchall() == [(None, 1), (utc, 2)]
    table = conn.execute("SELECT t FROM z WHERE k = 1").fetch_arrow()
    assert str(table.schema.field("t").type) == "timestamp[us, tz=UTC]"
    assert conn.description[0][1] == "TIMESTAMPTZ"
    conn.insert_arrow("z", table.append_column("k", [[4]]).select(["k", "t"]))
    assert conn.execute("SELECT COUNT(*) FROM z WHERE t = TIMESTAMPTZ '2024-01-01 11:00+03'").fetchall() == [
        (3,)
    ]
    with pytest.raises(NotSupportedError, match="time zone names in timestamps are not supported"):
        conn.execute("INSERT INTO z VALUES (9, '2024-01-01 10:00 Europe/Paris')")
    for utc in ("SET TIME ZONE 'UTC'", "SET timezone = 'UTC'", "SET TimeZone TO 'Etc/UTC'"):
        conn.execute(utc)  # the session's time zone already
        assert conn.statusmessage == "SET"


def test_parameters_pass_instants_and_intervals_as_psycopg_does(pg):
    at = dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    span = dt.timedelta(days=1, hours=2)
    sql = "SELECT id, tz = %s, ts + %s, ts - t2 > %s, %s FROM ev ORDER BY id"
    params = (at, span, dt.timedelta(hours=-30), at)
    db = ivm.connect()
    db.execute(TABLE)
    db.execute(f"INSERT INTO ev VALUES {', '.join(ROWS)}")
    assert _rows_match(db.execute(sql, params).fetchall(), pg.execute(sql, params).fetchall())


def test_default_now_is_the_inserting_transaction_s_start(tmp_path):
    path = str(tmp_path / "db")
    db = ivm.connect(path)
    db.execute("CREATE TABLE log (k INTEGER, at TIMESTAMPTZ DEFAULT now(), day DATE DEFAULT current_date)")
    db.execute("INSERT INTO log (k) VALUES (1), (2)")
    db.execute("BEGIN")
    db.execute("INSERT INTO log (k) VALUES (3)")
    db.execute("INSERT INTO log VALUES (4, DEFAULT, DEFAULT)")
    started = db.execute("SELECT now()").fetchall()[0][0]
    db.execute("COMMIT")
    rows = db.execute("SELECT k, at, day FROM log ORDER BY k").fetchall()
    assert rows[0][1] == rows[1][1] <= rows[2][1] == rows[3][1] == started  # one value per statement, per block
    assert all(day == at.date() for _, at, day in rows)
    db.close()
    db = ivm.connect(path)  # the table is made again with its DEFAULT, and the rows are as they were
    assert db.execute("SELECT k, at, day FROM log ORDER BY k").fetchall() == rows
    db.execute("INSERT INTO log (k) VALUES (5)")
    assert db.execute("SELECT at >= %s FROM log WHERE k = 5", (started,)).fetchall() == [(True,)]
    db.close()
    with pytest.raises(ProgrammingError) as err:
        ivm.connect().execute("CREATE TABLE bad (x INTEGER DEFAULT now())")
    assert "is of type INTEGER but the value is of type TIMESTAMPTZ" in err.value.message
    assert (err.value.line, err.value.col) == (1, 37)
