"""The sink's views are Spark SQL (on Arrow micro-batches, no Spark): division, NULL ordering in top-k,
decimal AVG and SUM types, timestamps read in the session time zone, case-insensitive names; and PostgreSQL's
semantics on request."""

import datetime as dt
import decimal

import pyarrow as pa
import pytest

import ivm
from connectors.spark import plain, view_sink
from sql.errors import SqlError

SCHEMA = """
CREATE TABLE t (k INTEGER PRIMARY KEY, a INTEGER, b INTEGER, d DECIMAL(12,2), ts TIMESTAMP WITH TIME ZONE,
                wall TIMESTAMP);
"""
UTC = dt.UTC
ROWS = pa.table(
    {
        "k": pa.array([1, 2, 3, 4], pa.int32()),
        "a": pa.array([7, None, -7, 5], pa.int32()),
        "b": pa.array([2, 2, 2, None], pa.int32()),
        "d": pa.array([decimal.Decimal(x) for x in ("0.05", "0.00", "0.00", "10.00")], pa.decimal128(12, 2)),
        # 06:30 UTC on 2024-03-10 is 01:30 in New York (EST), the day before in UTC-8 ... per row below
        "ts": pa.array(
            [
                dt.datetime(2024, 3, 10, 6, 30, tzinfo=UTC),  # 01:30 EST
                dt.datetime(2024, 3, 10, 7, 30, tzinfo=UTC),  # 03:30 EDT (after the change to summer time)
                dt.datetime(2024, 3, 10, 3, 0, tzinfo=UTC),  # 22:00 EST on March 9
                None,
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        "wall": pa.array([dt.datetime(2024, 3, 10, 6, 30)] * 4, pa.timestamp("us")),
    }
)


def insert(rows: pa.Table, lsn: int = 1) -> pa.Table:
    n = rows.num_rows
    extra = {"operation": ["insert"] * n, "table": ["t"] * n, "lsn": pa.array([lsn] * n, pa.int64())}
    return pa.table({**{c: rows.column(c) for c in rows.column_names}, **extra})


def sink_with(tmp_path, views, **kw):
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=plain(commit="lsn"), **kw)
    sink.apply(insert(ROWS), 0)
    return sink


def rows(table):
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_division_is_in_double_and_div_is_integral(tmp_path):
    sink = sink_with(tmp_path, {"q": "SELECT k, 7 / 2 AS c, a / b AS q, a div b AS i FROM t"})
    assert rows(sink.contents("q")) == [
        (1, 3.5, 3.5, 3),
        (2, 3.5, None, None),
        (3, 3.5, -3.5, -3),
        (4, 3.5, None, None),
    ]
    assert sink.contents("q").schema.field("q").type == pa.float64()


def test_concat_is_null_with_a_null_and_round_goes_half_up(tmp_path):
    sql = "SELECT k, concat('k', k, a > 0) AS c, k || '-' || a AS p, round(a / 2.0e0) AS r FROM t"
    sink = sink_with(tmp_path, {"s": sql})
    assert rows(sink.contents("s")) == [
        (1, "k1true", "1-7", 4.0),
        (2, None, None, None),
        (3, "k3false", "3--7", -4.0),
        (4, "k4true", "4-5", 3.0),
    ]


def test_top_k_puts_nulls_first_ascending_and_last_descending(tmp_path):
    views = {
        "low": "SELECT k, a FROM t ORDER BY a LIMIT 2",
        "high": "SELECT k, a FROM t ORDER BY a DESC LIMIT 2",
        "explicit": "SELECT k, a FROM t ORDER BY a NULLS LAST LIMIT 1",
    }
    sink = sink_with(tmp_path, views)
    assert rows(sink.contents("low")) == [(2, None), (3, -7)]
    assert rows(sink.contents("high")) == [(1, 7), (4, 5)]
    assert rows(sink.contents("explicit")) == [(3, -7)]


def test_decimal_avg_and_sum_have_spark_types_and_rounding(tmp_path):
    views = {"m": "SELECT b, AVG(d) AS avg_d, SUM(d) AS sum_d, AVG(a) AS avg_a FROM t GROUP BY b"}
    sink = sink_with(tmp_path, views)
    out = sink.contents("m")
    assert out.schema.field("avg_d").type == pa.decimal128(16, 6)
    assert out.schema.field("sum_d").type == pa.decimal128(22, 2)
    assert out.schema.field("avg_a").type == pa.float64()
    # 0.05 / 3 = 0.01666..., rounded half up to 6 places
    assert rows(out) == [
        (2, decimal.Decimal("0.016667"), decimal.Decimal("0.05"), 0.0),
        (None, decimal.Decimal("10.000000"), decimal.Decimal("10.00"), 5.0),
    ]
    with pytest.raises(SqlError, match=r"AVG of DECIMAL\(16,2\) is DECIMAL\(20,6\) in Spark SQL"):
        view_sink(SCHEMA, {"w": "SELECT AVG(CAST(d AS DECIMAL(16,2))) AS x FROM t"}, tmp_path / "w")
    with pytest.raises(
        SqlError, match=r"division of DECIMAL\(12,2\) by DECIMAL\(10,0\) gives DECIMAL\(23,13\)"
    ):
        view_sink(SCHEMA, {"w": "SELECT d / a AS x FROM t"}, tmp_path / "w")
    sink = sink_with(tmp_path / "2", {"h": "SELECT k, d / 4 AS x FROM t"})
    assert sink.contents("h").schema.field("x").type == pa.decimal128(16, 6)
    assert rows(sink.contents("h"))[0] == (1, decimal.Decimal("0.012500"))


def test_timestamps_are_read_in_the_session_time_zone(tmp_path):
    views = {
        "local": "SELECT k, hour(ts) AS h, EXTRACT(DAY FROM ts) AS d, CAST(ts AS DATE) AS day, "
        "hour(wall) AS wall_h, ts, wall FROM t",
        "early": "SELECT k FROM t WHERE ts < TIMESTAMP '2024-03-10 02:00:00'",
    }
    sink = sink_with(tmp_path, views, time_zone="America/New_York")
    out = sink.contents("local")
    assert out.schema.field("ts").type == pa.timestamp("us", tz="UTC")  # Spark's timestamp: an instant
    assert out.schema.field("wall").type == pa.timestamp("us")  # timestamp_ntz: a wall time
    got = {r["k"]: (r["h"], r["d"], r["day"], r["wall_h"]) for r in out.to_pylist()}
    assert got[1] == (1, 10, dt.date(2024, 3, 10), 6)
    assert got[2] == (3, 10, dt.date(2024, 3, 10), 6)
    assert got[3] == (22, 9, dt.date(2024, 3, 9), 6)
    assert got[4] == (None, None, None, 6)
    assert rows(sink.contents("early")) == [(1,), (3,)]  # 02:00 in New York is 07:00 UTC
    with pytest.raises(SqlError, match="date_trunc of a TIMESTAMP .* in session time zone 'America/New_York'"):
        view_sink(
            SCHEMA,
            {"w": "SELECT date_trunc('DAY', ts) AS x FROM t"},
            tmp_path / "w",
            time_zone="America/New_York",
        )


def test_names_are_case_insensitive(tmp_path):
    views = {"Big": "SELECT K, `A` FROM T WHERE a > 0", "top": "SELECT COUNT(*) AS n FROM big WHERE `k` > 1"}
    sink = sink_with(tmp_path, views)
    assert rows(sink.contents("big")) == [(1, 7), (4, 5)]
    assert rows(sink.contents("TOP")) == [(1,)]


def test_postgres_dialect_on_request(tmp_path):
    views = {"q": "SELECT k, a / b AS q FROM t ORDER BY a LIMIT 2", "m": "SELECT AVG(d) AS m FROM t"}
    sink = sink_with(tmp_path, views, dialect="postgres")
    assert rows(sink.contents("q")) == [(3, -3), (4, None)]  # integer division; NULL sorts last ascending
    assert sink.contents("m").schema.field("m").type == pa.float64()


def test_the_embedded_database_stays_postgres():
    db = ivm.connect()
    assert db.execute("SELECT 7 / 2").fetchall() == [(3,)]
    assert db.execute("SELECT 7 / 2", dialect="spark").fetchall() == [(3.5,)]
    db.execute("CREATE TABLE t (x DECIMAL(4,2))")
    db.execute("INSERT INTO t VALUES (1.00), (0.00)")
    db.execute("CREATE VIEW v AS SELECT AVG(x) AS m FROM t", dialect="spark")
    # the view is kept as PostgreSQL that computes Spark's answer
    assert (
        db.views["v"].view.sql
        == "SELECT CAST(ROUND(SUM(t.x) / COUNT(t.x), 6) AS DECIMAL(8, 6)) AS m FROM t AS t"
    )
    assert db.execute("SELECT m FROM v").fetchall() == [(decimal.Decimal("0.500000"),)]


def test_dates_plus_days_or_months_stay_dates_as_in_spark(tmp_path):
    views = {
        "shift": "SELECT k, CAST(wall AS DATE) + INTERVAL 1 DAY AS next, "
        "CAST(wall AS DATE) - INTERVAL '1' MONTH AS prev, date_trunc('MONTH', CAST(wall AS DATE)) AS m, "
        "CAST(wall AS DATE) + INTERVAL 3 HOURS AS later FROM t WHERE k = 1"
    }
    out = sink_with(tmp_path, views).contents("shift")
    assert out.schema.field("next").type == pa.date32() and out.schema.field("prev").type == pa.date32()
    assert out.schema.field("m").type == pa.timestamp("us", tz="UTC")  # Spark's timestamp: an instant
    assert out.to_pylist()[0] == {
        "k": 1,
        "next": dt.date(2024, 3, 11),
        "prev": dt.date(2024, 2, 10),
        "m": dt.datetime(2024, 3, 1, tzinfo=UTC),
        "later": dt.datetime(2024, 3, 10, 3, tzinfo=UTC),
    }


def test_round_of_a_double_rounds_its_shortest_decimal_half_up_as_spark():
    """Spark rounds a DOUBLE through a BigDecimal of its shortest decimal (2.675 rounds to 2.68, though the
    double nearest 2.675 lies below it); these are Spark 4's answers."""
    db = ivm.connect()
    db.execute("CREATE TABLE f (k INTEGER PRIMARY KEY, d DOUBLE PRECISION)")
    values = [2.675, 1.005, -2.675, 0.285, 1e15 + 0.5, -6749284097757975.0, 2.5, -0.5, 1e300, 0.125]
    db.cursor().executemany("INSERT INTO f VALUES (%s, %s)", list(enumerate(values)))
    sql = "SELECT round(d, 2), round(d, 1), round(d), round(d, -2) FROM f ORDER BY k"
    got = db.execute(sql, dialect="spark")
    assert got.fetchall() == [
        (2.68, 2.7, 3.0, 0.0),
        (1.01, 1.0, 1.0, 0.0),
        (-2.68, -2.7, -3.0, 0.0),
        (0.29, 0.3, 0.0, 0.0),
        (1e15 + 0.5, 1e15 + 0.5, 1e15 + 1, 1e15),
        (-6749284097757975.0, -6749284097757975.0, -6749284097757975.0, -6749284097758000.0),
        (2.5, 2.5, 3.0, 0.0),
        (-0.5, -0.5, -1.0, 0.0),
        (1e300, 1e300, 1e300, 1e300),
        (0.13, 0.1, 0.0, 0.0),
    ]


def test_a_double_written_as_text_is_refused_in_spark_sql():
    db = ivm.connect()
    db.execute("CREATE TABLE f (k INTEGER PRIMARY KEY, d DOUBLE PRECISION, s TEXT)")
    for sql, column in [("SELECT CAST(d AS STRING) FROM f", 13), ("SELECT concat(s, d) FROM f", 18)]:
        with pytest.raises(SqlError, match="Double.toString") as err:
            db.execute(sql, dialect="spark")
        assert err.value.col == column
