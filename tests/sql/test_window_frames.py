"""Window frames beyond ROWS and RANGE over numbers: GROUPS frames, EXCLUDE (CURRENT ROW, GROUP, TIES, NO
OTHERS), and RANGE offsets of intervals over dates, timestamps and intervals, months as the calendar counts
them. Generated views over random transactions equal DuckDB's recompute after every one, whole partitions and
partitions computed in slices alike; PostgreSQL gives the same answers at the calendar's edges (month ends,
leap days, descending orders, months and days in one offset); and what PostgreSQL refuses is refused in its
words, at the offset.

Only deterministic results are compared: functions that read the order of peers (FIRST/LAST/NTH_VALUE, ROWS
frames) order by the unique id last."""

import datetime as dt
import random

import duckdb
import pytest

import ivm
from ivm.engine.operators import ordered
from ivm.errors import DataError, NotSupportedError, ProgrammingError
from tests.oracle import same_rows
from tests.pg import error_at, postgres, views_follow
from tests.sql.test_windows import insert_or_delete

SCHEMA = "CREATE TABLE w (id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, f DOUBLE, day DATE, ts TIMESTAMP)"
FIRST_DAY = dt.date(2024, 1, 20)
INTERVALS = ["1 day", "36 hours", "2 days 12 hours", "1 month", "1 month 2 days", "1 mon -10 days", "0 days"]


def _values(r: random.Random) -> tuple:
    def maybe(v):
        return None if r.random() < 0.2 else v

    day = FIRST_DAY + dt.timedelta(days=r.randint(0, 80))
    ts = dt.datetime.combine(FIRST_DAY, dt.time()) + dt.timedelta(hours=6 * r.randint(0, 320))
    return maybe(r.randint(0, 2)), maybe(r.randint(-2, 5)), maybe(r.randint(-4, 6) / 2), maybe(day), maybe(ts)


