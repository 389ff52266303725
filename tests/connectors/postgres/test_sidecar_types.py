"""A type matrix of the sidecar against a real PostgreSQL: one table with a column of every built-in type a
table can hold, NULLs and edge values in each (integer extremes, float NaN and infinities, numeric NaN, char
padding, unicode, dates and timestamps at ±infinity, in years 1 and 9999 and BC), in the snapshot and in the
stream.

- A view reading a column of a type ivm represents equals PostgreSQL's answer, except while a value ivm cannot
  hold (numeric NaN, a date or timestamp at infinity or BC) is in a column it reads: it is then in error, naming
  the table, the row's key and the column, never showing a wrong value, and exact again once the value is gone.
- A view reading a column of any other type is refused at start, naming the column.
- A view reading none of those columns works and is exact, whatever else the table holds.

The scenario runs once (one database, one sidecar for every view); its phases are checked view by view.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections import Counter

import psycopg
import pytest

from connectors.postgres._catalog import ConfigError, parse_views
from connectors.postgres.sidecar import Sidecar
from connectors.postgres.workload import bump_marker, mismatches, wait_for_marker
from tests.connectors.postgres.test_sidecar_cases import MARKER, MARKER_VIEW, running

# -- the table ------------------------------------------------------------------------------------------------
# column -> its type; the first group ivm represents, the second it does not
SUPPORTED = {
    "i2": "smallint",
    "i4": "integer",
    "i8": "bigint",
    "n": "numeric(12,3)",
    "r": "real",
    "d": "double precision",
    "tx": "text",
    "vc": "varchar(5)",
    "ch": "char(4)",
    "dt": "date",
    "ts": "timestamp",
    "tz": "timestamptz",
    "bo": "boolean",
}
UNSUPPORTED = {  # column -> (its type, how Postgres shows it in the message)
    "nu": ("numeric", "numeric without a precision"),
    "nw": ("numeric(30,5)", "numeric(30,5)"),
    "tm": ("time", "time without time zone"),
    "tt": ("timetz", "time with time zone"),
    "iv": ("interval", "interval"),
    "uu": ("uuid", "uuid"),
    "js": ("json", "json"),
    "jb": ("jsonb", "jsonb"),
    "bin": ("bytea", "bytea"),
    "ar": ("integer[]", "integer[]"),
    "ta": ("text[]", "text[]"),
    "en": ("mood", "mood"),
    "ip": ("inet", "inet"),
    "mo": ("money", "money"),
    "po": ("posint", "posint"),
    "bp": ("bpchar", "bpchar"),  # without a length: values keep their own trailing spaces
}
# the table's columns in order: the two kinds interleaved, so that the engine's columns are not the table's
COLUMNS = ["id"] + [c for pair in itertools.zip_longest(UNSUPPORTED, SUPPORTED) for c in pair if c is not None]
TYPES = {c: SUPPORTED.get(c) or UNSUPPORTED[c][0] for c in COLUMNS[1:]}

DDL = (
    MARKER
    + "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); CREATE DOMAIN posint AS integer CHECK (VALUE > 0);\n"
    + "CREATE TABLE m (id integer PRIMARY KEY, "
    + ", ".join(f"{c} {t}" for c, t in TYPES.items())
    + ");\n"
    # no primary key: its bad values are counted, not followed by key
    + "CREATE TABLE f (k integer, n numeric(6,2), dt date); ALTER TABLE f REPLICA IDENTITY FULL;\n"
)


def _row(id: int, **values: str) -> str:
    """A row of ``m`` as a VALUES tuple: the given SQL literals, NULL elsewhere."""
    unknown = set(values) - set(COLUMNS)
    assert not unknown, unknown
    return "(" + ", ".join([str(id)] + [values.get(c, "NULL") for c in COLUMNS[1:]]) + ")"


# values of the unsupported columns: a view reading none of them must not care
OTHERS = dict(
    nu="'Infinity'",
    nw="12345678901234567890.12345",
    tm="'24:00:00'",
    tt="'12:34:56.789+05:30'",
    iv="'-1 mon 2 days 03:04:05.5'",
    uu="'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
    js="'{\"a\": [1, 2.50, null]}'",
    jb='\'{"b": "ü"}\'',
    bin="'\\x00ff0a'",
    ar="'{1,NULL,3}'",
    ta='\'{"x,y",NULL,""}\'',
    en="'happy'",
    ip="'192.168.0.1/24'",
    mo="12.34",
    po="7",
    bp="'ab  '",
)

SNAPSHOT_ROWS = [
    _row(1),  # NULL in every column
    _row(
        2,
        i2="1",
        i4="2",
        i8="3",
        n="4.5",
        r="0.1",
        d="2.2",
        tx="'plain'",
        vc="'abc'",
        ch="'ab'",
        dt="'2024-01-02'",
        ts="'2024-01-02 03:04:05.678901'",
        tz="'2024-01-02 03:04:05.5+05:30'",
        bo="true",
        **OTHERS,
    ),
    _row(  # the smallest values
        3,
        i2="-32768",
        i4="-2147483648",
        i8="-9223372036854775808",
        n="-999999999.999",
        r="'-Infinity'",
        d="'-Infinity'",
        tx="''",
        vc="''",
        ch="''",
        dt="'0001-01-01'",
        ts="'0001-01-01 00:00:00'",
        tz="'0001-01-01 00:00:00+00'",
        bo="false",
        nu="'NaN'",
        tm="'00:00:00'",
        iv="'0'",
        js="'null'",
        jb="'[]'",
        bin="''",
        ar="'{}'",
        en="'sad'",
        po="1",
    ),
    _row(  # the largest values
        4,
        i2="32767",
        i4="2147483647",
        i8="9223372036854775807",
        n="999999999.999",
        r="'Infinity'",
        d="'Infinity'",
        tx="E'comma, \"quote\"\\nnewline\\\\back\\ttab \U0001f642'",
        vc="'ünïcø'",
        ch="'abcd'",
        dt="'9999-12-31'",
        ts="'9999-12-31 23:59:59.999999'",
        tz="'9999-12-31 23:59:59.999999+00'",
        bo="true",
        **OTHERS,
    ),
    _row(  # NaNs: float NaN is a value ivm holds, numeric NaN is not
        5,
        i2="0",
        i4="0",
        i8="0",
        n="'NaN'",
        r="'NaN'",
        d="'NaN'",
        tx="' both ends '",
        vc="'a b  '",
        ch="' a'",
        dt="'2000-02-29'",
        ts="'2000-02-29 12:00:00'",
        tz="'2000-02-29 12:00:00-08'",
        bo="false",
    ),
    _row(6, i4="6", n="0.001", dt="'infinity'", ts="'-infinity'", tz="'infinity'", bo="true"),
    _row(7, i4="-7", n="-0.001", dt="'-infinity'", ts="'infinity'", tz="'-infinity'", bo="false"),
    _row(  # tiny, huge and negative zero floats
        8,
        i2="-1",
        i4="-1",
        i8="-1",
        n="0",
        r="1.4e-45",
        d="4.9e-324",
        tx="'ab'",
        vc="'ab'",
        ch="'ab  '",
        dt="'1970-01-01'",
        ts="'1970-01-01 00:00:00'",
        tz="'1969-12-31 23:59:59.999999+00'",
        bo="true",
        **OTHERS,
    ),
    _row(9, r="3.4028235e38", d="1.7976931348623157e308", tx="'-0'", ch="'x'", n="-0.5", **OTHERS),
    _row(10, r="'-0'", d="'-0'", n="0.5", tx="'NULL'", vc="'\\N'", ch="'\"'", bo="false"),
]
SNAPSHOT = (
    f"INSERT INTO m VALUES {', '.join(SNAPSHOT_ROWS)};\n"
    "INSERT INTO f VALUES (1, 1.5, '2024-01-01'), (1, 1.5, '2024-01-01'), (NULL, NULL, NULL), "
    "(3, -2.25, 'infinity');\n"
)

# a value ivm cannot hold, per column, as PostgreSQL finds it
BAD = {
    "n": "n = 'NaN'",
    "dt": "NOT isfinite(dt) OR dt < '0001-01-01'",
    "ts": "NOT isfinite(ts) OR ts < '0001-01-01'",
    "tz": "NOT isfinite(tz) OR tz < '0001-01-01 00:00:00+00'",
}
BAD_F = {"n": "n = 'NaN'", "dt": "NOT isfinite(dt)"}


# -- the views: name -> (table, columns it reads, SQL) ------------------------------------------------------
VIEWS: dict[str, tuple[str, set[str], str]] = {
    **{f"v_{c}": ("m", {c}, f"SELECT id, {c} FROM m") for c in SUPPORTED},
    "e_int": (
        "m",
        {"i2", "i4", "i8"},
        "SELECT id, i4 % 7 AS m7, i4 / 7 AS q7, i8 > i4 AS gt, i2 = i4 AS eq FROM m",
    ),
    "e_num": ("m", {"n"}, "SELECT id, n + 1 AS n1, n * 2 AS n2, n > 0 AS pos, ROUND(n, 1) AS r1 FROM m"),
    "e_float": (
        "m",
        {"r", "d"},
        "SELECT id, r + 0.0 AS widened, r = 0.1 AS tenth, -d AS neg, d IS NULL AS missing FROM m",
    ),
    "e_nan_order": ("m", {"r", "d"}, "SELECT id, d > 0 AS pos, r = r AS same, r < d AS lt FROM m"),
    "e_float_minmax": ("m", {"bo", "r", "d"}, "SELECT bo, MIN(d) AS lo, MAX(r) AS hi FROM m GROUP BY bo"),
    "e_float_top": ("m", {"d"}, "SELECT id, d FROM m WHERE d IS NOT NULL ORDER BY d DESC LIMIT 2"),
    "e_text": (
        "m",
        {"tx", "vc"},
        "SELECT id, length(tx) AS len, tx || '|' AS bar, tx = '' AS empty, length(vc) AS vlen, "
        "CAST(vc AS VARCHAR(3)) AS cut FROM m",
    ),
    "e_char": (
        "m",
        {"ch", "vc"},
        "SELECT id, ch, length(ch) AS len, ch = 'ab' AS is_ab, vc || ch AS cat, ch || '|' AS bar, "
        "ch LIKE '_ %' AS padded, concat(ch, '|') AS written, ch = vc AS same FROM m",
    ),
    "e_date": (
        "m",
        {"dt", "ts"},
        "SELECT id, dt < DATE '2000-01-01' AS early, EXTRACT(YEAR FROM dt) AS y, "
        "ts >= TIMESTAMP '2000-01-01 00:00:00' AS late, CAST(ts AS DATE) AS day FROM m",
    ),
    "e_tz": (
        "m",
        {"tz"},
        "SELECT id, tz IS NULL AS missing, EXTRACT(YEAR FROM tz) AS y, date_trunc('day', tz) AS day FROM m",
    ),
    "e_bool": (
        "m",
        {"bo", "i4"},
        "SELECT id, NOT bo AS nb, bo IS NULL AS unknown, bo AND i4 > 0 AS both FROM m",
    ),
    "agg_ok": (
        "m",
        {"bo", "ch", "i4", "i8", "tx"},
        "SELECT bo, COUNT(*) AS rows, COUNT(ch) AS chs, MIN(i8) AS lo, MAX(i8) AS hi, SUM(i4) AS s, "
        "MAX(length(tx)) AS longest, MAX(ch) AS top_ch FROM m GROUP BY bo",
    ),
    "agg_bad": (
        "m",
        {"bo", "n", "dt", "ts"},
        "SELECT bo, COUNT(n) AS ns, SUM(n) AS total, MIN(dt) AS first_day, MAX(ts) AS last_ts "
        "FROM m GROUP BY bo",
    ),
    # read no column of a type ivm does not represent nor one holding a value it cannot hold
    "v_count": ("m", set(), "SELECT COUNT(*) AS n FROM m"),
    "v_id": ("m", set(), "SELECT id FROM m"),
    "f_n": ("f", {"k", "n"}, "SELECT k, n FROM f"),
    "f_dt": ("f", {"k", "dt"}, "SELECT k, dt FROM f"),
    "f_k": ("f", {"k"}, "SELECT k, COUNT(*) AS c FROM f GROUP BY k"),
}
VIEWS_FILE = MARKER_VIEW + "".join(f"CREATE MATERIALIZED VIEW {v} AS {q};\n" for v, (_, _, q) in VIEWS.items())

# The stream, in phases: what is committed before each check.
STREAM = [
    # every snapshot value again (bad values and NULLs too), and values ivm cannot hold that it has not seen
    f"INSERT INTO m SELECT id + 100, {', '.join(COLUMNS[1:])} FROM m",
    "INSERT INTO m (id, n, dt, ts, tz, i4) VALUES (20, 'NaN', '0044-03-15 BC', '4713-01-01 00:00:00 BC', "
    "'0002-06-01 00:00:00+00 BC', 20)",
    "INSERT INTO f VALUES (2, 'NaN', NULL), (2, 'NaN', '2024-02-02'), (NULL, 0.25, '-infinity')",
    # updates and deletes, of rows with and without bad values
    "BEGIN; UPDATE m SET i4 = NULL, tx = 'was ' || tx, ch = 'zz', vc = NULL, r = 'NaN' WHERE id = 2; "
    "UPDATE m SET n = 1.5 WHERE id = 5; "  # its NaN is gone, row 105 keeps one
    "UPDATE m SET dt = '2000-01-01' WHERE id = 6; "  # ts and tz stay at infinity
    "DELETE FROM m WHERE id = 7; "
    "UPDATE m SET id = 30 WHERE id = 106; "  # a row holding bad values changes its key
    "UPDATE m SET i2 = 1, n = 'NaN', bo = true WHERE id = 101; "  # NULLs become values, one of them bad
    "UPDATE m SET r = NULL, d = NULL, i8 = NULL, ch = NULL WHERE id = 104; "
    "UPDATE m SET d = '-0', r = 'Infinity', tx = NULL WHERE id = 1; COMMIT",
    "DELETE FROM f WHERE ctid = (SELECT ctid FROM f WHERE n = 'NaN' LIMIT 1)",  # one of two NaNs left
    "DELETE FROM f WHERE dt = 'infinity'",  # the snapshot's bad value
]
CLEAN = [
    # every bad value goes, by delete, update, key change and update to NULL
    "DELETE FROM m WHERE id IN (105, 20)",
    "UPDATE m SET n = NULL WHERE id = 101",
    "UPDATE m SET ts = '2020-02-02', tz = NULL WHERE id = 6",
    "BEGIN; UPDATE m SET id = 31 WHERE id = 30; UPDATE m SET dt = NULL, ts = NULL, tz = NULL WHERE id = 31; "
    "COMMIT",
    "DELETE FROM m WHERE id = 107",
    "UPDATE f SET n = 2.5 WHERE n = 'NaN'",
    "DELETE FROM f WHERE dt = '-infinity'",
    # bad values that come and go within one transaction
    "BEGIN; INSERT INTO m (id, n) VALUES (40, 'NaN'); DELETE FROM m WHERE id = 40; "
    "INSERT INTO m (id, dt, ts) VALUES (41, 'infinity', '-infinity'); "
    "UPDATE m SET dt = '2001-01-01', ts = '2001-01-01 01:01:01' WHERE id = 41; "
    "INSERT INTO f VALUES (5, 'NaN', NULL); DELETE FROM f WHERE k = 5; COMMIT",
    # and the values ivm holds, changed once more
    "UPDATE m SET r = 0.1, d = 0.1, i2 = 7 WHERE id IN (3, 104)",
]
PHASES = ["snapshot", "stream", "clean"]


def _bad_now(c) -> dict[str, dict[str, set]]:
    """Per table and column, the keys (ids of ``m``; of ``f``, which has none, the number of rows) holding a
    value ivm cannot hold."""
    out: dict[str, dict[str, set]] = {"m": {}, "f": {}}
    for col, pred in BAD.items():
        ids = {r[0] for r in c.execute(f"SELECT id FROM m WHERE {pred}").fetchall()}
        if ids:
            out["m"][col] = ids
    for col, pred in BAD_F.items():
        (n,) = c.execute(f"SELECT count(*) FROM f WHERE {pred}").fetchone()
        if n:
            out["f"][col] = {n}
    return out


def _comparable(row: tuple) -> tuple:
    return tuple("NaN" if isinstance(v, float) and v != v else v for v in row)


def _bad_read(bad: dict, view: str) -> dict[str, set]:
    """The columns ``view`` reads that hold a value ivm cannot hold, with the keys holding one."""
    table, reads, _ = VIEWS[view]
    return {c: keys for c, keys in bad[table].items() if c in reads}


def _record(c, dsn: str) -> dict:
    """What a phase's checks look at, read once the target has caught up with the source."""
    wait_for_marker(dsn, bump_marker(dsn), timeout=60)
    status = {v: (s, e) for v, s, e in c.execute("SELECT view, state, error FROM ivm._ivm_status").fetchall()}
    bad = _bad_now(c)
    exact = {v: q for v, (_, _, q) in VIEWS.items() if not _bad_read(bad, v)}
    wrong = mismatches(dsn, exact)
    # the views in error keyed by id: their rows without a bad value in the target and in Postgres (not the
    # others, which psycopg cannot load: Python has no infinite or BC dates), and those with one in the target
    rows = {}
    for v, (_, _, q) in VIEWS.items():
        if v in exact or not q.startswith("SELECT id"):
            continue
        ids = sorted(set().union(*_bad_read(bad, v).values()))
        got = c.execute(f"SELECT * FROM ivm.{v} WHERE id <> ALL(%s)", (ids,)).fetchall()
        want = c.execute(f"SELECT * FROM ({q}) q WHERE id <> ALL(%s)", (ids,)).fetchall()
        held = c.execute(f"SELECT * FROM ivm.{v} WHERE id = ANY(%s)", (ids,)).fetchall()
        rows[v] = (Counter(map(_comparable, got)), Counter(map(_comparable, want)), held)
    return {"status": status, "bad": bad, "mismatches": wrong, "rows": rows}


