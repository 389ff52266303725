"""Differential test of the sink's Spark dialect against Spark SQL itself: more than a hundred generated views
(arithmetic, division, rounding, concatenation, NULL ordering in top-k, timestamps under a session time zone
that is not UTC, decimal aggregates) over a random change stream of two tables; after every micro-batch each
view's contents equal what Spark SQL computes from the same current data, as multisets (decimals exactly,
doubles to a relative 1e-9), and its output types are Spark's."""

import datetime as dt
import decimal
import json
import random

import pyarrow as pa
import pytest

from connectors.spark import plain, view_sink
from connectors.spark._outputs import spark_frame

ZONE = "America/Los_Angeles"  # summer time begins at 2024-03-10 02:00, in the middle of the data
SCHEMA = """
CREATE TABLE s (k INTEGER PRIMARY KEY, g INTEGER, x INTEGER, y INTEGER, d DECIMAL(10,2), e DECIMAL(6,3),
                f DOUBLE PRECISION, ts TIMESTAMP WITH TIME ZONE, wall TIMESTAMP);
CREATE TABLE u (id INTEGER PRIMARY KEY, g INTEGER, m DECIMAL(8,2));
"""
ARROW = {
    "s": pa.schema(
        [
            ("k", pa.int32()),
            ("g", pa.int32()),
            ("x", pa.int32()),
            ("y", pa.int32()),
            ("d", pa.decimal128(10, 2)),
            ("e", pa.decimal128(6, 3)),
            ("f", pa.float64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("wall", pa.timestamp("us")),
        ]
    ),
    "u": pa.schema([("id", pa.int32()), ("g", pa.int32()), ("m", pa.decimal128(8, 2))]),
}
KEYS = {"s": "k", "u": "id"}
WHERE = ["", " WHERE x > 0", " WHERE g = 1", " WHERE d > 0", " WHERE y IS NOT NULL", " WHERE ts IS NOT NULL"]


def generated_views(rng: random.Random) -> dict[str, str]:
    """Views from templates and random choices: every family, each filtered several ways."""
    arithmetic = [
        "x + y",
        "x * y - 3",
        "x % y",
        "-x + 2 * y",
        "d + e",
        "d - e * 2",
        "d * e",
        "e * e",
        "x + d",
        "abs(d - e)",
        "f * 2 + x",
        "d * 2 - 1.5",
    ]
    division = [
        "x / y",
        "x / 3",
        "(x + y) / 2",
        "f / y",
        "d / 8",
        "e / 3",
        "e / y",
        "x div y",
        "7 / 2",
        "d / 2.5",
    ]
    rounding_and_text = [
        "round(f)",
        "round(f, 2)",
        "round(f / 3, 2)",
        "round(x / 2)",
        "round(f, -1)",
        "concat('k', x, ':', x > 0)",
        "concat_ws('|', x, y > 0, d)",
        "x || '-' || y",
    ]
    top = [
        "SELECT k, x FROM s{w} ORDER BY x, k LIMIT {n}",
        "SELECT k, x FROM s{w} ORDER BY x DESC, k LIMIT {n}",
        "SELECT k, d FROM s{w} ORDER BY d NULLS LAST, k LIMIT {n}",
        "SELECT k, ts FROM s{w} ORDER BY ts DESC, k LIMIT {n}",
        "SELECT k, g, y FROM s{w} ORDER BY g, y DESC, k LIMIT {n}",
        "SELECT k, e FROM s{w} ORDER BY e DESC NULLS FIRST, k LIMIT {n}",
    ]
    timestamps = [
        "SELECT k, hour(ts) AS h, CAST(ts AS DATE) AS day, minute(ts) AS mi FROM s{w}",
        "SELECT k, EXTRACT(DAY FROM ts) AS dd, EXTRACT(HOUR FROM ts) AS hh, hour(wall) AS wh FROM s{w}",
        "SELECT k, ts, wall FROM s{w}",
        "SELECT k FROM s WHERE ts >= TIMESTAMP '2024-03-10 03:00:00'",
        "SELECT k FROM s WHERE ts < '2024-03-10 01:30:00'",
        "SELECT CAST(ts AS DATE) AS day, COUNT(*) AS n, MIN(ts) AS first, MAX(wall) AS last FROM s{w} "
        "GROUP BY CAST(ts AS DATE)",
        "SELECT hour(ts) AS h, SUM(x) AS sx FROM s{w} GROUP BY hour(ts)",
        "SELECT k, CAST(ts AS TIMESTAMP_NTZ) AS local FROM s{w}",
    ]
    aggregates = [
        "SELECT g, AVG(d) AS ad, SUM(d) AS sd, COUNT(d) AS n FROM s{w} GROUP BY g",
        "SELECT g, AVG(e) AS ae, SUM(e) AS se, AVG(x) AS ax, SUM(x) AS sx FROM s{w} GROUP BY g",
        "SELECT AVG(d) AS ad, SUM(e) AS se, AVG(f) AS af FROM s{w}",
        "SELECT g, SUM(d * e) AS sde, MAX(d) AS md FROM s{w} GROUP BY g",
        "SELECT u.g, AVG(u.m) AS am, SUM(s.d) AS sd FROM s JOIN u ON s.g = u.g{j} GROUP BY u.g",
        "SELECT g, AVG(d) AS ad FROM s{w} GROUP BY g ORDER BY ad DESC, g LIMIT 2",
    ]
    candidates = []
    for w in WHERE:
        candidates += [f"SELECT k, {e} AS v FROM s{w}" for e in arithmetic + division]
        j = (
            w.replace(" x", " s.x")
            .replace(" g", " s.g")
            .replace(" d", " s.d")
            .replace(" y", " s.y")
            .replace(" ts", " s.ts")
        )
        candidates += [t.format(w=w, j=j, n=rng.randint(1, 4)) for t in top + aggregates]
        candidates += [t.format(w=w) for t in timestamps]
    candidates = list(dict.fromkeys(candidates))
    chosen = rng.sample(candidates, 120)
    views = {f"v{i:03d}": sql for i, sql in enumerate(chosen)}
    return views | {f"r{i}": f"SELECT k, {e} AS v FROM s" for i, e in enumerate(rounding_and_text)}


class Stream:
    """Random commits of inserts, deletes and updates to both tables, and their current rows."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rows: dict[str, dict[int, dict]] = {"s": {}, "u": {}}
        self.next = {"s": 0, "u": 0}
        self.lsn = 0

    def row(self, table: str, key: int) -> dict:
        r = self.rng
        maybe = lambda v: None if r.random() < 0.15 else v  # noqa: E731
        if table == "u":
            return {
                "id": key,
                "g": maybe(r.randint(0, 3)),
                "m": maybe(decimal.Decimal(r.randint(-99999, 99999)) / 100),
            }
        start = dt.datetime(2024, 3, 9, 12, tzinfo=dt.UTC)
        return {
            "k": key,
            "g": maybe(r.randint(0, 3)),
            "x": maybe(r.randint(-20, 20)),
            "y": maybe(r.choice([-5, -3, -2, -1, 1, 2, 3, 4, 7])),  # never 0: Spark SQL (ANSI) fails on it
            "d": maybe(decimal.Decimal(r.randint(-999999, 999999)) / 100),
            "e": maybe(decimal.Decimal(r.randint(-99999, 99999)) / 1000),
            "f": maybe(r.randint(-1000, 1000) / 8),
            "ts": maybe(start + dt.timedelta(seconds=r.randint(0, 3 * 86400))),
            "wall": maybe(dt.datetime(2024, 3, 10) + dt.timedelta(seconds=r.randint(0, 86400))),
        }

    def micro_batch(self) -> pa.Table:
        parts = []
        for _ in range(self.rng.randint(1, 3)):
            self.lsn += 1
            for table in ("s", "u"):
                current = self.rows[table]
                gone = self.rng.sample(sorted(current), min(len(current), self.rng.randint(0, 3)))
                left = sorted(set(current) - set(gone))
                changed = self.rng.sample(left, min(len(left), self.rng.randint(0, 3)))
                new = list(
                    range(self.next[table], self.next[table] + self.rng.randint(1, 6 if table == "s" else 2))
                )
                self.next[table] += len(new)
                ops = [("delete", current[k]) for k in gone] + [
                    ("update_preimage", current[k]) for k in changed
                ]
                for k in gone:
                    del current[k]
                for k in changed:
                    current[k] = self.row(table, k)
                    ops.append(("update_postimage", current[k]))
                for k in new:
                    current[k] = self.row(table, k)
                    ops.append(("insert", current[k]))
                rows = pa.Table.from_pylist([r for _, r in ops], schema=ARROW[table])
                extra = {
                    "operation": [o for o, _ in ops],
                    "table": [table] * len(ops),
                    "lsn": [self.lsn] * len(ops),
                }
                parts.append(pa.table({**{c: rows.column(c) for c in rows.column_names}, **extra}))
        return pa.concat_tables(parts, promote_options="permissive")

    def table(self, name: str) -> pa.Table:
        return pa.Table.from_pylist(list(self.rows[name].values()), schema=ARROW[name])


def spark_answers(spark, views: dict[str, str]) -> dict[str, list[list]]:
    """Every view's rows as Spark SQL computes them: one query for all, each row as JSON in view order."""
    options = (
        "map('ignoreNullFields', 'false', 'timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\", "
        "'timestampNTZFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\")"
    )
    parts = [
        f"SELECT '{name}' AS view, to_json(struct(*), {options}) AS row FROM ({sql}) AS q"
        for name, sql in views.items()
    ]
    out: dict[str, list[list]] = {name: [] for name in views}
    for r in spark.sql(" UNION ALL ".join(parts)).collect():
        out[r["view"]].append(list(json.loads(r["row"], parse_float=decimal.Decimal).values()))
    return out


def canonical(value, t: pa.DataType):
    """A value of a column of Arrow type ``t`` (ivm's) or its JSON text (Spark's), comparable across both."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        return float(value)
    if pa.types.is_decimal(t) or pa.types.is_integer(t):
        return decimal.Decimal(value)
    if pa.types.is_timestamp(t):
        v = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
        return v.astimezone(dt.UTC) if t.tz is not None else v
    if pa.types.is_date(t):
        return dt.date.fromisoformat(value) if isinstance(value, str) else value
    return value


def same_multiset(ours: list[tuple], theirs: list[tuple]) -> bool:
    def key(row):
        return repr(tuple(f"{v:.9g}" if isinstance(v, float) else v for v in row))

    if len(ours) != len(theirs):
        return False
    for a, b in zip(sorted(ours, key=key), sorted(theirs, key=key), strict=True):
        for x, y in zip(a, b, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                if abs(x - y) > 1e-9 * max(abs(x), abs(y), 1.0):
                    return False
            elif x != y:
                return False
    return True


def spark_kind(simple: str) -> str:
    """A Spark type as compared with the sink's output type: integer widths aside."""
    return "integral" if simple in ("tinyint", "smallint", "int", "bigint") else simple


def arrow_kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "integral"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    return {
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.date32(): "date",
    }.get(t, str(t))


@pytest.fixture
def spark_in_zone(spark):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", ZONE)
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def test_views_equal_spark_sql_after_every_micro_batch(spark_in_zone, tmp_path):
    spark = spark_in_zone
    views = generated_views(random.Random(11))
    assert len(views) >= 100
    sink = view_sink(SCHEMA, views, tmp_path / "state", shape=plain(commit="lsn"))  # the session's time zone
    assert sink.spark.time_zone == ZONE
    stream = Stream(seed=5)
    for batch_id in range(5):
        sink.apply(stream.micro_batch(), batch_id)
        for name in ("s", "u"):
            spark_frame(spark, stream.table(name)).createOrReplaceTempView(name)
        if batch_id == 0:  # the output types are Spark's
            for v, sql in views.items():
                ours = [arrow_kind(f.type) for f in sink.contents(v).schema]
                theirs = [spark_kind(f.dataType.simpleString()) for f in spark.sql(sql).schema.fields]
                assert ours == theirs, (v, sql)
        answers = spark_answers(spark, views)
        # not vacuous: three rows a view on average, and most views have some
        assert sum(map(len, answers.values())) >= 3 * len(views)
        assert sum(1 for a in answers.values() if a) >= 0.8 * len(views)
        for v, sql in views.items():
            contents = sink.contents(v)
            types = [f.type for f in contents.schema]
            ours = [
                tuple(canonical(x, t) for x, t in zip(r.values(), types, strict=True))
                for r in contents.to_pylist()
            ]
            theirs = [tuple(canonical(x, t) for x, t in zip(r, types, strict=True)) for r in answers[v]]
            assert same_multiset(ours, theirs), (
                f"micro-batch {batch_id}, {v}: {sql}\n"
                f"ivm:   {sorted(ours, key=repr)}\nspark: {sorted(theirs, key=repr)}"
            )
    sink.close()