def _sql(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return str(v)


def _row(r: random.Random, key: int) -> str:
    return f"({key}, {', '.join(_sql(v) for v in _values(r))})"


def _txn(r: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(r.randint(1, 5)):
        p = r.random()
        if p < 0.7 or not keys:
            s = insert_or_delete(r, keys, p, _row)
            if s is not None:
                out.append(s)
        else:
            k = r.choice(sorted(keys))
            col = r.choice(["g", "x", "f", "day", "ts"])
            value = _values(r)[["g", "x", "f", "day", "ts"].index(col)]
            out.append(f"UPDATE w SET {col} = {_sql(value)} WHERE id = {k}")
    return out


class Gen:
    def __init__(self, r: random.Random) -> None:
        self.r = r

    def order(self, cols: list[str], exact: bool) -> str:
        r = self.r
        items = [
            f"{c}{r.choice(['', ' DESC'])}{r.choice(['', '', ' NULLS FIRST', ' NULLS LAST'])}" for c in cols
        ]
        if exact:
            items.append("id")
        return "ORDER BY " + ", ".join(items)

    def bound(self, start: bool, offset: str) -> str:
        words = ["UNBOUNDED PRECEDING" if start else "UNBOUNDED FOLLOWING", "CURRENT ROW"]
        return self.r.choice(words + [f"{offset} PRECEDING", f"{offset} FOLLOWING"])

    def frame(self, mode: str, offset) -> str:
        rank = {"UNBOUNDED PRECEDING": 0, "PRECEDING": 1, "CURRENT ROW": 2, "FOLLOWING": 3}
        while True:
            a, b = self.bound(True, offset()), self.bound(False, offset())
            ka = rank.get(a, rank.get(a.rsplit(" ", 1)[-1]))
            kb = 4 if b == "UNBOUNDED FOLLOWING" else rank.get(b, rank.get(b.rsplit(" ", 1)[-1]))
            if ka <= kb and (ka, kb) not in ((3, 2), (2, 1), (3, 1)):
                exclude = self.r.choice(["", "", " EXCLUDE CURRENT ROW", " EXCLUDE GROUP", " EXCLUDE TIES"])
                return f"{mode} BETWEEN {a} AND {b}{exclude or self.r.choice(['', ' EXCLUDE NO OTHERS'])}"

    def over(self, exact: bool) -> str:
        r = self.r
        part = "PARTITION BY g " if r.random() < 0.5 else ""
        kind = r.choice([0, 2] if exact else [0, 1, 2])  # (RANGE of an offset orders by one column)
        if kind == 0:  # GROUPS: peer groups of one or two columns
            cols = r.sample(["x", "f", "day"], r.randint(1, 2))
            return f"{part}{self.order(cols, exact)} {self.frame('GROUPS', lambda: str(r.randint(0, 3)))}"
        if kind == 1:  # RANGE of an interval over a date or a timestamp
            col = r.choice(["day", "ts"])
            interval = self.frame("RANGE", lambda: f"INTERVAL '{r.choice(INTERVALS)}'")
            return f"{part}{self.order([col], False)} {interval}"
        cols = r.sample(["x", "f", "day"], r.randint(0, 2))  # ROWS, the order made unique
        return f"{part}{self.order(cols, True)} {self.frame('ROWS', lambda: str(r.randint(0, 3)))}"

    def call(self) -> str:
        r = self.r
        if r.random() < 0.3:
            f = r.choice(["FIRST_VALUE", "LAST_VALUE", "NTH_VALUE"])
            col = r.choice(["x", "f", "day", "id"])
            arg = f"{col}, {r.randint(1, 3)}" if f == "NTH_VALUE" else col
            return f"{f}({arg}) OVER ({self.over(True)})"
        f = r.choice(["SUM", "COUNT", "AVG", "MIN", "MAX", "COUNT(*)"])
        col = r.choice(["x", "f"] if f in ("SUM", "AVG") else ["x", "f", "day", "ts"])
        fn = "COUNT(*)" if f == "COUNT(*)" else f"{f}({col})"
        return f"{fn} OVER ({self.over(False)})"

    def query(self) -> str:
        calls = [self.call() for _ in range(self.r.randint(1, 3))]
        return "SELECT " + ", ".join(["id"] + [f"{c} AS w{i}" for i, c in enumerate(calls)]) + " FROM w"


@pytest.mark.parametrize("seed", range(8))
def test_generated_frames_equal_duckdb(seed, monkeypatch):
    """Sixteen views per seed; from seed 4 on, in blocks of 3 rows and with partitions of more than 4 rows
    computed in slices."""
    if seed >= 4:
        monkeypatch.setattr(ordered, "CAP", 3)
        monkeypatch.setattr(ordered, "BIG", 4)
    r = random.Random(9100 + seed)
    gen = Gen(r)
    db, duck = ivm.connect(), duckdb.connect()
    duck.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    keys = set(range(0, 40, 2))
    rows = ", ".join(_row(r, k) for k in sorted(keys))
    for con in (db, duck):
        con.execute(SCHEMA)
        con.execute(f"INSERT INTO w VALUES {rows}")
    views = {}
    while len(views) < 16:
        q = gen.query()
        name = f"v{len(views)}"
        db.execute(f"CREATE VIEW {name} AS {q}")
        views[name] = q
    for step in range(8):
        stmts = _txn(r, keys)
        db.execute("; ".join(["BEGIN", *stmts, "COMMIT"]))
        for s in stmts:
            duck.execute(s)
        for name, q in views.items():
            got = db.execute(f"SELECT * FROM {name}").fetchall()
            want = duck.execute(q).fetchall()
            shown = f"got  {sorted(got, key=repr)}\nwant {sorted(want, key=repr)}"
            assert same_rows(got, want), f"{q}\nafter step {step} ({stmts}):\n{shown}"


CALENDAR = [  # views whose answers PostgreSQL gives, at month ends and leap days
    "SELECT id, SUM(x) OVER (ORDER BY day RANGE BETWEEN INTERVAL '1 month' PRECEDING AND CURRENT ROW) FROM c",
    "SELECT id, COUNT(*) OVER (ORDER BY day DESC RANGE BETWEEN INTERVAL '1 month 3 days 5 hours' PRECEDING "
    "AND INTERVAL '2 days 1 hour' FOLLOWING) FROM c",
    "SELECT id, COUNT(x) OVER (PARTITION BY g ORDER BY day RANGE BETWEEN INTERVAL '36 hours' FOLLOWING "
    "AND INTERVAL '1 mon -1 hour' FOLLOWING) FROM c",
    "SELECT id, MIN(x) OVER (ORDER BY day DESC NULLS LAST RANGE BETWEEN INTERVAL '3 days 12 hours' PRECEDING "
    "AND INTERVAL '36 hours' PRECEDING EXCLUDE TIES) FROM c",
    "SELECT id, SUM(x) OVER (ORDER BY ts RANGE BETWEEN INTERVAL '1 month' PRECEDING AND INTERVAL '1 day "
    "30 minutes' FOLLOWING EXCLUDE CURRENT ROW) FROM c",
    "SELECT id, MAX(ts) OVER (ORDER BY ts DESC RANGE BETWEEN '1 year 1 month' PRECEDING AND CURRENT ROW) "
    "FROM c",
    "SELECT id, COUNT(*) OVER (ORDER BY tz RANGE BETWEEN INTERVAL '1 month -20 days' PRECEDING "
    "AND CURRENT ROW) FROM c",
    "SELECT id, SUM(x) OVER (ORDER BY ts - TIMESTAMP '2024-01-01' RANGE BETWEEN INTERVAL '1 day' PRECEDING "
    "AND INTERVAL '1 month' FOLLOWING) FROM c",
    "SELECT id, SUM(x) OVER (PARTITION BY g ORDER BY x GROUPS BETWEEN 1 PRECEDING AND 2 FOLLOWING EXCLUDE "
    "GROUP), FIRST_VALUE(id) OVER (ORDER BY x, id GROUPS BETWEEN 2 PRECEDING AND CURRENT ROW EXCLUDE "
    "CURRENT ROW), NTH_VALUE(id, 2) OVER (ORDER BY day, id ROWS BETWEEN 2 PRECEDING AND 2 FOLLOWING "
    "EXCLUDE CURRENT ROW) FROM c",
]
DAYS = [  # month ends and leap days
    dt.date(2024, 1, 31),
    dt.date(2024, 2, 29),
    dt.date(2024, 3, 31),
    dt.date(2023, 2, 28),
    dt.date(2024, 3, 1),
]


def _calendar_change(r: random.Random) -> str:
    k = r.randint(0, 30)
    day = r.choice(DAYS) + dt.timedelta(days=r.choice([0, 0, 1, -1, 30]))
    ts = dt.datetime.combine(day, dt.time(r.choice([0, 0, 1, 12, 23])))
    values = f"{k % 3}, {r.choice(['NULL', r.randint(-3, 9)])}, DATE '{day}', TIMESTAMP '{ts}', '{ts}+00'"
    if r.random() < 0.2:
        values = "NULL, NULL, NULL, NULL, NULL"
    return r.choice(
        [
            f"DELETE FROM c WHERE id = {k}",
            f"INSERT INTO c VALUES ({k}, {values}) ON CONFLICT (id) DO NOTHING",
            f"UPDATE c SET day = DATE '{day}', ts = TIMESTAMP '{ts}' WHERE id = {k}",
        ]
    )


def test_calendar_offsets_groups_and_exclusions_answer_as_postgresql():
    r = random.Random(41)
    table = (
        "CREATE TABLE c (id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, day DATE, ts TIMESTAMP, tz TIMESTAMPTZ)"
    )
    for pg in postgres():
        pg.execute("SET TIME ZONE 'UTC'")
        db = ivm.connect()
        for con in (db, pg):
            con.execute(table)
        for _ in range(25):
            s = _calendar_change(r)
            db.execute(s)
            pg.execute(s)
        views_follow(pg, db, CALENDAR, lambda: [_calendar_change(r) for _ in range(r.randint(1, 4))], sorted)


def test_a_calendar_offset_past_the_last_timestamp_stops_as_postgresql():
    """PostgreSQL adds the interval to each row's timestamp, and fails where that passes its last one; so does
    the view (as a window's SUM beyond 64 bits does), and reading it says why."""
    db = ivm.connect()
    db.execute("CREATE TABLE e (id INTEGER PRIMARY KEY, ts TIMESTAMP)")
    db.execute(
        "CREATE VIEW v AS SELECT id, COUNT(*) OVER (ORDER BY ts RANGE BETWEEN CURRENT ROW AND "
        "'290000 years' FOLLOWING) FROM e"
    )
    db.execute("INSERT INTO e VALUES (1, TIMESTAMP '2024-01-01 00:00:00')")
    assert db.execute("SELECT * FROM v").fetchall() == [(1, 1)]
    with pytest.warns(Warning, match="view 'v' failed and stopped: timestamp out of range"):
        db.execute("INSERT INTO e VALUES (2, TIMESTAMP '9999-12-31 00:00:00')")
    with pytest.raises(DataError, match="timestamp out of range"):
        db.execute("SELECT * FROM v")


REFUSED = [  # (statement, error class, words of the message, the text the error points into)
    (
        "SELECT SUM(x) OVER (ORDER BY day RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM w",
        NotSupportedError,
        "not supported for column type date and offset type integer",
        "1 PRECEDING",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY ts RANGE BETWEEN 1.5 PRECEDING AND CURRENT ROW) FROM w",
        NotSupportedError,
        "not supported for column type timestamp and offset type numeric",
        "1.5 PRECEDING",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY x RANGE BETWEEN INTERVAL '1 day' PRECEDING AND CURRENT ROW) FROM w",
        NotSupportedError,
        "not supported for column type integer and offset type interval",
        "INTERVAL '1 day'",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY day RANGE BETWEEN INTERVAL '-1 day' PRECEDING AND CURRENT ROW) FROM w",
        ProgrammingError,
        "invalid preceding or following size in window function",
        "INTERVAL '-1 day'",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY day RANGE BETWEEN CURRENT ROW AND INTERVAL '1 mon -40 days' FOLLOWING) "
        "FROM w",
        ProgrammingError,
        "invalid preceding or following size in window function",
        "INTERVAL '1 mon -40 days'",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY x RANGE BETWEEN -1 PRECEDING AND CURRENT ROW) FROM w",
        ProgrammingError,
        "invalid preceding or following size in window function",
        "-1",
    ),
    (
        "SELECT SUM(x) OVER (GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM w",
        ProgrammingError,
        "GROUPS mode requires an ORDER BY clause",
        "GROUPS",
    ),
    (
        "SELECT SUM(x) OVER (PARTITION BY g GROUPS CURRENT ROW) FROM w",
        ProgrammingError,
        "GROUPS mode requires an ORDER BY clause",
        "SUM(x) OVER (PARTITION BY g GROUPS CURRENT ROW)",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY x GROUPS BETWEEN -1 PRECEDING AND CURRENT ROW) FROM w",
        ProgrammingError,
        "frame starting offset must not be negative",
        "-1",
    ),
    (
        "SELECT SUM(x) OVER (ORDER BY x GROUPS BETWEEN 1.5 PRECEDING AND CURRENT ROW) FROM w",
        NotSupportedError,
        "GROUPS offsets must be integers",
        "1.5",
    ),
]


@pytest.mark.parametrize(("sql", "cls", "words", "construct"), REFUSED, ids=[r[2] for r in REFUSED])
def test_what_postgresql_refuses_is_refused_in_its_words(sql, cls, words, construct):
    db = ivm.connect()
    db.execute(SCHEMA)
    error_at(db, f"CREATE VIEW v AS {sql}", cls, words, construct)