_names = itertools.count()


@pytest.fixture(scope="module")
def types_dsn(cluster):
    """A database holding ``m`` and ``f`` with the snapshot's rows."""
    # the sidecar holds timestamptz values in UTC: so does Postgres' answer to EXTRACT and date_trunc
    with cluster.database(f"types{next(_names)}", timezone="UTC") as dsn:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(DDL + SNAPSHOT)
        yield dsn


@pytest.fixture(scope="module")
def matrix(types_dsn):
    """One sidecar for every view: the snapshot, then the stream with bad values, then without. Per phase,
    what ``_record`` reads."""
    out = {}
    with psycopg.connect(types_dsn, autocommit=True) as c, running(types_dsn, VIEWS_FILE):
        out["snapshot"] = _record(c, types_dsn)
        for stmt in STREAM:
            c.execute(stmt)
        out["stream"] = _record(c, types_dsn)
        for stmt in CLEAN:
            c.execute(stmt)
        out["clean"] = _record(c, types_dsn)
    return out


# -- the checks ------------------------------------------------------------------------------------------------
def test_every_phase_has_what_it_is_meant_to_check(matrix):
    """The scenario does what it says: bad values in the snapshot and in the stream, none at the end, and in
    the stream some that the snapshot did not have (a BC date, a key that changed)."""
    assert matrix["snapshot"]["bad"] == {
        "m": {"n": {5}, "dt": {6, 7}, "ts": {6, 7}, "tz": {6, 7}},
        "f": {"dt": {1}},
    }
    assert matrix["stream"]["bad"] == {
        "m": {"n": {20, 101, 105}, "dt": {20, 30, 107}, "ts": {6, 20, 30, 107}, "tz": {6, 20, 30, 107}},
        "f": {"n": {1}, "dt": {1}},
    }
    assert matrix["clean"]["bad"] == {"m": {}, "f": {}}
    # the rows are there: a view that reads no column of concern counts them all
    for phase in PHASES:
        assert matrix[phase]["mismatches"].get("v_count") is None
        assert matrix[phase]["status"]["v_count"] == ("running", None)
        assert matrix[phase]["status"]["marker_n"] == ("running", None)


