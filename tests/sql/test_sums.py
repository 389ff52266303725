"""SUM and AVG in views: a sum beyond its type puts the view in error until the rows at fault leave (errors
are data), and sums of doubles are exact: the correctly rounded sum of the values present, whatever came and
went before."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ivm
from sql.errors import SqlError
from tests.ivm.test_exact import expected_sum as exact_sum
from tests.oracle import same_rows, with_views

BIG = 2**63 - 1

OVERFLOWING = [
    # (view, error): per group, by running state (SUM alone) and by re-reading the group (with MAX)
    ("SELECT g, SUM(a) AS s FROM n GROUP BY g", "bigint out of range"),
    ("SELECT g, SUM(a) AS s, MAX(a) AS m FROM n GROUP BY g", "bigint out of range"),
    ("SELECT SUM(a) AS s, COUNT(*) AS c FROM n", "bigint out of range"),
    ("SELECT g, SUM(d) AS s FROM n GROUP BY g", r"numeric field overflow: a sum of DECIMAL\(18,2\)"),
    ("SELECT g, SUM(d) AS s, MIN(d) AS m FROM n GROUP BY g", "numeric field overflow"),
    ("SELECT g, SUM(f) AS s, AVG(f) AS m FROM n GROUP BY g", r"value out of range: overflow"),
    ("SELECT g, AVG(f) AS m, MAX(f) AS x FROM n GROUP BY g", r"value out of range: overflow"),
]


@pytest.mark.parametrize("query, error", OVERFLOWING)
def test_a_sum_beyond_its_type_puts_the_view_in_error_until_its_rows_leave(query, error):
    other = "SELECT g, COUNT(*) AS c, MAX(a) AS m FROM n GROUP BY g"
    ddl = "CREATE TABLE n (k INTEGER PRIMARY KEY, g INTEGER, a BIGINT, d DECIMAL(18,2), f DOUBLE)"
    db, oracle = with_views([ddl], [query, other])

    def run(sql: str) -> None:
        db.execute(sql)
        oracle.execute(sql)

    def check() -> None:
        for i, q in enumerate((query, other)):
            got, want = db.execute(f"SELECT * FROM v{i}").fetchall(), oracle.execute(q).fetchall()
            assert same_rows(got, want), (q, got, want)

    def faults(g: int, keys: range) -> str:
        """Rows whose sums overflow each type: ten fifths of BIGINT, ten near the largest DECIMAL(18,2),
        ten of 1e308."""
        return ", ".join(f"({k}, {g}, {BIG // 5}, 9999999999999999.99, 1e308)" for k in keys)

    run("INSERT INTO n VALUES (1, 1, 1, 1.00, 1.0), (2, 2, 2, 2.00, 2.0)")
    check()
    run(f"INSERT INTO n VALUES {faults(1, range(10, 20))}")
    with pytest.raises(SqlError, match=f"view 'v0' is in error.*{error}"):
        db.execute("SELECT * FROM v0")
    assert list(db.view_errors()) == ["v0"]
    assert same_rows(db.execute("SELECT * FROM v1").fetchall(), oracle.execute(other).fetchall())
    run("UPDATE n SET a = 6, d = 6.00, f = 6.0 WHERE k = 2")  # a change elsewhere: still in error
    assert list(db.view_errors()) == ["v0"]
    run("DELETE FROM n WHERE k BETWEEN 11 AND 19")  # the sums fit again: exact again
    assert db.view_errors() == {}
    check()
    run(f"INSERT INTO n VALUES {faults(2, range(20, 30))}")
    assert list(db.view_errors()) == ["v0"]
    run("UPDATE n SET a = 0, d = 0, f = 0 WHERE g = 2 AND k > 20")
    assert db.view_errors() == {}
    check()


def test_a_view_whose_sum_does_not_fit_is_not_created():
    db = ivm.connect()
    db.execute("CREATE TABLE n (a BIGINT)")
    db.execute(f"INSERT INTO n VALUES ({BIG}), ({BIG})")
    with pytest.raises(ivm.DataError, match="view 's' was not created: bigint out of range"):
        db.execute("CREATE VIEW s AS SELECT SUM(a) FROM n")
    with pytest.raises(ivm.DataError, match="bigint out of range"):
        db.execute("SELECT SUM(a) FROM n")
    assert db.execute("SELECT SUM(a) FROM n WHERE a < 0").fetchall() == [(None,)]


def test_a_double_sum_forgets_the_values_that_left():
    db = ivm.connect()
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, g INTEGER, x DOUBLE PRECISION)")
    db.execute("CREATE VIEW s AS SELECT g, SUM(x) AS s, AVG(x) AS a, COUNT(*) AS c FROM t GROUP BY g")
    db.execute("CREATE VIEW m AS SELECT g, SUM(x) AS s, MAX(x) AS m FROM t GROUP BY g")
    db.execute("INSERT INTO t VALUES (1, 1, 1e20), (2, 1, 1)")
    assert db.execute("SELECT * FROM s").fetchall() == [(1, 1e20, 5e19, 2)]
    db.execute("DELETE FROM t WHERE k = 1")
    assert db.execute("SELECT * FROM s").fetchall() == [(1, 1.0, 1.0, 1)]
    assert db.execute("SELECT * FROM m").fetchall() == [(1, 1.0, 1.0)]
    db.execute("INSERT INTO t VALUES (3, 1, 'infinity'), (4, 1, '-infinity')")
    assert all(math.isnan(v) for v in db.execute("SELECT s, a FROM s").fetchall()[0])
    db.execute("DELETE FROM t WHERE k = 3")
    assert db.execute("SELECT * FROM s").fetchall() == [(1, -math.inf, -math.inf, 2)]
    db.execute("DELETE FROM t WHERE k = 4")
    assert db.execute("SELECT * FROM s").fetchall() == [(1, 1.0, 1.0, 1)]


# -- sums of doubles against math.fsum, through random insertions and deletions --------------------------

MAGNITUDES = st.builds(lambda m, e: m * 10.0**e, st.floats(-10, 10, allow_nan=False), st.integers(-300, 300))
EXTREMES = st.sampled_from([0.0, -0.0, 1.0, 0.1, 5e-324, -5e-324, 2.0**-1022])
HUGE = st.sampled_from([1e308, 1.7976931348623157e308, -1e308])  # two may be beyond every double
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf])
VALUES = st.one_of(MAGNITUDES, MAGNITUDES, EXTREMES, HUGE, st.none(), SPECIAL)


def expected_sum(values: list[float]) -> float | None | str:
    """SUM of non-NULL doubles: None for none, -0.0 when all are -0.0 (as PostgreSQL's SUM starts from the
    first value), else as ``tests.ivm.test_exact.expected_sum``."""
    if values and all(v == 0 and math.copysign(1, v) < 0 for v in values):
        return -0.0
    return exact_sum(values) if values else None


def expected(rows: dict[int, tuple]) -> tuple[dict, bool]:
    """Per group ``(SUM, AVG, COUNT(*))`` of the rows ``{k: (g, x)}``, and whether some group overflows."""
    groups: dict = {}
    for g, x in rows.values():
        groups.setdefault(g, []).append(x)
    out, over = {}, False
    for g, xs in groups.items():
        values = [x for x in xs if x is not None]
        s = expected_sum(values)
        over |= s == "overflow"
        # AVG adds to 0, so the mean of -0.0 values is 0
        out[g] = (s, None if s is None or s == "overflow" else (s + 0.0) / len(values), len(xs))
    return out, over


def same_value(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@st.composite
def histories(draw):
    """Steps of insertions (values drawn from a small pool, so that they repeat and cancel) and deletions,
    each one transaction or, sometimes, several committed together."""
    pool = draw(st.lists(VALUES, min_size=1, max_size=6))
    live: list[int] = []
    steps, k = [], 0
    for _ in range(draw(st.integers(1, 8))):
        transactions = []
        for _ in range(draw(st.sampled_from([1, 1, 1, 3]))):
            gone = draw(st.lists(st.sampled_from(live), unique=True, max_size=len(live))) if live else []
            new = []
            for _ in range(draw(st.integers(0, 5))):
                k += 1
                new.append((k, draw(st.none() | st.integers(0, 2)), draw(st.sampled_from(pool) | VALUES)))
            live = [i for i in live if i not in gone] + [i for i, _, _ in new]
            transactions.append((new, gone))
        steps.append(transactions)
    return steps


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_double_sums_are_exact_through_insertions_and_deletions(steps):
    db = ivm.connect()
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, g INTEGER, x DOUBLE PRECISION)")
    db.execute("CREATE VIEW running AS SELECT g, SUM(x) AS s, AVG(x) AS a, COUNT(*) AS c FROM t GROUP BY g")
    db.execute("CREATE VIEW general AS SELECT g, SUM(x), AVG(x), COUNT(*), MIN(x) FROM t GROUP BY g")
    rows: dict[int, tuple] = {}
    for transactions in steps:
        changes: list[tuple[int, tuple, int, int]] = []
        for tx, (new, gone) in enumerate(transactions):
            changes += [(k, rows.pop(k), -1, tx) for k in gone]
            for k, g, x in new:
                rows[k] = (g, x)
                changes.append((k, (g, x), 1, tx))
        if len(transactions) == 1:
            db.execute("BEGIN")
            ins = [(k, g, x) for k, (g, x), d, _ in changes if d > 0]
            if ins:
                db.insert_arrow("t", pa.table([list(c) for c in zip(*ins, strict=True)], schema=SCHEMA))
            gone = [str(k) for k, _, d, _ in changes if d < 0]
            if gone:
                db.execute(f"DELETE FROM t WHERE k IN ({', '.join(gone)})")
            db.execute("COMMIT")
        elif changes:
            data = pa.table(
                {
                    "k": [k for k, *_ in changes],
                    "g": [r[0] for _, r, _, _ in changes],
                    "x": [r[1] for _, r, _, _ in changes],
                },
                schema=SCHEMA,
            )
            diffs = pa.array([d for _, _, d, _ in changes], pa.int64())
            txs = pa.array([tx for *_, tx in changes], pa.int64())
            db.apply_changes_arrow({"t": (data, diffs, txs)}, len(transactions))
        want, over = expected(rows)
        event("several transactions in one step" if len(transactions) > 1 else "one transaction")
        event("a group overflows" if over else "every group fits")
        if any(isinstance(v[0], float) and not math.isfinite(v[0]) for v in want.values() if v[0] is not None):
            event("a sum is NaN or infinite")
        for view in ("running", "general"):
            if over:
                with pytest.raises(SqlError, match=f"view '{view}' is in error.*value out of range: overflow"):
                    db.execute(f"SELECT * FROM {view}")
                continue
            got = {r[0]: r[1:4] for r in db.execute(f"SELECT * FROM {view}").fetchall()}
            assert got.keys() == want.keys(), (view, got, want)
            for g, (s, a, c) in want.items():
                gs, ga, gc = got[g]
                assert same_value(gs, s) and same_value(ga, a) and gc == c, (view, g, got[g], want[g], rows)


SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.int64()), ("x", pa.float64())])