def _cases():
    for phase in PHASES:
        for v in VIEWS:
            yield pytest.param(phase, v, id=f"{phase}-{v}")


@pytest.mark.parametrize(("phase", "view"), list(_cases()))
def test_view_equals_postgres_or_is_in_error_naming_the_value(matrix, phase, view):
    rec = matrix[phase]
    bad = _bad_read(rec["bad"], view)
    state, error = rec["status"][view]
    if not bad:
        assert (state, error) == ("running", None)
        assert view not in rec["mismatches"], rec["mismatches"].get(view)
        return
    assert state == "error", (state, error)
    if VIEWS[view][0] == "m":
        said = r"table public\.m, row \(id\)=\((-?\d+)\): column (\w+) holds '(.*)', which ivm cannot hold"
        m = re.match(said, error)
        assert m, error
        assert m.group(2) in bad and int(m.group(1)) in bad[m.group(2)], (error, bad)
    else:
        said = r"table public\.f: (\d+) row\(s\) with column (\w+) = '(.*)', which ivm cannot hold"
        m = re.match(said, error)
        assert m, error
        assert m.group(2) in bad and {int(m.group(1))} == bad[m.group(2)], (error, bad)
    if view in rec["rows"]:
        # the rows without a bad value are exact; a row with one is left out or holds NULL, never a wrong value
        got, want, held = rec["rows"][view]
        assert got == want, (got - want, want - got)
        if view.startswith("v_"):
            assert all(r[1] is None for r in held), held


# -- a view reading a column of a type ivm does not represent is refused at start ------------------------------
def _thread(car: Sidecar, errors: list[BaseException]) -> threading.Thread:
    """``car`` running in a new thread; what it raises goes into ``errors``."""

    def run() -> None:
        try:
            car.run()
        except BaseException as err:
            errors.append(err)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def _start_error(dsn: str, views: str) -> str:
    """The ``ConfigError`` a sidecar over ``views`` stops with at start (in a thread, so that a sidecar that
    starts after all is stopped rather than running on)."""
    car = Sidecar(dsn, views, slot="refused", publication="refused", schema="refused")
    errors: list[BaseException] = []
    th = _thread(car, errors)
    th.join(30)
    car.stop()
    th.join()
    assert errors, f"the sidecar started with {views!r}"
    assert isinstance(errors[0], ConfigError), errors[0]
    return str(errors[0])


def test_char_values_reach_their_targets_padded(matrix, types_dsn):
    """A CHAR(n) view column's target is character(n); MAX of one, a character without a length, is written
    padded to n, as Postgres shows it."""
    query = "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass"
    with psycopg.connect(types_dsn, autocommit=True) as c:
        assert dict(c.execute(query, ("ivm.e_char",)).fetchall())["ch"] == "character(4)"
        assert dict(c.execute(query, ("ivm.agg_ok",)).fetchall())["top_ch"] == "bpchar"
        tops = {r[0] for r in c.execute("SELECT top_ch FROM ivm.agg_ok WHERE top_ch IS NOT NULL").fetchall()}
    assert tops and all(len(t) == 4 for t in tops)


@pytest.mark.parametrize("col", list(UNSUPPORTED))
def test_a_view_reading_an_unsupported_column_is_refused_naming_it(types_dsn, col):
    shown = UNSUPPORTED[col][1]
    said = f"view 'v' reads column public.m.{col} of type {shown}"
    assert said in _start_error(types_dsn, f"CREATE MATERIALIZED VIEW v AS SELECT id, {col} FROM m")
    # only in its WHERE clause, or among other views that would work
    views = f"CREATE MATERIALIZED VIEW v AS SELECT id FROM m WHERE {col} IS NOT NULL"
    assert said in _start_error(types_dsn, views)
    views = (
        "CREATE MATERIALIZED VIEW ok AS SELECT id, i4 FROM m; "
        f"CREATE MATERIALIZED VIEW v AS SELECT {col} FROM m"
    )
    assert said in _start_error(types_dsn, views)


def test_a_view_reading_every_column_is_refused_naming_one(types_dsn):
    error = _start_error(types_dsn, "CREATE MATERIALIZED VIEW v AS SELECT * FROM m")
    m = re.search(r"view 'v' reads column public\.m\.(\w+) of type", error)
    assert m and m.group(1) in UNSUPPORTED, error


def test_the_views_file_parses():
    assert set(parse_views(VIEWS_FILE).views) == {"marker_n", *VIEWS}


# -- an update leaving a TOASTed value unsent, in a table with a column of a type ivm does not represent -------
@contextlib.contextmanager
def _synced(dsn: str, views: str):
    """A sidecar in a thread; yields ``sync()``, which waits until the target has every change committed
    before it, and raises at once what the sidecar died of."""
    car = Sidecar(dsn, views, batch_changes=500)
    errors: list[BaseException] = []
    th = _thread(car, errors)

    def sync() -> None:
        value = bump_marker(dsn)
        deadline = time.monotonic() + 60
        with psycopg.connect(dsn, autocommit=True) as c:
            while True:
                if errors:
                    raise errors[0]
                try:
                    row = c.execute("SELECT n FROM ivm.marker_n").fetchone()
                except psycopg.errors.UndefinedTable:
                    row = None
                if row is not None and row[0] >= value:
                    return
                assert time.monotonic() < deadline, f"the target did not reach marker {value}"
                time.sleep(0.05)

    try:
        yield sync
    finally:
        car.stop()
        th.join()


_BIG = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g)"  # 9,600 bytes: stored out of line


@pytest.mark.parametrize(
    ("columns", "big"),
    [
        # the unsent value's column before, after, or being the column the engine does not hold
        pytest.param("tx text, x integer, jb jsonb", "tx", id="read-before-unread"),
        pytest.param("jb jsonb, tx text, x integer", "tx", id="read-after-unread"),
        pytest.param("x integer, tx text, jb jsonb", "jb", id="unread-unsent"),
    ],
)
def test_an_update_leaving_a_toasted_value_unsent_next_to_a_column_of_another_type(dsn, columns, big):
    views = {"all_t": "SELECT id, tx, x FROM t", "x_t": "SELECT id, x FROM t"}
    tx, jb = (_BIG, "'{}'") if big == "tx" else ("'small'", f"to_jsonb({_BIG})")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(MARKER + f"CREATE TABLE t (id integer PRIMARY KEY, {columns})")
        # the large value is stored out of line: an update that leaves it alone does not send it
        c.execute(f"INSERT INTO t (id, tx, x, jb) VALUES (1, {tx}, 1, {jb}), (2, 'small', 2, '{{}}')")
        views_file = MARKER_VIEW + "".join(f"CREATE MATERIALIZED VIEW {v} AS {q};\n" for v, q in views.items())
        with _synced(dsn, views_file) as sync:
            sync()
            assert mismatches(dsn, views) == {}
            c.execute("UPDATE t SET x = x + 10")
            sync()
            assert mismatches(dsn, views) == {}
            assert c.execute("SELECT x FROM ivm.x_t ORDER BY id").fetchall() == [(11,), (12,)]
